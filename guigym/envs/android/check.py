"""``guigym tasks check --env AndroidWorld-v0``: the causation check of the AndroidWorld task classes.

    guigym tasks check --env AndroidWorld-v0 [--task NAME ...] [--seed N] [--serial S] [--json PATH]

Per task (one instance, params from ``--seed``), on a device reached through the real adb server:

* no-op: ``initialize_task``, then ``is_successful`` with no answer -> must score 0 (1 for the
  tasks whose start state is their goal, AndroidWorld's ``*Verify`` tasks);
* reference: :meth:`~guigym.envs.android.androidworld.base.AndroidWorldTask.reference` writes the
  end state an agent doing the task would leave (settings, app database rows, files, provider
  rows) over adb and returns the answer, if any -> must score 1.

The device is a fresh :class:`~guigym.envs.android.standin_apps.AppStandin` per task (a named
stand-in seeded with the apps' database schemas and folders, behind a private adb server this
command starts), or ``--serial`` (a real emulator with AndroidWorld's apps, rooted as AndroidWorld
requires; every task's setup overwrites that app's state). A task without a reference end state is
listed as ``unchecked`` with the reason. Exit status: 0 all as expected; 1 any mismatch; 2 no
mismatch but some task could not be run (infrastructure).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator, Optional, Sequence

from guigym.core.errors import EnvInfraError, GuigymError
from guigym.envs.android.device import AndroidDevice
from guigym.envs.check_table import exit_code, fmt_score


@dataclass
class Row:
    """One task's outcome: ``status`` is ok, mismatch, unchecked (no reference, ``reason``) or infra."""

    task: str
    status: str
    noop: Optional[float] = None
    reference: Optional[float] = None
    expected_noop: float = 0.0
    reason: str = ""


def check_task(name: str, device: AndroidDevice, seed: int = 0, cls: Any = None) -> Row:
    """The no-op and reference scores of task ``name`` (its registered class, or ``cls``) on
    ``device`` (see the module docstring)."""
    from guigym.envs.android.androidworld import TASKS

    cls = cls or TASKS.get(name)
    task = cls(cls.generate_random_params(seed))
    expected = 1.0 if cls.start_is_goal() else 0.0
    try:
        task.initialize_task(device)
        noop = float(task.is_successful(device, answer=None))
        try:
            answer = task.reference(device)
        except NotImplementedError as exc:
            return Row(name, "unchecked", noop, None, expected, str(exc) or cls.no_reference)
        ref = float(task.is_successful(device, answer=answer))
    except (EnvInfraError, OSError) as exc:
        return Row(name, "infra", reason=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    finally:
        if task.initialized:
            try:
                task.tear_down(device)
            except (GuigymError, OSError):
                pass  # the next task's setup starts from its own state anyway
    ok = abs(noop - expected) < 1e-9 and abs(ref - 1.0) < 1e-9
    why = "" if ok else (f"no-op scored {noop:g} (expected {expected:g})" if abs(noop - expected) >= 1e-9
                         else f"reference scored {ref:g} (expected 1)")
    return Row(name, "ok" if ok else "mismatch", noop, ref, expected, why)


def run_checks(names: Sequence[str], device_for: Callable[[str], Any], seed: int = 0,
               out: Any = None) -> list[Row]:
    """:func:`check_task` for each name; ``device_for(name)`` is a context manager yielding the
    device for that task. One line per task goes to ``out`` as it ends."""
    rows = []
    for name in names:
        try:
            with device_for(name) as device:
                row = check_task(name, device, seed)
        except (EnvInfraError, OSError) as exc:
            row = Row(name, "infra", reason=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        rows.append(row)
        if out is not None:
            print(f"{row.task:45s} no-op {fmt_score(row.noop):>3s} (want {row.expected_noop:g})  "
                  f"reference {fmt_score(row.reference):>3s}  {row.status}{'  ' + row.reason if row.reason else ''}",
                  file=out, flush=True)
    return rows


def counts(rows: Sequence[Row]) -> dict[str, int]:
    """Number of rows per status (ok, mismatch, unchecked, infra) and in total."""
    out = {s: sum(r.status == s for r in rows) for s in ("ok", "mismatch", "unchecked", "infra")}
    out["total"] = len(rows)
    return out


# ---- devices -------------------------------------------------------------------------------------
@contextmanager
def private_adb_server() -> Iterator[str]:
    """A fresh adb server on a free loopback port (the user's server on 5037 is untouched); yields
    the adb program and points ``ANDROID_ADB_SERVER_PORT`` at it meanwhile."""
    from guigym.envs.android.providers import default_adb

    adb = default_adb()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    old = os.environ.get("ANDROID_ADB_SERVER_PORT")
    os.environ["ANDROID_ADB_SERVER_PORT"] = str(port)
    try:
        try:
            started = subprocess.run([adb, "-P", str(port), "start-server"], capture_output=True, text=True,
                                     timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EnvInfraError(f"cannot start an adb server ({adb}): {exc}") from exc
        if started.returncode != 0:
            raise EnvInfraError(f"adb start-server failed: {started.stderr.strip()}")
        yield adb
    finally:
        subprocess.run([adb, "-P", str(port), "kill-server"], capture_output=True, timeout=60)
        if old is None:
            os.environ.pop("ANDROID_ADB_SERVER_PORT", None)
        else:
            os.environ["ANDROID_ADB_SERVER_PORT"] = old


@contextmanager
def standin_device(name: str = "") -> Iterator[AndroidDevice]:
    """A fresh :class:`AppStandin`, attached to the current adb server, as an AdbDevice."""
    from guigym.envs.android.controller import AdbDevice
    from guigym.envs.android.standin_apps import AppStandin

    stand = AppStandin().start()
    dev: Optional[Any] = None
    try:
        dev = AdbDevice(stand.serial, connect=True, retry_delay_s=0.0)
        yield dev
    finally:
        stand.stop()
        if dev is not None:
            try:
                dev.client.disconnect(stand.serial)
            except Exception:  # noqa: BLE001 - already gone
                pass


def main(argv: Optional[Sequence[str]] = None) -> int:
    from guigym.envs.android.androidworld import TASKS

    p = argparse.ArgumentParser(prog="guigym tasks check --env AndroidWorld-v0", description=__doc__.split("\n")[0])
    p.add_argument("--task", action="append", default=[], help="AndroidWorld task name (repeatable; default: all)")
    p.add_argument("--seed", type=int, default=0, help="the instance's seed (default 0)")
    p.add_argument("--serial", default=None, help="check on this adb device instead of the stand-in")
    p.add_argument("--json", default=None, help="also write the rows as JSON here")
    args = p.parse_args(argv)
    names = args.task or TASKS.names()
    unknown = [n for n in names if n not in TASKS.names()]
    if unknown:
        print(f"error: --task: unknown AndroidWorld task(s) {', '.join(unknown)}", file=sys.stderr)
        return 2

    @contextmanager
    def real(name: str) -> Iterator[AndroidDevice]:
        from guigym.envs.android.controller import AdbDevice

        yield AdbDevice(args.serial)

    try:
        if args.serial:
            rows = run_checks(names, real, args.seed, out=sys.stdout)
        else:
            with private_adb_server():
                rows = run_checks(names, standin_device, args.seed, out=sys.stdout)
    except EnvInfraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    c = counts(rows)
    print(f"{c['ok']}/{c['total']} tasks as expected (no-op {'/'.join(['0', '1 for *Verify'])}, reference 1); "
          f"{c['mismatch']} mismatch, {c['unchecked']} unchecked (no reference end state), {c['infra']} infra")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump([asdict(r) for r in rows], f, indent=1)
    return exit_code([r.status for r in rows])
