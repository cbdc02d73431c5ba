"""What every embedded site's server process needs: a free loopback port, a start-up wait that
holds on a busy machine, and a group kill."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from typing import Optional

from guigym.core.errors import ConfigError
from guigym.core.waits import Deadline


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the caller retries if it is taken before binding)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def checked_timeout(name: str, value: Optional[float]) -> Optional[float]:
    """``value`` as a float, or None (= the site's idle-machine base x the load factor); a
    ConfigError naming ``name`` when it is not a positive number."""
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number of seconds or None, got {value!r}") from None
    if not v > 0:
        raise ConfigError(f"{name} must be > 0 seconds, got {value!r}")
    return v


def start_deadline(given: Optional[float], base_s: float, what: str) -> Deadline:
    """The hang guard of a site's start-up wait (:mod:`guigym.core.waits`, issue 33 item 5): a
    caller's exact ``start_timeout_s``, or ``base_s`` idle-machine seconds stretched by the load
    (a server's start costs CPU time, so its wall time grows with the load)."""
    return Deadline(base_s if given is None else given, what, scale=given is None)


def wait_answering(proc: Optional[subprocess.Popen[bytes]], url: str, deadline: Deadline,
                   request_timeout_s: float = 2.0, poll_s: float = 0.05) -> bool:
    """Poll ``GET url`` until it answers 200 (True). False when ``proc`` exits first (the caller
    may retry on another port) or ``deadline`` expires (the caller raises with
    ``deadline.message()``)."""
    while not deadline.expired():
        if proc is None or proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=request_timeout_s) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            time.sleep(poll_s)
    return False


def kill_group(proc: Optional[subprocess.Popen[bytes]]) -> None:
    """SIGKILL the process group ``proc`` leads (servers fork workers) and reap it; None is a no-op."""
    if proc is None:
        return
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=10)


def start_failed(server: str, deadline: Deadline) -> str:
    """The EnvInfraError text after the last start attempt of ``server`` failed."""
    if deadline.expired():
        return f"{server} did not answer on 127.0.0.1: {deadline.message()}"
    return f"{server} exited before answering on 127.0.0.1 (3 tries, each on a free port)"
