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
uniformly with replacement and renders the batches of a block of steps together;
block k always comes from generator stream k, so step s gets the same batch whether
or not the run was interrupted before it.

:func:`make_pool` draws a pool from its fields (:mod:`compose_lens.data.pools`), never
from its name. A variant task (:mod:`compose_lens.data.variants`) renders through
:func:`~compose_lens.data.variants.render_variant` and adds its own pools to the nine
(:func:`pools_of`); the study's task keeps the code below, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from compose_lens.core.config import TaskConfig
from compose_lens.core.errors import ConfigError
from compose_lens.data import streams
from compose_lens.data.pools import EXHAUSTIVE_NAMES, ONE_VAR, POOL_NAMES, STUDY_POOLS, Pool, find_pool
from compose_lens.data.split import ANY_PAIR, CONSTANT, Split, row_types, training_rows
from compose_lens.data.task import SequenceKind, first_label_of, to_text
from compose_lens.data.variants import reassignable, render_variant, variant_pools, variant_render_bytes

__all__ = ["Batch", "render", "render_bytes", "TrainingSampler", "pools_of", "pool_names", "absent_pools", "present_pools", "make_pool", "make_pools",
           "concat_batches", "exhaustive_rows", "exhaustive_count", "make_exhaustive", "POOL_NAMES", "EXHAUSTIVE_NAMES"]


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


def render(split: Split, rows: torch.Tensor, generator: torch.Generator, two_var_n: str = "training") -> Batch:
    """Render rows (N, 4) into token sequences with random contexts (module docstring). A 2-var
    row's n is raised to 2 (``two_var_n="training"``) or drawn uniformly on 2..max_assignments
    (``"uniform"``, the study's 2-var evaluation builder)."""
    task = split.task
    if task.is_variant:
        return Batch(*render_variant(split, rows, generator, two_var_n))
    rows = rows.long().clone()
    N, M, V, C = len(rows), task.max_assignments, task.n_vars, task.context_len
    fresh = rows[:, 2] == ANY_PAIR
    if fresh.any():  # 0. the variable pair of a 2-var row, drawn afresh at every render
        allowed = torch.tensor(task.allowed_two_var_pairs, dtype=torch.long)
        rows[fresh, 2:] = allowed[torch.randint(0, len(allowed), (int(fresh.sum()),), generator=generator)]
    x, y, v, w = rows.unbind(1)
    has_v, has_w = v >= 0, w >= 0
    ar = torch.arange(N)

    # 1. how many assignments
    n = torch.randint(task.fewest_assignments, M + 1, (N,), generator=generator)
    if two_var_n == "uniform":
        n = torch.where(has_v & has_w, torch.randint(max(2, task.fewest_assignments), M + 1, (N,),
                                                     generator=generator), n)
    else:
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

    # 4. scatter the PADs over the n + 1 gaps (or, as a task may declare, all before or all after)
    max_pads = C - 2
    gaps = (torch.rand(N, max_pads, generator=generator) * (n + 1).unsqueeze(1)).long()
    real_pad = torch.arange(max_pads).unsqueeze(0) < (C - 2 * n).unsqueeze(1)
    pads_before = ((gaps.unsqueeze(2) <= slot.unsqueeze(0)) & real_pad.unsqueeze(2)).sum(1)
    if task.padding != "scattered":
        pads_before = (C - 2 * n).unsqueeze(1).expand(N, M) * (task.padding == "left")
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
    return Batch(tokens, task.answer(x, y), rows)


def render_bytes(task: TaskConfig, n: int) -> int:
    """Bytes :func:`render` needs for ``n`` sequences at its peak: the tokens, labels, rows and its
    scratch tensors, for the memory guard (:mod:`compose_lens.data.safety`). Measured (the rise of
    VmHWM over 100,000 sequences): 115 MB for the study's task (this says 143), 328-347 MB for a
    variant with seq_len 32 and 8 assignments (this says 327); tests/unit/test_sequences.py holds it
    between 0.85 and 1.5 times the measured peak."""
    v, m, c, length = task.n_vars, task.max_assignments, task.context_len, task.seq_len
    per_sequence = 20 * v + 60 * m + (c - 2) * (13 + 2 * m) + 16 * (c + 2) + 16 * length + 100
    if task.is_variant:
        per_sequence += variant_render_bytes(task)
    return n * per_sequence


class TrainingSampler:
    """Online training batches: rows drawn uniformly with replacement, fresh contexts; ``batch(step)``
    is a pure function of (split, seed, batch size, step) (module docstring)."""

    def __init__(self, split: Split, batch_size: int, seed: int, block_steps: int = 50):
        self.split, self.batch_size, self.seed, self.block_steps = split, batch_size, seed, block_steps
        self.rows = training_rows(split)
        self._block_index = -1
        self._block: Batch | None = None

    def _picks(self, n: int, g: torch.Generator) -> torch.Tensor:
        """``n`` row indices: uniform over the row table (the study), or, where the task declares
        ``kind_weights``, a kind drawn by its share and then a row of that kind uniformly."""
        weights = self.split.task.kind_weights
        if weights is None:
            return torch.randint(0, len(self.rows), (n,), generator=g)
        # 0, 1 or 2: the variable operands of each row (a 2-var row's are ANY_PAIR, negative too)
        kinds = (self.rows[:, 2] != CONSTANT).long() + (self.rows[:, 3] != CONSTANT).long()
        present = torch.tensor([float(w) if (kinds == k).any() else 0.0 for k, w in enumerate(weights)])
        if present.sum() == 0:
            raise ConfigError(f"kind_weights={list(weights)}: the training rows hold no sequence of a kind "
                              f"with a share")
        chosen = torch.multinomial(present, n, replacement=True, generator=g)
        picks = torch.empty(n, dtype=torch.long)
        for kind in range(3):
            where, rows = chosen == kind, (kinds == kind).nonzero().flatten()
            if where.any():
                picks[where] = rows[torch.randint(0, len(rows), (int(where.sum()),), generator=g)]
        return picks

    def batch(self, step: int) -> Batch:
        index, offset = divmod(step, self.block_steps)
        if index != self._block_index:
            g = streams.derived_generator(self.seed, streams.TRAIN_BATCHES, index)
            self._block = render(self.split, self.rows[self._picks(self.block_steps * self.batch_size, g)], g)
            self._block_index = index
        assert self._block is not None
        start = offset * self.batch_size
        return self._block[start: start + self.batch_size]

    def sample(self, n: int, generator: torch.Generator) -> Batch:
        """n training sequences from an explicit generator (for inspection, the declared distribution's
        evaluation and tests)."""
        return render(self.split, self.rows[self._picks(n, generator)], generator)


# -- evaluation pools (SPEC section 3) ---------------------------------------------------


def _draw(table: torch.Tensor, size: int, g: torch.Generator, distinct: bool) -> torch.Tensor:
    """``size`` rows of ``table``: distinct ones where the table has enough, else with replacement."""
    if distinct and len(table) >= size:
        return table[torch.randperm(len(table), generator=g)[:size]]
    return table[torch.randint(0, len(table), (size,), generator=g)]


def _with(pairs: torch.Tensor, v: int | torch.Tensor, w: int | torch.Tensor) -> torch.Tensor:
    """Rows (x, y, v, w) of ``pairs`` with the given variable columns."""
    v, w = (torch.as_tensor(c).expand(len(pairs)).reshape(-1, 1) for c in (v, w))
    return torch.cat([pairs, v, w], 1)


def _kind_table(task: TaskConfig, kind: SequenceKind, pairs: torch.Tensor) -> torch.Tensor:
    """The study's row table restricted to ``pairs`` for one sequence kind, in table order."""
    if kind is SequenceKind.ZERO_VAR:
        return _with(pairs, CONSTANT, CONSTANT).repeat(task.zero_var_rows, 1)  # one row per variable
    if kind is SequenceKind.TWO_VAR:
        return _with(pairs, ANY_PAIR, ANY_PAIR).repeat(task.two_var_rows, 1)
    variables = task.allowed_left if kind is SequenceKind.ONE_VAR_LEFT else task.allowed_right
    blocks = [_with(pairs, v, CONSTANT) if kind is SequenceKind.ONE_VAR_LEFT else _with(pairs, CONSTANT, v)
              for v in variables]
    return torch.cat(blocks) if blocks else torch.zeros(0, 4, dtype=torch.long)


def _one_var_draw(task, pairs: torch.Tensor, left: list[int], right: list[int], size: int,
                  g: torch.Generator) -> torch.Tensor:
    """1-var rows with replacement: a side uniformly (of those with variables), then a variable."""
    sides = [(0, left), (1, right)] if left and right else [(0, left)] if left else [(1, right)]
    side = torch.randint(0, len(sides), (size,), generator=g)
    pick = pairs[torch.randint(0, len(pairs), (size,), generator=g)]
    rows = _with(pick, CONSTANT, CONSTANT)
    for i, (column, variables) in enumerate(sides):
        chosen = torch.tensor(variables)[torch.randint(0, len(variables), (size,), generator=g)]
        rows[side == i, 2 + column] = chosen[side == i]
    return rows


def _pairs_of(split: Split, pool: Pool) -> torch.Tensor:
    return split.train_pairs if pool.pairs == "train" else split.heldout_pairs


def _pool_rows(split: Split, pool: Pool, size: int, g: torch.Generator) -> torch.Tensor:
    """The rows of one pool, drawn as the study draws them (:mod:`compose_lens.data.pools`)."""
    task, pairs = split.task, _pairs_of(split, pool)
    if pool.rows == "builder" and pool.kinds == ONE_VAR:
        if pool.forbidden:
            left = [task.var_index(v) for v in task.left_forbidden]
            right = [task.var_index(v) for v in task.right_forbidden]
        else:
            left, right = list(task.allowed_left), list(task.allowed_right)
        return _one_var_draw(task, pairs, left, right, size, g)
    if pool.rows == "builder":  # 2-var, ``forbidden`` of the two variables in forbidden slots
        options = task.restricted_two_var_pairs(pool.forbidden) if pool.forbidden else task.allowed_two_var_pairs
        var_pairs = torch.tensor(options, dtype=torch.long)
        pick = pairs[torch.randint(0, len(pairs), (size,), generator=g)]
        return torch.cat([pick, var_pairs[torch.randint(0, len(var_pairs), (size,), generator=g)]], 1)
    return _draw(_table_of(split, pool, pairs), size, g, distinct=True)


def _table_of(split: Split, pool: Pool, pairs: torch.Tensor) -> torch.Tensor:
    """The rows a ``table`` or ``training`` pool draws from (distinct ones): the study's row table
    restricted to ``pairs`` for the pool's kinds, in that order."""
    if pool.rows == "training":  # the kept training rows of its kinds; at r = 0 none: every candidate row
        table = training_rows(split)
        kept = table[torch.isin(row_types(table), torch.tensor([kind.index for kind in pool.kinds]))]
        if len(kept):
            return kept
    return torch.cat([_kind_table(split.task, kind, pairs) for kind in pool.kinds])


def pools_of(task: TaskConfig) -> tuple[Pool, ...]:
    """The pools of ``task`` as data: the study's nine, then a variant's own (none for the study's task)."""
    return STUDY_POOLS + variant_pools(task)


def pool_names(task) -> tuple[str, ...]:
    """The names of :func:`pools_of`, in order (a pool's stream is its position here)."""
    return tuple(pool.name for pool in pools_of(task))


def absent_pools(split: Split) -> dict[str, str]:
    """The pools of :func:`pools_of` that ``split`` has nothing to draw from, each with why: a held-out
    pool where no pair is held out, a forbidden-slot pool where no slot is forbidden (a declaration's
    ``"split": "none"``), and a pool a prompt set (``split.prompts``) has no sequence of."""
    task, absent = split.task, {}
    for pool in pools_of(task):
        if pool.pairs == "heldout" and not len(split.heldout_pairs):
            absent[pool.name] = "the split holds out no addition pair"
        elif pool.forbidden and not (task.restricted_two_var_pairs(pool.forbidden) if SequenceKind.TWO_VAR
                                     in pool.kinds else task.left_forbidden + task.right_forbidden):
            absent[pool.name] = ("no variable is forbidden in an operand slot" if pool.forbidden == 1 else
                                 "no pair of variables has both in forbidden operand slots")
        elif split.prompts is not None and pool.name not in split.prompts.pools:
            absent[pool.name] = f"the prompt set {split.prompts.source} has no sequence of this pool"
    return absent


def present_pools(split: Split, names: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """``names`` (default: every pool of the split's task), less the :func:`absent_pools`."""
    absent = absent_pools(split)
    return tuple(name for name in (pool_names(split.task) if names is None else names) if name not in absent)


def make_pool(split: Split, name: str, size: int = 2000, seed: int = 0) -> Batch:
    """One accuracy pool (:data:`POOL_NAMES`, or a variant's), ``size`` sequences, as the study draws
    them: the pool's fields say how (:mod:`compose_lens.data.pools`), its position in
    :func:`pool_names` its random stream (``reassign_first`` shares ``reassign_latest``'s: the same
    sequences, scored against the first values).

    A split that carries a researcher's prompt set (``split.prompts``, :mod:`compose_lens.data.prompts`)
    gives that set's sequences of the pool instead: all of them, or a seeded sample of ``size``.
    """
    pools = pools_of(split.task)
    pool = find_pool(pools, name)
    why = absent_pools(split).get(pool.name)
    if why:
        raise ConfigError(f"pool {pool.name}: {why}, so it has no sequence; the split's pools are "
                          f"{', '.join(present_pools(split))}")
    index = [p.name for p in pools].index(pool.stream_of)
    g = streams.derived_generator(seed, streams.POOLS, index)
    if split.prompts is not None:  # a researcher's own sequences: up to ``size`` of this pool's, a seeded sample
        chosen = torch.tensor([i for i, name in enumerate(split.prompts.pools) if name == pool.name], dtype=torch.long)
        chosen = chosen[torch.randperm(len(chosen), generator=g)[:size].sort().values] if len(chosen) > size else chosen
        return Batch(split.prompts.tokens[chosen], split.prompts.labels[chosen], split.prompts.rows[chosen])
    if pool.name not in POOL_NAMES:
        return _variant_pool(split, pool, size, g)
    return render(split, _pool_rows(split, pool, size, g), g, pool.two_var_n)


def _variant_pool(split: Split, pool: Pool, size: int, g: torch.Generator) -> Batch:
    """A variant's pool: its rows (only reassignable ones where it says so) rendered with the variant
    its fields force; ``labels="first"`` scores them against each operand's first value."""
    table = _table_of(split, pool, _pairs_of(split, pool))
    if pool.reassignable_only:
        table = table[reassignable(split, table)]
        if not len(table):
            raise ConfigError(f"pool {pool.name}: no row can be reassigned without a held-out pair "
                              f"reaching training; raise f")
    rows = _draw(table, size, g, distinct=True)
    batch = Batch(*render_variant(split, rows, g, pool.two_var_n, reassign=pool.reassign, chain=pool.chain,
                                  noise_rate=pool.noise_rate))
    if pool.labels == "first":
        batch.labels = torch.tensor([first_label_of(split.task, t) for t in batch.tokens.tolist()],
                                    dtype=torch.long)
    return batch


# the pools of example_sequences: 0-var held-out pair, 1-var, 2-var held-out pair,
# 2-var with both variables in forbidden slots
EXAMPLE_POOLS = ("0var_add_restricted", "1var_train", "2var_add_restricted", "2var_var_restricted_2")


def example_pools(split: Split) -> tuple[str, ...]:
    """The pools :func:`example_sequences` draws from: each of :data:`EXAMPLE_POOLS` the split has, else the
    training pool of the same kind, so every kind of sequence has its example."""
    absent = absent_pools(split)  # name[:4]: 0var, 1var, 2var
    return tuple(dict.fromkeys(name if name not in absent else f"{name[:4]}_train" for name in EXAMPLE_POOLS))


def example_sequences(split: Split, seed: int = 0) -> list[str]:
    """One readable sequence from each of :func:`example_pools`: the report's attention views and early jump,
    the ``attention`` command's default, and the figure scripts'."""
    return [to_text(split.task, make_pool(split, pool, size=1, seed=seed).tokens[0].tolist())
            for pool in example_pools(split)]


def make_pools(split: Split, size: int = 2000, seed: int = 0) -> dict[str, Batch]:
    """Every pool of the split's task (:func:`pools_of`) less its :func:`absent_pools`."""
    return {name: make_pool(split, name, size, seed) for name in present_pools(split)}


def concat_batches(batches: dict[str, Batch]) -> tuple[Batch, dict[str, slice]]:
    """Named batches as one batch (in the dict's order) and the rows of each name in it: evaluate it
    in one pass, then read each name's results back with ``results[groups[name]]``."""
    groups, start = {}, 0
    for name, batch in batches.items():
        groups[name] = slice(start, start + len(batch))
        start += len(batch)
    joined = Batch(*(torch.cat([getattr(b, part) for b in batches.values()]) for part in ("tokens", "labels", "rows")))
    return joined, groups


def exhaustive_rows(split: Split, name: str) -> torch.Tensor:
    """Rows of an exhaustive evaluation: every case once (1045 / 193,580 at the defaults)."""
    task = split.task
    none = torch.full((len(split.heldout_pairs), 2), CONSTANT, dtype=torch.long)
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


def exhaustive_count(task: TaskConfig) -> int:
    """Sequences of the exhaustive 2-var union set (:func:`exhaustive_rows`), counted without building it."""
    pairs = task.modulus ** 2
    n_train = int(task.f * pairs)
    restricted = len(task.restricted_two_var_pairs(1)) + len(task.restricted_two_var_pairs(2))
    return (pairs - n_train) * len(task.allowed_two_var_pairs) + n_train * restricted


def make_exhaustive(split: Split, name: str, seed: int = 0) -> Batch:
    """Every case of an exhaustive evaluation once; 2-var sequences with n uniform on 2..6."""
    g = streams.derived_generator(seed, streams.EXHAUSTIVE, EXHAUSTIVE_NAMES.index(name))
    return render(split, exhaustive_rows(split, name), g, two_var_n="uniform")
