"""The ``compose-lens`` command line: argparse and printing over the library.

Each command group is a module here with a ``register(subparsers)`` function (:data:`COMMAND_MODULES`):
``data sample|split|stats`` (:mod:`.data`), ``train``, ``evaluate``, ``export`` (:mod:`.train`), ``analyze`` and the
command of each registered analysis that declares one (:mod:`.analysis`, from :mod:`compose_lens.registry`),
``compare``, ``report``, ``sweep`` and ``settings``; ``completion bash|zsh|tcsh`` prints a shell completion
script (shtab, from this parser). :func:`main` runs a command and turns a
:class:`~compose_lens.core.errors.ComposeLensError` into one line on stderr and exit status 2.

**Imports are lazy here, and only here.** A command module imports the library (and with it torch and
TransformerLens, seconds of start-up) inside its command function, after the arguments are checked, so
``--help`` and an argument error answer at once. Everywhere else in the package imports sit at the top.

**One grammar**: ``-v`` / ``-q`` are accepted before the command and after it alike, and set the level of
Python's ``logging`` for the whole process, other libraries' loggers (Ray's) included: warnings by default,
``-v`` info, ``-vv`` debug, ``-q`` errors only and no progress. Every command that computes takes ``--out``,
``--overwrite`` and ``--json`` (its result as JSON on stdout), ``--device`` where a model runs and ``--seed``
where it samples (:func:`compose_lens.cli.common.add_outputs`; ``tests/unit/test_cli_conventions.py``
tabulates every command's options). Progress is drawn only on a terminal. ``--version`` says what a bug
report needs: compose-lens, Python, torch, TransformerLens and the devices, as ``pip debug`` does.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Sequence

from compose_lens.cli import analysis, compare, data, report, settings, sweep, train
from compose_lens.cli.common import Parser, add_verbosity, figure_style
from compose_lens.core.errors import ComposeLensError
from compose_lens.core.cores import threads_now
from compose_lens.core.provenance import VERSION, set_command

COMMAND_MODULES = (data, train, analysis, compare, report, sweep, settings)
SHELLS = ("bash", "zsh", "tcsh")  # what shtab writes completion scripts for

DESCRIPTION = """\
Train and take apart the small transformer of the 'Assign and Add' study, which learns
addition modulo 59 with variables assigned in its context (b=7, e=3, b+e=?).

The shipped paper model is called 'paper' wherever a command takes a MODEL."""

EPILOG = """\
a first session:
  compose-lens evaluate paper                  accuracy of the paper model on the nine pools
  compose-lens analyze paper --out analysis    every analysis, tables and figures in analysis/
  compose-lens train --out runs/mine --set steps=2000
                                               train your own (the study's recipe otherwise)
  compose-lens report runs/mine                one offline HTML page of a run's results
  compose-lens settings                        every --set KEY=VALUE that train takes

`compose-lens COMMAND --help` explains a command. Bad input is one line on stderr and exit
status 2; nothing is overwritten without --overwrite."""


def build_parser() -> Parser:
    parser = Parser(prog="compose-lens", description=DESCRIPTION, epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version, help="compose-lens's version, and Python's, torch's, "
                                                            "TransformerLens's and the devices (for a bug report)")
    add_verbosity(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser, metavar="COMMAND",
                                title="commands")
    for module in COMMAND_MODULES:
        module.register(sub)
    completion = sub.add_parser("completion", help="print a shell completion script: "
                                                   "eval \"$(compose-lens completion bash)\" in ~/.bashrc")
    completion.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    completion.set_defaults(func=_cmd_completion)
    for _, leaf in leaf_parsers(parser):  # -v / -q after the command too
        add_verbosity(leaf)
    return parser


def leaf_parsers(parser: argparse.ArgumentParser, name: str = "compose-lens"):
    """(name, parser) of every command that runs (``data sample``, not ``data``)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield name, parser
        return
    for command, child in subs[0].choices.items():
        yield from leaf_parsers(child, f"{name} {command}")


def _cmd_completion(args: argparse.Namespace) -> int:
    import shtab  # lazy: only this command needs it

    print(shtab.complete(build_parser(), args.shell))
    return 0


def version_lines() -> list[str]:
    """What ``--version`` prints: the versions a bug report needs and the devices torch sees."""
    import platform
    from importlib import metadata

    import torch  # lazy: --version is the one flag that needs it

    try:
        lens = metadata.version("transformer-lens")
    except metadata.PackageNotFoundError:
        lens = "not installed"
    if torch.cuda.is_available():
        devices = "cpu, " + ", ".join(f"cuda:{i} ({torch.cuda.get_device_name(i)})"
                                      for i in range(torch.cuda.device_count()))
    else:
        devices = f"cpu (CUDA {'not built into this torch' if torch.version.cuda is None else 'built, no GPU seen'})"
    return [f"compose-lens {VERSION}",
            f"python: {platform.python_version()} ({platform.python_implementation()}, {sys.executable})",
            f"platform: {platform.platform()}",
            f"torch: {torch.__version__}",
            f"transformer-lens: {lens}",
            f"devices: {devices}"]


class _Version(argparse.Action):
    """``--version``: :func:`version_lines`, then exit 0."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print("\n".join(version_lines()))
        parser.exit()


def log_level(args: argparse.Namespace) -> int:
    """WARNING, INFO (-v), DEBUG (-vv) or ERROR (-q), the flag before the command or after it."""
    if args.log_quiet or getattr(args, "quiet", False):
        return logging.ERROR
    verbose = args.verbose + getattr(args, "verbose_after", 0)
    return {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every failure is one line on stderr and an exit status.

    2: bad input (argparse errors, :class:`ComposeLensError`, I/O errors such as a
    full disk or a read-only folder, memory). 130: Ctrl-C. 70: a bug in compose-lens
    (one line too; ``COMPOSE_LENS_DEBUG=1`` shows the traceback).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra and not _trailing_values(args, extra):
            parser.parse_args(argv)  # the usage error, said as argparse says it
    except SystemExit as exc:  # --help (0) or a usage error (2, its line already written)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    # before torch is imported, which reads it once; the trainer follows the load as it runs
    # (compose_lens.core.cores.ThreadGovernor), the sweep gives each worker its share
    if args.command not in ("train", "sweep"):
        os.environ.setdefault("OMP_NUM_THREADS", str(threads_now()))
    set_command(["compose-lens", *argv])  # every file this command writes records it
    root, handler = logging.getLogger(), None
    level_before = root.level
    root.setLevel(log_level(args))
    # a library that set its own logger's level (ray.init sets "ray" to INFO) follows -v / -q too, for this command
    own_levels = {name: lg.level for name, lg in logging.root.manager.loggerDict.items()
                  if isinstance(lg, logging.Logger) and lg.level != logging.NOTSET and not name.startswith("compose_lens")}
    for name in own_levels:
        logging.getLogger(name).setLevel(log_level(args))
    if not root.handlers:  # a caller that set up logging (a notebook, pytest) keeps its own handlers
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s: %(levelname).1s: %(message)s"))
        root.addHandler(handler)
    args.quiet = args.quiet or args.log_quiet  # no progress either (which a log never gets: compose_lens.core.progress)
    try:
        with figure_style(args):  # --style / --format of a command that writes figures
            return int(args.func(args) or 0)
    except ComposeLensError as exc:
        return _fail(str(exc), 2)
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    except MemoryError:
        return _fail("out of memory; use smaller sizes (modulus, batch, pool, --n)", 2)
    except OSError as exc:
        from compose_lens.data.safety import os_error_line  # the user's path, a full disk said in words

        return _fail(os_error_line(exc, kept="nothing else was changed"), 2)
    except Exception as exc:  # a bug: still one line, with a way to see the rest
        if os.environ.get("COMPOSE_LENS_DEBUG"):
            raise
        return _fail(f"internal error ({type(exc).__name__}: {exc}); please report it, with the "
                     f"traceback that COMPOSE_LENS_DEBUG=1 shows", 70)
    finally:
        set_command(None)  # a caller that goes on in this process (a test, a notebook) is not this command
        root.setLevel(level_before)
        for name, level in own_levels.items():
            logging.getLogger(name).setLevel(level)
        if handler is not None:
            root.removeHandler(handler)


def _trailing_values(args: argparse.Namespace, extra: list[str]) -> bool:
    """Add ``extra`` to the values a declaration takes after MODEL (``attention paper --out X 'b=7, b+23=?'``),
    as argparse would for a positional needing one; False (a usage error) for anything else, a flag above all."""
    from compose_lens import registry

    name = getattr(args, "analysis", None)
    analysis = next((a for a in registry.ANALYSES if a.name == name), None)
    option = next((o for o in analysis.options if o.positional and o.many), None) if analysis else None
    if option is None or any(value.startswith("-") for value in extra):
        return False
    setattr(args, option.setting, [*(getattr(args, option.setting) or []), *extra])
    return True


def command() -> int:
    """The ``compose-lens`` program: :func:`main`, then ``gc.freeze``, so that the interpreter's shutdown does
    not walk the millions of objects torch leaves behind (~0.7 s of every command). :func:`main` leaves the
    collector alone: a test or a notebook goes on in its process."""
    import gc

    status = main()
    gc.freeze()
    return status


def _fail(message: str, status: int) -> int:
    line = " ".join(message.split())  # one line, whatever the message holds
    sys.stderr.write(f"compose-lens: error: {line}\n")
    return status


if __name__ == "__main__":
    raise SystemExit(command())
