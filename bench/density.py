"""How many local desktops one machine holds: memory per desktop and step latency (issue 35 item 4).

    nice -n 19 python3 bench/density.py [--max-desktops 12] [--min-free-gib 4] [--p90-limit-s 1.0]
                                        [--steps 6] [--screen 1920x1080]

Starts local OSWorld-v0 desktops one by one, alternating a terminal task (``terminal-mkdir``:
xterm + tmux + bash) and a LibreOffice task (``calc-double-qty``: Calc open on a sheet). After
each new desktop, every desktop held takes ``--steps`` harmless steps (a key that changes
nothing, a pointer move: bench/desktop_reset.py's), all desktops at once, one thread each (as an
EnvPool drives them), and the bench prints:

* desktops held (terminal / Calc);
* PSS per desktop: the proportional set size (shared pages split among their sharers, so the
  sum over desktops is what they cost together) summed over each desktop's process tree (the
  bwrap process and all its descendants: the sandbox's PID namespace init reaps every orphan,
  so nothing of a desktop escapes the tree), its mean and max over the desktops held, plus the
  tmpfs used by HOME + /tmp (RAM too, not in any process's PSS);
* step latency p50/p90 over all steps of that round;
* the host's available memory.

It stops before the next desktop when the step p90 passed ``--p90-limit-s``, when
``--max-desktops`` are held, or when the available memory minus the largest desktop seen so far
would fall under ``--min-free-gib`` (:func:`stop_reason`), or when a new desktop fails to start
(an ``EnvInfraError``, e.g. its first observation timed out on a saturated machine), then closes
every desktop.

Beside it: OSWorld's stated VM footprint. Its docker provider starts each VM with
``self.environment = {"DISK_SIZE": "32G", "RAM_SIZE": "4G", "CPU_CORES": "4"}`` (xlang-ai/OSWorld,
``desktop_env/providers/docker/provider.py``, ``DockerProvider.__init__``), i.e. 4 GiB of RAM per
VM, and guigym's docker/qemu providers keep that default (``ram_size="4G"``, ``memory="4G"``).
And the bound each local desktop's agent zone runs under (:class:`DesktopBounds`, item 1's
defaults; how it is enforced here is printed): the agent zone (every app, the shell, their
HOME/tmp writes) cannot grow past ``memory_mib``; the infra zone (Xvfb, D-Bus, AT-SPI, openbox,
the server, tmux) is not bounded by it, so it is measured here.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import machine  # noqa: E402
from _proctree import tree_pss  # noqa: E402 (the desktop's process tree)
from desktop_reset import APPS  # noqa: E402

from guigym.core.errors import EnvInfraError  # noqa: E402
from guigym.envs.desktop.providers.bounds import DesktopBounds  # noqa: E402

MIB = 1024 * 1024
GIB = 1024 * MIB
#: OSWorld's docker provider: RAM_SIZE "4G" per VM (module docstring)
OSWORLD_VM_RAM = 4 * GIB
#: the two series, alternated: (label, embedded task, harmless actions)
SERIES = (("terminal",) + APPS["terminal"], ("calc",) + APPS["libreoffice_calc"])


def stop_reason(held: int, p90_s: Optional[float], available: int, largest_desktop: int, *,
                max_desktops: int, min_free: int, p90_limit_s: float) -> Optional[str]:
    """Why no further desktop may be started (None: start one more).

    Args:
        held: desktops running now.
        p90_s: step latency p90 (s) of the last round with ``held`` desktops; None before any.
        available: the host's available memory (bytes, ``psutil.virtual_memory().available``).
        largest_desktop: the largest desktop footprint seen so far (bytes: PSS + its tmpfs);
            the next desktop is assumed to cost as much.
        max_desktops / min_free / p90_limit_s: the caps.
    """
    if p90_s is not None and p90_s > p90_limit_s:
        return f"step p90 {p90_s * 1000:.0f} ms > {p90_limit_s * 1000:.0f} ms"
    if held >= max_desktops:
        return f"{held} desktops = --max-desktops"
    if available - largest_desktop < min_free:
        return (f"available {available / GIB:.1f} GiB - next desktop ~{largest_desktop / MIB:.0f} MiB "
                f"< {min_free / GIB:.1f} GiB to keep free")
    return None


def tmpfs_used(provider: object) -> int:
    """Bytes used on the desktop's HOME + /tmp tmpfs (0 when it has none: not root)."""
    state = getattr(provider, "state_dir", None)
    disk = Path(state) / "disk" if state else None
    if disk is None or not os.path.ismount(disk):
        return 0
    st = os.statvfs(disk)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def percentile(xs: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in (0, 1]) of a non-empty sequence."""
    s = sorted(xs)
    return s[max(0, min(len(s), math.ceil(q * len(s))) - 1)]


@dataclass
class Held:
    kind: str
    task: str
    actions: list[str]
    env: object


def step_round(held: Sequence[Held], steps: int) -> tuple[list[float], list[str]]:
    """``steps`` steps on every desktop at once, one thread each; (latencies s, errors)."""
    lat: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def run(h: Held) -> None:
        for i in range(steps):
            t0 = time.perf_counter()
            try:
                _, _, term, trunc, _ = h.env.step(h.actions[i % len(h.actions)])  # type: ignore[attr-defined]
            except Exception as exc:  # noqa: BLE001 - reported, the round goes on
                with lock:
                    errors.append(f"{h.kind}: {type(exc).__name__}: {exc}")
                return
            with lock:
                lat.append(time.perf_counter() - t0)
            if term or trunc:
                h.env.reset(options={"task": h.task})  # type: ignore[attr-defined]

    threads = [threading.Thread(target=run, args=(h,), daemon=True) for h in held]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return lat, errors


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--max-desktops", type=int, default=12)
    p.add_argument("--min-free-gib", type=float, default=4.0)
    p.add_argument("--p90-limit-s", type=float, default=1.0)
    p.add_argument("--steps", type=int, default=6, help="steps per desktop per round")
    p.add_argument("--screen", default="1920x1080", help="WxH of each desktop")
    args = p.parse_args(argv)
    w, h = (int(v) for v in args.screen.lower().split("x"))
    from guigym.envs.desktop.env import OSWorldEnv

    m = machine()
    bounds = DesktopBounds()
    print(f"# bench/density.py, {m['date']}; {m['host']}: {m['nproc']} cores {m['cpu']}; "
          f"{psutil.virtual_memory().total / GIB:.1f} GiB RAM; screen {w}x{h}; load average before {m['load']}")
    print(f"# agent-zone bounds (DesktopBounds defaults): memory {bounds.memory_mib} MiB, HOME+/tmp "
          f"{bounds.disk_mib} MiB, {bounds.max_processes} processes, cpu {bounds.cpu_cores} core(s)")
    print(f"# OSWorld docker/qemu VM: RAM_SIZE 4G = {OSWORLD_VM_RAM // MIB} MiB per desktop "
          "(desktop_env/providers/docker/provider.py)")
    held: list[Held] = []
    largest = 0
    p90: Optional[float] = None
    reason: Optional[str] = None
    rows = []
    try:
        while True:
            reason = stop_reason(len(held), p90, psutil.virtual_memory().available, largest,
                                 max_desktops=args.max_desktops, min_free=int(args.min_free_gib * GIB),
                                 p90_limit_s=args.p90_limit_s)
            if reason:
                break
            kind, task, actions = SERIES[len(held) % len(SERIES)]
            env = OSWorldEnv(tasks=[task], provider="local", max_steps=10_000,
                             provider_kwargs={"screen_size": (w, h)})
            held.append(Held(kind, task, list(actions), env))
            t0 = time.perf_counter()
            try:
                env.reset(options={"task": task})
            except EnvInfraError as exc:  # e.g. its first observation timed out: the machine is full
                reason = f"desktop {len(held)} ({kind}) did not start: {exc}"
                break
            start_s = time.perf_counter() - t0
            if len(held) == 1:
                how = env.desktop_info().get("bounds", {})
                print("# enforced here: " + "; ".join(f"{k}: {v}" for k, v in how.items()))
                print()
                print("| desktops (term/calc) | start+reset new | PSS/desktop mean | max | tmpfs/desktop | "
                      "total | step p50 | step p90 | available | OSWorld VMs' RAM |")
                print("|---|---|---|---|---|---|---|---|---|---|")
            time.sleep(1.0)  # the new app's start-up paint, as bench/desktop_reset.py
            lat, errors = step_round(held, args.steps)
            per = []
            for hd in held:
                pss, _ = tree_pss(hd.env.provider.root_pid)  # type: ignore[attr-defined]
                per.append(pss + tmpfs_used(hd.env.provider))  # type: ignore[attr-defined]
            largest = max(largest, max(per))
            psss = [pp - tmpfs_used(hd.env.provider) for pp, hd in zip(per, held)]  # type: ignore[attr-defined]
            tmp = statistics.mean(tmpfs_used(hd.env.provider) for hd in held)  # type: ignore[attr-defined]
            p50 = statistics.median(lat) if lat else float("nan")
            p90 = percentile(lat, 0.9) if lat else float("inf")
            n_term = sum(hd.kind == "terminal" for hd in held)
            row = (f"| {len(held)} ({n_term}/{len(held) - n_term}) | {start_s:.1f} s | "
                   f"{statistics.mean(psss) / MIB:.0f} MiB | {max(psss) / MIB:.0f} MiB | {tmp / MIB:.1f} MiB | "
                   f"{sum(per) / MIB:.0f} MiB | {p50 * 1000:.0f} ms | {p90 * 1000:.0f} ms | "
                   f"{psutil.virtual_memory().available / GIB:.1f} GiB | {len(held) * OSWORLD_VM_RAM / GIB:.0f} GiB |")
            rows.append(row)
            print(row + (f"  errors: {errors}" if errors else ""), flush=True)
    finally:
        for hd in held:
            try:
                hd.env.close()  # type: ignore[attr-defined]
            except Exception as exc:  # noqa: BLE001 - close the others too
                print(f"(close {hd.kind}: {exc})", file=sys.stderr)
    print(f"\nstopped: {reason}; load average after {[round(x, 2) for x in os.getloadavg()]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
