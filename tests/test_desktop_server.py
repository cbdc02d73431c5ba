"""The in-desktop server (guigym.envs.desktop.server) and DesktopClient on a real Xvfb desktop.

One desktop per module: Xvfb (display picked by -displayfd), and inside one dbus-run-session
openbox, mousepad on ~/notes.txt and the server under Debian's /usr/bin/python3, so that the
AT-SPI bus is private to the test. Outside CI the module skips when those programs are missing.
"""
from __future__ import annotations

import ast
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from guigym.core import actions as A
from guigym.core.errors import ActionNotPossible, EnvInfraError
from guigym.core.waits import Deadline
from guigym.envs.desktop import pyautogui_codegen as codegen
from guigym.envs.desktop.client import DesktopClient
from guigym.envs.desktop.server import multipart

SERVER_DIR = Path(__file__).resolve().parents[1] / "guigym" / "envs" / "desktop" / "server"
DEBIAN_PY = "/usr/bin/python3"
TOKEN = "t0ken-" + os.urandom(8).hex()
#: OSWorld's namespace URIs (desktop_env/server/main.py, ``_accessibility_ns_map["ubuntu"]``)
NS = {p: f"https://accessibility.ubuntu.example.org/ns/{w}" for p, w in
      (("st", "state"), ("attr", "attributes"), ("cp", "component"), ("val", "value"), ("act", "action"))}
CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _missing() -> list[str]:
    miss = [p for p in ("Xvfb", "openbox", "mousepad", "dbus-run-session") if shutil.which(p) is None]
    if not os.path.exists(DEBIAN_PY):
        miss.append(DEBIAN_PY)
    else:
        r = subprocess.run([DEBIAN_PY, "-c", "import pyatspi, Xlib, PIL"], capture_output=True)
        if r.returncode:
            miss.append("python3-pyatspi/python3-xlib/python3-pil for " + DEBIAN_PY)
    return miss


def _need_desktop() -> None:
    miss = _missing()
    if miss:
        if CI:
            pytest.fail("CI must provide: " + ", ".join(miss))
        pytest.skip("desktop test needs " + ", ".join(miss))


def _start_xvfb(w: int = 1280, h: int = 720) -> tuple[subprocess.Popen, str]:
    r, wfd = os.pipe()
    p = subprocess.Popen(["Xvfb", "-displayfd", str(wfd), "-screen", "0", f"{w}x{h}x24", "-nolisten", "tcp"],
                         pass_fds=(wfd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    os.close(wfd)
    num = b""
    end = time.monotonic() + 10
    while not num.endswith(b"\n") and time.monotonic() < end:
        chunk = os.read(r, 16)
        if not chunk:
            break
        num += chunk
    os.close(r)
    if not num.strip():
        p.kill()
        raise RuntimeError("Xvfb did not report a display")
    return p, ":" + num.decode().strip()


def _kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        p.wait(1)
    except subprocess.TimeoutExpired:  # a throwaway test desktop: no need to wait politely
        pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait(5)


@pytest.fixture(scope="module")
def desk(tmp_path_factory):
    _need_desktop()
    root = tmp_path_factory.mktemp("desk")
    home, run = root / "home", root / "run"
    home.mkdir()
    run.mkdir(mode=0o700)
    (home / "notes.txt").write_text("")
    (root / "token").write_text(TOKEN)
    sock = str(root / "server.sock")
    xvfb, display = _start_xvfb()
    env = {k: v for k, v in os.environ.items() if k not in ("NO_AT_BRIDGE", "DBUS_SESSION_BUS_ADDRESS", "PYTHONPATH")}
    env.update(DISPLAY=display, HOME=str(home), XDG_RUNTIME_DIR=str(run), GTK_THEME="Adwaita")
    script = ("openbox >/dev/null 2>&1 & mousepad \"$HOME/notes.txt\" >/dev/null 2>&1 & "
              f"exec {DEBIAN_PY} {SERVER_DIR} --unix-socket {sock} --token-file {root / 'token'}")
    session = subprocess.Popen(["dbus-run-session", "--", "/bin/sh", "-c", script], env=env, cwd=str(home),
                               stdout=subprocess.DEVNULL, stderr=open(root / "server.log", "w"),
                               start_new_session=True)
    client = DesktopClient(unix_socket=sock, token=TOKEN, timeout=20)
    try:
        # waits on events (the server answering, the session exiting); the deadlines are hang
        # guards stretched by the machine's load (guigym.core.waits), not speed checks
        client.wait_ready(alive=lambda: None if session.poll() is None else
                          f"the session exited with code {session.returncode}: "
                          + (root / "server.log").read_text()[-1500:])
        mousepad = Deadline(25.0, "Mousepad in the accessibility tree")
        while "Mousepad" not in client.accessibility_tree() and not mousepad.expired():
            time.sleep(0.3)
        yield {"client": client, "sock": sock, "home": home, "display": display, "root": root, "env": env}
    finally:
        client.close()
        _kill_group(session)
        _kill_group(xvfb)


def _raw(sock: str, method: str, path: str, headers: dict | None = None, body: bytes | None = None):
    c = http.client.HTTPConnection("localhost", timeout=10)
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    c.sock = s
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def _parse(xml: str):
    from lxml import etree

    return etree.fromstring(xml.encode("utf-8"))


def _box(el) -> tuple[int, int, int, int]:
    x, y = ast.literal_eval(el.get("{%s}screencoord" % NS["cp"]))
    w, h = ast.literal_eval(el.get("{%s}size" % NS["cp"]))
    return x, y, w, h


def _editor_text(client: DesktopClient):
    """The mousepad text view element (role ``text``) of the a11y tree."""
    tree = _parse(client.accessibility_tree())
    views = [t for t in tree.iter("text") if t.get("{%s}editable" % NS["st"]) == "true"
             and t.get("{%s}multi_line" % NS["st"]) == "true"]
    assert views, "no editable multi-line text view in the a11y tree"
    return views[0]


# ---- auth -------------------------------------------------------------------------------------------
def test_requests_without_the_right_token_get_401(desk):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN},
                    {"Authorization": "Bearer " + TOKEN + "x"}):
        status, _ = _raw(desk["sock"], "GET", "/platform", headers)
        assert status == 401, headers
        status, _ = _raw(desk["sock"], "POST", "/execute", headers, b'{"command": ["touch", "/tmp/pwned"]}')
        assert status == 401
    status, body = _raw(desk["sock"], "GET", "/platform", {"Authorization": "Bearer " + TOKEN})
    assert (status, body) == (200, b"Linux")
    with DesktopClient(unix_socket=desk["sock"], token=None) as anon:  # stock-compat client
        with pytest.raises(EnvInfraError, match="401"):
            anon.screen_size()
    assert oct(os.stat(desk["sock"]).st_mode & 0o777) == "0o600"


def test_server_refuses_non_loopback_host_without_allow_remote(tmp_path):
    _need_desktop()
    (tmp_path / "tok").write_text("x")
    r = subprocess.run([DEBIAN_PY, str(SERVER_DIR), "--host", "0.0.0.0", "--port", "0",
                        "--token-file", str(tmp_path / "tok")], capture_output=True, text=True, timeout=30,
                       env={**os.environ, "DISPLAY": ":0"})
    assert r.returncode != 0 and "--allow-remote" in r.stderr
    r = subprocess.run([DEBIAN_PY, str(SERVER_DIR), "--host", "127.0.0.1"], capture_output=True, text=True,
                       timeout=30, env={**os.environ, "DISPLAY": ":0"})
    assert r.returncode != 0 and "--token-file" in r.stderr


def test_module_form_of_the_cli_starts_under_debian_python():
    """``python3 -m guigym.envs.desktop.server`` (the contract's CLI) imports guigym under Debian's
    python, which has no gymnasium: guigym/__init__ must not need it to import."""
    _need_desktop()
    repo = str(SERVER_DIR.parents[3])
    r = subprocess.run([DEBIAN_PY, "-m", "guigym.envs.desktop.server", "--help"], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": repo}, cwd="/")
    if r.returncode != 0 and "gymnasium" in r.stderr:
        pytest.skip("guigym/__init__ imports gymnasium eagerly; run the server directory instead "
                    f"(/usr/bin/python3 {SERVER_DIR}) until the lazy-import patch lands")
    assert r.returncode == 0 and "--unix-socket" in r.stdout and "--allow-remote" in r.stdout, r.stderr


# ---- screen -----------------------------------------------------------------------------------------
def test_screenshot_has_screen_size_and_the_cursor_where_the_server_says(desk):
    c: DesktopClient = desk["client"]
    w, h = c.screen_size()
    assert (w, h) == (1280, 720)
    c.act(A.Hover(x=1100, y=100))  # mousepad opens at the top-left; this is the bare root window
    assert c.cursor_position() == (1100, 100)
    with_cursor = c.screenshot()
    assert with_cursor.shape == (h, w, 3) and with_cursor.dtype == np.uint8
    status, png = _raw(desk["sock"], "GET", "/screenshot?cursor=0", {"Authorization": "Bearer " + TOKEN})
    assert status == 200 and png[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image
    import io

    bare = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    # compare the top-right corner only: mousepad's caret blinks elsewhere
    diff = np.argwhere(np.any(with_cursor[:300, 900:] != bare[:300, 900:], axis=2)) + [0, 900]
    assert len(diff), "the cursor is not drawn"
    (y0, x0), (y1, x1) = diff.min(0), diff.max(0)
    assert abs(x0 - 1100) <= 32 and abs(y0 - 100) <= 32 and x1 - x0 < 64 and y1 - y0 < 64, (x0, y0, x1, y1)
    assert x0 <= 1100 + 2 and y0 <= 100 + 2 and x1 >= 1100 and y1 >= 100  # the hotspot is inside the sprite
    # the PNG of /guigym/observe and its raw frame agree (around the cursor: text carets blink)
    png_obs = c.observe(a11y=False, image="png")["screenshot"]
    assert png_obs.shape == with_cursor.shape
    assert np.array_equal(png_obs[60:160, 1050:1150], with_cursor[60:160, 1050:1150])


# ---- a11y -------------------------------------------------------------------------------------------
def test_a11y_is_osworld_xml_with_the_editor_window(desk):
    c: DesktopClient = desk["client"]
    tree = _parse(c.accessibility_tree())
    assert tree.tag == "desktop-frame"
    for prefix, uri in NS.items():
        assert tree.nsmap.get(prefix) == uri
    frames = tree.xpath('//application[@name="mousepad"]/frame')
    assert frames, "mousepad's frame is not in the tree"
    x, y, w, h = _box(frames[0])
    assert 0 <= x < 1280 and 0 <= y < 720 and 50 < w <= 1280 and 50 < h <= 720
    assert frames[0].get("name").endswith("Mousepad")
    assert tree.get("truncated") is None
    small = _parse(c.accessibility_tree(max_nodes=5))
    assert small.get("truncated") == "nodes" and len(small.xpath("//*")) - 1 <= 5


def test_observe_returns_screenshot_and_a11y_together(desk):
    o = desk["client"].observe()
    assert o["screenshot"].shape == (720, 1280, 3)
    assert "Mousepad" in o["a11y"] and o["a11y_error"] is None
    assert set(o["ms"]) >= {"screenshot", "a11y", "total"}


#: a GTK app that registers with AT-SPI, then blocks its main loop once the trigger file exists
HANG_APP = """
import os, sys, time
import gi
gi.require_version("Gtk", "3.0")
from gi.repository import GLib, Gtk
GLib.set_prgname("guigym-hang")
trigger, pidfile = sys.argv[1], sys.argv[2]
open(pidfile + ".tmp", "w").write(str(os.getpid()))
os.replace(pidfile + ".tmp", pidfile)
w = Gtk.Window(title="guigym hang window")
w.add(Gtk.Button(label="hang button"))
w.connect("destroy", Gtk.main_quit)
w.show_all()
def check():
    if os.path.exists(trigger):
        time.sleep(3600)  # a hung application: AT-SPI calls into it never get a reply
    return True
GLib.timeout_add(50, check)
Gtk.main()
"""


def test_a_hung_app_costs_one_timeout_then_is_skipped(desk, tmp_path):
    """An application whose main loop blocks is marked ``skipped`` and does not make every walk
    wait for the time cap: the first walk pays about one libatspi call timeout (1.5 s), the next
    skips the app at once; the other apps stay complete."""
    c: DesktopClient = desk["client"]
    script, trigger, pidfile = tmp_path / "hang.py", tmp_path / "hang.now", tmp_path / "hang.pid"
    script.write_text(HANG_APP)
    c.launch([DEBIAN_PY, str(script), str(trigger), str(pidfile)])
    try:
        shown = Deadline(20.0, "the hang app in the accessibility tree")
        while "hang button" not in c.accessibility_tree() and not shown.expired():
            time.sleep(0.3)
        # how long a walk of this desktop takes now, and how much that varies (a busy machine
        # makes it slower and noisier): the bounds below are derived from it, not constants
        base = []
        for _ in range(2):
            t0 = time.monotonic()
            tree = _parse(c.accessibility_tree())
            base.append(time.monotonic() - t0)
        walk, jitter = max(base), abs(base[0] - base[1])
        assert tree.xpath('//application[@name="guigym-hang"]//push-button[@name="hang button"]')
        trigger.write_text("")
        time.sleep(0.5)  # let its main loop reach the sleep
        times, trees = [], []
        budget = 8 + 4 * walk  # the time cap must not be what ends a slow walk
        for _ in range(2):
            t0 = time.monotonic()
            trees.append(_parse(c.accessibility_tree(time_budget=budget)))
            times.append(time.monotonic() - t0)
        for tree, mark in zip(trees, ("timeout", "recent-timeout")):
            app = tree.xpath('//application[@name="guigym-hang"]')
            assert len(app) == 1 and app[0].get("skipped") == mark, (mark, [a.attrib for a in app])
            assert not app[0].xpath('.//push-button[@name="hang button"]')
            assert "app-timeout" in tree.get("truncated", "").split(",")
            assert "time" not in tree.get("truncated", "").split(",")
            assert tree.xpath('//application[@name="mousepad"]/frame')  # the others are still walked
        # one call timeout (1.5 s, a D-Bus timer: not slowed by load) plus the walk, not the
        # whole budget (5 s on an idle machine, widened by the measured walk and its noise);
        # the next walk skips the app: about one call timeout less
        assert times[0] < 5 + 3 * walk + 2 * jitter, (times, base)
        assert times[1] < times[0] - 0.8 + 2 * jitter, (times, base)
    finally:
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


# ---- input ------------------------------------------------------------------------------------------
def test_type_unicode_keys_and_hotkey_save(desk):
    c: DesktopClient = desk["client"]
    x, y, w, h = _box(_editor_text(c))
    c.act(A.Click(x=x + w // 2, y=y + h // 2))
    c.act(A.Hotkey(keys=("ctrl", "a")))
    c.act(A.Press(key="Delete"))
    text = "Grüße 'q' \"dq\" ✓ 日本\nsecond line"
    c.act(A.Type(text=text))
    c.act(A.KeyDown(key="shift"))
    c.act(A.Press(key="b"))
    c.act(A.KeyUp(key="shift"))
    c.act(A.Press(key="ArrowLeft"))
    c.act(A.Type(text="a"))
    expected = text + "aB"
    end = time.monotonic() + 5
    while (_editor_text(c).text or "") != expected and time.monotonic() < end:
        time.sleep(0.1)
    assert (_editor_text(c).text or "") == expected
    c.act(A.Hotkey(keys=("ctrl", "s")))
    end = time.monotonic() + 5
    while c.get_file(str(desk["home"] / "notes.txt")) in (b"", None) and time.monotonic() < end:
        time.sleep(0.1)
    saved = c.get_file("~/notes.txt").decode("utf-8")
    assert saved.rstrip("\n") == expected


def _vscroll_value(client: DesktopClient) -> float:
    tree = _parse(client.accessibility_tree())
    bars = [b for b in tree.iter("scroll-bar") if b.get("{%s}vertical" % NS["st"]) == "true"
            and b.get("{%s}value" % NS["val"]) is not None]
    assert bars, "no vertical scroll bar with a value in the a11y tree"
    return float(bars[0].get("{%s}value" % NS["val"]))


def test_wheel_scroll_moves_the_editor_view(desk):
    c: DesktopClient = desk["client"]
    x, y, w, h = _box(_editor_text(c))
    cx, cy = x + w // 2, y + h // 2
    c.act(A.Click(x=cx, y=cy))
    c.act(A.Hotkey(keys=("ctrl", "End")))
    c.act(A.Type(text="\n".join(f"row {i}" for i in range(80))))
    # a loaded machine can take seconds to work through the keystrokes: wait until the last row
    # is in the buffer, or the Home key below lands before the typing ends
    end = time.monotonic() + 30
    while "row 79" not in c.accessibility_tree() and time.monotonic() < end:
        time.sleep(0.2)
    c.act(A.Hotkey(keys=("ctrl", "Home")))
    # the view settles near the top (exactly 0 on an idle machine; a pixel off seen under load)
    end, top = time.monotonic() + 15, _vscroll_value(c)
    while time.monotonic() < end:
        time.sleep(0.3)
        now = _vscroll_value(c)
        if now == top:
            break
        top = now
    c.act(A.Scroll(dy=500, x=cx, y=cy))  # 5 wheel clicks down
    end = time.monotonic() + 15
    while _vscroll_value(c) <= top and time.monotonic() < end:
        time.sleep(0.1)
    down = _vscroll_value(c)
    assert down > top + 20, (top, down)  # five wheel clicks move several lines, not a pixel
    c.act(A.Scroll(dy=-200, x=cx, y=cy))
    end = time.monotonic() + 15
    while _vscroll_value(c) == down and time.monotonic() < end:
        time.sleep(0.1)
    assert 0 <= _vscroll_value(c) < down


def test_bad_actions_are_reported_not_executed(desk):
    c: DesktopClient = desk["client"]
    with pytest.raises(ActionNotPossible, match="off the 1280x720 screen"):
        c.act(A.Click(x=5000, y=10))
    with pytest.raises(ActionNotPossible, match="unknown key name"):
        c.act(A.Press(key="NoSuchKeyAnywhere"))
    with pytest.raises(ActionNotPossible, match="not a desktop action"):
        c.act(A.Tap(x=1, y=1))
    status, body = _raw(desk["sock"], "POST", "/guigym/action", {"Authorization": "Bearer " + TOKEN},
                        json.dumps({"name": "drag", "args": {"x1": 1, "y1": 2, "x2": "3", "y2": 4}}).encode())
    assert status == 400 and b"x2" in body


def test_launch_activate_and_close_windows(desk):
    c: DesktopClient = desk["client"]
    if shutil.which("xterm") is None:
        pytest.skip("needs xterm")
    title = "guigym-term-" + os.urandom(3).hex()
    assert "launched successfully" in c.launch(["xterm", "-T", title])
    r = c.execute_with_verification(["true"], {"window_exists": title}, max_wait_time=15, check_interval=0.2)
    assert r["verification"] == "passed"
    assert c.activate_window(title.upper()) == "Window activated successfully"  # substring, any case
    with pytest.raises(EnvInfraError, match="404"):
        c.activate_window(title.upper(), strict=True)  # strict: whole title, case-sensitive
    c.close_window(title, strict=True)
    gone = f"! pgrep -f '[{title[0]}]{title[1:]}'"  # [g]... so pgrep's own shell does not match
    r = c.execute_with_verification(["true"], {"command_success": gone}, max_wait_time=10, check_interval=0.2)
    assert r["verification"] == "passed", "xterm did not exit after close_window"
    with pytest.raises(EnvInfraError, match="404"):
        c.close_window(title)


# ---- commands and files ------------------------------------------------------------------------------
def test_execute_returns_output_and_returncode(desk):
    c: DesktopClient = desk["client"]
    r = c.execute(["printf", "%s|", "a b", "ü"])
    assert r == {"status": "success", "output": "a b|ü|", "error": "", "returncode": 0}
    r = c.execute("echo out; echo err >&2; exit 7", shell=True)
    assert (r["output"], r["error"], r["returncode"]) == ("out\n", "err\n", 7)
    assert c.execute("echo $HOME", shell=True)["output"].strip() == str(desk["home"])
    r = c.execute(["sleep", "5"], timeout=0.5)
    assert r["status"] == "error" and "timed out" in r["error"]
    r = c.run_bash_script("echo one; echo two >&2; false")
    assert r["output"] == "one\ntwo\n" and r["returncode"] == 1 and r["status"] == "error"
    assert c.platform() == "Linux"
    assert c.terminal_output() is None  # no VTE terminal on this desktop


def test_upload_and_get_file_round_trip_bytes(desk):
    c: DesktopClient = desk["client"]
    rnd = random.Random(3)
    data = bytes(rnd.getrandbits(8) for _ in range(200_000)) + b"\r\n--guigym-fake-boundary--\r\n\r\n"
    c.upload_file(data, "~/up/dir/blob.bin")
    assert (desk["home"] / "up" / "dir" / "blob.bin").read_bytes() == data
    assert c.get_file("~/up/dir/blob.bin") == data
    local = desk["root"] / "local.txt"
    local.write_text("héllo\n")
    c.upload_file(str(local), str(desk["home"] / "up" / "h.txt"))
    assert c.get_file(str(desk["home"] / "up" / "h.txt")) == "héllo\n".encode()
    assert c.get_file("~/does/not/exist") is None


def test_list_directory_matches_osworld_shape(desk):
    c: DesktopClient = desk["client"]
    base = desk["home"] / "tree"
    (base / "sub").mkdir(parents=True)
    (base / "a.txt").write_text("a")
    (base / "sub" / "b.txt").write_text("b")
    t = c.list_directory(str(base))
    assert t["type"] == "directory" and t["name"] == "tree"
    kids = {k["name"]: k for k in t["children"]}
    assert kids["a.txt"] == {"type": "file", "name": "a.txt"}
    assert kids["sub"]["children"] == [{"type": "file", "name": "b.txt"}]
    assert c.list_directory(str(base / "a.txt")) is None


def test_compat_mode_sends_generated_pyautogui_code_to_execute(desk, tmp_path):
    """A token-less server (stock OSWorld style) on loopback TCP; the "python" it runs records argv."""
    rec = tmp_path / "argv.txt"
    fake_py = tmp_path / "fakepython"
    fake_py.write_text(f"#!/bin/sh\nprintf '%s\\0' \"$@\" > {rec}\n")
    fake_py.chmod(0o755)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([DEBIAN_PY, str(SERVER_DIR), "--host", "127.0.0.1", "--port", str(port),
                          "--insecure-no-token"], env=desk["env"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        c = DesktopClient(base_url=f"http://127.0.0.1:{port}", token=None, python=str(fake_py))
        c.wait_ready(20)
        assert c.compat and c.screen_size() == (1280, 720)
        assert c.screenshot().shape == (720, 1280, 3)
        evil = "x'); import os; os.system('touch /tmp/pwned') #\n\"ü"
        c.act(A.Type(text=evil))
        argv = rec.read_bytes().split(b"\0")[:-1]
        assert argv[0] == b"-c"
        code = argv[1].decode()
        assert code == codegen.PKGS_PREFIX + codegen.to_pyautogui(A.Type(text=evil))
        c.close()
    finally:
        _kill_group(p)


# ---- pure units (no desktop) -------------------------------------------------------------------------
def _calls(code: str) -> list[ast.Call]:
    return [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call)]


def _callee(call: ast.Call) -> str:
    f = call.func
    return f"{f.value.id}.{f.attr}" if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ast.unparse(f)


def test_codegen_is_valid_pyautogui_and_escapes_untrusted_text():
    cases = {
        A.Click(x=10.6, y=20): ("pyautogui.click", [11, 20]),
        A.DoubleClick(x=1, y=2): ("pyautogui.doubleClick", [1, 2]),
        A.RightClick(x=1, y=2): ("pyautogui.rightClick", [1, 2]),
        A.Hover(x=3, y=4): ("pyautogui.moveTo", [3, 4]),
        A.Scroll(dy=300): ("pyautogui.scroll", [-3]),
        A.Scroll(dx=-100, x=5, y=6): ("pyautogui.hscroll", [-1, 5, 6]),
        A.Press(key="ArrowDown"): ("pyautogui.press", ["down"]),
        A.Hotkey(keys=("Control", "shift", "t")): ("pyautogui.hotkey", ["ctrlleft", "shift", "t"]),
        A.KeyDown(key="Enter"): ("pyautogui.keyDown", ["enter"]),
        A.KeyUp(key="alt"): ("pyautogui.keyUp", ["alt"]),
        A.Wait(seconds=2): ("time.sleep", [2.0]),
    }
    for action, (fn, args) in cases.items():
        calls = _calls(codegen.to_pyautogui(action))
        assert _callee(calls[0]) == fn, action
        assert [ast.literal_eval(a) for a in calls[0].args] == args, action
    drag = _calls(codegen.to_pyautogui(A.Drag(x1=1, y1=2, x2=30, y2=40)))
    assert [_callee(c) for c in drag] == ["pyautogui.moveTo", "pyautogui.dragTo"]
    evil = "a'b\"c\\n\n'); __import__('os').system('rm -rf /') #\t}"
    calls = _calls(codegen.to_pyautogui(A.Type(text=evil)))
    assert {_callee(c) for c in calls} == {"pyautogui.write"}
    assert "".join(ast.literal_eval(c.args[0]) for c in calls) == evil
    uni = "naïve ✓ 日本 ok"
    code = codegen.to_pyautogui(A.Type(text=uni))
    typed = []
    for c in _calls(code):
        if _callee(c) == "pyautogui.write":
            typed.append(ast.literal_eval(c.args[0]))
        elif _callee(c) == "subprocess.run":
            argv = ast.literal_eval(c.args[0])
            assert argv[:3] == ["xdotool", "type", "--"]
            typed.append(argv[3])
    assert "".join(typed) == uni
    assert codegen.to_pyautogui(A.Done(answer="x")) is None
    for bad in (A.Click(element="12"), A.Tap(x=1, y=1), A.Click(x=float("nan"), y=1), A.Click(x="1; import os", y=2)):
        with pytest.raises(ActionNotPossible):
            codegen.to_pyautogui(bad)
    cmd = codegen.execute_command("pyautogui.press('a')")
    assert cmd[:2] == ["python", "-c"] and ast.parse(cmd[2])


def test_multipart_parser_keeps_binary_parts_exact():
    b = "XyZ"
    blob = b"\r\n-x--XyZ\r\n\x00\xff\r\n" * 3  # the boundary, but not after a CRLF
    body = (f"--{b}\r\nContent-Disposition: form-data; name=\"file_path\"\r\n\r\n~/a b.txt\r\n"
            f"--{b}\r\nContent-Disposition: form-data; name=\"file_data\"; filename=\"a.bin\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode() + blob + f"\r\n--{b}--\r\n".encode()
    parts = multipart.parse(body, f"multipart/form-data; boundary={b}")
    assert parts["file_path"].data == b"~/a b.txt" and parts["file_path"].filename is None
    assert parts["file_data"].data == blob and parts["file_data"].filename == "a.bin"
    with pytest.raises(multipart.MultipartError):
        multipart.parse(body, "application/json")
