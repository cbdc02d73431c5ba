"""What a plug-in sees (plug-in API v2): the per-iteration context and the small value types the
loop and plug-ins exchange.

Every plug-in call from the loop gets ``ctx=`` a :class:`PluginContext`: the DataStore and run id,
a handle on the current policy, the iteration, this iteration's per-task outcomes (filled in once
the rollouts are back), the per-task history as of the end of the previous iteration, the current
task list and an RNG seeded by (run.seed, iteration) so that a resumed run draws what the
uninterrupted run would have. A plug-in that keeps state across iterations exposes
``state_dict() -> JSON dict`` and ``load_state_dict(state)`` (:class:`Plugin` gives no-op
defaults); the loop saves them in every checkpoint.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional


class Plugin:
    """Optional base class: stateless by default. Override both methods to keep state across
    iterations; ``state_dict`` must return JSON-serialisable data (checkpoints store it as JSON)."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None


@dataclass
class TaskOutcome:
    """On-policy results of one task: counts plus the per-trajectory rewards and lengths."""

    attempts: int = 0
    successes: int = 0
    reward_sum: float = 0.0
    steps_sum: int = 0

    @property
    def success_rate(self) -> float:
        return self.successes / self.attempts if self.attempts else 0.0

    def add(self, reward: float, success: bool, length: int) -> None:
        self.attempts += 1
        self.successes += int(bool(success))
        self.reward_sum += float(reward)
        self.steps_sum += int(length)

    def merge(self, other: "TaskOutcome") -> None:
        self.attempts += other.attempts
        self.successes += other.successes
        self.reward_sum += other.reward_sum
        self.steps_sum += other.steps_sum

    def stats(self, task_id: str) -> dict[str, Any]:
        """The DataStore's ``task_stats`` row format (what task samplers read)."""
        n = max(1, self.attempts)
        return {"task_id": task_id, "attempts": self.attempts, "successes": self.successes,
                "success_rate": self.success_rate, "mean_reward": self.reward_sum / n,
                "mean_length": self.steps_sum / n}

    def to_dict(self) -> dict[str, Any]:
        return {"attempts": self.attempts, "successes": self.successes, "reward_sum": self.reward_sum,
                "steps_sum": self.steps_sum}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TaskOutcome":
        return cls(int(d["attempts"]), int(d["successes"]), float(d["reward_sum"]), int(d["steps_sum"]))


def outcomes_of(trajectories: Any) -> dict[str, TaskOutcome]:
    """Per-task outcomes of the on-policy trajectories among ``trajectories``."""
    out: dict[str, TaskOutcome] = {}
    for t in trajectories:
        if t.source == "on_policy":
            out.setdefault(t.task_id, TaskOutcome()).add(t.reward, t.success, t.length)
    return out


@dataclass
class PluginContext:
    """Passed as ``ctx=`` to every plug-in call of iteration ``iteration``.

    ``outcomes``: this iteration's fresh on-policy outcomes per task (empty before the rollouts);
    ``history``: cumulative per-task outcomes of all *finished* iterations (restored from the
    checkpoint on resume, so a crashed iteration's rollouts never leak into it); ``policy``: a
    :class:`~guigym.train.algorithms.policy_handle.PolicyHandle` (or None in unit tests);
    ``rng``: ``random.Random`` seeded by (run seed, iteration); ``tasks``: the task list the
    sampler draws from (env.tasks plus tasks added by task sources).
    """

    iteration: int
    rng: random.Random
    store: Any = None
    run_id: str = ""
    policy: Any = None
    outcomes: dict[str, TaskOutcome] = field(default_factory=dict)
    history: dict[str, TaskOutcome] = field(default_factory=dict)
    tasks: list[str] = field(default_factory=list)
    config: Any = None

    def stats(self) -> dict[str, dict[str, Any]]:
        """``history`` in the DataStore's task-stats format, keyed by task id."""
        return {k: v.stats(k) for k, v in sorted(self.history.items())}


@dataclass
class RolloutPlan:
    """How one group is collected: ``n`` rollouts of ``task_id`` with step budget ``max_steps``
    (None = the env's own). Rollout planners rewrite the list each iteration (DART dynamic N and
    dynamic trajectory length)."""

    task_id: str
    n: int
    max_steps: Optional[int] = None

    def validate(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"rollout plan for {self.task_id!r}: n must be an int >= 1, got {self.n!r}")
        if self.max_steps is not None and (not isinstance(self.max_steps, int) or self.max_steps < 1):
            raise ValueError(f"rollout plan for {self.task_id!r}: max_steps must be None or an int >= 1, "
                             f"got {self.max_steps!r}")


@dataclass
class Guidance:
    """Text a conditioner attaches to one rollout's prompt (a plan, a hint, retrieved memory), the
    guidance level recorded on the trajectory (UI-Mem stratified guidance; 0 = none) and who gave it."""

    text: str
    level: int = 1
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "level": self.level, "source": self.source}


@dataclass
class NewTask:
    """A task a task source adds during a run, with its provenance (stored in the DataStore).

    ``task_id`` must be resolvable by the env (``reset(options={"task": task_id})``); ``spec`` is
    the generator's JSON description (e.g. the instruction it wrote), ``parent`` the task it was
    derived from (WebRL's self-evolving curriculum mutates failed instructions)."""

    task_id: str
    source: str
    parent: Optional[str] = None
    spec: dict[str, Any] = field(default_factory=dict)
