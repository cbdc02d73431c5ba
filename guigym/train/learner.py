"""The learner: recompute log-probs, PPO-clip / GRPO loss, accumulate, clip, AdamW; LoRA; DDP.

One :meth:`Learner.update` per training iteration (shapes: N samples from
:mod:`guigym.train.samples`, each a token sequence of length L_i):

1. ``pi_train_old``: the trainer's log-probs of every sampled token under the current weights
   (before the update), recomputed by teacher forcing with the same masks as sampling (vision
   tokens banned; constrained decoding's candidate trie per sampled span).
2. Truncated importance weight ``w = min(pi_train_old / pi_rollout, C)`` per token (DART eq. 2),
   from the rollout engine's recorded log-probs. Exactly 1 when the two agree (and C >= 1).
3. Optional reference log-probs (``beta > 0``): a frozen copy of the initial weights, or the
   base model with adapters disabled under LoRA; :meth:`Learner.refresh_reference` replaces it
   with the current actor (WebRL's reference is the previous phase's actor).
4. For ``num_iterations`` epochs, for each optimizer step's slice of the batch (TRL semantics:
   ``per_device_train_batch_size * gradient_accumulation_steps * world_size`` samples per step):
   per micro-batch ``loss = policy_loss(logp, pi_train_old, A, mask, epsilon, epsilon_high,
   loss_type, is_weight=w, ref_logp, beta)`` normalised by the token (or sequence) count of the
   whole optimizer step across all ranks (T2's ``norm``), so that accumulation and data
   parallelism give exactly the gradient of the full batch; backward; then clip the global grad
   norm (``max_grad_norm``) and step AdamW.

Data parallel: with ``torch.distributed`` initialised (torchrun; gloo on CPU, NCCL on GPUs), the
model is wrapped in DDP; every rank gets the same global batch list and takes the samples
``step_samples[rank::world]`` of each optimizer step. DDP averages gradients over ranks, so each
rank multiplies its loss by ``world_size`` (the normaliser is already global). Micro-batches
except the last of a step run under ``no_sync``; a rank without samples in a step runs one
zero-weight micro-batch so the all-reduce still happens. ``strategy="fsdp"`` (or ``"auto"``
without LoRA) shards the model with torch FSDP2 instead (:mod:`guigym.train.parallel`): same
sample split and gradient averaging; gradients are reduce-scattered every micro-batch, so every
rank runs the same number of micro-batches per step (the rank with fewer samples pads with
zero-weight ones; :meth:`Learner._micro_counts`);
:meth:`Learner.trainable_state`, :meth:`Learner.optimizer_state` and :meth:`Learner.save_pretrained`
become collectives that gather full tensors on rank 0.

Precision: trained parameters must be float32 (master weights; AdamW moments follow them);
``mixed_precision="bf16"`` runs every forward under ``torch.autocast(bfloat16)``. Log-probs are of
the sampling distribution at ``temperature`` (:mod:`guigym.train.policy.logprobs`), with the
vocabulary projection applied only at the trained positions and the candidate sets applied as
index lists.
"""
from __future__ import annotations

import copy
import math
import os
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch

from guigym.core.errors import ConfigError
from guigym.train.algorithms.losses import resolve_loss_type, truncated_is_weight
from guigym.train.config import AlgorithmConfig, LoraConfig, OptimConfig
from guigym.train.parallel import (apply_fsdp2, full_model_state, full_optimizer_state, load_full_model_state,
                                   load_full_optimizer_state, resolve_strategy)
from guigym.train.policy.logprobs import ResponseRows, SparseAllowed, masked_logprobs
from guigym.train.samples import Sample

ImageLoader = Callable[[str], Any]


def dist_info() -> tuple[int, int]:
    """(rank, world_size); (0, 1) without an initialised process group."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _checkpointing(model: torch.nn.Module) -> bool:
    """Whether activation (gradient) checkpointing is on (transformers 5 renamed the flag)."""
    if hasattr(model, "is_activation_checkpointing"):
        return bool(model.is_activation_checkpointing)
    return bool(getattr(model, "is_gradient_checkpointing", False))


def _train_mode_without_dropout(model: torch.nn.Module) -> None:
    """``model.train()`` with every dropout probability set to 0 (attention dropout too)."""
    model.train()
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        for name in ("attention_dropout", "dropout"):
            if isinstance(getattr(m, name, None), float):
                setattr(m, name, 0.0)


def lr_lambda(kind: str, warmup: int, total: int) -> Callable[[int], float]:
    """Multiplier of the peak LR at scheduler step s (transformers' constant/linear/cosine with warm-up)."""

    def f(s: int) -> float:
        if warmup and s < warmup:
            return (s + 1) / (warmup + 1)
        if kind == "constant":
            return 1.0
        frac = min(1.0, (s - warmup) / max(1, total - warmup))
        return max(0.0, 1.0 - frac) if kind == "linear" else 0.5 * (1.0 + math.cos(math.pi * frac))

    return f


@dataclass
class _Batch:
    """A right-padded micro-batch. All (B, T) with T = max L - 1 (position t predicts token t+1)."""

    input_ids: torch.Tensor  # (B, L)
    attention: torch.Tensor  # (B, L)
    mask: torch.Tensor  # (B, T) 1 on trained tokens
    rollout_logp: torch.Tensor  # (B, T)
    adv: torch.Tensor  # (B, T)
    samples: list[Sample]


class Learner:
    """Owns the trainable model, the optimizer and the LR scheduler.

    Args:
        policy: an :class:`~guigym.train.policy.hf_policy.HFPolicy` whose ``model`` is trained in place
            (its tokenizer, banned ids and vision helpers are shared with rollout).
        algo, optim: config sections. lora: optional adapters. total_updates: scheduler horizon
            (scheduler steps = iterations). image_loader: ref -> image for samples with image refs.
    """

    def __init__(self, policy: Any, algo: AlgorithmConfig, optim: OptimConfig, lora: Optional[LoraConfig] = None,
                 total_updates: int = 1, image_loader: Optional[ImageLoader] = None, max_len_norm: int = 32,
                 extra_losses: Sequence[Callable[..., Any]] = (), mixed_precision: str = "no",
                 temperature: float = 1.0, strategy: str = "ddp") -> None:
        self.policy = policy
        self.algo = algo
        self.optim_cfg = optim
        self.loss_type = resolve_loss_type(algo.loss_type)
        self.image_loader = image_loader
        self.max_len_norm = max_len_norm
        self.extra_losses = list(extra_losses)
        self.rank, self.world = dist_info()
        self.device = policy.device
        if mixed_precision not in ("no", "bf16"):
            raise ConfigError(f"model.mixed_precision: {mixed_precision!r} is not one of no, bf16")
        self.mixed_precision = mixed_precision
        if not temperature > 0:
            raise ConfigError(f"rollout.temperature: {temperature} has no sampling distribution to train at (> 0 needed)")
        #: T of the sampling distribution the rollouts recorded log-probs under; recomputation and
        #: the loss use logits / T (TRL GRPOTrainer divides logits by its `temperature` too)
        self.temperature = float(temperature)
        model = policy.model
        # no dropout: the trained distribution must be the sampled one. Gradient checkpointing in
        # transformers only runs in train mode, so then train mode with every dropout set to 0.
        if _checkpointing(model):
            _train_mode_without_dropout(model)
        else:
            model.eval()
        self.lora = bool(lora and lora.enabled)
        self.strategy = resolve_strategy(strategy, self.lora, self.world)
        if self.lora:
            from peft import LoraConfig as PeftLoraConfig, get_peft_model

            checkpointing = _checkpointing(model)
            model = get_peft_model(model, PeftLoraConfig(r=lora.r, lora_alpha=lora.lora_alpha,
                                                         lora_dropout=lora.lora_dropout,
                                                         target_modules=list(lora.target_modules)))
            if checkpointing:
                model.enable_input_require_grads()  # checkpointed blocks need a grad path from the inputs
                _train_mode_without_dropout(model)
            else:
                model.eval()
        low = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()
                      if p.requires_grad and p.dtype != torch.float32})
        if low:
            raise ConfigError(
                f"model.dtype: the trained parameters are {', '.join(low)}; AdamW would update them in that dtype, "
                f"where an update of 1e-6 rounds away (bfloat16(w + 1e-6) == w for |w| >= 2**-11). Load float32 "
                f"master weights (model.dtype: float32) and compute in bf16 (model.mixed_precision: bf16), or train "
                f"LoRA adapters (model.lora.enabled: true)")
        self.model = model
        self.ref_model = None
        if algo.beta > 0 and not self.lora:
            self.ref_model = copy.deepcopy(model).eval()
            for p in self.ref_model.parameters():
                p.requires_grad_(False)
                if mixed_precision == "bf16":
                    # only ever read under bf16 autocast (and FSDP all-gathers it in bf16): bf16
                    # storage halves the frozen copy (7B: 15.4 instead of 30.9 GiB unsharded).
                    # Parameters only: buffers such as RoPE's inv_freq stay float32.
                    p.data = p.data.to(torch.bfloat16)
        #: the iteration whose starting actor the reference is (refresh_reference); None = the
        #: initial weights (the frozen copy, or the base model under LoRA)
        self.reference_version: Optional[int] = None
        self._ref_adapter: Optional[dict[str, torch.Tensor]] = None  # LoRA: the reference's adapter tensors
        # the output projection sees only the positions that predict trained tokens (see logprobs)
        self._rows = ResponseRows(self.model)
        self._ref_rows = ResponseRows(self.ref_model) if self.ref_model is not None else None
        self.ddp = None
        if self.strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP

            self.ddp = DDP(model, device_ids=None if self.device.type == "cpu" else [self.device.index or 0],
                           find_unused_parameters=True)  # the vision tower is unused on text-only batches
        elif self.strategy == "fsdp":
            # in place: self.model's parameters become DTensor shards; its forward all-gathers units
            apply_fsdp2(self.model, self.device, mixed_precision)
            if self.ref_model is not None:
                apply_fsdp2(self.ref_model, self.device, mixed_precision)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=optim.learning_rate, betas=(optim.adam_beta1, optim.adam_beta2),
                                           eps=optim.adam_epsilon, weight_decay=optim.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(optim.lr_scheduler_type, optim.warmup_steps, total_updates))
        self.optimizer_steps = 0
        # called as on_optimizer_step(done, total) after each optimizer step of update() (progress bars)
        self.on_optimizer_step: Optional[Callable[[int, int], None]] = None

    # ---- weights --------------------------------------------------------------------------------
    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The trained tensors: adapter weights under LoRA, the whole model otherwise. Under FSDP
        a collective (every rank must call it): rank 0 gets the full unsharded tensors (the same
        keys and shapes as one process), other ranks ``{}``."""
        if self.lora:
            return {k: v.detach().clone() for k, v in self.model.named_parameters() if v.requires_grad}
        if self.strategy == "fsdp":
            return full_model_state(self.model)
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def load_trainable_state(self, state: dict[str, torch.Tensor]) -> None:
        """Inverse of :meth:`trainable_state` (under FSDP a collective; rank 0's ``state`` is used)."""
        if self.lora:
            named = dict(self.model.named_parameters())
            missing = [k for k in state if k not in named]
            if missing:
                raise KeyError(f"checkpoint has adapter tensors the model lacks: {missing[:3]}")
            with torch.no_grad():
                for k, v in state.items():
                    named[k].copy_(v)
        elif self.strategy == "fsdp":
            load_full_model_state(self.model, state)
        else:
            self.model.load_state_dict(state)

    def optimizer_state(self) -> dict[str, Any]:
        """AdamW state for a checkpoint; under FSDP a collective returning the unsharded state
        (keyed by parameter name) on rank 0."""
        if self.strategy == "fsdp":
            return full_optimizer_state(self.model, self.optimizer)
        return self.optimizer.state_dict()

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`optimizer_state`."""
        if self.strategy == "fsdp":
            load_full_optimizer_state(self.model, self.optimizer, state)
        else:
            self.optimizer.load_state_dict(state)

    def save_pretrained(self, path: str | Path) -> Path:
        """A full ``from_pretrained`` directory of the current policy (adapters merged) for the
        PolicyService (``update_weights``). Written to ``path.tmp`` then renamed. Under FSDP a
        collective: every rank gathers, rank 0 writes (other ranks return ``path`` unwritten)."""
        import shutil

        path = Path(path)
        full = full_model_state(self.model) if self.strategy == "fsdp" else None
        if self.rank != 0 and full is not None:
            return path
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        model = self.model
        if self.lora:
            model = copy.deepcopy(self.model).merge_and_unload()
        model.save_pretrained(tmp, **({"state_dict": full} if full is not None else {}))
        self.policy.tokenizer.save_pretrained(tmp)
        self.policy.image_processor.save_pretrained(tmp)
        src = Path(self.policy.path)
        for name in ("processor_config.json", "video_preprocessor_config.json", "chat_template.jinja"):
            if (src / name).exists() and not (tmp / name).exists():
                shutil.copy2(src / name, tmp / name)
        shutil.rmtree(path, ignore_errors=True)
        os.replace(tmp, path)
        return path

    # ---- log-probs ------------------------------------------------------------------------------
    def _constraint(self, candidates: Sequence[str]) -> Any:
        """The rollout's own trie for these candidates (HFPolicy.constraint: same end token)."""
        return self.policy.constraint(list(candidates))

    def collate(self, samples: Sequence[Sample]) -> _Batch:
        n = len(samples)
        length = max(len(s.input_ids) for s in samples)
        t = length - 1
        ids = torch.full((n, length), self.policy.pad_id, dtype=torch.long)
        att = torch.zeros((n, length), dtype=torch.long)
        mask = torch.zeros((n, t))
        rlp = torch.zeros((n, t))
        adv = torch.zeros((n, t))
        for b, s in enumerate(samples):
            m = len(s.input_ids)
            ids[b, :m] = torch.tensor(s.input_ids)
            att[b, :m] = 1
            mask[b, : m - 1] = torch.tensor(s.loss_mask[1:], dtype=torch.float)
            rlp[b, : m - 1] = torch.tensor(s.rollout_logprobs[1:], dtype=torch.float)
            adv[b, : m - 1] = torch.tensor(s.advantages[1:], dtype=torch.float)
        return _Batch(ids, att, mask, rlp, adv, list(samples))

    def _allowed_rows(self, batch: _Batch) -> tuple[torch.Tensor, SparseAllowed]:
        """Positions (N, 2) = (b, t) of trained tokens (position t predicts token t + 1), and the
        candidate sets of the constrained ones as a :class:`SparseAllowed` (row i of ``pos`` ->
        the trie's children after the span's prefix); unconstrained rows allow every non-banned id."""
        pos = batch.mask.nonzero(as_tuple=False)  # (N, 2)
        row_of = {(int(b), int(t)): i for i, (b, t) in enumerate(pos.tolist())}
        allowed: dict[int, list[int]] = {}
        for b, s in enumerate(batch.samples):
            for seg in s.segments:
                if seg.candidates is None:
                    continue
                cons = self._constraint(seg.candidates)
                for j in range(seg.start, seg.end):  # token j is predicted at position j - 1
                    i = row_of.get((b, j - 1))
                    if i is None:
                        continue
                    ok = cons.allowed(s.input_ids[seg.start:j])
                    if int(s.input_ids[j]) not in ok:
                        raise ValueError(f"sample {s.traj_id}/{s.step_index}: sampled token {s.input_ids[j]} at {j} "
                                         f"is outside its candidate constraint (stored candidates do not match)")
                    allowed[i] = list(ok)
        return pos, SparseAllowed.build(pos.shape[0], allowed)

    def _vision(self, batch: _Batch) -> dict[str, Any]:
        if not any(s.image_refs for s in batch.samples):
            return {}
        if self.image_loader is None:
            raise ValueError("samples have image refs but the learner has no image_loader")
        pvs, grids = [], []
        for s in batch.samples:
            if s.image_refs:
                pv, g = self.policy.images_to_tensors([self.image_loader(r) for r in s.image_refs])
            else:
                pv, g = None, None
            pvs.append(pv)
            grids.append(g)
        return self.policy._vision_kwargs(batch.input_ids, pvs, grids)

    def logprobs(self, batch: _Batch, model: Optional[torch.nn.Module] = None) -> torch.Tensor:
        """(B, T) log-probs of the trained tokens under ``model`` (default: the trained model,
        through DDP when wrapped; ``self.model`` or ``self.ref_model``); 0 where ``mask`` is 0.
        Differentiable when grad is enabled.

        The distribution is the sampling one (:mod:`guigym.train.policy.logprobs`): logits / T
        (``rollout.temperature``), banned ids and the candidate trie masked, renormalised. The
        trunk runs over the whole (B, L) batch, but ``lm_head`` only over the N trained positions,
        so the largest vocabulary-sized tensor is (N, V), not (B, L, V); the candidate sets are an
        index structure, never a dense (N, V) mask. Under ``mixed_precision: bf16`` the forward
        runs in ``torch.autocast(bfloat16)`` over the float32 weights."""
        net = model if model is not None else (self.ddp or self.model)
        rows = self._ref_rows if (model is not None and model is self.ref_model) else self._rows
        pos, allowed = self._allowed_rows(batch)
        with rows.select(pos[:, 0], pos[:, 1]), torch.autocast(self.device.type, dtype=torch.bfloat16,
                                                                 enabled=self.mixed_precision == "bf16"):
            out = net(input_ids=batch.input_ids.to(self.device), attention_mask=batch.attention.to(self.device),
                      use_cache=False, **self._vision(batch))
        logits = out.logits[0]  # (N, V): one row per trained position
        targets = batch.input_ids[pos[:, 0], pos[:, 1] + 1]
        lp = masked_logprobs(logits, targets, self.policy.banned, allowed, self.temperature)
        full = torch.zeros(batch.mask.shape, dtype=lp.dtype, device=lp.device)
        return full.index_put((pos[:, 0].to(lp.device), pos[:, 1].to(lp.device)), lp)

    @torch.no_grad()
    def _ref_logprobs(self, batch: _Batch) -> torch.Tensor:
        if self.lora:
            if self._ref_adapter is None:
                with self.model.disable_adapter():
                    return self.logprobs(batch, self.model)
            # the reference is an earlier actor: its adapter tensors in place for this forward
            named = dict(self.model.named_parameters())
            current = {k: named[k].detach().clone() for k in self._ref_adapter}
            try:
                for k, v in self._ref_adapter.items():
                    named[k].copy_(v)
                return self.logprobs(batch, self.model)
            finally:
                for k, v in current.items():
                    named[k].copy_(v)
        return self.logprobs(batch, self.ref_model)

    # ---- the reference policy -------------------------------------------------------------------
    @torch.no_grad()
    def refresh_reference(self, version: int) -> None:
        """Make the reference policy pi_ref the current actor, tagged ``version`` (the iteration
        it starts). WebRL (Qi et al. 2024) sec. 2.1, eq. 1 and the eq. 6 loss: "Let the policy
        from the previous phase be denoted as pi_ref, and the current policy being optimized as
        pi_theta" -- so at each phase boundary the reference becomes the actor that finished the
        last phase. Full weights are copied into the frozen copy (tensor by tensor: under FSDP
        both are sharded alike); under LoRA the adapter tensors are kept and swapped in for the
        reference forward (the base model alone is the initial actor). Every rank calls it."""
        if self.lora:
            self._ref_adapter = {k: v.detach().clone() for k, v in self.model.named_parameters() if v.requires_grad}
        elif self.ref_model is not None:
            ref = dict(self.ref_model.named_parameters())
            for k, v in self.model.named_parameters():
                ref[k].copy_(v.detach())
            ref_buf = dict(self.ref_model.named_buffers())
            for k, v in self.model.named_buffers():
                ref_buf[k].copy_(v)
        else:
            raise ConfigError("refresh_reference: there is no reference model (algorithm.beta is 0)")
        self.reference_version = int(version)

    def reference_state(self) -> Optional[dict[str, Any]]:
        """``{"version", "state"}`` of a refreshed reference for a checkpoint (None while it is the
        initial weights, which the checkpoint's model path already gives): the adapter tensors
        under LoRA, the whole frozen copy otherwise (a collective under FSDP)."""
        if self.reference_version is None:
            return None
        if self.lora:
            state = {k: v.clone() for k, v in (self._ref_adapter or {}).items()}
        elif self.strategy == "fsdp":
            state = full_model_state(self.ref_model)
        else:
            state = {k: v.detach().clone() for k, v in self.ref_model.state_dict().items()}
        return {"version": int(self.reference_version), "state": state}

    def load_reference_state(self, saved: dict[str, Any]) -> None:
        """Inverse of :meth:`reference_state`."""
        state = saved["state"]
        if self.lora:
            named = dict(self.model.named_parameters())
            missing = [k for k in state if k not in named]
            if missing:
                raise KeyError(f"checkpoint reference has adapter tensors the model lacks: {missing[:3]}")
            self._ref_adapter = {k: v.detach().clone().to(named[k].device) for k, v in state.items()}
        elif self.ref_model is None:
            raise ConfigError("the checkpoint has a refreshed reference model but algorithm.beta is 0")
        elif self.strategy == "fsdp":
            load_full_model_state(self.ref_model, state)
        else:
            self.ref_model.load_state_dict(state)
        self.reference_version = int(saved["version"])

    # ---- update ---------------------------------------------------------------------------------
    #: the policy-loss plug-in (``POLICY_LOSSES``, :mod:`guigym.train.algorithms.policy_losses`);
    #: None = ``ppo_clip`` built from ``algo``. The loop sets it from ``algorithm.policy_loss``.
    policy_loss_fn: Any = None

    def _steps(self, samples: Sequence[Sample]) -> list[list[Sample]]:
        """Optimizer steps: consecutive slices of ``per_device_train_batch_size *
        gradient_accumulation_steps * world_size`` samples (the last one may be shorter)."""
        per_step = self.algo.per_device_train_batch_size * self.optim_cfg.gradient_accumulation_steps * self.world
        return [list(samples[i:i + per_step]) for i in range(0, len(samples), per_step)]

    def _micro_counts(self, steps: Sequence[Sequence[Sample]], mb: int) -> list[int]:
        """Micro-batches this rank runs in each optimizer step: the same number on every rank.

        Each rank trains ``step[rank::world]`` in micro-batches of ``mb``, so ranks can own
        different counts (3 samples on 2 ranks with ``mb = 1``: 2 and 1). Under FSDP every
        micro-batch's forward all-gathers and its backward reduce-scatters (the no-grad old-policy
        and reference passes gather too), so unequal counts leave collectives unpaired and the
        ranks deadlock; every rank therefore runs the maximum over ranks (agreed by one
        ``all_reduce(MAX)``), the missing ones as zero-weight stand-ins. Under DDP only the last
        micro-batch of a step synchronises, so a rank just needs at least one.
        """
        own = [math.ceil(len(step[self.rank::self.world]) / mb) for step in steps]
        if self.strategy != "fsdp":
            return [max(1, n) for n in own]
        counts = torch.tensor(own, dtype=torch.int64, device=self.device)
        torch.distributed.all_reduce(counts, op=torch.distributed.ReduceOp.MAX)
        return [int(n) for n in counts.cpu()]

    def _norm(self, step: Sequence[Sample]) -> float:
        """The step-wide divisor of ``loss_type`` (same on every rank): trained tokens for
        token-mean, ``sequences * max_len_norm`` for seq-mean-token-sum-norm (Dr. GRPO), trained
        sequences otherwise."""
        if self.loss_type == "token-mean":
            return float(sum(s.num_loss_tokens for s in step))
        n_seq = sum(1 for s in step if s.num_loss_tokens)
        if self.loss_type == "seq-mean-token-sum-norm":
            return float(n_seq * self.max_len_norm)
        return float(n_seq)

    def _extra(self, batch: _Batch, logp: torch.Tensor, old: torch.Tensor, mask: torch.Tensor,
               ref: Optional[torch.Tensor], norm: float, step_tokens: float, step_sequences: float,
               metrics: dict[str, float]) -> torch.Tensor:
        """Sum of the configured extra losses on this micro-batch, scaled like the policy loss.

        A per-token (B, T) result is reduced with :func:`aggregate_loss` using the policy loss's
        ``loss_type``, the step-wide ``norm`` and ``max_len_norm``: the sum over the step's
        micro-batches is then exactly that aggregation over the whole step. A scalar result (a
        mean over this micro-batch) is weighted by the micro-batch's share of the step's trained
        tokens (token-mean) or sequences (other modes) -- never by 1/max_len.
        """
        from guigym.train.algorithms.losses import aggregate_loss
        from guigym.train.algorithms.registry import LossInputs

        inputs = LossInputs(logp=logp, old_logp=old, mask=mask, advantages=batch.adv.to(logp.device),
                            sources=[s.source for s in batch.samples],
                            rewards=torch.tensor([s.reward for s in batch.samples]),
                            rollout_logp=batch.rollout_logp.to(logp.device), ref_logp=ref)
        if self.loss_type == "token-mean":
            share = float(mask.sum()) / max(step_tokens, 1.0)
        else:
            share = float((mask.sum(1) > 0).sum()) / max(step_sequences, 1.0)
        total = logp.new_zeros(())
        for fn in self.extra_losses:
            value, m = fn(inputs)
            if value.dim() == 2:
                value = aggregate_loss(value, mask, self.loss_type, norm=norm, max_len=self.max_len_norm)
            elif value.dim() == 0:
                value = value * share
            else:
                raise ValueError(f"extra loss {type(fn).__name__} returned shape {tuple(value.shape)}; "
                                 f"expected a scalar or (B, T) = {tuple(mask.shape)}")
            total = total + value
            for k, v in m.items():
                metrics[f"extra/{k}"] = float(v)
        metrics["extra_loss"] = float(total.detach())
        return total

    def _loss_fn(self) -> Any:
        if self.policy_loss_fn is None:
            from guigym.train.algorithms.policy_losses import PPOClipLoss

            self.policy_loss_fn = PPOClipLoss(self.algo)
        return self.policy_loss_fn

    def nll_update(self, samples: Sequence[Sample]) -> dict[str, float]:
        """One supervised pass over ``samples`` (an SFT epoch, in the given order): for each optimizer
        step (the slices of :meth:`_steps`), the token-mean negative log-likelihood of the masked-in
        reply tokens,

            L = - sum_{b,t} mask[b,t] * log pi(x[b,t+1] | x[b,<=t]) / sum_{b,t} mask[b,t],

        under the same distribution the rollouts sample from (:meth:`logprobs`: logits / T, banned
        ids and the candidate trie masked), so SFT teaches exactly the choice RL later samples.
        Prompt tokens never enter the loss (``loss_mask`` 0). The LR scheduler steps once per call.
        Metrics: ``loss`` (mean over steps of the step's NLL), ``nll_tokens``, ``confident_tokens``
        (share of reply tokens the policy gives probability > 0.5, so it would most likely choose
        them), ``grad_norm``, ``lr``, ``optimizer_steps``, ``samples``."""
        samples = [s for s in samples if s.num_loss_tokens > 0]
        if not samples:
            return {"samples": 0.0}
        if self.strategy == "fsdp":
            raise ConfigError("distributed.strategy: stage sft runs single-process or under DDP")
        mb = self.algo.per_device_train_batch_size
        net = self.ddp or self.model
        steps_before = self.optimizer_steps
        plan = self._steps(samples)
        losses, norms, hits, tokens = [], [], 0.0, 0.0
        for step in plan:
            step_tokens = float(sum(s.num_loss_tokens for s in step))
            mine = step[self.rank::self.world]
            dummy = not mine
            micro = [mine[i:i + mb] for i in range(0, len(mine), mb)] if mine else [step[:1]]
            self.optimizer.zero_grad(set_to_none=True)
            step_loss = 0.0
            for k, chunk in enumerate(micro):
                batch = self.collate(chunk)
                ctx = net.no_sync() if (self.ddp is not None and k < len(micro) - 1) else nullcontext()
                with ctx:
                    logp = self.logprobs(batch)
                    mask = batch.mask.to(logp.device)
                    loss = -(logp * mask).sum() / step_tokens
                    if dummy:
                        loss = loss * 0.0
                    (loss * self.world).backward()
                if not dummy:
                    step_loss += float(loss.detach())
                    hits += float(((logp.detach() > math.log(0.5)) * mask).sum())
                    tokens += float(mask.sum())
            params = [p for p in self.model.parameters() if p.requires_grad]
            if self.optim_cfg.max_grad_norm is not None:
                gn = torch.nn.utils.clip_grad_norm_(params, self.optim_cfg.max_grad_norm)
            else:
                gn = torch.sqrt(sum((p.grad.float() ** 2).sum() for p in params if p.grad is not None))
            norms.append(float(gn))
            self.optimizer.step()
            self.optimizer_steps += 1
            losses.append(step_loss)
            if self.on_optimizer_step is not None:
                self.on_optimizer_step(self.optimizer_steps - steps_before, len(plan))
        self.optimizer.zero_grad(set_to_none=True)
        lr = self.scheduler.get_last_lr()[0]
        self.scheduler.step()
        stats = torch.tensor([sum(losses), hits, tokens], dtype=torch.float64)
        if self.world > 1:
            stats = stats.to(self.device)
            torch.distributed.all_reduce(stats)
            stats = stats.cpu()
        return {"loss": float(stats[0]) / len(plan), "confident_tokens": float(stats[1]) / max(float(stats[2]), 1.0),
                "nll_tokens": float(stats[2]), "grad_norm": sum(norms) / len(norms), "lr": lr,
                "optimizer_steps": float(len(plan)), "samples": float(len(samples))}

    def update(self, samples: Sequence[Sample]) -> dict[str, float]:
        """One training iteration on ``samples`` (the same list on every rank).

        Metrics: ``loss`` and ``pg_loss`` are the mean over optimizer steps (x epochs) of each
        step's full-batch loss (its micro-batch losses summed, over all ranks); ``extra_loss``,
        ratios, clip fractions etc. are averaged over micro-batches; ``optimizer_steps`` counts
        the steps taken (``ceil(samples / (per_device_train_batch_size *
        gradient_accumulation_steps * world)) * num_iterations``)."""
        from guigym.train.algorithms.policy_losses import PolicyLossInputs

        samples = [s for s in samples if s.num_loss_tokens > 0]
        if not samples:
            return {"samples": 0.0}
        loss_fn = self._loss_fn()
        need_ref = self.algo.beta > 0 or bool(getattr(loss_fn, "needs_ref", False))
        steps = self._steps(samples)
        mb = self.algo.per_device_train_batch_size
        # this rank's micro-batches per optimizer step, with pi_train_old / IS weight / ref computed
        # once before any weight changes (pi_train_old is the policy that generated the batch)
        plan: list[tuple[tuple[float, float, float], list[Any]]] = []
        for step, n_micro in zip(steps, self._micro_counts(steps, mb)):
            mine = step[self.rank::self.world]
            micro = []
            for i in range(n_micro):
                # past this rank's own samples: a zero-weight stand-in (its loss is multiplied by
                # 0) that only keeps the collectives paired with the other ranks'
                dummy = i * mb >= len(mine)
                batch = self.collate(step[:1] if dummy else mine[i * mb:(i + 1) * mb])
                with torch.no_grad():
                    old = self.logprobs(batch, self.model)
                is_w = None
                if self.algo.tis_cap is not None:
                    is_w = truncated_is_weight(old, batch.rollout_logp.to(old.device), self.algo.tis_cap)
                ref = self._ref_logprobs(batch) if need_ref else None
                micro.append((batch, old, is_w, ref, dummy))
            sizes = (self._norm(step), float(sum(s.num_loss_tokens for s in step)),
                     float(sum(1 for s in step if s.num_loss_tokens)))
            plan.append((sizes, micro))
        steps_before = self.optimizer_steps
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        totals = torch.zeros(2, dtype=torch.float64)  # [sum of step losses, sum of step pg losses]
        net = self.ddp or self.model
        for _epoch in range(self.algo.num_iterations):
            for (norm, step_tokens, step_seqs), micro in plan:
                self.optimizer.zero_grad(set_to_none=True)
                for k, (batch, old, is_w, ref, dummy) in enumerate(micro):
                    sync = k == len(micro) - 1
                    ctx = net.no_sync() if (self.ddp is not None and not sync) else nullcontext()
                    with ctx:
                        logp = self.logprobs(batch)
                        mask = batch.mask.to(logp.device)
                        loss, m = loss_fn(PolicyLossInputs(
                            logp=logp, old_logp=old, advantages=batch.adv.to(logp.device), mask=mask,
                            loss_type=self.loss_type, norm=norm, step_sequences=step_seqs, step_tokens=step_tokens,
                            max_len=self.max_len_norm, is_weight=is_w, ref_logp=ref,
                            rollout_logp=batch.rollout_logp.to(logp.device)))
                        m = dict(m)
                        pg = float(loss.detach())
                        if self.extra_losses:
                            loss = loss + self._extra(batch, logp, old, mask, ref, norm, step_tokens, step_seqs, m)
                        if dummy:
                            loss = loss * 0.0
                        (loss * self.world).backward()
                    if not dummy:
                        totals[0] += float(loss.detach())
                        totals[1] += pg
                        m.pop("pg_loss", None)
                        for key, v in m.items():
                            sums[key] = sums.get(key, 0.0) + v
                            counts[key] = counts.get(key, 0) + 1
                params = [p for p in self.model.parameters() if p.requires_grad]
                if self.optim_cfg.max_grad_norm is not None:
                    gn = torch.nn.utils.clip_grad_norm_(params, self.optim_cfg.max_grad_norm)
                else:
                    gn = torch.sqrt(sum((p.grad.float() ** 2).sum() for p in params if p.grad is not None))
                sums["grad_norm"] = sums.get("grad_norm", 0.0) + float(gn)
                counts["grad_norm"] = counts.get("grad_norm", 0) + 1
                self.optimizer.step()
                self.optimizer_steps += 1
                if self.on_optimizer_step is not None:
                    self.on_optimizer_step(self.optimizer_steps - steps_before, len(plan) * self.algo.num_iterations)
        self.optimizer.zero_grad(set_to_none=True)
        lr = self.scheduler.get_last_lr()[0]
        self.scheduler.step()
        if self.world > 1:  # each rank summed its own micro-batches of each step (NCCL needs it on the GPU)
            totals = totals.to(self.device)
            torch.distributed.all_reduce(totals)
            totals = totals.cpu()
        n_steps = len(plan) * self.algo.num_iterations
        out = {k: sums[k] / counts[k] for k in sums}
        out.update(loss=float(totals[0]) / n_steps, pg_loss=float(totals[1]) / n_steps, lr=lr,
                   samples=float(len(samples)), tokens=float(sum(s.num_loss_tokens for s in samples)),
                   optimizer_steps=float(n_steps))
        return out
