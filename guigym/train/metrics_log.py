"""Training metrics: one JSON object per line in ``<run.dir>/metrics.jsonl``.

Each line is ``{"step": iteration, "time": unix seconds, <metric>: float, ...}`` (:func:`metrics_row`:
ints become floats, non-finite floats ``null``, strings/bools kept, anything else dropped), appended
with a single ``write`` on an ``O_APPEND`` descriptor and fsync'd. On resume from the checkpoint of
iteration k, :meth:`MetricsLog.truncate_after` drops lines with ``step > k`` (written after that
checkpoint by the crashed process; the iterations are redone) and a torn last line, so the curve
continues without duplicated steps. TensorBoard and W&B get the same rows through
:mod:`guigym.train.metrics_sinks`.
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Optional


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All complete lines of a metrics file (a torn last line is skipped)."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def metrics_row(step: int, metrics: dict[str, Any], now: Optional[float] = None) -> dict[str, Any]:
    """The JSON row of one iteration: ``{"step", "time", <metric>: float | None | str | bool}``."""
    row: dict[str, Any] = {"step": int(step), "time": time.time() if now is None else float(now)}
    for k, v in metrics.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            row[k] = float(v) if math.isfinite(float(v)) else None
        elif isinstance(v, (str, bool)) or v is None:
            row[k] = v
    return row


class MetricsLog:
    """The JSONL sink (``name = "jsonl"``): appends one :func:`metrics_row` per iteration."""

    name = "jsonl"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def truncate_after(self, step: int) -> int:
        """Keep only complete lines with ``step <= step``; rewrite atomically. Returns lines dropped."""
        rows = read_metrics(self.path)
        keep = [r for r in rows if int(r.get("step", -1)) <= step]
        raw = self.path.read_text().splitlines() if self.path.exists() else []
        if len(keep) == len(raw):
            return 0
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in keep))
        os.replace(tmp, self.path)
        return len(raw) - len(keep)

    def log(self, step: int, metrics: dict[str, Any]) -> dict[str, Any]:
        """Write ``metrics_row(step, metrics)``; returns the row written."""
        row = metrics_row(step, metrics)
        self.write(row)
        return row

    def write(self, row: dict[str, Any]) -> None:
        data = (json.dumps(row, sort_keys=True) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        pass
