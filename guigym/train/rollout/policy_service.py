"""The policy service: where rollouts get their actions (token-in/token-out).

A client submits a :class:`GenRequest` (exact prompt token ids, images, sampling settings, seed,
optional candidate replies for constrained decoding) and gets a ``Future`` of a
:class:`GenResult` (response ids, the rollout engine's log-prob of each sampled token, text, mean
token entropy, and the ``policy_version`` that produced it). Two engines implement the
:class:`PolicyService` protocol:

* :class:`HFEngine` -- in-process :class:`~guigym.train.policy.hf_policy.HFPolicy`. One background
  thread takes the pending requests, waits up to ``max_wait_ms`` for up to ``max_batch`` of them
  and generates them as one left-padded batch. A reply depends only on (weights, prompt, seed),
  never on the batch it ran in (per-row generators). ``update_weights`` swaps weights between
  batches.
* :class:`HTTPEngine` -- OpenAI-compatible servers, either ``guigym serve`` (``api="guigym"``) or
  an unmodified ``vllm serve`` (``api="vllm"``). Each request goes to the endpoint with the fewest
  requests in flight; ``update_weights`` refreshes one endpoint at a time (drain it, refresh it,
  put it back) while the others keep serving, DART's per-worker model synchronisation (Li et al.
  2025, sec. 3.3).

``api="guigym"``: ``POST /v1/chat/completions`` with two extensions that ``guigym serve``
implements: ``prompt_token_ids`` (the prompt as ids; the messages only carry the images, in order)
and ``guided_choice``; the reply carries ``token_ids``, ``logprobs``, ``entropy`` and
``policy_version``. Weights are refreshed with ``POST /v1/admin/reload`` (``weight_sync="admin"``).

``api="vllm"`` uses only what stock vLLM documents (request/response shapes read from vLLM's
``vllm/entrypoints/openai/protocol.py`` ``CompletionRequest``/``CompletionLogProbs`` and
``docs/features/lora.md``; needs vLLM >= 0.10.2; see ``docs/architecture.md``):

* ``POST /v1/completions`` with ``prompt`` = the token ids (a list of ints: no re-tokenisation),
  ``max_tokens``, ``temperature``, ``top_p``, ``seed``, ``logprobs: 0`` (the sampled token's
  log-prob only), ``return_tokens_as_token_ids: true`` (tokens come back as ``"token_id:123"``,
  which is how the response ids are read) and explicit neutral ``top_k``/``min_p``/
  ``repetition_penalty``, so a checkpoint's ``generation_config.json`` (vLLM applies it as the
  default sampling parameters) never changes the sampled distribution. Candidates go as
  ``structured_outputs: {"choice": [...]}`` (vLLM >= 0.10.2; ``choice_field="guided_choice"`` for
  0.10.x servers -- vLLM 0.12 removed ``guided_choice`` and ignores it with HTTP 200, so a reply
  that is not one of the candidates is an :class:`HTTPError`, never a silently unconstrained sample).
* Needed server flags: ``--logprobs-mode processed_logprobs`` (otherwise the
  returned log-probs are those of the raw logits, before temperature, and do not match
  the trainer's recomputation at T != 1), ``--api-key TOKEN`` and, for LoRA refresh,
  ``--enable-lora --max-lora-rank R`` with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` in its
  environment.
* Weight refresh (``weight_sync``): ``"lora"`` -- ``POST /v1/load_lora_adapter {lora_name:
  "<lora_prefix>-<session>-v<version>", lora_path}``, route that endpoint's requests to the new
  name, then ``POST /v1/unload_lora_adapter`` for the previous one. vLLM refuses to load a name
  twice, so each version gets its own name, and ``session`` (random per engine unless given)
  makes the names of a resumed run differ from those its crashed process loaded: the servers
  outlive the trainer, and a resumed run re-pushes the version it resumes at, which the crashed
  process had already loaded; ``"restart"`` -- a rolling restart: ``restart(index, base_url, path)``
  (e.g. :func:`command_restarter`) restarts that one worker from the new checkpoint directory and
  :class:`HTTPEngine` waits for ``GET /health`` before routing to it again (DART's per-worker sync).
* Not available from stock vLLM: ``entropy`` (None) and ``policy_version`` in the reply (the
  engine records the version it last loaded into that endpoint, and checks the reply's ``model``
  is the adapter it asked for). Prompts with images are refused with a clear error: vLLM's
  completions endpoint takes token ids but no images and its chat endpoint takes images but no
  token ids, so token-in/token-out multimodal rollouts need ``guigym serve`` (or text-only
  prompts). Under constrained decoding vLLM may sample a non-canonical tokenisation of a
  candidate (its grammar works on bytes); pass ``tokenizer`` to have such replies rejected
  (the trainer's candidate trie would give them probability 0).
"""
from __future__ import annotations

import json
import queue
import threading
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence, Union

import numpy as np


@dataclass
class GenRequest:
    """One generation. ``prompt_ids``: (P,) ids with image pads expanded; ``images``: the images
    whose pad runs appear in ``prompt_ids``, in order ((H, W, 3) uint8 arrays or PIL images);
    ``candidates``: allowed complete replies (None = free text)."""

    prompt_ids: list[int]
    images: list[Any] = field(default_factory=list)
    max_new_tokens: int = 32
    temperature: float = 1.0
    seed: int = 0
    candidates: Optional[list[str]] = None


@dataclass
class GenResult:
    """``response_ids`` (R,) incl. the stop token when one was produced; ``logprobs`` (R,)
    log-prob of each sampled token under the engine's (masked, temperature-T) distribution;
    ``entropy`` mean per-token entropy (nats); ``policy_version`` of the weights that sampled it."""

    response_ids: list[int]
    logprobs: list[float]
    text: str
    entropy: Optional[float]
    policy_version: int
    finish_reason: str = "stop"
    endpoint: str = ""


class PolicyService(Protocol):
    """What the rollout scheduler needs from an engine."""

    version: int

    def submit(self, req: GenRequest) -> "Future[GenResult]": ...

    def update_weights(self, version: int, path: Union[str, Path, None] = None) -> None: ...

    def stats(self) -> dict[str, Any]: ...

    def reset_stats(self) -> None: ...

    def close(self) -> None: ...


# ---- in-process engine -------------------------------------------------------------------------
class HFEngine:
    """Batched in-process generation with an :class:`HFPolicy` (or a path to load one from).

    Stats: ``busy_s`` (seconds spent inside batched generation), ``wall_s`` (since the engine
    started or :meth:`reset_stats`), ``utilisation`` = busy_s / wall_s, ``requests``,
    ``batches``, ``mean_batch``.
    """

    def __init__(self, policy: Any, max_batch: int = 8, max_wait_ms: float = 5.0, version: int = 0,
                 device: str = "cpu") -> None:
        from guigym.train.policy.hf_policy import HFPolicy

        self.policy = policy if isinstance(policy, HFPolicy) else HFPolicy(policy, device=device)
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {max_wait_ms}")
        self.max_batch = int(max_batch)
        self.max_wait_s = float(max_wait_ms) / 1000.0
        self.version = int(version)
        self._jobs: "queue.Queue[Optional[tuple[GenRequest, Future]]]" = queue.Queue()
        self._swap = threading.Lock()  # held while a batch runs; update_weights takes it between batches
        self._stats_lock = threading.Lock()
        self.batch_sizes: list[int] = []
        self.reset_stats()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="guigym-hf-engine", daemon=True)
        self._thread.start()

    # ---- API ---------------------------------------------------------------------------------------
    def submit(self, req: GenRequest) -> "Future[GenResult]":
        fut: Future = Future()
        if self._closed:
            fut.set_exception(RuntimeError("the engine is closed"))
            return fut
        self._jobs.put((req, fut))
        return fut

    def submit_many(self, reqs: Sequence[GenRequest]) -> "list[Future[GenResult]]":
        """Submit requests that form a closed batch: they run together (in chunks of
        ``max_batch``) without waiting ``max_wait_ms`` for more (a lockstep caller's batch)."""
        futs: list[Future] = [Future() for _ in reqs]
        if self._closed:
            for f in futs:
                f.set_exception(RuntimeError("the engine is closed"))
        elif reqs:
            self._jobs.put([(r, f) for r, f in zip(reqs, futs)])
        return futs

    def generate(self, reqs: Sequence[GenRequest], timeout: Optional[float] = None) -> list[GenResult]:
        """Submit all and wait (convenience)."""
        futs = [self.submit(r) for r in reqs]
        return [f.result(timeout) for f in futs]

    def update_weights(self, version: int, path: Union[str, Path, None] = None,
                       state_dict: Optional[dict[str, Any]] = None) -> None:
        """Load new weights (a ``from_pretrained`` directory or a state dict; neither = the policy
        object was updated in place by its owner) and record ``version``. Waits for the running
        batch to finish; every later :class:`GenResult` carries the new version."""
        with self._swap:
            if path is not None:
                self.policy.load_weights(path)
            elif state_dict is not None:
                with self.policy.lock:
                    self.policy.model.load_state_dict(state_dict)
            self.version = int(version)

    def stats(self) -> dict[str, Any]:
        with self._stats_lock:
            wall = time.monotonic() - self._t0
            busy = self._busy + (time.monotonic() - self._batch_t0 if self._batch_t0 is not None else 0.0)
            return {"busy_s": busy, "wall_s": wall, "utilisation": busy / wall if wall > 0 else 0.0,
                    "requests": self._requests, "batches": self._batches,
                    "mean_batch": self._requests / self._batches if self._batches else 0.0, "version": self.version}

    def reset_stats(self) -> None:
        with self._stats_lock:
            self._t0 = time.monotonic()
            self._busy = 0.0
            self._requests = 0
            self._batches = 0
            self._batch_t0: Optional[float] = None

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._jobs.put(None)
            self._thread.join(timeout=30)

    # ---- batching ----------------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if isinstance(job, list):  # a closed batch from submit_many
                for k in range(0, len(job), self.max_batch):
                    self._run(job[k: k + self.max_batch])
                continue
            batch = [job]
            deadline = time.monotonic() + self.max_wait_s
            while len(batch) < self.max_batch:
                left = deadline - time.monotonic()
                try:
                    nxt = self._jobs.get(timeout=left) if left > 0 else self._jobs.get_nowait()
                except queue.Empty:
                    break
                if nxt is None or isinstance(nxt, list):
                    self._jobs.put(nxt)  # the end marker / a closed batch: handled next round
                    break
                batch.append(nxt)
            self._run(batch)

    def _run(self, batch: list[tuple[GenRequest, Future]]) -> None:
        with self._swap:
            ready, encoded = [], []
            for req, fut in batch:
                if not fut.set_running_or_notify_cancel():
                    continue
                try:
                    encoded.append(self.policy.encode_ids(req.prompt_ids, list(req.images)))
                    ready.append((req, fut))
                except Exception as exc:  # noqa: BLE001 - a bad request fails alone
                    fut.set_exception(exc)
            if not ready:
                return
            with self._stats_lock:
                self._batch_t0 = time.monotonic()
            try:
                samples = self.policy.generate(
                    encoded, max_new_tokens=[r.max_new_tokens for r, _ in ready],
                    temperature=[r.temperature for r, _ in ready], seeds=[r.seed for r, _ in ready],
                    candidates=[r.candidates for r, _ in ready])
            except Exception as exc:  # noqa: BLE001 - a failed batch fails its requests, not the engine
                samples = None
                error = exc
            finally:
                with self._stats_lock:
                    self._busy += time.monotonic() - self._batch_t0
                    self._batch_t0 = None
                    self._batches += 1
                    self._requests += len(ready)
                    self.batch_sizes.append(len(ready))
            version = self.version
        if samples is None:
            for _, fut in ready:
                fut.set_exception(error)
            return
        for (_, fut), s in zip(ready, samples):
            fut.set_result(GenResult(response_ids=list(s.response_ids), logprobs=list(s.logprobs), text=s.text,
                                     entropy=s.entropy, policy_version=version, finish_reason=s.finish_reason,
                                     endpoint="hf"))

    def __enter__(self) -> "HFEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ---- HTTP engine -------------------------------------------------------------------------------
class HTTPError(RuntimeError):
    """An endpoint answered with an error status or could not be reached (message names it)."""


API_KINDS = ("guigym", "vllm")
WEIGHT_SYNCS = ("admin", "lora", "restart")
TOKEN_ID_PREFIX = "token_id:"  # vLLM's return_tokens_as_token_ids spelling of a token


def vllm_completion_body(req: GenRequest, model: str, choice_field: str = "structured_outputs",
                         stop_token_ids: Optional[Sequence[int]] = None) -> dict[str, Any]:
    """The ``POST /v1/completions`` body stock vLLM accepts for ``req`` (text-only token-id prompt).

    Every sampling knob is explicit (vLLM otherwise takes defaults from the checkpoint's
    ``generation_config.json``): temperature/top_p from the request, top_k -1, min_p 0,
    repetition_penalty 1. ``logprobs: 0`` returns the sampled token's log-prob and no
    alternatives; ``return_tokens_as_token_ids`` makes each returned token ``"token_id:<id>"``."""
    if req.images:
        raise HTTPError("api='vllm': a prompt with images cannot be sent as token ids to stock vLLM (its "
                        "completions endpoint takes no images, its chat endpoint no token ids); use guigym "
                        "serve or a text-only prompt (rollout.history_images: 0)")
    if choice_field not in ("structured_outputs", "guided_choice"):
        raise ValueError(f"choice_field must be 'structured_outputs' or 'guided_choice', got {choice_field!r}")
    body: dict[str, Any] = {
        "model": model, "prompt": [int(t) for t in req.prompt_ids], "max_tokens": int(req.max_new_tokens),
        "temperature": float(req.temperature), "top_p": float(getattr(req, "top_p", 1.0) or 1.0),
        "top_k": int(getattr(req, "top_k", 0) or -1), "min_p": 0.0, "repetition_penalty": 1.0,
        "seed": int(req.seed), "logprobs": 0, "return_tokens_as_token_ids": True, "n": 1, "stream": False,
    }
    if stop_token_ids:
        body["stop_token_ids"] = [int(t) for t in stop_token_ids]
    if req.candidates is not None:
        choices = list(req.candidates)
        body[choice_field] = {"choice": choices} if choice_field == "structured_outputs" else choices
    return body


def parse_vllm_completion(reply: Any) -> tuple[list[int], list[float], str, str]:
    """``(response_ids, logprobs, text, finish_reason)`` of the first choice of a vLLM completions
    reply whose ``choices[0].logprobs`` is ``{tokens: ["token_id:<id>", ...], token_logprobs:
    [float, ...], ...}`` (OpenAI's legacy completions log-prob shape). Raises :class:`HTTPError`
    naming the field when the reply is not of that shape (e.g. a server that ignored
    ``return_tokens_as_token_ids``). When the server also returns ``token_ids`` (vLLM's
    ``return_token_ids``), they must agree."""
    try:
        choice = reply["choices"][0]
        lp = choice["logprobs"]
        tokens, values = lp["tokens"], lp["token_logprobs"]
        if not isinstance(tokens, list) or not isinstance(values, list):
            raise TypeError("logprobs.tokens and logprobs.token_logprobs must be lists")
    except (KeyError, IndexError, TypeError) as exc:
        raise HTTPError(f"vLLM reply lacks choices[0].logprobs.tokens/token_logprobs ({exc!r}); "
                        f"send logprobs=0") from None
    if len(tokens) != len(values):
        raise HTTPError(f"vLLM reply: {len(tokens)} logprobs.tokens but {len(values)} token_logprobs")
    ids: list[int] = []
    for i, tok in enumerate(tokens):
        if not (isinstance(tok, str) and tok.startswith(TOKEN_ID_PREFIX) and tok[len(TOKEN_ID_PREFIX):].isdigit()):
            raise HTTPError(f"vLLM reply: logprobs.tokens[{i}] = {tok!r} is not 'token_id:<int>'; the server "
                            f"ignored return_tokens_as_token_ids (vLLM >= 0.5 needed)")
        ids.append(int(tok[len(TOKEN_ID_PREFIX):]))
    lps: list[float] = []
    for i, v in enumerate(values):
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise HTTPError(f"vLLM reply: logprobs.token_logprobs[{i}] = {v!r} is not a number")
        lps.append(float(v))
    if choice.get("token_ids") is not None and [int(t) for t in choice["token_ids"]] != ids:
        raise HTTPError("vLLM reply: choices[0].token_ids disagree with logprobs.tokens")
    return ids, lps, str(choice.get("text") or ""), str(choice.get("finish_reason") or "stop")


def command_restarter(argv: Sequence[str], timeout_s: float = 600.0) -> Callable[[int, str, str], None]:
    """A ``restart`` hook for ``weight_sync="restart"`` that runs an operator-configured command
    (no shell) with ``{index}``, ``{url}`` and ``{path}`` filled in, e.g.
    ``["systemctl", "restart", "vllm@{index}"]`` or a script that stops worker ``index`` and starts
    ``vllm serve {path} ...`` again. A non-zero exit raises."""
    import subprocess

    template = [str(a) for a in argv]
    if not template:
        raise ValueError("command_restarter needs a command")

    def restart(index: int, url: str, path: str) -> None:
        cmd = [a.format(index=index, url=url, path=path) for a in template]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise HTTPError(f"restart of endpoint {index} ({url}) failed: {cmd!r} exited {done.returncode}: "
                            f"{done.stderr.strip()[-500:]}")

    return restart


@dataclass
class _Endpoint:
    base: str  # ".../v1"
    inflight: int = 0
    draining: bool = False
    requests: int = 0
    busy_s: float = 0.0
    busy_since: Optional[float] = None
    version: int = 0
    model: str = "policy"  # the model name requests name (a LoRA adapter under weight_sync="lora")


class HTTPEngine:
    """Least-loaded routing over OpenAI-compatible endpoints (``urls``: base URLs such as
    ``http://127.0.0.1:8000/v1``; ``/v1`` is appended when missing), bearer ``token``.

    Args:
        api: ``"guigym"`` (``guigym serve``'s token-level chat extensions) or ``"vllm"`` (stock
            ``vllm serve``: ``/v1/completions`` with token-id prompts; see the module docstring).
        weight_sync: how :meth:`update_weights` refreshes an endpoint: ``"admin"`` (``guigym
            serve``'s ``/v1/admin/reload``; default for api=guigym), ``"lora"`` (vLLM's runtime LoRA
            endpoints; default for api=vllm) or ``"restart"`` (``restart(index, base_url, path)``,
            then wait for ``GET /health``).
        model: the served model name (api=vllm: the name ``vllm serve`` registered, i.e. its model
            path or ``--served-model-name``). lora_prefix, session: adapter names are
            ``<prefix>-<session>-v<version>``; ``session`` defaults to 8 random hex digits, new
            for every engine, so a resumed trainer never asks a server to load a name its crashed
            predecessor left loaded (vLLM answers 400 "has already been loaded").
        choice_field: ``"structured_outputs"`` (vLLM >= 0.10.2) or ``"guided_choice"`` (vLLM < 0.12).
        stop_token_ids: sent to vLLM as ``stop_token_ids`` (e.g. the chat end token, if the
            checkpoint's generation_config does not already stop there).
        tokenizer: optional; with it, constrained replies from vLLM must be the canonical
            tokenisation of a candidate (+ end token), else :class:`HTTPError`.

    Stats: per endpoint ``requests``, ``busy_s`` (time with at least one request in flight) and
    ``utilisation``; ``refreshes`` (endpoint reloads done).
    """

    def __init__(self, urls: Sequence[str], token: str, timeout_s: float = 120.0, max_concurrency: int = 64,
                 model: str = "policy", version: int = 0, api: str = "guigym", weight_sync: Optional[str] = None,
                 lora_prefix: str = "guigym-policy", choice_field: str = "structured_outputs",
                 stop_token_ids: Optional[Sequence[int]] = None, tokenizer: Any = None,
                 restart: Optional[Callable[[int, str, str], None]] = None, health_timeout_s: float = 900.0,
                 session: Optional[str] = None) -> None:
        if not urls:
            raise ValueError("HTTPEngine needs at least one URL")
        if not token:
            raise ValueError("HTTPEngine needs the servers' bearer token")
        if api not in API_KINDS:
            raise ValueError(f"api must be one of {API_KINDS}, got {api!r}")
        weight_sync = weight_sync or ("admin" if api == "guigym" else "lora")
        if weight_sync not in WEIGHT_SYNCS:
            raise ValueError(f"weight_sync must be one of {WEIGHT_SYNCS}, got {weight_sync!r}")
        if weight_sync == "restart" and restart is None:
            raise ValueError("weight_sync='restart' needs restart(index, base_url, path), "
                             "e.g. command_restarter([...])")
        if choice_field not in ("structured_outputs", "guided_choice"):
            raise ValueError(f"choice_field must be 'structured_outputs' or 'guided_choice', got {choice_field!r}")
        self.endpoints = [_Endpoint(self._base(u), version=int(version), model=model) for u in urls]
        self.token = token
        self.timeout_s = float(timeout_s)
        self.model = model
        self.api = api
        self.weight_sync = weight_sync
        self.lora_prefix = lora_prefix
        self.session = session if session is not None else uuid.uuid4().hex[:8]
        self.choice_field = choice_field
        self.stop_token_ids = list(stop_token_ids) if stop_token_ids else None
        self.tokenizer = tokenizer
        self.restart = restart
        self.health_timeout_s = float(health_timeout_s)
        self.version = int(version)
        self._cond = threading.Condition()
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="guigym-http-engine")
        self._rr = 0
        self.refreshes: list[tuple[str, int]] = []  # (endpoint, version) in refresh order
        self.reset_stats()

    @staticmethod
    def _base(url: str) -> str:
        url = url.rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"endpoint URL must start with http:// or https://, got {url!r}")
        return url if url.endswith("/v1") else url + "/v1"

    # ---- routing -----------------------------------------------------------------------------------
    def _acquire(self) -> _Endpoint:
        """The non-draining endpoint with the fewest requests in flight (ties: round robin)."""
        return self._acquire_serving()[0]

    def _acquire_serving(self) -> tuple[_Endpoint, str, int]:
        """:meth:`_acquire` plus the model name and version that endpoint serves at this moment
        (read under the lock: a refresh changes them only while the endpoint is drained)."""
        with self._cond:
            while True:
                open_ = [e for e in self.endpoints if not e.draining]
                if open_:
                    n = len(self.endpoints)
                    order = sorted(range(n), key=lambda i: (self.endpoints[i].inflight, (i - self._rr) % n))
                    ep = next(self.endpoints[i] for i in order if not self.endpoints[i].draining)
                    self._rr = (self.endpoints.index(ep) + 1) % n
                    if ep.inflight == 0:
                        ep.busy_since = time.monotonic()
                    ep.inflight += 1
                    ep.requests += 1
                    return ep, ep.model, ep.version
                self._cond.wait()

    def _release(self, ep: _Endpoint) -> None:
        with self._cond:
            ep.inflight -= 1
            if ep.inflight == 0 and ep.busy_since is not None:
                ep.busy_s += time.monotonic() - ep.busy_since
                ep.busy_since = None
            self._cond.notify_all()

    # ---- API ---------------------------------------------------------------------------------------
    def submit(self, req: GenRequest) -> "Future[GenResult]":
        return self._pool.submit(self._call, req)

    def submit_many(self, reqs: Sequence[GenRequest]) -> "list[Future[GenResult]]":
        """Same as one :meth:`submit` per request (the servers batch concurrent requests)."""
        return [self.submit(r) for r in reqs]

    def _request(self, url: str, body: Optional[dict[str, Any]], method: Optional[str] = None,
                 timeout_s: Optional[float] = None) -> Any:
        """JSON reply of ``url`` (vLLM's LoRA endpoints answer plain text: returned as a str)."""
        data = json.dumps(body).encode() if body is not None else None
        http = urllib.request.Request(url, data=data, method=method, headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(http, timeout=timeout_s or self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode("utf-8", "replace")
            raise HTTPError(f"{url}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise HTTPError(f"{url}: {exc}") from None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")

    def _post(self, url: str, body: Optional[dict[str, Any]]) -> Any:
        return self._request(url, body)

    def _call(self, req: GenRequest) -> GenResult:
        if self.api == "vllm":
            return self._call_vllm(req)
        from guigym.agents.openai_agent import png_data_uri

        parts = [{"type": "image_url", "image_url": {"url": png_data_uri(np.asarray(im))}} for im in req.images]
        body: dict[str, Any] = {
            "model": self.model, "messages": [{"role": "user", "content": parts or ""}],
            "prompt_token_ids": list(req.prompt_ids), "max_tokens": int(req.max_new_tokens),
            "temperature": float(req.temperature), "seed": int(req.seed), "logprobs": True,
        }
        if req.candidates is not None:
            body["guided_choice"] = list(req.candidates)
        ep, _, version = self._acquire_serving()
        try:
            reply = self._post(ep.base + "/chat/completions", body)
        finally:
            self._release(ep)
        try:
            choice = reply["choices"][0]
            lps = [float(c["logprob"]) for c in choice["logprobs"]["content"]]
            return GenResult(response_ids=[int(t) for t in choice["token_ids"]], logprobs=lps,
                             text=choice["message"]["content"] or "", entropy=choice.get("entropy"),
                             policy_version=int(reply.get("policy_version", version)),
                             finish_reason=choice.get("finish_reason", "stop"), endpoint=ep.base)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise HTTPError(f"{ep.base}: reply lacks token ids/logprobs ({exc!r}); the server must support "
                            f"prompt_token_ids and return_token_ids") from None

    def _call_vllm(self, req: GenRequest) -> GenResult:
        ep, model, version = self._acquire_serving()
        try:
            body = vllm_completion_body(req, model, self.choice_field, self.stop_token_ids)
            reply = self._post(ep.base + "/completions", body)
        finally:
            self._release(ep)
        if not isinstance(reply, dict):
            raise HTTPError(f"{ep.base}/completions: expected a JSON object, got {str(reply)[:200]!r}")
        if reply.get("model") not in (None, model):
            raise HTTPError(f"{ep.base}/completions answered with model {reply.get('model')!r}, asked for {model!r}")
        ids, lps, text, finish = parse_vllm_completion(reply)
        if req.candidates is not None and finish == "stop":
            if text not in req.candidates:  # e.g. a server that ignored the constraint field (fails open)
                raise HTTPError(f"{ep.base}: constrained reply {text[:200]!r} is not one of the {len(req.candidates)} "
                                f"candidates; does this vLLM accept {self.choice_field!r}? (see choice_field)")
            if self.tokenizer is not None:
                self._check_canonical(ids, req.candidates, ep.base)
        return GenResult(response_ids=ids, logprobs=lps, text=text, entropy=None, policy_version=version,
                         finish_reason=finish, endpoint=ep.base)

    def _check_canonical(self, ids: list[int], candidates: Sequence[str], where: str) -> None:
        from guigym.train.rollout.constrain import CandidateConstraint

        con = CandidateConstraint(self.tokenizer, list(candidates), self.stop_token_ids)
        body = ids[:-1] if ids and ids[-1] in con.end_ids else ids
        if body not in con.sequences:
            raise HTTPError(f"{where}: constrained reply {ids} is not the canonical tokenisation of a candidate; the "
                            f"trainer's candidate trie gives it probability 0 (vLLM's choice grammar works on bytes)")

    # ---- weight refresh ----------------------------------------------------------------------------
    def update_weights(self, version: int, path: Union[str, Path, None] = None,
                       drain_timeout_s: float = 300.0) -> None:
        """Refresh endpoints one at a time: stop routing to it, wait for its in-flight requests,
        refresh it (``weight_sync``: admin reload, LoRA load/unload, or restart + health wait),
        route to it again. The others keep serving. ``path``: the checkpoint directory as the
        servers see it (a PEFT adapter directory for ``"lora"``)."""
        if path is None:
            raise ValueError("HTTPEngine.update_weights needs the path of the new checkpoint (as the servers see it)")
        for index, ep in enumerate(self.endpoints):
            with self._cond:
                ep.draining = True
                end = time.monotonic() + drain_timeout_s
                while ep.inflight > 0:
                    if not self._cond.wait(timeout=max(0.0, end - time.monotonic())):
                        ep.draining = False
                        self._cond.notify_all()
                        raise TimeoutError(f"{ep.base} still has {ep.inflight} requests after {drain_timeout_s} s")
            try:
                if self.weight_sync == "admin":
                    reply = self._post(ep.base + "/admin/reload", {"path": str(path), "version": int(version)})
                    ep.version = int(reply.get("version", version)) if isinstance(reply, dict) else int(version)
                elif self.weight_sync == "lora":
                    self._refresh_lora(ep, int(version), str(path))
                else:
                    self._refresh_restart(index, ep, int(version), str(path))
                self.refreshes.append((ep.base, ep.version))
            finally:
                with self._cond:
                    ep.draining = False
                    self._cond.notify_all()
        self.version = int(version)

    def _refresh_lora(self, ep: _Endpoint, version: int, path: str) -> None:
        name = f"{self.lora_prefix}-{self.session}-v{version}"
        old = ep.model
        if name != old:
            self._post(ep.base + "/load_lora_adapter", {"lora_name": name, "lora_path": path})
        ep.model, ep.version = name, version
        if old != name and old != self.model:  # an adapter this engine loaded (never the base model)
            try:  # a failed unload leaves an unused adapter loaded; the new one already serves
                self._post(ep.base + "/unload_lora_adapter", {"lora_name": old})
            except HTTPError:
                pass

    def _refresh_restart(self, index: int, ep: _Endpoint, version: int, path: str) -> None:
        self.restart(index, ep.base, path)
        root = ep.base[: -len("/v1")]
        end = time.monotonic() + self.health_timeout_s
        last = ""
        while True:
            try:
                self._request(root + "/health", None, method="GET", timeout_s=10.0)
                break
            except HTTPError as exc:
                last = str(exc)
            if time.monotonic() > end:
                raise HTTPError(f"{ep.base}: not healthy {self.health_timeout_s:.0f} s after restart ({last})")
            time.sleep(1.0)
        ep.version = version

    def stats(self) -> dict[str, Any]:
        now = time.monotonic()
        with self._cond:
            wall = now - self._t0
            per = []
            for ep in self.endpoints:
                busy = ep.busy_s + (now - ep.busy_since if ep.busy_since is not None else 0.0)
                per.append({"endpoint": ep.base, "requests": ep.requests, "busy_s": busy, "inflight": ep.inflight,
                            "utilisation": busy / wall if wall > 0 else 0.0, "version": ep.version})
        busy = sum(p["busy_s"] for p in per)
        return {"busy_s": busy, "wall_s": wall,
                "utilisation": busy / (wall * len(per)) if wall > 0 else 0.0,
                "requests": sum(p["requests"] for p in per), "endpoints": per, "version": self.version}

    def reset_stats(self) -> None:
        with self._cond:
            self._t0 = time.monotonic()
            for ep in self.endpoints:
                ep.requests, ep.busy_s = 0, 0.0
                ep.busy_since = time.monotonic() if ep.inflight else None

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "HTTPEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
