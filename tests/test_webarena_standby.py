"""Stateful embedded sites on two instances (sites/standby.py): one serves the episode while the
other is restored and the next start page opened on it; a reset swaps them. What must hold: both
serve the same seed behind the same URL, a reset never shows the ended episode's changes, the
page opened ahead is the next episode's, and an episode's pages keep their instance. Real Fossil
servers and Chromium."""
from __future__ import annotations

import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from guigym.envs.web.webarena.sites import EMBEDDED

pytestmark = pytest.mark.skipif(shutil.which("fossil") is None,
                                reason="the Fossil site needs the 'fossil' program (Debian package, scripts/install.sh)")

REPORT = "/rptview?rn=1"


def _add_ticket(instance, title: str) -> None:
    """A change made on one instance, as an agent's new ticket would be."""
    subprocess.run([instance.binary, "ticket", "add", "title", title, "status", "Open", "-R", str(instance.live)],
                   env=instance._env(), check=True, capture_output=True)


def _report(base: str) -> str:
    with urllib.request.urlopen(base + REPORT, timeout=10) as r:
        return r.read().decode()


def _ticket_ids(instance) -> list[str]:
    out = subprocess.run([instance.binary, "sqlite3", "-R", str(instance.live)], input=b"SELECT tkt_uuid FROM ticket ORDER BY 1;",
                         env=instance._env(), check=True, capture_output=True)
    return out.stdout.decode().split()


@pytest.fixture()
def fossil(tmp_path: Path):
    from guigym.envs.web.webarena.sites.fossil import FossilSite
    from guigym.envs.web.webarena.sites.standby import StandbySite

    site = StandbySite(FossilSite, tmp_path / "fossil")
    site.start()
    yield site
    site.close()


def test_both_instances_serve_the_same_seed_behind_one_url(fossil):
    a, b = fossil.instances
    assert a.url != b.url and fossil.url not in (a.url, b.url)
    ids = _ticket_ids(a)
    assert len(ids) >= 4 and _ticket_ids(b) == ids  # Fossil's ids are random: b is a copy of a's seed
    assert "Slow search on large repositories" in _report(fossil.url)


def test_a_reset_swaps_to_a_restored_instance_and_leaves_the_old_one_for_prepare_standby(fossil):
    before = fossil.live_index
    _add_ticket(fossil.live_instance, "Made in episode one")
    assert "Made in episode one" in _report(fossil.url)  # the URL reaches the live instance
    fossil.reset()
    assert fossil.live_index != before
    assert "Made in episode one" not in _report(fossil.url)
    old = fossil.instances[before]
    assert "Made in episode one" in _report(old.url)  # untouched until it is the standby's turn
    fossil.prepare_standby()
    assert "Made in episode one" not in _report(old.url)


def test_only_a_prepared_standby_is_swapped_in_without_a_restore(fossil):
    fossil.prepare_standby()
    standby = fossil.standby_instance
    _add_ticket(standby, "Written after prepare_standby")
    fossil.reset(standby_ready=False)  # not told the standby is ready: restored first
    assert "Written after prepare_standby" not in _report(fossil.url)
    fossil.prepare_standby()
    _add_ticket(fossil.standby_instance, "Written by the page opened ahead")
    fossil.reset(standby_ready=True)  # the env says so only for the page it opened there
    assert "Written by the page opened ahead" in _report(fossil.url)
    # without a prepare_standby since the last swap, the standby is restored whatever is said
    _add_ticket(fossil.standby_instance, "Written on an unprepared standby")
    fossil.reset(standby_ready=True)
    assert "Written on an unprepared standby" not in _report(fossil.url)


def test_a_relayed_connection_keeps_the_instance_it_was_opened_on(fossil):
    """The relay picks the live instance when a connection opens, so a request a page of the
    ended episode sends on a connection it opened before the swap reaches its own instance."""
    import socket
    from urllib.parse import urlsplit

    u = urlsplit(fossil.url)
    _add_ticket(fossil.live_instance, "Made in episode one")
    with socket.create_connection((u.hostname, u.port), timeout=10) as sock:
        fossil.reset()  # the swap happens while the connection is open but has sent nothing
        sock.sendall(f"GET {REPORT} HTTP/1.0\r\nHost: {u.netloc}\r\n\r\n".encode())
        body = b""
        while chunk := sock.recv(65536):
            body += chunk
    assert b"Made in episode one" in body
    assert "Made in episode one" not in _report(fossil.url)  # a new connection: the new instance


def test_the_env_opens_the_next_start_page_ahead_on_the_restored_standby():
    from guigym.envs.web.webarena.env import WebArenaEnv
    from guigym.envs.web.webarena.sites.standby import StandbySite

    env = WebArenaEnv(config_file=EMBEDDED["fossil"].suite, task_ids=[1001], embedded=["fossil"])
    try:
        site = env.embedded_sites[0]
        assert isinstance(site, StandbySite)
        ctl = env.controller
        obs, _ = env.reset()
        first = ctl.episode
        assert first.proxy.upstreams == site.upstreams()  # this episode's pages: its live instance
        start = obs["url"]
        ahead = ctl._next.result(timeout=60)
        assert ctl._next_key[0] == start and ahead.task_page.url == start  # the page itself, not a blank tab
        assert ahead.proxy.upstreams == site.upstreams(standby=True)
        # the agent changes the site during the episode
        _add_ticket(site.live_instance, "Made in episode one")
        obs, _, _, _, info = env.step(f"goto [{start}]")
        assert "Made in episode one" in obs["a11y"] and not info.get("action_error")
        # the next episode is the page opened ahead, on the restored instance: none of that
        obs, _ = env.reset()
        assert ctl.episode is ahead and ahead.proxy.upstreams == site.upstreams()
        assert "Slow search on large repositories" in obs["a11y"] and "Made in episode one" not in obs["a11y"]
        obs, _, _, _, _ = env.step(f"goto [{start}]")  # and reloading asks the same (now live) instance
        assert "Made in episode one" not in obs["a11y"]
        _, reward, terminated, _, _ = env.step("stop [Fixed]")
        assert terminated and reward == 1.0
    finally:
        env.close()


def test_a_reset_to_another_task_drops_the_page_opened_ahead_and_restores_the_standby():
    from guigym.envs.web.webarena.env import WebArenaEnv

    env = WebArenaEnv(config_file=EMBEDDED["fossil"].suite, task_ids=[1001, 1003], embedded=["fossil"])
    try:
        site = env.embedded_sites[0]
        ctl = env.controller
        env.reset(options={"task": "webarena.1001"})
        ahead = ctl._next.result(timeout=60)
        nxt = env.presample_next_task().id
        other = "webarena.1003" if nxt == "webarena.1001" else "webarena.1001"
        # something reaches the prepared standby after its restore (what the page opened ahead may do)
        _add_ticket(site.standby_instance, "Written on the standby")
        obs, _ = env.reset(options={"task": other})
        assert ctl.episode is not ahead and ahead.task_page.is_closed()  # dropped, not kept alive
        assert ctl.episode.proxy.upstreams == site.upstreams()
        obs, _, _, _, _ = env.step(f"goto [{site.url}{REPORT}]")
        assert "Slow search on large repositories" in obs["a11y"] and "Written on the standby" not in obs["a11y"]
    finally:
        env.close()


def test_a_drained_proxy_lets_the_request_under_way_end_and_passes_nothing_after():
    """What lets the standby instance be restored safely: once the retired contexts' proxies are
    drained, a request they had sent has been answered and none can follow."""
    import asyncio
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from guigym.envs.web.policy_proxy import PolicyProxy
    from guigym.envs.web.url_policy import UrlPolicy

    handled: list[tuple[str, float]] = []

    class Slow(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            time.sleep(0.5 if self.path == "/slow" else 0)
            handled.append((self.path, time.monotonic()))
            body = b"done"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{server.server_port}"

    async def scenario() -> tuple[bytes, float, bool]:
        proxy = await PolicyProxy(UrlPolicy.for_start_url(origin + "/")).start()
        idle_r, idle_w = await asyncio.open_connection("127.0.0.1", proxy.port)  # a preconnect: no request
        r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
        w.write(f"GET {origin}/slow HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await w.drain()
        await asyncio.sleep(0.1)  # the request is at the server
        await proxy.drain()
        drained = time.monotonic()
        answer = await r.read()
        refused = False
        try:
            await asyncio.open_connection("127.0.0.1", proxy.port)
        except OSError:
            refused = True
        idle_w.close()
        return answer, drained, refused

    try:
        answer, drained, refused = asyncio.run(scenario())
    finally:
        server.shutdown()
    assert answer.endswith(b"done")  # the exchange under way was let end
    assert [p for p, _ in handled] == ["/slow"] and handled[0][1] <= drained  # before drain returned
    assert refused  # and nothing gets in afterwards
