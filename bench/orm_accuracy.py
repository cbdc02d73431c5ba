#!/usr/bin/env python
"""WebRL's outcome reward model (issue 15 item 4): accuracy against held-out verifier labels on
real MiniWoB++ episodes.

Usage::

    python bench/orm_accuracy.py                        # 2 tasks, 48 train + 24 held-out seeds each
    python bench/orm_accuracy.py --train-seeds 96 --epochs 8 --json /tmp/orm.json

Episodes are played in real Chromium (MiniWoB-v0). Per task and seed one agent plays: the MiniWoB
oracle on even seeds (mostly successes), the random agent (``guigym.agents.simple``: clicks on
random elements or points, typing, keys) with a 2-step budget on odd seeds (mostly failures), so
both labels occur and the agent's identity is not in the seed split. The ORM sees what WebRL's
sees: the instruction, the action history and the text of the last page (a11y tree, first
``--state-budget`` tokens); its label is the verifier's (episode success). Train seeds and
held-out seeds are disjoint ranges, fixed before any run.

The judge is a freshly built random tiny Qwen2.5-VL (hidden 64, 2 layers; the trainer's test
model) or any ``from_pretrained`` directory given with ``--model``, trained with ``train_orm`` (SFT on the label token, class-balanced) and read with
``evaluate_orm`` (success iff P(YES) > P(NO)). Printed per task and pooled: the held-out share of
successes, the majority-class baseline, the untrained judge and the trained one (accuracy,
precision, recall), so "the ORM learned something" means beating the majority baseline on seeds
it never saw. This is the mechanism's evidence on CPU, not WebRL's reported ORM (a 8B model on
WebArena-Lite).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional, Sequence

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

TASKS = ("click-button", "click-option")
TRAIN_SEED0, HELD_OUT_SEED0 = 0, 100_000  # disjoint ranges, fixed before any run
RANDOM_STEPS = 2


def play(env: Any, task: str, seed: int, max_steps: int = 6) -> dict[str, Any]:
    """One episode: the oracle on even seeds, the random agent on odd ones; the ORM's inputs and
    the verifier's label."""
    from guigym.agents.oracle.miniwob import MiniWoBOracle
    from guigym.agents.simple import RandomAgent

    oracle = seed % 2 == 0
    agent = MiniWoBOracle() if oracle else RandomAgent(seed=seed)
    obs, info = env.reset(seed=seed, options={"task": task})
    agent.reset(info)
    instruction = str(obs.get("instruction", ""))
    actions: list[str] = []
    success = False
    for _ in range(max_steps if oracle else RANDOM_STEPS):
        obs, _, terminated, truncated, info = env.step(agent.act(obs))
        actions.append(str(info.get("action") or ""))
        if terminated or truncated:
            success = bool(info.get("success"))
            break
    return {"task": task, "seed": seed, "agent": "oracle" if oracle else "random", "instruction": instruction,
            "actions": actions, "final_state": str(obs.get("a11y", "")), "label": success}


def collect(tasks: Sequence[str], seeds: Sequence[int]) -> list[dict[str, Any]]:
    import gymnasium as gym

    import guigym  # noqa: F401 - registers the envs

    env = gym.make("MiniWoB-v0", max_steps=6)
    try:
        return [play(env, task, seed) for task in tasks for seed in seeds]
    finally:
        env.close()


def examples(episodes: Sequence[dict[str, Any]]) -> list[Any]:
    from guigym.train.algorithms.webrl_orm import OrmExample

    return [OrmExample(instruction=e["instruction"], actions=list(e["actions"]), final_state=e["final_state"],
                       label=bool(e["label"])) for e in episodes]


def scores(orm: Any, episodes: Sequence[dict[str, Any]]) -> dict[str, float]:
    from guigym.train.algorithms.webrl_orm import evaluate_orm

    out = evaluate_orm(orm, examples(episodes))
    pos = sum(bool(e["label"]) for e in episodes)
    out["success_share"] = pos / max(len(episodes), 1)
    out["majority_accuracy"] = max(pos, len(episodes) - pos) / max(len(episodes), 1)
    return out


def run(train_seeds: int, held_out_seeds: int, epochs: int, lr: float, state_budget: int, model_seed: int,
        tasks: Sequence[str] = TASKS, episodes_file: Optional[str] = None, model: Optional[str] = None) -> dict[str, Any]:
    from guigym.train.algorithms.webrl_orm import OutcomeRewardModel, train_orm
    from guigym.models import tiny

    t0 = time.perf_counter()
    if episodes_file and Path(episodes_file).exists():
        eps = json.loads(Path(episodes_file).read_text())
    else:
        eps = {"train": collect(tasks, range(TRAIN_SEED0, TRAIN_SEED0 + train_seeds)),
               "held_out": collect(tasks, range(HELD_OUT_SEED0, HELD_OUT_SEED0 + held_out_seeds))}
        if episodes_file:
            tmp = Path(episodes_file).with_suffix(".tmp")
            tmp.write_text(json.dumps(eps))
            os.replace(tmp, episodes_file)
    collect_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="orm-bench-") as tmp_dir:
        path = Path(model) if model else Path(tmp_dir) / "tiny"
        if not model:
            tiny.build(path, seed=model_seed, hidden=64, layers=2)
        orm = OutcomeRewardModel.from_path(str(path), state_budget=state_budget)
        held = eps["held_out"]
        by_task = {t: [e for e in held if e["task"] == t] for t in tasks}
        before = {"pooled": scores(orm, held), **{t: scores(orm, v) for t, v in by_task.items()}}
        t1 = time.perf_counter()
        stats = train_orm(orm, examples(eps["train"]), epochs=epochs, lr=lr, batch_size=4, seed=model_seed,
                          balance=True)
        train_s = time.perf_counter() - t1
        after = {"pooled": scores(orm, held), **{t: scores(orm, v) for t, v in by_task.items()}}
    return {"tasks": list(tasks), "model": model or "tiny (fresh, random)", "train_episodes": len(eps["train"]), "held_out_episodes": len(held),
            "train_success_share": sum(e["label"] for e in eps["train"]) / max(len(eps["train"]), 1),
            "epochs": epochs, "lr": lr, "state_budget": state_budget, "losses": stats["losses"],
            "untrained": before, "trained": after, "collect_s": collect_s, "train_s": train_s}


def table(r: dict[str, Any]) -> list[str]:
    lines = [f"{'held-out set':<14} {'n':>4} {'success':>8} {'majority':>9} {'untrained acc':>14} "
             f"{'trained acc':>12} {'precision':>10} {'recall':>7}"]
    for key in ["pooled", *r["tasks"]]:
        u, t = r["untrained"][key], r["trained"][key]
        lines.append(f"{key:<14} {int(t['n']):>4} {t['success_share']:>8.2f} {t['majority_accuracy']:>9.2f} "
                     f"{u['accuracy']:>14.2f} {t['accuracy']:>12.2f} {t['precision']:>10.2f} {t['recall']:>7.2f}")
    return lines


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--train-seeds", type=int, default=48, help="seeds per task for training")
    p.add_argument("--held-out-seeds", type=int, default=24, help="seeds per task held out")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--lr", type=float, default=2e-3, help="a random tiny model needs a large step")
    p.add_argument("--state-budget", type=int, default=384, help="tokens of the last page the judge reads")
    p.add_argument("--model-seed", type=int, default=0)
    p.add_argument("--model", default=None,
                   help="a from_pretrained directory to train as the judge instead of the fresh tiny model")
    p.add_argument("--episodes", default=None, help="cache the played episodes in this JSON (reused when present)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    r = run(args.train_seeds, args.held_out_seeds, args.epochs, args.lr, args.state_budget, args.model_seed,
            episodes_file=args.episodes, model=args.model)
    for line in table(r):
        print(line)
    print(f"train: {r['train_episodes']} episodes (success share {r['train_success_share']:.2f}), "
          f"{r['epochs']} epochs, lr {r['lr']}, per-epoch loss {[round(x, 3) for x in r['losses']]}; "
          f"playing {r['collect_s']:.0f} s, training {r['train_s']:.0f} s; load {os.getloadavg()[0]:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))
    return r


if __name__ == "__main__":
    main()
