"""Attack: the agent answers for an app. It starts its own server on the port where a getter asks
the app (VLC's HTTP interface, Chromium's DevTools) and replies "playing" / a fake tab list.

The getters' in-desktop programs run for real here (this machine plays the desktop): they must
resolve the listening socket to its process and refuse every answer that does not come from the
app's own installed binary (guigym/envs/desktop/evaluators/getters/port_owner.py). A real Chromium behind the
second port shows that refusing the impostor still reads the real browser.
"""
from __future__ import annotations

import http.server
import json
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from guigym.envs.desktop.evaluators.getters import vlc as getters_apps
from guigym.envs.desktop.evaluators import GETTERS, GetterContext
from guigym.envs.desktop.evaluators.getters.browser import cdp_evaluate

PLAYING = (b'<?xml version="1.0" encoding="utf-8"?><root><state>playing</state><information>'
           b'<category name="meta"><info name="filename">Baby Shark.mp4</info></category></information></root>')


class LocalClient:
    """The desktop is this machine: ``execute`` runs the command here."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def execute(self, command: Any, shell: bool = False, timeout: float = 60) -> dict:
        self.calls.append(command)
        p = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        return {"status": "success", "output": p.stdout, "error": p.stderr, "returncode": p.returncode}


class _Impostor(http.server.BaseHTTPRequestHandler):
    """Answers like VLC's status page and like DevTools' tab list, whatever is asked."""
    hits: list[str] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).hits.append(self.path)
        body = PLAYING if "status.xml" in self.path else json.dumps(
            [{"id": "X", "type": "page", "url": "https://www.example.com/", "title": "Example",
              "webSocketDebuggerUrl": "ws://127.0.0.1:1/devtools/page/X"}]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture()
def impostor() -> Iterator[int]:
    _Impostor.hits = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Impostor)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_of_the_agent_on_vlcs_port_is_not_read_as_vlc(impostor: int, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(getters_apps, "VLC_HTTP_PORT", impostor)
    got = GETTERS.get("vlc_playing_info")(GetterContext(client=LocalClient(), cache_dir=tmp_path), {"dest": "s.xml"})
    assert got is None                       # read as "VLC is not running": is_vlc_playing scores 0
    assert _Impostor.hits == []              # refused before a byte of its answer was read
    assert not (tmp_path / "s.xml").exists()


def test_a_fake_devtools_endpoint_is_not_read_as_the_browser(impostor: int, tmp_path: Path) -> None:
    ctx = GetterContext(client=LocalClient(), cache_dir=tmp_path)
    ctx.chromium_port = impostor  # type: ignore[attr-defined]
    # the first port (the task's) is the impostor; the fallback port has nothing: no browser
    assert cdp_evaluate(ctx, None, None) is None
    assert GETTERS.get("open_tabs_info")(ctx, {}) == []   # is_expected_tabs then scores 0
    assert _Impostor.hits == []


def test_socat_is_followed_to_the_port_it_forwards_to(impostor: int, tmp_path: Path, monkeypatch) -> None:
    """OSWorld's Chrome tasks put socat on 9222 in front of the browser; an agent can put socat in
    front of its own server just as well, so the check follows socat to its target."""
    if shutil.which("socat") is None:
        pytest.skip("socat is not installed here (apt install socat)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        front = s.getsockname()[1]
    proc = subprocess.Popen(["socat", f"TCP-LISTEN:{front},bind=127.0.0.1,reuseaddr,fork",
                             f"TCP:127.0.0.1:{impostor}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:  # until socat listens
            try:
                socket.create_connection(("127.0.0.1", front), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("socat did not start listening")
                time.sleep(0.05)
        _Impostor.hits = []
        monkeypatch.setattr(getters_apps, "VLC_HTTP_PORT", front)
        got = GETTERS.get("vlc_playing_info")(GetterContext(client=LocalClient(), cache_dir=tmp_path), {"dest": "s.xml"})
        assert got is None and _Impostor.hits == []
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_the_owner_check_passes_the_real_app(tmp_path: Path) -> None:
    """The positive side: a real Chromium on the port is read (else every browser getter would
    score 0 and the check would be useless)."""
    exe = shutil.which("chromium") or shutil.which("google-chrome")
    if exe is None:
        pytest.skip("no Chromium on this machine")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    page = tmp_path / "p.html"
    page.write_text("<title>Real</title><p>real page</p>")
    proc = subprocess.Popen([exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             f"--remote-debugging-port={port}", f"--user-data-dir={tmp_path / 'profile'}",
                             page.as_uri()], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        ctx = GetterContext(client=LocalClient(), cache_dir=tmp_path)
        ctx.chromium_port = port  # type: ignore[attr-defined]
        deadline = time.monotonic() + 30
        got = None
        while time.monotonic() < deadline:
            got = cdp_evaluate(ctx, page.as_uri(), "document.title")
            if got is not None and got.get("value") == "Real":
                break
            time.sleep(0.3)
        assert got is not None and got.get("value") == "Real"
    finally:
        import os
        import signal
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_the_verdicts_name_the_impostor(impostor: int) -> None:
    """The in-desktop check itself: "impostor" names the executable, "none" a free port."""
    from guigym.envs.desktop.evaluators.getters.port_owner import PORT_OWNER_CODE, VLC_NAMES

    prog = PORT_OWNER_CODE + "\nimport json, sys\nprint(json.dumps([port_owner_verdict(int(p), %r) for p in sys.argv[1:]]))" % (VLC_NAMES,)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    out = subprocess.run(["python3", "-c", prog, str(impostor), str(free)], capture_output=True, text=True, timeout=60)
    (v1, d1), (v2, _) = json.loads(out.stdout)
    assert v1 == "impostor" and "python" in d1 and str(impostor) in d1
    assert v2 == "none"


@pytest.fixture()
def parked_listener() -> Iterator[int]:
    """A port that listens with no process owning the socket: the agent's trick of sending the
    listening socket over a unix socket pair and closing its own copy (the kernel keeps a socket
    in flight alive; /proc shows no process holding it). port_owner's verdict is "unknown"."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    socket.send_fds(a, [b"x"], [listener.fileno()])
    listener.close()
    try:
        yield port
    finally:
        a.close()
        b.close()


def test_a_parked_listener_scores_as_no_app_instead_of_losing_the_episode(parked_listener: int, tmp_path: Path,
                                                                          monkeypatch) -> None:
    """Before: the "unknown" verdict raised EnvInfraError, so an agent could turn any VLC or
    browser task it failed into a lost (never scored) episode. Now the answer is unverifiable and
    not read: the getters return what they return for a missing app, which scores 0."""
    from guigym.envs.desktop.evaluators.getters.port_owner import PORT_OWNER_CODE, VLC_NAMES

    prog = PORT_OWNER_CODE + "\nimport sys\nprint(port_owner_verdict(int(sys.argv[1]), %r)[0])" % (VLC_NAMES,)
    out = subprocess.run(["python3", "-c", prog, str(parked_listener)], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "unknown"  # the attack reaches the verdict it aims at
    monkeypatch.setattr(getters_apps, "VLC_HTTP_PORT", parked_listener)
    ctx = GetterContext(client=LocalClient(), cache_dir=tmp_path)
    assert GETTERS.get("vlc_playing_info")(ctx, {"dest": "s.xml"}) is None
    assert not (tmp_path / "s.xml").exists()
    ctx.chromium_port = parked_listener  # type: ignore[attr-defined]
    assert GETTERS.get("open_tabs_info")(ctx, {}) == []


# ---------------------------------------------------------------- the agent's own instance of the app

class SetupRecordingClient(LocalClient):
    """LocalClient whose ``launched()`` answers as the desktop's server does (``GET
    /guigym/launched``): the live members of the sessions the "setup" started."""

    def __init__(self, leaders: list[tuple[int, int]]) -> None:
        super().__init__()
        self.leaders = leaders

    def launched(self) -> list[tuple[int, int]]:
        from guigym.envs.desktop.server import launched

        return launched.members(self.leaders)


def _serve(exe: str, port: int, root: Path) -> subprocess.Popen:
    """``exe -m http.server`` on ``port`` serving ``root``, in a session of its own (as the server's
    /setup/launch starts apps, and as an agent's ``setsid`` would)."""
    proc = subprocess.Popen([exe, "-m", "http.server", str(port), "--bind", "127.0.0.1", "-d", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("the stand-in app did not start listening")
            time.sleep(0.05)


def test_the_agents_own_instance_of_the_app_is_not_read(tmp_path: Path, monkeypatch) -> None:
    """The agent kills the task's app and starts the same installed binary with a configuration
    of its own, answering "playing" (VLC with an HTTP source directory of the agent's). The port
    check passes it (right binary); only the record of what the setup started tells them apart.
    An installed python3 plays the app: the check treats any binary under /usr the same way."""
    import os
    import signal

    from guigym.envs.desktop.server import launched

    exe = os.path.realpath("/usr/bin/python3")
    if not exe.startswith("/usr/"):
        pytest.skip("no system python3 under /usr")
    for name, body in (("task", b"<root><state>stopped</state></root>"), ("agent", PLAYING)):
        (tmp_path / name / "requests").mkdir(parents=True)
        (tmp_path / name / "requests" / "status.xml").write_bytes(body)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(getters_apps, "VLC_HTTP_PORT", port)
    monkeypatch.setattr(getters_apps, "VLC_NAMES", (os.path.basename(exe),))
    procs = [_serve(exe, port, tmp_path / "task")]
    try:
        client = SetupRecordingClient([(procs[0].pid, launched.start_time(procs[0].pid))])
        ctx = GetterContext(client=client, cache_dir=tmp_path / "cache")
        got = GETTERS.get("vlc_playing_info")(ctx, {"dest": "s.xml"})
        assert got is not None and b"stopped" in Path(got).read_bytes()  # the task's instance is read
        os.killpg(procs[0].pid, signal.SIGKILL)
        procs[0].wait(timeout=10)
        procs.append(_serve(exe, port, tmp_path / "agent"))  # same binary, the agent's configuration
        assert GETTERS.get("vlc_playing_info")(ctx, {"dest": "s2.xml"}) is None  # scored as no VLC
        assert not (tmp_path / "cache" / "s2.xml").exists()
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)


def test_the_setup_record_follows_the_app_past_its_launcher_and_refuses_a_recycled_leader() -> None:
    """members(): a process the launched command forked stays in the record after the command
    itself exits (``sh -c 'app &'``); a leader pid now held by another process yields nothing."""
    import os
    import signal

    from guigym.envs.desktop.server import launched

    sh = subprocess.Popen(["/bin/sh", "-c", "sleep 60 & echo $!"], stdout=subprocess.PIPE, text=True,
                          start_new_session=True)
    try:
        child = int(sh.stdout.readline())
        started = launched.start_time(sh.pid)
        sh.wait(timeout=30)  # the launcher is gone, its child lives on in its session
        got = dict(launched.members([(sh.pid, started)]))
        assert child in got and got[child] == launched.start_time(child)
        mine = launched.start_time(os.getpid())
        assert launched.members([(os.getpid(), mine + 1)]) == []  # a recycled pid: another start time
    finally:
        os.killpg(sh.pid, signal.SIGKILL)
