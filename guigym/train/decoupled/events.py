"""Event log of the decoupled services: what each worker was doing, and when.

Every service appends ``Event`` rows (plain dicts, so they cross Ray and JSON unchanged)::

    {"service": "env" | "policy" | "trainer" | "data",
     "kind":    "reset" | "step" | "generate" | "reload" | "train" | "release" | ...,
     "worker":  "env0/1" | "w0" | "trainer" ...,    # one busy lane of that service
     "start": t0, "end": t1,                        # time.time() seconds (one clock per node)
     "version": int | None, ...}                    # policy version involved, plus free extras

Utilisation and overlap are computed afterwards from the rows alone (:func:`busy_s`,
:func:`max_concurrent`, :func:`overlapping`); bench/scale.py reads the same rows.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Optional

Event = dict[str, Any]


class EventLog:
    """A thread-safe append-only list of events (one per service process)."""

    def __init__(self, service: str) -> None:
        self.service = service
        self._rows: list[Event] = []
        self._lock = threading.Lock()

    def add(self, kind: str, worker: str, start: float, end: float, **extra: Any) -> None:
        row = {"service": self.service, "kind": kind, "worker": worker, "start": float(start), "end": float(end),
               **extra}
        with self._lock:
            self._rows.append(row)

    @contextmanager
    def span(self, kind: str, worker: str, **extra: Any) -> Iterator[dict[str, Any]]:
        """Record the duration of the ``with`` body; the yielded dict's items join the row."""
        t0 = time.time()
        more: dict[str, Any] = {}
        try:
            yield more
        finally:
            self.add(kind, worker, t0, time.time(), **extra, **more)

    def rows(self) -> list[Event]:
        with self._lock:
            return list(self._rows)


def _union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def select(events: Iterable[Event], service: Optional[str] = None, kind: Optional[str] = None) -> list[Event]:
    return [e for e in events if (service is None or e["service"] == service) and (kind is None or e["kind"] == kind)]


def busy_s(events: Iterable[Event], service: Optional[str] = None, kind: Optional[str] = None) -> float:
    """Busy seconds summed over workers: per worker the union of its intervals (a worker serving two
    overlapping requests counts once), then summed (2 workers busy for 1 s = 2.0)."""
    lanes: dict[str, list[tuple[float, float]]] = {}
    for e in select(events, service, kind):
        lanes.setdefault(e["worker"], []).append((e["start"], e["end"]))
    return sum(e - s for iv in lanes.values() for s, e in _union(iv))


def max_concurrent(events: Iterable[Event], service: Optional[str] = None, kind: Optional[str] = None) -> int:
    """Largest number of the selected intervals open at one instant (an end at t closes before a
    start at t opens)."""
    marks = []
    for e in select(events, service, kind):
        marks += [(e["start"], 1), (e["end"], -1)]
    cur = best = 0
    for _, d in sorted(marks, key=lambda m: (m[0], m[1])):
        cur += d
        best = max(best, cur)
    return best


def overlapping(a: Event, b: Event) -> bool:
    """True when the two intervals share a moment of positive length."""
    return a["start"] < b["end"] and b["start"] < a["end"]


def span_s(events: Iterable[Event]) -> float:
    ev = list(events)
    return max(e["end"] for e in ev) - min(e["start"] for e in ev) if ev else 0.0
