"""HTTPEngine(api="vllm") against the HTTP surface stock ``vllm serve`` documents (issue 11, item 6).

vLLM cannot run here (it needs CUDA), so the contract is checked two ways:

* our request bodies use only the field names of vLLM's ``CompletionRequest`` and the reply
  parser reads a hand-written reply in vLLM's ``CompletionResponse``/``CompletionLogProbs`` shape
  (``tests/fixtures/vllm/completion_token_ids.json``; field names from
  ``vllm/entrypoints/openai/protocol.py`` at vllm-project/vllm 0052bed, vLLM 0.10.x, plus
  ``structured_outputs`` from vLLM's structured-outputs page, which says ``guided_*`` were removed
  in 0.12.0; LoRA endpoints from ``docs/features/lora.md``);
* ``VLLMStandIn`` -- a STAND-IN for ``vllm serve`` (not vLLM) that serves only those documented
  routes with vLLM's documented refusals (401 without the key, 404 for an unknown model or route,
  400 when a LoRA name is loaded twice). guigym serve's extensions (``/v1/admin/reload``,
  ``prompt_token_ids``) do not exist there, so the engine must do without them.

``test_live_vllm`` runs the same checks against a real server when ``GUIGYM_VLLM_URL`` is set.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from guigym.train.rollout.policy_service import (GenRequest, HTTPEngine, HTTPError, command_restarter,
                                                 parse_vllm_completion, vllm_completion_body)

FIXTURE = Path(__file__).parent / "fixtures" / "vllm" / "completion_token_ids.json"
KEY = "vllm-key-1"
BASE_MODEL = "Qwen/Qwen2.5-VL-7B-Instruct"

# The request fields vLLM's CompletionRequest defines (protocol.py, 0052bed): OpenAI's, then
# vLLM's sampling and extra params; plus structured_outputs (vLLM >= 0.10.2, vllm-project/vllm PR 22772).
COMPLETION_FIELDS = {
    "model", "prompt", "prompt_embeds", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs",
    "max_tokens", "n", "presence_penalty", "seed", "stop", "stream", "stream_options", "suffix", "temperature",
    "top_p", "user", "use_beam_search", "top_k", "min_p", "repetition_penalty", "length_penalty",
    "stop_token_ids", "include_stop_str_in_output", "ignore_eos", "min_tokens", "skip_special_tokens",
    "spaces_between_special_tokens", "truncate_prompt_tokens", "allowed_token_ids", "prompt_logprobs",
    "add_special_tokens", "response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
    "guided_decoding_backend", "guided_whitespace_pattern", "priority", "request_id", "logits_processors",
    "return_tokens_as_token_ids", "cache_salt", "kv_transfer_params", "vllm_xargs", "structured_outputs",
}


def _is_ids(x: Any) -> bool:
    return isinstance(x, list) and bool(x) and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in x)


class VLLMStandIn:
    """Stand-in for one ``vllm serve --api-key KEY --enable-lora`` worker (documented routes only).

    ``reply(body) -> (ids, logprobs, text)`` decides what is "sampled". ``load_gate``: when set,
    ``/v1/load_lora_adapter`` waits on it (to observe an endpoint mid-refresh)."""

    def __init__(self, reply: Callable[[dict], tuple[list[int], list[float], str]]) -> None:
        self.reply = reply
        self.adapters: dict[str, str] = {}
        self.log: list[tuple[str, Any]] = []  # (path, body) of every authorised request
        self.unhealthy_polls = 0
        self.load_gate: Optional[threading.Event] = None
        self.load_started = threading.Event()
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def completions(self, body: dict) -> tuple[int, Any]:
        unknown = set(body) - COMPLETION_FIELDS
        if unknown:  # vLLM logs and ignores unknown fields; the contract is that we send none
            return 400, {"error": {"message": f"fields vLLM does not define: {sorted(unknown)}", "code": 400}}
        if not _is_ids(body.get("prompt")):
            return 400, {"error": {"message": "prompt must be token ids here", "code": 400}}
        if body.get("model") not in {BASE_MODEL, *self.adapters}:
            return 404, {"error": {"message": f"The model `{body.get('model')}` does not exist.", "code": 404}}
        if not (isinstance(body.get("logprobs"), int) and body["logprobs"] >= 0):
            return 400, {"error": {"message": "`logprobs` must be a positive value.", "code": 400}}
        so = body.get("structured_outputs")
        if so is not None and not (isinstance(so, dict) and isinstance(so.get("choice"), list)):
            return 400, {"error": {"message": "structured_outputs.choice must be a list", "code": 400}}
        ids, lps, text = self.reply(body)
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        tokens = [f"token_id:{t}" if as_ids else f"tok{t}" for t in ids]
        return 200, {"id": "cmpl-x", "object": "text_completion", "created": 0, "model": body["model"],
                     "choices": [{"index": 0, "text": text, "finish_reason": "stop", "stop_reason": None,
                                  "logprobs": {"text_offset": list(range(len(ids))), "token_logprobs": lps,
                                               "tokens": tokens,
                                               "top_logprobs": [{k: v} for k, v in zip(tokens, lps)]}}],
                     "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(ids),
                               "total_tokens": len(body["prompt"]) + len(ids)}}

    def _handler(self) -> type:
        srv = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _send(self, code: int, obj: Any) -> None:
                data = (json.dumps(obj) if not isinstance(obj, str) else obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json" if not isinstance(obj, str) else "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                if self.path == "/health":  # vLLM: outside /v1, not behind the API key
                    with srv.lock:
                        sick = srv.unhealthy_polls > 0
                        srv.unhealthy_polls -= int(sick)
                    self._send(503 if sick else 200, "")
                    return
                self._send(404, {"error": {"message": "Not Found", "code": 404}})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if self.headers.get("Authorization") != f"Bearer {KEY}":
                    self._send(401, {"error": "Unauthorized"})
                    return
                with srv.lock:
                    srv.log.append((self.path, body))
                if self.path == "/v1/completions":
                    self._send(*srv.completions(body))
                elif self.path == "/v1/load_lora_adapter":
                    srv.load_started.set()
                    if srv.load_gate is not None:
                        srv.load_gate.wait(30)
                    name = body["lora_name"]
                    if name in srv.adapters:
                        self._send(400, {"error": {"message": f"The lora adapter '{name}' has already been loaded.",
                                                   "code": 400}})
                        return
                    srv.adapters[name] = body["lora_path"]
                    self._send(200, f"Success: LoRA adapter '{name}' added successfully.")
                elif self.path == "/v1/unload_lora_adapter":
                    if srv.adapters.pop(body.get("lora_name"), None) is None:
                        self._send(404, {"error": {"message": "adapter not found", "code": 404}})
                        return
                    self._send(200, f"Success: LoRA adapter '{body['lora_name']}' removed successfully.")
                else:
                    self._send(404, {"error": {"message": "Not Found", "code": 404}})

        return H


def _echo_reply(body: dict) -> tuple[list[int], list[float], str]:
    """'Samples' ids derived from the prompt and seed, so a mix-up between requests shows."""
    ids = [body["prompt"][-1] + 1, int(body["seed"]) % 500, 151645]
    return ids, [-0.5, -1.0, -0.25], "reply"


@pytest.fixture()
def standins():
    servers = [VLLMStandIn(_echo_reply), VLLMStandIn(_echo_reply)]
    yield servers
    for s in servers:
        s.close()


# ---- request and reply shapes --------------------------------------------------------------------
def test_request_body_uses_only_documented_vllm_fields():
    req = GenRequest(prompt_ids=[5, 17, 602], max_new_tokens=12, temperature=0.7, seed=99,
                     candidates=['click(element="1")', 'click(element="2")'])
    body = vllm_completion_body(req, "m")
    assert set(body) <= COMPLETION_FIELDS, set(body) - COMPLETION_FIELDS
    assert "prompt_token_ids" not in body and "messages" not in body  # guigym serve's extensions
    assert body["prompt"] == [5, 17, 602] and body["model"] == "m"
    assert (body["max_tokens"], body["temperature"], body["seed"]) == (12, 0.7, 99)
    assert body["logprobs"] == 0 and body["return_tokens_as_token_ids"] is True
    # explicit neutral knobs: the checkpoint's generation_config (vLLM's default sampling params) cannot leak in
    assert (body["top_p"], body["top_k"], body["min_p"], body["repetition_penalty"]) == (1.0, -1, 0.0, 1.0)
    assert body["structured_outputs"] == {"choice": ['click(element="1")', 'click(element="2")']}
    assert "guided_choice" not in body
    old = vllm_completion_body(req, "m", choice_field="guided_choice", stop_token_ids=[151645])
    assert old["guided_choice"] == ['click(element="1")', 'click(element="2")'] and "structured_outputs" not in old
    assert old["stop_token_ids"] == [151645]
    assert "structured_outputs" not in vllm_completion_body(GenRequest(prompt_ids=[1]), "m")


def test_request_with_images_is_refused_with_the_reason():
    import numpy as np

    with pytest.raises(HTTPError, match="images"):
        vllm_completion_body(GenRequest(prompt_ids=[1, 2], images=[np.zeros((4, 4, 3), np.uint8)]), "m")


def test_parse_documented_completion_reply():
    reply = json.loads(FIXTURE.read_text())
    ids, lps, text, finish = parse_vllm_completion(reply)
    assert ids == [3678, 7, 6101, 428, 717, 899, 151645]
    assert lps == [-0.0312, -1.25e-05, -0.4471, -2.0894, -0.0007, -0.1623, -0.0153]
    assert text == 'click(element="12")' and finish == "stop"
    # the same reply with vLLM's return_token_ids extension agrees
    reply["choices"][0]["token_ids"] = list(ids)
    assert parse_vllm_completion(reply)[0] == ids


@pytest.mark.parametrize("mutate, match", [
    (lambda c: c["logprobs"].update(tokens=["click", "(", "element", "=\"", "12", "\")", "<|im_end|>"]),
     "return_tokens_as_token_ids"),  # a server that ignored the flag: text tokens cannot become ids
    (lambda c: c["logprobs"]["token_logprobs"].pop(), "6 token_logprobs"),
    (lambda c: c["logprobs"]["token_logprobs"].__setitem__(2, None), r"token_logprobs\[2\]"),
    (lambda c: c.update(logprobs=None), "logprobs"),
    (lambda c: c.update(token_ids=[1, 2, 3]), "disagree"),
])
def test_malformed_replies_are_errors_naming_the_field(mutate, match):
    reply = json.loads(FIXTURE.read_text())
    mutate(reply["choices"][0])
    with pytest.raises(HTTPError, match=match):
        parse_vllm_completion(reply)


# ---- the engine against the stand-in -------------------------------------------------------------
def test_engine_generates_through_completions_with_token_ids(standins):
    eng = HTTPEngine([s.url for s in standins], token=KEY, api="vllm", model=BASE_MODEL)
    try:
        reqs = [GenRequest(prompt_ids=[3, 4, 10 + i], seed=i, candidates=["reply", "b"]) for i in range(6)]
        res = [f.result(30) for f in eng.submit_many(reqs)]
    finally:
        eng.close()
    for i, r in enumerate(res):
        assert r.response_ids == [11 + i, i, 151645] and r.logprobs == [-0.5, -1.0, -0.25]
        assert r.policy_version == 0 and r.entropy is None and r.text == "reply"
    bodies = [b for s in standins for p, b in s.log if p == "/v1/completions"]
    assert all(b["structured_outputs"] == {"choice": ["reply", "b"]} for b in bodies)
    assert len(bodies) == 6 and all(b["model"] == BASE_MODEL for b in bodies)
    assert all(s.log for s in standins), "least-loaded routing should use both endpoints"
    with pytest.raises(HTTPError, match="401"):
        bad = HTTPEngine([standins[0].url], token="wrong", api="vllm", model=BASE_MODEL)
        try:
            bad.submit(reqs[0]).result(30)
        finally:
            bad.close()


def test_reply_outside_the_candidates_is_an_error(standins):
    """vLLM >= 0.12 ignores a ``guided_choice`` it no longer knows and answers 200 with free text."""
    eng = HTTPEngine([standins[0].url], token=KEY, api="vllm", model=BASE_MODEL, choice_field="guided_choice")
    try:
        with pytest.raises(HTTPError, match="not one of the 2 candidates"):
            eng.submit(GenRequest(prompt_ids=[1, 2], candidates=["a", "b"])).result(30)
    finally:
        eng.close()


def test_lora_refresh_one_endpoint_at_a_time(standins, tmp_path):
    eng = HTTPEngine([s.url for s in standins], token=KEY, api="vllm", model=BASE_MODEL, lora_prefix="pol",
                     session="s1")
    assert eng.weight_sync == "lora"
    adapter1, adapter2 = tmp_path / "a1", tmp_path / "a2"
    req = GenRequest(prompt_ids=[1, 2, 3], seed=5)
    try:
        standins[0].load_gate = threading.Event()
        t = threading.Thread(target=eng.update_weights, args=(1, adapter1))
        t.start()
        assert standins[0].load_started.wait(30)
        # endpoint 0 is refreshing: a request now goes to endpoint 1, still on the old weights
        mid = eng.submit(req).result(30)
        assert mid.endpoint == standins[1].url and mid.policy_version == 0
        assert standins[1].log[-1][1]["model"] == BASE_MODEL
        assert not any(p == "/v1/load_lora_adapter" for p, _ in standins[1].log)
        standins[0].load_gate.set()
        t.join(30)
        assert not t.is_alive()
        assert [(e, v) for e, v in eng.refreshes] == [(standins[0].url, 1), (standins[1].url, 1)]
        for s in standins:
            assert s.adapters == {"pol-s1-v1": str(adapter1)}
        after = [eng.submit(req).result(30) for _ in range(4)]
        assert {r.policy_version for r in after} == {1}
        assert {b["model"] for s in standins for p, b in s.log[-2:] if p == "/v1/completions"} == {"pol-s1-v1"}
        # next version: a new adapter name (vLLM refuses to load a name twice), the old one unloaded
        eng.update_weights(2, adapter2)
        for s in standins:
            assert s.adapters == {"pol-s1-v2": str(adapter2)}
            assert [p for p, _ in s.log[-2:]] == ["/v1/load_lora_adapter", "/v1/unload_lora_adapter"]
        assert eng.submit(req).result(30).policy_version == 2
    finally:
        eng.close()


def test_resumed_engine_never_reloads_an_adapter_name_the_crashed_one_left(standins, tmp_path):
    """A trainer pushes version v+1 after iteration v, then checkpoints; killed in between or
    after, its resume re-pushes the version it resumes at, which the servers (they outlive the
    trainer) still hold under the crashed process's name. Issue 32 item 6."""
    server = standins[0]
    crashed = HTTPEngine([server.url], token=KEY, api="vllm", model=BASE_MODEL)
    try:
        crashed.update_weights(1, tmp_path / "v1")
        crashed.update_weights(2, tmp_path / "v2")
    finally:
        crashed.close()  # a crash unloads nothing
    (left,) = server.adapters
    # the stand-in refuses a second load of a name, as vLLM does
    req = urllib.request.Request(server.url + "/load_lora_adapter", method="POST",
                                 data=json.dumps({"lora_name": left, "lora_path": "x"}).encode(),
                                 headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=30)
    assert refused.value.code == 400 and "already been loaded" in refused.value.read().decode()
    # the resumed process: a new engine at version 2 re-pushes version 2, then trains on to 3
    resumed = HTTPEngine([server.url], token=KEY, api="vllm", model=BASE_MODEL, version=2)
    try:
        resumed.update_weights(2, tmp_path / "v2-resumed")
        r = resumed.submit(GenRequest(prompt_ids=[1, 2], seed=3)).result(30)
        assert r.policy_version == 2
        serving = server.log[-1][1]["model"]
        assert serving != left and server.adapters[serving] == str(tmp_path / "v2-resumed")
        resumed.update_weights(3, tmp_path / "v3")
        # the resumed engine unloads its own previous adapter; the crashed one's stays untouched
        assert set(server.adapters) == {left, server.log[-2][1]["lora_name"]}
        assert server.adapters[server.log[-2][1]["lora_name"]] == str(tmp_path / "v3")
    finally:
        resumed.close()


def test_guigym_extensions_are_not_needed_and_admin_sync_fails_on_stock_vllm(standins, tmp_path):
    eng = HTTPEngine([standins[0].url], token=KEY, api="vllm", model=BASE_MODEL, weight_sync="admin")
    try:
        with pytest.raises(HTTPError, match="404"):
            eng.update_weights(1, tmp_path)
    finally:
        eng.close()


def test_rolling_restart_waits_for_health(standins, tmp_path):
    calls = []

    def restart(index: int, url: str, path: str) -> None:
        calls.append((index, url, path, time.monotonic()))
        standins[index].unhealthy_polls = 2  # the restarted worker needs a while to come up

    eng = HTTPEngine([s.url for s in standins], token=KEY, api="vllm", model=BASE_MODEL, weight_sync="restart",
                     restart=restart)
    try:
        eng.update_weights(4, tmp_path / "ckpt-4")
        assert [(i, u, p) for i, u, p, _ in calls] == [(0, standins[0].url, str(tmp_path / "ckpt-4")),
                                                       (1, standins[1].url, str(tmp_path / "ckpt-4"))]
        assert all(s.unhealthy_polls <= 0 for s in standins)  # each was polled until healthy
        assert calls[1][3] - calls[0][3] >= 2.0  # worker 1 restarted only after worker 0's two failed polls
        r = eng.submit(GenRequest(prompt_ids=[1, 2], seed=1)).result(30)
        assert r.policy_version == 4
    finally:
        eng.close()
    with pytest.raises(ValueError, match="restart"):
        HTTPEngine([standins[0].url], token=KEY, api="vllm", weight_sync="restart")


def test_command_restarter_fills_in_the_worker(tmp_path):
    out = tmp_path / "args.json"
    hook = command_restarter([sys.executable, "-c", "import json, sys; json.dump(sys.argv[1:], open(sys.argv[1], 'w'))",
                              str(out), "{index}", "{url}", "{path}"])
    hook(3, "http://h:1/v1", "/ckpt/7")
    assert json.loads(out.read_text()) == [str(out), "3", "http://h:1/v1", "/ckpt/7"]
    with pytest.raises(HTTPError, match="exited 2"):
        command_restarter([sys.executable, "-c", "import sys; sys.exit(2)"])(0, "u", "p")


def test_non_canonical_constrained_reply_is_rejected():
    from guigym.train.policy.tiny import build_tokenizer

    tok = build_tokenizer()
    end = tok.convert_tokens_to_ids("<|im_end|>")
    cand = ['click(element="12")', 'click(element="3")']
    canonical = tok(cand[0], add_special_tokens=False)["input_ids"]
    # the same text, one byte-level token per character: vLLM's byte grammar allows it, our trie does not
    split = [tok.convert_tokens_to_ids(c) for c in tok.convert_ids_to_tokens(canonical[0])] + canonical[1:]
    assert split != canonical and tok.decode(split) == cand[0]
    replies = {"ids": canonical + [end]}
    srv = VLLMStandIn(lambda body: (replies["ids"], [-0.1] * len(replies["ids"]), cand[0]))
    eng = HTTPEngine([srv.url], token=KEY, api="vllm", model=BASE_MODEL, tokenizer=tok, stop_token_ids=[end])
    try:
        req = GenRequest(prompt_ids=[1, 2], candidates=cand)
        assert eng.submit(req).result(30).response_ids == canonical + [end]
        replies["ids"] = split + [end]
        with pytest.raises(HTTPError, match="canonical"):
            eng.submit(req).result(30)
    finally:
        eng.close()
        srv.close()


# ---- the real thing --------------------------------------------------------------------------------
@pytest.mark.skipif(not os.environ.get("GUIGYM_VLLM_URL"),
                    reason="no vLLM server: set GUIGYM_VLLM_URL (e.g. http://127.0.0.1:8000), GUIGYM_VLLM_KEY "
                           "(its --api-key) and optionally GUIGYM_VLLM_LORA (a PEFT adapter dir the server can read, "
                           "with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora)")
def test_live_vllm():
    base = os.environ["GUIGYM_VLLM_URL"].rstrip("/").removesuffix("/v1")
    key = os.environ.get("GUIGYM_VLLM_KEY", "EMPTY")

    def call(path: str, body: Optional[dict] = None) -> Any:
        r = urllib.request.Request(base + path, data=json.dumps(body).encode() if body is not None else None,
                                   headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        with urllib.request.urlopen(r, timeout=120) as resp:
            return json.loads(resp.read())

    model = call("/v1/models")["data"][0]["id"]
    prompt = call("/tokenize", {"model": model, "prompt": "Say one of: yes, no."})["tokens"]
    eng = HTTPEngine([base], token=key, api="vllm", model=model)
    try:
        a, b = (eng.submit(GenRequest(prompt_ids=prompt, max_new_tokens=8, seed=123)).result(120) for _ in range(2))
        assert a.response_ids and len(a.response_ids) == len(a.logprobs) <= 8
        assert all(lp <= 0.0 for lp in a.logprobs)
        assert (a.response_ids, a.text) == (b.response_ids, b.text)  # same seed, same sample
        c = eng.submit(GenRequest(prompt_ids=prompt, max_new_tokens=8, seed=1, candidates=["yes", "no"])).result(120)
        assert c.text in ("yes", "no")
        lora = os.environ.get("GUIGYM_VLLM_LORA")
        if lora:
            eng.update_weights(1, lora)
            d = eng.submit(GenRequest(prompt_ids=prompt, max_new_tokens=8, seed=123)).result(120)
            assert d.policy_version == 1 and d.response_ids
    finally:
        eng.close()
