#!/usr/bin/env python
"""Scale-out: coupled (lockstep, verl/ARPO style) vs decoupled (DART) training on N stand-in envs.

    python bench/scale.py --num-envs 64 --iterations 4                  # both arms (the lead's run)
    python bench/scale.py --num-envs 8 --iterations 2 --time-scale 0.25 --arms coupled   # a quick check

What runs (issue 16, item 6)
----------------------------
* Envs: ``--num-envs`` ``LatencyModel-v0`` envs (guigym/envs/latency_model.py) in an EnvPool of
  worker processes (``--backend process``) or Ray actors (``--backend ray``). Each reset/step
  sleeps a latency drawn from ``--latency`` (a histogram recorded from a real env by
  bench/record_latency.py; default OSWorld-v0's local provider), each env with its own latency
  stream. Episodes: click the named buttons in order; step budget ``--max-steps``.
* Policy: a *stated latency model* of a 7B VLM served by vLLM, no model runs here
  (:class:`PolicyLatencyModel`): a batch of b requests on one GPU worker takes
  ``T(b) = max(floor_s, b / rate_rps)``. ``rate_rps`` = 2.55 requests/s, the figure vLLM publishes
  for a 7B VLM in its benchmark guide (vllm-project/vllm ``benchmarks/README.md``, "VisionArena
  Benchmark for Vision Language Models": ``vllm bench throughput --model Qwen/Qwen2-VL-7B-Instruct``
  on VisionArena-Chat -> "Throughput: 2.55 requests/s, 4036.92 total tokens/s, 326.90 output
  tokens/s"; prompts there average ~1.45k tokens with image tokens, close to one 1080p screenshot
  plus text). ``floor_s`` = 1.28 s, the latency of a batch of one: 128 output tokens x 10 ms per
  token, derived (not published) from reading 15 GB of bf16 weights per decode step at ~1.5 TB/s
  effective HBM bandwidth (A100-80GB). ``--policy-workers`` such workers (one GPU each); the
  service picks one uniformly random click among the observation's candidates.
* Trainer: a stated model too (:class:`TrainerModel`): an update over S step-samples takes
  ``8 * N * tokens * S / (gpus * peak * mfu)`` s (6ND for forward+backward, 2ND for the old/
  reference log-prob forward; N = 7e9, 2000 tokens per sample, peak 312 TFLOP/s = A100 bf16 dense
  (NVIDIA A100 datasheet), MFU 0.4 assumed, ``--trainer-gpus``).
* Weight sync: ``2 bytes x N / bandwidth`` (12.5 GB/s, a 100 Gb/s link; assumed) during which
  every policy worker is paused (global sync) in the coupled arm.
* ``--time-scale`` multiplies every modelled time (env, policy, trainer, sync) for quick checks;
  the ratios between arms are what to read, and they hold only at scale 1.

Arms
----
* ``coupled`` (verl / ARPO style): per iteration the real :class:`RolloutScheduler` in ``sync``
  mode runs ``--groups`` x G rollouts on the envs in lockstep (all envs reset together, the policy
  gets all prompts as one batch, all envs step together, the next batch waits for the slowest
  episode); then the trainer updates while envs and policy idle; then a global weight sync pauses
  every policy worker. Samples are on-policy (staleness 0) by construction.
* ``decoupled`` (DART): ``guigym.train.decoupled.run_decoupled``, built by another helper; it
  plugs in at :func:`run_decoupled_arm` (marked below). When it is not importable the arm is
  reported as missing.

Reported per arm (wall = the arm's whole run after warm-up): actions/min (env steps per minute),
U_env exec (share of env-time inside reset/step calls), U_env occupied (DART's: share of env-time
an env holds a rollout, incl. waiting for its own action), policy-worker utilisation (generation
time / (workers x wall)), trainer idle share (1 - update time / wall), staleness (trainer version
minus the policy version that sampled each trajectory: mean, max). A timeline PNG shows every
env, policy worker and the trainer over time (matplotlib, else Pillow).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import queue
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from guigym.train.rollout.constrain import candidates_from_a11y  # noqa: E402
from guigym.train.rollout.policy_service import GenRequest, GenResult  # noqa: E402
from guigym.train.rollout.prompts import Prompt  # noqa: E402

Event = dict[str, Any]
#: metric keys every arm reports (the decoupled arm's dict is read with the same names)
METRICS = ("wall_s", "actions", "actions_per_min", "u_env_exec", "u_env_occupied", "u_policy", "trainer_idle",
           "staleness_mean", "staleness_max", "trajectories", "success_rate", "updates")


# ---- stated models ------------------------------------------------------------------------------
@dataclass
class PolicyLatencyModel:
    """Generation time of one batch on one GPU worker: ``T(b) = max(floor_s, b / rate_rps)``."""

    rate_rps: float = 2.55
    floor_s: float = 1.28
    source: str = ("rate: vLLM benchmarks/README.md VisionArena example, Qwen2-VL-7B-Instruct, 'Throughput: 2.55 "
                   "requests/s, 4036.92 total tokens/s, 326.90 output tokens/s'; floor: 128 output tokens x 10 "
                   "ms/token, derived from 15 GB bf16 weights read per decode step at ~1.5 TB/s (A100-80GB), "
                   "not published")

    def batch_s(self, b: int) -> float:
        return max(self.floor_s, b / self.rate_rps) if b > 0 else 0.0


@dataclass
class TrainerModel:
    """Update time over S step-samples: ``8 N tokens S / (gpus peak mfu)`` seconds."""

    params: float = 7e9
    tokens_per_sample: int = 2000
    gpus: int = 8
    peak_flops: float = 312e12
    mfu: float = 0.4
    sync_bandwidth: float = 12.5e9
    source: str = ("6ND forward+backward + 2ND old/reference log-prob forward; peak 312 TFLOP/s = A100 bf16 dense "
                   "(NVIDIA A100 datasheet); MFU 0.4 and 2000 tokens/sample assumed; weight sync = 2 bytes x N over a "
                   "12.5 GB/s (100 Gb/s) link, assumed")

    def update_s(self, samples: int) -> float:
        return 8 * self.params * self.tokens_per_sample * samples / (self.gpus * self.peak_flops * self.mfu)

    def sync_s(self) -> float:
        return 2 * self.params / self.sync_bandwidth


# ---- event recording ----------------------------------------------------------------------------
class Events:
    """Thread-safe rows in guigym.train.decoupled.events' format (service, kind, worker, start, end)."""

    def __init__(self) -> None:
        self.rows: list[Event] = []
        self._lock = threading.Lock()

    def add(self, service: str, kind: str, worker: str, start: float, end: float, **extra: Any) -> None:
        with self._lock:
            self.rows.append({"service": service, "kind": kind, "worker": worker, "start": start, "end": end, **extra})

    def clear(self) -> None:
        with self._lock:
            self.rows.clear()


def busy_s(rows: Sequence[Event], service: str, kind: Optional[str] = None) -> float:
    """Per-worker union of the intervals of ``service`` (and ``kind``), summed over workers."""
    lanes: dict[str, list[tuple[float, float]]] = {}
    for e in rows:
        if e["service"] == service and (kind is None or e["kind"] == kind):
            lanes.setdefault(e["worker"], []).append((e["start"], e["end"]))
    total = 0.0
    for iv in lanes.values():
        end = -math.inf
        for s, e in sorted(iv):
            if e > end:
                total += e - max(s, end)
                end = e
    return total


class TimedPool:
    """An env pool (EnvPool / RayEnvPool) that logs each reset/step as an ``env`` event, from the
    moment it is sent to the moment its result is collected."""

    def __init__(self, pool: Any, events: Events) -> None:
        self._pool, self._events = pool, events
        self._sent: dict[int, tuple[str, float]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def reset_async(self, i: int, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None) -> None:
        self._sent[i] = ("reset", time.time())
        self._pool.reset_async(i, seed=seed, options=options)

    def step_async(self, i: int, action: Any) -> None:
        self._sent[i] = ("step", time.time())
        self._pool.step_async(i, action)

    def wait(self, timeout: Optional[float] = None) -> list[Any]:
        out = self._pool.wait(timeout=timeout)
        now = time.time()
        for r in out:
            kind, t0 = self._sent.pop(r.index, (r.kind, now))
            self._events.add("env", kind, f"env{r.index}", t0, now, lost=bool(r.lost))
        return out


# ---- prompts and the modelled policy service ----------------------------------------------------
class _TextEpisode:
    def __init__(self, instruction: str) -> None:
        self.instruction = instruction
        self.actions: list[str] = []

    def prompt(self, obs: dict[str, Any]) -> Prompt:
        a11y = str(obs.get("a11y") or "<a11y/>")
        text = f"Task: {self.instruction}\n{a11y}\nPrevious: {' | '.join(self.actions[-10:]) or '(none)'}"
        ids = list(text.encode("utf-8"))  # byte "tokens": the modelled policy reads no ids
        return Prompt(prompt_ids=ids, images=[], candidates=candidates_from_a11y(a11y) or None, env_mask=[1] * len(ids))

    def add_response(self, response_ids: Sequence[int], action_text: str, end_id: Optional[int] = None) -> None:
        self.actions.append(action_text)


class TextPromptBuilder:
    """What RolloutScheduler needs from a PromptBuilder, without a tokenizer (stepwise, text only)."""

    mode = "stepwise"

    def episode(self, instruction: str, guidance: str = "") -> _TextEpisode:
        return _TextEpisode(f"{instruction}\n{guidance}" if guidance else instruction)


class ModelPolicy:
    """A PolicyService whose workers take :meth:`PolicyLatencyModel.batch_s` per batch (a sleep)
    and reply with a uniformly random candidate (seeded by the request's seed).

    ``submit_many`` (the lockstep scheduler's closed batch) splits the batch evenly over the
    workers; ``submit`` requests are batched by whichever worker is free (up to ``max_batch``).
    :meth:`sync` pauses every worker for a global weight sync and bumps the version.
    """

    def __init__(self, model: PolicyLatencyModel, workers: int, events: Events, time_scale: float = 1.0,
                 max_batch: int = 256) -> None:
        self.model, self.n, self.events, self.scale, self.max_batch = model, int(workers), events, time_scale, max_batch
        self.version = 0
        self._q: "queue.Queue[Any]" = queue.Queue()
        self._gate = threading.Event()
        self._gate.set()
        self._lock = threading.Lock()
        self._busy = 0.0
        self._requests = 0
        self._closed = False
        self._threads = [threading.Thread(target=self._loop, args=(w,), daemon=True, name=f"policy-w{w}")
                         for w in range(self.n)]
        for t in self._threads:
            t.start()

    # PolicyService API
    def submit(self, req: GenRequest) -> "Future[GenResult]":
        fut: Future = Future()
        self._q.put([(req, fut)])
        return fut

    def submit_many(self, reqs: Sequence[GenRequest]) -> "list[Future[GenResult]]":
        futs: list[Future] = [Future() for _ in reqs]
        pairs = list(zip(reqs, futs))
        for w in range(self.n):  # one closed chunk per worker, run in parallel
            chunk = pairs[w:: self.n]
            if chunk:
                self._q.put(("closed", chunk))
        return futs

    def update_weights(self, version: int, path: Any = None) -> None:
        self.version = int(version)

    def sync(self, seconds: float, version: int) -> None:
        """Global weight sync: no worker generates for ``seconds``; then ``version`` serves."""
        self._gate.clear()
        t0 = time.time()
        time.sleep(seconds)
        self.version = int(version)
        t1 = time.time()
        for w in range(self.n):
            self.events.add("policy", "reload", f"w{w}", t0, t1, version=self.version)
        self._gate.set()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"busy_s": self._busy, "requests": self._requests, "endpoints": [f"w{w}" for w in range(self.n)]}

    def reset_stats(self) -> None:
        with self._lock:
            self._busy, self._requests = 0.0, 0

    def close(self) -> None:
        self._closed = True
        for _ in range(self.n):
            self._q.put(None)

    # workers
    def _loop(self, w: int) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            if isinstance(item, tuple):  # a closed chunk from submit_many
                batch = item[1]
            else:
                batch = list(item)
                while len(batch) < self.max_batch:
                    try:
                        nxt = self._q.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None or isinstance(nxt, tuple):
                        self._q.put(nxt)
                        break
                    batch += nxt
            self._gate.wait()
            t0 = time.time()
            time.sleep(self.model.batch_s(len(batch)) * self.scale)
            t1 = time.time()
            version = self.version
            with self._lock:
                self._busy += t1 - t0
                self._requests += len(batch)
            self.events.add("policy", "generate", f"w{w}", t0, t1, batch=len(batch), version=version)
            for req, fut in batch:
                fut.set_result(self._reply(req, version))

    @staticmethod
    def _reply(req: GenRequest, version: int) -> GenResult:
        cands = req.candidates or ['wait()']
        k = int(np.random.default_rng(req.seed).integers(len(cands)))
        text = cands[k]
        ids = list(text.encode("utf-8"))
        lp = -math.log(len(cands)) / max(1, len(ids))
        return GenResult(response_ids=ids, logprobs=[lp] * len(ids), text=text, entropy=None, policy_version=version,
                         endpoint="model")


# ---- the arms -----------------------------------------------------------------------------------
@dataclass
class ArmResult:
    arm: str
    metrics: dict[str, float] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    note: str = ""


def make_pool(args: argparse.Namespace) -> Any:
    kwargs = [{"latency": str(args.latency), "time_scale": args.time_scale, "latency_seed": args.seed * 100_003 + i,
               "max_steps": args.max_steps} for i in range(args.num_envs)]
    if args.backend == "ray":
        from guigym.envs.ray_backend import RayEnvPool

        return RayEnvPool("LatencyModel-v0", args.num_envs, kwargs, num_cpus=args.ray_num_cpus)
    from guigym.envs.pool import EnvPool

    return EnvPool("LatencyModel-v0", args.num_envs, kwargs)


def run_coupled(args: argparse.Namespace, policy_model: PolicyLatencyModel, trainer: TrainerModel) -> ArmResult:
    """verl/ARPO-style: lockstep rollouts (scheduler mode ``sync``), then the update (envs and
    policy idle), then a global weight sync (policy paused); ``--iterations`` times."""
    from guigym.train.rollout.scheduler import RolloutScheduler

    events = Events()
    tasks = [f"latency-{k:03d}" for k in range(args.n_tasks)]
    rng = np.random.default_rng(args.seed)
    policy = ModelPolicy(policy_model, args.policy_workers, events, args.time_scale)
    pool = make_pool(args)
    try:
        for i in range(args.num_envs):  # warm-up: start every worker before timing
            pool.reset_async(i, seed=i)
        while pool.busy:
            pool.wait()
        tpool = TimedPool(pool, events)
        sched = RolloutScheduler(tpool, policy, TextPromptBuilder(), mode="sync", group_size=args.group_size,
                                 max_steps=args.max_steps, seed=args.seed)
        events.clear()
        t0 = time.time()
        version, actions, occupied, trajs, successes, stale = 0, 0, 0.0, 0, 0, []
        for it in range(args.iterations):
            picks = [tasks[int(k)] for k in rng.integers(len(tasks), size=args.groups)]
            seeds = [int(s) for s in rng.integers(0, 2**31 - 1, size=args.groups)]
            groups = sched.collect(picks, seeds)
            st = sched.last_stats
            actions += st.actions
            occupied += st.env_occupied_s
            samples = 0
            for g in groups:
                for t in g.trajectories:
                    trajs += 1
                    successes += bool(t.success)
                    samples += len(t.steps)
                    stale.append(version - min((s.policy_version for s in t.steps), default=version))
            ts = time.time()  # the trainer updates; envs and policy wait
            time.sleep(trainer.update_s(samples) * args.time_scale)
            events.add("trainer", "train", "trainer", ts, time.time(), version=version, samples=samples)
            version += 1
            policy.sync(trainer.sync_s() * args.time_scale, version)  # global: every worker paused
        wall = time.time() - t0
    finally:
        policy.close()
        pool.close()
    rows = list(events.rows)
    n = args.num_envs
    metrics = {
        "wall_s": wall, "actions": actions, "actions_per_min": 60.0 * actions / wall,
        "u_env_exec": busy_s(rows, "env") / (n * wall), "u_env_occupied": occupied / (n * wall),
        "u_policy": busy_s(rows, "policy", "generate") / (args.policy_workers * wall),
        "trainer_idle": 1.0 - busy_s(rows, "trainer", "train") / wall,
        "staleness_mean": float(np.mean(stale)) if stale else 0.0, "staleness_max": int(max(stale, default=0)),
        "trajectories": trajs, "success_rate": successes / trajs if trajs else 0.0, "updates": args.iterations,
    }
    return ArmResult("coupled", metrics, rows)


# ======== DECOUPLED ARM PLUG-IN POINT =============================================================
# The decoupled arm (DART's four services) lives in guigym/train/decoupled/ (another helper's
# work): ``run_decoupled(cfg, ...) -> dict`` with keys wall_s, actions, u_env, u_policy,
# u_trainer, staleness (rows), events (rows in the format of Events above), ... This function
# builds its config from the same arguments and maps its dict onto METRICS. Until the decoupled
# services can run the stated policy/trainer latency models (rollout.engine for a modelled
# policy), its policy is a real tiny HF model on CPU and the rows are NOT comparable with the
# coupled arm's; the note in the table says so.
def decoupled_recipe(args: argparse.Namespace, model_dir: Path, run_dir: Path) -> dict[str, Any]:
    """A TrainConfig dict for the decoupled arm on the same envs (LatencyModel-v0)."""
    env_kwargs = {"latency": str(args.latency), "time_scale": args.time_scale, "max_steps": args.max_steps}
    return {
        "run": {"name": "scale_decoupled", "dir": str(run_dir), "seed": args.seed, "iterations": args.iterations,
                "backend": "ray", "topology": "decoupled"},
        "model": {"path": str(model_dir), "device": "cpu", "dtype": "float32"},
        "env": {"id": "LatencyModel-v0", "kwargs": env_kwargs, "num_envs": args.num_envs,
                "tasks": [f"latency-{k:03d}" for k in range(args.n_tasks)], "max_steps": args.max_steps},
        "rollout": {"engine": "hf", "num_generations": args.group_size, "groups_per_iteration": args.groups,
                    "max_new_tokens": 8, "constrained": True, "history_images": 0},
        "decoupled": {"num_policy_workers": args.policy_workers},
        "ray": {"num_cpus": args.ray_num_cpus},
    }


def run_decoupled_arm(args: argparse.Namespace, policy_model: PolicyLatencyModel,
                      trainer: TrainerModel) -> Optional[ArmResult]:
    try:
        from guigym.train.decoupled import run_decoupled
    except ImportError as exc:
        print(f"decoupled arm: MISSING (guigym.train.decoupled.run_decoupled not importable: {exc})")
        return None
    import tempfile

    from guigym.train.config import TrainConfig
    from guigym.train.policy.tiny import build

    with tempfile.TemporaryDirectory() as tmp:
        try:
            model_dir = build(Path(tmp) / "tiny", seed=args.seed)
            cfg = TrainConfig.model_validate(decoupled_recipe(args, Path(model_dir), Path(tmp) / "run"))
            out = run_decoupled(cfg, log=lambda s: None)
        except Exception as exc:  # noqa: BLE001 - the arm is another helper's; report, keep the coupled numbers
            last = [ln for ln in str(exc).strip().splitlines() if ln.strip()][-3:]  # a Ray error ends with the cause
            print(f"decoupled arm: FAILED ({type(exc).__name__}: {' / '.join(ln.strip() for ln in last)[:600]})")
            return None
    wall = float(out.get("wall_s", 0.0)) or 1e-9
    stale = [r.get("lag", r.get("staleness", 0)) for r in out.get("staleness", []) if isinstance(r, dict)]
    metrics = {
        "wall_s": wall, "actions": out.get("actions", 0), "actions_per_min": 60.0 * out.get("actions", 0) / wall,
        "u_env_exec": out.get("u_env", float("nan")), "u_env_occupied": float("nan"),
        "u_policy": out.get("u_policy", float("nan")), "trainer_idle": 1.0 - out.get("u_trainer", float("nan")),
        "staleness_mean": float(np.mean(stale)) if stale else float("nan"),
        "staleness_max": max(stale) if stale else float("nan"), "trajectories": out.get("trajectories", 0),
        "success_rate": float("nan"), "updates": out.get("updates", 0),
    }
    return ArmResult("decoupled", metrics, list(out.get("events", [])),
                     note="policy/trainer: real tiny HF model on CPU, not the stated 7B models")
# ======== END OF THE PLUG-IN POINT =================================================================


# ---- output ------------------------------------------------------------------------------------
COLOURS = {"reset": "#9e9e9e", "step": "#1f77b4", "generate": "#2ca02c", "reload": "#d62728", "train": "#ff7f0e"}


def _lanes(rows: Sequence[Event]) -> list[str]:
    order = {"env": 0, "policy": 1, "trainer": 2, "data": 3}

    def key(w: str) -> tuple[int, int, str]:
        digits = "".join(ch for ch in w if ch.isdigit())
        return (0, int(digits) if digits else 0, w)

    by_service: dict[str, set[str]] = {}
    for e in rows:
        by_service.setdefault(e["service"], set()).add(e["worker"])
    out = []
    for s in sorted(by_service, key=lambda s: order.get(s, 9)):
        out += [f"{s}:{w}" for w in sorted(by_service[s], key=key)]
    return out


def draw_timeline(arms: Sequence[ArmResult], path: Path) -> str:
    """One panel per arm, one row per env / policy worker / trainer; returns the library used."""
    panels = [(a.arm, a.events) for a in arms if a.events]
    if not panels:
        return "none (no events)"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        return _draw_pillow(panels, path)
    heights = [max(2.0, 0.12 * len(_lanes(ev)) + 1.0) for _, ev in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(14, sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, (name, ev) in zip(axes[:, 0], panels):
        lanes = _lanes(ev)
        idx = {lane: k for k, lane in enumerate(lanes)}
        t0 = min(e["start"] for e in ev)
        for kind, colour in COLOURS.items():
            for lane in lanes:
                bars = [(e["start"] - t0, e["end"] - e["start"]) for e in ev
                        if e["kind"] == kind and f"{e['service']}:{e['worker']}" == lane]
                if bars:
                    ax.broken_barh(bars, (idx[lane] - 0.4, 0.8), facecolors=colour, linewidth=0)
        step = max(1, len(lanes) // 24)
        ax.set_yticks(range(0, len(lanes), step))
        ax.set_yticklabels(lanes[::step], fontsize=6)
        ax.invert_yaxis()
        ax.set_title(name, loc="left")
        ax.set_xlabel("seconds")
    axes[0, 0].legend(handles=[Patch(color=c, label=k) for k, c in COLOURS.items()], loc="lower right",
                      bbox_to_anchor=(1.0, 1.0), ncol=5, fontsize=7, frameon=False)  # above the first panel
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return "matplotlib"


def _draw_pillow(panels: Sequence[tuple[str, list[Event]]], path: Path) -> str:
    from PIL import Image, ImageDraw

    width, row, left, top = 1400, 6, 110, 24
    heights = [top + row * len(_lanes(ev)) + 20 for _, ev in panels]
    img = Image.new("RGB", (width, sum(heights)), "white")
    draw = ImageDraw.Draw(img)
    y0 = 0
    for (name, ev), h in zip(panels, heights):
        lanes = _lanes(ev)
        idx = {lane: k for k, lane in enumerate(lanes)}
        t0 = min(e["start"] for e in ev)
        span = max(e["end"] for e in ev) - t0 or 1.0
        draw.text((4, y0 + 4), f"{name} ({span:.1f} s)", fill="black")
        for e in ev:
            lane = f"{e['service']}:{e['worker']}"
            x0 = left + (e["start"] - t0) / span * (width - left - 10)
            x1 = max(x0 + 1, left + (e["end"] - t0) / span * (width - left - 10))
            y = y0 + top + row * idx[lane]
            draw.rectangle([x0, y, x1, y + row - 2], fill=COLOURS.get(e["kind"], "#000000"))
        for lane, k in idx.items():
            if len(lanes) <= 40 or k % max(1, len(lanes) // 20) == 0:
                draw.text((4, y0 + top + row * k - 3), lane[:16], fill="black")
        y0 += h
    img.save(path)
    return "Pillow"


def print_table(arms: Sequence[ArmResult], args: argparse.Namespace) -> None:
    cols = ["arm", "envs", "wall s", "actions", "actions/min", "U_env exec", "U_env occupied", "policy util",
            "trainer idle", "staleness mean/max", "trajs", "success"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for a in arms:
        m = a.metrics

        def pct(k: str) -> str:
            v = m.get(k, float("nan"))
            return "n/a" if v != v else f"{100 * v:.1f}%"

        print(f"| {a.arm} | {args.num_envs} | {m['wall_s']:.1f} | {m['actions']} | {m['actions_per_min']:.1f} | "
              f"{pct('u_env_exec')} | {pct('u_env_occupied')} | {pct('u_policy')} | {pct('trainer_idle')} | "
              f"{m['staleness_mean']:.2f}/{m['staleness_max']} | {m['trajectories']} | {pct('success_rate')} |")
    for a in arms:
        if a.note:
            print(f"note ({a.arm}): {a.note}")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-envs", type=int, default=64)
    ap.add_argument("--arms", default="coupled,decoupled", help="comma-separated: coupled, decoupled")
    ap.add_argument("--iterations", type=int, default=4, help="trainer updates per arm")
    ap.add_argument("--group-size", type=int, default=8, help="G, rollouts per group")
    ap.add_argument("--groups", type=int, default=None, help="groups per iteration (default num_envs / G: one "
                                                             "lockstep batch per iteration)")
    ap.add_argument("--max-steps", type=int, default=15, help="step budget per episode")
    ap.add_argument("--n-tasks", type=int, default=16, help="tasks of the LatencyModel-v0 suite")
    ap.add_argument("--latency", type=Path, default=ROOT / "bench" / "data" / "latency_osworld.json",
                    help="recorded latency histograms (bench/record_latency.py)")
    ap.add_argument("--time-scale", type=float, default=1.0, help="multiplies every modelled time (quick checks)")
    ap.add_argument("--policy-workers", type=int, default=1, help="policy GPU workers")
    ap.add_argument("--policy-rate-rps", type=float, default=PolicyLatencyModel.rate_rps)
    ap.add_argument("--policy-floor-s", type=float, default=PolicyLatencyModel.floor_s)
    ap.add_argument("--trainer-gpus", type=int, default=TrainerModel.gpus)
    ap.add_argument("--backend", choices=("process", "ray"), default="process")
    ap.add_argument("--ray-num-cpus", type=float, default=0.0, help="logical CPUs per env actor with --backend ray")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", type=Path, default=Path("runs") / "scale")
    args = ap.parse_args(argv)
    if args.groups is None:
        args.groups = max(1, args.num_envs // args.group_size)
    arms_wanted = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = set(arms_wanted) - {"coupled", "decoupled"}
    if unknown:
        ap.error(f"unknown arm(s) {sorted(unknown)}")
    policy_model = PolicyLatencyModel(rate_rps=args.policy_rate_rps, floor_s=args.policy_floor_s)
    trainer = TrainerModel(gpus=args.trainer_gpus)
    lat = json.loads(args.latency.read_text())
    print(f"scale: {args.num_envs} LatencyModel-v0 envs ({args.backend}), {args.iterations} updates, "
          f"{args.groups} groups x G={args.group_size} per update, budget {args.max_steps} steps, "
          f"time scale {args.time_scale:g}")
    print(f"env latency: {args.latency} ({lat.get('env_id')}, recorded {lat.get('machine', {}).get('date')}; "
          f"step median {lat['step'].get('median', float('nan')):.3f} s, reset median "
          f"{lat['reset'].get('median', float('nan')):.3f} s){' -- ' + lat['note'] if lat.get('note') else ''}")
    print(f"policy model: T(b) = max({policy_model.floor_s:g} s, b / {policy_model.rate_rps:g} req/s) per worker, "
          f"{args.policy_workers} worker(s). Source: {policy_model.source}")
    print(f"trainer model: {trainer.update_s(1):.3f} s per step-sample on {trainer.gpus} GPUs, weight sync "
          f"{trainer.sync_s():.2f} s. Source: {trainer.source}")
    print(f"machine: nproc {os.cpu_count()}, load {os.getloadavg()[0]:.1f} (shared machine: other jobs run too)")
    arms: list[ArmResult] = []
    if "coupled" in arms_wanted:
        arms.append(run_coupled(args, policy_model, trainer))
    if "decoupled" in arms_wanted:
        res = run_decoupled_arm(args, policy_model, trainer)
        if res is not None:
            arms.append(res)
    if not arms:
        print("no arm ran")
        return 1
    print_table(arms, args)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    png = args.out_dir / f"timeline_{args.num_envs}envs.png"
    lib = draw_timeline(arms, png)
    out = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
           "policy_model": asdict(policy_model), "trainer_model": asdict(trainer),
           "latency_file": {"path": str(args.latency), "env_id": lat.get("env_id"), "machine": lat.get("machine"),
                            "note": lat.get("note")},
           "arms": {a.arm: {"metrics": a.metrics, "note": a.note} for a in arms},
           "machine_load_after": os.getloadavg()[0]}
    js = args.out_dir / f"scale_{args.num_envs}envs.json"
    js.write_text(json.dumps(out, indent=1))
    print(f"timeline: {png} ({lib}); results: {js}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
