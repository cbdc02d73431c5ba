"""What every embedded site's server process needs: a free loopback port and a group kill."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
from typing import Optional


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the caller retries if it is taken before binding)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
