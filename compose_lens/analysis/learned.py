"""What one model has learned, read from its own answers: the operation, binding, composition.

The stall detector (:mod:`compose_lens.outcome`) names a *run's* outcome from the pools it logged
over training. One model (a checkpoint, a model trained elsewhere) has no log, and the analyses
must know before they name a component after a role whether the model can do what the role is
for: a model that never bound a variable has no router, however its heads attend. This module
reads the same facts from the model's answers on the study's pools (:mod:`compose_lens.data.sampler`):

* **operation**: accuracy on constants of training pairs (``0var_train``); learned at
  :data:`LEARNED` (0.9);
* **binding**: accuracy where one operand is a variable in an allowed slot (the routing pools,
  :data:`compose_lens.outcome.ROUTING_POOLS`, as the stall detector reads them); formed at
  :data:`LEARNED`, the detector's routing threshold (:data:`compose_lens.outcome.ROUTING`);
* **picking**: what a model that cannot bind would score on the same prompts by answering with a
  value read from the context at random: per prompt, the share of the context's values that give
  the right answer, averaged (a model that always reads the queried value scores 1, one at chance
  1/p). The stall signature is binding near picking, not near 1;
* **composition**: accuracy with both operands variables (``2var_train``).

Each accuracy comes with its Wilson interval (:func:`compose_lens.stats.wilson_interval`).
:attr:`Learned.state` names the model: ``not learned`` (no operation), ``operation only`` (the operation
learned, no binding: the stall signature), ``binds`` (binding formed). Gates read it:
:func:`compose_lens.analysis.locate.locate` locates no binder and no router in a model that does
not bind, and the same-MLP verdict is never ``supported`` for it (:mod:`.same_mlp`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from compose_lens import stats
from compose_lens.config import RunConfig
from compose_lens.data.sampler import Batch, make_pool, present_pools
from compose_lens.data.split import Split
from compose_lens.evaluate import pool_accuracies
from compose_lens.model import tl

LEARNED = 0.9  # the operation and binding count as learned at this accuracy (the stall detector's routing bar)
OPERATION_POOL = "0var_train"
BINDING_POOLS = ("1var_train", "1var_add_restricted")  # compose_lens.outcome.ROUTING_POOLS
COMPOSITION_POOL = "2var_train"
SIZE = 2000  # compose-lens evaluate's pools


@dataclass(frozen=True)
class Rate:
    """An accuracy: k of n, with its Wilson interval."""

    k: int
    n: int

    @property
    def value(self) -> float:
        return self.k / self.n if self.n else float("nan")

    @property
    def interval(self) -> tuple[float, float]:
        return stats.wilson_interval(self.k, self.n)

    def text(self) -> str:
        low, high = self.interval
        return f"{self.value:.3f} [{low:.3f}, {high:.3f}]"


@dataclass(frozen=True)
class Learned:
    """What a model has learned (see the module doc)."""

    operation: Rate
    binding: Rate
    picking: float  # the binding prompts' accuracy of a value picked at random from the context
    composition: Rate
    chance: float

    @property
    def operates(self) -> bool:
        return self.operation.value >= LEARNED

    @property
    def binds(self) -> bool:
        return self.binding.value >= LEARNED

    @property
    def state(self) -> str:
        return "binds" if self.binds else "operation only" if self.operates else "not learned"

    def line(self) -> str:
        """One line: what the model has learned, with the numbers behind it."""
        numbers = (f"operation {self.operation.text()}, binding (1-var) {self.binding.text()} against "
                   f"{self.picking:.3f} for a value picked from the context, 2-var {self.composition.text()}, "
                   f"chance {self.chance:.3f}")
        if self.state == "binds":
            return f"learned: the operation and binding ({numbers})"
        if self.state == "operation only":
            return (f"learned the operation but not binding: the stall signature ({numbers}); no component "
                    f"is named binder or router, and the same-MLP verdict cannot be 'supported'")
        return f"has not learned the operation ({numbers}): no role is located"

    def missing(self) -> str | None:
        """Why a role that needs binding cannot be located (None: the model binds)."""
        if self.binds:
            return None
        return (f"the model has not learned binding (1-var {self.binding.value:.3f} < {LEARNED}; "
                f"picking a context value gives {self.picking:.3f})")

    def to_dict(self) -> dict:
        def rate(r: Rate) -> dict:
            low, high = r.interval
            return {"accuracy": r.value, "ci_low": low, "ci_high": high, "k": r.k, "n": r.n}
        return {"state": self.state, "operation": rate(self.operation), "binding": rate(self.binding),
                "picking": self.picking, "composition": rate(self.composition), "chance": self.chance,
                "threshold": LEARNED, "line": self.line()}


def picking_accuracy(config: RunConfig, tokens: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean over 1-var prompts of the share of the context's values that, put in place of the variable
    operand, give the right answer: what answering from a value picked at random scores."""
    task = config.task
    if not len(tokens):
        return float("nan")
    context = tokens[:, : task.context_len]
    is_value = (context >= 0) & (context < task.modulus)
    n = tokens.shape[1]
    left, right = (tokens[:, n - k].unsqueeze(1).expand_as(context) for k in (3, 2))
    x = torch.where(left >= task.first_var_token, context, left)
    y = torch.where(right >= task.first_var_token, context, right)
    right_answer = (task.answer(x, y) == labels.unsqueeze(1)) & is_value
    shares = right_answer.sum(1) / is_value.sum(1).clamp_min(1)
    return shares.float().mean().item()


def from_pools(config: RunConfig, batches: dict[str, Batch], accuracies: dict[str, float]) -> Learned:
    """What a model has learned from its accuracies on the pools ``batches`` (as ``compose-lens evaluate``
    computes them): the same numbers, no second forward."""
    def rate(names: tuple[str, ...]) -> Rate:
        names = [name for name in names if name in accuracies]
        return Rate(sum(round(accuracies[n] * len(batches[n])) for n in names), sum(len(batches[n]) for n in names))

    binding = [batches[name] for name in BINDING_POOLS if name in batches]
    tokens = torch.cat([b.tokens for b in binding]) if binding else torch.zeros(0, config.task.seq_len, dtype=torch.long)
    labels = torch.cat([b.labels for b in binding]) if binding else torch.zeros(0, dtype=torch.long)
    return Learned(rate((OPERATION_POOL,)), rate(BINDING_POOLS), picking_accuracy(config, tokens, labels),
                   rate((COMPOSITION_POOL,)), 1.0 / config.task.modulus)


def learned(model: tl.Model, config: RunConfig, split: Split, size: int = SIZE, seed: int = 0) -> Learned:
    """What ``model`` has learned (see the module doc), on ``size`` prompts of each pool: at the defaults,
    the pools of ``compose-lens evaluate``, so the numbers are its."""
    names = [name for name in (OPERATION_POOL, *BINDING_POOLS, COMPOSITION_POOL) if name in present_pools(split)]
    batches = {name: make_pool(split, name, size, seed) for name in names}
    return from_pools(config, batches, pool_accuracies(model, config, batches))
