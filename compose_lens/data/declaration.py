"""A researcher's own task, declared in their own token ids, and its map onto the study's coordinates.

compose-lens asks its questions (does a head bind values to variables, does one MLP compute the
operation, does layer-2 routing glue them) of any model trained on a task of the study's family:
in-context variable assignment, then a binary operation on numbers mod p. A
:class:`TaskDeclaration` says how a researcher's model spells that task (docs/own-model.md; each
field's comment says what it sets): which token ids are the numbers, variables, operator, ``=``
and PAD (any order, any offset; other ids are ignored), the context and its distribution, the
query form (``prefix`` ``op x y =``, the study's, or ``infix`` ``x op y =``), the printed names,
the operation, the output (``numbers``: p classes, as the study; ``vocab``: one per id, read at
the numbers' ids) and the split the model was trained on: held-out pairs (listed, or the
study's procedure from ``f`` and ``seed``) and slot restrictions, a ``split_file``, or nothing
held out (``"split": "none"`` in a file, ``**NOTHING_HELD_OUT`` in Python; then the held-out and
forbidden-slot pools are absent, :func:`compose_lens.data.sampler.absent_pools`, and the exhaustive
sets empty).

The declaration is written in Python or in a JSON or TOML file that the CLI reads (``--task FILE``)::

    {"modulus": 23, "numbers": 10, "variables": [2, 3, 4, 5, 6, 7, 8, 9], "operator": 33,
     "equals": 34, "pad": 0, "vocab_size": 35, "seq_len": 16, "max_assignments": 4,
     "query": "infix", "operation": "subtract", "output": "vocab",
     "split": {"f": 0.7, "seed": 0}}

``numbers`` is the first of p consecutive ids or the list of all p; ``variables`` is a list of ids
(``variable_names`` names them, default ``a``, ``b``, ...). :func:`study_declaration` gives the
study's task as a declaration, bit for bit.

**The study's coordinates.** Every analysis is written once, in the study's coordinates: the
numbers are tokens 0..p-1 and the output classes, then the operator, ``=``, PAD and the
variables; the query reads ``op x y =``. A declared task maps onto them exactly
(:meth:`TaskDeclaration.task`; :meth:`~TaskDeclaration.to_user` maps token rows back), and so do
the researcher's weights (:func:`study_coordinates`): the embedding's rows, the positions and the
unembedding's answer rows are re-indexed, nothing is fitted, and the logits over the numbers are
the researcher's model's own. An ``infix`` query swaps the operator's and the left operand's
positions; the model then reads its positions in the researcher's order
(:attr:`compose_lens.core.config.ModelConfig.read_order`), so its causal mask is the one trained.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

from compose_lens.core.config import (CONTEXT_DEFAULTS, MAX_MODULUS, MAX_VARIABLES, OPERATIONS, QUERY_LENGTH,
                                 VARIABLE_LETTERS, ModelConfig, RunConfig, TaskConfig, check_types)
from compose_lens.data.split import Split
from compose_lens.core.errors import ComposeLensError
from compose_lens.core.files import load_json, load_toml, not_there

QUERY_FORMS = ("prefix", "infix")
OUTPUTS = ("numbers", "vocab")
# The TransformerLens config fields a researcher's model is read by (positional_embedding_type must be
# "standard"; the rest of a bridge config is what it means for a small native model)
TL_FIELDS = ("n_layers", "d_model", "d_head", "n_heads", "d_mlp", "act_fn", "normalization_type", "n_ctx",
             "d_vocab", "d_vocab_out")
TL_INTS = ("n_layers", "d_model", "d_head", "n_heads", "d_mlp", "n_ctx", "d_vocab", "d_vocab_out")  # whole numbers
_SPLIT_KEYS = ("f", "r", "seed", "left_forbidden", "right_forbidden", "heldout_pairs")
# a model trained on every addition pair and every operand slot: a file's "split": "none"
NOTHING_HELD_OUT = {"heldout_pairs": (), "left_forbidden": (), "right_forbidden": ()}
NO_SPLIT = "none"
MAX_VOCAB = 1_000_000  # the largest vocabulary a declaration may name (its ids are checked one by one)


class DeclarationError(ComposeLensError, ValueError):
    """A task declaration that cannot describe a task of the study's family (one line says why)."""


@dataclass(frozen=True)
class TaskDeclaration:
    """A task of the study's family in a researcher's own token ids (see the module doc)."""

    modulus: int
    numbers: tuple[int, ...]  # the id of each number 0..p-1
    variables: tuple[int, ...]  # the id of each variable
    operator: int
    equals: int
    pad: int
    vocab_size: int  # the model's d_vocab (ids the task does not use are never read)
    variable_names: tuple[str, ...] = ()  # default: a, b, c, ...
    number_names: tuple[str, ...] = ()  # how the numbers 0..p-1 print and parse (default: their digits)
    operator_name: str | None = None  # how the operator prints and parses (default: the operation's sign)
    seq_len: int = 16
    max_assignments: int = 6
    fewest_assignments: int = 1  # a context holds n ~ U{fewest..max_assignments} (at least 2 for 2-var)
    padding: str = "scattered"  # scattered (the study), left (all before the context), right (all after it)
    kind_weights: tuple[float, ...] | None = None  # shares of 0-, 1-, 2-var training sequences (None: the study's)
    query: str = "prefix"  # prefix: op x y = (the study); infix: x op y =
    operation: str = "add"  # add (the study's), subtract, multiply
    operation_table: tuple[tuple[int, ...], ...] | None = None  # or any p x p table
    output: str = "numbers"  # numbers: p output classes in number order; vocab: one per vocabulary id
    f: float | None = None  # the study's procedure's fraction of training pairs (None: the study's 0.7)
    r: float = 1.0
    seed: int = 42
    left_forbidden: tuple[str, ...] | None = None  # by variable name; None: the study's rule (last two)
    right_forbidden: tuple[str, ...] | None = None  # None: the first two
    heldout_pairs: tuple[tuple[int, int], ...] | None = None  # the pairs held out of training (else f, seed)
    split_file: str | None = None  # a compose-lens split.json instead of f / r / seed

    def __post_init__(self) -> None:
        """Check the whole declaration before anything is built: sizes first (p and the vocabulary
        bounded), then every field's type, the ids' roles, contradictions, and last the task in the
        study's coordinates (whose check holds the names' rule, as for a run's task)."""
        if isinstance(self.split_file, os.PathLike):
            object.__setattr__(self, "split_file", os.fspath(self.split_file))
        p = self.modulus
        _need(isinstance(p, int) and not isinstance(p, bool) and 2 <= p <= MAX_MODULUS,
              f"modulus={p!r}: an integer between 2 and {MAX_MODULUS}")
        _need(not isinstance(self.vocab_size, int) or isinstance(self.vocab_size, bool) or
              self.vocab_size <= MAX_VOCAB, f"vocab_size={self.vocab_size}: at most {MAX_VOCAB:,} ids")
        named = self.variable_names != ()  # else the default names a, b, ... (26 of them)
        if not named:
            count = len(self.variables) if isinstance(self.variables, (list, tuple)) else 0  # else refused by type
            object.__setattr__(self, "variable_names", tuple(VARIABLE_LETTERS[:count]))
        try:
            check_types(self)
        except ComposeLensError as exc:
            raise DeclarationError(str(exc)) from None
        for key in ("numbers", "variables", "variable_names", "number_names", "kind_weights", "left_forbidden",
                    "right_forbidden"):
            if getattr(self, key) is not None:
                object.__setattr__(self, key, tuple(getattr(self, key)))
        for key in ("operation_table", "heldout_pairs"):
            if getattr(self, key) is not None:
                object.__setattr__(self, key, tuple(tuple(row) for row in getattr(self, key)))
        names = self.variable_names
        _need(len(self.numbers) == p, f"numbers: {len(self.numbers)} ids for modulus {p}; give p ids "
                                      f"or the first of p consecutive ids")
        n_vars = len(self.variables)
        _need(2 <= n_vars <= MAX_VARIABLES, f"variables: {n_vars} ids; give between 2 and {MAX_VARIABLES}")
        _need(named or n_vars <= len(VARIABLE_LETTERS), f"variables: {n_vars} ids, but the default names a..z "
                                                        f"name {len(VARIABLE_LETTERS)}; name them with variable_names")
        _need(len(names) == len(self.variables), f"variable_names: {len(names)} names for "
                                                 f"{len(self.variables)} variables")
        _need(len(set(names)) == len(names), "variable_names: every variable needs its own name")
        ids = [*self.numbers, *self.variables, self.operator, self.equals, self.pad]
        twice = sorted(i for i, n in Counter(ids).items() if n > 1)
        _need(not twice, f"token id(s) {twice[:8]} have two roles; each id is one number, variable or symbol")
        _need(min(ids) >= 0 and max(ids) < self.vocab_size,
              f"token ids must lie in 0..vocab_size-1 = 0..{self.vocab_size - 1}; the largest is {max(ids)}"
              if min(ids) >= 0 else f"token ids are at least 0; {min(ids)} is given")
        _need(self.query in QUERY_FORMS, f"query={self.query!r}: use prefix (op x y =) or infix (x op y =)")
        _need(self.output in OUTPUTS, f"output={self.output!r}: use numbers (p classes) or vocab (one per id)")
        _need(self.operation in OPERATIONS, f"operation={self.operation!r}: use one of {', '.join(OPERATIONS)}")
        for side in ("left_forbidden", "right_forbidden"):
            value = getattr(self, side)
            unknown = [v for v in value or () if v not in names]
            _need(not unknown, f"{side}: unknown variable(s) {unknown}; the variables are {', '.join(names)}")
        self._check_split_sources()
        if self.heldout_pairs is not None and self.r >= 1:  # seed chooses nothing: the pairs are the split and
            object.__setattr__(self, "seed", TaskConfig.seed)  # every training pair keeps its 2-var rows
        self.task  # the study-coordinates task checks the rest (context room, split, table) in one line

    def _check_split_sources(self) -> None:
        """One source for each part of the split: a ``split_file`` holds it all, and listed
        ``heldout_pairs`` replace the procedure that f drives (either beside the other would be ignored)."""
        defaults = {f.name: f.default for f in fields(self)}
        given = [k for k in ("heldout_pairs", "left_forbidden", "right_forbidden") if getattr(self, k) is not None]
        given += [k for k in ("f", "r", "seed") if getattr(self, k) != defaults[k]]  # f: given at all
        if self.split_file is not None and given:
            raise DeclarationError(f"split_file and {', '.join(given)} both say what training held out; the split "
                                   f"file holds it all: give the file alone, or drop split_file")
        if self.heldout_pairs is not None and self.f is not None:
            raise DeclarationError(f"heldout_pairs and f={self.f} both say which pairs training held out; give the "
                                   f"pairs, or f (and seed) for the study's procedure, not both")
        _need(len(self.heldout_pairs or ()) <= self.modulus ** 2,
              f"heldout_pairs: {len(self.heldout_pairs or ())} pairs, but modulus {self.modulus} has "
              f"{self.modulus ** 2}")

    # -- the study's coordinates -------------------------------------------------------------------

    @property
    def task(self) -> TaskConfig:
        """The task in the study's coordinates (numbers first, then op, ``=``, PAD, the variables)."""
        letters = tuple(VARIABLE_LETTERS[: len(self.variables)])
        try:
            return TaskConfig(modulus=self.modulus, n_vars=len(self.variables), seq_len=self.seq_len,
                              max_assignments=self.max_assignments, fewest_assignments=self.fewest_assignments,
                              padding=self.padding, kind_weights=self.kind_weights,
                              f=TaskConfig.f if self.f is None else self.f, r=self.r, seed=self.seed,
                              left_forbidden=self.left_forbidden, right_forbidden=self.right_forbidden,
                              operation=self.operation, operation_table=self.operation_table,
                              variable_spelling=None if self.variable_names == letters else self.variable_names,
                              number_spelling=self.number_names or None, operator_spelling=self.operator_name)
        except ComposeLensError as exc:
            raise DeclarationError(f"the declared task: {exc}") from None

    @property
    def holds_out_nothing(self) -> bool:
        """Was the model trained on every pair and every operand slot (``"split": "none"``)?"""
        return self.split_file is None and all(getattr(self, k) == v for k, v in NOTHING_HELD_OUT.items())

    @property
    def token_ids(self) -> torch.Tensor:
        """(d_vocab of :attr:`task`,) the researcher's id of each study-coordinates token."""
        return torch.tensor([*self.numbers, self.operator, self.equals, self.pad, *self.variables])

    @property
    def positions(self) -> tuple[int, ...]:
        """The researcher's position of each study-coordinates position (the query's order)."""
        order = list(range(self.seq_len))
        if self.query == "infix":
            start = self.seq_len - QUERY_LENGTH  # study: op x y = ; infix: x op y =
            order[start], order[start + 1] = start + 1, start
        return tuple(order)

    @property
    def answer_rows(self) -> torch.Tensor:
        """(p,) the rows of the researcher's unembedding that hold the answers 0..p-1."""
        return torch.arange(self.modulus) if self.output == "numbers" else torch.tensor(self.numbers)

    @property
    def d_vocab_out(self) -> int:
        """The researcher's number of output classes."""
        return self.modulus if self.output == "numbers" else self.vocab_size

    def to_user(self, tokens: torch.Tensor) -> torch.Tensor:
        """Study-coordinates token rows (B, seq_len) as the researcher's model reads them."""
        user = torch.empty_like(tokens)
        user[:, list(self.positions)] = self.token_ids.to(tokens.device)[tokens]
        return user

    def from_user(self, tokens: torch.Tensor, where: str = "a sequence") -> torch.Tensor:
        """The researcher's token rows (B, seq_len), in their ids and positions, in the study's coordinates
        (the inverse of :meth:`to_user`); an id the task does not use is refused in one line."""
        index = torch.full((self.vocab_size,), -1, dtype=torch.long)
        index[self.token_ids] = torch.arange(len(self.token_ids))
        bad = sorted({int(t) for t in tokens.flatten() if not 0 <= int(t) < self.vocab_size or index[int(t)] < 0})
        if bad:
            raise DeclarationError(f"{where}: token id(s) {bad[:5]} are not ids of the declared task (its numbers, "
                                   f"variables, operator, '=' and PAD)")
        if tokens.shape[-1] != self.seq_len:
            raise DeclarationError(f"{where}: {tokens.shape[-1]} tokens; the declared task's sequences have "
                                   f"{self.seq_len}")
        return index[tokens][:, list(self.positions)]

    def split(self) -> Split:
        """The split the model was trained on, in the study's coordinates."""
        try:
            if self.split_file is not None:
                return Split.load(self.split_file, self.task)
            if self.heldout_pairs is not None:
                return Split.from_heldout(self.task, torch.tensor(self.heldout_pairs, dtype=torch.long))
            return Split.from_task(self.task)
        except ComposeLensError as exc:
            raise DeclarationError(f"the declared split: {exc}") from None

    # -- files ---------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The declaration as a file holds it (the split's keys under ``split``)."""
        data = json.loads(json.dumps(asdict(self)))  # tuples (of tuples) as lists, as a file holds them
        split = {k: data.pop(k) for k in _SPLIT_KEYS}
        if self.heldout_pairs is not None:  # listed pairs replace the procedure f drives (a file may not give both)
            del split["f"]
            if self.r >= 1:  # and seed chooses nothing: every training pair keeps its 2-var rows
                del split["seed"]
        if self.holds_out_nothing and self.r == TaskConfig().r:
            data["split"] = NO_SPLIT
        elif self.split_file is None:
            data["split"] = {k: v for k, v in split.items() if v is not None}
        return {k: v for k, v in data.items()  # the study's context distribution is not written out
                if v is not None and v != [] and CONTEXT_DEFAULTS.get(k, object()) != v}

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def from_dict(cls, data: Any, where: str = "the task declaration") -> "TaskDeclaration":
        """Read a declaration (a file's JSON or TOML); a problem is one line naming ``where``."""
        if not isinstance(data, dict):
            raise DeclarationError(f"{where}: must be an object of settings, not {type(data).__name__}")
        data = dict(data)
        known = {f.name for f in fields(cls)} - set(_SPLIT_KEYS)
        unknown = sorted(set(data) - known - {"split"})
        if unknown:
            raise DeclarationError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}; known: "
                                   f"{', '.join(sorted(known | {'split'}))}")
        split = data.pop("split", {})
        if split == NO_SPLIT:
            split = {k: list(v) for k, v in NOTHING_HELD_OUT.items()}
        if not isinstance(split, dict):
            raise DeclarationError(f"{where}: split={split!r}: use \"{NO_SPLIT}\" (trained on every pair and slot) "
                                   f"or an object like {{\"f\": 0.7, \"seed\": 42}} or {{\"heldout_pairs\": [[0, 1]]}}")
        bad = sorted(set(split) - set(_SPLIT_KEYS))
        if bad:
            raise DeclarationError(f"{where}: unknown split key(s) {', '.join(bad)}; known: {', '.join(_SPLIT_KEYS)}")
        if "split_file" in data and split:
            raise DeclarationError(f"{where}: split_file and split ({', '.join(split)}) both say what training held "
                                   f"out; the split file holds it all: give one of them")
        if "heldout_pairs" in split and "f" in split:
            raise DeclarationError(f"{where}: split gives heldout_pairs and f: both say which pairs training held "
                                   f"out; give the pairs, or f (and seed) for the study's procedure, not both")
        data.update(split)
        missing = [k for k in ("modulus", "numbers", "variables", "operator", "equals", "pad") if k not in data]
        if missing:
            raise DeclarationError(f"{where}: missing {', '.join(missing)} (see docs/own-model.md)")
        p, first = data["modulus"], data["numbers"]
        if isinstance(first, int) and not isinstance(first, bool):  # the first of p consecutive ids
            if not (isinstance(p, int) and not isinstance(p, bool) and 2 <= p <= MAX_MODULUS):
                raise DeclarationError(f"{where}: modulus={p!r}: an integer between 2 and {MAX_MODULUS}")
            data["numbers"] = list(range(first, first + p))
        if "vocab_size" not in data:  # one past the largest id (ids of another type are refused by name below)
            ids = [v for k in ("numbers", "variables") if isinstance(data[k], list) for v in data[k]]
            ids += [data[k] for k in ("operator", "equals", "pad")]
            data["vocab_size"] = 1 + max((i for i in ids if isinstance(i, int) and not isinstance(i, bool)),
                                         default=0)
        try:
            return cls(**data)
        except DeclarationError as exc:
            raise DeclarationError(f"{where}: {str(exc).removeprefix('the declared task: ')}") from None

    @classmethod
    def load(cls, path: str | Path) -> "TaskDeclaration":
        """A declaration from a JSON or TOML file (``--task FILE``; ``.toml`` in any case is TOML). A relative
        ``split_file`` is read from the task file's folder, where it travels with it."""
        path = Path(path)
        if not_there(path):
            raise DeclarationError(f"{path}: {not_there(path)}; give a JSON or TOML task declaration")
        data = load_toml(path) if path.suffix.lower() == ".toml" else load_json(path)
        if isinstance(data, dict) and isinstance(data.get("split_file"), str):
            found = path.parent / data["split_file"]  # an absolute one stays itself
            if not_there(found):
                raise DeclarationError(f"{path}: split_file {data['split_file']!r}: {not_there(found)} at {found} "
                                       f"(a relative split_file is read from the task file's folder)")
            data["split_file"] = str(found)
        return cls.from_dict(data, str(path))


def study_declaration(task: TaskConfig | None = None) -> TaskDeclaration:
    """The study's task (or a compose-lens task) as a declaration: its own ids, prefix query, p outputs."""
    task = task or TaskConfig()
    if task.is_variant:
        raise DeclarationError("a task variant (reassignment, noise words, chains) has no declaration yet")
    return TaskDeclaration(
        modulus=task.modulus, numbers=tuple(range(task.modulus)),
        variables=tuple(range(task.first_var_token, task.d_vocab)), operator=task.plus_token,
        equals=task.equals_token, pad=task.pad_token, vocab_size=task.d_vocab,
        variable_names=task.variable_names, number_names=task.number_spelling or (),
        operator_name=task.operator_spelling, seq_len=task.seq_len, max_assignments=task.max_assignments,
        fewest_assignments=task.fewest_assignments, padding=task.padding, kind_weights=task.kind_weights,
        operation=task.operation, operation_table=task.operation_table, f=task.f, r=task.r, seed=task.seed,
        left_forbidden=task.left_forbidden, right_forbidden=task.right_forbidden)


# the tensors the study's coordinates re-index (the rest of a state dict is the same in both)
REINDEXED = ("embed.weight", "pos_embed.weight", "unembed.weight", "unembed.bias")


@dataclass(frozen=True)
class UserWeights:
    """A researcher's TransformerLens config (:data:`TL_FIELDS`) and the tensors of :data:`REINDEXED` as they
    were given, for :func:`user_coordinates` to write back the rows the study's coordinates drop (an unused
    id's embedding, a non-number output's unembedding, the positions past ``seq_len``)."""

    config: dict[str, Any]
    tensors: dict[str, torch.Tensor]


def study_coordinates(cfg: dict[str, Any], state: dict[str, torch.Tensor], declaration: TaskDeclaration,
                      source: str) -> tuple[RunConfig, dict[str, torch.Tensor], UserWeights]:
    """A researcher's model (TransformerLens config and state dict) in the study's coordinates: the
    configuration, the re-indexed weights (module doc) and what :func:`user_coordinates` needs to write
    the model back exactly. Refuses, in one line, what cannot map."""
    d = declaration
    wrong = [k for k in TL_INTS if k in cfg and (isinstance(cfg[k], bool) or not isinstance(cfg[k], int) or cfg[k] < 1)]
    if wrong:
        raise ComposeLensError(f"{source}: {wrong[0]}={cfg[wrong[0]]!r} in its TransformerLens config; it is a "
                               f"positive integer (a model has whole layers, heads and positions)")
    if cfg.get("positional_embedding_type", "standard") != "standard":
        raise ComposeLensError(f"{source}: positional_embedding_type={cfg['positional_embedding_type']!r}; "
                               f"compose-lens reads models with learned absolute positions ('standard')")
    if cfg["d_vocab"] != d.vocab_size:
        raise ComposeLensError(f"{source}: the model has d_vocab={cfg['d_vocab']}, the task declares "
                               f"vocab_size={d.vocab_size}; declare the model's vocabulary size")
    if cfg["d_vocab_out"] != d.d_vocab_out:
        what = "p (output numbers)" if d.output == "numbers" else "vocab_size (output vocab)"
        raise ComposeLensError(f"{source}: the model has d_vocab_out={cfg['d_vocab_out']}, the task's output "
                               f"{d.output!r} means {d.d_vocab_out} = {what}; declare the model's output")
    if cfg["n_ctx"] < d.seq_len:
        raise ComposeLensError(f"{source}: n_ctx={cfg['n_ctx']} is shorter than the task's seq_len={d.seq_len}")
    state = dict(state)
    given = UserWeights({**{k: cfg.get(k) for k in TL_FIELDS}, "positional_embedding_type": "standard"},
                        {k: state[k] for k in REINDEXED if k in state})
    for key, rows, field in (("embed.weight", cfg["d_vocab"], "d_vocab"), ("pos_embed.weight", cfg["n_ctx"], "n_ctx"),
                             ("unembed.weight", cfg["d_vocab_out"], "d_vocab_out")):
        if key not in state:
            raise ComposeLensError(f"{source}: no {key} in the weights; compose-lens reads the state dict "
                                   f"of a native TransformerBridge (TransformerBridge.boot_native)")
        if state[key].dim() != 2 or state[key].shape[0] != rows:  # before any row is taken from it
            raise ComposeLensError(f"{source}: {key} has shape {tuple(state[key].shape)}, but its config's "
                                   f"{field} is {rows}: the weights and config.json are of different models")
    state["embed.weight"] = state["embed.weight"][d.token_ids]
    state["pos_embed.weight"] = state["pos_embed.weight"][list(d.positions)]
    for key in ("unembed.weight", "unembed.bias"):
        if key in state:
            state[key] = state[key][d.answer_rows]
    n_layers = cfg["n_layers"]
    mlp_blocks = tuple(layer for layer in range(n_layers) if any(
        state[k].abs().max() > 0 for k in (f"blocks.{layer}.mlp.in.weight", f"blocks.{layer}.mlp.out.weight")
        if k in state))
    biases = any(v.abs().max() > 0 for k, v in state.items() if k.endswith(".bias"))
    try:
        model = ModelConfig(n_layers=n_layers, d_model=cfg["d_model"], d_head=cfg["d_head"],
                            n_heads=cfg["n_heads"], d_mlp=cfg["d_mlp"], act_fn=cfg["act_fn"],
                            normalization_type=cfg.get("normalization_type"), n_ctx=d.seq_len,
                            d_vocab=d.task.d_vocab, d_vocab_out=d.modulus, mlp_blocks=mlp_blocks,
                            trained_biases=biases, read_order=None if d.query == "prefix" else d.positions)
    except ComposeLensError as exc:
        raise ComposeLensError(f"{source}: compose-lens cannot read this architecture: {exc}") from None
    return RunConfig(task=d.task, model=model), state, given


def user_coordinates(model: ModelConfig, state: dict[str, torch.Tensor], declaration: TaskDeclaration,
                     given: UserWeights | None, source: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The inverse of :func:`study_coordinates`: the researcher's TransformerLens config and state dict,
    every row the study's coordinates drop taken from ``given`` (the model as it was read). Where a row
    has no source (``given`` is None), refuses in one line: an export must be exact or not be."""
    d = declaration
    config = dict(given.config) if given is not None else {
        **{k: getattr(model, k) for k in TL_FIELDS}, "positional_embedding_type": "standard",
        "d_vocab": d.vocab_size, "d_vocab_out": d.d_vocab_out, "n_ctx": d.seq_len}
    rows = {"embed.weight": (d.token_ids, config["d_vocab"], "vocabulary ids the task does not use"),
            "pos_embed.weight": (torch.tensor(d.positions), config["n_ctx"], "positions past seq_len"),
            "unembed.weight": (d.answer_rows, config["d_vocab_out"], "output classes that are not numbers"),
            "unembed.bias": (d.answer_rows, config["d_vocab_out"], "output classes that are not numbers")}
    user = dict(state)
    for key, (index, size, what) in rows.items():
        if key not in state:
            continue
        if given is not None and key in given.tensors:
            full = given.tensors[key].detach().to(state[key].device, state[key].dtype).clone()
        elif len(index) == size:
            full = torch.empty((size, *state[key].shape[1:]), dtype=state[key].dtype, device=state[key].device)
        else:
            raise ComposeLensError(f"{source}: cannot be written in its own token ids exactly: its {what} "
                                   f"({size - len(index)} rows of {key}) are not in the model compose-lens holds; "
                                   f"export the model it was read from (its folder or TransformerBridge)")
        full[index.to(full.device)] = state[key]
        user[key] = full
    return config, user


def _need(condition: bool, message: str) -> None:
    if not condition:
        raise DeclarationError(message)
