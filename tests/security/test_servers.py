"""Attacks on guigym's two HTTP servers, each made over a real socket by a client without the token.

* ``guigym serve`` (guigym/serve.py) in-process on 127.0.0.1 with the tiny local Qwen2.5-VL
  (guigym.models.tiny), so its threads can be counted with ``threading.active_count``;
* the in-desktop server (guigym/envs/desktop/server) started as in the desktop: Debian's
  ``/usr/bin/python3`` running the server directory on a unix socket with a token file (the
  endpoints used here touch no X display); threads counted in ``/proc/<pid>/task``.

Both run with ``max_connections=16`` and ``header_timeout=2`` s so the limits are reached quickly.
Latency is only ever bounded relative to a baseline measured in the same test.
"""
from __future__ import annotations

import json
import os
import select
import socket
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVER_DIR = ROOT / "guigym" / "envs" / "desktop" / "server"
DEBIAN_PY = "/usr/bin/python3"
TOKEN = "s3cret-" + os.urandom(8).hex()
MAX_CONN = 16
HEADER_TIMEOUT = 2.0


@dataclass
class Target:
    name: str
    connect: Callable[[], socket.socket]
    get_path: str  # an authenticated GET that needs no model/display work
    post_path: str  # a POST endpoint taking a JSON body
    threads: Callable[[], int]
    max_body: int


# ---- raw HTTP over a socket ---------------------------------------------------------------------
def read_response(sock: socket.socket, timeout: float = 10.0) -> tuple[Optional[int], bytes]:
    """(status, raw bytes) of one response; status None when the server closed without one."""
    sock.settimeout(timeout)
    buf = b""
    try:
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
        head, _, body = buf.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v)
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
            buf += chunk
    except (ConnectionResetError, BrokenPipeError):
        pass
    if not buf.startswith(b"HTTP/1."):
        return None, buf
    return int(buf.split(b" ", 2)[1]), buf


def request(t: Target, method: str, path: str, body: bytes = b"", token: Optional[str] = TOKEN,
            extra: str = "") -> tuple[Optional[int], bytes]:
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    if token is not None:
        head += f"Authorization: Bearer {token}\r\n"
    if body:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    with t.connect() as s:
        s.sendall((head + extra + "\r\n").encode() + body)
        return read_response(s)


def timed_get(t: Target) -> float:
    t0 = time.perf_counter()
    status, raw = request(t, "GET", t.get_path)
    assert status == 200, raw[:300]
    return time.perf_counter() - t0


def baseline(t: Target) -> float:
    return statistics.median(timed_get(t) for _ in range(5))


# ---- the two servers ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def serve_target(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from guigym.serve import ModelServer
    from guigym.models.tiny import build

    model = build(tmp_path_factory.mktemp("models") / "tiny-qwen25vl", seed=0)
    srv = ModelServer(str(model), TOKEN, host="127.0.0.1", port=0, max_connections=MAX_CONN,
                      header_timeout=HEADER_TIMEOUT)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    host, port = srv.address
    yield Target("serve", lambda: socket.create_connection((host, port), timeout=10), "/v1/models",
                 "/v1/chat/completions", threading.active_count, srv.max_body)
    srv.shutdown()


@pytest.fixture(scope="module")
def desktop_target(tmp_path_factory):
    if not os.path.exists(DEBIAN_PY):
        pytest.skip(f"the in-desktop server runs under Debian's {DEBIAN_PY}, absent here")
    d = tmp_path_factory.mktemp("desk")
    (d / "token").write_text(TOKEN)
    sock_path = str(d / "server.sock")
    # no X is opened by the endpoints used here; --display only satisfies the server's check
    proc = subprocess.Popen([DEBIAN_PY, str(SERVER_DIR), "--unix-socket", sock_path, "--token-file", str(d / "token"),
                             "--display", ":987", "--max-connections", str(MAX_CONN),
                             "--header-timeout", str(HEADER_TIMEOUT)],
                            stdout=subprocess.DEVNULL, stderr=open(d / "server.log", "wb"))

    def connect() -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(sock_path)
        return s

    end = time.monotonic() + 30
    while not os.path.exists(sock_path):
        assert proc.poll() is None, (d / "server.log").read_text()
        assert time.monotonic() < end, "desktop server did not create its socket"
        time.sleep(0.05)
    yield Target("desktop", connect, "/guigym/version", "/execute",
                 lambda: len(os.listdir(f"/proc/{proc.pid}/task")), 1 << 30)
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(params=["serve", "desktop"])
def target(request) -> Target:
    return request.getfixturevalue(f"{request.param}_target")


# ---- attacks ------------------------------------------------------------------------------------
def _bad_requests(t: Target) -> list[bytes]:
    """Ten kinds of malformed, unauthenticated requests (cycled to 50)."""
    p = t.post_path
    return [
        f"POST {p} HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n".encode(),
        f"POST {p} HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n".encode(),
        f"POST {p} HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n".encode(),
        f"POST {p} HTTP/1.1\r\nHost: x\r\nContent-Length: 1_0\r\n\r\n".encode(),
        f"POST {p} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n".encode(),
        f"POST {p} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFF\r\n".encode(),
        b"\x00\xff\xfe garbage \x01\x02\r\n\r\n",
        b"GET /" + b"A" * 70000 + b" HTTP/1.1\r\n\r\n",
        f"POST {p} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\nContent-Length: -5\r\n\r\n".encode(),
        f"POST {p} HTTP/1.1\r\n" .encode() + b"X-Junk: y\r\n" * 200 + b"\r\n",
    ]


def test_fifty_bad_unauthenticated_requests_leave_the_server_answering(target):
    t = target
    base = baseline(t)
    slow = []
    for _ in range(6):  # slow-loris: partial headers, held open through the attack
        s = t.connect()
        s.sendall(f"POST {t.post_path} HTTP/1.1\r\nHost: x\r\nX-Slow: ".encode())
        slow.append(s)
    kinds = _bad_requests(t)
    answers = []
    try:
        for i in range(50):
            with t.connect() as s:
                try:
                    s.sendall(kinds[i % len(kinds)])
                except (BrokenPipeError, ConnectionResetError):
                    pass
                status, raw = read_response(s, timeout=15)
            # refused (4xx/5xx) or hung up on; never served, never left hanging
            assert status is None or 400 <= status < 600, (i, raw[:200])
            answers.append(status)
        elapsed = timed_get(t)
    finally:
        for s in slow:
            s.close()
    assert any(a == 401 for a in answers), answers
    assert elapsed < max(1.0, 20 * base), f"authenticated GET took {elapsed:.3f} s after the attack (baseline {base:.4f} s)"


def test_unauthenticated_large_body_is_refused_before_it_is_read(target):
    t = target
    declared = min(t.max_body, 1 << 30)
    s = t.connect()
    s.sendall(f"POST {t.post_path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {declared}\r\n\r\n".encode())
    chunk = b"x" * 65536
    sent, status, raw = 0, None, b""
    s.setblocking(False)
    try:
        while sent < declared // 4:
            readable, writable, _ = select.select([s], [s], [], 10)
            if readable:
                break
            if not writable:
                break
            try:
                sent += s.send(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            except BlockingIOError:
                continue
        s.setblocking(True)
        status, raw = read_response(s, timeout=10)
    finally:
        s.close()
    # the 401 came while the client was still sending: the server never waited for the body
    assert status == 401, (sent, raw[:200])
    assert sent < declared // 4, f"the client could push {sent} of {declared} bytes before any answer"


def test_bad_framing_with_the_token_is_refused_without_reading(target):
    """Even an authenticated client gets 400/411/413/501 at once, not a read until close."""
    t = target
    auth = f"Authorization: Bearer {TOKEN}\r\n"
    cases = {
        "Content-Length: -1\r\n": 400,
        "Content-Length: abc\r\n": 400,
        "Content-Length: +5\r\n": 400,
        "Content-Length: 1_0\r\n": 400,
        f"Content-Length: {t.max_body + 1}\r\n": 413,
        "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n": 400,
        "Transfer-Encoding: gzip\r\n": 501,
    }
    for header, want in cases.items():
        with t.connect() as s:
            s.sendall(f"POST {t.post_path} HTTP/1.1\r\nHost: x\r\n{auth}{header}\r\n".encode())
            status, raw = read_response(s, timeout=15)
        assert status == want, (header, raw[:300])
    # chunked: refused by serve (411), capped per chunk by the desktop server (413 before reading 1 TiB)
    with t.connect() as s:
        s.sendall(f"POST {t.post_path} HTTP/1.1\r\nHost: x\r\n{auth}Transfer-Encoding: chunked\r\n\r\n"
                  "10000000000\r\n".encode())
        status, raw = read_response(s, timeout=15)
    assert status == (411 if t.name == "serve" else 413), raw[:300]


def test_connections_and_threads_are_bounded(target):
    t = target
    base_threads = t.threads()
    base = baseline(t)
    held = []
    try:
        for _ in range(3 * MAX_CONN):  # idle connections that never send a byte
            held.append(t.connect())
        threads, busy, waiting = t.threads(), 0, list(held)
        end = time.monotonic() + 30  # a wait limit: the accept loop answers the excess with 503
        while busy < 2 * MAX_CONN and waiting and time.monotonic() < end:
            threads = max(threads, t.threads())
            ready, _, _ = select.select(waiting, [], [], 0.1)
            for s in ready:
                waiting.remove(s)
                busy += read_response(s, timeout=5)[0] == 503
    finally:
        for s in held:
            s.close()
    assert threads <= base_threads + MAX_CONN + 1, f"{threads} threads for {len(held)} connections (limit {MAX_CONN})"
    assert busy >= 2 * MAX_CONN - 2, f"only {busy} of the {2 * MAX_CONN} connections over the limit got 503"
    # closed slots come back: an authenticated client is served again (the held ones time out too)
    end = time.monotonic() + 10 * HEADER_TIMEOUT
    while True:
        status, raw = request(t, "GET", t.get_path)
        if status == 200 or time.monotonic() > end:
            break
        time.sleep(0.1)
    assert status == 200, raw[:200]
    assert timed_get(t) < max(1.0, 20 * base)


def test_slow_loris_is_dropped_after_the_header_timeout(target):
    """A client trickling header bytes keeps its slot only for ``header_timeout`` seconds."""
    t = target
    s = t.connect()
    s.sendall(b"GET / HTTP/1.1\r\nX-Slow: ")
    t0 = time.monotonic()
    closed = False
    try:
        while time.monotonic() - t0 < 30 * HEADER_TIMEOUT:  # a wait limit, not a speed claim
            try:
                s.sendall(b"b")  # one byte of one header line at a time: no size limit is ever hit
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            r, _, _ = select.select([s], [], [], 0.2)
            if r:
                try:
                    data = s.recv(4096)
                except ConnectionResetError:
                    data = b""
                if not data:
                    closed = True
                    break
    finally:
        s.close()
    assert closed, f"the server still held a trickling connection after {30 * HEADER_TIMEOUT:g} s"
    assert time.monotonic() - t0 >= HEADER_TIMEOUT * 0.9  # it was the timeout, not an early refusal


def test_serve_still_generates_after_the_attacks(serve_target):
    """The model behind ``guigym serve`` still answers a real completion with the token."""
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "seed": 1}).encode()
    status, raw = request(serve_target, "POST", "/v1/chat/completions", body)
    assert status == 200, raw[:300]
    reply = json.loads(raw.partition(b"\r\n\r\n")[2])
    assert reply["choices"][0]["message"]["role"] == "assistant"
