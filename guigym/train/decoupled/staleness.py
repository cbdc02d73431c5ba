"""The staleness bound of the decoupled trainer (``decoupled.max_policy_lag``, ``stale_policy``).

A step sampled by policy version ``v`` and trained when the learner is at version ``V`` has lag
``V - v``. A trajectory's lag is that of its oldest step (``Trajectory.policy_version`` = min over
steps). With ``L = max_policy_lag``:

* lag <= L: trained; the truncated importance weight ``min(pi_train / pi_rollout, tis_cap)``
  (DART eq. 2, guigym.train.algorithms.losses.truncated_is_weight, inside the Learner) corrects the
  rollout/trainer mismatch as it does for any sample.
* lag > L, ``drop``: removed from its group before shaping and advantages; it never reaches the
  loss. A group left empty is dropped.
* lag > L, ``reweight``: trained, with the advantage of every token of a sample scaled by
  ``stale_weight ** (lag_sample - L)`` where ``lag_sample = V - sample.policy_version`` (the
  version of that step, so per token). The factor is recorded per sample.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional, Sequence

POLICIES = ("drop", "reweight")


@dataclass
class StaleRecord:
    """What happened to one trajectory at trainer version ``trained_version``."""

    traj_id: str
    group_id: str
    behaviour_version: int  # oldest step's policy version
    trained_version: int
    lag: int
    action: str  # "train" | "drop" | "reweight"
    steps: int = 0  # env actions it took
    env_lane: str = ""  # the env that ran it (event-row worker name), "" if unknown
    env_span: Optional[list[float]] = None  # [reset sent, last result] wall seconds on that env

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def split_stale(groups: Sequence[Any], version: int, max_lag: int, policy: str) -> tuple[list[Any], list[StaleRecord]]:
    """(groups to train on, one record per trajectory). ``drop`` removes the stale members (the
    groups are copied, the inputs untouched); ``reweight`` keeps them (see :func:`reweight`)."""
    from guigym.train.data.types import Group

    if policy not in POLICIES:
        raise ValueError(f"stale_policy must be one of {POLICIES}, got {policy!r}")
    kept: list[Any] = []
    records: list[StaleRecord] = []
    for g in groups:
        members = []
        for t in g.trajectories:
            lag = int(version) - int(t.policy_version)
            stale = lag > max_lag
            action = "train" if not stale else policy
            span = t.info.get("env_span")
            records.append(StaleRecord(t.traj_id, g.group_id, int(t.policy_version), int(version), lag, action,
                                       steps=len(t.steps), env_lane=str(t.info.get("env_lane", "")),
                                       env_span=[float(x) for x in span] if span else None))
            if action != "drop":
                members.append(t)
        if members:
            kept.append(Group(group_id=g.group_id, task_id=g.task_id, trajectories=members))
    return kept, records


def sample_weight(sample_version: int, version: int, max_lag: int, stale_weight: float) -> float:
    """``stale_weight ** (lag - max_lag)`` for a stale sample, 1.0 within the bound."""
    over = int(version) - int(sample_version) - int(max_lag)
    return float(stale_weight) ** over if over > 0 else 1.0


def reweight(samples: Sequence[Any], version: int, max_lag: int, stale_weight: float) -> list[dict[str, Any]]:
    """Scale the per-token advantages of stale samples in place; returns one row per scaled sample
    ``{"traj_id", "step_index", "policy_version", "weight", "tokens"}`` (tokens = loss tokens)."""
    rows = []
    for s in samples:
        w = sample_weight(s.policy_version, version, max_lag, stale_weight)
        if w != 1.0:
            s.advantages = [a * w for a in s.advantages]
            rows.append({"traj_id": s.traj_id, "step_index": s.step_index, "policy_version": s.policy_version,
                         "weight": w, "tokens": s.num_loss_tokens})
    return rows
