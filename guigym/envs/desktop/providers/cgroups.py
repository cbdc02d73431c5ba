"""Control groups for one local desktop: where they can be made here, making and removing them.

Layout (the same on cgroup v1 and v2), made under the cgroup this process already runs in, so
whatever bounds its caller has still hold for the desktop (bounds nest)::

    <own cgroup>/guigym-desktop-<pid>-<display>-<random>/   one desktop
        infra/   the sandbox as started (Xvfb, the in-desktop server, tmux, xterm)
        agent/   every process an agent can drive: limits are set here only

On cgroup v1 each controller (``pids``, ``memory``, ``cpu``) is a hierarchy of its own, so the
layout exists once per controller; on v2 once, with the controllers enabled in the desktop
directory's ``cgroup.subtree_control``. The sandbox runs as an unprivileged uid and moves its
agent-zone processes into ``agent/`` itself (``echo $$ > agent/cgroup.procs``), so that file is
given to the sandbox uid; on v2 the writer also needs the common ancestor's ``cgroup.procs``
(cgroup-v2.rst, "Delegation Containment"), which is the desktop directory's.

Creating directories here needs root (or a delegated, writable cgroup): :func:`detect` says which
controllers are usable and why not, and callers fall back to rlimits (see :mod:`.bounds`).
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

log = logging.getLogger(__name__)

CONTROLLERS = ("pids", "memory", "cpu")
PREFIX = "guigym-desktop-"


@dataclass
class CgroupHost:
    """What this host offers: the version and, per usable controller, the directory of this
    process's own cgroup in that controller's hierarchy (v2: the same directory for all)."""

    version: int = 0  # 0: none usable
    dirs: dict[str, Path] = field(default_factory=dict)
    problem: str = ""  # why a controller is missing (empty when all are usable)


def _mountinfo() -> list[tuple[str, str, str, str]]:
    """(mount root, mount point, fs type, super options) of every mount."""
    rows = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            parts, rparts = left.split(), right.split()
            if len(parts) >= 5 and len(rparts) >= 3:
                rows.append((parts[3], parts[4], rparts[0], rparts[2]))
    return rows


def _own_paths() -> dict[str, str]:
    """controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    out: dict[str, str] = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            hid, _, rest = line.rstrip("\n").partition(":")
            ctrls, _, path = rest.partition(":")
            if hid == "0" and not ctrls:
                out[""] = path
            for c in ctrls.split(","):
                if c:
                    out[c] = path
    return out


def _join(mount_root: str, mount_point: str, own: str) -> Optional[Path]:
    """The directory of cgroup ``own`` under a mount of ``mount_root`` at ``mount_point``."""
    try:
        rel = os.path.relpath(own, mount_root)
    except ValueError:
        return None
    if rel.startswith(".."):
        return None  # our cgroup is outside what this mount shows
    return Path(mount_point) / ("" if rel == "." else rel)


def detect(enable: bool = True) -> CgroupHost:
    """The controllers this process can make desktop cgroups with (v1 preferred per controller
    when the host mounts it as v1: that is where the controller is then attached). On v2 the
    controllers are enabled in our cgroup's ``subtree_control`` (``enable=False``: only checked,
    for ``guigym doctor``)."""
    try:
        mounts, own = _mountinfo(), _own_paths()
    except OSError as exc:
        return CgroupHost(problem=f"cannot read /proc/self: {exc}")
    v1: dict[str, Path] = {}
    v2_dir: Optional[Path] = None
    for root, point, fstype, opts in mounts:
        if fstype == "cgroup":
            for c in CONTROLLERS:
                if c in opts.split(",") and c in own and c not in v1:
                    d = _join(root, point, own[c])
                    if d is not None and d.is_dir():
                        v1[c] = d
        elif fstype == "cgroup2" and "" in own and v2_dir is None:
            v2_dir = _join(root, point, own[""])
    problems = []
    if v1:
        usable = {c: d for c, d in v1.items() if os.access(d, os.W_OK)}
        missing = [c for c in CONTROLLERS if c not in usable]
        if missing:
            problems.append(f"cgroup v1: {', '.join(missing)} not mounted or not writable by uid {os.geteuid()}")
        if usable:
            return CgroupHost(1, usable, "; ".join(problems))
    if v2_dir is not None:
        try:
            avail = (v2_dir / "cgroup.controllers").read_text().split()
        except OSError:
            avail = []
        wanted = [c for c in CONTROLLERS if c in avail]
        if wanted and os.access(v2_dir, os.W_OK):
            enabled = set((v2_dir / "cgroup.subtree_control").read_text().split())
            try:
                missing_ctl = [c for c in wanted if c not in enabled]
                if missing_ctl and enable:
                    (v2_dir / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in missing_ctl))
            except OSError as exc:  # "no internal processes": our own cgroup holds processes
                problems.append(f"cgroup v2: cannot enable {', '.join(wanted)} below {v2_dir}: {exc.strerror}")
            else:
                missing = [c for c in CONTROLLERS if c not in wanted]
                if missing:
                    problems.append(f"cgroup v2: {', '.join(missing)} not available in {v2_dir}")
                return CgroupHost(2, {c: v2_dir for c in wanted}, "; ".join(problems))
        else:
            problems.append(f"cgroup v2: {v2_dir} not writable by uid {os.geteuid()} or has no "
                            f"{'/'.join(CONTROLLERS)} controller")
    return CgroupHost(0, {}, "; ".join(problems) or "no cgroup file system mounted")


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


class DesktopCgroups:
    """The cgroups of one desktop (see the module docstring); :meth:`remove` undoes them.

    ``limits``: controller file name -> value written in ``agent/`` (``pids.max``,
    ``memory.limit_in_bytes`` or ``memory.max``, ``cpu.cfs_quota_us`` or ``cpu.max``, ...); a
    file the kernel lacks is skipped and named in :attr:`skipped`.
    """

    def __init__(self, host: CgroupHost, name: str, owner: tuple[int, int], limits: dict[str, dict[str, str]],
                 desktop_limits: Optional[dict[str, dict[str, str]]] = None) -> None:
        self.host = host
        self.name = name
        self.desktops: list[Path] = []
        self.skipped: list[str] = []
        sweep_stale(host)
        try:
            for base in sorted(set(host.dirs.values())):
                desk = base / name
                desk.mkdir()
                self.desktops.append(desk)
                if host.version == 2:
                    ctrls = [c for c, d in host.dirs.items() if d == base]
                    _write(desk / "cgroup.subtree_control", " ".join(f"+{c}" for c in ctrls))
                for sub in ("infra", "agent"):
                    (desk / sub).mkdir()
                files = [desk / "agent" / "cgroup.procs"]
                if host.version == 1:
                    files.append(desk / "agent" / "tasks")
                else:
                    files.append(desk / "cgroup.procs")  # the common ancestor (delegation rule)
                for f in files:
                    os.chown(f, owner[0], owner[1])
            for sub, table in (("agent", limits), ("", desktop_limits or {})):
                self._write_limits(sub, table)
        except BaseException:
            self.remove()
            raise

    def _write_limits(self, sub: str, table: dict[str, dict[str, str]]) -> None:
        """Write ``table`` (controller -> {file: value}) into ``sub`` of the desktop dir."""
        for ctrl, values in table.items():
            base = self.host.dirs.get(ctrl)
            if base is None:
                continue
            for fname, value in values.items():
                target = base / self.name / sub / fname if sub else base / self.name / fname
                if not target.exists():
                    self.skipped.append(fname)
                    continue
                _write(target, value)

    def procs(self, sub: str) -> list[str]:
        """``cgroup.procs`` of ``sub`` (``infra``/``agent``), one per hierarchy (host paths)."""
        return [str(d / sub / "cgroup.procs") for d in self.desktops]

    def agent_dirs(self) -> list[Path]:
        return [d / "agent" for d in self.desktops]

    def read(self, ctrl: str, fname: str) -> Optional[str]:
        """A file of ``agent/`` in ``ctrl``'s hierarchy (e.g. ``pids.events``), or None."""
        base = self.host.dirs.get(ctrl)
        try:
            return (base / self.name / "agent" / fname).read_text() if base else None
        except OSError:
            return None

    def remove(self, timeout: float = 5.0) -> bool:
        """rmdir the desktop's cgroups once their processes are gone; False when some stayed."""
        ok = True
        for desk in self.desktops:
            ok = _rmdir_tree(desk, timeout) and ok
        self.desktops = [d for d in self.desktops if d.exists()]
        return ok


def _rmdir_tree(desk: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            for sub in ("agent", "infra"):
                if (desk / sub).exists():
                    os.rmdir(desk / sub)
            if desk.exists():
                os.rmdir(desk)
            return True
        except OSError as exc:  # EBUSY: a process is still exiting
            if time.monotonic() > deadline:
                log.warning("cannot remove cgroup %s: %s", desk, exc)
                return False
            time.sleep(0.02)


def sweep_stale(host: CgroupHost) -> None:
    """Remove desktop cgroups left by processes that died without cleaning up (empty ones)."""
    for base in set(host.dirs.values()):
        try:
            names = [p for p in base.iterdir() if p.name.startswith(PREFIX)]
        except OSError:
            continue
        for desk in names:
            try:
                pid = int(desk.name[len(PREFIX):].split("-")[0])
            except ValueError:
                continue
            if not Path(f"/proc/{pid}").exists():
                _rmdir_tree(desk, 0.0)
