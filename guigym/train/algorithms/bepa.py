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

LEVEL-1 (bepa_plans.py, conditioner ``bepa_plan``) rolls plan-conditioned self-rolls inside the
same groups: those members (``guidance_level > 0``) are D_self, not samples of pi(.|x): their
successes enter E_x (eq. 1 -> eq. 2 and rule U) and they leave the trained group. A cached
trajectory that carried a plan is replayed "under the original instruction x without the plan"
(eq. 3): each step's prompt is swapped for the plain one the prompt builder recorded at rollout
time (``Step.info["unguided_prompt_ids"]``, stepwise prompts), its response tokens and behaviour
log-probs (recorded under the plan: the IS ratio of eq. 5 corrects for it) unchanged. A guided
trajectory without those prompts (multiturn, or collected before they were recorded) is refused
with an error rather than trained with its plan.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from guigym.train.algorithms.context import Plugin
from guigym.train.algorithms.registry import GROUP_BUILDERS
from guigym.train.data.types import Group, Trajectory


def without_guidance(t: Trajectory) -> Trajectory:
    """``t`` with every step's prompt replaced by the one without guidance (eq. 3's "original
    instruction x without the plan"); ``t`` itself when it had none. ValueError when a guided step
    has no recorded plain prompt."""
    if t.guidance_level <= 0:
        return t
    steps = []
    for k, step in enumerate(t.steps):
        plain = step.info.get("unguided_prompt_ids")
        if not plain:
            raise ValueError(f"bepa_cache: trajectory {t.traj_id!r} (task {t.task_id}) was collected with guidance "
                             f"level {t.guidance_level} but step {k} has no unguided_prompt_ids (multiturn prompts, "
                             "or recorded before they were kept): it cannot be replayed without its plan")
        info = {key: v for key, v in step.info.items() if key != "unguided_prompt_ids"}
        steps.append(dataclasses.replace(step, prompt_ids=[int(i) for i in plain], info=info))
    return dataclasses.replace(t, steps=steps, guidance_level=0,
                               info={**t.info, "guidance_removed": t.info.get("guidance", True)})


def cache_copy(t: Trajectory, iteration: int) -> Trajectory:
    """E_x as a member of iteration ``iteration``'s group (:meth:`Trajectory.injected_copy`,
    source ``cache``, one id per (original, iteration)), under the plain instruction."""
    return without_guidance(t.injected_copy("cache", key=str(iteration)))


@GROUP_BUILDERS.register("bepa_cache")
class BEPACache(Plugin):
    """BEPA LEVEL-2 (eqs. 2-3): per-task cache E_x seeded from D_self (run ``seed_run_id``; "" =
    empty) and from this run's plan-conditioned successes (``bepa_plan`` members, which leave the
    trained group), refreshed with a random on-policy success of each group (rule U); on a group's
    total failure the first failed trajectory is replaced by E_x under the plain instruction.
    State: the cache (task -> traj id)."""

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
                self.cache[t.task_id] = t.traj_id  # a guided one is checked when it is replayed
        self.seeded = True

    def __call__(self, fresh: Sequence[Group], pool: Sequence[Trajectory] = (), *, ctx: Any = None) -> list[Group]:
        self._seed(ctx)
        out = []
        for g in fresh:
            # LEVEL-1 self-rolls (guided) are D_self: their successes may become E_x, but they are
            # samples of pi(.|x, p_x), not of pi(.|x), so they leave the trained group
            guided = [t for t in g.trajectories if t.source == "on_policy" and t.guidance_level > 0]
            members = [t for t in g.trajectories if not (t.source == "on_policy" and t.guidance_level > 0)]
            online = [t for t in members if t.source == "on_policy"]
            wins = [t for t in online if t.success]
            d_self = [t for t in guided if t.success]
            if wins:  # rule U: a random success of this group becomes E_x
                self.cache[g.task_id] = wins[ctx.rng.randrange(len(wins))].traj_id
            elif d_self:  # eq. 2: a plan-conditioned success (D_self) initialises E_x
                self.cache[g.task_id] = d_self[ctx.rng.randrange(len(d_self))].traj_id
            if not wins and online and g.task_id in self.cache and all(float(t.reward) == 0.0 for t in online):
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
