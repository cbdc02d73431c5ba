"""Advantage estimators (plug-in API v2): shaped rewards of built groups -> advantages.

``ADVANTAGE_ESTIMATORS.build(name, **options)`` gives a callable
``(groups, rewards, *, ctx) -> {traj_id: float | list[float]}``: one advantage per trajectory
(trajectory-level GRPO) or one per step. ``rewards[traj_id]`` is what the reward-shaper chain
returned: a float (outcome) or a list of per-step floats (progress signals).

* ``grpo`` -- DeepSeekMath sec. 4.1.2 (:func:`~guigym.train.algorithms.advantages.grpo_advantages`);
  a per-step reward list counts as its sum (the episode return).
* ``stepwise_grpo`` (alias ``stepwise``) -- DART eq. 1: every step is a sample; with a float reward
  each step carries it (the released code's trajectory splitter), with per-step rewards each step
  carries its undiscounted return-to-go ``G_k = sum_{j >= k} r_j`` (a float R is the list
  ``[0, ..., 0, R]``, whose return-to-go is R at every step, so both agree); statistics over the
  step samples of the group (``stats="step"``) or per trajectory (``stats="trajectory"``).

A critic-based estimator (GAE, Schulman et al. 2016) fits the same signature: it gets
``ctx.policy`` and the per-step rewards and returns per-step advantages.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence, Union

import torch

from guigym.core.errors import ConfigError
from guigym.train.algorithms.advantages import SCALES, grpo_advantages
from guigym.train.algorithms.registry import PluginRegistry

Reward = Union[float, Sequence[float]]
ADVANTAGE_ESTIMATORS: PluginRegistry[Any] = PluginRegistry("advantage estimator")


def _check(scale: str, eps: float) -> None:
    if scale not in SCALES:
        raise ConfigError(f"scale: unknown {scale!r}; known: {', '.join(SCALES)}")
    if not eps > 0:
        raise ConfigError(f"eps must be > 0, got {eps}")


def episode_return(r: Reward) -> float:
    """A float reward, or the sum of per-step rewards."""
    return float(r) if isinstance(r, (int, float)) else float(sum(float(x) for x in r))


def returns_to_go(r: Reward, length: int) -> list[float]:
    """Per-step undiscounted return-to-go; a float R is ``[0, ..., 0, R]`` (so R at every step)."""
    if isinstance(r, (int, float)):
        return [float(r)] * length
    vals = [float(x) for x in r]
    if len(vals) != length:
        raise ValueError(f"{len(vals)} per-step rewards for {length} steps")
    out, acc = [0.0] * length, 0.0
    for k in range(length - 1, -1, -1):
        acc += vals[k]
        out[k] = acc
    return out


def _members(groups: Sequence[Any], rewards: Mapping[str, Reward]) -> list[tuple[Any, tuple[str, str], Reward]]:
    out = []
    for g in groups:
        for t in g.trajectories:
            if t.traj_id not in rewards:
                raise KeyError(f"no shaped reward for trajectory {t.traj_id!r} (task {t.task_id})")
            out.append((t, (g.task_id, g.group_id), rewards[t.traj_id]))
    return out


@ADVANTAGE_ESTIMATORS.register("grpo")
class GRPOEstimator:
    """Trajectory-level group-normalised advantage (DeepSeekMath sec. 4.1.2; ``scale`` as TRL's
    ``scale_rewards``: std / none (Dr. GRPO) / batch)."""

    def __init__(self, scale: str = "std", eps: float = 1e-4) -> None:
        _check(scale, eps)
        self.scale, self.eps = scale, float(eps)

    def __call__(self, groups: Sequence[Any], rewards: Mapping[str, Reward], *, ctx: Any = None) -> dict[str, float]:
        mem = _members(groups, rewards)
        if not mem:
            return {}
        r = torch.tensor([episode_return(x) for _, _, x in mem], dtype=torch.float64)
        adv = grpo_advantages(r, [k for _, k, _ in mem], scale=self.scale, eps=self.eps)
        return {t.traj_id: float(a) for (t, _, _), a in zip(mem, adv)}


@ADVANTAGE_ESTIMATORS.register("stepwise")
@ADVANTAGE_ESTIMATORS.register("stepwise_grpo")
class StepwiseGRPOEstimator:
    """Step-wise GRPO (DART eq. 1), one advantage per step; see the module docstring."""

    def __init__(self, scale: str = "std", eps: float = 1e-4, stats: str = "step") -> None:
        _check(scale, eps)
        if stats not in ("step", "trajectory"):
            raise ConfigError(f"stepwise_grpo.stats must be 'step' or 'trajectory', got {stats!r}")
        self.scale, self.eps, self.stats = scale, float(eps), stats

    def __call__(self, groups: Sequence[Any], rewards: Mapping[str, Reward], *,
                 ctx: Any = None) -> dict[str, list[float]]:
        mem = _members(groups, rewards)
        if not mem:
            return {}
        if self.stats == "trajectory":
            r = torch.tensor([episode_return(x) for _, _, x in mem], dtype=torch.float64)
            adv = grpo_advantages(r, [k for _, k, _ in mem], scale=self.scale, eps=self.eps)
            return {t.traj_id: [float(a)] * t.length for (t, _, _), a in zip(mem, adv)}
        flat, keys = [], []
        for t, key, x in mem:
            try:
                flat.extend(returns_to_go(x, t.length))
            except ValueError as e:
                raise ValueError(f"trajectory {t.traj_id!r}: {e}") from None
            keys.extend([key] * t.length)
        adv = grpo_advantages(torch.tensor(flat, dtype=torch.float64), keys, scale=self.scale, eps=self.eps)
        out, k = {}, 0
        for t, _, _ in mem:
            out[t.traj_id] = [float(a) for a in adv[k:k + t.length]]
            k += t.length
        return out


def all_zero(adv: Union[float, Sequence[float]], tol: float = 0.0) -> bool:
    """True when an advantage (or every per-step advantage) is 0 (|A| <= tol)."""
    vals = [adv] if isinstance(adv, (int, float)) else list(adv)
    return all(abs(float(a)) <= tol for a in vals)


def drop_zero_advantage_groups(groups: Sequence[Any], advantages: Mapping[str, Any]) -> list[Any]:
    """Groups with at least one non-zero advantage (DAPO dynamic sampling, Yu et al. 2025 sec. 3.2,
    applied *after* reward shaping: a group all of whose members succeeded still trains when a
    shaper told them apart). The test is exact (``all_zero`` with ``tol=0``): the GRPO estimators
    return exactly 0 for a group whose rewards are equal up to rounding
    (:func:`~guigym.train.algorithms.advantages.constant_groups`), so a tolerance here would only
    drop groups whose rewards do differ."""
    return [g for g in groups if not all(all_zero(advantages[t.traj_id]) for t in g.trajectories)]
