"""Group-relative advantages: GRPO (trajectory level) and DART's step-wise GRPO.

Both are outcome supervision: the only reward is the verifier's score of a whole episode, and the
baseline is the mean score of the other rollouts of the same task (no value model).

* :func:`grpo_advantages` -- Shao et al. 2024, "DeepSeekMath" section 4.1.2 (outcome
  supervision): ``A_i = (r_i - mean(r_group)) / (std(r_group) + eps)``. ``scale="none"`` drops the
  std division as Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training") and TRL's
  ``scale_rewards=False/"none"``; ``scale="batch"`` divides by the std of the whole batch (TRL
  ``scale_rewards="batch"``).
* :func:`stepwise_grpo_advantages` -- DART (Li et al. 2025, "Efficient Multi-turn RL for GUI
  Agents via Decoupled Training and Adaptive Data Curation", eq. 1): every step of a trajectory is
  its own prompt->response sample carrying the trajectory's outcome reward, and the GRPO statistics
  are taken over *all steps* of the task's rollouts. That is what DART's released code does
  (``verl/trainer/ppo/trajectory_splitter.py`` gives every step row the trajectory reward and
  ``uid = task id``; ``core_algos.compute_grpo_outcome_advantage`` then normalises over those step
  rows), so a long trajectory weighs more in the group mean/std than a short one.
  ``stats="trajectory"`` is the other defensible reading: each step inherits its trajectory's
  group-normalised advantage (statistics over trajectories, one vote each).

Conventions shared by both functions (documented because the sources differ):

* std is the unbiased sample std (Bessel, ``torch.std`` default), as TRL and verl compute it;
* a group with a single member has no baseline, so its advantage is 0 (verl would return the raw
  reward, TRL a NaN); a group whose rewards are all equal gets exactly 0. "Equal" is judged with a
  tolerance relative to the reward scale, ``max(r) - min(r) <= CONST_ULPS * finfo.eps * max(1,
  |mean(r)|)`` (:func:`constant_groups`), because the group mean of equal rewards is not exact in
  floating point: ``[0.1] * 3`` in float64 has mean ``0.1 + 1.4e-17``, which divided by
  ``std + eps`` gave ``-1.39e-13`` instead of 0 and let the group escape the zero-advantage drop
  (:func:`~guigym.train.algorithms.estimators.drop_zero_advantage_groups`). The same tolerance
  absorbs the few-ulp differences reward shaping leaves between equal scores (``0.1 + 0.2`` vs
  ``0.3``);
* ``eps`` defaults to 1e-4 as TRL (verl uses 1e-6).
"""
from __future__ import annotations

from typing import Hashable, Literal, Sequence

import torch

from guigym.core.errors import ConfigError

Scale = Literal["std", "none", "batch"]
SCALES: tuple[str, ...] = ("std", "none", "batch")
StepStats = Literal["step", "trajectory"]


def group_index(group_ids: Sequence[Hashable] | torch.Tensor, n: int) -> tuple[torch.Tensor, int]:
    """Map arbitrary group keys to contiguous ints in order of first appearance.

    Args: ``group_ids`` of length ``n`` (strings, ints, tuples such as (task_id, group_id), or a
    1-D tensor). Returns ``(index (n,) int64, number_of_groups)``.
    """
    keys = group_ids.tolist() if isinstance(group_ids, torch.Tensor) else list(group_ids)
    if len(keys) != n:
        raise ValueError(f"group_ids has {len(keys)} entries but rewards has {n}")
    seen: dict[Hashable, int] = {}
    idx = [seen.setdefault(k, len(seen)) for k in keys]
    return torch.tensor(idx, dtype=torch.long), len(seen)


CONST_ULPS = 64
"""A group is constant when its reward range is at most this many machine epsilons of the reward
dtype, relative to ``max(1, |group mean|)``: 1.4e-14 in float64, 7.6e-6 in float32 -- far above
the rounding of a mean or a shaping sum, far below any reward difference a verifier or shaper
means."""


def constant_groups(r: torch.Tensor, idx: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Which groups hold equal rewards, up to rounding.

    Args: ``r`` (N,) float rewards, ``idx`` (N,) int64 group index (:func:`group_index`) on
    ``r``'s device, ``n_groups``. Returns (n_groups,) bool: ``max - min <= CONST_ULPS *
    finfo(r.dtype).eps * max(1, |mean|)`` within the group. The range (not the std) is tested because
    it is exactly 0 for bit-equal rewards whatever the group size, where the std picks up the
    rounding of the mean; the tolerance is relative so that rewards on a scale above 1 (a return
    summed over steps) are judged as finely as rewards in [0, 1].
    """
    big = torch.full((n_groups,), float("-inf"), dtype=r.dtype, device=r.device)
    small = torch.full((n_groups,), float("inf"), dtype=r.dtype, device=r.device)
    hi = big.scatter_reduce(0, idx, r, reduce="amax")
    lo = small.scatter_reduce(0, idx, r, reduce="amin")
    count = torch.zeros(n_groups, dtype=r.dtype, device=r.device).index_add_(0, idx, torch.ones_like(r))
    mean = torch.zeros(n_groups, dtype=r.dtype, device=r.device).index_add_(0, idx, r) / count.clamp(min=1)
    tol = CONST_ULPS * torch.finfo(r.dtype).eps * mean.abs().clamp(min=1.0)
    return (hi - lo) <= tol


def _check_scale(scale: str, eps: float) -> None:
    if scale not in SCALES:
        raise ConfigError(f"scale_rewards: unknown scale {scale!r}; known: {', '.join(SCALES)}")
    if not eps > 0:
        raise ConfigError(f"adv_eps must be > 0, got {eps}")


def grpo_advantages(rewards: torch.Tensor, group_ids: Sequence[Hashable] | torch.Tensor, *,
                    scale: Scale = "std", eps: float = 1e-4) -> torch.Tensor:
    """Group-normalised GRPO advantage, one per trajectory (DeepSeekMath sec. 4.1.2).

    ``A_i = (r_i - mean_{j in g(i)} r_j) / (std_{j in g(i)} r_j + eps)`` with ``scale="std"``;
    ``A_i = r_i - mean_{g(i)}`` with ``scale="none"`` (Dr. GRPO); with ``scale="batch"`` the
    divisor is the std over all N rewards (TRL ``scale_rewards="batch"``).

    Args:
        rewards: (N,) float, one scalar (shaped) reward per trajectory.
        group_ids: N group keys; trajectories with equal keys share a baseline.
        scale: "std" | "none" | "batch".
        eps: added to the std before dividing.
    Returns:
        (N,) advantages, same dtype/device as ``rewards`` (float32 if rewards are integer).
        Singleton groups and constant groups (equal rewards up to rounding, :func:`constant_groups`)
        give exactly 0.
    """
    _check_scale(scale, eps)
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (N,), got shape {tuple(rewards.shape)}")
    r = rewards if rewards.is_floating_point() else rewards.float()
    n = r.shape[0]
    if n == 0:
        return r.clone()
    idx, n_groups = group_index(group_ids, n)
    idx = idx.to(r.device)
    count = torch.zeros(n_groups, dtype=r.dtype, device=r.device).index_add_(0, idx, torch.ones_like(r))
    mean = torch.zeros(n_groups, dtype=r.dtype, device=r.device).index_add_(0, idx, r) / count
    centred = r - mean[idx]
    singleton = count[idx] < 2
    if scale == "none":
        adv = centred
    elif scale == "std":
        sq = torch.zeros(n_groups, dtype=r.dtype, device=r.device).index_add_(0, idx, centred * centred)
        std = torch.sqrt(sq / (count - 1).clamp(min=1))  # unbiased; singletons masked below
        adv = centred / (std[idx] + eps)
    else:  # batch
        std = r.std() if n > 1 else torch.zeros((), dtype=r.dtype, device=r.device)
        adv = centred / (std + eps)
    # exactly 0, not the rounding of the mean divided by eps: the zero-advantage drop tests == 0
    flat = singleton | constant_groups(r, idx, n_groups)[idx]
    return torch.where(flat, torch.zeros_like(adv), adv)


def stepwise_grpo_advantages(rewards: torch.Tensor, group_ids: Sequence[Hashable] | torch.Tensor,
                             lengths: Sequence[int] | torch.Tensor, *, scale: Scale = "std",
                             eps: float = 1e-4, stats: StepStats = "step") -> torch.Tensor:
    """Step-wise GRPO advantage (DART eq. 1): one advantage per *step*, steps flattened.

    Trajectory ``i`` has ``lengths[i]`` steps, each a separate training sample carrying the
    trajectory reward ``r_i``. ``stats="step"`` (DART's released code): the group statistics are
    computed over the step samples of the group, i.e. GRPO over the multiset
    ``{r_i repeated lengths[i] times : i in group}``. ``stats="trajectory"``: each step inherits
    :func:`grpo_advantages` of its trajectory (statistics over trajectories).

    Args:
        rewards: (N,) trajectory rewards. group_ids: N keys (use (task_id, group_id) tuples to
        normalise per task within a group). lengths: (N,) non-negative step counts.
    Returns:
        (S,) with ``S = sum(lengths)``: trajectory 0's steps first, in step order, then
        trajectory 1's, ... Trajectories with 0 steps contribute nothing.
    """
    if stats not in ("step", "trajectory"):
        raise ConfigError(f"stepwise advantage stats must be 'step' or 'trajectory', got {stats!r}")
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (N,), got shape {tuple(rewards.shape)}")
    n = rewards.shape[0]
    lens = torch.as_tensor(lengths, dtype=torch.long, device=rewards.device).reshape(-1)
    if lens.shape[0] != n:
        raise ValueError(f"lengths has {lens.shape[0]} entries but rewards has {n}")
    if n and int(lens.min()) < 0:
        raise ValueError("lengths must be >= 0")
    if stats == "trajectory":
        return torch.repeat_interleave(grpo_advantages(rewards, group_ids, scale=scale, eps=eps), lens)
    idx, _ = group_index(group_ids, n)
    step_rewards = torch.repeat_interleave(rewards, lens)
    step_groups = torch.repeat_interleave(idx.to(rewards.device), lens)
    return grpo_advantages(step_rewards, step_groups, scale=scale, eps=eps)
