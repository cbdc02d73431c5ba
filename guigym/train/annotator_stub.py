"""A STAND-IN reasoning annotator: an OpenAI-compatible ``/v1/chat/completions`` server with no
model behind it, for the reasoning-SFT tests and for running the tiny MobileRL pipeline on a
machine that cannot host an instruction model. Its "reasoning" is a template filled from the
request (the instruction's quoted target and the demonstrated element id), so it teaches the
format ``Thought: ...\nAction: ...``, not reasoning. Use a real instruction model (``vllm serve
<instruct model>``) for real runs.

Loopback only; the bearer token is checked before the body is read; every answered request is
recorded (``calls``)::

    with AnnotatorStub(token="t") as stub:
        url = stub.url            # http://127.0.0.1:PORT/v1
        stub.calls                # [(user message, reasoning returned), ...]

    GUIGYM_ANNOTATOR_TOKEN=t python -m guigym.train.annotator_stub --port 8011
"""
from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional


def stub_reasoning(user: str) -> str:
    """The stand-in's reasoning for a user message: a fixed sentence naming the quoted target of
    the instruction and the element id of the action line (deterministic: equal requests, equal
    reasoning)."""
    quoted = re.findall(r'"([^"]+)"', user.split("\n", 1)[0])
    element = re.search(r'Action taken: .*element="([^"]*)"', user)
    target = quoted[0] if quoted else "the target"
    return f"The task asks for {target}; it is element {element.group(1) if element else '?'}."


class AnnotatorStub:
    """Loopback HTTP server speaking ``POST /v1/chat/completions``. ``mode``: ``"ok"`` answers,
    ``"empty"`` answers an empty content, ``"error"`` answers HTTP 500."""

    def __init__(self, token: str = "stub-token", mode: str = "ok") -> None:
        self.token, self.mode = token, mode
        self.calls: list[tuple[str, str]] = []
        self.refused = 0
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:  # quiet
                pass

            def _send(self, code: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802
                if self.headers.get("Authorization") != f"Bearer {stub.token}":  # before reading the body
                    with stub.lock:
                        stub.refused += 1
                    self.close_connection = True
                    return self._send(401, {"error": "bad token"})
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"error": self.path})
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                if stub.mode == "error":
                    return self._send(500, {"error": "scripted failure"})
                user = next(m["content"] for m in body["messages"] if m["role"] == "user")
                text = "" if stub.mode == "empty" else stub_reasoning(user)
                with stub.lock:
                    stub.calls.append((user, text))
                self._send(200, {"id": "x", "object": "chat.completion", "model": body["model"],
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": text}}]})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread: Optional[threading.Thread] = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> "AnnotatorStub":
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def main(argv: Optional[list[str]] = None) -> int:
    """Serve the stand-in on 127.0.0.1:``--port`` until interrupted; the token is read from
    ``$GUIGYM_ANNOTATOR_TOKEN`` (required)."""
    import argparse
    import os

    p = argparse.ArgumentParser(prog="python -m guigym.train.annotator_stub",
                                description="stand-in reasoning annotator (no model; template reasoning)")
    p.add_argument("--port", type=int, default=8011)
    args = p.parse_args(argv)
    token = os.environ.get("GUIGYM_ANNOTATOR_TOKEN")
    if not token:
        p.error("set GUIGYM_ANNOTATOR_TOKEN (the bearer token clients must send)")
    stub = AnnotatorStub(token=token)
    stub.server.server_close()
    stub.server = ThreadingHTTPServer(("127.0.0.1", args.port), stub.server.RequestHandlerClass)
    print(f"stand-in annotator on {stub.url} (template reasoning, no model)", flush=True)
    try:
        stub.server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        stub.server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
