"""Config validation, sample-builder masks, the learner (loss, IS weight, LoRA) and exact
checkpoint resume, on a tiny locally built Qwen2.5-VL (CPU)."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from guigym.core.errors import ConfigError  # noqa: E402
from guigym.train import checkpoint  # noqa: E402
from guigym.train.config import (AlgorithmConfig, LoraConfig, OptimConfig, describe, from_dict,  # noqa: E402
                                 load_recipe)
from guigym.train.data.types import Step, Trajectory  # noqa: E402
from guigym.train.samples import build_multiturn, build_stepwise  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CANDS = ['click(element="1")', 'click(element="2")', 'click(element="3")']
MINIMAL = {"run": {"name": "r", "dir": "/tmp/x"}, "env": {"tasks": ["click-test"]}}


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread):
    """One intra-op torch thread for this module (tests/conftest.py says why)."""


# ---- config -----------------------------------------------------------------------------------
def test_unknown_key_is_named_with_its_path():
    with pytest.raises(ConfigError) as e:
        from_dict({**MINIMAL, "algorithm": {"epsilom": 0.1}})
    msg = str(e.value)
    assert "algorithm.epsilom" in msg and "unknown key" in msg and "'epsilon'" in msg
    with pytest.raises(ConfigError, match=r"(?m)^recipe: learner: unknown key"):
        from_dict({**MINIMAL, "learner": {}})


def test_bad_values_are_named():
    with pytest.raises(ConfigError) as e:
        from_dict({**MINIMAL, "optim": {"learning_rate": -1}, "rollout": {"num_generations": 1}})
    msg = str(e.value)
    assert "optim.learning_rate" in msg and "rollout.num_generations" in msg
    with pytest.raises(ConfigError, match="algorithm.loss_type"):
        from_dict({**MINIMAL, "algorithm": {"loss_type": "mean"}})
    with pytest.raises(ConfigError, match="env.tasks: required key is missing"):
        from_dict({"run": {"name": "r", "dir": "d"}, "env": {}})
    with pytest.raises(ConfigError, match="overlap env.train_seeds"):
        from_dict({**MINIMAL, "eval": {"enabled": True, "seeds": {"start": 5, "count": 10}},
                   "env": {"tasks": ["t"], "train_seeds": {"start": 0, "count": 100}}})


def test_recipes_validate_and_overrides_apply(tmp_path):
    recipes = sorted((ROOT / "recipes").glob("*.yaml"))
    assert len(recipes) >= 12
    from guigym.train.pipeline import is_pipeline, load_pipeline

    for path in recipes:  # every shipped recipe loads, names itself after its file, uses the log: section
        if is_pipeline(path):  # a list of stage recipes (guigym.train.pipeline): every stage validates
            stages = load_pipeline(path)
            assert all(s.cfg.run.name.startswith(path.stem + "-") for s in stages), path
            with pytest.raises(ConfigError, match="pipeline recipe"):
                load_recipe(path)
            continue
        cfg = load_recipe(path)
        assert cfg.run.name == path.stem, path
        assert not cfg.run.tensorboard, f"{path.name}: use log.tensorboard (run.tensorboard is the older name)"
    cfg = load_recipe(ROOT / "recipes" / "grpo_miniwob_tiny.yaml",
                      ["optim.learning_rate=0.5", "algorithm.epsilon_high=0.28", "env.tasks=[a, b]"])
    assert cfg.optim.learning_rate == 0.5 and cfg.algorithm.epsilon_high == 0.28 and cfg.env.tasks == ["a", "b"]
    with pytest.raises(ConfigError, match="optim.learnin_rate: unknown key"):
        load_recipe(ROOT / "recipes" / "grpo_miniwob_tiny.yaml", ["optim.learnin_rate=1"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("run: {name: a, dir: b}\nenv: {tasks: [x]}\nrollout: {temperature: hot}\n")
    with pytest.raises(ConfigError, match=rf"{bad}: rollout.temperature"):
        load_recipe(bad)


def test_every_knob_has_help_text():
    lines = [ln for ln in describe().splitlines() if ln.startswith("  ")]
    assert len(lines) > 50
    assert all(ln.split("): ", 1)[1].strip() for ln in lines), [ln for ln in lines if not ln.split("): ", 1)[1].strip()]


# ---- sample builders --------------------------------------------------------------------------
def _step(prompt, resp, lp=None, cands=None, version=0):
    return Step(prompt_ids=list(prompt), response_ids=list(resp),
                rollout_logprobs=list(lp) if lp is not None else [-0.5] * len(resp),
                policy_version=version, candidates=cands)


def _traj(tid, steps, reward=1.0):
    return Trajectory(traj_id=tid, run_id="r", task_id="t", seed=0, group_id="g", steps=steps, reward=reward)


def test_stepwise_masks_and_advantages():
    t = _traj("a", [_step([1, 2, 3], [7, 8], [-0.1, -0.2], CANDS), _step([1, 2, 3, 7, 8, 4], [9])])
    s = build_stepwise([t], {"a": 0.5})
    assert [x.input_ids for x in s] == [[1, 2, 3, 7, 8], [1, 2, 3, 7, 8, 4, 9]]
    assert [x.loss_mask for x in s] == [[0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0, 1]]
    assert s[0].rollout_logprobs == [0, 0, 0, -0.1, -0.2]
    assert s[0].advantages == [0, 0, 0, 0.5, 0.5] and s[1].advantages[-1] == 0.5
    assert (s[0].segments[0].start, s[0].segments[0].end, s[0].segments[0].candidates) == (3, 5, CANDS)
    # step-wise advantages (DART eq. 1) and a step filter
    s = build_stepwise([t], {"a": [1.0, -2.0]}, keep=lambda tr, k, st: k == 1)
    assert len(s) == 1 and s[0].step_index == 1 and s[0].advantages[-1] == -2.0
    with pytest.raises(ValueError, match="2 step advantages for 1 steps"):
        build_stepwise([_traj("b", [_step([1], [2])])], {"b": [1.0, 2.0]})


def test_multiturn_masks_env_tokens():
    t = _traj("a", [_step([1, 2], [7, 8], [-0.1, -0.2]), _step([1, 2, 7, 8, 5, 6], [9], [-0.3]),
                    _step([1, 2, 7, 8, 5, 6, 9, 4], [3, 3], [-0.4, -0.5])])
    (s,) = build_multiturn([t], {"a": [1.0, 2.0, 3.0]})
    assert s.input_ids == [1, 2, 7, 8, 5, 6, 9, 4, 3, 3]
    assert s.loss_mask == [0, 0, 1, 1, 0, 0, 1, 0, 1, 1]
    assert s.advantages == [0, 0, 1, 1, 0, 0, 2, 0, 3, 3]
    assert s.rollout_logprobs == [0, 0, -0.1, -0.2, 0, 0, -0.3, 0, -0.4, -0.5]
    assert [(g.start, g.end) for g in s.segments] == [(2, 4), (6, 7), (8, 10)]
    # a filtered step stays as context but leaves the loss
    (s,) = build_multiturn([t], {"a": 1.0}, keep=lambda tr, k, st: k != 1)
    assert s.loss_mask == [0, 0, 1, 1, 0, 0, 0, 0, 1, 1]
    bad = _traj("b", [_step([1, 2], [7]), _step([1, 3, 7, 5], [9])])
    with pytest.raises(ValueError, match="do not extend the previous prompt"):
        build_multiturn([bad], {"b": 1.0})


# ---- learner on a tiny model ------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from guigym.train.policy.tiny import build

    return build(tmp_path_factory.mktemp("models") / "tiny", seed=0)


def _policy(tiny):
    from guigym.train.policy.hf_policy import HFPolicy

    return HFPolicy(tiny)


def _rollouts(tiny, n=8, cands=CANDS, seed0=0, prompt="Click the button.", version=0):
    """Real constrained rollouts of the tiny policy (separate HFPolicy = the rollout engine)."""
    pol = _policy(tiny)
    enc = pol.encode_chat([{"role": "user", "content": prompt}])
    outs = pol.generate([enc] * n, max_new_tokens=12, seeds=list(range(seed0, seed0 + n)),
                        candidates=[cands] * n if cands else None)
    trajs = []
    for i, o in enumerate(outs):
        st = Step(prompt_ids=enc.prompt_ids, response_ids=o.response_ids, rollout_logprobs=o.logprobs,
                  policy_version=version, candidates=cands, action_text=o.text)
        trajs.append(_traj(f"t{seed0 + i}", [st], reward=float(o.text == (cands[0] if cands else o.text))))
    return trajs, enc


def _learner(tiny, **kw):
    from guigym.train.learner import Learner

    algo = AlgorithmConfig(**kw.pop("algo", {}))
    optim = OptimConfig(**{"learning_rate": 1e-2, **kw.pop("optim", {})})
    return Learner(_policy(tiny), algo, optim, **kw)


def test_rollout_and_learner_logprobs_agree(tiny):
    """Recorded rollout log-probs == the learner's batched recomputation (constrained and free)."""
    learner = _learner(tiny)
    for cands in (CANDS, None):
        trajs, _ = _rollouts(tiny, n=6, cands=cands)
        samples = build_stepwise(trajs, {t.traj_id: 1.0 for t in trajs})
        batch = learner.collate(samples)
        with torch.no_grad():
            lp = learner.logprobs(batch)
        assert batch.mask.sum() > 6
        assert torch.allclose(lp * batch.mask, batch.rollout_logp, atol=1e-4), (lp - batch.rollout_logp).abs().max()
    # the constraint really is applied: a candidate's log-prob is far above the free-text one
    free = learner.policy.logprobs_of(samples[0].input_ids[:-len(trajs[0].steps[0].response_ids)],
                                      trajs[0].steps[0].response_ids)
    assert sum(free) < -1.0


def test_update_raises_logprob_of_positive_advantage_and_is_weight_is_one(tiny):
    trajs, enc = _rollouts(tiny, n=8)
    assert 0 < sum(t.reward for t in trajs) < 8, "seed choice must give both outcomes"
    mean = sum(t.reward for t in trajs) / len(trajs)
    adv = {t.traj_id: t.reward - mean for t in trajs}
    learner = _learner(tiny, algo={"tis_cap": 2.0})
    samples = build_stepwise(trajs, adv)
    good = next(s for s, t in zip(samples, trajs) if t.reward > 0)
    bad = next(s for s, t in zip(samples, trajs) if t.reward == 0)
    batch = learner.collate([good, bad])
    with torch.no_grad():
        before = learner.logprobs(batch).sum(1)
    losses = []
    for i in range(6):
        m = learner.update(samples)
        losses.append(m["loss"])
        if i == 0:
            # rollout and trainer log-probs agree, so the truncated IS weight is 1 everywhere, up to
            # float32 rounding of exp(logp_old - logp_rollout) (0.99999994 was seen on another CPU)
            assert m["is_weight_mean"] == pytest.approx(1.0, abs=1e-5)
            assert m["is_weight_min"] == pytest.approx(1.0, abs=1e-5)
            # pi_train_old recomputed before the update == logp
            assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    with torch.no_grad():
        after = learner.logprobs(batch).sum(1)
    assert after[0] > before[0] + 0.1 and after[1] < before[1] - 0.1
    assert losses[-1] < losses[0]
    # the samples are now stale: the trainer's old log-probs moved away from the rollout's
    assert m["is_weight_min"] < 1.0


def test_is_weight_is_truncated_at_cap(tiny):
    trajs, _ = _rollouts(tiny, n=4)
    for t in trajs:  # pretend the rollout engine put much less mass on the sampled tokens
        t.steps[0].rollout_logprobs = [x - 3.0 for x in t.steps[0].rollout_logprobs]
    m = _learner(tiny, algo={"tis_cap": 1.5}).update(build_stepwise(trajs, {t.traj_id: 1.0 for t in trajs}))
    assert m["is_weight_mean"] == pytest.approx(1.5) and m["is_weight_min"] == pytest.approx(1.5)


def test_kl_to_reference_is_zero_at_start_and_grows(tiny):
    trajs, _ = _rollouts(tiny, n=6)
    samples = build_stepwise(trajs, {t.traj_id: (1.0 if t.reward else -1.0) for t in trajs})
    learner = _learner(tiny, algo={"beta": 0.1, "kl_estimator": "k3"})
    first = learner.update(samples)
    assert first["kl"] == pytest.approx(0.0, abs=1e-6)  # reference == policy at start, up to rounding
    for _ in range(3):
        m = learner.update(samples)
    assert m["kl"] > 1e-4


def test_lora_trains_only_adapters(tiny):
    learner = _learner(tiny, lora=LoraConfig(enabled=True, r=4))
    base = {k: v.detach().clone() for k, v in learner.model.named_parameters() if "lora_" not in k}
    lora0 = {k: v.detach().clone() for k, v in learner.model.named_parameters() if "lora_B" in k}
    assert set(learner.trainable_state()) and all("lora_" in k for k in learner.trainable_state())
    trajs, _ = _rollouts(tiny, n=6)
    for _ in range(2):
        learner.update(build_stepwise(trajs, {t.traj_id: (1.0 if t.reward else -1.0) for t in trajs}))
    named = dict(learner.model.named_parameters())
    assert all(torch.equal(named[k], v) for k, v in base.items())
    assert any(not torch.equal(named[k], v) for k, v in lora0.items())
    # the merged export differs from the base model and loads as a plain checkpoint
    from guigym.train.policy.hf_policy import HFPolicy

    path = learner.save_pretrained(Path(str(tiny) + "-merged"))
    merged = HFPolicy(path)
    s = build_stepwise(trajs, {t.traj_id: 1.0 for t in trajs})[:2]
    b = learner.collate(s)
    with torch.no_grad():
        assert torch.allclose(learner.logprobs(b), merged_logprobs(merged, s, b), atol=1e-4)


def merged_logprobs(policy, samples, batch):
    out = torch.zeros(batch.mask.shape)
    for i, s in enumerate(samples):
        seg = s.segments[0]
        lp = policy.logprobs_tensor(s.input_ids[:seg.start], s.input_ids[seg.start:seg.end], candidates=seg.candidates)
        out[i, seg.start - 1:seg.end - 1] = lp
    return out


def test_gradient_accumulation_equals_one_big_batch(tiny):
    trajs, _ = _rollouts(tiny, n=8)
    samples = build_stepwise(trajs, {t.traj_id: (1.0 if t.reward else -0.5) for t in trajs})
    # adam_epsilon = 1 makes the step ~ linear in the gradient (with the default 1e-8 Adam's first
    # step is ~ lr * sign(g), which turns float-rounding noise on near-zero gradients into +-lr)
    a = _learner(tiny, algo={"per_device_train_batch_size": 8}, optim={"adam_epsilon": 1.0})
    b = _learner(tiny, algo={"per_device_train_batch_size": 3},
                 optim={"gradient_accumulation_steps": 3, "adam_epsilon": 1.0})
    ma, mb = a.update(samples), b.update(samples)
    assert ma["optimizer_steps"] == mb["optimizer_steps"] == 1
    assert ma["loss"] == pytest.approx(mb["loss"], abs=1e-6)
    for (k, p), q in zip(a.model.named_parameters(), b.model.parameters()):
        assert torch.allclose(p, q, atol=1e-6), k


# ---- checkpoints ------------------------------------------------------------------------------
def test_checkpoint_resume_is_exact(tiny, tmp_path):
    trajs, _ = _rollouts(tiny, n=8)
    batches = []
    for i in range(4):  # different advantages per "iteration"
        rng = random.Random(i)
        batches.append(build_stepwise(trajs, {t.traj_id: rng.uniform(-1, 1) for t in trajs}))
    cfg = {"optim": {"lr_scheduler_type": "cosine", "warmup_steps": 1, "weight_decay": 0.01}}

    def draw():  # the loop's RNG consumers (python, numpy, torch)
        return (random.random(), float(np.random.rand()), float(torch.rand(1)))

    def seed_all(n):
        random.seed(n), np.random.seed(n), torch.manual_seed(n)

    seed_all(5)
    full = _learner(tiny, total_updates=4, **cfg)
    for i in range(4):
        full.update(batches[i])
        if i == 1:
            draws_full = draw()
    seed_all(5)
    first = _learner(tiny, total_updates=4, **cfg)
    for i in range(2):
        first.update(batches[i])
    path = checkpoint.save(tmp_path / "ck", 1, first, {"policy_version": 2}, keep=2)
    del first
    seed_all(99)  # a new process has other RNG states
    resumed = _learner(tiny, total_updates=4, **cfg)
    state = checkpoint.load(path, resumed)
    assert state == {"iteration": 1, "policy_version": 2}
    assert draw() == draws_full
    for i in range(2, 4):
        resumed.update(batches[i])
    for (k, p), q in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(p, q), k
    assert resumed.scheduler.get_last_lr() == full.scheduler.get_last_lr()


def test_checkpoint_is_atomic_and_pruned(tiny, tmp_path):
    learner = _learner(tiny)
    root = tmp_path / "ck"
    for it in range(4):
        checkpoint.save(root, it, learner, {}, keep=2)
    assert [p.name for p in checkpoint.list_checkpoints(root)] == ["ckpt-000002", "ckpt-000003"]
    (root / "ckpt-000009.tmp-123").mkdir()  # a writer that died mid-save
    (root / "ckpt-000010").mkdir()  # no state.json: incomplete, never picked
    assert checkpoint.latest(root).name == "ckpt-000003"


def _full_sequence_entropy(learner, step) -> float:
    """The reference: every position through lm_head in float32, a dense (R, V) candidate mask,
    log_softmax over each masked row (what the handle computed before it restricted the rows)."""
    pol = learner.policy
    p, r = len(step.prompt_ids), len(step.response_ids)
    ids = torch.tensor([list(step.prompt_ids) + list(step.response_ids)])
    with torch.no_grad():
        logits = learner.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits[0]
    rows = logits[p - 1:p + r - 1].float()
    rows[:, pol.banned] = float("-inf")
    cons = pol.constraint(step.candidates)
    if cons is not None:
        keep = torch.zeros(rows.shape, dtype=torch.bool)
        for t in range(r):
            keep[t, cons.allowed(list(step.response_ids[:t]))] = True
        rows = rows.masked_fill(~keep, float("-inf"))
    logp = torch.log_softmax(rows, -1)
    return float(-torch.where(torch.isfinite(logp), logp.exp() * logp, torch.zeros_like(logp)).sum(-1).mean())


def test_step_entropy_over_response_rows_equals_full_sequence_computation(tiny):
    """PolicyHandle.step_entropy sends only the response positions through lm_head and applies
    candidates as index lists; it equals the full-sequence dense-mask computation, and the
    entropy the sampler recorded, for constrained and free replies."""
    from guigym.train.algorithms.policy_handle import PolicyHandle

    learner = _learner(tiny)
    handle = PolicyHandle(learner, 0)
    pol = _policy(tiny)  # the rollout engine
    enc = pol.encode_chat([{"role": "user", "content": "Click the button."}])
    seen = set()
    for cands in (CANDS, None):
        for o in pol.generate([enc] * 3, max_new_tokens=12, seeds=[0, 1, 2], candidates=[cands] * 3 if cands else None):
            st = Step(prompt_ids=enc.prompt_ids, response_ids=o.response_ids, rollout_logprobs=o.logprobs,
                      policy_version=0, candidates=cands, action_text=o.text)
            assert len(st.response_ids) > 1
            got = handle.step_entropy(st)
            assert got == pytest.approx(_full_sequence_entropy(learner, st), abs=1e-5)
            assert got == pytest.approx(o.entropy, abs=1e-4)  # what the sampler recorded for the same reply
            seen.add(round(got, 4))
    assert len(seen) > 2  # not a constant
    # only the R response positions reached the output projection (not all L = P + R)
    shapes = []
    hook = learner.model.get_output_embeddings().register_forward_hook(lambda m, a, out: shapes.append(out.shape))
    try:
        handle.step_entropy(st)
    finally:
        hook.remove()
    assert [tuple(x) for x in shapes] == [(1, len(st.response_ids), learner.model.config.get_text_config().vocab_size)]
    # a sharded learner's forward is a collective rank 0 cannot run alone: the handle reads the
    # unsharded copy it is given (the loop passes the HF rollout engine's), or names the setting
    learner.strategy = "fsdp"  # stand-in for an FSDP learner (the forward below would then hang)
    with pytest.raises(ConfigError, match="distributed.strategy: fsdp"):
        PolicyHandle(learner, 0).step_entropy(st)
    shapes.clear()
    reader = _policy(tiny).model
    assert PolicyHandle(learner, 0, reader=reader).step_entropy(st) == pytest.approx(got, abs=1e-5)
    assert not reader.get_output_embeddings()._forward_pre_hooks  # its row selector was removed again
