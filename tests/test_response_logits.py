"""The learner computes vocabulary logits only for response positions and applies the candidate
mask as an index structure: same log-probs as the full-logits computation, memory that scales
with the response, not the prompt.

The reference is computed here from one plain forward pass with full (B, L, V) logits and a
dense mask built in the test; the memory checks watch the real ops (a forward hook on lm_head and
a TorchDispatchMode that sees every aten op's output).
"""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

from guigym.train.config import AlgorithmConfig, OptimConfig  # noqa: E402
from guigym.train.data.types import Step, Trajectory  # noqa: E402
from guigym.train.samples import build_multiturn, build_stepwise  # noqa: E402

CANDS = ['click(element="1")', 'click(element="2")', 'click(element="13")', 'type(text="hello")']


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread):
    """One intra-op torch thread for this module (tests/conftest.py says why)."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from guigym.train.policy.tiny import build

    return build(tmp_path_factory.mktemp("logit-models") / "tiny", seed=2)


@pytest.fixture(scope="module")
def learner(tiny):
    from guigym.train.learner import Learner
    from guigym.train.policy.hf_policy import HFPolicy

    return Learner(HFPolicy(tiny), AlgorithmConfig(), OptimConfig(), temperature=0.8)


def _traj(tid, steps):
    return Trajectory(traj_id=tid, run_id="r", task_id="t", seed=0, group_id="g", steps=steps, reward=1.0)


def _samples(learner, prompts, cands, temp=0.8, n_tokens=10):
    pol = learner.policy
    trajs = []
    for i, text in enumerate(prompts):
        enc = pol.encode_chat([{"role": "user", "content": text}])
        [o] = pol.generate([enc], max_new_tokens=n_tokens, temperature=temp, seeds=[i],
                           candidates=[cands] if cands else None)
        trajs.append(_traj(f"t{i}", [Step(prompt_ids=enc.prompt_ids, response_ids=o.response_ids,
                                          rollout_logprobs=o.logprobs, policy_version=0, candidates=cands)]))
    return build_stepwise(trajs, {t.traj_id: 1.0 for t in trajs})


def reference(learner, batch, temp):
    """(B, T) log-probs from full logits and a dense (B, T, V) mask, computed independently."""
    model = learner.model
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention).logits[:, :-1].double() / temp
    allowed = torch.ones(logits.shape, dtype=torch.bool)
    allowed[..., learner.policy.banned] = False
    for b, s in enumerate(batch.samples):
        for seg in s.segments:
            if seg.candidates is None:
                continue
            cons = learner.policy.constraint(seg.candidates)
            for j in range(seg.start, seg.end):
                row = torch.zeros(logits.shape[-1], dtype=torch.bool)
                row[cons.allowed(s.input_ids[seg.start:j])] = True
                allowed[b, j - 1] = row & allowed[b, j - 1]
    logp = torch.log_softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)
    tgt = batch.input_ids[:, 1:]
    return logp.gather(-1, tgt[..., None])[..., 0] * batch.mask


def test_logprobs_equal_the_full_logits_computation(learner):
    prompts = ["Click on the button.", "Type your username and password, then press login. " * 3,
               "Find the email from Alice and reply."]  # different lengths: right padding
    for cands in (CANDS, None):
        samples = _samples(learner, prompts, cands)
        batch = learner.collate(samples)
        with torch.no_grad():
            lp = learner.logprobs(batch)
        ref = reference(learner, batch, 0.8)
        assert batch.mask.sum() >= 3
        assert torch.allclose(lp.double() * batch.mask, ref, atol=1e-5), (lp.double() * batch.mask - ref).abs().max()
    # a multi-turn sample: trained spans interleaved with (untrained) env tokens, one constrained
    pol = learner.policy
    enc = pol.encode_chat([{"role": "user", "content": "Click on the button."}])
    [a] = pol.generate([enc], max_new_tokens=12, temperature=0.8, seeds=[3], candidates=[CANDS])
    env = pol.tokenizer("\nobservation: ok\n", add_special_tokens=False)["input_ids"]
    p2 = enc.prompt_ids + a.response_ids + env
    [b] = pol.generate([pol.encode_ids(p2)], max_new_tokens=6, temperature=0.8, seeds=[4])
    t = _traj("m", [Step(prompt_ids=enc.prompt_ids, response_ids=a.response_ids, rollout_logprobs=a.logprobs,
                         policy_version=0, candidates=CANDS),
                    Step(prompt_ids=p2, response_ids=b.response_ids, rollout_logprobs=b.logprobs, policy_version=0)])
    batch = learner.collate(build_multiturn([t], {"m": 1.0}))
    with torch.no_grad():
        lp = learner.logprobs(batch)
    assert torch.allclose(lp.double() * batch.mask, reference(learner, batch, 0.8), atol=1e-5)
    assert torch.allclose(lp * batch.mask, batch.rollout_logp, atol=1e-4)  # == what sampling recorded


class _VocabTensors(TorchDispatchMode):
    """Records the shape and dtype of every op output whose last dimension is the vocabulary
    (except views of the lm_head weight itself, e.g. its transpose)."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.vocab = weight.shape[0]
        self.weight_storage = weight.untyped_storage().data_ptr()
        self.seen: list[tuple[tuple[int, ...], torch.dtype]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.dim() >= 1 and t.shape[-1] == self.vocab \
                    and t.untyped_storage().data_ptr() != self.weight_storage:
                self.seen.append((tuple(t.shape), t.dtype))
        return out


def _measure(learner, samples):
    """(lm_head input shapes, vocab-sized op outputs) during one learner.logprobs call."""
    head_inputs = []
    handle = learner.model.get_output_embeddings().register_forward_hook(
        lambda mod, args, out: head_inputs.append(tuple(args[0].shape)))
    mode = _VocabTensors(learner.model.get_output_embeddings().weight)
    batch = learner.collate(samples)
    try:
        with torch.no_grad(), mode:
            learner.logprobs(batch)
    finally:
        handle.remove()
    return head_inputs, mode.seen, int(batch.mask.sum()), batch.input_ids.shape


def test_vocab_sized_tensors_scale_with_the_response_not_the_prompt(learner):
    short = _samples(learner, ["Click on the button."], CANDS)
    long = _samples(learner, ["Click on the button. " + "Scroll down and click the last link. " * 40], CANDS)
    assert len(long[0].input_ids) > 8 * len(short[0].input_ids)
    for samples in (short, long):
        heads, vocab_outs, n_trained, (_, length) = _measure(learner, samples)
        assert heads == [(1, n_trained, learner.model.config.text_config.hidden_size)], \
            f"lm_head saw {heads}; {n_trained} trained positions of a {length}-token sequence"
        rows = max(int(torch.tensor(shape[:-1]).prod()) for shape, _ in vocab_outs)
        assert rows == n_trained, f"largest vocab-sized tensor has {rows} rows for {n_trained} trained tokens"
        # the candidate mask is an index structure: no (positions x vocab) boolean tensor at all
        assert not [s for s, dt in vocab_outs if dt == torch.bool], vocab_outs
