"""MobileRL AdaGRPO plug-ins (issue 14, item 2): SPA (eq. 2), AdaPR (sec. 2.2.2 + appendix B.3
pruning) and FCF (sec. 2.2.3), each pinned with hand-worked numbers; state survives a JSON
checkpoint round trip and a real ``Trainer`` resume."""
from __future__ import annotations

import json
import math
import random
import uuid

import pytest

torch = pytest.importorskip("torch")

from guigym.core.errors import ConfigError  # noqa: E402
from guigym.train.algorithms.context import PluginContext, TaskOutcome  # noqa: E402
from guigym.train.algorithms.registry import GROUP_BUILDERS, REWARD_SHAPERS, TASK_SAMPLERS  # noqa: E402
from guigym.train.data.store import DataStore  # noqa: E402
from guigym.train.data.types import Group, Step, Trajectory  # noqa: E402


def traj(task: str, n_steps: int, success: bool, group: str = "g", traj_id: str | None = None) -> Trajectory:
    steps = [Step(prompt_ids=[1, 2, 3], response_ids=[4, 5], rollout_logprobs=[-0.25, -0.5], policy_version=0,
                  entropy=0.5) for _ in range(n_steps)]
    return Trajectory(traj_id=traj_id or uuid.uuid4().hex, run_id="", task_id=task, seed=0, group_id=group,
                      steps=steps, reward=1.0 if success else 0.0, success=success)


def ctx(iteration: int, store=None, run_id: str = "", history=None) -> PluginContext:
    return PluginContext(iteration=iteration, rng=random.Random(f"0/plugins/{iteration}"), store=store,
                         run_id=run_id, history=dict(history or {}))


# ---- SPA, MobileRL eq. 2 ---------------------------------------------------------------------------
def test_spa_matches_eq2_by_hand():
    g = Group("g", "t", [traj("t", 2, True), traj("t", 4, True), traj("t", 3, False), traj("t", 5, True)])
    # T_min = 2 (shortest success; the 3-step failure does not count)
    # alpha 0.5: 1, 1 - 0.5 * 2/4 = 0.75, failure 0, 1 - 0.5 * 3/5 = 0.7
    assert REWARD_SHAPERS.build("spa", alpha=0.5)(g) == pytest.approx([1.0, 0.75, 0.0, 0.7])
    # alpha 1 (MobileRL table 4): T_min / T_i
    assert REWARD_SHAPERS.build("spa")(g) == pytest.approx([1.0, 0.5, 0.0, 0.4])
    # later in a chain it rescales the previous shaper's rewards (and per-step lists elementwise)
    chained = REWARD_SHAPERS.build("spa")(g, rewards=[2.0, [0.5, 0.5, 1.0, 2.0], 0.0, 1.0])
    assert chained[0] == 2.0 and chained[1] == pytest.approx([0.25, 0.25, 0.5, 1.0])
    assert chained[2:] == pytest.approx([0.0, 0.4])
    # no success in the group: unchanged (no T_min)
    fails = Group("g", "t", [traj("t", 2, False), traj("t", 4, False)])
    assert REWARD_SHAPERS.build("spa")(fails) == [0.0, 0.0]
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ConfigError, match=r"spa.alpha must be in \(0, 1\]"):
            REWARD_SHAPERS.build("spa", alpha=bad)


# ---- FCF -------------------------------------------------------------------------------------------
def run_fcf(sampler, iterations, outcome, start=0, history=None):
    """Drive ``sampler`` like the loop: call at iteration i with the history of iterations < i,
    then record that iteration's outcome ``outcome(i, task) -> (attempts, successes)``."""
    history = history if history is not None else {}
    weights, draws = [], []
    for i in range(start, start + iterations):
        draws.append(sampler(["hard", "easy"], 200, ctx=ctx(i, history=history)))
        weights.append(sampler.weight("hard"))
        for task in ("hard", "easy"):
            a, s = outcome(i, task)
            if a:
                history.setdefault(task, TaskOutcome()).merge(TaskOutcome(a, s, float(s), a))
    return weights, draws, history


def test_fcf_schedule_two_failure_epochs_three_cooldown_then_removed():
    s = TASK_SAMPLERS.build("fcf", seed=3)
    weights, draws, _ = run_fcf(s, 7, lambda i, t: (4, 0) if t == "hard" else (4, 2))
    e = math.exp
    # epochs of one iteration: f = 1 after epoch 0, f = 2 after epoch 1 -> cooldown, weight exp(-f)
    # with f still growing (3, 4); after 3 cooldown epochs the task is gone
    assert weights == pytest.approx([1.0, 1.0, e(-2), e(-3), e(-4), 0.0, 0.0])
    assert all("hard" not in d for d in draws[5:])
    assert s.removed == ["hard"] and s.weight("easy") == 1.0
    # during cooldown the draws follow the weights: P(hard) = e^-2 / (1 + e^-2) ~ 0.119 at iteration 2
    share = draws[2].count("hard") / len(draws[2])
    assert 0.04 < share < 0.22
    assert 0.3 < draws[0].count("hard") / 200 < 0.7


def test_fcf_success_in_cooldown_ends_it_and_epochs_span_iterations():
    s = TASK_SAMPLERS.build("fcf")
    # fails epochs 0, 1 (cooldown from iteration 2), succeeds in iteration 2
    weights, _, _ = run_fcf(s, 5, lambda i, t: (2, 1 if (t == "easy" or i == 2) else 0))
    assert weights == pytest.approx([1.0, 1.0, math.exp(-2), 1.0, 1.0])
    assert s.removed == [] and s.fails["hard"] == 1  # iteration 3 failed again: a new streak of 1
    # epoch_iterations 2: an epoch is two iterations, so the cooldown starts at iteration 4
    s2 = TASK_SAMPLERS.build("fcf", epoch_iterations=2)
    weights, _, _ = run_fcf(s2, 12, lambda i, t: (2, 0 if t == "hard" else 1))
    assert weights[:4] == [1.0] * 4 and weights[4] == pytest.approx(math.exp(-2))
    assert weights[9] > 0 and weights[10] == 0.0  # cooldown epochs 2, 3, 4 = iterations 4..9


def test_fcf_state_survives_checkpoint_and_all_removed_is_a_clear_error():
    fail = lambda i, t: (2, 0 if t == "hard" else 1)  # noqa: E731
    a = TASK_SAMPLERS.build("fcf", seed=5)
    _, _, history = run_fcf(a, 3, fail)
    state = json.loads(json.dumps(a.state_dict()))
    b = TASK_SAMPLERS.build("fcf", seed=99)  # a different seed: the RNG must come from the state
    b.load_state_dict(state)
    hist_b = {k: TaskOutcome.from_dict(v.to_dict()) for k, v in history.items()}
    wa, da, _ = run_fcf(a, 4, fail, start=3, history=history)
    wb, db, _ = run_fcf(b, 4, fail, start=3, history=hist_b)
    assert wa == wb and da == db and wa[-1] == 0.0  # same failure history, same removal, same draws
    dead = TASK_SAMPLERS.build("fcf")
    with pytest.raises(ConfigError, match="fcf: every task was removed"):
        run_fcf(dead, 7, lambda i, t: (2, 0))


# ---- AdaPR -----------------------------------------------------------------------------------------
@pytest.fixture()
def store(tmp_path):
    s = DataStore.for_run_dir(str(tmp_path))
    yield s
    s.close()


def stored(store, run_id, trajs):
    for t in trajs:
        t.run_id = run_id
    store.add_trajectories(run_id, trajs)
    return trajs


def test_adapr_buffer_mixture_and_pruning_by_hand(store):
    run = store.start_run("adapr")
    b = GROUP_BUILDERS.build("adapr")  # MobileRL table 4: kappa 0.25, gamma 1, buffer 256, SPA alpha 1
    a_win, b_short, b_long = traj("A", 1, True), traj("B", 2, True), traj("B", 4, True)
    it0 = [Group("gA", "A", stored(store, run, [a_win] + [traj("A", 2, False) for _ in range(3)])),
           Group("gB", "B", stored(store, run, [b_short, b_long, traj("B", 3, False), traj("B", 3, False)]))]
    out0 = b(it0, ctx=ctx(0, store, run))
    # GRPO (unbiased std) over SPA rewards: A [1, 0, 0, 0] -> the success 0.75 / 0.5 = 1.5;
    # B [1, 0.5, 0, 0] (T_min 2: 2/4) -> mean 0.375, std sqrt(0.6875 / 3) -> 1.3056 and 0.2611.
    # kappa 0.25 of M = 8 -> the top 2 go into the buffer
    assert [(e["traj_id"], e["iteration"]) for e in b.buffer] == [(a_win.traj_id, 0), (b_short.traj_id, 0)]
    assert [e["advantage"] for e in b.buffer] == pytest.approx([1.5, 0.625 / math.sqrt(0.6875 / 3)], abs=1e-3)
    # 3 positives, 5 negatives <= 2 * 3: nothing pruned, nothing replayed (the buffer was empty)
    assert [len(g.trajectories) for g in out0] == [4, 4]

    c_win = traj("C", 2, True)
    it1 = [Group("gA1", "A", stored(store, run, [traj("A", 2, False) for _ in range(4)])),
           Group("gC1", "C", stored(store, run, [c_win] + [traj("C", 2, False) for _ in range(3)]))]
    out1 = b(it1, ctx=ctx(1, store, run))
    ga, gc = out1
    replay = [t for t in ga.trajectories if t.source == "replay"]
    # A's buffered success joins A's all-fail group (B is not sampled: its entry waits)
    assert len(replay) == 1 and replay[0].info["replay_origin"] == a_win.traj_id
    assert replay[0].traj_id != a_win.traj_id and replay[0].steps[0].rollout_logprobs == [-0.25, -0.5]
    # pruning: A [0,0,0,0,1] -> fails -0.4472; C [1,0,0,0] -> fails -0.5. 2 positives, 7 negatives > 4:
    # the 3 lowest (C's fails) are discarded
    assert [t.source for t in ga.trajectories].count("on_policy") == 4
    assert [t.traj_id for t in gc.trajectories] == [c_win.traj_id]
    # the replayed A entry is used up (max_replays 1); B waits; C's success joined (kappa: ceil(2) = 2,
    # one positive)
    assert {e["task_id"] for e in b.buffer} == {"B", "C"}


def test_adapr_gamma_caps_the_replayed_share_by_advantage(store):
    run = store.start_run("cap")
    b = GROUP_BUILDERS.build("adapr", gamma=0.25, kappa=1.0, neg_per_pos=None)
    w1, w2 = traj("A", 1, True), traj("B", 1, True)
    it0 = [Group("a", "A", stored(store, run, [w1, traj("A", 1, False)])),                     # adv 0.7071
           Group("b", "B", stored(store, run, [w2] + [traj("B", 1, False) for _ in range(3)]))]  # adv 1.5
    b(it0, ctx=ctx(0, store, run))
    it1 = [Group("a1", "A", stored(store, run, [traj("A", 1, False), traj("A", 1, False)])),
           Group("b1", "B", stored(store, run, [traj("B", 1, False), traj("B", 1, False)]))]
    out = b(it1, ctx=ctx(1, store, run))
    # M = 4 on-policy trajectories, gamma 0.25 -> at most 1 replayed: B's (higher advantage)
    assert [[t.source for t in g.trajectories] for g in out] == \
        [["on_policy", "on_policy"], ["on_policy", "on_policy", "replay"]]


def test_adapr_state_round_trip(store):
    run = store.start_run("state")
    b = GROUP_BUILDERS.build("adapr")
    b([Group("a", "A", stored(store, run, [traj("A", 1, True), traj("A", 1, False)]))], ctx=ctx(0, store, run))
    c = GROUP_BUILDERS.build("adapr")
    c.load_state_dict(json.loads(json.dumps(b.state_dict())))
    nxt = [Group("a1", "A", stored(store, run, [traj("A", 1, False), traj("A", 1, False)]))]
    assert [t.info.get("replay_origin") for g in c(nxt, ctx=ctx(1, store, run)) for t in g.trajectories] == \
        [None, None, b.buffer[0]["traj_id"]]


# ---- through the real loop: SPA keeps an all-success group; AdaPR state resumes -----------------------
def test_adagrpo_in_the_loop_stores_replay_and_resumes(tmp_path):
    pytest.importorskip("transformers")
    from train_helpers import Tokens, capture_updates, recipe, store_iteration, trainer

    from guigym.train.policy.hf_policy import HFPolicy
    from guigym.train.policy.tiny import build

    torch.set_num_threads(1)
    model = build(tmp_path / "tiny", seed=0)
    tokens = Tokens(HFPolicy(model))
    cfg = recipe(tmp_path, model, reward_shaper="spa", group_builder=["default", "adapr"], task_sampler="fcf")
    t = trainer(cfg)
    try:
        # iteration 0: t1 all-success of lengths 1 and 3 (plain GRPO: zero variance, dropped; SPA: 1 vs 1/3)
        store_iteration(t, tokens, 0, [("t1", "g0", 1, 1.0), ("t1", "g0", 3, 1.0)])
        seen = capture_updates(t)
        m0 = t.iteration(0)
        buffered = [e["traj_id"] for e in t.group_builder.plugins[1].buffer]
        # iteration 1: t1 all-fail -> the buffered short success is replayed into its group
        store_iteration(t, tokens, 1, [("t1", "g1", 1, 0.0), ("t1", "g1", 1, 0.0)])
        sampler = t.task_sampler.state_dict()
    finally:
        t.close()
    assert m0["rollout/groups_trained"] == 1.0 and len(seen[0]) == 4  # 1 + 3 step samples
    assert sorted(round(s.reward, 4) for s in seen[0]) == [0.3333] * 3 + [1.0]
    assert len(buffered) == 1  # kappa 0.25 of 2 -> 1: the short one (adv +0.707)
    t2 = trainer(cfg, resume=True)
    try:
        assert [e["traj_id"] for e in t2.group_builder.plugins[1].buffer] == buffered
        assert t2.task_sampler.state_dict() == sampler  # FCF history and RNG as checkpointed
        seen2 = capture_updates(t2)
        m1 = t2.iteration(1)
        seen_history = dict(t2.task_sampler.plugins[0].delta.seen)
        replayed = [tr for tr in t2.store.get_trajectories(t2.run_id, source="replay")]
    finally:
        t2.close()
    assert m1["rollout/injected_stored"] == 1.0 and {s.source for s in seen2[0]} == {"on_policy", "replay"}
    assert len(replayed) == 1 and replayed[0].info["replay_origin"] == buffered[0]
    assert replayed[0].info["injected_at_iteration"] == 1
    # sampling iteration 1, the resumed FCF sampler folded in iteration 0 (t1: 2 attempts, 2 successes)
    assert seen_history == {"t1": [2, 2, 2.0]}


@pytest.mark.parametrize("name", ["adagrpo_miniwob_tiny", "adagrpo_osworld_uitars7b", "adagrpo_androidworld_tiny"])
def test_adagrpo_recipes_build_with_the_papers_numbers(name, tmp_path):
    from pathlib import Path

    from guigym.train.config import load_recipe
    from guigym.train.loop import Trainer

    root = Path(__file__).resolve().parents[1]
    t = Trainer(load_recipe(root / "recipes" / f"{name}.yaml", [f"run.dir={tmp_path}"]), log=lambda m: None)
    t.build_plugins()
    spa, = t.reward_shaper.plugins
    _, adapr = t.group_builder.plugins
    fcf, = t.task_sampler.plugins
    # MobileRL table 4 and sec. 2.2.3
    assert spa.alpha == 1.0 and (adapr.buffer_size, adapr.kappa, adapr.gamma) == (256, 0.25, 1.0)
    assert adapr.neg_per_pos == 2.0 and (fcf.fail_epochs, fcf.cooldown_epochs) == (2, 3)


def test_help_config_lists_the_plugins_with_their_papers():
    from guigym.train.algorithms.plugin_help import describe_plugins

    text = describe_plugins()
    for needle in ("algorithm.reward_shaper: spa(alpha=1.0)", "MobileRL eq. 2", "algorithm.task_sampler: fcf(",
                   "MobileRL sec. 2.2.3", "algorithm.group_builder: adapr(",
                   "algorithm.rollout_planners: dart_dynamic_n(", "DART sec. 4.1",
                   "algorithm.trajectory_sources: dart_experience_pool(", "DART sec. 4.2"):
        assert needle in text
