"""Progress, as researchers' tools show it: a bar on a terminal, nothing in a log.

Every progress bar of compose-lens is :func:`bar` (tqdm on stderr), and every command whose work
has no natural count (load the model, run the analysis, write the page) shows :func:`phases`
instead: one line on stderr as each phase begins, with the time since the command began, and
one when it ends. Both are shown only where they help:

* **only on a terminal**: where stderr is a file or a pipe (``make reproduce > log 2>&1``, a
  cluster job's log, a notebook's captured output) nothing is drawn, so a log never fills with
  a bar's carriage-return frames;
* **never when asked not to**: ``-q`` on the command line, ``progress=False`` from Python, or the
  environment switch ``COMPOSE_LENS_PROGRESS=0`` (tqdm's own ``TQDM_DISABLE=1`` is honoured too),
  for a terminal session that wants none.

>>> import io, contextlib
>>> with contextlib.redirect_stderr(io.StringIO()) as err:  # not a terminal: nothing drawn
...     for _ in bar(range(3), desc="x"):
...         pass
>>> err.getvalue()
''
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

from tqdm import tqdm  # the terminal bar: a bar is drawn only on a terminal, never as a notebook widget

ENV = "COMPOSE_LENS_PROGRESS"  # "0", "off", "no" or "false": no progress anywhere


def shown(wanted: bool = True) -> bool:
    """Whether progress is drawn now: ``wanted``, on a terminal, and not switched off by the environment
    (``COMPOSE_LENS_PROGRESS=0`` or ``TQDM_DISABLE=1``)."""
    if (not wanted or os.environ.get(ENV, "").strip().lower() in ("0", "off", "no", "false")
            or os.environ.get("TQDM_DISABLE", "").strip().lower() in ("1", "true", "yes", "on")):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without it, or closed
        return False


def bar(iterable: Iterable | None = None, *, wanted: bool = True, **options) -> tqdm:
    """A tqdm bar on stderr, drawn only where :func:`shown` (gone when done unless ``leave=True``);
    ``options`` are tqdm's (``total``, ``desc``, ``unit``, ``initial``, ...)."""
    options.setdefault("leave", False)
    options.setdefault("dynamic_ncols", True)
    return tqdm(iterable, disable=not shown(wanted), file=sys.stderr, **options)


@contextmanager
def phases(command: str, wanted: bool = True) -> Iterator[Callable[[str], None]]:
    """Phase lines of one command: ``with phases("fourier") as phase: phase("loading the model") ...``
    writes ``fourier: loading the model [0.0 s]`` as the phase begins, and ``fourier: done in 14.2 s``
    at the end (nothing where :func:`shown` is False, or when the command fails)."""
    started = time.perf_counter()
    show = shown(wanted)

    def phase(what: str) -> None:
        if show:
            sys.stderr.write(f"{command}: {what} [{time.perf_counter() - started:.1f} s]\n")
            sys.stderr.flush()

    yield phase
    if show:
        sys.stderr.write(f"{command}: done in {time.perf_counter() - started:.1f} s\n")
        sys.stderr.flush()
