"""What the web envs' Chromium can reach of the host: its environment, its profile, its flags.

The browser runs on the host, so its processes must not hold the host's secrets (the environment
of the process that made the env: API keys, database URLs) nor flags that let pages read files.
Checked on the real Chromium processes an env started (``/proc/<pid>/environ`` and ``cmdline``).
"""
from __future__ import annotations

import os
import secrets
import stat
from typing import Any

import gymnasium as gym
import psutil
import pytest

import guigym  # noqa: F401 - registers the envs
from guigym.core.errors import ConfigError
from guigym.envs.web.browser import BrowserRuntime


def _proc(pid: int, what: str) -> list[str]:
    with open(f"/proc/{pid}/{what}", "rb") as f:
        return [p.decode(errors="replace") for p in f.read().split(b"\0") if p]


@pytest.fixture()
def canary_env(monkeypatch) -> Any:
    value = secrets.token_hex(16)
    monkeypatch.setenv("GUIGYM_SECRET_CANARY", value)  # set in the host process before make
    env = gym.make("MiniWoB-v0", task="click-test").unwrapped
    env.reset(seed=0)
    yield env, value
    env.close()


def test_no_host_secret_in_any_chromium_process_environment(canary_env):
    env, value = canary_env
    pids = env.controller.runtime.chromium_pids()
    assert len(pids) >= 2, "a browser process and at least one renderer/zygote"
    host_home = os.path.expanduser("~")
    homes = set()
    for pid in pids:
        try:
            environ = _proc(pid, "environ")
        except FileNotFoundError:  # a short-lived helper process exited meanwhile
            continue
        assert not any(value in e for e in environ), f"pid {pid} sees the host's secret"
        home = dict(e.split("=", 1) for e in environ if "=" in e).get("HOME")
        if home is None:  # Chromium's zygote and renderers start from a cleared environment
            continue
        homes.add(home)
        assert home != host_home, f"pid {pid}: HOME={home}"
        assert stat.S_IMODE(os.stat(home).st_mode) == 0o700 and os.stat(home).st_uid == os.getuid()
    assert homes, "the browser process has a HOME (the private one)"


def _browser_cmdline(env: Any) -> list[str]:
    """argv of the browser process (the Chromium whose parent is not a Chromium)."""
    pids = env.controller.runtime.chromium_pids()
    roots = [p for p in pids if psutil.Process(p).ppid() not in pids]
    assert len(roots) == 1, roots
    return _proc(roots[0], "cmdline")


def test_chromium_flags_give_pages_no_file_access_and_a_fresh_private_profile(canary_env):
    env, _ = canary_env
    cmd = _browser_cmdline(env)
    for flag in ("--allow-file-access-from-files", "--allow-file-access", "--disable-web-security",
                 "--remote-debugging-port"):
        assert not any(a.split("=", 1)[0] == flag for a in cmd), flag
    profile = next(a.split("=", 1)[1] for a in cmd if a.startswith("--user-data-dir="))
    st = os.stat(profile)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
    other = gym.make("MiniWoB-v0", task="click-test").unwrapped
    try:
        other.reset(seed=0)
        other_profile = next(a.split("=", 1)[1] for a in _browser_cmdline(other) if a.startswith("--user-data-dir="))
        assert other_profile != profile, "each env's Chromium has its own profile"
    finally:
        other.close()
    # the task page itself comes over loopback http, not file://
    assert env.controller.task_page.url.startswith("http://127.0.0.1:")


def test_flags_that_widen_page_access_cannot_be_added():
    with pytest.raises(ConfigError, match="allow-file-access-from-files"):
        BrowserRuntime(extra_args=("--allow-file-access-from-files",))
    with pytest.raises(ConfigError, match="disable-web-security"):
        BrowserRuntime(extra_args=("--disable-web-security",))
