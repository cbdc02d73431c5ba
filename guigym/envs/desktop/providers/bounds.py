"""Resource bounds of the local desktop's agent zone: what an agent may consume (issue 35).

An RL policy explores at random; one runaway episode (fork bomb, memory hog, ``yes > ~/f``, a
CPU burner) must not starve the host, the trainer or the other desktops. An OSWorld VM bounds
all of this by construction (its docker/qemu provider gives each VM 4 GiB of RAM and a disk
image); the local sandbox bounds the same things here:

==============  =============================================  ====================================
bound           with cgroups (root host, or a writable one)    fallback (rlimits, no cgroup)
==============  =============================================  ====================================
processes       ``pids.max`` of the agent cgroup (threads      ``RLIMIT_NPROC``, counted per user
                count)                                         namespace (the zone's own)
memory          ``memory.limit_in_bytes`` (v1) /               ``RLIMIT_DATA`` per process only
                ``memory.max`` (v2): OOM kills inside the
                zone only
disk            HOME and the zone's /tmp on one tmpfs of       the same when the host is root;
                ``disk_mib`` (root host), the zone's other     else ``RLIMIT_FSIZE`` (per file)
                tmpfs (/dev/shm, /run, /var/tmp) each sized
cpu             ``cpu.cfs_quota_us`` (v1) / ``cpu.max`` (v2):  ``nice`` 10 (yields to the trainer
                at most ``cpu_cores`` cores                    and the host, no hard cap)
open files      ``RLIMIT_NOFILE`` (both)
==============  =============================================  ====================================

Every process an agent can drive enters the bounds through :func:`enter_argv`: the agent zone's
pid 1 (so whatever D-Bus activates), the shell in the terminal and apps the server launches for
a setup (``/setup/launch``, ``open``). Commands the server waits for (setup ``execute``, the
getters) stay outside the agent's bounds, so a zone at its process or memory bound can still be
verified: hitting a bound is the agent's doing and the episode is scored, never lost.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping, Optional, Sequence, Union

from guigym.core.errors import ConfigError

MIB = 1024 * 1024
#: nice value of the agent zone when no cpu cgroup caps it
FALLBACK_NICE = 10


@dataclass(frozen=True)
class DesktopBounds:
    """What one local desktop's agent zone may use (``gym.make("OSWorld-v0", bounds={...})``).

    Defaults are safe for many desktops per node and roomy for OSWorld's apps: a LibreOffice or
    Chromium session runs 100-300 threads and a few hundred MiB (OSWorld's VM has 4 GiB).

    Attributes:
        max_processes: processes + threads of the agent zone (``pids.max`` / ``RLIMIT_NPROC``).
        memory_mib: memory of the agent zone in MiB (cgroup), or of each process (fallback).
        disk_mib: HOME + /tmp of the agent zone in MiB (a size-limited tmpfs).
        cpu_cores: CPU time of the agent zone, in cores (cgroup quota); None: no hard cap.
        open_files: open file descriptors per process (``RLIMIT_NOFILE``).
        enabled: False turns every bound off (today's behaviour before issue 35).
    """

    max_processes: int = 1024
    memory_mib: int = 3072
    disk_mib: int = 2048
    cpu_cores: Optional[float] = 1.0
    open_files: int = 4096
    enabled: bool = True

    def __post_init__(self) -> None:
        for name, low in (("max_processes", 32), ("memory_mib", 64), ("disk_mib", 16), ("open_files", 64)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"bounds.{name}={value!r}: must be an integer >= {low}")
        if self.cpu_cores is not None and (isinstance(self.cpu_cores, bool) or not isinstance(
                self.cpu_cores, (int, float)) or not 0.05 <= float(self.cpu_cores) <= 1024):
            raise ConfigError(f"bounds.cpu_cores={self.cpu_cores!r}: must be a number of cores in "
                              f"[0.05, 1024] or None")

    @classmethod
    def from_any(cls, value: Union["DesktopBounds", Mapping[str, Any], bool, None]) -> "DesktopBounds":
        """``None``/``True``: the defaults; ``False``: off; a mapping: defaults updated with it
        (unknown keys are a ConfigError naming them)."""
        if value is None or value is True:
            return cls()
        if value is False:
            return cls(enabled=False)
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"bounds={value!r}: expected a mapping of {[f.name for f in fields(cls)]}, "
                              f"True/None (defaults) or False (off)")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ConfigError(f"bounds: unknown field(s) {unknown}; known: {sorted(known)}")
        return cls(**dict(value))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def cgroup_limits(bounds: DesktopBounds, version: int) -> dict[str, dict[str, str]]:
    """controller -> {file in the agent cgroup: value} for cgroup ``version`` (1 or 2)."""
    mem = str(bounds.memory_mib * MIB)
    if version == 1:
        out: dict[str, dict[str, str]] = {"pids": {"pids.max": str(bounds.max_processes)},
                                          "memory": {"memory.limit_in_bytes": mem}}
        if bounds.cpu_cores is not None:
            out["cpu"] = {"cpu.cfs_period_us": "100000",
                          "cpu.cfs_quota_us": str(max(1000, int(bounds.cpu_cores * 100000)))}
        return out
    out = {"pids": {"pids.max": str(bounds.max_processes)},
           "memory": {"memory.max": mem, "memory.swap.max": "0"}}
    if bounds.cpu_cores is not None:
        out["cpu"] = {"cpu.max": f"{max(1000, int(bounds.cpu_cores * 100000))} 100000"}
    return out


#: the kernel's CFS weight of nice -20..19 (kernel/sched/core.c, sched_prio_to_weight)
_NICE_WEIGHT = (88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916, 9548, 7620, 6100,
                4904, 3906, 3121, 2501, 1991, 1586, 1277, 1024, 820, 655, 526, 423, 335, 272, 215, 172,
                137, 110, 87, 70, 56, 45, 36, 29, 23, 18, 15)


#: a desktop cgroup weighs as this many processes at guigym's nice value: what a desktop has
#: runnable at once in a reset or a step (sandbox init, server, Xvfb, the terminal's xterm/tmux/
#: shell). One process's weight made a reset 2.5x slower than bounds off on a loaded box while
#: using less CPU (docs/benchmarks.md, "resource bounds on vs off", 2026-11-28 20:02 UTC).
DESKTOP_WEIGHT_PROCS = 4


def desktop_cpu_weight(version: int, nice: Optional[int] = None,
                       procs: int = DESKTOP_WEIGHT_PROCS) -> dict[str, dict[str, str]]:
    """The desktop cgroup's CPU weight: that of ``procs`` processes at this process's nice value.

    A new cgroup competes with its siblings as one entity of weight 1024 (v1 ``cpu.shares``) or
    100 (v2 ``cpu.weight``), whatever the nice value of the processes in it; without this a
    desktop started under ``nice -n 19`` would get a nice-0 share and outrun the trainer. With
    bounds off each of its processes competed on its own; ``procs`` gives the desktop the share
    its few busy processes had then, and caps what a runaway agent (a fork flood of spinners)
    can take at that many processes' share, where without the cgroup it took one per spinner."""
    n = os.nice(0) if nice is None else nice
    weight = _NICE_WEIGHT[max(-20, min(19, n)) + 20] * procs
    if version == 1:
        return {"cpu": {"cpu.shares": str(max(2, weight))}}
    return {"cpu": {"cpu.weight": str(max(1, min(10000, round(weight * 100 / 1024))))}}


def rlimit_args(bounds: DesktopBounds, cgroup_ctrls: Sequence[str], disk_quota: bool) -> list[str]:
    """``prlimit`` options for the agent zone: open files always; processes, per-process
    memory and file size when no cgroup / size-limited filesystem bounds them."""
    args = [f"--nofile={bounds.open_files}"]
    if "pids" not in cgroup_ctrls:
        args.append(f"--nproc={bounds.max_processes}")
    if "memory" not in cgroup_ctrls:
        args.append(f"--data={bounds.memory_mib * MIB}")
    if not disk_quota:
        args.append(f"--fsize={bounds.disk_mib * MIB}")
    return args


#: argv head that moves the shell into each cgroup.procs given, then execs the rest
_ENTER_SH = ('n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; '
             'exec "$@"')


def enter_argv(procs_files: Sequence[str], prlimit: Sequence[str], nice: Optional[int]) -> list[str]:
    """argv prefix that puts the command after it inside the agent's bounds: joins the agent
    cgroups (paths as the infra zone sees them; a failed join refuses to run: exit 125), lowers
    its rlimits with ``prlimit`` and its priority with ``nice``. Each step is an ``exec``, so the
    command keeps the pid the caller started."""
    argv: list[str] = []
    if procs_files:
        argv += ["/bin/sh", "-c", _ENTER_SH, "sh", str(len(procs_files)), *procs_files]
    if prlimit:
        argv += ["prlimit", *prlimit, "--"]
    if nice:
        argv += ["nice", "-n", str(nice), "--"]
    return argv


def describe(bounds: DesktopBounds, cgroup_version: int, cgroup_ctrls: Sequence[str], disk_quota: bool) -> dict[str, str]:
    """bound -> how it is enforced here (what ``guigym doctor`` and ``desktop_info`` show)."""
    if not bounds.enabled:
        return {k: "off (bounds=False)" for k in ("processes", "memory", "disk", "cpu", "open_files")}
    cg = f"cgroup v{cgroup_version}"
    out = {
        "processes": (f"{cg} pids.max={bounds.max_processes}" if "pids" in cgroup_ctrls
                      else f"RLIMIT_NPROC={bounds.max_processes} (per zone user namespace)"),
        "memory": (f"{cg} memory={bounds.memory_mib} MiB" if "memory" in cgroup_ctrls
                   else f"RLIMIT_DATA={bounds.memory_mib} MiB per process only (no memory cgroup)"),
        "disk": (f"tmpfs size={bounds.disk_mib} MiB for HOME + /tmp" if disk_quota
                 else f"RLIMIT_FSIZE={bounds.disk_mib} MiB per file only (a quota needs root)"),
        "cpu": ("no cap (cpu_cores=None)" if bounds.cpu_cores is None else
                f"{cg} quota {bounds.cpu_cores:g} core(s)" if "cpu" in cgroup_ctrls
                else f"nice {FALLBACK_NICE} only (no cpu cgroup)"),
        "open_files": f"RLIMIT_NOFILE={bounds.open_files}",
    }
    return out


def can_mount_tmpfs() -> bool:
    """True when this process may mount a size-limited tmpfs for HOME + /tmp (root)."""
    return os.geteuid() == 0


def enforcement_here(bounds: Optional[DesktopBounds] = None) -> tuple[bool, dict[str, str]]:
    """(every bound fully enforced, bound -> how) on this host, without changing anything
    (``guigym doctor``)."""
    from guigym.envs.desktop.providers import cgroups

    b = bounds or DesktopBounds()
    host = cgroups.detect(enable=False)
    ctrls = sorted(host.dirs)
    how = describe(b, host.version, ctrls, can_mount_tmpfs())
    full = set(ctrls) >= set(cgroups.CONTROLLERS) and can_mount_tmpfs()
    if host.problem:
        how["cgroups"] = host.problem
    return full, how
