"""What every command shares: the one-line error parser and the arguments many commands take.

Nothing here imports torch or TransformerLens: ``compose-lens --help`` and an
argument error answer before any heavy import (see :mod:`compose_lens.cli`).
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Iterator

from compose_lens.core.config import ModelConfig, RunConfig, TaskConfig
from compose_lens.core.errors import ComposeLensError, ConfigError
from compose_lens.core.files import load_json, not_there


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        raise SystemExit(2)


def seed(text: str) -> int:
    """argparse type of every --seed/--seeds: an integer from 0 to 2**63-1 (one line otherwise)."""
    from compose_lens.core.config import seed_problem

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid seed: {text!r} (an integer from 0 to 2**63-1)") from None
    problem = seed_problem("seed", value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def add_task_options(parser: argparse.ArgumentParser, seed_alias: bool = False) -> None:
    """The task's options (--task-seed also as --seed with ``seed_alias``: where the command has no other seed)."""
    g = parser.add_argument_group("task")
    g.add_argument("--f", type=float, help="fraction of addition pairs used in training (0, 1]")
    g.add_argument("--r", type=float, help="keep probability of each 2-var row [0, 1]")
    g.add_argument("--modulus", type=int, help="the modulus p")
    g.add_argument("--n-vars", type=int, help="number of variables")
    g.add_argument("--task-seed", *(["--seed"] if seed_alias else []), dest="task_seed", type=seed,
                   help="seed of the split: training pairs and kept 2-var rows (default 42, the study's)")
    g.add_argument("--split-file", help="load held-out pairs and restrictions from a split file")
    g.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="any task setting, as train --set takes it, e.g. --set reassign_rate=0.3 "
                        "--set seq_len=32 (docs/variants.md)")


def add_model_arguments(parser: argparse.ArgumentParser, prompts: bool = True) -> None:
    """MODEL, --split, --task and (``prompts``: where the command reads sequences) --prompts."""
    parser.add_argument("model", help="run/checkpoint directory, .safetensors, study .pth, 'paper', or the "
                                      "directory of your own TransformerLens model (config.json + model.safetensors)")
    parser.add_argument("--split", help="split file (default: the model's own, or split.json beside a .pth)")
    parser.add_argument("--task", metavar="FILE",
                        help="your own model's task declaration, JSON or TOML (default: task.json beside "
                             "its weights; docs/own-model.md)")
    if prompts:
        add_prompts_argument(parser)


def add_prompts_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompts", metavar="FILE",
                        help="your own prompt set, CSV or JSONL (columns sequence, answer): the pools are its "
                             "sequences instead of the declared distribution's (docs/own-model.md)")


def subject_of(args: argparse.Namespace, device: str = "cpu", bridge: bool = True):
    """The :class:`~compose_lens.training.subject.Subject` that MODEL, --task, --split and --prompts name."""
    from compose_lens.training.subject import load_subject  # lazy: torch

    subject = load_subject(args.model, getattr(args, "task", None), args.split, device=device, bridge=bridge)
    return prompted(subject, getattr(args, "prompts", None))


def prompted(subject, prompts: str | None):
    """``subject`` with the pools of a ``--prompts`` file (none: as it is)."""
    if not prompts:
        return subject
    from compose_lens.data.prompts import with_prompts  # lazy: torch

    return with_prompts(subject, prompts)


def refuse_uncovered(command: str, spec: str) -> None:
    """Refuse, before anything is loaded, a MODEL whose architecture ``command`` does not cover
    (:mod:`compose_lens.core.coverage`, read from its config.json alone)."""
    from compose_lens.core.coverage import describe, peek_model_config, problem  # no torch

    cfg = peek_model_config(spec)
    reason = None if cfg is None else problem(command, cfg)
    if reason:
        raise ComposeLensError(f"{command} does not cover {spec} ({describe(cfg)}): {reason}")


def task_with_sets(task: TaskConfig, sets: list[str] | None) -> TaskConfig:
    """``task`` with ``--set KEY=VALUE`` task settings applied as ``train --set`` applies them."""
    if not sets:
        return task
    names = [f.name for f in fields(TaskConfig)]
    for item in sets:
        key = item.split("=", 1)[0]
        if "=" in item and key.removeprefix("task.") not in names:
            raise ConfigError(f"--set {key}: not a task setting; this command takes task settings only "
                              f"({', '.join(names)})")
    return RunConfig(task=task, model=ModelConfig.for_task(task)).with_overrides(sets).task


def split_from_args(args: argparse.Namespace):
    """The split that --split-file, or the task options (:func:`add_task_options`), name."""
    from compose_lens.data.split import Split, split_bytes  # lazy: torch
    from compose_lens.data.safety import require_memory

    sets = getattr(args, "set", None)
    if getattr(args, "split_file", None):
        task = Split.load(args.split_file).task
        if args.r is not None:
            task = task.replace(r=args.r)
        return Split.load(args.split_file, task_with_sets(task, sets))
    changes = {k: v for k, v in (("f", args.f), ("r", args.r), ("modulus", args.modulus),
                                  ("n_vars", args.n_vars), ("seed", args.task_seed)) if v is not None}
    # the flags and the --set values checked together, so a refusal names the values asked for
    task = (task_with_sets(TaskConfig(), [f"task.{k}={json.dumps(v)}" for k, v in changes.items()] + sets) if sets
            else TaskConfig(**changes))
    require_memory({"the split and its training rows": split_bytes(task)}, f"modulus {task.modulus}",
                   "use a smaller modulus")
    return Split.from_task(task)


def add_overwrite(parser: argparse.ArgumentParser, what: str = "--out") -> None:
    parser.add_argument("--overwrite", action="store_true",
                        help=f"replace an existing {what} (only one compose-lens wrote, holding nothing else)")


JSON_HELP = "print the command's result as JSON on stdout instead of its text (with the provenance)"


def add_outputs(parser: argparse.ArgumentParser, out_help: str, *, required: bool = True,
                device: bool = True, overwrite_what: str = "--out") -> None:
    """What every command that computes takes: ``--out``, ``--overwrite``, ``--json`` and (``device``) ``--device``."""
    parser.add_argument("--out", required=required, help=out_help)
    add_overwrite(parser, overwrite_what)
    parser.add_argument("--json", action="store_true", help=JSON_HELP)
    if device:
        add_device_argument(parser)


def add_device_argument(parser: argparse.ArgumentParser, default: str | None = "cpu") -> None:
    """--device: where the model's forwards run (checked in one line before anything is written)."""
    shown = "the config's" if default is None else default
    parser.add_argument("--device", default=default,
                        help=f"cpu, cuda or cuda:N: where the model runs (default {shown}; docs/install.md 'On a GPU')")


def add_verbosity(parser: argparse.ArgumentParser, top: bool = False) -> None:
    """-v / -q, before the command (``top``) or after it; :func:`compose_lens.cli.log_level` reads both."""
    parser.add_argument("-v", "--verbose", dest="verbose" if top else "verbose_after", action="count", default=0,
                        help="more log output, also from other libraries (-v: info, -vv: debug)")
    parser.add_argument("-q", "--quiet", dest="log_quiet" if top else "quiet", action="store_true",
                        help="errors only, also from other libraries, and no progress")


def emit(args: argparse.Namespace, result: dict, lines: list[str]) -> None:
    """A command's result: ``lines`` on stdout, or with ``--json`` ``result`` as JSON."""
    if getattr(args, "json", False):
        print_json(result)
    else:
        for line in lines:
            print(line)


# compose_lens.views.drawing.FORMATS and compose_lens.views.figure_style.STYLES, repeated here so --help imports
# no matplotlib
FORMATS = ("png", "svg", "pdf")
STYLES = ("report", "paper")


def add_format_argument(parser: argparse.ArgumentParser) -> None:
    """--format and --style of the commands that write figures (:func:`figure_style` applies them)."""
    parser.add_argument("--format", dest="fmt", choices=FORMATS, default=None,
                        help="figure file format (default png; pdf with --style paper)")
    parser.add_argument("--style", choices=STYLES, default="report",
                        help="figure style: report (default: 11 in wide, for the HTML report) or paper "
                             "(7.0 in, a two-column journal's text width; text 7 to 9 pt; PDF unless --format)")


@contextmanager
def figure_style(args: argparse.Namespace) -> Iterator[None]:
    """Run a command in the figure style its ``--style`` names (:mod:`compose_lens.views.figure_style`), its
    ``--format`` defaulting to the style's (png for the report, pdf for a paper)."""
    name = getattr(args, "style", None)
    if name in (None, "report"):  # the report's style changes nothing: matplotlib is not imported for it
        if hasattr(args, "fmt") and args.fmt is None:
            args.fmt = "png"
        yield
        return
    from compose_lens.views.figure_style import style

    with style(name) as chosen:
        if args.fmt is None:
            args.fmt = chosen.format
        yield


PAIRS_SUFFIXES = (".csv", ".jsonl", ".ndjson")  # compose_lens.data.pairs.FORMATS


def check_pairs_path(flag: str, value: str | None) -> None:
    """Refuse a pairs file that cannot be one before the model loads (its rows are checked on reading)."""
    if value is None:
        return
    path = Path(value)
    if path.suffix.lower() not in PAIRS_SUFFIXES:
        raise ComposeLensError(f"{flag} {value}: give a .csv or .jsonl file of clean,corrupted pairs")
    if not_there(path):
        raise ComposeLensError(f"{flag} {value}: {not_there(path)}")


def print_table(rows: list[list], header: list[str]) -> None:
    """A small aligned text table on stdout."""
    cells = [[str(c) for c in row] for row in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for n, row in enumerate(cells):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))


def print_json(data) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def run_config_from_args(args: argparse.Namespace, seeds_first: list[str] = ()) -> RunConfig:
    """``--config`` (else the study's recipe) with ``seeds_first`` (``train --seed``), then ``--set``, applied."""
    config = RunConfig.from_dict(load_json(args.config)) if args.config else RunConfig()
    return config.with_overrides([*seeds_first, *(args.set or [])])
