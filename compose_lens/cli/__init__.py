"""The ``compose-lens`` command line: argparse and printing over the library.

Each command group is a module here with a ``register(subparsers)`` function
(:data:`COMMAND_MODULES`); this package builds the parser, runs the command and
turns a :class:`~compose_lens.errors.ComposeLensError` into one line on stderr and
exit status 2 (130 on Ctrl-C).

**Imports are lazy here, and only here.** A command module imports the library
(and with it torch and TransformerLens, seconds of start-up) inside its command
function, after the arguments are parsed and checked, so ``compose-lens --help``,
``compose-lens X --help`` and an argument error answer at once. Everywhere else in
the package imports sit at the top of the module.

Commands: ``data sample|split|stats`` (:mod:`.data`), ``train``, ``evaluate``
(:mod:`.train`), ``analyze``, ``same-mlp``, ``fourier``, ``attention`` (:mod:`.analysis`),
``patch``, ``ablate`` (:mod:`.patching`), ``circuit`` (:mod:`.circuit`), ``dynamics``, ``report``
(:mod:`.dynamics`), ``sweep`` (:mod:`.sweep`), ``das``, ``llc`` (:mod:`.methods`), and the command
of each registered analysis that declares one (``dla``: built by :mod:`.analysis` from
:mod:`compose_lens.registry`).
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from compose_lens.cli import analysis, circuit, data, dynamics, methods, patching, sweep, train
from compose_lens.cli.common import Parser
from compose_lens.errors import ComposeLensError
from compose_lens.cores import threads_now
from compose_lens.provenance import set_command

COMMAND_MODULES = (data, train, analysis, patching, circuit, dynamics, sweep, methods)


def build_parser() -> Parser:
    parser = Parser(prog="compose-lens", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


# commands that choose their own threads: the trainer follows the load as it runs
# (compose_lens.cores.ThreadGovernor), the sweep gives each worker its share
OWN_THREADS = ("train", "sweep")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every failure is one line on stderr and an exit status.

    2: bad input (argparse errors, :class:`ComposeLensError`, I/O errors such as a
    full disk or a read-only folder, memory). 130: Ctrl-C. 70: a bug in compose-lens
    (one line too; ``COMPOSE_LENS_DEBUG=1`` shows the traceback).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, its line already written)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if args.command not in OWN_THREADS:  # before torch is imported, which reads it once
        os.environ.setdefault("OMP_NUM_THREADS", str(threads_now()))
    set_command(["compose-lens", *argv])  # every file this command writes records it
    try:
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
        from compose_lens.safety import os_error_line  # the user's path, a full disk said in words

        return _fail(os_error_line(exc, kept="nothing else was changed"), 2)
    except Exception as exc:  # a bug: still one line, with a way to see the rest
        if os.environ.get("COMPOSE_LENS_DEBUG"):
            raise
        return _fail(f"internal error ({type(exc).__name__}: {exc}); please report it, with the "
                     f"traceback that COMPOSE_LENS_DEBUG=1 shows", 70)
    finally:
        set_command(None)  # a caller that goes on in this process (a test, a notebook) is not this command


def command() -> int:
    """The ``compose-lens`` program: :func:`main`, then a quick exit.

    After the command, every object is moved out of the garbage collector's reach
    (``gc.freeze``), so that the interpreter's shutdown does not walk the millions of
    objects torch and TransformerLens leave behind: that walk took ~0.7 s of every
    command. Every file is already written and closed by then. (:func:`main` itself
    leaves the collector alone: a test or a notebook goes on in its process.)
    """
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
