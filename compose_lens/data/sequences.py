"""One door to the task's sequences: :class:`Task`, the vocabulary, render, decode, pools and memory.

The task is written in a few modules, each beside what it does: the vocabulary and the
readable forms (:mod:`compose_lens.data.task`), the split (:mod:`~compose_lens.data.split`),
the renderer and the pools' draws (:mod:`~compose_lens.data.sampler`), the variants'
renderer (:mod:`~compose_lens.data.variants`) and the pools as data
(:mod:`~compose_lens.data.pools`). A :class:`Task` holds one configured task with its
split and answers everything about its sequences through those modules, so a caller (or
a new variant) has one object to read:

>>> task = Task.of(TaskConfig())
>>> task.vocabulary[59:63], len(task.vocabulary)
(('+', '=', 'PAD', 'a'), 74)
>>> tokens = task.parse("b=7, e=5, b+23=?")
>>> task.readable(tokens), task.decode(tokens).label, task.kind_of(tokens)
('b=7, e=5, b+23=?', 30, <SequenceKind.ONE_VAR_LEFT: '1var_left'>)
>>> task.pool("2var_var_restricted_2").forbidden, len(task.pools)
(2, 9)
>>> task.pool("3var_train")
Traceback (most recent call last):
...
compose_lens.data.task.SequenceError: unknown pool '3var_train'; the pools are 0var_train, ...

A row ``(x, y, v, w)`` (:mod:`compose_lens.data.split`) is what :meth:`Task.render` turns
into tokens; :meth:`Task.row` writes one from a kind, the numbers and the variables, so
no caller writes the -1 / -2 columns itself. The study's task renders bit for bit as
before (tests/unit/test_default_task_frozen.py); a variant task (``reassign_rate``,
``noise_rate``, ``chain_rate``, a longer ``seq_len``) renders through its own renderer and
has its own pools, all through the same methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from compose_lens.config import TaskConfig
from compose_lens.data import sampler
from compose_lens.data.pools import Pool, find_pool
from compose_lens.data.split import ANY_PAIR, CONSTANT, Split
from compose_lens.data.task import (
    Decoded, SequenceError, SequenceKind, decode, parse_sequence, to_text, to_token_string, token_name)


@dataclass(frozen=True)
class Task:
    """A configured task and its split: its vocabulary, sequences, pools and their memory."""

    split: Split

    @classmethod
    def of(cls, config: TaskConfig | None = None) -> "Task":
        """The task of ``config`` (the study's by default) on its study split (seeded by ``config.seed``)."""
        return cls(Split.from_task(config or TaskConfig()))

    @property
    def config(self) -> TaskConfig:
        return self.split.task

    # -- the vocabulary and the readable forms -------------------------------------------------

    @property
    def vocabulary(self) -> tuple[str, ...]:
        """The word of every token id, 0 .. d_vocab - 1 (:func:`~compose_lens.data.task.token_name`)."""
        return tuple(token_name(self.config, token) for token in range(self.config.d_vocab))

    def decode(self, tokens: Sequence[int]) -> Decoded:
        """What a token row says (assignments, query, answer, kind); refuses an invalid row in one line."""
        return decode(self.config, tokens)

    def readable(self, tokens: Sequence[int]) -> str:
        """The short readable form ``b=7, e=5, b+23=?`` of a token row."""
        return to_text(self.config, tokens)

    def token_string(self, tokens: Sequence[int]) -> str:
        """The token form, one word per token (``PAD b 7 ... + b 23 =``)."""
        return to_token_string(self.config, tokens)

    def parse(self, text: str) -> list[int]:
        """Either readable form back to a token row (the inverse of :meth:`readable` up to padding)."""
        return parse_sequence(self.config, text)

    def kind_of(self, tokens: Sequence[int]) -> SequenceKind:
        return self.decode(tokens).type

    # -- rows and rendering ------------------------------------------------------------------

    def row(self, kind: SequenceKind | str, x: int, y: int, left: str | None = None,
            right: str | None = None) -> list[int]:
        """The row ``(x, y, v, w)`` of a ``kind`` sequence with operand values x, y and the named
        variables (a 2-var row without names: a variable pair drawn at every render)."""
        kind, task = SequenceKind.parse(kind), self.config
        if (left is not None and not kind.left_is_variable) or (right is not None and not kind.right_is_variable):
            raise SequenceError(f"a {kind} sequence has no variable on the side named "
                                f"(left={left!r}, right={right!r})")
        if not (0 <= x < task.modulus and 0 <= y < task.modulus):
            raise SequenceError(f"values {x}, {y}: numbers are 0..{task.modulus - 1}")
        if kind is SequenceKind.TWO_VAR and left is None and right is None:
            return [x, y, ANY_PAIR, ANY_PAIR]
        if (kind.left_is_variable and left is None) or (kind.right_is_variable and right is None):
            raise SequenceError(f"a {kind} row names its variable(s): left={left!r}, right={right!r}")
        for name in (left, right):
            if name is not None and name not in task.variable_names:
                raise SequenceError(f"unknown variable {name!r}: the variables are "
                                    f"{task.variable_names[0]}..{task.variable_names[-1]}")
        v = task.var_index(left) if left is not None else CONSTANT
        w = task.var_index(right) if right is not None else CONSTANT
        return [x, y, v, w]

    def render(self, rows: torch.Tensor, generator: torch.Generator, two_var_n: str = "training") -> sampler.Batch:
        """Rows (N, 4) to sequences with fresh random contexts (:func:`compose_lens.data.sampler.render`)."""
        return sampler.render(self.split, rows, generator, two_var_n)

    def render_bytes(self, n: int) -> int:
        """The memory :meth:`render` needs for ``n`` sequences (:func:`compose_lens.data.sampler.render_bytes`)."""
        return sampler.render_bytes(self.config, n)

    # -- the pools ----------------------------------------------------------------------------

    @property
    def pools(self) -> tuple[Pool, ...]:
        """Every pool of the task as data: the study's nine, then a variant's own."""
        return sampler.pools_of(self.config)

    def pool(self, name: str) -> Pool:
        """The pool called ``name``; an unknown name is refused in one line that lists the pools."""
        return find_pool(self.pools, name)

    def make_pool(self, name: str, size: int = 2000, seed: int = 0) -> sampler.Batch:
        """``size`` sequences of the pool ``name`` (:func:`compose_lens.data.sampler.make_pool`)."""
        return sampler.make_pool(self.split, name, size, seed)
