"""``openai``: any OpenAI-compatible chat-completions endpoint (``guigym serve``, ``vllm serve``, ...).

``guigym eval --agent openai:http://127.0.0.1:8000/v1``; the API key comes from ``GUIGYM_API_KEY``
(or ``OPENAI_API_KEY``); the model name from ``GUIGYM_MODEL`` or the server's first ``/v1/models``
entry. Screenshots are sent as ``data:image/png;base64,...`` ``image_url`` parts. The request asks
for ``logprobs`` and ``return_token_ids`` (vLLM's extension, also served by ``guigym serve``); when
the reply carries ``prompt_token_ids`` / ``token_ids`` and per-token logprobs they become
``last_tokens``. Connection errors, timeouts, 429 and 5xx are retried with exponential backoff
(``retries``); then, and for other HTTP errors, ``act`` raises :class:`APIError` (``guigym eval``
retries the call and then records the episode lost, never scored: guigym/eval/agent_call.py).
"""
from __future__ import annotations

import base64
import io
import json
import os
import time
import urllib.error
import urllib.request
from typing import Any, Optional

import numpy as np
from PIL import Image

from guigym.agents.base import AGENTS
from guigym.agents.hf import _ModelAgentBase


def png_data_uri(image: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(np.asarray(image, dtype=np.uint8)).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


class APIError(RuntimeError):
    """A chat-completions call failed for good (after retries, or a 4xx that retrying cannot fix)."""


@AGENTS.register("openai")
class OpenAIAgent(_ModelAgentBase):
    """OpenAI-compatible endpoint: ``openai:BASE_URL``. kwargs: seed, model, max_new_tokens=32,
    temperature=1.0, history=1, prompt, dialect='canonical', timeout_s=60, retries=4."""

    name = "openai"

    def __init__(self, target: str, seed: int = 0, model: Optional[str] = None, max_new_tokens: int = 32,
                 temperature: float = 1.0, history: int = 1, prompt: Optional[str] = None,
                 dialect: str = "canonical", timeout_s: float = 60.0, retries: int = 4,
                 api_key: Optional[str] = None) -> None:
        super().__init__(seed=seed, history=history, prompt=prompt, dialect=dialect)
        if not target.startswith(("http://", "https://")):
            raise ValueError(f"openai agent target must be a base URL like http://127.0.0.1:8000/v1, got {target!r}")
        self.base_url = target.rstrip("/")
        self.api_key = api_key or os.environ.get("GUIGYM_API_KEY") or os.environ.get("OPENAI_API_KEY") or ""
        self.model = model or os.environ.get("GUIGYM_MODEL")
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.last_response: Optional[dict[str, Any]] = None

    # ---- HTTP ---------------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        data = json.dumps(body).encode("utf-8") if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        delay = 0.5
        last: Exception = APIError("no attempt made")
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(self.base_url + path, data=data, headers=headers, method=method)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    return json.loads(resp.read().decode("utf-8"))
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode("utf-8", "replace")[:500]
                last = APIError(f"{method} {path}: HTTP {exc.code}: {detail}")
                if exc.code != 429 and exc.code < 500:
                    raise last from None
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
                last = APIError(f"{method} {path}: {type(exc).__name__}: {exc}")
            if attempt < self.retries:
                time.sleep(delay)
                delay = min(delay * 2, 8.0)
        raise last

    def _model_name(self) -> str:
        if self.model is None:
            models = self._request("GET", "/models").get("data") or []
            if not models:
                raise APIError("the server lists no models; pass model= or set GUIGYM_MODEL")
            self.model = str(models[0]["id"])
        return self.model

    # ---- acting -------------------------------------------------------------------------------
    def act(self, obs: dict[str, Any]) -> str:
        saved = list(self.screens)
        try:
            return self._act(obs)
        except BaseException:
            # a failed call leaves the episode as it was, so a retry of the same step (the eval
            # runner's) does not see this screenshot twice in its history
            self.screens.clear()
            self.screens.extend(saved)
            raise

    def _act(self, obs: dict[str, Any]) -> str:
        messages = self._observe(obs)
        parts = []
        images = iter(self.screens)
        for part in messages[0]["content"]:
            if part["type"] == "image":
                parts.append({"type": "image_url", "image_url": {"url": png_data_uri(next(images))}})
            else:
                parts.append(part)
        body = {"model": self._model_name(), "messages": [{"role": "user", "content": parts}],
                "max_tokens": self.max_new_tokens, "temperature": self.temperature, "seed": self._step_seed(),
                "logprobs": True, "return_token_ids": True}
        reply = self._request("POST", "/chat/completions", body)
        self.last_response = reply
        choice = (reply.get("choices") or [{}])[0]
        text = (choice.get("message") or {}).get("content") or ""
        self.last_tokens = tokens_from_choice(choice, reply)
        return self._finish(text, obs)


def tokens_from_choice(choice: dict[str, Any], reply: dict[str, Any]) -> Optional[dict[str, list]]:
    """``last_tokens`` from a chat-completions choice, when the server returned ids and logprobs."""
    prompt_ids = choice.get("prompt_token_ids") or reply.get("prompt_token_ids")
    response_ids = choice.get("token_ids")
    content = (choice.get("logprobs") or {}).get("content") or []
    if prompt_ids is None or response_ids is None:
        return None
    logprobs = [float(c["logprob"]) for c in content] if len(content) == len(response_ids) else None
    return {"prompt_token_ids": list(prompt_ids), "response_token_ids": list(response_ids),
            "response_logprobs": logprobs}
