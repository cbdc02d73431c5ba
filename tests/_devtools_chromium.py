"""A real headless Chromium with a DevTools port, for the OSWorld getters that talk to the
browser through its DevTools endpoint (tests/test_osworld_chrome_profile.py,
tests/test_osworld_metrics_apps.py): the "desktop" is this machine, so the getters' in-desktop
helper scripts run here for real (:func:`run_here`)."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest


def run_here(command: Any, timeout: float = 60) -> dict:
    """What the desktop's ``/execute`` answers, for ``command`` run on this machine."""
    p = subprocess.run(command, check=False, capture_output=True, text=True, timeout=timeout)
    return {"status": "success", "output": p.stdout, "error": p.stderr, "returncode": p.returncode}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def devtools_chromium(base: Path, url: str = "about:blank",
                      ready: Callable[[list[dict]], bool] = lambda targets: True) -> Iterator[int]:
    """Chromium (profile in ``base/profile``) showing ``url``; yields its DevTools port once
    ``/json/list`` answers and ``ready(targets)`` holds. Skips the test when no Chromium is
    installed or it does not come up within 20 s; killed (its process group) on exit."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        pytest.skip("no Chromium/Chrome on this machine for the real DevTools test")
    port = free_port()
    proc = subprocess.Popen([exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             f"--remote-debugging-port={port}", f"--user-data-dir={base / 'profile'}", url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2).read())
                if ready(targets):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.skip("Chromium did not start its DevTools endpoint")
            time.sleep(0.2)
        yield port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
