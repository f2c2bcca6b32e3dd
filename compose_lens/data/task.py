"""The vocabulary and the two forms of a sequence: integer tokens and readable text.

Inside the package a sequence is always a row of integer tokens (SPEC section 1,
here at p = 59 and 12 variables):

====================  ===========
token ids              meaning
====================  ===========
0 .. p-1               the numbers mod p
p                      ``+``
p+1                    ``=``
p+2                    ``PAD``
p+3 ..                 the variables ``a``, ``b``, ...
====================  ===========

A sequence is a 12-token context of ``VAR VALUE`` assignments scattered among
``PAD`` tokens, then the 4-token query ``+ LHS RHS =``. Two readable forms exist
for people, the CLI and figures:

* the token form, one word per token:  ``PAD b 7 PAD e 5 PAD d 2 PAD PAD PAD + b 23 =``
* the short form, assignments then the query: ``b=7, e=5, d=2, b+23=?``

The short form does not say where the padding lies; parsing it puts every ``PAD``
first (left padding). Both forms parse back to tokens, and malformed input is
refused with one line that says what is wrong.

>>> from compose_lens.config import TaskConfig
>>> task = TaskConfig()
>>> tokens = parse_sequence(task, "b=7, e=5, d=2, b+23=?")
>>> to_text(task, tokens)
'b=7, e=5, d=2, b+23=?'
>>> label_of(task, tokens)
30
>>> to_token_string(task, parse_sequence(task, "PAD b 7 PAD e 5 PAD d 5 PAD PAD PAD + b d ="))
'PAD b 7 PAD e 5 PAD d 5 PAD PAD PAD + b d ='
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from compose_lens.config import ComposeLensError, TaskConfig

SEQUENCE_TYPES = ("0var", "1var_left", "1var_right", "2var")


class SequenceError(ComposeLensError, ValueError):
    """A token sequence or readable sequence that is not a valid task sequence."""


def token_name(task: TaskConfig, token: int) -> str:
    """The word for one token: ``'17'``, ``'+'``, ``'='``, ``'PAD'`` or a variable letter."""
    token = int(token)
    if 0 <= token < task.modulus:
        return str(token)
    if token == task.plus_token:
        return "+"
    if token == task.equals_token:
        return "="
    if token == task.pad_token:
        return "PAD"
    if task.first_var_token <= token < task.d_vocab:
        return task.variable_names[token - task.first_var_token]
    raise SequenceError(f"token {token} is outside the vocabulary 0..{task.d_vocab - 1}")


def token_id(task: TaskConfig, word: str) -> int:
    """The token for one word of the token form (inverse of :func:`token_name`)."""
    if word == "+":
        return task.plus_token
    if word == "=":
        return task.equals_token
    if word.upper() == "PAD":
        return task.pad_token
    if word in task.variable_names:
        return task.first_var_token + task.var_index(word)
    if re.fullmatch(r"\d+", word):
        value = int(word)
        if value >= task.modulus:
            raise SequenceError(f"value {value} is out of range: numbers are 0..{task.modulus - 1}")
        return value
    raise SequenceError(
        f"unknown word {word!r}: use numbers 0..{task.modulus - 1}, variables "
        f"{task.variable_names[0]}..{task.variable_names[-1]}, '+', '=' or 'PAD'"
    )


@dataclass(frozen=True)
class Decoded:
    """What a valid sequence says: its assignments, its query and its answer."""

    assignments: tuple[tuple[str, int], ...]  # in context order
    lhs: str | int
    rhs: str | int
    x: int
    y: int
    label: int
    type: str


def decode(task: TaskConfig, tokens: Sequence[int]) -> Decoded:
    """Check a token row against SPEC section 1 and read it; raise SequenceError if invalid."""
    tokens = [int(t) for t in tokens]
    if len(tokens) != task.seq_len:
        raise SequenceError(f"a sequence has exactly {task.seq_len} tokens, got {len(tokens)}")
    words = [token_name(task, t) for t in tokens]
    context, query = tokens[: task.context_len], tokens[task.context_len:]
    if query[0] != task.plus_token or query[3] != task.equals_token:
        raise SequenceError(f"the query must read '+ LHS RHS =', got {' '.join(words[task.context_len:])!r}")
    assignments: list[tuple[str, int]] = []
    i = 0
    while i < len(context):
        t = context[i]
        if t == task.pad_token:
            i += 1
            continue
        name = words[i]
        if not task.first_var_token <= t < task.d_vocab:
            raise SequenceError(f"context position {i} holds {name!r} where a variable or PAD belongs")
        if i + 1 >= len(context) or not 0 <= context[i + 1] < task.modulus:
            raise SequenceError(f"variable {name!r} at position {i} is not followed by a number")
        if any(name == a for a, _ in assignments):
            raise SequenceError(f"variable {name!r} is assigned twice; each variable at most once")
        assignments.append((name, context[i + 1]))
        i += 2
    if not assignments:
        raise SequenceError("the context has no assignment; a sequence needs at least one")
    if len(assignments) > task.max_assignments:
        raise SequenceError(f"{len(assignments)} assignments, at most {task.max_assignments} allowed")
    bound = dict(assignments)

    def operand(token: int, side: str) -> tuple[str | int, int]:
        if 0 <= token < task.modulus:
            return token, token
        name = token_name(task, token)
        if name not in task.variable_names:
            raise SequenceError(f"the {side} operand {name!r} must be a number or a variable")
        if name not in bound:
            raise SequenceError(f"variable {name!r} is queried but never assigned in the context")
        return name, bound[name]

    lhs, x = operand(query[1], "left")
    rhs, y = operand(query[2], "right")
    if isinstance(lhs, str) and lhs == rhs:
        raise SequenceError(f"a 2-var query uses two different variables, got {lhs!r} twice")
    kind = {(False, False): "0var", (True, False): "1var_left", (False, True): "1var_right",
            (True, True): "2var"}[(isinstance(lhs, str), isinstance(rhs, str))]
    return Decoded(tuple(assignments), lhs, rhs, x, y, (x + y) % task.modulus, kind)


def label_of(task: TaskConfig, tokens: Sequence[int]) -> int:
    """The answer ``(x + y) mod p`` of a valid sequence."""
    return decode(task, tokens).label


def to_token_string(task: TaskConfig, tokens: Sequence[int]) -> str:
    """The token form: one word per token, PAD included."""
    return " ".join(token_name(task, t) for t in tokens)


def to_text(task: TaskConfig, tokens: Sequence[int]) -> str:
    """The short readable form ``b=7, e=5, b+23=?`` (padding positions are not shown)."""
    d = decode(task, tokens)
    parts = [f"{name}={value}" for name, value in d.assignments]
    return ", ".join(parts + [f"{d.lhs}+{d.rhs}=?"])


_SHORT_ASSIGN = re.compile(r"^\s*([A-Za-z]\w*)\s*=\s*(\w+)\s*$")
_SHORT_QUERY = re.compile(r"^\s*(\w+)\s*\+\s*(\w+)\s*=\s*\??\s*$")


def parse_sequence(task: TaskConfig, text: str) -> list[int]:
    """Parse either readable form into a valid token row (raises SequenceError)."""
    text = text.strip()
    if not text:
        raise SequenceError("empty sequence: write e.g. 'b=7, e=5, b+23=?'")
    if "," in text or "?" in text:
        tokens = _parse_short(task, text)
    else:
        tokens = [token_id(task, w) for w in text.split()]
    decode(task, tokens)  # validates
    return tokens


def _parse_short(task: TaskConfig, text: str) -> list[int]:
    parts = [p for p in text.split(",")]
    *assigns, query = parts
    m = _SHORT_QUERY.match(query)
    if not m:
        raise SequenceError(f"the query {query.strip()!r} must read like 'b+23=?'")
    context: list[int] = []
    for part in assigns:
        a = _SHORT_ASSIGN.match(part)
        if not a:
            raise SequenceError(f"the assignment {part.strip()!r} must read like 'b=7'")
        name, value = a.groups()
        if name not in task.variable_names:
            raise SequenceError(
                f"unknown variable {name!r}: the variables are "
                f"{task.variable_names[0]}..{task.variable_names[-1]}")
        context += [token_id(task, name), token_id(task, value)]
        if not 0 <= context[-1] < task.modulus:
            raise SequenceError(f"variable {name!r} must be assigned a number, got {value!r}")
    if len(context) > task.context_len:
        raise SequenceError(
            f"{len(assigns)} assignments do not fit the {task.context_len}-token context "
            f"(at most {task.context_len // 2})")
    padding = [task.pad_token] * (task.context_len - len(context))
    lhs, rhs = m.groups()
    return padding + context + [task.plus_token, token_id(task, lhs), token_id(task, rhs), task.equals_token]
