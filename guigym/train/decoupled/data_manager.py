"""Data Manager (DART sec. 3.2 and appendix A): hands tasks to env clusters, stores finished
groups in the DataStore, releases them to the trainer in the order they were stored.

::

    env cluster --next_jobs(k)--> [job: group_id, task_id, seed, n, members]   (back-pressure: [])
    env cluster --add_group(group_id, trajectories, members)--> DataStore + ready queue
    trainer     --take(k)--> k groups (FIFO) + cursor = newest stored row id among them

Rollout-wise dealing (DART sec. 3.4: the trajectory is the scheduling unit): ``next_jobs(k)``
hands out ``k`` rollouts, not ``k`` groups. A job is a slice of one group (``members``, a subset
of ``range(n)``); the members of a group may run in different env clusters, and a cluster with
one free env takes one rollout, leaving the group's other members to whichever env frees next,
in any cluster. A group is stored and released only once all ``n`` members have ended (an
unscorable one ends without a trajectory, so it is not in the group); until then its finished
trajectories wait here, in memory.

Storage is the SQL DataStore (SQLite file locally, any SQLAlchemy URL such as PostgreSQL across
nodes). Groups leave the ready queue in insertion order, so "everything stored up to row
id ``cursor``" is exactly what the trainer has consumed; the trainer keeps the cursor in its
checkpoint, and a resumed Data Manager re-releases every on-policy trajectory stored after it
(nothing stored is lost, nothing consumed comes back).

Tasks: ``env.tasks`` round robin, episode seeds drawn from ``env.train_seeds`` by a counter kept
in the DataStore state (``decoupled/dealt``), so a resumed run does not repeat seeds.
"""
from __future__ import annotations

import random
import threading
import time
import uuid
from collections import deque
from typing import Any, Optional, Sequence

from guigym.train.decoupled.events import EventLog

STATE_DEALT = "decoupled/dealt"


class DataManager:
    """Runs inside a Ray actor (:func:`launch`); usable in-process in tests.

    Args:
        db_url, blob_root: the DataStore (same as the trainer's).
        run_id: the run (created by the trainer's ``start_run``).
        tasks: task ids dealt round robin; group_size: N rollouts per task.
        seed, seed_start, seed_count: episode seeds ``seed_start + rng.randrange(seed_count)``.
        max_buffered: no new job while this many groups are running or ready.
        after_id: resume cursor (row id); trajectories stored after it are released again.
    """

    def __init__(self, db_url: str, blob_root: Optional[str], run_id: str, tasks: Sequence[str], group_size: int,
                 seed: int, seed_start: int, seed_count: int, max_buffered: int, after_id: int = 0) -> None:
        from guigym.train.data.store import DataStore

        self.store = DataStore(db_url, blob_root)
        self.run_id = run_id
        self.tasks = list(tasks)
        self.group_size = int(group_size)
        self.seed = seed
        self.seed_start, self.seed_count = int(seed_start), int(seed_count)
        self.max_buffered = int(max_buffered)
        self.log = EventLog("data")
        self._lock = threading.Condition()
        self._running: dict[str, dict[str, Any]] = {}  # group id -> job + dealt/ended members, trajectories
        self._open: deque[str] = deque()  # running groups with members not dealt yet, oldest first
        self._ready: deque[tuple[Any, int]] = deque()  # (Group, newest row id)
        state = self.store.get_state(run_id, STATE_DEALT) or {}
        self._dealt = int(state.get("n", 0))
        self.released = 0
        self.recovered = 0
        self._recover(int(after_id))

    def _recover(self, after_id: int) -> None:
        """Ready queue of a resumed run: on-policy trajectories stored after the cursor, by group."""
        from guigym.train.data.types import Group

        trajs = self.store.get_trajectories(self.run_id, after_id=after_id, source="on_policy")
        if not trajs:
            return
        rows = self.store.row_ids([t.traj_id for t in trajs])
        groups: dict[str, tuple[Any, int]] = {}
        for t in trajs:
            g, last = groups.get(t.group_id, (Group(t.group_id, t.task_id, []), 0))
            g.trajectories.append(t)
            groups[t.group_id] = (g, max(last, rows[t.traj_id]))
        self._ready.extend(sorted(groups.values(), key=lambda x: x[1]))
        self.recovered = sum(len(g.trajectories) for g, _ in self._ready)

    # ---- env clusters -------------------------------------------------------------------------
    def next_jobs(self, n: int) -> list[dict[str, Any]]:
        """Up to ``n`` rollouts as jobs ``{"group_id", "task_id", "seed", "n", "members"}``: the
        undealt members of the oldest open group first, then new groups; fewer or none once
        ``max_buffered`` groups are running (dealt, not all ended) or waiting for the trainer."""
        from guigym.core.errors import ConfigError

        if n < 1:
            raise ConfigError(f"next_jobs: n must be >= 1 rollouts, got {n}")
        out: dict[str, dict[str, Any]] = {}
        opened = False
        with self._lock:
            left = n
            while left > 0:
                if not self._open:
                    if len(self._running) + len(self._ready) >= self.max_buffered:
                        break
                    k = self._dealt
                    rng = random.Random(f"{self.seed}/decoupled/{k}")
                    gid = uuid.uuid4().hex
                    self._running[gid] = {"task_id": self.tasks[k % len(self.tasks)],
                                          "seed": self.seed_start + rng.randrange(self.seed_count),
                                          "n": self.group_size, "dealt": 0, "ended": 0, "trajs": [],
                                          "abandoned": False}
                    self._open.append(gid)
                    self._dealt += 1
                    opened = True
                gid = self._open[0]
                g = self._running[gid]
                take = min(left, g["n"] - g["dealt"])
                job = out.setdefault(gid, {"group_id": gid, "task_id": g["task_id"], "seed": g["seed"], "n": g["n"],
                                           "members": []})
                job["members"] += list(range(g["dealt"], g["dealt"] + take))
                g["dealt"] += take
                left -= take
                if g["dealt"] == g["n"]:
                    self._open.popleft()
            dealt = self._dealt
        if opened:
            self.store.set_state(self.run_id, STATE_DEALT, {"n": dealt})
        return list(out.values())

    def add_group(self, group_id: str, trajs: Sequence[Any], members: Optional[Sequence[int]] = None) -> int:
        """``members`` of group ``group_id`` ended with these trajectories (unscorable members
        have none; default: every member). Once all its members ended, the group is stored and
        released to the trainer; returns the number of trajectories stored now."""
        from guigym.train.data.types import Group

        t0 = time.time()
        with self._lock:  # store + enqueue together: queue order == insertion order (the cursor relies on it)
            g = self._running.get(group_id)
            if g is None:  # not dealt by this manager (e.g. before a restart): store it as it is
                g = {"task_id": trajs[0].task_id if trajs else "", "n": 0, "ended": 0, "trajs": [],
                     "abandoned": False}
            g["trajs"] += list(trajs)
            g["ended"] += len(members) if members is not None else g["n"]
            if g["ended"] < g["n"]:
                self._running[group_id] = g
                return 0
            self._running.pop(group_id, None)
            stored = 0
            if g["trajs"] and not g["abandoned"]:
                members_of = sorted(g["trajs"], key=lambda t: t.info.get("member", 0))
                self.store.add_trajectories(self.run_id, members_of)
                last = max(self.store.row_ids([t.traj_id for t in members_of]).values())
                self._ready.append((Group(group_id, g["task_id"], members_of), last))
                self.released += 1
                stored = len(members_of)
            self._lock.notify_all()
        self.log.add("release", "data", t0, time.time(), group_id=group_id, size=stored)
        return stored

    def abandon(self, group_id: str, members: Optional[Sequence[int]] = None) -> None:
        """An env cluster gave up on ``members`` of a group (default: all it was dealt): the group
        is dropped, never released, once all its members ended; it no longer counts as running."""
        with self._lock:
            g = self._running.get(group_id)
            if g is not None:
                g["abandoned"] = True
                g["ended"] += len(members) if members is not None else g["n"] - g["ended"]
                if g["ended"] >= g["n"]:
                    self._running.pop(group_id, None)
                    if group_id in self._open:
                        self._open.remove(group_id)
            self._lock.notify_all()

    # ---- trainer ------------------------------------------------------------------------------
    def take(self, n: int, timeout_s: float = 1.0) -> tuple[list[Any], int]:
        """``(groups, cursor)``: the ``n`` oldest ready groups once that many are ready (waits up to
        ``timeout_s``; ``([], 0)`` when not), and the newest row id among them."""
        end = time.monotonic() + timeout_s
        with self._lock:
            while len(self._ready) < n:
                left = end - time.monotonic()
                if left <= 0:
                    return [], 0
                self._lock.wait(left)
            taken = [self._ready.popleft() for _ in range(n)]
            self._lock.notify_all()
        return [g for g, _ in taken], max(r for _, r in taken)

    def status(self) -> dict[str, int]:
        with self._lock:
            return {"running": len(self._running), "ready": len(self._ready), "dealt": self._dealt,
                    "released": self.released, "recovered": self.recovered}

    def events(self) -> list[dict[str, Any]]:
        return self.log.rows()

    def close(self) -> None:
        self.store.close()
