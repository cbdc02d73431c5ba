"""The embedded forum (django-spirit under gunicorn, SQLite) behind WebArena-v0's ``reddit`` key:
its WebArena-format tasks pass ``guigym tasks check``; a reset swaps the seed database under the
running server; logins survive resets (signed-cookie sessions), so the env logs in once."""
from __future__ import annotations

import json
import re
import sqlite3
import urllib.request

import pytest

from guigym.cli import main
from guigym.envs.web.webarena import sites as S

pytestmark = pytest.mark.skipif(bool(S.EMBEDDED["spirit"].missing()),
                                reason=f"the forum site needs {', '.join(S.EMBEDDED['spirit'].missing())} "
                                       "(pip install guigym[web-sites])")
SUITE = S.EMBEDDED["spirit"].suite


def test_the_forum_suite_passes_tasks_check(tmp_path):
    out = tmp_path / "rows.json"
    code = main(["tasks", "check", "--env", "WebArena-v0", "--embedded", "spirit", "--json", str(out)])
    rows = json.loads(out.read_text())
    assert code == 0, rows
    assert [(r["noop"], r["reference"], r["status"]) for r in rows] == [(0.0, 1.0, "ok")] * len(json.loads(SUITE.read_text()))


def test_reset_restores_the_seed_under_the_running_server_and_the_login_survives_it(tmp_path):
    from guigym.envs.web.webarena.env import WebArenaEnv

    env = WebArenaEnv(config_file=SUITE, embedded=["spirit"])
    try:
        site = env.embedded_sites[0]  # two instances behind one URL (sites/standby.py)
        with sqlite3.connect(site.live_instance.live) as db:
            assert db.execute("select count(*) from spirit_topic_topic").fetchone()[0] >= 300
            assert db.execute("select count(*) from spirit_comment_comment").fetchone()[0] >= 300
        pids = [inst._proc.pid for inst in site.instances]
        login_tasks = [c["task_id"] for c in json.loads(SUITE.read_text()) if c["require_login"]]
        assert len(login_tasks) >= 2
        obs, _ = env.reset(options={"task": f"webarena.{login_tasks[0]}"})
        assert "MarvelsGrandpa17" in obs["a11y"]  # logged in through the UI
        with sqlite3.connect(site.live_instance.live) as db:  # the episode changes the forum (as an agent's post would)
            db.execute("update spirit_topic_topic set title = 'Planted by the episode' where id = 1")
        page = urllib.request.urlopen(f"{site.url}/topic/1/", timeout=10).read().decode()
        assert "Planted by the episode" in page
        obs, _ = env.reset(options={"task": f"webarena.{login_tasks[1]}"})
        page = urllib.request.urlopen(f"{site.url}/topic/1/", timeout=10).read().decode()
        assert "Planted by the episode" not in page and re.search(r"<h1[^>]*>", page)
        assert [inst._proc.pid for inst in site.instances] == pids  # the same server processes
        assert all(inst._proc.poll() is None for inst in site.instances)
        assert "MarvelsGrandpa17" in obs["a11y"] and env.logins.stats["logins"] == 1  # no second login
    finally:
        env.close()
