"""What is held out of training (SPEC section 2): addition pairs, operand slots, and r.

* **Addition pairs, f.** Of the p^2 ordered pairs (x, y), ``floor(f p^2)`` are training
  pairs; the rest are *held out* and never reach training in any form.
* **Operand slots.** Some variables never appear as the left operand in training
  (``k``, ``l``) and some never as the right one (``a``, ``b``).
* **2-var frequency, r.** Training draws *rows* ``(x, y, v, w)`` uniformly with replacement
  and renders each afresh (:mod:`compose_lens.data.sampler`); ``v`` / ``w`` is the variable
  index of a variable operand, :data:`CONSTANT` (-1) for a constant, and :data:`ANY_PAIR`
  (-2) in both for a 2-var row, whose variable pair is drawn at every render.

**The study's procedure** (seed 42 reproduces its ``split.json`` exactly). Its row table
enumerates (variable, type, x, y), x and y fastest, over n_vars x 4 types x p x p; the training
pairs are ``random.Random(seed).sample`` of the distinct pairs in that order, ``floor(f p^2)`` of
them. Per training pair the table gives one 0-var row per variable, one 1-var row per variable
allowed on each side, and one candidate 2-var row per variable allowed on the left, the one at
table index ``idx`` kept iff ``random.Random(seed + idx).random() < r``. So r sets how often
2-var rows are drawn, never which variables they use.

A split is saved and loaded in the reference's ``split.json`` shape (plus the seed, r
and the kept 2-var rows of each pair), so the study's checkpoints are evaluated on the
split they were trained with, and users may bring their own held-out sets.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from compose_lens.core.config import MAX_MODULUS, TaskConfig
from compose_lens.core.errors import ConfigError
from compose_lens.core.files import load_json, write_json_atomic
from compose_lens.data.task import SequenceKind

CONSTANT = -1  # v or w of a row whose operand on that side is a number
ANY_PAIR = -2  # v and w of a 2-var row: the variable pair is drawn at every render


def study_train_pairs(modulus: int, f: float, seed: int) -> list[tuple[int, int]]:
    """The study's training pairs: ``random.Random(seed).sample`` of the pairs in table order.

    >>> sorted(study_train_pairs(3, 0.5, 42))
    [(0, 0), (0, 1), (0, 2), (1, 2)]
    """
    pool = [(x, y) for x in range(modulus) for y in range(modulus)]
    return random.Random(seed).sample(pool, math.floor(f * modulus * modulus))


def study_two_var_counts(task: TaskConfig, is_train: torch.Tensor) -> torch.Tensor:
    """(p, p) kept 2-var rows per training pair: each left-allowed variable's row at table
    index ``idx`` is kept iff ``random.Random(seed + idx).random() < r``."""
    p = task.modulus
    counts = torch.zeros(p, p, dtype=torch.long)
    xs, ys = is_train.nonzero(as_tuple=True)
    if task.r >= 1:
        counts[xs, ys] = task.two_var_rows
        return counts
    if task.r <= 0:
        return counts
    for v in task.allowed_left:
        base = (v * len(SequenceKind) + SequenceKind.TWO_VAR.index) * p * p
        for x, y in zip(xs.tolist(), ys.tolist()):
            if random.Random(task.seed + base + x * p + y).random() < task.r:
                counts[x, y] += 1
    return counts


def split_bytes(task: TaskConfig) -> int:
    """Bytes the split of ``task`` needs, for the memory guard: its p^2 tables and the
    training-row table (:func:`training_rows`, 64 bytes a row, with the 2-var rows' variable pairs)."""
    pairs = task.modulus ** 2
    n_train = int(task.f * pairs)
    rows_per_pair = (task.zero_var_rows + len(task.allowed_left) + len(task.allowed_right)
                     + task.two_var_rows)
    choice = 20 * len(task.allowed_two_var_pairs) if task.two_var_rows and task.r > 0 else 0
    return 80 * pairs + n_train * (64 * rows_per_pair + choice)


@dataclass(frozen=True)
class Split:
    """Training and held-out addition pairs of one task, as (N, 2) int64 tensors, and the
    number of 2-var rows each training pair keeps, (p, p)."""

    task: TaskConfig
    train_pairs: torch.Tensor
    heldout_pairs: torch.Tensor
    two_var_counts: torch.Tensor
    # a researcher's own prompt set (compose_lens.data.prompts.PromptSet): the pools are its sequences
    prompts: Any = field(default=None, compare=False)

    @classmethod
    def from_task(cls, task: TaskConfig) -> "Split":
        """The study's split procedure (module docstring) for ``task.seed``."""
        p = task.modulus
        is_train = torch.zeros(p, p, dtype=torch.bool)
        chosen = torch.tensor(study_train_pairs(p, task.f, task.seed), dtype=torch.long).reshape(-1, 2)
        is_train[chosen[:, 0], chosen[:, 1]] = True
        return cls._from_mask(task, is_train.flatten(), by_f=True)

    @classmethod
    def from_heldout(cls, task: TaskConfig, heldout: torch.Tensor) -> "Split":
        """The split that holds out exactly ``heldout`` ((N, 2) pairs, checked), with ``task``'s slots and r."""
        return cls._from_mask(task, _train_mask(_pairs_of_file(heldout.tolist(), task.modulus, "heldout_pairs"),
                                                task.modulus))

    @classmethod
    def _from_mask(cls, task: TaskConfig, is_train: torch.Tensor, counts: torch.Tensor | None = None,
                   by_f: bool = False) -> "Split":
        p = task.modulus
        flat = torch.arange(p * p)
        pairs = torch.stack([flat // p, flat % p], dim=1)
        if counts is None:
            counts = study_two_var_counts(task, is_train.view(p, p))
        split = cls(task, pairs[is_train], pairs[~is_train], counts)
        split.check_coverage(by_f)
        return split

    def check_coverage(self, by_f: bool = False) -> None:
        """Refuse a split whose training pairs miss a number on either side (``by_f``: the pairs were drawn
        with the study's procedure from f, so f is what to raise; else they were listed as held out)."""
        p = self.task.modulus
        for side, name in ((0, "left"), (1, "right")):
            seen = torch.zeros(p, dtype=torch.bool)
            seen[self.train_pairs[:, side]] = True
            missing = (~seen).nonzero().flatten().tolist()
            if missing:
                why = (f"f={self.task.f} is too small for modulus {p}); raise f or change the seed" if by_f else
                       f"{len(self.heldout_pairs)} of the {p * p} pairs are held out); hold out fewer pairs")
                raise ConfigError(f"the training pairs never use number(s) {missing[:8]} as the {name} operand "
                                  f"({why}")

    @property
    def is_train(self) -> torch.Tensor:
        """(p, p) bool table: is (x, y) a training pair?"""
        p = self.task.modulus
        table = torch.zeros(p, p, dtype=torch.bool)
        table[self.train_pairs[:, 0], self.train_pairs[:, 1]] = True
        return table

    # -- the split file -------------------------------------------------------------

    def to_dict(self) -> dict:
        t = self.task
        return {"modulus": t.modulus, "f": t.f, "n_train_pairs": len(self.train_pairs),
                "n_heldout_pairs": len(self.heldout_pairs), "heldout_pairs": self.heldout_pairs.tolist(),
                "left_operand_forbidden_in_training": list(t.left_forbidden),
                "right_operand_forbidden_in_training": list(t.right_forbidden), "variables": list(t.variable_names),
                "seed": t.seed, "r": t.r, "two_var_rows_per_pair": self.two_var_counts.flatten().tolist()}

    def save(self, path: str | Path) -> None:
        write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path, task: TaskConfig | None = None) -> "Split":
        """Load a split file. Without ``task`` the file defines modulus, variables, f, slots
        (and seed and r where it records them); with one, a file that contradicts its
        modulus or variables is refused. Held-out pairs are kept as they are, the
        procedure's for the seed or not."""
        data = load_json(path)
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: not a split file (a JSON object with heldout_pairs); "
                              f"write one with `compose-lens data split --out FILE`")
        try:
            file_task = _task_of_file(data, task)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        if task is not None and (task.modulus, task.n_vars) != (file_task.modulus, file_task.n_vars):
            raise ConfigError(f"{path}: the split is for modulus {file_task.modulus} with {file_task.n_vars} "
                              f"variables, the task has modulus {task.modulus} with {task.n_vars}; "
                              f"use a split of this task or set the task to match")
        heldout = _pairs_of_file(data.get("heldout_pairs"), file_task.modulus, path)
        p = file_task.modulus
        is_train = _train_mask(heldout, p)
        counts = _counts_of_file(data, file_task, is_train.view(p, p), path)
        return cls._from_mask(file_task, is_train, counts)


def _task_of_file(data: dict, task: TaskConfig | None) -> TaskConfig:
    """The task a split file describes, on top of ``task`` (or the defaults)."""
    task = task or TaskConfig()
    modulus, variables = data.get("modulus"), data.get("variables", list(task.variable_names))
    if isinstance(modulus, bool) or not isinstance(modulus, int) or not 2 <= modulus <= MAX_MODULUS:
        raise ConfigError(f"modulus {modulus!r}: a split file needs an integer modulus between 2 and {MAX_MODULUS}")
    if not isinstance(variables, list) or not all(isinstance(v, str) for v in variables):
        raise ConfigError(f"variables {variables!r}: a list of variable names a, b, ... is expected")
    changes = {"modulus": modulus, "n_vars": len(variables)}
    for key, name in (("left_operand_forbidden_in_training", "left_forbidden"),
                      ("right_operand_forbidden_in_training", "right_forbidden")):
        if key not in data or not isinstance(data[key], list):
            raise ConfigError(f"not a split file (no {key} list of variable names); "
                              f"write one with `compose-lens data split --out FILE`")
        changes[name] = tuple(data[key])
    for key, kind in (("f", (int, float)), ("r", (int, float)), ("seed", int)):
        if key in data:
            if isinstance(data[key], bool) or not isinstance(data[key], kind):
                raise ConfigError(f"{key} {data[key]!r}: not a number")
            changes[key] = data[key]
    if task.r != TaskConfig().r and "r" in changes:  # an r asked for by the caller wins
        changes["r"] = task.r
    file_task = task.replace(**changes)
    if list(file_task.variable_names) != variables:
        raise ConfigError(f"variables {variables} are not the task's {', '.join(file_task.variable_names)}")
    return file_task


def _pairs_of_file(raw, modulus: int, path) -> torch.Tensor:
    """The held-out pairs of a split file, checked: [x, y] integer pairs in range, no duplicates."""
    if not isinstance(raw, list):
        raise ConfigError(f"{path}: heldout_pairs must be a list of [x, y] pairs")
    for pair in raw:
        if (not isinstance(pair, list) or len(pair) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) for v in pair)):
            raise ConfigError(f"{path}: held-out pair {pair!r} is not two integers [x, y]")
        if not all(0 <= v < modulus for v in pair):
            raise ConfigError(f"{path}: held-out pair {pair} lies outside 0..{modulus - 1}")
    pairs = torch.tensor(raw, dtype=torch.long).reshape(-1, 2)
    if len(torch.unique(pairs[:, 0] * modulus + pairs[:, 1])) != len(pairs):
        raise ConfigError(f"{path}: heldout_pairs lists a pair twice")
    return pairs


def _train_mask(heldout: torch.Tensor, modulus: int) -> torch.Tensor:
    """(p^2,) bool: is each pair (x-major) a training pair, given the held-out pairs?"""
    is_train = torch.ones(modulus * modulus, dtype=torch.bool)
    is_train[heldout[:, 0] * modulus + heldout[:, 1]] = False
    return is_train


def _counts_of_file(data: dict, task: TaskConfig, is_train: torch.Tensor, path) -> torch.Tensor | None:
    """The recorded kept 2-var rows per pair, if the file has them for this r; else None (derive)."""
    raw = data.get("two_var_rows_per_pair")
    if raw is None or data.get("r") != task.r:
        return None
    p = task.modulus
    if not isinstance(raw, list) or len(raw) != p * p or any(
            isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= task.two_var_rows for c in raw):
        raise ConfigError(f"{path}: two_var_rows_per_pair must list p*p = {p * p} integers "
                          f"between 0 and {task.two_var_rows}")
    counts = torch.tensor(raw, dtype=torch.long).view(p, p)
    if (counts[~is_train] > 0).any():
        raise ConfigError(f"{path}: two_var_rows_per_pair keeps 2-var rows of a held-out pair")
    return counts


def training_rows(split: Split) -> torch.Tensor:
    """The training table of SPEC section 2: (R, 4) rows ``(x, y, v, w)`` (module docstring),
    grouped by type: 0-var (one per variable), 1-var left, 1-var right (one per allowed
    variable), 2-var (the kept rows of :attr:`Split.two_var_counts`); with
    ``task.variables_in_training`` false, only the 0-var rows."""
    task = split.task
    pairs = split.train_pairs
    n = len(pairs)
    const = torch.full((n,), CONSTANT, dtype=torch.long)
    blocks = [torch.stack([pairs[:, 0], pairs[:, 1], const, const], 1).repeat(task.zero_var_rows, 1)]
    if not task.variables_in_training:
        return blocks[0]
    blocks += [torch.stack([pairs[:, 0], pairs[:, 1], const + 1 + v, const], 1) for v in task.allowed_left]
    blocks += [torch.stack([pairs[:, 0], pairs[:, 1], const, const + 1 + w], 1) for w in task.allowed_right]
    kept = split.two_var_counts[pairs[:, 0], pairs[:, 1]]
    two_var = pairs.repeat_interleave(kept, dim=0)
    any_pair = torch.full((len(two_var), 2), ANY_PAIR, dtype=torch.long)
    blocks.append(torch.cat([two_var, any_pair], dim=1))
    return torch.cat(blocks, dim=0)


def row_types(rows: torch.Tensor) -> torch.Tensor:
    """Type index per row, :attr:`SequenceKind.index <compose_lens.data.task.SequenceKind.index>`:
    0 = 0-var, 1 = 1-var left, 2 = 1-var right, 3 = 2-var."""
    return (rows[:, 2] != CONSTANT).long() + 2 * (rows[:, 3] != CONSTANT).long()
