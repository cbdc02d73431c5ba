#!/usr/bin/env python
"""Mechanism evidence for two curricula (issue 15 item 4): WebRL's critic band and UI-Mem's
dropout curriculum, on real MiniWoB++ pages in Chromium with a fresh random tiny Qwen2.5-VL.

Usage::

    python bench/curriculum_band.py                       # 3 seeds, 4 iterations (~10-15 min on 2 cores)
    python bench/curriculum_band.py --seeds 2 --iterations 5 --json /tmp/band.json
    python bench/curriculum_band.py --quick               # 1 seed, 2 iterations, 2 tasks: a smoke run

**WebRL** (Qi et al. 2024, sec. 2.2: keep generated tasks whose critic score lies in [0.05, 0.75]).
A WebRL run is trained on bench/ablate.py's base configuration (same tasks, seeds, budget and
tiny model) with three WebRL pieces on top: the critic with eq. 9 advantages (``webrl_gae``,
trained each iteration on eq. 8), the curriculum (``webrl_curriculum``, parameter mutator over the
MiniWoB seed of each family, one-iteration phases) and the phase sampler (``webrl_phase``). At the
phase boundary after the last iteration the curriculum is called as the trainer would call it;
its hook ``last_candidates`` lists every scored candidate, kept or rejected by the band. Each
candidate (a MiniWoB page fixed by its seed, ``params.seed``) is then played ``K`` times by the
current policy (temperature 1, the training step budget), and its measured success is compared
with the band: does the critic's band select pages whose success lies in [0.05, 0.75]?

Note on what the critic can see: a MiniWoB family has no instruction template, so the critic's
"initial state" of a candidate is the parent's failed first page (``initial_state``), the same
for every candidate of one parent. Scores differ between parents, not within one.

**UI-Mem** (Xiao et al. 2026, eqs. 2-3: lambda_strong falls and lambda_none rises with the task's
EMA success). bench/ablate.py's ``uimem`` arm is trained; the conditioner's hook ``trace``
records, per iteration and task, the EMA it read and the lambdas and strata counts it used. The
EMA is replayed independently from the DataStore (each on-policy rollout in stored order,
``SR <- gamma SR + (1 - gamma) success``) and printed next to the recorded one, with the guidance
levels the rollouts really got and the rank correlation of lambda_strong with the EMA.

Fixed before any run: tasks (``ablate.TASKS``: click-test, click-button, click-option,
login-user; quick: click-button and login-user, so that a failed parent always exists), the mutator's seed space ``SEED_SPACE``, ``K``, the
critic's learning rate (``CRITIC``: 2e-3, the step the tiny model's policy and ORM use) and the
curriculum's options (``CURRICULUM``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional, Sequence

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench/ablate.py

import ablate  # noqa: E402

SEED_SPACE = (0, 100_000)  #: every family's mutator draws new page seeds from this range
K, QUICK_K = 8, 4  #: rollouts per candidate to measure its success
#: smoke budget: login-user (impossible in 2 steps) fails every phase, so every boundary has a parent
QUICK = ablate.Budget(("click-button", ablate.IMPOSSIBLE), groups_per_iteration=2)
LOW, HIGH = 0.05, 0.75  #: WebRL's band (sec. 2.2)
CRITIC = {"form": "webrl", "lam": 0.5, "gamma": 1.0, "critic_lr": 2.0e-3, "critic_epochs": 1,
          "critic_batch_size": 8, "max_tokens": 1024}
CURRICULUM = {"generator": "mutator", "phase_iterations": 1, "max_new": 500, "per_parent": 4,
              "low": LOW, "high": HIGH, "max_tokens": 1024}


# ---- WebRL ------------------------------------------------------------------------------------
def webrl_config(seed: int, iterations: int, run_dir: Path, budget: ablate.Budget) -> dict[str, Any]:
    """bench/ablate.py's base config with WebRL's critic, curriculum and phase sampler."""
    cfg = ablate.config("grpo", seed, iterations, run_dir, budget)
    cfg["run"]["name"] = f"band-webrl-{seed}"
    families = {t: {"space": {"seed": {"range": list(SEED_SPACE)}}, "verifier_survives": True} for t in budget.tasks}
    cfg["algorithm"].update(
        advantage="webrl_gae", skip_zero_advantage_groups=False, task_sources=["webrl_curriculum"],
        task_sampler="webrl_phase",
        plugin_options={"webrl_gae": dict(CRITIC), "webrl_curriculum": {**CURRICULUM, "families": families},
                        "webrl_phase": {"new_share": 0.5}})
    return cfg


def probe(trainer: Any, iteration: int, k: int) -> list[dict[str, Any]]:
    """Call the curriculum at phase boundary ``iteration`` and play every candidate ``k`` times
    with the current policy. One dict per candidate: task_id, family (root), parent, page seed,
    critic_score, in_band, kept, n (scorable rollouts), unscorable, successes, instructions
    (distinct env instructions seen: 1 when the seed pins the page)."""
    from guigym.train.algorithms.webrl import WebRLCurriculum

    cur = next(p for p in trainer.task_source.plugins if isinstance(p, WebRLCurriculum))
    cur(ctx=trainer.context(iteration))  # the run ends here: nothing it keeps is stored
    cands = list(cur.last_candidates)
    if not cands:
        return []
    ids = [c["task"].task_id for c in cands]
    if len(set(ids)) != len(ids):
        raise RuntimeError(f"curriculum candidates share task ids: {ids}")
    sched = trainer.make_scheduler(iteration, group_size=k, purpose="band-probe")
    sched.task_specs.update({c["task"].task_id: {"parent": c["task"].parent, **c["task"].spec} for c in cands})
    seeds = [int(c["task"].spec["params"]["seed"]) for c in cands]
    groups = {g.task_id: g for g in sched.collect(ids, seeds=seeds, group_sizes=[k] * len(ids))}
    out = []
    for c, seed in zip(cands, seeds):
        t = c["task"]
        trajs = groups[t.task_id].trajectories if t.task_id in groups else []
        out.append({"task_id": t.task_id, "family": t.spec["root"], "parent": t.parent, "seed": seed,
                    "critic_score": c["critic_score"], "in_band": c["in_band"], "kept": c["kept"],
                    "n": len(trajs), "unscorable": k - len(trajs), "successes": sum(bool(x.success) for x in trajs),
                    "episode_seeds": sorted({x.seed for x in trajs}),
                    "instructions": len({x.info.get("instruction", "") for x in trajs})})
    return out


def run_webrl(seed: int, iterations: int, budget: ablate.Budget, k: int, keep: bool = False) -> dict[str, Any]:
    """Train ``iterations`` WebRL iterations, then :func:`probe` the next phase boundary."""
    from guigym.train.algorithms.webrl import WebRLCurriculum, WebRLGAEEstimator
    from guigym.train.config import from_dict
    from guigym.train.loop import Trainer

    tmp = tempfile.mkdtemp(prefix=f"band-webrl-{seed}-")
    run_dir = Path(tmp) / "run"
    cfg = webrl_config(seed, iterations, run_dir, budget)
    trainer = Trainer(from_dict(cfg), log=lambda m: None)
    t0 = time.time()
    phases, critic = [], []
    try:
        trainer.build()
        trainer.start_rollout()
        cur = next(p for p in trainer.task_source.plugins if isinstance(p, WebRLCurriculum))
        est = next(p for p in trainer.advantage_estimator.plugins if isinstance(p, WebRLGAEEstimator))
        for it in range(iterations):
            trainer.iteration(it)
            if it:
                phases.append({"iteration": it, **cur.last_stats})
            critic.append(dict(est.last_metrics))
        t_train = time.time() - t0
        cands = probe(trainer, iterations, k)
    finally:
        trainer.close()
    out = {"seed": seed, "iterations": iterations, "k": k, "run_id": trainer.run_id, "phases": phases,
           "critic": critic, "candidates": cands, "train_s": t_train, "probe_s": time.time() - t0 - t_train}
    if keep:
        out["run_dir"] = str(run_dir)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def in_band(successes: int, n: int) -> bool:
    return n > 0 and LOW <= successes / n <= HIGH


def _ranks(xs: Sequence[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for m in range(i, j + 1):  # ties share their mean rank
            r[order[m]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman rank correlation (average ranks for ties); NaN with < 2 points or a constant side."""
    if len(xs) != len(ys) or len(xs) < 2:
        return float("nan")
    a, b = _ranks(xs), _ranks(ys)
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va, vb = sum((x - ma) ** 2 for x in a), sum((y - mb) ** 2 for y in b)
    if va == 0 or vb == 0:
        return float("nan")
    return sum((x - ma) * (y - mb) for x, y in zip(a, b)) / math.sqrt(va * vb)


def band_table(cands: Sequence[dict[str, Any]]) -> list[str]:
    """Per family and pooled, candidates kept by the band vs rejected: n, share whose measured
    success lies in [LOW, HIGH], mean measured success, mean critic score; then the rank
    correlation of critic score and measured success."""
    lines = [f"{'family':<14} {'critic band':<9} {'n':>4} {'measured in band':>17} {'mean success':>13} "
             f"{'mean critic':>12} {'critic range':>18}"]
    fams = sorted({c["family"] for c in cands})
    for fam in fams + ["pooled"]:
        mine = [c for c in cands if fam == "pooled" or c["family"] == fam]
        for side, want in (("kept", True), ("rejected", False)):
            rows = [c for c in mine if bool(c["in_band"]) == want]
            if not rows:
                lines.append(f"{fam:<14} {side:<9} {0:>4} {'-':>17} {'-':>13} {'-':>12} {'-':>18}")
                continue
            scores = [float(c["critic_score"]) for c in rows if c["critic_score"] is not None]
            share = sum(in_band(c["successes"], c["n"]) for c in rows) / len(rows)
            succ = sum(c["successes"] / c["n"] for c in rows if c["n"]) / max(1, sum(1 for c in rows if c["n"]))
            rng = f"[{min(scores):.4f}, {max(scores):.4f}]" if scores else "-"
            lines.append(f"{fam:<14} {side:<9} {len(rows):>4} {share:>17.2f} {succ:>13.3f} "
                         f"{sum(scores) / max(1, len(scores)):>12.4f} {rng:>18}")
    pairs = [(float(c["critic_score"]), c["successes"] / c["n"]) for c in cands if c["n"] and c["critic_score"] is not None]
    rho = spearman([p[0] for p in pairs], [p[1] for p in pairs])
    lines.append(f"Spearman(critic score, measured success) = {rho:.3f} over {len(pairs)} candidates "
                 f"({len({p[0] for p in pairs})} distinct scores, {len({c['parent'] for c in cands})} parents)")
    return lines


# ---- UI-Mem -----------------------------------------------------------------------------------
def replay_ema(run_dir: Path, run_id: str, gamma: float, init: float = 0.0) -> dict[tuple[int, str], float]:
    """(iteration, task) -> the task's EMA success before that iteration, replayed from the
    DataStore: every on-policy rollout of earlier iterations in stored (= absorbed) order."""
    from guigym.train.data.store import DataStore

    store = DataStore.for_run_dir(str(run_dir))
    try:
        trajs = [t for t in store.get_trajectories(run_id, source="on_policy", with_steps=False)]
    finally:
        store.close()
    its = sorted({int(t.info["iteration"]) for t in trajs})
    ema: dict[str, float] = {}
    out: dict[tuple[int, str], float] = {}
    for it in range(max(its, default=-1) + 2):
        for task in {t.task_id for t in trajs} | set(ema):
            out[(it, task)] = ema.get(task, init)
        for t in trajs:
            if int(t.info["iteration"]) == it:
                ema[t.task_id] = gamma * ema.get(t.task_id, init) + (1 - gamma) * float(bool(t.success))
    return out


def run_uimem(seed: int, iterations: int, budget: ablate.Budget, keep: bool = False) -> dict[str, Any]:
    """bench/ablate.py's ``uimem`` arm; rows per (iteration, task) of what eqs. 2-3 gave."""
    from guigym.train.algorithms.uimem import UIMemGuidance
    from guigym.train.config import from_dict
    from guigym.train.data.store import DataStore
    from guigym.train.loop import Trainer

    tmp = tempfile.mkdtemp(prefix=f"band-uimem-{seed}-")
    run_dir = Path(tmp) / "run"
    cfg = ablate.config("uimem", seed, iterations, run_dir, budget)
    t0 = time.time()
    trainer = Trainer(from_dict(cfg), log=lambda m: None)
    trainer.run()
    cond = next(p for p in trainer.conditioner.plugins if isinstance(p, UIMemGuidance))
    opts = cfg["algorithm"]["plugin_options"]
    gamma = float(opts["uimem_evolve"]["ema_gamma"])
    replayed = replay_ema(run_dir, trainer.run_id, gamma)
    store = DataStore.for_run_dir(str(run_dir))
    try:
        trajs = store.get_trajectories(trainer.run_id, source="on_policy", with_steps=False)
    finally:
        store.close()
    rows = []
    for (it, task), rec in sorted(cond.trace.items()):
        mine = [t for t in trajs if t.task_id == task and int(t.info["iteration"]) == it]
        rows.append({"iteration": it, "task": task, "ema": rec["ema"], "ema_replayed": replayed.get((it, task)),
                     "lambda_strong": rec["lambdas"][0], "lambda_weak": rec["lambdas"][1],
                     "lambda_none": rec["lambdas"][2], "counts": list(rec["counts"]),
                     "realised": [sum(1 for t in mine if t.guidance_level == lvl) for lvl in (2, 1, 0)],
                     "successes": sum(bool(t.success) for t in mine), "rollouts": len(mine)})
    out = {"seed": seed, "iterations": iterations, "run_id": trainer.run_id, "rows": rows,
           "options": opts["uimem_guidance"], "ema_gamma": gamma, "wall_s": time.time() - t0}
    if keep:
        out["run_dir"] = str(run_dir)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def uimem_table(runs: Sequence[dict[str, Any]]) -> list[str]:
    """One line per (seed, iteration, task), then the relation of lambda_strong to the EMA."""
    lines = [f"{'seed':>4} {'it':>3} {'task':<13} {'EMA':>6} {'replayed':>8} {'l_strong':>8} {'l_weak':>7} "
             f"{'l_none':>7} {'strata s/w/n':>12} {'got s/w/n':>10} {'succ':>5}"]
    rows = [(r["seed"], row) for r in runs for row in r["rows"]]
    for seed, x in rows:
        rep = x["ema_replayed"]
        lines.append(f"{seed:>4} {x['iteration']:>3} {x['task']:<13} {x['ema']:>6.3f} "
                     f"{(f'{rep:.3f}' if rep is not None else '-'):>8} {x['lambda_strong']:>8.3f} "
                     f"{x['lambda_weak']:>7.3f} {x['lambda_none']:>7.3f} {'/'.join(map(str, x['counts'])):>12} "
                     f"{'/'.join(map(str, x['realised'])):>10} {x['successes']:>2}/{x['rollouts']:<2}")
    emas = [x["ema"] for _, x in rows]
    ls = [x["lambda_strong"] for _, x in rows]
    rho = spearman(emas, ls)
    inc = sum(1 for i in range(len(rows)) for j in range(len(rows)) if emas[i] < emas[j] and ls[i] < ls[j])
    match = sum(1 for _, x in rows if x["ema_replayed"] is not None and abs(x["ema"] - x["ema_replayed"]) < 1e-9)
    sign = "falls" if rho < 0 else "rises" if rho > 0 else "no relation"
    lines.append(f"lambda_strong vs EMA: Spearman {rho:.3f} over {len(rows)} rows (lambda_strong {sign} as EMA "
                 f"rises); pairs where both rise: {inc}; recorded EMA = DataStore replay in {match}/{len(rows)} rows")
    return lines


# ---- main -------------------------------------------------------------------------------------
def _write(path: Optional[str], data: dict[str, Any]) -> None:
    if not path:
        return
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)  # atomic: a killed run keeps every finished run


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=None, help="runs of each curriculum (default 3; 1 with --quick)")
    p.add_argument("--iterations", type=int, default=None,
                   help="training iterations before the probed phase boundary (default 4; 2 with --quick)")
    p.add_argument("--parts", nargs="*", default=["webrl", "uimem"], choices=["webrl", "uimem"])
    p.add_argument("--quick", action="store_true",
                   help=f"tasks {list(QUICK.tasks)}, {QUICK.groups_per_iteration} groups of "
                        f"{QUICK.num_generations}, K = {QUICK_K}: a smoke run, not evidence")
    p.add_argument("--keep", action="store_true", help="keep the run directories")
    p.add_argument("--json", default=None, help="results so far, rewritten atomically after every run")
    args = p.parse_args(argv)
    budget = QUICK if args.quick else ablate.FULL
    seeds = args.seeds if args.seeds is not None else (1 if args.quick else 3)
    iterations = args.iterations if args.iterations is not None else (2 if args.quick else 4)
    if iterations < 2:
        p.error("--iterations must be >= 2 (the critic and the curriculum need finished phases)")
    k = QUICK_K if args.quick else K
    import torch

    torch.set_num_threads(1)
    t0 = time.time()
    res: dict[str, Any] = {"started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                           "tasks": list(budget.tasks), "seeds": seeds, "iterations": iterations, "k": k,
                           "band": [LOW, HIGH], "critic": CRITIC, "curriculum": CURRICULUM,
                           "webrl": [], "uimem": []}
    for seed in range(seeds):
        if "webrl" in args.parts:
            res["webrl"].append(run_webrl(seed, iterations, budget, k, args.keep))
            _write(args.json, res)
        if "uimem" in args.parts:
            res["uimem"].append(run_uimem(seed, iterations, budget, args.keep))
            _write(args.json, res)
    res["wall_s"] = time.time() - t0
    res["load"] = os.getloadavg()[0]
    _write(args.json, res)
    print(f"{res['started']}  {seeds} seed(s) x {iterations} iterations, tasks {list(budget.tasks)}, "
          f"K = {k}, {res['wall_s'] / 60:.1f} min, load {res['load']:.1f}")
    if res["webrl"]:
        print(f"\nWebRL curriculum at the phase boundary after iteration {iterations - 1} (band [{LOW}, {HIGH}])")
        for line in band_table([c for r in res["webrl"] for c in r["candidates"]]):
            print(line)
        for r in res["webrl"]:
            print(f"seed {r['seed']}: phases {[(x['iteration'], x.get('failed'), x.get('candidates'), x.get('kept')) for x in r['phases']]}"
                  f" (iteration, failed parents, candidates, kept); critic value mean per iteration "
                  f"{[round(c.get('critic_value_mean', float('nan')), 3) for c in r['critic']]}")
    if res["uimem"]:
        print("\nUI-Mem dropout curriculum (eqs. 2-3) per iteration and task")
        for line in uimem_table(res["uimem"]):
            print(line)
    return res


if __name__ == "__main__":
    main()
