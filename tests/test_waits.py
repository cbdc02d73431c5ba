"""guigym.core.waits: deadlines that are hang guards stretched by the machine's load, not speed
checks (issue 33, item 5). Clock and load are injected: nothing here depends on how fast this
machine is."""
from __future__ import annotations

import urllib.parse

import pytest

from guigym.core import waits
from guigym.core.waits import MAX_FACTOR, Deadline, load_factor, wait_until


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_load_factor_is_the_run_queue_per_usable_core_between_1_and_the_cap(monkeypatch):
    monkeypatch.setattr(waits, "usable_cpus", lambda: 2.0)
    assert load_factor(lambda: (0.3, 0.0, 0.0)) == 1.0  # an idle machine: deadlines as written
    assert load_factor(lambda: (15.0, 0.0, 0.0)) == pytest.approx(7.5)  # 15 runnable on 2 cores
    assert load_factor(lambda: (400.0, 0.0, 0.0)) == MAX_FACTOR  # a hang guard still ends

    def no_loadavg():
        raise OSError("no load average here")
    assert load_factor(no_loadavg) == 1.0


def test_usable_cpus_honours_a_cgroup_quota(monkeypatch, tmp_path):
    import builtins

    real_open = builtins.open
    quota = tmp_path / "cpu.max"
    quota.write_text("150000 100000\n")  # 1.5 CPUs

    def fake_open(path, *a, **kw):
        return real_open(quota if path == "/sys/fs/cgroup/cpu.max" else path, *a, **kw)

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(waits.os, "sched_getaffinity", lambda _pid: set(range(64)))
    assert waits.usable_cpus() == pytest.approx(1.5)
    quota.write_text("max 100000\n")
    assert waits.usable_cpus() == 64


def test_a_deadline_stretches_with_the_load_seen_while_waiting_and_never_shrinks():
    clock, load = FakeClock(), [1.0]
    d = Deadline(10.0, "the thing", clock=clock, factor=lambda: load[0])
    clock.t += 9.0
    assert not d.expired() and d.left() == pytest.approx(1.0)
    load[0] = 4.0  # the machine got busy meanwhile: the guard grows to 40 s
    clock.t += 2.0
    assert not d.expired() and d.total() == pytest.approx(40.0)
    load[0] = 1.0  # ... and does not shrink back when the load drops
    clock.t += 5.0
    assert d.total() == pytest.approx(40.0)
    clock.t += 30.0
    assert d.expired()
    msg = d.message("still nothing")
    assert "the thing" in msg and "load factor 4.0" in msg and "still nothing" in msg


def test_an_exact_deadline_ignores_the_load():
    clock = FakeClock()
    d = Deadline(10.0, "x", scale=False, clock=clock, factor=lambda: 20.0)
    clock.t += 10.5
    assert d.expired() and "fixed limit" in d.message()
    with pytest.raises(ValueError, match="base_s"):
        Deadline(0, "x")


def test_wait_until_stops_at_the_event_at_a_gone_process_or_at_the_deadline():
    clock = FakeClock()
    polls = []

    def ready():
        polls.append(clock.t)
        clock.t += 1.0
        return len(polls) == 3

    wait_until(ready, Deadline(60, "ready", clock=clock, factor=lambda: 1.0), interval_s=0)
    assert len(polls) == 3  # returned at the event, long before the deadline

    with pytest.raises(RuntimeError, match="waiting for the server: exited with code 1"):
        wait_until(lambda: False, Deadline(60, "the server", clock=clock, factor=lambda: 1.0),
                   gone=lambda: "exited with code 1", interval_s=0, error=RuntimeError)

    def tick():
        clock.t += 1.0
        return False

    with pytest.raises(TimeoutError, match="gave up waiting for the socket after 5 s"):
        wait_until(tick, Deadline(5, "the socket", clock=clock, factor=lambda: 1.0), interval_s=0)


# ---- the waits' users: their default bounds follow the load, a given number is used as is ----------


def test_chromium_launch_bound_is_the_base_times_the_load_unless_given(monkeypatch):
    from guigym.envs.web.browser import LAUNCH_BASE_S, BrowserRuntime

    monkeypatch.setattr(waits, "load_factor", lambda loadavg=None: 6.0)
    assert BrowserRuntime().launch_timeout() == pytest.approx(6.0 * LAUNCH_BASE_S)  # was a fixed 30 s
    assert BrowserRuntime(launch_timeout_s=7.0).launch_timeout() == 7.0


def test_the_desktop_reset_request_carries_a_load_scaled_budget_the_socket_outwaits(monkeypatch):
    """The sandbox init gets one budget for the whole reset (it used 10 s per step whatever the
    load), and the host's socket waits longer, so the init's error naming the step arrives."""
    from guigym.envs.desktop.providers.local import RESET_BASE_S, LocalProvider

    monkeypatch.setattr(waits, "load_factor", lambda loadavg=None: 4.0)
    sent = []

    def fake_ctl(self, request, timeout):
        sent.append((request, timeout))
        return {"ok": True, "timings": {}}

    monkeypatch.setattr(LocalProvider, "_ctl", fake_ctl)
    p = LocalProvider()
    p.timings = {}
    p._ctl_reset()
    (request, timeout), = sent
    assert request["op"] == "reset" and request["budget_s"] == pytest.approx(4.0 * RESET_BASE_S)
    assert timeout > request["budget_s"]
    sent.clear()
    exact = LocalProvider(reset_timeout_s=12.0)
    exact.timings = {}
    exact._ctl_reset()
    assert sent[0][0]["budget_s"] == 12.0
    with pytest.raises(Exception, match="reset_timeout_s"):
        LocalProvider(reset_timeout_s=0)


def test_wait_ready_fails_at_once_when_the_server_is_gone_and_names_the_wait(tmp_path):
    from guigym.core.errors import EnvInfraError
    from guigym.envs.desktop.client import DesktopClient

    client = DesktopClient(unix_socket=str(tmp_path / "no-server.sock"), token="t", timeout=5)
    with pytest.raises(EnvInfraError, match="will not come up: exited with code 3"):
        client.wait_ready(timeout=3600, alive=lambda: "exited with code 3")  # no 3600 s wait
    with pytest.raises(EnvInfraError, match="gave up waiting for GET /platform.*fixed limit"):
        client.wait_ready(timeout=0.3)


def test_the_desktop_a11y_walk_cap_is_the_base_times_the_load_unless_given(monkeypatch):
    """The walk's time cap was the server's fixed 5 s: on a loaded machine it cut trees short.
    The client now asks for the idle base x the load factor; a given cap and a stock OSWorld
    server (no cap parameter) are left alone."""
    from guigym.envs.desktop.client import A11Y_TIME_BUDGET_S, DesktopClient

    monkeypatch.setattr(waits, "load_factor", lambda loadavg=None: 3.0)
    sent = []

    def fake_request(self, method, path, body=None, content_type=None, timeout=None):
        sent.append((path, timeout))
        return 200, {}, b'{"AT": "<desktop-frame/>"}'

    monkeypatch.setattr(DesktopClient, "request", fake_request)
    ours = DesktopClient(unix_socket="/nonexistent.sock", token="t", timeout=5)
    assert ours.accessibility_tree() == "<desktop-frame/>"
    path, timeout = sent.pop()
    asked = float(dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(path).query))["time_budget"])
    assert asked == pytest.approx(3.0 * A11Y_TIME_BUDGET_S)
    assert timeout >= asked + 5  # the request outwaits the walk it asked for
    ours.accessibility_tree(time_budget=2.0)
    assert "time_budget=2.0" in sent.pop()[0]  # a caller's cap is exact
    DesktopClient(base_url="http://127.0.0.1:9", token=None, timeout=5).accessibility_tree()
    assert "time_budget" not in sent.pop()[0]  # a stock OSWorld server takes no cap


SITES = ["kiwix.KiwixSite", "fossil.FossilSite", "osm_map.MapSite", "spirit.SpiritSite",
         "oscar_shop.OscarShopSite"]


@pytest.mark.parametrize("site", SITES)
def test_an_embedded_sites_start_bound_is_the_base_times_the_load_unless_given(monkeypatch, tmp_path, site):
    """The web sites' start_timeout_s was a fixed 20-60 s (issue 33's open list)."""
    import importlib

    from guigym.core.errors import ConfigError

    module_name, cls_name = site.split(".")
    module = importlib.import_module(f"guigym.envs.web.webarena.sites.{module_name}")
    cls = getattr(module, cls_name)
    monkeypatch.setattr(waits, "load_factor", lambda loadavg=None: 5.0)
    try:
        scaled_site = cls(tmp_path)
    except ConfigError as e:  # kiwix-serve / fossil not installed (scripts/install.sh installs them)
        pytest.skip(str(e))
    assert scaled_site.start_deadline().total() == pytest.approx(5.0 * module.START_BASE_S)
    assert cls(tmp_path, start_timeout_s=7.0).start_deadline().total() == 7.0
    with pytest.raises(ConfigError, match="start_timeout_s"):
        cls(tmp_path, start_timeout_s=0)


def test_a_sites_start_wait_outlasts_the_base_under_load_and_stops_when_the_server_exits():
    """:func:`wait_answering` (every embedded site's start-up wait) keeps polling for the whole
    load-stretched bound, and gives up at once when the server process has exited."""
    import subprocess
    import sys

    from guigym.envs.web.webarena.sites._process import free_port, wait_answering

    url = f"http://127.0.0.1:{free_port()}/"  # nothing listens: every poll is refused
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        clock = FakeClock()

        def ticking():  # each look at the clock is one fake second later
            clock.t += 1.0
            return clock.t

        d = Deadline(10.0, "the site", clock=ticking, factor=lambda: 4.0)
        assert not wait_answering(proc, url, d, request_timeout_s=0.5, poll_s=0)
        assert d.elapsed() >= 40.0  # it waited out 10 s x load 4, not the bare 10 s
    finally:
        proc.kill()
        proc.wait(timeout=30)
    d = Deadline(3600.0, "the site", clock=FakeClock(), factor=lambda: 1.0)
    assert not wait_answering(proc, url, d, poll_s=0) and not d.expired()  # exited: no hour-long wait
