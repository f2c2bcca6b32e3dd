"""What a declaration is: :class:`Analysis` (its settings, computation, tables, figures, report
section, findings and command), the command's :class:`Option` s, the :class:`Result` it computes and the
:class:`Finding` s ``analyze`` prints; :func:`by_name` reads a tuple of them.

An analysis reads **one model** (:attr:`Analysis.of` ``"model"``: its compute takes a
:class:`compose_lens.report.context.Context`) or **a run's checkpoints** (``"run"``: a
:class:`compose_lens.report.context.RunContext`); both are declared, run, written and read back the same
way, only the command's first argument differs (MODEL or RUN). Plain data: the command line imports this
before torch (see :mod:`compose_lens.registry`).
"""


from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from compose_lens.core.errors import ArgumentError, ArgumentTypeError, ComposeLensError

if TYPE_CHECKING:  # annotations only: the command line reads this module before torch
    import pandas as pd

# ``ctx: Context`` below is a compose_lens.report.context.Context (not imported: that module reads this one)

FIGURES = "figures"  # the folder of an analysis's figures, beside its tables


ROLE_WORDS = {"binder": "the binder", "router": "the router", "gatherer": "the gatherer", "adder": "the adder"}


@dataclass(frozen=True)
class Finding:
    """One row of the table ``analyze`` prints: a summary key, what it measures, what the circuit predicts,
    and the least value that agrees with the prediction (``at_least``; :meth:`verdict`).

    ``what`` names components by role, ``{binder}``, ``{router}``, ``{gatherer}``, ``{adder}``:
    :meth:`text` writes the components the analysis read in their place (``blocks.0 head 1``), so a row
    never says "MLP2" of a model whose adder is ``blocks.0.mlp``. ``by_construction``: a summary key
    that is true where the task itself makes the finding hold (a context holding only the queried
    values: any head that attends to numbers "attends to the queried values"); the row then says so
    and is not judged."""

    key: str
    what: str
    predicts: str
    at_least: float | None = None
    by_construction: str | None = None

    def text(self, components: dict | None = None) -> str:
        """``what`` with each role replaced by its component (``components``: role -> name or None;
        a role missing there reads "the binder", one located nowhere "no binder located")."""
        names = {role: (words if components is None or role not in components else
                        components[role] or f"no {role} located") for role, words in ROLE_WORDS.items()}
        return self.what.format(**names)

    def verdict(self, value, summary: dict | None = None) -> str:
        """``agrees`` or ``contradicts`` the prediction, ``true by construction`` (see the class doc), or
        ``-`` where there is no number to judge."""
        if self.by_construction and (summary or {}).get(self.by_construction):
            return "true by construction: not judged"
        if self.at_least is None or not isinstance(value, (int, float)) or value != value:
            return "-"
        return "agrees" if value >= self.at_least else "contradicts"


@dataclass(frozen=True)
class Option:
    """An option of an analysis's own command: ``--flag VALUE`` sets the setting ``setting`` (docs/extending.md).

    Its type is its default's (``kind`` where the default is None): a switch (a bool, False by default), an
    integer (at least ``minimum``), a float (its range checked by the analysis's ``validate``), or a string
    among ``choices``; ``many``: one or more such values (integers may also be written with commas,
    ``--steps 1000,2000``); ``pairs_file``: a path to a file of prompt pairs, or one of ``choices`` (checked
    before the model loads); ``positional``: the values after MODEL, with no flag (``flag`` names them in
    the help). A run analysis's setting named ``update`` lets its command write over its own earlier ``--out``
    (:attr:`compose_lens.report.context.RunContext.previous`)."""

    flag: str
    setting: str
    help: str
    minimum: int = 1
    choices: tuple[str, ...] = ()
    pairs_file: bool = False
    many: bool = False  # one or more values (the default is a tuple of them)
    kind: type | None = None  # the value's type where the default is None (float, str)
    metavar: str | None = None
    positional: bool = False  # values after MODEL, with no flag (with many: none or several)


@dataclass
class Result:
    """What one analysis of one model found, as the files it writes and the facts ``summary.json`` keeps.

    ``figures``: set by :mod:`compose_lens.report.context` from :attr:`Analysis.draw`, never by the compute;
    each ``(stem, views function, its arguments, dpi)``, or an offline page ``("<stem>.html", a function
    returning its HTML or (its HTML, the part a report section folds in), its arguments, None)``.
    ``provenance``: what the files' provenance records beside the settings (what the analysis chose: the MLP
    the ablation read). ``value``: anything else its command prints (not written)."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    documents: dict[str, dict] = field(default_factory=dict)
    facts: dict = field(default_factory=dict)
    figures: list[tuple[str, Callable, tuple, int | None]] = field(default_factory=list)
    provenance: dict = field(default_factory=dict)
    value: Any = None
    _drawings: dict = field(default_factory=dict, repr=False, compare=False)

    def figure(self, stem: str) -> tuple | str:
        """The figure ``stem`` of :attr:`figures` as ``(figure, data)`` (a page: as its function returns it), drawn on
        first use and kept: the folder's file and the report's copy are one drawing."""
        if stem not in self._drawings:
            _, draw, numbers, _ = {f[0]: f for f in self.figures}[stem]
            self._drawings[stem] = draw(*numbers)
        return self._drawings[stem]


@dataclass(frozen=True)
class Analysis:
    """One registered analysis (see the module docstring)."""

    name: str
    title: str
    compute: Callable[[Context, dict], Result]  # (RunContext, settings) where ``of`` is "run"
    of: str = "model"  # "model": one model; "run": a run's checkpoints (the module docstring)
    settings: dict = field(default_factory=dict)
    tables: tuple[str, ...] = ()
    documents: tuple[str, ...] = ()
    figures: tuple[str, ...] = ()  # the stems of every figure and page it draws, here or in its section (patterns)
    draw: Callable[[Any, Result, dict], list] | None = None  # (context, result, settings) -> its ``Result.figures``
    module: str | None = None  # the analysis module it presents (only the registry imports it)
    causal: bool = False  # left out by `analyze --skip-causal`
    section: Callable[[Any, Result | None, dict], str] | None = None  # (report inputs, result, settings) -> HTML
    report_settings: Callable[[Any], dict | None] | None = None  # (report inputs) -> its section's settings
    # (None: nothing to read, the section is given no result; the field unset: the defaults)
    anchor: str | None = None  # the section's anchor (default: the name)
    findings: tuple[Finding, ...] = ()
    command: str | None = None
    help: str = ""
    options: tuple[Option, ...] = ()
    guard: Callable[[dict, Any], None] | None = None  # (settings, config) -> None or a one-line refusal (memory,
    # a sequence the model's task cannot parse)
    validate: Callable[[dict], None] | None = None  # (settings) -> None or a one-line refusal, before any load
    describe: Callable[[Result], list[str]] | None = None  # what its command prints
    exports: tuple[str, ...] = ()  # its public API (compose_lens.NAME): names of ``module``, or "NAME=module[:attribute]"
    applies: Callable[[Any], bool] | None = None  # (config) -> whether it reads this model (None: every model)
    in_analyze: bool = True  # False: minutes of fitting, run by its own command only (not by analyze)
    saved: Callable[[Any, Any, dict], Result | None] | None = None  # (context, folder, settings) -> the result saved
    # in folder that serves, else None (default: compose_lens.report.context.read, made with the same settings)

    def reads(self, config) -> bool:
        """Whether this analysis has anything to read in a model of ``config`` (:attr:`applies`)."""
        return self.applies is None or bool(self.applies(config))

    def with_settings(self, changes: dict | None = None, flags: bool = False) -> dict:
        """The default settings with ``changes``, each checked at the door (:meth:`check_setting`); an
        unknown setting is refused in one line. ``flags``: name a refused value by its command's option
        (``--n-pairs 1``), else by the setting (``patching: n_pairs=1``, as the API is called)."""
        if changes is not None and not isinstance(changes, dict):
            raise ArgumentTypeError(f"analysis {self.name}: its settings are a dict, not {type(changes).__name__}")
        unknown = set(changes or {}) - set(self.settings)
        if unknown:
            raise ComposeLensError(f"analysis {self.name}: no setting {sorted(unknown)} "
                                   f"(it has {sorted(self.settings)})")
        for key, value in (changes or {}).items():
            self.check_setting(key, value, flags)
        return {**self.settings, **(changes or {})}

    def check_setting(self, key: str, value: Any, flags: bool = False) -> None:
        """Refuse, in one line, a value of setting ``key`` of another type than its default's (its option's
        ``kind`` where the default is None), a count below its option's ``minimum`` or above
        :data:`compose_lens.data.safety.MAX_COUNT`, a word outside its ``choices``, or a string where a list is
        wanted (it was read letter by letter). A pairs file's setting takes what its analysis reads."""
        from compose_lens.data.safety import MAX_COUNT  # here: the command line reads this module before torch

        option = next((o for o in self.options if o.setting == key), None)
        if option is not None and option.pairs_file:
            return  # a path, one of its choices, or PromptPairs: the analysis reads and checks it
        default = self.settings[key]
        typed = " ".join(map(str, value)) if isinstance(value, (list, tuple)) else value  # as on the command line
        where = f"{option.flag} {typed}" if flags and option else f"{self.name}: {key}={value!r}"
        many = isinstance(default, tuple)
        if many:
            if isinstance(value, str) or not isinstance(value, (list, tuple)):
                raise ArgumentTypeError(f"{where}: a list of values, not {type(value).__name__}"
                                        + (f" (a string is not read letter by letter: [{value!r}])"
                                           if isinstance(value, str) else ""))
            items = list(value)
            kind = (option.kind if option and option.kind else type(default[0]) if default else str)
        else:
            if default is None and (option is None or option.kind is None or value is None):
                return
            items, kind = [value], option.kind if default is None else type(default)
        for item in items:  # numpy's numbers are numbers (numbers.Integral, numbers.Real); a bool is not one
            boolean = isinstance(item, bool) or type(item).__name__ == "bool_"
            wrong = (kind is bool and not boolean
                     or kind is int and (boolean or not isinstance(item, numbers.Integral))
                     or kind is float and (boolean or not isinstance(item, numbers.Real) or not math.isfinite(item))
                     or kind is str and not isinstance(item, str))
            if wrong:
                words = {bool: "True or False", int: "an integer", float: "a finite number", str: "a string"}
                raise ArgumentTypeError(f"{where}: must be {words.get(kind, kind.__name__)}"
                                        f"{' (each item)' if many else ''}, not {type(item).__name__}")
            minimum = option.minimum if option is not None else 1
            if kind is int and item < minimum:
                raise ArgumentError(f"{where}: use at least {minimum}")
            if kind is int and item > MAX_COUNT:
                raise ArgumentError(f"{where}: at most {MAX_COUNT:,} (that is already minutes and gigabytes); "
                                    f"use a smaller number")
            if option is not None and option.choices and item not in option.choices:
                raise ArgumentError(f"{where}: use one of {', '.join(option.choices)}")


def by_name(registry: tuple[Analysis, ...], name: str) -> Analysis:
    for analysis in registry:
        if analysis.name == name:
            return analysis
    raise ComposeLensError(f"no analysis {name!r}; registered: {', '.join(a.name for a in registry)}")


