"""MobileRL's AdaGRPO as plug-ins (Xu et al. 2025, "MobileRL: Online Agentic Reinforcement
Learning for Mobile GUI Agents", section 2.2; hyper-parameters from its appendix table 4:
alpha = 1.0, replay buffer 256, gamma = 1.0, kappa = 0.25, n = 16 rollouts, 50 turns).

* ``REWARD_SHAPERS["spa"]`` -- shortest-path reward adjustment, eq. 2.
* ``GROUP_BUILDERS["adapr"]`` -- difficulty-adaptive positive replay (sec. 2.2.2) with the
  1:2 positive:negative pruning of appendix B.3.
* ``TASK_SAMPLERS["fcf"]`` -- failure curriculum filtering (sec. 2.2.3).
"""
from __future__ import annotations

import math
import random
from typing import Any, Mapping, Optional, Sequence

import torch

from guigym.core.errors import ConfigError
from guigym.train.algorithms.advantages import grpo_advantages
from guigym.train.algorithms.context import Plugin
from guigym.train.algorithms.dart import HistoryDelta
from guigym.train.algorithms.registry import (GROUP_BUILDERS, REWARD_SHAPERS, TASK_SAMPLERS, _check_tasks,
                                              _rng_state, _set_rng_state)
from guigym.train.data.types import Group, Trajectory


# ---- SPA --------------------------------------------------------------------------------------
def spa_factor(length: int, t_min: int, alpha: float) -> float:
    """MobileRL eq. 2's multiplier ``1 - alpha (T_i - T_min) / T_i`` for a success of length T_i."""
    t_i = max(1, int(length))
    return 1.0 - alpha * (t_i - t_min) / t_i


def spa_rewards(rewards: Sequence[Any], lengths: Sequence[int], successes: Sequence[bool], alpha: float) -> list[Any]:
    """MobileRL eq. 2 over one group: ``R_i = r(tau_i) (1 - alpha (T_i - T_min) / T_i)`` with
    ``T_min`` the shortest *successful* length in the group.

    ``rewards``: the incoming reward per trajectory (a float, or per-step floats each scaled by the
    trajectory's factor, as the paper broadcasts R to every step). Only successes are rescaled:
    a failure keeps its reward (0 for a binary verifier: "unsuccessful early terminations still
    receive a reward of 0"); a group without a success is unchanged.
    """
    wins = [max(1, int(n)) for n, s in zip(lengths, successes) if s]
    if not wins:
        return list(rewards)
    t_min = min(wins)
    out: list[Any] = []
    for r, n, s in zip(rewards, lengths, successes):
        if not s:
            out.append(r)
            continue
        f = spa_factor(n, t_min, alpha)
        out.append([float(x) * f for x in r] if isinstance(r, (list, tuple)) else float(r) * f)
    return out


def _check_alpha(alpha: Any, where: str) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha <= 1:
        raise ConfigError(f"{where} must be in (0, 1] (MobileRL eq. 2), got {alpha!r}")
    return float(alpha)


@REWARD_SHAPERS.register("spa")
class ShortestPathReward(Plugin):
    """MobileRL eq. 2 (SPA): a success of length T_i in a group whose shortest success has length
    T_min gets ``r (1 - alpha (T_i - T_min) / T_i)``; failures stay as they are (0). ``alpha`` in
    (0, 1], 1.0 in MobileRL's table 4. Acts on the previous shaper's rewards in a chain (the
    verifier scores when first); success is ``Trajectory.success``."""

    def __init__(self, alpha: float = 1.0) -> None:
        self.alpha = _check_alpha(alpha, "spa.alpha")

    def __call__(self, group: Group, rewards: Optional[Sequence[Any]] = None, *, ctx: Any = None) -> list[Any]:
        trajs = group.trajectories
        base = list(rewards) if rewards is not None else [float(t.reward) for t in trajs]
        return spa_rewards(base, [t.length for t in trajs], [bool(t.success) for t in trajs], self.alpha)


# ---- AdaPR ------------------------------------------------------------------------------------
def replay_copy(t: Trajectory, iteration: int) -> Trajectory:
    """A buffered trajectory as a ``replay`` member of iteration ``iteration``'s batch
    (:meth:`Trajectory.injected_copy`, one id per (original, iteration))."""
    return t.injected_copy("replay", key=str(iteration))


@GROUP_BUILDERS.register("adapr")
class AdaptivePositiveReplay(Plugin):
    """MobileRL sec. 2.2.2 (AdaPR: buffer the top-kappa rollouts by advantage, mix at most gamma * M
    of them into each update) and appendix B.3 (at most 2 negatives per positive), one group builder.

    Each call (iteration i), on the groups of the previous builders:

    1. *Advantages*: trajectory-level GRPO (DeepSeekMath sec. 4.1.2, std-normalised) over the
       verifier rewards passed through SPA eq. 2 with ``spa_alpha`` (None: plain verifier rewards)
       -- the signal the paper ranks by. The loop's estimator recomputes advantages afterwards.
    2. *Mixture sampling*: of the buffered trajectories inserted before iteration i whose task has
       a group this iteration, at most ``floor(gamma * M)`` (M = this iteration's on-policy
       trajectories) with the highest stored advantage join their task's group as ``source="replay"``
       copies (the trajectory loaded from ``ctx.store``, its behaviour log-probs included). A group
       gives the replayed member its GRPO baseline; a task absent this iteration has none, so its
       entries wait. An entry is dropped after ``max_replays`` uses.
    3. *Buffer construction*: the top ``ceil(kappa * M)`` on-policy trajectories by advantage (only
       positive ones: it is a positive replay buffer) are inserted; the buffer keeps the
       ``buffer_size`` entries with the highest advantage.
    4. *Negative pruning* (appendix B.3): if the batch has more than ``neg_per_pos`` negatives
       (advantage < 0, recomputed over the mixed groups) per positive, the lowest-advantage
       negatives are discarded until the ratio holds (ties broken with ``ctx.rng``); None disables.
       The estimator's baseline is then over the kept members.
    """

    def __init__(self, buffer_size: int = 256, kappa: float = 0.25, gamma: float = 1.0,
                 spa_alpha: Optional[float] = 1.0, neg_per_pos: Optional[float] = 2.0, max_replays: int = 1,
                 eps: float = 1e-4) -> None:
        if not isinstance(buffer_size, int) or buffer_size < 1:
            raise ConfigError(f"adapr.buffer_size must be an int >= 1, got {buffer_size!r}")
        if not 0 < kappa <= 1:
            raise ConfigError(f"adapr.kappa must be in (0, 1], got {kappa}")
        if not 0 <= gamma <= 1:
            raise ConfigError(f"adapr.gamma must be in [0, 1], got {gamma}")
        if neg_per_pos is not None and neg_per_pos < 0:
            raise ConfigError(f"adapr.neg_per_pos must be >= 0 or null, got {neg_per_pos}")
        if not isinstance(max_replays, int) or max_replays < 1:
            raise ConfigError(f"adapr.max_replays must be an int >= 1, got {max_replays!r}")
        self.buffer_size, self.kappa, self.gamma = buffer_size, float(kappa), float(gamma)
        self.spa_alpha = None if spa_alpha is None else _check_alpha(spa_alpha, "adapr.spa_alpha")
        self.neg_per_pos = None if neg_per_pos is None else float(neg_per_pos)
        self.max_replays, self.eps = max_replays, float(eps)
        # entries: {traj_id, task_id, advantage, iteration, replays}
        self.buffer: list[dict[str, Any]] = []

    def advantages(self, groups: Sequence[Group]) -> dict[str, float]:
        """traj_id -> GRPO advantage over SPA-adjusted verifier rewards, per group."""
        rs, keys, ids = [], [], []
        for gi, g in enumerate(groups):
            trajs = g.trajectories
            r = [float(t.reward) for t in trajs]
            if self.spa_alpha is not None:
                r = spa_rewards(r, [t.length for t in trajs], [bool(t.success) for t in trajs], self.spa_alpha)
            rs += r
            keys += [gi] * len(trajs)
            ids += [t.traj_id for t in trajs]
        if not ids:
            return {}
        adv = grpo_advantages(torch.tensor(rs, dtype=torch.float64), keys, scale="std", eps=self.eps)
        return {tid: float(a) for tid, a in zip(ids, adv)}

    def _mix(self, groups: list[Group], n_online: int, ctx: Any) -> list[Group]:
        cap = int(math.floor(self.gamma * n_online))
        index = {g.task_id: i for i, g in enumerate(groups)}
        ready = [e for e in self.buffer if e["iteration"] < ctx.iteration and e["task_id"] in index]
        ready.sort(key=lambda e: -e["advantage"])
        members = [list(g.trajectories) for g in groups]
        for e in ready[:cap]:
            t = ctx.store.get_trajectory(e["traj_id"])
            if t is None:
                raise ValueError(f"adapr: buffered trajectory {e['traj_id']!r} is not in the DataStore")
            members[index[e["task_id"]]].append(replay_copy(t, ctx.iteration))
            e["replays"] += 1
        self.buffer = [e for e in self.buffer if e["replays"] < self.max_replays]
        return [Group(g.group_id, g.task_id, m) for g, m in zip(groups, members)]

    def _insert(self, online: list[Trajectory], adv: Mapping[str, float], iteration: int) -> None:
        k = int(math.ceil(self.kappa * len(online)))
        top = sorted((t for t in online if adv[t.traj_id] > 0), key=lambda t: -adv[t.traj_id])[:k]
        known = {e["traj_id"] for e in self.buffer}
        self.buffer += [{"traj_id": t.traj_id, "task_id": t.task_id, "advantage": adv[t.traj_id],
                         "iteration": iteration, "replays": 0} for t in top if t.traj_id not in known]
        self.buffer.sort(key=lambda e: (-e["advantage"], e["iteration"]))
        del self.buffer[self.buffer_size:]

    def _prune(self, groups: list[Group], ctx: Any) -> list[Group]:
        if self.neg_per_pos is None:
            return groups
        adv = self.advantages(groups)
        pos = sum(1 for a in adv.values() if a > 0)
        neg = [tid for tid, a in adv.items() if a < 0]
        excess = len(neg) - int(math.floor(self.neg_per_pos * pos))
        if excess <= 0:
            return groups
        ctx.rng.shuffle(neg)  # random order among equal advantages
        drop = set(sorted(neg, key=lambda tid: adv[tid])[:excess])
        return [Group(g.group_id, g.task_id, kept) for g in groups
                if (kept := [t for t in g.trajectories if t.traj_id not in drop])]

    def __call__(self, fresh: Sequence[Group], pool: Sequence[Trajectory] = (), *, ctx: Any = None) -> list[Group]:
        groups = list(fresh)
        online = [t for g in groups for t in g.trajectories if t.source == "on_policy"]
        adv = self.advantages(groups)
        groups = self._mix(groups, len(online), ctx)
        self._insert(online, adv, ctx.iteration)
        return self._prune(groups, ctx)

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": [dict(e) for e in self.buffer]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.buffer = [{"traj_id": str(e["traj_id"]), "task_id": str(e["task_id"]), "advantage": float(e["advantage"]),
                        "iteration": int(e["iteration"]), "replays": int(e["replays"])} for e in state["buffer"]]


# ---- FCF --------------------------------------------------------------------------------------
@TASK_SAMPLERS.register("fcf")
class FailureCurriculumSampler(Plugin):
    """MobileRL sec. 2.2.3 (FCF): a task whose on-policy rewards were all zero for ``fail_epochs``
    (2) consecutive epochs enters a ``cooldown_epochs`` (3) epoch cooldown with sampling weight
    ``exp(-f)`` (f = its consecutive failure epochs), then is removed for good; a non-zero reward
    ends the failure streak (and a cooldown). Other tasks have weight 1; ``n`` draws with
    replacement, proportional to the weights, from a seeded ``random.Random`` (its state is
    checkpointed with the failure history).

    An epoch is ``epoch_iterations`` training iterations (MobileRL's epoch is a pass over its task
    set: set it to ceil(#tasks / rollout.groups_per_iteration)). Epochs close when the sampler is
    called at an iteration that starts a new epoch; a task not attempted in an epoch keeps its f.
    Outcomes come from ``ctx.history`` (finished iterations only).
    """

    def __init__(self, seed: int = 0, fail_epochs: int = 2, cooldown_epochs: int = 3,
                 epoch_iterations: int = 1) -> None:
        for name, v in (("fail_epochs", fail_epochs), ("cooldown_epochs", cooldown_epochs),
                        ("epoch_iterations", epoch_iterations)):
            if not isinstance(v, int) or v < 1:
                raise ConfigError(f"fcf.{name} must be an int >= 1, got {v!r}")
        self.fail_epochs, self.cooldown_epochs, self.epoch_iterations = fail_epochs, cooldown_epochs, epoch_iterations
        self._rng = random.Random(seed)
        self.delta = HistoryDelta()
        self.epoch_acc: dict[str, list[float]] = {}  # task -> [attempts, reward_sum] of the open epoch
        self.fails: dict[str, int] = {}              # task -> f, consecutive all-zero epochs
        self.cooldown: dict[str, int] = {}           # task -> epochs of cooldown left
        self.removed: list[str] = []
        self.epochs_closed = 0

    def weight(self, task_id: str) -> float:
        if task_id in self.removed:
            return 0.0
        if task_id in self.cooldown:
            return math.exp(-self.fails.get(task_id, 0))
        return 1.0

    def _close_epoch(self) -> None:
        for task in list(self.cooldown):  # the cooldown counts epochs, attempted or not
            self.cooldown[task] -= 1
        for task, (attempts, reward_sum) in sorted(self.epoch_acc.items()):
            if attempts <= 0:
                continue
            if reward_sum == 0:
                self.fails[task] = self.fails.get(task, 0) + 1
                if self.fails[task] == self.fail_epochs and task not in self.cooldown and task not in self.removed:
                    self.cooldown[task] = self.cooldown_epochs
            else:
                self.fails[task] = 0
                self.cooldown.pop(task, None)
        for task, left in sorted(self.cooldown.items()):
            if left <= 0:
                del self.cooldown[task]
                self.removed.append(task)
        self.epoch_acc = {}
        self.epochs_closed += 1

    def observe(self, ctx: Any) -> None:
        """Fold in the finished iterations' outcomes; close the epochs that ended."""
        for task, (a, _, r) in self.delta(ctx).items():
            acc = self.epoch_acc.setdefault(task, [0, 0.0])
            acc[0] += a
            acc[1] += r
        it = int(getattr(ctx, "iteration", 0))
        while self.epochs_closed < it // self.epoch_iterations:
            self._close_epoch()

    def __call__(self, task_ids: Sequence[str], n: int, stats: Any = None, *, ctx: Any = None) -> list[str]:
        _check_tasks(task_ids, n)
        if ctx is not None:
            self.observe(ctx)
        ids = list(task_ids)
        w = [self.weight(t) for t in ids]
        if not any(w):
            raise ConfigError(f"fcf: every task was removed after {self.fail_epochs} all-zero epochs and a "
                              f"{self.cooldown_epochs}-epoch cooldown ({', '.join(self.removed)}); "
                              f"nothing left to sample")
        return self._rng.choices(ids, weights=w, k=n)

    def state_dict(self) -> dict[str, Any]:
        return {"rng": _rng_state(self._rng), "delta": self.delta.state_dict(),
                "epoch_acc": {k: list(v) for k, v in self.epoch_acc.items()}, "fails": dict(self.fails),
                "cooldown": dict(self.cooldown), "removed": list(self.removed), "epochs_closed": self.epochs_closed}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        _set_rng_state(self._rng, state["rng"])
        self.delta.load_state_dict(state["delta"])
        self.epoch_acc = {k: [int(v[0]), float(v[1])] for k, v in state["epoch_acc"].items()}
        self.fails = {k: int(v) for k, v in state["fails"].items()}
        self.cooldown = {k: int(v) for k, v in state["cooldown"].items()}
        self.removed = list(state["removed"])
        self.epochs_closed = int(state["epochs_closed"])
