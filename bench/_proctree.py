"""What a local desktop costs, read from its host process tree (bench/density.py,
bench/desktop_reset.py ``--bounds-ab``).

A local desktop is one bwrap process and its descendants: the sandbox's PID namespace init reaps
every orphan, so no process of a desktop leaves the tree (``LocalProvider.root_pid``).
"""
from __future__ import annotations

from typing import Callable, Iterable

import psutil


def tree(root_pid: int) -> list[psutil.Process]:
    """``root_pid`` and all its descendants now (``psutil.NoSuchProcess`` when the root is gone)."""
    root = psutil.Process(root_pid)
    return [root] + root.children(recursive=True)


def sum_over(procs: Iterable[psutil.Process], read: Callable[[psutil.Process], float]) -> tuple[float, int]:
    """(``read(p)`` summed over ``procs``, each pid once, processes counted); processes that exit
    while being read are skipped (a desktop always has short-lived ones)."""
    seen: set[int] = set()
    total: float = 0
    n = 0
    for p in procs:
        if p.pid in seen:
            continue
        seen.add(p.pid)
        try:
            total += read(p)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        n += 1
    return total, n


def pss(p: psutil.Process) -> int:
    """Proportional set size (bytes): each shared page split among its sharers, so the sum over
    processes counts it once (``/proc/<pid>/smaps_rollup``; another uid's needs root)."""
    return int(p.memory_full_info().pss)


def cpu_s(p: psutil.Process) -> float:
    """CPU seconds of ``p`` and of every descendant it has reaped (``children_*``: the kernel
    adds a waited-for child's own and reaped children's time to its parent)."""
    t = p.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def tree_pss(root_pid: int) -> tuple[int, int]:
    """(PSS in bytes summed over ``root_pid``'s tree, processes counted)."""
    total, n = sum_over(tree(root_pid), pss)
    return int(total), n


def tree_cpu_s(root_pid: int) -> float:
    """CPU seconds the tree of ``root_pid`` has used so far, including processes that already
    exited and were reaped inside it (a reset's short-lived ``sh``/``prlimit``/``nsenter``).

    Not counted: a process that exited and was not yet reaped, or one reaped outside the tree;
    neither happens to a desktop's processes (their reaper is in the tree)."""
    return sum_over(tree(root_pid), cpu_s)[0]
