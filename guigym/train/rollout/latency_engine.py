"""A named stand-in policy engine (``rollout.engine: latency_model``) for scale-out benchmarks.

No model runs. Each worker takes the requests waiting for it as one batch of b and sleeps the
stated latency model of a 7B VLM served by vLLM on one GPU (:class:`PolicyLatencyModel`)::

    T(b) = time_scale * max(floor_s, b / rate_rps)

then answers every request with one of its candidates, encoded with the policy's tokenizer
exactly as the learner's candidate trie encodes it, so the real trainer (a tiny model) can
recompute log-probs and train on the replies. A weight refresh (:meth:`update_weights`) pauses
every worker of the engine for ``time_scale * sync_s`` (one engine = one global sync group).

The trainer's side has its own stated model: with ``update_gpus`` set, the learner's update
lasts :class:`UpdateLatencyModel`'s time for a 7B VLM on that many GPUs (:func:`modelled_update`,
applied by ``Trainer.build`` in both topologies), so a bench sees the update a real run waits for.

Actions (for ``LatencyModel-v0``, guigym/envs/latency_model.py): the prompt is decoded to text;
the instruction ``Click A, then B.``, the ``[id] button "Name"`` lines and the previous
``click(element="id")`` actions give the next target. With probability ``p_correct`` the reply
is the click on that target, otherwise a uniformly random candidate (which may also be it); the
draw is seeded by the request's seed, so a run replays. Prompts it cannot parse get a uniformly
random candidate; requests without candidates get ``wait()``.

Log-probs: each reply's ``logprobs`` are ``log P(choice)`` under that mixture, spread evenly
over its tokens (the end token gets 0). The learner's importance ratio against them is not
meaningful -- this engine exists for throughput, where the trainer's cost matters, not learning.

Events: with ``log`` (an :class:`~guigym.train.decoupled.events.EventLog` of service ``policy``)
each batch is a ``generate`` row ``{worker, start, end, batch, version, modelled_s}`` and each
refresh a ``reload`` row ``{worker, start, end, version, modelled_s}`` (unless ``log_reloads``
is False: the decoupled WorkerPool logs its own reload rows).
"""
from __future__ import annotations

import math
import queue
import re
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from guigym.train.rollout.policy_service import GenRequest, GenResult


@dataclass
class PolicyLatencyModel:
    """Generation time of one batch on one GPU worker: ``T(b) = max(floor_s, b / rate_rps)``;
    a weight refresh takes ``sync_s``."""

    rate_rps: float = 2.55
    floor_s: float = 1.28
    sync_s: float = 1.12
    source: str = ("rate: vLLM benchmarks/README.md VisionArena example, Qwen2-VL-7B-Instruct, 'Throughput: 2.55 "
                   "requests/s, 4036.92 total tokens/s, 326.90 output tokens/s'; floor: 128 output tokens x 10 "
                   "ms/token, derived from 15 GB bf16 weights read per decode step at ~1.5 TB/s (A100-80GB), "
                   "not published; sync: 2 bytes x 7e9 params over a 12.5 GB/s (100 Gb/s) link, assumed")

    def batch_s(self, b: int) -> float:
        return max(self.floor_s, b / self.rate_rps) if b > 0 else 0.0


@dataclass
class UpdateLatencyModel:
    """Time of one trainer update of a 7B VLM on the trainer's GPUs (a named stand-in: this
    machine has no GPU). For ``n`` step samples of ``tokens_per_sample`` tokens::

        T_update(n) = n * tokens_per_sample * (1 + forward_passes / 3) / (tokens_per_s_per_gpu * gpus)

    ``tokens_per_s_per_gpu`` is a published forward+backward training throughput; each extra
    forward pass (old-policy and reference log-probs of GRPO with a KL term) costs a third of it
    (forward = 2PN of the 6PN FLOPs). ``gpus`` = 0 turns the model off (the real update only)."""

    tokens_per_sample: float = 3100.0
    tokens_per_s_per_gpu: float = 7500.0
    gpus: int = 0
    forward_passes: float = 2.0
    source: str = ("throughput: foundation-model-stack/fms-fsdp README, 7B (Llama2) HSDP on H100, 7500 training "
                   "tokens/s/GPU; gpus: DART's trainer, 8 H100 under FSDP (DART appendix, 'Trainer'); "
                   "tokens/sample: one 1920x1080 screenshot (OSWorld's screen, the one the env latencies come "
                   "from) at Qwen2.5-VL's 28x28 pixels per token (39 x 69 = 2691) plus ~409 text tokens, assumed; "
                   "no history screenshots; forward passes: old-policy and reference log-probs (DART: KL beta 0.1)")

    def update_s(self, n_samples: int) -> float:
        if self.gpus <= 0 or n_samples <= 0:
            return 0.0
        tokens = n_samples * self.tokens_per_sample * (1.0 + self.forward_passes / 3.0)
        return tokens / (self.tokens_per_s_per_gpu * self.gpus)


def modelled_update(update: Callable[[Sequence[Any]], dict[str, float]], model: UpdateLatencyModel,
                    time_scale: float = 1.0, sleep: Callable[[float], None] = time.sleep,
                    clock: Callable[[], float] = time.monotonic) -> Callable[[Sequence[Any]], dict[str, float]]:
    """``update`` (a learner's) that lasts ``time_scale * model.update_s(len(samples))``: the real
    update runs, then the rest of the modelled time is slept (a real update longer than the model
    is not shortened). The metrics gain ``time/modelled_update_s``."""

    def timed(samples: Sequence[Any]) -> dict[str, float]:
        t0 = clock()
        metrics = update(samples)
        want = time_scale * model.update_s(len(samples))
        rest = want - (clock() - t0)
        if rest > 0:
            sleep(rest)
        return {**metrics, "time/modelled_update_s": want}

    return timed


def update_model_from_config(cfg: Any) -> Optional[UpdateLatencyModel]:
    """The :class:`UpdateLatencyModel` of ``rollout.latency_model`` (keys ``update_gpus``,
    ``update_tokens_per_sample``, ``update_tokens_per_s_per_gpu``, ``update_forward_passes``), or
    None when the engine is not ``latency_model`` or ``update_gpus`` is absent/0."""
    if getattr(cfg.rollout, "engine", None) != "latency_model":
        return None
    lm = dict(cfg.rollout.latency_model)
    if not lm.get("update_gpus"):
        return None
    keys = {"update_tokens_per_sample": "tokens_per_sample", "update_tokens_per_s_per_gpu": "tokens_per_s_per_gpu",
            "update_forward_passes": "forward_passes"}
    model = UpdateLatencyModel(gpus=int(lm["update_gpus"]), **{v: float(lm[k]) for k, v in keys.items() if k in lm})
    if model.tokens_per_sample <= 0 or model.tokens_per_s_per_gpu <= 0 or model.forward_passes < 0:
        from guigym.core.errors import ConfigError

        raise ConfigError("rollout.latency_model: update_tokens_per_sample and update_tokens_per_s_per_gpu must be "
                          "> 0 and update_forward_passes >= 0")
    return model


_TARGETS = re.compile(r"Task: Click (.+?)\.\s*\n")
_ELEMENT = re.compile(r'\[(\w+)\] button "([^"]*)"')
_CLICK = re.compile(r'click\(element="([^"]*)"\)')


def correct_action(prompt_text: str, candidates: Sequence[str]) -> Optional[str]:
    """The candidate that clicks the next target of a LatencyModel-v0 prompt, or None."""
    m = _TARGETS.search(prompt_text)
    if m is None:
        return None
    targets = [t.strip() for t in m.group(1).split(", then ")]
    names = dict(_ELEMENT.findall(prompt_text))  # id -> name
    ids = {name.lower(): i for i, name in names.items()}
    prev = prompt_text.split("Previous actions:", 1)[1] if "Previous actions:" in prompt_text else ""
    progress = 0
    for ref in _CLICK.findall(prev):  # the env advances on a click on the next target only
        if progress < len(targets) and names.get(ref, ref).lower() == targets[progress].lower():
            progress += 1
    if progress >= len(targets):
        return None
    want = f'click(element="{ids.get(targets[progress].lower(), "")}")'
    return want if want in candidates else None


class LatencyModelEngine:
    """``workers`` modelled GPU workers behind ``submit`` (the PolicyService protocol).

    Args:
        tokenizer: the policy's tokenizer (replies are its ids; prompts are decoded with it).
        end_ids: token(s) closing a reply (the policy's ``eos_ids[:1]``, as the candidate trie).
        model: the latency model; time_scale: multiplies every modelled time.
        p_correct: share of replies forced to the correct click (the rest uniform).
        max_batch: most requests one worker takes into a batch.
        log: event log for ``generate``/``reload`` rows; names: the workers' lane names.
    """

    def __init__(self, tokenizer: Any, end_ids: Sequence[int], model: Optional[PolicyLatencyModel] = None,
                 time_scale: float = 1.0, p_correct: float = 0.3, workers: int = 1, max_batch: int = 256,
                 version: int = 0, log: Any = None, names: Optional[Sequence[str]] = None) -> None:
        if workers < 1 or max_batch < 1:
            raise ValueError(f"workers and max_batch must be >= 1, got {workers}, {max_batch}")
        if not 0.0 <= p_correct <= 1.0:
            raise ValueError(f"p_correct must be in [0, 1], got {p_correct}")
        self.tokenizer, self.end_ids = tokenizer, [int(i) for i in end_ids]
        self.model = model or PolicyLatencyModel()
        self.scale, self.p_correct, self.max_batch = float(time_scale), float(p_correct), int(max_batch)
        self.version = int(version)
        self.log = log
        self.names = list(names) if names is not None else [f"w{i}" for i in range(workers)]
        self._q: "queue.Queue[Any]" = queue.Queue()
        self._gate = threading.Event()  # cleared while weights sync: no worker starts a batch
        self._gate.set()
        self._sync = threading.Lock()
        self._busy = threading.Condition()
        self._running = 0
        self._stats = {"busy_s": 0.0, "requests": 0, "batches": 0}
        self._closed = False
        #: False when the owner logs reloads itself (the decoupled WorkerPool)
        self.log_reloads = True
        self._threads = [threading.Thread(target=self._loop, args=(i,), daemon=True, name=f"latency-{n}")
                         for i, n in enumerate(self.names)]
        for t in self._threads:
            t.start()

    # ---- PolicyService API ------------------------------------------------------------------
    def submit(self, req: GenRequest) -> "Future[GenResult]":
        fut: Future = Future()
        self._q.put([(req, fut)])
        return fut

    def submit_many(self, reqs: Sequence[GenRequest]) -> "list[Future[GenResult]]":
        """A closed batch (a lockstep caller's): split evenly over the workers, run at once."""
        futs: list[Future] = [Future() for _ in reqs]
        pairs = list(zip(reqs, futs))
        n = len(self.names)
        for w in range(n):
            chunk = pairs[w::n]
            for k in range(0, len(chunk), self.max_batch):
                self._q.put(("closed", chunk[k: k + self.max_batch]))
        return futs

    def update_weights(self, version: int, path: Any = None, state_dict: Any = None) -> None:
        """Every worker of this engine pauses (after its running batch) for the modelled sync."""
        with self._sync:
            self._gate.clear()
            with self._busy:
                while self._running:
                    self._busy.wait()
            t0 = time.time()
            time.sleep(self.model.sync_s * self.scale)
            self.version = int(version)
            t1 = time.time()
            if self.log is not None and self.log_reloads:
                for n in self.names:
                    self.log.add("reload", n, t0, t1, version=self.version, modelled_s=self.model.sync_s * self.scale)
            self._gate.set()

    def stats(self) -> dict[str, Any]:
        with self._busy:
            return dict(self._stats, version=self.version)

    def reset_stats(self) -> None:
        with self._busy:
            self._stats = {"busy_s": 0.0, "requests": 0, "batches": 0}

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            for _ in self._threads:
                self._q.put(None)

    # ---- workers ----------------------------------------------------------------------------
    def _loop(self, index: int) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            if isinstance(item, tuple):
                batch = list(item[1])
            else:  # open batch: whatever else is waiting now
                batch = list(item)
                while len(batch) < self.max_batch:
                    try:
                        nxt = self._q.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None or isinstance(nxt, tuple):
                        self._q.put(nxt)
                        break
                    batch += nxt
            while True:  # a sync may start between the wait and the claim: re-check under the lock
                self._gate.wait()
                with self._busy:
                    if self._gate.is_set():
                        self._running += 1
                        break
            try:
                modelled = self.model.batch_s(len(batch)) * self.scale
                t0 = time.time()
                time.sleep(modelled)
                t1 = time.time()
                version = self.version
                with self._busy:
                    self._stats["busy_s"] += t1 - t0
                    self._stats["requests"] += len(batch)
                    self._stats["batches"] += 1
                if self.log is not None:
                    self.log.add("generate", self.names[index], t0, t1, batch=len(batch), version=version, modelled_s=modelled)
            finally:
                with self._busy:
                    self._running -= 1
                    self._busy.notify_all()
            for req, fut in batch:
                try:
                    fut.set_result(self.reply(req, version))
                except Exception as exc:  # noqa: BLE001 - a bad request fails alone
                    fut.set_exception(exc)

    def reply(self, req: GenRequest, version: int) -> GenResult:
        """The seeded mixture's choice among ``req.candidates`` (module docstring)."""
        cands = list(dict.fromkeys(req.candidates or []))
        if not cands:
            ids = [int(i) for i in self.tokenizer("wait()", add_special_tokens=False)["input_ids"]] + self.end_ids[:1]
            return GenResult(ids, [0.0] * len(ids), "wait()", None, version, endpoint="latency_model")
        rng = np.random.default_rng([int(req.seed) % (2**63), 7])
        good = correct_action(self.tokenizer.decode(req.prompt_ids), cands)
        k = cands.index(good) if good is not None and rng.random() < self.p_correct else int(rng.integers(len(cands)))
        text = cands[k]
        p = (1 - self.p_correct) / len(cands) + (self.p_correct if good is not None and text == good else 0.0)
        if good is None:
            p = 1.0 / len(cands)
        body = [int(i) for i in self.tokenizer(text, add_special_tokens=False)["input_ids"]]
        lps = [math.log(p) / len(body)] * len(body) + [0.0]
        return GenResult(response_ids=body + self.end_ids[:1], logprobs=lps, text=text, entropy=None,
                         policy_version=version, endpoint="latency_model")


def engine_from_config(cfg: Any, model_dir: str, workers: int, version: int = 0, log: Any = None,
                       names: Optional[Sequence[str]] = None) -> LatencyModelEngine:
    """A :class:`LatencyModelEngine` from ``rollout.latency_model`` (keys rate_rps, floor_s,
    sync_s, time_scale, p_correct; defaults :class:`PolicyLatencyModel`'s, 1.0, 0.3; its
    ``workers`` key is read by the caller), with the tokenizer and end token of ``model_dir``."""
    from transformers import AutoTokenizer, GenerationConfig

    from guigym.core.errors import ConfigError

    lm = dict(cfg.rollout.latency_model)
    unknown = set(lm) - {"rate_rps", "floor_s", "sync_s", "time_scale", "p_correct", "workers", "update_gpus",
                         "update_tokens_per_sample", "update_tokens_per_s_per_gpu", "update_forward_passes"}
    if unknown:
        raise ConfigError(f"rollout.latency_model: unknown key(s) {sorted(unknown)}")
    tok = AutoTokenizer.from_pretrained(model_dir)
    try:
        eos = GenerationConfig.from_pretrained(model_dir).eos_token_id
    except OSError:
        eos = None
    eos = eos if eos is not None else tok.eos_token_id
    end_ids = list(eos) if isinstance(eos, (list, tuple)) else [int(eos)]
    model = PolicyLatencyModel(**{k: float(lm[k]) for k in ("rate_rps", "floor_s", "sync_s") if k in lm})
    return LatencyModelEngine(tok, end_ids, model, time_scale=float(lm.get("time_scale", 1.0)),
                              p_correct=float(lm.get("p_correct", 0.3)), workers=workers,
                              max_batch=cfg.rollout.max_batch, version=version, log=log, names=names)
