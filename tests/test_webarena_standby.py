"""Stateful embedded sites on a ring of instances (sites/standby.py): one serves the episode while
the others are restored and the next start pages opened on them; a reset moves the live role on.
What must hold: all serve the same seed behind the same URL, a reset never shows an ended
episode's changes, the pages opened ahead are the next episodes', and an episode's pages keep
their instance. Real Fossil servers and Chromium."""
from __future__ import annotations

import shutil
import subprocess
import urllib.request
from pathlib import Path

import numpy as np
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
    standby = fossil.instance(1)
    _add_ticket(standby, "Written after prepare_standby")
    fossil.reset(standby_ready=False)  # not told the standby is ready: restored first
    assert "Written after prepare_standby" not in _report(fossil.url)
    fossil.prepare_standby()
    _add_ticket(fossil.instance(1), "Written by the page opened ahead")
    fossil.reset(standby_ready=True)  # the env says so only for the page it opened there
    assert "Written by the page opened ahead" in _report(fossil.url)
    # without a prepare_standby since the last swap, the standby is restored whatever is said
    _add_ticket(fossil.instance(1), "Written on an unprepared standby")
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


def test_three_instances_take_the_live_role_in_turn_and_only_standbys_are_restored(tmp_path: Path):
    from guigym.core.errors import EnvInfraError
    from guigym.envs.web.webarena.sites.fossil import FossilSite
    from guigym.envs.web.webarena.sites.standby import StandbySite

    with StandbySite(FossilSite, tmp_path / "fossil", instances=3) as site:
        assert site.depth == 2 and [i.workdir.name for i in site.instances] == ["a", "b", "c"]
        order = [site.live_index]
        for _ in range(3):
            site.reset()
            order.append(site.live_index)
        assert order == [0, 1, 2, 0]  # round the ring
        assert [site.index(n) for n in (0, 1, 2)] == [0, 1, 2] and site.instance(2) is site.instances[2]
        # the instance two episodes ahead is restored on its own; the live one never is
        _add_ticket(site.instance(2), "Left by an old episode")
        _add_ticket(site.live_instance, "Made in this episode")
        site.prepare_standby(2)
        assert "Left by an old episode" not in _report(site.instance(2).url)
        with pytest.raises(EnvInfraError, match="is live"):
            site.restore_instance(site.live_index)
        assert "Made in this episode" in _report(site.url)
        # a restored instance goes live without another restore only when it is the next one
        site.reset(standby_ready=True)  # instance 1 was not prepared: restored now
        site.reset(standby_ready=True)  # instance 2 was: kept as prepared
        assert site.live_index == 2 and "Left by an old episode" not in _report(site.url)


def test_the_env_opens_the_next_two_start_pages_ahead_each_on_its_own_restored_instance():
    from guigym.envs.web.webarena.env import WebArenaEnv
    from guigym.envs.web.webarena.sites.standby import StandbySite

    env = WebArenaEnv(config_file=EMBEDDED["fossil"].suite, task_ids=[1001], embedded=["fossil"])  # pages_ahead=2
    try:
        site = env.embedded_sites[0]
        assert isinstance(site, StandbySite) and len(site.instances) == 3
        ctl = env.controller
        obs, _ = env.reset()
        first = ctl.episode
        one = site.upstreams()
        assert first.proxy.upstreams == one  # this episode's pages: its live instance
        start = obs["url"]
        assert ctl.pending == 2
        (key2, fut2), (key3, fut3) = ctl._queue
        two, three = fut2.result(timeout=60), fut3.result(timeout=60)
        assert key2[0] == key3[0] == start and two.task_page.url == three.task_page.url == start  # pages, not blank tabs
        assert two.proxy.upstreams == site.upstreams(ahead=1) and three.proxy.upstreams == site.upstreams(ahead=2)
        assert len({tuple(sorted(u.values())) for u in (one, two.proxy.upstreams, three.proxy.upstreams)}) == 3
        # the agent changes the site during episode one
        _add_ticket(site.live_instance, "Made in episode one")
        obs, _, _, _, info = env.step(f"goto [{start}]")
        assert "Made in episode one" in obs["a11y"] and not info.get("action_error")
        # episode two is the first page opened ahead, on a restored instance: none of that
        obs, _ = env.reset()
        assert ctl.episode is two and two.proxy.upstreams == site.upstreams()
        assert "Slow search on large repositories" in obs["a11y"] and "Made in episode one" not in obs["a11y"]
        assert "ahead_observe_s" in env.timings  # observed when opened; unchanged since, so not again
        fresh = ctl.observe()
        assert fresh.a11y == obs["a11y"] and np.array_equal(fresh.screenshot, obs["screenshot"])
        # episode four's page is queued behind episode three's, on the instance episode one used
        assert ctl.pending == 2 and ctl._queue[0][1].result(timeout=60) is three
        four = ctl._queue[1][1].result(timeout=60)
        assert four.proxy.upstreams == site.upstreams(ahead=2) == one
        _add_ticket(site.live_instance, "Made in episode two")
        obs, _ = env.reset()
        assert ctl.episode is three
        assert "Made in episode one" not in obs["a11y"] and "Made in episode two" not in obs["a11y"]
        # episode four: episode one's instance, restored before its page was opened
        obs, _ = env.reset()
        assert ctl.episode is four and "Made in episode one" not in obs["a11y"]
        obs, _, _, _, _ = env.step(f"goto [{start}]")  # and reloading asks the same (now live) instance
        assert "Slow search on large repositories" in obs["a11y"] and "Made in episode one" not in obs["a11y"]
        _, reward, terminated, _, _ = env.step("stop [Fixed]")
        assert terminated and reward == 1.0
    finally:
        env.close()


def test_a_reset_to_another_task_drops_the_pages_opened_ahead_and_restores_their_instances():
    from guigym.envs.web.webarena.env import WebArenaEnv

    env = WebArenaEnv(config_file=EMBEDDED["fossil"].suite, task_ids=[1001, 1003], embedded=["fossil"])
    try:
        site = env.embedded_sites[0]
        ctl = env.controller
        env.reset()  # drew its task: the next two are drawn ahead and their pages opened
        queued = [fut.result(timeout=60) for _, fut in ctl._queue]
        assert len(queued) == 2 and all(q.task_page.url.startswith(site.url) for q in queued)
        nxt = env.presample_next_task().id
        other = "webarena.1003" if nxt == "webarena.1001" else "webarena.1001"
        # something reaches the prepared instances after their restore (what the pages opened ahead may do)
        _add_ticket(site.instance(1), "Written on the next instance")
        _add_ticket(site.instance(2), "Written on the one after")
        obs, _ = env.reset(options={"task": other})
        assert ctl.episode.context not in [q.context for q in queued]
        assert all(q.task_page.is_closed() for q in queued)  # dropped, not kept alive
        assert ctl.episode.proxy.upstreams == site.upstreams()
        obs, _, _, _, _ = env.step(f"goto [{site.url}{REPORT}]")
        assert "Slow search on large repositories" in obs["a11y"] and "Written on the next instance" not in obs["a11y"]
        # a caller naming its tasks gets no page opened for a task drawn ahead, only a blank context
        from guigym.envs.web.controller import _BLANK
        assert ctl.pending == 1 and ctl._queue[0][0] == _BLANK
        # the episode after it runs on the other written instance, restored by its reset
        env.reset(options={"task": other})
        obs, _, _, _, _ = env.step(f"goto [{site.url}{REPORT}]")
        assert "Slow search on large repositories" in obs["a11y"] and "Written on the one after" not in obs["a11y"]
        env.reset()  # and a reset that draws its task again gets the pages ahead again
        assert ctl.pending == 2 and all(key != _BLANK for key, _ in ctl._queue)
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
