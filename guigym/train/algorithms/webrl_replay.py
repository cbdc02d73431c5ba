"""WebRL's replay buffer (Qi et al. 2024, sec. 2.2 "Experience replay buffer with actor confidence
filtering") as a group builder.

WebRL keeps the successful trajectories of every earlier phase and, in phase i, adds those of its
actions the previous phase's actor is confident about (perplexity in [1/0.95, 1/0.5]) to the
phase's training data. The paper's words (sec. 2.2): "we only store those successful trajectories
[...] from each phase in the replay buffer. During phase i, we use the actor from the last phase
to compute the perplexity of all actions in the buffer. Actions with perplexity within the range
of 1/0.95 to 1/0.5, along with their corresponding states, are added to the training data for the
current phase"; and appendix A: "historical data with perplexity between 1/0.95 and 1/0.5 from the
replay buffer are used [...], with the replay data limited to twice the size of current
interaction data". guigym splits that in two plug-ins that compose:

* ``GROUP_BUILDERS["webrl_replay"]`` (this module): the buffer, the scoring and the mixing.
  Successful on-policy trajectories are recorded by id with the phase they came from. At the first
  iteration of each phase, every buffered trajectory of an earlier phase is scored with the actor
  as it stands then -- the actor that finished the last phase, before the phase's first update --
  by teacher forcing (:meth:`~guigym.train.algorithms.policy_handle.PolicyHandle.step_logprobs`):
  each step's mean token log-prob is kept in the buffer entry. Each iteration, buffer entries of
  *earlier* phases whose task has a group this iteration join that group as ``source="replay"``
  copies (loaded from ``ctx.store``, their behaviour log-probs unchanged for the TIS weight; the
  score in ``Step.info["actor_mean_logprob"]``), at most ``max_ratio * M`` of them (M = this
  iteration's on-policy trajectories; default 2, the paper's "twice"), drawn with ``ctx.rng``; an
  entry is replayed at most ``max_replays`` times.
* ``STEP_FILTERS["perplexity_band"]`` (registry.py, ``sources: [replay]``, ``low 0.5``, ``high
  0.95``): keeps the replayed steps whose mean token probability under the last phase's actor
  (the score above) lies in the band, i.e. perplexity in [1/0.95, 1/0.5].

The cap counts trajectories before the band filter drops steps (the paper's "size" is not more
precise than that), so the replayed steps that train are at most, not exactly, twice the fresh
trajectories' share. Without ``ctx.policy`` (unit tests) nothing is scored and the filter falls
back to the sampling-time log-probs.

A phase is ``phase_iterations`` iterations (as ``webrl_curriculum``'s). The buffer (ids, not
trajectories: those stay in the DataStore) is JSON state, checkpointed with the run.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping, Optional, Sequence

from guigym.core.errors import ConfigError
from guigym.train.algorithms.context import Plugin
from guigym.train.algorithms.registry import ACTOR_LOGPROB_KEY, GROUP_BUILDERS
from guigym.train.data.types import Group, Trajectory


@GROUP_BUILDERS.register("webrl_replay")
class WebRLReplay(Plugin):
    """WebRL sec. 2.2 experience replay: successes of earlier phases, scored by the last phase's
    actor at each phase boundary, replayed into their task's group, capped at ``max_ratio`` x the
    iteration's on-policy trajectories (compose with ``step_filter: perplexity_band`` for WebRL's
    actor-confidence filter; see the module docstring).

    Options: ``phase_iterations`` (iterations per phase; default 1), ``max_ratio`` (replayed /
    on-policy trajectories per iteration; default 2.0, WebRL appendix A: "the replay data limited
    to twice the size of current interaction data"), ``max_replays`` (uses per buffered
    trajectory; default 1), ``buffer_size`` (entries kept, newest phases first; default 4096).
    """

    def __init__(self, phase_iterations: int = 1, max_ratio: float = 2.0, max_replays: int = 1,
                 buffer_size: int = 4096) -> None:
        if not isinstance(phase_iterations, int) or phase_iterations < 1:
            raise ConfigError(f"webrl_replay.phase_iterations must be an int >= 1, got {phase_iterations!r}")
        if not max_ratio >= 0:
            raise ConfigError(f"webrl_replay.max_ratio must be >= 0, got {max_ratio!r}")
        if not isinstance(max_replays, int) or max_replays < 1:
            raise ConfigError(f"webrl_replay.max_replays must be an int >= 1, got {max_replays!r}")
        if not isinstance(buffer_size, int) or buffer_size < 1:
            raise ConfigError(f"webrl_replay.buffer_size must be an int >= 1, got {buffer_size!r}")
        self.phase_iterations, self.max_ratio = phase_iterations, float(max_ratio)
        self.max_replays, self.buffer_size = max_replays, buffer_size
        # entries: {traj_id, task_id, phase, replays} + {scored_phase, actor_logp} once scored
        # (actor_logp: per step, the mean token log-prob under the actor of scored_phase - 1; None
        # for a step without response tokens)
        self.buffer: list[dict[str, Any]] = []

    def phase(self, iteration: int) -> int:
        return iteration // self.phase_iterations

    def _mix(self, groups: list[Group], n_online: int, ctx: Any) -> list[Group]:
        phase = self.phase(ctx.iteration)
        index = {g.task_id: i for i, g in enumerate(groups)}
        ready = [e for e in self.buffer if e["phase"] < phase and e["task_id"] in index]
        cap = int(math.floor(self.max_ratio * n_online))
        chosen = ready if len(ready) <= cap else ctx.rng.sample(ready, cap)
        members = [list(g.trajectories) for g in groups]
        for e in chosen:
            t = ctx.store.get_trajectory(e["traj_id"])
            if t is None:
                raise ValueError(f"webrl_replay: buffered trajectory {e['traj_id']!r} is not in the DataStore")
            copy = t.injected_copy("replay", key=str(ctx.iteration))
            scores = e.get("actor_logp") if e.get("scored_phase") == phase else None
            if scores is not None:
                if len(scores) != len(copy.steps):
                    raise ValueError(f"webrl_replay: {len(scores)} scores for the {len(copy.steps)} steps of "
                                     f"buffered trajectory {e['traj_id']!r}")
                copy.steps = [st if sc is None else replace(st, info={**st.info, ACTOR_LOGPROB_KEY: sc})
                              for st, sc in zip(copy.steps, scores)]
            members[index[e["task_id"]]].append(copy)
            e["replays"] += 1
        self.buffer = [e for e in self.buffer if e["replays"] < self.max_replays]
        return [Group(g.group_id, g.task_id, m) for g, m in zip(groups, members)]

    def _score(self, ctx: Any) -> None:
        """Score the buffered trajectories of earlier phases not yet scored in this phase with
        the current actor: at a phase's first iteration that is the last phase's actor (WebRL
        sec. 2.2). Teacher-forced token log-probs (``ctx.policy.step_logprobs``), kept per step
        as their mean (the perplexity is ``exp(-mean)``)."""
        policy = getattr(ctx, "policy", None)
        if policy is None:
            return
        phase = self.phase(ctx.iteration)
        todo = [e for e in self.buffer if e["phase"] < phase and e.get("scored_phase") != phase]
        for e in todo:
            t = ctx.store.get_trajectory(e["traj_id"])
            if t is None:
                raise ValueError(f"webrl_replay: buffered trajectory {e['traj_id']!r} is not in the DataStore")
            lps = policy.step_logprobs(t.steps)
            e["actor_logp"] = [_mean(x) for x in lps]
            e["scored_phase"] = phase

    def _record(self, online: Sequence[Trajectory], iteration: int) -> None:
        known = {e["traj_id"] for e in self.buffer}
        self.buffer += [{"traj_id": t.traj_id, "task_id": t.task_id, "phase": self.phase(iteration), "replays": 0}
                        for t in online if t.success and t.length > 0 and t.traj_id not in known]
        if len(self.buffer) > self.buffer_size:  # keep the newest phases
            self.buffer.sort(key=lambda e: -e["phase"])
            del self.buffer[self.buffer_size:]

    def __call__(self, fresh: Sequence[Group], pool: Sequence[Trajectory] = (), *, ctx: Any = None) -> list[Group]:
        if ctx is None or getattr(ctx, "store", None) is None:
            raise ValueError("webrl_replay needs ctx.store (the run's DataStore) to load buffered trajectories")
        groups = list(fresh)
        online = [t for g in groups for t in g.trajectories if t.source == "on_policy"]
        self._score(ctx)
        groups = self._mix(groups, len(online), ctx)
        self._record(online, ctx.iteration)
        return groups

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": [dict(e) for e in self.buffer]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.buffer = []
        for e in state["buffer"]:
            entry = {"traj_id": str(e["traj_id"]), "task_id": str(e["task_id"]), "phase": int(e["phase"]),
                     "replays": int(e["replays"])}
            if e.get("scored_phase") is not None:
                entry["scored_phase"] = int(e["scored_phase"])
                entry["actor_logp"] = [None if x is None else float(x) for x in e["actor_logp"]]
            self.buffer.append(entry)


def _mean(xs: Sequence[float]) -> Optional[float]:
    """Mean token log-prob of one step; None for a step without response tokens."""
    return sum(float(x) for x in xs) / len(xs) if len(xs) else None
