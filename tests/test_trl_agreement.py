"""Differential test against TRL (issue 32 item 7): on the same tiny model, token ids,
advantages and old log-probs, guigym's policy loss and its gradient equal what TRL's
``GRPOTrainer.compute_loss`` computes, for every TRL ``loss_type`` that guigym maps
(``resolve_loss_type``: grpo, bnpo, dapo, dr_grpo).

What is driven on the TRL side: a real ``trl.GRPOTrainer`` (TRL 1.16.0) built on a deep copy of
the tiny model (its ``__init__`` patches the model with TRL's fused LM head, temperature 1), and
its ``compute_loss(model, inputs)`` with the generation-batch dict TRL's own
``_generate_and_score_completions`` produces (``prompt_ids/mask``, ``completion_ids/mask``,
``tool_mask``, ``advantages``, ``old_per_token_logps``, ``ref_per_token_logps``,
``num_items_in_batch``). ``trainer.loss_type`` / ``beta`` are set per case: ``compute_loss`` reads
only those attributes (``__init__`` merely validates them). ``current_gradient_accumulation_steps``
(set by ``Trainer.train``) is 1: one micro-batch = one optimizer step on both sides.

Deliberate differences, kept out of the comparison (see docs/training.md, "Agreement with TRL"):
guigym's log-probs are over the sampling distribution with banned ids (vision placeholders, padded
embedding rows) removed -- the test empties ``policy.banned`` so both score the full softmax, and
checks that the default really differs; guigym's KL term is DeepSeekMath eq. 4 (k3), TRL 1.16's
default multiplies it by the importance ratio (``use_bias_correction_kl``, DeepSeek-V3.2), so the KL
cases run TRL with that flag off and check that it on differs; rows without a trained token leave
guigym's sequence means.
"""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
INSTALL = "pip install trl==1.16.0  (or: pip install -e '.[trl]')"
try:
    from trl import GRPOConfig, GRPOTrainer
except Exception as e:  # noqa: BLE001 -- any import failure means "TRL not usable here"
    pytest.skip(f"trl is not importable ({type(e).__name__}: {e}); install it with: {INSTALL}",
                allow_module_level=True)

from guigym.train.algorithms.losses import resolve_loss_type  # noqa: E402
from guigym.train.algorithms.policy_losses import PolicyLossInputs  # noqa: E402
from guigym.train.config import AlgorithmConfig, OptimConfig  # noqa: E402
from guigym.train.samples import Sample  # noqa: E402

# transformers' TrainingArguments warns about its own renamed field while TRL builds GRPOConfig
pytestmark = pytest.mark.filterwarnings("ignore:`gradient_checkpointing` is deprecated:FutureWarning")
PROMPT = 7
COMP_LENS = (5, 3, 8, 2)  # response lengths; the batch's completion width is 8
MAX_COMPLETION = 10  # TRL max_completion_length = guigym max_len_norm (the Dr. GRPO constant)
ADV = (1.0, -0.5, 0.9, -1.2)  # not summing to 0: the on-policy grpo loss is -mean(A)
ENV_SPAN = (2, 5, 2)  # row 2's completion tokens 5..6 are env tokens (TRL tool_mask 0; guigym loss_mask 0)
EPS, EPS_HIGH = 0.2, 0.28
TOL = 1e-5


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread):
    """One intra-op torch thread for this module (tests/conftest.py says why)."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(policy, TRL trainer, TRL model, guigym samples, TRL inputs) on one tiny model."""
    from datasets import Dataset

    from guigym.models.hf_policy import HFPolicy
    from guigym.models.tiny import build

    path = build(tmp_path_factory.mktemp("models") / "tiny", seed=0)
    policy = HFPolicy(path)
    policy.default_banned = policy.banned  # kept for the test of the deliberate difference
    # both sides score the full softmax (guigym's banned-id renormalisation is a deliberate difference)
    policy.banned = torch.empty(0, dtype=torch.long)
    trl_model = copy.deepcopy(policy.model)
    args = GRPOConfig(output_dir=str(tmp_path_factory.mktemp("trl")), per_device_train_batch_size=len(ADV),
                      num_generations=2, max_completion_length=MAX_COMPLETION, epsilon=EPS, epsilon_high=EPS_HIGH,
                      beta=0.0, temperature=1.0, report_to=[], use_cpu=True, bf16=False, save_strategy="no")
    trainer = GRPOTrainer(model=trl_model, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                          args=args, train_dataset=Dataset.from_dict({"prompt": ["a"] * len(ADV)}),
                          processing_class=policy.tokenizer)
    assert trainer.model is trl_model and args.steps_per_generation == 1
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train(); one micro-batch per step
    trl_model.train()  # TRL trains in train mode (dropout is 0 in the tiny config, as guigym's eval mode)

    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, 600, (PROMPT,), generator=g).tolist()
    width = max(COMP_LENS)
    comp_ids = torch.full((len(ADV), width), policy.pad_id, dtype=torch.long)
    comp_mask = torch.zeros((len(ADV), width), dtype=torch.long)
    tool_mask = torch.ones((len(ADV), width), dtype=torch.long)
    row, lo, n = ENV_SPAN
    tool_mask[row, lo:lo + n] = 0
    samples = []
    for b, (n_tok, a) in enumerate(zip(COMP_LENS, ADV)):
        comp = torch.randint(3, 600, (n_tok,), generator=g).tolist()
        comp_ids[b, :n_tok] = torch.tensor(comp)
        comp_mask[b, :n_tok] = 1
        trained = tool_mask[b, :n_tok].tolist()
        samples.append(Sample(input_ids=prompt + comp, loss_mask=[0] * PROMPT + trained,
                              rollout_logprobs=[0.0] * (PROMPT + n_tok), advantages=[0.0] * PROMPT + [a] * n_tok,
                              segments=[], traj_id=f"t{b}"))
    inputs = {"prompt_ids": torch.tensor([prompt] * len(ADV)), "prompt_mask": torch.ones((len(ADV), PROMPT),
                                                                                         dtype=torch.long),
              "completion_ids": comp_ids, "completion_mask": comp_mask, "tool_mask": tool_mask,
              "advantages": torch.tensor(ADV),
              # DAPO's normaliser: trained tokens of the whole generation batch
              "num_items_in_batch": (comp_mask * tool_mask).sum().float()}
    return policy, trainer, trl_model, samples, inputs


def _learner(policy, trl_loss_type: str, beta: float = 0.0):
    from guigym.train.learner import Learner

    algo = AlgorithmConfig(loss_type=resolve_loss_type(trl_loss_type), epsilon=EPS, epsilon_high=EPS_HIGH,
                           beta=beta, tis_cap=None, per_device_train_batch_size=len(ADV))
    return Learner(policy, algo, OptimConfig(learning_rate=1e-2, max_grad_norm=None),
                   max_len_norm=MAX_COMPLETION)


def _to_completion(full: torch.Tensor, width: int) -> torch.Tensor:
    """guigym's (B, L-1) per-position tensor -> TRL's (B, C) completion columns (position t
    predicts token t + 1, so completion token j sits at position PROMPT - 1 + j)."""
    out = torch.zeros((full.shape[0], width), dtype=full.dtype)
    cols = full[:, PROMPT - 1:PROMPT - 1 + width]
    out[:, :cols.shape[1]] = cols
    return out


def _trl_loss_and_grads(trainer, trl_model, inputs, loss_type: str, beta: float = 0.0,
                        kl_bias_correction: bool = False):
    """TRL's ``compute_loss`` and the gradients it gives. ``kl_bias_correction`` is TRL's
    ``use_bias_correction_kl`` (default True in TRL 1.16: KL x ratio, DeepSeek-V3.2); guigym's KL
    is DeepSeekMath eq. 4 without it, a deliberate difference."""
    trainer.loss_type, trainer.beta = loss_type, beta
    trainer.args.use_bias_correction_kl = kl_bias_correction
    trl_model.zero_grad(set_to_none=True)
    loss = trainer.compute_loss(trl_model, dict(inputs))
    loss.backward()
    return float(loss.detach()), {k: p.grad.clone() for k, p in trl_model.named_parameters() if p.grad is not None}


def _assert_same_grads(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> None:
    assert set(ours) == set(theirs)  # the same parameters receive a gradient (the vision tower none)
    assert len(ours) > 10
    total = sum(float(g.abs().sum()) for g in theirs.values())
    assert total > 1e-2, "degenerate case: TRL's gradient is ~0"
    for k, g in theirs.items():
        assert torch.allclose(ours[k], g, atol=TOL, rtol=0), (k, float((ours[k] - g).abs().max()))


def test_logprobs_agree_and_banned_ids_are_a_deliberate_difference(setup):
    policy, trainer, trl_model, samples, inputs = setup
    learner = _learner(policy, "grpo")
    batch = learner.collate(samples)
    with torch.no_grad():
        ours = _to_completion(learner.logprobs(batch), inputs["completion_ids"].shape[1])
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
        att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
        theirs, _, _ = trainer._get_per_token_logps_and_entropies(trl_model, ids, att, ids.shape[1] - PROMPT)
    m = (inputs["completion_mask"] * inputs["tool_mask"]).bool()
    assert torch.allclose(ours[m], theirs[m], atol=TOL, rtol=0), float((ours[m] - theirs[m]).abs().max())
    # with guigym's default banned ids the distribution is renormalised: log-probs are higher
    banned = policy.banned
    try:
        policy.banned = policy.default_banned
        assert policy.banned.numel() > 0
        with torch.no_grad():
            renorm = _to_completion(learner.logprobs(batch), inputs["completion_ids"].shape[1])
        assert (renorm[m] - theirs[m]).min() > 1e-4
    finally:
        policy.banned = banned


@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step\\(\\)` has been overridden")
@pytest.mark.parametrize("trl_loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
def test_learner_update_matches_trl_on_policy(setup, trl_loss_type):
    """Learner.update end to end (num_iterations 1: pi_old = pi_theta, TRL's
    ``old_per_token_logps = per_token_logps.detach()`` path): loss and every parameter's
    gradient at the optimizer step equal TRL's."""
    policy, trainer, trl_model, samples, inputs = setup
    learner = _learner(policy, trl_loss_type)
    captured: dict[str, torch.Tensor] = {}

    def capture_instead_of_step(*_a, **_k):  # keep the weights: the same model serves every case
        captured.update({k: p.grad.clone() for k, p in learner.model.named_parameters() if p.grad is not None})

    learner.optimizer.step = capture_instead_of_step
    metrics = learner.update(samples)
    assert metrics["optimizer_steps"] == 1 and metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    loss, grads = _trl_loss_and_grads(trainer, trl_model, inputs, trl_loss_type)
    assert abs(loss) > 1e-3
    assert metrics["loss"] == pytest.approx(loss, abs=TOL)
    _assert_same_grads(captured, grads)


@pytest.mark.parametrize("trl_loss_type,beta", [("grpo", 0.0), ("bnpo", 0.0), ("dapo", 0.0), ("dr_grpo", 0.0),
                                                ("grpo", 0.04), ("dapo", 0.04)])
def test_clipped_loss_and_kl_match_trl_off_policy(setup, trl_loss_type, beta):
    """Stale old log-probs (both clip sides active) and a k3 KL to a reference: the learner's
    log-probs through its policy loss (as ``Learner.update`` calls it, with the step normaliser
    ``Learner._norm``) give TRL's loss and gradients."""
    policy, trainer, trl_model, samples, inputs = setup
    learner = _learner(policy, trl_loss_type, beta=beta)
    batch = learner.collate(samples)
    width = inputs["completion_ids"].shape[1]
    with torch.no_grad():
        current = learner.logprobs(batch)
    g = torch.Generator().manual_seed(1)
    old = (current + 0.4 * torch.randn(current.shape, generator=g)) * batch.mask
    ref = (current + 0.3 * torch.randn(current.shape, generator=g)) * batch.mask
    ratio = torch.exp(current - old)[batch.mask.bool()]
    assert (ratio < 1 - EPS).any() and (ratio > 1 + EPS_HIGH).any(), "both clip sides must be exercised"

    learner.model.zero_grad(set_to_none=True)
    logp = learner.logprobs(batch)
    loss, _ = learner._loss_fn()(PolicyLossInputs(
        logp=logp, old_logp=old, advantages=batch.adv, mask=batch.mask, loss_type=learner.loss_type,
        norm=learner._norm(samples), step_sequences=float(len(samples)),
        step_tokens=float(sum(s.num_loss_tokens for s in samples)), max_len=learner.max_len_norm,
        ref_logp=ref if beta > 0 else None))
    loss.backward()
    ours = {k: p.grad.clone() for k, p in learner.model.named_parameters() if p.grad is not None}

    trl_inputs = dict(inputs, old_per_token_logps=_to_completion(old, width))
    if beta > 0:
        trl_inputs["ref_per_token_logps"] = _to_completion(ref, width)
    theirs_loss, theirs = _trl_loss_and_grads(trainer, trl_model, trl_inputs, trl_loss_type, beta)
    assert float(loss.detach()) == pytest.approx(theirs_loss, abs=TOL)
    _assert_same_grads(ours, theirs)
    if beta > 0:  # TRL's default KL x ratio (DeepSeek-V3.2) is not guigym's KL: the comparison sees it
        _, corrected = _trl_loss_and_grads(trainer, trl_model, trl_inputs, trl_loss_type, beta,
                                           kl_bias_correction=True)
        assert max(float((corrected[k] - g).abs().max()) for k, g in theirs.items()) > 10 * TOL
