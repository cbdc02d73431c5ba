#!/usr/bin/env python
"""What a fresh browser context costs: wall time and CPU time of every process, per phase.

Usage::

    python bench/web_context_cost.py                    # both binaries below that exist, 16 contexts each
    python bench/web_context_cost.py --contexts 30 --json /tmp/ctx.json

MiniWoB-v0's default isolation opens every episode in a fresh Playwright browser context, built in
the background while the agent acts. On a small machine that build is CPU-bound, so its CPU cost
(not its latency) decides how fast back-to-back episodes can go. This script measures it for each
Chromium binary in the same run, on the same MiniWoB page (click-test, served by MiniWoB-v0's own
loopback server):

* phases: ``new_context`` (``browser.new_context``), ``new_page`` (``context.new_page``: the
  renderer process starts), ``goto`` (``page.goto(url, wait_until="load")``), ``close``
  (``context.close`` + 0.3 s for the processes to exit);
* per phase: wall time and the CPU time (user + system) gained by every process of the tree
  (this Python, Playwright's node driver, Chromium's browser, renderer, GPU, utility/network
  and zygote processes) between the phase's start and end, read with psutil. CPU of a process
  that exits inside a phase (a closed context's renderer) is not seen; ``close`` is therefore a
  lower bound and is reported but not summed.

Binaries: full Chromium (``/usr/bin/chromium``, launched with Playwright's ``--headless``) and
Debian's ``chromium-headless-shell`` (``/usr/lib/chromium/chromium-headless-shell``), which is
what Playwright itself launches for headless runs and what guigym prefers when it is installed
(guigym/envs/web/browser.py). Printed: per binary and phase the medians, then the ratio of the
summed CPU (context + page + goto) full / shell.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

BINARIES = {"chromium": "/usr/bin/chromium", "headless-shell": "/usr/lib/chromium/chromium-headless-shell"}
PHASES = ("new_context", "new_page", "goto", "close")


def _snapshot() -> dict[int, tuple[str, float]]:
    """pid -> (kind, cpu seconds) for this process and all its descendants."""
    import psutil

    me = psutil.Process()
    out: dict[int, tuple[str, float]] = {}
    for p in [me] + me.children(recursive=True):
        try:
            t = p.cpu_times()
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if p.pid == me.pid:
            kind = "python"
        elif p.name() == "node" or "playwright/driver" in cmd:
            kind = "driver"
        else:
            kind = next((k for k in ("renderer", "gpu-process", "utility", "zygote") if f"--type={k}" in cmd), "browser")
        out[p.pid] = (kind, t.user + t.system)
    return out


def _gained(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> Counter:
    got: Counter = Counter()
    for pid, (kind, cpu) in after.items():
        got[kind] += cpu - before.get(pid, (kind, 0.0))[1]
    return got


async def _measure(binary: str, url: str, contexts: int) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    from guigym.envs.web.browser import CHROMIUM_ARGS

    wall: dict[str, list[float]] = defaultdict(list)
    cpu: dict[str, list[Counter]] = defaultdict(list)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=binary, args=list(CHROMIUM_ARGS))
        try:
            for i in range(contexts + 2):  # the first two warm the driver and the browser up
                marks = [(_snapshot(), time.perf_counter())]
                ctx = await browser.new_context(viewport={"width": 160, "height": 210})
                marks.append((_snapshot(), time.perf_counter()))
                page = await ctx.new_page()
                marks.append((_snapshot(), time.perf_counter()))
                await page.goto(url, wait_until="load")
                marks.append((_snapshot(), time.perf_counter()))
                await ctx.close()
                await asyncio.sleep(0.3)
                marks.append((_snapshot(), time.perf_counter()))
                if i < 2:
                    continue
                for k, phase in enumerate(PHASES):
                    (s0, t0), (s1, t1) = marks[k], marks[k + 1]
                    wall[phase].append((t1 - t0) * 1000)
                    cpu[phase].append(_gained(s0, s1))
        finally:
            await browser.close()
    out: dict[str, Any] = {}
    for phase in PHASES:
        kinds = sorted({k for c in cpu[phase] for k in c})
        out[phase] = {"wall_ms": statistics.median(wall[phase]),
                      "cpu_ms": statistics.median(sum(c.values()) * 1000 for c in cpu[phase]),
                      "cpu_ms_by_process": {k: statistics.median(c[k] * 1000 for c in cpu[phase]) for k in kinds}}
    out["build_cpu_ms"] = sum(out[p]["cpu_ms"] for p in PHASES[:3])
    out["build_wall_ms"] = sum(out[p]["wall_ms"] for p in PHASES[:3])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--contexts", type=int, default=16, help="measured contexts per binary (after 2 warm-ups)")
    p.add_argument("--task", default="click-test", help="MiniWoB task page to load")
    p.add_argument("--json", default=None, help="also write all numbers here")
    args = p.parse_args()

    import guigym.envs.web.miniwob as mw

    url = mw.task_url(mw.select_tasks(args.task, None, "all")[0])
    found = {name: path for name, path in BINARIES.items() if os.path.exists(path)}
    if not found:
        raise SystemExit(f"none of {list(BINARIES.values())} is installed")
    print(f"fresh context + tab + {args.task} page -- {time.strftime('%Y-%m-%dT%H:%M:%S%z')}, nproc={os.cpu_count()}, "
          f"load {os.getloadavg()[0]:.2f}; medians of {args.contexts}")
    results = {}
    for name, path in found.items():
        r = results[name] = asyncio.run(_measure(path, url, args.contexts))
        print(f"\n{name} ({path})")
        for phase in PHASES:
            ph = r[phase]
            parts = ", ".join(f"{k} {v:.0f}" for k, v in ph["cpu_ms_by_process"].items() if v >= 0.5)
            print(f"  {phase:<12} wall {ph['wall_ms']:6.0f} ms   cpu {ph['cpu_ms']:6.0f} ms  ({parts})")
        print(f"  build (context + page + goto): wall {r['build_wall_ms']:.0f} ms, cpu {r['build_cpu_ms']:.0f} ms")
    if len(results) == 2:
        ratio = results["chromium"]["build_cpu_ms"] / results["headless-shell"]["build_cpu_ms"]
        print(f"\nCPU per fresh context, chromium / headless-shell: {ratio:.2f}x")
    print(f"load at end {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
