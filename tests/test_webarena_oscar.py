"""The embedded shop (django-oscar under two gunicorn servers, SQLite) behind WebArena-v0's
``shopping`` and ``shopping_admin`` keys: its WebArena-format tasks pass ``guigym tasks check``;
both logins live side by side in one storage state (distinct cookie names on one host); a reset
swaps the seed database under the running servers and survives logins."""
from __future__ import annotations

import json
import re
import sqlite3
import urllib.request

import pytest

from guigym.cli import main
from guigym.envs.web.webarena import sites as S

pytestmark = pytest.mark.skipif(bool(S.EMBEDDED["oscar"].missing()),
                                reason=f"the shop site needs {', '.join(S.EMBEDDED['oscar'].missing())} "
                                       "(pip install guigym[web-sites])")
SUITE = S.EMBEDDED["oscar"].suite


def test_the_shop_suite_passes_tasks_check(tmp_path):
    out = tmp_path / "rows.json"
    code = main(["tasks", "check", "--env", "WebArena-v0", "--embedded", "oscar", "--json", str(out)])
    rows = json.loads(out.read_text())
    assert code == 0, rows
    tasks = json.loads(SUITE.read_text())
    assert len(tasks) >= 15 and {s for t in tasks for s in t["sites"]} == {"shopping", "shopping_admin"}
    assert [(r["noop"], r["reference"], r["status"]) for r in rows] == [(0.0, 1.0, "ok")] * len(tasks)


def test_both_logins_coexist_and_a_reset_restores_the_shop_under_the_running_servers():
    from guigym.envs.web.webarena.env import WebArenaEnv

    env = WebArenaEnv(config_file=SUITE, embedded=["oscar"])
    try:
        site = env.embedded_sites[0]
        shop = site.live_instance  # the env runs the shop as two instances behind its URLs (sites/standby.py)
        assert set(env.urls) >= {"shopping", "shopping_admin"}
        assert env.urls["shopping"].split(":")[-1] != env.urls["shopping_admin"].split(":")[-1].split("/")[0]
        with sqlite3.connect(shop.live) as db:
            assert db.execute("select count(*) from catalogue_product").fetchone()[0] >= 1000
            assert db.execute("select count(*) from reviews_productreview").fetchone()[0] >= 300
            db.execute("update catalogue_product set title = 'Planted by the episode' where id = 1")
        page = urllib.request.urlopen(f"{site.url}/catalogue/", timeout=20).read().decode()
        assert "Planted by the episode" in page  # search results load their products from the live file
        # every script comes from the shop (WhiteNoise), none from a CDN the browser may not reach
        scripts = re.findall(r'<script[^>]*\ssrc="([^"]+)"', page)
        assert scripts and all(src.startswith("/static/") for src in scripts), scripts
        assert any("jquery" in src for src in scripts)
        with urllib.request.urlopen(f"{site.url}{scripts[0]}", timeout=20) as r:
            assert r.status == 200 and len(r.read()) > 1000
        pids = {(i, r): p.pid for i, inst in enumerate(site.instances) for r, p in inst._procs.items()}
        login_tasks = [c["task_id"] for c in json.loads(SUITE.read_text())
                       if c["require_login"] and c["sites"] == ["shopping"]]
        obs, _ = env.reset(options={"task": f"webarena.{login_tasks[0]}"})
        assert "Logout" in obs["a11y"]  # the customer is logged in (sessions are signed cookies)
        page = urllib.request.urlopen(f"{site.url}/catalogue/", timeout=20).read().decode()
        assert "Planted by the episode" not in page
        assert {(i, r): p.pid for i, inst in enumerate(site.instances) for r, p in inst._procs.items()} == pids
        assert all(p.poll() is None for inst in site.instances for p in inst._procs.values())
        # one storage state logged into both (the login manager probes each site with it): the
        # customer's and the admin's sessions must not overwrite each other although cookies are
        # shared by every port of 127.0.0.1
        state = env.logins.storage_state(["shopping", "shopping_admin"])
        names = {c["name"] for c in state["cookies"]}
        assert {"guigym_shopping_session", "guigym_shopping_admin_session"} <= names
        assert env.logins._probe(("shopping", "shopping_admin"), state)
    finally:
        env.close()
    assert not any(inst._procs for inst in site.instances)  # every server stopped with the env
