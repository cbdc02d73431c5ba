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


def memory_plan(params: dict[str, int], lora: bool, mixed_precision: str, dtype: str, worlds: tuple[int, ...] = (1, 8),
                strategy: str = "auto", lora_params: int = 0) -> list[dict[str, Any]]:
    """Bytes per GPU of parameters, gradients and AdamW state for each world size.

    Full fine-tuning: float32 master weights (4 B/param), float32 grads (4 B), AdamW exp_avg +
    exp_avg_sq (8 B) -- 16 B/param, divided by ``world`` under FSDP (plus one all-gathered unit
    in the compute dtype while it runs). LoRA: the frozen base in ``dtype`` replicated (DDP),
    adapters at 16 B/param. Activations and logits are not included (they scale with tokens)."""
    rows = []
    for world in worlds:
        strat = resolve_strategy(strategy, lora, world)
        if lora:
            base = params["total"] * (_BF16 if dtype in ("bfloat16", "float16") else _FP32)
            row = {"world": world, "strategy": strat, "params": base + lora_params * _FP32,
                   "grads": lora_params * _FP32, "optimizer": lora_params * 2 * _FP32, "gathered_unit": 0}
        else:
            shard = world if strat == "fsdp" else 1
            per = math.ceil(params["total"] / shard)
            gather = _BF16 if mixed_precision == "bf16" else _FP32
            row = {"world": world, "strategy": strat, "params": per * _FP32, "grads": per * _FP32,
                   "optimizer": per * 2 * _FP32,
                   # transient: the root unit stays gathered through the forward while one block is gathered
                   "gathered_unit": (params["largest_unit"] + params["root"]) * gather if strat == "fsdp" else 0}
        row["total"] = row["params"] + row["grads"] + row["optimizer"] + row["gathered_unit"]
        rows.append(row)
    return rows


def format_plan(cfg: Any) -> str:
    """The precision and sharding plan of a :class:`~guigym.train.config.TrainConfig` as text
    (``guigym train RECIPE --check``)."""
    m = cfg.model
    conf, source = model_config_for(m.path, m.tiny.model_dump() if m.path is None else None)
    params = count_parameters(conf)
    lora = m.lora.enabled
    gib = 1024 ** 3
    lines = [f"model: {params['total'] / 1e9:.3f} B parameters ({params['total']:,}) from {source}",
             f"  largest FSDP unit {params['largest_unit']:,} params; root unit (embeddings, lm_head, merger, norms) "
             f"{params['root']:,}"]
    if lora:
        lines.append(f"precision: frozen base weights in {m.dtype}; LoRA adapters (r={m.lora.r}) float32 with AdamW; "
                     f"compute {'bf16 autocast' if m.mixed_precision == 'bf16' else m.dtype}")
    else:
        lines.append(f"precision: float32 master weights, float32 gradients, float32 AdamW moments; compute "
                     f"{'bf16 (torch.autocast; FSDP all-gathers bf16, reduces float32)' if m.mixed_precision == 'bf16' else 'float32'}")
    lines.append(f"sharding: distributed.strategy = {cfg.distributed.strategy} (per world size below)")
    lines.append("  GPUs  strategy    params     grads     AdamW  gathered     total  (GiB per GPU; gathered = "
                 "transient bf16/fp32 copy of the root + one block under FSDP; activations not included)")
    rows = memory_plan(params, lora, m.mixed_precision, m.dtype, strategy=cfg.distributed.strategy)
    if rows[-1]["strategy"] == "fsdp":  # what replication would cost, for comparison
        rows += [dict(memory_plan(params, lora, m.mixed_precision, m.dtype, worlds=(8,), strategy="ddp")[0],
                      note="(for comparison)")]
    for r in rows:
        lines.append(f"  {r['world']:>4}  {r['strategy']:<9} {r['params'] / gib:>8.2f}  {r['grads'] / gib:>8.2f}  "
                     f"{r['optimizer'] / gib:>8.2f}  {r['gathered_unit'] / gib:>8.2f}  {r['total'] / gib:>8.2f}"
                     + (f"  {r['note']}" if r.get("note") else ""))
    vocab = conf.get("text_config", {}).get("vocab_size") or conf.get("vocab_size")
    if vocab:
        lines.append(f"logits: only response positions reach lm_head: {vocab * 4 / 1024:.0f} KiB float32 per "
                     f"response token (vocab {vocab}); rollout.max_new_tokens={cfg.rollout.max_new_tokens} -> "
                     f"{cfg.rollout.max_new_tokens * vocab * 4 / 2**20:.0f} MiB per sample, independent of prompt length")
    return "\n".join(lines)
