"""Resource attacks on the local desktop (issue 35, items 1-2), typed into its terminal as the agent.

A fork flood, a memory hog, a disk filler and a CPU burner, each against a desktop made with small
bounds (:data:`BOUNDS`). Every test asserts that

* the bound held (measured from the host, not from the mechanism that sets it),
* a second desktop's steps stay within a bound derived from its own unloaded steps measured in
  the same test (20x their median + 5 s: CI machines are loaded),
* the episode ends scored (here with reward 1: the task was done before the attack, so the
  verifier worked while the zone sat at its bound) and the next reset gives a working terminal.

Safety nets of their own, so that a missing bound fails the test instead of the machine: every
attack is capped in what it tries (400 processes, 1 GiB, 200 MiB per file, 4 burners for 12 s),
and a watchdog thread kills the desktop's whole sandbox when its process tree passes
:data:`NET_PROCS` processes or :data:`NET_RSS_MIB` of RSS (then the test fails).
"""
from __future__ import annotations

import os
import re
import signal
import statistics
import threading
import time
from pathlib import Path
from typing import Optional

import gymnasium as gym
import pytest

import guigym  # noqa: F401 - registers the envs
from guigym.core import actions as A
from terminal_helpers import type_command, wait_marker

from desktop_needs import need_desktop

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SMALL = {"screen_size": (800, 600)}
BOUNDS = {"max_processes": 64, "memory_mib": 256, "disk_mib": 64, "cpu_cores": 0.25}
MIB = 1024 * 1024
NET_PROCS = 700
NET_RSS_MIB = 1800
TICK = os.sysconf("SC_CLK_TCK")


@pytest.fixture(scope="module")
def envs():
    """(bounded desktop under attack, witness desktop with the default bounds)."""
    need_desktop()
    made = []
    try:
        for bounds in (BOUNDS, None):
            made.append(gym.make("OSWorld-v0", task="terminal-mkdir", provider="local",
                                 provider_kwargs=SMALL, max_steps=400, bounds=bounds))
        yield made[0], made[1]
    finally:
        for e in made:
            e.close()


def provider(env):
    return env.unwrapped.provider


# ---------------------------------------------------------------------------- host-side views

def _stat(pid: int) -> Optional[tuple[int, int, int]]:
    """(ppid, utime+stime ticks, rss pages) of ``pid``, None when gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    rest = raw[raw.rfind(b")") + 2:].split()
    return int(rest[1]), int(rest[11]) + int(rest[12]), int(rest[21])


def tree(root: int) -> dict[int, tuple[int, int, int]]:
    """Every live process below ``root`` (inclusive): pid -> _stat."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (st := _stat(int(name))) is not None:
            table[int(name)] = st
    children: dict[int, list[int]] = {}
    for pid, st in table.items():
        children.setdefault(st[0], []).append(pid)
    out, stack = {}, [root]
    while stack:
        pid = stack.pop()
        if pid in table:
            out[pid] = table[pid]
            stack.extend(children.get(pid, []))
    return out


class Watchdog:
    """The outer safety net: polls the sandbox's process tree; past NET_PROCS processes or
    NET_RSS_MIB of RSS it SIGKILLs the sandbox (and the test fails). Records the peaks."""

    def __init__(self, env) -> None:
        self.p = provider(env)
        self.root = self.p._bwrap.pid
        self.peak_procs = self.peak_rss_mib = 0
        self.tripped = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        while not self._stop.wait(0.1):
            procs = tree(self.root)
            rss = sum(st[2] for st in procs.values()) * page / MIB
            self.peak_procs, self.peak_rss_mib = max(self.peak_procs, len(procs)), max(self.peak_rss_mib, rss)
            if len(procs) > NET_PROCS or rss > NET_RSS_MIB:
                self.tripped = f"{len(procs)} processes, {rss:.0f} MiB RSS"
                for pid in (self.p._ns_init_pid, self.root):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, TypeError):
                        pass
                return

    def __enter__(self) -> "Watchdog":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        assert not self.tripped, f"the safety net fired: the bound did not hold ({self.tripped})"


def step_times(env, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        env.step(A.Wait(seconds=0))
        out.append(time.perf_counter() - t0)
    return out


def latency_bound(witness) -> float:
    """20x the witness's unloaded median step + 5 s (measured now, in this test)."""
    witness.reset()
    return 20 * statistics.median(step_times(witness, 5)) + 5.0


def start_episode(env) -> None:
    """Reset and do the task first, so the episode's score shows the verifier still works."""
    env.reset()
    wait_marker(env, type_command(env, "mkdir ~/projects"))


def end_scored_and_reset(env) -> None:
    obs, reward, terminated, truncated, info = env.step(A.Done())
    assert terminated and reward == 1.0, info.get("verifier")
    obs, _ = env.reset()
    text = wait_marker(env, type_command(env, "echo fresh-$((6*7))"))
    assert "fresh-42" in text


# ---------------------------------------------------------------------------- the attacks

FLOOD = ("/usr/bin/python3 -S -c \"exec('import os,time\\nok=bad=0\\nfor i in range(400):\\n try:\\n  p=os.fork()"
         "\\n except OSError:\\n  bad+=1\\n  continue\\n if p==0:\\n  time.sleep(40)\\n  os._exit(0)\\n ok+=1"
         "\\nprint(\\'FORKS\\',ok,\\'REFUSED\\',bad)')\"")


def test_fork_flood_is_held_at_the_process_bound(envs):
    env, witness = envs
    start_episode(env)
    bound = latency_bound(witness)
    baseline = len(tree(provider(env)._bwrap.pid))
    with Watchdog(env) as dog:
        marker = type_command(env, FLOOD)
        loaded = step_times(witness, 5)
        text = wait_marker(env, marker)
        m = re.search(r"FORKS (\d+) REFUSED (\d+)", text)
        assert m, text[-600:]
        forks, refused = int(m.group(1)), int(m.group(2))
        assert forks < BOUNDS["max_processes"] and refused > 0, (forks, refused)
        assert max(loaded) <= bound, (loaded, bound)
        end_scored_and_reset(env)  # the forked sleepers still hold the zone at its bound
    assert dog.peak_procs <= baseline + BOUNDS["max_processes"], (dog.peak_procs, baseline)


HOG = ("/usr/bin/python3 -S -c \"exec('b=[]\\nfor i in range(1024):\\n b.append(b\\'x\\'*(1<<20))"
       "\\nprint(\\'HOG\\',\\'DONE\\',len(b))')\"")


def test_memory_hog_is_killed_at_the_memory_bound(envs):
    env, witness = envs
    start_episode(env)
    bound = latency_bound(witness)
    with Watchdog(env) as dog:
        marker = type_command(env, HOG)
        loaded = step_times(witness, 5)
        text = wait_marker(env, marker)
        assert "HOG DONE" not in text, text[-600:]  # it was stopped before its 1 GiB
        assert max(loaded) <= bound, (loaded, bound)
        end_scored_and_reset(env)
    # the whole sandbox (infra included, shared pages counted twice) stayed near the bound
    assert dog.peak_rss_mib <= BOUNDS["memory_mib"] + 400, dog.peak_rss_mib


FILL = ("for f in ~/fill /tmp/fill /dev/shm/fill; do dd if=/dev/zero of=$f bs=1M count=200 2>&1 | head -1; done")


def test_disk_filler_is_held_at_the_quota(envs):
    env, witness = envs
    start_episode(env)
    p = provider(env)
    bound = latency_bound(witness)
    free0 = os.statvfs(p.state_dir).f_bavail * os.statvfs(p.state_dir).f_frsize
    with Watchdog(env):
        marker = type_command(env, FILL)
        loaded = step_times(witness, 3)
        text = wait_marker(env, marker)
        assert "No space left on device" in text, text[-600:]
        written = sum((d / "fill").stat().st_size for d in (p.home_dir, p.zone_tmp_dir) if (d / "fill").exists())
        assert written <= BOUNDS["disk_mib"] * MIB, written
        free1 = os.statvfs(p.state_dir).f_bavail * os.statvfs(p.state_dir).f_frsize
        # other processes on this host may write meanwhile: one quota of slack
        assert free0 - free1 <= 2 * BOUNDS["disk_mib"] * MIB, (free0 - free1) / MIB
        assert max(loaded) <= bound, (loaded, bound)
        end_scored_and_reset(env)
    assert not (p.home_dir / "fill").exists()


BURN = "for i in 1 2 3 4; do timeout 12 sh -c 'while :; do :; done' & done; wait"


def _burner_ticks() -> tuple[int, int]:
    """(number of burner processes, their CPU ticks) seen on the host."""
    n = ticks = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        if cmd.startswith(b"sh\0-c\0while :; do :; done") and (st := _stat(int(name))):
            n, ticks = n + 1, ticks + st[1]
    return n, ticks


def test_cpu_burner_is_held_at_its_cpu_quota(envs):
    env, witness = envs
    start_episode(env)  # the bounds are reported once the desktop has started (not before the first reset)
    how = env.unwrapped.desktop_info()["bounds"]["cpu"]
    if "quota" not in how:
        pytest.skip(f"no cpu cgroup here: {how}")  # the fallback (nice) caps nothing; doctor says so
    bound = latency_bound(witness)
    with Watchdog(env):
        marker = type_command(env, BURN)
        deadline = time.monotonic() + 10
        while _burner_ticks()[0] < 4:
            assert time.monotonic() < deadline, "the burners did not start"
            time.sleep(0.05)
        t0, (_, c0) = time.monotonic(), _burner_ticks()
        loaded = step_times(witness, 5)
        time.sleep(max(0.0, 3.0 - (time.monotonic() - t0)))
        t1, (n1, c1) = time.monotonic(), _burner_ticks()
        assert n1 == 4, "a burner ended before the measurement did"
        cores = (c1 - c0) / TICK / (t1 - t0)
        assert cores <= 1.5 * BOUNDS["cpu_cores"] + 0.05, cores  # a cap, so load cannot break it
        assert max(loaded) <= bound, (loaded, bound)
        wait_marker(env, marker)
        end_scored_and_reset(env)
