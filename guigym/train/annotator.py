"""Reasoning annotations for reasoning SFT: an instruction model explains each demonstrated action.

MobileRL (Xu et al. 2025, sec. 2.1, "Reasoning SFT") turns action-only expert demonstrations into
reasoning-augmented pairs (x, c, a*) by asking an off-the-shelf instruction model M for reasoning
c, then fine-tunes on "reasoning, then action". Their *bootstrap sampling* draws candidate pairs
(c_k, a_k) from M without showing it a* and keeps those with a_k = a*, followed by rounds of
iterative refinement. guigym implements the single-pass, rationalisation form of that first
step: M is shown the demonstrated action a* and asked for a short reasoning that leads to it, so
every demonstrated step gets one reasoning (no sample is rejected; no refinement rounds).

The annotator is any OpenAI-compatible ``POST <url>/chat/completions`` server (``vllm serve``,
``guigym serve``, a hosted API), called once per demonstration step with the instruction, the
observation text the policy's prompt shows (compact a11y) and the action (``sft.annotator``).

Caching (:class:`AnnotationCache`, ``<run.dir>/annotations.jsonl``): one JSON line per answered
request, appended atomically as each answer arrives, keyed by a hash of (model, system, user
message): a rerun or a resumed run sends only the requests whose answer is not in the file, and a
line torn by a crash is ignored (and cut before the next append).

Failures: a server that cannot be reached, answers an HTTP error, or returns no text is an
infrastructure error (:class:`AnnotatorError`, after ``retries`` for connection errors, 429 and
5xx). The stage stops with a message naming the URL and the step; a step never trains with an
empty reasoning.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any, Callable, Optional, Sequence

from guigym.core.errors import ConfigError, GuigymError

DEFAULT_SYSTEM = ("You explain the actions of a GUI agent. Given a task, the screen's elements and the action "
                  "the agent took, write the agent's reasoning before acting, in one to three short sentences, "
                  "first person, present tense. Do not restate the action call itself; reply with the reasoning only.")
DEFAULT_PROMPT = ("Task: $instruction\n"
                  "Step: $step\n"
                  "Elements on screen:\n$observation\n"
                  "Action taken: $action\n"
                  "Why is this the right action? Reasoning:")
#: observation text sent to the annotator is cut to this many characters
MAX_OBSERVATION_CHARS = 6000


class AnnotatorError(GuigymError, RuntimeError):
    """The reasoning annotator could not answer (unreachable, HTTP error, empty or malformed reply):
    an infrastructure failure, never an empty reasoning."""


@dataclass(frozen=True)
class AnnotationRequest:
    """One step to annotate: its place (for error messages) and the user message."""

    where: str  # "task/seed step k"
    user: str


def clean_reasoning(text: str, max_chars: int) -> str:
    """One line (whitespace runs -> one space; a leading "Thought:"/"Reasoning:" label removed),
    cut at the last word boundary before ``max_chars``. Empty stays empty (the caller refuses it)."""
    out = " ".join(str(text).split())
    for label in ("Thought:", "Reasoning:", "thought:", "reasoning:"):
        if out.startswith(label):
            out = out[len(label):].strip()
    if len(out) > max_chars:
        cut = out[:max_chars]
        out = (cut.rsplit(" ", 1)[0] if " " in cut else cut).rstrip() + " ..."
    return out


class AnnotationCache:
    """``annotations.jsonl``: append-only ``{"key", "reasoning", "where"}`` lines, one per answer."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def read(self) -> dict[str, str]:
        if not self.path.exists():
            return {}
        out: dict[str, str] = {}
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                d = json.loads(line)
                out[str(d["key"])] = str(d["reasoning"])
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # a line torn by a crash
        return out

    def append(self, key: str, reasoning: str, where: str) -> None:
        from guigym.core.files import append_jsonl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        append_jsonl(self.path, {"key": key, "reasoning": reasoning, "where": where})


class Annotator:
    """Client of one OpenAI-compatible chat-completions server (see the module docstring).

    Args mirror :class:`guigym.train.config.AnnotatorConfig`; ``token`` is the bearer token (read
    from ``token_env`` by :meth:`from_config`)."""

    def __init__(self, url: str, model: str, token: Optional[str] = None, prompt: Optional[str] = None,
                 system: Optional[str] = None, max_tokens: int = 128, temperature: float = 0.0,
                 max_chars: int = 400, timeout_s: float = 60.0, retries: int = 2, concurrency: int = 4) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"sft.annotator.url: expected a base URL like http://127.0.0.1:8000/v1, got {url!r}")
        self.url = url.rstrip("/")
        self.model, self.token = model, token
        self.prompt = Template(prompt or DEFAULT_PROMPT)
        self.system = system if system is not None else DEFAULT_SYSTEM
        self.max_tokens, self.temperature, self.max_chars = int(max_tokens), float(temperature), int(max_chars)
        self.timeout_s, self.retries, self.concurrency = float(timeout_s), int(retries), int(concurrency)
        self.calls = 0  # requests answered by the server (not the cache)

    @classmethod
    def from_config(cls, cfg: Any) -> "Annotator":
        token = None
        if cfg.token_env:
            token = os.environ.get(cfg.token_env)
            if not token:
                raise ConfigError(f"sft.annotator.token_env: environment variable {cfg.token_env} is not set (the "
                                  f"annotator's bearer token; set token_env: null for a server without one)")
        return cls(cfg.url, cfg.model, token=token, prompt=cfg.prompt, system=cfg.system, max_tokens=cfg.max_tokens,
                   temperature=cfg.temperature, max_chars=cfg.max_chars, timeout_s=cfg.timeout_s,
                   retries=cfg.retries, concurrency=cfg.concurrency)

    # ---- requests --------------------------------------------------------------------------------
    def user_message(self, instruction: str, observation: str, action: str, step: int) -> str:
        if len(observation) > MAX_OBSERVATION_CHARS:
            observation = observation[:MAX_OBSERVATION_CHARS] + " ...(cut)"
        return self.prompt.safe_substitute(instruction=instruction, observation=observation, action=action,
                                           step=str(step + 1))

    def key(self, user: str) -> str:
        """Cache key of a request: sha256 of (model, system, user message)."""
        return hashlib.sha256(json.dumps([self.model, self.system, user]).encode("utf-8")).hexdigest()

    def _post(self, body: dict[str, Any], where: str) -> dict[str, Any]:
        data = json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        endpoint = self.url + "/chat/completions"
        delay, last = 0.5, ""
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(endpoint, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    return json.loads(resp.read().decode("utf-8"))
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}: {exc.read().decode('utf-8', 'replace')[:300]}"
                if exc.code != 429 and exc.code < 500:
                    break  # 4xx (bad token, unknown model): retrying will not help
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
                last = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            except json.JSONDecodeError as exc:
                last = f"reply is not JSON ({exc})"
                break
            if attempt < self.retries:
                time.sleep(delay)
                delay = min(delay * 2, 8.0)
        raise AnnotatorError(f"sft.annotator: {endpoint} failed for {where}: {last} (after {attempt + 1} attempt(s)); "
                             f"reasoning SFT needs every demonstrated step annotated")

    def ask(self, req: AnnotationRequest) -> str:
        """The cleaned reasoning for one request (AnnotatorError when there is none)."""
        body = {"model": self.model, "max_tokens": self.max_tokens, "temperature": self.temperature,
                "messages": [{"role": "system", "content": self.system}, {"role": "user", "content": req.user}]}
        reply = self._post(body, req.where)
        try:
            text = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise AnnotatorError(f"sft.annotator: {self.url} gave no choices[0].message.content for {req.where}: "
                                 f"{json.dumps(reply)[:300]}") from None
        out = clean_reasoning(text or "", self.max_chars)
        if not out:
            raise AnnotatorError(f"sft.annotator: {self.url} returned an empty reasoning for {req.where}")
        self.calls += 1
        return out

    def annotate(self, requests: Sequence[AnnotationRequest], cache: AnnotationCache,
                 progress: Optional[Callable[[int, int], None]] = None) -> list[str]:
        """One reasoning per request, in order: cached ones from ``cache``, the others asked
        (``concurrency`` at a time) and appended to ``cache`` as each answer arrives."""
        from guigym.core.files import repair_jsonl

        repair_jsonl(cache.path)  # cut a torn last line so the next append starts a fresh one
        known = cache.read()
        keys = [self.key(r.user) for r in requests]
        todo: dict[str, AnnotationRequest] = {}
        for k, r in zip(keys, requests):
            if k not in known and k not in todo:
                todo[k] = r
        if todo:
            items = list(todo.items())
            with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items))) as ex:
                for n, ((k, r), text) in enumerate(zip(items, ex.map(lambda kv: self.ask(kv[1]), items)), 1):
                    cache.append(k, text, r.where)  # as it arrives: a crash keeps what was answered
                    known[k] = text
                    if progress is not None:
                        progress(n, len(items))
        return [known[k] for k in keys]
