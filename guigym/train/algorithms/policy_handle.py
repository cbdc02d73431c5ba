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
    def step_logprobs(self, steps: Any, batch_size: int = 8) -> list[list[float]]:
        """Teacher-forced log-probs of each step's response tokens under the current weights, in
        the distribution the rollouts sample from and the learner trains (logits / temperature,
        banned ids and the step's candidate trie masked; :meth:`Learner.logprobs`).

        Args: ``steps`` a sequence of :class:`~guigym.train.data.types.Step`; ``batch_size``
        steps per forward pass. Returns one list per step, of length ``len(step.response_ids)``
        (empty for a step without response tokens). Runs the unwrapped model, never the DDP
        wrapper: plug-ins run on rank 0 only, and a DDP forward there would wait for the others.
        """
        from guigym.train.samples import Sample, Segment

        steps = list(steps)
        out: list[list[float]] = [[] for _ in steps]
        todo = [(i, s) for i, s in enumerate(steps) if len(s.response_ids) and len(s.prompt_ids)]
        for k in range(0, len(todo), max(1, int(batch_size))):
            chunk = todo[k:k + max(1, int(batch_size))]
            samples = []
            for _, s in chunk:
                p, r = len(s.prompt_ids), len(s.response_ids)
                cands = None if s.candidates is None else list(s.candidates)
                samples.append(Sample(input_ids=list(s.prompt_ids) + list(s.response_ids),
                                      loss_mask=[0] * p + [1] * r, rollout_logprobs=[0.0] * (p + r),
                                      advantages=[0.0] * (p + r), segments=[Segment(p, p + r, cands)],
                                      image_refs=list(s.image_refs)))
            batch = self.learner.collate(samples)
            lp = self.learner.logprobs(batch, self.learner.model).float().cpu()  # (B, T), 0 off the mask
            for b, (i, s) in enumerate(chunk):
                p, r = len(s.prompt_ids), len(s.response_ids)
                out[i] = [float(x) for x in lp[b, p - 1:p - 1 + r]]  # position t predicts token t + 1
        return out

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
