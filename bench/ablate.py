#!/usr/bin/env python
"""Mechanism evidence for the paper plug-ins (issue 14 item 5): plain GRPO vs each mechanism alone.

Usage::

    python bench/ablate.py                                   # every mechanism, 3 seeds, 7 iterations
    python bench/ablate.py --mechanisms fcf dynamic_n --seeds 3 --iterations 7 --json /tmp/ablate.json

Same tiny model (a fresh random Qwen2.5-VL, hidden 64, 2 layers, seeded by the run seed), the same
real MiniWoB++ tasks in Chromium, the same train seeds and rollout budget per iteration; each
configuration differs from ``grpo`` only by its mechanism's plug-ins. The task mix is chosen so
every mechanism has something to act on, before any run:

* ``click-test``   one button: solved from the start (dynamic N should spend less on it);
* ``click-button`` one of ~4.5 buttons by label: one step, solvable by chance;
* ``enter-text``   type a word, then Submit: two steps, ~0 for a random policy, the MiniWoB
                   oracle solves it (BEPA's expert);
* ``login-user``   three steps (username, password, Log in) with a step budget of 2: impossible
                   by construction (FCF should stop sampling it).

Quantities (per run, then mean and a 95% t-interval over seeds):

* ``fcf``            rollouts on the impossible task in the last 2 iterations (falls to 0 once FCF
                     removed it: 2 failure epochs + 3 cooldown epochs, one iteration per epoch);
* ``dynamic_n``      rollouts per iteration on click-test over the last 2 iterations;
* ``dynamic_length`` steps spent per failed rollout on the one-step tasks (a budget cut to the
                     longest success, 1, stops wasted second steps);
* ``bepa``           share of groups with non-zero advantage variance, and enter-text success
                     (plan-conditioned self-rolls from the oracle's plans, cache on total failure).

SPA, AdaPR and DART's experience pool are not in this harness yet (SPA needs tasks with
redundant paths that a random policy solves; the pool needs an earlier policy run's successes).
What each run did is printed even when an effect does not show.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

ROOT = Path(__file__).resolve().parents[1]
TASKS = ["click-test", "click-button", "enter-text", "login-user"]
IMPOSSIBLE = "login-user"
ONE_STEP = ("click-test", "click-button")
#: t(0.975, df) for the 95% interval of a mean over n seeds (df = n - 1)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}

#: mechanism -> algorithm overrides on top of plain GRPO
MECHANISMS: dict[str, dict[str, Any]] = {
    "grpo": {},
    "fcf": {"task_sampler": "fcf",
            "plugin_options": {"fcf": {"fail_epochs": 2, "cooldown_epochs": 3, "epoch_iterations": 1}}},
    "dynamic_n": {"rollout_planners": ["dart_dynamic_n"],
                  "plugin_options": {"dart_dynamic_n": {"n_max": 8, "n_min": 2, "threshold": 0.6, "window": 2}}},
    "dynamic_length": {"rollout_planners": ["dart_dynamic_length"],
                       "plugin_options": {"dart_dynamic_length": {"margin": 0}}},
    "bepa": {"conditioners": ["bepa_plan"], "group_builder": ["default", "bepa_cache"],
             "plugin_options": {"bepa_plan": {"expert": "miniwob_oracle", "members": 2, "until_cached": True,
                                              "expert_options": {"max_steps": 6}},
                                "bepa_cache": {"seed_run_id": ""}}},
}


def config(mechanism: str, seed: int, iterations: int, run_dir: Path) -> dict[str, Any]:
    cfg = yaml.safe_load((ROOT / "recipes" / "grpo_miniwob_tiny.yaml").read_text())
    cfg["run"].update(name=f"ablate-{mechanism}-{seed}", dir=str(run_dir), seed=seed, iterations=iterations,
                      checkpoint_every=iterations, keep_checkpoints=1)
    cfg["model"]["tiny"]["seed"] = seed
    cfg["env"].update(tasks=list(TASKS), max_steps=2, num_envs=2, train_seeds={"start": 10_000 * seed, "count": 10_000})
    cfg["rollout"].update(num_generations=8, groups_per_iteration=4, max_new_tokens=24)
    cfg["algorithm"].update(num_iterations=1, **copy.deepcopy(MECHANISMS[mechanism]))
    cfg["eval"]["enabled"] = False
    return cfg


def run_one(mechanism: str, seed: int, iterations: int, keep: bool) -> dict[str, Any]:
    from guigym.train.config import from_dict
    from guigym.train.data.store import DataStore
    from guigym.train.loop import Trainer
    from guigym.train.metrics_log import read_metrics

    tmp = tempfile.mkdtemp(prefix=f"ablate-{mechanism}-{seed}-")
    run_dir = Path(tmp) / "run"
    t0 = time.time()
    Trainer(from_dict(config(mechanism, seed, iterations, run_dir)), log=lambda m: None).run()
    wall = time.time() - t0
    metrics = read_metrics(run_dir / "metrics.jsonl")
    store = DataStore.for_run_dir(str(run_dir))
    try:
        trajs = list(store.get_trajectories(_only_run(run_dir), with_steps=False))
    finally:
        store.close()
    out = {"mechanism": mechanism, "seed": seed, "wall_s": wall, "iterations": iterations}
    last = {iterations - 2, iterations - 1}
    on_policy = [t for t in trajs if t.source == "on_policy" and t.guidance_level == 0]
    it_of = lambda t: int(t.info.get("iteration", -1))  # noqa: E731
    out["impossible_rollouts_last2"] = sum(1 for t in on_policy if t.task_id == IMPOSSIBLE and it_of(t) in last) / 2
    out["click_test_rollouts_last2"] = sum(1 for t in on_policy if t.task_id == "click-test" and it_of(t) in last) / 2
    lengths = _lengths(run_dir)  # stored per trajectory (its steps are not loaded here)
    fails = [t for t in on_policy if t.task_id in ONE_STEP and not t.success]
    out["steps_per_failed_one_step_rollout"] = (sum(lengths[t.traj_id] for t in fails) / len(fails)
                                                if fails else float("nan"))
    built = sum(m.get("rollout/groups_trained", 0) + m.get("rollout/groups_zero_advantage", 0) for m in metrics)
    out["nonzero_variance_share"] = sum(m.get("rollout/groups_trained", 0) for m in metrics) / built if built else float("nan")
    et = [t for t in on_policy if t.task_id == "enter-text"]
    out["enter_text_success"] = sum(t.success for t in et) / len(et) if et else float("nan")
    out["rollouts_by_task"] = {task: sum(1 for t in on_policy if t.task_id == task) for task in TASKS}
    if not keep:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    else:
        out["run_dir"] = str(run_dir)
    return out


def _lengths(run_dir: Path) -> dict[str, int]:
    import sqlite3

    with sqlite3.connect(run_dir / "guigym.db") as db:
        return {str(t): int(n) for t, n in db.execute("select traj_id, length from trajectories")}


def _only_run(run_dir: Path) -> str:
    import sqlite3

    with sqlite3.connect(run_dir / "guigym.db") as db:
        (run_id,) = db.execute("select distinct run_id from trajectories").fetchone()
    return str(run_id)


QUANTITY: dict[str, tuple[str, str]] = {
    "fcf": ("impossible_rollouts_last2", "rollouts/iter on the impossible task, last 2 iters"),
    "dynamic_n": ("click_test_rollouts_last2", "rollouts/iter on the solved task, last 2 iters"),
    "dynamic_length": ("steps_per_failed_one_step_rollout", "steps per failed rollout of one-step tasks"),
    "bepa": ("nonzero_variance_share", "share of groups with non-zero advantage variance"),
}


def ci(values: list[float]) -> tuple[float, float]:
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return float("nan"), float("nan")
    m = statistics.mean(vals)
    if len(vals) < 2:
        return m, float("nan")
    return m, T975.get(len(vals) - 1, 1.96) * statistics.stdev(vals) / math.sqrt(len(vals))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mechanisms", nargs="*", default=[m for m in MECHANISMS if m != "grpo"], choices=list(MECHANISMS))
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--iterations", type=int, default=7)
    p.add_argument("--keep", action="store_true", help="keep the run directories")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)
    rows: list[dict[str, Any]] = []
    for mech in ["grpo", *args.mechanisms]:
        for seed in range(args.seeds):
            r = run_one(mech, seed, args.iterations, args.keep)
            rows.append(r)
            print(json.dumps(r), flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"\n{'mechanism':<15} {'quantity':<52} {'grpo (95% CI)':>18} {'mechanism (95% CI)':>20}")
    for mech in args.mechanisms:
        key, label = QUANTITY[mech]
        base = ci([r[key] for r in rows if r["mechanism"] == "grpo"])
        got = ci([r[key] for r in rows if r["mechanism"] == mech])
        print(f"{mech:<15} {label:<52} {base[0]:>8.3f} ± {base[1]:<7.3f} {got[0]:>10.3f} ± {got[1]:<7.3f}")
    bepa = [r for r in rows if r["mechanism"] == "bepa"]
    if bepa:
        print(f"enter-text success: grpo {ci([r['enter_text_success'] for r in rows if r['mechanism'] == 'grpo'])[0]:.3f}, "
              f"bepa {ci([r['enter_text_success'] for r in bepa])[0]:.3f}")
    print(f"{args.seeds} seeds x {args.iterations} iterations x 4 groups x 8 rollouts per run; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
