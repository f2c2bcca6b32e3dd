"""The command line follows the conventions a user expects of one.

One grammar: every command's options, tabulated from its parser (:func:`grammar_table`, the table of
docs/commands.md, "One grammar for every command"); ``--version`` with what a bug report needs; help written for users on every
command and option; one command listing every ``--set`` key, each with its meaning, from the config
classes themselves; Python ``logging`` levels that other libraries' loggers (Ray's) follow, from -v / -q
before or after the command; progress bars only where stderr is a terminal; shell completion.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import logging
import re
from pathlib import Path

import pytest

from compose_lens import cli, sweep
from compose_lens.cli import settings, train as train_cli
from compose_lens.core.config import ModelConfig, RunConfig, TaskConfig, TrainConfig
from compose_lens.core.provenance import VERSION
from tests.unit.test_api_page import docs_hook


def _parsers(parser: argparse.ArgumentParser, name: str = "compose-lens"):
    """(name, parser) of the program and of every command and sub-command under it."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {command}")


HOOK = docs_hook()  # docs/from_code.py: the grammar table, written into docs/commands.md when the site is built
GRAMMAR, WITHOUT, grammar_table = HOOK.GRAMMAR, HOOK.WITHOUT, HOOK.grammar_table
DOCS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "commands.md"


def test_every_command_takes_the_shared_options_or_says_why_not():
    table = grammar_table()
    assert "(?)" not in table, table  # a command lacks an option WITHOUT gives no reason for
    for name, parser in cli.leaf_parsers(cli.build_parser()):
        command = name.removeprefix("compose-lens ")
        options = {o for action in parser._actions for o in action.option_strings}
        for flag in GRAMMAR:  # a reason given for an option the command has is stale
            assert (flag in options) != (command in WITHOUT[flag]), (command, flag)
        assert {"-q", "-v"} <= options, command


def test_the_docs_page_has_the_parsers_table_written_in():
    page = DOCS_PAGE.read_text(encoding="utf-8")
    assert page.count(HOOK.GRAMMAR_MARKER) == 1, "docs/commands.md must hold the grammar table's marker once"
    assert "| `compose-lens train` |" not in page, "the grammar table is written by docs/from_code.py, not by hand"
    # as the site shows it: the table in its own section, one row for each command the parser has
    section = HOOK.written("commands.md", page).split("## One grammar for every command\n", 1)[1].split("\n## ", 1)[0]
    rows = {line.split(" | ")[0].strip("| `") for line in section.splitlines() if line.startswith("| `")}
    assert rows == {name for name, _ in cli.leaf_parsers(cli.build_parser())}, rows


@pytest.mark.parametrize("where", ["before", "after"])
def test_q_and_v_work_before_and_after_the_command(monkeypatch, where):
    seen = {}

    def evaluate(args):
        seen.update(level=logging.getLogger().getEffectiveLevel(), quiet=args.quiet)
        return 0

    monkeypatch.setattr(train_cli, "_cmd_evaluate", evaluate)
    for flags, level, quiet in ((["-q"], logging.ERROR, True), (["-vv"], logging.DEBUG, False)):
        argv = [*flags, "evaluate", "paper"] if where == "before" else ["evaluate", "paper", *flags]
        assert cli.main(argv) == 0
        assert seen == {"level": level, "quiet": quiet}


def test_version_says_what_a_bug_report_needs(capsys):
    import platform

    import torch

    with pytest.raises(SystemExit) as done:
        cli.build_parser().parse_args(["--version"])
    assert done.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"compose-lens {VERSION}"
    said = dict(line.split(": ", 1) for line in lines[1:])
    assert said["torch"] == torch.__version__
    assert said["python"].startswith(platform.python_version() + " ")
    assert said["transformer-lens"][0].isdigit() and said["devices"].startswith("cpu")


def test_every_setting_has_a_meaning():
    empty = [row.key for row in settings.setting_rows() if not row.meaning.strip()]
    assert empty == []


def test_completion_script_names_every_command(capsys):
    assert cli.main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    for name, _ in cli.leaf_parsers(cli.build_parser()):
        assert name.split()[-1] in script, name
    assert re.search(r"--pool-size", script)  # the options too, not only the commands


def test_every_command_and_option_has_help():
    missing = []
    for name, parser in _parsers(cli.build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                missing += [f"{name} {c.dest}" for c in action._choices_actions if not c.help]
            elif not action.help:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


def test_help_is_written_for_users_not_in_docstring_markup():
    marked = [name for name, parser in _parsers(cli.build_parser())
              if any(mark in parser.format_help() for mark in ("``", ":mod:", ":func:", ":class:"))]
    assert marked == []
    top = cli.build_parser().format_help()
    assert "compose-lens evaluate paper" in top and "compose-lens settings" in top


def test_settings_lists_every_field_with_a_default_that_set_takes_back(capsys):
    rows = settings.setting_rows()
    fields = [(s, f.name) for s, cls in (("task", TaskConfig), ("model", ModelConfig), ("train", TrainConfig))
              for f in dataclasses.fields(cls)]
    assert [(row.section, row.key.split(".")[-1]) for row in rows] == fields
    study = RunConfig()
    for row in rows:  # the default, typed back through --set as listed, is the study's configuration
        assert RunConfig().with_overrides([f"{row.key}={row.default}"]) == study, row
    changed = RunConfig().with_overrides(["train.seed=7", "seed=8"])  # each key reaches its own section
    assert (changed.train.seed, changed.task.seed) == (7, 8)
    assert next(r for r in rows if r.key == "stop_at").meaning.startswith("end: train every step")

    assert cli.main(["settings", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [row._asdict() for row in rows]
    assert cli.main(["settings"]) == 0
    listed = capsys.readouterr().out
    assert all(f"  {row.key} " in listed for row in rows)


@pytest.mark.parametrize("flags, level", [([], logging.WARNING), (["-v"], logging.INFO), (["-vv"], logging.DEBUG),
                                          (["-q"], logging.ERROR), (["--quiet"], logging.ERROR)])
def test_other_libraries_loggers_follow_v_and_q(monkeypatch, flags, level):
    seen = {}

    def evaluate(args):
        seen["ray"] = logging.getLogger("ray").getEffectiveLevel()
        return 0

    monkeypatch.setattr(train_cli, "_cmd_evaluate", evaluate)
    top, command = [f for f in flags if f != "--quiet"], [f for f in flags if f == "--quiet"]  # after it too
    before = logging.getLogger().level
    assert cli.main([*top, "evaluate", "paper", *command]) == 0
    assert seen["ray"] == level
    assert logging.getLogger().level == before  # a test or notebook that goes on keeps its own level


def test_ray_is_started_at_the_callers_logging_level(monkeypatch):
    asked = {}

    class FakeRay:
        @staticmethod
        def is_initialized():
            return False

        @staticmethod
        def init(**kwargs):
            asked.update(kwargs)
            raise RuntimeError("stop here")

    monkeypatch.setattr(sweep, "_import_ray", lambda: FakeRay)
    monkeypatch.setattr(logging.getLogger(), "level", logging.ERROR)
    with pytest.raises(RuntimeError, match="stop here"):
        sweep._run_ray([], 1, None, lambda *a: None)
    assert asked["logging_level"] == logging.ERROR


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal_and_never_when_switched_off(monkeypatch, capsys):
    assert cli.main(["evaluate", "paper", "--pool-size", "50"]) == 0
    assert "evaluate: " not in capsys.readouterr().err  # stderr is a pipe here: no progress

    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert cli.main(["evaluate", "paper", "--pool-size", "50"]) == 0
    said = terminal.getvalue()
    assert "evaluate: loading the model [" in said and "evaluate: the nine pools [" in said
    assert "evaluate: done in " in said

    for switch in ({"COMPOSE_LENS_PROGRESS": "0"}, {"TQDM_DISABLE": "1"}):
        silent = _Terminal()
        monkeypatch.setattr("sys.stderr", silent)
        for name, value in switch.items():
            monkeypatch.setenv(name, value)
        assert cli.main(["evaluate", "paper", "--pool-size", "50"]) == 0
        assert "evaluate: " not in silent.getvalue()
        for name in switch:
            monkeypatch.delenv(name)


def test_the_trainers_bar_draws_nothing_into_a_log(tmp_path, monkeypatch):
    """``make reproduce > log 2>&1`` runs the Trainer from Python with progress=True: its bar must not write
    frames into a file (it drew 12,572 of them before)."""
    from compose_lens.training.train import Trainer

    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    task = TaskConfig(modulus=7, n_vars=6, left_forbidden=("f",), right_forbidden=("a",))
    config = RunConfig(task=task, model=ModelConfig.for_task(task),
                       train=TrainConfig(steps=20, eval_every=10, checkpoint_every=10, pool_size=20, batch_size=16))
    Trainer(config, tmp_path / "run", progress=True).run()
    assert "train:" not in log.getvalue() and "\r" not in log.getvalue()
