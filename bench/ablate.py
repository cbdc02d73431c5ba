#!/usr/bin/env python
"""Mechanism evidence for the paper plug-ins (issue 14 item 5): plain GRPO vs each mechanism alone.

Usage::

    python bench/ablate.py                                   # every mechanism, 3 seeds, 7 iterations
    python bench/ablate.py --mechanisms fcf dynamic_n --seeds 3 --iterations 7 --json /tmp/ablate.json
    python bench/ablate.py --quick --mechanisms spa adapr pool   # 2 seeds, 2 iterations, 2 tasks

Same tiny model (a fresh random Qwen2.5-VL, hidden 64, 2 layers, seeded by the run seed), the same
real MiniWoB++ tasks in Chromium, the same train seeds and rollout budget per iteration; each
configuration differs from ``grpo`` only by its mechanism's plug-ins. The policy acts by
constrained decoding over ``click(element=ID)`` candidates. The task mix is chosen so every
mechanism has something to act on, before any run:

* ``click-test``       one button: solved from the start (dynamic N should spend less on it);
* ``click-button``     one of ~4.5 buttons by label: one step, solvable by chance;
* ``click-option``     select the named radio option, then Submit: ~1/25 for a random click policy
                       (0 of 16 episodes measured), the MiniWoB oracle solves it in 2 clicks (the
                       expert for BEPA's plans and DART's pool). ``enter-text`` was used before:
                       it needs ``fill``, which the click-only action space cannot express, so no
                       policy here could ever solve it; ``click-checkboxes`` has 1-click instances
                       (nothing to tick) and a random policy solved 19% of them;
* ``login-user``       three steps (username, password, Log in) with a step budget of 2: impossible
                       by construction (FCF should stop sampling it).

Tasks are drawn by ``epoch_shuffle`` (each task once per epoch), so every configuration sees the
same task counts unless its mechanism changes them (FCF replaces the sampler).

SPA needs redundant paths: in the ``redundant`` setting (its own plain-GRPO baseline) every
visible a11y node is a click candidate (clicking text does nothing and the episode goes on) and
the budget is 3 steps, so click-button has successes of length 1, 2 and 3.

Quantities, all read from the run's DataStore (per run, then mean and a 95% t-interval over seeds):

* ``fcf``            rollouts on the impossible task in the last 2 iterations (falls to 0 once FCF
                     removed it: 2 failure epochs + 3 cooldown epochs, one iteration per epoch);
* ``dynamic_n``      rollouts per iteration on click-test over the last 2 iterations;
* ``dynamic_length`` steps spent per failed rollout on the one-step tasks (a budget cut to the
                     longest success, 1, stops wasted second steps);
* ``spa``            mean length of successful one-step-task rollouts (falls), their success rate
                     (should stay equal);
* ``adapr`` / ``pool`` / ``bepa``
                     share of on-policy groups that were trained on (a group with zero advantage
                     variance is dropped before the update, so its rollouts never reach
                     ``sample_usage``), and click-option success. AdaPR replays its own best
                     rollouts (SPA off: mechanism alone); the pool holds the oracle's successes
                     (``bench/ablate_expert.py``); BEPA conditions self-rolls on the oracle's plans;
* ``uimem``          (issue 15) the same two, with UI-Mem's stratified strong / weak / no guidance
                     from the memory its self-evolving loop fills; the share of strong-guidance
                     rollouts per iteration is printed (the dropout curriculum lowers it as a
                     task's EMA success passes theta_start);
* ``webrl_replay``   (issue 15) the group share, and the share of replayed steps that pass the
                     actor-confidence band (perplexity in [1/0.95, 1/0.5]) and are trained.

What each run did (rollouts, successes, injected members by source) is printed with a reason
when an effect does not show.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench/ablate_expert.py

ROOT = Path(__file__).resolve().parents[1]
EXPERT_TASK = "click-option"
IMPOSSIBLE = "login-user"
TASKS = ["click-test", "click-button", EXPERT_TASK, IMPOSSIBLE]
QUICK_TASKS = ["click-button", EXPERT_TASK]
ONE_STEP = ("click-test", "click-button")
#: t(0.975, df) for the 95% interval of a mean over n seeds (df = n - 1)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}

#: setting -> config overrides shared by a mechanism and its plain-GRPO baseline
SETTINGS: dict[str, dict[str, dict[str, Any]]] = {
    "base": {},
    "redundant": {"env": {"max_steps": 3}, "rollout": {"candidate_roles": "any"}},
}


@dataclass(frozen=True)
class Arm:
    """One mechanism: its algorithm overrides on top of plain GRPO, the setting it is measured in,
    the DataStore quantities it exists to change (key, label, expected direction) and whether its
    run needs the oracle's expert run in the DataStore first."""

    algorithm: dict[str, Any]
    quantities: tuple[tuple[str, str, str], ...]
    setting: str = "base"
    expert_run: bool = False
    diagnostics: tuple[str, ...] = field(default=())


_SHARE = ("nonzero_variance_share", "share of on-policy groups trained on (non-zero adv. variance)", "up")
_EXPERT_SUCCESS = ("expert_task_success", f"{EXPERT_TASK} on-policy success", "up")
ARMS: dict[str, Arm] = {
    "fcf": Arm({"task_sampler": "fcf",
                "plugin_options": {"fcf": {"fail_epochs": 2, "cooldown_epochs": 3, "epoch_iterations": 1}}},
               (("impossible_rollouts_last2", "rollouts/iter on the impossible task, last 2 iters", "down"),)),
    "dynamic_n": Arm({"rollout_planners": ["dart_dynamic_n"],
                      "plugin_options": {"dart_dynamic_n": {"n_max": 8, "n_min": 2, "threshold": 0.6, "window": 2}}},
                     (("click_test_rollouts_last2", "rollouts/iter on the solved task, last 2 iters", "down"),)),
    "dynamic_length": Arm({"rollout_planners": ["dart_dynamic_length"],
                           "plugin_options": {"dart_dynamic_length": {"margin": 0}}},
                          (("steps_per_failed_one_step_rollout", "steps per failed rollout of one-step tasks",
                            "down"),)),
    "spa": Arm({"reward_shaper": "spa", "plugin_options": {"spa": {"alpha": 1.0}}},
               (("mean_success_length_one_step", "mean successful length, one-step tasks (redundant paths)",
                 "down"),
                ("success_rate_one_step", "success rate, one-step tasks (should stay equal)", "same")),
               setting="redundant", diagnostics=("successes_longer_than_group_min",)),
    "adapr": Arm({"group_builder": ["default", "adapr"],
                  "plugin_options": {"adapr": {"buffer_size": 256, "kappa": 0.25, "gamma": 1.0, "spa_alpha": None,
                                               "neg_per_pos": 2.0, "max_replays": 1}}},
                 (_SHARE, _EXPERT_SUCCESS), diagnostics=("injected_replay",)),
    "pool": Arm({"trajectory_sources": ["dart_experience_pool"], "group_builder": ["default", "dart_pool_injection"],
                 "plugin_options": {"dart_experience_pool": {"run_id": "<set by run_one>"}}},
                (_SHARE, _EXPERT_SUCCESS), expert_run=True, diagnostics=("injected_pool", "expert_stored")),
    "bepa": Arm({"conditioners": ["bepa_plan"], "group_builder": ["default", "bepa_cache"],
                 "plugin_options": {"bepa_plan": {"expert": "miniwob_oracle", "members": 2, "until_cached": True,
                                                  "expert_options": {"max_steps": 6}},
                                    "bepa_cache": {"seed_run_id": ""}}},
                (_SHARE, _EXPERT_SUCCESS), diagnostics=("injected_cache", "guided_successes")),
    # issue 15: UI-Mem stratified guidance (memory filled by its own self-evolving loop; the
    # guidance-aware reward is a separate mechanism and stays off) and WebRL's replay + band filter
    "uimem": Arm({"conditioners": ["uimem_guidance"], "group_builder": ["default", "uimem_evolve"],
                  "plugin_options": {"uimem_guidance": {"lambda_strong_max": 0.5, "lambda_strong_min": 0.0,
                                                        "lambda_none_min": 0.25, "lambda_none_max": 1.0,
                                                        "theta_start": 0.2, "theta_end": 0.8, "instances": "none"},
                                     "uimem_evolve": {"extractor": "rule", "ema_gamma": 0.9, "instances": "none"}}},
                 (_SHARE, _EXPERT_SUCCESS), diagnostics=("guided_by_level", "strong_share_by_iteration")),
    "webrl_replay": Arm({"group_builder": ["default", "webrl_replay"], "step_filter": ["perplexity_band"],
                         "plugin_options": {"webrl_replay": {"phase_iterations": 1, "max_ratio": 1.0,
                                                             "max_replays": 1},
                                            "perplexity_band": {"low": 0.5, "high": 0.95, "sources": ["replay"]}}},
                        (_SHARE, ("replay_steps_kept_share", "share of replayed steps inside the perplexity band "
                                                             "(trained)", "info")),
                        diagnostics=("injected_replay", "replay_steps")),
}
#: mechanism -> algorithm overrides on top of plain GRPO (the name the first harness exported)
MECHANISMS: dict[str, dict[str, Any]] = {"grpo": {}, **{k: a.algorithm for k, a in ARMS.items()}}


@dataclass(frozen=True)
class Budget:
    """Tasks and rollouts per iteration of one harness mode (identical for every configuration)."""

    tasks: tuple[str, ...]
    groups_per_iteration: int
    num_generations: int = 8
    expert_episodes: int = 12  # oracle episodes per task for the pool


FULL = Budget(tuple(TASKS), groups_per_iteration=4)
QUICK = Budget(tuple(QUICK_TASKS), groups_per_iteration=2, expert_episodes=6)


def config(mechanism: str, seed: int, iterations: int, run_dir: Path, budget: Budget = FULL,
           setting: Optional[str] = None) -> dict[str, Any]:
    """The trainer config of ``mechanism`` ("grpo" or a key of :data:`ARMS`) in ``setting``
    (default: the mechanism's own; plain GRPO in "base")."""
    if mechanism != "grpo" and mechanism not in ARMS:
        raise ValueError(f"unknown mechanism {mechanism!r}; choose grpo or one of {sorted(ARMS)}")
    setting = setting or (ARMS[mechanism].setting if mechanism in ARMS else "base")
    cfg = yaml.safe_load((ROOT / "recipes" / "grpo_miniwob_tiny.yaml").read_text())
    cfg["run"].update(name=f"ablate-{mechanism}-{setting}-{seed}", dir=str(run_dir), seed=seed,
                      iterations=iterations, checkpoint_every=iterations, keep_checkpoints=1)
    cfg["model"]["tiny"]["seed"] = seed
    cfg["env"].update(tasks=list(budget.tasks), max_steps=2, num_envs=2,
                      train_seeds={"start": 10_000 * seed, "count": 10_000})
    cfg["rollout"].update(num_generations=budget.num_generations, groups_per_iteration=budget.groups_per_iteration,
                          max_new_tokens=24)
    cfg["algorithm"].update(num_iterations=1, task_sampler="epoch_shuffle")
    if mechanism in ARMS:
        cfg["algorithm"].update(copy.deepcopy(ARMS[mechanism].algorithm))
    for section, values in SETTINGS[setting].items():
        cfg[section].update(copy.deepcopy(values))
    cfg["eval"]["enabled"] = False
    return cfg


def run_one(mechanism: str, seed: int, iterations: int, keep: bool, budget: Budget = FULL,
            setting: Optional[str] = None) -> dict[str, Any]:
    """Train one configuration in a fresh directory and measure it from its DataStore."""
    from guigym.train.config import from_dict
    from guigym.train.loop import Trainer

    setting = setting or (ARMS[mechanism].setting if mechanism in ARMS else "base")
    tmp = tempfile.mkdtemp(prefix=f"ablate-{mechanism}-{seed}-")
    run_dir = Path(tmp) / "run"
    cfg = config(mechanism, seed, iterations, run_dir, budget, setting)
    t0 = time.time()
    expert: dict[str, Any] = {}
    if mechanism in ARMS and ARMS[mechanism].expert_run:
        expert = _expert_run(cfg, run_dir, seed, budget)
        cfg["algorithm"]["plugin_options"]["dart_experience_pool"]["run_id"] = expert["run_id"]
    trainer = Trainer(from_dict(cfg), log=lambda m: None)
    trainer.run()
    out: dict[str, Any] = {"mechanism": mechanism, "setting": setting, "seed": seed, "iterations": iterations,
                           "wall_s": time.time() - t0, "run_id": trainer.run_id}
    out.update(measure(run_dir, trainer.run_id, list(budget.tasks), iterations))
    if expert:
        out["expert_stored"] = sum(c["stored"] for c in expert["counts"].values())
        out["expert_counts"] = expert["counts"]
    if keep:
        out["run_dir"] = str(run_dir)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _expert_run(cfg: dict[str, Any], run_dir: Path, seed: int, budget: Budget) -> dict[str, Any]:
    """Build the run's initial model where the trainer will find it, then store the oracle's
    successes (in that model's token space) as an earlier run of the same DataStore."""
    from ablate_expert import record_oracle_run

    from guigym.models import tiny

    model_dir = run_dir / "init_model"
    t = cfg["model"]["tiny"]
    tiny.build(model_dir, seed=t["seed"], hidden=t["hidden"], layers=t["layers"])
    tasks = [task for task in budget.tasks if task != IMPOSSIBLE]
    run_id, counts = record_oracle_run(run_dir, model_dir, tasks, budget.expert_episodes, cfg["env"]["max_steps"],
                                       seed, roles=cfg["rollout"].get("candidate_roles"))
    if not any(c["stored"] for c in counts.values()):
        raise RuntimeError(f"ablate pool: the oracle stored no usable success ({counts}); the pool would be empty")
    return {"run_id": run_id, "counts": counts}


def measure(run_dir: Path, run_id: str, tasks: Sequence[str], iterations: int) -> dict[str, Any]:
    """Every quantity of the table, from run ``run_id``'s rows in ``run_dir``'s DataStore.

    Groups are the on-policy, unguided rollouts sharing (iteration, group_id); a group counts as
    trained when any of its rollouts is in ``sample_usage`` (the loop drops zero-advantage groups
    before the update and marks every trained step)."""
    from guigym.train.data.store import DataStore

    store = DataStore.for_run_dir(str(run_dir))
    try:
        trajs = store.get_trajectories(run_id, with_steps=False)
        unused = {t.traj_id for t in store.get_trajectories(run_id, unused_only=True, with_steps=False)}
    finally:
        store.close()
    lengths = _lengths(run_dir, run_id)
    used_steps = _used_steps(run_dir, run_id)
    it_of = lambda t: int(t.info.get("iteration", -1))  # noqa: E731
    on_policy = [t for t in trajs if t.source == "on_policy" and t.guidance_level == 0]
    nan = float("nan")
    out: dict[str, Any] = {}
    last = {iterations - 2, iterations - 1}
    out["impossible_rollouts_last2"] = (sum(1 for t in on_policy if t.task_id == IMPOSSIBLE and it_of(t) in last)
                                        / len(last) if IMPOSSIBLE in tasks else nan)
    out["click_test_rollouts_last2"] = (sum(1 for t in on_policy if t.task_id == "click-test" and it_of(t) in last)
                                        / len(last) if "click-test" in tasks else nan)
    one_step = [t for t in on_policy if t.task_id in ONE_STEP]
    fails = [t for t in one_step if not t.success]
    out["steps_per_failed_one_step_rollout"] = _mean([lengths[t.traj_id] for t in fails])
    wins = [t for t in one_step if t.success]
    out["mean_success_length_one_step"] = _mean([lengths[t.traj_id] for t in wins])
    out["success_rate_one_step"] = len(wins) / len(one_step) if one_step else nan
    # a group is every on-policy member (guided ones too: UI-Mem trains them, BEPA drops them)
    groups: dict[tuple[int, str], list[Any]] = {}
    for t in trajs:
        if t.source == "on_policy":
            groups.setdefault((it_of(t), t.group_id), []).append(t)
    trained = [any(t.traj_id not in unused for t in g) for g in groups.values()]
    out["groups"] = len(groups)
    out["nonzero_variance_share"] = sum(trained) / len(trained) if trained else nan
    # SPA acts only inside groups whose successes differ in length
    out["successes_longer_than_group_min"] = sum(
        sum(1 for t in g if t.success and lengths[t.traj_id] > min(lengths[w.traj_id] for w in g if w.success))
        for g in groups.values() if any(t.success for t in g))
    et = [t for t in on_policy if t.task_id == EXPERT_TASK]
    out["expert_task_success"] = sum(t.success for t in et) / len(et) if et else nan
    for src in ("replay", "pool", "cache"):
        out[f"injected_{src}"] = sum(1 for t in trajs if t.source == src)
    guided = [t for t in trajs if t.source == "on_policy" and t.guidance_level > 0]
    out["guided_by_level"] = {lvl: sum(1 for t in guided if t.guidance_level == lvl) for lvl in (1, 2)}
    out["strong_share_by_iteration"] = [
        round(sum(1 for t in guided if t.guidance_level == 2 and it_of(t) == i)
              / max(1, sum(1 for t in trajs if t.source == "on_policy" and it_of(t) == i)), 3)
        for i in range(iterations)]
    replayed = [t for t in trajs if t.source == "replay"]
    out["replay_steps"] = sum(lengths[t.traj_id] for t in replayed)
    out["replay_steps_kept_share"] = (sum(used_steps.get(t.traj_id, 0) for t in replayed) / out["replay_steps"]
                                      if out["replay_steps"] else nan)
    out["guided_successes"] = sum(1 for t in trajs if t.source == "on_policy" and t.guidance_level > 0 and t.success)
    out["rollouts_by_task"] = {task: sum(1 for t in on_policy if t.task_id == task) for task in tasks}
    out["successes_by_task"] = {task: sum(1 for t in on_policy if t.task_id == task and t.success) for task in tasks}
    return out


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _lengths(run_dir: Path, run_id: str) -> dict[str, int]:
    """traj_id -> stored length (steps are not loaded by the listing above)."""
    import sqlite3

    with sqlite3.connect(run_dir / "guigym.db") as db:
        return {str(t): int(n) for t, n in
                db.execute("select traj_id, length from trajectories where run_id = ?", (run_id,))}


def _used_steps(run_dir: Path, run_id: str) -> dict[str, int]:
    """traj_id -> number of its steps in ``sample_usage`` (stepwise samples mark each trained step)."""
    import sqlite3

    with sqlite3.connect(run_dir / "guigym.db") as db:
        return {str(t): int(n) for t, n in db.execute(
            "select traj_id, count(distinct step_idx) from sample_usage where run_id = ? group by traj_id", (run_id,))}


def ci(values: list[float]) -> tuple[float, float]:
    """(mean, half-width of the 95% t-interval) over the non-NaN values."""
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return float("nan"), float("nan")
    m = statistics.mean(vals)
    if len(vals) < 2:
        return m, float("nan")
    return m, T975.get(len(vals) - 1, 1.96) * statistics.stdev(vals) / math.sqrt(len(vals))


def verdict(direction: str, base: tuple[float, float], got: tuple[float, float]) -> str:
    """Whether the two 95% intervals separate in the expected direction."""
    if direction == "info":
        return "reported (no expected direction)"
    if any(math.isnan(x) for x in (base[0], got[0])):
        return "not measured (no such rollouts in this run)"
    if math.isnan(base[1]) or math.isnan(got[1]):
        return "one seed: no interval"
    apart = abs(got[0] - base[0]) > base[1] + got[1]
    if base[1] == 0 and got[1] == 0 and apart and direction != "same":
        # no spread on either side: every seed gave the same two values
        moved = "down" if got[0] < base[0] else "up"
        return ("effect shows in every seed" if moved == direction
                else f"moved {moved} in every seed, against the expectation")
    if direction == "same":
        return "differs" if apart else "equal within the intervals"
    if not apart:
        return "no separation at this budget"
    moved = "down" if got[0] < base[0] else "up"
    return "effect shows" if moved == direction else f"moved {moved}, against the expectation"


WHY = {
    "fcf": "FCF removes a task only after 2 all-zero epochs and a 3-epoch cooldown: fewer than 5 iterations "
           "cannot show it",
    "dynamic_n": "N drops only once click-test's running success passes 0.6 in a finished iteration",
    "dynamic_length": "the budget is cut only after a task's first success, and only where the budget exceeds it",
    "spa": "SPA changes rewards only in groups whose successes differ in length (count above); the policy "
           "must then learn from that difference, which takes more than a few updates of a random model",
    "adapr": "a replay needs an earlier positive-advantage rollout of the same task; on a task at ~0% there is "
             "none to replay, so AdaPR cannot lift what plain GRPO never solves",
    "pool": "a pool member joins only groups whose every rollout failed, and only for tasks with a stored "
            "oracle success within the step budget",
    "uimem": "guidance needs memory entries, which exist only after the first absorbed iteration, and a "
             "random tiny model does not read the guidance text, so guided members succeed at chance rate",
    "webrl_replay": "a replay needs an earlier success of the same task, and the band filter then drops "
                    "replayed steps the actor is not 50-95% sure of (a random model is rarely that sure)",
    "bepa": "the cache fills only after a plan-conditioned self-roll succeeds; a random tiny model ignores "
            "the plan text, so that happens at chance rate",
}


def report(rows: list[dict[str, Any]], mechanisms: Sequence[str]) -> list[str]:
    """The table (one line per mechanism quantity) and, per mechanism, what happened and why."""
    lines = [f"{'mechanism':<15} {'quantity':<64} {'grpo (95% CI)':>18} {'mechanism (95% CI)':>20} {'seeds':>5}  verdict"]
    notes = []
    for mech in mechanisms:
        arm = ARMS[mech]
        mine = [r for r in rows if r["mechanism"] == mech]
        base_rows = [r for r in rows if r["mechanism"] == "grpo" and r["setting"] == arm.setting]
        verdicts = []
        for key, label, direction in arm.quantities:
            base = ci([float(r[key]) for r in base_rows])
            got = ci([float(r[key]) for r in mine])
            v = verdict(direction, base, got)
            verdicts.append(v)
            seeds = f"{len(base_rows)}/{len(mine)}"  # runs behind each side
            lines.append(f"{mech:<15} {label:<64} {base[0]:>8.3f} ± {base[1]:<7.3f} {got[0]:>10.3f} ± {got[1]:<7.3f}"
                         f" {seeds:>5}  {v}")
        diag = ", ".join(f"{d} per run {[r.get(d) for r in mine]}" for d in arm.diagnostics)
        groups = (f"groups per run {[r['groups'] for r in mine]}; "
                  f"successes by task {[r['successes_by_task'] for r in mine]}")
        note = f"{mech} [{arm.setting}]: {groups}" + (f"; {diag}" if diag else "")
        if verdicts and not verdicts[0].startswith("effect shows"):
            note += f". Why no clear effect: {WHY[mech]}"
        notes.append(note)
    return lines + [""] + notes


def main(argv: Optional[Sequence[str]] = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--mechanisms", nargs="*", default=list(ARMS), choices=list(ARMS))
    p.add_argument("--seeds", type=int, default=None, help="default 3 (2 with --quick)")
    p.add_argument("--iterations", type=int, default=None, help="default 7 (2 with --quick)")
    p.add_argument("--quick", action="store_true",
                   help=f"2 seeds, 2 iterations, tasks {QUICK_TASKS}, {QUICK.groups_per_iteration} groups of "
                        f"{QUICK.num_generations} per iteration: a smoke run of the harness, not evidence (the fcf "
                        f"and dynamic_n quantities need click-test / login-user: NaN here)")
    p.add_argument("--keep", action="store_true", help="keep the run directories")
    p.add_argument("--json", default=None, help="rows so far, rewritten after every run")
    p.add_argument("--resume", action="store_true",
                   help="keep the rows already in --json and run only the (configuration, seed) pairs missing")
    p.add_argument("--report", action="store_true",
                   help="print the table from the rows in --json and run nothing (e.g. of a run cut short)")
    args = p.parse_args(argv)
    if (args.resume or args.report) and not args.json:
        p.error("--resume and --report need --json (the file the earlier rows were written to)")
    budget = QUICK if args.quick else FULL
    seeds = args.seeds if args.seeds is not None else (2 if args.quick else 3)
    iterations = args.iterations if args.iterations is not None else (2 if args.quick else 7)
    import torch

    torch.set_num_threads(1)
    settings = list(dict.fromkeys(ARMS[m].setting for m in args.mechanisms))
    plan = [("grpo", s) for s in settings] + [(m, ARMS[m].setting) for m in args.mechanisms]
    rows: list[dict[str, Any]] = []
    if args.resume and Path(args.json).exists():
        rows = [r for r in json.loads(Path(args.json).read_text()) if r.get("iterations") == iterations]
    if args.report:
        rows = json.loads(Path(args.json).read_text())
        iterations = rows[0]["iterations"] if rows else iterations
        plan = []  # nothing to run
    done = {(r["mechanism"], r["setting"], r["seed"]) for r in rows}
    # seeds outermost: a run cut short still has every configuration on its first seeds
    for seed in range(seeds):
        for mech, setting in plan:
            if (mech, setting, seed) in done:
                continue
            r = run_one(mech, seed, iterations, args.keep, budget, setting)
            rows.append(r)
            print(json.dumps(r), flush=True)
            if args.json:  # atomic: a killed run keeps every finished row
                tmp = Path(args.json).with_suffix(".tmp")
                tmp.write_text(json.dumps(rows, indent=1))
                os.replace(tmp, args.json)
    print()
    for line in report(rows, args.mechanisms):
        print(line)
    if iterations < 3:
        print(f"note: with {iterations} iterations a mechanism that only changes what is trained (replay, pool, "
              "cache, reward shaping) can change rollouts of the last iteration alone, through the first "
              "update; rollout quantities mostly equal plain GRPO's by construction")
    print(f"{len({r['seed'] for r in rows})} seeds x {iterations} iterations x {budget.groups_per_iteration} groups x "
          f"{budget.num_generations} rollouts per run, tasks {list(budget.tasks)}; load {os.getloadavg()[0]:.1f}")
    return rows


if __name__ == "__main__":
    main()
