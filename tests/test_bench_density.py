"""bench/density.py's pure parts: the stop rule and the PSS sum over a process tree (issue 35
item 4). No desktop is started here: the bench itself starts up to 12."""
from __future__ import annotations

import importlib.util
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
GIB = 1024 * MIB


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name.strip('_')}", ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


D = _load("density")
T = _load("_proctree")
CAPS = dict(max_desktops=12, min_free=4 * GIB, p90_limit_s=1.0)


def _ready(proc: subprocess.Popen, guard_s: float = 120.0) -> None:
    deadline = time.monotonic() + guard_s  # a hang guard only: readiness is an event
    line = b""
    while not line and time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 1.0)[0]:
            line = proc.stdout.readline()
        assert proc.poll() is None, "the helper process exited"
    assert line.strip() == b"ready"


def test_stop_rule_starts_while_fast_roomy_and_under_the_cap():
    assert D.stop_reason(0, None, 20 * GIB, 0, **CAPS) is None
    assert D.stop_reason(5, 0.999, 20 * GIB, 300 * MIB, **CAPS) is None
    # exactly the limit has not passed it; exactly min_free left is still enough
    assert D.stop_reason(5, 1.0, 4 * GIB + 300 * MIB, 300 * MIB, **CAPS) is None


def test_stop_rule_stops_on_latency_cap_and_memory():
    assert "p90 1001 ms > 1000 ms" in D.stop_reason(3, 1.001, 20 * GIB, 300 * MIB, **CAPS)
    assert "--max-desktops" in D.stop_reason(12, 0.2, 20 * GIB, 300 * MIB, **CAPS)
    # 4.2 GiB available, the next desktop ~300 MiB: 3.9 GiB would be left, under the 4 GiB kept
    why = D.stop_reason(2, 0.2, int(4.2 * GIB), 300 * MIB, **CAPS)
    assert why is not None and "to keep free" in why


def test_sum_over_counts_each_pid_once_and_skips_processes_that_exit():
    class P:
        def __init__(self, pid: int) -> None:
            self.pid = pid

    sizes = {10: 5 * MIB, 11: 7 * MIB}

    def pss_of(p: P) -> int:
        if p.pid == 12:
            raise psutil.NoSuchProcess(12)
        return sizes[p.pid]

    assert T.sum_over([P(10), P(11), P(10), P(12)], pss_of) == (12 * MIB, 2)


# a process that touches 64 MiB, then forks: parent and child share those pages copy-on-write
FORKER = """
import os, sys, time
buf = bytearray(64 * 1024 * 1024)
for i in range(0, len(buf), 4096):
    buf[i] = 1
if os.fork() == 0:
    time.sleep(600); os._exit(0)
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="no PSS on this kernel")
def test_tree_pss_sums_descendants_and_splits_shared_pages():
    proc = subprocess.Popen([sys.executable, "-c", FORKER], stdout=subprocess.PIPE, start_new_session=True)
    try:
        _ready(proc)
        root = psutil.Process(proc.pid)
        kids = root.children(recursive=True)
        assert len(kids) == 1
        total, n = T.tree_pss(proc.pid)
        root_only = root.memory_full_info().pss
        rss_sum = sum(p.memory_info().rss for p in [root] + kids)
        assert n == 2
        # the child's half of the 64 shared MiB is in the tree's sum, not in the root's alone
        assert total - root_only > 24 * MIB
        # shared pages counted once in all (PSS), twice in the RSS sum
        assert total > 60 * MIB
        assert rss_sum - total > 48 * MIB
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()


# a child burns 0.4 s of CPU (process time, not wall time) and is reaped; the parent then idles
BURNER = """
import os, sys, time
pid = os.fork()
if pid == 0:
    while time.process_time() < 0.4:
        pass
    os._exit(0)
os.waitpid(pid, 0)
print("ready", flush=True)
time.sleep(600)
"""


def test_tree_cpu_counts_a_child_that_already_exited():
    proc = subprocess.Popen([sys.executable, "-c", BURNER], stdout=subprocess.PIPE, start_new_session=True)
    try:
        _ready(proc)
        own = psutil.Process(proc.pid).cpu_times()
        assert T.tree_cpu_s(proc.pid) >= 0.4
        assert T.tree_cpu_s(proc.pid) - (own.user + own.system) >= 0.35  # the child's, not the parent's
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()


def test_tree_pss_of_a_gone_root_raises():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=60)
    with pytest.raises(psutil.NoSuchProcess):
        T.tree_pss(proc.pid)


def test_percentile_is_nearest_rank():
    xs = [float(v) for v in range(1, 11)]  # 1..10
    assert D.percentile(xs, 0.9) == 9.0
    assert D.percentile(xs, 0.5) == 5.0
    assert D.percentile([3.0], 0.9) == 3.0
