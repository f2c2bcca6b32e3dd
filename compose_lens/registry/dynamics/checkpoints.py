"""Training dynamics: every checkpoint evaluated, and the three phases found from the curves.

The study (SPEC section 6, item 7) reads its training run as three phases:

1. **modular addition** is learned first: the 0-var accuracy on *held-out* pairs
   reaches its plateau (around step 4.5k in the reference run);
2. the **variable-assignment structure** forms: sequences with variables in their
   allowed slots are solved, on training and held-out pairs alike (around 6k);
3. a late **refinement** (around 14k-16k) in which the *var-restricted* 2-var
   sequences, whose variables sit in slots never seen in training, are finally
   solved. In that phase the layer-1 ``=`` query's score for each variable key
   (:func:`equals_variable_scores`) equalises across variables: the
   ``=`` token stops preferring the variables it saw in that slot in training.

:func:`trajectory` evaluates every checkpoint of a run directory (``checkpoints/step_NNNNNN/``) or of a
folder of the study's ``step_N.pth`` files: the nine pool accuracies, the circuit measures of
:func:`compose_lens.registry.probes.summary.circuit_measures`, the ``=``-query variable scores and the
accuracy of each forbidden operand slot (:func:`forbidden_slot_batches`). The paper architecture's
checkpoints are evaluated on the fast forwards as they are read (TransformerLens never imported); any
other's weights are loaded into one bridge. The next checkpoint is read on a worker thread while the
current one is evaluated. The Fourier measures read one MLP for the whole run, and the probes one binder
and one router head: the paper's, or those located in the last checkpoint (``phases.json`` names them:
``fourier_subject``, ``circuit_heads``; a role nothing plays gives NaN columns).

The phases are read from the curves by one rule, :func:`compose_lens.training.phases.find_phases`
("crosses and stays"): the margin, 0.1 for every phase, lets pool sampling noise and a brief loss spike
pass, as the reference run has at step 25k, while a fall back to the earlier plateau does not.
"""

from __future__ import annotations

import functools
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd
import torch
from compose_lens.core import capabilities
from compose_lens.core import progress as progress_lines
from compose_lens.training import runs
from compose_lens.core import study
from compose_lens.analysis.activations import torch_threads
from compose_lens.analysis import locate, probes
from compose_lens.registry.probes.summary import circuit_measures, measure_inputs
from compose_lens.core.config import RunConfig
from compose_lens.data import streams
from compose_lens.data.sampler import Batch, make_pools, render
from compose_lens.data.split import Split
from compose_lens.training.evaluate import batch_accuracies, pool_accuracies
from compose_lens.model import tl, weights
from compose_lens.training.phases import PHASE_RULES, add_derived_columns, logged_phases
from compose_lens.core.provenance import provenance
from compose_lens.training.subject import Subject, check_weights, load_weights, model_of


def equals_variable_scores(model: tl.Model, config: RunConfig, head: int = 0) -> torch.Tensor:
    """Layer-1 score of the ``=`` query for each variable key (a..l), from the weights alone:
    ``(E_= + P_last) W_Q (E_var W_K)^T / sqrt(d_head)``. Key positions are left out: the score says
    which variable *tokens* the ``=`` query prefers."""
    task = config.task
    w = weights.head_weights(model, 0, head)
    params = tl.parameters(model)
    with torch.no_grad():
        E, P = params["embed.weight"].detach().float().cpu(), params["pos_embed.weight"].detach().float().cpu()
        q = (E[task.equals_token] + P[task.seq_len - 1]) @ w.W_Q  # (d_head,)
        keys = E[task.first_var_token: task.d_vocab] @ w.W_K  # (n_vars, d_head)
        return keys @ q / math.sqrt(config.model.d_head)


def forbidden_slot_batches(split: Split, size: int = 500, seed: int = 0) -> dict[str, Batch]:
    """Training-pair sequences with one variable in a slot forbidden to it in training: for each
    forbidden (side, variable), ``1var_<side>_<v>`` puts ``v`` alone in that slot, ``2var_<side>_<v>``
    pairs it with an allowed variable on the other side (``b`` as the right operand: ``..._right_b``)."""
    task = split.task
    out: dict[str, Batch] = {}
    slots = [("left", v) for v in task.left_forbidden] + [("right", v) for v in task.right_forbidden]
    for index, (side, name) in enumerate(slots):
        g = streams.derived_generator(seed, streams.FORBIDDEN_SLOTS, index)
        var = task.var_index(name)
        pairs = split.train_pairs[torch.randint(0, len(split.train_pairs), (size,), generator=g)]
        none = torch.full((size,), -1, dtype=torch.long)
        fixed = torch.full((size,), var, dtype=torch.long)
        others = [i for i in (task.allowed_right if side == "left" else task.allowed_left) if i != var]
        partner = torch.tensor(others)[torch.randint(0, len(others), (size,), generator=g)]
        if side == "left":
            one, two = (fixed, none), (fixed, partner)
        else:
            one, two = (none, fixed), (partner, fixed)
        out[f"1var_{side}_{name}"] = render(split, torch.stack([pairs[:, 0], pairs[:, 1], *one], 1), g)
        out[f"2var_{side}_{name}"] = render(split, torch.stack([pairs[:, 0], pairs[:, 1], *two], 1), g)
    return out


@dataclass
class Trajectory:
    """The per-checkpoint table and how long it took."""

    table: pd.DataFrame
    config: RunConfig
    split: Split
    source: str
    seconds: float
    circuit: bool
    evaluated: int = 0  # checkpoints evaluated now (the others came from a previous table)
    settings: dict | None = None  # pool_size, slot_size, seed, circuit: what a reused table must match
    fourier_subject: dict | None = None  # the MLP the Fourier measures read (locate.FourierSubject.to_dict)
    circuit_heads: dict | None = None  # the binder and router the probes read (probes.Heads.to_dict)

    @property
    def seconds_per_checkpoint(self) -> float:
        return self.seconds / max(self.evaluated, 1)


def trajectory_settings(pool_size: int = 2000, slot_size: int = 500, seed: int = 0, circuit: bool = True,
                        split_file: str | Path | None = None) -> dict:
    """What a saved ``dynamics.csv`` must have been made with for its rows to be reused."""
    return {"pool_size": pool_size, "slot_size": slot_size, "seed": seed, "circuit": circuit,
            "split_file": str(split_file) if split_file else None}


def trajectory(source: str | Path, split_file: str | Path | None = None, pool_size: int = 2000,
               slot_size: int = 500, seed: int = 0, circuit: bool = True, steps: Sequence[int] | None = None,
               stride: int = 1, progress: bool = True, device: str = "cpu", threads: int = 1,
               known: pd.DataFrame | None = None) -> Trajectory:
    """Evaluate every (selected) checkpoint of ``source``; one row per checkpoint.

    ``known``: rows already evaluated (a previous ``dynamics.csv`` of the same run and settings),
    whose steps are not evaluated again. ``threads=1``: each checkpoint is a few hundred small tensor
    ops, which one thread runs fastest (two were 5x slower on a busy 2-core machine).
    """
    with torch_threads(threads), ThreadPoolExecutor(max_workers=1) as reader:
        checkpoints, config, split = runs.find_checkpoints(source, split_file)
        checkpoints = runs.select_checkpoints(checkpoints, steps, stride)
        last = functools.cache(functools.partial(_subject_at, checkpoints[-1], config, split, device)) \
            if circuit and checkpoints else None
        subject = _fourier_subject(last, config, seed) if last else None
        paper = capabilities.is_paper_architecture(config.model)
        heads = (probes.PAPER_HEADS if paper else locate.circuit_heads(last(), seed)) if last else None
        wanted = {c.step for c in checkpoints}
        known_rows = [] if known is None else [r for r in known.to_dict("records") if int(r["step"]) in wanted]
        done = {int(r["step"]) for r in known_rows}
        checkpoints = [c for c in checkpoints if c.step not in done]
        measures = circuit_measures if circuit else None
        inputs = measure_inputs(split, seed=seed) if circuit else None  # the same sequences for every checkpoint
        started = time.perf_counter()
        bridge = None if paper else tl.boot(config.model, device)
        pools = make_pools(split, pool_size, seed)
        slots = forbidden_slot_batches(split, slot_size, seed)
        variables = config.task.variable_names
        rows: list[dict] = []
        bar = progress_lines.bar(total=len(checkpoints), wanted=progress, unit="ckpt", desc="dynamics")
        for ckpt, model in _models(checkpoints, config, bridge, device, reader):
            row: dict[str, float] = {"step": ckpt.step, **pool_accuracies(model, config, pools),
                                     **{f"slot_{k}": a for k, a in batch_accuracies(model, config.model, slots).items()}}
            row.update({f"equals_score_{v}": float(s) for v, s in zip(variables, equals_variable_scores(model, config))})
            if measures is not None:
                row.update({k: float(v) for k, v in measures(Subject(model, config, split, str(ckpt.path)), seed=seed,
                                                             inputs=inputs, mlp_block=subject.layer, heads=heads).items()})
            rows.append(row)
            bar.update(1)
            bar.set_postfix(step=ckpt.step, acc2r=f"{row['2var_var_restricted_1']:.2f}")
        bar.close()
        derived = {"addition_accuracy", "assignment_accuracy", "refinement_accuracy", "equals_score_spread"}
        known_rows = [{k: v for k, v in r.items() if k not in derived} for r in known_rows]
        table = pd.DataFrame(known_rows + rows).sort_values("step").reset_index(drop=True)
        table = add_derived_columns(table, variables)
        return Trajectory(table, config, split, str(source), time.perf_counter() - started, measures is not None,
                          evaluated=len(rows),
                          settings=trajectory_settings(pool_size, slot_size, seed, measures is not None, split_file),
                          fourier_subject=None if subject is None else subject.to_dict(),
                          circuit_heads=None if heads is None else heads.to_dict())


def _models(checkpoints: list[runs.Checkpoint], config: RunConfig, bridge, device: str, reader: ThreadPoolExecutor):
    """Each checkpoint with its model (its tensors, or loaded into ``bridge``), the next read on ``reader``."""
    pending = reader.submit(runs.read_state, checkpoints[0], config) if checkpoints else None
    for ckpt, following in zip(checkpoints, checkpoints[1:] + [None]):
        state = pending.result()
        if following is not None:
            pending = reader.submit(runs.read_state, following, config)
        if bridge is None:
            yield ckpt, tl.Weights(check_weights(config, state, str(ckpt.path)), config.model).to(device)
            continue
        load_weights(bridge, config, state, str(ckpt.path))
        yield ckpt, bridge


def _subject_at(ckpt: runs.Checkpoint, config: RunConfig, split: Split, device: str) -> Subject:
    """The checkpoint's model as the analyses take it, its weights read and checked once."""
    model = model_of(config, runs.read_state(ckpt, config), str(ckpt.path), bridge=False, device=device)
    return Subject(model, config, split, str(ckpt.path))


def _fourier_subject(last, config: RunConfig, seed: int) -> locate.FourierSubject:
    """The MLP the run's Fourier measures read: the only one, else the adder located in ``last()``; None
    (NaN measures) unless it is the last block."""
    layers = config.model.mlp_blocks
    if len(layers) <= 1:
        subject = locate.FourierSubject(layers[0] if layers else None, False, None,
                                        f"blocks.{layers[0]}.mlp, the model's only MLP" if layers else "no MLP")
    else:
        subject = locate.fourier_subject(last(), seed)
    if subject.layer is not None and subject.layer not in config.model.mlp_blocks:
        subject = locate.FourierSubject(None, False, subject.score, f"{subject.note}; not the last block, "
                                                                    f"so the Fourier measures are NaN")
    return subject


PHASE_RULE_TEXT = ("onset = first checkpoint step at which the metric is >= threshold and never falls below "
                   "threshold - margin at any later checkpoint; bracket = [previous checkpoint, onset]; "
                   "interpolated_step = linear interpolation of the threshold crossing inside the bracket; "
                   "interval = [earliest bracket start, latest onset] over the rule read on each pool's 95 % "
                   "Wilson band (pool_size sequences a pool) and the bracket; stride_may_move: a checkpoint "
                   "the reading skipped lies inside the bracket")


def phases_document(traj: Trajectory) -> dict:
    """``phases.json``: the phases of a trajectory, the rule, the timing and the provenance."""
    return {
        "phases": runs.run_phases_measured(traj.table, traj.source, traj.settings,
                                           (traj.settings or {}).get("split_file")),
        "study": study.PHASES,
        "rule": PHASE_RULE_TEXT,
        "source": traj.source,
        "checkpoints": len(traj.table),
        "steps": [int(s) for s in traj.table["step"]],
        "circuit_measures": traj.circuit,
        "settings": traj.settings,
        "fourier_subject": traj.fourier_subject,
        "circuit_heads": traj.circuit_heads,
        "timing": {"seconds": round(traj.seconds, 2), "evaluated_now": traj.evaluated,
                   "seconds_per_checkpoint": round(traj.seconds_per_checkpoint, 3),
                   "extrapolated_300_checkpoints_s": round(300 * traj.seconds_per_checkpoint, 1)},
        **provenance(traj.config),
    }


# -- the phases of every point of a sweep ------------------------------------------------------


def sweep_onsets(rows: Sequence[dict]) -> pd.DataFrame:
    """One row per sweep point (``results.csv`` rows, which name the ``run_dir``): the onset step of each
    phase (empty where the curve never crosses and stays), its interpolated step, the last logged step, and
    ``addition_first``, the study's claim that arithmetic comes before binding (True when the addition onset
    is at or before the assignment onset, False when after, empty when either is missing).

    Read it with the rule's levels in mind: addition's onset needs the held-out 0-var pool at 0.97,
    assignment's a four-pool mean at 0.85, which includes held-out pairs, so it cannot pass 0.85 long before
    held-out addition rises; where the two curves rise together (as at f = 0.4 and 0.5 in the first
    full-budget f sweep) the lower bar is met first and ``addition_first`` is False.
    """
    out = []
    for row in rows:
        metrics = runs.read_metrics(row["run_dir"]) if row.get("run_dir") else []
        phases = logged_phases(metrics)
        entry = {"param": row["param"], "value": row["value"], "seed": int(row["seed"]),
                 "status": row.get("status", ""), "last_logged_step": max((m["step"] for m in metrics), default=None)}
        for rule in PHASE_RULES:
            onset = phases.get(rule.name, {})
            entry[f"{rule.name}_onset"] = onset.get("step")
            entry[f"{rule.name}_onset_interpolated"] = onset.get("interpolated_step")
        add, assign = entry["addition_onset"], entry["assignment_onset"]
        entry["addition_first"] = None if add is None or assign is None else add <= assign
        out.append(entry)
    table = pd.DataFrame(out, columns=["param", "value", "seed", "status", "last_logged_step",
                                       *[f"{r.name}_onset{x}" for r in PHASE_RULES for x in ("", "_interpolated")],
                                       "addition_first"])
    whole = ["last_logged_step", *[f"{rule.name}_onset" for rule in PHASE_RULES]]
    return table.astype({**{c: "Int64" for c in whole}, "addition_first": "boolean"})  # missing: <NA>


def addition_first_summary(onsets: pd.DataFrame) -> dict:
    """How many points have both onsets, and in how many addition came first; ``holds_everywhere`` is
    None (no evidence either way) when no point has both."""
    both = onsets["addition_first"].dropna() if len(onsets) else pd.Series([], dtype=object)
    held = int(sum(bool(v) for v in both))
    return {"points_with_both_onsets": int(len(both)), "addition_first": held,
            "assignment_first": int(len(both)) - held,
            "holds_everywhere": None if not len(both) else held == len(both)}
