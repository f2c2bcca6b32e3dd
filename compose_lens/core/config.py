"""Configurations: the task, the model and the training recipe, as frozen dataclasses.

Every number of the study is a default here and nothing else in the package
hard-codes it. A configuration is immutable, round-trips through JSON
(``to_dict`` / ``from_dict``), and is validated when it is made: a bad value is
refused with one :class:`ConfigError` line that says what is wrong and how to fix
it, before any work starts.

>>> task = TaskConfig(modulus=11, n_vars=6)
>>> TaskConfig.from_dict(task.to_dict()) == task
True
>>> TaskConfig(modulus=1)
Traceback (most recent call last):
...
compose_lens.core.errors.ConfigError: modulus=1: the modulus must be at least 2
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import string
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from compose_lens.core.errors import ConfigError

T = TypeVar("T")

VARIABLE_LETTERS = string.ascii_lowercase
# The filler words of the noisy-context variant (TaskConfig.noise_rate > 0), in token order
NOISE_WORDS = ("let", "is", "be", "then")
# The task variants (docs/variants.md) and their defaults: the study's task
TASK_VARIANTS = {"reassign_rate": 0.0, "noise_rate": 0.0, "chain_rate": 0.0}
# The model variants of the theory (docs/idealised.md), at the study's defaults
MODEL_VARIANTS = {"embeddings": "learned", "embedding_basis": "onehot", "embedding_overlap": 0.0,
                  "residual": "additive"}
QUERY_LENGTH = 4  # "+ LHS RHS ="
# Where a context's padding goes (TaskConfig.padding), and the study's context distribution
PADDINGS = ("scattered", "left", "right")
CONTEXT_DEFAULTS = {"fewest_assignments": 1, "padding": "scattered", "kind_weights": None}
# the largest modulus a split file or a task declaration may name: its p x p tables are read whole
MAX_MODULUS = 1000
# the most variables a task may name (variable_spelling): its n x n 2-var pairs are built when it is checked
# (3,000 named variables took 6 s, 10^5 would hang every command)
MAX_VARIABLES = 1000
# The binary operations a task may ask for (TaskConfig.operation): the study's is addition;
# "table" reads the answer of every pair from TaskConfig.operation_table
OPERATIONS = ("add", "subtract", "multiply", "table")
# The operation's sign in the readable forms (a table prints as "+", the query's one operator)
OPERATION_SIGNS = {"add": "+", "subtract": "-", "multiply": "*", "table": "+"}
# What a corrupted prompt of activation patching changes (compose_lens.data.pairs)
CORRUPTIONS = ("value", "variable", "constant")
# What a patched run is read as (compose_lens.analysis.metrics.METRICS, named here without torch)
PATCH_METRICS = ("logit_diff", "prob", "accuracy")
# The heads' inputs and outputs per-head patching restores (compose_lens.registry.patching.tables)
HEAD_COMPONENTS = ("q", "k", "v", "pattern", "z")
# How circuit discovery scores edges (compose_lens.registry.circuit.discovery)
CIRCUIT_METHODS = ("exact", "eap", "eap-ig", "eap-ig-inputs", "acdc")
# Where DAS searches for the variable's value, and the ranks it tries (compose_lens.registry.das.search)
DAS_SITES = ("value_after_layer1", "equals_before_mlp2", "query_variable_after_layer1")
DAS_RANKS = (2, 8, 16, 32)
# Where the points of a sweep train (compose_lens.sweep)
SWEEP_BACKENDS = ("local", "ray", "slurm")


MAX_SEED = 2 ** 63 - 1  # torch's generators take a signed 64-bit seed


def seed_problem(name: str, value: int) -> str | None:
    """Why ``value`` is not a seed (None if it is one): an integer in [0, MAX_SEED]."""
    if not 0 <= value <= MAX_SEED:
        return f"{name}={value}: seeds are integers from 0 to 2**63-1 ({MAX_SEED})"
    return None


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def _check_positive_ints(config: Any, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        _check(value >= 1, f"{name}={value}: must be a positive integer")


# -- strict types ---------------------------------------------------------------------------------
#
# Every field is checked against its annotation before any range check: a bool is
# not an int (``steps=true``), a float must be finite (``lr=Infinity``), a string is
# not a bool (``trained_biases=maybe``) and a list is a list of the right items.
# JSON and ``--set`` hand us whatever the user typed, so nothing is coerced.

_KINDS = {
    "int": "an integer", "float": "a finite number", "str": "a string", "bool": "true or false",
    "str | None": "a string or null", "tuple[int, ...]": "a list of integers",
    "tuple[str, ...] | None": "a list of strings, or null", "tuple[int, ...] | None": "a list of integers, or null",
    "tuple[float, ...] | None": "a list of numbers, or null",
    "tuple[str, ...]": "a list of strings", "tuple[int, int]": "a pair of integers [x, y]",
    "float | None": "a finite number, or null",
    "tuple[tuple[int, int], ...] | None": "a list of [x, y] integer pairs, or null",
    "tuple[tuple[int, ...], ...] | None": "a list of rows of integers, or null",
}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _fits(kind: str, value: Any) -> bool:
    if kind.endswith(" | None") and value is None:
        return True
    base = kind.removesuffix(" | None")
    if base == "int":
        return _is_int(value)
    if base == "float":
        return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)
    if base == "str":
        return isinstance(value, str)
    if base == "bool":
        return isinstance(value, bool)
    if base.startswith("tuple[") and base.endswith(", ...]"):  # any length: tuple[int, ...]
        item = base[len("tuple["):-len(", ...]")]
        return isinstance(value, (list, tuple)) and all(_fits(item, v) for v in value)
    if base.startswith("tuple["):  # a fixed length: tuple[int, int]
        items = _items_of(base[len("tuple["):-1])
        return isinstance(value, (list, tuple)) and len(value) == len(items) and all(
            _fits(k, v) for k, v in zip(items, value))
    raise TypeError(f"no strict check for annotation {kind!r}")  # a new field type: add it above


def _items_of(inner: str) -> list[str]:
    """The item kinds of a fixed-length tuple annotation's inside (``int, int``), nested brackets kept whole."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(inner):
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            items.append(inner[start:i].strip())
            start = i + 1
    return items + [inner[start:].strip()]


def check_types(config: Any) -> None:
    """Refuse any field whose value is not of its annotated type (one line per refusal)."""
    for f in fields(config):
        value = getattr(config, f.name)
        if not _fits(str(f.type), value):
            shown = json.dumps(value) if _json_able(value) else repr(value)
            wanted = _KINDS.get(str(f.type), str(f.type))
            if isinstance(value, float) and str(f.type).startswith("float"):
                raise ConfigError(f"{f.name}={shown}: must be {wanted} (not NaN or infinite)")
            item_kind = str(f.type).removesuffix(" | None").removeprefix("tuple[").removesuffix(", ...]")
            if isinstance(value, (list, tuple)) and str(f.type).startswith("tuple["):  # a list: say which item
                bad = next(v for v in value if not _fits(item_kind, v))  # (it said "not a list" of a list)
                item = json.dumps(bad) if _json_able(bad) else repr(bad)
                what = (f"not {_KINDS[item_kind]}" if isinstance(bad, (list, tuple)) and item_kind in _KINDS
                        else _type_word(bad))
                raise ConfigError(f"{f.name}={shown}: must be {wanted}; its item {item} is {what}")
            if isinstance(value, str) and str(f.type).startswith("tuple["):
                example = json.dumps(['k', 'l'] if item_kind == 'str' else [1])
                if value.lstrip().startswith("["):
                    raise ConfigError(f"{f.name}={shown}: must be {wanted}, not a string: write the list in JSON, "
                                      f"e.g. {f.name}={example}"
                                      f"{' (each name in double quotes)' if item_kind == 'str' else ''}")
                raise ConfigError(f"{f.name}={shown}: must be {wanted}, not a string (a string is not read letter "
                                  f"by letter): give a list, e.g. {f.name}={json.dumps([value][:1] if item_kind == 'str' else [1])}")
            raise ConfigError(f"{f.name}={shown}: must be {wanted}, not {_type_word(value)}")


def _json_able(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
        return True
    except (TypeError, ValueError):
        return False


def _type_word(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float) and not math.isfinite(value):
        return "a non-finite number"
    return {int: "an integer", float: "a number", str: "a string", list: "a list", tuple: "a list",
            dict: "an object"}.get(type(value), f"a {type(value).__name__}")


class _JsonConfig:
    """JSON round trip shared by the configuration classes."""

    # Settings added after the study's configuration, left out of the JSON while at these defaults
    # (``full=True`` keeps them), so a config of the study's recipe is written as it always was.
    SILENT_DEFAULTS: dict[str, Any] = {}

    def to_dict(self, full: bool = False) -> dict[str, Any]:
        data = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(self).items()}
        if not full:
            for name, default in self.SILENT_DEFAULTS.items():
                if data[name] == default:
                    del data[name]
        return data

    # Keys of configurations written by earlier versions that are now derived, not set.
    LEGACY_KEYS: tuple[str, ...] = ()
    # Keys that earlier versions wrote under another name: {old: new}. A file read with the old
    # name loads as the new one; a file with both is refused (which one is meant is unclear).
    RENAMED_KEYS: dict[str, str] = {}

    @classmethod
    def from_dict(cls: type[T], data: dict[str, Any]) -> T:
        _check(isinstance(data, dict), f"the {cls.__name__} section must be a JSON object "
                                       f"{{\"key\": value, ...}}, not {_type_word(data)}")
        data = {k: v for k, v in data.items() if k not in cls.LEGACY_KEYS}  # type: ignore[attr-defined]
        for old, new in cls.RENAMED_KEYS.items():
            if old in data:
                _check(new not in data, f"the {cls.__name__} section has both {old} (the old name) and "
                                        f"{new}: keep only {new}")
                data[new] = data.pop(old)
        known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ConfigError(
                f"unknown {cls.__name__} key(s) {', '.join(unknown)}; known keys: {', '.join(known)}"
            )
        kwargs = {k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items()}
        return cls(**kwargs)  # type: ignore[call-arg]

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def replace(self: T, **changes: Any) -> T:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


@dataclass(frozen=True)
class TaskConfig(_JsonConfig):
    """The task: modular addition with in-context variables, as the study sets it.

    ``r`` follows the reference's definition (its row table, :mod:`compose_lens.data.split`):
    every training pair gets one 0-var row per variable (12), one 1-var row per
    variable allowed on each side (10 + 10) and one candidate 2-var row per variable
    allowed on the left (10), each kept with probability ``r``. The expected number of
    2-var rows per 0-var row is therefore ``r * len(allowed_left) / n_vars`` (10 r / 12 at the
    defaults). ``seed`` (42, the study's) decides the training pairs and the kept rows.
    ``variables_in_training=False`` trains on the 0-var rows only: a model that never
    sees a variable operand, the negative control of :mod:`compose_lens.registry.same_mlp.comparisons`.

    **Task variants** (docs/variants.md), all 0 by default, which is the study's task:

    * ``reassign_rate``: the chance that a context assigns one of its variables twice; the
      latest assignment counts (``b=3, e=5, b=9, b+1=?`` answers 10).
    * ``noise_rate``: the chance that each context position the study would pad holds a
      filler word instead (:data:`NOISE_WORDS`, which join the vocabulary only then),
      between assignments or inside one (``let b is 7``).
    * ``chain_rate``: the chance that a sequence with a variable operand reaches it through
      two hops (``c=b, b=7, c+1=?``); a model needs a third layer for them.
    * longer contexts: ``seq_len`` and ``max_assignments`` (e.g. 32 and 12).

    ``max_assignments`` counts every assignment of a context, a reassignment and a chain's
    ``c=b`` included.
    """

    # older config files name the row counts; they are derived from the variables now and ignored on read
    LEGACY_KEYS = ("zero_var_rows", "two_var_rows")
    SILENT_DEFAULTS = {**TASK_VARIANTS, "operation": "add", "operation_table": None, "variable_spelling": None,
                       "number_spelling": None, "operator_spelling": None, **CONTEXT_DEFAULTS}

    modulus: int = 59  # p: numbers are 0..p-1 and answers are taken mod p (the study: 59)
    n_vars: int = 12  # how many variables a context may assign (letters a, b, ...; the study: 12)
    seq_len: int = 16  # tokens per sequence, the context and the 4-token query
    max_assignments: int = 6
    left_forbidden: tuple[str, ...] | None = None  # None: the last two variables (k, l)
    right_forbidden: tuple[str, ...] | None = None  # None: the first two variables (a, b)
    f: float = 0.7  # fraction of the p x p addition pairs trained on; the rest are held out (0, 1]
    r: float = 1.0
    variables_in_training: bool = True  # False: only 0-var rows are trained (a control model)
    seed: int = 42
    reassign_rate: float = 0.0  # chance a context reassigns one of its variables (the latest counts)
    noise_rate: float = 0.0  # chance a free context position holds a filler word instead of PAD
    chain_rate: float = 0.0  # chance a variable operand is reached through two hops, c=b, b=7
    operation: str = "add"  # the answer of x, y: add (the study), subtract, multiply, or table
    operation_table: tuple[tuple[int, ...], ...] | None = None  # operation=table: row x, column y
    # How the readable forms spell the tokens (a researcher's declared names; None: the study's spelling)
    variable_spelling: tuple[str, ...] | None = None  # the variables' names, n_vars of them (None: a, b, ...)
    number_spelling: tuple[str, ...] | None = None  # the numbers' names, one per number 0..p-1 (None: the digits)
    operator_spelling: str | None = None  # the operation's sign (None: its own, OPERATION_SIGNS)
    # The context distribution (a researcher's declared one; the defaults are the study's, CONTEXT_DEFAULTS):
    # a context holds n ~ U{fewest_assignments..max_assignments} assignments (at least 2 for a 2-var query)
    fewest_assignments: int = 1
    # where a context's PADs go: "scattered" (each in one of the n + 1 gaps, uniformly), "left" (every PAD
    # before the first assignment) or "right" (every PAD after the last, before the query)
    padding: str = "scattered"
    # the shares of 0-, 1- and 2-var sequences among training draws (None: rows drawn uniformly from the
    # study's row table)
    kind_weights: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.operation_table, list | tuple) and all(  # JSON gives lists of lists
                isinstance(row, list | tuple) for row in self.operation_table):
            object.__setattr__(self, "operation_table", tuple(tuple(row) for row in self.operation_table))
        check_types(self)
        _check(self.modulus >= 2,
               f"modulus={self.modulus}: the modulus must be at least 2")
        _check(isinstance(self.n_vars, int) and 2 <= self.n_vars <= MAX_VARIABLES and (
            self.n_vars <= len(VARIABLE_LETTERS) or self.variable_spelling is not None),
               f"n_vars={self.n_vars}: the number of variables must be between 2 and "
               f"{len(VARIABLE_LETTERS)} (they are named a..z; more, up to {MAX_VARIABLES}, need variable_spelling)")
        self._check_spelling()
        _check(isinstance(self.seq_len, int) and self.seq_len >= QUERY_LENGTH + 4,
               f"seq_len={self.seq_len}: a sequence needs room for two assignments (4 tokens) "
               f"plus the {QUERY_LENGTH}-token query; use seq_len >= {QUERY_LENGTH + 4}")
        context = self.seq_len - QUERY_LENGTH
        _check(isinstance(self.max_assignments, int)
               and 2 <= self.max_assignments <= context // 2,
               f"max_assignments={self.max_assignments}: must be between 2 and {context // 2} "
               f"(the {context}-token context holds at most {context // 2} 'VAR VALUE' pairs)")
        _check(self.max_assignments <= self.n_vars, self._too_many_assignments())
        names = self.variable_names
        if self.left_forbidden is None:
            object.__setattr__(self, "left_forbidden", names[-2:])
        if self.right_forbidden is None:
            object.__setattr__(self, "right_forbidden", names[:2])
        object.__setattr__(self, "left_forbidden", tuple(self.left_forbidden))
        object.__setattr__(self, "right_forbidden", tuple(self.right_forbidden))
        for side, forbidden in (("left_forbidden", self.left_forbidden),
                                ("right_forbidden", self.right_forbidden)):
            bad = [v for v in forbidden if v not in names]
            _check(not bad, f"{side}={list(forbidden)}: unknown variable(s) {bad}; "
                            f"the variables are {names[0]}..{names[-1]}")
        both = sorted(set(self.left_forbidden) & set(self.right_forbidden))
        _check(not both, f"variable(s) {both} are forbidden on both sides, so they would never "
                         f"be queried in training; forbid each on one side at most")
        _check(len(self.allowed_two_var_pairs) > 0,
               "no ordered variable pair is allowed for 2-var training queries; "
               "forbid fewer variables")
        _check(isinstance(self.f, (int, float)) and 0 < self.f <= 1,
               f"f={self.f}: the fraction of training pairs must be in (0, 1]")
        _check(isinstance(self.r, (int, float)) and 0 <= self.r <= 1,
               f"r={self.r}: the 2-var keep probability must be in [0, 1]")
        _check(self.variables_in_training or self.r == 1.0,
               f"r={self.r} keeps 2-var training rows, but variables_in_training=false trains none: drop r")
        _check(seed_problem("seed", self.seed) is None, seed_problem("seed", self.seed) or "")
        _check(int(self.f * self.modulus ** 2) >= 1,
               f"f={self.f} with modulus={self.modulus} leaves no training pair; raise f")
        _check(int(self.f * self.modulus ** 2) < self.modulus ** 2,
               f"f={self.f} with modulus={self.modulus} holds out no pair, and the held-out pools and "
               f"exhaustive sets need one; lower f (at most {1 - 1 / self.modulus ** 2:.4g})")
        self._check_variants()
        self._check_operation()
        self._check_context()

    def _check_context(self) -> None:
        _check(isinstance(self.fewest_assignments, int) and 1 <= self.fewest_assignments <= self.max_assignments,
               f"fewest_assignments={self.fewest_assignments}: between 1 and max_assignments={self.max_assignments}")
        _check(self.padding in PADDINGS, f"padding={self.padding!r}: use one of {', '.join(PADDINGS)}")
        weights = self.kind_weights
        if weights is not None:
            object.__setattr__(self, "kind_weights", tuple(weights))
            _check(len(weights) == 3 and all(w >= 0 for w in weights) and sum(weights) > 0,
                   f"kind_weights={list(weights)}: three shares (0-var, 1-var, 2-var), none negative, not all 0")
            _check(self.variables_in_training or weights[1] == weights[2] == 0,
                   "kind_weights draws variable sequences, but variables_in_training=false trains none")
        changed = [k for k, v in CONTEXT_DEFAULTS.items() if getattr(self, k) != v]
        _check(not (changed and self.is_variant), f"{', '.join(changed)} with a task variant: a variant renders "
                                                  f"its own contexts; leave the context distribution at the study's")

    def _check_spelling(self) -> None:
        """Each spelling one word per token, every word of the readable forms distinct (one line)."""
        for key, size in (("variable_spelling", self.n_vars), ("number_spelling", self.modulus)):
            words = getattr(self, key)
            if words is not None:
                object.__setattr__(self, key, tuple(words))
                _check(len(words) == size, f"{key}: {len(words)} words for {size} {key.split('_')[0]}s")
        for word in self.variable_spelling or ():  # what a sequence can hold and the readable form reads back
            _check(re.fullmatch(r"[A-Za-z]\w*", word) is not None and word.upper() != "PAD",
                   f"variable name {word!r}: cannot be written in a sequence and read back; a name is a letter, "
                   f"then letters, digits or _ (not PAD), e.g. x1")
        for word in self.number_spelling or ():
            _check(re.fullmatch(r"\w+", word) is not None, f"number name {word!r}: a word of letters, digits and _")
        sign = self.operator_spelling
        _check(sign is None or (sign.strip() == sign and sign != "" and not set(sign) & set("=,?") and
                                not re.search(r"\s", sign)),
               f"operator name {sign!r}: a word or symbol without spaces, '=', ',' or '?'")
        words = [*self.variable_names, *self.number_words, self.sign, "=", "PAD", *self.noise_words]
        counts = Counter(words)  # linear: a declaration may name many variables
        twice = sorted(w for w, n in counts.items() if n > 1 or (w.upper() == "PAD" and w != "PAD"))
        _check(not twice, f"the readable forms would spell {twice} for two tokens; give every variable, number "
                          f"and the operator its own word (PAD and '=' are taken)")

    def _too_many_assignments(self) -> str:
        """Why max_assignments may not exceed n_vars, in the words of the task asked for."""
        head = f"max_assignments={self.max_assignments} exceeds n_vars={self.n_vars}: "
        if self.reassign_rate > 0:
            return (head + f"with reassign_rate={self.reassign_rate} a context that reassigns nothing still assigns "
                           f"up to {self.max_assignments} distinct variables; use max_assignments <= {self.n_vars} "
                           f"or raise n_vars")
        return head + f"each variable is assigned at most once; use max_assignments <= {self.n_vars} or raise n_vars"

    def _check_operation(self) -> None:
        _check(self.operation in OPERATIONS,
               f"operation={self.operation!r}: use one of {', '.join(OPERATIONS)}")
        table = self.operation_table
        if self.operation != "table":
            _check(table is None, f"operation_table is given but operation={self.operation!r}: "
                                  f"set operation=table to use it, or drop the table")
            return
        p = self.modulus
        _check(table is not None and len(table) == p and all(len(row) == p for row in table),
               f"operation=table needs operation_table: {p} rows of {p} answers (row x, column y)")
        bad = [v for row in table for v in row if not (_is_int(v) and 0 <= v < p)]  # type: ignore[union-attr]
        _check(not bad, f"operation_table holds {bad[0]!r}: every answer is a number 0..{p - 1}" if bad else "")

    def answer(self, x: Any, y: Any) -> Any:
        """The answer of the operands ``x``, ``y`` (ints or integer tensors): ``(x + y) mod p`` for the
        study, or the task's other operation. The one place a label is computed.

        >>> TaskConfig().answer(17, 19), TaskConfig(operation="subtract").answer(3, 5)
        (36, 57)
        """
        p = self.modulus
        if self.operation == "add":
            return (x + y) % p
        if self.operation == "subtract":
            return (x - y) % p
        if self.operation == "multiply":
            return (x * y) % p
        if isinstance(x, int) or not hasattr(x, "new_tensor"):
            return self.operation_table[int(x)][int(y)]  # type: ignore[index]
        return x.new_tensor(self.operation_table)[x, y]

    @property
    def sign(self) -> str:
        """The operator's word in the readable forms (``+`` for the study; ``operator_spelling`` where declared)."""
        return self.operator_spelling or OPERATION_SIGNS[self.operation]

    @property
    def number_words(self) -> tuple[str, ...]:
        """How the readable forms spell the numbers 0..p-1 (``number_spelling``, else their digits)."""
        return self.number_spelling or tuple(str(n) for n in range(self.modulus))

    def _check_variants(self) -> None:
        for name, what in (("reassign_rate", "the chance that a context reassigns a variable"),
                           ("noise_rate", "the chance that a free context position holds a filler word"),
                           ("chain_rate", "the chance that a variable operand is reached through a chain")):
            value = getattr(self, name)
            _check(0 <= value <= 1, f"{name}={value}: {what} must be in [0, 1]")
        needed = self.min_assignments
        if needed > 2:
            asked = " and ".join(f"{k}={getattr(self, k)}" for k in ("reassign_rate", "chain_rate")
                                 if getattr(self, k) > 0)
            room = self.context_len // 2
            _check(needed <= room,
                   f"seq_len={self.seq_len} is too short for {asked}: a 2-var context then needs {needed} "
                   f"assignments and the {self.context_len}-token context holds {room}; "
                   f"use seq_len >= {QUERY_LENGTH + 2 * needed}")
            _check(self.max_assignments >= needed,
                   f"max_assignments={self.max_assignments} is too few for {asked}: a 2-var context then "
                   f"needs {needed} assignments; use max_assignments >= {needed}")
        if self.chain_rate > 0:
            few = [(side, len(allowed)) for side, allowed in (("left", self.allowed_left),
                                                              ("right", self.allowed_right)) if len(allowed) < 3]
            _check(not few, f"chain_rate={self.chain_rate} needs at least 3 variables allowed on each side (a "
                            f"chain c=b of a 2-var query uses a third variable b), but only "
                            f"{few[0][1] if few else 0} are allowed on the {few[0][0] if few else ''} side; "
                            f"raise n_vars or forbid fewer variables")

    @property
    def is_variant(self) -> bool:
        """Does this task use a variant (reassignment, noise words or chains)?"""
        return any(getattr(self, name) != default for name, default in TASK_VARIANTS.items())

    @property
    def min_assignments(self) -> int:
        """Assignments the fullest context needs: a 2-var query, plus a chain's ``c=b`` and a
        reassignment where those variants are on (2 for the study's task)."""
        return 2 + (self.chain_rate > 0) + (self.reassign_rate > 0)

    # The vocabulary of SPEC section 1, derived from the modulus and variable count.
    @property
    def plus_token(self) -> int:
        return self.modulus

    @property
    def equals_token(self) -> int:
        return self.modulus + 1

    @property
    def pad_token(self) -> int:
        return self.modulus + 2

    @property
    def first_noise_token(self) -> int:
        """The first filler word's token (fillers lie between PAD and the variables)."""
        return self.modulus + 3

    @property
    def n_noise_words(self) -> int:
        """Filler words in the vocabulary: :data:`NOISE_WORDS` with noise, none without."""
        return len(NOISE_WORDS) if self.noise_rate > 0 else 0

    @property
    def noise_words(self) -> tuple[str, ...]:
        return NOISE_WORDS[: self.n_noise_words]

    @property
    def first_var_token(self) -> int:
        return self.modulus + 3 + self.n_noise_words

    @property
    def d_vocab(self) -> int:
        return self.first_var_token + self.n_vars

    @property
    def context_len(self) -> int:
        return self.seq_len - QUERY_LENGTH

    @property
    def variable_names(self) -> tuple[str, ...]:
        """How the variables are named (``variable_spelling``, else a, b, ...)."""
        return self.variable_spelling or tuple(VARIABLE_LETTERS[: self.n_vars])

    def var_index(self, name: str) -> int:
        return self.variable_names.index(name)

    @property
    def allowed_left(self) -> tuple[int, ...]:
        """Variable indices allowed as the left operand in training."""
        return tuple(i for i, v in enumerate(self.variable_names) if v not in self.left_forbidden)

    @property
    def allowed_right(self) -> tuple[int, ...]:
        return tuple(i for i, v in enumerate(self.variable_names) if v not in self.right_forbidden)

    @property
    def zero_var_rows(self) -> int:
        """0-var rows per training pair in the study's row table: one per variable."""
        return self.n_vars

    @property
    def two_var_rows(self) -> int:
        """Candidate 2-var rows per training pair: one per variable allowed on the left."""
        return len(self.allowed_left)

    @property
    def allowed_two_var_pairs(self) -> tuple[tuple[int, int], ...]:
        """Ordered (v, w), v != w, both in allowed slots: 92 at the defaults."""
        return tuple((v, w) for v in self.allowed_left for w in self.allowed_right if v != w)

    def restricted_two_var_pairs(self, n_forbidden: int) -> tuple[tuple[int, int], ...]:
        """Ordered pairs with exactly ``n_forbidden`` operands in forbidden slots (36 / 4)."""
        left, right = set(self.allowed_left), set(self.allowed_right)
        return tuple((v, w) for v in range(self.n_vars) for w in range(self.n_vars)
                     if v != w and (v not in left) + (w not in right) == n_forbidden)


@dataclass(frozen=True)
class ModelConfig(_JsonConfig):
    """The model: the study's 2-layer, single-head transformer. Field names follow TransformerLens's config.

    ``mlp_blocks`` lists the blocks that have an MLP, as **0-based block indices**
    (``blocks.L``); the paper numbers its layers from 1, so its "layer 2" MLP is
    ``mlp_blocks=[1]``. Left unset (``None``) it is the **last block** only,
    ``[n_layers - 1]``, whatever ``n_layers`` is. The other blocks keep a
    zero, frozen MLP so TransformerLens sees the usual block layout.
    ``trained_biases=False`` keeps every bias at zero and frozen, as the reference did.

    **Absent and frozen.** A weight is *absent* when it is zero and never trained (the
    MLP of a block outside ``mlp_blocks``, the untrained biases, the parts of a matrix
    the disentangled residual forbids); it is *frozen* when it keeps its initial,
    non-zero value and is never trained (the embeddings of ``embeddings="orthogonal"``).
    :func:`compose_lens.model.tl.absent_names` and :func:`~compose_lens.model.tl.frozen_names`
    list them; the trainer never hands either to the optimizer.

    **The theory's idealisations** (docs/idealised.md), all off by default:

    * ``embeddings="orthogonal"``: token and position embeddings are fixed orthonormal
      directions of the embedding block (``embedding_basis="onehot"``: the unit vectors
      e_0, e_1, ... with the tokens first and the positions after them; ``"random"``: a
      random orthonormal set drawn from ``init_seed``), frozen. ``embedding_overlap=c``
      (0 <= c < 1) bends the token embeddings towards one shared direction so that every
      two distinct tokens have cosine exactly c (positions stay orthonormal): the knob
      from the idealisation (c = 0) towards correlated embeddings.
    * ``residual="disentangled"``: the residual stream is cut into equal blocks, one per
      writer (the embeddings, then each layer's attention, then its MLP if it has one;
      :meth:`residual_blocks`), and each writer writes only into its own block. A layer
      still reads the whole stream, in which only the blocks of earlier writers are
      non-zero: it reads their concatenation, as in the disentangled transformer of the
      theory literature, and which layer wrote what is readable by construction.
    """

    n_layers: int = 2  # transformer blocks (the paper's layers 1 and 2 are blocks.0 and blocks.1)
    d_model: int = 128  # width of the residual stream
    d_head: int = 128  # width of each attention head's queries, keys and values
    n_heads: int = 1  # attention heads per block
    d_mlp: int = 512  # neurons of each MLP
    act_fn: str = "relu"  # the MLP's activation, as TransformerLens names it (relu, gelu, ...)
    normalization_type: str | None = None  # None: no LayerNorm (the study); LN or LNPre as in TransformerLens
    n_ctx: int = 16  # positions the model reads: the task's seq_len
    d_vocab: int = 74  # input tokens: the numbers, the variables and the symbols of the task's vocabulary
    d_vocab_out: int = 59  # output logits: one per answer, the modulus
    mlp_blocks: tuple[int, ...] | None = None  # None: (n_layers - 1,), the last block (0-based)
    trained_biases: bool = False
    init: str = "study"  # study: every matrix N(0, (0.8/sqrt(d_model))^2); tl4: boot_native's scaling
    init_seed: int = 42  # seed of the initial weights
    embeddings: str = "learned"  # learned (the study) or orthogonal (frozen orthonormal directions)
    embedding_basis: str = "onehot"  # orthogonal embeddings: onehot unit vectors, or random (from init_seed)
    embedding_overlap: float = 0.0  # orthogonal embeddings: the cosine between two distinct tokens
    residual: str = "additive"  # additive (the study) or disentangled (one residual block per writer)
    # The order the model reads its positions in, where it is not left to right: read_order[i] is the place
    # of position i (an infix query "x op y =" mapped onto the study's "op x y =", compose_lens.data.declaration);
    # position i attends to j iff read_order[j] <= read_order[i]. None: the causal order, as the study.
    read_order: tuple[int, ...] | None = None

    SILENT_DEFAULTS = {**MODEL_VARIANTS, "read_order": None}
    RENAMED_KEYS = {"mlp_layers": "mlp_blocks"}  # runs written before the key said it counts blocks

    def __post_init__(self) -> None:
        check_types(self)
        _check_positive_ints(self, "n_layers", "d_model", "d_head", "n_heads", "d_mlp", "n_ctx", "d_vocab",
                             "d_vocab_out")
        object.__setattr__(self, "mlp_blocks",
                           (self.n_layers - 1,) if self.mlp_blocks is None else tuple(self.mlp_blocks))
        _check(self.act_fn in ("relu", "gelu", "gelu_new", "silu"),
               f"act_fn={self.act_fn!r}: use one of relu, gelu, gelu_new, silu")
        _check(self.init in ("study", "tl4"),
               f"init={self.init!r}: use study (the study's initialisation) or tl4 (TransformerLens 4's)")
        _check(self.normalization_type in (None, "LN", "LNPre", "RMS", "RMSPre"),
               f"normalization_type={self.normalization_type!r}: use null, LN, LNPre, RMS or RMSPre")
        _check(seed_problem("init_seed", self.init_seed) is None, seed_problem("init_seed", self.init_seed) or "")
        bad = [i for i in self.mlp_blocks if not 0 <= i < self.n_layers]
        _check(not bad, f"mlp_blocks={list(self.mlp_blocks)}: block(s) {bad} do not exist in a "
                        f"{self.n_layers}-layer model (mlp_blocks are block indices from 0, blocks.0 to "
                        f"blocks.{self.n_layers - 1}: the paper's layer 2 is 1)")
        twice = sorted({i for i in self.mlp_blocks if self.mlp_blocks.count(i) > 1})
        _check(not twice, f"mlp_blocks={list(self.mlp_blocks)}: block(s) {twice} named twice; a block has one MLP "
                          f"or none: list each block once, e.g. mlp_blocks={sorted(set(self.mlp_blocks))}")
        _check(self.d_vocab_out <= self.d_vocab, "d_vocab_out cannot exceed d_vocab")
        if self.read_order is not None:
            object.__setattr__(self, "read_order", tuple(self.read_order))
            _check(sorted(self.read_order) == list(range(self.n_ctx)) and self.read_order[-1] == self.n_ctx - 1,
                   f"read_order={list(self.read_order)}: a permutation of the {self.n_ctx} positions that "
                   f"keeps the last (the answer position) last")
        self._check_variants()

    # -- the idealised variants (see the class doc) -------------------------------------------

    def _check_variants(self) -> None:
        _check(self.embeddings in ("learned", "orthogonal"),
               f"embeddings={self.embeddings!r}: use learned (the study) or orthogonal (frozen orthonormal)")
        _check(self.embedding_basis in ("onehot", "random"),
               f"embedding_basis={self.embedding_basis!r}: use onehot or random")
        _check(self.residual in ("additive", "disentangled"),
               f"residual={self.residual!r}: use additive (the study) or disentangled (one block per layer)")
        _check(0.0 <= self.embedding_overlap < 1.0,
               f"embedding_overlap={self.embedding_overlap}: the cosine between tokens must be in [0, 1)")
        _check(self.embedding_basis == "onehot" or self.embeddings == "orthogonal",
               f"embedding_basis={self.embedding_basis} chooses the directions of frozen embeddings: it needs "
               f"embeddings=orthogonal (with embeddings={self.embeddings} it would change nothing); drop it")
        _check(self.embedding_overlap == 0.0 or self.embeddings == "orthogonal",
               f"embedding_overlap={self.embedding_overlap} sets frozen embeddings: it needs "
               f"embeddings=orthogonal (learned embeddings choose their own overlap)")
        if self.residual == "disentangled":
            writers = len(self.residual_writers())
            _check(self.normalization_type is None,
                   f"residual=disentangled with normalization_type={self.normalization_type!r}: a norm mixes "
                   f"the blocks; use normalization_type=null")
            _check(self.d_model % writers == 0,
                   f"residual=disentangled cuts d_model into {writers} equal blocks "
                   f"({', '.join(self.residual_writers())}): d_model={self.d_model} is not a multiple of "
                   f"{writers}; use e.g. d_model={writers * -(-self.d_model // writers)}")
        if self.embeddings == "orthogonal":
            need = self.embedding_directions()
            width = self.block_width()
            if width < need:
                writers = self.d_model // width
                raise ConfigError(
                    f"embeddings=orthogonal needs {need} orthonormal directions (d_vocab={self.d_vocab} tokens + "
                    f"n_ctx={self.n_ctx} positions{' + 1 shared' if self.embedding_overlap else ''}) in an "
                    f"embedding block of width {width}: use d_model >= {need * writers}")

    def residual_writers(self) -> tuple[str, ...]:
        """What writes into the residual stream, in order: ``embed``, then per block ``attn{L}`` and
        ``mlp{L}`` (where the block has an MLP)."""
        return ("embed", *(name for layer in range(self.n_layers)
                           for name in (f"attn{layer}", f"mlp{layer}")[:1 + (layer in self.mlp_blocks)]))

    def block_width(self) -> int:
        """Width of one writer's block: d_model / (number of writers) when disentangled, else d_model."""
        return self.d_model // len(self.residual_writers()) if self.residual == "disentangled" else self.d_model

    def residual_blocks(self) -> dict[str, tuple[int, int]]:
        """Writer -> ``(start, stop)``: the columns of the residual stream it writes. Additive: every
        writer writes everywhere ``(0, d_model)``; disentangled: consecutive blocks of equal width."""
        width = self.block_width()
        if self.residual == "additive":
            return {name: (0, self.d_model) for name in self.residual_writers()}
        return {name: (k * width, (k + 1) * width) for k, name in enumerate(self.residual_writers())}

    def embedding_directions(self) -> int:
        """How many orthonormal directions orthogonal embeddings use: one per token and per
        position, and one shared direction when the tokens overlap."""
        return self.d_vocab + self.n_ctx + (1 if self.embedding_overlap > 0 else 0)

    @property
    def idealised(self) -> bool:
        """Whether any of the theory's idealisations is on (not the study's model)."""
        return self.embeddings != "learned" or self.residual != "additive"

    @classmethod
    def for_task(cls, task: TaskConfig, **overrides: Any) -> "ModelConfig":
        """The paper model sized for ``task`` (vocabulary, outputs, context)."""
        base = dict(d_vocab=task.d_vocab, d_vocab_out=task.modulus, n_ctx=task.seq_len)
        base.update(overrides)
        return cls(**base)

    def check_task(self, task: TaskConfig) -> None:
        _check(self.d_vocab == task.d_vocab and self.d_vocab_out == task.modulus
               and self.n_ctx == task.seq_len,
               f"model (d_vocab={self.d_vocab}, d_vocab_out={self.d_vocab_out}, n_ctx={self.n_ctx}) "
               f"does not fit the task (d_vocab={task.d_vocab}, modulus={task.modulus}, "
               f"seq_len={task.seq_len}); build it with ModelConfig.for_task(task)")


STOP_AT = ("end", "generalised", "stalled", "decided")
REMEDIES = ("none", "lr_x3")
LOG_TO = ("none", "tensorboard", "wandb")  # compose_lens.core.tracking


@dataclass(frozen=True)
class TrainConfig(_JsonConfig):
    """The training recipe: the study's, plus where and how fast to run it."""

    steps: int = 30_000  # optimiser steps (the study: 30,000)
    batch_size: int = 512  # sequences per step, drawn from the training rows
    lr: float = 1e-3  # AdamW's learning rate, constant
    beta1: float = 0.9  # AdamW's first-moment decay
    beta2: float = 0.999  # AdamW's second-moment decay
    weight_decay: float = 0.02  # AdamW's decoupled weight decay
    eval_every: int = 100  # steps between evaluations of the nine pools (metrics.jsonl)
    checkpoint_every: int = 100  # steps between checkpoints (checkpoints/step_NNNNNN/)
    pool_size: int = 2000  # sequences in each of the nine pools an evaluation reads
    seed: int = 42  # seed of the data order and the evaluation pools (train.seed; the bare seed is the task's)
    device: str = "cpu"  # cpu, cuda or cuda:N; on CUDA training runs in bf16 autocast, as the study did
    precision: str = "auto"  # auto: bf16 autocast on CUDA, fp32 on CPU; or fp32 / bf16
    fast_path: str = "auto"  # auto: use the fast path where it is exact; or on / off
    threads: int = 0  # 0: the rule of compose_lens.training.train.default_threads (1 on a busy machine)
    compile: str = "off"  # torch.compile the training forward: off, on, or auto (runs of >= 5,000 steps)
    # end: train every step (the study); generalised: stop once the study's headline holds
    # (exhaustive 0-var held-out and 2-var union both >= 0.98); stalled: stop once the stall
    # detector is certain (compose_lens.training.outcome); decided: whichever comes first, or once the
    # loss has stayed diverged for outcome.DIVERGED_STOP_AFTER evaluations
    stop_at: str = "end"
    # none: the study's recipe. lr_x3: the stall remedy, three times the learning rate
    # (README 'When a run stalls'; experiments/results/stall_rate measures both)
    remedy: str = "none"
    # none, tensorboard (RUN/tensorboard/) or wandb (RUN/wandb/, offline): where each evaluation's
    # loss, pool accuracies and lr go besides metrics.jsonl (compose_lens.core.tracking)
    log_to: str = "none"
    # true: torch's deterministic algorithms (warn where an op has none) and cuBLAS's fixed workspace (compose_lens.training.train.make_deterministic)
    deterministic: bool = False

    SILENT_DEFAULTS = {"log_to": "none", "deterministic": False}

    def __post_init__(self) -> None:
        check_types(self)
        _check_positive_ints(self, "steps", "batch_size", "eval_every", "checkpoint_every", "pool_size")
        _check(self.lr > 0, f"lr={self.lr}: the learning rate must be positive")
        _check(0 <= self.beta1 < 1 and 0 <= self.beta2 < 1, "betas must be in [0, 1)")
        _check(self.weight_decay >= 0, f"weight_decay={self.weight_decay}: must be >= 0")
        _check(self.precision in ("auto", "fp32", "bf16"), f"precision={self.precision!r}: use auto, fp32 or bf16")
        _check(self.fast_path in ("auto", "on", "off"), f"fast_path={self.fast_path!r}: use auto, on or off")
        _check(self.compile in ("auto", "on", "off"), f"compile={self.compile!r}: use auto, on or off")
        _check(self.remedy in REMEDIES, f"remedy={self.remedy!r}: use {', '.join(REMEDIES)}")
        _check(self.stop_at in STOP_AT, f"stop_at={self.stop_at!r}: use {', '.join(STOP_AT)}")
        _check(self.log_to in LOG_TO, f"log_to={self.log_to!r}: use {', '.join(LOG_TO)}")
        _check(re.fullmatch(r"cpu|cuda(:\d{1,2})?", self.device) is not None,
               f"device={self.device!r}: use cpu, cuda or cuda:N")
        _check(seed_problem("seed", self.seed) is None, seed_problem("seed", self.seed) or "")
        _check(self.threads >= 0, f"threads={self.threads}: use 0 (automatic) or a positive count")


@dataclass(frozen=True)
class Origin:
    """Where a model trained outside compose-lens came from: its weights (a file, or a model object), their
    SHA-256 and the task declaration it was read with (JSON text, so the record stays hashable). Such a
    model has no training recipe compose-lens knows, so its :class:`RunConfig` records this instead."""

    weights: str
    sha256: str
    declaration: str

    TRAINED = "outside compose-lens: no training recipe is known"

    def to_dict(self) -> dict[str, Any]:
        return {"trained": self.TRAINED, "weights": self.weights, "sha256": self.sha256,
                "declaration": json.loads(self.declaration)}


# What a model trained outside compose-lens does not have: the settings of a training recipe (its split is
# in its declaration, in its own words; its initialisation was never compose-lens's)
RECIPE_TASK_KEYS = ("f", "r", "seed", "left_forbidden", "right_forbidden", "variables_in_training")
RECIPE_MODEL_KEYS = ("init", "init_seed")


@dataclass(frozen=True)
class RunConfig(_JsonConfig):
    """Everything a training run needs: the three configurations together. A model trained outside
    compose-lens has an :class:`Origin` instead of a training recipe: its records (:meth:`to_dict`, every
    result file's provenance) hold where it came from and no ``train`` section, nor the task's and the
    model's recipe keys (:data:`RECIPE_TASK_KEYS`, :data:`RECIPE_MODEL_KEYS`): those would be
    compose-lens's defaults, a training that never happened."""

    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    origin: Origin | None = None  # a model trained outside compose-lens (see the class doc)

    def __post_init__(self) -> None:
        self.model.check_task(self.task)

    def to_dict(self) -> dict[str, Any]:
        if self.origin is None:
            return {"task": self.task.to_dict(), "model": self.model.to_dict(), "train": self.train.to_dict()}
        task = {k: v for k, v in self.task.to_dict().items() if k not in RECIPE_TASK_KEYS}
        model = {k: v for k, v in self.model.to_dict().items() if k not in RECIPE_MODEL_KEYS}
        return {"task": task, "model": model, "origin": self.origin.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RunConfig":
        _check(isinstance(data, dict), f"a run config is a JSON object {{\"task\": {{...}}, "
                                       f"\"model\": {{...}}, \"train\": {{...}}}}, not {_type_word(data)}")
        unknown = sorted(set(data) - {"task", "model", "train"})
        _check(not unknown, f"unknown run-config section(s) {unknown}; use task, model, train")
        for section in ("task", "model", "train"):
            _check(isinstance(data.get(section, {}), dict),
                   f"the {section} section must be a JSON object, not {_type_word(data.get(section))}")
        task = TaskConfig.from_dict(data.get("task", {}))
        model_data = dict(data.get("model", {}))
        sized = ModelConfig.for_task(task).to_dict()
        sized.pop("mlp_blocks")  # unset: the last block of the model's own n_layers (ModelConfig)
        model = ModelConfig.from_dict({**sized, **model_data})
        return cls(task=task, model=model, train=TrainConfig.from_dict(data.get("train", {})))

    def with_overrides(self, assignments: list[str]) -> "RunConfig":
        """Apply ``section.key=value`` (or bare ``key=value``) overrides from the CLI.

        A bare key is looked up in task, then model, then train. Values are JSON
        (``0.5``, ``true``, ``[1]``) or plain strings.
        """
        data = self.to_dict()  # every section in full: the task and model variants and the tracking setting too,
        data.update({s: getattr(self, s).to_dict(full=True) for s in ("task", "model", "train")})  # so --set names them
        task_changed = False
        for item in assignments:
            _check("=" in item, f"--set {item!r}: write key=value, e.g. --set f=0.5")
            key, raw = item.split("=", 1)
            _check(key not in ("mlp_layers", "model.mlp_layers"),
                   f"--set {key}: mlp_layers is now mlp_blocks: 0-based block indices (blocks.L); "
                   f"the paper's layer 2 is mlp_blocks=[1]")
            try:
                value = json.loads(raw)
            except (ValueError, RecursionError):  # not JSON (or absurd JSON): the plain string
                value = raw
            if "." in key:
                section, name = key.split(".", 1)
                _check(section in data and name in data[section],
                       f"--set {key}: no such setting; see `compose-lens train --help` for the sections")
            else:
                owners = [s for s in ("task", "model", "train") if key in data[s]]
                _check(bool(owners), f"--set {key}: no such setting in task, model or train")
                section, name = owners[0], key
            data[section][name] = value
            task_changed |= section == "task"
            if section == "model" and name == "n_layers" and not any(
                    a.split("=", 1)[0] in ("mlp_blocks", "model.mlp_blocks") for a in assignments):
                data["model"]["mlp_blocks"] = None  # the last block of the new depth (ModelConfig)
            if section == "task" and name == "n_vars":  # re-derive slots unless set explicitly
                for side in ("left_forbidden", "right_forbidden"):
                    if not any(a.split("=", 1)[0] in (side, f"task.{side}") for a in assignments):
                        data["task"][side] = None
        if task_changed:  # keep the model sized for the task unless the user set those too
            task = TaskConfig.from_dict(data["task"])
            sized = ModelConfig.for_task(task).to_dict()
            for name in ("d_vocab", "d_vocab_out", "n_ctx"):
                if not any(a.split("=", 1)[0] in (name, f"model.{name}") for a in assignments):
                    data["model"][name] = sized[name]
        return RunConfig.from_dict(data)
