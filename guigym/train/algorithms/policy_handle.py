"""The policy as plug-ins see it (``ctx.policy``): read-only questions about the current weights.

Plug-ins must not train or swap weights; they may ask what the current policy thinks of a stored
step (e.g. the top-entropy filter recomputes the entropy of an expert step that was never
sampled, so it has no recorded ``Step.entropy``).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch


class PolicyHandle:
    """Read-only view of the learner's current policy.

    Args: ``learner`` (:class:`~guigym.train.learner.Learner`), ``version`` the policy version of
    its weights, ``image_loader`` blob ref -> image for steps with screenshots.
    """

    def __init__(self, learner: Any, version: int = 0, image_loader: Optional[Callable[[str], Any]] = None) -> None:
        self.learner = learner
        self.version = version
        self.image_loader = image_loader

    @torch.no_grad()
    def step_entropy(self, step: Any) -> float:
        """Mean over the step's response tokens of the entropy (nats) of the policy's next-token
        distribution, with the masks of sampling (banned ids; the step's candidate trie), at
        temperature 1 -- the quantity ``Step.entropy`` records at sampling time."""
        pol = self.learner.policy
        p, r = len(step.prompt_ids), len(step.response_ids)
        if r == 0:
            return 0.0
        ids = torch.tensor([list(step.prompt_ids) + list(step.response_ids)], dtype=torch.long)
        pv = grid = None
        if step.image_refs:
            if self.image_loader is None:
                raise ValueError("step has image refs but the policy handle has no image_loader")
            pv, grid = pol.images_to_tensors([self.image_loader(ref) for ref in step.image_refs])
        kwargs = pol._vision_kwargs(ids, [pv], [grid])
        dev = self.learner.device
        logits = self.learner.model(input_ids=ids.to(dev), attention_mask=torch.ones_like(ids).to(dev),
                                    use_cache=False, **kwargs).logits[0]
        rows = logits[p - 1:p + r - 1].float()
        banned = torch.zeros(rows.shape[-1], dtype=torch.bool)
        banned[pol.banned.cpu()] = True
        rows = rows.masked_fill(banned.to(rows.device), float("-inf"))
        cons = pol.constraint(step.candidates)
        if cons is not None:
            rows = pol._constrain_rows(rows, cons, list(step.response_ids))
        logp = torch.log_softmax(rows, dim=-1)
        plogp = torch.where(torch.isfinite(logp), logp.exp() * logp, torch.zeros_like(logp))
        return float(-plogp.sum(-1).mean())
