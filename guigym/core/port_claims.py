"""Port claims shared by processes on one host: a JSON file guarded by an ``flock``.

Used by the VM providers (guigym/envs/desktop/providers/docker.py: host ports for OSWorld VMs)
and the Android emulator provider (guigym/envs/android/providers.py: console/adb port pairs), so
two providers in different processes never hand out the same port.

File layout: ``<state_dir>/ports.lock`` (the lock, held for one read-check-write) and
``<state_dir>/claims.json`` = ``{"<port>": {"pid": int, "owner": str, ...}}``. A claim whose pid
is dead is dropped whenever the file is read, so a crashed process leaks nothing for long.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from guigym.core.errors import EnvInfraError

LOOPBACK = "127.0.0.1"

__all__ = ["LOOPBACK", "locked_claims", "pid_alive", "port_free"]


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` exists (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def port_free(port: int, host: str = LOOPBACK) -> bool:
    """Nothing listens on ``host:port`` and it can be bound (checked by binding it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


@contextmanager
def locked_claims(state_dir: Path, lock_timeout: float, poll_s: float = 0.02) -> Iterator[dict[str, Any]]:
    """Hold the claims lock and yield the live claims (dead pids dropped) for the caller to edit;
    on exit the dict is written back atomically (temp file + ``os.replace``) and the lock freed.
    :class:`EnvInfraError` when another process holds the lock longer than ``lock_timeout`` s."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(state_dir / "ports.lock", "a+") as lock:
        deadline = time.monotonic() + lock_timeout
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise EnvInfraError(f"port lock {state_dir / 'ports.lock'} held for more than "
                                        f"{lock_timeout:g} s") from None
                time.sleep(poll_s)
        try:
            path = state_dir / "claims.json"
            try:
                claims = json.loads(path.read_text())
            except (OSError, ValueError):
                claims = {}
            if not isinstance(claims, dict):
                claims = {}
            claims = {p: c for p, c in claims.items() if isinstance(c, dict) and pid_alive(int(c.get("pid", 0)))}
            yield claims
            fd, tmp = tempfile.mkstemp(dir=str(state_dir), suffix=".part")
            with os.fdopen(fd, "w") as f:
                json.dump(claims, f)
            os.replace(tmp, path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
