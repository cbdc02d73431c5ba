#!/usr/bin/env python
"""Rollout scheduling: lockstep ``sync`` vs rollout-wise (DART sec. 3.4), same policy, tasks, envs.

Usage::

    python bench/rollout_util.py                    # 4 envs, 12 groups x G=4, settle 2000 ms (~10 min)
    python bench/rollout_util.py --settle-ms 0      # the CPU-bound regime: envs and policy share 2 cores
    python bench/rollout_util.py --json /tmp/rollout_util.json

What runs
---------
* Policy: a freshly built tiny Qwen2.5-VL (``guigym.models.tiny.build``, random weights) in
  an in-process :class:`HFEngine` (batched, ``--max-batch``, ``--max-wait-ms``, ``--torch-threads``),
  sampling with constrained decoding to the click actions on the visible a11y nodes of the current
  observation (``PromptBuilder(constrained=True)``, stepwise prompts, text only).
* Envs: one :class:`EnvPool` of ``--num-envs`` MiniWoB-v0 workers (real Chromium), shared by both
  modes and warmed up (one reset each) before timing.
* Tasks: ``--tasks`` (default: 11 MiniWoB tasks, see ``DEFAULT_TASKS``) with one step budget
  ``--max-steps`` (15, OSWorld's default). Episode lengths are uneven by nature of the tasks: a
  click on any button ends click-test or click-button, forms end only on their submit button, so
  lengths run from 1 to the budget with a long tail (the histogram is printed). ``--groups``
  groups (tasks cycled, then shuffled) of ``--group-size`` rollouts, with the same episode and
  sampling seeds in both modes -- both modes play the very same trajectories.
* Env latency: ``--settle-ms`` is MiniWoB-v0's wait after each action before observing. The
  default, 2000 ms, is the pause OSWorld's ``DesktopEnv.step`` takes after every action: the
  regime DART's numbers come from, where env steps are wall-clock latency on an env cluster, not
  CPU work on the trainer's machine. With ``--settle-ms 0`` four Chromiums and the policy share
  this machine's 2 cores, every step is CPU work, and any schedule can only reorder the same
  work: the ratio there shows what a CPU-bound single box gains (docs/benchmarks.md has both).
* Modes, in one process: ``sync`` (all envs of a batch reset, ask and step together, the policy
  gets the batch's prompts as one closed batch; the next batch starts when every episode of the
  batch ended) and ``rollout`` (each env asks for its next action as soon as its observation is
  ready; a free env starts the next pending rollout at once; the engine takes whatever requests
  are queued when it is free, waiting at most ``--max-wait-ms`` for more, at most ``--max-batch``
  = number of envs). The groups are split into ``--rounds`` rounds; each round runs
  both modes on its groups, in ABBA order across rounds (sync, rollout | rollout, sync | ...) so
  that a change of load on the shared machine does not land on one mode only. Totals are summed
  over rounds.

Reported per mode (from :class:`RolloutScheduler` stats; wall time of one ``collect``):
actions/min (env steps per minute), ``U_env`` (DART's environment utilisation: share of env-time
an env is occupied by a rollout, i.e. not idle waiting for other rollouts or for work),
``U_exec`` (stricter: share of env-time inside reset/step calls), policy utilisation (share of
wall time the engine spends in batched generation), mean policy batch. Then the ratios
rollout/sync and the targets (rollout-wise >= 1.9x the actions/min of sync, U_env >= 80%),
PASS/FAIL; nothing is adjusted. The machine (date, nproc, CPU, load before/after) is printed: on
a shared 2-core machine the numbers are noisy.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: a mix whose episode lengths under a random clicking policy run from 1 step (one button ends
#: the task) to the whole budget (forms that end only on their submit button): measured with
#: uniformly random clicks on the a11y candidates, 6 episodes each, budget 15 -- click-test 1,
#: click-button 1-2, click-menu 1, enter-text 1-3, login-user 1-6, click-option 1-8,
#: click-checkboxes 2-12, search-engine 3-12, click-checkboxes-large 1-15, click-collapsible-2 15,
#: book-flight 15
DEFAULT_TASKS = ["click-test", "click-button", "click-menu", "enter-text", "login-user", "click-option",
                 "click-checkboxes", "search-engine", "click-checkboxes-large", "click-collapsible-2", "book-flight"]


from _machine import machine  # noqa: E402 - bench/ is on sys.path when run as a script


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-envs", type=int, default=4)
    ap.add_argument("--tasks", nargs="+", default=DEFAULT_TASKS)
    ap.add_argument("--groups", type=int, default=12, help="groups per mode (tasks cycled)")
    ap.add_argument("--group-size", type=int, default=4, help="G, rollouts per group")
    ap.add_argument("--max-steps", type=int, default=15,
                    help="step budget of every episode (OSWorld's run scripts default to 15)")
    ap.add_argument("--settle-ms", type=int, default=2000,
                    help="env-side wait after each action (MiniWoB-v0 settle_ms); 2000 = OSWorld's step pause, "
                         "0 = CPU-bound local envs")
    ap.add_argument("--isolation", choices=("clean", "context", "page"), default="context", help="MiniWoB-v0 isolation")
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="torch intra-op threads of the in-process policy (it shares the cores with Chromium)")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--max-batch", type=int, default=None, help="engine batch cap (default: --num-envs)")
    ap.add_argument("--max-wait-ms", type=float, default=5.0,
                    help="how long a rollout-wise batch waits to fill; requests that queue while a batch "
                         "runs join the next one (sync sends closed batches)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=2, help="rounds (each runs both modes on a share of the groups)")
    ap.add_argument("--model", default=None, help="from_pretrained dir (default: build a fresh tiny model)")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)

    import numpy as np

    from guigym.envs.pool import EnvPool
    from guigym.train.rollout.policy_service import HFEngine
    from guigym.train.rollout.prompts import PromptBuilder
    from guigym.train.rollout.scheduler import RolloutScheduler

    before = machine()
    rng = np.random.default_rng(args.seed)
    budgets = {t: args.max_steps for t in args.tasks}
    # groups in random order (the same in both modes): a lockstep batch is then a random draw from
    # the task mix, as a training batch is, not a run of neighbours from the list above
    tasks = [args.tasks[k % len(args.tasks)] for k in range(args.groups)]
    rng.shuffle(tasks)
    seeds = [int(s) for s in rng.integers(0, 2**31 - 1, size=len(tasks))]
    import torch

    torch.set_num_threads(args.torch_threads)
    env_kwargs = {"tasks": list(args.tasks), "settle_ms": args.settle_ms, "isolation": args.isolation}
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is None:
            from guigym.models.tiny import build

            model = str(build(Path(tmp) / "tiny", seed=args.seed))
        engine = HFEngine(model, max_batch=args.max_batch or args.num_envs, max_wait_ms=args.max_wait_ms)
        builder = PromptBuilder(engine.policy, constrained=True, mode="stepwise", history_images=0)
        results = {}
        with EnvPool("MiniWoB-v0", args.num_envs, env_kwargs) as pool:
            for i in range(args.num_envs):  # warm up: launch every Chromium before timing
                pool.reset_async(i, seed=0, options={"task": args.tasks[0]})
            while pool.busy:
                pool.wait()
            sums = ("wall_s", "env_occupied_s", "env_exec_s", "env_idle_pending_s", "actions", "resets",
                    "trajectories", "lost", "retries", "policy_requests", "policy_busy_s")
            batches: dict[str, list[int]] = {"sync": [], "rollout": []}
            lengths: dict[str, list[int]] = {"sync": [], "rollout": []}
            for r in range(args.rounds):
                share = slice(r * len(tasks) // args.rounds, (r + 1) * len(tasks) // args.rounds)
                for mode in (("sync", "rollout") if r % 2 == 0 else ("rollout", "sync")):
                    sched = RolloutScheduler(pool, engine, builder, mode=mode, group_size=args.group_size,
                                             max_steps=budgets, max_new_tokens=args.max_new_tokens, seed=args.seed)
                    engine.batch_sizes.clear()
                    groups = sched.collect(tasks[share], seeds[share])
                    st = sched.last_stats.to_dict()
                    tot = results.setdefault(mode, {k: 0 for k in sums})
                    for k in sums:
                        tot[k] += st[k]
                    batches[mode] += engine.batch_sizes
                    lengths[mode] += [t.length for g in groups for t in g.trajectories]
            n = args.num_envs
            for mode, st in results.items():
                wall = st["wall_s"]
                st.update(u_env=st["env_occupied_s"] / (n * wall), u_exec=st["env_exec_s"] / (n * wall),
                          actions_per_min=60.0 * st["actions"] / wall, policy_utilisation=st["policy_busy_s"] / wall,
                          mean_batch=float(np.mean(batches[mode])) if batches[mode] else 0.0, lengths=lengths[mode])
        engine.close()
    after = machine()

    cols = ["mode", "trajs", "actions", "wall s", "actions/min", "U_env", "U_exec", "env idle with work pending",
            "policy util", "mean batch"]
    print(f"rollout_util: {args.num_envs} envs, {args.groups} groups x G={args.group_size} per mode in "
          f"{args.rounds} rounds, engine max_batch {args.max_batch or args.num_envs} max_wait {args.max_wait_ms:g} ms, "
          f"torch threads {args.torch_threads}, step budget {args.max_steps}, settle {args.settle_ms} ms, "
          f"isolation {args.isolation}")
    print(f"tasks: {' '.join(args.tasks)}")
    for mode, st in results.items():
        ls = st["lengths"]
        print(f"episode lengths ({mode}): mean {np.mean(ls):.2f}, median {np.median(ls):g}, max {max(ls)}, "
              f"histogram {dict(sorted(Counter(ls).items()))}")
    print(f"machine: {before['date']}, nproc {before['nproc']}, {before['cpu']}, load before "
          f"{before['load'][0]:.1f} after {after['load'][0]:.1f} (shared machine: other jobs run too)")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for mode, st in results.items():
        print(f"| {mode} | {st['trajectories']} | {st['actions']} | {st['wall_s']:.1f} | {st['actions_per_min']:.1f} | "
              f"{100 * st['u_env']:.1f}% | {100 * st['u_exec']:.1f}% | "
              f"{100 * st['env_idle_pending_s'] / (args.num_envs * st['wall_s']):.1f}% | {100 * st['policy_utilisation']:.1f}% | "
              f"{st['mean_batch']:.2f} |")
    ok = True
    if "sync" in results and "rollout" in results:
        s, r = results["sync"], results["rollout"]
        ratio = r["actions_per_min"] / s["actions_per_min"] if s["actions_per_min"] else float("inf")
        print(f"ratio rollout/sync: actions/min {ratio:.2f}x, U_env {r['u_env'] / max(s['u_env'], 1e-9):.2f}x, "
              f"U_exec {r['u_exec'] / max(s['u_exec'], 1e-9):.2f}x")
        checks = [("rollout-wise actions/min >= 1.9x sync", ratio >= 1.9, f"{ratio:.2f}x"),
                  ("rollout-wise U_env >= 80%", r["u_env"] >= 0.8, f"{100 * r['u_env']:.1f}%")]
        for name, passed, value in checks:
            ok &= passed
            print(f"{'PASS' if passed else 'FAIL'}  {name}: {value}")
        results["ratio_actions_per_min"] = ratio
    results["machine"] = {"before": before, "after": after}
    results["budgets"] = budgets
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
