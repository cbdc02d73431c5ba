"""Regression tests for the trainer defects of issue 11 (item 3), through the real loop
(``Trainer.iteration``) or the learner on a tiny locally built Qwen2.5-VL (CPU). Each test failed
on the code before the fix (see the report of helper T2)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from train_helpers import (PROMPTS, Tokens, recipe, store_iteration,  # noqa: E402
                           tiny, tokens, trainer)  # noqa: E402,F401 - tiny/tokens are fixtures
from train_helpers import capture_updates as _capture_updates  # noqa: E402

from guigym.train.algorithms.registry import GROUP_BUILDERS, REWARD_SHAPERS, TASK_SAMPLERS  # noqa: E402
from guigym.train.config import AlgorithmConfig, OptimConfig, describe  # noqa: E402
from guigym.train.data.types import Group, Step, Trajectory  # noqa: E402
from guigym.train.samples import Sample, Segment, build_stepwise  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread):
    """One intra-op torch thread for this module (tests/conftest.py says why)."""


def _register(registry, name, factory):
    if name not in registry:
        registry.register(name)(factory)
    return name


class ShortestPathBonus:
    """verifier score + 0.5 / n_steps for successes: among successes, shorter is better."""

    def __call__(self, group, rewards=None, *, ctx=None):
        return [t.reward + (0.5 / t.length if t.success else 0.0) for t in group.trajectories]


# ---- zero-variance dropping after shaping --------------------------------------------------------
def test_all_success_group_with_shaped_bonus_is_trained(tiny, tokens, tmp_path):
    _register(REWARD_SHAPERS, "test_shortest_path", ShortestPathBonus)
    t = trainer(recipe(tmp_path, tiny, reward_shaper="test_shortest_path", skip_zero_advantage_groups=True))
    try:
        # g1: both succeed (verifier scores equal) in 1 and 2 steps; g2: both fail (no signal at all)
        store_iteration(t, tokens, 0, [("t1", "g1", 1, 1.0), ("t1", "g1", 2, 1.0),
                                       ("t2", "g2", 1, 0.0), ("t2", "g2", 1, 0.0)])
        seen = _capture_updates(t)
        m = t.iteration(0)
    finally:
        t.close()
    # g1 trains (3 step samples); the all-fail group g2 (equal shaped rewards) is still dropped
    assert m["samples"] == 3.0 and m["rollout/groups_trained"] == 1.0
    short = next(s for s in seen[0] if s.step_index == 0 and sum(1 for x in seen[0] if x.traj_id == s.traj_id) == 1)
    long = [s for s in seen[0] if s.traj_id != short.traj_id]
    assert max(short.advantages) > 0 and all(min(s.advantages) < 0 for s in long)


def test_sample_reward_is_the_shaped_reward(tiny, tokens, tmp_path):
    _register(REWARD_SHAPERS, "test_shortest_path", ShortestPathBonus)
    t = trainer(recipe(tmp_path, tiny, reward_shaper="test_shortest_path", skip_zero_advantage_groups=False))
    try:
        store_iteration(t, tokens, 0, [("t1", "g1", 1, 1.0), ("t1", "g1", 2, 1.0), ("t1", "g1", 1, 0.0)])
        seen = _capture_updates(t)
        t.iteration(0)
    finally:
        t.close()
    # 1 + 0.5/1, 1 + 0.5/2 and 0: not the verifier's 1.0, 1.0, 0.0
    assert sorted({s.reward for s in seen[0]}) == [0.0, pytest.approx(1.25), pytest.approx(1.5)]


# ---- injected trajectories are stored before use ------------------------------------------------
class InjectExpert:
    """Group builder: the fresh groups plus one expert demonstration per group that is NOT in the
    DataStore (as an expert cache or a replay buffer from another run would offer)."""

    made: list = []

    def __init__(self) -> None:
        self.tokens = None

    def __call__(self, fresh, pool=(), *, ctx=None):
        out = []
        for g in fresh:
            expert = InjectExpert.made[0]
            out.append(Group(g.group_id, g.task_id, list(g.trajectories) + [expert]))
        return out


def test_injected_trajectory_is_stored_with_its_source_and_logprobs(tiny, tokens, tmp_path):
    _register(GROUP_BUILDERS, "test_inject_expert", InjectExpert)
    expert = tokens.traj("t1", "elsewhere", 1, 1.0, iteration=0, source="expert", run_id="other-run")
    expert.steps[0].rollout_logprobs = [x - 0.25 for x in expert.steps[0].rollout_logprobs]  # its own behaviour
    InjectExpert.made[:] = [expert]
    t = trainer(recipe(tmp_path, tiny, group_builder="test_inject_expert"))
    try:
        store_iteration(t, tokens, 0, [("t1", "g1", 1, 0.0), ("t1", "g1", 1, 0.0)])
        m = t.iteration(0)  # before the fix: KeyError from mark_used (unknown traj_id)
        stored = t.store.get_trajectory(expert.traj_id)
        usage = t.store.usage(expert.traj_id)
        stats = t.store.task_stats(t.run_id, "t1")
    finally:
        t.close()
    assert m["samples"] == 3.0
    assert stored is not None and stored.source == "expert" and stored.info["origin_run_id"] == "other-run"
    assert stored.steps[0].rollout_logprobs == pytest.approx(expert.steps[0].rollout_logprobs)
    assert usage == [(0, 1)]  # step 0 trained version 1
    assert stats["attempts"] == 2  # a demonstration is not an attempt of the policy


# ---- extra losses scaled like the main loss -----------------------------------------------------
def _samples(tokens, n=4):
    out = []
    for k in range(n):
        st = tokens.step(PROMPTS[k])
        traj = Trajectory(traj_id=f"s{k}", run_id="", task_id="t", seed=0, group_id="g", steps=[st], reward=1.0,
                          source="expert" if k % 2 == 0 else "on_policy")
        out += build_stepwise([traj], {traj.traj_id: (0.5 if k < 2 else -1.0)})
    return out


@pytest.mark.parametrize("loss_type", ["token-mean", "seq-mean-token-sum-norm"])
def test_extra_loss_matches_hand_computation_under_accumulation(tiny, tokens, loss_type):
    from guigym.train.learner import Learner
    from guigym.train.algorithms.registry import EXTRA_LOSSES
    from guigym.train.policy.hf_policy import HFPolicy

    samples = _samples(tokens)
    coef, max_len = 0.3, 16
    # hand computation at the initial weights (ratio 1, IS weight 1): per-token PPO loss = -A,
    # SFT per-token loss = -coef * logp on expert rows; both reduced with the same divisor D
    lp = [tokens.policy.logprobs_of(s.input_ids[:s.segments[0].start], s.input_ids[s.segments[0].start:])
          for s in samples]
    n_tok = sum(len(x) for x in lp)
    D = n_tok if loss_type == "token-mean" else len(samples) * max_len
    pg = sum(-s.advantages[-1] * len(x) for s, x in zip(samples, lp)) / D
    sft = sum(-coef * sum(x) for s, x in zip(samples, lp) if s.source == "expert") / D
    # two micro-batches of one optimizer step, each mixing an expert and an on-policy sample
    learner = Learner(HFPolicy(tiny), AlgorithmConfig(per_device_train_batch_size=2, loss_type=loss_type),
                      OptimConfig(learning_rate=1e-3, gradient_accumulation_steps=2), max_len_norm=max_len,
                      extra_losses=[EXTRA_LOSSES.build("sft", coef=coef)])
    m = learner.update(samples)
    assert m["optimizer_steps"] == 1.0
    assert m["pg_loss"] == pytest.approx(pg, abs=1e-5)
    assert m["loss"] == pytest.approx(pg + sft, abs=1e-5)


# ---- the Dr. GRPO constant follows the sample builder (issue 32 item 6 / issue 33 item 5) ----------
@pytest.mark.parametrize("builder", ["stepwise", "multiturn"])
def test_dr_grpo_constant_is_the_most_trained_tokens_one_sample_holds(tiny, tmp_path, builder):
    cfg = recipe(tmp_path, tiny, loss_type="seq-mean-token-sum-norm", sample_builder=builder)
    steps, new_tokens = cfg["env"]["max_steps"], cfg["rollout"]["max_new_tokens"]
    assert (steps, new_tokens) == (3, 16)
    t = trainer(cfg)
    try:
        # a step sample holds one response (<= 16 trained tokens); a multiturn sample holds the
        # responses of all 3 steps (<= 48): before the fix both divided by 16
        assert t.learner.max_len_norm == (16 if builder == "stepwise" else 3 * 16)
    finally:
        t.close()


def test_dr_grpo_multiturn_without_a_step_budget_is_refused(tiny, tmp_path):
    from guigym.core.errors import ConfigError
    from guigym.train.config import from_dict

    cfg = recipe(tmp_path, tiny, loss_type="seq-mean-token-sum-norm", sample_builder="multiturn")
    cfg["env"]["max_steps"] = None
    with pytest.raises(ConfigError, match=r"env\.max_steps"):
        from_dict(cfg)
    cfg["algorithm"]["sample_builder"] = "stepwise"  # one response per sample: no step budget needed
    assert from_dict(cfg).algorithm.sample_builder == "stepwise"


# ---- the reported loss, and the help texts --------------------------------------------------------
def test_reported_loss_is_per_optimizer_step_and_help_texts_state_units(tiny, tokens):
    from guigym.train.learner import Learner
    from guigym.train.policy.hf_policy import HFPolicy

    samples = []
    for k in range(4):
        traj = Trajectory(traj_id=f"u{k}", run_id="", task_id="t", seed=0, group_id="g",
                          steps=[tokens.step(PROMPTS[k])], reward=1.0)
        samples += build_stepwise([traj], {traj.traj_id: 1.0})
    learner = Learner(HFPolicy(tiny), AlgorithmConfig(per_device_train_batch_size=2),
                      OptimConfig(learning_rate=1e-9, warmup_steps=2), total_updates=10)
    lrs = []
    for _ in range(3):
        m = learner.update(samples)
        lrs.append(m["lr"])
        # two optimizer steps of 2 samples; A = 1 and ratio 1: each step's token-mean loss is -1,
        # and so is the reported loss (a sum over the two steps would say -2)
        assert m["optimizer_steps"] == 2.0
        assert m["loss"] == pytest.approx(-1.0, abs=1e-4) and m["pg_loss"] == pytest.approx(-1.0, abs=1e-4)
    # warm-up counts iterations (updates), not optimizer steps: 1/3, 2/3, 1 of the peak LR
    assert lrs == pytest.approx([1e-9 / 3, 2e-9 / 3, 1e-9])
    text = describe()
    line = {ln.split(" (")[0].strip(): ln for ln in text.splitlines()}
    assert "iteration" in line["optim.warmup_steps"] and "optimizer steps" not in line["optim.warmup_steps"]
    assert "k1 = -log r" in line["algorithm.kl_estimator"]
    assert "one optimizer step each" not in line["run.iterations"]


# ---- plug-in state in checkpoints; resume sees the last finished iteration ---------------------------
class CountingShaper:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, group, rewards=None, *, ctx=None):
        self.calls += 1
        return [t.reward for t in group.trajectories]

    def state_dict(self):
        return {"calls": self.calls}

    def load_state_dict(self, state):
        self.calls = int(state["calls"])


class RecordingSampler:
    seen: list = []

    def __init__(self, seed: int = 0) -> None:
        self.draws = 0

    def __call__(self, task_ids, n, stats=None, *, ctx=None):
        RecordingSampler.seen.append({k: v["attempts"] for k, v in (stats or {}).items()})
        self.draws += 1
        return list(task_ids)[:n]

    def state_dict(self):
        return {"draws": self.draws}

    def load_state_dict(self, state):
        self.draws = int(state["draws"])


def test_plugin_state_is_checkpointed_and_resume_ignores_the_crashed_iteration(tiny, tokens, tmp_path):
    _register(REWARD_SHAPERS, "test_counting", CountingShaper)
    _register(TASK_SAMPLERS, "test_recording", RecordingSampler)
    cfg = recipe(tmp_path, tiny, reward_shaper="test_counting", task_sampler="test_recording",
                 skip_zero_advantage_groups=False)
    RecordingSampler.seen.clear()
    a = trainer(cfg)
    try:
        store_iteration(a, tokens, 0, [("t1", "g0", 1, 1.0), ("t1", "g0", 1, 0.0)])
        a.iteration(0)
        # iteration 1 stored its rollouts, then the process died before its update and checkpoint
        store_iteration(a, tokens, 1, [("t1", "g1", 1, 1.0), ("t1", "g1", 1, 1.0)])
    finally:
        a.close()
    saved = json.loads((tmp_path / "run" / "checkpoints" / "ckpt-000000" / "state.json").read_text())
    assert saved["plugins"]["reward_shaper"] == [{"name": "test_counting", "state": {"calls": 1}}]
    b = trainer(cfg, resume=True)
    try:
        assert b.start_iteration == 1
        assert b.reward_shaper.plugins[0].calls == 1 and b.task_sampler.plugins[0].draws == 1
        b.iteration(1)
        assert b.reward_shaper.plugins[0].calls == 2
    finally:
        b.close()
    # iteration 0 saw no history; the resumed iteration 1 sees iteration 0's 2 attempts only, not
    # the 2 more that the crashed iteration 1 had already stored
    assert RecordingSampler.seen == [{}, {"t1": 2}]


# ---- the learner's multimodal path ----------------------------------------------------------------
def test_learner_logprobs_with_images_and_right_padding_match_one_by_one(tiny, tokens):
    """Two samples with screenshots of different sizes (so different image-token counts) and
    different lengths: the learner's right-padded batch gives each sample the log-probs that
    teacher forcing of that sample alone gives (vision inputs attached to the right rows)."""
    from guigym.train.learner import Learner
    from guigym.train.policy.hf_policy import HFPolicy

    pol = HFPolicy(tiny)
    rng = np.random.default_rng(0)
    images = {"a": rng.integers(0, 255, (56, 84, 3), dtype=np.uint8),
              "b": rng.integers(0, 255, (112, 56, 3), dtype=np.uint8),
              "c": rng.integers(0, 255, (56, 84, 3), dtype=np.uint8)}  # a's size, other pixels
    samples = []
    for ref, text, resp in (("a", "Click the red one.", 'click(element="1")'),
                            ("b", "Now press the big blue button at the top please.", 'click(element="12")')):
        enc = pol.encode_chat([{"role": "user", "content": [{"type": "text", "text": text}, {"type": "image"}]}],
                              [images[ref]])
        r = pol.tokenizer.encode(resp, add_special_tokens=False) + [pol.eos_ids[0]]
        lps = pol.logprobs_of(enc.prompt_ids, r, [images[ref]])
        p = len(enc.prompt_ids)
        samples.append(Sample(input_ids=list(enc.prompt_ids) + r, loss_mask=[0] * p + [1] * len(r),
                              rollout_logprobs=[0.0] * p + lps, advantages=[0.0] * p + [1.0] * len(r),
                              segments=[Segment(p, p + len(r))], image_refs=[ref], traj_id=ref, step_index=0))
    assert pol.image_token_id in samples[0].input_ids
    n_img = [s.input_ids.count(pol.image_token_id) for s in samples]
    assert n_img[0] != n_img[1] and len(samples[0].input_ids) != len(samples[1].input_ids)
    learner = Learner(pol, AlgorithmConfig(), OptimConfig(), image_loader=images.__getitem__)
    batch = learner.collate(samples)
    with torch.no_grad():
        lp = learner.logprobs(batch)
    assert torch.allclose(lp * batch.mask, batch.rollout_logp, atol=1e-4), (lp - batch.rollout_logp).abs().max()
    # and the pixels reach the model: the same tokens with another screenshot of that size differ
    other = learner.collate([Sample(**{**samples[0].__dict__, "image_refs": ["c"]}), samples[1]])
    with torch.no_grad():
        lp_other = learner.logprobs(other)
    assert (lp_other[0] - lp[0]).abs().max() > 1e-4 and torch.allclose(lp_other[1], lp[1], atol=1e-5)
    m = learner.update(samples)
    assert m["samples"] == 2.0 and math.isfinite(m["loss"])


# ---- WebRL eq. 6: the reference is the previous phase's actor (issue 32 item 6 / 33 item 5) ------
def _same(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


def test_webrl_reference_is_the_previous_phase_actor_and_survives_resume(tiny, tokens, tmp_path):
    import os

    cfg = recipe(tmp_path, tiny, policy_loss="webrl_kl_regression", beta=0.1, skip_zero_advantage_groups=False,
                 plugin_options={"webrl_kl_regression": {"phase_iterations": 2}})
    spec = [("t1", "g", 1, 1.0), ("t1", "g", 1, 0.0)]
    t = trainer(cfg)
    try:
        ref = lambda: {k: v.clone() for k, v in t.learner.ref_model.state_dict().items()}  # noqa: E731
        actor = lambda: {k: v.clone() for k, v in t.learner.model.state_dict().items()}  # noqa: E731
        initial = actor()
        logged = []
        for it in (0, 1):  # phase 0: anchored to the initial weights
            store_iteration(t, tokens, it, [(a, f"{b}{it}", n, r) for a, b, n, r in spec])
            logged.append(t.iteration(it)["log_ratio_ref_mean"])
            assert _same(ref(), initial) and t.learner.reference_version is None
        # by iteration 1 the actor had moved from the initial weights: the eq. 6 log-ratio is not 0
        assert abs(logged[1]) > 1e-3, logged
        end_of_phase0 = actor()
        store_iteration(t, tokens, 2, [(a, f"{b}2", n, r) for a, b, n, r in spec])
        m2 = t.iteration(2)  # phase 1 starts: pi_ref = the actor that finished phase 0
        assert t.learner.reference_version == 2 and _same(ref(), end_of_phase0)
        assert not _same(ref(), initial)
        assert m2["log_ratio_ref_mean"] == pytest.approx(0.0, abs=1e-5)  # measured before the update
        ck2 = tmp_path / "run" / "checkpoints" / "ckpt-000002"
        assert json.loads((ck2 / "state.json").read_text())["reference_version"] == 2
    finally:
        t.close()
    b = trainer(cfg, resume=True)  # a new process: the phase's reference comes from the checkpoint
    try:
        assert b.start_iteration == 3 and b.learner.reference_version == 2
        assert _same({k: v for k, v in b.learner.ref_model.state_dict().items()}, end_of_phase0)
        store_iteration(b, tokens, 3, [(a, f"{b_}3", n, r) for a, b_, n, r in spec])
        b.iteration(3)  # same phase: the reference stays
        assert _same({k: v for k, v in b.learner.ref_model.state_dict().items()}, end_of_phase0)
    finally:
        b.close()
    ck3 = tmp_path / "run" / "checkpoints" / "ckpt-000003"
    # an unchanged reference is linked from the previous checkpoint, not written again
    assert os.stat(ck3 / "reference.pt").st_ino == os.stat(ck2 / "reference.pt").st_ino


def test_webrl_reference_refresh_under_lora_swaps_adapters_in_and_out(tiny, tokens):
    from guigym.train.algorithms.policy_losses import POLICY_LOSSES
    from guigym.train.config import LoraConfig
    from guigym.train.learner import Learner
    from guigym.train.policy.hf_policy import HFPolicy

    samples = []
    for k, a in enumerate((1.0, -1.0)):
        traj = Trajectory(traj_id=f"l{k}", run_id="", task_id="t", seed=0, group_id="g",
                          steps=[tokens.step(PROMPTS[k])], reward=1.0)
        samples += build_stepwise([traj], {traj.traj_id: a})
    algo = AlgorithmConfig(beta=0.5, policy_loss="webrl_kl_regression")
    learner = Learner(HFPolicy(tiny), algo, OptimConfig(learning_rate=5e-2), LoraConfig(enabled=True, r=4))
    learner.policy_loss_fn = POLICY_LOSSES.build("webrl_kl_regression", algo=algo)
    learner.update(samples)
    learner.update(samples)
    batch = learner.collate(samples)

    def log_ratio():
        with torch.no_grad():
            return ((learner.logprobs(batch) - learner._ref_logprobs(batch)) * batch.mask).sum(1)

    assert float(log_ratio().abs().max()) > 1e-3  # the adapters moved away from the base model
    learner.refresh_reference(2)
    before = learner.trainable_state()
    assert float(log_ratio().abs().max()) < 1e-5  # the reference is now the actor itself
    assert _same(learner.trainable_state(), before)  # the swap put the actor's adapters back
    saved = learner.reference_state()
    learner.update(samples)
    assert float(log_ratio().abs().max()) > 1e-4  # trained on, against the phase's reference
    other = Learner(HFPolicy(tiny), algo, OptimConfig(), LoraConfig(enabled=True, r=4))
    other.load_trainable_state(before)
    other.load_reference_state(saved)  # a resumed learner: same adapters, same reference
    ob = other.collate(samples)
    with torch.no_grad():
        assert float(((other.logprobs(ob) - other._ref_logprobs(ob)) * ob.mask).sum(1).abs().max()) < 1e-5
    assert other.reference_version == 2


# ---- WebRL's replay filter scores the buffer with the last phase's actor (issue 32 item 6) ----------
def test_webrl_replay_buffer_is_scored_by_the_last_phase_actor(tiny, tokens, tmp_path):
    """WebRL sec. 2.2: "During phase i, we use the actor from the last phase to compute the
    perplexity of all actions in the buffer" -- not the log-probs recorded when each action was
    sampled, by a policy several phases older."""
    import random

    from guigym.train.algorithms.context import PluginContext
    from guigym.train.algorithms.policy_handle import PolicyHandle
    from guigym.train.algorithms.registry import STEP_FILTERS
    from guigym.train.data.store import DataStore
    from guigym.train.learner import Learner
    from guigym.train.policy.hf_policy import HFPolicy

    learner = Learner(HFPolicy(tiny), AlgorithmConfig(), OptimConfig(learning_rate=5e-2))
    handle = PolicyHandle(learner)
    store = DataStore.for_run_dir(str(tmp_path / "replay"))
    run = store.start_run("score")

    def put(trajs):
        for t in trajs:
            t.run_id = run
        store.add_trajectories(run, trajs)
        return trajs

    def ctx(it):
        return PluginContext(iteration=it, rng=random.Random(it), store=store, run_id=run, policy=handle)

    b = GROUP_BUILDERS.build("webrl_replay", phase_iterations=2, max_replays=2)
    win = tokens.traj("A", "a0", 1, 1.0, 0)  # recorded log-probs: the initial policy's
    b([Group("a0", "A", put([win, tokens.traj("A", "a0", 1, 0.0, 0)]))], ctx=ctx(0))
    samples = build_stepwise([win], {win.traj_id: 1.0})
    learner.update(samples)  # the actor trains through phase 0
    learner.update(samples)
    st = win.steps[0]
    def mean(xs):
        return sum(xs) / len(xs)

    # what the actor that finished phase 0 gives the buffered action, through HFPolicy's own path
    boundary = mean(learner.policy.logprobs_of(st.prompt_ids, st.response_ids))
    recorded = mean(st.rollout_logprobs)
    assert abs(boundary - recorded) > 0.05, (boundary, recorded)

    def fresh(it):
        return [Group(f"a{it}", "A", put([tokens.traj("A", f"a{it}", 1, 0.0, it) for _ in range(2)]))]

    rep = b(fresh(2), ctx=ctx(2))[0].trajectories[-1]  # phase 1's first iteration
    assert rep.source == "replay"
    assert rep.steps[0].info["actor_mean_logprob"] == pytest.approx(boundary, abs=1e-4)
    assert rep.steps[0].rollout_logprobs == st.rollout_logprobs  # behaviour log-probs kept (TIS weight)
    learner.update(samples)  # later in phase 1 the actor moves on; the phase's scores stay
    assert abs(mean(learner.policy.logprobs_of(st.prompt_ids, st.response_ids)) - boundary) > 1e-3
    again = b(fresh(3), ctx=ctx(3))[0].trajectories[-1]
    assert again.source == "replay"
    assert again.steps[0].info["actor_mean_logprob"] == pytest.approx(boundary, abs=1e-4)
    # the perplexity band judges the replayed step by that score: a band around the boundary
    # actor's probability, excluding the recorded one, keeps it; on the recorded log-probs it drops
    p_new, p_old = math.exp(boundary), math.exp(recorded)
    mid = (p_new + p_old) / 2
    band = STEP_FILTERS.build("perplexity_band", low=mid, high=1.0) if p_new > p_old else \
        STEP_FILTERS.build("perplexity_band", low=0.0, high=mid)
    assert band([rep]) == [[True]]
    unscored = rep.injected_copy("replay", key="x")
    unscored.steps = [Step(**{**vars(s), "info": {}}) for s in unscored.steps]
    assert band([unscored]) == [[False]]
    # the scores are part of the checkpointed state
    c = GROUP_BUILDERS.build("webrl_replay", phase_iterations=2, max_replays=2)
    c.load_state_dict(json.loads(json.dumps(b.state_dict())))
    assert c.buffer == b.buffer
    store.close()
