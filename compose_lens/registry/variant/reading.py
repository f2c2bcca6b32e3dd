"""What the study's circuit reads in a noisier context (docs/variants.md says what each table holds).

The task variants (:mod:`compose_lens.data.variants`) put three new things in a context, and each
asks the circuit a question the study's clean contexts cannot:

* **a stale value** (reassignment, ``b=3, e=5, b=9, b+1=?``): does the router at ``=`` read the
  *latest* assignment of a queried variable or the replaced one?
* **filler words** (``let b is 7``): does the binder still attend from each value to *its
  variable*, two or more positions back, or to whatever stands before the value?
* **a chain's middle variable** (``c=b, b=7, c+1=?``): how much does ``=`` attend to it?

:func:`attention_by_role` answers the first and third (on the roles of
:func:`compose_lens.data.pairs.position_roles`), :func:`binding_through_fillers` the second (on
:func:`compose_lens.data.variants.bindings`). Every number is read from the model's own attention patterns
(:func:`compose_lens.analysis.locate.trace`) at the components :func:`compose_lens.analysis.locate.locate`
found; a role nothing plays is left out and said so.
"""

from __future__ import annotations

import pandas as pd
import torch

from compose_lens.analysis.locate import Location, trace
from compose_lens.data.pairs import position_roles, role_names
from compose_lens.analysis.probes import probe_batch
from compose_lens.core.config import RunConfig, TaskConfig
from compose_lens.data.sampler import Batch, concat_batches, make_pool
from compose_lens.data.split import Split
from compose_lens.data.variants import bindings
from compose_lens.training.subject import Subject


def sequences(split: Split, n: int, seed: int = 0) -> tuple[Batch, str]:
    """``n`` sequences to read and what they are: the reassignment pools' (every one reassigns a
    queried variable) where the task reassigns, else the probe batch of every pool (at the task's
    filler rate and length)."""
    task = split.task
    if task.reassign_rate > 0:
        half = (n + 1) // 2
        joined, _ = concat_batches({"reassign_latest": make_pool(split, "reassign_latest", half, seed),
                                    "reassign_any": make_pool(split, "reassign_any", n - half, seed)})
        return joined, "the reassign_latest and reassign_any pools, half each"
    return probe_batch(split, n, seed), "the nine pools in equal parts"


def _heads(where: Location) -> list:
    """The located heads, each once (the gatherer is often the binder's head: listed as the binder)."""
    found, seen = [], set()
    for role in (where.binder, where.router, where.gatherer):
        if role is not None and role.component is not None and role.head is not None and role.component not in seen:
            found.append(role)
            seen.add(role.component)
    return found


def latest_over_stale(config: RunConfig, tokens: torch.Tensor, patterns: list[torch.Tensor],
                      where: Location) -> float | None:
    """Of the sequences with a stale value, the share where the router's attention from ``=`` on the
    queried (latest) values exceeds its attention on the stale ones; None without a router or stale values."""
    router = where.router
    if router.component is None:
        return None
    roles, names = position_roles(config.task, tokens), role_names(config.task)
    if "stale value" not in names:
        return None
    last = patterns[router.layer][:, router.head, -1]
    stale = roles == names.index("stale value")
    has = stale.any(1)
    if not has.any():
        return None
    latest = (last * (roles == names.index("queried value"))).sum(1)
    return ((latest > (last * stale).sum(1))[has]).float().mean().item()


def attention_by_role(config: RunConfig, tokens: torch.Tensor, patterns: list[torch.Tensor],
                      where: Location) -> pd.DataFrame:
    """One row per (located head, role present in ``tokens``): the head's attention from ``=`` summed
    over the role's positions, averaged over the ``n`` sequences with that role (``mean``), and the
    share of those sequences where the role holds the head's largest single weight (``top``).
    ``patterns``: every layer's (N, H, n, n) (:func:`compose_lens.analysis.locate.trace`)."""
    task = config.task
    roles = position_roles(task, tokens)  # (N, n)
    names = role_names(task)
    rows = []
    for role in _heads(where):
        last = patterns[role.layer][:, role.head, -1]  # (N, n): from =
        top = last.argmax(1)
        for index, name in enumerate(names):
            has = (roles == index).any(1)
            if not has.any():
                continue
            mass = (last * (roles == index)).sum(1)[has]
            at_top = (roles.gather(1, top.unsqueeze(1)).squeeze(1) == index)[has]
            rows.append({"head": role.role, "component": role.component, "role": name,
                         "mean": mass.mean().item(), "top": at_top.float().mean().item(), "n": int(has.sum())})
    return pd.DataFrame(rows)


def binding_through_fillers(config: RunConfig, tokens: torch.Tensor, patterns: list[torch.Tensor],
                            where: Location) -> pd.DataFrame:
    """The located binder's attention from each context value to its variable, by the number of
    filler words between them (``fillers``), beside its attention to the token right before the
    value (``previous``: the same position when ``fillers`` is 0). Empty where no binder is located."""
    binder = where.binder
    if binder.component is None:
        return pd.DataFrame(columns=["fillers", "to_variable", "previous", "n"])
    task: TaskConfig = config.task
    found = bindings(task, tokens)
    context = tokens[:, : task.context_len]
    is_number = (context >= 0) & (context < task.modulus)
    seq, pos = ((found.variable_of >= 0) & is_number).nonzero(as_tuple=True)
    var = found.variable_of[seq, pos]
    pattern = patterns[binder.layer][:, binder.head]
    to_variable, previous = pattern[seq, pos, var], pattern[seq, pos, pos - 1]
    gap = pos - var - 1
    rows = [{"fillers": int(k), "to_variable": to_variable[gap == k].mean().item(),
             "previous": previous[gap == k].mean().item(), "n": int((gap == k).sum())}
            for k in torch.unique(gap).tolist()]
    return pd.DataFrame(rows)


def variant_reading(subject: Subject, where: Location, n: int = 1000,
                    seed: int = 0) -> tuple[dict[str, pd.DataFrame], dict]:
    """Both tables (``attention_by_role``, ``binding_through_fillers``) on :func:`sequences`, and the
    facts ``summary.json`` keeps: the router's attention from ``=`` on the queried, the stale values
    and the fillers, how often it prefers the latest value (:func:`latest_over_stale`), and the
    binder's attention to the variable through one filler (None where the task or the model has none)."""
    model, config, split = subject.model, subject.config, subject.split
    batch, drawn = sequences(split, n, seed)
    patterns = trace(model, config, batch.tokens).patterns
    by_role = attention_by_role(config, batch.tokens, patterns, where)
    fillers = binding_through_fillers(config, batch.tokens, patterns, where)

    def read(head: str, role: str) -> float | None:
        row = by_role[(by_role["head"] == head) & (by_role["role"] == role)] if len(by_role) else by_role
        return float(row["mean"].iloc[0]) if len(row) else None

    through = fillers[fillers["fillers"] == 1] if len(fillers) else fillers
    facts = {"variant_sequences": drawn,
             "router_on_queried_values": read("router", "queried value"),
             "router_on_stale_values": read("router", "stale value"),
             "router_latest_over_stale": latest_over_stale(config, batch.tokens, patterns, where),
             "router_on_fillers": read("router", "filler"),
             "binder_through_one_filler": float(through["to_variable"].iloc[0]) if len(through) else None}
    # a question the task does not ask is left out (None then means: asked, but no head located to answer)
    task = config.task
    asked = {"router_on_stale_values": task.reassign_rate > 0, "router_latest_over_stale": task.reassign_rate > 0,
             "router_on_fillers": task.noise_rate > 0, "binder_through_one_filler": task.noise_rate > 0}
    facts = {k: v for k, v in facts.items() if asked.get(k, True)}
    return {"attention_by_role": by_role, "binding_through_fillers": fillers}, facts
