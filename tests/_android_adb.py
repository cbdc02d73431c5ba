"""The real adb server for tests that talk to the stand-in device, on a private port.

``adb`` on PATH or adbutils' bundled binary is started with ``-P <free port>`` (a user's server on
5037 is untouched) and killed at the end of the module; ``ANDROID_ADB_SERVER_PORT`` points adbutils,
AdbDevice and the providers' ``adb`` subprocesses at it meanwhile. Skips with the reason when no adb
binary exists or the server does not start.
"""
from __future__ import annotations

import os
from typing import Iterator

import pytest

from guigym.core.errors import EnvInfraError
from guigym.envs.android.check import private_adb_server
from guigym.envs.android.providers import default_adb


@pytest.fixture(scope="module")
def adb_client() -> Iterator[object]:
    adbutils = pytest.importorskip("adbutils", reason="adbutils is not installed (pip install 'guigym[android]')")
    adb = default_adb()
    if adb == "adb" and not os.path.exists(adb):
        import shutil

        if shutil.which("adb") is None:
            pytest.skip("no adb binary: neither `adb` on PATH nor adbutils' bundled one")
    # the same private server `guigym tasks check --env AndroidWorld-v0` starts
    server = private_adb_server()
    try:
        server.__enter__()
    except EnvInfraError as exc:
        pytest.skip(str(exc))
    try:
        yield adbutils.AdbClient(host="127.0.0.1", port=int(os.environ["ANDROID_ADB_SERVER_PORT"]))
    finally:
        server.__exit__(None, None, None)
