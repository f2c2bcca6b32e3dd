"""Accuracy at the ``=`` position: the nine pools and the two exhaustive evaluations.

The answer is read at the last position over the p number classes (SPEC section 3), by the fastest
exact forward (:func:`answer_logits`); logits that are not finite (finite weights whose forward
overflows) are refused in one line, never read as an answer.

**What one model has learned** (:func:`learned`), from the same pools: the stall detector
(:mod:`compose_lens.training.outcome`) names a *run's* outcome from its log; one model (a checkpoint, a
model trained elsewhere) has none, and the analyses must know before they name a component after a role
whether the model can do what the role is for: a model that never bound a variable has no router,
however its heads attend. So:

* **operation**: accuracy on constants of training pairs (``0var_train``); learned at :data:`LEARNED` (0.9);
* **binding**: accuracy where one operand is a variable in an allowed slot (the routing pools the stall
  detector reads, :data:`BINDING_POOLS`); formed at :data:`LEARNED`, the detector's routing threshold;
* **picking**: what a model that cannot bind would score on the same prompts by answering with a value
  read from the context at random: per prompt, the share of the context's values that give the right
  answer, averaged (:func:`picking_accuracy`). The stall signature is binding near picking, not near 1;
* **composition**: accuracy with both operands variables (``2var_train``).

Each comes with its Wilson interval. :attr:`Learned.state` names the model: ``not learned`` (no
operation), ``operation only`` (the stall signature), ``binds``. Gates read it:
:func:`compose_lens.analysis.locate.locate` names no binder or router in a model that does not bind (and no
adder in one that does not compute the operation), and the same-MLP verdict is then ``inconclusive``
(:mod:`compose_lens.registry.same_mlp.comparisons`).

>>> from compose_lens.core.config import RunConfig, TaskConfig, ModelConfig
>>> task = TaskConfig(modulus=7, n_vars=6, left_forbidden=("f",), right_forbidden=("a",))
>>> config = RunConfig(task=task, model=ModelConfig.for_task(task, d_model=16, d_head=16, d_mlp=32))
>>> from compose_lens.model import tl
>>> from compose_lens.data.split import Split
>>> from compose_lens.data.sampler import POOL_NAMES, make_pools
>>> scores = pool_accuracies(tl.boot(config.model), config, make_pools(Split.from_task(task), size=50))
>>> sorted(scores) == sorted(POOL_NAMES)
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import torch

from compose_lens.core.stats import Rate
from compose_lens.core import study
from compose_lens.model.forward import Forward
from compose_lens.model import tl
from compose_lens.core.config import ModelConfig, RunConfig
from compose_lens.data.sampler import EXHAUSTIVE_NAMES, Batch, concat_batches, make_exhaustive, make_pool, present_pools
from compose_lens.data.safety import check_finite_logits
from compose_lens.training.subject import Subject

if TYPE_CHECKING:  # the shapes are documentation; importing jaxtyping costs start-up time
    from jaxtyping import Bool, Float, Int

AnswerForward = Callable[[torch.Tensor], torch.Tensor]  # tokens (batch, pos) -> logits (batch, d_vocab_out) at "="


def answer_logits(model: tl.Model, cfg: ModelConfig, tokens: Int[torch.Tensor, "batch pos"], chunk: int = 1024,
                  fast: bool | None = None, forward: AnswerForward | None = None
                  ) -> Float[torch.Tensor, "batch d_vocab_out"]:
    """Logits (N, d_vocab_out) at the last position, float32, without gradients, by the fastest exact
    forward (``fast=False``: the TransformerLens forward; ``forward``: this one, e.g. the trainer's
    compiled forward). Chunks of 1,024 ran 1.8x faster than 8,192 on 2 cores."""
    if forward is None:
        forward = Forward(model, cfg, False if fast is False else None).answer_forward()
    device = tl.parameters(model)["embed.weight"].device
    out = []
    with torch.no_grad():
        for start in range(0, len(tokens), chunk):
            out.append(forward(tokens[start: start + chunk].to(device)).float().cpu())
    logits = torch.cat(out) if out else torch.zeros(0, cfg.d_vocab_out)
    check_finite_logits(logits)
    return logits


def predictions(logits: Float[torch.Tensor, "batch d_vocab_out"]) -> Int[torch.Tensor, "batch"]:
    """The answer class of each row of CPU logits (N, d_vocab_out): the first largest, like
    ``argmax(-1)``. NumPy's argmax, which is vectorised over a short last axis: 0.3 ms against
    torch's 1.2 ms for 4,500 x 59 on one core (the ablation table takes ~1,600 of them)."""
    return torch.from_numpy(logits.detach().cpu().numpy().argmax(-1))


def correct_mask(model: tl.Model, cfg: ModelConfig, batch: Batch, forward: AnswerForward | None = None
                 ) -> Bool[torch.Tensor, "batch"]:
    return predictions(answer_logits(model, cfg, batch.tokens, forward=forward)) == batch.labels


def accuracy(model: tl.Model, cfg: ModelConfig, batch: Batch) -> float:
    return correct_mask(model, cfg, batch).float().mean().item() if len(batch) else float("nan")


def accuracy_by_group(correct: Bool[torch.Tensor, "batch"], groups: dict[str, slice]) -> dict[str, float]:
    """Accuracy of each group of rows of a (N,) correctness mask (groups from
    :func:`~compose_lens.data.sampler.concat_batches`)."""
    return {name: correct[rows].float().mean().item() for name, rows in groups.items()}


def batch_accuracies(model: tl.Model, cfg: ModelConfig, batches: dict[str, Batch],
                     forward: AnswerForward | None = None) -> dict[str, float]:
    """Accuracy on each named batch, the batches evaluated as one concatenated batch."""
    if not batches:
        return {}
    joined, groups = concat_batches(batches)
    return accuracy_by_group(correct_mask(model, cfg, joined, forward), groups)


def pool_accuracies(model: tl.Model, config: RunConfig, pools: dict[str, Batch],
                    forward: AnswerForward | None = None) -> dict[str, float]:
    """Accuracy on each pool, the pools evaluated as one concatenated batch."""
    return batch_accuracies(model, config.model, pools, forward)


def headline_holds(accuracies: dict, at: float = study.HEADLINE) -> bool:
    """Whether both exhaustive accuracies (:func:`exhaustive_accuracies`) reach ``at`` (the study's
    headline, 0.98): the model composes what it never saw. The rule modularity and the same-MLP
    verdict are gated on."""
    return all(accuracies[k]["accuracy"] >= at for k in EXHAUSTIVE_NAMES)


def composition_gap(subject: Subject, seed: int = 0,
                    at: float = study.HEADLINE) -> str | None:
    """Why the model does not compose (the headline does not hold: :func:`headline_holds`), or None
    where it does, or where the split holds out nothing the exhaustive sets would test."""
    found = exhaustive_accuracies(subject, seed)
    if not all(found[k]["total"] for k in EXHAUSTIVE_NAMES) or headline_holds(found, at):
        return None
    return (f"the model has not learned to compose (0-var held-out {found['zero_var_heldout']['accuracy']:.3f}, "
            f"2-var union {found['two_var_union']['accuracy']:.3f}; the verdict needs both >= {at})")


def exhaustive_accuracies(subject: Subject, seed: int = 0) -> dict[str, dict]:
    """``zero_var_heldout`` and ``two_var_union``: correct, total, accuracy (evaluated once per subject and
    seed: :meth:`~compose_lens.training.subject.Subject.once`)."""
    def evaluate() -> dict[str, tuple[int, int]]:
        batches = {name: make_exhaustive(subject.split, name, seed) for name in EXHAUSTIVE_NAMES}
        return {name: (int(correct_mask(subject.model, subject.config.model, batch).sum()), len(batch))
                for name, batch in batches.items()}
    return {name: {"correct": correct, "total": total, "accuracy": correct / total if total else float("nan")}
            for name, (correct, total) in subject.once("exhaustive", seed, evaluate).items()}


LEARNED = 0.9  # the operation and binding count as learned at this accuracy (the stall detector's routing bar too)
OPERATION_POOL = "0var_train"
BINDING_POOLS = ("1var_train", "1var_add_restricted")  # the stall detector's routing pools (compose_lens.training.outcome)
COMPOSITION_POOL = "2var_train"
POOL_SIZE = 2000  # the pools of compose-lens evaluate


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
        return self.operation.fraction >= LEARNED

    @property
    def binds(self) -> bool:
        return self.binding.fraction >= LEARNED

    @property
    def state(self) -> str:
        return "binds" if self.binds else "operation only" if self.operates else "not learned"

    def line(self) -> str:
        """One line: what the model has learned, with the numbers behind it."""
        def text(r: Rate) -> str:
            return f"{r.fraction:.3f} [{r.low:.3f}, {r.high:.3f}]"
        numbers = (f"operation {text(self.operation)}, binding (1-var) {text(self.binding)} against "
                   f"{self.picking:.3f} for a value picked from the context, 2-var {text(self.composition)}, "
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
        return (f"the model has not learned binding (1-var {self.binding.fraction:.3f} < {LEARNED}; "
                f"picking a context value gives {self.picking:.3f})")

    def to_dict(self) -> dict:
        def rate(r: Rate) -> dict:
            return {"accuracy": r.fraction, "ci_low": r.low, "ci_high": r.high, "k": r.k, "n": r.n}
        return {"state": self.state, "operation": rate(self.operation), "binding": rate(self.binding),
                "picking": self.picking, "composition": rate(self.composition), "chance": self.chance,
                "threshold": LEARNED, "line": self.line()}


def picking_accuracy(config: RunConfig, tokens: Int[torch.Tensor, "batch pos"], labels: Int[torch.Tensor, "batch"]
                     ) -> float:
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
        return Rate.of(sum(round(accuracies[n] * len(batches[n])) for n in names), sum(len(batches[n]) for n in names))

    binding = [batches[name] for name in BINDING_POOLS if name in batches]
    tokens = torch.cat([b.tokens for b in binding]) if binding else torch.zeros(0, config.task.seq_len, dtype=torch.long)
    labels = torch.cat([b.labels for b in binding]) if binding else torch.zeros(0, dtype=torch.long)
    return Learned(rate((OPERATION_POOL,)), rate(BINDING_POOLS), picking_accuracy(config, tokens, labels),
                   rate((COMPOSITION_POOL,)), 1.0 / config.task.modulus)


def learned(subject: Subject, size: int = POOL_SIZE, seed: int = 0) -> Learned:
    """What the model has learned (see the module doc), on ``size`` prompts of each pool: at the defaults
    the pools of ``compose-lens evaluate``, so the numbers are its. Evaluated once per subject, size, seed
    and thread count (float rounding): :meth:`~compose_lens.training.subject.Subject.once`."""
    model, config, split = subject.model, subject.config, subject.split

    def evaluate() -> Learned:
        names = [name for name in (OPERATION_POOL, *BINDING_POOLS, COMPOSITION_POOL) if name in present_pools(split)]
        batches = {name: make_pool(split, name, size, seed) for name in names}
        return from_pools(config, batches, pool_accuracies(model, config, batches))
    return subject.once(f"learned size={size} threads={torch.get_num_threads()}", seed, evaluate)
