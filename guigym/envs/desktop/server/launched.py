"""Which processes the task's setup started: the app instances getters may trust (issue 35, item 3).

A getter that asks an app over its local interface (VLC's HTTP status, Chromium's DevTools)
first checks that the port belongs to the app's installed binary (``getters/port_owner.py``).
That alone still trusts an instance the agent started itself with its own configuration (VLC
with an HTTP source directory of its own, Chromium with a profile it wrote). So the server
records each process it starts for a setup step (``/setup/launch``, ``/setup/open_file``): it
starts them with ``start_new_session=True``, so each is the leader of a session of its own, and
every process the app forks or execs stays in that session (a process can leave its session
only for a new one it leads, and can never join another). :func:`members` lists the live
processes of those sessions; the getters accept an answer only from one of them.

Pids are given as the agent zone sees them (the innermost entry of ``NSpid`` in
``/proc/<pid>/status``: the getters' programs run in the zone's PID namespace), with the start
time (``/proc/<pid>/stat`` field 22, clock ticks since boot) so a recycled pid never passes.

Residual risk: once every process of a setup session has died, an agent that cycles the whole
pid space to get the dead leader's pid number, and makes a session of its own with it, would be
trusted (about 4 million forks; a live leader whose start time differs is detected and refused).
"""
from __future__ import annotations

import os
from typing import Iterable, Optional

__all__ = ["start_time", "members"]


def _stat(pid: int, proc: str = "/proc") -> Optional[list[str]]:
    """Fields of ``/proc/<pid>/stat`` after the command name (field 3 on), None when gone."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    return raw[raw.rfind(")") + 2:].split()


def start_time(pid: int, proc: str = "/proc") -> Optional[int]:
    """Start time of ``pid`` in clock ticks since boot (stat field 22), None when gone."""
    st = _stat(pid, proc)
    return int(st[19]) if st and len(st) > 19 else None


def _inner_pid(pid: int, proc: str) -> Optional[int]:
    """``pid`` as its innermost PID namespace numbers it (``NSpid``'s last entry)."""
    try:
        with open(f"{proc}/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        return None
    return pid  # a kernel without NSpid (< 4.1): no nested namespaces to map


def members(leaders: Iterable[tuple[int, int]], proc: str = "/proc") -> list[tuple[int, int]]:
    """``[(pid as the innermost namespace sees it, start time)]`` of every live process in the
    sessions led by ``leaders`` (``(pid, start time)`` of each process the server started for a
    setup step, as this process's namespace numbers them). A session whose leader's pid now
    belongs to another process (another start time) was recycled and yields nothing."""
    sessions = set()
    for pid, started in leaders:
        now = start_time(pid, proc)
        if now is None or now == started:  # (gone: its session lives on in the app it started)
            sessions.add(str(pid))
    out = []
    if not sessions:
        return out
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        st = _stat(int(name), proc)
        if st is None or len(st) <= 19 or st[3] not in sessions:  # st[3]: the session id (field 6)
            continue
        inner = _inner_pid(int(name), proc)
        if inner is not None:
            out.append((inner, int(st[19])))
    return out
