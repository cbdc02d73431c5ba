"""rich progress bars of a training run: iterations, the current iteration's rollouts, its update.

Three bars on stderr, all silent when disabled (``log.progress``; auto = on only when stderr is a
terminal and ``$CI`` is unset, so logs of CI and of ``nohup`` runs stay plain text):

* ``iterations``  finished / ``run.iterations`` (starts at the resumed iteration), with the last
  iteration's one-line summary;
* ``rollout``     trajectories finished (scored or unscorable) / planned, of the current collection
  (driven by ``RolloutScheduler.on_finished``);
* ``update``      optimizer steps taken / planned, of the current ``Learner.update`` (driven by
  ``Learner.on_optimizer_step``).

The trainer's own log lines still print: rich redraws the bars below them.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Optional, TextIO


def progress_enabled(setting: Optional[bool], stream: Optional[TextIO] = None) -> bool:
    """``setting`` when given; else on iff ``stream`` (stderr) is a TTY and ``$CI`` is unset/false."""
    if setting is not None:
        return bool(setting)
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        return False
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class TrainProgress:
    """The run's bars (a no-op object when ``enabled`` is false)."""

    PHASES = ("rollout", "update")

    def __init__(self, iterations: int, start: int = 0, enabled: bool = False) -> None:
        self.enabled = bool(enabled)
        self._p: Any = None
        self._tasks: dict[str, Any] = {}
        if not self.enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._p = Progress(TextColumn("[bold]{task.description:<10}"), BarColumn(), MofNCompleteColumn(),
                           TimeElapsedColumn(), TextColumn("{task.fields[note]}"),
                           console=Console(stderr=True), transient=False)
        self._p.start()
        self._tasks["iterations"] = self._p.add_task("iterations", total=iterations, completed=start, note="")
        for phase in self.PHASES:
            self._tasks[phase] = self._p.add_task(phase, total=None, note="", visible=False)

    def begin(self, phase: str, total: Optional[int], note: str = "") -> None:
        """Reset ``phase``'s bar to 0 of ``total`` (None = not known yet: 0 until :meth:`set` gives it) and
        show it."""
        if self._p is not None:  # rich keeps the previous total when given None
            self._p.reset(self._tasks[phase], total=total or 0, completed=0, visible=True, note=note)

    def advance(self, phase: str, n: int = 1) -> None:
        if self._p is not None:
            self._p.advance(self._tasks[phase], n)

    def set(self, phase: str, completed: int, total: Optional[int] = None) -> None:
        """Set ``phase``'s bar to ``completed`` of ``total`` (the learner's callback signature)."""
        if self._p is not None:
            self._p.update(self._tasks[phase], completed=completed, **({"total": total} if total else {}))

    def iteration_done(self, note: str = "") -> None:
        if self._p is not None:
            self._p.update(self._tasks["iterations"], advance=1, note=note)

    def close(self) -> None:
        if self._p is not None:
            self._p.stop()
            self._p = None
