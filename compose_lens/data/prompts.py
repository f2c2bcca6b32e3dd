"""Your own prompt set: the sequences a researcher evaluated or trained on, read as the pools.

compose-lens draws its pools from the task's own renderer (:mod:`compose_lens.data.sampler`). A
researcher whose data were made another way can bring them instead (docs/own-model.md):
``--prompts FILE`` on every command that reads a MODEL (in Python, :func:`with_prompts`). Then each
of the nine pools **is** the file's sequences of that pool, and every analysis that reads pools
reads the researcher's sequences, not the renderer's.

**The file** is CSV (a header row) or JSONL (one JSON object a line) with two columns / keys:
``sequence``, in the short readable form (``p=3, q=4, p-q=?``, in the task's declared names), the
token form in the model's own position order, or the model's own token ids (space separated, or in
JSONL a list of integers); and ``answer``, as the readable form spells a number, checked against the
declared operation (a file whose answers the task does not give is refused, not relabelled).

Example (``prompts.csv``)::

    sequence,answer
    "p=3, q=4, p-q=?",6
    "r=1, 5-r=?",4

:func:`pool_of` reads a sequence's pool from its kind, whether its pair is a training or a held-out
pair, and whether a variable stands in a slot training forbids (a held-out pair with a variable in a
forbidden slot is in no pool, :data:`OUTSIDE`). A pool the file has no sequence of is absent
(:func:`compose_lens.data.sampler.absent_pools`); a pool of more sequences than a command asks for
is a seeded sample of them. The exhaustive sets and the same-MLP tests' prompts still come from the
declared distribution; patching corrupts the file's own sequences (or give pairs with ``--pairs FILE``).
"""

from __future__ import annotations

import csv
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from compose_lens.data.pairs import parse_tokens
from compose_lens.data.split import CONSTANT, Split
from compose_lens.data.task import SequenceError, decode
from compose_lens.core.errors import ComposeLensError
from compose_lens.core.files import missing_columns

COLUMNS = ("sequence", "answer")
OUTSIDE = "outside the pools"  # a held-out pair with a variable in a forbidden slot


@dataclass(frozen=True)
class PromptSet:
    """A researcher's sequences in the study's coordinates: tokens (N, seq_len), their answers (N,), the
    rows (x, y, v, w) they query, the pool of each (:func:`pool_of`), and the file they came from."""

    tokens: torch.Tensor
    labels: torch.Tensor
    rows: torch.Tensor
    pools: tuple[str, ...]
    source: str

    def __len__(self) -> int:
        return len(self.labels)

    def counts(self) -> dict[str, int]:
        """Sequences per pool, in the order they first appear."""
        return {name: self.pools.count(name) for name in dict.fromkeys(self.pools)}


def pool_of(split: Split, row: tuple[int, int, int, int], is_train: torch.Tensor | None = None) -> str:
    """The study pool a row (x, y, v, w) belongs to under ``split``, or :data:`OUTSIDE` (``is_train``:
    ``split.is_train``, where the caller has it)."""
    task = split.task
    x, y, v, w = row
    train = bool((split.is_train if is_train is None else is_train)[x, y])
    pairs = "train" if train else "add_restricted"
    left_bad = v != CONSTANT and task.variable_names[v] in task.left_forbidden
    right_bad = w != CONSTANT and task.variable_names[w] in task.right_forbidden
    kind = (v != CONSTANT) + (w != CONSTANT)
    if kind == 0:
        return f"0var_{pairs}"
    forbidden = left_bad + right_bad
    if forbidden and not train:
        return OUTSIDE
    if kind == 1:
        return "1var_var_restricted" if forbidden else f"1var_{pairs}"
    return f"2var_var_restricted_{forbidden}" if forbidden else f"2var_{pairs}"


def _records(path: Path, text: str):
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(text.splitlines())
        problem = missing_columns(reader.fieldnames or [], COLUMNS)
        if problem:
            raise ComposeLensError(f"{path} line 1: {problem}; name the columns 'sequence' and 'answer'")
        for record in reader:
            yield f"{path} line {reader.line_num}", record
        return
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError, ValueError):
            raise ComposeLensError(f"{where}: not one JSON object; write e.g. "
                                   f'{{"sequence": "p=3, q=4, p-q=?", "answer": 6}}') from None
        if not isinstance(record, dict) or missing_columns(list(record), COLUMNS):
            raise ComposeLensError(f"{where}: a line holds one JSON object with 'sequence' and 'answer'")
        yield where, record


def read_prompts(path: str | Path, split: Split, declaration=None) -> PromptSet:
    """The prompt set of a CSV or JSONL file (module doc), in the study's coordinates, read in the
    ``declaration``'s ids, positions and names (None: the study's)."""
    path = Path(path)
    if path.suffix.lower() not in (".csv", ".jsonl", ".ndjson"):
        raise ComposeLensError(f"prompts file {path}: name it .csv or .jsonl (one sequence and its answer a row)")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ComposeLensError(f"prompts file {path}: no such file") from None
    except (IsADirectoryError, UnicodeDecodeError, OSError) as exc:
        raise ComposeLensError(f"prompts file {path}: cannot be read as UTF-8 text ({type(exc).__name__})") from None
    task = split.task
    tokens, labels, rows = [], [], []
    for where, record in _records(path, text):
        try:
            row = parse_tokens(task, record["sequence"], declaration)
        except SequenceError as exc:
            raise ComposeLensError(f"{where}: the sequence {str(record['sequence'])[:60]!r}: {exc}") from None
        found = decode(task, row)
        answer = str(record["answer"]).strip()
        if answer not in (task.number_words[found.label], str(found.label)):
            raise ComposeLensError(f"{where}: the answer is {answer!r}, but the declared task answers "
                                   f"{task.number_words[found.label]} (x {task.sign} y mod {task.modulus}); "
                                   f"fix the answer, or the declaration's operation")
        variables = task.variable_names
        rows.append([found.x, found.y, variables.index(found.lhs) if isinstance(found.lhs, str) else CONSTANT,
                     variables.index(found.rhs) if isinstance(found.rhs, str) else CONSTANT])
        tokens.append(row)
        labels.append(found.label)
    if not tokens:
        raise ComposeLensError(f"prompts file {path}: holds no sequence")
    is_train = split.is_train
    return PromptSet(torch.tensor(tokens, dtype=torch.long), torch.tensor(labels, dtype=torch.long),
                     torch.tensor(rows, dtype=torch.long), tuple(pool_of(split, r, is_train) for r in rows), str(path))


def with_prompts(subject, path: str | Path):
    """``subject`` whose pools are the sequences of a prompt file (module doc)."""
    prompts = read_prompts(path, subject.split, subject.declaration)
    return dataclasses.replace(subject, split=dataclasses.replace(subject.split, prompts=prompts))
