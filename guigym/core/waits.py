"""Waits that hold on a busy machine: an event first, a deadline stretched by the CPU load second.

Why: starting a piece of infrastructure (Xvfb, openbox, a shell prompt, Chromium, a server)
costs a roughly fixed amount of CPU time. On a machine whose cores are shared by ``L`` runnable
processes it gets about ``cores / L`` of a core, so its wall time grows with the load; a constant
that is generous on an idle machine expires under load (issue 33, item 5: 63 errors in one test
suite run at load 15-43 on 2 cores, almost all fixed start-up waits). So every wait here is

1. **an event** the caller polls or blocks on (a readiness line, a socket answering, a file
   appearing, a window property), which also stops early when the awaited process exits; and
2. **a deadline only as a hang guard**: ``base_s`` times :func:`load_factor`, re-read while the
   wait lasts (never shrinking), capped at :data:`MAX_FACTOR` so a real hang still ends.

The caller turns an expired deadline into its own error class (EnvInfraError for an env: a
failed start is lost infrastructure, never a failed task) with :meth:`Deadline.message`, which
names what was awaited, the time spent and the load.

Standard library only: ``core`` imports nothing else (docs/architecture.md, layers).
"""
from __future__ import annotations

import os
import time
from typing import Callable, Optional

#: upper bound of :func:`load_factor`: at load 40 on 2 cores a process gets ~1/20 of a core;
#: beyond that a deadline of 20x its idle value is as long as a hang guard should wait
MAX_FACTOR = 20.0
#: how often :meth:`Deadline.total` re-reads the load average (it changes every 5 s in the kernel)
_LOAD_REFRESH_S = 1.0


def usable_cpus() -> float:
    """Cores this process may run on: its CPU affinity, lowered by a cgroup v2 ``cpu.max``
    quota when one is set (a container limited to 2 CPUs on a 64-core host)."""
    try:
        cpus = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cpus = float(os.cpu_count() or 1)
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max" and float(period) > 0:
            cpus = min(cpus, max(float(quota) / float(period), 1.0))
    except (OSError, ValueError):
        pass
    return max(cpus, 1.0)


def load_factor(loadavg: Optional[Callable[[], tuple[float, float, float]]] = None) -> float:
    """How many times longer than on an idle machine a CPU-bound start-up may take now.

    The 1-minute load average (runnable + uninterruptible tasks) per usable core, at least 1,
    at most :data:`MAX_FACTOR`. ``loadavg`` replaces :func:`os.getloadavg` (tests). A machine
    without a load average (not Linux/BSD/macOS) counts as idle.
    """
    try:
        one_minute = (loadavg or os.getloadavg)()[0]
    except OSError:
        return 1.0
    return min(MAX_FACTOR, max(1.0, one_minute / usable_cpus()))


def scaled(base_s: float, factor: Optional[float] = None) -> float:
    """``base_s`` seconds stretched by the current :func:`load_factor` (or ``factor``)."""
    return float(base_s) * (load_factor() if factor is None else factor)


class Deadline:
    """A hang guard of ``base_s`` idle-machine seconds for ``what``, stretched by the load.

    ``total()`` is ``base_s * max(load factor seen so far)``: it never shrinks while the wait
    lasts, and it grows when the machine gets busier meanwhile. ``scale=False`` makes it a plain
    ``base_s`` deadline (a caller-given exact limit). ``clock`` and ``factor`` replace
    :func:`time.monotonic` and :func:`load_factor` (tests).
    """

    def __init__(self, base_s: float, what: str, *, scale: bool = True,
                 clock: Callable[[], float] = time.monotonic,
                 factor: Optional[Callable[[], float]] = None) -> None:
        if not base_s > 0:
            raise ValueError(f"Deadline base_s must be > 0 seconds, got {base_s!r} (for {what})")
        self.base_s = float(base_s)
        self.what = what
        self.scale = scale
        self._clock = clock
        self._factor = factor or (lambda: load_factor())  # looked up per call: patchable
        self.start = clock()
        self.max_factor = self._factor() if scale else 1.0
        self._read_at = self.start

    def _refresh(self, now: float) -> None:
        if self.scale and now - self._read_at >= _LOAD_REFRESH_S:
            self.max_factor = max(self.max_factor, self._factor())
            self._read_at = now

    def elapsed(self) -> float:
        return self._clock() - self.start

    def total(self) -> float:
        """Seconds this wait may last in all (``base_s`` x the highest load factor seen)."""
        self._refresh(self._clock())
        return self.base_s * self.max_factor

    def left(self) -> float:
        """Seconds left (<= 0 once expired); a bound for one blocking call (select, recv)."""
        return self.total() - self.elapsed()

    def expired(self) -> bool:
        return self.left() <= 0

    def message(self, detail: str = "") -> str:
        """``"gave up waiting for <what> after 12 s (base 6 s x load factor 2.0)"`` + ``detail``."""
        how = (f"base {self.base_s:g} s x load factor {self.max_factor:.1f}" if self.scale
               else "a fixed limit")
        return (f"gave up waiting for {self.what} after {self.elapsed():.0f} s ({how})"
                + (f"; {detail}" if detail else ""))


def wait_until(ready: Callable[[], bool], deadline: Deadline, *,
               gone: Optional[Callable[[], Optional[str]]] = None, interval_s: float = 0.02,
               error: type[Exception] = TimeoutError) -> None:
    """Poll ``ready()`` until it is true. ``gone()`` returns a reason when the awaited thing can
    no longer become ready (its process exited): raise ``error`` with it at once. Raise ``error``
    with :meth:`Deadline.message` when the deadline expires."""
    while True:
        if ready():
            return
        if gone is not None:
            why = gone()
            if why:
                raise error(f"waiting for {deadline.what}: {why}")
        if deadline.expired():
            raise error(deadline.message())
        time.sleep(interval_s)
