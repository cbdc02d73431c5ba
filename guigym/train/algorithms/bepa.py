"""BEPA LEVEL-2 as a group builder (Bi-level Expert-to-Policy Assimilation, sec. 4.2-4.3, eqs. 2-5).

``GROUP_BUILDERS["bepa_cache"]`` keeps a per-task cache E_x of one successful trajectory:

* initialised from the LEVEL-1 seed set D_self (eq. 2): the successes of run ``seed_run_id`` in
  this run's DataStore (e.g. a run of plan-conditioned self-rolls), the first success per task;
* refreshed each iteration with a random success of the task's on-policy group (rule U, "random
  sampling by default"; ``ctx.rng``);
* on total failure of a group (every on-policy R = 0) with E_x non-empty, the *first* failed
  trajectory is replaced by E_x (eq. 3), as a ``source="cache"`` copy carrying the behaviour
  log-probs recorded when it was generated; the loop's estimator then normalises over the
  finalised group (eq. 4) and PPO-clip trains it (eq. 5).

Not done here: LEVEL-1 (plan abstraction and plan-conditioned rollouts) and re-prompting a D_self
trace "under the original instruction without the plan" -- a seed trajectory whose prompt carried
guidance (``guidance_level > 0``) is refused with an error rather than replayed with its plan.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from guigym.train.algorithms.context import Plugin
from guigym.train.algorithms.registry import GROUP_BUILDERS
from guigym.train.data.types import Group, Trajectory


def cache_copy(t: Trajectory, iteration: int) -> Trajectory:
    """E_x as a member of iteration ``iteration``'s group (:meth:`Trajectory.injected_copy`,
    source ``cache``, one id per (original, iteration))."""
    return t.injected_copy("cache", key=str(iteration))


@GROUP_BUILDERS.register("bepa_cache")
class BEPACache(Plugin):
    """BEPA LEVEL-2 (eqs. 2-3): per-task cache E_x seeded from D_self (run ``seed_run_id``; "" =
    empty), refreshed with a random on-policy success of each group (rule U); on a group's total
    failure the first failed trajectory is replaced by E_x. State: the cache (task -> traj id)."""

    def __init__(self, seed_run_id: str = "") -> None:
        self.seed_run_id = seed_run_id
        self.cache: dict[str, str] = {}
        self.seeded = False

    def _seed(self, ctx: Any) -> None:
        if self.seeded or not self.seed_run_id:
            self.seeded = True
            return
        for t in ctx.store.get_trajectories(self.seed_run_id, with_steps=False):
            if t.success and t.task_id not in self.cache:
                if t.guidance_level > 0:
                    raise ValueError(f"bepa_cache: D_self trajectory {t.traj_id!r} (task {t.task_id}) was collected "
                                     f"with guidance level {t.guidance_level}; replaying it without its plan needs its "
                                     f"prompts rebuilt, which is not implemented")
                self.cache[t.task_id] = t.traj_id
        self.seeded = True

    def __call__(self, fresh: Sequence[Group], pool: Sequence[Trajectory] = (), *, ctx: Any = None) -> list[Group]:
        self._seed(ctx)
        out = []
        for g in fresh:
            members = list(g.trajectories)
            online = [t for t in members if t.source == "on_policy"]
            wins = [t for t in online if t.success]
            if wins:  # rule U: a random success of this group becomes E_x
                self.cache[g.task_id] = wins[ctx.rng.randrange(len(wins))].traj_id
            elif online and g.task_id in self.cache and all(float(t.reward) == 0.0 for t in online):
                cached = ctx.store.get_trajectory(self.cache[g.task_id])
                if cached is None:
                    raise ValueError(f"bepa_cache: cached trajectory {self.cache[g.task_id]!r} is not in the DataStore")
                first = members.index(online[0])  # eq. 3: the first failed trajectory is replaced
                members[first] = cache_copy(cached, ctx.iteration)
            out.append(Group(group_id=g.group_id, task_id=g.task_id, trajectories=members))
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"cache": dict(self.cache), "seeded": self.seeded}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.cache = {str(k): str(v) for k, v in state["cache"].items()}
        self.seeded = bool(state["seeded"])
