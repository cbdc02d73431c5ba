#!/usr/bin/env python
"""stable-baselines3 PPO on a real MiniWoB++ page, from pixels, against the random baseline.

The agent sees only the task area of the screenshot (160x160 px under the instruction bar, resized
to ``--image`` px, channel-first) and acts on a ``--grid`` x ``--grid`` click grid over that area
(:class:`guigym.wrappers.sb3.ClickGrid`): action ``k`` clicks the centre of cell ``k``. On
``click-test`` the one button moves with the seed, so the policy must find it in the image; the
task needs no instruction (it never changes), which is what a pixels-only SB3 policy can use.

Protocol (fixed before any result was seen; the PPO hyper-parameters were changed once after a
first run, see docs/benchmarks.md):

* training episodes draw their seeds from ``[0, 1_000_000)`` (:class:`TrainSeeds`); evaluation
  uses ``--eval-episodes`` held-out seeds ``10_000_000 + i``, never seen in training;
* the baseline is the uniform random policy over the same grid on the same held-out seeds;
  the trained policy acts deterministically (arg-max);
* significance: one-sided Fisher exact test, trained vs random successes;
* wall time is measured from the first env creation to the end of evaluation.

Usage::

    python examples/sb3_ppo_miniwob.py                      # defaults: 6x6 grid, 2 envs, 12k steps
    python examples/sb3_ppo_miniwob.py --timesteps 4000 --json /tmp/sb3.json

Prints the before/after success on held-out seeds, the p-value and the wall time; the figures in
docs/benchmarks.md come from this script.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass
from typing import Any, Optional

import gymnasium as gym
import numpy as np

import guigym  # noqa: F401 - registers the envs
from guigym.wrappers.sb3 import ClickGrid, ImageObservation

AREA = (0, 50, 160, 160)  # MiniWoB's task area: (x, y, width, height) under the 50-px instruction bar
TRAIN_SEEDS = (0, 1_000_000)
HELD_OUT_SEED0 = 10_000_000


@dataclass
class Config:
    """Everything the run depends on (printed and saved with the result)."""

    task: str = "click-test"
    """MiniWoB task; one click ends the episode (``max_steps=1``)."""
    grid: int = 6
    """click grid is grid x grid cells over the task area."""
    image: int = 64
    """observation side in pixels after resizing the 160x160 task area."""
    timesteps: int = 12_000
    """PPO environment steps (= episodes, one step each)."""
    n_envs: int = 2
    """parallel envs (SubprocVecEnv, one browser each)."""
    eval_episodes: int = 200
    """held-out seeds evaluated for the trained and the random policy."""
    isolation: str = "page"
    """MiniWoB-v0 isolation: "page" restarts the task in the open page (Farama's and MiniWoB's own
    way, ~70 ms per one-step episode here); "context" builds a fresh browser context per episode
    (~550 ms of browser work on 2 cores, which one-step episodes cannot hide)."""
    seed: int = 0
    learning_rate: float = 5e-4
    n_steps: int = 512
    """PPO rollout length summed over the envs (n_steps // n_envs per env)."""
    batch_size: int = 64
    n_epochs: int = 10
    ent_coef: float = 0.01


class TrainSeeds(gym.Wrapper):
    """Every reset draws its episode seed from ``TRAIN_SEEDS`` (its own RNG), so training never
    sees a held-out seed, whatever seed SB3 passes at the first reset."""

    def __init__(self, env: gym.Env, rank: int, seed: int) -> None:
        super().__init__(env)
        self._rng = np.random.default_rng([seed, rank])

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None) -> Any:
        return self.env.reset(seed=int(self._rng.integers(*TRAIN_SEEDS)), options=options)


def make_env(cfg: Config, rank: int = 0, train: bool = True) -> gym.Env:
    env: gym.Env = gym.make("MiniWoB-v0", task=cfg.task, max_steps=1, isolation=cfg.isolation)
    env = ClickGrid(env, rows=cfg.grid, cols=cfg.grid, region=AREA)
    env = ImageObservation(env, size=(cfg.image, cfg.image), region=AREA)
    return TrainSeeds(env, rank, cfg.seed) if train else env


def evaluate(env: gym.Env, act: Any, episodes: int) -> list[float]:
    """Rewards of ``act(obs) -> action`` on held-out seeds ``HELD_OUT_SEED0 + i``."""
    out = []
    for i in range(episodes):
        obs, _ = env.reset(seed=HELD_OUT_SEED0 + i)
        _, r, *_ = env.step(act(obs))
        out.append(float(r))
    return out


def fisher_one_sided(a_succ: int, a_n: int, b_succ: int, b_n: int) -> float:
    """P(X >= a_succ) for X hypergeometric given the margins: one-sided Fisher exact test that
    group a succeeds more often than group b."""
    total, succ = a_n + b_n, a_succ + b_succ
    denom = math.comb(total, succ)
    return sum(math.comb(a_n, k) * math.comb(b_n, succ - k) for k in range(a_succ, min(a_n, succ) + 1)) / denom


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    for f, v in asdict(Config()).items():
        ap.add_argument(f"--{f.replace('_', '-')}", type=type(v), default=v)
    ap.add_argument("--json", help="also write the result to this file")
    args = ap.parse_args()
    cfg = Config(**{f: getattr(args, f) for f in asdict(Config())})

    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import SubprocVecEnv

    torch.set_num_threads(1)  # the browsers need the other core(s)
    t0 = time.perf_counter()
    eval_env = make_env(cfg, train=False)
    rng = np.random.default_rng(cfg.seed)
    n_actions = cfg.grid * cfg.grid
    before = evaluate(eval_env, lambda _obs: int(rng.integers(n_actions)), cfg.eval_episodes)

    venv = SubprocVecEnv([lambda r=r: make_env(cfg, rank=r) for r in range(cfg.n_envs)])
    model = PPO("CnnPolicy", venv, learning_rate=cfg.learning_rate, n_steps=cfg.n_steps // cfg.n_envs,
                batch_size=cfg.batch_size, n_epochs=cfg.n_epochs, ent_coef=cfg.ent_coef, seed=cfg.seed,
                device="cpu", verbose=0)
    t_train = time.perf_counter()
    model.learn(total_timesteps=cfg.timesteps)
    train_s = time.perf_counter() - t_train
    venv.close()
    after = evaluate(eval_env, lambda obs: int(model.predict(obs, deterministic=True)[0]), cfg.eval_episodes)
    eval_env.close()
    wall = time.perf_counter() - t0

    sb, sa, n = int(sum(before)), int(sum(after)), cfg.eval_episodes
    p = fisher_one_sided(sa, n, sb, n)
    result = {
        "config": asdict(cfg), "random_success": sb / n, "ppo_success": sa / n, "random_hits": sb, "ppo_hits": sa,
        "held_out_episodes": n, "p_value_one_sided_fisher": p, "train_s": round(train_s, 1), "wall_s": round(wall, 1),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": f"{platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
    }
    print(f"task {cfg.task}, {cfg.grid}x{cfg.grid} grid, {cfg.timesteps} PPO steps on {cfg.n_envs} envs")
    print(f"held-out seeds ({n}): random {sb}/{n} = {sb / n:.1%}  ->  PPO {sa}/{n} = {sa / n:.1%}")
    print(f"one-sided Fisher exact p = {p:.2e}; train {train_s:.0f} s, wall {wall:.0f} s "
          f"({'PASS' if p < 0.01 and wall <= 1200 else 'FAIL'}: p < 0.01 within 20 min)")
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(result, fh, indent=2)
        os.replace(tmp, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
