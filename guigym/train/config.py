"""Typed, validated training configuration (the YAML recipe behind ``guigym train RECIPE``).

Every section is a pydantic model with ``extra="forbid"``: an unknown key is an error that names
the key and its path (``algorithm.epsilom: unknown key; allowed: ...``). Every field carries a
description citing where the knob comes from and its default. Names follow TRL's ``GRPOConfig``
where TRL has the knob (``num_generations``, ``beta``, ``epsilon``, ``epsilon_high``,
``loss_type``, ``learning_rate``, ``max_grad_norm``, ``gradient_accumulation_steps``,
``num_iterations``, ``scale_rewards``, ``temperature``, ...); DART's (Li et al. 2025, "Efficient
Multi-turn RL for GUI Agents via Decoupled Training and Adaptive Data Curation") where it is
DART's (``tis_cap`` for the truncated importance weight, eq. 2; ``advantage: stepwise`` for eq. 1).

    cfg = load_recipe("recipes/grpo_miniwob_tiny.yaml", overrides=["optim.learning_rate=1e-3"])
    print(describe())          # every knob with its help text (guigym train --help-config)
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal, Optional, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from guigym.core.errors import ConfigError


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# ---- model ------------------------------------------------------------------------------------
class TinyModelConfig(_Section):
    """Sizes for :func:`guigym.train.policy.tiny.build` (a fresh random Qwen2.5-VL-architecture model)."""

    seed: int = Field(0, description="torch seed of the random init (guigym.train.policy.tiny.build; default 0)")
    hidden: int = Field(64, gt=0, description="decoder width (tiny.build `hidden`; default 64)")
    layers: int = Field(2, gt=0, description="decoder depth (tiny.build `layers`; default 2)")
    vocab_size: int = Field(800, ge=300, description="BPE vocabulary size before the special tokens "
                                                     "(tiny.build_tokenizer; default 800)")
    tokenizer_from_demos: bool = Field(
        False, description="stage sft only: also train the tokenizer on the demonstrations' prompt text and actions "
                           "(guigym.train.demos.tokenizer_texts), so the task's words and element ids are single "
                           "tokens (default false: the built-in corpus only)")

    @field_validator("hidden")
    @classmethod
    def _heads(cls, v: int) -> int:
        if v % 8:
            raise ValueError(f"must be a multiple of 8 (4 heads x even head dim), got {v}")
        return v


class LoraConfig(_Section):
    """LoRA adapters via peft (Hu et al. 2021, "LoRA"; peft.LoraConfig names)."""

    enabled: bool = Field(False, description="train LoRA adapters instead of all weights (default false)")
    r: int = Field(8, gt=0, description="adapter rank (peft LoraConfig.r; default 8)")
    lora_alpha: int = Field(16, gt=0, description="scaling alpha (peft LoraConfig.lora_alpha; default 16)")
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout on the adapter input (peft; default 0.0)")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description="module-name suffixes that get adapters (peft LoraConfig.target_modules; default the "
                    "attention projections q/k/v/o_proj as in the LoRA paper)")


class ModelConfig(_Section):
    path: Optional[str] = Field(
        None, description="from_pretrained directory of the policy (e.g. a Qwen2.5-VL / UI-TARS checkpoint). "
                          "Default null: build a fresh tiny model into <run.dir>/init_model (see `tiny`).")
    tiny: TinyModelConfig = Field(default_factory=TinyModelConfig,
                                  description="sizes of the fresh tiny model built when `path` is null")
    warm_start: Optional[str] = Field(
        None, description="an SFT recipe (stage: sft; path relative to this recipe's folder) whose output is the "
                          "starting policy: taken from the cache ($GUIGYM_CACHE/warmstart/<key>, default "
                          "~/.cache/guigym) or the copy shipped in guigym/assets/warmstart, else built once and "
                          "cached, keyed by that recipe's config (guigym.train.warmstart). Excludes `path`. "
                          "MobileRL/WebRL/DART all start RL from a model that already reads its prompt")
    device: str = Field("cpu", description="torch device of the learner ('cpu', 'cuda', 'cuda:0'; default cpu)")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="dtype the weights are stored in (transformers `dtype`; default float32). Full "
                               "fine-tuning needs float32 master weights (AdamW updates of ~1e-6 round away in "
                               "bf16/fp16: bf16(w + 1e-6) == w for |w| >= 2**-11); bfloat16/float16 only for a "
                               "frozen LoRA base. Compute precision is `mixed_precision`")
    mixed_precision: Literal["no", "bf16"] = Field(
        "no", description="compute dtype of the learner's forward/backward (accelerate `mixed_precision`; "
                          "Micikevicius et al. 2018 'Mixed precision training'): 'bf16' = torch.autocast(bfloat16) "
                          "over float32 master weights (under FSDP also bf16 all-gathers, float32 gradient "
                          "reduction); 'no' = compute in model.dtype (default no; fp16 is not offered: it needs "
                          "loss scaling)")
    lora: LoraConfig = Field(default_factory=LoraConfig, description="optional LoRA adapters (peft)")
    gradient_checkpointing: bool = Field(False, description="recompute activations in backward "
                                                            "(TRL/transformers `gradient_checkpointing`; default false)")

    @model_validator(mode="after")
    def _no_pure_low_precision_adamw(self) -> "ModelConfig":
        if self.dtype != "float32" and not self.lora.enabled:
            raise ValueError(
                f"model.dtype: {self.dtype} with full fine-tuning (model.lora.enabled: false) makes AdamW update "
                f"{self.dtype} weights in place, where small updates round away ({self.dtype}(w + 1e-6) == w for "
                f"|w| >= {'2**-11' if self.dtype == 'bfloat16' else '2**-8'}); set model.dtype: float32 with model.mixed_precision: bf16 (float32 master "
                f"weights, bf16 compute), or train LoRA adapters (model.lora.enabled: true)")
        return self


# ---- environment ------------------------------------------------------------------------------
class SeedRange(_Section):
    """Episode seeds ``start, start+1, ..., start+count-1``."""

    start: int = Field(0, ge=0, description="first seed")
    count: int = Field(1000, gt=0, description="number of seeds")

    def seeds(self) -> list[int]:
        return list(range(self.start, self.start + self.count))


class EnvConfig(_Section):
    id: str = Field("MiniWoB-v0", description="Gymnasium id of the env (guigym registration; default MiniWoB-v0)")
    kwargs: dict[str, Any] = Field(default_factory=dict,
                                   description="keyword arguments for gym.make in every EnvPool worker "
                                               "(e.g. isolation: page for MiniWoB; default {})")
    tasks: list[str] = Field(..., min_length=1, description="task ids to train on (required)")
    num_envs: int = Field(4, gt=0, description="EnvPool workers = parallel episodes (DART 'env workers'; default 4)")
    max_steps: Optional[int] = Field(None, gt=0, description="per-episode step budget (the task's own "
                                                              "max_steps when null; MiniWoB default 15)")
    train_seeds: SeedRange = Field(default_factory=lambda: SeedRange(start=0, count=100_000),
                                   description="seeds episodes are drawn from during training (default 0..99999)")
    call_timeout_s: float = Field(120.0, gt=0, description="EnvPool per-call timeout; a worker that exceeds "
                                                           "it is replaced and its rollout is lost (default 120)")
    serials: list[str] = Field(default_factory=list,
                               description="Android envs: one adb serial (or host:port) per env worker, env.num_envs "
                                           "of them; worker i and every restart of it drive device i, a Ray actor "
                                           "per device with run.backend ray (default []: env.kwargs as they are)")

    @model_validator(mode="after")
    def _one_device_per_env(self) -> "EnvConfig":
        if self.serials:
            from guigym.envs.pool import per_env_kwargs

            if len(self.serials) != self.num_envs:
                raise ValueError(f"env.serials: {len(self.serials)} device(s) for env.num_envs {self.num_envs}; "
                                 "give one serial per env worker")
            per_env_kwargs(self.kwargs, self.num_envs, self.serials, "env.serials")
        return self


# ---- rollout ----------------------------------------------------------------------------------
class RolloutConfig(_Section):
    engine: Literal["hf", "http", "latency_model"] = Field(
        "hf", description="policy service: 'hf' = in-process batched HF engine (CPU/one GPU), 'http' = "
                          "OpenAI-compatible servers (guigym serve / vllm serve) in `urls`, 'latency_model' = a "
                          "stand-in that sleeps a stated 7B-VLM latency model per batch and replies with seeded "
                          "LatencyModel-v0 clicks, for scale benchmarks (guigym.train.rollout.latency_engine; default hf)")
    latency_model: dict[str, float] = Field(
        default_factory=dict, description="engine=latency_model: rate_rps, floor_s, sync_s, time_scale, p_correct "
                                          "and, for run.topology coupled, workers (modelled GPU workers of the one "
                                          "engine; decoupled uses decoupled.num_policy_workers); update_gpus > 0 "
                                          "makes each trainer update last the stated 7B update time on that many "
                                          "GPUs (update_tokens_per_sample, update_tokens_per_s_per_gpu, "
                                          "update_forward_passes; UpdateLatencyModel) (default {})")
    urls: list[str] = Field(default_factory=list, description="server base URLs for engine=http (least-loaded "
                                                               "routing, one-at-a-time weight refresh as in DART)")
    token_env: str = Field("GUIGYM_SERVE_TOKEN", description="environment variable holding the servers' bearer "
                                                             "token for engine=http (the token is never in the recipe)")
    http_api: Literal["guigym", "vllm"] = Field(
        "guigym", description="engine=http server kind: 'guigym' = guigym serve (token-id chat extensions, "
                              "/v1/admin/reload); 'vllm' = unmodified `vllm serve` (/v1/completions with token-id "
                              "prompts; text-only prompts; start it with --logprobs-mode processed_logprobs). See "
                              "guigym.train.rollout.policy_service (default guigym)")
    served_model: str = Field("policy", description="engine=http: the model name the servers serve (vLLM: the "
                                                    "model path or --served-model-name; default policy)")
    weight_sync: Optional[Literal["admin", "lora", "restart"]] = Field(
        None, description="engine=http weight refresh, one server at a time (DART sec. 3.3): 'admin' = guigym "
                          "serve's /v1/admin/reload; 'lora' = vLLM's /v1/load_lora_adapter with the trained "
                          "adapters (needs model.lora, VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora); "
                          "'restart' = run `restart_command` per server, then wait for /health (default: admin for "
                          "guigym, lora for vllm)")
    restart_command: list[str] = Field(
        default_factory=list, description="weight_sync=restart: command (no shell) restarting server {index} "
                                          "({url}) from the new model directory {path}")
    mode: Literal["rollout", "sync"] = Field(
        "rollout", description="'rollout' = each env asks for its next action as soon as its observation is "
                               "ready (DART sec. 3.4 rollout-wise scheduling); 'sync' = lockstep baseline (default rollout)")
    num_generations: int = Field(8, ge=2, description="G, rollouts per task in one group (TRL `num_generations`; "
                                                       "DeepSeekMath GRPO; default 8)")
    groups_per_iteration: int = Field(4, gt=0, description="groups (tasks x seed) collected per training iteration "
                                                           "(batch = groups_per_iteration * num_generations trajectories; default 4)")
    temperature: float = Field(1.0, gt=0.0, description="sampling temperature T of training rollouts (TRL "
                                                        "`temperature`; default 1.0). Rollouts sample from "
                                                        "softmax(logits / T) and record log-probs under it; the "
                                                        "learner recomputes and trains at the same T (TRL divides "
                                                        "logits by T in the loss). Greedy (0) is refused: a group "
                                                        "of identical rollouts has nothing to learn from")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling (TRL `top_p`; default 1.0 = off). Only 1.0 "
                                                          "is accepted: see `top_k`")
    top_k: int = Field(0, ge=0, description="top-k sampling (TRL `top_k`; default 0 = off). Only 0 is accepted for "
                                            "training: under a truncated distribution a token sampled by the rollout "
                                            "policy can fall outside the current policy's top-k/top-p set, giving a "
                                            "log-prob of -inf and an undefined PPO ratio. The checkpoint's "
                                            "generation_config.json defaults are never applied either")
    repetition_penalty: float = Field(1.0, gt=0.0, description="(TRL `repetition_penalty`; default 1.0 = off). Only "
                                                               "1.0 is accepted: a penalised distribution is not the "
                                                               "policy the learner trains")
    max_new_tokens: int = Field(32, gt=0, description="max response tokens per step (TRL `max_completion_length`; "
                                                      "default 32)")
    constrained: bool = Field(True, description="constrained decoding to the candidate actions of the current "
                                                "observation (a11y element ids); the learner applies the same mask "
                                                "when it recomputes log-probs (default true)")
    template: Optional[str] = Field(
        None, description="prompt template: a name in guigym/agents/prompts (e.g. uitars_computer) or a text with "
                          "$instruction/$a11y/$history; null = guigym.train.rollout.prompts.DEFAULT_TEMPLATE "
                          "(element actions on the a11y tree)")
    candidate_actions: list[str] = Field(
        default_factory=lambda: ["click"], description="element verbs offered as candidates for each a11y node "
                                                       "(guigym.train.rollout.constrain.ELEMENT_ACTIONS; default [click])")
    candidate_roles: Union[Literal["any"], list[str], None] = Field(
        None, description="a11y roles that get candidates: null = WAI-ARIA interactive roles "
                          "(constrain.INTERACTIVE_ROLES), 'any' = every visible node, or a list (default null)")
    grid_candidates: Optional[int] = Field(None, gt=0, description="also offer click(x, y) at the centres of a grid "
                                                                    "of this cell size in pixels (default null = none)")
    a11y_format: Literal["compact", "xml"] = Field(
        "compact", description="how the observation's a11y text enters the prompt: 'compact' = one line per visible "
                               "node of guigym's web a11y XML (guigym.train.rollout.prompts.compact_a11y); 'xml' = the "
                               "env's text as is, e.g. Android's MobileRL simplified XML (MobileRL appendix C), "
                               "which 'compact' cannot read (default compact)")
    candidate_source: Literal["a11y", "mobilerl"] = Field(
        "a11y", description="constrained candidates: 'a11y' = element actions on the web a11y XML's ids "
                            "(candidate_actions, candidate_roles); 'mobilerl' = MobileRL's action space on an Android "
                            "screen: AndroidLab do(action=\"Tap\", element=[box]) for every clickable node of the "
                            "simplified XML, then Back, Home and finish() (guigym.models.constrain_android; the env's "
                            "dialect must be androidlab; default a11y)")
    history_images: int = Field(0, ge=0, description="screenshots of the last k steps in the prompt (UI-TARS-style "
                                                     "history; 0 = text-only a11y prompt; default 0)")
    max_batch: int = Field(16, gt=0, description="HF engine: max requests per forward batch (default 16)")
    max_wait_ms: float = Field(5.0, ge=0.0, description="HF engine: how long a batch waits to fill (default 5 ms)")
    max_lost_retries: int = Field(3, ge=0, description="retries of a rollout lost to an EnvInfraError (never scored 0; "
                                                       "default 3)")
    policy_retries: int = Field(2, ge=0, description="a policy request that fails (server refused, timed out, HTTP 5xx) "
                                                     "is sent again this often, then its rollout is lost and rerun "
                                                     "(never scored 0; default 2)")
    policy_backoff_s: float = Field(1.0, ge=0.0, description="seconds before the first policy retry, doubling each "
                                                             "time, at most 30 (default 1)")

    @model_validator(mode="after")
    def _plain_tempered_sampling(self) -> "RolloutConfig":
        for name, off in (("top_p", 1.0), ("top_k", 0), ("repetition_penalty", 1.0)):
            if getattr(self, name) != off:
                raise ValueError(f"rollout.{name}: {getattr(self, name)!r} is refused for training; rollouts sample "
                                 f"from softmax(logits / temperature) only, so recorded, recomputed and trained "
                                 f"log-probs are of one distribution (leave {name} at {off!r})")
        return self


# ---- algorithm --------------------------------------------------------------------------------
class PluginSpec(_Section):
    """One plug-in of a chain: its registry name and keyword options."""

    name: str = Field(..., min_length=1, description="registered name")
    options: dict[str, Any] = Field(default_factory=dict, description="keyword options of its factory")


#: a plug-in chain in a recipe: one name, one {name, options}, or a list of them (run in order)
PluginChain = Union[str, PluginSpec, list[Union[str, PluginSpec]]]


class AlgorithmConfig(_Section):
    advantage: str = Field(
        "grpo", description="name in ADVANTAGE_ESTIMATORS (guigym.train.algorithms.estimators): 'grpo' = trajectory "
                            "reward normalised within its group (Shao et al. 2024 DeepSeekMath, GRPO outcome "
                            "supervision); 'stepwise_grpo' (alias 'stepwise') = step-wise GRPO (DART eq. 1). "
                            "Default grpo")
    policy_loss: Union[str, PluginSpec] = Field(
        "ppo_clip", description="name (or {name, options}) in POLICY_LOSSES (guigym.train.algorithms.policy_losses): "
                                "'ppo_clip' = PPO clipped surrogate (default); 'webrl_kl_regression' = WebRL eq. 6, "
                                "replaces PPO (needs beta > 0)")
    scale_rewards: Literal["std", "none"] = Field(
        "std", description="divide group-centred rewards by the group std ('std', DeepSeekMath) or not ('none', "
                           "Dr. GRPO, Liu et al. 2025) (TRL `scale_rewards`; default std)")
    adv_eps: float = Field(1e-4, gt=0, description="added to the group std before dividing (TRL uses 1e-4)")
    sample_builder: Literal["stepwise", "multiturn"] = Field(
        "stepwise", description="'stepwise' = each step is one prompt->response sample (DART, UI-TARS); "
                                "'multiturn' = one sequence per trajectory, env tokens masked out of the loss "
                                "(verl multi-turn). Default stepwise")
    loss_type: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"] = Field(
        "token-mean", description="loss aggregation (verl `loss_agg_mode`; TRL `loss_type` 'dapo' = token-mean, "
                                  "'grpo' = seq-mean-token-mean, 'dr_grpo' = seq-mean-token-sum-norm, whose constant "
                                  "is the most trained tokens one sample holds: rollout.max_new_tokens for the "
                                  "stepwise builder, env.max_steps * rollout.max_new_tokens for multiturn; default "
                                  "token-mean as DAPO)")
    epsilon: float = Field(0.2, gt=0, lt=1, description="lower clip range: ratio >= 1 - epsilon (TRL `epsilon`; PPO, "
                                                  "Schulman et al. 2017; default 0.2)")
    epsilon_high: Optional[float] = Field(
        None, gt=0, description="upper clip range: ratio <= 1 + epsilon_high (TRL `epsilon_high`; DAPO clip-higher, "
                                "Yu et al. 2025, uses 0.28); null = epsilon")
    beta: float = Field(0.0, ge=0, description="KL coefficient to the frozen reference model (TRL `beta`; 0 disables "
                                               "the reference model, as TRL's default 0.0)")
    kl_estimator: Literal["k1", "k3"] = Field(
        "k3", description="KL estimator (Schulman 2020 'Approximating KL divergence'), with r = pi_ref / pi_theta "
                          "evaluated on tokens sampled from pi_theta: k1 = -log r = log pi_theta - log pi_ref "
                          "(unbiased, can be negative), k3 = r - 1 - log r (unbiased, >= 0); default k3 as "
                          "DeepSeekMath eq. 4)")
    tis_cap: Optional[float] = Field(
        2.0, gt=0, description="C of the truncated importance weight min(pi_train_old / pi_rollout, C) that corrects "
                               "rollout-engine vs trainer mismatch (DART eq. 2; Yao et al. 2025 'Your efficient RL "
                               "framework secretly brings you off-policy RL training'); null disables it (default 2.0)")
    num_iterations: int = Field(1, gt=0, description="optimisation epochs over each batch (TRL `num_iterations`, "
                                                     "the mu of GRPO; default 1)")
    per_device_train_batch_size: int = Field(16, gt=0, description="samples per forward/backward micro-batch "
                                                                   "(TRL name; default 16)")
    reward_shaper: PluginChain = Field(
        "default", description="REWARD_SHAPERS (guigym.train.algorithms.registry): a name, {name, options} or a list "
                               "run in order, each refining the previous one's rewards (default identity = verifier "
                               "score)")
    group_builder: PluginChain = Field("default", description="GROUP_BUILDERS chain (default: fresh rollouts only)")
    task_sampler: PluginChain = Field("default", description="TASK_SAMPLERS chain (default: uniform over the tasks)")
    step_filter: PluginChain = Field("default", description="STEP_FILTERS chain; a step is trained if every filter "
                                                            "keeps it (default: keep all steps)")
    extra_losses: list[Union[str, PluginSpec]] = Field(
        default_factory=list, description="EXTRA_LOSSES added to the policy loss, scaled like it (default none)")
    rollout_planners: PluginChain = Field(
        default_factory=list, description="ROLLOUT_PLANNERS chain choosing each group's rollout count N and step "
                                          "budget per iteration (DART dynamic N / length; default none: "
                                          "rollout.num_generations and env.max_steps)")
    conditioners: PluginChain = Field(
        default_factory=list, description="CONDITIONERS chain attaching guidance text to a rollout's prompt, recorded "
                                          "on its trajectory (BEPA plans, UI-Mem memory; default none)")
    task_sources: PluginChain = Field(
        default_factory=list, description="TASK_SOURCES adding tasks during the run, provenance stored in the "
                                          "DataStore (WebRL self-evolving curriculum; default none)")
    trajectory_sources: PluginChain = Field(
        default_factory=list, description="TRAJECTORY_SOURCES offering replay / expert / cached trajectories to the "
                                          "group builder as its pool; stored before use (default none)")
    plugin_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="keyword options per plug-in name, e.g. {top_entropy: {fraction: 0.2}}, used "
                                          "when a chain entry gives none (default {})")
    skip_zero_advantage_groups: bool = Field(
        True, description="drop groups all of whose advantages are 0, computed after reward shaping (DAPO dynamic "
                          "sampling keeps only informative groups; a shaped bonus inside an all-success group "
                          "keeps it; default true)")


# ---- optimiser --------------------------------------------------------------------------------
class OptimConfig(_Section):
    learning_rate: float = Field(1e-6, gt=0, description="AdamW peak learning rate (TRL GRPOConfig default 1e-6; "
                                                        "tiny random models need ~1e-3)")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay (transformers TrainingArguments; default 0)")
    adam_beta1: float = Field(0.9, ge=0, lt=1, description="AdamW beta1 (transformers default 0.9)")
    adam_beta2: float = Field(0.999, ge=0, lt=1, description="AdamW beta2 (transformers default 0.999)")
    adam_epsilon: float = Field(1e-8, gt=0, description="AdamW epsilon (transformers default 1e-8)")
    max_grad_norm: Optional[float] = Field(1.0, gt=0, description="global grad-norm clip (transformers default 1.0; "
                                                                  "null disables)")
    gradient_accumulation_steps: int = Field(
        1, gt=0, description="split each optimizer step's samples into this many accumulation chunks "
                             "(transformers/TRL name; default 1)")
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = Field(
        "constant", description="LR schedule over run.iterations training iterations: the scheduler steps once per "
                                "iteration, not per optimizer step (transformers names; default constant)")
    warmup_steps: int = Field(0, ge=0, description="linear warm-up length in training iterations (the scheduler "
                                                   "steps once per iteration; transformers' name; default 0)")


# ---- evaluation -------------------------------------------------------------------------------
class EvalConfig(_Section):
    enabled: bool = Field(False, description="evaluate before and after training and test the difference "
                                             "(two-proportion z-test; default false)")
    tasks: Optional[list[str]] = Field(None, description="tasks to evaluate (default: env.tasks)")
    seeds: SeedRange = Field(default_factory=lambda: SeedRange(start=1_000_000, count=50),
                             description="held-out seeds, disjoint from env.train_seeds (default 1000000..+50)")
    temperature: float = Field(1.0, ge=0, description="sampling temperature at evaluation (default 1.0: the "
                                                      "policy's own success rate; 0 = greedy)")


# ---- sft --------------------------------------------------------------------------------------
class DemoConfig(_Section):
    """Where the demonstrations of ``stage: sft`` come from (guigym.train.demos)."""

    source: Literal["agent", "eval_dir", "demos_file"] = Field(
        "agent", description="'agent' = play `agent` in the recipe's env on `seeds`; 'eval_dir' = replay the episodes a "
                             "`guigym eval` output directory (`path`) solved, with replay:<path>; 'demos_file' = the "
                             "demos.jsonl an earlier SFT run collected (`path`; e.g. a pipeline's previous stage), "
                             "read as is, nothing played (default agent)")
    agent: str = Field("oracle", description="agent spec that demonstrates (as `guigym eval --agent`: oracle, "
                                             "replay:DIR, hf:PATH, openai:URL; default oracle)")
    path: Optional[str] = Field(None, description="source eval_dir: the `guigym eval --out` directory; source "
                                                  "demos_file: a demos.jsonl (its images in the sibling demos_images/)")
    tasks: Optional[list[str]] = Field(None, description="tasks to demonstrate (default env.tasks)")
    seeds: SeedRange = Field(default_factory=lambda: SeedRange(start=2_000_000, count=200),
                             description="episode seeds per task (source agent; default 2000000..+200); must not "
                                         "overlap eval.seeds")
    num_envs: Optional[int] = Field(None, gt=0, description="envs that play demonstrations in parallel "
                                                            "(default env.num_envs)")
    instruction_variants: bool = Field(
        False, description="also train every other instruction a one-step demonstration page could have been asked, "
                           "with its solving action (guigym.agents.oracle.miniwob.instruction_variants; MiniWoB "
                           "click-button, unicode-test, click-widget; default false)")
    variants_as: Literal["samples", "turns"] = Field(
        "samples", description="how instruction variants are trained: 'samples' = each its own sequence (the page "
                               "encoded once per question); 'turns' = one sequence per page, the other questions as "
                               "further chat turns after the page's own prompt and reply (guigym.train.demos."
                               "packed_samples: the page encoded once; the first turn is the GRPO prompt) "
                               "(default samples)")


class AnnotatorConfig(_Section):
    """The reasoning annotator of reasoning SFT (guigym.train.annotator): any OpenAI-compatible
    ``/chat/completions`` server, asked once per demonstration step for a short reasoning that leads
    to the demonstrated action (MobileRL, Xu et al. 2025, sec. 2.1 "Reasoning SFT": an off-the-shelf
    instruction model bootstraps reasoning for action-only expert demonstrations)."""

    url: str = Field(..., min_length=1, description="server base URL including the API prefix, e.g. "
                                                    "http://127.0.0.1:8000/v1 (vllm serve, guigym serve, any "
                                                    "OpenAI-compatible API); /chat/completions is appended")
    model: str = Field(..., min_length=1, description="the `model` field of each request (required)")
    token_env: Optional[str] = Field(
        "GUIGYM_ANNOTATOR_TOKEN", description="environment variable holding the bearer token (never in the recipe); "
                                              "null = send no Authorization header (default GUIGYM_ANNOTATOR_TOKEN, "
                                              "which must then be set)")
    prompt: Optional[str] = Field(
        None, description="user message template with $instruction, $observation (the step's compact a11y text, as "
                          "the policy's prompt shows it), $action (the demonstrated action) and $step; null = "
                          "guigym.train.annotator.DEFAULT_PROMPT")
    system: Optional[str] = Field(None, description="system message (null = guigym.train.annotator.DEFAULT_SYSTEM)")
    max_tokens: int = Field(128, gt=0, description="`max_tokens` of each request (default 128)")
    temperature: float = Field(0.0, ge=0.0, description="`temperature` of each request (default 0: one "
                                                        "deterministic rationale per step)")
    max_chars: int = Field(400, gt=0, description="a longer reasoning is cut at the last word boundary before this "
                                                  "many characters (default 400)")
    timeout_s: float = Field(60.0, gt=0, description="per-request timeout in seconds (default 60)")
    retries: int = Field(2, ge=0, description="retries of a request that failed with a connection error, HTTP 429 or "
                                              "5xx (exponential back-off); then the stage stops with an error "
                                              "(default 2)")
    concurrency: int = Field(4, gt=0, description="requests in flight at once (default 4)")


class SFTConfig(_Section):
    """Supervised fine-tuning on demonstrations (``stage: sft``): NLL of the demonstrated reply tokens
    (Ouyang et al. 2022 'Training language models to follow instructions', SFT step), prompts rendered by
    the same PromptBuilder/constraint path as GRPO. One `run.iterations` step = one epoch."""

    demos: DemoConfig = Field(default_factory=DemoConfig, description="where the demonstrations come from")
    output_dir: Optional[str] = Field(None, description="from_pretrained directory the trained policy is written to "
                                                        "(default <run.dir>/model): a GRPO recipe's model.path")
    reply_template: str = Field(
        "$action", description="the reply the policy is trained to write for each demonstrated step: $action (the "
                               "demonstrated canonical action) and, for reasoning SFT, $reasoning (the annotator's "
                               "text), e.g. 'Thought: $reasoning\\nAction: $action' (MobileRL sec. 2.1; parse such "
                               "replies in RL with env.kwargs.dialect: thought). Anything but '$action' needs "
                               "rollout.constrained: false (default '$action': reasoning-free SFT)")
    annotator: Optional[AnnotatorConfig] = Field(
        None, description="the reasoning annotator (needed when reply_template has $reasoning; default null)")

    @model_validator(mode="after")
    def _reasoning(self) -> "SFTConfig":
        t = self.reply_template
        if "$action" not in t and "${action}" not in t:
            raise ValueError("sft.reply_template: must contain $action (the demonstrated action)")
        wants = "$reasoning" in t or "${reasoning}" in t
        if wants and self.annotator is None:
            raise ValueError("sft.annotator: reply_template has $reasoning, so an annotator (url, model) is needed")
        if self.annotator is not None and not wants:
            raise ValueError("sft.reply_template: an annotator is set but the template has no $reasoning to put its "
                             "text in")
        return self


# ---- run --------------------------------------------------------------------------------------
class RunConfig(_Section):
    name: str = Field(..., min_length=1, description="run name; the DataStore resumes a run with the same name")
    dir: str = Field(..., min_length=1, description="run directory: checkpoints, metrics.jsonl, guigym.db, blobs")
    seed: int = Field(0, description="seed of python/numpy/torch RNGs and of task/seed sampling (default 0)")
    iterations: int = Field(10, gt=0, description="training iterations (collect -> update -> sync); each takes "
                                                  "ceil(samples / (per_device_train_batch_size * "
                                                  "gradient_accumulation_steps * world_size)) optimizer steps, "
                                                  "times algorithm.num_iterations (default 10)")
    checkpoint_every: int = Field(1, gt=0, description="save a checkpoint every N iterations (default 1)")
    keep_checkpoints: int = Field(2, gt=0, description="keep the last N checkpoints (TRL `save_total_limit`; default 2)")
    save_model_every: int = Field(0, ge=0, description="also write a from_pretrained model dir every N iterations "
                                                       "(0 = only the checkpoint; default 0)")
    torch_threads: Optional[int] = Field(
        None, gt=0, description="torch intra-op threads of the trainer process (torch.set_num_threads; null = torch's "
                                "default). On a small CPU box shared with Chromium, 1 avoids thread oversubscription "
                                "(measured here: a tiny-model forward 0.14 s with 1 thread vs 1.3 s with 2 under load)")
    tensorboard: bool = Field(False, description="older name of log.tensorboard (either one turns it on; default false)")
    db_url: Optional[str] = Field(None, description="SQLAlchemy URL of the DataStore (default "
                                                    "sqlite:///<run.dir>/guigym.db; postgresql+psycopg://... for clusters)")
    blob_root: Optional[str] = Field(None, description="fsspec URL/path for blobs (default <run.dir>/blobs)")
    backend: Literal["process", "ray"] = Field(
        "process", description="where the rollout envs run: 'process' = one worker process per env on this machine "
                               "(guigym.envs.EnvPool); 'ray' = one Ray actor per env, placed on any node of a Ray "
                               "cluster with the resources of the `ray` section (guigym.envs.ray_backend.RayEnvPool; "
                               "needs the ray extra). Same trajectories and first update for the same seeds; an actor "
                               "that dies loses its rollout, which is rerun and never scored (default process)")
    topology: Literal["coupled", "decoupled"] = Field(
        "coupled", description="how rollout and training are arranged: 'coupled' = the synchronous loop (collect -> "
                               "update -> sync, guigym.train.loop); 'decoupled' = DART's four long-lived Ray services "
                               "(Li et al. 2025, sec. 3: env cluster, rollout service, data manager, trainer) that "
                               "never wait for one another; knobs in the `decoupled` section "
                               "(guigym.train.decoupled; needs the ray extra; default coupled)")


class RayConfig(_Section):
    """The Ray cluster of ``run.backend: ray`` (guigym.envs.ray_backend.RayEnvPool): one actor per env
    (``env.num_envs`` of them), each holding ``num_cpus`` and ``resources`` for its lifetime."""

    address: Optional[str] = Field(
        None, description="ray.init address when Ray is not initialised yet: 'auto' (the cluster this machine "
                          "joined with `ray start`), 'ray://head:10001' (Ray client) or null = start a local Ray "
                          "with enough logical CPUs for every env, shut down at the end (ray.init `address`; "
                          "default null)")
    num_cpus: float = Field(1.0, ge=0, description="logical CPUs each env actor holds (Ray actor option `num_cpus`; "
                                                   "default 1)")
    resources: dict[str, float] = Field(
        default_factory=dict, description="custom Ray resources each env actor holds, e.g. {desktop: 1} or "
                                          "{android_device: 1}, declared on the nodes by `ray start --resources` "
                                          "(Ray actor option `resources`; default {})")


class DecoupledConfig(_Section):
    """DART's decoupled system (Li et al. 2025, "Efficient Multi-turn RL for GUI Agents via Decoupled
    Training and Adaptive Data Curation", sec. 3), used when ``run.topology: decoupled``
    (guigym.train.decoupled). ``run.iterations`` counts trainer updates."""

    num_policy_workers: int = Field(
        2, gt=0, description="rollout-service workers for rollout.engine=hf: in-process HF engines, each with its own "
                             "copy of the weights; requests go to the least-loaded one (DART sec. 3.4 'dynamic "
                             "model service pool'). engine=http: one worker per rollout.urls entry, this is ignored (default 2)")
    max_concurrent_weight_updates: int = Field(
        1, gt=0, description="k: at most this many workers reload weights at any moment while the others keep "
                             "serving (DART sec. 3.5 'per-worker model synchronization'; default 1)")
    max_policy_lag: int = Field(
        1, ge=0, description="staleness bound: a trajectory sampled by policy version v is trained at version V "
                             "only if V - v <= max_policy_lag; older ones follow `stale_policy`. Within the bound "
                             "the truncated importance weight (algorithm.tis_cap, DART eq. 2) corrects the "
                             "mismatch (default 1)")
    stale_policy: Literal["drop", "reweight"] = Field(
        "drop", description="trajectories older than max_policy_lag: 'drop' = never reach the loss (never marked "
                            "used in the DataStore; listed in <run.dir>/decoupled_events.json); 'reweight' = trained "
                            "with advantages scaled by "
                            "stale_weight ** (lag - max_policy_lag), recorded per sample (default drop)")
    stale_weight: float = Field(0.5, gt=0.0, le=1.0, description="per-version factor of stale_policy: reweight "
                                                                 "(default 0.5)")
    groups_per_update: Optional[int] = Field(
        None, gt=0, description="finished groups the trainer takes per update; it trains as soon as that many are "
                                "ready while rollouts continue (DART sec. 3.3 'asynchronous trainer'; null = rollout.groups_per_iteration)")
    num_env_clusters: int = Field(
        1, gt=0, description="env-cluster actors; env.num_envs envs are split among them and each pulls tasks from "
                             "the data manager on its own. Within a cluster the envs run rollout-wise with no barrier "
                             "between jobs: a free env starts the next pending rollout or pulls the next one at once, "
                             "and a group's members may run in different clusters (DART sec. 3.4) (default 1)")
    max_buffered_groups: Optional[int] = Field(
        None, gt=0, description="back-pressure: env clusters start no new group while this many groups are "
                                "running or ready but not yet trained on (null = 2 x groups_per_update)")
    actor_num_cpus: float = Field(0.0, ge=0.0, description="logical CPUs Ray reserves for each service actor (data "
                                                           "manager, rollout service, env cluster; envs keep "
                                                           "ray.num_cpus; default 0)")


class LogConfig(_Section):
    """Where the per-iteration metrics go besides ``<run.dir>/metrics.jsonl`` (always written), and
    the progress display (guigym.train.metrics_sinks, guigym.train.progress)."""

    tensorboard: bool = Field(False, description="also write every metrics.jsonl scalar, same step and value, to "
                                                 "TensorBoard event files (torch.utils.tensorboard.SummaryWriter; "
                                                 "needs the tensorboard package, in the train extra; default false)")
    tensorboard_dir: Optional[str] = Field(None, description="TensorBoard log directory (default <run.dir>/tb); a "
                                                             "resumed run purges the events after its checkpoint")
    wandb: bool = Field(False, description="also log the scalars to Weights & Biases (needs the wandb package; "
                                           "offline unless WANDB_MODE says otherwise: `wandb sync <run.dir>/wandb` "
                                           "uploads later; default false)")
    wandb_project: str = Field("guigym", min_length=1, description="W&B project (wandb.init `project`; default "
                                                                   "'guigym')")
    wandb_entity: Optional[str] = Field(None, description="W&B entity, user or team (wandb.init `entity`; default "
                                                          "null = the account's default)")
    progress: Optional[bool] = Field(None, description="rich progress bars for iterations, rollouts and updates "
                                                       "(null = auto: on when stderr is a terminal and CI is unset; "
                                                       "default null)")


class DistributedConfig(_Section):
    strategy: Literal["auto", "ddp", "fsdp"] = Field(
        "ddp", description="data parallelism with WORLD_SIZE > 1 (guigym.train.parallel): 'fsdp' = torch FSDP2 "
                           "fully_shard, parameters/gradients/AdamW state split over ranks (Zhao et al. 2023 'PyTorch "
                           "FSDP'; ZeRO-3, Rajbhandari et al. 2020); 'ddp' = replicated DistributedDataParallel "
                           "(default); 'auto' = fsdp for full fine-tuning, ddp under LoRA. Under torchrun every rank "
                           "joins the weight gathers (weight push, checkpoints, saved models); rank 0 writes")
    backend: Literal["auto", "gloo", "nccl"] = Field(
        "auto", description="torch.distributed backend when launched with torchrun (WORLD_SIZE>1): auto = nccl "
                            "with CUDA, gloo otherwise (default auto)")
    gpus: Optional[int] = Field(
        None, ge=1, description="training GPUs (torchrun world size) the recipe is planned for; `guigym train "
                                "--check` then refuses a memory plan that does not fit gpus x gpu_memory_gib "
                                "(default None: plan shown for 1 and 8 GPUs, not checked)")
    gpu_memory_gib: Optional[float] = Field(
        None, gt=0, description="memory of each training GPU in GiB (e.g. 80 for an A100/H100 80GB); with gpus")
    plan_screen_size: tuple[int, int] = Field(
        (1920, 1080), description="screenshot width, height the memory plan assumes for rollout.history_images "
                                  "(default 1920x1080, OSWorld's screen)")
    plan_text_tokens: int = Field(
        2048, ge=0, description="prompt text tokens per sample the memory plan assumes (system prompt, "
                                "instruction, action history; default 2048)")
    ddp_timeout: int = Field(
        7200, gt=0, description="seconds a rank may wait inside a collective (transformers TrainingArguments "
                                "`ddp_timeout`, whose default is 1800). Ranks > 0 wait while rank 0 rolls out and "
                                "evaluates, so this must exceed the longest rollout + evaluation phase (default 7200)")


class TrainConfig(_Section):
    """A whole recipe. Sections: run, model, env, rollout, algorithm, optim, eval, log, distributed, ray,
    decoupled."""

    run: RunConfig
    stage: Literal["rl", "sft"] = Field(
        "rl", description="what the run trains: 'rl' = the GRPO-family loop (rollouts -> advantages -> policy loss); "
                          "'sft' = supervised fine-tuning on demonstrations (the `sft` section; one iteration = one "
                          "epoch). MobileRL and WebRL start RL from an SFT model (default rl)")
    sft: SFTConfig = Field(default_factory=SFTConfig, description="demonstrations and output of stage: sft")
    model: ModelConfig = Field(default_factory=ModelConfig)
    env: EnvConfig
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    distributed: DistributedConfig = Field(default_factory=DistributedConfig)
    ray: RayConfig = Field(default_factory=RayConfig, description="Ray cluster and per-env resources of "
                                                                  "run.backend: ray (and of run.topology: decoupled)")
    decoupled: DecoupledConfig = Field(default_factory=DecoupledConfig,
                                       description="DART's decoupled services (run.topology: decoupled)")

    @model_validator(mode="after")
    def _cross(self) -> "TrainConfig":
        if self.run.backend != "ray" and self.run.topology != "decoupled" and self.ray != RayConfig():
            # would silently do nothing (defaults: a dump)
            changed = [k for k in RayConfig.model_fields if getattr(self.ray, k) != getattr(RayConfig(), k)]
            raise ValueError(f"ray: {', '.join(changed)} set but run.backend is {self.run.backend!r}; set "
                             f"run.backend: ray or drop the ray section")
        if self.run.topology != "decoupled" and self.decoupled != DecoupledConfig():
            changed = [k for k in DecoupledConfig.model_fields
                       if getattr(self.decoupled, k) != getattr(DecoupledConfig(), k)]
            raise ValueError(f"decoupled: {', '.join(changed)} set but run.topology is 'coupled'; set "
                             f"run.topology: decoupled or drop the decoupled section")
        if self.run.tensorboard and not self.log.tensorboard:  # the older key still works
            self.log.tensorboard = True
        if (self.algorithm.loss_type == "seq-mean-token-sum-norm" and self.algorithm.sample_builder == "multiturn"
                and self.env.max_steps is None):
            # Dr. GRPO divides by the most trained tokens a sample can hold: max_steps * max_new_tokens
            raise ValueError("env.max_steps: loss_type seq-mean-token-sum-norm (Dr. GRPO) with sample_builder "
                             "multiturn divides by env.max_steps * rollout.max_new_tokens, the most trained tokens "
                             "one trajectory can hold; set env.max_steps")
        if self.rollout.engine == "http" and not self.rollout.urls:
            raise ValueError("rollout.urls: engine 'http' needs at least one server URL")
        dialect = self.env.kwargs.get("dialect")
        if self.rollout.constrained and self.rollout.candidate_source == "mobilerl" and dialect != "androidlab":
            # the candidates are AndroidLab do(...) strings; another dialect would refuse every one of them
            raise ValueError(f"env.kwargs.dialect: rollout.candidate_source 'mobilerl' offers AndroidLab do(...) "
                             f"operations, so the env must parse the androidlab dialect, got {dialect!r}")
        if self.model.warm_start and self.model.path:
            raise ValueError("model.warm_start: set together with model.path; name one starting model")
        if self.stage != "sft" and self.sft != SFTConfig():
            raise ValueError("sft: set but stage is 'rl'; set stage: sft or drop the sft section")
        if self.model.tiny.tokenizer_from_demos and self.stage != "sft":
            raise ValueError("model.tiny.tokenizer_from_demos: only a stage: sft run has demonstrations to train it on")
        if self.stage == "sft":
            d, ev = self.sft.demos, self.eval.seeds
            if d.source == "eval_dir" and not d.path:
                raise ValueError("sft.demos.path: source 'eval_dir' needs the guigym eval output directory")
            if d.source == "demos_file" and not d.path:
                raise ValueError("sft.demos.path: source 'demos_file' needs the demos.jsonl to read")
            if self.sft.reply_template.strip() != "$action" and self.rollout.constrained:
                raise ValueError("sft.reply_template: a reply other than the bare action cannot be produced under "
                                 "constrained decoding (its candidates are bare actions); set rollout.constrained: "
                                 "false")
            if d.source == "agent" and d.seeds.start < ev.start + ev.count and ev.start < d.seeds.start + d.seeds.count:
                raise ValueError(f"sft.demos.seeds [{d.seeds.start}, {d.seeds.start + d.seeds.count}) overlap eval.seeds "
                                 f"[{ev.start}, {ev.start + ev.count}); demonstrations must not see held-out seeds")
            if self.run.topology != "coupled":
                raise ValueError("run.topology: stage sft runs in the coupled loop")
        if self.rollout.engine == "http":
            self._check_http_rollout()
        if self.eval.enabled:
            tr, ev = self.env.train_seeds, self.eval.seeds
            if tr.start < ev.start + ev.count and ev.start < tr.start + tr.count:
                raise ValueError(f"eval.seeds [{ev.start}, {ev.start + ev.count}) overlap env.train_seeds "
                                 f"[{tr.start}, {tr.start + tr.count}); held-out seeds must be disjoint")
        return self

    def _check_http_rollout(self) -> None:
        """The rollout servers can take these prompts and be refreshed with these weights (what
        would otherwise fail at the first request or the first weight push, hours into a run).

        * stock vLLM (``http_api: vllm``) takes token-id prompts only without images
          (guigym.train.rollout.policy_service): screenshots need ``guigym serve``;
        * ``weight_sync`` (default ``admin`` for guigym serve, ``lora`` for vLLM): ``admin`` is guigym
          serve's reload of a full checkpoint; ``lora`` loads adapters, so it needs
          ``model.lora.enabled``; ``restart`` needs ``restart_command``."""
        r = self.rollout
        sync = r.weight_sync or ("lora" if r.http_api == "vllm" else "admin")
        if r.http_api == "vllm" and r.history_images:
            raise ValueError(f"rollout.history_images: {r.history_images} screenshots per prompt, but stock vLLM "
                             f"(rollout.http_api: vllm) takes token-id prompts without images; use http_api: guigym "
                             f"(guigym serve servers) or history_images: 0")
        if sync == "admin" and r.http_api == "vllm":
            raise ValueError("rollout.weight_sync: 'admin' is guigym serve's /v1/admin/reload, which vLLM lacks; use "
                             "lora (with model.lora) or restart (with rollout.restart_command)")
        if sync == "lora" and not self.model.lora.enabled:
            raise ValueError("rollout.weight_sync: 'lora' (the default for http_api: vllm) refreshes the servers with "
                             "the trained LoRA adapters, but model.lora.enabled is false (full fine-tuning); use "
                             "http_api: guigym (weight_sync: admin reloads the full weights) or weight_sync: restart "
                             "with rollout.restart_command")
        if sync == "restart" and not r.restart_command:
            raise ValueError("rollout.restart_command: weight_sync 'restart' needs the command that restarts one "
                             "server ({index}, {url}, {path} are filled in)")

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# ---- loading ----------------------------------------------------------------------------------
def _fields_at(model: type[BaseModel], path: Sequence[Union[str, int]]) -> Optional[list[str]]:
    """The allowed keys of the section at ``path`` (for 'did you mean' messages)."""
    cur: Any = model
    for part in path:
        if not (isinstance(cur, type) and issubclass(cur, BaseModel)) or part not in cur.model_fields:
            return None
        ann = cur.model_fields[part].annotation
        inner = [a for a in getattr(ann, "__args__", ()) if isinstance(a, type) and issubclass(a, BaseModel)]
        cur = inner[0] if len(inner) == 1 else ann  # Optional[section] -> the section
    if isinstance(cur, type) and issubclass(cur, BaseModel):
        return list(cur.model_fields)
    return None


def format_errors(err: ValidationError, source: str = "recipe") -> str:
    """pydantic errors -> lines ``<source>: <dotted.path>: <message>`` (unknown keys list the allowed ones)."""
    lines = []
    for e in err.errors():
        loc = [p for p in e["loc"]]
        path = ".".join(str(p) for p in loc) or "<root>"
        if e["type"] == "extra_forbidden":
            allowed = _fields_at(TrainConfig, [str(p) for p in loc[:-1]]) or []
            close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            lines.append(f"{source}: {path}: unknown key{hint}; allowed: {', '.join(allowed)}")
        elif e["type"] == "missing":
            lines.append(f"{source}: {path}: required key is missing")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            lines.append(f"{source}: {path}: {msg} (got {e.get('input')!r})")
    return "\n".join(lines)


def parse_override(item: str) -> tuple[list[str], Any]:
    """``'optim.learning_rate=1e-3'`` -> (['optim', 'learning_rate'], 0.001); the value is YAML."""
    import yaml

    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected key=value, e.g. optim.learning_rate=1e-3")
    key, value = item.split("=", 1)
    keys = [k for k in key.strip().split(".") if k]
    if not keys:
        raise ConfigError(f"--set {item!r}: empty key")
    return keys, yaml.safe_load(value) if value.strip() else None


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    for item in overrides:
        keys, value = parse_override(item)
        cur = data
        for k in keys[:-1]:
            nxt = cur.setdefault(k, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {item!r}: {k!r} is not a section")
            cur = nxt
        cur[keys[-1]] = value
    return data


def from_dict(data: dict[str, Any], source: str = "recipe") -> TrainConfig:
    """Validate a plain dict; raise :class:`ConfigError` with every problem named by its key path."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: top level must be a mapping of sections, got {type(data).__name__}")
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_errors(err, source)) from None


def load_recipe(path: Union[str, Path], overrides: Sequence[str] = ()) -> TrainConfig:
    """Read a YAML recipe, apply ``key.path=value`` overrides, validate. Errors name file and key."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"recipe {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections")
    if "pipeline" in data:
        raise ConfigError(f"{path}: a pipeline recipe (stages run in order): run it with `guigym train`, or load it "
                          f"with guigym.train.pipeline.load_pipeline")
    data = apply_overrides(data, overrides)
    ws = (data.get("model") or {}).get("warm_start") if isinstance(data.get("model"), dict) else None
    if isinstance(ws, str) and not Path(ws).is_absolute() and (path.parent / ws).is_file():
        data["model"]["warm_start"] = str((path.parent / ws).resolve())  # relative to the recipe's folder
    demos = ((data.get("sft") or {}).get("demos") or {}) if isinstance(data.get("sft"), dict) else {}
    dp = demos.get("path") if isinstance(demos, dict) else None
    if isinstance(dp, str) and not Path(dp).is_absolute() and (path.parent / dp).exists():
        demos["path"] = str((path.parent / dp).resolve())  # likewise
    return from_dict(data, source=str(path))


def describe(model: type[BaseModel] = TrainConfig, prefix: str = "") -> str:
    """Every knob, one per line: ``dotted.key (type, default): description`` (for --help-config)."""
    out = []
    for name, f in model.model_fields.items():
        key = f"{prefix}{name}"
        ann = f.annotation
        inner = [a for a in getattr(ann, "__args__", ()) if isinstance(a, type) and issubclass(a, BaseModel)]
        if len(inner) == 1 and type(None) in getattr(ann, "__args__", ()):  # Optional[section]: list its keys
            out.append(f"[{key}]  (optional, default null) " + (f.description or ""))
            out.append(describe(inner[0], key + "."))
            continue
        if isinstance(ann, type) and issubclass(ann, BaseModel) and ann is not SeedRange:
            out.append(f"[{key}]" + (f"  {f.description}" if f.description else ""))
            out.append(describe(ann, key + "."))
            continue
        default = "required" if f.is_required() else (
            repr(f.default_factory()) if f.default_factory is not None else repr(f.default))  # type: ignore[call-arg]
        tname = getattr(ann, "__name__", None) or str(ann).replace("typing.", "")
        out.append(f"  {key} ({tname}, default {default}): {f.description or ''}")
    return "\n".join(out)
