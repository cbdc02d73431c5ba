"""Plug-in points of the trainer: one registry per extension point, plain GRPO as ``"default"``.

Each registry holds *factories* (classes); :meth:`PluginRegistry.build` checks the options against
the factory's signature and raises :class:`~guigym.core.errors.ConfigError` naming unknown names
and bad options. A recipe may name several plug-ins of one kind; they compose in order
(:mod:`guigym.train.algorithms.compose`). Every call from the loop passes ``ctx=`` a
:class:`~guigym.train.algorithms.context.PluginContext` (DataStore, policy handle, iteration,
per-task outcomes, RNG); plug-ins that keep state expose ``state_dict()`` / ``load_state_dict()``
and the loop checkpoints it (JSON).

Order in one training iteration (``guigym.train.loop.Trainer.iteration``)::

    new_tasks = task_sources(ctx=ctx)                           # TASK_SOURCES, provenance stored
    task_ids  = task_sampler(tasks, n_groups, stats=ctx.stats(), ctx=ctx)
    plans     = rollout_planner([RolloutPlan(t, G, max_steps)], ctx=ctx)  # per-task N and length
    fresh     = scheduler.collect(plans, guidance=conditioner)  # CONDITIONERS: guidance per rollout
    pool      = trajectory_sources(fresh, ctx=ctx)              # replay / expert / cache
    groups    = group_builder(fresh, pool=pool, ctx=ctx)        # injected members stored before use
    rewards   = reward_shaper(group, ctx=ctx)                   # float or per-step list per trajectory
    adv       = advantage_estimator(groups, rewards, ctx=ctx)   # ADVANTAGE_ESTIMATORS (estimators.py)
    ...groups whose advantages are all 0 are dropped (after shaping)...
    keep      = step_filter(trajs, groups=groups, ctx=ctx)
    ...samples; loss = policy_loss(...) (POLICY_LOSSES, policy_losses.py) + extra losses...

Protocols (any callable with the signature works; v1 callables without ``ctx``/``rewards`` too):

* :class:`RewardShaper` ``(group, rewards=None, *, ctx) -> list[float | list[float]]`` -- one
  reward per trajectory, or a list of per-step rewards (progress signals); ``rewards`` is the
  previous shaper's output in a chain (None for the first = the verifier scores).
* :class:`GroupBuilder` ``(fresh, pool=(), *, ctx) -> list[Group]`` -- what enters each GRPO
  group; ``pool`` holds the trajectories the trajectory sources offer (each with its ``source`` and
  its own behaviour log-probs ``Step.rollout_logprobs``).
* :class:`TaskSampler` ``(task_ids, n, stats=None, *, ctx) -> list[str]`` plus ``state_dict()`` /
  ``load_state_dict()``; ``stats`` are per-task statistics as of the last finished iteration.
* :class:`StepFilter` ``(trajectories, *, groups=None, ctx) -> list[list[bool]]``.
* :class:`ExtraLoss` ``(inputs: LossInputs) -> (loss, metrics)``: ``loss`` a (B, T) per-token
  tensor (aggregated exactly like the policy loss: same ``loss_type`` and step-wide normaliser)
  or a scalar (weighted by the micro-batch's share of the optimizer step).
* ROLLOUT_PLANNERS ``(plans: list[RolloutPlan], *, ctx) -> list[RolloutPlan]``; CONDITIONERS
  ``(task_id, seed, member, *, ctx) -> Guidance | None``; TASK_SOURCES ``(*, ctx) ->
  list[NewTask]``; TRAJECTORY_SOURCES ``(fresh_groups, *, ctx) -> list[Trajectory]``.
"""
from __future__ import annotations

import inspect
import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence, TypeVar, runtime_checkable

from guigym.core.errors import ConfigError
from guigym.core.registry import Registry
from guigym.train.data.types import SOURCES, Group, Trajectory

T = TypeVar("T")


class PluginRegistry(Registry[T]):
    """A :class:`~guigym.core.registry.Registry` whose lookups fail with ConfigError."""

    def get(self, name: str) -> T:
        if name not in self:
            known = ", ".join(self.names()) or "none"
            raise ConfigError(f"unknown {self.kind} {name!r}; known: {known}")
        return super().get(name)

    def build(self, name: str, **options: Any) -> Any:
        """Instantiate plug-in ``name`` with ``options``; ConfigError on unknown name / options."""
        factory = self.get(name)
        try:
            inspect.signature(factory).bind(**options)
        except TypeError as e:
            raise ConfigError(f"{self.kind} {name!r}: bad options {sorted(options)}: {e}") from None
        return factory(**options)


# ---- protocols --------------------------------------------------------------------------------
@runtime_checkable
class RewardShaper(Protocol):
    def __call__(self, group: Group, rewards: Sequence[Any] | None = None, *, ctx: Any = None) -> list[Any]:
        """One reward (float, or a list of per-step floats) per ``group.trajectories`` entry."""


@runtime_checkable
class GroupBuilder(Protocol):
    def __call__(self, fresh: Sequence[Group], pool: Sequence[Trajectory] = (), *, ctx: Any = None) -> list[Group]:
        """The groups to train on, built from this iteration's fresh groups and a pool of
        other trajectories (replay / expert / cache) the loop offers."""


@runtime_checkable
class TaskSampler(Protocol):
    def __call__(self, task_ids: Sequence[str], n: int,
                 stats: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
        """``n`` task ids (repeats allowed) from ``task_ids``; ``stats`` maps task id -> the
        DataStore's per-task statistics (attempts, successes, success_rate, ...)."""

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state (RNG, cursor) for exact resume."""

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""


@runtime_checkable
class StepFilter(Protocol):
    def __call__(self, trajectories: Sequence[Trajectory], *, groups: Any = None, ctx: Any = None) -> list[list[bool]]:
        """keep[i][j] says whether step j of trajectory i is trained."""


@dataclass
class LossInputs:
    """What an extra loss sees: the learner's batch. (B, T) tensors, ``mask`` 1 on trained tokens.

    ``logp`` log pi_theta (with grad); ``old_logp`` the trainer's log-probs before the update;
    ``advantages`` (B,) or (B, T); ``sources`` (B) Trajectory.source of each sample; ``rewards``
    (B,) shaped trajectory reward of each sample; ``rollout_logp`` / ``ref_logp`` when available.
    A per-token (B, T) result is aggregated by the learner with the policy loss's ``loss_type``
    and the optimizer step's normaliser, so micro-batching and accumulation do not change it.
    """

    logp: Any
    old_logp: Any
    mask: Any
    advantages: Any
    sources: list[str] = field(default_factory=list)
    rewards: Any = None
    rollout_logp: Any = None
    ref_logp: Any = None


@runtime_checkable
class ExtraLoss(Protocol):
    def __call__(self, inputs: LossInputs) -> tuple[Any, dict[str, float]]:
        """A scalar loss tensor added to the policy loss, and float metrics."""


REWARD_SHAPERS: PluginRegistry[Callable[..., RewardShaper]] = PluginRegistry("reward shaper")
GROUP_BUILDERS: PluginRegistry[Callable[..., GroupBuilder]] = PluginRegistry("group builder")
TASK_SAMPLERS: PluginRegistry[Callable[..., TaskSampler]] = PluginRegistry("task sampler")
STEP_FILTERS: PluginRegistry[Callable[..., StepFilter]] = PluginRegistry("step filter")
EXTRA_LOSSES: PluginRegistry[Callable[..., ExtraLoss]] = PluginRegistry("extra loss")
ROLLOUT_PLANNERS: PluginRegistry[Callable[..., Any]] = PluginRegistry("rollout planner")
CONDITIONERS: PluginRegistry[Callable[..., Any]] = PluginRegistry("conditioner")
TASK_SOURCES: PluginRegistry[Callable[..., Any]] = PluginRegistry("task source")
TRAJECTORY_SOURCES: PluginRegistry[Callable[..., Any]] = PluginRegistry("trajectory source")


# ---- reward shapers ---------------------------------------------------------------------------
@REWARD_SHAPERS.register("default")
class IdentityShaper:
    """Trajectory reward = verifier score (``Trajectory.reward``), as plain GRPO."""

    def __call__(self, group: Group, rewards: Sequence[Any] | None = None, *, ctx: Any = None) -> list[Any]:
        if rewards is not None:  # later in a chain: pass the previous shaper's rewards through
            return list(rewards)
        return [float(t.reward) for t in group.trajectories]


# ---- group builders ---------------------------------------------------------------------------
@GROUP_BUILDERS.register("default")
class FreshGroups:
    """Group = the G fresh on-policy rollouts of a task (GRPO); the offered pool is ignored.

    ``drop_zero_variance``: drop groups whose *verifier scores* are all equal, including
    single-member groups, before any shaping. The loop does not use it: it drops zero-advantage
    groups after shaping (``algorithm.skip_zero_advantage_groups``; DAPO dynamic sampling, Yu et
    al. 2025 sec. 3.2), so a shaped signal inside an all-success group survives. Input groups are
    not mutated.
    """

    def __init__(self, drop_zero_variance: bool = False) -> None:
        self.drop_zero_variance = bool(drop_zero_variance)

    def __call__(self, fresh: Sequence[Group], pool: Sequence[Trajectory] = (), *, ctx: Any = None) -> list[Group]:
        out = []
        for g in fresh:
            trajs = [t for t in g.trajectories if t.source == "on_policy"]
            if not trajs:
                continue
            if self.drop_zero_variance and len({float(t.reward) for t in trajs}) < 2:
                continue
            out.append(Group(group_id=g.group_id, task_id=g.task_id, trajectories=trajs))
        return out


# ---- task samplers ----------------------------------------------------------------------------
def _rng_state(rng: random.Random) -> list[Any]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _set_rng_state(rng: random.Random, state: Sequence[Any]) -> None:
    version, internal, gauss = state
    rng.setstate((version, tuple(internal), gauss))


def _check_tasks(task_ids: Sequence[str], n: int) -> None:
    if not task_ids:
        raise ConfigError("task sampler: the task list is empty")
    if n < 0:
        raise ValueError(f"task sampler: n must be >= 0, got {n}")


@TASK_SAMPLERS.register("default")
class UniformTaskSampler:
    """``n`` i.i.d. uniform draws from the task list with a seeded ``random.Random``."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    def __call__(self, task_ids: Sequence[str], n: int,
                 stats: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
        _check_tasks(task_ids, n)
        ids = list(task_ids)
        return [ids[self._rng.randrange(len(ids))] for _ in range(n)]

    def state_dict(self) -> dict[str, Any]:
        return {"rng": _rng_state(self._rng)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        _set_rng_state(self._rng, state["rng"])


@TASK_SAMPLERS.register("epoch_shuffle")
class EpochShuffleTaskSampler:
    """Each task once per epoch in a seeded random order (TRL's RepeatSampler shuffles per epoch):
    equal coverage, still uniform marginally. A changed task list starts a new epoch."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)
        self._tasks: list[str] = []
        self._queue: list[str] = []

    def __call__(self, task_ids: Sequence[str], n: int,
                 stats: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
        _check_tasks(task_ids, n)
        if list(task_ids) != self._tasks:
            self._tasks, self._queue = list(task_ids), []
        out = []
        while len(out) < n:
            if not self._queue:
                self._queue = list(self._tasks)
                self._rng.shuffle(self._queue)
            out.append(self._queue.pop(0))
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"rng": _rng_state(self._rng), "tasks": list(self._tasks), "queue": list(self._queue)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        _set_rng_state(self._rng, state["rng"])
        self._tasks, self._queue = list(state["tasks"]), list(state["queue"])


# ---- step filters -----------------------------------------------------------------------------
@STEP_FILTERS.register("default")
class KeepAllSteps:
    """Train every step (plain GRPO)."""

    def __call__(self, trajectories: Sequence[Trajectory], *, groups: Any = None, ctx: Any = None) -> list[list[bool]]:
        return [[True] * len(t.steps) for t in trajectories]


@STEP_FILTERS.register("top_entropy")
class TopEntropySteps:
    """Keep the ``fraction`` of steps with the highest mean token entropy *within each task group*
    (DART, Li et al. 2025, "high-entropy-driven step optimization": steps are ranked inside the
    group of rollouts of one task, so an easy task's confident steps do not crowd out a hard
    task's, or the reverse).

    Per group: ``k = max(1, floor(fraction * n_steps))``; ties keep the earlier step. With
    ``fraction = 0.8`` this is DART eq. 2's indicator ``I[H_t >= tau^0.2]``: a step is trained when
    its entropy exceeds that of at least 20% of its group's steps (n - ceil(0.2 n) = floor(0.8 n)
    steps). Groups come
    from ``groups=`` (the loop passes the built groups, so injected members rank with their group)
    or, without it, from each trajectory's ``(task_id, group_id)``. A step without a recorded
    entropy (an expert demonstration was not sampled) is never kept silently: with
    ``missing="recompute"`` its entropy is recomputed under the current policy
    (``ctx.policy.step_entropy``), with ``missing="raise"`` it is an error.
    """

    def __init__(self, fraction: float = 0.8, missing: str = "recompute") -> None:
        if not 0 < fraction <= 1:
            raise ConfigError(f"top_entropy.fraction must be in (0, 1], got {fraction}")
        if missing not in ("recompute", "raise"):
            raise ConfigError(f"top_entropy.missing must be 'recompute' or 'raise', got {missing!r}")
        self.fraction = float(fraction)
        self.missing = missing

    def _entropy(self, t: Trajectory, j: int, ctx: Any) -> float:
        s = t.steps[j]
        if s.entropy is not None:
            return float(s.entropy)
        where = f"top_entropy: trajectory {t.traj_id!r} (source {t.source}) step {j} has no recorded entropy"
        if self.missing == "raise":
            raise ValueError(f"{where}; set top_entropy.missing: recompute to recompute it under the policy")
        policy = getattr(ctx, "policy", None)
        if policy is None or not hasattr(policy, "step_entropy"):
            raise ValueError(f"{where} and no policy handle (ctx.policy) to recompute it")
        return float(policy.step_entropy(s))

    def __call__(self, trajectories: Sequence[Trajectory], *, groups: Sequence[Group] | None = None,
                 ctx: Any = None) -> list[list[bool]]:
        key_of: dict[str, Any] = {}
        for gi, g in enumerate(groups or ()):
            for t in g.trajectories:
                key_of.setdefault(t.traj_id, gi)
        ranked: dict[Any, list[tuple[float, int, int]]] = {}
        for i, t in enumerate(trajectories):
            key = key_of.get(t.traj_id, (t.task_id, t.group_id))
            ranked.setdefault(key, []).extend((-self._entropy(t, j, ctx), i, j) for j in range(t.length))
        keep = [[False] * t.length for t in trajectories]
        for steps in ranked.values():
            k = max(1, math.floor(self.fraction * len(steps)))
            for _, i, j in sorted(steps)[:k]:
                keep[i][j] = True
        return keep


#: ``Step.info`` key of a step's mean token log-prob under the *last phase's actor*, teacher-forced
#: at the phase boundary (``webrl_replay`` sets it on the steps it replays; WebRL sec. 2.2)
ACTOR_LOGPROB_KEY = "actor_mean_logprob"


@STEP_FILTERS.register("perplexity_band")
class PerplexityBandSteps:
    """Keep steps whose mean-token probability ``exp(mean_t logp_t)`` lies in ``(low, high]``
    (WebRL, Qi et al. 2024, actor-confidence filtering of the replay buffer: THUDM/WebRL
    ``scripts/process_data.py`` keeps 0.5 < score <= 0.95, i.e. perplexity in [1/0.95, 1/0.5)):
    steps the actor already finds near-certain teach little, very unlikely ones are too
    off-policy.

    Only trajectories whose ``source`` is in ``sources`` are filtered (WebRL filters replayed
    experience; default ``["replay"]``; ``None`` = all); other steps are kept. The score is, in
    order: ``Step.info[logprob_key]`` when ``logprob_key`` is set (a list of token log-probs, or
    one float, their mean); else ``Step.info["actor_mean_logprob"]`` when the step has it -- the
    mean token log-prob under the last phase's actor that ``webrl_replay`` recomputes at each
    phase boundary, as WebRL sec. 2.2 scores the buffer ("During phase i, we use the actor from
    the last phase to compute the perplexity of all actions in the buffer"); else the sampling-time
    ``Step.rollout_logprobs``. Steps without response tokens are kept.
    """

    def __init__(self, low: float = 0.5, high: float = 0.95, sources: Sequence[str] | None = ("replay",),
                 logprob_key: str | None = None) -> None:
        if not 0 <= low < high <= 1:
            raise ConfigError(f"perplexity_band needs 0 <= low < high <= 1, got low={low}, high={high}")
        if sources is not None:
            bad = [s for s in sources if s not in SOURCES]
            if bad:
                raise ConfigError(f"perplexity_band.sources: unknown {bad}; known: {', '.join(SOURCES)}")
        self.low, self.high = float(low), float(high)
        self.sources = None if sources is None else frozenset(sources)
        self.logprob_key = logprob_key

    def __call__(self, trajectories: Sequence[Trajectory]) -> list[list[bool]]:
        out = []
        for t in trajectories:
            if self.sources is not None and t.source not in self.sources:
                out.append([True] * len(t.steps))
                continue
            row = []
            for j, s in enumerate(t.steps):
                if self.logprob_key is not None:
                    lps = s.info.get(self.logprob_key)
                    if lps is None:
                        raise ValueError(f"trajectory {t.traj_id!r} step {j}: info has no "
                                         f"{self.logprob_key!r} log-probs for perplexity_band")
                else:
                    lps = s.info.get(ACTOR_LOGPROB_KEY)
                    lps = s.rollout_logprobs if lps is None else lps
                if isinstance(lps, (int, float)):  # already the mean token log-prob
                    mean = float(lps)
                elif len(lps) == 0:
                    row.append(True)
                    continue
                else:
                    mean = sum(float(x) for x in lps) / len(lps)
                p = math.exp(mean)
                row.append(self.low < p <= self.high)
            out.append(row)
        return out


# ---- extra losses -----------------------------------------------------------------------------
@EXTRA_LOSSES.register("none")
@EXTRA_LOSSES.register("default")
class NoExtraLoss:
    """No extra term (plain GRPO): a zero scalar on the batch's device."""

    def __call__(self, inputs: LossInputs) -> tuple[Any, dict[str, float]]:
        return inputs.logp.new_zeros(()), {}


@EXTRA_LOSSES.register("sft")
class SFTLoss:
    """``coef * NLL`` on the tokens of samples whose source is in ``sources`` (default expert and
    cached successes): a behaviour-cloning anchor on demonstrations (DART's released code has a
    similar ``use_sft_loss`` term on successful samples).

    Returns the (B, T) per-token loss ``-coef * logp`` on those rows (0 elsewhere); the learner
    aggregates it like the policy loss (e.g. token-mean over all trained tokens of the optimizer
    step), so it is independent of micro-batching. Metrics: ``sft_nll`` (mean over the selected
    tokens of this micro-batch) and ``sft_tokens``.
    """

    def __init__(self, coef: float = 0.1, sources: Sequence[str] = ("expert", "cache")) -> None:
        bad = [s for s in sources if s not in SOURCES]
        if bad:
            raise ConfigError(f"sft.sources: unknown {bad}; known: {', '.join(SOURCES)}")
        if coef < 0:
            raise ConfigError(f"sft.coef must be >= 0, got {coef}")
        self.coef, self.sources = float(coef), frozenset(sources)

    def __call__(self, inputs: LossInputs) -> tuple[Any, dict[str, float]]:
        import torch

        logp = inputs.logp
        if len(inputs.sources) != logp.shape[0]:
            raise ValueError(f"sft: {len(inputs.sources)} sources for {logp.shape[0]} samples")
        rows = torch.tensor([s in self.sources for s in inputs.sources], device=logp.device)
        m = inputs.mask.float() * rows.unsqueeze(1).float()
        n = float(m.sum())
        per_token = -self.coef * logp.float() * m
        nll = float(-(logp.detach().float() * m).sum() / max(n, 1.0))
        return per_token, {"sft_nll": nll, "sft_tokens": n}
