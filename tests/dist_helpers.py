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
* **joined with a hard bound**: the first rank that fails (non-zero exit) or the bound expiring
  kills every rank's process group and fails the test with each rank's traceback.

:func:`torchrun` does the same for a ``python -m torch.distributed.run`` launch (a new session;
the whole session is killed on timeout).
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
        # a peer that died makes collectives fail after this, instead of waiting 30 min
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
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


def run_ranks(target: Callable[..., Any], world: int, args: Sequence[Any], tmp: Path, bound_s: float = 300.0) -> float:
    """Run ``target(rank, world, *args)`` on ``world`` spawned gloo ranks; return the wall time.

    ``target`` must be a module-level function of an importable module (spawn pickles it by
    name). Fails the test as soon as one rank fails, or after ``bound_s`` seconds (a hang guard,
    not a speed check); every rank's process group is killed on the way out, whatever happened.
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
    try:
        for p in procs:
            p.start()
        deadline = t0 + bound_s
        while any(p.exitcode is None for p in procs):
            failed = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
            if failed or time.monotonic() > deadline:
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
        why = "\n".join(f"--- rank {r} (exit {c}):\n{errs[r].read_text()[-3000:] if errs[r].exists() else ''}"
                        for r, c in enumerate(codes))
        hung = " (still running after %.0f s: killed)" % bound_s if None in codes else ""
        pytest.fail(f"distributed ranks failed{hung}:\n{why}")
    return time.monotonic() - t0


def torchrun(args: Sequence[str], cwd: Path, env: dict[str, str], bound_s: float) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run ARGS`` in its own session, killed (the launcher and every
    rank) if it outlives ``bound_s`` seconds; fails the test then."""
    cmd = [sys.executable, "-m", "torch.distributed.run", *args]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=bound_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, err = proc.communicate()
        pytest.fail(f"torchrun still running after {bound_s:.0f} s (killed):\n{out[-2000:]}\n{err[-4000:]}")
    finally:
        _kill_group(proc.pid)  # ranks the launcher left behind, if any
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
