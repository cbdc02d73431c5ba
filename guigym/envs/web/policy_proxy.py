"""A loopback HTTP forward proxy that enforces one browser context's :class:`UrlPolicy`.

Why a proxy and not request routing: Playwright turns Chromium's HTTP cache off in every context
that has a route (it sends ``Network.setCacheDisabled(true)`` on each of the context's CDP
sessions whenever routes exist, playwright#7220), and a ``Network.setCacheDisabled(false)`` of our
own on another session does not undo it (Chromium bypasses the cache when any session asks).
Routing also pauses every request for a round trip through Playwright's driver. A proxy given to
the context at creation (``new_context(proxy=...)``; Playwright sends loopback through it too)
sees every request Chromium's network stack makes for that context: every tab and popup, frames,
workers and service workers, and every hop of a redirect, while the HTTP cache in front of it
stays on.

Protocol (HTTP/1.1 forward proxy, one request per client connection):

* ``http://`` requests arrive in absolute form (``GET http://host:port/path HTTP/1.1``): the URL
  is checked with :meth:`UrlPolicy.refusal`; an allowed one is sent upstream with
  ``Connection: close`` and the response is streamed back until the server closes;
* ``CONNECT host:port`` (``https://`` and every ``ws(s)://``): allowed when
  ``https://host:port`` is an allowed origin, then bytes are piped both ways (the path is inside
  TLS; origins are what the policy decides on);
* refused: a navigation (``Sec-Fetch-Mode: navigate``, or on hosts that get no ``Sec-Fetch-*``
  headers an ``Upgrade-Insecure-Requests: 1`` request) gets ``204 No Content``, on which Chromium
  stays on the current page as with an aborted request; anything else gets ``403``; both with
  ``Cache-Control: no-store``, so a refusal is never cached either. A refused ``CONNECT`` gets
  ``403`` (Chromium: ``ERR_TUNNEL_CONNECTION_FAILED``).

``policy`` may change during the proxy's life (a prewarmed context is built before its episode's
policy is known); ``None`` refuses everything. ``upstreams`` maps an allowed ``(host, port)`` to
the ``(host, port)`` actually connected to, the request itself unchanged (a site served by two
instances behind one URL: sites/standby.py); the policy is checked on the URL as asked.

Every request let through is recorded (:meth:`take_requested`): the URL of an ``http://`` one, the
``https://host:port`` of a ``CONNECT``; a reused context (envs/web/recycle.py) learns from it which
origins an episode touched and whether its HTTP cache may hold anything but the host's own loads.
"""
from __future__ import annotations

import asyncio
import contextlib
from typing import Callable, Optional
from urllib.parse import urlsplit

from guigym.envs.web.url_policy import UrlPolicy

#: largest request head accepted (request line + headers)
MAX_HEAD = 64 * 1024
#: distinct URLs recorded between two :meth:`PolicyProxy.take_requested` calls; past it only
#: "more than this" is kept (a page requesting in a loop must not grow memory)
MAX_RECORDED = 2000
_CHUNK = 64 * 1024
#: headers meant for the proxy, not the origin server
_HOP_HEADERS = {b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive"}
_NO_CONTENT = (b"HTTP/1.1 204 No Content\r\nCache-Control: no-store\r\nContent-Length: 0\r\n"
               b"Connection: close\r\n\r\n")
_REFUSED_BODY = b"refused by the task's URL policy"
_FORBIDDEN = (b"HTTP/1.1 403 Forbidden\r\nCache-Control: no-store\r\nContent-Type: text/plain\r\n"
              b"Content-Length: " + str(len(_REFUSED_BODY)).encode() + b"\r\nConnection: close\r\n\r\n" + _REFUSED_BODY)
_BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_BAD_GATEWAY = b"HTTP/1.1 502 Bad Gateway\r\nCache-Control: no-store\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def _headers(head: bytes) -> tuple[list[bytes], dict[bytes, bytes]]:
    """(raw header lines, lower-case name -> value) of a request head's header block."""
    lines = head.split(b"\r\n")[1:]
    lines = [ln for ln in lines if ln]
    fields: dict[bytes, bytes] = {}
    for ln in lines:
        name, _, value = ln.partition(b":")
        fields[name.strip().lower()] = value.strip()
    return lines, fields


def is_navigation(fields: dict[bytes, bytes]) -> bool:
    """Whether a request (its lower-case header fields) loads a document into a tab or frame."""
    mode = fields.get(b"sec-fetch-mode")
    if mode is not None:
        return mode == b"navigate"
    return fields.get(b"upgrade-insecure-requests") == b"1"


class PolicyProxy:
    """One listening socket on 127.0.0.1 for one browser context; runs on the caller's event loop.

    ``on_refused(url, navigation)`` is called (on that loop) for every refused request: ``url`` as
    the browser asked for it (``https://host:port`` for a CONNECT), ``navigation`` as
    :func:`is_navigation` says (False for a CONNECT, whose request is inside the tunnel).
    """

    def __init__(self, policy: Optional[UrlPolicy] = None,
                 on_refused: Optional[Callable[[str, bool], None]] = None) -> None:
        self.policy = policy
        self.on_refused = on_refused
        self.upstreams: dict[tuple[str, int], tuple[str, int]] = {}
        self._server: Optional[asyncio.AbstractServer] = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._busy: set[asyncio.Task[None]] = set()  # those that have read a request (drain waits for them)
        self.port = 0
        self._requested: set[str] = set()
        self._overflow = False

    def _record(self, url: str) -> None:
        if len(self._requested) < MAX_RECORDED:
            self._requested.add(url)
        elif url not in self._requested:
            self._overflow = True

    def take_requested(self) -> tuple[frozenset[str], bool]:
        """The URLs let through since the last call (``https://host:port`` for a tunnel), and
        whether more distinct ones than :data:`MAX_RECORDED` were (then the set is a part only);
        starts the next record."""
        out = (frozenset(self._requested), self._overflow)
        self._requested, self._overflow = set(), False
        return out

    @property
    def server(self) -> str:
        """The proxy's address for Playwright's ``proxy={"server": ...}``."""
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> "PolicyProxy":
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0, limit=MAX_HEAD)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._tasks):
            task.cancel()

    async def drain(self, timeout_s: float = 5.0) -> None:
        """Take no new connection and refuse every new request, let the exchanges under way end
        (up to ``timeout_s``, then they are cut), so that afterwards nothing of this context can
        reach any server."""
        self.policy = None
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in self._tasks - self._busy:  # connections that have sent no request yet
            task.cancel()
        if self._busy:
            _, pending = await asyncio.wait(list(self._busy), timeout=timeout_s)
            for task in pending:
                task.cancel()

    def _refuse(self, url: str, navigation: bool) -> None:
        if self.on_refused is not None:
            try:
                self.on_refused(url, navigation)
            except Exception:  # noqa: BLE001 - reporting must not break the proxy
                pass

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass  # the browser gave up on the request (tab closed, navigation cancelled)
        except asyncio.CancelledError:
            pass  # close(): ends as done, not cancelled (asyncio's streams would log a cancelled one)
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)
                self._busy.discard(task)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        task = asyncio.current_task()
        if task is not None:
            self._busy.add(task)
        try:
            method, target, version = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        except ValueError:
            writer.write(_BAD_REQUEST)
            return
        lines, fields = _headers(head)
        policy = self.policy
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            url = f"https://{target}"
            ok = policy is not None and port.isdigit() and policy.allows(url + "/")
            if not ok:
                self._refuse(url, False)
                writer.write(_FORBIDDEN)
                return
            self._record(url)
            try:
                up_r, up_w = await asyncio.open_connection(*self._upstream(host.strip("[]"), int(port)))
            except OSError:
                writer.write(_BAD_GATEWAY)
                return
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            await pipe(reader, writer, up_r, up_w, b"")
            return
        parts = urlsplit(target)
        if policy is None or parts.scheme != "http" or not parts.hostname or policy.refusal(target) is not None:
            nav = is_navigation(fields)
            self._refuse(target, nav)
            writer.write(_NO_CONTENT if nav else _FORBIDDEN)
            return
        self._record(target)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        out = [f"{method} {path} {version}".encode("latin-1")]
        out += [ln for ln in lines if ln.partition(b":")[0].strip().lower() not in _HOP_HEADERS]
        out.append(b"Connection: close")
        try:
            up_r, up_w = await asyncio.open_connection(*self._upstream(parts.hostname, parts.port or 80))
        except OSError:
            writer.write(_BAD_GATEWAY)
            return
        await pipe(reader, writer, up_r, up_w, b"\r\n".join(out) + b"\r\n\r\n")

    def _upstream(self, host: str, port: int) -> tuple[str, int]:
        return self.upstreams.get((host, port), (host, port))


async def _copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends."""
    while True:
        data = await src.read(_CHUNK)
        if not data:
            break
        dst.write(data)
        await dst.drain()


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up_r: asyncio.StreamReader,
               up_w: asyncio.StreamWriter, first: bytes = b"") -> None:
    """Send ``first`` upstream, then copy both ways until the server's side ends (the client's
    connection is ``reader``/``writer``, the server's ``up_r``/``up_w``, closed at the end)."""
    if first:
        up_w.write(first)
    # the request body (or a tunnel's client half) goes up while the response comes down
    sender = asyncio.ensure_future(_copy(reader, up_w))
    try:
        await _copy(up_r, writer)
    finally:
        sender.cancel()
        with contextlib.suppress(BaseException):
            await sender
        up_w.close()
