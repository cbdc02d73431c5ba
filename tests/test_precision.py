"""Precision of full fine-tuning: float32 master weights with bf16 autocast keep a 1e-6 AdamW
update that pure bf16 weights round away; pure-bf16 AdamW is refused with the fix named; and
``guigym train RECIPE --check`` prints the precision and sharding plan of the 7B recipe."""
from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from guigym.core.errors import ConfigError  # noqa: E402
from guigym.train.config import AlgorithmConfig, LoraConfig, OptimConfig, from_dict  # noqa: E402
from guigym.train.data.types import Step, Trajectory  # noqa: E402
from guigym.train.samples import build_stepwise  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MINIMAL = {"run": {"name": "r", "dir": "/tmp/x"}, "env": {"tasks": ["click-test"]}}


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread):
    """One intra-op torch thread for this module (tests/conftest.py says why)."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from guigym.train.policy.tiny import build

    return build(tmp_path_factory.mktemp("prec-models") / "tiny", seed=4)


def _policy(tiny, dtype="float32"):
    from guigym.train.policy.hf_policy import HFPolicy

    return HFPolicy(tiny, dtype=dtype)


def _samples(tiny):
    pol = _policy(tiny)
    enc = pol.encode_chat([{"role": "user", "content": "Click on the button."}])
    trajs = []
    for i, o in enumerate(pol.generate([enc] * 4, max_new_tokens=12, seeds=list(range(4)))):
        st = Step(prompt_ids=enc.prompt_ids, response_ids=o.response_ids, rollout_logprobs=o.logprobs, policy_version=0)
        trajs.append(Trajectory(traj_id=f"t{i}", run_id="r", task_id="t", seed=0, group_id="g", steps=[st],
                                reward=float(i % 2)))
    return build_stepwise(trajs, {t.traj_id: (1.0 if t.reward else -1.0) for t in trajs})


def _decoder_weights(model):
    return {k: v for k, v in model.named_parameters() if ".layers." in k and k.endswith("proj.weight")}


def test_a_1e_6_update_survives_with_fp32_master_weights_and_bf16_autocast(tiny):
    from guigym.train.learner import Learner

    samples = _samples(tiny)
    learner = Learner(_policy(tiny), AlgorithmConfig(tis_cap=None), OptimConfig(learning_rate=1e-6, max_grad_norm=None),
                      mixed_precision="bf16")
    before = {k: v.detach().clone() for k, v in _decoder_weights(learner.model).items()}
    # the forward really computes in bf16: a decoder projection sees bf16 inputs
    q_proj = next(m for n, m in learner.model.named_modules() if n.endswith("layers.0.self_attn.q_proj"))
    seen = []
    handle = q_proj.register_forward_hook(lambda mod, args, out: seen.append((args[0].dtype, out.dtype)))
    try:
        learner.update(samples)
    finally:
        handle.remove()
    assert seen and all(d == (torch.float32, torch.bfloat16) or d == (torch.bfloat16, torch.bfloat16) for d in seen), seen
    assert all(out == torch.bfloat16 for _, out in seen)
    after = _decoder_weights(learner.model)
    assert all(p.dtype == torch.float32 for p in after.values())  # master weights stay float32
    w = torch.cat([before[k].flatten() for k in before])
    delta = torch.cat([(after[k].detach() - before[k]).flatten() for k in before])
    # AdamW's first step is lr * g / (|g| + eps) ~ 1e-6 in magnitude wherever the gradient is non-zero
    assert (delta != 0).float().mean() > 0.9, "most decoder weights must move"
    moved = delta[delta != 0].abs()
    assert 0.5e-6 < float(moved.median()) < 1.5e-6
    # contrast -- the refused setup's arithmetic: the same update applied to bf16 weights
    w16 = w.bfloat16()
    lost = ((w16 + delta.bfloat16()) == w16) & (delta != 0)
    assert lost.float().sum() / (delta != 0).float().sum() > 0.9, "in bf16 almost every such update rounds away"
    assert bool((torch.tensor(0.02, dtype=torch.bfloat16) + torch.tensor(1e-6, dtype=torch.bfloat16))
                == torch.tensor(0.02, dtype=torch.bfloat16))


def test_pure_bf16_adamw_is_refused_and_the_fix_named(tiny):
    from guigym.train.learner import Learner

    with pytest.raises(ConfigError) as e:
        from_dict({**MINIMAL, "model": {"dtype": "bfloat16"}})
    msg = str(e.value)
    assert "model.dtype" in msg and "model.mixed_precision: bf16" in msg and "model.lora.enabled: true" in msg
    ok = from_dict({**MINIMAL, "model": {"dtype": "float32", "mixed_precision": "bf16"}})
    assert ok.model.mixed_precision == "bf16"
    # the learner refuses too (a programmatic caller never went through the recipe)
    with pytest.raises(ConfigError, match="model.dtype: the trained parameters are bfloat16"):
        Learner(_policy(tiny, "bfloat16"), AlgorithmConfig(), OptimConfig())
    # a frozen bf16 base under LoRA is fine: only the float32 adapters are updated
    lora = Learner(_policy(tiny, "bfloat16"), AlgorithmConfig(), OptimConfig(), lora=LoraConfig(enabled=True, r=4))
    trainable = [p for p in lora.model.parameters() if p.requires_grad]
    assert trainable and all(p.dtype == torch.float32 for p in trainable)


def test_reference_model_is_kept_in_bf16_under_bf16_autocast(tiny):
    """beta > 0 keeps a frozen copy of the initial weights; read only under bf16 autocast, it is
    stored in bf16 (half the memory), its RoPE buffers stay float32, and its log-probs match the
    policy's at the start (KL ~ 0 up to bf16 rounding)."""
    from guigym.train.learner import Learner

    samples = _samples(tiny)
    learner = Learner(_policy(tiny), AlgorithmConfig(beta=0.1), OptimConfig(), mixed_precision="bf16")
    ref = learner.ref_model
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in ref.parameters())
    assert all(p.dtype == torch.float32 for p in learner.model.parameters())
    floats = [b for b in ref.buffers() if b.is_floating_point()]
    assert floats and all(b.dtype == torch.float32 for b in floats)  # inv_freq: bf16 would shift positions
    batch = learner.collate(samples)
    with torch.no_grad():
        pol = learner.logprobs(batch)
    refl = learner._ref_logprobs(batch)
    mask = batch.mask.bool()
    assert torch.allclose(refl[mask], pol[mask], atol=0.1), (refl[mask] - pol[mask]).abs().max()
    full = Learner(_policy(tiny), AlgorithmConfig(beta=0.1), OptimConfig())  # no autocast: float32 reference
    assert all(p.dtype == torch.float32 for p in full.ref_model.parameters())


def _check(recipe, *sets):
    """(exit code, stdout, stderr) of ``guigym train RECIPE --check --set ...``."""
    from contextlib import redirect_stderr

    from guigym.train.main import main

    out, err = io.StringIO(), io.StringIO()
    args = [str(recipe), "--check"] + [a for kv in sets for a in ("--set", kv)]
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(args)
    return rc, out.getvalue(), err.getvalue()


def _rows(text):
    plan = text.split("# precision and sharding plan", 1)[1]
    return {(int(ln.split()[0]), ln.split()[1]): [float(x) for x in ln.split()[2:10]]
            for ln in plan.splitlines() if ln.strip()[:1].isdigit()}


SEVEN_B = sorted((ROOT / "recipes").glob("*uitars7b*.yaml"))


@pytest.mark.parametrize("recipe", SEVEN_B, ids=lambda p: p.stem)
def test_check_passes_the_7b_recipes_on_their_stated_gpus_and_refuses_one_gpu(recipe):
    rc, out, err = _check(recipe)
    assert rc == 0, err
    assert "distributed.gpus = 8 x 80 GiB" in out
    (world, strategy), row = next(iter(_rows(out).items()))
    assert (world, strategy) == (8, "fsdp") and row[-1] < 0.9 * 80
    # the same recipe as a one-GPU full fine-tune: refused, naming the setting and the fix
    rc, out, err = _check(recipe, "distributed.gpus=1")
    assert rc == 2
    assert "distributed.gpus: 1 GPU(s)" in err and "distributed.gpu_memory_gib: 80" in err
    assert "distributed.strategy: fsdp with more distributed.gpus" in err
    # a plan needs both numbers
    rc, _, err = _check(recipe, "distributed.gpu_memory_gib=null")
    assert rc == 2 and "distributed.gpu_memory_gib: required" in err


def test_check_refuses_rollout_servers_that_cannot_serve_the_7b_recipes():
    """The 7B recipes send 5 screenshots and fully fine-tune: guigym serve (images, admin reload)
    works; stock vLLM takes no images with token-id prompts and refreshes only adapters or by a
    restart command, which --check names before anything starts."""
    recipe = ROOT / "recipes" / "grpo_osworld_uitars7b.yaml"
    rc, _, err = _check(recipe, "rollout.http_api=vllm", "rollout.weight_sync=null")
    assert rc == 2 and "rollout.history_images: 5 screenshots" in err and "http_api: guigym" in err
    rc, _, err = _check(recipe, "rollout.http_api=vllm", "rollout.weight_sync=null", "rollout.history_images=0")
    assert rc == 2 and "rollout.weight_sync: 'lora'" in err and "model.lora.enabled is false" in err
    rc, _, err = _check(recipe, "rollout.http_api=vllm", "rollout.history_images=0")  # the recipe's admin sync
    assert rc == 2 and "rollout.weight_sync: 'admin'" in err
    rc, _, err = _check(recipe, "rollout.weight_sync=restart")
    assert rc == 2 and "rollout.restart_command" in err
    # the working vLLM setup for full fine-tuning: text-only prompts, restart per server
    rc, _, err = _check(recipe, "rollout.http_api=vllm", "rollout.history_images=0", "rollout.weight_sync=restart",
                        "rollout.restart_command=[restart-vllm, '{index}', '{path}']")
    assert rc == 0, err


def test_check_counts_reference_logits_and_activations():
    recipe = ROOT / "recipes" / "grpo_osworld_uitars7b.yaml"  # beta 0, gradient checkpointing, 5 screenshots
    base = ["distributed.gpus=8"]
    rows = _rows(_check(recipe, *base)[1])
    plain = rows[(8, "fsdp")]
    params, grads, adam, gathered, ref, logits, acts, total = plain
    assert ref == 0 and logits > 0 and acts > 0
    assert total == pytest.approx(sum(plain[:7]), abs=0.02)
    gib = 1024 ** 3
    n = 8_292_166_656  # printed and checked against the model card by the test below
    # beta > 0: a frozen bf16 reference, sharded 8 ways (2 B/param / 8); replicated under DDP
    with_ref = _rows(_check(recipe, *base, "algorithm.beta=0.1")[1])
    assert with_ref[(8, "fsdp")][4] == pytest.approx(2 * n / 8 / gib, abs=0.01)
    assert with_ref[(8, "ddp")][4] == pytest.approx(2 * n / gib, abs=0.01)
    assert _rows(_check(recipe, *base, "algorithm.beta=0.1", "model.mixed_precision='no'")[1])[(8, "fsdp")][4] == \
        pytest.approx(4 * n / 8 / gib, abs=0.01)
    # logits: N = micro-batch x response tokens rows of V, at least a bf16 copy + a float32 one and
    # its float32 gradient (10 B per entry), linear in N
    v = 152064
    assert logits >= 10 * 512 * v / gib
    double = _rows(_check(recipe, *base, "rollout.max_new_tokens=1024")[1])[(8, "fsdp")]
    assert double[5] == pytest.approx(2 * logits, abs=0.015)  # printed with 2 decimals
    # activations: grow with screenshots; without gradient checkpointing every decoder block keeps
    # far more than its input (a 7B recipe then no longer fits 80 GiB, and --check says so)
    fewer = _rows(_check(recipe, *base, "rollout.history_images=1")[1])[(8, "fsdp")]
    assert fewer[6] < acts / 2
    rc, out, err = _check(recipe, *base, "distributed.gpu_memory_gib=80", "model.gradient_checkpointing=false")
    assert _rows(out)[(8, "fsdp")][6] > 5 * acts
    assert rc == 2 and "model.gradient_checkpointing: true" in err


@pytest.mark.parametrize("compute", ["float32", "bf16"])
def test_activation_estimate_matches_measured_saved_tensors(compute):
    """The plan's per-block activation bytes against what autograd really saves for backward
    (saved_tensors_hooks, unique storages, parameters excluded) in a random Qwen2.5-VL decoder of
    a width the constants were not measured at: within 25%."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    from guigym.train.parallel import block_activation_bytes

    h, inter, heads, kv_heads, layers, n = 192, 1000, 6, 2, 2, 160
    hd = h // heads
    cfg = AutoConfig.for_model("qwen2_5_vl", text_config=dict(
        vocab_size=256, hidden_size=h, intermediate_size=inter, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv_heads, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                       "mrope_section": [hd // 2 - 2 * (hd // 6), hd // 6, hd // 6]}),
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=h))
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(cfg).train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        if t.is_floating_point() and t.numel() and t.untyped_storage().data_ptr() not in params:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    ids = torch.randint(10, 200, (1, n))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
            torch.autocast("cpu", dtype=torch.bfloat16, enabled=compute == "bf16"):
        model.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
    measured = sum(saved.values())
    estimate = n * layers * block_activation_bytes(h, inter, h * kv_heads // heads, compute)
    assert 0.75 < estimate / measured < 1.25, (estimate, measured)


def test_check_prints_the_precision_and_sharding_plan_of_the_7b_recipe():
    # no GPUs stated: the plan for 1 and 8 GPUs, not checked
    rc, text, err = _check(ROOT / "recipes" / "grpo_osworld_uitars7b.yaml", "distributed.gpus=null",
                           "distributed.gpu_memory_gib=null")
    assert rc == 0, err
    plan = text.split("# precision and sharding plan", 1)[1]
    assert "float32 master weights" in plan and "bf16" in plan
    # Qwen2.5-VL-7B / UI-TARS-1.5-7B: 8.29 B parameters (its Hugging Face model card)
    n = int(plan.split(" parameters (", 1)[1].split(")", 1)[0].replace(",", ""))
    assert 8.25e9 < n < 8.33e9
    rows = {(int(ln.split()[0]), ln.split()[1]): ln.split() for ln in plan.splitlines() if ln.strip()[:1].isdigit()}
    gib = 1024 ** 3
    one, eight = rows[(1, "single")], rows[(8, "fsdp")]
    # 1 GPU: 4 B params + 4 B grads + 8 B AdamW moments per parameter, float32
    assert [float(x) for x in one[2:5]] == pytest.approx([4 * n / gib, 4 * n / gib, 8 * n / gib], abs=0.01)
    # 8 GPUs, FSDP: the same split 8 ways; replicated DDP would keep all of it on every GPU
    assert [float(x) for x in eight[2:5]] == pytest.approx([n / 2 / gib, n / 2 / gib, n / gib], abs=0.01)
    assert sum(float(x) for x in rows[(8, "ddp")][2:5]) == pytest.approx(16 * n / gib, abs=0.02)
    # pure bf16 AdamW is refused by --check itself
    rc, _, err = _check(ROOT / "recipes" / "grpo_osworld_uitars7b.yaml", "model.dtype=bfloat16",
                        "model.mixed_precision='no'")
    assert rc == 2 and "model.dtype" in err and "float32 master weights" in err
