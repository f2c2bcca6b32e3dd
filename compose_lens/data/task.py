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

With noise words (``TaskConfig.noise_rate > 0``) the filler words ``let``, ``is``, ``be``,
``then`` take the ids p+3 .. p+6 and the variables follow them.

A sequence is a 12-token context of ``VAR VALUE`` assignments scattered among
``PAD`` tokens, then the 4-token query ``+ LHS RHS =``. Two readable forms exist
for people, the CLI and figures, and both parse back to tokens (malformed input is
refused with one line that says what is wrong):

* the token form, one word per token:  ``PAD b 7 PAD e 5 PAD d 2 PAD PAD PAD + b 23 =``
* the short form, assignments then the query: ``b=7, e=5, d=2, b+23=?`` (parsing it puts
  every ``PAD`` first, as the task pads: left unless ``padding="right"``).

The task variants (docs/variants.md) read and print in the same forms, and a task without
the variant refuses them: reassignment ``b=3, e=5, b=9, b+1=?`` (the latest counts: 10),
chains ``c=b, b=7, c+1=?`` (8), noise words ``let b is 7, e=5, then, b+1=?`` (a filler
before a variable belongs to its assignment, one between variable and value stands for
``=``, fillers after the last assignment stand alone before the query).

>>> from compose_lens.core.config import TaskConfig
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

import enum
import re
from dataclasses import dataclass
from typing import Sequence

from compose_lens.core.config import TaskConfig
from compose_lens.core.errors import ComposeLensError


class SequenceError(ComposeLensError, ValueError):
    """A token sequence or readable sequence that is not a valid task sequence."""


class SequenceKind(enum.StrEnum):
    """The four kinds of sequence, by which operands are variables: the one vocabulary of kinds.

    A member is its name in tables and JSON (``"0var"`` ...); :attr:`index` is its place in
    the row table; :attr:`operands` and :attr:`prompt` are the Fourier grids' and the
    same-MLP prompts' words for it, all read by :meth:`parse`.

    >>> SequenceKind.parse("left"), SequenceKind.ONE_VAR_LEFT.index, SequenceKind.TWO_VAR.operands
    (<SequenceKind.ONE_VAR_LEFT: '1var_left'>, 1, 'both')
    """

    ZERO_VAR = "0var"  # + 3 4 =
    ONE_VAR_LEFT = "1var_left"  # + b 4 =
    ONE_VAR_RIGHT = "1var_right"  # + 3 e =
    TWO_VAR = "2var"  # + b e =

    @property
    def index(self) -> int:
        """0 .. 3: the kind's type index in the row table (left variable 1, right variable 2)."""
        return self.left_is_variable + 2 * self.right_is_variable

    @property
    def left_is_variable(self) -> bool:
        return self in (SequenceKind.ONE_VAR_LEFT, SequenceKind.TWO_VAR)

    @property
    def right_is_variable(self) -> bool:
        return self in (SequenceKind.ONE_VAR_RIGHT, SequenceKind.TWO_VAR)

    @property
    def operands(self) -> str:
        """The Fourier grids' word: ``constant``, ``left``, ``right``, ``both`` (which operands are variables)."""
        return ("constant", "left", "right", "both")[self.index]

    @property
    def prompt(self) -> str:
        """The same-MLP prompts' word: ``const``, ``var1`` (either side), ``var2``."""
        return ("const", "var1", "var1", "var2")[self.index]

    @classmethod
    def of(cls, left_is_variable: bool, right_is_variable: bool) -> "SequenceKind":
        """The kind of a query whose left / right operand is a variable or not."""
        return cls.at(bool(left_is_variable) + 2 * bool(right_is_variable))

    @classmethod
    def at(cls, index: int) -> "SequenceKind":
        """The kind of type index ``index`` (the inverse of :attr:`index`)."""
        return list(cls)[int(index)]

    @classmethod
    def of_prompt(cls, prompt: str, side: str) -> "SequenceKind":
        """The kind of the same-MLP prompts ``prompt`` (:attr:`prompt`) read on ``side``: a ``var1``
        prompt's variable is the ``side`` operand."""
        kinds = [kind for kind in cls if kind.prompt == prompt]
        if not kinds or side not in ("left", "right"):
            prompts = ", ".join(dict.fromkeys(kind.prompt for kind in cls))
            raise SequenceError(f"prompts {prompt!r} on the {side!r} side: use one of {prompts}, left or right")
        return kinds[0] if len(kinds) == 1 else cls.of(side == "left", side == "right")

    @classmethod
    def parse(cls, word: "str | SequenceKind") -> "SequenceKind":
        """The kind ``word`` names: a kind (``2var``), an operands word (``both``) or a member's name."""
        for kind in cls:
            if word in (kind.value, kind.operands, kind.name):
                return kind
        words = ", ".join(kind.value for kind in cls)
        operands = ", ".join(kind.operands for kind in cls)
        raise SequenceError(f"unknown sequence kind {word!r}: use one of {words} (or {operands})")


def token_name(task: TaskConfig, token: int) -> str:
    """The word for one token: ``'17'``, ``'+'``, ``'='``, ``'PAD'``, a filler word or a variable letter."""
    token = int(token)
    if 0 <= token < task.modulus:
        return task.number_words[token]
    if token == task.plus_token:
        return task.sign
    if token == task.equals_token:
        return "="
    if token == task.pad_token:
        return "PAD"
    if task.first_noise_token <= token < task.first_var_token:
        return task.noise_words[token - task.first_noise_token]
    if task.first_var_token <= token < task.d_vocab:
        return task.variable_names[token - task.first_var_token]
    raise SequenceError(f"token {token} is outside the vocabulary 0..{task.d_vocab - 1}")


def token_id(task: TaskConfig, word: str) -> int:
    """The token for one word of the token form (inverse of :func:`token_name`)."""
    if word == task.sign:
        return task.plus_token
    if word == "=":
        return task.equals_token
    if word.upper() == "PAD":
        return task.pad_token
    if word in task.variable_names:
        return task.first_var_token + task.var_index(word)
    if word in task.noise_words:
        return task.first_noise_token + task.noise_words.index(word)
    if task.number_spelling is not None:
        if word in task.number_spelling:
            return task.number_spelling.index(word)
    elif re.fullmatch(r"\d+", word):
        if len(word.lstrip("0")) > len(str(task.modulus)):  # never int(): Python refuses 4,300+ digits
            raise SequenceError(f"value {word[:12]}... ({len(word)} digits) is out of range: numbers are "
                                f"0..{task.modulus - 1}")
        value = int(word)
        if value >= task.modulus:
            raise SequenceError(f"value {value} is out of range: numbers are 0..{task.modulus - 1}")
        return value
    fillers = f", filler words {', '.join(task.noise_words)}" if task.noise_words else ""
    raise SequenceError(
        f"unknown word {word!r}: use numbers {task.number_words[0]}..{task.number_words[-1]}, variables "
        f"{task.variable_names[0]}..{task.variable_names[-1]}{fillers}, '{task.sign}', '=' or 'PAD'"
    )


def is_noise(task: TaskConfig, token: int) -> bool:
    """Is ``token`` a filler word (never an operand, never an answer)?"""
    return task.first_noise_token <= int(token) < task.first_var_token


@dataclass(frozen=True)
class Decoded:
    """What a valid sequence says: its assignments (in context order, reassignments included; a
    chain's ``c=b`` has the variable name as its value), its query and its answer. ``x`` / ``y``:
    each operand's value (latest, through a chain); ``first_x`` / ``first_y``: the first value the
    variable holding it was assigned; ``hops``: assignments read (0 constant, 1 ``b=7``, 2 a chain)."""

    assignments: tuple[tuple[str, int | str], ...]  # in context order
    lhs: str | int
    rhs: str | int
    x: int
    y: int
    label: int
    type: SequenceKind
    first_x: int = -1
    first_y: int = -1
    hops: tuple[int, int] = (0, 0)
    reassigned: tuple[str, ...] = ()  # variables assigned more than once, in order of first assignment
    n_fillers: int = 0  # filler words in the context


@dataclass(frozen=True)
class _Item:
    """One piece of a context in order: a filler word, or an assignment with the fillers inside it."""

    filler: str | None = None
    name: str = ""
    value: int | str = 0
    inner: tuple[str, ...] = ()


def _read_context(task: TaskConfig, context: list[int]) -> list[_Item]:
    """The context's fillers and assignments in order (PAD dropped), checked against the task."""
    items: list[_Item] = []
    i = 0
    while i < len(context):
        t = context[i]
        if t == task.pad_token:
            i += 1
            continue
        name = token_name(task, t)
        if is_noise(task, t):
            items.append(_Item(filler=name))
            i += 1
            continue
        if not task.first_var_token <= t < task.d_vocab:
            raise SequenceError(f"context position {i} holds {name!r} where a variable or PAD belongs")
        j, inner = i + 1, []
        while j < len(context) and is_noise(task, context[j]):  # fillers inside: `b is 7`
            inner.append(token_name(task, context[j]))
            j += 1
        value_ok = j < len(context) and (0 <= context[j] < task.modulus or (
            task.chain_rate > 0 and task.first_var_token <= context[j] < task.d_vocab))
        if not value_ok:
            what = "a number or a variable" if task.chain_rate > 0 else "a number"
            raise SequenceError(f"variable {name!r} at position {i} is not followed by {what}")
        value = context[j] if context[j] < task.modulus else token_name(task, context[j])
        if task.reassign_rate == 0 and any(name == a.name for a in items if a.filler is None):
            raise SequenceError(f"variable {name!r} is assigned twice; each variable at most once")
        items.append(_Item(name=name, value=value, inner=tuple(inner)))
        i = j + 1
    return items


def decode(task: TaskConfig, tokens: Sequence[int]) -> Decoded:
    """Check a token row against the task's format (and its variants) and read it (SequenceError if invalid)."""
    tokens = [int(t) for t in tokens]
    if len(tokens) != task.seq_len:
        raise SequenceError(f"a sequence has exactly {task.seq_len} tokens, got {len(tokens)}")
    words = [token_name(task, t) for t in tokens]
    context, query = tokens[: task.context_len], tokens[task.context_len:]
    if query[0] != task.plus_token or query[3] != task.equals_token:
        raise SequenceError(f"the query must read '{task.sign} LHS RHS =', got {' '.join(words[task.context_len:])!r}")
    items = _read_context(task, context)
    assignments = tuple((a.name, a.value) for a in items if a.filler is None)
    if not assignments:
        raise SequenceError("the context has no assignment; a sequence needs at least one")
    if len(assignments) > task.max_assignments:
        raise SequenceError(f"{len(assignments)} assignments, at most {task.max_assignments} allowed")
    history: dict[str, list[int | str]] = {}
    for name, value in assignments:
        history.setdefault(name, []).append(value)
    for name, values in history.items():  # every chain resolves in one more hop to a number
        target = values[-1]
        if isinstance(target, str):
            if target == name:
                raise SequenceError(f"variable {name!r} is assigned itself")
            if target not in history:
                raise SequenceError(f"variable {name!r} is assigned {target!r}, which is never assigned")
            if isinstance(history[target][-1], str):
                raise SequenceError(f"{name}={target}, {target}={history[target][-1]}: a chain has two hops "
                                    f"at most, so {target!r} must be assigned a number")

    def operand(token: int, side: str) -> tuple[str | int, int, int, int]:
        if 0 <= token < task.modulus:
            return token, token, token, 0
        name = token_name(task, token)
        if name not in task.variable_names:
            raise SequenceError(f"the {side} operand {name!r} must be a number or a variable")
        if name not in history:
            raise SequenceError(f"variable {name!r} is queried but never assigned in the context")
        holder, hops = name, 1
        if isinstance(history[name][-1], str):
            holder, hops = str(history[name][-1]), 2
        numbers = [v for v in history[holder] if isinstance(v, int)]
        return name, int(history[holder][-1]), numbers[0], hops

    lhs, x, first_x, hops_x = operand(query[1], "left")
    rhs, y, first_y, hops_y = operand(query[2], "right")
    if isinstance(lhs, str) and lhs == rhs:
        raise SequenceError(f"a 2-var query uses two different variables, got {lhs!r} twice")
    kind = SequenceKind.of(isinstance(lhs, str), isinstance(rhs, str))
    reassigned = tuple(name for name, values in history.items() if len(values) > 1)
    fillers = sum(1 for t in context if is_noise(task, t))
    return Decoded(assignments, lhs, rhs, x, y, task.answer(x, y), kind,
                   first_x, first_y, (hops_x, hops_y), reassigned, fillers)


def label_of(task: TaskConfig, tokens: Sequence[int]) -> int:
    """The answer ``(x + y) mod p`` of a valid sequence."""
    return decode(task, tokens).label


def first_label_of(task: TaskConfig, tokens: Sequence[int]) -> int:
    """The answer from each operand's *first* assignment: what a model that ignores
    reassignments would say (the ``reassign_first`` pool's label)."""
    d = decode(task, tokens)
    return task.answer(d.first_x, d.first_y)


def to_token_string(task: TaskConfig, tokens: Sequence[int]) -> str:
    """The token form: one word per token, PAD included."""
    return " ".join(token_name(task, t) for t in tokens)


def to_text(task: TaskConfig, tokens: Sequence[int]) -> str:
    """The short readable form ``b=7, e=5, b+23=?`` (padding positions are not shown)."""
    d = decode(task, tokens)
    parts, pending = [], []
    for item in _read_context(task, [int(t) for t in tokens[: task.context_len]]):
        if item.filler is not None:
            pending.append(item.filler)
            continue
        value = _word(task, item.value)
        core = " ".join([item.name, *item.inner, value]) if item.inner else f"{item.name}={value}"
        parts.append(" ".join([*pending, core]))
        pending = []
    if pending:  # fillers after the last assignment
        parts.append(" ".join(pending))
    sign = task.sign if not re.fullmatch(r"\w+", task.sign) else f" {task.sign} "  # a word: 'p minus 3=?'
    return ", ".join(parts + [f"{_word(task, d.lhs)}{sign}{_word(task, d.rhs)}=?"])


def _word(task: TaskConfig, value: int | str) -> str:
    """An operand or a value as the readable forms spell it: a number's word, a variable's name."""
    return task.number_words[value] if isinstance(value, int) else value


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


def _parse_assignment(task: TaskConfig, part: str) -> list[int]:
    """One comma-separated part of the short form: ``b=7``, ``let b is 7``, ``c=b`` or fillers alone."""
    fillers = set(task.noise_words)
    example = "'b=7' or 'let b is 7'" if fillers else "'b=7'"
    words = re.findall(r"[^\s=]+|=", part)
    lead = 0
    while lead < len(words) and words[lead] in fillers:
        lead += 1
    rest = words[lead:]
    if not rest:  # fillers on their own
        if not words:
            raise SequenceError(f"the assignment {part.strip()!r} must read like {example}")
        return [token_id(task, w) for w in words]
    name, rest = rest[0], rest[1:]
    inner = 0
    while inner < len(rest) and rest[inner] in fillers:
        inner += 1
    between, rest = rest[:inner], rest[inner:]
    if not between:
        if not rest or rest[0] != "=":
            raise SequenceError(f"the assignment {part.strip()!r} must read like {example}")
        rest = rest[1:]
    if not rest or rest[0] == "=" or any(w not in fillers for w in rest[1:]) \
            or not re.fullmatch(r"[A-Za-z]\w*", name):
        raise SequenceError(f"the assignment {part.strip()!r} must read like {example}")
    value = rest[0]
    if name not in task.variable_names:
        raise SequenceError(
            f"unknown variable {name!r}: the variables are "
            f"{task.variable_names[0]}..{task.variable_names[-1]}")
    value_token = token_id(task, value)
    is_variable = task.first_var_token <= value_token < task.d_vocab
    if not (0 <= value_token < task.modulus or (is_variable and task.chain_rate > 0)):
        raise SequenceError(f"variable {name!r} must be assigned a number, got {value!r}")
    return ([token_id(task, w) for w in words[:lead]] + [token_id(task, name)]
            + [token_id(task, w) for w in between] + [value_token] + [token_id(task, w) for w in rest[1:]])


def _parse_short(task: TaskConfig, text: str) -> list[int]:
    *assigns, query = text.split(",")
    m = re.match(rf"^\s*(\w+)\s*{re.escape(task.sign)}\s*(\w+)\s*=\s*\??\s*$", query)  # b+23=?
    if not m:
        raise SequenceError(f"the query {query.strip()!r} must read like 'b{task.sign}23=?'")
    context: list[int] = []
    for part in assigns:
        context += _parse_assignment(task, part)
    if len(context) > task.context_len:
        if any(is_noise(task, t) for t in context):
            raise SequenceError(f"{len(context)} context tokens (fillers included) do not fit the "
                                f"{task.context_len}-token context")
        raise SequenceError(
            f"{len(assigns)} assignments do not fit the {task.context_len}-token context "
            f"(at most {task.context_len // 2})")
    padding = [task.pad_token] * (task.context_len - len(context))
    lhs, rhs = m.groups()
    context = context + padding if task.padding == "right" else padding + context  # as the task pads
    return context + [task.plus_token, token_id(task, lhs), token_id(task, rhs), task.equals_token]
