"""``compose-lens settings``: every key ``train --set KEY=VALUE`` takes, read from the config classes.

``--set`` reaches any field of the three config classes of :mod:`compose_lens.core.config`, as
``section.name`` or a bare ``name``, looked up in task, then model, then train
(:meth:`~compose_lens.core.config.RunConfig.with_overrides`: a bare ``seed`` is the task's). This list is
generated from those classes, so it cannot fall behind them: each field's name, type and default from
:func:`dataclasses.fields`, its meaning from the comment beside (or just above) the field in ``config.py``,
else from the sentence of the class docstring that names it.

>>> rows = {row.key: row for row in setting_rows()}
>>> rows["f"].section, rows["f"].default, rows["train.seed"].type
('task', '0.7', 'int')
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import io
import json
import re
import textwrap
import tokenize
from typing import NamedTuple

SECTIONS = ("task", "model", "train")  # RunConfig's fields, in the order a bare key is looked up


class Setting(NamedTuple):
    key: str  # what to type after --set
    section: str
    type: str
    default: str  # as --set would take it (JSON, or a plain string)
    meaning: str


def _field_comments(cls: type) -> dict[str, str]:
    """{field: the comment on its line, or the comment lines just above it} from the class source."""
    try:
        lines, _ = inspect.getsourcelines(cls)
    except (OSError, TypeError):  # no source (a frozen application): no comments
        return {}
    source = textwrap.dedent("".join(lines))
    comments = {token.start[0]: token.string.lstrip("#").strip()
                for token in tokenize.generate_tokens(io.StringIO(source).readline) if token.type == tokenize.COMMENT}
    found: dict[str, str] = {}
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        text = comments.get(node.lineno, "")
        above, line = [], node.lineno - 1
        while line in comments and not source.splitlines()[line - 1].split("#")[0].strip():
            above.insert(0, comments[line])
            line -= 1
        found[node.target.id] = " ".join(part for part in [*above, text] if part and not part.startswith("--"))
    return found


def _docstring_sentence(cls: type, name: str) -> str:
    """The sentence of the class docstring that opens with ``name`` (or ``name=...``), else '', its reST
    markup taken off."""
    doc = " ".join((inspect.getdoc(cls) or "").split())
    for sentence in re.split(r"(?<=[.;])\s+(?=[A-Z*`])", doc):
        sentence = sentence.lstrip("*- ")
        if re.match(rf"``{re.escape(name)}(=[^`]*)?``", sentence):
            return re.sub(r"(:[a-z]+:)?`+~?([^`]+)`+", r"\2", sentence)
    return ""


def _as_typed(value) -> str:
    """A default as ``--set`` takes it: a plain string as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(list(value) if isinstance(value, tuple) else value)


def setting_rows() -> list[Setting]:
    """One row per field of the three config classes, in the order of the classes."""
    from compose_lens.core.config import RunConfig

    taken: set[str] = set()
    rows = []
    for section in SECTIONS:
        cls = next(f for f in dataclasses.fields(RunConfig) if f.name == section).default_factory  # type: ignore[misc]
        comments = _field_comments(cls)
        for field in dataclasses.fields(cls):
            default = field.default if field.default is not dataclasses.MISSING else field.default_factory()  # type: ignore[misc]
            bare = field.name not in taken  # an earlier section's field of the same name wins a bare key
            taken.add(field.name)
            rows.append(Setting(field.name if bare else f"{section}.{field.name}", section, str(field.type),
                                _as_typed(default), comments.get(field.name) or _docstring_sentence(cls, field.name)))
    return rows


def _cmd_settings(args: argparse.Namespace) -> int:
    rows = setting_rows()
    if args.json:
        print(json.dumps([row._asdict() for row in rows], indent=2))
        return 0
    from compose_lens.core.config import RunConfig

    key_width = max(len(row.key) for row in rows)
    type_width = max(len(row.type) for row in rows)
    default_width = min(12, max(len(row.default) for row in rows))
    indent = key_width + type_width + default_width + 6
    for section in SECTIONS:
        cls = next(f for f in dataclasses.fields(RunConfig) if f.name == section).default_factory  # type: ignore[misc]
        print(f"{section}: {(inspect.getdoc(cls) or '').splitlines()[0]}")
        for row in (r for r in rows if r.section == section):
            head = f"  {row.key:<{key_width}}  {row.type:<{type_width}}  {row.default:<{default_width}}"
            meaning = textwrap.wrap(row.meaning, max(40, 110 - indent)) or [""]
            print(f"{head}  {meaning[0]}".rstrip())
            for more in meaning[1:]:
                print(" " * (indent + 2) + more)
        print()
    print("Set any of them with `compose-lens train --set KEY=VALUE` (values are JSON, e.g. 0.5, true, [1], "
          "null, or a plain word).")
    return 0


def register(sub) -> None:
    p = sub.add_parser("settings", help="list every --set KEY=VALUE setting: its type, default and meaning",
                       description="Every setting of a run that `train --set KEY=VALUE` (and a --config JSON) "
                                   "takes, with its type, its default (the study's recipe) and what it means.")
    p.add_argument("--json", action="store_true", help="print the settings as JSON (key, section, type, default, "
                                                        "meaning)")
    p.set_defaults(func=_cmd_settings)
