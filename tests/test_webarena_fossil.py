"""The embedded Fossil site (Debian ``fossil``) behind WebArena-v0: its WebArena-format tasks pass
``guigym tasks check`` (no-op 0, reference 1), and every reset puts the seeded repository back by
swapping its SQLite file under the running server (no restart)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import guigym
from guigym.cli import main

pytestmark = pytest.mark.skipif(shutil.which("fossil") is None,
                                reason="the Fossil site needs the 'fossil' program (Debian package, scripts/install.sh)")
SUITE = Path(guigym.__file__).parent / "envs" / "web" / "webarena" / "suite" / "fossil" / "tasks.json"


def test_the_fossil_suite_passes_tasks_check(tmp_path):
    out = tmp_path / "rows.json"
    code = main(["tasks", "check", "--env", "WebArena-v0", "--tasks", str(SUITE), "--embedded", "fossil",
                 "--json", str(out)])
    rows = json.loads(out.read_text())
    assert code == 0, rows
    assert [(r["noop"], r["reference"], r["status"]) for r in rows] == [(0.0, 1.0, "ok")] * len(json.loads(SUITE.read_text()))
    # the two login tasks run one after the other: the second logs in again after the reset logged it out
    assert {"webarena.1015", "webarena.1016"} <= {r["task"] for r in rows}


def test_reset_restores_the_seeded_repository_without_restarting_the_server(tmp_path):
    from guigym.envs.web.webarena.env import WebArenaEnv
    from guigym.envs.web.webarena.sites.fossil import FossilSite

    site = FossilSite(tmp_path / "fossil")
    site.start()
    env = WebArenaEnv(config_file=SUITE, task_ids=[1001], embedded_sites=[site])
    try:
        pid = site._proc.pid
        obs, _ = env.reset(options={"task": "webarena.1001"})
        assert "Slow search on large repositories" in obs["a11y"]
        # the repository changes while the server runs (as an agent's edits would change it)
        subprocess.run([site.binary, "ticket", "add", "title", "Planted by the episode", "status", "Open",
                        "-R", str(site.live)], env=site._env(), check=True, capture_output=True)
        obs, *_ = env.step(f"goto [{site.url}/rptview?rn=1]")
        assert "Planted by the episode" in obs["a11y"]
        obs, _ = env.reset(options={"task": "webarena.1001"})
        assert "Planted by the episode" not in obs["a11y"] and "Slow search on large repositories" in obs["a11y"]
        assert site._proc.pid == pid and site._proc.poll() is None  # same server process
        print(f"site reset {1000 * env.timings['site_reset_s']:.1f} ms")
    finally:
        env.close()
        site.close()
    assert site._proc is None
