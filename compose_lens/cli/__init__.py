"""The ``compose-lens`` command line: argparse and printing over the library.

Each command group is a module here with a ``register(subparsers)`` function
(:data:`COMMAND_MODULES`); this package builds the parser, runs the command and
turns a :class:`~compose_lens.config.ComposeLensError` into one line on stderr and
exit status 2 (130 on Ctrl-C).

**Imports are lazy here, and only here.** A command module imports the library
(and with it torch and TransformerLens, seconds of start-up) inside its command
function, after the arguments are parsed and checked, so ``compose-lens --help``,
``compose-lens X --help`` and an argument error answer at once. Everywhere else in
the package imports sit at the top of the module.

Commands: ``data sample|split|stats`` (:mod:`.data`), ``train``, ``evaluate``
(:mod:`.train`), ``analyze``, ``fourier``, ``attention`` (:mod:`.analysis`),
``patch``, ``ablate`` (:mod:`.patching`), ``dynamics``, ``report``
(:mod:`.dynamics`), ``sweep`` (:mod:`.sweep`).
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from compose_lens.cli import analysis, data, dynamics, patching, sweep, train
from compose_lens.cli.common import Parser
from compose_lens.config import ComposeLensError
from compose_lens.cores import threads_now

COMMAND_MODULES = (data, train, analysis, patching, dynamics, sweep)


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
    args = build_parser().parse_args(argv)
    if args.command not in OWN_THREADS:  # before torch is imported, which reads it once
        os.environ.setdefault("OMP_NUM_THREADS", str(threads_now()))
    try:
        return int(args.func(args) or 0)
    except ComposeLensError as exc:
        sys.stderr.write(f"compose-lens: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted\n")
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
