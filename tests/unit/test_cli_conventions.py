"""The command line follows the conventions a user expects of one.

``--version``; help written for users on every command and option; one command listing every
``--set`` key from the config classes themselves; Python ``logging`` levels that other
libraries' loggers (Ray's) follow; progress bars only where stderr is a terminal.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import logging

import pytest

from compose_lens import cli, sweep
from compose_lens.cli import settings, train as train_cli
from compose_lens.config import ModelConfig, RunConfig, TaskConfig, TrainConfig
from compose_lens.provenance import VERSION


def _parsers(parser: argparse.ArgumentParser, name: str = "compose-lens"):
    """(name, parser) of the program and of every command and sub-command under it."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {command}")


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        cli.build_parser().parse_args(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"compose-lens {VERSION}"


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
    top, command = [f for f in flags if f != "--quiet"], [f for f in flags if f == "--quiet"]
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


def test_progress_bars_only_on_a_terminal(monkeypatch, capsys):
    assert cli.main(["evaluate", "paper", "--pool-size", "50"]) == 0
    assert "evaluate 0/2" not in capsys.readouterr().err  # stderr is a pipe here: no bar frames

    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert cli.main(["evaluate", "paper", "--pool-size", "50"]) == 0
    assert "evaluate 0/2" in terminal.getvalue()
