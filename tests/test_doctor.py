"""``guigym doctor``: each check reports what it found and how to fix a miss; the exit status
follows what the chosen targets require (a miss of something optional is only a warning)."""
from __future__ import annotations

import json
import os

import pytest

from guigym import doctor as D
from guigym.cli import main


def _stub(monkeypatch, results: dict[str, bool]) -> None:
    checks = {name: D.Check(name, (lambda ok=ok, name=name: (ok, f"{name} probed")), f"fix {name}")
              for name, ok in results.items()}
    monkeypatch.setattr(D, "CHECKS", checks)


def test_a_required_miss_fails_and_is_named_an_optional_one_only_warns(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(D, "NEEDS", {"A": (("x",), ("y",)), "B": (("z",), ())})
    _stub(monkeypatch, {"x": True, "y": False, "z": False})
    out = tmp_path / "r.json"
    assert main(["doctor", "--env", "A", "--json", str(out)]) == 0       # y is optional for A: a warning
    rows = {r["name"]: r for r in json.loads(out.read_text())}
    assert rows["y"]["status"] == "warn" and rows["y"]["hint"] == "fix y"
    assert rows["x"] == {"name": "x", "status": "ok", "detail": "x probed", "hint": ""}
    assert rows["z"]["status"] == "warn"                                  # not needed by A at all
    assert main(["doctor", "--env", "A", "--env", "B"]) == 1             # B requires z
    assert "missing for A, B: z" in capsys.readouterr().err
    assert main(["doctor", "--env", "B", "--only", "--json", str(out)]) == 1
    assert [r["name"] for r in json.loads(out.read_text())] == ["z"]


def test_real_probes_report_what_is_there_and_what_is_not(monkeypatch, tmp_path):
    ok, detail = D.program("sh", version_arg=None)()
    assert ok and os.path.basename(detail) == "sh" and os.access(detail, os.X_OK)
    ok, detail = D.program("no-such-program-guigym")()
    assert not ok and "no-such-program-guigym" in detail
    ok, detail = D.module("json")()
    assert ok and detail.startswith("json")
    ok, detail = D.module("no_such_module_guigym")()
    assert not ok and "no_such_module_guigym" in detail
    monkeypatch.delenv("GUIGYM_PG_URL", raising=False)
    monkeypatch.delenv("GUIGYM_TEST_PG_URL", raising=False)
    assert D.postgres() == (False, "no GUIGYM_PG_URL set (SQLite is the default DataStore; PostgreSQL is for "
                                   "multi-node runs)")
    monkeypatch.setenv("GUIGYM_PG_URL", "postgresql+psycopg://nobody:x@127.0.0.1:1/none")
    ok, detail = D.postgres()
    assert not ok and detail.startswith("cannot connect to GUIGYM_PG_URL")


def test_every_target_names_only_known_checks():
    for target, (required, optional) in D.NEEDS.items():
        assert set(required) | set(optional) <= set(D.CHECKS), target


@pytest.mark.skipif(not os.path.exists("/usr/bin/chromium"), reason="needs Debian's chromium")
def test_the_chromium_check_finds_the_browser_the_envs_launch():
    from guigym.envs.web.browser import find_chromium

    ok, detail = D.chromium()
    assert ok and detail.startswith(find_chromium() or "Playwright's own")


def test_doctor_says_how_the_desktop_bounds_are_enforced(monkeypatch):
    """Issue 35: without a usable cgroup or root, the check warns and names the rlimit fallback;
    with every controller and root it is ok and names the cgroup files."""
    from pathlib import Path

    from guigym.envs.desktop.providers import bounds as B, cgroups as C

    monkeypatch.setattr(C, "detect", lambda enable=True: C.CgroupHost(0, {}, "no cgroup file system mounted"))
    monkeypatch.setattr(B, "can_mount_tmpfs", lambda: False)
    ok, detail = D.desktop_bounds()
    assert not ok and "RLIMIT_NPROC" in detail and "per file only" in detail and "no cgroup" in detail
    dirs = {c: Path("/sys/fs/cgroup") / c for c in C.CONTROLLERS}
    monkeypatch.setattr(C, "detect", lambda enable=True: C.CgroupHost(1, dirs, ""))
    monkeypatch.setattr(B, "can_mount_tmpfs", lambda: True)
    ok, detail = D.desktop_bounds()
    assert ok and "cgroup v1 pids.max" in detail and "tmpfs size" in detail
