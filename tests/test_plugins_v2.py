"""Plug-in API v2 (issue 11, item 4): every hook changes what the loop does when a toy plug-in is
registered. Hooks that act on collected data run through the real loop (``Trainer.iteration``)
on stored trajectories of a tiny Qwen2.5-VL; the rollout hooks (per-task N and length,
conditioning, task sources) run the real loop on MiniWoB in Chromium."""
from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from train_helpers import (PROMPTS, Tokens, recipe, store_iteration,  # noqa: E402
                           tiny, tokens, trainer)  # noqa: E402,F401 - tiny/tokens are fixtures
from train_helpers import capture_updates as capture  # noqa: E402

from guigym.core.errors import ConfigError  # noqa: E402
from guigym.train.algorithms import compose  # noqa: E402
from guigym.train.algorithms.context import Guidance, NewTask, RolloutPlan  # noqa: E402
from guigym.train.algorithms.estimators import ADVANTAGE_ESTIMATORS  # noqa: E402
from guigym.train.algorithms.policy_handle import PolicyHandle  # noqa: E402
from guigym.train.algorithms.policy_losses import POLICY_LOSSES, PolicyLossInputs  # noqa: E402
from guigym.train.algorithms.registry import (CONDITIONERS, GROUP_BUILDERS, REWARD_SHAPERS,  # noqa: E402
                                              ROLLOUT_PLANNERS, TASK_SAMPLERS, TASK_SOURCES,
                                              TRAJECTORY_SOURCES)
from guigym.train.data.types import Group, Trajectory  # noqa: E402
from guigym.train.samples import build_stepwise  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread):
    """One intra-op torch thread for this module (tests/conftest.py says why)."""


def register(registry, name):
    def deco(factory):
        if name not in registry:
            registry.register(name)(factory)
        return factory
    return deco


# ---- context + composition --------------------------------------------------------------------
PROBE: dict = {}


@register(REWARD_SHAPERS, "test_ctx_probe")
class CtxProbe:
    """Records what the context holds; reward = verifier score + 1."""

    def __call__(self, group, rewards=None, *, ctx=None):
        PROBE.update(iteration=ctx.iteration, store=ctx.store, run_id=ctx.run_id, policy=ctx.policy,
                     outcomes={k: (v.attempts, v.successes) for k, v in ctx.outcomes.items()},
                     rng=ctx.rng.random(), prev=rewards)
        return [t.reward + 1.0 for t in group.trajectories]


@register(REWARD_SHAPERS, "test_scale")
class Scale:
    def __init__(self, factor: float = 1.0) -> None:
        self.factor = factor

    def __call__(self, group, rewards=None, *, ctx=None):
        return [self.factor * r for r in rewards]


def test_plugins_get_the_context_and_shapers_compose_in_order(tiny, tokens, tmp_path):
    chain = ["test_ctx_probe", {"name": "test_scale", "options": {"factor": 2.0}}]
    t = trainer(recipe(tmp_path, tiny, reward_shaper=chain))
    try:
        store_iteration(t, tokens, 0, [("t1", "g", 1, 1.0), ("t1", "g", 1, 0.0)])
        seen = capture(t)
        t.iteration(0)
        assert PROBE["iteration"] == 0 and PROBE["store"] is t.store and PROBE["run_id"] == t.run_id
        assert isinstance(PROBE["policy"], PolicyHandle) and PROBE["prev"] is None  # first in the chain
        assert PROBE["outcomes"] == {"t1": (2, 1)}  # this iteration's per-task outcomes
        assert PROBE["rng"] == random.Random("0/plugins/0").random()  # seeded by (run seed, iteration)
    finally:
        t.close()
    # (verifier + 1) * 2, in chain order (the other order would give 2 * verifier + 1 = 3 and 1)
    assert sorted(s.reward for s in seen[0]) == [2.0, 4.0]


def test_chain_specs_are_validated():
    with pytest.raises(ConfigError, match=r"algorithm.reward_shaper\[1\].*name or"):
        compose.parse_specs(["default", {"nme": "x"}], "algorithm.reward_shaper")
    with pytest.raises(ConfigError, match="algorithm.step_filter: unknown step filter 'nope'"):
        from guigym.train.algorithms.registry import STEP_FILTERS

        compose.build_all(STEP_FILTERS, ["default", "nope"], "algorithm.step_filter")
    chain = compose.Chain("x", [("bad", type("P", (), {"state_dict": lambda self: {"f": object()}})())])
    with pytest.raises(ValueError, match="x 'bad': state_dict"):
        chain.state_dict()


# ---- advantage estimators, per-step rewards --------------------------------------------------------
@register(ADVANTAGE_ESTIMATORS, "test_const")
class ConstAdvantage:
    def __init__(self, value: float = 0.7) -> None:
        self.value = value

    def __call__(self, groups, rewards, *, ctx=None):
        return {t.traj_id: self.value for g in groups for t in g.trajectories}


@register(REWARD_SHAPERS, "test_progress")
class Progress:
    """Per-step progress rewards: 0.1 per step of a 3-step trajectory, the verifier score last."""

    def __call__(self, group, rewards=None, *, ctx=None):
        return [[0.1] * (t.length - 1) + [t.reward] for t in group.trajectories]


def test_advantage_estimator_is_pluggable(tiny, tokens, tmp_path):
    t = trainer(recipe(tmp_path, tiny, advantage="test_const"))
    try:
        store_iteration(t, tokens, 0, [("t1", "g", 1, 1.0), ("t1", "g", 1, 0.0)])
        seen = capture(t)
        t.iteration(0)
    finally:
        t.close()
    assert {max(s.advantages) for s in seen[0]} == {0.7}  # GRPO would give +-0.707 (std of {0, 1})
    with pytest.raises(ConfigError, match="algorithm.advantage: unknown advantage estimator 'gae'"):
        trainer(recipe(tmp_path / "b", tiny, advantage="gae"))


def test_per_step_rewards_give_stepwise_returns_to_go(tiny, tokens, tmp_path):
    t = trainer(recipe(tmp_path, tiny, reward_shaper="test_progress", advantage="stepwise_grpo",
                       scale_rewards="none"))
    try:
        store_iteration(t, tokens, 0, [("t1", "g", 3, 1.0), ("t1", "g", 2, 0.0)])
        seen = capture(t)
        t.iteration(0)
    finally:
        t.close()
    # per-step rewards A: [0.1, 0.1, 1.0] -> returns-to-go [1.2, 1.1, 1.0]; B: [0.1, 0.0] -> [0.1, 0.0]
    # mean over the 5 step samples = 3.4 / 5 = 0.68; Dr. GRPO (no std): G - 0.68
    got = sorted((s.traj_id, s.step_index, max(s.advantages, key=abs)) for s in seen[0])
    lengths = {}
    for tid, k, _ in got:
        lengths[tid] = lengths.get(tid, 0) + 1
    a = next(tid for tid, n in lengths.items() if n == 3)
    b = next(tid for tid, n in lengths.items() if n == 2)
    adv = {(tid, k): v for tid, k, v in got}
    assert [adv[(a, k)] for k in range(3)] == pytest.approx([0.52, 0.42, 0.32])
    assert [adv[(b, k)] for k in range(2)] == pytest.approx([-0.58, -0.68])


# ---- policy-loss registry -------------------------------------------------------------------------
@register(POLICY_LOSSES, "test_probe_loss")
class ProbeLoss:
    """A REINFORCE-style token sum, counting its calls (a stand-in for any non-PPO objective)."""

    calls = 0

    def __init__(self, algo) -> None:
        self.algo = algo

    def __call__(self, x: PolicyLossInputs):
        ProbeLoss.calls += 1
        loss = -(x.logp * x.advantages * x.mask).sum() / x.norm
        return loss, {"probe": 1.0}


def test_policy_loss_plugin_is_called_instead_of_ppo(tiny, tokens, tmp_path, monkeypatch):
    import guigym.train.algorithms.policy_losses as PL

    def no_ppo(*a, **k):
        raise AssertionError("PPO's policy_loss was called")

    monkeypatch.setattr(PL, "policy_loss", no_ppo)
    ProbeLoss.calls = 0
    t = trainer(recipe(tmp_path, tiny, policy_loss="test_probe_loss", per_device_train_batch_size=1))
    try:
        store_iteration(t, tokens, 0, [("t1", "g", 1, 1.0), ("t1", "g", 1, 0.0)])
        m = t.iteration(0)
    finally:
        t.close()
    assert ProbeLoss.calls == 2 and m["probe"] == 1.0  # one call per micro-batch


def test_webrl_kl_regression_matches_hand_value_and_moves_toward_advantage(tiny, tokens):
    """WebRL eq. 6 at the start (pi_theta = pi_ref, so log ratio 0): L = mean_seq (0 - A)^2; one
    step raises the positive-advantage action's log-ratio to the reference and lowers L."""
    from guigym.train.config import AlgorithmConfig, OptimConfig
    from guigym.train.learner import Learner
    from guigym.train.policy.hf_policy import HFPolicy

    samples = []
    for k, a in enumerate((1.5, -0.5)):
        traj = Trajectory(traj_id=f"w{k}", run_id="", task_id="t", seed=0, group_id="g",
                          steps=[tokens.step(PROMPTS[k])], reward=1.0)
        samples += build_stepwise([traj], {traj.traj_id: a})
    algo = AlgorithmConfig(beta=0.5, policy_loss="webrl_kl_regression")
    # adam_epsilon 1: a step ~ linear in the gradient, so it descends L
    learner = Learner(HFPolicy(tiny), algo, OptimConfig(learning_rate=1e-2, adam_epsilon=1.0))
    learner.policy_loss_fn = POLICY_LOSSES.build("webrl_kl_regression", algo=algo)
    m = learner.update(samples)
    assert m["loss"] == pytest.approx((1.5 ** 2 + 0.5 ** 2) / 2, abs=1e-5)
    batch = learner.collate(samples)
    with torch.no_grad():
        ratio = ((learner.logprobs(batch) - learner._ref_logprobs(batch)) * batch.mask).sum(1)
    s0, s1 = float(ratio[0]), float(ratio[1])
    assert s0 > 0
    # L at the new weights, by hand from the measured log-ratios, and as the learner reports it
    after = ((0.5 * s0 - 1.5) ** 2 + (0.5 * s1 + 0.5) ** 2) / 2
    assert after < m["loss"] and learner.update(samples)["loss"] == pytest.approx(after, abs=1e-4)
    with pytest.raises(ConfigError, match="beta > 0"):
        POLICY_LOSSES.build("webrl_kl_regression", algo=AlgorithmConfig())


# ---- trajectory sources -> group builder pool, stored before use ---------------------------------------
EXPERT: list = []


@register(TRAJECTORY_SOURCES, "test_expert_cache")
class ExpertCache:
    def __call__(self, groups, *, ctx=None):
        return list(EXPERT)


@register(GROUP_BUILDERS, "test_add_pool")
class AddPool:
    """Adds pool members of a group's task to the group (DART experience pool, BEPA cache)."""

    def __call__(self, fresh, pool=(), *, ctx=None):
        return [Group(g.group_id, g.task_id, list(g.trajectories) + [p for p in pool if p.task_id == g.task_id])
                for g in fresh]


def test_trajectory_source_feeds_the_pool_and_injected_members_are_stored(tiny, tokens, tmp_path):
    expert = tokens.traj("t1", "cache", 1, 1.0, iteration=0, source="cache")
    EXPERT[:] = [expert, tokens.traj("t2", "cache", 1, 1.0, iteration=0, source="cache")]
    t = trainer(recipe(tmp_path, tiny, trajectory_sources="test_expert_cache", group_builder="test_add_pool"))
    try:
        store_iteration(t, tokens, 0, [("t1", "g", 1, 0.0), ("t1", "g", 1, 0.0)])
        seen = capture(t)
        m = t.iteration(0)
        stored = t.store.get_trajectory(expert.traj_id)
        other = t.store.get_trajectory(EXPERT[1].traj_id)
    finally:
        t.close()
    # the all-fail group trains because the cached success joined it; the t2 one was not used
    assert m["samples"] == 3.0 and m["rollout/injected_stored"] == 1.0
    assert stored.source == "cache" and stored.info["injected_at_iteration"] == 0 and other is None
    assert {s.source for s in seen[0]} == {"on_policy", "cache"}


def test_injected_on_policy_trajectory_is_refused(tiny, tokens, tmp_path):
    EXPERT[:] = [tokens.traj("t1", "cache", 1, 1.0, iteration=0, source="on_policy")]
    t = trainer(recipe(tmp_path, tiny, trajectory_sources="test_expert_cache", group_builder="test_add_pool"))
    try:
        store_iteration(t, tokens, 0, [("t1", "g", 1, 0.0), ("t1", "g", 1, 0.0)])
        with pytest.raises(ValueError, match="source 'on_policy' but was not collected"):
            t.iteration(0)
    finally:
        t.close()


# ---- rollout hooks through the real loop on MiniWoB ---------------------------------------------------
@register(TASK_SOURCES, "test_curriculum")
class Curriculum:
    """Adds one harder task at iteration 0 (a WebRL-style curriculum step), with provenance."""

    def __call__(self, *, ctx=None):
        if ctx.iteration == 0:
            return [NewTask("click-checkboxes", source="test_curriculum", parent="click-test-2",
                            spec={"reason": "needs several clicks"})]
        return []


@register(TASK_SAMPLERS, "test_in_order")
class InOrder:
    def __init__(self, seed: int = 0) -> None:
        pass

    def __call__(self, task_ids, n, stats=None, *, ctx=None):
        return list(task_ids)[:n]


@register(ROLLOUT_PLANNERS, "test_dynamic")
class Dynamic:
    """DART-style dynamic N and length: 3 rollouts with 2 steps for the new task, 2 x 1 otherwise."""

    def __call__(self, plans, *, ctx=None):
        return [RolloutPlan(p.task_id, 3, 2) if p.task_id == "click-checkboxes" else RolloutPlan(p.task_id, 2, 1)
                for p in plans]


@register(CONDITIONERS, "test_plan")
class PlanHint:
    """Guidance for member 0 of every group (BEPA plan-conditioned self-roll)."""

    def __call__(self, task_id, seed, member, *, ctx=None):
        return Guidance("PLAN: read the task first", level=2, source="test_plan") if member == 0 else None


@pytest.mark.slow
def test_rollout_hooks_change_what_the_real_loop_collects(tmp_path):
    """One iteration on real MiniWoB pages: the task source adds click-checkboxes (provenance in the
    DataStore), the planner gives it 3 rollouts of at most 2 steps (click-test-2: 2 x 1), and the
    conditioner's plan is in member 0's prompt and recorded on its trajectory."""
    from pathlib import Path

    import yaml

    from guigym.train.config import from_dict
    from guigym.train.data.store import DataStore
    from guigym.train.main import run
    from guigym.train.policy.hf_policy import HFPolicy

    root = Path(__file__).resolve().parents[1]
    cfg = yaml.safe_load((root / "recipes" / "grpo_miniwob_tiny.yaml").read_text())
    cfg["run"].update(name="hooks", dir=str(tmp_path / "run"), iterations=1)
    cfg["env"].update(tasks=["click-test-2"], num_envs=2, max_steps=1,
                      kwargs={"tasks": ["click-test-2", "click-checkboxes"]})
    cfg["rollout"].update(num_generations=2, groups_per_iteration=2)
    cfg["eval"]["enabled"] = False
    cfg["algorithm"].update(task_sources="test_curriculum", task_sampler="test_in_order",
                            rollout_planners="test_dynamic", conditioners="test_plan", num_iterations=1)
    run(from_dict(cfg), log=lambda m: None)

    store = DataStore.for_run_dir(str(tmp_path / "run"))
    try:
        run_id = store.start_run("hooks", from_dict(cfg).to_dict())
        trajs = store.get_trajectories(run_id)
        added = store.added_tasks(run_id)
    finally:
        store.close()
    assert added == [{"task_id": "click-checkboxes", "source": "test_curriculum", "parent": "click-test-2",
                      "iteration": 0, "spec": {"reason": "needs several clicks"}}]
    by_task: dict = {}
    for t in trajs:
        by_task.setdefault(t.task_id, []).append(t)
    assert sorted((k, len(v)) for k, v in by_task.items()) == [("click-checkboxes", 3), ("click-test-2", 2)]
    assert all(t.length == 1 for t in by_task["click-test-2"])
    assert all(1 <= t.length <= 2 for t in by_task["click-checkboxes"])
    # an episode the budget ended has exactly 2 steps (the env's own budget would allow more)
    assert all(t.length == 2 for t in by_task["click-checkboxes"] if t.info["truncated"])
    # the budget was reached (seeded sampling: which rollouts reach it is fixed), by the env itself
    assert any(t.length == 2 for t in by_task["click-checkboxes"])
    assert not any(t.info["cut_by_scheduler"] for t in trajs)
    tok = HFPolicy(tmp_path / "run" / "init_model").tokenizer
    for t in trajs:
        text = tok.decode(t.steps[0].prompt_ids)
        # the env's own instruction is recorded, without the conditioner's guidance
        assert t.info["instruction"].strip() and "PLAN:" not in t.info["instruction"]
        if t.info["member"] == 0:
            assert t.guidance_level == 2 and t.info["guidance"]["source"] == "test_plan"
            assert "PLAN: read the task first" in text
        else:
            assert t.guidance_level == 0 and "guidance" not in t.info and "PLAN:" not in text


def test_task_provenance_is_stored_once_and_filtered_by_iteration(tmp_path):
    from guigym.train.data.store import DataStore

    store = DataStore.for_run_dir(str(tmp_path))
    try:
        run = store.start_run("prov")
        assert store.add_tasks(run, [{"task_id": "a2", "source": "curr", "parent": "a", "spec": {"text": "x"}}], 0) == 1
        # a resumed run re-proposing the same task keeps its first provenance
        assert store.add_tasks(run, [{"task_id": "a2", "source": "other"}, {"task_id": "b2", "source": "curr"}], 3) == 1
        assert [(t["task_id"], t["source"], t["iteration"]) for t in store.added_tasks(run)] == \
            [("a2", "curr", 0), ("b2", "curr", 3)]
        assert [t["task_id"] for t in store.added_tasks(run, max_iteration=2)] == ["a2"]
        with pytest.raises(ValueError, match=r"tasks\[0\] needs a non-empty task_id and source"):
            store.add_tasks(run, [{"task_id": "", "source": "curr"}], 0)
    finally:
        store.close()
