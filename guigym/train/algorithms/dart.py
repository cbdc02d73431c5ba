"""DART's multi-level adaptive data curation as plug-ins (Li et al. 2025, "Efficient Multi-turn RL
for GUI Agents via Decoupled Training and Adaptive Data Curation", section 4).

* ``ROLLOUT_PLANNERS["dart_dynamic_n"]`` -- dynamic rollout frequency (sec. 4.1): a task's group
  size N stays N_max while its running success rate is at most 0.6 and falls linearly toward N_min
  as the rate goes from 0.6 to 1.
* ``ROLLOUT_PLANNERS["dart_dynamic_length"]`` -- dynamic trajectory length (sec. 4.1): a task's
  step budget = the longest successful trajectory seen so far + ``margin`` (the default budget
  until one succeeds).
* ``TRAJECTORY_SOURCES["dart_experience_pool"]`` + ``GROUP_BUILDERS["dart_pool_injection"]`` --
  the experience pool (sec. 4.2): pre-collected successes of an earlier run are offered; when all
  N online rollouts of a task fail, one of that task's pool trajectories (chosen with ``ctx.rng``)
  joins the group with ``source="pool"`` and its own behaviour log-probs.
* High-entropy step selection (sec. 4.3, eq. 2's indicator) is ``STEP_FILTERS["top_entropy"]``
  (registry.py); the truncated importance weight (sec. 4.4, eq. 2, C = 1) is ``algorithm.tis_cap``.

The planners learn each task's outcomes from ``ctx.history`` (cumulative per-task outcomes of the
*finished* iterations) and the DataStore; their state is JSON (``state_dict``) and checkpointed by
the loop, so a resumed run plans exactly what the uninterrupted run would have.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence

from guigym.core.errors import ConfigError
from guigym.train.algorithms.context import Plugin, RolloutPlan
from guigym.train.algorithms.registry import GROUP_BUILDERS, ROLLOUT_PLANNERS, TRAJECTORY_SOURCES
from guigym.train.data.types import Group, Trajectory


class HistoryDelta:
    """Per-task on-policy outcomes of the iterations finished since the previous call.

    ``ctx.history`` is cumulative; this keeps the last snapshot (JSON state) and returns the
    difference ``{task: (attempts, successes, reward_sum)}`` for tasks with new attempts."""

    def __init__(self) -> None:
        self.seen: dict[str, list[float]] = {}

    def __call__(self, ctx: Any) -> dict[str, tuple[int, int, float]]:
        out: dict[str, tuple[int, int, float]] = {}
        for task, o in sorted(getattr(ctx, "history", {}).items()):
            a0, s0, r0 = self.seen.get(task, [0, 0, 0.0])
            if o.attempts > a0:
                out[task] = (int(o.attempts - a0), int(o.successes - s0), float(o.reward_sum - r0))
            self.seen[task] = [int(o.attempts), int(o.successes), float(o.reward_sum)]
        return out

    def state_dict(self) -> dict[str, Any]:
        return {k: list(v) for k, v in self.seen.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.seen = {k: [int(v[0]), int(v[1]), float(v[2])] for k, v in state.items()}


@ROLLOUT_PLANNERS.register("dart_dynamic_n")
class DynamicRolloutN(Plugin):
    """DART sec. 4.1 "Dynamic Rollout Frequency": per-task N from N_max toward N_min as the task's
    running success rate passes ``threshold`` (0.6 in the paper; N_max = 8).

    ``rate`` = successes / attempts over the task's last ``window`` finished groups (its running
    success rate). ``N = N_max`` if ``rate <= threshold`` (hard tasks keep maximum sampling), else
    ``N = round(N_max - (N_max - N_min) * (rate - threshold) / (1 - threshold))`` -- linear, N_min
    at rate 1. The paper gives the threshold and N_max = 8 but not the curve of its Fig. 5 nor
    N_min; its Fig. 6(a) reports the mean N falling from 8.0 to 5.0. ``n_max=None`` uses the
    plan's N (``rollout.num_generations``). A task never attempted keeps N_max.
    """

    def __init__(self, n_max: Optional[int] = None, n_min: int = 2, threshold: float = 0.6, window: int = 2) -> None:
        if n_max is not None and (not isinstance(n_max, int) or n_max < 1):
            raise ConfigError(f"dart_dynamic_n.n_max must be None or an int >= 1, got {n_max!r}")
        if not isinstance(n_min, int) or n_min < 1:
            raise ConfigError(f"dart_dynamic_n.n_min must be an int >= 1, got {n_min!r}")
        if n_max is not None and n_min > n_max:
            raise ConfigError(f"dart_dynamic_n.n_min ({n_min}) must be <= n_max ({n_max})")
        if not 0 <= threshold < 1:
            raise ConfigError(f"dart_dynamic_n.threshold must be in [0, 1), got {threshold}")
        if not isinstance(window, int) or window < 1:
            raise ConfigError(f"dart_dynamic_n.window must be an int >= 1, got {window!r}")
        self.n_max, self.n_min, self.threshold, self.window = n_max, n_min, float(threshold), window
        self.delta = HistoryDelta()
        self.recent: dict[str, list[list[int]]] = {}  # task -> last `window` [attempts, successes]

    def rate(self, task_id: str) -> Optional[float]:
        """Running success rate of ``task_id`` (None before its first finished group)."""
        rows = self.recent.get(task_id)
        if not rows:
            return None
        return sum(s for _, s in rows) / max(1, sum(a for a, _ in rows))

    def n_for(self, rate: Optional[float], n_max: int) -> int:
        n_min = min(self.n_min, n_max)
        if rate is None or rate <= self.threshold:
            return n_max
        frac = (rate - self.threshold) / (1.0 - self.threshold)
        return max(n_min, int(math.floor(n_max - (n_max - n_min) * frac + 0.5)))

    def __call__(self, plans: Sequence[RolloutPlan], *, ctx: Any = None) -> list[RolloutPlan]:
        for task, (a, s, _) in self.delta(ctx).items():
            self.recent[task] = (self.recent.get(task, []) + [[a, s]])[-self.window:]
        return [RolloutPlan(p.task_id, self.n_for(self.rate(p.task_id), self.n_max or p.n), p.max_steps)
                for p in plans]

    def state_dict(self) -> dict[str, Any]:
        return {"delta": self.delta.state_dict(), "recent": {k: [list(r) for r in v] for k, v in self.recent.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.delta.load_state_dict(state["delta"])
        self.recent = {k: [[int(a), int(s)] for a, s in v] for k, v in state["recent"].items()}


@ROLLOUT_PLANNERS.register("dart_dynamic_length")
class DynamicTrajectoryLength(Plugin):
    """DART sec. 4.1 "Dynamic Trajectory Length": a task's step budget = the longest successful
    on-policy trajectory of the task in the finished iterations + ``margin``, never above the
    plan's default budget (``env.max_steps``; None = unbounded); the default until one succeeds.

    Successes are read from the DataStore (``ctx.store``, this run's on-policy trajectories with
    ``info["iteration"] < ctx.iteration``) through an insertion-order cursor, so each row is read
    once and a crashed iteration's stored rollouts are not counted before that iteration finishes.
    """

    def __init__(self, margin: int = 0) -> None:
        if not isinstance(margin, int) or margin < 0:
            raise ConfigError(f"dart_dynamic_length.margin must be an int >= 0, got {margin!r}")
        self.margin = margin
        self.longest: dict[str, int] = {}
        self.cursor: Optional[int] = None  # DataStore insertion number of the last row read

    def observe(self, ctx: Any) -> None:
        """Fold in the successes of iterations finished since the last call."""
        store = getattr(ctx, "store", None)
        if store is None:
            raise ValueError("dart_dynamic_length needs ctx.store (the run's DataStore)")
        rows = store.get_trajectories(ctx.run_id, source="on_policy", after_id=self.cursor, with_steps=False)
        done = []
        for t in rows:  # insertion order: iteration i's rows precede iteration i + 1's
            it = t.info.get("iteration")
            if isinstance(it, int) and it >= ctx.iteration:
                break
            done.append(t)
        if not done:
            return
        # rows without an iteration tag (not stored by the loop) are passed over, not counted
        wins = [t.traj_id for t in done if t.success and isinstance(t.info.get("iteration"), int)]
        for tid in wins:
            full = store.get_trajectory(tid)
            self.longest[full.task_id] = max(self.longest.get(full.task_id, 0), full.length)
        self.cursor = store.row_ids([done[-1].traj_id])[done[-1].traj_id]

    def budget(self, task_id: str, default: Optional[int]) -> Optional[int]:
        if task_id not in self.longest:
            return default
        limit = max(1, self.longest[task_id] + self.margin)
        return limit if default is None else min(limit, default)

    def __call__(self, plans: Sequence[RolloutPlan], *, ctx: Any = None) -> list[RolloutPlan]:
        self.observe(ctx)
        return [RolloutPlan(p.task_id, p.n, self.budget(p.task_id, p.max_steps)) for p in plans]

    def state_dict(self) -> dict[str, Any]:
        return {"longest": dict(self.longest), "cursor": self.cursor}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.longest = {k: int(v) for k, v in state["longest"].items()}
        self.cursor = None if state["cursor"] is None else int(state["cursor"])


def pool_copy(t: Trajectory) -> Trajectory:
    """``t`` as an experience-pool member (:meth:`Trajectory.injected_copy`, source ``pool``): one
    id per original, so re-injecting it in a later iteration reuses one DataStore row; the
    original's run in ``info["pool_origin_run"]``."""
    return t.injected_copy("pool", pool_origin_run=t.run_id)


def sft_run_of(store: Any, run_dir: str, run_name: Optional[str]) -> str:
    """The run id of the ``stage: sft`` run in ``store`` (the DataStore of ``run_dir``): the run
    named ``run_name``, else the one run whose stored config says ``stage: sft``."""
    runs = store.runs(run_name)
    if run_name is None:
        runs = [r for r in runs if (r.get("config") or {}).get("stage") == "sft"]
    if len(runs) != 1:
        found = ", ".join(r["name"] for r in store.runs()) or "none"
        raise ValueError(f"dart_experience_pool.sft_run_dir: {run_dir} holds "
                         f"{'no run named ' + repr(run_name) if run_name else str(len(runs)) + ' stage-sft runs'} "
                         f"(runs there: {found}); name one with sft_run_name")
    return str(runs[0]["run_id"])


def copy_blobs(trajs: Sequence[Trajectory], src: Any, dst: Any) -> None:
    """Copy the screenshots ``trajs`` refer to from ``src``'s blob store to ``dst``'s (content-
    addressed: the refs stay valid), so the learner of the run using the pool can load them."""
    for ref in {r for t in trajs for st in t.steps for r in st.image_refs}:
        dst.blobs.put_bytes(src.blobs.get_bytes(ref), ref.rsplit(".", 1)[1])


@TRAJECTORY_SOURCES.register("dart_experience_pool")
class ExperiencePool(Plugin):
    """DART sec. 4.2: the pre-populated pool of successful trajectories, offered every iteration.

    The pool is the successful trajectories (``success`` true; any source) of an earlier run
    ``run_id`` -- an expert agent's run (e.g. the MiniWoB oracle's), a replay directory imported
    into a DataStore, or an earlier training run -- in the DataStore at ``db_url`` (None = this
    run's own store), optionally restricted to ``tasks``. Or ``sft_run_dir``: the run directory of
    a ``stage: sft`` run (a pipeline's SFT stage), whose demonstrations are stored there as
    ``source="expert"`` trajectories rendered by the same prompt path (guigym.train.demos); its run
    is ``sft_run_name`` or the one SFT run in that directory's DataStore. Screenshots of a pool read
    from another store are copied into this run's blob store. Pool prompts are token ids: the run
    using them must share the SFT run's tokenizer and prompt template (start it from the SFT
    model). Loaded once; each is offered as a :func:`pool_copy`. Static, so no state to checkpoint.
    """

    def __init__(self, run_id: str = "", db_url: Optional[str] = None, blob_root: Optional[str] = None,
                 tasks: Optional[Sequence[str]] = None, sft_run_dir: Optional[str] = None,
                 sft_run_name: Optional[str] = None) -> None:
        if sft_run_dir and (run_id or db_url):
            raise ConfigError("dart_experience_pool.sft_run_dir: names the store and run itself; drop run_id/db_url")
        if not run_id and not sft_run_dir:
            raise ConfigError("dart_experience_pool.run_id: the id of the run whose successes form the pool "
                              "is required (or sft_run_dir: an SFT run's directory)")
        self.run_id, self.db_url, self.blob_root = run_id, db_url, blob_root
        self.sft_run_dir, self.sft_run_name = sft_run_dir, sft_run_name
        self.tasks = None if tasks is None else frozenset(tasks)
        self._pool: Optional[list[Trajectory]] = None

    def load(self, ctx: Any) -> list[Trajectory]:
        if self._pool is None:
            if self.db_url or self.sft_run_dir:
                from pathlib import Path

                from guigym.train.data.store import DataStore

                if self.sft_run_dir:
                    if not (Path(self.sft_run_dir) / "guigym.db").is_file():
                        raise ValueError(f"dart_experience_pool.sft_run_dir: {self.sft_run_dir} has no guigym.db "
                                         f"(has the SFT run started?)")
                    store = DataStore.for_run_dir(self.sft_run_dir)
                else:
                    store = DataStore(self.db_url, self.blob_root)
                try:
                    if self.sft_run_dir:
                        self.run_id = sft_run_of(store, self.sft_run_dir, self.sft_run_name)
                    rows = store.get_trajectories(self.run_id)
                    if getattr(ctx, "store", None) is not None:
                        copy_blobs([t for t in rows if t.success], store, ctx.store)
                finally:
                    store.close()
            else:
                if getattr(ctx, "store", None) is None:
                    raise ValueError("dart_experience_pool: no db_url and no ctx.store to read the pool from")
                rows = ctx.store.get_trajectories(self.run_id)
            self._pool = [pool_copy(t) for t in rows
                          if t.success and t.length > 0 and (self.tasks is None or t.task_id in self.tasks)]
            if not self._pool:  # a wrong run id must not silently turn the pool off
                raise ValueError(f"dart_experience_pool: run {self.run_id!r} has no successful trajectories"
                                 + (f" of tasks {sorted(self.tasks)}" if self.tasks is not None else ""))
        return self._pool

    def __call__(self, fresh_groups: Sequence[Group], *, ctx: Any = None) -> list[Trajectory]:
        return list(self.load(ctx))


@GROUP_BUILDERS.register("dart_pool_injection")
class InjectFromPool(Plugin):
    """DART sec. 4.2: when every on-policy rollout of a group failed, one successful ``pool``
    trajectory of the same task (``ctx.rng``, seeded by (run seed, iteration)) joins the group,
    "so that every training task contains at least one positive sample". Groups with a success,
    and tasks with no pool entry, are unchanged. The loop stores the injected member before use
    (source ``pool``, its own ``Step.rollout_logprobs`` for the truncated IS weight)."""

    def __call__(self, fresh: Sequence[Group], pool: Sequence[Trajectory] = (), *, ctx: Any = None) -> list[Group]:
        by_task: dict[str, list[Trajectory]] = {}
        for t in pool:
            if t.source == "pool" and t.success:
                by_task.setdefault(t.task_id, []).append(t)
        out, used = [], set()
        for g in fresh:
            members = list(g.trajectories)
            online = [t for t in members if t.source == "on_policy"]
            # a task sampled twice in one iteration does not get the same pool trajectory twice
            candidates = [t for t in by_task.get(g.task_id, []) if t.traj_id not in used]
            if online and candidates and not any(t.success for t in members):
                pick = candidates[ctx.rng.randrange(len(candidates))]
                used.add(pick.traj_id)
                members.append(pick)
            out.append(Group(group_id=g.group_id, task_id=g.task_id, trajectories=members))
        return out
