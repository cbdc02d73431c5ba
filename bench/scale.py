#!/usr/bin/env python
"""Scale-out: coupled (lockstep, verl/ARPO style) vs decoupled (DART) training on N stand-in envs.

    python bench/scale.py --num-envs 64 --iterations 3 --time-scale 0.5         # both arms (docs/benchmarks.md)
    python bench/scale.py --num-envs 8 --iterations 2 --time-scale 0.1 --arms coupled   # a quick check

Both arms run the project's real trainer code on the same recipe (:func:`recipe`), the same
tasks, seeds, envs, modelled policy and tiny model; only ``run.topology`` differs.

What runs (issue 16, item 6)
----------------------------
* Envs: ``--num-envs`` ``LatencyModel-v0`` envs (guigym/envs/latency_model.py) in worker
  processes (``--backend process``) or Ray actors (``--backend ray``). Each reset/step sleeps a
  latency drawn from ``--latency`` (a histogram recorded from a real env by
  bench/record_latency.py; default OSWorld-v0's local provider). Episodes: click the named
  buttons in order; step budget ``--max-steps`` (default 30, the "maximum of 30 interaction
  steps per episode" of DART's training runs, appendix "Rollout Service", whose Table 2 the
  ratios are compared with). One ``env.kwargs`` for all envs (the recipe has
  one), so members of a group (same task and seed) draw the same latency sequence.
* Policy: ``rollout.engine: latency_model`` (guigym/train/rollout/latency_engine.py), a stated
  latency model of a 7B VLM served by vLLM, no model runs: a batch of b requests on one GPU worker
  takes ``T(b) = max(floor_s, b / rate_rps)``; ``rate_rps`` = 2.55 requests/s, the figure vLLM
  publishes for a 7B VLM (vllm-project/vllm ``benchmarks/README.md``, "VisionArena Benchmark for
  Vision Language Models": ``vllm bench throughput --model Qwen/Qwen2-VL-7B-Instruct`` ->
  "Throughput: 2.55 requests/s, 4036.92 total tokens/s, 326.90 output tokens/s"); ``floor_s`` =
  1.28 s, 128 output tokens x 10 ms/token, derived (not published) from reading 15 GB of bf16
  weights per decode step at ~1.5 TB/s (A100-80GB). A weight refresh of a worker takes ``sync_s``
  = 2 bytes x 7e9 / 12.5 GB/s = 1.12 s (assumed 100 Gb/s link). ``--policy-workers`` such
  workers. Replies: with probability ``--p-correct`` the click on the next target, otherwise a
  uniform candidate (seeded), as the tiny model's token ids, so the real trainer trains on them.
* Trainer: the real learner (GRPO, stepwise samples, tiny Qwen2.5-VL on CPU, one torch thread).
  With ``--update-gpus`` G > 0 (default 8, DART's trainer) each update then lasts the stated time
  of a 7B update on G GPUs (``UpdateLatencyModel``, same module): ``T_update(n) = n x 3100 tokens x
  (1 + 2/3) / (7500 tokens/s/GPU x G)`` for n step samples -- 7500 = fms-fsdp's published 7B
  training throughput on H100, 2/3 = the old-policy and reference forward passes. ``--update-gpus
  0`` leaves only the tiny model's real CPU time, which a 7B run never sees.
* ``--time-scale`` multiplies every modelled time (env, policy, weight sync, update).

Arms
----
* ``coupled`` (verl / ARPO style): ``guigym.train.loop.Trainer`` with ``rollout.mode: sync``:
  per iteration ``--groups`` x G rollouts in lockstep (all envs reset together, the policy gets
  all prompts as one closed batch split over its workers, all envs step together, the next step
  waits for the slowest env), then the update (envs and policy idle), then a global weight sync
  (every policy worker paused ``sync_s``). On-policy (staleness 0) by construction.
* ``decoupled`` (DART): ``guigym.train.decoupled.run_decoupled``: data manager, rollout service
  (``--policy-workers`` modelled engines, least-loaded routing, staggered refresh k=1), env
  clusters (``--env-clusters``, rollout-wise) and the trainer, as Ray actors.

Reported per arm, all from the arm's event log (env reset/step rows, policy generate (one per
batch) / reload rows, trainer train rows) over the window from the moment every env finished its
first reset (process start-up excluded) to the end of the last update: actions/min (env steps),
U_env exec (share of env-time inside reset/step calls), U_env occupied (DART's: share of
env-time from an episode's reset to its last step), policy-worker utilisation (batch time /
(workers x window)), trainer idle share (1 - update time / window), GPU utilisation (DART's U_gpu:
policy batch time plus update time x update GPUs over (workers + update GPUs) x window); staleness from the trainer
(trainer version minus the policy version of each trajectory's oldest step). A timeline PNG shows
every env, policy worker and the trainer (matplotlib, else Pillow).

Rollouts the decoupled trainer drops for exceeding ``--max-policy-lag`` are not utilisation: their
env rows (found by the lane and wall-clock span each staleness record carries) leave actions/min
and both U_env figures (DART counts "valid action steps used in the training", sec. 5.3); the
``*_incl_dropped`` keys keep them, the drop rate is printed beside the ratios, and policy time is
discounted by the dropped share of requests (``u_policy_useful``, approximate: no per-request rows).

DART's own regime (80 envs, episodes of 5-20 min, 4 policy workers, 8 trainer GPUs):
``python3 bench/dart_regime.py --argv`` prints the command line; the model and its sources are in
that module.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from guigym.train.rollout.latency_engine import PolicyLatencyModel, UpdateLatencyModel  # noqa: E402

Event = dict[str, Any]
#: metric keys every arm reports
METRICS = ("wall_s", "actions", "actions_per_min", "u_env_exec", "u_env_occupied", "u_policy", "trainer_idle", "u_gpu",
           "staleness_mean", "staleness_max", "trajectories", "success_rate", "updates")
#: an episode whose env time does not count: (env lane, start, end) wall seconds
Span = tuple[str, float, float]


# ---- metrics from an event log ------------------------------------------------------------------
def _clip_union(intervals: Sequence[tuple[float, float]], lo: float, hi: float) -> float:
    total, end = 0.0, -np.inf
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in intervals):
        if e <= s:
            continue
        if e > end:
            total += e - max(s, end)
            end = e
    return total


def busy_s(rows: Sequence[Event], service: str, kind: Optional[str] = None, lo: float = -np.inf,
           hi: float = np.inf) -> float:
    """Per-worker union of the intervals of ``service`` (and ``kind``) clipped to [lo, hi], summed
    over workers."""
    lanes: dict[str, list[tuple[float, float]]] = {}
    for e in rows:
        if e["service"] == service and (kind is None or e["kind"] == kind):
            lanes.setdefault(e["worker"], []).append((e["start"], e["end"]))
    return sum(_clip_union(iv, lo, hi) for iv in lanes.values())


def occupied_intervals(rows: Sequence[Event]) -> list[tuple[str, float, float]]:
    """(env lane, start, end) per episode: from a reset's start to the end of the last step
    before that env's next reset."""
    lanes: dict[str, list[Event]] = {}
    for e in rows:
        if e["service"] == "env":
            lanes.setdefault(e["worker"], []).append(e)
    out = []
    for lane, ev in lanes.items():
        cur: Optional[list[float]] = None
        for e in sorted(ev, key=lambda r: r["start"]):
            if e["kind"] == "reset":
                if cur is not None:
                    out.append((lane, cur[0], cur[1]))
                cur = [e["start"], e["end"]]
            elif cur is not None:
                cur[1] = max(cur[1], e["end"])
        if cur is not None:
            out.append((lane, cur[0], cur[1]))
    return out


def window(rows: Sequence[Event]) -> tuple[float, float]:
    """(start, end): every env has finished its first reset .. the last train row ended."""
    first: dict[str, float] = {}
    for e in sorted((e for e in rows if e["service"] == "env" and e["kind"] == "reset"), key=lambda r: r["end"]):
        first.setdefault(e["worker"], e["end"])
    trains = [e["end"] for e in rows if e["service"] == "trainer" and e["kind"] == "train"]
    if not first or not trains:
        raise ValueError("the event log has no env reset or no train row")
    return max(first.values()), max(trains)


def without_episodes(rows: Sequence[Event], spans: Sequence[Span]) -> list[Event]:
    """``rows`` minus the env rows that lie inside one of ``spans`` on its lane (a rollout the
    policy-lag bound dropped: its reset and steps, StaleRecord.env_lane / env_span)."""
    by_lane: dict[str, list[tuple[float, float]]] = {}
    for lane, s, e in spans:
        by_lane.setdefault(lane, []).append((s, e))

    def dropped(r: Event) -> bool:
        return r["service"] == "env" and any(s <= r["start"] and r["end"] <= e for s, e in by_lane.get(r["worker"], ()))

    return [r for r in rows if not dropped(r)]


def metrics_from_events(rows: Sequence[Event], num_envs: int, num_workers: int,
                        trainer_gpus: int = 0, dropped: Sequence[Span] = ()) -> dict[str, float]:
    """wall_s, actions, actions_per_min, u_env_exec, u_env_occupied, u_policy, trainer_idle and
    u_gpu (NaN when ``trainer_gpus`` is 0: a CPU trainer has no GPU time) over :func:`window` --
    computed from the rows alone.

    ``dropped``: episodes the policy-lag bound dropped. Their env time and actions do not count
    (DART sec. 5.3 counts the "valid action steps used in the training"); the keys
    ``actions_incl_dropped``, ``actions_per_min_incl_dropped``, ``u_env_exec_incl_dropped`` and
    ``u_env_occupied_incl_dropped`` keep the counts with them, ``dropped_action_share`` is the
    share of the window's actions they took. Policy time has no per-rollout rows, so
    ``u_policy_useful`` (and ``u_gpu_useful``) scale the batch time by 1 - that share: exact in
    requests, approximate in time (a batch at the latency floor costs the same for fewer requests).
    """
    lo, hi = window(rows)
    kept = without_episodes(rows, dropped) if dropped else list(rows)
    m = _metrics(kept, lo, hi, num_envs, num_workers, trainer_gpus)
    allm = _metrics(rows, lo, hi, num_envs, num_workers, trainer_gpus) if dropped else m
    share = 1.0 - m["actions"] / allm["actions"] if allm["actions"] else 0.0
    m.update({"actions_incl_dropped": allm["actions"], "actions_per_min_incl_dropped": allm["actions_per_min"],
              "u_env_exec_incl_dropped": allm["u_env_exec"], "u_env_occupied_incl_dropped": allm["u_env_occupied"],
              "dropped_action_share": share, "u_policy_useful": m["u_policy"] * (1.0 - share),
              "u_gpu_useful": ((m["u_gpu"] * (num_workers + trainer_gpus) - m["u_policy"] * share * num_workers)
                               / (num_workers + trainer_gpus)) if trainer_gpus > 0 else float("nan")})
    return m


def _metrics(rows: Sequence[Event], lo: float, hi: float, num_envs: int, num_workers: int,
             trainer_gpus: int) -> dict[str, float]:
    wall = hi - lo
    actions = sum(1 for e in rows if e["service"] == "env" and e["kind"] == "step" and lo < e["end"] <= hi)
    occ: dict[str, list[tuple[float, float]]] = {}
    for lane, s, e in occupied_intervals(rows):
        occ.setdefault(lane, []).append((s, e))
    gen, train = busy_s(rows, "policy", "generate", lo, hi), busy_s(rows, "trainer", "train", lo, hi)
    u_gpu = ((gen + trainer_gpus * train) / ((num_workers + trainer_gpus) * wall)) if trainer_gpus > 0 else float("nan")
    return {"wall_s": wall, "actions": actions, "actions_per_min": 60.0 * actions / wall,
            "u_env_exec": busy_s(rows, "env", None, lo, hi) / (num_envs * wall),
            "u_env_occupied": sum(_clip_union(iv, lo, hi) for iv in occ.values()) / (num_envs * wall),
            "u_policy": gen / (num_workers * wall), "trainer_idle": 1.0 - train / wall, "u_gpu": u_gpu}


def engine_check(rows: Sequence[Event], model: PolicyLatencyModel, time_scale: float) -> dict[str, float]:
    """How closely the policy rows follow the stated model: per generate row, the modelled
    ``T(batch) x time_scale`` vs the row's duration; largest relative excess and batch stats."""
    gens = [e for e in rows if e["service"] == "policy" and e["kind"] == "generate"]
    if not gens:
        return {"batches": 0}
    want = np.array([model.batch_s(int(e["batch"])) * time_scale for e in gens])
    got = np.array([e["end"] - e["start"] for e in gens])
    return {"batches": len(gens), "mean_batch": float(np.mean([e["batch"] for e in gens])),
            "max_batch": int(max(e["batch"] for e in gens)), "min_ratio": float(np.min(got / want)),
            "max_ratio": float(np.max(got / want))}


# ---- the recipe both arms share -----------------------------------------------------------------
def recipe(args: argparse.Namespace, model_dir: Path, run_dir: Path, topology: str) -> dict[str, Any]:
    """A TrainConfig dict: identical for both arms except run.topology, rollout.mode and the
    decoupled section."""
    lm = {"rate_rps": args.policy_rate_rps, "floor_s": args.policy_floor_s, "sync_s": args.policy_sync_s,
          "time_scale": args.time_scale, "p_correct": args.p_correct}
    if args.update_gpus > 0:
        lm.update({"update_gpus": args.update_gpus, "update_tokens_per_sample": args.update_tokens_per_sample,
                   "update_tokens_per_s_per_gpu": args.update_tokens_per_s_per_gpu})
    if topology == "coupled":
        lm["workers"] = args.policy_workers  # one engine, all workers: a global sync group
    cfg: dict[str, Any] = {
        "run": {"name": f"scale_{topology}", "dir": str(run_dir), "seed": args.seed, "iterations": args.iterations,
                "checkpoint_every": 10_000, "keep_checkpoints": 1, "torch_threads": 1, "backend": args.backend,
                "topology": topology},
        "model": {"path": str(model_dir), "device": "cpu", "dtype": "float32"},
        "env": {"id": "LatencyModel-v0", "num_envs": args.num_envs, "max_steps": args.max_steps,
                "kwargs": {"latency": str(args.latency), "time_scale": args.time_scale, "max_steps": args.max_steps,
                           "n_tasks": args.n_tasks, "n_elements": args.n_elements, "min_targets": args.min_targets,
                           "max_targets": args.max_targets},
                "tasks": [f"latency-{k:03d}" for k in range(args.n_tasks)]},
        "rollout": {"engine": "latency_model", "latency_model": lm, "mode": "sync" if topology == "coupled" else "rollout",
                    "num_generations": args.group_size, "groups_per_iteration": args.groups, "max_new_tokens": 16,
                    "constrained": True, "history_images": 0, "max_batch": 256},
        # every collected step is trained (zero-advantage groups too): the trainer's cost per sample is
        # the same in both arms whatever the rewards
        "algorithm": {"advantage": "grpo", "sample_builder": "stepwise", "num_iterations": 1,
                      "per_device_train_batch_size": 16, "skip_zero_advantage_groups": False},
        "optim": {"learning_rate": 2.0e-3},
        "eval": {"enabled": False},
    }
    if args.backend == "ray":
        cfg["ray"] = {"num_cpus": args.ray_num_cpus}
    if topology == "decoupled":
        cfg["decoupled"] = {"num_policy_workers": args.policy_workers, "groups_per_update": args.groups,
                            "num_env_clusters": args.env_clusters, "max_policy_lag": args.max_policy_lag,
                            "actor_num_cpus": 0.0}
    return cfg


def tiny_model(args: argparse.Namespace, tmp: Path) -> Path:
    from guigym.models.tiny import build

    return Path(build(tmp / "tiny", seed=args.seed))


# ---- the arms -----------------------------------------------------------------------------------
@dataclass
class ArmResult:
    arm: str
    metrics: dict[str, float] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    note: str = ""
    engine: dict[str, float] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)  # the trainer's metrics, one row per update
    dropped: list[Span] = field(default_factory=list)  # episodes the lag bound dropped (not counted)
    staleness: list[dict[str, Any]] = field(default_factory=list)  # one StaleRecord per consumed trajectory


def run_coupled(args: argparse.Namespace) -> ArmResult:
    """verl/ARPO-style: the coupled trainer (lockstep rollouts, update, global weight sync)."""
    from guigym.train.config import TrainConfig
    from guigym.train.decoupled.env_cluster import _LoggedPool
    from guigym.train.decoupled.events import EventLog
    from guigym.train.loop import Trainer

    env_log, pol_log, tr_log = EventLog("env"), EventLog("policy"), EventLog("trainer")
    with tempfile.TemporaryDirectory() as tmp:
        cfg = TrainConfig.model_validate(recipe(args, tiny_model(args, Path(tmp)), Path(tmp) / "run", "coupled"))
        trainer = Trainer(cfg, log=lambda s: None)
        try:
            trainer.build()
            trainer.start_rollout()
            trainer.pool = _LoggedPool(trainer.pool, env_log, "env0")
            trainer.service.log = pol_log
            update = trainer.learner.update

            def logged_update(samples: Any) -> Any:
                with tr_log.span("train", "trainer", samples=len(samples)):
                    return update(samples)

            trainer.learner.update = logged_update
            rows = [trainer.iteration(it) for it in range(cfg.run.iterations)]
        finally:
            trainer.close()
    events = sorted(env_log.rows() + pol_log.rows() + tr_log.rows(), key=lambda e: e["start"])
    m = metrics_from_events(events, args.num_envs, args.policy_workers, args.update_gpus)
    m.update({"staleness_mean": float(np.mean([r.get("staleness_mean", 0.0) for r in rows])),
              "staleness_max": int(max(r.get("staleness_max", 0.0) for r in rows)),
              "trajectories": int(sum(r["rollout/trajectories"] for r in rows)),
              "success_rate": float(np.mean([r["rollout/success_rate"] for r in rows])), "updates": len(rows)})
    return ArmResult("coupled", m, events, rows=rows)


def run_decoupled_arm(args: argparse.Namespace) -> Optional[ArmResult]:
    """DART: ``run_decoupled`` on the same recipe (run.topology decoupled)."""
    try:
        from guigym.train.decoupled import run_decoupled
    except ImportError as exc:
        print(f"decoupled arm: MISSING (guigym.train.decoupled.run_decoupled not importable: {exc})")
        return None
    from guigym.train.config import TrainConfig

    with tempfile.TemporaryDirectory() as tmp:
        cfg = TrainConfig.model_validate(recipe(args, tiny_model(args, Path(tmp)), Path(tmp) / "run", "decoupled"))
        out = run_decoupled(cfg, log=lambda s: None)
    events = list(out["events"])
    drops = [r for r in out.get("staleness", []) if r.get("action") == "drop"]
    spans = [(r["env_lane"], *r["env_span"]) for r in drops if r.get("env_lane") and r.get("env_span")]
    unplaced = len(drops) - len(spans)  # dropped trajectories that do not say where they ran (counted as work)
    m = metrics_from_events(events, args.num_envs, args.policy_workers, args.update_gpus, dropped=spans)
    lags = [r["lag"] for r in out.get("staleness", [])]
    dropped = len(drops)
    srs = [r["rollout/success_rate"] for r in out.get("metrics", []) if "rollout/success_rate" in r]
    m.update({"staleness_mean": float(np.mean(lags)) if lags else 0.0, "staleness_max": int(max(lags, default=0)),
              "trajectories": len(lags), "success_rate": float(np.mean(srs)) if srs else float("nan"),
              "updates": int(out.get("updates", 0)), "dropped": dropped,
              "drop_rate": dropped / len(lags) if lags else 0.0})
    note = (f"{dropped} of {len(lags)} trajectories dropped as older than max_policy_lag {args.max_policy_lag} "
            f"({100 * m['dropped_action_share']:.1f}% of the window's actions); their env time and actions are "
            f"not counted (with them: actions/min {m['actions_per_min_incl_dropped']:.1f}, U_env occupied "
            f"{100 * m['u_env_occupied_incl_dropped']:.1f}%, U_env exec {100 * m['u_env_exec_incl_dropped']:.1f}%)"
            + (f"; {unplaced} dropped trajectories without env_lane/env_span are still counted" if unplaced else ""))
    return ArmResult("decoupled", m, events, note=note, rows=list(out.get("metrics", [])), dropped=spans,
                     staleness=list(out.get("staleness", [])))


# ---- output ------------------------------------------------------------------------------------
COLOURS = {"reset": "#9e9e9e", "step": "#1f77b4", "generate": "#2ca02c", "reload": "#d62728", "train": "#ff7f0e"}


def _lanes(rows: Sequence[Event]) -> list[str]:
    order = {"env": 0, "policy": 1, "trainer": 2, "data": 3}

    def key(w: str) -> tuple[tuple[int, ...], str]:  # env1/10 after env1/9
        import re

        return tuple(int(x) for x in re.findall(r"\d+", w)), w

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
            if e["kind"] not in COLOURS:
                continue
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


def histogram_text(name: str, h: dict[str, Any]) -> str:
    """One line per bin: ``[lo, hi) s  count  ####``."""
    counts = [float(c) for c in h["counts"]]
    top = max(counts) or 1.0
    lines = [f"  {name} (n={int(sum(counts))}, median {h.get('median', float('nan')):.3f} s):"]
    for lo, hi, c in zip(h["edges"][:-1], h["edges"][1:], counts):
        lines.append(f"    [{lo:7.3f}, {hi:7.3f}) s {int(c):4d} {'#' * int(round(30 * c / top))}")
    return "\n".join(lines)


def print_table(arms: Sequence[ArmResult], args: argparse.Namespace) -> None:
    cols = ["arm", "envs", "policy workers", "window s", "actions", "actions/min", "U_env exec", "U_env occupied",
            "policy util", "trainer idle", "GPU util", "staleness mean/max", "trajs", "success",
            "dropped (share of actions)"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for a in arms:
        m = a.metrics

        def pct(k: str) -> str:
            v = m.get(k, float("nan"))
            return "n/a" if v != v else f"{100 * v:.1f}%"

        print(f"| {a.arm} | {args.num_envs} | {args.policy_workers} | {m['wall_s']:.1f} | {m['actions']} | "
              f"{m['actions_per_min']:.1f} | {pct('u_env_exec')} | {pct('u_env_occupied')} | {pct('u_policy')} | "
              f"{pct('trainer_idle')} | {pct('u_gpu')} | {m['staleness_mean']:.2f}/{m['staleness_max']} | {m['trajectories']} | "
              f"{pct('success_rate')} | {int(m.get('dropped', 0))}/{m['trajectories']} "
              f"({pct('dropped_action_share')}) |")
    by = {a.arm: a.metrics for a in arms}
    if "coupled" in by and "decoupled" in by:
        c, d = by["coupled"], by["decoupled"]
        ratio = (lambda k: d[k] / c[k] if c[k] else float("inf"))
        print(f"decoupled / coupled: actions/min x{ratio('actions_per_min'):.2f}, U_env exec "
              f"x{ratio('u_env_exec'):.2f}, U_env occupied x{ratio('u_env_occupied'):.2f}, policy util "
              f"x{ratio('u_policy'):.2f}, GPU util x{ratio('u_gpu'):.2f} (dropped rollouts' env time and actions "
              f"not counted; drop rate {100 * d.get('drop_rate', 0.0):.1f}% of trajectories)")
        print(f"  policy time of dropped rollouts not counted either (approximate): policy util "
              f"x{d['u_policy_useful'] / c['u_policy']:.2f}, GPU util x{d['u_gpu_useful'] / c['u_gpu']:.2f}; "
              f"dropped rollouts counted: actions/min x{ratio('actions_per_min_incl_dropped'):.2f}, U_env "
              f"occupied x{ratio('u_env_occupied_incl_dropped'):.2f}, U_env exec x{ratio('u_env_exec_incl_dropped'):.2f}")
    for a in arms:
        if a.engine:
            e = a.engine
            print(f"engine check ({a.arm}): {e['batches']} batches, mean {e.get('mean_batch', 0):.1f}, max "
                  f"{e.get('max_batch', 0)}; duration / modelled T(b) in [{e.get('min_ratio', 0):.3f}, "
                  f"{e.get('max_ratio', 0):.3f}]")
        if a.note:
            print(f"note ({a.arm}): {a.note}")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-envs", type=int, default=64)
    ap.add_argument("--arms", default="coupled,decoupled", help="comma-separated: coupled, decoupled")
    ap.add_argument("--iterations", type=int, default=4, help="trainer updates per arm")
    ap.add_argument("--group-size", type=int, default=8, help="G, rollouts per group")
    ap.add_argument("--groups", type=int, default=None, help="groups per update (default num_envs / G: one "
                                                             "lockstep batch per coupled iteration)")
    ap.add_argument("--max-steps", type=int, default=30, help="step budget per episode (DART trains with at "
                                                                "most 30 steps)")
    ap.add_argument("--n-tasks", type=int, default=16, help="tasks of the LatencyModel-v0 suite")
    ap.add_argument("--n-elements", type=int, default=6, help="buttons on a LatencyModel-v0 screen")
    ap.add_argument("--min-targets", type=int, default=1, help="fewest buttons a task names")
    ap.add_argument("--max-targets", type=int, default=3, help="most buttons a task names")
    ap.add_argument("--latency", type=Path, default=ROOT / "bench" / "data" / "latency_osworld.json",
                    help="recorded latency histograms (bench/record_latency.py)")
    ap.add_argument("--time-scale", type=float, default=1.0, help="multiplies every modelled time (env, policy, "
                                                                  "weight sync); not the real trainer's")
    ap.add_argument("--policy-workers", type=int, default=4, help="modelled policy GPU workers")
    ap.add_argument("--policy-rate-rps", type=float, default=PolicyLatencyModel.rate_rps)
    ap.add_argument("--policy-floor-s", type=float, default=PolicyLatencyModel.floor_s)
    ap.add_argument("--policy-sync-s", type=float, default=PolicyLatencyModel.sync_s)
    ap.add_argument("--update-gpus", type=int, default=8, help="trainer GPUs of the stated 7B update-time model "
                                                               "(0: the tiny model's real CPU update time only)")
    ap.add_argument("--update-tokens-per-sample", type=float, default=UpdateLatencyModel.tokens_per_sample)
    ap.add_argument("--update-tokens-per-s-per-gpu", type=float, default=UpdateLatencyModel.tokens_per_s_per_gpu)
    ap.add_argument("--p-correct", type=float, default=0.2, help="share of replies forced to the correct click")
    ap.add_argument("--env-clusters", type=int, default=None, help="decoupled env-cluster actors (default "
                                                                   "num_envs / G: one group per cluster)")
    ap.add_argument("--max-policy-lag", type=int, default=1, help="decoupled staleness bound (drop beyond)")
    ap.add_argument("--backend", choices=("process", "ray"), default="process", help="env workers")
    ap.add_argument("--ray-num-cpus", type=float, default=0.0, help="logical CPUs per env actor with --backend ray")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", type=Path, default=Path("runs") / "scale")
    args = ap.parse_args(argv)
    if args.groups is None:
        args.groups = max(1, args.num_envs // args.group_size)
    if args.env_clusters is None:
        args.env_clusters = max(1, args.num_envs // args.group_size)
    arms_wanted = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = set(arms_wanted) - {"coupled", "decoupled"}
    if unknown:
        ap.error(f"unknown arm(s) {sorted(unknown)}")
    model = PolicyLatencyModel(rate_rps=args.policy_rate_rps, floor_s=args.policy_floor_s, sync_s=args.policy_sync_s)
    lat = json.loads(args.latency.read_text())
    print(f"scale: {args.num_envs} LatencyModel-v0 envs ({args.backend}), {args.iterations} updates, "
          f"{args.groups} groups x G={args.group_size} per update, budget {args.max_steps} steps, "
          f"time scale {args.time_scale:g} (env, policy, sync, modelled update)")
    print(f"env latency: {args.latency} ({lat.get('env_id')}, recorded {lat.get('machine', {}).get('date')})"
          f"{' -- ' + lat['note'] if lat.get('note') else ''}")
    for kind in ("reset", "step"):
        print(histogram_text(kind, lat[kind]))
    print(f"policy model: T(b) = max({model.floor_s:g} s, b / {model.rate_rps:g} req/s) per worker, weight sync "
          f"{model.sync_s:g} s, {args.policy_workers} worker(s); replies: p_correct {args.p_correct:g}, else uniform. "
          f"Source: {model.source}")
    print("trainer: real GRPO learner on a tiny Qwen2.5-VL (hidden 64, 2 layers), CPU, 1 torch thread; "
          "batch 16 step-samples; log-probs of the modelled replies = log P(choice) under the engine's mixture")
    upd = UpdateLatencyModel(gpus=args.update_gpus, tokens_per_sample=args.update_tokens_per_sample,
                             tokens_per_s_per_gpu=args.update_tokens_per_s_per_gpu)
    if upd.gpus > 0:
        print(f"update model: each update lasts T_update(n) = n x {upd.tokens_per_sample:g} tokens x "
              f"(1 + {upd.forward_passes:g}/3) / ({upd.tokens_per_s_per_gpu:g} tokens/s/GPU x {upd.gpus} GPUs) = "
              f"{upd.update_s(1) * 1000:.1f} ms per step sample (x time scale), the real CPU update included. "
              f"Source: {upd.source}")
    else:
        print("update model: off (--update-gpus 0): updates take the tiny model's real CPU time")
    print(f"machine: nproc {os.cpu_count()}, load {os.getloadavg()[0]:.1f} (shared machine: other jobs run too)")
    arms: list[ArmResult] = []
    runners = {"coupled": run_coupled, "decoupled": run_decoupled_arm}
    for name in arms_wanted:
        t = time.time()
        res = runners[name](args)
        if res is not None:
            res.engine = engine_check(res.events, model, args.time_scale)
            arms.append(res)
            print(f"{name}: done in {time.time() - t:.0f} s (incl. start-up)")
    if not arms:
        print("no arm ran")
        return 1
    print_table(arms, args)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    png = args.out_dir / f"timeline_{args.num_envs}envs.png"
    lib = draw_timeline(arms, png)
    out = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
           "policy_model": asdict(model), "update_model": asdict(upd),
           "latency_file": {"path": str(args.latency), "env_id": lat.get("env_id"), "machine": lat.get("machine"),
                            "note": lat.get("note")},
           "arms": {a.arm: {"metrics": a.metrics, "engine": a.engine, "note": a.note, "dropped": a.dropped,
                             "staleness": a.staleness}
                    for a in arms},
           "machine": {"nproc": os.cpu_count(), "load_after": os.getloadavg()[0],
                       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}}
    js = args.out_dir / f"scale_{args.num_envs}envs.json"
    js.write_text(json.dumps(out, indent=1))
    (args.out_dir / f"scale_{args.num_envs}envs_events.json").write_text(
        json.dumps({a.arm: a.events for a in arms}, default=float))
    print(f"timeline: {png} ({lib}); results: {js}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
