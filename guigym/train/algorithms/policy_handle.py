"""The policy as plug-ins see it (``ctx.policy``): read-only questions about the current weights.

Plug-ins must not train or swap weights; they may ask what the current policy thinks of a stored
step (e.g. the top-entropy filter recomputes the entropy of an expert step that was never
sampled, so it has no recorded ``Step.entropy``).

Plug-ins run on rank 0 only. When the learner's weights are FSDP shards, a forward of the
learner's model is a collective the other ranks would never join, so the handle reads a full,
unsharded copy of the same weights instead (``reader``: the in-process rollout engine's model,
which :meth:`guigym.train.loop.Trainer.push_weights` keeps at the learner's version).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from guigym.core.errors import ConfigError


def masked_entropy(logits: torch.Tensor, banned: torch.Tensor, allowed: Any = None) -> torch.Tensor:
    """Entropy (nats) per row of the temperature-1 sampling distribution.

    ``logits``: (R, V) next-token logits (any float dtype; computed in float32). ``banned``:
    token ids masked to -inf. ``allowed``: a :class:`~guigym.train.policy.logprobs.SparseAllowed`
    (constrained rows renormalise over their candidate ids, an index list, not a dense mask) or
    None. Returns (R,) ``H = -sum_v p_v log p_v`` over each row's support, ``p = softmax(z)``
    restricted to that support (the distribution of :mod:`guigym.train.policy.logprobs`).
    """
    z = logits.float().index_fill(-1, banned.to(logits.device), float("-inf"))
    logp = torch.log_softmax(z, dim=-1)
    ent = -torch.where(torch.isfinite(logp), logp.exp() * logp, torch.zeros_like(logp)).sum(-1)  # (R,)
    if allowed is None or not allowed.row.numel():
        return ent
    row, tok = allowed.row.to(z.device), allowed.tok.to(z.device)
    vals = z[row, tok]  # (K,) logits of the allowed ids of constrained rows
    m = torch.full_like(ent, float("-inf")).scatter_reduce(0, row, vals, "amax", include_self=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    lse = m + torch.zeros_like(ent).index_add(0, row, (vals - m[row]).exp()).log()  # (R,) segment log-sum-exp
    lp = vals - lse[row]
    plogp = torch.where(torch.isfinite(lp), lp.exp() * lp, torch.zeros_like(lp))
    ent_c = -torch.zeros_like(ent).index_add(0, row, plogp)
    return torch.where(allowed.constrained.to(z.device), ent_c, ent)


class PolicyHandle:
    """Read-only view of the learner's current policy.

    Args: ``learner`` (:class:`~guigym.train.learner.Learner`), ``version`` the policy version of
    its weights, ``image_loader`` blob ref -> image for steps with screenshots, ``reader`` an
    optional unsharded model holding the same weights, read instead of ``learner.model`` (the
    loop passes the HF rollout engine's model when the learner is FSDP-sharded).
    """

    def __init__(self, learner: Any, version: int = 0, image_loader: Optional[Callable[[str], Any]] = None,
                 reader: Optional[torch.nn.Module] = None) -> None:
        self.learner = learner
        self.version = version
        self.image_loader = image_loader
        self.reader = reader

    def _model(self) -> torch.nn.Module:
        if self.reader is not None:
            return self.reader
        if getattr(self.learner, "strategy", None) == "fsdp":
            raise ConfigError(
                "distributed.strategy: fsdp shards the learner's weights, so rank 0 cannot run the policy alone to "
                "recompute a step's entropy (algorithm.step_filter top_entropy with missing: recompute, on a step "
                "without a recorded entropy); use rollout.engine: hf (its full copy is read), top_entropy.missing: "
                "raise, or distributed.strategy: ddp")
        return self.learner.model

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
        temperature 1 -- the quantity ``Step.entropy`` records at sampling time.

        Only the R response positions reach the output projection (R x V logits, not L x V), the
        forward runs under the learner's ``mixed_precision`` autocast, and the candidate sets are
        index lists (:class:`~guigym.train.policy.logprobs.SparseAllowed`)."""
        from guigym.train.policy.logprobs import ResponseRows, SparseAllowed

        pol = self.learner.policy
        p, r = len(step.prompt_ids), len(step.response_ids)
        if r == 0:
            return 0.0
        response = list(step.response_ids)
        ids = torch.tensor([list(step.prompt_ids) + response], dtype=torch.long)
        pv = grid = None
        if step.image_refs:
            if self.image_loader is None:
                raise ValueError("step has image refs but the policy handle has no image_loader")
            pv, grid = pol.images_to_tensors([self.image_loader(ref) for ref in step.image_refs])
        kwargs = pol._vision_kwargs(ids, [pv], [grid])
        allowed = None
        cons = pol.constraint(step.candidates)
        if cons is not None:
            sets: dict[int, list[int]] = {}
            for t in range(r):
                ok = cons.allowed(response[:t])
                if response[t] not in ok:
                    raise ValueError(f"response_ids[{t}]={response[t]} is not allowed by the step's candidates "
                                     f"after {response[:t]}; was this reply sampled under the same candidates?")
                sets[t] = list(ok)
            allowed = SparseAllowed.build(r, sets)
        model = self._model()
        own = model is getattr(self.learner, "model", None) and getattr(self.learner, "_rows", None) is not None
        rows = self.learner._rows if own else ResponseRows(model)
        dev = self.learner.device
        positions = torch.arange(p - 1, p + r - 1)  # position t predicts token t + 1
        try:
            with rows.select(torch.zeros(r, dtype=torch.long), positions), \
                    torch.autocast(dev.type, dtype=torch.bfloat16,
                                   enabled=getattr(self.learner, "mixed_precision", "no") == "bf16"):
                logits = model(input_ids=ids.to(dev), attention_mask=torch.ones_like(ids).to(dev),
                               use_cache=False, **kwargs).logits[0]  # (R, V)
        finally:
            if not own:
                rows.remove()
        return float(masked_entropy(logits, pol.banned, allowed).mean())
