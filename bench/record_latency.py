#!/usr/bin/env python
"""Record reset/step latency histograms of real envs for the LatencyModel-v0 stand-in (issue 16).

    python bench/record_latency.py miniwob [--resets 20] [--steps 60]      # MiniWoB-v0, real Chromium
    python bench/record_latency.py osworld [--resets 10] [--steps 30]      # OSWorld-v0, local provider
    python bench/record_latency.py all --note "quiet machine"

Writes ``bench/data/latency_<name>.json`` (``--out-dir``), which
``gym.make("LatencyModel-v0", latency=PATH)`` samples from (guigym/envs/latency_model.py)::

    {"env_id": "MiniWoB-v0", "env_kwargs": {...}, "policy": "uniformly random click on ...",
     "machine": {"date", "host", "nproc", "cpu", "python", "load_before", "load_after"},
     "note": "...",
     "reset": {"unit": "s", "edges": [B+1 floats], "counts": [B ints], "n": N,
               "median": s, "p90": s, "samples": [N floats, in recording order]},
     "step":  {... same ...}}

What is timed: the wall time of ``env.reset()`` / ``env.step(action)`` in this process (no pool,
no policy), so the numbers are the env's own cost: Chromium's action + screenshot + a11y tree for
MiniWoB-v0 (``settle_ms`` 0), the action + screenshot + a11y tree of the local desktop for
OSWorld-v0 (restore + setup + first observation for a reset). The first reset of each env (browser
or desktop cold start) is kept out of the histogram and stored as ``cold_start_s``.

Actions: MiniWoB-v0 -- a uniformly random click on the visible interactive a11y nodes (the
constrained policy's candidates), so episodes end and resets recur as they do in training;
OSWorld-v0 -- the harmless per-app actions of bench/desktop_reset.py (a key that changes nothing,
a pointer move), cycled over the terminal, editor and file-manager tasks.

Bins: ``--bins`` log-spaced bins between the smallest and largest sample (latencies are skewed:
a log scale keeps the body resolved and the tail in one or two bins). The raw samples are kept
so a later reader can rebin. Machine load changes these numbers: the machine block and ``--note``
say under what conditions they were taken.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import _machine  # noqa: E402

MINIWOB_TASKS = ["click-test", "click-button", "click-menu", "enter-text", "login-user", "click-option",
                 "click-checkboxes", "search-engine", "click-collapsible-2", "book-flight"]
OSWORLD_APPS = ("terminal", "editor", "file_manager")


def machine() -> dict[str, Any]:
    m = _machine.machine()
    m["load_before"] = m.pop("load")
    return m


def histogram(samples: list[float], bins: int) -> dict[str, Any]:
    """Log-spaced histogram of ``samples`` (seconds): edges (bins+1,), counts (bins,), summary."""
    xs = np.asarray(samples, dtype=float)
    if xs.size == 0:
        raise ValueError("no samples recorded")
    lo, hi = float(xs.min()), float(xs.max())
    if hi <= lo:  # all equal: one bin around the value
        lo, hi = lo * 0.99, hi * 1.01 + 1e-6
    edges = np.geomspace(max(lo, 1e-6), hi, bins + 1)
    edges[0], edges[-1] = lo, hi  # exact ends: no sample falls outside
    counts, _ = np.histogram(xs, bins=edges)
    return {"unit": "s", "edges": [round(float(e), 6) for e in edges], "counts": [int(c) for c in counts],
            "n": int(xs.size), "median": round(float(np.median(xs)), 6),
            "p90": round(float(np.quantile(xs, 0.9)), 6), "samples": [round(float(x), 6) for x in xs]}


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def record_miniwob(resets: int, steps: int, seed: int) -> dict[str, Any]:
    import gymnasium as gym

    import guigym  # noqa: F401 - registers the envs
    from guigym.models.constrain import candidates_from_a11y

    kwargs = {"tasks": MINIWOB_TASKS, "settle_ms": 0}
    env = gym.make("MiniWoB-v0", **kwargs)
    rng = np.random.default_rng(seed)
    reset_s: list[float] = []
    step_s: list[float] = []
    try:
        cold, (obs, _) = _timed(lambda: env.reset(seed=seed))
        while len(step_s) < steps or len(reset_s) < resets:
            shot = obs["screenshot"]
            cands = candidates_from_a11y(obs["a11y"] or "<a11y/>", screen=(shot.shape[1], shot.shape[0]))
            action = str(rng.choice(cands)) if cands else "wait()"
            dt, (obs, _, term, trunc, _) = _timed(lambda: env.step(action))
            if len(step_s) < steps:
                step_s.append(dt)
            if term or trunc or len(step_s) >= steps:
                s = int(rng.integers(2**31 - 1))
                dt, (obs, _) = _timed(lambda: env.reset(seed=s))
                reset_s.append(dt)
    finally:
        env.close()
    return {"env_id": "MiniWoB-v0", "env_kwargs": kwargs, "cold_start_s": round(cold, 4),
            "policy": "uniformly random click on the visible interactive a11y nodes (candidates_from_a11y); "
                      "reset after each episode end",
            "reset_samples": reset_s, "step_samples": step_s}


def record_osworld(resets: int, steps: int, seed: int) -> dict[str, Any]:
    from desktop_reset import APPS  # bench/desktop_reset.py: embedded task + harmless actions per app

    from guigym.envs.desktop.env import OSWorldEnv

    tasks = [APPS[a][0] for a in OSWORLD_APPS]
    kwargs = {"tasks": tasks, "provider": "local", "max_steps": 10_000}
    env = OSWorldEnv(**kwargs)
    reset_s: list[float] = []
    step_s: list[float] = []
    try:
        cold, _ = _timed(lambda: env.reset(seed=seed, options={"task": tasks[0]}))
        per_app = max(1, steps // len(OSWORLD_APPS))
        for k in range(max(resets, len(OSWORLD_APPS))):
            app = OSWORLD_APPS[k % len(OSWORLD_APPS)]
            dt, _ = _timed(lambda: env.reset(seed=seed + k, options={"task": APPS[app][0]}))
            reset_s.append(dt)
            if k < len(OSWORLD_APPS):  # steps on each app once, right after its reset
                actions = APPS[app][1]
                for i in range(per_app):
                    dt, _ = _timed(lambda: env.step(actions[i % len(actions)]))
                    step_s.append(dt)
    finally:
        env.close()
    return {"env_id": "OSWorld-v0", "env_kwargs": kwargs, "cold_start_s": round(cold, 4),
            "policy": f"harmless per-app actions of bench/desktop_reset.py on {', '.join(OSWORLD_APPS)}; "
                      "resets cycle over those tasks",
            "reset_samples": reset_s, "step_samples": step_s}


def osworld_available() -> tuple[bool, str]:
    """(True, "") when ``guigym doctor`` finds everything OSWorld-v0's local provider needs, else
    (False, the names of the missing checks)."""
    from guigym import doctor

    missing = [f"{r.name} ({r.detail})" for r in doctor.run_checks(["OSWorld-v0"], only_targets=True)
               if r.status == "missing"]
    return not missing, "; ".join(missing)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("which", choices=("miniwob", "osworld", "all"))
    ap.add_argument("--resets", type=int, default=None, help="timed resets (default 20 miniwob, 10 osworld)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps (default 60 miniwob, 30 osworld)")
    ap.add_argument("--bins", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--note", default="", help="conditions of the recording (stored in the file)")
    ap.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "data")
    args = ap.parse_args(argv)
    todo = ["miniwob", "osworld"] if args.which == "all" else [args.which]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name in todo:
        if name == "osworld":
            ok, why = osworld_available()
            if not ok:
                print(f"osworld: skipped, `guigym doctor --env OSWorld-v0` reports missing parts:\n{why}")
                continue
        m = machine()
        resets = args.resets or (20 if name == "miniwob" else 10)
        steps = args.steps or (60 if name == "miniwob" else 30)
        rec = (record_miniwob if name == "miniwob" else record_osworld)(resets, steps, args.seed)
        m["load_after"] = [round(x, 2) for x in os.getloadavg()]
        out = {"env_id": rec["env_id"], "env_kwargs": rec["env_kwargs"], "policy": rec["policy"], "machine": m,
               "note": args.note, "cold_start_s": rec["cold_start_s"],
               "reset": histogram(rec["reset_samples"], args.bins), "step": histogram(rec["step_samples"], args.bins)}
        path = args.out_dir / f"latency_{name}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(out, indent=1) + "\n")
        tmp.replace(path)  # atomic: a reader never sees half a file
        for kind in ("reset", "step"):
            h = out[kind]
            print(f"{rec['env_id']} {kind}: n={h['n']} median {1000 * h['median']:.0f} ms p90 "
                  f"{1000 * h['p90']:.0f} ms (mean {1000 * statistics.fmean(h['samples']):.0f} ms)")
        print(f"wrote {path} (load {m['load_before'][0]:.1f} -> {m['load_after'][0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
