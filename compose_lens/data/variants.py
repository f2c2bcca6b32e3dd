"""Noisier contexts: rendering the task variants, and the pools that isolate each one.

The study's contexts are clean: every variable is assigned once, to a number, among
nothing but padding. The task variants (docs/variants.md) loosen that, one ``TaskConfig``
setting each, all 0 by default (then :func:`compose_lens.data.sampler.render` keeps the
study's own code path, bit for bit): ``reassign_rate`` (a context assigns one variable
twice, the latest counts), ``chain_rate`` (a variable operand reached in two hops,
``c=b, b=7``: an alias whatever the order, following ``b``'s latest value), ``noise_rate``
(each position the study would pad holds a filler word instead: PAD falls between
assignments, a filler also inside one, ``let b is 7``), and longer contexts (``seq_len``,
``max_assignments``).

How a row ``(x, y, v, w)`` is rendered (docs/variants.md, "How a variant sequence is made",
says why each step is so):

1. chain or not; for a 2-var row the chained side uniformly, its middle variable allowed on
   that side and distinct from the queried ones;
2. reassignment or not;
3. n ~ U{1..M} (2-var rows as in the study), raised to what the row needs (queried variables,
   ``c=b``, the reassignment: n counts every assignment);
4. the variables (queried, the chain's middle one, distinct distractors) and values;
5. the reassigned variable, uniform among those holding a number (never a chain's alias), and
   its stale value, which comes first and leaks no held-out pair (:func:`stale_candidates`;
   a row with no such value is not reassigned);
6. the assignments in a shuffled order (stale before latest), then PAD and fillers placed by
   sort keys: PAD in the n + 1 gaps around assignments, fillers also in the n gaps inside them;
7. the query, whose label is the latest value (through the chain) plus the other operand.

The pools of a variant task are the study's nine, rendered as training renders (so at the
variant's rates), plus those of :func:`variant_pool_names` that isolate each variant.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from compose_lens.core.config import TaskConfig
from compose_lens.data.pools import ONE_VAR, Pool
from compose_lens.data.split import ANY_PAIR, CONSTANT, Split
from compose_lens.data.task import SequenceKind

REASSIGN_MODES = ("rate", "any", "query", "none")
CHAIN_MODES = ("rate", "query", "none")

_ALL_KINDS = tuple(SequenceKind)
_VARIABLE = ONE_VAR + (SequenceKind.TWO_VAR,)  # 1-var and 2-var rows: an operand a variable can hold

VARIANT_POOLS = {  # each variant's pools, in this order after the study's nine
    "reassign_rate": (
        Pool("reassign_latest", _VARIABLE, "train", reassign="query", reassignable_only=True,
             description="an operand's variable reassigned (training pairs); scored against the latest value"),
        Pool("reassign_first", _VARIABLE, "train", reassign="query", reassignable_only=True, labels="first",
             stream="reassign_latest",
             description="the same sequences scored against the first value: how often the model reads the stale one"),
        Pool("reassign_any", _ALL_KINDS, "train", rows="training", reassign="any",
             description="training rows, every context reassigns one of its variables (often a distractor)"),
        Pool("reassign_add_restricted", _VARIABLE, "heldout", reassign="query", reassignable_only=True,
             description="an operand's variable reassigned, held-out pairs"),
    ),
    "chain_rate": (
        Pool("chain_train", _VARIABLE, "train", chain="query",
             description="an operand reached through a chain c=b, b=7 (training pairs)"),
        Pool("chain_add_restricted", _VARIABLE, "heldout", chain="query",
             description="an operand reached through a chain, held-out pairs"),
    ),
    "noise_rate": (
        Pool("noise_none", _VARIABLE, "train", noise_rate=0.0,
             description="1-var and 2-var training rows without a filler word"),
        Pool("noise_all", _VARIABLE, "train", noise_rate=1.0,
             description="the same rows with every free context position a filler word"),
    ),
}


def variant_pools(task: TaskConfig) -> tuple[Pool, ...]:
    """The pools a variant task adds to the study's nine (none for the study's task)."""
    return tuple(pool for setting, pools in VARIANT_POOLS.items() if getattr(task, setting) > 0 for pool in pools)


def variant_pool_names(task: TaskConfig) -> tuple[str, ...]:
    """The names of :func:`variant_pools`."""
    return tuple(pool.name for pool in variant_pools(task))


def _pick(mask: torch.Tensor, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A uniform column index among the True entries of each row of ``mask`` (N, K), and whether there is one."""
    keys = torch.rand(mask.shape, generator=g).masked_fill(~mask, -1.0)
    return keys.argmax(1), mask.any(1)


def stale_candidates(split: Split, x: torch.Tensor, y: torch.Tensor, side: int) -> torch.Tensor:
    """(N, p) bool: the values an operand's variable may be assigned before its latest one: any other
    value, and for a training pair only those that keep it one ((s, y) for ``side`` 0, (x, s) for 1)."""
    p = split.task.modulus
    is_train = split.is_train
    row_train = is_train[x, y].unsqueeze(1)
    kept = is_train[:, y].T if side == 0 else is_train[x, :]
    own = (x if side == 0 else y).unsqueeze(1)
    return (kept | ~row_train) & (torch.arange(p).unsqueeze(0) != own)


def render_variant(split: Split, rows: torch.Tensor, generator: torch.Generator, two_var_n: str = "training",
                   reassign: str = "rate", chain: str = "rate",
                   noise_rate: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Render rows (N, 4) into token sequences of a variant task (module docstring): tokens
    (N, seq_len), labels (N,) and the rows with their variable pairs drawn.

    ``reassign``: ``rate`` (the task's), ``any`` (every context, a variable drawn uniformly),
    ``query`` (every context, the variable holding an operand) or ``none``. ``chain``:
    ``rate``, ``query`` (every row with a variable operand) or ``none``. ``noise_rate``
    overrides the task's.
    """
    if reassign not in REASSIGN_MODES or chain not in CHAIN_MODES:
        raise ValueError(f"reassign={reassign!r} / chain={chain!r}: use {REASSIGN_MODES} / {CHAIN_MODES}")
    task, g = split.task, generator
    noise = task.noise_rate if noise_rate is None else noise_rate
    p, V, C, M = task.modulus, task.n_vars, task.context_len, task.max_assignments
    rows = rows.long().clone()
    N = len(rows)
    fresh = rows[:, 2] == ANY_PAIR
    if fresh.any():  # the variable pair of a 2-var row, drawn afresh at every render
        allowed = torch.tensor(task.allowed_two_var_pairs, dtype=torch.long)
        rows[fresh, 2:] = allowed[torch.randint(0, len(allowed), (int(fresh.sum()),), generator=g)]
    x, y, v, w = rows.unbind(1)
    has_v, has_w = v >= 0, w >= 0
    ar = torch.arange(N)
    n_queried = has_v.long() + has_w.long()

    # 1. chains: which rows, which side (0 left, 1 right)
    chain_draw, side_draw = torch.rand(N, generator=g), torch.rand(N, generator=g)
    chained = (has_v | has_w) & {"rate": chain_draw < task.chain_rate, "query": torch.ones(N, dtype=torch.bool),
                                 "none": torch.zeros(N, dtype=torch.bool)}[chain]
    chain_side = torch.where(has_v & has_w, (side_draw < 0.5).long(), (~has_v).long())

    # 2. reassignment or not (a "query" reassignment needs a variable operand)
    reassign_draw = torch.rand(N, generator=g)
    reassigned = {"rate": reassign_draw < task.reassign_rate, "any": torch.ones(N, dtype=torch.bool),
                  "query": has_v | has_w, "none": torch.zeros(N, dtype=torch.bool)}[reassign]

    # 3. how many assignments, raised to what the row needs
    n = torch.randint(1, M + 1, (N,), generator=g)
    two = has_v & has_w
    if two_var_n == "uniform":
        n = torch.where(two, torch.randint(2, M + 1, (N,), generator=g), n)
    else:
        n = torch.where(two, n.clamp(min=2), n)
    n = torch.maximum(n, n_queried.clamp(min=1) + chained.long() + reassigned.long())
    distinct = n - reassigned.long()

    # 4. variables in role order: v, w, the chain's middle variable, then distractors
    keys = torch.rand(N, V, generator=g)
    keys[ar[has_v], v[has_v]] = -3.0
    keys[ar[has_w], w[has_w]] = -2.0
    side_ok = torch.zeros(2, V, dtype=torch.bool)
    side_ok[0, list(task.allowed_left)] = True
    side_ok[1, list(task.allowed_right)] = True
    middle_ok = side_ok[chain_side].clone()
    middle_ok[ar[has_v], v[has_v]] = False
    middle_ok[ar[has_w], w[has_w]] = False
    middle, _ = _pick(middle_ok, g)
    keys[ar[chained], middle[chained]] = -1.0
    chosen = keys.argsort(dim=1)[:, :M]
    var_tok = chosen + task.first_var_token
    val_tok = torch.randint(0, p, (N, M), generator=g)
    middle_slot = n_queried  # the chain's middle variable comes right after the queried ones
    left_slot = torch.where(chained & (chain_side == 0), middle_slot, torch.zeros_like(n))  # holds x's number
    right_slot = torch.where(chained & (chain_side == 1), middle_slot, has_v.long())  # holds y's number
    val_tok[ar[has_v], left_slot[has_v]] = x[has_v]
    val_tok[ar[has_w], right_slot[has_w]] = y[has_w]
    alias_slot = torch.where(chain_side == 0, torch.zeros_like(n), has_v.long())
    val_tok[ar[chained], alias_slot[chained]] = middle[chained] + task.first_var_token

    # 5. the reassigned variable and its stale value (no held-out pair through it)
    slot = torch.arange(M).unsqueeze(0)
    left_cand, right_cand = stale_candidates(split, x, y, 0), stale_candidates(split, x, y, 1)
    left_possible, right_possible = has_v & left_cand.any(1), has_w & right_cand.any(1)
    query_side = torch.where(left_possible & right_possible, (torch.rand(N, generator=g) < 0.5).long(),
                             (~left_possible).long())
    eligible = (slot < distinct.unsqueeze(1)) & ~((slot == alias_slot.unsqueeze(1)) & chained.unsqueeze(1))
    uniform_target, _ = _pick(eligible, g)
    if reassign == "query":
        target = torch.where(query_side == 0, left_slot, right_slot)
        reassigned &= left_possible | right_possible
    else:
        target = uniform_target
    on_left = has_v & (target == left_slot)
    on_right = has_w & (target == right_slot) & ~on_left
    current = val_tok.gather(1, target.unsqueeze(1)).squeeze(1)
    other = torch.arange(p).unsqueeze(0) != current.unsqueeze(1)
    candidates = torch.where(on_left.unsqueeze(1), left_cand, torch.where(on_right.unsqueeze(1), right_cand, other))
    stale, possible = _pick(candidates, g)
    reassigned &= possible
    total = distinct + reassigned.long()
    var_tok[ar[reassigned], distinct[reassigned]] = var_tok[ar[reassigned], target[reassigned]]
    val_tok[ar[reassigned], distinct[reassigned]] = stale[reassigned]

    # 6. shuffled order, the stale assignment before the latest one
    order_keys = torch.rand(N, M, generator=g).masked_fill(slot >= total.unsqueeze(1), 2.0)
    r = ar[reassigned]
    k_latest, k_stale = order_keys[r, target[r]], order_keys[r, distinct[r]]
    order_keys[r, target[r]] = torch.maximum(k_latest, k_stale)
    order_keys[r, distinct[r]] = torch.minimum(k_latest, k_stale)
    order = order_keys.argsort(dim=1)
    slot_vars, slot_vals = var_tok.gather(1, order), val_tok.gather(1, order)

    # 7. PAD and fillers by sort keys: assignment j's variable at 2j + 0.5, its value at 2j + 1.5;
    # gap 2i (around assignments) and gap 2i + 1 (inside assignment i) span g +- 0.25
    inf = float("inf")
    used = slot < total.unsqueeze(1)
    var_keys = (2.0 * slot + 0.5).expand(N, M).masked_fill(~used, inf)
    val_keys = (2.0 * slot + 1.5).expand(N, M).masked_fill(~used, inf)
    F = C - 2
    free = torch.arange(F).unsqueeze(0) < (C - 2 * total).unsqueeze(1)
    is_filler = torch.rand(N, F, generator=g) < noise
    word = torch.randint(0, max(task.n_noise_words, 1), (N, F), generator=g) + task.first_noise_token
    pad_gap = 2 * (torch.rand(N, F, generator=g) * (total + 1).unsqueeze(1)).long()
    filler_gap = (torch.rand(N, F, generator=g) * (2 * total + 1).unsqueeze(1)).long()
    within = torch.rand(N, F, generator=g)
    free_keys = (torch.where(is_filler, filler_gap, pad_gap) - 0.25 + 0.5 * within).masked_fill(~free, inf)
    free_tok = torch.where(is_filler, word, torch.full_like(word, task.pad_token))
    all_keys = torch.cat([var_keys, val_keys, free_keys], 1)
    all_tok = torch.cat([slot_vars, slot_vals, free_tok], 1)
    context = all_tok.gather(1, all_keys.argsort(dim=1, stable=True)[:, :C])

    # 8. the query and the label
    lhs = torch.where(has_v, v + task.first_var_token, x)
    rhs = torch.where(has_w, w + task.first_var_token, y)
    query = torch.stack([torch.full_like(x, task.plus_token), lhs, rhs,
                         torch.full_like(x, task.equals_token)], dim=1)
    return torch.cat([context, query], dim=1), task.answer(x, y), rows


def variant_render_bytes(task: TaskConfig) -> int:
    """Bytes per sequence :func:`render_variant` needs beyond the study's render: step 5's (N, p)
    stale-value tables (the sum: 386 MB measured for 100,000 sequences at p = 59, seq_len 32; it says 372)."""
    return 12 * task.modulus


# -- the pools of a variant (drawn by compose_lens.data.sampler.make_pool) ------------------------


def reassignable(split: Split, rows: torch.Tensor) -> torch.Tensor:
    """(N,) bool: rows where a variable operand can take a stale value (step 5 of the module docstring)."""
    x, y, v, w = rows.unbind(1)
    left = (v != CONSTANT) & stale_candidates(split, x, y, 0).any(1)
    right = (w != CONSTANT) & stale_candidates(split, x, y, 1).any(1)
    return left | right


# -- reading a context back: where each variable's value lies ----------------------------------


class Bindings(NamedTuple):
    """What a context assigns, read back from its tokens (:func:`bindings`).

    ``variable_of`` (B, C): for each position holding an assigned value (a number, or a chain's
    middle variable), the position of the variable it is assigned to; -1 elsewhere. ``value_of``
    (B, n_vars): the position of the number each variable holds at the end of the context (latest
    assignment, chain followed); -1 for a variable the context does not assign.
    """

    variable_of: torch.Tensor
    value_of: torch.Tensor

    def operand_value_positions(self, task: TaskConfig, tokens: torch.Tensor) -> torch.Tensor:
        """(B, 2) the position holding each query operand's value: the operand's own position
        for a constant, its variable's latest number (:attr:`value_of`) for a variable."""
        n = task.seq_len
        found = []
        for offset in (3, 2):
            operand = tokens[:, n - offset]
            is_var = operand >= task.first_var_token
            index = (operand - task.first_var_token).clamp(0, task.n_vars - 1)
            at = self.value_of.gather(1, index.unsqueeze(1)).squeeze(1)
            found.append(torch.where(is_var, at, torch.full_like(operand, n - offset)))
        return torch.stack(found, dim=1)


def bindings(task: TaskConfig, tokens: torch.Tensor) -> Bindings:
    """Parse every context of ``tokens`` (B, seq_len) left to right as the task writes it: a variable,
    then (past any fillers inside, ``b is 7``) its value, a number or a chain's variable; a later
    assignment replaces an earlier one. On the study's task, the number right after each variable."""
    context = tokens[:, : task.context_len].long()
    B, C = context.shape
    is_var = context >= task.first_var_token
    is_value = is_var | (context < task.modulus)
    variable_of = torch.full_like(context, -1)
    assigned = torch.full((B, task.n_vars), -1, dtype=torch.long)  # latest value position, number or not
    open_at = torch.full((B,), -1, dtype=torch.long)  # the variable awaiting its value, -1: none
    rows = torch.arange(B)
    for t in range(C):
        closes = (open_at >= 0) & is_value[:, t]
        variable_of[closes, t] = open_at[closes]
        var = (context[closes, open_at[closes]] - task.first_var_token)
        assigned[rows[closes], var] = t
        opens = ~closes & is_var[:, t]
        open_at = torch.where(closes, torch.full_like(open_at, -1), torch.where(opens, torch.full_like(open_at, t),
                                                                                open_at))
    value_token = torch.where(assigned >= 0, context.gather(1, assigned.clamp_min(0)), torch.full_like(assigned, -1))
    hop = value_token >= task.first_var_token  # a chain: follow the middle variable to its number
    middle = (value_token - task.first_var_token).clamp(0, task.n_vars - 1)
    value_of = torch.where(hop, assigned.gather(1, middle), assigned)
    return Bindings(variable_of, value_of)
