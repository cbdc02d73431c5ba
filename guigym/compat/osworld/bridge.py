"""guigym's local desktop behind an OSWorld-protocol loopback endpoint (the guigym side of the shim).

Run by :class:`guigym.compat.osworld.provider.GuigymProvider` with guigym's own Python::

    python -m guigym.compat.osworld.bridge --screen 1920x1080 --hide DIR ...

It starts a :class:`~guigym.envs.desktop.providers.local.LocalProvider` (bubblewrap sandbox; its
in-desktop server answers on a unix socket with its own bearer token, which never leaves this
process) and a front HTTP server on ``127.0.0.1:<free port>`` that forwards each request, path
and body unchanged, to that server. The in-desktop server already speaks OSWorld's protocol
(``/screenshot``, ``/execute``, ``/setup/*``, ``/file``, ...), so the front only authenticates
and relays.

The front requires its own token (fresh per bridge, 256 bits) as ``Authorization: Bearer
<token>``, which the provider adds to every ``requests`` call DesktopEnv makes to this address; a
request without it gets 401 before its body is read (:mod:`guigym.envs.desktop.server.httpguard`,
as the in-desktop server does).

Control, one JSON object per line: the first stdout line is ``{"ok": true, "port": N, "token": T,
...}`` (or ``{"ok": false, "error": ...}``); then stdin takes ``{"op": "revert"}`` (the local
provider's revert: kill the episode's processes, fresh HOME and /tmp) and ``{"op": "score",
"task": {...OSWorld task...}, "last_action": "FAIL" | "DONE" | null}`` (guigym's verifier on the
desktop's current state, for differential tests), each answered by one stdout line. EOF on stdin
stops the desktop and exits.
"""
from __future__ import annotations

import argparse
import hmac
import json
import logging
import secrets
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional, Sequence

from guigym.core import EnvInfraError
from guigym.envs.desktop.server.httpguard import (
    BodyError, GuardedHandlerMixin, GuardedServerMixin, body_length, read_chunked, read_exact, refuse_unauthorized,
)

log = logging.getLogger("guigym.compat.osworld.bridge")

#: one forwarded request may wait this long for the desktop: the longest server-side wait an
#: OSWorld request can ask for (open_file's 1800 s) plus a margin; ordinary calls return in ms
FORWARD_TIMEOUT_S = 1900.0
#: a desktop whose start failed (an infrastructure fault, never the agent's) is built afresh once
#: more, as OSWorld-v0's next reset would
START_ATTEMPTS = 2
#: largest request body (``/setup/upload`` carries whole task files), as the in-desktop server
MAX_BODY = 1 << 30


def _token_matches(header: str, token: str) -> bool:
    """``Authorization: Bearer <token>``, compared in constant time."""
    return hmac.compare_digest(header.encode("utf-8", "replace"), f"Bearer {token}".encode())


class FrontServer(GuardedServerMixin, ThreadingHTTPServer):
    """Loopback TCP server relaying OSWorld requests to one desktop's unix-socket server."""

    daemon_threads = True

    def __init__(self, token: str, forward: Any, port: int = 0) -> None:
        self.guard()
        self.token = token
        #: ``forward(method, path, body, content_type) -> (status, headers, body)``
        self.forward = forward
        super().__init__(("127.0.0.1", port), FrontHandler)


class FrontHandler(GuardedHandlerMixin, BaseHTTPRequestHandler):
    """Authenticate, read the body within the guard's limits, relay, answer."""

    server: FrontServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
        log.debug("%s " + format, self.address_string(), *args)

    def _relay(self, method: str) -> None:
        if not _token_matches(self.headers.get("Authorization", ""), self.server.token):
            refuse_unauthorized(self, b'{"status": "error", "message": "missing or wrong token"}',
                                {"WWW-Authenticate": 'Bearer realm="guigym-osworld"'})
            return
        try:
            n = body_length(self.headers, MAX_BODY, allow_chunked=True)
            body = read_chunked(self.rfile, MAX_BODY) if n is None else read_exact(self.rfile, n)
        except BodyError as exc:
            self.close_connection = True
            self._answer(exc.status, json.dumps({"status": "error", "message": exc.message}).encode(),
                         "application/json")
            return
        except TimeoutError:
            self.close_connection = True
            return
        try:
            status, headers, data = self.server.forward(method, self.path, body or None,
                                                        self.headers.get("Content-Type"))
        except EnvInfraError as exc:  # the desktop did not answer: a gateway error, said as such
            status, headers = 502, {"content-type": "application/json"}
            data = json.dumps({"status": "error", "message": str(exc)}).encode()
        self._answer(status, data, headers.get("content-type", "application/octet-stream"))

    def _answer(self, status: int, data: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        self._relay("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._relay("POST")


class _Verifier:
    """What :func:`guigym.envs.desktop.env.verify_task` reads from an env, for one desktop.

    The bridge has a desktop but no OSWorldEnv; the verifier needs only its client, how setup
    steps run, where getter files go and whether the network may be used.
    """

    network = False

    def __init__(self, client: Any, password: str, screen_size: tuple[int, int], work_dir: Path) -> None:
        self.client = client
        self.client_password = password
        self.screen_size = screen_size
        self.work_dir = work_dir
        self.timings: dict[str, float] = {}

    def run_steps(self, steps: Sequence[Any], task: Any, label: str) -> list[dict[str, Any]]:
        from guigym.envs.desktop.setup import run_setup

        return run_setup(self.client, steps, cache_dir=self.work_dir / "setup", network_ok=False,
                         password=self.client_password, screen_size=self.screen_size, base_dir=None,
                         label=label, capture_dir=self.eval_dir(task))

    def eval_dir(self, task: Any) -> Path:
        return self.work_dir / "eval" / task.id


def guigym_score(verifier: _Verifier, doc: dict[str, Any], last_action: Optional[str]) -> tuple[float, dict[str, Any]]:
    """guigym's score of the desktop's current state for the OSWorld task ``doc`` (postconfig,
    getters, metrics: the same :func:`~guigym.envs.desktop.env.verify_task` OSWorld-v0 runs)."""
    from guigym.core import actions as A
    from guigym.envs.desktop.env import verify_task
    from guigym.envs.desktop.tasks import parse_osworld_task

    task = parse_osworld_task(doc)
    last = {"FAIL": A.Fail(), "DONE": A.Done()}.get(last_action or "")
    return verify_task(verifier, task, last)  # type: ignore[arg-type]


def _parse_screen(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--screen must be WIDTHxHEIGHT, got {text!r}") from None
    return w, h


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m guigym.compat.osworld.bridge", description=__doc__.splitlines()[0])
    p.add_argument("--screen", type=_parse_screen, default=(1920, 1080), help="WIDTHxHEIGHT of the desktop")
    p.add_argument("--client-password", default="password", help="what the sandbox's sudo accepts")
    p.add_argument("--hide", action="append", default=[],
                   help="host path the desktop must not see (task files, DesktopEnv's cache_dir); repeatable")
    p.add_argument("--network", action="store_true", help="share the host's network (default: loopback only)")
    p.add_argument("--no-terminal", dest="terminal", action="store_false",
                   help="no xterm+tmux terminal at reset (tasks that need one open it in their setup)")
    return p


def _say(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    from guigym.envs.desktop.client import DesktopClient
    from guigym.envs.desktop.providers.local import LocalProvider

    provider = LocalProvider(screen_size=args.screen, client_password=args.client_password, network=args.network,
                             terminal=args.terminal)
    for path in args.hide:
        p = Path(path).expanduser().resolve()
        if p.exists():  # bwrap can only cover what exists
            provider.extra_hide.append(p)
    work = tempfile.TemporaryDirectory(prefix="guigym-osworld-bridge-")
    server: Optional[FrontServer] = None
    try:
        t0 = time.monotonic()
        for attempt in range(START_ATTEMPTS):
            try:
                provider.start()
                break
            except EnvInfraError as exc:  # e.g. a sandbox service slower than its bound on a loaded host
                if attempt + 1 == START_ATTEMPTS:
                    _say({"ok": False, "error": str(exc)})
                    return 1
                log.warning("local desktop did not start (%s); starting a fresh one", exc)
        start_s = time.monotonic() - t0
        sock, desk_token = str(provider.server_socket), provider.token

        def forward(method: str, path: str, body: Optional[bytes], ctype: Optional[str]) -> Any:
            # one short-lived client per request: the front serves requests concurrently
            client = DesktopClient(unix_socket=sock, token=desk_token, timeout=FORWARD_TIMEOUT_S)
            try:
                return client.request(method, path, body=body, content_type=ctype)
            finally:
                client.close()

        server = FrontServer(secrets.token_hex(32), forward)
        threading.Thread(target=server.serve_forever, name="osworld-front", daemon=True).start()
        _say({"ok": True, "port": server.server_address[1], "token": server.token, "display": provider.display,
              "start_s": round(start_s, 3)})
        verifier = _Verifier(provider.client, args.client_password, args.screen, Path(work.name))
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                req = json.loads(line)
                op = req.get("op")
                if op == "revert":
                    t0 = time.monotonic()
                    verifier.client = provider.revert()
                    _say({"ok": True, "revert_s": round(time.monotonic() - t0, 3)})
                elif op == "score":
                    score, details = guigym_score(verifier, req["task"], req.get("last_action"))
                    _say({"ok": True, "score": score, "details": json.loads(json.dumps(details, default=str))})
                else:
                    _say({"ok": False, "error": f"op must be 'revert' or 'score', got {op!r}"})
            except Exception as exc:  # noqa: BLE001 - reported to the provider, the bridge keeps serving
                _say({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        return 0
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
        provider.stop()
        work.cleanup()


if __name__ == "__main__":
    sys.exit(main())
