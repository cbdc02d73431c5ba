"""Chance and the label-blind ceiling of the instruction-following tasks, on real held-out pages.

    python3 bench/label_blind.py [--tasks click-button,unicode-test,click-widget] [--start 1000000 --count 50]

For each task, on the held-out seeds the learning proof evaluates on (real MiniWoB pages in
Chromium, the recipe's env defaults), prints:

* ``chance``: success of a policy that clicks a uniformly random constrained candidate (the
  interactive a11y nodes the GRPO prompt offers): mean over pages of correct / candidates.
* ``label-blind ceiling``: success of the best policy that sees the page but not the
  instruction: on each page, the best single click averaged over every instruction the task's
  generator could have asked of it (``guigym.agents.oracle.miniwob.instruction_variants``, one
  entry per target element, as MiniWoB draws them), i.e. ``label_blind_best``. A policy above
  this ceiling must be reading the instruction.
* ``oracle``: the scripted oracle's success on the same pages (1.0 unless a page is unsolvable).

A learning claim on these tasks is a claim about the gap between the ceiling and 1
(docs/benchmarks.md, "Warm start" and "Learning proof").
"""
from __future__ import annotations

import argparse
import time

import gymnasium as gym


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", default="click-button,unicode-test,click-widget")
    ap.add_argument("--start", type=int, default=1_000_000)
    ap.add_argument("--count", type=int, default=50)
    args = ap.parse_args()

    import guigym  # noqa: F401 - registers the envs
    from guigym.agents.oracle.miniwob import MiniWoBOracle, instruction_variants, label_blind_best
    from guigym.train.rollout.constrain import candidates_from_a11y

    from _machine import machine  # bench/ is on sys.path when run as a script

    print(machine())
    tasks = args.tasks.split(",")
    env = gym.make("MiniWoB-v0", tasks=tasks, max_steps=1)
    t0 = time.time()
    print(f"{'task':14s} {'pages':>5s} {'candidates':>10s} {'chance':>7s} {'label-blind':>11s} {'oracle':>7s}")
    for task in tasks:
        chance = blind = solved = cands_n = 0.0
        for seed in range(args.start, args.start + args.count):
            obs, info = env.reset(seed=seed, options={"task": task})
            shot = obs["screenshot"]
            cands = candidates_from_a11y(obs["a11y"], ("click",), screen=(shot.shape[1], shot.shape[0]))
            variants = instruction_variants(task, obs)
            ok = next((set(a) for q, a in variants if q == info["instruction"]), set())
            chance += len(ok & set(cands)) / max(1, len(cands))
            cands_n += len(cands)
            blind += label_blind_best(variants)
            agent = MiniWoBOracle()
            agent.reset(info)
            _, reward, _, _, step_info = env.step(agent.act(obs))
            solved += float(bool(step_info.get("success")))
        n = args.count
        print(f"{task:14s} {n:5d} {cands_n / n:10.2f} {chance / n:7.3f} {blind / n:11.3f} {solved / n:7.3f}")
    env.close()
    print(f"[{time.time() - t0:.0f} s]")


if __name__ == "__main__":
    main()
