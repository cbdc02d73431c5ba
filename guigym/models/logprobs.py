"""Log-probs of sampled tokens without (tokens x vocab) tensors for the prompt.

Two pieces shared by :class:`~guigym.models.hf_policy.HFPolicy` and the learner:

* :class:`ResponseRows` -- while :meth:`ResponseRows.select` is active, the model's output
  projection (``lm_head``) sees only the hidden states at the given (row, position) pairs, so a
  forward pass over a (B, L) batch returns logits of shape (1, N, V) for the N positions that
  predict trained tokens instead of (B, L, V). The trunk still runs over the whole sequence (the
  response attends to the prompt); only the vocabulary projection is restricted. This is what
  transformers' ``logits_to_keep`` does for one position set shared by every row; here each row
  keeps its own positions (right-padded rows with different prompt lengths). Implemented as a
  forward pre-hook on the output embedding, so the model's own ``forward`` (and DDP/FSDP hooks
  on it) run unchanged and ``state_dict`` keys do not change.
* :class:`SparseAllowed` + :func:`masked_logprobs` -- the candidate mask of constrained decoding
  as an index structure (``row``, ``tok``: one entry per allowed (position, token) pair), applied
  by gather + segment log-sum-exp instead of a dense (N, V) boolean mask.

Sampling distribution (what :func:`masked_logprobs` returns the log-prob under; the same one
:class:`~guigym.models.hf_policy._GumbelSampler` draws from)::

    z_v   = logit_v / T                      (T = temperature > 0)
    z_v   = -inf  for banned ids v           (vision markers, ids beyond the tokenizer)
    S     = candidate-trie children of the prefix   (constrained rows)  |  all ids  (free rows)
    log p(v) = z_v - logsumexp_{u in S} z_u

i.e. a softmax of tempered, masked logits renormalised over the allowed set. No top-k / top-p /
repetition penalty: those are refused for training (``guigym.train.config.RolloutConfig``).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional

import torch


class ResponseRows:
    """Restrict the output projection of ``model`` to selected hidden states (see module doc).

    ``model``: anything with ``get_output_embeddings()`` (HF ``PreTrainedModel``, peft wrappers).
    The hook stays registered for the object's lifetime and is a no-op outside :meth:`select`.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        head = model.get_output_embeddings()
        if head is None:
            raise TypeError(f"{type(model).__name__} has no output embedding (lm_head) to restrict")
        self.head = head
        self._sel: Optional[tuple[torch.Tensor, torch.Tensor]] = None
        self.handle = head.register_forward_pre_hook(self._hook)

    def _hook(self, module: torch.nn.Module, args: tuple) -> Optional[tuple]:
        if self._sel is None:
            return None
        rows, cols = self._sel
        hidden = args[0]  # (B, L, H), or already sliced by logits_to_keep
        if hidden.dim() != 3:
            raise RuntimeError(f"ResponseRows expects (B, L, H) hidden states at the output projection, got "
                               f"{tuple(hidden.shape)}")
        picked = hidden[rows.to(hidden.device), cols.to(hidden.device)]  # (N, H)
        return (picked.unsqueeze(0),) + tuple(args[1:])

    @contextmanager
    def select(self, rows: torch.Tensor, cols: torch.Tensor) -> Iterator[None]:
        """Within the block, a forward of the model returns logits (1, N, V) for hidden states
        ``hidden[rows[i], cols[i]]`` (rows, cols: (N,) long)."""
        prev = self._sel
        self._sel = (rows, cols)
        try:
            yield
        finally:
            self._sel = prev

    def remove(self) -> None:
        self.handle.remove()


@dataclass
class SparseAllowed:
    """Allowed next tokens of constrained positions, without a dense (N, V) mask.

    ``constrained``: (N,) bool, rows whose support is their candidate set (other rows: every
    non-banned id). ``row``, ``tok``: (K,) long, one entry per allowed (row, token id) pair of a
    constrained row (K = total allowed ids over those rows, a few per row).
    """

    constrained: torch.Tensor
    row: torch.Tensor
    tok: torch.Tensor

    @classmethod
    def build(cls, n: int, allowed: dict[int, list[int]]) -> "SparseAllowed":
        """From ``{row index: allowed token ids}`` for the constrained rows among ``n`` rows."""
        constrained = torch.zeros(n, dtype=torch.bool)
        rows: list[int] = []
        toks: list[int] = []
        for r, ids in allowed.items():
            constrained[r] = True
            rows += [r] * len(ids)
            toks += list(ids)
        return cls(constrained, torch.tensor(rows, dtype=torch.long), torch.tensor(toks, dtype=torch.long))


def masked_logprobs(logits: torch.Tensor, targets: torch.Tensor, banned: torch.Tensor,
                    allowed: Optional[SparseAllowed] = None, temperature: float = 1.0) -> torch.Tensor:
    """Log-probs (N,) of ``targets`` (N,) under the sampling distribution of the module doc.

    ``logits``: (N, V) raw next-token logits (any float dtype; computed in float32).
    ``banned``: (n_banned,) token ids masked to -inf. ``allowed``: sparse candidate sets or None.
    ``temperature`` > 0. Differentiable in ``logits``.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for log-probs of a sampling distribution, got {temperature}")
    z = logits.float()
    if temperature != 1.0:
        z = z / temperature
    z = z.index_fill(-1, banned.to(z.device), float("-inf"))
    lse = torch.logsumexp(z, dim=-1)  # (N,) over every non-banned id
    if allowed is not None and allowed.row.numel():
        row, tok = allowed.row.to(z.device), allowed.tok.to(z.device)
        vals = z[row, tok]  # (K,)
        # segment log-sum-exp over each constrained row's allowed ids; the shift m is a constant
        # for the gradient (any finite shift gives the same value)
        m = torch.full_like(lse, float("-inf")).scatter_reduce(0, row, vals.detach(), "amax", include_self=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        s = torch.zeros_like(lse).index_add(0, row, (vals - m[row]).exp())
        lse = torch.where(allowed.constrained.to(z.device), m + s.log(), lse)
    return z.gather(-1, targets[:, None].to(z.device))[:, 0] - lse
