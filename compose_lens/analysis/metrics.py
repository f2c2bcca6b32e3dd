"""Patching metrics: what "the model's answer moved" means, as one number per prompt pair.

Activation patching and circuit discovery read the logits at ``=`` of a clean, a
corrupted and a patched run and normalise the metric ``M`` between the two
unpatched runs:

    (M_patched - M_corrupted) / (M_clean - M_corrupted)

0 when the patched site carries nothing of the clean prompt, 1 when it restores
the clean run. Which metric is a choice with consequences (Zhang & Nanda 2024,
"Towards best practices of activation patching"):

* ``logit_diff`` (the default): ``logit[clean answer] - logit[corrupted answer]``.
  Linear in the logits, so small effects show, and it contrasts exactly the two
  answers the pair is about.
* ``prob``: the probability of the clean answer (softmax over the answers 0..p-1).
  Saturates: a site that moves the logit difference from 8 to 12 barely moves it.
* ``accuracy``: 1 where the model's top answer is the clean answer, else 0. What
  the study reports, but a step function: a site shows only once it flips the
  answer, and it has no gradient, so the gradient methods of
  :mod:`compose_lens.registry.circuit.discovery` (EAP, EAP-IG) refuse it.

**Your own metric.** Anywhere a metric is taken (``metric=`` of
:func:`compose_lens.registry.patching.tables.patching_table` and
:func:`compose_lens.registry.circuit.discovery.discover`), a callable works, as
TransformerLens's ``patching`` takes a metric function::

    def margin(logits, answers):          # logits (R, p) at '=', answers (R, 2) long
        rows = torch.arange(len(logits))
        clean = logits[rows, answers[:, 0]]
        rest = logits.scatter(1, answers[:, :1], float("-inf")).amax(1)
        return clean - rest               # (R,): one value per prompt pair

Unlike TransformerLens's, it receives the logits at the last position only (the
batched engines compute nothing else) with the pair's two answers, and returns one
value per row rather than a mean: the bootstrap intervals resample pairs. It must
treat rows independently (the engines call it on any number of rows, sites
stacked), and for EAP / EAP-IG be differentiable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Union

import torch

from compose_lens.core.errors import ComposeLensError

if TYPE_CHECKING:  # the shapes are documentation; importing jaxtyping costs start-up time
    from jaxtyping import Float, Int

Metric = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
MetricLike = Union[str, Metric]


def logit_diff(logits: Float[torch.Tensor, "rows d_vocab_out"], answers: Int[torch.Tensor, "rows 2"]
               ) -> Float[torch.Tensor, "rows"]:
    """(R,) ``logit[clean answer] - logit[corrupted answer]`` from logits (R, V) and answers (R, 2)."""
    rows = torch.arange(len(logits))
    return logits[rows, answers[:, 0]] - logits[rows, answers[:, 1]]


def prob(logits: Float[torch.Tensor, "rows d_vocab_out"], answers: Int[torch.Tensor, "rows 2"]
         ) -> Float[torch.Tensor, "rows"]:
    """(R,) the probability the model gives the clean answer."""
    return logits.float().softmax(-1)[torch.arange(len(logits)), answers[:, 0]]


def accuracy(logits: Float[torch.Tensor, "rows d_vocab_out"], answers: Int[torch.Tensor, "rows 2"]
             ) -> Float[torch.Tensor, "rows"]:
    """(R,) 1.0 where the top answer is the clean answer, else 0.0 (no gradient)."""
    return (logits.argmax(-1) == answers[:, 0]).float()


METRICS: dict[str, Metric] = {"logit_diff": logit_diff, "prob": prob, "accuracy": accuracy}
DEFAULT = "logit_diff"
WITHOUT_GRADIENT = ("accuracy",)


def resolve(metric: MetricLike) -> tuple[str, Metric]:
    """(name, function) of a metric name of :data:`METRICS` or a callable (module doc)."""
    if isinstance(metric, str):
        if metric not in METRICS:
            raise ComposeLensError(f"metric {metric!r}: use one of {', '.join(METRICS)} or a function "
                                   f"metric(logits, answers) -> one value per pair")
        return metric, METRICS[metric]
    if not callable(metric):
        raise ComposeLensError(f"metric: give a name ({', '.join(METRICS)}) or a function, "
                               f"not {type(metric).__name__}")
    name = getattr(metric, "__name__", "")
    return (name if name.isidentifier() else "metric"), metric


def values(metric: Metric, logits: Float[torch.Tensor, "rows d_vocab_out"], answers: Int[torch.Tensor, "rows 2"]
           ) -> Float[torch.Tensor, "rows"]:
    """``metric(logits, answers)`` checked to be one number per row (R,), as float."""
    out = metric(logits, answers)
    if not isinstance(out, torch.Tensor) or out.shape != (len(logits),):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ComposeLensError(f"the metric returned {shape} for {len(logits)} prompt pairs; return a tensor "
                               f"with one value per pair, shape ({len(logits)},) (no mean over the pairs)")
    return out if out.is_floating_point() else out.float()


def column_names(name: str) -> dict[str, str]:
    """How a table's metric columns are named: the logit-difference names of the default, else the
    metric's name (``prob``, ``clean_prob``, ``corrupted_prob``)."""
    return {"logit_diff": name, "clean_logit_diff": f"clean_{name}", "corrupted_logit_diff": f"corrupted_{name}"}
