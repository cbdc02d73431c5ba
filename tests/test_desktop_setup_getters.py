"""OSWorld setup steps and getters against the real in-desktop server (under Xvfb).

The server (guigym.envs.desktop.server) runs with Debian's python on a private Xvfb display,
HOME and TZ, bound to 127.0.0.1 with a token; every step goes through the real DesktopClient.
Expected values are written by hand (dates of ``rule_relativeTime`` are computed on a calendar).
"""
from __future__ import annotations

import http.server
import json
import logging
import os
import secrets
import shutil
import socket
import subprocess
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from guigym.core.errors import EnvInfraError, TaskSpecError
from guigym.envs.desktop import evaluators as G
from guigym.envs.desktop.setup import (
    MissingResourceError, MissingToolError, SetupUnavailableError, compare_urls, download_cache_path, run_setup,
)

ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI") == "true"
SCREEN = (1024, 768)


def _need(cond: bool, reason: str) -> None:
    if not cond:
        if IN_CI:
            pytest.fail(f"CI must provide this: {reason}")
        pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _free_display() -> int:
    for n in range(140, 400):
        if not Path(f"/tmp/.X11-unix/X{n}").exists() and not Path(f"/tmp/.X{n}-lock").exists():
            return n
    raise RuntimeError("no free X display number")


@pytest.fixture(scope="module")
def desk(tmp_path_factory):
    """(client, home): a real server on its own Xvfb display (openbox as window manager, so
    windows are listed through EWMH), HOME and TZ=Asia/Tokyo."""
    _need(shutil.which("Xvfb") is not None, "Xvfb is not installed")
    _need(shutil.which("openbox") is not None, "openbox is not installed")
    _need(Path("/usr/bin/python3").exists(), "Debian's /usr/bin/python3 is missing")
    _need((ROOT / "guigym/envs/desktop/server/app.py").exists(), "the in-desktop server is not there yet")
    try:
        from guigym.envs.desktop.client import DesktopClient
    except ImportError as e:
        _need(False, f"guigym.envs.desktop.client is not importable: {e}")
    base = tmp_path_factory.mktemp("desk")
    home = base / "home"
    home.mkdir()
    token = secrets.token_hex(16)
    (base / "token").write_text(token)
    disp = _free_display()
    xvfb = subprocess.Popen(["Xvfb", f":{disp}", "-screen", "0", f"{SCREEN[0]}x{SCREEN[1]}x24", "-nolisten", "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not Path(f"/tmp/.X11-unix/X{disp}").exists():
        assert time.monotonic() < deadline, "Xvfb did not start"
        time.sleep(0.05)
    port = _free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "DISPLAY": f":{disp}",
           "TZ": "Asia/Tokyo", "LANG": "C.UTF-8"}
    wm = subprocess.Popen(["openbox", "--sm-disable"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # the directory form runs the server without importing guigym (Debian's python lacks gymnasium)
    server = subprocess.Popen(["/usr/bin/python3", str(ROOT / "guigym/envs/desktop/server"), "--host", "127.0.0.1",
                               "--port", str(port), "--token-file", str(base / "token"), "--display", f":{disp}"],
                              env=env, cwd=str(home), stdout=subprocess.DEVNULL, stderr=open(base / "server.log", "wb"))
    client = DesktopClient(f"http://127.0.0.1:{port}", token=token, timeout=30)
    deadline = time.monotonic() + 20
    while True:
        try:
            client.platform()
            break
        except EnvInfraError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                wm.kill()
                xvfb.kill()
                pytest.fail(f"server did not start: {(base / 'server.log').read_text()[-2000:]}")
            time.sleep(0.1)
    yield client, home
    client.close()
    for p in (server, wm, xvfb):
        p.terminate()
        p.wait(timeout=10)


def _wait_for(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def step(kind, **params):
    return {"type": kind, "parameters": params}


# --------------------------------------------------------------------------- setup steps


def test_execute_and_command_change_the_desktop_with_placeholders(desk, tmp_path):
    client, home = desk
    out = home / "exec.txt"
    recs = run_setup(client, [
        step("execute", command=["sh", "-c", f"echo {{CLIENT_PASSWORD}} {{SCREEN_WIDTH_HALF}} > {out}"]),
        step("command", command=f"echo more >> {out} && echo to-stdout && echo to-stderr 1>&2", shell="true",
             stdout="cmd.out", stderr="cmd.err"),
    ], cache_dir=tmp_path, password="hunter2", screen_size=(1280, 800))
    assert out.read_text() == "hunter2 640\nmore\n"
    assert (tmp_path / "cmd.out").read_text() == "to-stdout\n"
    assert (tmp_path / "cmd.err").read_text() == "to-stderr\n"
    assert [r["type"] for r in recs] == ["execute", "command"] and recs[1]["result"]["returncode"] == 0
    # cache_file returns what the step saved; a missing name gives None
    assert Path(G.get(client, {"type": "cache_file", "path": "cmd.out"}, tmp_path)).read_text() == "to-stdout\n"
    assert G.get(client, {"type": "cache_file", "path": "nope.out"}, tmp_path) is None


def test_execute_until_reruns_and_times_out(desk, tmp_path):
    client, home = desk
    counter = home / "count"
    script = f"n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}; echo run$n"
    run_setup(client, [step("execute", command=script, shell=True, until={"stdout": "run3"})], cache_dir=tmp_path,
              sleep=lambda s: None)
    assert counter.read_text() == "3\n"
    with pytest.raises(EnvInfraError, match=r"config\[0\] \(execute\).*did not reach until"):
        run_setup(client, [step("execute", command=["false"], until={"returncode": 0})], cache_dir=tmp_path,
                  until_timeout=0.5)
    # on the agent's state (postconfig) an until that never holds is recorded and scored, not lost
    rec = run_setup(client, [step("execute", command=["false"], until={"returncode": 0})], cache_dir=tmp_path,
                    until_timeout=0.5, label="postconfig", agent_state=True)
    assert rec[0]["result"]["until_unmet"] is True and rec[0]["result"]["returncode"] == 1


def test_missing_programs_are_named(desk, tmp_path, caplog):
    client, home = desk
    # OSWorld's _execute_setup logs and goes on; so do we, with a warning naming the program
    marker = home / "after.txt"
    with caplog.at_level(logging.WARNING, logger="guigym.envs.desktop.setup"):
        recs = run_setup(client, [step("execute", command=["nosuchprog_d3x", "-v"]),
                                  step("command", command="nosuchprog_d3y --flag", shell=True, stderr="err.txt",
                                       until={"returncode": 0}),
                                  step("execute", command=["sh", "-c", f"echo ok > {marker}"])],
                         cache_dir=tmp_path, until_timeout=600)
    assert [r["result"].get("missing_program") for r in recs] == ["nosuchprog_d3x", "nosuchprog_d3y", None]
    assert recs[1]["result"]["returncode"] == 127 and "nosuchprog_d3y" in (tmp_path / "err.txt").read_text()
    assert marker.read_text() == "ok\n"
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    assert "nosuchprog_d3x" in warned and "nosuchprog_d3y" in warned and "continuing as OSWorld does" in warned
    with pytest.raises(MissingToolError, match="'vlc_d3z'"):
        run_setup(client, [step("launch", command="VLC_VERBOSE=-1 vlc_d3z --no-audio", shell=True)],
                  cache_dir=tmp_path, label="postconfig")


def test_chrome_profile_edits_reach_chromium(desk, tmp_path):
    """OSWorld's chrome setups edit ~/.config/google-chrome; with Chromium as google-chrome
    the edit must land in ~/.config/chromium, and stay put when a Chrome profile exists."""
    if shutil.which("jq") is None:
        pytest.skip("jq is not installed (the OSWorld task's own tool)")
    client, home = desk
    cfg = home / ".config"
    chromium = cfg / "chromium/Default/Preferences"
    chrome = cfg / "google-chrome/Default/Preferences"
    # the command of OSWorld task chrome/3299584d (its /home/user written as ~)
    cmd = ("cd ~/.config/google-chrome/Default && jq '. + {\"session\":{\"restore_on_startup\":4}}' "
           "Preferences > temp && mv temp Preferences")
    try:
        chromium.parent.mkdir(parents=True)
        chromium.write_text('{"profile": {"name": "P"}}')
        run_setup(client, [step("execute", command=cmd, shell=True)], cache_dir=tmp_path)
        assert json.loads(chromium.read_text()) == {"profile": {"name": "P"}, "session": {"restore_on_startup": 4}}
        assert not (cfg / "google-chrome").exists()
        chrome.parent.mkdir(parents=True)
        chrome.write_text('{"a": 1}')
        chromium.write_text("{}")
        run_setup(client, [step("execute", command=cmd, shell=True)], cache_dir=tmp_path)
        assert json.loads(chrome.read_text()) == {"a": 1, "session": {"restore_on_startup": 4}}
        assert chromium.read_text() == "{}"
    finally:
        shutil.rmtree(cfg / "chromium", ignore_errors=True)
        shutil.rmtree(cfg / "google-chrome", ignore_errors=True)


def test_launch_and_sleep(desk, tmp_path):
    client, home = desk
    marker = home / "launched.txt"
    t0 = time.monotonic()
    recs = run_setup(client, [step("launch", command=["sh", "-c", f"sleep 0.2; echo up > {marker}"]),
                              step("sleep", seconds=0.3)], cache_dir=tmp_path)
    assert recs[1]["seconds"] >= 0.3 and time.monotonic() - t0 >= 0.3
    assert _wait_for(marker.exists) and marker.read_text() == "up\n"


def test_upload_file_relative_to_base_dir(desk, tmp_path):
    client, home = desk
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "in.bin").write_bytes(b"\x00\x01payload")
    dest = home / "Documents" / "in.bin"
    dest.parent.mkdir(exist_ok=True)
    run_setup(client, [step("upload_file", files=[{"local_path": "data/in.bin", "path": str(dest)}])],
              cache_dir=tmp_path / "cache", base_dir=tmp_path)
    assert dest.read_bytes() == b"\x00\x01payload"
    with pytest.raises(MissingResourceError, match="nothere.bin"):
        run_setup(client, [step("upload_file", files=[{"local_path": "nothere.bin", "path": str(dest)}])],
                  cache_dir=tmp_path / "cache", base_dir=tmp_path)


def test_download_from_cache_network_and_clear_error(desk, tmp_path):
    client, home = desk
    url = "https://example.invalid/files/report.xlsx"
    dest = home / "Desktop" / "report.xlsx"
    dest.parent.mkdir(exist_ok=True)
    cache = tmp_path / "cache"
    # not cached, network off: the error names the url and the exact cache file to fill
    with pytest.raises(MissingResourceError) as ei:
        run_setup(client, [step("download", files=[{"url": url, "path": str(dest)}])], cache_dir=cache,
                  network_ok=False)
    want = download_cache_path(cache, url, str(dest))
    assert ei.value.missing == url and ei.value.cache_path == str(want) and str(want) in str(ei.value)
    assert want.name.endswith("_report.xlsx") and len(want.name) == 36 + 1 + len("report.xlsx")
    # cached: used without any network
    want.write_bytes(b"cached bytes")
    run_setup(client, [step("download", files=[{"url": url, "path": str(dest)}])], cache_dir=cache, network_ok=False)
    assert dest.read_bytes() == b"cached bytes"
    # network_ok=None: an unreachable host is an error naming url and cache file, fast
    port = _free_port()
    dead = f"http://127.0.0.1:{port}/x.txt"
    t0 = time.monotonic()
    with pytest.raises(MissingResourceError, match="unreachable"):
        run_setup(client, [step("download", files=[{"url": dead, "path": str(home / 'x.txt')}])], cache_dir=cache)
    assert time.monotonic() - t0 < 5
    # network_ok=None and the host answers: fetched, cached, uploaded
    srv = _serve_bytes(b"from the net")
    try:
        live = f"http://127.0.0.1:{srv.server_port}/y.txt"
        run_setup(client, [step("download", files=[{"url": live, "path": str(home / 'y.txt')}])], cache_dir=cache)
    finally:
        srv.shutdown()
    assert (home / "y.txt").read_bytes() == b"from the net"
    assert download_cache_path(cache, live, "y.txt").read_bytes() == b"from the net"


def _serve_bytes(body: bytes):
    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_execute_with_verification_polls_until_ok_or_times_out(desk, tmp_path):
    client, home = desk
    flag = home / "ready.flag"
    recs = run_setup(client, [step("execute_with_verification",
                                   command=["sh", "-c", f"(sleep 0.6; touch {flag}) >/dev/null 2>&1 &"],
                                   verification={"command_success": f"test -f {flag}"},
                                   max_wait_time=10, check_interval=0.1)], cache_dir=tmp_path)
    assert flag.exists() and recs[0]["result"]["verification"] == "passed"
    assert 0.3 <= recs[0]["result"]["wait_time"] < 5
    t0 = time.monotonic()
    with pytest.raises(EnvInfraError, match="still failing after 0.5 s"):
        run_setup(client, [step("execute_with_verification", command=["true"],
                                verification={"command_success": "test -f /nonexistent/d3"},
                                max_wait_time=0.5, check_interval=0.1)], cache_dir=tmp_path)
    assert time.monotonic() - t0 < 5


def test_step_spec_errors_name_type_and_index(desk, tmp_path):
    client, _ = desk
    with pytest.raises(TaskSpecError, match=r"config\[1\].*unknown setup step type 'teleport'"):
        run_setup(client, [step("sleep", seconds=0), step("teleport", to="mars")], cache_dir=tmp_path)
    with pytest.raises(TaskSpecError, match=r"config\[0\] \(sleep\): bad parameters \['secs'\]"):
        run_setup(client, [step("sleep", secs=1)], cache_dir=tmp_path)
    with pytest.raises(SetupUnavailableError, match="googledrive") as ei:
        run_setup(client, [step("googledrive", settings_file="x")], cache_dir=tmp_path)
    assert not isinstance(ei.value, TaskSpecError) and ei.value.step_index == 0


def test_chrome_open_and_close_tabs_through_the_debugging_endpoint(desk, tmp_path):
    client, home = desk
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    _need(chromium is not None and shutil.which("curl") is not None, "chromium and curl are needed")
    port = _free_port()
    pages = _serve_pages()
    base = f"http://127.0.0.1:{pages.server_port}"
    try:
        run_setup(client, [step("launch", command=[chromium, f"--remote-debugging-port={port}",
                                                   f"--user-data-dir={home / 'chrome-profile'}", "--no-first-run",
                                                   "--no-default-browser-check", "--no-sandbox", "--disable-gpu",
                                                   # headless: same debugging endpoints, faster start
                                                   "--headless=new", "about:blank"])],
                  cache_dir=tmp_path)
        run_setup(client, [step("chrome_open_tabs", urls_to_open=[f"{base}/a?x=1&y=2", f"{base}/b"])],
                  cache_dir=tmp_path, chromium_port=port)
        want = sorted([f"{base}/a?x=1&y=2", f"{base}/b"])  # '&' survived, about:blank was closed
        assert _wait_for(lambda: sorted(_tab_urls(client, port)) == want, timeout=5), _tab_urls(client, port)
        # OSWorld's compare_urls: the scheme defaults to http and www. is ignored (only a bare "/"
        # path is dropped, so ".../b/" would not match ".../b")
        run_setup(client, [step("chrome_close_tabs", urls_to_close=[f"127.0.0.1:{pages.server_port}/b"])],
                  cache_dir=tmp_path, chromium_port=port)
        assert _wait_for(lambda: _tab_urls(client, port) == [f"{base}/a?x=1&y=2"], timeout=5)
    finally:
        client.execute(["pkill", "-f", f"remote-debugging-port={port}"], shell=False, timeout=10)
        pages.shutdown()


def _serve_pages():
    return _serve_bytes(b"<html><title>t</title><body>hi</body></html>")


def _tab_urls(client, port):
    """Urls of Chromium's page targets, read from inside the desktop."""
    res = client.execute(["curl", "-sS", "--noproxy", "*", f"http://127.0.0.1:{port}/json/list"], shell=False, timeout=10)
    return [t["url"] for t in json.loads(res["output"]) if t["type"] == "page"]


def test_compare_urls_follows_osworld_normalisation():
    assert compare_urls("https://www.airbnb.com/", "https://airbnb.com.sg")
    assert compare_urls("example.com/path", "http://www.example.com/path")
    assert not compare_urls("http://example.com/a", "http://example.com/b")
    assert not compare_urls("http://example.com/?q=1", "http://example.com/?q=2")
    assert compare_urls("http://example.com/?q=1", "http://example.com/?q=2", full=False)
    assert compare_urls(None, None) and not compare_urls(None, "http://x.org")


# --------------------------------------------------------------------------- getters


def test_vm_file_single_multi_and_missing(desk, tmp_path):
    client, home = desk
    (home / "a.txt").write_text("alpha")
    (home / "b.txt").write_text("beta")
    got = G.get(client, {"type": "vm_file", "path": str(home / "a.txt"), "dest": "a_copy.txt"}, tmp_path)
    assert got == str(tmp_path / "a_copy.txt") and Path(got).read_text() == "alpha"
    assert G.get(client, {"type": "vm_file", "path": str(home / "none.txt"), "dest": "n.txt"}, tmp_path) is None
    multi = {"type": "vm_file", "multi": True, "path": [str(home / "a.txt"), str(home / "missing"), str(home / "b.txt")],
             "dest": ["m0", "m1", "m2"], "gives": [0, 1, 2]}
    got = G.get(client, multi, tmp_path)
    assert got == [str(tmp_path / "m0"), None, str(tmp_path / "m2")] and Path(got[2]).read_text() == "beta"
    assert G.get(client, {**multi, "gives": [2]}, tmp_path) == str(tmp_path / "m2")
    with pytest.raises(TaskSpecError, match="outside the cache dir"):
        G.get(client, {"type": "vm_file", "path": str(home / "a.txt"), "dest": "../escape"}, tmp_path)


def test_command_getters_and_directory_and_screen(desk, tmp_path):
    client, home = desk
    assert G.get(client, {"type": "vm_command_line", "command": ["sh", "-c", "echo out; echo err >&2"]}, tmp_path) == "out\n"
    assert G.get(client, {"type": "vm_command_error", "command": "echo out; echo err >&2", "shell": True}, tmp_path) == "err\n"
    (home / "tree" / "sub").mkdir(parents=True)
    (home / "tree" / "sub" / "f.txt").write_text("x")
    (home / "tree" / "g.txt").write_text("y")
    tree = G.get(client, {"type": "list_directory", "path": str(home / "tree")}, tmp_path)

    def names(node):
        out = {node["name"]}
        for ch in node.get("children", []) or []:
            out |= names(ch)
        return out

    assert {"sub", "f.txt", "g.txt"} <= names(tree)
    assert G.get(client, {"type": "vm_screen_size"}, tmp_path) == {"width": SCREEN[0], "height": SCREEN[1]}
    xml = G.get(client, {"type": "accessibility_tree"}, tmp_path)
    import xml.etree.ElementTree as ET

    ET.fromstring(xml)  # OSWorld XML, parseable


def test_rule_relative_time_with_a_fixed_now(desk, tmp_path):
    client, _ = desk
    fmt = "{DoW}, {Month} {DayD}, {Year} | {Month0D}/{Day0D} | {month} {MonthFull} {MonthD} {Year}"
    wed = datetime(2024, 3, 13, 10, 0)  # a Wednesday

    def rel(now, tz="Europe/Zurich", **rt):
        spec = {"type": "rule_relativeTime", "rules": {"relativeTime": rt, "timezone": tz,
                                                       "expected": {"time": fmt, "from": "{Year}-{Month0D}-{Day0D}",
                                                                    "to": "{Year}-{Month0D}-{Day0D}"}}}
        if tz is None:
            del spec["rules"]["timezone"]
        before = json.dumps(spec)
        out = G.get(client, spec, tmp_path, now=now)
        assert json.dumps(spec) == before  # the task's spec is not rewritten
        return out["expected"]

    # each placeholder is replaced once (OSWorld's str.replace(..., 1)): the second {Year} stays
    assert rel(wed, **{"from": "tomorrow"})["time"] == "Thu, Mar 14, 2024 | 03/14 | march March 3 {Year}"
    r = rel(wed, **{"from": "next Monday", "to": "next Friday"})
    assert (r["from"], r["to"]) == ("2024-03-18", "2024-03-22")
    r = rel(wed, **{"from": "this Saturday", "to": "this Sunday"})
    assert (r["from"], r["to"]) == ("2024-03-16", "2024-03-17")
    r = rel(wed, **{"from": "next week Friday", "to": "next week Sunday"})
    assert (r["from"], r["to"]) == ("2024-03-22", "2024-03-24")
    r = rel(wed, **{"from": "10th next month", "to": "11th next month"})
    assert (r["from"], r["to"]) == ("2024-04-10", "2024-04-11")
    sun = datetime(2024, 3, 17, 9, 0)
    r = rel(sun, **{"from": "next Saturday", "to": "next Sunday"})
    assert (r["from"], r["to"]) == ("2024-03-23", "2024-03-24")
    fri = datetime(2024, 3, 15, 9, 0)
    r = rel(fri, **{"from": "next Friday", "to": "next Sunday"})
    assert (r["from"], r["to"]) == ("2024-03-22", "2024-03-24")
    assert rel(datetime(2024, 12, 20), **{"from": "5th next month"})["time"].startswith("Sun, Jan 5, 2025")
    # Dec 1 2024 is a Sunday -> Dec 2 (OSWorld computes month 0 here and crashes)
    assert rel(datetime(2024, 8, 10), **{"from": "first monday four months later"})["time"].startswith("Mon, Dec 2, 2024")
    assert rel(datetime(2024, 10, 15), **{"from": "first monday four months later"})["time"].startswith("Mon, Feb 3, 2025")
    assert rel(datetime(2024, 6, 1), **{"from": "first monday eight months later"})["time"].startswith("Mon, Feb 3, 2025")
    # time zones: 23:30 UTC on Wed 13 March is Thu 08:30 in Tokyo and Wed 19:30 in New York (EDT)
    late = datetime(2024, 3, 13, 23, 30, tzinfo=timezone.utc)
    assert rel(late, tz="Asia/Tokyo", **{"from": "tomorrow"})["time"].startswith("Fri, Mar 15, 2024")
    assert rel(late, tz="America/New_York", **{"from": "tomorrow"})["time"].startswith("Thu, Mar 14, 2024")
    # no zone in the rule: the desktop's own offset (this server runs with TZ=Asia/Tokyo)
    assert rel(late, tz=None, **{"from": "tomorrow"})["time"].startswith("Fri, Mar 15, 2024")
    with pytest.raises(TaskSpecError, match="unknown timezone 'Mars/Olympus'"):
        rel(late, tz="Mars/Olympus", **{"from": "tomorrow"})
    with pytest.raises(TaskSpecError, match="unknown relative time 'someday'"):
        rel(late, **{"from": "someday"})


def test_rule_and_unknown_getter(tmp_path):
    assert G.get(None, {"type": "rule", "rules": {"expected": "31"}}, tmp_path) == {"expected": "31"}
    with pytest.raises(TaskSpecError, match="unknown getter type 'vm_teleport'"):
        G.get(None, {"type": "vm_teleport"}, tmp_path)


class _TreeOnly:
    """Stand-in client for a pure parsing test: serves one hand-written a11y tree."""

    def __init__(self, xml):
        self.xml = xml

    def accessibility_tree(self):
        return self.xml


def test_active_url_from_access_tree_follows_osworld(tmp_path):
    st = "https://accessibility.ubuntu.example.org/ns/state"
    xml = f"""<desktop-frame xmlns:st="{st}" name="Desktop">
      <application name="Google Chrome">
        <frame name="a"><entry name="Address and search bar">example.com/first</entry></frame>
        <frame name="b"><entry name="Address and search bar" st:focused="true">example.com/last</entry></frame>
      </application>
      <application name="gedit"><entry name="Address and search bar">nope.org</entry></application>
    </desktop-frame>"""
    get = lambda x, **spec: G.get(_TreeOnly(x), {"type": "active_url_from_accessTree", **spec}, tmp_path)  # noqa: E731
    # OSWorld: the first address bar's text (focus plays no part), goto_prefix prepended verbatim
    assert get(xml) == "https://example.com/first"
    assert get(xml, goto_prefix="https://www.") == "https://www.example.com/first"
    assert get(xml, goto_prefix="") == "example.com/first"
    assert get(xml.replace("example.com/first", "www.a.org")) == "https://www.a.org"
    assert get(xml.replace("example.com/first", "chrome://settings")) == "https://chrome://settings"
    # the last bar empty -> None, as OSWorld's `not elements[-1].text`
    assert get(xml.replace("example.com/last", "")) is None
    assert get(xml.replace("Google Chrome", "Firefox")) is None
    # Debian's Chromium names itself Chromium; Google Chrome's bars win when both are there
    assert get(xml.replace("Google Chrome", "Chromium")) == "https://example.com/first"
    both = xml.replace("<application name=\"gedit\">", "<application name=\"Chromium\">")
    assert get(both) == "https://example.com/first"
    assert get(both.replace("Google Chrome", "Other")) == "https://nope.org"


def test_app_config_getters_read_the_desktop_home(desk, tmp_path):
    client, home = desk
    vlcrc = home / ".config" / "vlc" / "vlcrc"
    assert G.get(client, {"type": "vlc_config", "dest": "vlcrc"}, tmp_path) is None  # VLC never ran
    vlcrc.parent.mkdir(parents=True)
    vlcrc.write_text("qt-max-volume=200\n")
    got = G.get(client, {"type": "vlc_config", "dest": "vlcrc"}, tmp_path)
    assert got == str(tmp_path / "vlcrc") and Path(got).read_text() == "qt-max-volume=200\n"
    gimprc = home / ".config" / "GIMP" / "2.10" / "gimprc"
    gimprc.parent.mkdir(parents=True)
    gimprc.write_text('(theme "Light")\n')
    got = G.get(client, {"type": "gimp_config_file", "file_name": "gimprc", "dest": "gimprc"}, tmp_path)
    assert Path(got).read_text() == '(theme "Light")\n'
    prefs = home / ".config" / "chromium" / "Default" / "Preferences"
    prefs.parent.mkdir(parents=True)
    prefs.write_text(json.dumps({"profile": {"name": "Thomas"}}))
    assert G.get(client, {"type": "profile_name"}, tmp_path) == "Thomas"


def test_open_activate_and_close_window(desk, tmp_path):
    """``open`` goes through xdg-open and the server waits for a window named after the file; the
    default app for text/plain is set in the private HOME to an xterm titled with the path."""
    client, home = desk
    _need(shutil.which("xdg-open") is not None and shutil.which("xterm") is not None
          and shutil.which("xdotool") is not None, "xdg-open, xterm and xdotool are needed")
    apps = home / ".local" / "share" / "applications"
    apps.mkdir(parents=True, exist_ok=True)
    (apps / "d3view.desktop").write_text("[Desktop Entry]\nType=Application\nName=d3view\n"
                                         "Exec=xterm -T %f -e sleep 60\nMimeType=text/plain;\n")
    (home / ".config").mkdir(exist_ok=True)
    (home / ".config" / "mimeapps.list").write_text("[Default Applications]\ntext/plain=d3view.desktop\n")
    doc = home / "notes_d3.txt"
    doc.write_text("hello")

    def windows():
        res = client.execute(["xdotool", "search", "--name", "notes_d3"], shell=False, timeout=10)
        return res["output"].split()

    run_setup(client, [step("open", path=str(doc))], cache_dir=tmp_path)
    assert windows()  # the server only returns once the window is there
    run_setup(client, [step("activate_window", window_name="notes_d3.txt"),
                       step("activate_window", window_name="no such window d3"),  # skipped like OSWorld
                       step("close_window", window_name="notes_d3.txt")], cache_dir=tmp_path)
    assert _wait_for(lambda: not windows(), timeout=10)


def test_execute_with_verification_window_exists(desk, tmp_path):
    client, _ = desk
    _need(shutil.which("xterm") is not None and (shutil.which("wmctrl") or shutil.which("xdotool")),
          "xterm and wmctrl or xdotool are needed")
    recs = run_setup(client, [step("execute_with_verification",
                                   command=["sh", "-c", "xterm -T 'D3 verify (win)' -e sleep 60 >/dev/null 2>&1 &"],
                                   verification={"window_exists": "d3 verify (WIN)"},  # case-insensitive
                                   max_wait_time=15, check_interval=0.2)], cache_dir=tmp_path)
    assert recs[0]["result"]["verification"] == "passed"
    run_setup(client, [step("close_window", window_name="D3 verify (win)", strict=True)], cache_dir=tmp_path)
    with pytest.raises(EnvInfraError, match="still failing"):
        run_setup(client, [step("execute_with_verification", command=["true"],
                                verification={"window_exists": "D3 verify (win)"}, max_wait_time=3,
                                check_interval=0.2)], cache_dir=tmp_path)
