"""A Hugging Face Qwen2-VL / Qwen2.5-VL policy: encode chats, sample with token ids + log-probs,
and recompute those log-probs by teacher forcing (the trainer uses the same :meth:`logprobs_of`).

Token-in/token-out (shared/DESIGN.md "Trajectory"): a prompt is encoded once into ``prompt_ids``
(with ``<|image_pad|>`` already expanded to one id per merged 2x2 vision patch group, as the
Qwen2.5-VL processor and vLLM do), the reply is a list of sampled ids, and training feeds those
exact ids back; nothing is re-tokenised.

Sampling distribution: the model's raw next-token logits divided by ``temperature`` T, with the
vision special tokens (``<|vision_start|>``, ``<|image_pad|>``, ...) masked to -inf (a reply may
never contain them: they would desynchronise image features from image tokens), renormalised
(:mod:`guigym.models.logprobs` states it exactly). The recorded log-prob of each sampled
token is the log-prob under that distribution, at the sampling temperature;
:meth:`HFPolicy.logprobs_of` (``temperature=T``) and the learner return the same quantity from one
forward pass. Nothing else shapes it: no top-k / top-p / repetition penalty, and the checkpoint's
``generation_config.json`` defaults (e.g. ``repetition_penalty: 1.05`` or ``top_k`` as some
Qwen checkpoints ship) never reach sampling -- only the arguments of :meth:`HFPolicy.generate`.
Greedy rows (T <= 0) record the temperature-1 log-prob of the argmax token. ``Sample.entropy``
is always the entropy of the temperature-1 distribution (what DART's top-entropy filter ranks).

Sampling uses the Gumbel-max trick with one ``torch.Generator`` per sequence, so a reply depends
only on (model, prompt, seed), not on what else is in the batch or on the global RNG.

Constrained decoding (:mod:`guigym.models.constrain`): with ``candidates`` for a row, every
token that does not continue one of the candidate strings (or end a complete one) is masked to
-inf as well, at sampling time and in :meth:`HFPolicy.logprobs_tensor` alike, so the recorded
log-probs are those of the masked distribution and the recomputation reproduces them.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch
from PIL import Image

from guigym.models.logprobs import SparseAllowed, masked_logprobs
from guigym.models.constrain import CandidateConstraint, as_constraint

ImageLike = Union[np.ndarray, Image.Image]

#: the tokens a reply may not contain (Qwen2.5-VL's vision markers)
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>")


@dataclass
class Encoded:
    """One prompt ready for the model.

    ``prompt_ids``: length P list; ``pixel_values``: (sum of patches, C*T*14*14) float tensor or
    None; ``image_grid_thw``: (num_images, 3) long tensor (temporal, height, width patches) or None.
    """

    prompt_ids: list[int]
    pixel_values: Optional[torch.Tensor] = None
    image_grid_thw: Optional[torch.Tensor] = None


@dataclass
class Sample:
    """One sampled reply: ids (including the stop token if one was produced), per-token log-probs."""

    response_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str = "stop"
    extra: dict[str, Any] = field(default_factory=dict)
    #: mean over the reply's tokens of the entropy (nats) of the temperature-1 sampling distribution
    entropy: Optional[float] = None


def to_pil(image: ImageLike) -> Image.Image:
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    return Image.fromarray(np.asarray(image, dtype=np.uint8)).convert("RGB")


class _GumbelSampler:
    """A ``LogitsProcessor`` that samples (Gumbel-max) and records the sampled tokens' log-probs.

    ``generate`` runs greedy decoding on its output: every row is -inf except the chosen token.
    ``scores``: (B, V) next-token logits; returns (B, V). ``constraints[b]`` (or None) restricts
    row b to continuations of its candidates; ``width`` is the padded prompt length, so
    ``input_ids[b, width:]`` is row b's response so far.
    """

    def __init__(self, banned: torch.Tensor, temperatures: Sequence[float], generators: list[torch.Generator],
                 constraints: Optional[Sequence[Optional["CandidateConstraint"]]] = None, width: int = 0) -> None:
        self.banned = banned
        self.temperatures = list(temperatures)
        self.generators = generators
        self.constraints = list(constraints) if constraints is not None else [None] * len(generators)
        self.width = width
        self.logprobs: list[torch.Tensor] = []  # per step: (B,)
        self.entropies: list[torch.Tensor] = []  # per step: (B,)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        logits = scores.float().clone()
        logits[:, self.banned] = float("-inf")
        for b, constraint in enumerate(self.constraints):
            if constraint is not None:
                logits[b] = constrain_logits(logits[b], constraint, input_ids[b, self.width:].tolist())
        logp = torch.log_softmax(logits, dim=-1)  # temperature 1 (entropy; greedy rows)
        self.entropies.append(-(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1))
        # the sampling distribution: log_softmax(masked logits / T) per row (T <= 0: greedy, T = 1 recorded)
        temps = torch.tensor([t if t > 0 else 1.0 for t in self.temperatures], dtype=logits.dtype,
                             device=logits.device)
        logp_t = torch.log_softmax(logits / temps[:, None], dim=-1)
        rows = []
        for b, (g, temp) in enumerate(zip(self.generators, self.temperatures)):
            if temp <= 0:  # greedy
                rows.append(logp[b].argmax())
                continue
            u = torch.rand(logp.shape[-1], generator=g, dtype=torch.float64).clamp_(1e-20, 1.0)
            gumbel = -torch.log(-torch.log(u))
            rows.append((logp_t[b].double().cpu() + gumbel).argmax())  # Gumbel-max: a draw from softmax(z / T)
        choice = torch.stack([r.to(logp.device) for r in rows])
        self.logprobs.append(logp_t.gather(-1, choice[:, None])[:, 0])
        out = torch.full_like(scores, float("-inf"))
        out.scatter_(-1, choice[:, None], 0.0)
        return out


def constrain_logits(logits: torch.Tensor, constraint: "CandidateConstraint", prefix: Sequence[int]) -> torch.Tensor:
    """(V,) logits -> (V,) logits with every token ``constraint`` does not allow after ``prefix``
    set to -inf. A prefix that already left the trie (a finished row, padded by ``generate``) is
    returned unchanged: that row's later tokens are discarded anyway."""
    allowed = constraint.allowed(prefix)
    if not allowed:
        return logits
    keep = torch.full_like(logits, float("-inf"))
    idx = torch.tensor(allowed, dtype=torch.long, device=logits.device)
    keep[idx] = logits[idx]
    return keep


class HFPolicy:
    """A local Qwen2-VL-family checkpoint (``from_pretrained`` directory) on CPU or one GPU.

    Thread-safe: calls into the model are serialised by a lock (the model keeps M-RoPE state).
    """

    def __init__(self, path: Union[str, Path], device: str = "cpu", dtype: str = "float32") -> None:
        from transformers import AutoImageProcessor, AutoModelForImageTextToText, AutoTokenizer

        path = str(path)
        if not Path(path).is_dir():
            raise OSError(f"model path {path!r} is not a directory (a from_pretrained checkpoint is expected)")
        self.path = path
        self.device = torch.device(device)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.image_processor = AutoImageProcessor.from_pretrained(path)
        self.model = AutoModelForImageTextToText.from_pretrained(path, dtype=getattr(torch, dtype)).to(self.device).eval()
        cfg = self.model.config
        self.image_token_id: int = cfg.image_token_id
        self.merge = int(getattr(self.image_processor, "merge_size", 2))
        self.pad_id: int = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        gen = self.model.generation_config
        eos = gen.eos_token_id if gen.eos_token_id is not None else self.tokenizer.eos_token_id
        self.eos_ids: list[int] = list(eos) if isinstance(eos, (list, tuple)) else [int(eos)]
        from transformers import GenerationConfig

        #: the checkpoint's sampling defaults are kept for saving, never used to sample
        self._neutral_generation_config = GenerationConfig(eos_token_id=self.eos_ids, pad_token_id=self.pad_id,
                                                           bos_token_id=gen.bos_token_id)
        ids = [self.tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS]
        # ids the tokenizer does not know (the embedding table is padded to a multiple of 64) are banned too
        vocab = self.model.get_output_embeddings().weight.shape[0]
        unknown = set(range(len(self.tokenizer), vocab))
        self.banned = torch.tensor(sorted({i for i in ids if i is not None and i >= 0} | unknown), dtype=torch.long)
        self.lock = threading.Lock()
        self._constraints: dict[tuple[str, ...], CandidateConstraint] = {}

    # ---- encoding -------------------------------------------------------------------------------
    def render(self, messages: list[dict[str, Any]]) -> str:
        """Chat (OpenAI/HF message dicts; image parts as ``{"type": "image"}``) -> prompt text."""
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def images_to_tensors(self, images: Sequence[ImageLike]) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """Images -> (pixel_values (N_patches, D), image_grid_thw (num_images, 3)); (None, None) if none."""
        if not images:
            return None, None
        out = self.image_processor(images=[to_pil(im) for im in images], return_tensors="pt")
        return out["pixel_values"], out["image_grid_thw"]

    def encode(self, text: str, images: Sequence[ImageLike] = ()) -> Encoded:
        """Prompt text with one ``<|image_pad|>`` per image -> :class:`Encoded` (pads expanded)."""
        pad = self.tokenizer.convert_ids_to_tokens(self.image_token_id)
        pieces = text.split(pad)
        if len(pieces) - 1 != len(images):
            raise ValueError(f"prompt has {len(pieces) - 1} image placeholders but {len(images)} images were given")
        pixel_values, grid = self.images_to_tensors(images)
        ids: list[int] = []
        for k, piece in enumerate(pieces):
            if piece:
                ids += self.tokenizer(piece, add_special_tokens=False)["input_ids"]
            if k < len(images):
                ids += [self.image_token_id] * int(grid[k].prod().item() // self.merge ** 2)
        return Encoded(ids, pixel_values, grid)

    def encode_chat(self, messages: list[dict[str, Any]], images: Sequence[ImageLike] = ()) -> Encoded:
        return self.encode(self.render(messages), images)

    def image_runs(self, prompt_ids: Sequence[int]) -> list[int]:
        """Lengths of the runs of ``<|image_pad|>`` ids in ``prompt_ids`` (one run per image)."""
        runs, n = [], 0
        for tok in prompt_ids:
            if tok == self.image_token_id:
                n += 1
            elif n:
                runs.append(n)
                n = 0
        if n:
            runs.append(n)
        return runs

    def encode_ids(self, prompt_ids: Sequence[int], images: Sequence[ImageLike] = ()) -> Encoded:
        """Ready token ids (pads already expanded, e.g. a multi-turn transcript) + their images ->
        :class:`Encoded`. Raises ``ValueError`` when the pad runs do not match the images' sizes."""
        runs = self.image_runs(prompt_ids)
        if len(runs) != len(images):
            raise ValueError(f"prompt_ids hold {len(runs)} image pad runs but {len(images)} images were given")
        pixel_values, grid = self.images_to_tensors(images)
        for k, run in enumerate(runs):
            want = int(grid[k].prod().item() // self.merge ** 2)
            if run != want:
                raise ValueError(f"image {k}: prompt_ids hold {run} pad tokens but the image needs {want}")
        return Encoded([int(t) for t in prompt_ids], pixel_values, grid)

    def load_weights(self, path: Union[str, Path]) -> None:
        """Copy the weights of the ``from_pretrained`` checkpoint at ``path`` (same architecture)
        into this policy's model in place (between calls: holds the model lock)."""
        from transformers import AutoModelForImageTextToText

        if not Path(path).is_dir():
            raise OSError(f"weights path {str(path)!r} is not a directory (a from_pretrained checkpoint is expected)")
        new = AutoModelForImageTextToText.from_pretrained(str(path), dtype=self.model.dtype)
        state, mine = new.state_dict(), self.model.state_dict()
        # checked before copying anything, so a checkpoint that does not fit leaves the weights as they were
        bad = sorted(k for k in set(state) ^ set(mine)) + sorted(
            k for k in set(state) & set(mine) if state[k].shape != mine[k].shape)
        if bad:
            raise ValueError(f"checkpoint {path} does not fit the model (keys or shapes differ: {bad[:5]})")
        with self.lock:
            self.model.load_state_dict(state)

    # ---- sampling -------------------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, batch: Sequence[Encoded], max_new_tokens: Union[int, Sequence[int]] = 32,
                 temperature: Union[float, Sequence[float]] = 1.0, seeds: Optional[Sequence[int]] = None,
                 candidates: Optional[Sequence[Union[None, Sequence[str], CandidateConstraint]]] = None) -> list[Sample]:
        """Sample one reply per prompt; prompts are left-padded into one batch. ``max_new_tokens``,
        ``temperature`` and ``seeds`` may be given per row (temperature <= 0 is greedy).
        ``candidates[b]``: None (free text) or the allowed replies of row b (strings or a
        :class:`CandidateConstraint`); a constrained row stops right after a complete candidate.

        Per row b: ``response_ids[b]`` (length R_b <= max_new_tokens, cut after the first stop
        token), ``logprobs[b]`` (length R_b) and ``entropy`` (mean per-token entropy, nats).
        """
        from transformers import GenerationConfig, LogitsProcessorList

        if not batch:
            return []
        seeds = list(seeds) if seeds is not None else [0] * len(batch)
        temps = [float(temperature)] * len(batch) if isinstance(temperature, (int, float)) else list(temperature)
        limits = [int(max_new_tokens)] * len(batch) if isinstance(max_new_tokens, int) else list(max_new_tokens)
        width = max(len(e.prompt_ids) for e in batch)
        input_ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for b, e in enumerate(batch):
            input_ids[b, width - len(e.prompt_ids):] = torch.tensor(e.prompt_ids, dtype=torch.long)
            mask[b, width - len(e.prompt_ids):] = 1
        kwargs = self._vision_kwargs(input_ids, [e.pixel_values for e in batch], [e.image_grid_thw for e in batch])
        gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
        if candidates is not None and len(candidates) != len(batch):
            raise ValueError(f"candidates has {len(candidates)} entries for a batch of {len(batch)}")
        constraints = [self.constraint(c) for c in candidates] if candidates is not None else None
        sampler = _GumbelSampler(self.banned, temps, gens, constraints, width)
        config = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=max(limits),
                                  eos_token_id=self.eos_ids, pad_token_id=self.pad_id, use_cache=True)
        with self.lock:
            # transformers fills every field our config leaves unset from model.generation_config
            # (the checkpoint's generation_config.json: repetition_penalty, top_k, ...), and those
            # processors would run before the sampler. Swap in a config with only the special ids.
            saved = self.model.generation_config
            self.model.generation_config = self._neutral_generation_config
            try:
                out = self.model.generate(input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device),
                                          generation_config=config, logits_processor=LogitsProcessorList([sampler]),
                                          **kwargs)
            finally:
                self.model.generation_config = saved
        new = out[:, width:].cpu()
        lps = torch.stack(sampler.logprobs, dim=1).cpu() if sampler.logprobs else torch.zeros((len(batch), 0))
        ents = torch.stack(sampler.entropies, dim=1).cpu() if sampler.entropies else torch.zeros((len(batch), 0))
        samples = []
        for b in range(len(batch)):
            ids = new[b].tolist()[: limits[b]]  # a row's sample does not depend on the batch's longer limit
            finish = "length"
            for t, tok in enumerate(ids):
                if tok in self.eos_ids:
                    ids, finish = ids[: t + 1], "stop"
                    break
            text_ids = ids[:-1] if finish == "stop" else ids
            samples.append(Sample(response_ids=ids, logprobs=[float(x) for x in lps[b, : len(ids)]],
                                  text=self.tokenizer.decode(text_ids, skip_special_tokens=False),
                                  finish_reason=finish,
                                  entropy=float(ents[b, : len(ids)].mean()) if ids else None))
        return samples

    def _vision_kwargs(self, input_ids: torch.Tensor, pixel_values: Sequence[Optional[torch.Tensor]],
                       grids: Sequence[Optional[torch.Tensor]]) -> dict[str, Any]:
        """Concatenate per-row vision inputs (row order = image order in the flattened batch)."""
        pv = [p for p in pixel_values if p is not None]
        if not pv:
            return {}
        return {
            "pixel_values": torch.cat(pv).to(self.device, self.model.dtype),
            "image_grid_thw": torch.cat([g for g in grids if g is not None]).to(self.device),
            "mm_token_type_ids": (input_ids == self.image_token_id).int().to(self.device),
        }

    # ---- teacher forcing ------------------------------------------------------------------------
    def logprobs_tensor(self, prompt_ids: Sequence[int], response_ids: Sequence[int],
                        images: Sequence[ImageLike] = (), pixel_values: Optional[torch.Tensor] = None,
                        image_grid_thw: Optional[torch.Tensor] = None,
                        candidates: Union[None, Sequence[str], CandidateConstraint] = None,
                        temperature: float = 1.0) -> torch.Tensor:
        """Log-probs (R,) of ``response_ids`` given ``prompt_ids`` in one forward pass (differentiable
        when called with grad enabled) under the sampling distribution at ``temperature`` (> 0; the
        one :meth:`generate` recorded). Images are given raw or as processed tensors.
        ``candidates``: the same allowed replies the reply was sampled under (None = free text);
        the log-softmax is then over the candidates' ids only, as at sampling time. A reply that
        leaves the candidates raises ``ValueError``. Logits are computed for the R response
        positions only (transformers' ``logits_to_keep``), not for the prompt."""
        if pixel_values is None and images:
            pixel_values, image_grid_thw = self.images_to_tensors(images)
        ids = torch.tensor([list(prompt_ids) + list(response_ids)], dtype=torch.long)
        kwargs = self._vision_kwargs(ids, [pixel_values], [image_grid_thw])
        r = len(response_ids)
        if r == 0:
            return torch.zeros(0)
        with self.lock:
            # the last r + 1 positions; position t predicts token t + 1, so drop the final one
            logits = self.model(input_ids=ids.to(self.device), attention_mask=torch.ones_like(ids).to(self.device),
                                use_cache=False, logits_to_keep=r + 1, **kwargs).logits[0, :r]
        targets = torch.tensor(list(response_ids), dtype=torch.long)
        allowed = self._sparse_allowed(self.constraint(candidates), list(response_ids))
        return masked_logprobs(logits, targets, self.banned, allowed, temperature)

    @staticmethod
    def _sparse_allowed(constraint: Optional[CandidateConstraint], response_ids: list[int]) -> Optional[SparseAllowed]:
        """The candidate trie's allowed ids after each prefix ``response_ids[:t]`` as a
        :class:`SparseAllowed` (None without a constraint); raises ``ValueError`` for a token
        outside them."""
        if constraint is None:
            return None
        rows: dict[int, list[int]] = {}
        for t in range(len(response_ids)):
            allowed = constraint.allowed(response_ids[:t])
            if response_ids[t] not in allowed:
                raise ValueError(f"response_ids[{t}]={response_ids[t]} is not allowed by the candidates after "
                                 f"{response_ids[:t]}; was this reply sampled under the same candidates?")
            rows[t] = list(allowed)
        return SparseAllowed.build(len(response_ids), rows)

    @staticmethod
    def _constrain_rows(step: torch.Tensor, constraint: CandidateConstraint, response_ids: list[int]) -> torch.Tensor:
        """(R, V) logits -> (R, V) with row t masked to what ``constraint`` allows after
        ``response_ids[:t]`` (out of place, so gradients flow through the kept logits)."""
        keep = torch.zeros(step.shape, dtype=torch.bool, device=step.device)
        for t in range(len(response_ids)):
            allowed = constraint.allowed(response_ids[:t])
            if response_ids[t] not in allowed:
                raise ValueError(f"response_ids[{t}]={response_ids[t]} is not allowed by the candidates after "
                                 f"{response_ids[:t]}; was this reply sampled under the same candidates?")
            keep[t, allowed] = True
        return step.masked_fill(~keep, float("-inf"))

    def constraint(self, candidates: Union[None, Sequence[str], CandidateConstraint]) -> Optional[CandidateConstraint]:
        """Candidate strings -> :class:`CandidateConstraint` ending on this policy's chat end token
        (cached per candidate set: the same set recurs at every step of an episode)."""
        if candidates is None or isinstance(candidates, CandidateConstraint):
            return candidates
        key = tuple(candidates)
        hit = self._constraints.get(key)
        if hit is None:
            hit = as_constraint(self.tokenizer, list(candidates), self.eos_ids[:1])
            if len(self._constraints) > 4096:
                self._constraints.clear()
            self._constraints[key] = hit
        return hit

    @torch.no_grad()
    def logprobs_of(self, prompt_ids: Sequence[int], response_ids: Sequence[int],
                    images: Sequence[ImageLike] = (),
                    candidates: Union[None, Sequence[str], CandidateConstraint] = None,
                    temperature: float = 1.0) -> list[float]:
        """Teacher-forced log-probs of ``response_ids`` (list of R floats), same distribution as
        sampling at ``temperature``."""
        return [float(x) for x in self.logprobs_tensor(prompt_ids, response_ids, images, candidates=candidates,
                                                       temperature=temperature)]


_CACHE: dict[str, HFPolicy] = {}
_CACHE_LOCK = threading.Lock()


def load_policy(path: Union[str, Path], device: str = "cpu") -> HFPolicy:
    """One shared :class:`HFPolicy` per (path, device) in this process."""
    key = f"{Path(path).resolve()}@{device}"
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = HFPolicy(path, device=device)
        return _CACHE[key]


def logprobs_of(path_or_policy: Union[str, Path, HFPolicy], prompt_ids: Sequence[int], response_ids: Sequence[int],
                images: Sequence[ImageLike] = (), candidates: Optional[Sequence[str]] = None) -> list[float]:
    """Module-level convenience: teacher-forced log-probs with the policy at ``path_or_policy``."""
    policy = path_or_policy if isinstance(path_or_policy, HFPolicy) else load_policy(path_or_policy)
    return policy.logprobs_of(prompt_ids, response_ids, images, candidates=candidates)
