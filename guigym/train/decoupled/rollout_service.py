"""Rollout Service (DART sec. 3.4 model service pool, sec. 3.5 per-worker synchronization): a
pool of policy workers behind one ``generate`` call.

* Workers: in-process :class:`~guigym.train.rollout.policy_service.HFEngine` s (CPU or one GPU
  each; ``decoupled.num_policy_workers``), or one
  :class:`~guigym.train.rollout.policy_service.HTTPEngine` per ``rollout.urls`` entry
  (``guigym serve`` / ``vllm serve`` on GPUs). Anything with ``submit(req) -> Future[GenResult]``
  and ``update_weights(version, path=..., [state_dict=...])`` fits.
* Routing: each request goes to the serving worker with the fewest requests in flight (ties:
  round robin).
* Staggered refresh: :meth:`WorkerPool.update_weights` only records the newest target version
  and returns. Each worker has a refresher thread that, when its version is behind, takes one of
  ``k = max_concurrent_weight_updates`` permits, stops receiving requests, waits for its
  in-flight ones, reloads, and serves again. So at most k workers reload at any instant and the
  others keep serving the previous version; a worker that was behind by several versions loads
  only the newest. Every reply carries the ``policy_version`` of the worker that sampled it.

Event rows: ``generate`` (per request: worker, version) and ``reload`` (per worker refresh). With
``rollout.engine: latency_model`` the engine logs each modelled batch as ``generate`` and the
per-request rows are ``request``.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from guigym.train.decoupled.events import EventLog


@dataclass
class _Worker:
    name: str
    engine: Any
    version: int
    inflight: int = 0
    reloading: bool = False


class WorkerPool:
    """Least-loaded routing over ``engines`` with at most ``max_concurrent_updates`` reloading."""

    def __init__(self, engines: Sequence[Any], max_concurrent_updates: int = 1, version: int = 0,
                 log: Optional[EventLog] = None) -> None:
        if not engines:
            raise ValueError("WorkerPool needs at least one engine")
        if max_concurrent_updates < 1:
            raise ValueError(f"max_concurrent_updates must be >= 1, got {max_concurrent_updates}")
        self.workers = [_Worker(f"w{i}", e, int(version)) for i, e in enumerate(engines)]
        self.log = log or EventLog("policy")
        self._cond = threading.Condition()
        self._permits = threading.BoundedSemaphore(max_concurrent_updates)
        self._target: tuple[int, Any, Optional[str]] = (int(version), None, None)
        self._rr = 0
        self._closed = False
        self._threads = [threading.Thread(target=self._refresher, args=(w,), daemon=True, name=f"refresh-{w.name}")
                         for w in self.workers]
        for t in self._threads:
            t.start()

    # ---- serving -------------------------------------------------------------------------------
    def _acquire(self) -> _Worker:
        with self._cond:
            while True:
                n = len(self.workers)
                open_ = [i for i in range(n) if not self.workers[i].reloading]
                if open_:
                    i = min(open_, key=lambda i: (self.workers[i].inflight, (i - self._rr) % n))
                    self._rr = (i + 1) % n
                    w = self.workers[i]
                    w.inflight += 1
                    return w
                self._cond.wait()

    def _release(self, w: _Worker) -> None:
        with self._cond:
            w.inflight -= 1
            self._cond.notify_all()

    def generate(self, req: Any) -> Any:
        """One :class:`GenResult` for a :class:`GenRequest` (blocks; call from many threads)."""
        w = self._acquire()
        t0 = time.time()
        version = None
        try:
            res = w.engine.submit(req).result()
            version = int(res.policy_version)
            return res
        finally:
            self._release(w)
            # an engine with its own log records whole batches as "generate"; per request is "request"
            kind = "request" if getattr(w.engine, "log", None) is self.log else "generate"
            self.log.add(kind, w.name, t0, time.time(), version=version)

    # ---- weights -------------------------------------------------------------------------------
    def update_weights(self, version: int, state_dict: Any = None, path: Optional[str] = None) -> None:
        """Make ``version`` the target (a state dict for in-process engines, or a checkpoint
        directory); workers pick it up in the background, k at a time. Returns at once."""
        with self._cond:
            if int(version) > self._target[0]:
                self._target = (int(version), state_dict, path)
                self._cond.notify_all()

    def versions(self) -> list[int]:
        with self._cond:
            return [w.version for w in self.workers]

    def wait_synced(self, version: int, timeout_s: float = 600.0) -> bool:
        """True once every worker serves ``version`` or newer."""
        end = time.monotonic() + timeout_s
        with self._cond:
            while min(w.version for w in self.workers) < version:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _refresher(self, w: _Worker) -> None:
        while True:
            with self._cond:
                while not self._closed and self._target[0] <= w.version:
                    self._cond.wait()
                if self._closed:
                    return
            with self._permits:  # at most k workers past this line
                with self._cond:
                    version, state, path = self._target  # the newest, read after the permit wait
                    w.reloading = True  # no new requests ...
                    while w.inflight > 0:  # ... and the running ones finish on the old weights
                        self._cond.wait()
                t0 = time.time()
                try:
                    if state is not None:
                        w.engine.update_weights(version, state_dict=state)
                    else:
                        w.engine.update_weights(version, path=path)
                    with self._cond:
                        w.version = version
                finally:
                    t1 = time.time()
                    with self._cond:
                        w.reloading = False
                        self._cond.notify_all()
                    self.log.add("reload", w.name, t0, t1, version=version)

    def stats(self) -> dict[str, Any]:
        with self._cond:
            return {"workers": [{"name": w.name, "version": w.version, "inflight": w.inflight,
                                 "reloading": w.reloading} for w in self.workers]}

    def events(self) -> list[dict[str, Any]]:
        return self.log.rows()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=30)
        for w in self.workers:
            try:
                w.engine.close()
            except Exception:  # noqa: BLE001 - best effort on shutdown
                pass


class RolloutService(WorkerPool):
    """The Ray-actor form: builds its workers from the recipe (``cfg`` as a dict)."""

    def __init__(self, cfg: dict[str, Any], model_dir: str, version: int = 0) -> None:
        from guigym.train.config import from_dict

        c = from_dict(cfg)
        if c.run.torch_threads:
            import torch

            torch.set_num_threads(c.run.torch_threads)
        r = c.rollout
        if r.engine == "hf":
            from guigym.models.hf_policy import HFPolicy
            from guigym.train.rollout.policy_service import HFEngine

            engines = [HFEngine(HFPolicy(model_dir, device=c.model.device, dtype=c.model.dtype), max_batch=r.max_batch,
                                max_wait_ms=r.max_wait_ms, version=version)
                       for _ in range(c.decoupled.num_policy_workers)]
        elif r.engine == "latency_model":
            from guigym.train.rollout.latency_engine import engine_from_config

            engines = [engine_from_config(c, model_dir, 1, version=version) for _ in range(c.decoupled.num_policy_workers)]
        else:
            import os

            from guigym.core.errors import ConfigError
            from guigym.train.rollout.policy_service import HTTPEngine

            token = os.environ.get(r.token_env)
            if not token:
                raise ConfigError(f"rollout.token_env: environment variable {r.token_env} is not set in the rollout "
                                  f"service's process")
            engines = [HTTPEngine([u], token=token, api=r.http_api, model=r.served_model, weight_sync=r.weight_sync,
                                  version=version) for u in r.urls]
        super().__init__(engines, c.decoupled.max_concurrent_weight_updates, version=version)
        for w in self.workers:  # a modelled engine logs its batches and reloads in the pool's lanes
            if hasattr(w.engine, "names"):
                w.engine.log, w.engine.names, w.engine.log_reloads = self.log, [w.name], False
