"""RolloutScheduler.stream: rollout-wise sampling with no barrier between jobs (DART sec. 3.4,
Figure 3 (c)), the loop every decoupled Env Cluster runs.

Envs run in this process (an inline pool answers each call at once, in call order), so the order
of events is deterministic and the tests can state exactly which rollout ran where.
"""
from __future__ import annotations

import concurrent.futures
from typing import Any, Optional

import numpy as np
import pytest

from guigym.core import actions as A
from guigym.core.task import Task
from guigym.envs.base import GUIEnv
from guigym.envs.pool import PoolResult
from train_helpers import FixedPrompts
from guigym.train.rollout.scheduler import RolloutScheduler, StreamJob


class BudgetEnv(GUIEnv):
    """Every action spends a step; the episode ends at its step budget (truncated) or on ``done``.
    Reward 1 when the last action was ``done(answer='yes')``, else 0; task ``judge`` is never
    scorable (None), as a fuzzy_match task without a judge."""

    def __init__(self) -> None:
        super().__init__([Task(id=t, instruction="go", platform="web", suite="test", max_steps=5)
                          for t in ("long", "short", "judge")])

    def _start_episode(self, task: Task, seed: int) -> None:
        pass

    def _observe(self) -> dict[str, Any]:
        return {"screenshot": np.zeros((4, 4, 3), np.uint8), "instruction": "go"}

    def _execute(self, action: A.Action) -> None:
        pass

    def _verify(self, task: Task, last_action: Optional[A.Action]) -> tuple[Optional[float], dict[str, Any]]:
        if task.id == "judge":
            return None, {}
        return float(getattr(last_action, "answer", None) == "yes"), {}


class InlinePool:
    """``num_envs`` BudgetEnvs with EnvPool's asynchronous interface, answered in call order.
    ``log`` records (env index, kind, task) per call."""

    call_timeout_s = 5.0

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs
        self.envs = [BudgetEnv() for _ in range(num_envs)]
        self.results: list[PoolResult] = []
        self.log: list[tuple[int, str, str]] = []
        self.task = [""] * num_envs

    @property
    def busy(self) -> bool:
        return bool(self.results)

    def reset_async(self, i: int, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None) -> None:
        self.task[i] = options["task"]
        self.log.append((i, "reset", self.task[i]))
        self.results.append(PoolResult(i, "reset", self.envs[i].reset(seed=seed, options=options)))

    def step_async(self, i: int, action: str) -> None:
        self.log.append((i, "step", self.task[i]))
        self.results.append(PoolResult(i, "step", self.envs[i].step(action)))

    def wait(self, timeout: Optional[float] = None) -> list[PoolResult]:
        out, self.results = self.results[:1], self.results[1:]  # one at a time: calls interleave
        return out


class Service:
    """Replies ``text`` to every request (default: a step that ends nothing, so every episode
    runs its step budget); ``fail_at``: the n-th request raises; ``fail_from``: every request
    from the n-th on raises (a policy worker that stays dead)."""

    def __init__(self, text: str = "wait(seconds=0)", fail_at: Optional[int] = None,
                 fail_from: Optional[int] = None) -> None:
        self.text, self.fail_at, self.fail_from, self.n = text, fail_at, fail_from, 0

    def submit(self, req: Any) -> concurrent.futures.Future:
        from guigym.train.rollout.policy_service import GenResult

        self.n += 1
        fut: concurrent.futures.Future = concurrent.futures.Future()
        if self.n == self.fail_at or (self.fail_from is not None and self.n >= self.fail_from):
            fut.set_exception(RuntimeError("policy worker died"))
        else:
            fut.set_result(GenResult(response_ids=[7], logprobs=[-0.5], text=self.text,
                                     entropy=None, policy_version=self.n))
        return fut

    def stats(self) -> dict[str, Any]:
        return {"requests": self.n, "busy_s": 0.0}


class Dealer:
    """Hands out ``plan`` [(task, n rollouts, step budget)] one job per call (``empty_first``
    empty answers first: back-pressure); records what was pulled and delivered, in order."""

    def __init__(self, plan: list[tuple[str, int, int]], empty_first: int = 0) -> None:
        self.plan, self.empty = list(plan), empty_first
        self.asked: list[int] = []
        self.pulled: list[str] = []
        self.delivered: list[tuple[str, Any]] = []

    def pull(self, k: int) -> list[StreamJob]:
        self.asked.append(k)
        if self.empty:
            self.empty -= 1
            return []
        if not self.plan:
            return []
        task, n, budget = self.plan.pop(0)
        key = f"job{len(self.pulled)}:{task}"
        self.pulled.append(key)
        return [StreamJob(key=key, task_id=task, seed=len(self.pulled), n=n, max_steps=budget)]

    def deliver(self, key: Any, group: Any) -> None:
        self.delivered.append((key, group))

    def stop(self) -> bool:
        return not self.plan


def test_a_free_env_pulls_the_next_job_while_another_job_still_runs():
    # env 0 runs one 6-step rollout; env 1 meanwhile runs three 1-step jobs pulled one after another.
    # With a barrier per pull (the old collect-per-batch loop) job2/job3 could start only after job0.
    pool = InlinePool(2)
    dealer = Dealer([("long", 1, 6), ("short", 1, 1), ("short", 1, 1), ("short", 1, 1)])
    sched = RolloutScheduler(pool, Service(), FixedPrompts(), mode="rollout", group_size=1, seed=3, run_id="r")
    st = sched.stream(dealer.pull, dealer.deliver, dealer.stop, idle_wait_s=0.001)
    keys = [k for k, _ in dealer.delivered]
    assert sorted(keys) == sorted(dealer.pulled) and len(keys) == 4
    assert keys[-1] == "job0:long", keys  # the long job ends last: the short ones were pulled and done meanwhile
    env1_tasks = [t for i, kind, t in pool.log if i == 1 and kind == "reset"]
    assert env1_tasks == ["short", "short", "short"], pool.log
    # job3's reset came before the long rollout's last step: no barrier between jobs
    last_long = max(k for k, (i, kind, t) in enumerate(pool.log) if t == "long")
    third_short = [k for k, (i, kind, t) in enumerate(pool.log) if kind == "reset" and t == "short"][2]
    assert third_short < last_long, pool.log
    for key, group in dealer.delivered:
        (traj,) = group.trajectories
        traj.validate()
        assert traj.length == (6 if key.endswith("long") else 1) and traj.group_id == group.group_id
        assert traj.run_id == "r" and traj.reward == 0.0
    assert (st.trajectories, st.actions, st.resets, st.lost) == (4, 9, 4, 0)
    assert sched.last_stats is st


def test_groups_are_delivered_whole_and_pulls_ask_for_the_free_envs():
    pool = InlinePool(4)
    dealer = Dealer([("short", 3, 2), ("long", 3, 4), ("judge", 2, 1)], empty_first=2)
    answers = Service("done(answer='yes')")
    sched = RolloutScheduler(pool, answers, FixedPrompts(), mode="rollout", group_size=3, seed=3)
    sched.stream(dealer.pull, dealer.deliver, dealer.stop, idle_wait_s=0.001)
    assert dealer.asked[:3] == [4, 4, 4], dealer.asked  # 4 free envs; two empty answers, asked again
    by_key = dict(dealer.delivered)
    assert set(by_key) == set(dealer.pulled)
    for key, group in by_key.items():
        members = [t.info["member"] for t in group.trajectories]
        if key.endswith("judge"):
            assert members == []  # every rollout unscorable: delivered empty so the job is released
        else:
            assert members == [0, 1, 2] and all(t.reward == 1.0 and t.success for t in group.trajectories)
            assert len({t.group_id for t in group.trajectories}) == 1
    assert sched.last_stats.unscorable == 2


def test_stop_ends_pulling_but_every_pulled_job_is_finished():
    pool = InlinePool(2)
    dealer = Dealer([("long", 2, 3)] * 10)
    stopped = []

    def stop() -> bool:
        return bool(stopped)

    def deliver(key: Any, group: Any) -> None:
        dealer.deliver(key, group)
        stopped.append(True)  # stop after the first group

    sched = RolloutScheduler(pool, Service(), FixedPrompts(), mode="rollout", group_size=2, seed=3)
    sched.stream(dealer.pull, deliver, stop, idle_wait_s=0.001)
    assert len(dealer.pulled) < 10
    assert [k for k, _ in dealer.delivered] == dealer.pulled  # nothing pulled is left behind
    assert all(len(g.trajectories) == 2 for _, g in dealer.delivered)


def test_a_policy_error_propagates_and_leaves_the_pool_idle():
    # a policy worker that stays dead: each request is retried once, then its rollout is lost and
    # rerun once (never a reward-0 trajectory), then the error propagates
    pool = InlinePool(2)
    dealer = Dealer([("long", 2, 3)] * 3)
    sched = RolloutScheduler(pool, Service(fail_from=4), FixedPrompts(), mode="rollout", group_size=2, seed=3,
                             policy_retries=1, policy_backoff_s=0.0, max_lost_retries=1)
    with pytest.raises(RuntimeError, match="policy service failed 2 time.*policy worker died"):
        sched.stream(dealer.pull, dealer.deliver, dealer.stop, idle_wait_s=0.001)
    assert not pool.busy
    assert len(dealer.delivered) < len(dealer.pulled)  # the caller abandons the rest


def test_a_policy_error_that_passes_is_retried_and_costs_nothing():
    pool = InlinePool(2)
    dealer = Dealer([("long", 2, 3)] * 3)
    sched = RolloutScheduler(pool, Service(fail_at=4), FixedPrompts(), mode="rollout", group_size=2, seed=3,
                             policy_backoff_s=0.0)
    sched.stream(dealer.pull, dealer.deliver, dealer.stop, idle_wait_s=0.001)
    assert [k for k, _ in dealer.delivered] == dealer.pulled and len(dealer.pulled) == 3
    assert all(len(g.trajectories) == 2 and all(t.length == 3 for t in g.trajectories) for _, g in dealer.delivered)
    assert sched.last_stats.policy_retries == 1 and sched.last_stats.lost == 0


def test_stream_refuses_the_lockstep_mode_and_bad_jobs():
    sched = RolloutScheduler(InlinePool(1), Service(), FixedPrompts(), mode="sync", group_size=1)
    with pytest.raises(ValueError, match="rollout"):
        sched.stream(lambda k: [], lambda k, g: None, lambda: True)
    sched = RolloutScheduler(InlinePool(1), Service(), FixedPrompts(), mode="rollout", group_size=1)
    for members in ([], [0, 0], [2]):
        bad = [StreamJob(key="x", task_id="short", seed=1, n=2, members=members)]
        with pytest.raises(ValueError, match="members must be distinct"):
            sched.stream(lambda k: bad, lambda k, g: None, lambda: False)


def test_a_slice_of_a_group_runs_its_own_members():
    # a data manager that deals single rollouts: members 1 and 3 of a group of 4 run here
    pool = InlinePool(2)
    jobs = [[StreamJob(key="g/1,3", task_id="short", seed=9, n=4, members=[3, 1], max_steps=2)]]
    got = []
    sched = RolloutScheduler(pool, Service(), FixedPrompts(), mode="rollout", group_size=4, seed=3)
    sched.stream(lambda k: jobs.pop() if jobs else [], lambda k, g: got.append((k, g)), lambda: not jobs)
    ((key, group),) = got
    assert key == "g/1,3" and [t.info["member"] for t in group.trajectories] == [1, 3]
    assert all(t.seed == 9 and t.length == 2 for t in group.trajectories)


# ---- the Data Manager deals rollouts, not groups ---------------------------------------------------------
def _traj(run_id: str, job: dict, member: int, reward: float = 1.0):
    from guigym.train.data.types import Step, Trajectory, new_traj_id

    step = Step(prompt_ids=[1, 2], response_ids=[7], rollout_logprobs=[-0.5], policy_version=0)
    return Trajectory(traj_id=new_traj_id(), run_id=run_id, task_id=job["task_id"], seed=job["seed"],
                      group_id=job["group_id"], steps=[step], reward=reward, info={"member": member})


def test_the_data_manager_deals_single_rollouts_and_releases_a_group_once_all_its_members_ended(tmp_path):
    from guigym.train.data.store import DataStore
    from guigym.train.decoupled.data_manager import DataManager

    url = f"sqlite:///{tmp_path / 'dm.db'}"
    run_id = DataStore(url).start_run("dm")
    dm = DataManager(url, None, run_id, tasks=["a", "b"], group_size=4, seed=0, seed_start=100, seed_count=50,
                     max_buffered=2)
    (j1,) = dm.next_jobs(1)  # one free env takes one rollout, not a whole group
    assert (j1["task_id"], j1["n"], j1["members"]) == ("a", 4, [0])
    j2, j3 = dm.next_jobs(5)  # the rest of group a first, then the start of group b
    assert j2["group_id"] == j1["group_id"] and j2["members"] == [1, 2, 3] and j2["seed"] == j1["seed"]
    assert (j3["task_id"], j3["members"]) == ("b", [0, 1])
    (j4,) = dm.next_jobs(10)  # the buffer holds 2 groups: only b's last two members are left
    assert j4["group_id"] == j3["group_id"] and j4["members"] == [2, 3]
    assert dm.next_jobs(3) == []

    # group a: member 0 here, members 1-3 elsewhere (2 unscorable: it ends without a trajectory)
    assert dm.add_group(j1["group_id"], [_traj(run_id, j1, 0)], [0]) == 0
    assert dm.take(1, timeout_s=0.05) == ([], 0)  # not released while members run
    assert dm.add_group(j2["group_id"], [_traj(run_id, j2, 3), _traj(run_id, j2, 1)], [1, 2, 3]) == 3
    (group,), cursor = dm.take(1, timeout_s=1.0)
    assert [t.info["member"] for t in group.trajectories] == [0, 1, 3] and cursor > 0
    assert len(DataStore(url).get_trajectories(run_id)) == 3

    # group b: one slice's cluster failed: the group is dropped, never released, and frees its slot
    dm.abandon(j3["group_id"], [0, 1])
    assert dm.status()["running"] == 1
    assert dm.add_group(j4["group_id"], [_traj(run_id, j4, 2), _traj(run_id, j4, 3)], [2, 3]) == 0
    assert dm.status()["running"] == 0 and dm.take(1, timeout_s=0.05) == ([], 0)
    (j5,) = dm.next_jobs(2)
    assert (j5["task_id"], j5["members"]) == ("a", [0, 1]) and j5["group_id"] not in (j1["group_id"], j3["group_id"])
    dm.close()


def test_each_trajectory_says_which_env_rows_are_its_own():
    # bench/scale.py removes a dropped rollout's env time by (lane, span): the span on env
    # env_index must hold exactly that rollout's reset and steps, and nothing of its neighbours'
    from guigym.train.decoupled.env_cluster import _LoggedPool
    from guigym.train.decoupled.events import EventLog

    log = EventLog("env")
    pool = _LoggedPool(InlinePool(2), log, "env0")
    dealer = Dealer([("long", 1, 4), ("short", 1, 1), ("short", 1, 2), ("long", 1, 3)])
    sched = RolloutScheduler(pool, Service(), FixedPrompts(), mode="rollout", group_size=1, seed=3)
    sched.stream(dealer.pull, dealer.deliver, dealer.stop, idle_wait_s=0.001)
    rows = log.rows()
    trajs = [t for _, g in dealer.delivered for t in g.trajectories]
    assert len(trajs) == 4 and len(rows) == 4 + sum(t.length for t in trajs)  # a reset and its steps each
    claimed = []
    for t in trajs:
        lane, (t0, t1) = f"env0/{t.info['env_index']}", t.info["env_span"]
        mine = [r for r in rows if r["worker"] == lane and t0 <= r["start"] and r["end"] <= t1]
        assert [r["kind"] for r in mine] == ["reset"] + ["step"] * t.length
        claimed += [id(r) for r in mine]
    assert sorted(claimed) == sorted(id(r) for r in rows)  # every row is one rollout's, none twice
