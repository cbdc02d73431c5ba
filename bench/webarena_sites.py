#!/usr/bin/env python
"""WebArena-v0's embedded sites: cold start, per-episode reset, against WebArena's docker reset.

Usage::

    python bench/webarena_sites.py                 # every embedded site this machine can run, 10 resets
    python bench/webarena_sites.py --sites fossil map --resets 20 --json /tmp/sites.json

What is measured, per site (sites/__init__.py), in one sitting:

* ``build``: creating the seed from nothing (Fossil repository, ZIM file, ...) in a fresh directory;
* ``start``: starting the server on the built seed until its first page answers (one instance);
* ``site reset``: ``site.reset()`` alone (the seed restored between requests, no restart);
* ``env reset``: ``WebArenaEnv.reset`` on the site's first task, which includes the site reset, a
  fresh browser context, any login, opening the start URLs and the first observation (median),
  with ``--think-ms`` (default 500) of idle time between resets standing for the agent's turn, in
  which the env prewarms the coming episodes' contexts (``--no-prewarm`` turns that off) and
  opens and observes the next tasks' start pages in them, ``--pages-ahead`` (default 2, the
  env's) of them (the env holds that one task, so the next tasks are known, as they are for a
  training loop's ``reset()`` without a task): on read-only sites (kiwix, the map) directly, on
  stateful ones each on its own standby instance of the ``pages-ahead + 1`` the env runs
  (sites/standby.py; the bench serves the built site that way unless ``--no-standby``), else
  it warms the context's HTTP cache with the static files the start page loaded last time; the
  first reset starts Chromium and is not counted;
  ``of it obs ms`` is the median share of the first observation (screenshot + a11y tree, or the
  check that the page observed ahead has not changed), the rest being the site reset, the
  context and the start page's load.

The peer: WebArena resets its sites by stopping, removing and re-creating their docker containers,
which its README and issues put at 3-5 minutes per reset (webarena#88, #206); nothing here can run
those images (no Docker engine), so that figure is stated, not measured, and the ratio printed is
180 s (the low end) / our median env reset.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from guigym.envs.web.webarena import sites as S  # noqa: E402

WEBARENA_DOCKER_RESET_S = 180.0  # low end of the 3-5 min WebArena's users report (stated, not measured)


def measure(name: str, resets: int, think_ms: float = 500.0, prewarm: bool = True,
            standby: bool = True, pages_ahead: int = 2) -> dict[str, Any]:
    from guigym.envs.web.webarena.env import WebArenaEnv
    from guigym.envs.web.webarena.sites.standby import StandbySite

    spec = S.spec(name)
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        site = spec.load()(Path(tmp) / name)
        t0 = time.perf_counter()
        if hasattr(site, "build"):
            site.build()
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        site.start()
        start_s = time.perf_counter() - t0
        served = site
        try:
            site_resets = [site.reset() for _ in range(resets)]
            if standby and prewarm and not getattr(site, "read_only", False):
                # what WebArena-v0 runs for a stateful site it starts: pages_ahead + 1 instances of this build
                site.close()
                served = StandbySite(spec.load(), Path(tmp) / f"{name}-standby",
                                     prepare=lambda d: shutil.copytree(site.workdir, d, symlinks=True,
                                                                       ignore=shutil.ignore_patterns(".gunicorn")),
                                     instances=pages_ahead + 1)
                served.start()
            first = json.loads(spec.suite.read_text())[0]["task_id"]
            env = WebArenaEnv(config_file=spec.suite, task_ids=[first], embedded_sites=[served], prewarm=prewarm,
                              pages_ahead=pages_ahead)
            try:
                env_resets, observes = [], []
                for _ in range(resets + 1):
                    t0 = time.perf_counter()
                    env.reset()  # the env's only task
                    env_resets.append(time.perf_counter() - t0)
                    observes.append(env.timings.get("observe_s", 0.0))  # the first observation's share
                    time.sleep(think_ms / 1000)  # the agent's turn
                env_resets, observes = env_resets[1:], observes[1:]  # the first one also starts Chromium
            finally:
                env.close()
        finally:
            served.close()
            site.close()
    med = statistics.median(env_resets)
    return {"site": name, "build_s": build_s, "start_s": start_s, "standby": served is not site,
            "site_reset_ms": 1000 * statistics.median(site_resets), "env_reset_ms": 1000 * med,
            "env_reset_p90_ms": 1000 * sorted(env_resets)[int(0.9 * (len(env_resets) - 1))],
            "observe_ms": 1000 * statistics.median(observes),
            "vs_docker_reset": WEBARENA_DOCKER_RESET_S / med}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sites", nargs="*", default=None, help="default: every embedded site this machine can run")
    p.add_argument("--resets", type=int, default=10)
    p.add_argument("--think-ms", type=float, default=500.0, help="idle time between resets (the agent's turn)")
    p.add_argument("--no-prewarm", action="store_true", help="build each episode's context inside its reset")
    p.add_argument("--pages-ahead", type=int, default=2,
                   help="coming episodes whose start page is opened ahead (WebArenaEnv pages_ahead)")
    p.add_argument("--no-standby", action="store_true",
                   help="serve a stateful site as one instance restored inside each reset (standby.py)")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    names = args.sites or S.available()
    rows = [measure(n, args.resets, args.think_ms, not args.no_prewarm, not args.no_standby, args.pages_ahead)
            for n in names]
    print(f"{'site':<8} {'build s':>8} {'start s':>8} {'site reset ms':>14} {'env reset ms':>13} {'p90 ms':>8} "
          f"{'of it obs ms':>13} {'x docker reset':>15}")
    for r in rows:
        print(f"{r['site']:<8} {r['build_s']:>8.2f} {r['start_s']:>8.2f} {r['site_reset_ms']:>14.2f} "
              f"{r['env_reset_ms']:>13.0f} {r['env_reset_p90_ms']:>8.0f} {r['observe_ms']:>13.0f} "
              f"{r['vs_docker_reset']:>15.0f}  {f'{args.pages_ahead + 1} instances (standby)' if r['standby'] else ''}")
    print(f"think time {args.think_ms:.0f} ms between resets; prewarm {'off' if args.no_prewarm else 'on'}"
          f" ({args.pages_ahead} pages ahead); "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"peer: WebArena's docker reset, {WEBARENA_DOCKER_RESET_S:.0f} s (3-5 min stated by its users; not "
          "measured here: no Docker engine)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
