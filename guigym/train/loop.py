"""``guigym train RECIPE``: the GRPO training loop over real GUI envs.

One iteration ``i`` (policy version ``v = i`` before it, ``i + 1`` after); every plug-in call
gets ``ctx`` (:class:`~guigym.train.algorithms.context.PluginContext`)::

    tasks  += task_sources(ctx)                           # provenance -> store.add_tasks
    ids     = task_sampler(tasks, groups_per_iteration, stats=history as of iteration i - 1)
    plans   = rollout_planner([RolloutPlan(id, G, env.max_steps)])   # per-task N and step budget
    seeds   = iteration-seeded draws from env.train_seeds
    groups  = stored groups of iteration i (a crashed run's)  or  scheduler.collect(plans, guidance=conditioner)
    store.add_trajectories(run, groups)                   # idempotent on traj_id
    pool    = trajectory_sources(groups); groups = group_builder(groups, pool)
    store.add_trajectories(run, injected members)         # replay/expert/cache, before use
    rewards = reward_shaper chain (float or per-step list per trajectory)
    A       = advantage estimator (grpo | stepwise_grpo | ...); drop all-zero-advantage groups
    samples = stepwise | multiturn builder (exact stored token ids; step filter chain)
    learner.update(samples)                               # policy loss (ppo_clip | ...), extras, AdamW
    service.update_weights(i + 1)                         # rollouts now sample from the new policy
    store.mark_used(run, samples, i + 1); metrics row {"step": i, ...} -> metrics.jsonl (+ TensorBoard,
    W&B: the ``log`` section, guigym.train.metrics_sinks); progress bars (guigym.train.progress)
    checkpoint ckpt-i (weights, optimizer, scheduler, RNGs, every plug-in's state_dict, per-task
    history, added tasks)

Resume (``--resume``, or automatically with ``resume=True``): the newest checkpoint k is loaded,
metrics lines with step > k are dropped, and the loop continues at k + 1. Trajectories that a
killed run stored for iteration k + 1 (tagged ``info["iteration"]``) are reused instead of
collected again, so nothing is lost or counted twice (the DataStore also refuses duplicate ids).

Optional evaluation (``eval.enabled``): success rate on held-out seeds before and after
training, and a two-proportion z-test (pooled; one- and two-sided p-values, guigym.train.stats).

This module is the synchronous (and torchrun/Ray-env) trainer; ``guigym train`` and ``run()``
live in :mod:`guigym.train.main`, which picks this trainer or DART's decoupled services
(:mod:`guigym.train.decoupled`, built on this :class:`Trainer`) by ``run.topology``.

Distributed (torchrun, WORLD_SIZE > 1): rank 0 runs the envs, the policy service, the DataStore,
metrics and checkpoints; samples are broadcast and every rank trains its shard (DDP or FSDP).
Under FSDP (``distributed.strategy: fsdp``) every rank joins the gathers that need the full
weights -- weight push to the policy service, checkpoints, ``save_model_every`` -- and rank 0
writes; plug-ins on rank 0 that read the model (``ctx.policy``) use the HF rollout engine's full
copy (:meth:`Trainer.unsharded_reader`).

Env backend (``run.backend``): ``process`` runs each env in a worker process on rank 0's machine;
``ray`` runs each as a Ray actor anywhere in a Ray cluster (the ``ray`` section). Same recipe, same
trajectories and first update for the same seeds (tests/test_train_ray.py).
"""
from __future__ import annotations

import json
import os
import random
import shutil
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional, Sequence

from guigym.core.errors import ConfigError
from guigym.train.config import TrainConfig, load_recipe  # noqa: F401  (load_recipe: imported from here by users)
from guigym.train.stats import two_proportion_z  # noqa: F401  (also imported from here by users)


# ---- helpers ----------------------------------------------------------------------------------
def _fault(point: str, iteration: int) -> None:
    """Fault injection for the crash/resume test: ``GUIGYM_TRAIN_FAULT=<point>:<iteration>`` makes
    the process SIGKILL itself there (points: ``after_store``, ``after_log``). A real kill -9:
    no handler, no cleanup."""
    if os.environ.get("GUIGYM_TRAIN_FAULT") == f"{point}:{iteration}":
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def iteration_seeds(cfg: TrainConfig, iteration: int, n: int) -> list[int]:
    """Episode seeds of iteration ``iteration``: a function of (run.seed, iteration) only, so a
    resumed run draws the same seeds the uninterrupted run would have."""
    rng = random.Random(f"{cfg.run.seed}/{iteration}")
    tr = cfg.env.train_seeds
    return [tr.start + rng.randrange(tr.count) for _ in range(n)]


def _init_distributed(cfg: TrainConfig) -> tuple[int, int]:
    """(rank, world size); joins the process group torchrun describes (WORLD_SIZE > 1).

    Under NCCL each process first selects its GPU (``LOCAL_RANK``): without it every rank would
    put its model, and ``broadcast_object_list``'s buffers, on cuda:0. The group's timeout is
    ``distributed.ddp_timeout``: ranks > 0 wait inside a collective while rank 0 rolls out (and
    evaluates), which must not exceed it."""
    import datetime

    import torch

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1
    if not torch.distributed.is_initialized():
        backend = cfg.distributed.backend
        if backend == "auto":
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        timeout = getattr(cfg.distributed, "ddp_timeout", None)
        torch.distributed.init_process_group(
            backend, **({"timeout": datetime.timedelta(seconds=timeout)} if timeout else {}))
    return torch.distributed.get_rank(), torch.distributed.get_world_size()


def _broadcast(obj: Any, rank: int, world: int) -> Any:
    """Rank 0's ``obj`` on every rank (pickled; also a barrier). Identity for one process."""
    if world <= 1:
        return obj
    import torch

    box = [obj if rank == 0 else None]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


class _GatheredLearner:
    """What :func:`guigym.train.checkpoint.save` reads from a learner, with the weights and AdamW
    state already gathered from every FSDP shard (rank 0 writes them; gathering is a collective
    all ranks joined)."""

    def __init__(self, learner: Any, weights: dict[str, Any], optimizer_state: dict[str, Any]) -> None:
        self._weights = weights
        self.optimizer = SimpleNamespace(state_dict=lambda: optimizer_state)
        self.scheduler = learner.scheduler
        self.optimizer_steps = learner.optimizer_steps

    def trainable_state(self) -> dict[str, Any]:
        return self._weights

    def optimizer_state(self) -> dict[str, Any]:
        return self.optimizer.state_dict()


class Trainer:
    """The pieces of one run, built from a :class:`TrainConfig`. ``run()`` trains; the parts are
    usable on their own in tests."""

    def __init__(self, cfg: TrainConfig, resume: bool = False, log: Any = print) -> None:
        self.cfg = cfg
        self.resume = resume
        self.log = log
        import torch

        joined = torch.distributed.is_available() and torch.distributed.is_initialized()
        self.rank, self.world = _init_distributed(cfg)
        self._owns_process_group = self.world > 1 and not joined  # torchrun launch: close() leaves it
        if self.world > 1 and cfg.model.device == "cuda":  # one GPU per rank (LOCAL_RANK, set above)
            cfg.model.device = f"cuda:{torch.cuda.current_device()}"
        self.dir = Path(cfg.run.dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ckpt_root = self.dir / "checkpoints"
        self.pool = None
        self.service = None
        self.store = None
        self.run_id = ""
        self.rollout_stats: dict[str, Any] = {}
        from guigym.train.progress import TrainProgress

        self.metrics: Any = None  # rank 0: guigym.train.metrics_sinks.MetricsFanout, opened by build()
        self.progress = TrainProgress(cfg.run.iterations)  # disabled until run() knows the start

    # ---- construction -----------------------------------------------------------------------
    def model_path(self) -> str:
        if self.cfg.model.warm_start:  # an SFT recipe's output, cached by its config (guigym.train.warmstart)
            from guigym.train import warmstart

            path = str(warmstart.resolve(self.cfg.model.warm_start, log=self.log)) if self.rank == 0 else None
            return _broadcast(path, self.rank, self.world)
        if self.cfg.model.path:
            if not Path(self.cfg.model.path).is_dir():
                raise ConfigError(f"model.path: {self.cfg.model.path!r} is not a from_pretrained directory")
            return self.cfg.model.path
        path = self.dir / "init_model"
        if self.rank == 0 and not (path / "config.json").exists():
            from guigym.train.policy import tiny

            tmp = self.dir / f"init_model.tmp-{os.getpid()}"
            t = self.cfg.model.tiny
            tiny.build(tmp, seed=t.seed, hidden=t.hidden, layers=t.layers, vocab_size=t.vocab_size,
                       tokenizer_texts=self.tokenizer_texts())
            os.replace(tmp, path)
        _broadcast(None, self.rank, self.world)  # barrier: rank 0 built it
        return str(path)

    def tokenizer_texts(self) -> Optional[list[str]]:
        """Extra text for a fresh tiny model's tokenizer (None: the built-in corpus only; the SFT
        stage returns its demonstrations' text when ``model.tiny.tokenizer_from_demos``)."""
        return None

    def open_store(self) -> Any:
        from guigym.train.data.store import DataStore

        run = self.cfg.run
        if run.db_url:
            return DataStore(run.db_url, run.blob_root)
        if run.blob_root is None:
            return DataStore.for_run_dir(str(self.dir))
        return DataStore(f"sqlite:///{self.dir.resolve()}/guigym.db", run.blob_root)

    def build(self) -> None:
        from guigym.train.algorithms import registry as R
        from guigym.train.learner import Learner
        from guigym.train import metrics_sinks
        from guigym.train.policy.hf_policy import HFPolicy
        from guigym.train.samples import SAMPLE_BUILDERS

        from guigym.train import checkpoint

        cfg = self.cfg
        existing = checkpoint.latest(self.ckpt_root)
        if existing is not None and not self.resume:  # before anything expensive is loaded
            raise ConfigError(f"run.dir {str(self.dir)!r} already has checkpoints ({existing.name}); pass --resume "
                              f"to continue that run or choose a new run.dir")
        if self.rank == 0:
            from guigym.train.run_config import check_and_record

            check_and_record(self.dir, cfg.to_dict(), resuming=self.resume, log=self.log)  # --resume: same recipe
            metrics_sinks.check(cfg.log)  # a missing tensorboard / wandb package, before the model loads
        if cfg.run.torch_threads:
            import torch

            torch.set_num_threads(cfg.run.torch_threads)
        seed_everything(cfg.run.seed)
        self.build_plugins()
        extra = self.chains["extra_losses"].plugins
        self.sample_builder = SAMPLE_BUILDERS.get(cfg.algorithm.sample_builder)

        self.model_dir = self.model_path()
        self.store = self.open_store()  # rank != 0 only reads image blobs
        if self.rank == 0:
            self.run_id = self.store.start_run(cfg.run.name, cfg.to_dict())
        policy = HFPolicy(self.model_dir, device=cfg.model.device, dtype=cfg.model.dtype)
        if cfg.model.gradient_checkpointing:
            policy.model.gradient_checkpointing_enable()
        from guigym.train.samples import max_trained_tokens

        # Dr. GRPO's constant: the most trained tokens one sample can hold; None (multiturn without
        # env.max_steps) is refused by the config for seq-mean-token-sum-norm, and unused otherwise
        max_len = max_trained_tokens(cfg.algorithm.sample_builder, cfg.rollout.max_new_tokens, cfg.env.max_steps)
        self.learner = Learner(policy, cfg.algorithm, cfg.optim, cfg.model.lora, total_updates=cfg.run.iterations,
                               image_loader=(self.store.get_blob if self.store is not None else None),
                               max_len_norm=max_len if max_len is not None else cfg.rollout.max_new_tokens,
                               extra_losses=extra,
                               mixed_precision=cfg.model.mixed_precision, temperature=cfg.rollout.temperature,
                               strategy=cfg.distributed.strategy)
        self.learner.policy_loss_fn = self.policy_loss
        from guigym.train.rollout.latency_engine import modelled_update, update_model_from_config

        update_model = update_model_from_config(cfg)
        if update_model is not None:  # stand-in: a bench's update lasts as long as a 7B update on GPUs would
            self.learner.update = modelled_update(self.learner.update, update_model,
                                                  float(cfg.rollout.latency_model.get("time_scale", 1.0)))
        self.start_iteration = 0
        if existing is not None:
            state = checkpoint.load(existing, self.learner)
            self.start_iteration = int(state["iteration"]) + 1
            self.restore_plugins(state)
            self.log(f"resumed from {existing} (iteration {state['iteration']}); continuing at {self.start_iteration}")
        if self.rank == 0:
            self.metrics = metrics_sinks.open_sinks(cfg, self.dir, start_step=self.start_iteration)
            dropped = self.metrics.truncate_after(self.start_iteration - 1)
            if dropped:
                self.log(f"metrics.jsonl: dropped {dropped} line(s) written after the last checkpoint")

    def build_plugins(self) -> None:
        """Every plug-in chain of the recipe (registries in guigym.train.algorithms), in order."""
        from guigym.train.algorithms import compose as C
        from guigym.train.algorithms import registry as R
        from guigym.train.algorithms.context import TaskOutcome
        from guigym.train.algorithms.estimators import ADVANTAGE_ESTIMATORS
        from guigym.train.algorithms.policy_losses import build_policy_loss

        algo = self.cfg.algorithm
        a = self.cfg.to_dict()["algorithm"]
        opts = algo.plugin_options

        def chain(cls: Any, kind: str, registry: Any, key: str, **defaults: Any) -> Any:
            return cls(kind, C.build_all(registry, a[key], f"algorithm.{key}", opts, defaults))

        self.reward_shaper = chain(C.RewardShaperChain, "reward shaper", R.REWARD_SHAPERS, "reward_shaper")
        self.group_builder = chain(C.GroupBuilderChain, "group builder", R.GROUP_BUILDERS, "group_builder")
        self.task_sampler = chain(C.TaskSamplerChain, "task sampler", R.TASK_SAMPLERS, "task_sampler",
                                  seed=self.cfg.run.seed)
        self.step_filter = chain(C.StepFilterChain, "step filter", R.STEP_FILTERS, "step_filter")
        self.rollout_planner = chain(C.RolloutPlannerChain, "rollout planner", R.ROLLOUT_PLANNERS, "rollout_planners")
        self.conditioner = chain(C.ConditionerChain, "conditioner", R.CONDITIONERS, "conditioners")
        self.task_source = chain(C.ConcatChain, "task source", R.TASK_SOURCES, "task_sources")
        self.trajectory_source = chain(C.ConcatChain, "trajectory source", R.TRAJECTORY_SOURCES, "trajectory_sources")
        self.advantage_estimator = chain(C.Chain, "advantage estimator", ADVANTAGE_ESTIMATORS, "advantage",
                                         scale=algo.scale_rewards, eps=algo.adv_eps)
        name, popts = C.parse_specs(a["policy_loss"], "algorithm.policy_loss")[0]
        self.policy_loss = build_policy_loss(name, algo, popts if popts is not None else opts.get(name, {}))
        self.chains = {
            "reward_shaper": self.reward_shaper, "group_builder": self.group_builder,
            "task_sampler": self.task_sampler, "step_filter": self.step_filter,
            "rollout_planners": self.rollout_planner, "conditioners": self.conditioner,
            "task_sources": self.task_source, "trajectory_sources": self.trajectory_source,
            "advantage": self.advantage_estimator, "policy_loss": C.Chain("policy loss", [(name, self.policy_loss)]),
            "extra_losses": C.Chain("extra loss", C.build_all(R.EXTRA_LOSSES, a["extra_losses"],
                                                                "algorithm.extra_losses", opts)),
        }
        self.tasks: list[str] = list(self.cfg.env.tasks)
        self.history: dict[str, TaskOutcome] = {}
        # WebRL's pieces share one phase length: the curriculum's new tasks, the replay's eligible
        # buffer and scoring actor, and the reference of eq. 6 all turn over at the same boundary
        phases = {f"{k}: {n}": int(getattr(p, "phase_iterations", None) or getattr(p, "reference_every"))
                  for k, c in self.chains.items() for n, p in c.members
                  if getattr(p, "phase_iterations", None) or getattr(p, "reference_every", None)}
        if len(set(phases.values())) > 1:
            raise ConfigError("algorithm.plugin_options: the phase_iterations of "
                              + ", ".join(f"{k} ({v})" for k, v in phases.items()) + " differ; WebRL's curriculum, "
                              "replay and reference turn over together (sec. 2.2), give them one value")

    def plugin_state(self) -> dict[str, Any]:
        """JSON state of the loop's plug-ins and cursors as of the end of the current iteration."""
        return {"plugins": {k: c.state_dict() for k, c in self.chains.items()},
                "history": {k: v.to_dict() for k, v in sorted(self.history.items())},
                "tasks": list(self.tasks)}

    def restore_plugins(self, state: dict[str, Any]) -> None:
        """Restore :meth:`plugin_state` from a checkpoint's state (older checkpoints: the task
        sampler's state only; history rebuilt from the DataStore's finished iterations)."""
        from guigym.train.algorithms.context import TaskOutcome, outcomes_of

        if "plugins" in state:
            for k, c in self.chains.items():
                c.load_state_dict(state["plugins"].get(k, []))
        elif state.get("task_sampler") is not None:
            self.task_sampler.plugins[0].load_state_dict(state["task_sampler"])
        if "history" in state:
            self.history = {k: TaskOutcome.from_dict(v) for k, v in state["history"].items()}
            self.tasks = list(state.get("tasks", self.tasks))
        elif self.rank == 0:
            last = int(state["iteration"])
            done = [t for t in self.store.get_trajectories(self.run_id, source="on_policy", with_steps=False)
                    if isinstance(t.info.get("iteration"), int) and t.info["iteration"] <= last]
            self.history = outcomes_of(done)
            self.tasks += [t["task_id"] for t in self.store.added_tasks(self.run_id, max_iteration=last)
                           if t["task_id"] not in self.tasks]

    def context(self, iteration: int) -> Any:
        """The :class:`PluginContext` of ``iteration`` (history = finished iterations only)."""
        from guigym.train.algorithms.context import PluginContext, TaskOutcome
        from guigym.train.algorithms.policy_handle import PolicyHandle

        history = {k: TaskOutcome.from_dict(v.to_dict()) for k, v in self.history.items()}
        return PluginContext(iteration=iteration, rng=random.Random(f"{self.cfg.run.seed}/plugins/{iteration}"),
                             store=self.store, run_id=self.run_id,
                             policy=PolicyHandle(self.learner, iteration, self.learner.image_loader,
                                                 reader=self.unsharded_reader()),
                             history=history, tasks=list(self.tasks), config=self.cfg)

    def start_rollout(self) -> None:
        """Env pool + policy service + scheduler (rank 0 only). ``run.backend`` picks the pool: worker
        processes (EnvPool) or Ray actors (RayEnvPool, the ``ray`` section); the scheduler drives both
        through the same interface and reruns a rollout lost to a dead worker or actor."""
        from guigym.envs.pool import EnvPool
        from guigym.train.rollout.policy_service import HFEngine, HTTPEngine

        cfg = self.cfg
        from guigym.envs.pool import per_env_kwargs

        base = dict(cfg.env.kwargs)
        base.setdefault("tasks", list(dict.fromkeys(cfg.env.tasks + (cfg.eval.tasks or []))))
        kwargs = per_env_kwargs(base, cfg.env.num_envs, cfg.env.serials, "env.serials")  # a device per worker
        if cfg.run.backend == "ray":
            from guigym.envs.ray_backend import RayEnvPool

            self.pool = RayEnvPool(cfg.env.id, cfg.env.num_envs, env_kwargs=kwargs,
                                   call_timeout_s=cfg.env.call_timeout_s, num_cpus=cfg.ray.num_cpus,
                                   resources=cfg.ray.resources, address=cfg.ray.address)
        else:
            self.pool = EnvPool(cfg.env.id, cfg.env.num_envs, env_kwargs=kwargs,
                                call_timeout_s=cfg.env.call_timeout_s)
        version = self.start_iteration
        if cfg.rollout.engine == "hf":
            from guigym.train.policy.hf_policy import HFPolicy

            self.service = HFEngine(HFPolicy(self.model_dir, device=cfg.model.device, dtype=cfg.model.dtype),
                                    max_batch=cfg.rollout.max_batch, max_wait_ms=cfg.rollout.max_wait_ms, version=version)
        elif cfg.rollout.engine == "latency_model":
            from guigym.train.rollout.latency_engine import engine_from_config

            self.service = engine_from_config(cfg, str(self.model_dir), int(cfg.rollout.latency_model.get("workers", 1)),
                                              version=version)
        else:
            token = os.environ.get(cfg.rollout.token_env)
            if not token:
                raise ConfigError(f"rollout.token_env: environment variable {cfg.rollout.token_env} is not set")
            r = cfg.rollout
            if r.weight_sync == "lora" or (r.http_api == "vllm" and r.weight_sync is None):
                if not self.learner.lora:
                    raise ConfigError("rollout.weight_sync: 'lora' refreshes servers with the trained LoRA adapters; "
                                      "enable model.lora or choose weight_sync 'restart'")
            restart = None
            if r.weight_sync == "restart":
                from guigym.train.rollout.policy_service import command_restarter

                if not r.restart_command:
                    raise ConfigError("rollout.restart_command: weight_sync 'restart' needs the command that restarts "
                                      "one server ({index}, {url}, {path} are filled in)")
                restart = command_restarter(r.restart_command)
            self.service = HTTPEngine(r.urls, token=token, api=r.http_api, model=r.served_model,
                                      weight_sync=r.weight_sync, restart=restart, version=version,
                                      stop_token_ids=self.learner.policy.eos_ids if r.http_api == "vllm" else None)
        self.prompt_builder = self.make_prompt_builder()

    def make_prompt_builder(self) -> Any:
        """The run's :class:`PromptBuilder` (rollout section): rollouts, evaluation and SFT
        demonstrations all render prompts through it."""
        from guigym.train.rollout.prompts import builder_from_config

        return builder_from_config(self.learner.policy, self.cfg.rollout, self.cfg.algorithm.sample_builder)

    def make_scheduler(self, iteration: int, group_size: Optional[int] = None,
                       temperature: Optional[float] = None, purpose: str = "train") -> Any:
        """A scheduler whose sampling seeds depend only on (run.seed, purpose, iteration), so a
        resumed run samples exactly what the uninterrupted run would have."""
        from guigym.train.rollout.scheduler import RolloutScheduler

        cfg = self.cfg
        seed = int.from_bytes(f"{cfg.run.seed}/{purpose}/{iteration}".encode(), "little") % (2**31 - 1)
        return RolloutScheduler(self.pool, self.service, self.prompt_builder, mode=cfg.rollout.mode,
                                group_size=group_size or cfg.rollout.num_generations, max_steps=cfg.env.max_steps,
                                max_new_tokens=cfg.rollout.max_new_tokens,
                                temperature=cfg.rollout.temperature if temperature is None else temperature,
                                seed=seed, max_lost_retries=cfg.rollout.max_lost_retries, run_id=self.run_id,
                                policy_retries=cfg.rollout.policy_retries,
                                policy_backoff_s=cfg.rollout.policy_backoff_s,
                                put_image=self.store.put_image if self.store is not None else None,
                                task_specs=self.task_specs())

    def task_specs(self) -> dict[str, dict[str, Any]]:
        """{task_id: spec} of the tasks added during the run whose spec names a ``root`` task: the
        env builds them from the spec (``GUIEnv.task_from_spec``), as its suite does not list them."""
        if self.store is None or not self.run_id:
            return {}
        return {r["task_id"]: {"parent": r["parent"], **r["spec"]} for r in self.store.added_tasks(self.run_id)
                if (r["spec"] or {}).get("root")}

    def tag_generated(self, trajs: Sequence[Any], specs: dict[str, dict[str, Any]]) -> None:
        """Mark trajectories of spec'd (generated) tasks with their provenance and
        ``reward_source``: ``verifier`` when the root's verifier scores them, else ``orm`` when
        the recipe's reward shapers include ``webrl_orm`` (it rewards them), else ``none``."""
        orm = any(name == "webrl_orm" for name, _ in self.reward_shaper.members)
        for t in trajs:
            spec = specs.get(t.task_id)
            if spec is None:
                continue
            verified = bool(spec.get("has_verifier", spec.get("verifier_survives", False)))
            t.info = {**t.info, "reward_source": "verifier" if verified else ("orm" if orm else "none"),
                      "task_provenance": {k: spec.get(k) for k in ("parent", "root", "generator", "phase")}}

    def unsharded_reader(self) -> Any:
        """The model plug-ins read on rank 0 when the learner's weights are FSDP shards (a forward
        of a sharded model is a collective the other ranks never join): the in-process HF rollout
        engine's full copy, which :meth:`push_weights` keeps at the learner's version. None when
        the learner is not sharded (plug-ins read it) or no such copy exists (then
        :class:`PolicyHandle` says which setting to change if a plug-in needs the model)."""
        if not self.sharded:
            return None
        policy = getattr(self.service, "policy", None)
        return getattr(policy, "model", None)

    @property
    def sharded(self) -> bool:
        """True when the learner's weights are FSDP shards: gathering them is a collective."""
        return getattr(self.learner, "strategy", "ddp") == "fsdp"

    def push_weights(self, version: int) -> None:
        """Send the learner's current weights to rank 0's policy service as ``version``. Every rank
        calls it: under FSDP the full weights are gathered from all shards first."""
        if self.rank != 0 and not self.sharded:
            return
        if self.cfg.rollout.engine in ("hf", "latency_model") and not self.learner.lora:
            state = self.learner.trainable_state()  # full tensors on rank 0 (clones; gathered under FSDP)
            if self.rank == 0 and self.service is not None:
                self.service.update_weights(version, state_dict=state)
        elif getattr(self.service, "weight_sync", None) == "lora":  # rank 0 (LoRA runs replicate the model)
            path = self.dir / "policy_adapters" / f"v{version:06d}"  # one directory per version: vLLM reads it on load
            tmp = path.with_name(path.name + ".tmp")
            self.learner.model.save_pretrained(tmp)  # a peft model writes only its adapters
            shutil.rmtree(path, ignore_errors=True)  # a resumed run re-pushing the same version
            os.replace(tmp, path)
            self.service.update_weights(version, path=str(path))
            for old in sorted(path.parent.glob("v*"))[:-2]:  # servers hold loaded adapters in memory
                shutil.rmtree(old, ignore_errors=True)
        else:
            path = self.learner.save_pretrained(self.dir / "policy_latest")  # rank 0 writes
            if self.rank == 0 and self.service is not None:
                self.service.update_weights(version, path=str(path))

    def close(self) -> None:
        for obj in (self.service, self.pool, self.store):
            if obj is not None:
                try:
                    obj.close()
                except Exception:  # noqa: BLE001 - best effort on shutdown
                    pass
        self.progress.close()
        if self.rank == 0 and getattr(self, "metrics", None) is not None:
            self.metrics.close()
            self.metrics = None
        if getattr(self, "_owns_process_group", False):
            import torch

            self._owns_process_group = False
            torch.distributed.destroy_process_group()

    # ---- one iteration ----------------------------------------------------------------------
    def add_tasks(self, ctx: Any) -> None:
        """Ask the task sources for new tasks; store their provenance, extend the task list."""
        from guigym.train.algorithms.context import NewTask

        new = self.task_source(ctx=ctx) if len(self.task_source) else []
        for t in new:
            if not isinstance(t, NewTask):
                raise TypeError(f"a task source returned {type(t).__name__}, expected NewTask")
        if not new:
            return
        self.store.add_tasks(self.run_id, [{"task_id": t.task_id, "source": t.source, "parent": t.parent,
                                            "spec": t.spec} for t in new], ctx.iteration)
        self.tasks += [tid for tid in dict.fromkeys(t.task_id for t in new) if tid not in self.tasks]
        ctx.tasks = list(self.tasks)

    def groups_for(self, iteration: int, ctx: Any = None) -> tuple[list[Any], bool]:
        """(groups of ``iteration``, reused?). Stored ones (a crashed run's) first, else collected."""
        from guigym.train.algorithms.context import RolloutPlan
        from guigym.train.data.types import Group

        cfg = self.cfg
        ctx = ctx if ctx is not None else self.context(iteration)
        self.add_tasks(ctx)
        task_ids = self.task_sampler(list(self.tasks), cfg.rollout.groups_per_iteration, stats=ctx.stats(), ctx=ctx)
        plans = [RolloutPlan(t, cfg.rollout.num_generations, cfg.env.max_steps) for t in task_ids]
        if len(self.rollout_planner):
            plans = self.rollout_planner(plans, ctx=ctx)
        seeds = iteration_seeds(cfg, iteration, len(plans))
        stored = [t for t in self.store.get_trajectories(self.run_id, min_version=iteration)
                  if t.info.get("iteration") == iteration and t.source == "on_policy"]
        if stored:
            by_group: dict[str, Group] = {}
            for t in stored:
                by_group.setdefault(t.group_id, Group(t.group_id, t.task_id, [])).trajectories.append(t)
            return list(by_group.values()), True
        scheduler = self.make_scheduler(iteration)
        self.progress.begin("rollout", sum(p.n for p in plans), note=f"iteration {iteration}")
        scheduler.on_finished = lambda: self.progress.advance("rollout")
        guidance = None
        if len(self.conditioner):
            def guidance(task_id: str, seed: int, member: int) -> Any:
                return self.conditioner(task_id, seed, member, ctx=ctx)
        groups = scheduler.collect([p.task_id for p in plans], seeds=seeds, group_sizes=[p.n for p in plans],
                                   max_steps=[p.max_steps for p in plans], guidance=guidance)
        self.rollout_stats = scheduler.last_stats.to_dict()
        trajs = []
        for g in groups:
            for t in g.trajectories:
                t.run_id = self.run_id
                t.info = {**t.info, "iteration": iteration}
                trajs.append(t)
        self.tag_generated(trajs, scheduler.task_specs)
        self.store.add_trajectories(self.run_id, trajs)
        _fault("after_store", iteration)
        return groups, False

    def shaped_rewards(self, groups: Sequence[Any], ctx: Any = None) -> dict[str, Any]:
        """traj_id -> shaped reward (float or per-step list) from the reward-shaper chain."""
        out: dict[str, Any] = {}
        for g in groups:
            for t, r in zip(g.trajectories, self.reward_shaper(g, ctx=ctx)):
                out[t.traj_id] = float(r) if isinstance(r, (int, float)) else [float(x) for x in r]
        return out

    def advantages(self, groups: Sequence[Any], rewards: Optional[dict[str, Any]] = None,
                   ctx: Any = None) -> dict[str, Any]:
        """traj_id -> advantage (float, or one per step) from the advantage estimator."""
        rewards = self.shaped_rewards(groups, ctx) if rewards is None else rewards
        return self.advantage_estimator.plugins[0](groups, rewards, ctx=ctx)

    def store_injected(self, groups: Sequence[Any], fresh_ids: set[str], iteration: int) -> list[Any]:
        """Store the group members that were not collected this iteration (replay / expert /
        cache from the trajectory sources or a group builder) and are not in the DataStore yet,
        so that their usage can be recorded. They keep their own ``source`` and behaviour
        log-probs (``Step.rollout_logprobs``, used by the TIS weight); one claiming ``on_policy``
        is refused (it was not sampled by this run's policy). Returns the newly stored ones."""
        injected = {t.traj_id: t for g in groups for t in g.trajectories if t.traj_id not in fresh_ids}
        if not injected:
            return []
        known = self.store.row_ids(list(injected))
        new = [t for tid, t in injected.items() if tid not in known]
        for t in new:
            if t.source == "on_policy":
                raise ValueError(f"injected trajectory {t.traj_id!r} (task {t.task_id}) has source 'on_policy' but was "
                                 f"not collected by this run; give it its source (replay, expert or cache)")
            if t.run_id not in ("", self.run_id):
                t.info = {**t.info, "origin_run_id": t.run_id}
            t.run_id = self.run_id
            t.info = {**t.info, "injected_at_iteration": iteration}
        self.store.add_trajectories(self.run_id, new)
        return new

    def iteration(self, it: int) -> dict[str, float]:
        t0 = time.time()
        payload = None
        info: dict[str, float] = {}
        ctx = None
        if self.rank == 0:
            from guigym.train.algorithms.context import outcomes_of
            from guigym.train.algorithms.estimators import drop_zero_advantage_groups

            ctx = self.context(it)
            groups, reused = self.groups_for(it, ctx)
            t_roll = time.time() - t0
            fresh = [t for g in groups for t in g.trajectories]
            ctx.outcomes = outcomes_of(fresh)
            pool = self.trajectory_source(groups, ctx=ctx) if len(self.trajectory_source) else []
            groups = self.group_builder(groups, pool=pool, ctx=ctx)
            injected = self.store_injected(groups, {t.traj_id for t in fresh}, it)
            rewards = self.shaped_rewards(groups, ctx)
            adv = self.advantages(groups, rewards, ctx)
            n_built = len(groups)
            if self.cfg.algorithm.skip_zero_advantage_groups:
                groups = drop_zero_advantage_groups(groups, adv)  # after shaping (DAPO dynamic sampling)
            trajs = [t for g in groups for t in g.trajectories]
            keep_mask = self.step_filter(trajs, groups=groups, ctx=ctx) if trajs else []
            keep_of = {t.traj_id: m for t, m in zip(trajs, keep_mask)}
            samples = self.sample_builder(trajs, adv, keep=lambda tr, k, st: bool(keep_of[tr.traj_id][k]),
                                          rewards=rewards)
            payload = samples
            n = max(1, len(fresh))
            info = {"rollout/success_rate": sum(t.success for t in fresh) / n,
                    "rollout/reward_mean": sum(t.reward for t in fresh) / n,
                    "rollout/episode_len": sum(t.length for t in fresh) / n,
                    "rollout/trajectories": float(len(fresh)), "rollout/groups_trained": float(len(groups)),
                    "rollout/groups_zero_advantage": float(n_built - len(groups)),
                    "rollout/injected_stored": float(len(injected)), "rollout/tasks": float(len(self.tasks)),
                    "rollout/reused_from_store": float(reused), "time/rollout_s": t_roll}
            if not reused:
                for k in ("u_env", "actions_per_min", "policy_utilisation", "lost", "retries", "unscorable"):
                    if k in self.rollout_stats:
                        info[f"rollout/{k}"] = float(self.rollout_stats[k])
            ents = [st.entropy for t in fresh for st in t.steps if st.entropy is not None]
            if ents:  # mean token entropy the rollout engine recorded per step
                info["rollout/entropy_mean"] = sum(ents) / len(ents)
            if samples:  # versions between the weights that sampled a trained step and the ones updated (v = it)
                stale = [it - s.policy_version for s in samples]
                info["staleness_mean"] = sum(stale) / len(stale)
                info["staleness_max"] = float(max(stale))
            self.progress.begin("update", None, note=f"iteration {it}, {len(samples)} samples")
        samples = _broadcast(payload, self.rank, self.world)
        self.refresh_reference(it)  # every rank, before the update
        t1 = time.time()
        metrics = self.learner.update(samples)
        metrics["time/update_s"] = time.time() - t1
        version = it + 1
        self.push_weights(version)
        if self.rank == 0:
            used = [(s.traj_id, s.step_index) if s.step_index >= 0 else s.traj_id for s in samples]
            if used:
                self.store.mark_used(self.run_id, used, version)
            metrics.update(info)
            metrics["time/iteration_s"] = time.time() - t0
            self.store.record_model_version(self.run_id, version, str(self.dir / "policy_latest"),
                                            {k: v for k, v in metrics.items() if isinstance(v, float)})
            for task, o in ctx.outcomes.items():  # the iteration is finished: its outcomes join the history
                self.history.setdefault(task, type(o)()).merge(o)
            self.metrics.log(it, metrics)
            _fault("after_log", it)
            self.log(f"iter {it}: SR {info.get('rollout/success_rate', 0):.3f} loss {metrics.get('loss', 0):+.4f} "
                     f"samples {int(metrics.get('samples', 0))} ({metrics['time/iteration_s']:.1f}s)")
            self.progress.iteration_done(f"SR {info.get('rollout/success_rate', 0):.3f} "
                                         f"loss {metrics.get('loss', 0):+.4f}")
        if (it + 1) % self.cfg.run.checkpoint_every == 0 or it + 1 == self.cfg.run.iterations:
            self.checkpoint(it)
        if (self.rank == 0 or self.sharded) and self.cfg.run.save_model_every \
                and (it + 1) % self.cfg.run.save_model_every == 0:
            self.learner.save_pretrained(self.dir / f"model-{it + 1:06d}")  # a collective under FSDP
        return metrics

    def refresh_reference(self, it: int) -> None:
        """At a phase boundary of a policy loss whose reference is the previous phase's actor
        (``reference_every``: WebRL eq. 6), make the learner's reference the actor as it stands
        before iteration ``it``'s update. Every rank calls it; a resumed run gets the reference of
        its phase from the checkpoint (``reference.pt``) and refreshes again at the next boundary."""
        every = getattr(self.policy_loss, "reference_every", None)
        if every and it > 0 and it % every == 0 and self.learner.reference_version != it:
            self.learner.refresh_reference(it)

    def checkpoint(self, it: int) -> None:
        from guigym.train import checkpoint

        learner = self.learner
        if self.sharded:  # every rank gathers its shards; rank 0 writes the full tensors
            learner = _GatheredLearner(self.learner, self.learner.trainable_state(), self.learner.optimizer_state())
        if self.rank == 0:
            checkpoint.save(self.ckpt_root, it, learner, {"policy_version": it + 1, **self.plugin_state()},
                            keep=self.cfg.run.keep_checkpoints)
        _broadcast(None, self.rank, self.world)

    # ---- evaluation -------------------------------------------------------------------------
    def evaluate(self, label: str) -> dict[str, Any]:
        """Success rate of the current policy on the held-out seeds (one episode per task x seed).
        Cached in ``<run.dir>/eval_<label>.json`` so a resumed run does not redo it."""
        path = self.dir / f"eval_{label}.json"
        if path.exists():
            return json.loads(path.read_text())
        cfg = self.cfg
        tasks = cfg.eval.tasks or cfg.env.tasks
        seeds = cfg.eval.seeds.seeds()
        pairs = [(t, s) for t in tasks for s in seeds]  # task-major: envs prewarm the same task's next page
        t0 = time.time()
        scheduler = self.make_scheduler(0, group_size=1, temperature=cfg.eval.temperature, purpose=f"eval-{label}")
        self.progress.begin("rollout", len(pairs), note=f"eval {label}")
        scheduler.on_finished = lambda: self.progress.advance("rollout")
        trajs = [t for g in scheduler.collect([p[0] for p in pairs], seeds=[p[1] for p in pairs]) for t in g.trajectories]
        per_task: dict[str, list[int]] = {}
        for t in trajs:
            per_task.setdefault(t.task_id, []).append(int(bool(t.success)))
        succ = sum(sum(v) for v in per_task.values())
        n = sum(len(v) for v in per_task.values())
        out = {"label": label, "episodes": n, "successes": succ, "success_rate": succ / max(1, n),
               "per_task": {k: sum(v) / len(v) for k, v in per_task.items()}, "seconds": time.time() - t0,
               "unscorable": scheduler.last_stats.unscorable}  # not in episodes: neither success nor failure
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(out, indent=1))
        os.replace(tmp, path)
        self.log(f"eval {label}: SR {out['success_rate']:.3f} ({succ}/{n}) {out['per_task']} [{out['seconds']:.0f}s]")
        return out

    # ---- run --------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        t0 = time.time()
        try:
            self.build()
            if self.rank == 0:
                from guigym.train.progress import TrainProgress, progress_enabled

                self.progress = TrainProgress(self.cfg.run.iterations, self.start_iteration,
                                              enabled=progress_enabled(self.cfg.log.progress))
                self.learner.on_optimizer_step = lambda done, total: self.progress.set("update", done, total)
                self.start_rollout()
            if self.start_iteration > 0:  # resumed: rollouts must sample from the checkpoint's weights
                self.push_weights(self.start_iteration)
            summary: dict[str, Any] = {"run_dir": str(self.dir), "start_iteration": self.start_iteration}
            if self.rank == 0 and self.cfg.eval.enabled:
                summary["before"] = self.evaluate("before")
            last: dict[str, float] = {}
            for it in range(self.start_iteration, self.cfg.run.iterations):
                last = self.iteration(it)
            summary["last_metrics"] = last
            if self.rank == 0 and self.cfg.eval.enabled:
                summary["after"] = self.evaluate("after")
                b, a = summary["before"], summary["after"]
                test = two_proportion_z(b["successes"], b["episodes"], a["successes"], a["episodes"])
                summary["z_test"] = test
                self.log(f"success rate before {test['p1']:.3f} (n={b['episodes']}) -> after {test['p2']:.3f} "
                         f"(n={a['episodes']}); z = {test['z']:.2f}, p (one-sided) = {test['p_one_sided']:.2e}, "
                         f"p (two-sided) = {test['p_two_sided']:.2e}")
            summary["seconds"] = time.time() - t0
            if self.rank == 0:
                tmp = self.dir / "summary.json.tmp"
                tmp.write_text(json.dumps(summary, indent=1, default=float))
                os.replace(tmp, self.dir / "summary.json")
            return summary
        finally:
            self.close()


def check_env(cfg: TrainConfig, strict_paths: bool = True) -> list[str]:
    """ConfigError naming the field when ``env.id``, ``env.kwargs`` (unknown options with the
    closest name, the dialect, paths), ``env.tasks`` or ``eval.tasks`` are not what the env takes
    (guigym/envs/options.py), before any env or model starts. With ``strict_paths=False``
    (``--check`` of a recipe written for another machine) host paths that do not exist here are
    returned as notes instead, and the tasks of a missing suite are not checked. WebArena-v0
    without ``env.kwargs.config_file`` (its embedded sites) has its tasks checked when built."""
    from guigym.core.errors import TaskSpecError
    from guigym.envs.options import check_env_options, missing_paths
    from guigym.envs.task_ids import LISTED_ENVS, resolve_task_ids

    check_env_options(cfg.env.id, cfg.env.kwargs, "env.kwargs", paths=strict_paths)
    notes = missing_paths(cfg.env.id, cfg.env.kwargs, "env.kwargs")
    if notes or cfg.env.id not in LISTED_ENVS or (cfg.env.id == "WebArena-v0" and not cfg.env.kwargs.get("config_file")):
        return notes
    for name, tasks in (("env.tasks", cfg.env.tasks), ("eval.tasks", cfg.eval.tasks)):
        try:
            if tasks:
                resolve_task_ids(cfg.env.id, list(tasks), cfg.env.kwargs)
        except TaskSpecError as exc:
            raise ConfigError(f"{name}: {exc}") from None
    return []


if __name__ == "__main__":  # `python -m guigym.train.loop RECIPE` (older spelling of guigym.train.main)
    from guigym.train.main import main

    raise SystemExit(main())
