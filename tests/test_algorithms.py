"""GRPO-family algorithm pieces against hand-computed values, and the trainer's plug-ins.

Expected numbers are written out from the formulas (arithmetic in the comments), never produced
by the code under test.
"""
from __future__ import annotations

import json
import math
import os

import pytest

try:
    import torch
except ImportError:  # torch is in the `train` extra, which .ci/run installs
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("torch (guigym[train]) is not installed", allow_module_level=True)

from guigym.core.errors import ConfigError
from guigym.train.algorithms import (
    EXTRA_LOSSES,
    GROUP_BUILDERS,
    REWARD_SHAPERS,
    STEP_FILTERS,
    TASK_SAMPLERS,
    LossInputs,
    StepFilter,
    TaskSampler,
    aggregate_loss,
    grpo_advantages,
    kl_penalty,
    policy_loss,
    stepwise_grpo_advantages,
    truncated_is_weight,
)
from guigym.train.data.types import Group, Step, Trajectory

EPS = 1e-8  # tiny so that hand values need no eps correction
ATOL = 1e-5


def close(actual: torch.Tensor, expected: list[float], atol: float = ATOL) -> None:
    torch.testing.assert_close(actual.detach().double(), torch.tensor(expected, dtype=torch.float64),
                               atol=atol, rtol=0)


# ---- GRPO advantage (DeepSeekMath sec. 4.1.2) ---------------------------------------------------
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.5])
GROUPS = ["a", "a", "a", "b", "b", "c"]


def test_grpo_advantage_std():
    # group a = [1, 0, 0]: mean 1/3, deviations [2/3, -1/3, -1/3], sum of squares 4/9+1/9+1/9 = 2/3,
    # unbiased var = (2/3)/2 = 1/3, std = 0.5773503; A = [0.6666667, -0.3333333, -0.3333333] / 0.5773503
    # group b = [1, 1]: all equal -> 0; group c = [0.5]: singleton -> 0 (no baseline)
    adv = grpo_advantages(REWARDS, GROUPS, scale="std", eps=EPS)
    close(adv, [1.1547005, -0.5773503, -0.5773503, 0.0, 0.0, 0.0])


def test_grpo_advantage_no_std_and_batch_std():
    # Dr. GRPO: only centred: a -> [2/3, -1/3, -1/3]
    close(grpo_advantages(REWARDS, GROUPS, scale="none"), [0.6666667, -0.3333333, -0.3333333, 0, 0, 0])
    # batch std over all six rewards: mean 3.5/6 = 0.5833333; squared deviations
    # 0.1736111, 0.3402778, 0.3402778, 0.1736111, 0.1736111, 0.0069444 -> sum 1.2083333, /5 = 0.2416667,
    # std 0.4915960; a -> [0.6666667, -0.3333333, -0.3333333] / 0.4915960
    close(grpo_advantages(REWARDS, GROUPS, scale="batch", eps=EPS),
          [1.3561270, -0.6780635, -0.6780635, 0, 0, 0])


def test_grpo_advantage_eps_and_group_keys():
    # with eps: 0.6666667 / (0.5773503 + 0.1) = 0.9843
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 0.0]), [("t", 1)] * 3, eps=0.1)
    close(adv[:1], [0.6666667 / 0.6773503])
    # same group id under different tasks must not share a baseline when keyed by (task, group)
    keys = [("t1", "g"), ("t1", "g"), ("t2", "g"), ("t2", "g")]
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0]), keys, scale="none")
    close(adv, [0.5, -0.5, 0.0, 0.0])
    with pytest.raises(ConfigError, match="std"):
        grpo_advantages(REWARDS, GROUPS, scale="mean")
    with pytest.raises(ValueError, match="group_ids"):
        grpo_advantages(REWARDS, GROUPS[:-1])


# ---- step-wise GRPO (DART eq. 1) ----------------------------------------------------------------
def test_stepwise_advantage_statistics_over_steps():
    # group g: success (reward 1) in 1 step, failure (reward 0) in 3 steps; group h: one success of 2
    # steps and one failure of 1 step.
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])
    groups = ["g", "g", "h", "h"]
    lengths = [1, 3, 2, 1]
    adv = stepwise_grpo_advantages(rewards, groups, lengths, eps=EPS, stats="step")
    # g's step rewards [1, 0, 0, 0]: mean 0.25, deviations [0.75, -0.25, -0.25, -0.25],
    # sum sq 0.5625 + 3 * 0.0625 = 0.75, var 0.75/3 = 0.25, std 0.5 -> [1.5, -0.5, -0.5, -0.5]
    # h's step rewards [1, 1, 0]: mean 2/3, deviations [1/3, 1/3, -2/3], sum sq 1/9+1/9+4/9 = 2/3,
    # var (2/3)/2 = 1/3, std 0.5773503 -> [0.5773503, 0.5773503, -1.1547005]
    close(adv, [1.5, -0.5, -0.5, -0.5, 0.5773503, 0.5773503, -1.1547005])


def test_stepwise_advantage_trajectory_statistics_and_zero_length():
    rewards = torch.tensor([1.0, 0.0, 0.0])
    # trajectory statistics: [1, 0, 0] -> [1.1547005, -0.5773503, -0.5773503] (see above), each step
    # inherits its trajectory's value; the third trajectory has no steps and contributes none
    adv = stepwise_grpo_advantages(rewards, ["g"] * 3, [2, 1, 0], eps=EPS, stats="trajectory")
    close(adv, [1.1547005, 1.1547005, -0.5773503])
    with pytest.raises(ValueError, match="lengths"):
        stepwise_grpo_advantages(rewards, ["g"] * 3, [1, 1])


# ---- equal rewards give exactly 0 and the group is dropped (issue 32 item 6) --------------------
@pytest.mark.parametrize("value", [0.1, 1 / 3, 0.7])
@pytest.mark.parametrize("scale", ["std", "none", "batch"])
def test_equal_rewards_give_exactly_zero_and_the_group_is_dropped(value, scale):
    from guigym.train.algorithms.estimators import ADVANTAGE_ESTIMATORS, drop_zero_advantage_groups

    # the float64 mean of [0.1] * 3 is 0.1 + 1.4e-17: before the fix the advantages were -1.39e-13
    # (std scale) and the group escaped the drop, which promises exactly 0 for a constant group
    rewards = torch.tensor([value] * 3 + [0.0, 1.0], dtype=torch.float64)
    adv = grpo_advantages(rewards, ["c", "c", "c", "v", "v"], scale=scale)
    assert adv[:3].tolist() == [0.0, 0.0, 0.0]  # exact: the docstring promises exactly 0
    assert abs(float(adv[3])) > 0.1 and abs(float(adv[4])) > 0.1  # the varying group still trains
    steps = stepwise_grpo_advantages(rewards, ["c", "c", "c", "v", "v"], [2, 1, 3, 1, 1], scale=scale)
    assert steps[:6].tolist() == [0.0] * 6
    const = Group("gc", "t1", [_traj(f"c{i}", value, [], group="gc") for i in range(3)])
    varying = Group("gv", "t2", [_traj("v0", 0.0, [], group="gv", task="t2"),
                                 _traj("v1", 1.0, [], group="gv", task="t2")])
    shaped = {t.traj_id: t.reward for g in (const, varying) for t in g.trajectories}
    est = ADVANTAGE_ESTIMATORS.build("grpo", scale=scale)([const, varying], shaped)
    assert [g.group_id for g in drop_zero_advantage_groups([const, varying], est)] == ["gv"]


def test_constant_group_tolerance_is_relative_to_the_reward_scale():
    # rewards equal but for rounding (0.1 + 0.2 != 0.3 in binary) are a constant group ...
    close_pair = [0.1 + 0.2, 0.3, 0.3]
    assert grpo_advantages(torch.tensor(close_pair, dtype=torch.float64), ["g"] * 3).tolist() == [0.0] * 3
    # ... also on a return scale of thousands, where that rounding is 4.5e-13 in absolute terms
    big = [1e4 * (0.1 + 0.2), 3000.0, 3000.0]
    assert big[0] - big[1] > 1e-13
    assert grpo_advantages(torch.tensor(big, dtype=torch.float64), ["g"] * 3).tolist() == [0.0] * 3
    # a genuine (if tiny) difference is not flattened: 0.5 vs 0.5 + 1e-9, Dr. GRPO centring
    # gives -/+ 5e-10
    adv = grpo_advantages(torch.tensor([0.5, 0.5 + 1e-9], dtype=torch.float64), ["g"] * 2, scale="none")
    close(adv, [-5e-10, 5e-10], atol=1e-15)


# ---- PPO clip with asymmetric epsilons ----------------------------------------------------------
RATIOS = [0.5, 0.9, 1.25, 1.5]  # below 1 - 0.2; inside; inside only thanks to eps_high 0.28; above


def _clip_batch():
    old = torch.tensor([[-1.0, -2.0, -0.5, -3.0], [-1.5, -0.7, -2.2, -1.1]])
    logp = (old + torch.log(torch.tensor(RATIOS))).clone().requires_grad_(True)
    adv = torch.tensor([1.0, -1.0])
    return logp, old, adv, torch.ones(2, 4)


def test_clip_values_and_gradients_at_both_epsilons():
    logp, old, adv, mask = _clip_batch()
    loss, metrics = policy_loss(logp, old, adv, mask, epsilon=0.2, epsilon_high=0.28,
                                loss_type="seq-mean-token-sum")
    # per token -min(r*A, clip(r, 0.8, 1.28)*A):
    #  A=+1: r=0.5 -> -min(0.5, 0.8) = -0.5; 0.9 -> -0.9; 1.25 -> -1.25; 1.5 -> -min(1.5, 1.28) = -1.28
    #  A=-1: r=0.5 -> -min(-0.5, -0.8) = 0.8; 0.9 -> 0.9; 1.25 -> 1.25; 1.5 -> -min(-1.5, -1.28) = 1.5
    # row sums -3.93 and 4.45, seq mean (−3.93 + 4.45) / 2 = 0.26
    assert loss.item() == pytest.approx(0.26, abs=1e-5)
    loss.backward()
    # d(-r*A)/dlogp = -A*r where unclipped, 0 where the clip is active; / 2 for the mean over rows:
    #  A=+1: [-0.5, -0.9, -1.25, 0] / 2 ; A=-1: [0 (clipped low), 0.9, 1.25, 1.5] / 2
    close(logp.grad, [[-0.25, -0.45, -0.625, 0.0], [0.0, 0.45, 0.625, 0.75]])
    # clipped tokens: low = (r < 0.8 and A < 0) -> 1 of 8; high = (r > 1.28 and A > 0) -> 1 of 8
    assert metrics["clip_frac_low"] == pytest.approx(0.125)
    assert metrics["clip_frac_high"] == pytest.approx(0.125)
    assert metrics["clip_frac"] == pytest.approx(0.25)


def test_symmetric_clip_when_epsilon_high_is_none():
    logp, old, adv, mask = _clip_batch()
    loss, metrics = policy_loss(logp, old, adv, mask, epsilon=0.2, loss_type="seq-mean-token-sum")
    # now r=1.25 with A=+1 is clipped at 1.2: row 0 = -0.5 - 0.9 - 1.2 - 1.2 = -3.8; row 1 = 4.45
    assert loss.item() == pytest.approx((-3.8 + 4.45) / 2, abs=1e-5)
    loss.backward()
    close(logp.grad, [[-0.25, -0.45, 0.0, 0.0], [0.0, 0.45, 0.625, 0.75]])
    assert metrics["clip_frac_high"] == pytest.approx(2 / 8)


def test_on_policy_ratio_one_gives_reinforce_gradient():
    # ratio 1 everywhere: loss = -mean(A), d/dlogp = -A / (#tokens) under token-mean
    logp = torch.tensor([[-1.0, -2.0], [-0.3, -0.4]], requires_grad=True)
    loss, metrics = policy_loss(logp, logp.detach(), torch.tensor([2.0, -1.0]), torch.ones(2, 2))
    assert loss.item() == pytest.approx(-(2 + 2 - 1 - 1) / 4)
    loss.backward()
    close(logp.grad, [[-0.5, -0.5], [0.25, 0.25]])
    assert metrics["approx_kl"] == 0.0 and metrics["clip_frac"] == 0.0


# ---- aggregation modes --------------------------------------------------------------------------
PER_TOKEN = torch.tensor([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0], [9.0, 9.0, 0.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])


@pytest.mark.parametrize("mode, expected", [
    ("token-mean", (1 + 2 + 3 + 4) / 4),                 # 2.5
    ("bnpo", 2.5), ("dapo", 2.5),
    ("seq-mean-token-sum", (6 + 4) / 2),                 # empty row 3 left out
    ("seq-mean-token-mean", (6 / 3 + 4 / 1) / 2),        # 3.0
    ("grpo", 3.0),
    ("seq-mean-token-sum-norm", 10 / (3 * 4)),           # B * T with T = 4
])
def test_aggregation_modes(mode, expected):
    assert aggregate_loss(PER_TOKEN, MASK, mode).item() == pytest.approx(expected)


def test_aggregation_constant_norms():
    # Dr. GRPO divides by B * max_completion_length: 10 / (3 * 8)
    assert aggregate_loss(PER_TOKEN, MASK, "dr_grpo", max_len=8).item() == pytest.approx(10 / 24)
    # DAPO global token mean: this micro-batch's 10 over 8 tokens of the whole accumulated batch
    assert aggregate_loss(PER_TOKEN, MASK, "token-mean", norm=8).item() == pytest.approx(1.25)
    assert aggregate_loss(PER_TOKEN, torch.zeros_like(MASK), "token-mean").item() == 0.0
    with pytest.raises(ConfigError, match="seq-mean-token-mean"):
        aggregate_loss(PER_TOKEN, MASK, "sum")


# ---- KL estimators (Schulman 2020) ------------------------------------------------------------
def test_kl_estimators_hand_values():
    logp = torch.tensor([[-1.0, -0.5, -2.0]])
    ref = torch.tensor([[-1.5, -0.5, -1.0]])
    # k1 = logp - ref = [0.5, 0, -1]
    close(kl_penalty(logp, ref, "k1"), [[0.5, 0.0, -1.0]])
    # k3 = exp(ref - logp) - (ref - logp) - 1:
    #  d = -0.5: exp(-0.5) = 0.6065307, 0.6065307 + 0.5 - 1 = 0.1065307
    #  d = 0: 1 - 0 - 1 = 0;   d = 1: e - 1 - 1 = 0.7182818
    close(kl_penalty(logp, ref, "k3"), [[0.1065307, 0.0, 0.7182818]])
    with pytest.raises(ConfigError, match="k3"):
        kl_penalty(logp, ref, "k4")


def test_kl_term_in_policy_loss_with_beta():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0]])
    # zero advantage: only beta * KL; k3 = [0.1065307, 0.7182818], token mean 0.4124063, * 0.1
    loss, metrics = policy_loss(logp, logp.detach(), torch.zeros(1), torch.ones(1, 2), beta=0.1,
                                ref_logp=ref, kl_kind="k3")
    assert loss.item() == pytest.approx(0.04124063, abs=1e-6)
    assert metrics["kl"] == pytest.approx(0.4124063, abs=1e-6)
    # k1 = [0.5, -1]: mean -0.25, * 0.1
    loss1, _ = policy_loss(logp, logp.detach(), torch.zeros(1), torch.ones(1, 2), beta=0.1,
                           ref_logp=ref, kl_kind="k1")
    assert loss1.item() == pytest.approx(-0.025, abs=1e-6)
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(logp, logp.detach(), torch.zeros(1), torch.ones(1, 2), beta=0.1)


# ---- truncated importance weight (DART eq. 2) ---------------------------------------------------
def test_truncated_is_weight_exactly_one_when_equal():
    lp = torch.tensor([[-0.1234567, -3.3, -12.0, 0.0]])
    for cap in (1.0, 2.0, 5.0):
        w = truncated_is_weight(lp, lp.clone(), cap=cap)
        assert torch.equal(w, torch.ones_like(lp))


def test_truncated_is_weight_capped_and_detached():
    rollout = torch.tensor([[-1.0, -1.0, -1.0]])
    train_old = (rollout + torch.log(torch.tensor([[3.0, 0.5, 1.5]]))).requires_grad_(True)
    # min(3, 2) = 2; min(0.5, 2) = 0.5; min(1.5, 2) = 1.5
    w = truncated_is_weight(train_old, rollout, cap=2.0)
    close(w, [[2.0, 0.5, 1.5]])
    assert not w.requires_grad
    with pytest.raises(ConfigError, match="tis_cap"):
        truncated_is_weight(train_old, rollout, cap=0.0)


def test_is_weight_scales_policy_gradient_term_only():
    logp = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    w = torch.tensor([[0.5, 2.0]])
    loss, metrics = policy_loss(logp, logp.detach(), torch.tensor([1.0]), torch.ones(1, 2), is_weight=w)
    # ratio 1, A = 1: per token -w * 1 = [-0.5, -2.0], token mean -1.25; gradient -w / 2
    assert loss.item() == pytest.approx(-1.25)
    loss.backward()
    close(logp.grad, [[-0.25, -1.0]])
    assert metrics["is_weight_mean"] == pytest.approx(1.25)


# ---- plug-ins -----------------------------------------------------------------------------------
def _step(entropy=None, logprobs=(-0.1, -0.1)):
    return Step(prompt_ids=[1, 2], response_ids=[3] * len(logprobs), rollout_logprobs=list(logprobs),
                policy_version=0, entropy=entropy)


def _traj(tid, reward, steps, source="on_policy", group="g1", task="t1"):
    return Trajectory(traj_id=tid, run_id="r", task_id=task, seed=0, group_id=group, steps=steps,
                      reward=reward, success=reward > 0, source=source)


@pytest.mark.parametrize("registry", [REWARD_SHAPERS, GROUP_BUILDERS, TASK_SAMPLERS, STEP_FILTERS,
                                      EXTRA_LOSSES])
def test_unknown_plugin_names_list_known(registry):
    assert "default" in registry
    with pytest.raises(ConfigError, match="known: .*default"):
        registry.get("no-such-plugin")
    with pytest.raises(ConfigError, match="bad options"):
        registry.build("default", no_such_option=1)


def test_default_shaper_and_group_builder():
    g1 = Group("g1", "t1", [_traj("a", 1.0, []), _traj("b", 0.0, []), _traj("x", 1.0, [], source="replay")])
    g2 = Group("g2", "t2", [_traj("c", 0.0, [], group="g2"), _traj("d", 0.0, [], group="g2")])
    assert REWARD_SHAPERS.build("default")(g1) == [1.0, 0.0, 1.0]
    replay = [_traj("y", 1.0, [], source="replay")]
    built = GROUP_BUILDERS.build("default")([g1, g2], pool=replay)
    # fresh on-policy rollouts only: the replayed member and the offered pool stay out
    assert [[t.traj_id for t in g.trajectories] for g in built] == [["a", "b"], ["c", "d"]]
    assert len(g1.trajectories) == 3  # input not mutated
    built = GROUP_BUILDERS.build("default", drop_zero_variance=True)([g1, g2])
    assert [g.group_id for g in built] == ["g1"]  # g2's rewards are all 0


def test_uniform_task_sampler_seeded_uniform_and_resumable():
    tasks = ["a", "b", "c"]
    s1, s2 = TASK_SAMPLERS.build("default", seed=7), TASK_SAMPLERS.build("default", seed=7)
    assert isinstance(s1, TaskSampler)
    draws = s1(tasks, 3000)
    assert draws == s2(tasks, 3000)
    for t in tasks:  # 1000 expected each; binomial sd ~ 26
        assert 880 < draws.count(t) < 1120
    state = json.loads(json.dumps(s1.state_dict()))
    nxt = s1(tasks, 20)
    s3 = TASK_SAMPLERS.build("default", seed=123)
    s3.load_state_dict(state)
    assert s3(tasks, 20) == nxt
    with pytest.raises(ConfigError, match="empty"):
        s1([], 1)


def test_epoch_shuffle_sampler_covers_each_task_once_per_epoch():
    s = TASK_SAMPLERS.build("epoch_shuffle", seed=1)
    out = s(["a", "b", "c", "d"], 8)
    assert sorted(out[:4]) == sorted(out[4:]) == ["a", "b", "c", "d"]
    state = json.loads(json.dumps(s.state_dict()))
    nxt = s(["a", "b", "c", "d"], 3)
    s2 = TASK_SAMPLERS.build("epoch_shuffle")
    s2.load_state_dict(state)
    assert s2(["a", "b", "c", "d"], 3) == nxt


def test_keep_all_and_top_entropy_step_filters():
    # two task groups: g1 = {a, b}, g2 = {c}; ranking is per group (DART), never across groups
    trajs = [_traj("a", 1.0, [_step(0.1), _step(0.9), _step(0.5)]),
             _traj("b", 0.0, [_step(0.7), _step(0.2), _step(0.3)]),
             _traj("c", 0.0, [_step(0.05), _step(0.01)], task="t2", group="g2")]
    assert STEP_FILTERS.build("default")(trajs) == [[True] * 3, [True] * 3, [True] * 2]
    f = STEP_FILTERS.build("top_entropy", fraction=0.5)
    assert isinstance(f, StepFilter)
    # g1: 6 steps, k = floor(0.5 * 6) = 3 -> 0.9, 0.7, 0.5; g2: 2 steps, k = 1 -> 0.05. Ranked over
    # the whole batch instead, g2's steps (the lowest 2 of 8) would both be dropped.
    assert f(trajs) == [[False, True, True], [True, False, False], [True, False]]
    # fraction 0.8: g1 k = 4 (drops 0.1 and 0.2), g2 k = max(1, floor(1.6)) = 1
    assert STEP_FILTERS.build("top_entropy", fraction=0.8)(trajs) == \
        [[False, True, True], [True, False, True], [True, False]]
    with pytest.raises(ConfigError, match="fraction"):
        STEP_FILTERS.build("top_entropy", fraction=0.0)


def test_top_entropy_never_silently_keeps_steps_without_entropy():
    trajs = [_traj("a", 1.0, [_step(0.1), _step(0.9)]),
             _traj("x", 1.0, [_step(None), _step(None)], source="expert")]

    class Policy:  # a policy handle that "recomputes" entropies: 0.5 for every step it is asked about
        asked = 0

        def step_entropy(self, step):
            Policy.asked += 1
            return 0.5

    class Ctx:
        policy = Policy()

    with pytest.raises(ValueError, match="'x'.*step 0 has no recorded entropy"):
        STEP_FILTERS.build("top_entropy", fraction=0.5, missing="raise")(trajs)
    with pytest.raises(ValueError, match="no policy handle"):
        STEP_FILTERS.build("top_entropy", fraction=0.5)(trajs)
    # recomputed: 4 steps (0.1, 0.9, 0.5, 0.5), k = 2 -> 0.9 and the first 0.5 (ties keep the earlier)
    keep = STEP_FILTERS.build("top_entropy", fraction=0.5)(trajs, ctx=Ctx())
    assert keep == [[False, True], [True, False]] and Policy.asked == 2


def test_perplexity_band_filter():
    # mean-token probabilities exp(mean logp): 0.97 (too sure), 0.7 (kept), 0.3 (too unlikely)
    steps = [_step(logprobs=(math.log(0.97),) * 2),
             _step(logprobs=(math.log(0.49), 0.0)),        # mean log = log(0.7)
             _step(logprobs=(math.log(0.3),))]
    replay = _traj("r", 1.0, steps, source="replay")
    fresh = _traj("f", 1.0, [_step(logprobs=(math.log(0.3),))])
    f = STEP_FILTERS.build("perplexity_band")  # WebRL band (0.5, 0.95], replayed steps only
    assert f([replay, fresh]) == [[False, True, False], [True]]
    assert STEP_FILTERS.build("perplexity_band", low=0.2, sources=None)([replay, fresh]) == \
        [[False, True, True], [True]]


def test_extra_losses():
    logp = torch.tensor([[-1.0, -3.0], [-0.5, -0.5]], requires_grad=True)
    inputs = LossInputs(logp=logp, old_logp=logp.detach(), mask=torch.tensor([[1.0, 1.0], [1.0, 0.0]]),
                        advantages=torch.zeros(2), sources=["expert", "on_policy"])
    zero, metrics = EXTRA_LOSSES.build("default")(inputs)
    assert zero.item() == 0.0 and metrics == {}
    sft, metrics = EXTRA_LOSSES.build("sft", coef=0.5)(inputs)
    # per-token -coef * logp on the expert row only (the learner aggregates it like the policy loss)
    close(sft, [[0.5, 1.5], [0.0, 0.0]])
    assert metrics == {"sft_nll": pytest.approx(2.0), "sft_tokens": 2.0}  # NLL mean (1 + 3) / 2
    sft.sum().backward()
    close(logp.grad, [[-0.5, -0.5], [0.0, 0.0]])