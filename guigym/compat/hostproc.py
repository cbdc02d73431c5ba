"""A guigym process started from another package's Python (a desktop-env or BrowserGym venv).

The compat shims run in the other package's interpreter, whose pins clash with guigym's; what
needs guigym's own libraries (a desktop, the embedded sites) runs in guigym's Python as a child
process spoken to over its stdin/stdout, one JSON object per line. This module is the client
side's shared part. Standard library only: it is imported in those venvs.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any


def host_python_default() -> str:
    """``GUIGYM_HOST_PYTHON``, else the first ``python3`` on PATH that is not this venv's."""
    explicit = os.environ.get("GUIGYM_HOST_PYTHON")
    if explicit:
        return explicit
    own = {str(Path(sys.prefix, "bin").resolve()), str(Path(sys.executable).parent.resolve())}
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and str(Path(p).resolve()) not in own)
    found = shutil.which("python3", path=path)
    if not found:
        raise RuntimeError("guigym's python was not found: set GUIGYM_HOST_PYTHON to the interpreter where "
                           "guigym and its extras are installed")
    return found


def guigym_pythonpath() -> dict[str, str]:
    """This environment with the checkout this module was imported from first on ``PYTHONPATH``,
    so the child imports the same guigym as its parent."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def read_json_line(proc: subprocess.Popen, timeout: float, what: str, who: str) -> dict[str, Any]:
    """The next stdout line of ``proc`` as JSON; RuntimeError naming ``who`` and ``what`` when it
    does not come within ``timeout`` seconds or the process exited first."""
    assert proc.stdout is not None
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        raise RuntimeError(f"{who}: no answer to {what!r} within {timeout:g} s")
    if not out or not out[0]:
        raise RuntimeError(f"{who} exited (code {proc.poll()}) before answering {what!r}; its stderr has why")
    return json.loads(out[0])


def stop(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """Close ``proc``'s stdin (its signal to clean up and exit); kill it after ``timeout`` s."""
    try:
        if proc.stdin:
            proc.stdin.close()
        proc.wait(timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait(timeout=timeout)
    finally:
        if proc.stdout:
            proc.stdout.close()
