"""Data-parallel strategy of the learner (DDP or FSDP2) and the per-GPU memory plan.

Strategies (``distributed.strategy``):

* ``ddp`` -- every rank holds the whole model, its gradients and the AdamW state
  (``torch.nn.parallel.DistributedDataParallel``; gradients all-reduced). Right for LoRA, where
  only the small adapters have gradients and optimizer state.
* ``fsdp`` -- fully sharded data parallel, torch FSDP2 (``torch.distributed.fsdp.fully_shard``;
  Zhao et al. 2023, "PyTorch FSDP"; the ZeRO-3 partitioning of Rajbhandari et al. 2020): each
  decoder layer and vision block (the model's ``_no_split_modules``) is one unit, the rest
  (embeddings, final norm, lm_head, patch merger) is the root unit. Parameters, gradients and
  AdamW state are split 1/world per rank; a unit's parameters are all-gathered just before its
  forward/backward and freed after. Gradients are reduce-scattered with the same averaging as
  DDP, so the learner's ``loss * world_size`` convention is unchanged.
* ``auto`` -- ``fsdp`` for full fine-tuning, ``ddp`` under LoRA; nothing with one process.

Precision (``model.dtype`` + ``model.mixed_precision``): master weights, gradients and AdamW
moments stay float32; ``mixed_precision: bf16`` runs the forward under ``torch.autocast(bf16)``
(and, under FSDP, all-gathers parameters in bf16: ``MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=float32)``). Pure bf16 weights with AdamW are refused: bf16 keeps 8 significant
bits, so ``bf16(w + u) == w`` whenever ``|u| < 2**(floor(log2 |w|) - 8)``; an update of 1e-6
vanishes for every ``|w| >= 2**-11 ~ 4.9e-4``, i.e. nearly every weight of a trained model.

Checkpoints under FSDP: :func:`full_model_state` / :func:`full_optimizer_state` gather the full
(unsharded) tensors on rank 0 -- collectives that every rank must call -- so ``weights.pt`` /
``optimizer.pt`` have the same keys and shapes the single-process path writes.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional

import torch

from guigym.core.errors import ConfigError

#: bytes per parameter of each training-state item
_FP32 = 4
_BF16 = 2


def resolve_strategy(strategy: str, lora: bool, world: int) -> str:
    """``auto|ddp|fsdp`` + LoRA flag + world size -> ``single|ddp|fsdp``."""
    if strategy not in ("auto", "ddp", "fsdp"):
        raise ConfigError(f"distributed.strategy: {strategy!r} is not one of auto, ddp, fsdp")
    if strategy == "fsdp" and lora:
        raise ConfigError("distributed.strategy: fsdp with model.lora.enabled is not supported (the frozen base is "
                          "replicated and only adapters train); use strategy: ddp or auto for LoRA")
    if world <= 1:
        return "single"
    if strategy == "auto":
        return "ddp" if lora else "fsdp"
    return strategy


def shard_units(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The FSDP units below the root: modules whose class is in the model's ``_no_split_modules``
    (transformers' list of blocks that must stay whole: decoder layers, vision blocks)."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    if not names:
        raise ConfigError(f"distributed.strategy: fsdp needs the model's block classes (_no_split_modules); "
                          f"{type(model).__name__} declares none")
    return [m for m in model.modules() if type(m).__name__ in names]


def apply_fsdp2(model: torch.nn.Module, device: torch.device, mixed_precision: str = "no") -> torch.nn.Module:
    """Shard ``model`` in place with FSDP2 over all ranks of the default process group (one
    unit per block, then the root). Returns the same object (now an ``FSDPModule``)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed_precision == "bf16" \
        else MixedPrecisionPolicy()
    for unit in shard_units(model):
        fully_shard(unit, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    return model


def _sd_options(**kw: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(**kw)


def full_model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Collective: the unsharded state dict on rank 0 (CPU tensors), ``{}`` on other ranks."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_sd_options(full_state_dict=True, cpu_offload=True))


def load_full_model_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Collective: load a full state dict held by rank 0 (others may pass ``{}``) into the shards."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    # a copy: broadcast_from_rank0 replaces the dict's entries by shards in place
    set_model_state_dict(model, dict(state), options=_sd_options(full_state_dict=True, broadcast_from_rank0=True))


def full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Collective: the AdamW state with unsharded moments on rank 0, keyed by parameter name."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer, options=_sd_options(full_state_dict=True, cpu_offload=True))


def load_full_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Collective inverse of :func:`full_optimizer_state`."""
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    # strict=False: parameters that never had a gradient (the vision tower on text-only batches)
    # have no AdamW state, as in the single-process state dict
    if state:  # a copy, as above
        state = {**state, "state": {k: dict(v) for k, v in state["state"].items()},
                 "param_groups": [dict(g) for g in state["param_groups"]]}
    set_optimizer_state_dict(model, optimizer, state,
                             options=_sd_options(full_state_dict=True, broadcast_from_rank0=True, strict=False))


# ---- memory plan ------------------------------------------------------------------------------
#: UI-TARS-1.5-7B = Qwen2.5-VL-7B architecture; numbers from the published config.json of
#: Qwen/Qwen2.5-VL-7B-Instruct and ByteDance-Seed/UI-TARS-1.5-7B (text: vocab 152064, hidden
#: 3584, MLP 18944, 28 layers, 28 query / 4 key-value heads, untied lm_head; vision: 32 blocks of
#: width 1280, MLP 3420, 16 heads, 14 px patches, 2x2 merge into 3584).
QWEN25_VL_7B = {
    "model_type": "qwen2_5_vl",
    "text_config": {"vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                    "num_attention_heads": 28, "num_key_value_heads": 4, "tie_word_embeddings": False},
    "vision_config": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
                      "out_hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
    "tie_word_embeddings": False,
}
#: UI-TARS-7B-SFT/DPO = Qwen2-VL-7B (same text decoder; vision: 32 blocks of width 1280, MLP
#: ratio 4, 16 heads), from Qwen/Qwen2-VL-7B-Instruct's config.json.
QWEN2_VL_7B = {
    "model_type": "qwen2_vl",
    "text_config": dict(QWEN25_VL_7B["text_config"]),
    "vision_config": {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "hidden_size": 3584,
                      "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2},
    "tie_word_embeddings": False,
}
#: model-directory names whose config is known without the files (lower-case substrings)
DOCUMENTED = {"ui-tars-1.5-7b": QWEN25_VL_7B, "qwen2.5-vl-7b": QWEN25_VL_7B,
              "ui-tars-7b": QWEN2_VL_7B, "qwen2-vl-7b": QWEN2_VL_7B}


def model_config_for(path: Optional[str], tiny: Optional[dict[str, int]] = None) -> tuple[dict[str, Any], str]:
    """(config dict, where it came from) for ``model.path``: its ``config.json`` when present, a
    documented config for known names (no download), or the tiny model's build sizes."""
    if path is None:
        from guigym.train.policy.tiny import tiny_config

        return tiny_config(**(tiny or {})).to_dict(), "tiny model (guigym.train.policy.tiny.build)"
    cfg_file = Path(path) / "config.json"
    if cfg_file.is_file():
        return json.loads(cfg_file.read_text()), str(cfg_file)
    name = Path(path).name.lower()
    for key, cfg in DOCUMENTED.items():
        if key in name:
            return cfg, f"documented {cfg['model_type']} config for {Path(path).name} (model files not present)"
    raise ConfigError(f"model.path: {path!r} has no config.json and is not a documented model "
                      f"({', '.join(DOCUMENTED)}); cannot plan memory")


def count_parameters(config: dict[str, Any]) -> dict[str, int]:
    """Exact parameter counts of a transformers VLM config, by building it on the meta device
    (no memory, no download): ``total``, ``largest_unit`` (biggest FSDP block) and ``root``."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    cfg = dict(config)
    model_type = cfg.pop("model_type")
    hf_cfg = AutoConfig.for_model(model_type, **cfg)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(hf_cfg)
    total = sum(p.numel() for p in model.parameters())  # parameters() yields tied weights once
    units = shard_units(model)
    unit_sizes = [sum(p.numel() for p in u.parameters()) for u in units]
    return {"total": total, "largest_unit": max(unit_sizes, default=0), "root": total - sum(unit_sizes)}


#: Bytes per token one transformer block saves for backward, ``a*h + b*kv + c*I`` (h width, kv
#: the key/value width, I the MLP width), measured -- not derived -- on CPU with
#: ``torch.autograd.graph.saved_tensors_hooks`` over Qwen2.5-VL decoder blocks (transformers 5,
#: SDPA attention, no dropout; 6 shapes, tests/test_precision.py re-measures one): float32
#: compute 35h + 8kv + 16I (within 2%); bf16 autocast over float32 weights 40h + 6kv + 15I
#: (measured 11-15 B per MLP element depending on the shape; the larger is taken, so the
#: estimate is 0-28% high there). The residual stream, RMSNorm and RoPE stay float32 under
#: autocast, so bf16 is not half the float32 figure.
#: The naive count of the block's saved inputs (Korthikanti et al. 2022, sec. 4.1, for GQA +
#: SwiGLU: 7h + 2kv + 4I elements) is 2.5x low on the h term under autocast.
BLOCK_BYTES = {"float32": (35, 8, 16), "bf16": (40, 6, 15)}


def block_activation_bytes(hidden: int, intermediate: int, kv: int, compute: str) -> int:
    """Bytes per token one block keeps for backward under ``compute`` (``float32`` | ``bf16``)."""
    a, b, c = BLOCK_BYTES[compute]
    return a * hidden + b * kv + c * intermediate


#: Qwen2-VL / Qwen2.5-VL image processor default ``max_pixels`` (preprocessor_config.json)
QWEN_VL_MAX_PIXELS = 12845056


def _vision_dims(vc: dict[str, Any]) -> tuple[int, int, int, int, int]:
    """(blocks, width, MLP width, patch, merge) of a Qwen2-VL / Qwen2.5-VL vision config."""
    width = int(vc.get("embed_dim") or vc.get("hidden_size"))
    if "embed_dim" in vc:  # Qwen2-VL: hidden_size is the merger's output width
        mlp = int(width * vc.get("mlp_ratio", 4))
    else:
        mlp = int(vc.get("intermediate_size", 4 * width))
    return int(vc["depth"]), width, mlp, int(vc.get("patch_size", 14)), int(vc.get("spatial_merge_size", 2))


def tokens_per_sample(conf: dict[str, Any], cfg: Any, max_pixels: int) -> dict[str, int]:
    """Token counts of one training sample for the activation and logit estimates.

    ``text`` = ``distributed.plan_text_tokens`` + the response tokens (``rollout.max_new_tokens``,
    times ``env.max_steps`` for the multiturn builder); images: ``rollout.history_images``
    screenshots of ``distributed.plan_screen_size`` resized as the Qwen-VL processor does
    (UI-TARS smart_resize: sides multiples of patch * merge, at most ``max_pixels``), each giving
    ``patches`` vision-tower tokens and ``patches / merge**2`` decoder tokens. ``trained`` = the
    positions that reach lm_head (response tokens of one sample)."""
    from guigym.core.dialects.uitars import smart_resize

    r = cfg.rollout
    responses = r.max_new_tokens * (cfg.env.max_steps if cfg.algorithm.sample_builder == "multiturn" else 1)
    vc = conf.get("vision_config") or {}
    patches = merged = 0
    if r.history_images and vc:
        _, _, _, patch, merge = _vision_dims(vc)
        w, h = cfg.distributed.plan_screen_size
        rh, rw = smart_resize(h, w, factor=patch * merge, max_pixels=max_pixels)
        per = (rh // patch) * (rw // patch)
        patches, merged = per * r.history_images, per // (merge * merge) * r.history_images
    return {"text": cfg.distributed.plan_text_tokens + responses, "patches": patches, "image_tokens": merged,
            "trained": responses}


def activation_bytes(conf: dict[str, Any], tokens: dict[str, int], checkpointing: bool, compute: str,
                     residual_bytes: int = _FP32) -> int:
    """Activations of one sample kept for backward (bytes): every block's saved tensors
    (:data:`BLOCK_BYTES`), or with gradient checkpointing each block's input (the residual
    stream, ``residual_bytes`` per element: float32 weights keep it float32 even under autocast)
    plus one block's recomputed set."""
    tc = conf.get("text_config") or conf
    h, inter = int(tc["hidden_size"]), int(tc["intermediate_size"])
    kv = h * int(tc.get("num_key_value_heads") or tc["num_attention_heads"]) // int(tc["num_attention_heads"])
    layers = int(tc["num_hidden_layers"])
    n_text = tokens["text"] + tokens["image_tokens"]
    block = block_activation_bytes(h, inter, kv, compute)
    total = n_text * ((layers * h * residual_bytes + block) if checkpointing else layers * block)
    vc = conf.get("vision_config") or {}
    if tokens["patches"] and vc:
        depth, vw, vmlp, _, _ = _vision_dims(vc)
        vblock = block_activation_bytes(vw, vmlp, vw, compute)
        total += tokens["patches"] * ((depth * vw * residual_bytes + vblock) if checkpointing else depth * vblock)
    return total


#: float32 (N, V) tensors alive at the peak of the vocabulary step (guigym.train.policy.logprobs
#: masked_logprobs + its backward): the float32 cast / tempered / masked logits that logsumexp
#: saves, logsumexp's exp temporary, and the float32 gradient of the logits with its
#: pass-through copy before it is cast back to the compute dtype
LOGIT_FP32_COPIES = 4


def memory_plan(params: dict[str, int], lora: bool, mixed_precision: str, dtype: str, worlds: tuple[int, ...] = (1, 8),
                strategy: str = "auto", lora_params: int = 0, reference: bool = False,
                logits: int = 0, activations: int = 0) -> list[dict[str, Any]]:
    """Bytes per GPU of one training process for each world size.

    Full fine-tuning: float32 master weights (4 B/param), float32 grads (4 B), AdamW exp_avg +
    exp_avg_sq (8 B) -- 16 B/param, divided by ``world`` under FSDP (plus one all-gathered unit
    in the compute dtype while it runs). LoRA: the frozen base in ``dtype`` replicated (DDP),
    adapters at 16 B/param. ``reference`` (``algorithm.beta > 0`` without LoRA): the frozen copy
    of the initial weights, in bf16 under ``mixed_precision: bf16`` (float32 otherwise), sharded
    like the model under FSDP; under LoRA the reference is the base with adapters off (free).
    ``logits`` / ``activations``: bytes of one micro-batch (:func:`format_plan` computes them),
    the same on every rank."""
    rows = []
    for world in worlds:
        strat = resolve_strategy(strategy, lora, world)
        if lora:
            base = params["total"] * (_BF16 if dtype in ("bfloat16", "float16") else _FP32)
            row = {"world": world, "strategy": strat, "params": base + lora_params * _FP32,
                   "grads": lora_params * _FP32, "optimizer": lora_params * 2 * _FP32, "gathered_unit": 0,
                   "reference": 0}
        else:
            shard = world if strat == "fsdp" else 1
            per = math.ceil(params["total"] / shard)
            gather = _BF16 if mixed_precision == "bf16" else _FP32
            row = {"world": world, "strategy": strat, "params": per * _FP32, "grads": per * _FP32,
                   "optimizer": per * 2 * _FP32,
                   # transient: the root unit stays gathered through the forward while one block is gathered
                   "gathered_unit": (params["largest_unit"] + params["root"]) * gather if strat == "fsdp" else 0,
                   "reference": per * gather if reference else 0}
        row["logits"], row["activations"] = logits, activations
        row["total"] = sum(row[k] for k in ("params", "grads", "optimizer", "gathered_unit", "reference", "logits",
                                            "activations"))
        rows.append(row)
    return rows


def _max_pixels(path: Optional[str]) -> int:
    """``max_pixels`` of the model's image processor (preprocessor_config.json) or the Qwen default."""
    if path:
        f = Path(path) / "preprocessor_config.json"
        if f.is_file():
            pc = json.loads(f.read_text())
            size = pc.get("size") or {}
            return int(pc.get("max_pixels") or size.get("longest_edge") or QWEN_VL_MAX_PIXELS)
    return QWEN_VL_MAX_PIXELS


#: share of a GPU's memory the plan may use: the rest is the CUDA context, NCCL buffers and the
#: caching allocator's fragmentation
USABLE_FRACTION = 0.9


def build_plan(cfg: Any) -> dict[str, Any]:
    """Everything ``--check`` reports: parameter counts, token counts, per-GPU rows."""
    m = cfg.model
    conf, source = model_config_for(m.path, m.tiny.model_dump() if m.path is None else None)
    params = count_parameters(conf)
    tokens = tokens_per_sample(conf, cfg, _max_pixels(m.path))
    compute = _BF16 if m.mixed_precision == "bf16" or m.dtype in ("bfloat16", "float16") else _FP32
    vocab = int((conf.get("text_config") or {}).get("vocab_size") or conf.get("vocab_size") or 0)
    mb = cfg.algorithm.per_device_train_batch_size
    logits = mb * tokens["trained"] * vocab * (compute + LOGIT_FP32_COPIES * _FP32)
    low = m.dtype in ("bfloat16", "float16")  # a LoRA base in bf16: everything computes in bf16
    acts = mb * activation_bytes(conf, tokens, m.gradient_checkpointing,
                                 "bf16" if m.mixed_precision == "bf16" or low else "float32",
                                 _BF16 if low else _FP32)
    reference = cfg.algorithm.beta > 0
    worlds = (cfg.distributed.gpus,) if cfg.distributed.gpus else (1, 8)
    kw = dict(reference=reference, logits=logits, activations=acts)
    rows = memory_plan(params, m.lora.enabled, m.mixed_precision, m.dtype, worlds=worlds,
                       strategy=cfg.distributed.strategy, **kw)
    if rows[-1]["strategy"] == "fsdp":  # what replication would cost, for comparison
        rows += [dict(memory_plan(params, m.lora.enabled, m.mixed_precision, m.dtype, worlds=(rows[-1]["world"],),
                                  strategy="ddp", **kw)[0], note="(for comparison)")]
    return {"conf": conf, "source": source, "params": params, "tokens": tokens, "vocab": vocab, "rows": rows,
            "micro_batch": mb}


def check_plan(cfg: Any, plan: Optional[dict[str, Any]] = None) -> None:
    """Raise :class:`ConfigError` naming the settings when the plan does not fit the stated GPUs
    (``distributed.gpus`` x ``distributed.gpu_memory_gib``); nothing to check without them."""
    d = cfg.distributed
    if d.gpus is None and d.gpu_memory_gib is None:
        return
    if d.gpus is None or d.gpu_memory_gib is None:
        missing = "distributed.gpus" if d.gpus is None else "distributed.gpu_memory_gib"
        raise ConfigError(f"{missing}: required with the other (the memory plan is checked against GPUs x memory)")
    plan = plan or build_plan(cfg)
    row = plan["rows"][0]
    gib = 1024 ** 3
    usable = USABLE_FRACTION * d.gpu_memory_gib
    if row["total"] / gib <= usable:
        return
    parts = ", ".join(f"{k} {row[k] / gib:.1f}" for k in ("params", "grads", "optimizer", "gathered_unit",
                                                            "reference", "logits", "activations") if row[k])
    hints = []
    if row["strategy"] != "fsdp" and not cfg.model.lora.enabled:
        hints.append("distributed.strategy: fsdp with more distributed.gpus (shards params, grads and AdamW)")
    if not cfg.model.gradient_checkpointing:
        hints.append("model.gradient_checkpointing: true")
    if cfg.algorithm.per_device_train_batch_size > 1:
        hints.append("a smaller algorithm.per_device_train_batch_size (with more optim.gradient_accumulation_steps)")
    if not cfg.model.lora.enabled:
        hints.append("model.lora.enabled: true")
    raise ConfigError(
        f"distributed.gpus: {d.gpus} GPU(s) x distributed.gpu_memory_gib: {d.gpu_memory_gib:g} do not fit this "
        f"recipe: {row['total'] / gib:.1f} GiB per GPU needed ({row['strategy']}: {parts} GiB) > "
        f"{usable:.1f} GiB usable ({USABLE_FRACTION:.0%}). Try " + "; or ".join(hints))


def format_plan(cfg: Any, plan: Optional[dict[str, Any]] = None) -> str:
    """The precision, sharding and memory plan of a :class:`~guigym.train.config.TrainConfig` as
    text (``guigym train RECIPE --check``)."""
    m = cfg.model
    plan = plan or build_plan(cfg)
    params, tokens = plan["params"], plan["tokens"]
    lora = m.lora.enabled
    gib = 1024 ** 3
    lines = [f"model: {params['total'] / 1e9:.3f} B parameters ({params['total']:,}) from {plan['source']}",
             f"  largest FSDP unit {params['largest_unit']:,} params; root unit (embeddings, lm_head, merger, norms) "
             f"{params['root']:,}"]
    if lora:
        lines.append(f"precision: frozen base weights in {m.dtype}; LoRA adapters (r={m.lora.r}) float32 with AdamW; "
                     f"compute {'bf16 autocast' if m.mixed_precision == 'bf16' else m.dtype}")
    else:
        lines.append(f"precision: float32 master weights, float32 gradients, float32 AdamW moments; compute "
                     f"{'bf16 (torch.autocast; FSDP all-gathers bf16, reduces float32)' if m.mixed_precision == 'bf16' else 'float32'}")
        if cfg.algorithm.beta > 0:
            lines.append(f"reference model (algorithm.beta > 0): frozen copy in "
                         f"{'bf16' if m.mixed_precision == 'bf16' else 'float32'}, sharded like the model under FSDP")
    lines.append(f"sharding: distributed.strategy = {cfg.distributed.strategy}"
                 + (f"; distributed.gpus = {cfg.distributed.gpus} x {format(cfg.distributed.gpu_memory_gib or 0, 'g') or '?'} GiB"
                    if cfg.distributed.gpus else " (no distributed.gpus stated: shown for 1 and 8 GPUs, not checked)"))
    lines.append(f"tokens per sample: {tokens['text']} text (distributed.plan_text_tokens + responses) + "
                 f"{tokens['image_tokens']} image tokens ({cfg.rollout.history_images} screenshot(s) of "
                 f"{cfg.distributed.plan_screen_size[0]}x{cfg.distributed.plan_screen_size[1]}: {tokens['patches']} "
                 f"vision-tower patches); {tokens['trained']} reach lm_head; micro-batch {plan['micro_batch']}")
    lines.append("  GPUs  strategy    params     grads     AdamW  gathered       ref    logits  activat.     total"
                 "  (GiB per GPU)")
    for r in plan["rows"]:
        lines.append(f"  {r['world']:>4}  {r['strategy']:<9}" + "".join(
            f" {r[k] / gib:>9.2f}" for k in ("params", "grads", "optimizer", "gathered_unit", "reference", "logits",
                                            "activations", "total")) + (f"  {r['note']}" if r.get("note") else ""))
    lines.append(f"  gathered = transient compute-dtype copy of the root + one block under FSDP; logits = (N, V) "
                 f"in the compute dtype + {LOGIT_FP32_COPIES} float32 copies (masked_logprobs and its gradient), "
                 f"N = micro-batch x {tokens['trained']}, V = {plan['vocab']}; activations: "
                 f"{'gradient checkpointing (block inputs + one recomputed block)' if m.gradient_checkpointing else 'every block saved (no gradient checkpointing)'}, "
                 f"per-block bytes measured with SDPA attention (parallel.BLOCK_BYTES); a GPU may use {USABLE_FRACTION:.0%} of its memory")
    return "\n".join(lines)
