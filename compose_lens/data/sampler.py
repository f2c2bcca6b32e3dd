"""Rendering sequences: the training sampler, the nine accuracy pools, the exhaustive sets.

Every sequence starts as a *row* ``(x, y, v, w)`` (see :mod:`compose_lens.data.split`)
and is *rendered* into tokens with a fresh random context, exactly as SPEC
section 1 says:

1. the number of assignments n ~ U{1..M} (M = 6), raised to 2 for 2-var rows;
2. the queried variables plus n - (#queried) distinct distractors, distractor
   values uniform mod p;
3. the assignments in a uniformly shuffled order, as adjacent ``VAR VALUE`` pairs;
4. each of the C - 2n PAD tokens (C = 12) falls independently and uniformly into
   one of the n + 1 gaps around the assignments, so padding is scattered;
5. the query ``+ LHS RHS =``, the label ``(x + y) mod p``.

:func:`render` does this for a whole batch at once with torch ops and a seeded
``torch.Generator``. Training is online: :class:`TrainingSampler` draws rows
uniformly with replacement and renders them; the batches for a block of steps are
rendered together (one set of tensor ops for many steps), and block k always
comes from generator stream k, so step s gets the same batch whether or not the
run was interrupted before it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from compose_lens.data.split import Split, row_types, training_rows
from compose_lens.data import streams

POOL_NAMES = (
    "0var_train",
    "0var_add_restricted",
    "1var_train",
    "1var_add_restricted",
    "1var_var_restricted",
    "2var_train",
    "2var_add_restricted",
    "2var_var_restricted_1",
    "2var_var_restricted_2",
)
EXHAUSTIVE_NAMES = ("zero_var_heldout", "two_var_union")


@dataclass
class Batch:
    """Rendered sequences: tokens (N, seq_len), labels (N,), and the rows they came from."""

    tokens: torch.Tensor
    labels: torch.Tensor
    rows: torch.Tensor

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index) -> "Batch":
        return Batch(self.tokens[index], self.labels[index], self.rows[index])

    @property
    def types(self) -> torch.Tensor:
        return row_types(self.rows)


def render(split: Split, rows: torch.Tensor, generator: torch.Generator) -> Batch:
    """Render rows (N, 4) into token sequences with random contexts (SPEC section 1)."""
    task = split.task
    rows = rows.long()
    N, M, V, C = len(rows), task.max_assignments, task.n_vars, task.context_len
    x, y, v, w = rows.unbind(1)
    has_v, has_w = v >= 0, w >= 0
    ar = torch.arange(N)

    # 1. how many assignments
    n = torch.randint(1, M + 1, (N,), generator=generator)
    n = torch.where(has_v & has_w, n.clamp(min=2), n)

    # 2. which variables: the queried ones first, then distinct distractors
    keys = torch.rand(N, V, generator=generator)
    keys[ar[has_v], v[has_v]] = -2.0
    keys[ar[has_w], w[has_w]] = -1.0
    chosen = keys.argsort(dim=1)[:, :M]
    values = torch.randint(0, task.modulus, (N, M), generator=generator)
    values[has_v, 0] = x[has_v]
    values[ar[has_w], has_v[has_w].long()] = y[has_w]

    # 3. shuffled order of the n assignments (unused slots sort last)
    slot = torch.arange(M).unsqueeze(0)
    order_keys = torch.rand(N, M, generator=generator).masked_fill(slot >= n.unsqueeze(1), 2.0)
    order = order_keys.argsort(dim=1)
    slot_vars = chosen.gather(1, order)
    slot_values = values.gather(1, order)

    # 4. scatter the PADs over the n + 1 gaps
    max_pads = C - 2
    gaps = (torch.rand(N, max_pads, generator=generator) * (n + 1).unsqueeze(1)).long()
    real_pad = torch.arange(max_pads).unsqueeze(0) < (C - 2 * n).unsqueeze(1)
    pads_before = ((gaps.unsqueeze(2) <= slot.unsqueeze(0)) & real_pad.unsqueeze(2)).sum(1)
    var_pos = (2 * slot + pads_before).masked_fill(slot >= n.unsqueeze(1), C)  # C: a dummy column
    context = torch.full((N, C + 2), task.pad_token, dtype=torch.long)
    context.scatter_(1, var_pos, slot_vars + task.first_var_token)
    context.scatter_(1, var_pos + 1, slot_values)

    # 5. the query and the label
    lhs = torch.where(has_v, v + task.first_var_token, x)
    rhs = torch.where(has_w, w + task.first_var_token, y)
    query = torch.stack([torch.full_like(x, task.plus_token), lhs, rhs,
                         torch.full_like(x, task.equals_token)], dim=1)
    tokens = torch.cat([context[:, :C], query], dim=1)
    return Batch(tokens, (x + y) % task.modulus, rows)


class TrainingSampler:
    """Online training batches: rows drawn uniformly with replacement, fresh contexts.

    ``batch(step)`` is a pure function of (split, seed, batch size, step): the
    batches of ``block_steps`` consecutive steps are rendered together from one
    generator stream per block.
    """

    def __init__(self, split: Split, batch_size: int, seed: int, block_steps: int = 50):
        self.split = split
        self.rows = training_rows(split)
        self.batch_size = batch_size
        self.seed = seed
        self.block_steps = block_steps
        self._block_index = -1
        self._block: Batch | None = None

    def render_block(self, index: int) -> Batch:
        g = streams.derived_generator(self.seed, streams.TRAIN_BATCHES, index)
        picks = torch.randint(0, len(self.rows), (self.block_steps * self.batch_size,), generator=g)
        return render(self.split, self.rows[picks], g)

    def batch(self, step: int) -> Batch:
        index, offset = divmod(step, self.block_steps)
        if index != self._block_index:
            self._block, self._block_index = self.render_block(index), index
        assert self._block is not None
        start = offset * self.batch_size
        return self._block[start: start + self.batch_size]

    def sample(self, n: int, generator: torch.Generator) -> Batch:
        """n training sequences from an explicit generator (for inspection and tests)."""
        picks = torch.randint(0, len(self.rows), (n,), generator=generator)
        return render(self.split, self.rows[picks], generator)


# -- evaluation pools (SPEC section 3) ---------------------------------------------------


def _pool_rows(split: Split, name: str, size: int, g: torch.Generator) -> torch.Tensor:
    task = split.task

    def pick(table: torch.Tensor) -> torch.Tensor:
        return table[torch.randint(0, len(table), (size,), generator=g)]

    def var_pairs(pairs) -> torch.Tensor:
        return torch.tensor(pairs, dtype=torch.long).reshape(-1, 2)

    left_forbidden = [task.var_index(v) for v in task.left_forbidden]
    right_forbidden = [task.var_index(v) for v in task.right_forbidden]
    kind, pairs_kind = name.split("_", 1)
    operands = pick(split.heldout_pairs if pairs_kind == "add_restricted" else split.train_pairs)
    none = torch.full((size, 1), -1, dtype=torch.long)
    if kind == "0var":
        return torch.cat([operands, none, none], 1)
    if kind == "1var":
        if pairs_kind == "var_restricted":
            left_vars, right_vars = left_forbidden, right_forbidden
        else:
            left_vars, right_vars = list(task.allowed_left), list(task.allowed_right)
        # side chosen in proportion to the number of (side, variable) options
        options = [(0, i) for i in left_vars] + [(1, i) for i in right_vars]
        choice = var_pairs(options)[torch.randint(0, len(options), (size,), generator=g)]
        var = choice[:, 1:2]
        left = torch.where(choice[:, :1] == 0, var, none)
        right = torch.where(choice[:, :1] == 1, var, none)
        return torch.cat([operands, left, right], 1)
    if pairs_kind in ("train", "add_restricted"):
        table = var_pairs(task.allowed_two_var_pairs)
    else:
        table = var_pairs(task.restricted_two_var_pairs(int(pairs_kind[-1])))
    return torch.cat([operands, pick(table)], 1)


def make_pool(split: Split, name: str, size: int = 2000, seed: int = 0) -> Batch:
    """One of the nine accuracy pools of SPEC section 3, ``size`` random sequences."""
    if name not in POOL_NAMES:
        raise ValueError(f"unknown pool {name!r}; the pools are {', '.join(POOL_NAMES)}")
    g = streams.derived_generator(seed, streams.POOLS, POOL_NAMES.index(name))
    return render(split, _pool_rows(split, name, size, g), g)


def make_pools(split: Split, size: int = 2000, seed: int = 0) -> dict[str, Batch]:
    return {name: make_pool(split, name, size, seed) for name in POOL_NAMES}


def concat_batches(batches: dict[str, Batch]) -> tuple[Batch, dict[str, slice]]:
    """Named batches as one batch (in the dict's order) and the rows of each name in it.

    Evaluate the joined batch in one pass, then read each name's results back with
    ``results[groups[name]]``.
    """
    groups, start = {}, 0
    for name, batch in batches.items():
        groups[name] = slice(start, start + len(batch))
        start += len(batch)
    parts = list(batches.values())
    joined = Batch(torch.cat([b.tokens for b in parts]), torch.cat([b.labels for b in parts]),
                   torch.cat([b.rows for b in parts]))
    return joined, groups


def exhaustive_rows(split: Split, name: str) -> torch.Tensor:
    """Rows of an exhaustive evaluation: every case once (1045 / 193,580 at the defaults)."""
    task = split.task
    none = torch.full((len(split.heldout_pairs), 2), -1, dtype=torch.long)
    if name == "zero_var_heldout":
        return torch.cat([split.heldout_pairs, none], 1)
    if name != "two_var_union":
        raise ValueError(f"unknown exhaustive set {name!r}; use {' or '.join(EXHAUSTIVE_NAMES)}")

    def product(pairs: torch.Tensor, var_pairs) -> torch.Tensor:
        vp = torch.tensor(var_pairs, dtype=torch.long).reshape(-1, 2)
        return torch.cat([pairs.repeat_interleave(len(vp), 0), vp.repeat(len(pairs), 1)], 1)

    return torch.cat([
        product(split.heldout_pairs, task.allowed_two_var_pairs),
        product(split.train_pairs, task.restricted_two_var_pairs(1)),
        product(split.train_pairs, task.restricted_two_var_pairs(2)),
    ])


def make_exhaustive(split: Split, name: str, seed: int = 0) -> Batch:
    g = streams.derived_generator(seed, streams.EXHAUSTIVE, EXHAUSTIVE_NAMES.index(name))
    return render(split, exhaustive_rows(split, name), g)
