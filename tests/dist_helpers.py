"""Multi-process (torch.distributed, gloo on CPU) tests that cannot hang.

Why not ``torch.multiprocessing.start_processes(..., start_method="fork")``: a rank forked from a
pytest process that already runs Playwright and torch threads inherits locks held by threads
that do not exist in the child, and gloo's threads could then block at exit
(``ProcessGroupGloo::~ProcessGroupGloo`` joining a thread) until the 600 s test timeout, leaving
orphan ranks behind. Here every rank is

* **spawned** (a fresh interpreter; it imports the target by module name),
* in its **own process group** (``os.setpgrp``), so the parent can kill it and anything it started,
* ended by an explicit ``barrier`` + ``destroy_process_group`` after the target returns, then
  ``os._exit``: the results are already on disk, and nothing is left to interpreter teardown,
* **watched, not timed**: the first rank that fails (non-zero exit), or a **stall** (for
  ``stall_s`` seconds no thread of the ranks or their children was runnable and together they
  used less than :data:`STALL_CPU_S` of CPU: every one is blocked, e.g. in a deadlocked
  collective or a sleep), kills every rank's process group and fails the test with each rank's
  traceback. A rank that is slow because the machine is busy is runnable or gets CPU time, so it
  is never taken for a hung one (issue 33, item 5: a fixed 400 s bound failed 8 data-parallel tests at load 15-43);
  ``bound_s`` (default: none) is an optional hard cap on top, and pytest's per-test timeout
  stays the last resort (a rank spinning for ever).

:func:`torchrun` does the same for a ``python -m torch.distributed.run`` launch (a new session;
the whole session is killed on a stall or at its cap).
"""
from __future__ import annotations

import datetime
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest

#: CPU seconds the watched processes must use together per window to count as working by CPU
#: alone (a process blocked in a collective or a sleep uses ~0)
STALL_CPU_S = 0.2
#: default stall window in seconds
STALL_S = 60.0


def _tree(pids: Sequence[int]) -> list[Any]:
    """psutil.Process of ``pids`` and of their live descendants."""
    import psutil

    procs = []
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs += [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
    return procs


def _tree_cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds of ``pids`` and their live descendants (exited children that
    were waited for count in their parent's ``children_*`` times)."""
    import psutil

    total = 0.0
    for proc in _tree(pids):
        try:
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            continue
    return total


def _tree_runnable(pids: Sequence[int]) -> bool:
    """True when a thread of ``pids`` or of a descendant is running or waiting for a CPU
    (state R in /proc/PID/task/TID/stat): it has work to do, however busy the machine is."""
    for proc in _tree(pids):
        try:
            tids = os.listdir(f"/proc/{proc.pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{proc.pid}/task/{tid}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            if stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] == b"R":
                return True
    return False


class StallWatch:
    """Says when processes stopped working: over the last ``stall_s`` seconds none of their
    threads (nor their descendants') was ever seen runnable and together they used less than
    :data:`STALL_CPU_S` CPU seconds. A rank starved on a busy machine (below nice-0 work, it may
    get a tiny share of a core) is runnable while it waits for a CPU, so it never looks stalled;
    one blocked in a deadlocked collective or a sleep is not, and uses no CPU. The runnable check
    samples at each call (call it often: every 0.2-0.5 s)."""

    def __init__(self, pids: Callable[[], Sequence[int]], stall_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pids, self.stall_s, self.clock = pids, float(stall_s), clock
        self.mark_t, self.mark_cpu = clock(), _tree_cpu_seconds(pids())

    def stalled(self) -> bool:
        now, pids = self.clock(), self.pids()
        cpu = _tree_cpu_seconds(pids)
        if cpu - self.mark_cpu >= STALL_CPU_S or cpu < self.mark_cpu or _tree_runnable(pids):
            self.mark_t, self.mark_cpu = now, cpu  # working (or a process left): a new window
            return False
        return now - self.mark_t >= self.stall_s


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(target: Callable[..., Any], rank: int, world: int, port: int, err: str, args: tuple) -> None:
    """Body of one spawned rank: join the group, run ``target(rank, world, *args)``, leave cleanly."""
    os.setpgrp()  # the parent kills this group on failure or timeout
    code = 1
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
        # a peer that dies is seen by the parent, which kills every rank at once; the collective
        # timeout only has to outlast a peer that is merely slow (a busy machine), so it is long
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=1800))
        try:
            target(rank, world, *args)
            dist.barrier()
        finally:
            dist.destroy_process_group()
        code = 0
    except BaseException:  # noqa: BLE001 - reported to the parent through the file
        Path(err).write_text(traceback.format_exc())
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # skip interpreter teardown: results are written, nothing else may block exit


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_ranks(target: Callable[..., Any], world: int, args: Sequence[Any], tmp: Path,
              stall_s: float = STALL_S, bound_s: float | None = None) -> float:
    """Run ``target(rank, world, *args)`` on ``world`` spawned gloo ranks; return the wall time.

    ``target`` must be a module-level function of an importable module (spawn pickles it by
    name). Fails the test as soon as one rank fails, when the ranks stall for ``stall_s``
    seconds (:class:`StallWatch`: a hang guard, not a speed check) or after ``bound_s`` seconds
    when given; every rank's process group is killed on the way out, whatever happened.
    """
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    port = free_port()
    errs = [tmp / f"rank{r}.err" for r in range(world)]
    for e in errs:
        e.unlink(missing_ok=True)
    procs = [ctx.Process(target=_rank_main, args=(target, r, world, port, str(errs[r]), tuple(args)), daemon=True)
             for r in range(world)]
    t0 = time.monotonic()
    why = ""
    try:
        for p in procs:
            p.start()
        watch = StallWatch(lambda: [p.pid for p in procs if p.pid is not None and p.exitcode is None], stall_s)
        while any(p.exitcode is None for p in procs):
            if any(p.exitcode not in (None, 0) for p in procs):
                break
            if watch.stalled():
                why = f" (stalled: blocked, no CPU for {stall_s:.0f} s: killed)"
                break
            if bound_s is not None and time.monotonic() - t0 > bound_s:
                why = f" (still running after {bound_s:.0f} s: killed)"
                break
            time.sleep(0.2)
        codes = [p.exitcode for p in procs]
    finally:
        for p in procs:
            if p.pid is not None:
                _kill_group(p.pid)  # the rank and anything it started (after its setpgrp)
                if p.exitcode is None:
                    p.kill()  # a rank killed before it reached setpgrp
        for p in procs:
            p.join(timeout=10)
    if any(c != 0 for c in codes):
        ranks = "\n".join(f"--- rank {r} (exit {c}):\n{errs[r].read_text()[-3000:] if errs[r].exists() else ''}"
                          for r, c in enumerate(codes))
        pytest.fail(f"distributed ranks failed{why if None in codes else ''}:\n{ranks}")
    return time.monotonic() - t0


def torchrun(args: Sequence[str], cwd: Path, env: dict[str, str], bound_s: float | None = None,
             stall_s: float = STALL_S) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run ARGS`` in its own session, killed (the launcher and every
    rank) when the session stalls for ``stall_s`` seconds (:class:`StallWatch`) or outlives
    ``bound_s`` seconds when given; fails the test then. Output goes to files (a pipe nobody
    reads while we watch could fill and block the ranks)."""
    import tempfile

    cmd = [sys.executable, "-m", "torch.distributed.run", *args]
    with tempfile.TemporaryFile("w+") as fout, tempfile.TemporaryFile("w+") as ferr:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=fout, stderr=ferr, text=True,
                                start_new_session=True)
        t0, why = time.monotonic(), ""
        try:
            watch = StallWatch(lambda: [proc.pid], stall_s)
            while proc.poll() is None:
                if watch.stalled():
                    why = f"stalled (blocked, no CPU for {stall_s:.0f} s)"
                elif bound_s is not None and time.monotonic() - t0 > bound_s:
                    why = f"still running after {bound_s:.0f} s"
                if why:
                    break
                time.sleep(0.5)
        finally:
            _kill_group(proc.pid)  # ranks the launcher left behind, if any (or all of it on failure)
            proc.wait()
        fout.seek(0)
        ferr.seek(0)
        out, err = fout.read(), ferr.read()
    if why:
        pytest.fail(f"torchrun {why} (killed):\n{out[-2000:]}\n{err[-4000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def gather_from_children(target: Any, args: tuple, n: int, timeout_s: float = 120.0) -> list[Any]:
    """Start ``n`` spawned processes ``target(*args, barrier, queue)`` (not forked: a forked child
    can inherit locks of the parent's threads), return the ``n`` values they put on the queue, and
    join them; every child is killed on any failure or timeout (hang guards, not speed checks)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, barrier, out)) for _ in range(n)]
    try:
        for p in procs:
            p.start()
        got = [out.get(timeout=timeout_s) for _ in range(n)]
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0, p.exitcode
        return got
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(timeout=10)
