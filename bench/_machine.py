"""The machine a bench script ran on, for the record next to its figures."""
from __future__ import annotations

import datetime
import os
import platform
from typing import Any


def machine() -> dict[str, Any]:
    """``date`` (UTC), ``host``, ``nproc``, ``cpu`` model, ``python`` and the 1/5/15-min ``load``."""
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "host": platform.node(), "nproc": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "load": [round(x, 2) for x in os.getloadavg()]}
