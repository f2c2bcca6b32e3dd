"""What is held out of training (SPEC section 2): addition pairs, operand slots, and r.

Three things decide what the model may see in training:

* **Addition pairs, f.** Of the p^2 ordered pairs (x, y), ``floor(f p^2)`` are
  training pairs, drawn as a seeded uniform sample; the rest are *held out* and
  never reach training in any form (constants, one variable, two variables).
* **Operand slots.** Some variables never appear as the left operand in training
  (``k``, ``l``) and some never as the right one (``a``, ``b``).
* **2-var frequency, r.** The training set is a table of *rows*, one row being
  ``(x, y, v, w)`` with ``v`` / ``w`` the variable index of a variable operand or
  -1 for a constant. Per training pair: ``zero_var_rows`` 0-var rows, one 1-var
  row per variable allowed on each side, and ``two_var_rows`` 2-var rows (distinct
  allowed variable pairs), each kept with probability r. Training draws rows
  uniformly with replacement and renders a fresh context at every draw
  (:mod:`compose_lens.data.sampler`).

A split is saved and loaded in the reference's ``split.json`` shape, so the
study's checkpoints can be evaluated on the split they were trained with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from compose_lens.config import ConfigError, TaskConfig, load_json, write_json_atomic
from compose_lens.data import streams


@dataclass(frozen=True)
class Split:
    """Training and held-out addition pairs of one task, as (N, 2) int64 tensors."""

    task: TaskConfig
    train_pairs: torch.Tensor
    heldout_pairs: torch.Tensor

    @classmethod
    def from_task(cls, task: TaskConfig) -> "Split":
        p = task.modulus
        n_train = int(task.f * p * p)
        order = torch.randperm(p * p, generator=streams.derived_generator(task.seed, streams.SPLIT_PAIRS))
        is_train = torch.zeros(p * p, dtype=torch.bool)
        is_train[order[:n_train]] = True
        return cls._from_mask(task, is_train)

    @classmethod
    def _from_mask(cls, task: TaskConfig, is_train: torch.Tensor) -> "Split":
        p = task.modulus
        flat = torch.arange(p * p)
        pairs = torch.stack([flat // p, flat % p], dim=1)
        split = cls(task, pairs[is_train], pairs[~is_train])
        split.check_coverage()
        return split

    def check_coverage(self) -> None:
        """Refuse a split whose training pairs miss a number on either side."""
        p = self.task.modulus
        for side, name in ((0, "left"), (1, "right")):
            seen = torch.zeros(p, dtype=torch.bool)
            seen[self.train_pairs[:, side]] = True
            missing = (~seen).nonzero().flatten().tolist()
            if missing:
                raise ConfigError(
                    f"the training pairs never use number(s) {missing[:8]} as the {name} operand "
                    f"(f={self.task.f} is too small for modulus {p}); raise f or change the seed")

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
        return {
            "modulus": t.modulus,
            "f": t.f,
            "n_train_pairs": len(self.train_pairs),
            "n_heldout_pairs": len(self.heldout_pairs),
            "heldout_pairs": self.heldout_pairs.tolist(),
            "left_operand_forbidden_in_training": list(t.left_forbidden),
            "right_operand_forbidden_in_training": list(t.right_forbidden),
            "variables": list(t.variable_names),
            "seed": t.seed,
        }

    def save(self, path: str | Path) -> None:
        write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path, task: TaskConfig | None = None) -> "Split":
        """Load a split file; the task takes the file's f and slot restrictions."""
        data = load_json(path)
        task = task or TaskConfig()
        try:
            heldout = torch.tensor(data["heldout_pairs"], dtype=torch.long).reshape(-1, 2)
            modulus = int(data["modulus"])
            variables = list(data.get("variables", task.variable_names))
            task = task.replace(
                modulus=modulus,
                n_vars=len(variables),
                f=float(data.get("f", task.f)),
                left_forbidden=tuple(data["left_operand_forbidden_in_training"]),
                right_forbidden=tuple(data["right_operand_forbidden_in_training"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ConfigError):
                raise ConfigError(f"{path}: {exc}") from None
            raise ConfigError(f"{path}: not a split file ({type(exc).__name__}: {exc}); "
                              f"write one with `compose-lens data split --out FILE`") from None
        if list(task.variable_names) != variables:
            raise ConfigError(f"{path}: variables {variables} are not a..{task.variable_names[-1]}")
        if heldout.numel() and (heldout.min() < 0 or heldout.max() >= modulus):
            raise ConfigError(f"{path}: a held-out pair lies outside 0..{modulus - 1}")
        is_train = torch.ones(modulus * modulus, dtype=torch.bool)
        is_train[heldout[:, 0] * modulus + heldout[:, 1]] = False
        return cls._from_mask(task, is_train)


def training_rows(split: Split) -> torch.Tensor:
    """The training table of SPEC section 2: (R, 4) rows ``(x, y, v, w)``.

    v (w) is the variable index of the left (right) operand, or -1 for a constant.
    Rows are grouped by type: 0-var, 1-var left, 1-var right, 2-var. With
    ``task.variables_in_training`` false, only the 0-var rows.
    """
    task = split.task
    pairs = split.train_pairs
    n = len(pairs)
    const = torch.full((n,), -1, dtype=torch.long)
    blocks = [torch.stack([pairs[:, 0], pairs[:, 1], const, const], 1).repeat(task.zero_var_rows, 1)]
    if not task.variables_in_training:
        return blocks[0]
    for v in task.allowed_left:
        blocks.append(torch.stack([pairs[:, 0], pairs[:, 1], const + 1 + v, const], 1))
    for w in task.allowed_right:
        blocks.append(torch.stack([pairs[:, 0], pairs[:, 1], const, const + 1 + w], 1))
    allowed = torch.tensor(task.allowed_two_var_pairs, dtype=torch.long)
    k = min(task.two_var_rows, len(allowed))
    if k and task.r > 0:
        g = streams.derived_generator(task.seed, streams.SPLIT_ROWS)
        # k distinct allowed variable pairs per training pair, each kept with probability r
        choice = torch.rand(n, len(allowed), generator=g).argsort(dim=1)[:, :k]
        keep = torch.rand(n, k, generator=g) < task.r
        pair_idx = torch.arange(n).unsqueeze(1).expand(n, k)[keep]
        var_pairs = allowed[choice[keep]]
        blocks.append(torch.cat([pairs[pair_idx], var_pairs], dim=1))
    return torch.cat(blocks, dim=0)


def row_types(rows: torch.Tensor) -> torch.Tensor:
    """Type index per row: 0 = 0-var, 1 = 1-var left, 2 = 1-var right, 3 = 2-var."""
    return (rows[:, 2] >= 0).long() + 2 * (rows[:, 3] >= 0).long()
