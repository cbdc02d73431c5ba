"""Attacks on WebArena-v0's embedded sites, each performed:

* an agent on one site's task opens another embedded site (where answers of other tasks live) or a
  local file: refused, and no request reaches the other site;
* a client asks a site's static-file routes for files outside them (the seed database, the
  project's settings with its secret key) with encoded ``..``: not served;
* a host secret in the parent's environment reaches no site server process;
* an agent on a stateful site's task opens the site's instances by their own ports (the standby
  one is the next episode's start state, sites/standby.py): refused, nothing reaches them.
"""
from __future__ import annotations

import http.client
import os
import tempfile
import urllib.parse
from pathlib import Path

import pytest

from guigym.envs.web.webarena import sites as S

RUNNABLE = S.available()


def _get(url: str, raw_path: str) -> tuple[int, bytes]:
    """GET with the path sent byte for byte (no client-side normalisation of ``..``)."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    try:
        conn.putrequest("GET", raw_path, skip_accept_encoding=True)
        conn.endheaders()
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


@pytest.mark.skipif(not {"spirit", "kiwix"} <= set(RUNNABLE), reason=f"needs the forum and wiki sites; runnable: {RUNNABLE}")
def test_an_agent_on_a_forum_task_cannot_open_the_other_sites_or_files():
    from guigym.envs.web.webarena.env import WebArenaEnv

    env = WebArenaEnv(config_file=S.EMBEDDED["spirit"].suite, embedded=["spirit", "kiwix"])
    try:
        wiki = next(s for s in env.embedded_sites if s.key == "wikipedia")
        obs, _ = env.reset(options={"task": env.tasks[0].id})
        forum_url = obs["url"]
        for target in (f"{wiki.url}/guigym_wiki_en/Landing", f"{wiki.url}/search?pattern=population",
                       f"file://{S.EMBEDDED['spirit'].suite}", "file:///etc/passwd"):
            obs, _, terminated, _, info = env.step(f"goto [{target}]")
            assert info["action_error"] and "refused" in info["action_error"], (target, info)
            assert obs["url"] == forum_url and not terminated
            assert "Town wiki" not in obs["a11y"] and "task_id" not in obs["a11y"]
    finally:
        env.close()


@pytest.mark.skipif("spirit" not in RUNNABLE, reason=f"needs the forum site; runnable: {RUNNABLE}")
def test_the_forum_serves_no_file_outside_its_static_directory():
    with tempfile.TemporaryDirectory() as tmp:
        site = S.start_sites(["spirit"], Path(tmp))[0]
        try:
            assert _get(site.url, "/static/spirit/stylesheets/styles.all.min.css")[0] in (200, 404)
            for raw in ("/static/..%2fseed.sqlite3", "/static/%2e%2e/seed.sqlite3", "/static/..%2f..%2fseed.sqlite3",
                        "/static/%2e%2e%2fforum_project%2fsettings.py", "/static//etc/passwd"):
                status, body = _get(site.url, raw)
                assert status in (400, 403, 404), (raw, status)
                assert b"SQLite format" not in body and b"SECRET_KEY" not in body and b"root:" not in body
        finally:
            site.close()


@pytest.mark.skipif("map" not in RUNNABLE, reason=f"needs the map site; runnable: {RUNNABLE}")
def test_the_map_serves_only_its_two_leaflet_files():
    with tempfile.TemporaryDirectory() as tmp:
        site = S.start_sites(["map"], Path(tmp))[0]
        try:
            for raw in ("/leaflet/..%2f..%2f..%2fetc%2fpasswd", "/leaflet/%2e%2e/leaflet/leaflet.js/../../../../etc/passwd",
                        "/leaflet/leaflet.js%00.css", "/leaflet/../../etc/passwd"):
                status, body = _get(site.url, raw)
                assert status == 404 and b"root:" not in body, (raw, status)
        finally:
            site.close()


@pytest.mark.skipif(not RUNNABLE, reason="no embedded site can run here")
def test_no_host_secret_reaches_a_site_server(monkeypatch):
    monkeypatch.setenv("GUIGYM_TEST_HOST_SECRET", "hunter2-do-not-leak")
    with tempfile.TemporaryDirectory() as tmp:
        started = S.start_sites(RUNNABLE, Path(tmp))
        try:
            for site in started:
                # one server per site, or one per role (the shop: shopping + shopping_admin)
                roots = [site._proc.pid] if hasattr(site, "_proc") else [p.pid for p in site._procs.values()]
                assert roots, site.key
                pids = roots + [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) in roots]
                for pid in pids:
                    environ = Path(f"/proc/{pid}/environ").read_bytes()
                    assert b"hunter2-do-not-leak" not in environ, (site.key, pid)
        finally:
            for site in started:
                site.close()


def _ppid(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[1])
    except (OSError, IndexError, ValueError):
        return -1


@pytest.mark.skipif("fossil" not in RUNNABLE, reason=f"needs the Fossil site; runnable: {RUNNABLE}")
def test_an_agent_cannot_open_a_stateful_sites_instances_by_their_own_ports():
    """The coming episodes start on the standby instances; if the agent could reach one (its port is
    on loopback), it could plant what a later episode sees. Only the site's relayed URL is allowed."""
    from guigym.envs.web.webarena.env import WebArenaEnv

    env = WebArenaEnv(config_file=S.EMBEDDED["fossil"].suite, task_ids=[1001], embedded=["fossil"])
    try:
        site = env.embedded_sites[0]
        obs, _ = env.reset()
        task_url = obs["url"]
        for _, fut in env.controller._queue:  # the next start pages are open on the standby instances
            fut.result(timeout=60)
        standbys = [site.instance(n) for n in range(1, site.depth + 1)]
        assert len(standbys) == 2
        targets = [f"{inst.url}/{path}" for inst in standbys for path in ("tktnew", "rptview?rn=1")]
        for target in [*targets, f"{site.live_instance.url}/rptview?rn=1"]:
            obs, _, terminated, _, info = env.step(f"goto [{target}]")
            assert info["action_error"] and "refused" in info["action_error"], (target, info)
            assert obs["url"] == task_url and not terminated
        served = {port for _, port in env.controller.episode.proxy.upstreams.values()}
        assert not served & {urllib.parse.urlsplit(inst.url).port for inst in standbys}
    finally:
        env.close()
