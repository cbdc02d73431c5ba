"""Attack (issue 35, item 3): a hostile AT-SPI peer. The agent starts, from the desktop's terminal,
an application that embeds itself in the AT-SPI registry and answers the a11y walk's calls with
huge, slow or malformed replies (``hostile_atspi_peer.py``; ``malformed`` also reaches the walk's
batched peer-to-peer path, ``a11y._Walk._prefetch``).

Each mode must leave the observation bounded (in time, nodes and bytes) and marked truncated,
and the episode scored: the agent did the task before it started the peer, so ``done()`` scores
1 (an ``EnvInfraError`` would report the episode lost). Before the fix the ``huge`` peer made
the walk run past the client's 30 s observe timeout (an ``EnvInfraError``), ``slow`` did the same
with calls that never count as timeouts, and the walk's XML grew with every 2 MiB name.
"""
from __future__ import annotations

import shutil
import statistics
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import gymnasium as gym
import pytest

import guigym  # noqa: F401 - registers the envs
from guigym.core import actions as A
from terminal_helpers import type_command, wait_marker
from guigym.envs.desktop.server import a11y

from desktop_needs import need_desktop

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

PEER = Path(__file__).with_name("hostile_atspi_peer.py")
SMALL = {"screen_size": (800, 600)}


@pytest.fixture(scope="module")
def env():
    need_desktop()
    e = gym.make("OSWorld-v0", task="terminal-mkdir", provider="local", provider_kwargs=SMALL, max_steps=200)
    try:
        yield e
    finally:
        e.close()


def timed_step(env):
    t0 = time.perf_counter()
    out = env.step(A.Wait(seconds=0))
    return time.perf_counter() - t0, out


#: mode -> the reasons the root's ``truncated`` must list (at least one of them; a slow app may also
#: pass the per-call timeout on a loaded machine, and is then skipped: bounded either way)
MARKS = {"huge": {"bytes", "long-string", "long-list"}, "slow": {"time", "app-timeout"}, "malformed": {"malformed"}}


@pytest.mark.parametrize("mode", sorted(MARKS))
def test_a_hostile_atspi_peer_leaves_the_walk_bounded_and_the_episode_scored(env, mode, monkeypatch):
    from guigym.envs.desktop.client import DesktopClient

    asked: list[float] = []  # the walk's time cap each observation asked for (5 s x the load factor)
    real_budget = DesktopClient._a11y_budget

    def recorded_budget(self, time_budget):
        asked.append(real_budget(self, time_budget))
        return asked[-1]

    monkeypatch.setattr(DesktopClient, "_a11y_budget", recorded_budget)
    env.reset()
    home = env.unwrapped.provider.home_dir
    wait_marker(env, type_command(env, "mkdir ~/projects"))  # the task, done before the attack
    unloaded = statistics.median(timed_step(env)[0] for _ in range(3))
    shutil.copy(PEER, home / "peer.py")
    log = home / "peer.log"
    env.step(A.Type(text=f"/usr/bin/python3 ~/peer.py {mode} > ~/peer.log 2>&1 &"))
    env.step(A.Press(key="enter"))
    deadline = time.monotonic() + 60
    while "EMBEDDED" not in (log.read_text(errors="replace") if log.exists() else ""):
        assert time.monotonic() < deadline, log.read_text(errors="replace")[-2000:] if log.exists() else "no log"
        time.sleep(0.2)
    marks: set[str] = set()
    for _ in range(3):
        took, (obs, reward, terminated, truncated, info) = timed_step(env)
        # the walk's own caps (the time cap this step asked for, then at most the call in flight
        # and the batch), with wide slack for a loaded machine, derived from this desktop's unloaded step
        bound = asked[-1] + 4 * a11y.CALL_TIMEOUT_MS / 1000 + 10 * unloaded + 5
        assert took <= bound, (took, bound)
        text = obs["a11y"]
        assert len(text) <= a11y.DEFAULT_MAX_BYTES + 64 * 1024, len(text)
        root = ET.fromstring(text)  # whole XML (the env never has to cut it)
        assert len(list(root.iter())) <= a11y.DEFAULT_MAX_NODES + 1
        marks |= set((root.get("truncated") or "").split(","))
        assert info.get("a11y_truncated") == root.get("truncated")
    assert marks & MARKS[mode], marks  # the observation says what it lacks
    assert "EMBEDDED" in log.read_text(errors="replace")  # (still the peer answering, not a dead app)
    obs, reward, terminated, truncated, info = env.step(A.Done())
    assert terminated and reward == 1.0, info.get("verifier")
