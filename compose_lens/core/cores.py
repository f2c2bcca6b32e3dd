"""How many torch threads a training should use: the cores that nobody else is using.

The training step is a few dozen small kernels: when another job keeps a core busy, a thread that
fights it makes every parallel kernel wait (on a busy 2-core machine a 2-thread step was ~10x slower
than a 1-thread step). So (:class:`ThreadGovernor`) a training uses ``cores - busy`` threads, at least
one, ``busy`` being the cores *other* processes used lately (the machine's busy CPU time less this
process's). It asks once, at the start, and keeps that count (``results.json`` records it): the thread
count changes float rounding, so a run whose threads followed the load could not be repeated bit for
bit. ``--set threads=N`` pins it. The other commands take :func:`threads_now` threads, from the load
average, unless ``OMP_NUM_THREADS`` says otherwise.
"""

from __future__ import annotations

import os
import platform
import time


def cpu_count() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def machine_busy_seconds() -> float | None:
    """CPU seconds every core has spent on work since boot (``psutil.cpu_times``), None where
    the platform does not say."""
    import psutil  # here, not at import: the command line's --help stays fast

    try:
        times = psutil.cpu_times()
    except (OSError, RuntimeError, NotImplementedError):
        return None
    waiting = ("idle", "iowait", "guest", "guest_nice")  # guest time is inside user time (Linux)
    return sum(getattr(times, name) for name in times._fields if name not in waiting)


def own_busy_seconds() -> float:
    t = os.times()
    return t.user + t.system


def threads_for(cores: int, busy_elsewhere: float) -> int:
    """``cores - busy_elsewhere``, rounded, between 1 and ``cores``."""
    return max(1, min(cores, int(cores - busy_elsewhere + 0.5 - 1e-9)))


def threads_now() -> int:
    """The thread count for a short command (an evaluation, an analysis): ``cores`` minus the
    machine's 1-minute load average (this process has not run yet, so that is the others')."""
    try:
        busy = os.getloadavg()[0]
    except (OSError, AttributeError):  # Windows has no load average
        busy = 0.0
    return threads_for(cpu_count(), busy)


class ThreadGovernor:
    """Measures the other processes' load between calls and says how many threads to use."""

    def __init__(self) -> None:
        self.cores = cpu_count()
        self._mark = self._sample()

    def _sample(self) -> tuple[float, float | None, float]:
        return time.monotonic(), machine_busy_seconds(), own_busy_seconds()

    def busy_elsewhere(self) -> float | None:
        """Cores the other processes used since the last call, on average (None: unknown)."""
        now = self._sample()
        (t0, machine0, own0), (t1, machine1, own1) = self._mark, now
        self._mark = now
        if machine0 is None or machine1 is None or t1 - t0 < 0.2:
            return None
        return max(0.0, ((machine1 - machine0) - (own1 - own0)) / (t1 - t0))

    def threads(self, current: int) -> int:
        """The thread count for the next interval (``current`` if the load is unknown)."""
        busy = self.busy_elsewhere()
        return current if busy is None else threads_for(self.cores, busy)

    def first_threads(self, probe_s: float = 0.3) -> int:
        """The thread count to start with, from the load since the governor was made
        (waiting until ``probe_s`` have passed)."""
        time.sleep(max(0.0, probe_s - (time.monotonic() - self._mark[0])))
        return self.threads(self.cores)


def processor() -> dict:
    """The CPU as torch's own probes see it: its name (else the machine type), the vector capability
    torch's kernels use, and whether it has bf16 units (AMX tiles, AVX-512 BF16)."""
    import torch  # lazy: the command line imports this module before torch

    return {"name": platform.processor() or platform.machine() or "unknown",
            "capability": torch.backends.cpu.get_cpu_capability(),
            "amx_bf16": bool(torch.cpu._is_amx_tile_supported()),
            "avx512_bf16": bool(torch.cpu._is_avx512_bf16_supported())}


def has_bf16_units() -> bool:
    """Whether bf16 autocast on this CPU has hardware to run on (AMX or AVX-512 BF16)."""
    info = processor()
    return info["amx_bf16"] or info["avx512_bf16"]
