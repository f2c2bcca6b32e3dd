"""Prompt pairs and token roles, which patching, circuit discovery, modularity and the variant reading share.

A **clean** prompt and a **corrupted** one differ in one token and so in their answers, e.g. ``b=17, + b 19 =``
(36) against ``b=20, + b 19 =`` (39); positions line up. :func:`make_prompt_pairs` edits ``value`` (the queried
variable's value; 1-var prompts), ``variable`` (the queried variable swapped for a distractor with another value)
or ``constant`` (one constant operand; 0-var prompts), so the labels stay correct (read back with
:func:`compose_lens.data.task.decode`); your own pairs come through :mod:`compose_lens.data.pairs`.

**Token roles.** The queried variable sits at a different position in every prompt, so a table by absolute
position mixes roles in every context column: :func:`position_roles` names the role each position plays in each
prompt (:data:`ROLES`, and on a variant task :data:`VARIANT_ROLES` too), which the patching tables group by and
the variant reading reads attention by.
"""

from __future__ import annotations

import torch

from compose_lens.core.config import CORRUPTIONS
from compose_lens.core.errors import ComposeLensError
from compose_lens.data import streams
from compose_lens.data.pairs import PromptPairs
from compose_lens.data.sampler import make_pool
from compose_lens.data.split import Split
from compose_lens.data.task import label_of
from compose_lens.data.variants import bindings


def _labels(split: Split, tokens: torch.Tensor) -> torch.Tensor:
    return torch.tensor([label_of(split.task, row) for row in tokens.tolist()], dtype=torch.long)


def _constant_pairs(split: Split, n_pairs: int, seed: int, g: torch.Generator):
    """0-var prompts, one constant operand shifted by a random non-zero amount mod p."""
    p, C = split.task.modulus, split.task.context_len
    clean = make_pool(split, "0var_train", n_pairs, seed).tokens
    n_pairs, corrupted = len(clean), clean.clone()  # a prompt set may hold fewer of the pool
    side = torch.where(torch.rand(n_pairs, generator=g) < 0.5, C + 1, C + 2)
    shift = torch.randint(1, p, (n_pairs,), generator=g)
    rows = torch.arange(n_pairs)
    corrupted[rows, side] = (clean[rows, side] + shift) % p
    return clean, corrupted


def _value_pairs(split: Split, n_pairs: int, seed: int, g: torch.Generator):
    """1-var prompts, the value assigned to the queried variable shifted mod p."""
    task = split.task
    p, C = task.modulus, task.context_len
    clean = make_pool(split, "1var_train", n_pairs, seed).tokens
    n_pairs, corrupted = len(clean), clean.clone()  # a prompt set may hold fewer of the pool
    is_var = clean[:, C + 1] >= task.first_var_token
    # the number the queried variable holds (its latest, past fillers, through a chain: bindings)
    value_pos = bindings(task, clean).operand_value_positions(task, clean)
    value_pos = torch.where(is_var, value_pos[:, 0], value_pos[:, 1])
    rows = torch.arange(n_pairs)
    shift = torch.randint(1, p, (n_pairs,), generator=g)
    corrupted[rows, value_pos] = (clean[rows, value_pos] + shift) % p
    return clean, corrupted


def _variable_pairs(split: Split, n_pairs: int, seed: int, g: torch.Generator):
    """1-var prompts, the queried variable swapped for an allowed distractor with another value."""
    task = split.task
    C = task.context_len
    lhs, rhs = C + 1, C + 2
    pool = make_pool(split, "1var_train", 4 * n_pairs, seed).tokens
    allowed_left = {task.first_var_token + i for i in task.allowed_left}
    allowed_right = {task.first_var_token + i for i in task.allowed_right}
    keep_clean, keep_corrupt = [], []
    picks = torch.rand(len(pool), generator=g).tolist()
    holds = bindings(task, pool).value_of.tolist()  # where each variable's number lies, per prompt
    for row, pick, held in zip(pool.tolist(), picks, holds):
        slot = lhs if row[lhs] >= task.first_var_token else rhs
        value = row[held[row[slot] - task.first_var_token]]
        allowed = allowed_left if slot == lhs else allowed_right
        options = [row[i] for i in range(C - 1)
                   if row[i] >= task.first_var_token and row[i] != row[slot] and row[i] in allowed
                   and held[row[i] - task.first_var_token] >= 0 and row[held[row[i] - task.first_var_token]] != value]
        if options:
            new = list(row)
            new[slot] = options[int(pick * len(options))]
            keep_clean.append(row)
            keep_corrupt.append(new)
        if len(keep_clean) == n_pairs:
            break
    if len(keep_clean) < (n_pairs if split.prompts is None else 2):  # a prompt set: the pairs it gives
        raise ComposeLensError(f"could only build {len(keep_clean)} 'variable' pairs of {n_pairs}; "
                               f"the task has too few distractors (raise max_assignments)")
    return torch.tensor(keep_clean), torch.tensor(keep_corrupt)


_PAIR_MAKERS = {"constant": _constant_pairs, "value": _value_pairs, "variable": _variable_pairs}


def make_prompt_pairs(split: Split, n_pairs: int, corruption: str = "value", seed: int = 0) -> PromptPairs:
    """``n_pairs`` clean prompts (training pairs, allowed slots) and their one-token corruptions; where the
    split carries a prompt set (:mod:`compose_lens.data.prompts`), the clean prompts are its sequences of the
    pool, as many as it holds (at most ``n_pairs``)."""
    if corruption not in CORRUPTIONS:
        raise ComposeLensError(f"corruption {corruption!r}: use one of {', '.join(CORRUPTIONS)}")
    if n_pairs < 2:
        raise ComposeLensError(f"n_pairs={n_pairs}: ask for at least 2 prompt pairs")
    g = streams.derived_generator(seed, streams.PATCH_PAIRS, CORRUPTIONS.index(corruption))
    clean, corrupted = _PAIR_MAKERS[corruption](split, n_pairs, seed, g)
    return PromptPairs(clean, corrupted, _labels(split, clean), _labels(split, corrupted), corruption)



# -- token roles -------------------------------------------------------------------------------

ROLES = ("queried var", "queried value", "distractor var", "distractor value", "PAD",
         "+", "left operand", "right operand", "=")
QUERY_ROLES = ROLES[5:]
# What the task variants add (docs/variants.md): a queried variable's earlier, replaced value; a
# filler word; the middle variable of a queried chain (b in c=b, b=7, c+1=?). Their rows appear
# only for a variant task, so the study's tables are as they were.
VARIANT_ROLES = ("stale value", "filler", "chain var")


def role_names(task) -> tuple[str, ...]:
    """The roles :func:`position_roles` indexes into for ``task``."""
    return ROLES + VARIANT_ROLES if task.is_variant else ROLES


def position_roles(task, tokens: torch.Tensor) -> torch.Tensor:
    """(N, n) index into :func:`role_names` of every position of every prompt (N, n).

    A context variable is *queried* when it is an operand of the query, and the number
    after a variable is that variable's value; the four query positions are ``+``, the
    left and right operands (constant or variable) and ``=``. On a variant task the
    context is parsed (:func:`compose_lens.data.variants.bindings`): the queried value is
    the number the operand's variable holds at the end (latest assignment, chain followed).
    """
    if task.is_variant:
        return _variant_position_roles(task, tokens)
    C = task.context_len
    ctx = tokens[:, :C]
    is_var = ctx >= task.first_var_token
    operands = tokens[:, C + 1: C + 3]
    queried = is_var & (ctx.unsqueeze(2) == operands.unsqueeze(1)).any(2)
    queried_value = torch.zeros_like(queried)
    queried_value[:, 1:] = queried[:, :-1]
    role = torch.full_like(ctx, ROLES.index("distractor value"))
    role[queried_value] = ROLES.index("queried value")
    role[is_var] = ROLES.index("distractor var")
    role[queried] = ROLES.index("queried var")
    role[ctx == task.pad_token] = ROLES.index("PAD")
    query = torch.tensor([ROLES.index(r) for r in QUERY_ROLES]).expand(len(tokens), -1)
    return torch.cat([role, query], dim=1)


def _variant_position_roles(task, tokens: torch.Tensor) -> torch.Tensor:
    names = role_names(task)
    C = task.context_len
    ctx = tokens[:, :C]
    found = bindings(task, tokens)
    is_var = ctx >= task.first_var_token
    operands = tokens[:, C + 1: C + 3]
    queried = is_var & (ctx.unsqueeze(2) == operands.unsqueeze(1)).any(2)
    value_pos = found.variable_of >= 0
    bound_token = ctx.gather(1, found.variable_of.clamp_min(0))  # the variable a value is assigned to
    targets = found.operand_value_positions(task, tokens)  # in the context for a variable operand
    rows = torch.arange(len(tokens))
    # a queried chain's middle variable: the variable a queried variable is assigned to
    middle = value_pos & is_var & queried.gather(1, found.variable_of.clamp_min(0))
    middle_token = torch.where(middle, ctx, torch.full_like(ctx, -1))
    is_middle = is_var & (ctx.unsqueeze(2) == middle_token.unsqueeze(1)).any(2) & ~queried
    role = torch.full_like(ctx, names.index("distractor value"))
    stale = value_pos & ~is_var & (bound_token.unsqueeze(2) == operands.unsqueeze(1)).any(2)
    role[stale] = names.index("stale value")
    role[is_var] = names.index("distractor var")
    role[is_middle] = names.index("chain var")
    role[queried] = names.index("queried var")
    for side in range(2):
        inside = targets[:, side] < C
        role[rows[inside], targets[inside, side]] = names.index("queried value")
    role[(ctx >= task.first_noise_token) & ~is_var] = names.index("filler")
    role[ctx == task.pad_token] = names.index("PAD")
    query = torch.tensor([names.index(r) for r in QUERY_ROLES]).expand(len(tokens), -1)
    return torch.cat([role, query], dim=1)

