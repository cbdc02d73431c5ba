"""Fail-closed request handling shared by guigym's two HTTP servers (standard library only).

Used by the in-desktop server (:mod:`.app`, which runs under Debian's python with no other
guigym module, hence this file's place) and by ``guigym serve`` (:mod:`guigym.serve`). A client
that has not shown the token must not be able to make the server read, wait or spawn much:

* **Bounded connections.** :class:`GuardedServerMixin` gives each accepted connection a slot of
  a semaphore (``max_connections``, default :data:`DEFAULT_MAX_CONNECTIONS`); with none free, the
  accept loop itself answers ``503`` + ``Connection: close`` and drops the socket, so threads never
  exceed ``max_connections`` + the accept thread.
* **Timeouts on every read.** :class:`GuardedHandlerMixin` reads through :class:`DeadlineReader`:
  the request line and headers must arrive within ``header_timeout`` seconds of the request
  starting (this also ends idle keep-alive connections), and every later ``recv`` (the body) waits
  at most ``io_timeout`` seconds; sends get ``io_timeout`` too. A slow-loris client therefore
  holds one slot for at most ``header_timeout`` seconds.
* **Strict body framing, decided before a byte of the body is read.**
  :func:`body_length` accepts only a decimal ``Content-Length`` up to ``max_body`` (one value, no
  sign, no ``_``), refuses ``Content-Length`` together with ``Transfer-Encoding`` (request
  smuggling) and any ``Transfer-Encoding`` but ``chunked``; :func:`read_chunked` caps every chunk
  *before* reading it.
* The handlers check the token before calling any of this (:func:`refuse_unauthorized` answers
  401 and hangs up after draining at most :data:`UNAUTHORIZED_DRAIN` bytes).
"""
from __future__ import annotations

import io
import re
import socket
import sys
import threading
import time
from typing import Any, Optional

__all__ = [
    "DEFAULT_MAX_CONNECTIONS", "DEFAULT_HEADER_TIMEOUT_S", "DEFAULT_IO_TIMEOUT_S", "UNAUTHORIZED_DRAIN",
    "BodyError", "DeadlineReader", "GuardedServerMixin", "GuardedHandlerMixin", "body_length",
    "read_chunked", "read_exact", "refuse_unauthorized",
]

#: concurrent connections (each gets one thread); more are answered 503 at once
DEFAULT_MAX_CONNECTIONS = 64
#: seconds for a request line + headers to arrive (also the keep-alive idle limit)
DEFAULT_HEADER_TIMEOUT_S = 30.0
#: seconds any single body read or response write may block
DEFAULT_IO_TIMEOUT_S = 30.0
#: a request without the token may send at most this much body before we answer 401 and hang up
UNAUTHORIZED_DRAIN = 64 * 1024

_DECIMAL = re.compile(r"[0-9]{1,18}")


class BodyError(Exception):
    """The request's body framing is refused: answer ``status`` and close the connection."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def body_length(headers: Any, max_body: int, allow_chunked: bool) -> Optional[int]:
    """How many body bytes to read: an int, or None for a chunked body (only if ``allow_chunked``).

    Raises :class:`BodyError`: 400 for a negative, signed, non-decimal or repeated-and-different
    ``Content-Length`` or one sent together with ``Transfer-Encoding``; 411 for chunked when not
    allowed; 413 above ``max_body``; 501 for a transfer coding other than ``chunked``.
    """
    te = headers.get("Transfer-Encoding")
    lengths = headers.get_all("Content-Length") or []
    if te is not None:
        if lengths:
            raise BodyError(400, "Content-Length and Transfer-Encoding together are refused")
        if te.strip().lower() != "chunked":
            raise BodyError(501, f"Transfer-Encoding {te!r} is not supported (only chunked)")
        if not allow_chunked:
            raise BodyError(411, "a chunked body is not accepted here: send Content-Length")
        return None
    if not lengths:
        return 0
    values = {v.strip() for v in lengths}
    if len(values) != 1:
        raise BodyError(400, f"conflicting Content-Length headers {sorted(values)}")
    value = values.pop()
    if not _DECIMAL.fullmatch(value):
        raise BodyError(400, f"Content-Length must be a non-negative decimal integer, got {value[:40]!r}")
    n = int(value)
    if n > max_body:
        raise BodyError(413, f"body of {n} bytes exceeds the {max_body}-byte limit")
    return n


def read_exact(rfile: Any, n: int) -> bytes:
    """``n`` bytes from ``rfile``; 400 when the client stops early (timeouts raise TimeoutError)."""
    data = rfile.read(n) if n else b""
    if len(data) != n:
        raise BodyError(400, f"body ended after {len(data)} of {n} bytes")
    return data


def read_chunked(rfile: Any, max_body: int) -> bytes:
    """A ``Transfer-Encoding: chunked`` body of at most ``max_body`` bytes (RFC 9112 section 7.1);
    each chunk's size is checked against what is left before the chunk is read."""
    out = bytearray()
    while True:
        line = rfile.readline(1026)
        if not line.endswith(b"\n"):
            raise BodyError(400, "chunk size line missing or too long")
        size_text = line.split(b";", 1)[0].strip()
        if not re.fullmatch(rb"[0-9A-Fa-f]{1,16}", size_text):
            raise BodyError(400, f"bad chunk size {size_text[:20]!r}")
        size = int(size_text, 16)
        if size == 0:
            for _ in range(100):  # trailer fields, then the empty line
                trailer = rfile.readline(8192)
                if trailer in (b"\r\n", b"\n", b""):
                    return bytes(out)
            raise BodyError(400, "too many chunked trailer lines")
        if len(out) + size > max_body:
            raise BodyError(413, f"chunked body exceeds the {max_body}-byte limit")
        out += read_exact(rfile, size)
        if rfile.readline(3) not in (b"\r\n", b"\n"):
            raise BodyError(400, "chunk not followed by CRLF")


def refuse_unauthorized(handler: Any, body: bytes, extra_headers: Optional[dict[str, str]] = None) -> None:
    """Answer 401 to a request without the right token, then hang up.

    The body is never read beyond :data:`UNAUTHORIZED_DRAIN` bytes: a small one is drained so the
    client reads our answer instead of a connection reset; a large, chunked or malformed one is
    left unread and the connection closed.
    """
    try:
        n = body_length(handler.headers, UNAUTHORIZED_DRAIN, allow_chunked=False)
    except BodyError:
        n = 0
    if n:
        try:
            handler.rfile.read(n)
        except OSError:
            pass
    handler.close_connection = True
    handler.send_response(401)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.send_header("Connection", "close")
    for k, v in (extra_headers or {}).items():
        handler.send_header(k, v)
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(body)


class DeadlineReader(io.RawIOBase):
    """Raw reader over a socket: every ``recv`` waits at most ``idle`` seconds and never past
    ``deadline`` (monotonic time, None = no deadline); both raise :class:`TimeoutError`."""

    def __init__(self, sock: socket.socket, idle: float) -> None:
        super().__init__()
        self.sock = sock
        self.idle = idle
        self.deadline: Optional[float] = None

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        timeout = self.idle
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("request headers did not arrive in time")
            timeout = min(timeout, left)
        self.sock.settimeout(timeout)
        return self.sock.recv_into(buf)


class GuardedHandlerMixin:
    """Mix into a ``BaseHTTPRequestHandler`` (before it) whose server is a GuardedServerMixin."""

    server: Any
    connection: socket.socket
    rfile: Any

    def setup(self) -> None:
        super().setup()  # type: ignore[misc]
        self.rfile.close()  # the stock makefile; ours enforces the timeouts
        self._reader = DeadlineReader(self.connection, self.server.io_timeout)
        self.rfile = io.BufferedReader(self._reader, 64 * 1024)

    def handle_one_request(self) -> None:
        # BaseHTTPRequestHandler turns a TimeoutError here into "close the connection"
        self._reader.deadline = time.monotonic() + self.server.header_timeout
        super().handle_one_request()  # type: ignore[misc]

    def parse_request(self) -> bool:
        ok = super().parse_request()  # type: ignore[misc]
        self._reader.deadline = None  # headers are in; body reads get the per-read timeout only
        self.connection.settimeout(self.server.io_timeout)  # for our writes
        return ok


class GuardedServerMixin:
    """Mix into a ``ThreadingHTTPServer`` (before it): at most ``max_connections`` connections
    are served at once (one thread each); more get an immediate 503 from the accept loop."""

    max_connections = DEFAULT_MAX_CONNECTIONS
    header_timeout = DEFAULT_HEADER_TIMEOUT_S
    io_timeout = DEFAULT_IO_TIMEOUT_S
    daemon_threads = True  # no list of finished threads kept; shutdown does not wait for stuck ones
    request_queue_size = 128  # listen backlog (stdlib: 5), so a burst is answered, not SYN-retried

    _BUSY_BODY = b'{"error": {"message": "too many connections; retry shortly", "code": 503}}'

    def guard(self, max_connections: int = DEFAULT_MAX_CONNECTIONS, header_timeout: float = DEFAULT_HEADER_TIMEOUT_S,
              io_timeout: float = DEFAULT_IO_TIMEOUT_S) -> None:
        """Set the limits (call before serving)."""
        if max_connections < 1 or header_timeout <= 0 or io_timeout <= 0:
            raise ValueError("max_connections must be >= 1 and the timeouts > 0")
        self.max_connections = int(max_connections)
        self.header_timeout = float(header_timeout)
        self.io_timeout = float(io_timeout)
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self.refused_busy = 0

    def process_request(self, request: Any, client_address: Any) -> None:
        if not hasattr(self, "_slots"):
            self.guard()
        if not self._slots.acquire(blocking=False):
            self.refused_busy += 1
            self._refuse_busy(request)
            return
        try:
            super().process_request(request, client_address)  # type: ignore[misc]
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)  # type: ignore[misc]
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up or stalled is routine here, not a traceback on stderr."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)  # type: ignore[misc]

    def _refuse_busy(self, request: socket.socket) -> None:
        head = ("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(self._BUSY_BODY)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n")
        try:
            request.settimeout(0.5)  # the accept loop must not wait on this client
            request.sendall(head.encode("ascii") + self._BUSY_BODY)
        except OSError:
            pass
        self.shutdown_request(request)  # type: ignore[attr-defined]
