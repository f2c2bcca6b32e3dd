"""Prompt pairs: aligned clean / corrupted sequences and their answers, made here or brought by you.

Activation patching and circuit discovery compare two runs of the model: a **clean** prompt and
a **corrupted** one that differs from it in some detail and so has another answer. compose-lens
makes such pairs itself, and this module also reads the pairs a researcher writes down, so the
same engines run on them.

**The study's pairs** (:func:`make_prompt_pairs`) differ in one token, positions aligned, e.g.
``b=17, + b 19 =`` (36) against ``b=20, + b 19 =`` (39): the ``value`` (the queried variable's
value; 1-var prompts), the ``variable`` (swapped for a distractor with another value) or a
``constant`` operand (0-var prompts), the labels read back with :func:`compose_lens.data.task.decode`.

**Token roles.** The queried variable sits at a different position in every prompt, so the patching
tables and the variant reading group positions by the role :func:`position_roles` names.

A researcher's pairs are read from a file by :func:`read_pairs` (docs/circuit-discovery.md); from
Python, :func:`as_prompt_pairs` also takes a DataFrame or a list of ``(clean, corrupted)`` pairs.

>>> from compose_lens.core.config import TaskConfig
>>> pairs = as_prompt_pairs(TaskConfig(), [("b=7, b+23=?", "b=9, b+23=?"), ("c=3, 4+c=?", "c=3, 5+c=?")])
>>> pairs.answers.tolist()
[[30, 32], [7, 8]]
"""

from __future__ import annotations

import csv
import json
import numbers
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import torch

from compose_lens.core.config import CORRUPTIONS, TaskConfig
from compose_lens.core.errors import ComposeLensError
from compose_lens.core.files import missing_columns
from compose_lens.data import streams
from compose_lens.data.sampler import make_pool
from compose_lens.data.split import Split
from compose_lens.data.task import SequenceError, decode, label_of, parse_sequence, token_id
from compose_lens.data.variants import bindings

USER = "user"  # the corruption label of pairs a user brought: what they change is theirs to say
COLUMNS = ("clean", "corrupted")
ANSWER_COLUMNS = ("clean_answer", "corrupted_answer")
_INTEGERS = re.compile(r"-?\d+(\s+-?\d+)*")


@dataclass
class PromptPairs:
    """Aligned clean / corrupted prompts (N, seq_len) and both answers (N,)."""

    clean: torch.Tensor
    corrupted: torch.Tensor
    clean_labels: torch.Tensor
    corrupted_labels: torch.Tensor
    corruption: str

    def __len__(self) -> int:
        return len(self.clean_labels)

    @property
    def answers(self) -> torch.Tensor:
        """(N, 2): the clean answer and the corrupted answer of each pair, what a metric reads."""
        return torch.stack([self.clean_labels, self.corrupted_labels], dim=1)


_MAX_DIGITS = 18  # more digits than any token id or residue has: said, never converted


def parse_tokens(task: TaskConfig, sequence: Any, declaration: Any = None) -> list[int]:
    """One sequence in any form :func:`read_pairs` accepts as a valid token row; raises SequenceError. With a
    ``declaration``, token ids and the token form are the researcher's (their ids and position order),
    mapped onto the study's coordinates; the short form is the same in both."""
    if isinstance(sequence, torch.Tensor):
        sequence = sequence.tolist()
    ids = None  # token ids as written (the researcher's, where there is a declaration)
    if isinstance(sequence, (list, tuple)):
        if not all(isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in sequence):
            raise SequenceError("a list of tokens must hold integers only")
        ids = [int(t) for t in sequence]
    elif isinstance(sequence, str):
        text = sequence.strip()
        if _INTEGERS.fullmatch(text):  # token ids: the token form always has '+' and '='
            words = text.split()
            long = next((w for w in words if len(w.lstrip("-")) > _MAX_DIGITS), None)
            if long is not None:  # never converted: Python refuses ints of over 4,300 digits
                raise SequenceError(f"the token id {long[:12]}... ({len(long)} digits) is not in the vocabulary")
            ids = [int(word) for word in words]
        elif declaration is not None and "," not in text and "?" not in text:  # the token form, in their order
            tokens = [token_id(task, word) for word in text.split()]
            if len(tokens) != task.seq_len:
                raise SequenceError(f"a sequence has exactly {task.seq_len} tokens, got {len(tokens)}")
            return parse_tokens(task, [tokens[i] for i in declaration.positions])
        else:
            return parse_sequence(task, text)
    else:
        raise SequenceError(f"a sequence is a string or a list of tokens, got {type(sequence).__name__}")
    tokens = ids
    if declaration is not None:
        try:
            tokens = declaration.from_user(torch.tensor([ids]), "the sequence")[0].tolist()
        except ComposeLensError as exc:
            raise SequenceError(str(exc).removeprefix("the sequence: ")) from None
    decode(task, tokens)  # length, vocabulary, grammar
    return tokens


def _answer(value: Any) -> int:
    """A stated answer: an integer, an integral float (a pandas column with gaps) or digits."""
    if (isinstance(value, numbers.Integral) and not isinstance(value, bool)
            or isinstance(value, float) and value.is_integer()):
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        if len(value.strip()) > _MAX_DIGITS:
            raise SequenceError(f"an answer of {len(value.strip())} digits is no residue of the task")
        return int(value)
    raise SequenceError(f"an answer is a whole number, got {value!r}")


def pairs_from_records(task: TaskConfig, records: Iterable[tuple[str, dict]], corruption: str = USER,
                       what: str = "pairs", declaration: Any = None) -> PromptPairs:
    """PromptPairs from ``(where, record)`` items, ``where`` naming the record in an error
    (``pairs.csv line 4``), ``record`` a mapping with ``clean`` and ``corrupted`` (:func:`read_pairs`)."""
    found = []  # (clean, corrupted, clean answer, corrupted answer) of each pair
    for where, record in records:
        tokens, labels = {}, {}
        for column, answer_column in zip(COLUMNS, ANSWER_COLUMNS):
            value = record.get(column)
            if value is None or (isinstance(value, float) and value != value):  # missing / NaN cell
                raise ComposeLensError(f"{where}: the {column} sequence is empty; write one like 'b=7, b+23=?'")
            try:
                tokens[column] = parse_tokens(task, value, declaration)
            except SequenceError as exc:
                raise ComposeLensError(f"{where}: the {column} sequence {str(value)[:60]!r}: {exc}") from None
            labels[column] = decode(task, tokens[column]).label
            given = record.get(answer_column)
            if given is not None and given != "" and not (isinstance(given, float) and given != given):
                try:
                    stated = _answer(given)
                except SequenceError as exc:
                    raise ComposeLensError(f"{where}: {answer_column}: {exc}") from None
                if stated != labels[column]:
                    raise ComposeLensError(
                        f"{where}: {answer_column} is {stated}, but the task's answer to the {column} sequence "
                        f"is {labels[column]} (x {task.sign} y mod {task.modulus}); fix the answer or drop the column")
        if labels["clean"] == labels["corrupted"]:
            raise ComposeLensError(
                f"{where}: clean and corrupted have the same answer ({labels['clean']}); patching measures the "
                f"move from one answer towards the other, so change the corrupted sequence's answer")
        found.append((tokens["clean"], tokens["corrupted"], labels["clean"], labels["corrupted"]))
    if len(found) < 2:
        raise ComposeLensError(f"{what}: {len(found)} prompt pair{'' if len(found) == 1 else 's'}, "
                               f"patching needs at least 2")
    return PromptPairs(*(torch.tensor(column) for column in zip(*found)), corruption)


def _check_columns(where: str, found: Iterable[str]) -> None:
    found = list(found)
    repeated = sorted({c for c in found if found.count(c) > 1})
    if repeated:  # csv.DictReader would keep the last of them without a word
        raise ComposeLensError(f"{where}: the column {repeated[0]!r} appears {found.count(repeated[0])} times; "
                               f"give each column once")
    problem = missing_columns(found, COLUMNS)
    if problem:
        raise ComposeLensError(f"{where}: {problem} (found: {', '.join(map(repr, found)) or 'none'}); "
                               f"name the two sequences of each pair 'clean' and 'corrupted'")


def _csv_records(path: Path, lines: list[str]):
    reader = csv.DictReader(lines)
    _check_columns(f"{path} line 1", reader.fieldnames or [])
    for record in reader:
        yield f"{path} line {reader.line_num}", record


def _jsonl_records(path: Path, lines: list[str]):
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ComposeLensError(f"{where}: not JSON ({exc.msg}); write one object a line, "
                                   f'e.g. {{"clean": "b=7, b+23=?", "corrupted": "b=9, b+23=?"}}') from None
        except RecursionError:
            raise ComposeLensError(f"{where}: JSON nested too deeply; a line holds one flat object "
                                   f"with 'clean' and 'corrupted'") from None
        except ValueError:  # an integer of more digits than Python converts (4,300)
            raise ComposeLensError(f"{where}: holds a number of thousands of digits, which no token "
                                   f"or answer is") from None
        if not isinstance(record, dict):
            raise ComposeLensError(f"{where}: a line holds one JSON object with 'clean' and 'corrupted', "
                                   f"got {type(record).__name__}")
        _check_columns(where, record)
        yield where, record


FORMATS = {".csv": _csv_records, ".jsonl": _jsonl_records, ".ndjson": _jsonl_records}


def read_pairs(task: TaskConfig, path: str | Path, declaration: Any = None) -> PromptPairs:
    """The prompt pairs of a CSV (a header row) or JSONL (one JSON object a line) file, with the columns /
    keys ``clean`` and ``corrupted``: each sequence in the short form ``b=7, e=5, b+23=?``, the token form
    ``PAD b 7 ... + b 23 =`` or token ids, space separated or in JSONL a list of integers. Each answer
    is the task's; optional ``clean_answer`` / ``corrupted_answer`` columns are checked against it, and
    a pair's two answers must differ (patching measures the move from one towards the other). Any
    problem is one ComposeLensError line naming the file and the line. Example (``pairs.csv``)::

        clean,corrupted
        "b=7, e=5, b+23=?","b=9, e=5, b+23=?"
        "c=3, 4+c=?","c=3, 5+c=?"
    """
    path = Path(path)
    reader = FORMATS.get(path.suffix.lower())
    if reader is None:
        raise ComposeLensError(f"pairs file {path}: name it .csv or .jsonl (one pair a row)")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ComposeLensError(f"pairs file {path}: no such file") from None
    except IsADirectoryError:
        raise ComposeLensError(f"pairs file {path}: is a folder, not a file; give the CSV or JSONL file") from None
    except UnicodeDecodeError:
        raise ComposeLensError(f"pairs file {path}: not UTF-8 text; save it as a UTF-8 CSV or JSONL") from None
    except OSError as exc:
        raise ComposeLensError(f"pairs file {path}: cannot be read ({exc.strerror})") from None
    return pairs_from_records(task, reader(path, text.splitlines()), USER, f"pairs file {path}", declaration)


def as_prompt_pairs(task: TaskConfig, pairs: Any, declaration: Any = None) -> PromptPairs:
    """PromptPairs from what a user hands an analysis: PromptPairs (kept), a path to a pairs file,
    a DataFrame with ``clean`` / ``corrupted`` (and optional answer) columns, or a list of
    ``(clean, corrupted)`` pairs of token tensors, token lists or readable strings."""
    if isinstance(pairs, PromptPairs):
        return pairs
    if isinstance(pairs, (str, Path)):
        return read_pairs(task, pairs, declaration)
    if hasattr(pairs, "columns") and hasattr(pairs, "to_dict"):  # a pandas DataFrame
        _check_columns("pairs", [str(c) for c in pairs.columns])
        return pairs_from_records(task, ((f"pairs row {i}", record) for i, record
                                         in enumerate(pairs.to_dict("records"))), declaration=declaration)
    try:
        items = list(pairs)
    except TypeError:
        raise ComposeLensError(f"pairs: give a DataFrame, a file or a list of (clean, corrupted), "
                               f"not {type(pairs).__name__}") from None
    for i, item in enumerate(items):
        if isinstance(item, str) or not hasattr(item, "__len__") or len(item) != 2:
            raise ComposeLensError(f"pairs item {i}: give a (clean, corrupted) pair of sequences")
    return pairs_from_records(task, ((f"pairs item {i}", dict(zip(COLUMNS, item))) for i, item in enumerate(items)),
                              declaration=declaration)


# -- the study's pairs and token roles --------------------------------------------------------------


def labels_of(task: TaskConfig, tokens: torch.Tensor) -> torch.Tensor:
    """(B,) the answer of each sequence of ``tokens`` (B, n)."""
    return torch.tensor([label_of(task, row) for row in tokens.tolist()], dtype=torch.long)


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
    """``n_pairs`` clean prompts (training pairs, allowed slots) and their one-token corruptions; with a
    prompt set (:mod:`compose_lens.data.prompts`), the clean prompts are its sequences (at most ``n_pairs``)."""
    if corruption not in CORRUPTIONS:
        raise ComposeLensError(f"corruption {corruption!r}: use one of {', '.join(CORRUPTIONS)}")
    if n_pairs < 2:
        raise ComposeLensError(f"n_pairs={n_pairs}: ask for at least 2 prompt pairs")
    g = streams.derived_generator(seed, streams.PATCH_PAIRS, CORRUPTIONS.index(corruption))
    clean, corrupted = _PAIR_MAKERS[corruption](split, n_pairs, seed, g)
    return PromptPairs(clean, corrupted, labels_of(split.task, clean), labels_of(split.task, corrupted), corruption)



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

    A context variable is *queried* when it is an operand of the query; on a variant task the
    queried value is the number the operand's variable holds at the end
    (:func:`compose_lens.data.variants.bindings`: latest assignment, chain followed)."""
    names = role_names(task)
    C = task.context_len
    ctx = tokens[:, :C]
    is_var = ctx >= task.first_var_token
    operands = tokens[:, C + 1: C + 3]
    queried = is_var & (ctx.unsqueeze(2) == operands.unsqueeze(1)).any(2)
    role = torch.full_like(ctx, names.index("distractor value"))
    if not task.is_variant:
        queried_value = torch.zeros_like(queried)
        queried_value[:, 1:] = queried[:, :-1]
        role[queried_value] = names.index("queried value")
        role[is_var] = names.index("distractor var")
        role[queried] = names.index("queried var")
    else:
        found = bindings(task, tokens)
        value_pos = found.variable_of >= 0
        bound_token = ctx.gather(1, found.variable_of.clamp_min(0))  # the variable a value is assigned to
        targets = found.operand_value_positions(task, tokens)  # in the context for a variable operand
        rows = torch.arange(len(tokens))
        # a queried chain's middle variable: the variable a queried variable is assigned to
        middle = value_pos & is_var & queried.gather(1, found.variable_of.clamp_min(0))
        middle_token = torch.where(middle, ctx, torch.full_like(ctx, -1))
        is_middle = is_var & (ctx.unsqueeze(2) == middle_token.unsqueeze(1)).any(2) & ~queried
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
