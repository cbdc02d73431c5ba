"""The local desktop's resource bounds without a desktop (issue 35): the ``bounds`` argument, what
the host can enforce, and the argv prefix every agent-zone process starts through.

The attacks on a real desktop are in tests/security/test_desktop_bounds.py.
"""
from __future__ import annotations

import os
import subprocess

import pytest

from guigym.core.errors import ConfigError
from guigym.envs.desktop.env import make_provider
from guigym.envs.desktop.providers.bounds import (
    DesktopBounds, cgroup_limits, describe, enter_argv, rlimit_args,
)


def test_bounds_argument_forms_and_errors_name_the_field():
    assert DesktopBounds.from_any(None) == DesktopBounds() == DesktopBounds.from_any(True)
    assert DesktopBounds.from_any(False).enabled is False
    assert DesktopBounds.from_any({"memory_mib": 256}).memory_mib == 256
    with pytest.raises(ConfigError, match="memry_mib"):
        DesktopBounds.from_any({"memry_mib": 256})
    with pytest.raises(ConfigError, match="bounds.max_processes"):
        DesktopBounds.from_any({"max_processes": 3})
    with pytest.raises(ConfigError, match="bounds.cpu_cores"):
        DesktopBounds.from_any({"cpu_cores": 0})
    with pytest.raises(ConfigError, match="bounds="):
        DesktopBounds.from_any("small")


def test_bounds_reach_only_the_local_provider():
    p = make_provider("local", False, {}, {"disk_mib": 64})
    assert p.bounds.disk_mib == 64 and p.bounds.memory_mib == DesktopBounds().memory_mib
    with pytest.raises(ConfigError, match="bounds: only the local provider"):
        make_provider("remote", False, {"url": "http://127.0.0.1:5000"}, {"disk_mib": 64})
    with pytest.raises(ConfigError, match="both"):
        make_provider("local", False, {"bounds": False}, {"disk_mib": 64})


def test_cgroup_files_carry_the_bounds():
    b = DesktopBounds(max_processes=64, memory_mib=256, cpu_cores=0.25)
    v1, v2 = cgroup_limits(b, 1), cgroup_limits(b, 2)
    assert v1["pids"]["pids.max"] == v2["pids"]["pids.max"] == "64"
    assert v1["memory"]["memory.limit_in_bytes"] == v2["memory"]["memory.max"] == str(256 << 20)
    assert int(v1["cpu"]["cpu.cfs_quota_us"]) / int(v1["cpu"]["cpu.cfs_period_us"]) == pytest.approx(0.25)
    quota, period = map(int, v2["cpu"]["cpu.max"].split())
    assert quota / period == pytest.approx(0.25)
    assert "cpu" not in cgroup_limits(DesktopBounds(cpu_cores=None), 1)


def test_without_cgroups_the_fallback_is_rlimits_and_says_so():
    b = DesktopBounds(max_processes=64, memory_mib=256, disk_mib=64, open_files=128)
    args = rlimit_args(b, [], disk_quota=False)
    assert {"--nofile=128", "--nproc=64", f"--data={256 << 20}", f"--fsize={64 << 20}"} <= set(args)
    assert rlimit_args(b, ["pids", "memory", "cpu"], disk_quota=True) == ["--nofile=128"]
    how = describe(b, 0, [], False)
    assert "RLIMIT_NPROC" in how["processes"] and "per process only" in how["memory"]
    assert "per file only" in how["disk"] and "nice" in how["cpu"]
    assert "cgroup v1" in describe(b, 1, ["pids", "memory", "cpu"], True)["processes"]
    assert all("off" in v for v in describe(DesktopBounds(enabled=False), 1, ["pids"], True).values())


def test_enter_argv_applies_rlimits_and_nice_to_the_command_it_runs():
    b = DesktopBounds(max_processes=64, memory_mib=256, disk_mib=64, open_files=128)
    argv = enter_argv([], rlimit_args(b, [], disk_quota=False), 10)
    out = subprocess.run([*argv, "sh", "-c", "ulimit -n; ulimit -f; cat /proc/self/stat"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    nofile, fsize, stat = out.stdout.splitlines()
    assert int(nofile) == 128
    assert int(fsize) * 512 == 64 << 20  # sh reports 512-byte blocks
    nice = int(stat[stat.rfind(")") + 2:].split()[16])
    assert nice >= min(19, os.nice(0) + 10)


def test_enter_argv_refuses_to_run_when_it_cannot_join_the_cgroup(tmp_path):
    argv = enter_argv([str(tmp_path / "missing" / "cgroup.procs")], [], None)
    out = subprocess.run([*argv, "sh", "-c", "echo ran"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 125 and "ran" not in out.stdout
    procs = tmp_path / "cgroup.procs"
    procs.write_text("")
    out = subprocess.run([*enter_argv([str(procs)], [], None), "sh", "-c", "echo $$"], capture_output=True,
                         text=True, timeout=30)
    assert out.stdout.strip() == procs.read_text().strip()  # the joining shell exec'd the command


def test_the_desktop_cgroup_weighs_like_a_few_processes_at_our_nice_value():
    """A new cgroup competes as one nice-0 entity (cpu.shares 1024 / cpu.weight 100, the kernel's
    defaults) unless told otherwise: a desktop started under ``nice -n 19`` must not get more than
    its few busy processes would have had at nice 19 (kernel weight 15 each)."""
    from guigym.envs.desktop.providers.bounds import desktop_cpu_weight

    assert desktop_cpu_weight(1, 0, procs=1) == {"cpu": {"cpu.shares": "1024"}}
    assert desktop_cpu_weight(2, 0, procs=1) == {"cpu": {"cpu.weight": "100"}}
    assert desktop_cpu_weight(1, 19, procs=4) == {"cpu": {"cpu.shares": "60"}}
    v1 = [int(desktop_cpu_weight(1, n)["cpu"]["cpu.shares"]) for n in range(-5, 20)]
    assert v1 == sorted(v1, reverse=True) and v1[-1] * 10 < 1024  # a nice-19 desktop << a nice-0 trainer
    assert int(desktop_cpu_weight(2, 19)["cpu"]["cpu.weight"]) >= 1
