"""``guigym serve``: an OpenAI-compatible chat-completions server for a local HF VLM (stdlib only).

    guigym serve --model PATH --host 127.0.0.1 --port 8000 --api-key TOKEN

Endpoints: ``GET /v1/models``, ``POST /v1/chat/completions`` (non-streaming, n=1). Messages may
hold text parts and ``image_url`` parts with ``data:image/...;base64,`` URIs (remote URLs are
refused: the server fetches nothing). Every request needs ``Authorization: Bearer TOKEN`` (else
401). With ``"logprobs": true`` the choice carries ``logprobs.content`` ([{token, logprob}]);
with ``logprobs`` or ``"return_token_ids": true`` it also carries ``prompt_token_ids`` and
``token_ids``, as vLLM's ``return_token_ids`` extension does. ``seed`` makes a reply
reproducible; log-probs are those of :mod:`guigym.models.hf_policy` (the request's
temperature-T distribution with vision tokens masked), so they match ``HFPolicy.logprobs_of``.

Failing closed (:mod:`guigym.envs.desktop.server.httpguard`, shared with the in-desktop server):
the token is checked before any body byte is read (401, connection closed); bodies need a
decimal ``Content-Length`` of at most ``max_body`` bytes (default :data:`MAX_BODY_BYTES`;
negative, signed or non-integer lengths get 400, larger ones 413, chunked bodies 411, all
without reading the body); at most ``max_connections`` connections are served at once (more get
503 at once); request headers must arrive within ``header_timeout`` seconds and any body read or
reply write may block at most ``io_timeout`` seconds, so a slow client holds one slot briefly.

Batching: request threads put work on a queue; one worker thread takes the first item, waits up
to ``batch_wait_ms`` for more (at most ``max_batch``), encodes and generates them together
(left-padded), and hands each thread its result.

Trainer extensions (used by :class:`guigym.train.rollout.policy_service.HTTPEngine`):

* ``"prompt_token_ids": [...]`` -- the prompt as exact token ids (image pads expanded, e.g. a
  multi-turn transcript); the messages then only supply the images, in order, and their text is
  not used. The ids are checked against the images (one pad run of the right length each).
* ``"guided_choice": ["click(element=\"1\")", ...]`` -- constrained decoding: the reply is one of
  these strings (:mod:`guigym.models.constrain`; vLLM's name for a choice constraint).
* The reply has ``policy_version`` (top level) and ``choices[0].entropy`` (mean token entropy).
* ``POST /v1/admin/reload {"path": DIR, "version": N}`` loads the weights of checkpoint DIR in
  place between batches and sets the version; ``GET /v1/admin/stats`` returns busy seconds,
  requests, batches and the version. Both need the same bearer token.
"""
from __future__ import annotations

import base64
import hmac
import io
import json
import queue
import sys
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional

from guigym.envs.desktop.server.httpguard import (
    DEFAULT_HEADER_TIMEOUT_S, DEFAULT_IO_TIMEOUT_S, DEFAULT_MAX_CONNECTIONS, BodyError, GuardedHandlerMixin,
    GuardedServerMixin, body_length, read_exact, refuse_unauthorized,
)

#: default largest request body: a few full-resolution screenshots as base64 PNG data URIs
MAX_BODY_BYTES = 64 * 1024 * 1024
LOOPBACK = ("127.0.0.1", "::1", "localhost")


class BadRequest(ValueError):
    """The request is malformed; the message names the offending field."""


@dataclass
class _Job:
    messages: list[dict[str, Any]]
    images: list[Any]
    max_tokens: int
    temperature: float
    seed: int
    future: Future
    prompt_ids: Optional[list[int]] = None
    candidates: Optional[list[str]] = None


def parse_messages(messages: Any) -> tuple[list[dict[str, Any]], list[Any]]:
    """OpenAI chat messages -> (HF chat messages with ``{"type": "image"}`` parts, PIL images)."""
    from PIL import Image

    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    out, images = [], []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
            raise BadRequest(f"messages[{i}].role must be system, user or assistant")
        content = m.get("content")
        if isinstance(content, str):
            out.append({"role": m["role"], "content": content})
            continue
        if not isinstance(content, list):
            raise BadRequest(f"messages[{i}].content must be a string or a list of parts")
        parts = []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                parts.append({"type": "text", "text": str(part.get("text", ""))})
            elif kind == "image_url":
                url = part.get("image_url")
                url = url.get("url") if isinstance(url, dict) else url
                if not isinstance(url, str) or not url.startswith("data:image/") or ";base64," not in url:
                    raise BadRequest(f"messages[{i}].content[{j}].image_url.url must be a data:image/...;base64, URI")
                try:
                    raw = base64.b64decode(url.split(";base64,", 1)[1], validate=True)
                    images.append(Image.open(io.BytesIO(raw)).convert("RGB"))
                except Exception as exc:  # noqa: BLE001 - any decode failure is the client's
                    raise BadRequest(f"messages[{i}].content[{j}]: cannot decode image: {exc}") from None
                parts.append({"type": "image"})
            else:
                raise BadRequest(f"messages[{i}].content[{j}].type must be 'text' or 'image_url'")
        out.append({"role": m["role"], "content": parts})
    return out, images


class _HTTPServer(GuardedServerMixin, ThreadingHTTPServer):
    """ThreadingHTTPServer with bounded connections (see httpguard)."""


class ModelServer:
    """The model, its batching worker and the HTTP server around them.

    ``max_body`` (bytes), ``max_connections``, ``header_timeout`` and ``io_timeout`` (seconds)
    bound what one client can make the server hold; see the module docstring.
    """

    def __init__(self, model_path: str, api_key: str, host: str = "127.0.0.1", port: int = 8000,
                 model_name: Optional[str] = None, max_batch: int = 8, batch_wait_ms: float = 5.0,
                 device: str = "cpu", max_body: int = MAX_BODY_BYTES,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS, header_timeout: float = DEFAULT_HEADER_TIMEOUT_S,
                 io_timeout: float = DEFAULT_IO_TIMEOUT_S) -> None:
        from guigym.models.hf_policy import HFPolicy

        if not api_key:
            raise ValueError("an API key is required (--api-key or GUIGYM_API_KEY)")
        self.policy = HFPolicy(model_path, device=device)
        self.api_key = api_key
        self.model_name = model_name or Path(model_path).name
        self.max_batch = max(1, int(max_batch))
        self.batch_wait_s = max(0.0, batch_wait_ms / 1000.0)
        self.jobs: queue.Queue[Optional[_Job]] = queue.Queue()
        self.batches: list[int] = []  # sizes of the batches run (for tests and logs)
        self.version = 0
        self.busy_s = 0.0
        self.requests = 0
        self.started = time.monotonic()
        self.swap = threading.Lock()  # held while a batch runs; reload takes it between batches
        self.max_body = int(max_body)
        self.httpd = _HTTPServer((host, port), self._handler_class())
        self.httpd.guard(max_connections, header_timeout, io_timeout)
        self.worker = threading.Thread(target=self._work, name="guigym-serve-batcher", daemon=True)
        self.worker.start()

    @property
    def address(self) -> tuple[str, int]:
        return self.httpd.server_address[:2]

    # ---- batching ---------------------------------------------------------------------------------
    def submit(self, messages: list[dict[str, Any]], images: list[Any], max_tokens: int, temperature: float,
               seed: int, prompt_ids: Optional[list[int]] = None, candidates: Optional[list[str]] = None) -> Future:
        fut: Future = Future()
        self.jobs.put(_Job(messages, images, max_tokens, temperature, seed, fut, prompt_ids, candidates))
        return fut

    def reload(self, path: str, version: int) -> None:
        """Load checkpoint ``path`` into the served model between batches and set ``version``."""
        with self.swap:
            self.policy.load_weights(path)
            self.version = int(version)

    def _work(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            batch = [job]
            deadline = time.monotonic() + self.batch_wait_s
            while len(batch) < self.max_batch:
                left = deadline - time.monotonic()
                try:
                    nxt = self.jobs.get(timeout=max(left, 0.0)) if left > 0 else self.jobs.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self.jobs.put(None)
                    break
                batch.append(nxt)
            self._run(batch)

    def _run(self, batch: list[_Job]) -> None:
        with self.swap:
            self._run_locked(batch)

    def _run_locked(self, batch: list[_Job]) -> None:
        ready, encoded = [], []
        for job in batch:
            try:
                if job.prompt_ids is not None:
                    encoded.append(self.policy.encode_ids(job.prompt_ids, job.images))
                else:
                    encoded.append(self.policy.encode_chat(job.messages, job.images))
                if job.candidates is not None:
                    self.policy.constraint(job.candidates)  # tokenises now: a bad set fails this request only
                ready.append(job)
            except Exception as exc:  # noqa: BLE001 - report to that request only
                job.future.set_exception(BadRequest(f"cannot encode the prompt: {exc}"))
        if not ready:
            return
        self.batches.append(len(ready))
        t0 = time.monotonic()
        try:
            samples = self.policy.generate(encoded, max_new_tokens=[j.max_tokens for j in ready],
                                           temperature=[j.temperature for j in ready], seeds=[j.seed for j in ready],
                                           candidates=[j.candidates for j in ready])
        except Exception as exc:  # noqa: BLE001 - a failed batch fails its requests, not the server
            for job in ready:
                job.future.set_exception(exc)
            return
        finally:
            self.busy_s += time.monotonic() - t0
            self.requests += len(ready)
        for job, enc, sample in zip(ready, encoded, samples):
            job.future.set_result((enc, sample, self.version))

    # ---- HTTP -------------------------------------------------------------------------------------
    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("stream"):
            raise BadRequest("'stream' is not supported")
        if int(body.get("n", 1) or 1) != 1:
            raise BadRequest("'n' must be 1")
        messages, images = parse_messages(body.get("messages"))
        try:
            max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 256)
            temperature = float(body["temperature"]) if body.get("temperature") is not None else 1.0
            seed = int(body["seed"]) if body.get("seed") is not None else int.from_bytes(uuid.uuid4().bytes[:4], "little")
        except (TypeError, ValueError) as exc:
            raise BadRequest(f"max_tokens, temperature and seed must be numbers: {exc}") from None
        if max_tokens < 1:
            raise BadRequest("'max_tokens' must be >= 1")
        prompt_ids = body.get("prompt_token_ids")
        if prompt_ids is not None and (not isinstance(prompt_ids, list) or not prompt_ids or not all(
                isinstance(t, int) and not isinstance(t, bool) and 0 <= t < len(self.policy.tokenizer) for t in prompt_ids)):
            raise BadRequest("'prompt_token_ids' must be a non-empty list of token ids of this model's vocabulary")
        candidates = body.get("guided_choice")
        if candidates is not None and (not isinstance(candidates, list) or not candidates
                                       or not all(isinstance(c, str) and c for c in candidates)):
            raise BadRequest("'guided_choice' must be a non-empty list of non-empty strings")
        enc, sample, version = self.submit(messages, images, max_tokens, temperature, seed, prompt_ids,
                                           candidates).result()
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": sample.text},
                                  "finish_reason": sample.finish_reason, "logprobs": None, "entropy": sample.entropy}
        if body.get("logprobs"):
            tok = self.policy.tokenizer
            choice["logprobs"] = {"content": [
                {"token": tok.convert_ids_to_tokens(t), "logprob": lp, "bytes": None, "top_logprobs": []}
                for t, lp in zip(sample.response_ids, sample.logprobs)]}
        if body.get("logprobs") or body.get("return_token_ids"):
            choice["prompt_token_ids"] = list(enc.prompt_ids)
            choice["token_ids"] = list(sample.response_ids)
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": self.model_name, "choices": [choice], "policy_version": version,
                "usage": {"prompt_tokens": len(enc.prompt_ids), "completion_tokens": len(sample.response_ids),
                          "total_tokens": len(enc.prompt_ids) + len(sample.response_ids)}}

    def _handler_class(self) -> type:
        server = self

        class Handler(GuardedHandlerMixin, BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: Any) -> None:  # quiet by default
                pass

            def _send(self, code: int, obj: dict[str, Any]) -> None:
                data = json.dumps(obj).encode("utf-8")
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if code == 401:
                    self.send_header("WWW-Authenticate", "Bearer")
                self.end_headers()
                self.wfile.write(data)

            def _error(self, code: int, message: str, kind: str) -> None:
                self._send(code, {"error": {"message": message, "type": kind, "code": code}})

            def _authorized(self) -> bool:
                """Check the bearer token (before any body byte is read); else 401 and hang up."""
                header = self.headers.get("Authorization", "")
                token = header[7:] if header.startswith("Bearer ") else ""
                if not hmac.compare_digest(token.encode("utf-8", "replace"), server.api_key.encode("utf-8")):
                    refuse_unauthorized(self, json.dumps({"error": {
                        "message": "missing or wrong API key (Authorization: Bearer TOKEN)",
                        "type": "authentication_error", "code": 401}}).encode(), {"WWW-Authenticate": "Bearer"})
                    return False
                return True

            def _body(self) -> Optional[bytes]:
                """The body (Content-Length only, at most max_body); None after answering 4xx/5xx."""
                try:
                    return read_exact(self.rfile, body_length(self.headers, server.max_body, allow_chunked=False) or 0)
                except BodyError as exc:
                    self.close_connection = True  # the unread body must not be taken for a request
                    self._error(exc.status, exc.message, "invalid_request_error")
                    return None

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if not self._authorized():
                    return
                if "Content-Length" in self.headers or "Transfer-Encoding" in self.headers:
                    self.close_connection = True  # an unread GET body must not be parsed as a request
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [
                        {"id": server.model_name, "object": "model", "created": 0, "owned_by": "guigym"}]})
                elif self.path.rstrip("/") == "/v1/admin/stats":
                    self._send(200, {"busy_s": server.busy_s, "requests": server.requests,
                                     "batches": len(server.batches), "version": server.version,
                                     "uptime_s": time.monotonic() - server.started})
                else:
                    self._error(404, f"no route {self.path}", "not_found")

            def do_POST(self) -> None:  # noqa: N802
                if not self._authorized():
                    return
                body_raw = self._body()
                if body_raw is None:
                    return
                if self.path.rstrip("/") == "/v1/admin/reload":
                    try:
                        body = json.loads(body_raw or b"{}")
                        path, version = body["path"], int(body["version"])
                        if not isinstance(path, str):
                            raise TypeError("path must be a string")
                    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                        self._error(400, f"reload needs {{'path': str, 'version': int}}: {exc}", "invalid_request_error")
                        return
                    try:
                        server.reload(path, version)
                    except Exception as exc:  # noqa: BLE001 - the old weights stay served
                        self._error(400, f"cannot load {path!r}: {type(exc).__name__}: {exc}", "invalid_request_error")
                        return
                    self._send(200, {"version": server.version})
                    return
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._error(404, f"no route {self.path}", "not_found")
                    return
                try:
                    body = json.loads(body_raw or b"{}")
                    if not isinstance(body, dict):
                        raise BadRequest("the body must be a JSON object")
                    self._send(200, server.completion(body))
                except (json.JSONDecodeError, BadRequest) as exc:
                    self._error(400, str(exc), "invalid_request_error")
                except Exception as exc:  # noqa: BLE001 - the server stays up
                    self._error(500, f"{type(exc).__name__}: {exc}", "server_error")

        return Handler

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.jobs.put(None)
        self.httpd.server_close()


def main(model: str, host: str, port: int, api_key: str, model_name: Optional[str] = None, max_batch: int = 8,
         batch_wait_ms: float = 5.0, device: str = "cpu", max_body: int = MAX_BODY_BYTES,
         max_connections: int = DEFAULT_MAX_CONNECTIONS) -> int:
    if host not in LOOPBACK:
        print(f"warning: binding {host}, not loopback: anyone who can reach it and knows the key can use it",
              file=sys.stderr)
    srv = ModelServer(model, api_key, host=host, port=port, model_name=model_name, max_batch=max_batch,
                      batch_wait_ms=batch_wait_ms, device=device, max_body=max_body, max_connections=max_connections)
    h, p = srv.address
    print(f"guigym serve: model {srv.model_name!r} on http://{h}:{p}/v1", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.shutdown()
    return 0
