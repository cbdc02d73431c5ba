"""The real adb server for tests that talk to the stand-in device, on a private port.

``adb`` on PATH or adbutils' bundled binary is started with ``-P <free port>`` (a user's server on
5037 is untouched) and killed at the end of the module; ``ANDROID_ADB_SERVER_PORT`` points adbutils,
AdbDevice and the providers' ``adb`` subprocesses at it meanwhile. Skips with the reason when no adb
binary exists or the server does not start.
"""
from __future__ import annotations

import os
import socket
import subprocess
from typing import Iterator

import pytest

from guigym.envs.android.providers import default_adb


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def adb_client() -> Iterator[object]:
    adbutils = pytest.importorskip("adbutils", reason="adbutils is not installed (pip install 'guigym[android]')")
    adb = default_adb()
    if adb == "adb" and not os.path.exists(adb):
        import shutil

        if shutil.which("adb") is None:
            pytest.skip("no adb binary: neither `adb` on PATH nor adbutils' bundled one")
    port = free_port()
    old = os.environ.get("ANDROID_ADB_SERVER_PORT")
    os.environ["ANDROID_ADB_SERVER_PORT"] = str(port)
    try:
        started = subprocess.run([adb, "-P", str(port), "start-server"], capture_output=True, text=True, timeout=60)
        if started.returncode != 0:
            pytest.skip(f"adb start-server failed: {started.stderr.strip()}")
        yield adbutils.AdbClient(host="127.0.0.1", port=port)
    finally:
        subprocess.run([adb, "-P", str(port), "kill-server"], capture_output=True, timeout=60)
        if old is None:
            os.environ.pop("ANDROID_ADB_SERVER_PORT", None)
        else:
            os.environ["ANDROID_ADB_SERVER_PORT"] = old
