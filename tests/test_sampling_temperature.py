"""Sampling knobs: log-probs are recorded (HFPolicy.generate), recomputed (logprobs_of, Learner)
and trained at the distribution the tokens were sampled from -- softmax(masked logits / T) -- and a
checkpoint's generation_config.json defaults never reach sampling.

The reference distribution is computed here by hand from one plain forward pass of the model
(full logits, vision ids masked, divided by T), not through the code under test.
"""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from guigym.core.errors import ConfigError  # noqa: E402
from guigym.train.config import AlgorithmConfig, OptimConfig, from_dict  # noqa: E402
from guigym.train.data.types import Step, Trajectory  # noqa: E402
from guigym.train.samples import build_stepwise  # noqa: E402

CANDS = ['click(element="1")', 'click(element="2")', 'click(element="13")', 'type(text="hello")']
MINIMAL = {"run": {"name": "r", "dir": "/tmp/x"}, "env": {"tasks": ["click-test"]}}


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread):
    """One intra-op torch thread for this module (tests/conftest.py says why)."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from guigym.train.policy.tiny import build

    return build(tmp_path_factory.mktemp("temp-models") / "tiny", seed=3)


@pytest.fixture(scope="module")
def tiny_with_defaults(tmp_path_factory) -> Path:
    """A checkpoint shipping sampling defaults, as real ones do (Qwen2.5-VL's has repetition_penalty 1.05)."""
    from guigym.train.policy.tiny import build

    return build(tmp_path_factory.mktemp("temp-models-gc") / "tiny", seed=3,
                 generation_defaults={"do_sample": True, "repetition_penalty": 1.5, "top_k": 3,
                                      "temperature": 0.3})


def _policy(path):
    from guigym.train.policy.hf_policy import HFPolicy

    return HFPolicy(path)


def reference_logprobs(policy, prompt_ids, response_ids, temperature):
    """log softmax(logits / T) of each response token from a full-logits forward, vision ids -inf."""
    ids = torch.tensor([list(prompt_ids) + list(response_ids)])
    with torch.no_grad():
        logits = policy.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0].double()
    p, r = len(prompt_ids), len(response_ids)
    rows = logits[p - 1:p + r - 1].clone()
    rows[:, policy.banned] = float("-inf")
    logp = torch.log_softmax(rows / temperature, dim=-1)
    return logp.gather(-1, torch.tensor(response_ids)[:, None])[:, 0], logits[p - 1:p + r - 1]


def test_recorded_and_recomputed_logprobs_are_at_the_sampling_temperature(tiny):
    policy = _policy(tiny)
    enc = policy.encode_chat([{"role": "user", "content": "Type your username and password, then press login."}])
    for temp in (0.5, 1.7):
        outs = policy.generate([enc] * 3, max_new_tokens=16, temperature=temp, seeds=[1, 2, 3])
        for s in outs:
            ref, _ = reference_logprobs(policy, enc.prompt_ids, s.response_ids, temp)
            assert torch.allclose(torch.tensor(s.logprobs, dtype=torch.float64), ref, atol=1e-4), \
                f"T={temp}: recorded {s.logprobs[:4]} vs softmax(z/T) {ref[:4].tolist()}"
            again = policy.logprobs_of(enc.prompt_ids, s.response_ids, temperature=temp)
            assert torch.allclose(torch.tensor(again, dtype=torch.float64), ref, atol=1e-4)
            # and T matters: the temperature-1 log-probs of the same tokens are different numbers
            t1, _ = reference_logprobs(policy, enc.prompt_ids, s.response_ids, 1.0)
            assert (t1 - ref).abs().max() > 1e-2


def test_constrained_sampling_records_tempered_renormalised_logprobs(tiny):
    policy = _policy(tiny)
    enc = policy.encode_chat([{"role": "user", "content": "Click on the button."}])
    cons = policy.constraint(CANDS)
    temp = 0.6
    for s in policy.generate([enc] * 4, max_new_tokens=cons.max_len, temperature=temp, seeds=[5, 6, 7, 8],
                             candidates=[CANDS] * 4):
        _, logits = reference_logprobs(policy, enc.prompt_ids, s.response_ids, temp)
        expect = []
        for t, tok in enumerate(s.response_ids):
            allowed = cons.allowed(s.response_ids[:t])
            z = logits[t, allowed] / temp
            expect.append(float(logits[t, tok] / temp - torch.logsumexp(z, 0)))
        assert torch.allclose(torch.tensor(s.logprobs, dtype=torch.float64), torch.tensor(expect, dtype=torch.float64), atol=1e-4)
        again = policy.logprobs_of(enc.prompt_ids, s.response_ids, candidates=CANDS, temperature=temp)
        assert torch.allclose(torch.tensor(again), torch.tensor(s.logprobs), atol=1e-4)


def test_learner_recomputes_and_trains_at_the_rollout_temperature(tiny):
    from guigym.train.learner import Learner

    temp = 0.5
    pol = _policy(tiny)
    enc = pol.encode_chat([{"role": "user", "content": "Click the \"Submit\" button."}])
    trajs = []
    for i, o in enumerate(pol.generate([enc] * 6, max_new_tokens=10, temperature=temp, seeds=list(range(6)))):
        st = Step(prompt_ids=enc.prompt_ids, response_ids=o.response_ids, rollout_logprobs=o.logprobs,
                  policy_version=0, action_text=o.text)
        trajs.append(Trajectory(traj_id=f"t{i}", run_id="r", task_id="t", seed=0, group_id="g", steps=[st],
                                reward=float(i % 2)))
    samples = build_stepwise(trajs, {t.traj_id: t.reward - 0.5 for t in trajs})
    learner = Learner(_policy(tiny), AlgorithmConfig(tis_cap=2.0), OptimConfig(learning_rate=1e-3),
                      temperature=temp)
    batch = learner.collate(samples)
    with torch.no_grad():
        lp = learner.logprobs(batch)
    assert torch.allclose(lp * batch.mask, batch.rollout_logp, atol=1e-4), (lp - batch.rollout_logp).abs().max()
    m = learner.update(samples)
    # pi_train_old == pi_rollout at the same T: the truncated IS weight is 1 on every token
    assert m["is_weight_min"] == pytest.approx(1.0, abs=1e-5) and m["is_weight_mean"] == pytest.approx(1.0, abs=1e-5)
    # contrast: a learner at T = 1 (the old behaviour) sees a different distribution -- the
    # weights move far from 1, i.e. it would train a policy the rollouts never sampled from
    at_t1 = Learner(_policy(tiny), AlgorithmConfig(tis_cap=2.0), OptimConfig(learning_rate=1e-3)).update(samples)
    assert abs(at_t1["is_weight_mean"] - 1.0) > 0.05 or at_t1["is_weight_min"] < 0.5
    with pytest.raises(ConfigError, match="rollout.temperature"):
        Learner(_policy(tiny), AlgorithmConfig(), OptimConfig(), temperature=0.0)


def test_checkpoint_generation_defaults_never_reach_sampling(tiny_with_defaults):
    from transformers import GenerationConfig

    policy = _policy(tiny_with_defaults)
    saved = GenerationConfig.from_pretrained(tiny_with_defaults)
    assert saved.repetition_penalty == 1.5 and saved.top_k == 3  # the checkpoint really ships them
    enc = policy.encode_chat([{"role": "user", "content": "Scroll down and click the last link."}])
    outside_top3 = 0
    for s in policy.generate([enc] * 4, max_new_tokens=24, temperature=1.0, seeds=[10, 11, 12, 13]):
        ref, logits = reference_logprobs(policy, enc.prompt_ids, s.response_ids, 1.0)
        assert torch.allclose(torch.tensor(s.logprobs, dtype=torch.float64), ref, atol=1e-4), \
            "recorded log-probs are not those of the model's own distribution (a checkpoint default leaked)"
        again = policy.logprobs_of(enc.prompt_ids, s.response_ids)
        assert torch.allclose(torch.tensor(again), torch.tensor(s.logprobs), atol=1e-4)
        masked = logits.clone()
        masked[:, policy.banned] = float("-inf")
        top3 = masked.topk(3, dim=-1).indices
        outside_top3 += sum(int(tok not in top3[t].tolist()) for t, tok in enumerate(s.response_ids))
    # a random tiny model at T = 1 spreads its mass over hundreds of ids: top_k = 3 would make this 0
    assert outside_top3 > 5
    # the checkpoint's defaults are still what it saves (kept, just not used for sampling)
    assert policy.model.generation_config.repetition_penalty == 1.5


def test_truncated_sampling_and_greedy_training_are_refused():
    for key, value in (("top_p", 0.9), ("top_k", 50), ("repetition_penalty", 1.05)):
        with pytest.raises(ConfigError, match=rf"rollout\.{key}: .* refused for training"):
            from_dict({**MINIMAL, "rollout": {key: value}})
    with pytest.raises(ConfigError, match="rollout.temperature"):
        from_dict({**MINIMAL, "rollout": {"temperature": 0}})
    cfg = from_dict({**MINIMAL, "rollout": {"temperature": 0.7, "top_p": 1.0, "top_k": 0}, "eval": {"temperature": 0}})
    assert cfg.rollout.temperature == 0.7 and cfg.eval.temperature == 0
