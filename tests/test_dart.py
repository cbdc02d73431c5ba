"""DART data-curation plug-ins (issue 14, item 1; DART sec. 4): dynamic rollout N at the 0.6
threshold, dynamic trajectory length from the longest success, the experience pool injected on
total failure (stored before use, own log-probs), per-group top-80% entropy selection with
recomputed entropies, and the DART recipe (truncated IS with C = 1)."""
from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from guigym.core.errors import ConfigError  # noqa: E402
from guigym.train.algorithms.context import PluginContext, RolloutPlan, TaskOutcome  # noqa: E402
from guigym.train.algorithms.registry import ROLLOUT_PLANNERS  # noqa: E402
from guigym.train.data.store import DataStore  # noqa: E402
from guigym.train.data.types import Step, Trajectory  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def traj(task: str, n_steps: int, success: bool, iteration: int, run_id: str = "") -> Trajectory:
    steps = [Step(prompt_ids=[1, 2], response_ids=[3], rollout_logprobs=[-0.5], policy_version=iteration)
             for _ in range(n_steps)]
    return Trajectory(traj_id=uuid.uuid4().hex, run_id=run_id, task_id=task, seed=0, group_id=f"g{iteration}",
                      steps=steps, reward=float(success), success=success, info={"iteration": iteration})


def ctx(iteration: int, history=None, store=None, run_id: str = "") -> PluginContext:
    return PluginContext(iteration=iteration, rng=random.Random(iteration), store=store, run_id=run_id,
                         history=dict(history or {}))


# ---- dynamic rollout frequency ---------------------------------------------------------------------
def test_dynamic_n_drops_from_n_max_past_the_0_6_threshold():
    p = ROLLOUT_PLANNERS.build("dart_dynamic_n", n_max=8, n_min=2, window=2)
    history: dict = {}
    tasks = ["easy", "mid", "hard"]

    def plan(i):
        return {q.task_id: q.n for q in p([RolloutPlan(t, 8, 30) for t in tasks], ctx=ctx(i, history))}

    def finish(results):  # one finished iteration: task -> (attempts, successes)
        for t, (a, s) in results.items():
            history.setdefault(t, TaskOutcome()).merge(TaskOutcome(a, s, float(s), a))

    assert plan(0) == {"easy": 8, "mid": 8, "hard": 8}  # never attempted: N_max
    finish({"easy": (8, 6), "mid": (5, 3), "hard": (8, 0)})
    # easy 0.75 -> round(8 - 6 * 0.15 / 0.4) = round(5.75) = 6; mid exactly 0.6 (not above) -> 8; hard 8
    assert plan(1) == {"easy": 6, "mid": 8, "hard": 8}
    finish({"easy": (6, 6), "mid": (8, 5), "hard": (8, 0)})
    # window of 2 groups: easy 12 / 14 = 0.857 -> round(8 - 6 * 0.643) = round(4.14) = 4;
    # mid 8 / 13 = 0.615 -> round(7.77) = 8
    assert plan(2) == {"easy": 4, "mid": 8, "hard": 8}
    state = json.loads(json.dumps(p.state_dict()))
    finish({"easy": (4, 4), "mid": (8, 8), "hard": (8, 0)})
    # easy 10 / 10 = 1.0 -> N_min; mid 13 / 16 = 0.8125 -> round(8 - 6 * 0.53) = round(4.81) = 5
    expect = {"easy": 2, "mid": 5, "hard": 8}
    assert plan(3) == expect
    # resume from the state saved before iteration 2 finished: the same plan
    q = ROLLOUT_PLANNERS.build("dart_dynamic_n", n_max=8, n_min=2, window=2)
    q.load_state_dict(state)
    assert {r.task_id: r.n for r in q([RolloutPlan(t, 8, 30) for t in tasks], ctx=ctx(3, history))} == expect
    # n_max None: the plan's own N (rollout.num_generations); step budgets pass through
    r = ROLLOUT_PLANNERS.build("dart_dynamic_n")
    assert [(x.n, x.max_steps) for x in r([RolloutPlan("a", 4, 7)], ctx=ctx(0))] == [(4, 7)]
    with pytest.raises(ConfigError, match="n_min"):
        ROLLOUT_PLANNERS.build("dart_dynamic_n", n_max=2, n_min=4)


# ---- dynamic trajectory length ---------------------------------------------------------------------
def test_dynamic_length_is_longest_success_plus_margin_from_finished_iterations(tmp_path):
    store = DataStore.for_run_dir(str(tmp_path))
    try:
        run = store.start_run("len")
        p = ROLLOUT_PLANNERS.build("dart_dynamic_length", margin=1)

        def budgets(i):
            plans = [RolloutPlan("A", 4, 10), RolloutPlan("B", 4, 10), RolloutPlan("C", 4, None)]
            return [q.max_steps for q in p(plans, ctx=ctx(i, store=store, run_id=run))]

        assert budgets(0) == [10, 10, None]  # no success yet: the default budget
        store.add_trajectories(run, [traj("A", 3, True, 0, run), traj("A", 10, False, 0, run),
                                     traj("B", 10, False, 0, run), traj("C", 12, True, 0, run)])
        # A: 3 + 1; B never succeeded; C: 12 + 1 (its default is unbounded)
        assert budgets(1) == [4, 10, 13]
        store.add_trajectories(run, [traj("A", 5, True, 1, run)])
        # a crashed iteration 2 stored a 9-step success before dying: not counted while iteration 2 runs
        store.add_trajectories(run, [traj("A", 9, True, 2, run)])
        assert budgets(2) == [6, 10, 13]
        state = json.loads(json.dumps(p.state_dict()))
        assert budgets(3) == [10, 10, 13]  # 9 + 1 = 10, never above the env budget
        q = ROLLOUT_PLANNERS.build("dart_dynamic_length", margin=1)
        q.load_state_dict(state)  # resumed at iteration 3: the same budgets
        assert [x.max_steps for x in q([RolloutPlan("A", 4, 10)], ctx=ctx(3, store=store, run_id=run))] == [10]
    finally:
        store.close()


# ---- experience pool rules ---------------------------------------------------------------------------
def test_pool_injection_only_on_total_failure_once_per_trajectory(tmp_path):
    from guigym.train.algorithms.dart import ExperiencePool, InjectFromPool
    from guigym.train.data.types import Group

    store = DataStore.for_run_dir(str(tmp_path))
    try:
        expert = store.start_run("expert")
        wins = [traj("A", 2, True, 0, expert), traj("A", 3, True, 0, expert), traj("B", 2, True, 0, expert)]
        store.add_trajectories(expert, wins + [traj("C", 2, False, 0, expert)])
        pool = ExperiencePool(run_id=expert)(fresh_groups=[], ctx=ctx(0, store=store))
        assert sorted(t.info["pool_origin"] for t in pool) == sorted(t.traj_id for t in wins)
        assert {t.source for t in pool} == {"pool"} and not ({t.traj_id for t in pool} & {t.traj_id for t in wins})
        with pytest.raises(ValueError, match="run 'nope' has no successful trajectories"):
            ExperiencePool(run_id="nope")(fresh_groups=[], ctx=ctx(0, store=store))
        with pytest.raises(ConfigError, match="run_id"):
            ExperiencePool()
    finally:
        store.close()
    groups = [Group("a1", "A", [traj("A", 2, False, 1)] * 2), Group("a2", "A", [traj("A", 2, False, 1)] * 2),
              Group("a3", "A", [traj("A", 2, False, 1)] * 2),
              Group("b", "B", [traj("B", 2, True, 1), traj("B", 2, False, 1)]),
              Group("c", "C", [traj("C", 2, False, 1)] * 2)]
    out = InjectFromPool()(groups, pool=pool, ctx=ctx(1))
    added = [[t for t in g.trajectories if t.source == "pool"] for g in out]
    # A's three all-fail groups: A has two pool successes, each used once; B had a success; C has no pool
    assert [len(a) for a in added] == [1, 1, 0, 0, 0]
    assert added[0][0].traj_id != added[1][0].traj_id and {added[0][0].task_id, added[1][0].task_id} == {"A"}


# ---- experience pool + high-entropy steps through the real loop ----------------------------------------
def test_pool_joins_only_all_fail_groups_is_stored_first_and_entropy_is_recomputed(tmp_path):
    pytest.importorskip("transformers")
    from train_helpers import Tokens, capture_updates, recipe, store_iteration, trainer

    from guigym.train.algorithms.policy_handle import PolicyHandle
    from guigym.train.policy.hf_policy import HFPolicy
    from guigym.train.policy.tiny import build

    torch.set_num_threads(1)
    model = build(tmp_path / "tiny", seed=0)
    tokens = Tokens(HFPolicy(model))
    # the pool: an earlier (expert) run's successes in the same DataStore; steps without entropy
    pre = DataStore.for_run_dir(str(tmp_path / "run"))
    try:
        expert_run = pre.start_run("expert")
        win = tokens.traj("t1", "e", 2, 1.0, iteration=0, source="expert", run_id=expert_run,
                          entropies=[None, None])
        lost = tokens.traj("t1", "e", 2, 0.0, iteration=0, source="expert", run_id=expert_run)
        pre.add_trajectories(expert_run, [win, lost])
    finally:
        pre.close()
    cfg = recipe(tmp_path, model, trajectory_sources="dart_experience_pool",
                 group_builder=["default", "dart_pool_injection"], step_filter="top_entropy",
                 plugin_options={"dart_experience_pool": {"run_id": expert_run}, "top_entropy": {"fraction": 0.8}},
                 rollout_planners=["dart_dynamic_n", "dart_dynamic_length"], tis_cap=1.0)
    t = trainer(cfg)
    try:
        # iteration 0: t1's two 1-step rollouts both fail; their recorded entropy (50 nats) is above any
        # the tiny policy can have (log |V| < 7), so the pool steps' recomputed entropies decide
        t.store.add_trajectories(t.run_id, [tokens.traj("t1", "g0", 1, 0.0, 0, run_id=t.run_id, entropies=[50.0])
                                            for _ in range(2)])
        seen = capture_updates(t)
        handle = PolicyHandle(t.learner, 0, t.learner.image_loader)
        recomputed = [handle.step_entropy(s) for s in win.steps]
        m0 = t.iteration(0)
        pooled = t.store.get_trajectories(t.run_id, source="pool")
        # iteration 1: one success in the group: no pool member
        store_iteration(t, tokens, 1, [("t1", "g1", 1, 1.0), ("t1", "g1", 1, 0.0)])
        m1 = t.iteration(1)
        planners = t.rollout_planner.state_dict()
    finally:
        t.close()
    # the planners saw iteration 0 (t1: 2 failures -> rate 0) when planning iteration 1; resumed
    # from checkpoint 1 they hold exactly that state
    assert planners[0]["state"]["recent"] == {"t1": [[2, 0]]} and planners[1]["state"]["longest"] == {}
    t2 = trainer(cfg, resume=True)
    try:
        assert t2.start_iteration == 2 and t2.rollout_planner.state_dict() == planners
    finally:
        t2.close()
    assert len(pooled) == 1 and pooled[0].info["pool_origin"] == win.traj_id
    assert pooled[0].info["injected_at_iteration"] == 0 and pooled[0].run_id != expert_run
    assert [s.rollout_logprobs for s in pooled[0].steps] == [s.rollout_logprobs for s in win.steps]
    assert m0["rollout/injected_stored"] == 1.0 and m0["rollout/groups_trained"] == 1.0
    assert {s.source for s in seen[1]} == {"on_policy"} and m1["rollout/groups_trained"] == 1.0
    # top 80% of the group's 4 steps = floor(3.2) = 3 (DART eq. 2: entropy above 20% of the group's
    # steps), ranked with the pool steps' entropies recomputed under the current policy; a step
    # without entropy kept silently would make it 4 samples
    pool_steps = sorted(s.step_index for s in seen[0] if s.source == "pool")
    assert max(recomputed) < 50 and recomputed[0] != recomputed[1]
    assert len(seen[0]) == 3 and sum(s.source == "on_policy" for s in seen[0]) == 2
    assert pool_steps == [recomputed.index(max(recomputed))]  # the pool step with the higher recomputed entropy


# ---- recipes --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["dart_miniwob_tiny", "dart_osworld_uitars7b"])
def test_dart_recipes_build_their_plugins_with_c_equal_1(name, tmp_path):
    """``--check`` validates the config only; this also builds every plug-in chain of the recipe."""
    from guigym.train.config import load_recipe
    from guigym.train.loop import Trainer

    cfg = load_recipe(ROOT / "recipes" / f"{name}.yaml", [f"run.dir={tmp_path}"])
    assert cfg.algorithm.tis_cap == 1.0  # DART eq. 2, C = 1
    t = Trainer(cfg, log=lambda m: None)
    t.build_plugins()
    planners = dict(t.rollout_planner.members)
    assert list(planners) == ["dart_dynamic_n", "dart_dynamic_length"]
    assert planners["dart_dynamic_n"].threshold == 0.6 and planners["dart_dynamic_n"].n_max == 8
    assert [n for n, _ in t.step_filter.members] == ["top_entropy"] and t.step_filter.plugins[0].fraction == 0.8
