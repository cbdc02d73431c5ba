"""Policy-loss registry (plug-in API v2): the term the learner minimises, PPO clip by default.

``POLICY_LOSSES.build(name, algo=AlgorithmConfig, **options)`` gives a callable
``(inputs: PolicyLossInputs) -> (scalar loss, metrics)`` that *replaces* the PPO surrogate
(extra losses are still added on top). The learner calls it once per micro-batch with the
step-wide normalisers, so a loss that divides by ``inputs.norm`` (or ``inputs.step_sequences``)
gives micro-batch sums that add up to the full-batch loss.

* ``ppo_clip`` -- :func:`~guigym.train.algorithms.losses.policy_loss` with the recipe's epsilon,
  epsilon_high, beta/kl_estimator, loss_type and the TIS weight (DeepSeekMath eq. 3, DAPO eq. 10,
  DART eq. 1-2).
* ``webrl_kl_regression`` -- WebRL (Qi et al. 2024) eq. 6, the KL-constrained policy update
  ``L = E[(beta * log(pi_theta(a|s) / pi_ref(a|s)) - A(s, a))^2]`` with the action's log-prob the
  sum over its tokens; mean over the step's sequences. ``beta`` is ``algorithm.beta`` (> 0: it
  needs the reference model). pi_ref is the previous phase's actor (sec. 2.1: "Let the policy
  from the previous phase be denoted as pi_ref"): the loop refreshes the learner's reference
  from the actor every ``phase_iterations`` iterations.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from guigym.core.errors import ConfigError
from guigym.train.algorithms.losses import policy_loss
from guigym.train.algorithms.registry import PluginRegistry

POLICY_LOSSES: PluginRegistry[Any] = PluginRegistry("policy loss")


@dataclass
class PolicyLossInputs:
    """One micro-batch, (B, T) tensors; ``mask`` 1 on trained tokens.

    ``logp`` log pi_theta (with grad); ``old_logp`` pi_train_old; ``advantages`` (B, T);
    ``is_weight`` truncated IS weight or None; ``ref_logp`` reference log-probs or None;
    ``loss_type`` the canonical aggregation mode; ``norm`` the optimizer step's normaliser for it
    (trained tokens for token-mean, ``sequences * max_len`` for seq-mean-token-sum-norm, sequences
    otherwise), summed over micro-batches and ranks; ``step_sequences`` / ``step_tokens`` the
    step's trained sequences and tokens; ``max_len`` the Dr. GRPO constant.
    """

    logp: torch.Tensor
    old_logp: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    loss_type: str
    norm: float
    step_sequences: float
    step_tokens: float
    max_len: int
    is_weight: Optional[torch.Tensor] = None
    ref_logp: Optional[torch.Tensor] = None
    rollout_logp: Optional[torch.Tensor] = None


@POLICY_LOSSES.register("ppo_clip")
class PPOClipLoss:
    """The clipped surrogate of :func:`policy_loss` with the recipe's knobs."""

    needs_ref = False

    def __init__(self, algo: Any) -> None:
        self.algo = algo
        self.needs_ref = algo.beta > 0

    def __call__(self, x: PolicyLossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        a = self.algo
        return policy_loss(x.logp, x.old_logp, x.advantages, x.mask, epsilon=a.epsilon, epsilon_high=a.epsilon_high,
                           loss_type=x.loss_type, is_weight=x.is_weight, ref_logp=x.ref_logp, beta=a.beta,
                           kl_kind=a.kl_estimator, norm=x.norm, max_len=x.max_len)


@POLICY_LOSSES.register("webrl_kl_regression")
class WebRLKLRegressionLoss:
    """WebRL eq. 6: ``(beta * sum_t m_t (logp_t - ref_t) - A)^2`` per sequence, mean over the
    optimizer step's sequences (``step_sequences``). ``A`` is the sequence's advantage (its first
    trained token's; step-wise samples carry one advantage).

    ``pi_ref`` is the actor of the previous phase (WebRL sec. 2.1, "Let the policy from the
    previous phase be denoted as pi_ref, and the current policy being optimized as pi_theta"):
    at iteration ``k * phase_iterations`` (k >= 1) the loop makes the learner's reference the
    actor as it stands before that iteration's update (:meth:`Learner.refresh_reference`), so
    phase 0 is anchored to the initial weights and phase k to the actor that finished phase k-1.
    Options: ``phase_iterations`` (iterations per phase, as ``webrl_replay`` and
    ``webrl_curriculum``; default 1).
    """

    needs_ref = True

    def __init__(self, algo: Any, phase_iterations: int = 1) -> None:
        if not algo.beta > 0:
            raise ConfigError("policy_loss webrl_kl_regression needs algorithm.beta > 0 (WebRL's KL coefficient)")
        if not isinstance(phase_iterations, int) or isinstance(phase_iterations, bool) or phase_iterations < 1:
            raise ConfigError(f"webrl_kl_regression.phase_iterations must be an int >= 1, got {phase_iterations!r}")
        self.beta = float(algo.beta)
        #: the loop refreshes the reference from the actor every this many iterations
        self.reference_every = int(phase_iterations)

    def __call__(self, x: PolicyLossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        if x.ref_logp is None:
            raise ValueError("webrl_kl_regression needs the reference model's log-probs")
        m = x.mask.float()
        log_ratio = ((x.logp.float() - x.ref_logp.detach().float()) * m).sum(1)  # (B,)
        first = m.argmax(dim=1)
        adv = x.advantages.detach().float().gather(1, first[:, None])[:, 0]
        rows = (m.sum(1) > 0).float()
        per_seq = (self.beta * log_ratio - adv) ** 2 * rows
        loss = per_seq.sum() / max(x.step_sequences, 1.0)
        n = float(rows.sum().clamp(min=1.0))
        return loss, {"pg_loss": float(loss.detach()),
                      "log_ratio_ref_mean": float((log_ratio.detach() * rows).sum() / n)}


def build_policy_loss(name: str, algo: Any, options: Optional[dict[str, Any]] = None) -> Any:
    """``POLICY_LOSSES.build(name, algo=algo, **options)`` with ConfigError naming the field."""
    try:
        return POLICY_LOSSES.build(name, algo=algo, **(options or {}))
    except ConfigError as e:
        raise ConfigError(f"algorithm.policy_loss: {e}") from None
