"""The subject of every analysis: a model, the task it was trained on, and where it came from.

A :class:`Subject` is what each analysis takes: ``subject.model`` (a TransformerLens bridge, or the
fast forwards' :class:`~compose_lens.model.tl.Weights`), ``subject.config`` (the task and the
model in the study's coordinates), ``subject.split`` (what training held out) and
``subject.source``. :func:`load_subject` is built (:func:`compose_lens.training.runs.load_subject`) from anything a researcher has:

* ``paper``, a compose-lens run, checkpoint or model directory, a ``.safetensors`` file, one of
  the study's ``.pth`` checkpoints (:func:`compose_lens.training.runs.load_model`);
* **their own TransformerLens model**: a ``TransformerBridge`` in Python (:func:`from_model`) or a
  directory holding its TransformerLens config (``config.json``, the bridge config's fields) and
  its ``model.safetensors`` (the bridge's state dict), with the task it was trained on declared
  (:class:`~compose_lens.data.declaration.TaskDeclaration`: ``--task FILE``, or a ``task.json`` /
  ``task.toml`` in the directory).

A researcher's model is mapped onto the study's coordinates exactly (see
:mod:`compose_lens.data.declaration`): the embedding's rows are taken in the study's token order, the
positional embedding in the study's position order, the unembedding's rows at the answers
0..p-1. The model in those coordinates computes the researcher's model's own numbers (its
logits over the numbers, every hook's activations up to the order of positions), so every
analysis, written once in the study's coordinates, reads it. ``subject.declaration`` keeps the
researcher's coordinates for printing and for going back (:meth:`Subject.user_tokens`).

:func:`~compose_lens.training.runs.load_subject` is the one function that builds a subject from what a
researcher names; this module holds only what a subject is.

>>> from compose_lens.training.runs import load_subject
>>> subject = load_subject("paper")
>>> subject.task.modulus, subject.declaration.query
(59, 'prefix')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from compose_lens.core.config import RunConfig, TaskConfig
from compose_lens.data.declaration import TaskDeclaration, UserWeights, study_declaration
from compose_lens.model.forward import Forward, check_tokens

if TYPE_CHECKING:
    from compose_lens.data.split import Split
    from compose_lens.model import tl


@dataclass
class Subject:
    """A model with its task, split and origin: what every analysis takes (see the module doc)."""

    model: "tl.Model | tl.Weights"
    config: RunConfig
    split: "Split"
    source: str
    declaration: TaskDeclaration | None = None  # the researcher's coordinates (None: the study's own)
    user_weights: UserWeights | None = None  # the researcher's model as read (None: its own are the study's)

    @property
    def task(self) -> TaskConfig:
        """The task in the study's coordinates."""
        return self.config.task

    def __post_init__(self) -> None:
        if self.declaration is None and not self.config.task.is_variant:
            self.declaration = study_declaration(self.config.task)

    @property
    def forward(self) -> Forward:
        """The model's one forward (:class:`compose_lens.model.forward.Forward`): its answer, activations and
        edited answers at ``=``, asked for by :class:`~compose_lens.model.forward.Site`."""
        return Forward(self.model, self.config.model)

    def user_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """Study-coordinates token rows (N, seq_len) as the researcher's model reads them (refused in one
        line where they are not such rows: :func:`compose_lens.model.forward.check_tokens`)."""
        check_tokens(tokens, self.task.d_vocab, self.task.seq_len, exact=True)
        return tokens if self.declaration is None else self.declaration.to_user(tokens)
