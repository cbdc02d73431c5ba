"""Env Cluster (DART sec. 3.2; rollout-wise sampling, sec. 3.4): envs that keep pulling tasks
and rolling them out.

One actor owns ``m`` envs (``env.num_envs`` split over ``decoupled.num_env_clusters`` actors; Ray
actors per env with ``run.backend: ray``, worker processes otherwise) and runs
:meth:`RolloutScheduler.stream <guigym.train.rollout.scheduler.RolloutScheduler.stream>` until
stopped::

    k envs free, nothing pending -> data_manager.next_jobs(k)      # k rollouts (slices of groups);
                                                                     #   none while the buffer is full
    each env asks for its next action as soon as its observation is ready
    a job's last rollout ends    -> data_manager.add_group(group_id, trajectories, members)

The trajectory is the scheduling unit (Figure 3 (c)): an env that finishes a rollout starts the
next pending one, or pulls the next rollout, while the other envs are mid-episode; there is no
barrier between jobs, and a cluster holds no more rollouts than it has envs to run them, so a
group's members spread over whichever clusters have free envs. Actions come from the rollout
service (whatever version each worker serves right now; each step records it in
``Step.policy_version``). The cluster never waits for the trainer;
it only stops taking jobs under the data manager's back-pressure. On stop it pulls nothing more
and finishes the jobs it holds.

Event rows: ``reset``/``step`` per env call (worker ``env<cluster>/<index>``), from the call to
the moment the scheduler saw its result.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any, Optional

from guigym.train.decoupled.events import EventLog


class _LoggedPool:
    """An env pool whose reset/step calls become event rows (everything else is delegated)."""

    def __init__(self, pool: Any, log: EventLog, prefix: str) -> None:
        self._pool = pool
        self._log = log
        self._prefix = prefix
        self._sent: dict[int, tuple[str, float]] = {}

    def reset_async(self, i: int, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None) -> None:
        self._sent[i] = ("reset", time.time())
        self._pool.reset_async(i, seed=seed, options=options)

    def step_async(self, i: int, action: Any) -> None:
        self._sent[i] = ("step", time.time())
        self._pool.step_async(i, action)

    def wait(self, timeout: Optional[float] = None) -> list[Any]:
        out = self._pool.wait(timeout=timeout)
        now = time.time()
        for res in out:
            kind, t0 = self._sent.pop(res.index, (res.kind, now))
            self._log.add(kind, f"{self._prefix}/{res.index}", t0, now, lost=bool(res.lost))
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


class PromptCodec:
    """What the PromptBuilder needs from a policy (``tokenizer``, ``encode``, ``encode_chat``)
    without its weights: an env node never holds the model. The encoding methods are
    :class:`~guigym.models.hf_policy.HFPolicy`'s own, so the ids are the same."""

    def __init__(self, path: str) -> None:
        from transformers import AutoConfig, AutoImageProcessor, AutoTokenizer

        from guigym.models.hf_policy import HFPolicy

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.image_processor = AutoImageProcessor.from_pretrained(path)
        self.image_token_id: int = AutoConfig.from_pretrained(path).image_token_id
        self.merge = int(getattr(self.image_processor, "merge_size", 2))
        for name in ("render", "encode", "encode_chat", "images_to_tensors"):
            setattr(self, name, getattr(HFPolicy, name).__get__(self))


class _ServiceClient:
    """The PolicyService face of the rollout-service actor for the RolloutScheduler."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.version = 0

    def submit(self, req: Any) -> "Future[Any]":
        return self.handle.generate.remote(req).future()

    def stats(self) -> dict[str, Any]:
        return {}  # utilisation comes from the event log


class EnvCluster:
    """Runs inside a Ray actor (:func:`guigym.train.decoupled.launch`)."""

    def __init__(self, index: int, cfg: dict[str, Any], model_dir: str, num_envs: int, data_manager: Any,
                 rollout_service: Any, run_id: str, db_url: str, blob_root: Optional[str]) -> None:
        from guigym.train.config import from_dict
        from guigym.train.data.store import DataStore
        from guigym.train.rollout.prompts import builder_from_config
        from guigym.train.rollout.scheduler import RolloutScheduler

        c = from_dict(cfg)
        if c.run.torch_threads:
            import torch

            torch.set_num_threads(c.run.torch_threads)
        self.index = index
        self.cfg = c
        self.dm = data_manager
        self.log = EventLog("env")
        from guigym.envs.pool import per_env_kwargs

        base = dict(c.env.kwargs)
        base.setdefault("tasks", list(c.env.tasks))
        n, k = c.env.num_envs, c.decoupled.num_env_clusters
        first = sum(n // k + (j < n % k) for j in range(index))  # cluster i holds envs [first, first + num_envs)
        kwargs = per_env_kwargs(base, num_envs, c.env.serials[first:first + num_envs], "env.serials")
        if c.run.backend == "ray":
            from guigym.envs.ray_backend import RayEnvPool

            pool = RayEnvPool(c.env.id, num_envs, env_kwargs=kwargs, call_timeout_s=c.env.call_timeout_s,
                              num_cpus=c.ray.num_cpus, resources=c.ray.resources)
        else:
            from guigym.envs.pool import EnvPool

            pool = EnvPool(c.env.id, num_envs, env_kwargs=kwargs, call_timeout_s=c.env.call_timeout_s)
        self.pool = _LoggedPool(pool, self.log, f"env{index}")
        self.store = DataStore(db_url, blob_root)
        r = c.rollout
        policy = PromptCodec(model_dir)
        builder = builder_from_config(policy, r, c.algorithm.sample_builder)
        seed = int.from_bytes(f"{c.run.seed}/decoupled/env{index}".encode(), "little") % (2**31 - 1)
        self.scheduler = RolloutScheduler(self.pool, _ServiceClient(rollout_service), builder, mode=r.mode,
                                          group_size=r.num_generations, max_steps=c.env.max_steps,
                                          max_new_tokens=r.max_new_tokens, temperature=r.temperature, seed=seed,
                                          max_lost_retries=r.max_lost_retries, run_id=run_id,
                                          put_image=self.store.put_image, policy_retries=r.policy_retries,
                                          policy_backoff_s=r.policy_backoff_s)
        self.run_id = run_id
        self._stop = threading.Event()
        self._closed = False
        self.totals = {"actions": 0, "trajectories": 0, "lost": 0, "unscorable": 0}

    def run(self) -> dict[str, Any]:
        """Roll out until :meth:`stop`; returns the totals. An error ends the loop and propagates
        (after the data manager is told to forget the jobs this cluster will not finish)."""
        import ray

        from guigym.train.rollout.scheduler import StreamJob

        undelivered: dict[tuple[str, tuple[int, ...]], None] = {}  # (group id, members) pulled, not yet reported

        def pull(k: int) -> list[StreamJob]:
            jobs = ray.get(self.dm.next_jobs.remote(k))  # k rollouts; none under back-pressure
            out = []
            for j in jobs:
                key = (j["group_id"], tuple(j["members"]))
                undelivered[key] = None
                out.append(StreamJob(key=key, task_id=j["task_id"], seed=j["seed"], n=j["n"], members=j["members"]))
            return out

        def deliver(key: tuple[str, tuple[int, ...]], group: Any) -> None:
            group_id, members = key
            for t in group.trajectories:
                t.group_id = group_id
                t.run_id = self.run_id
                t.info = {**t.info, "env_cluster": self.index}
                if "env_index" in t.info:  # the lane of its env's event rows (_LoggedPool's worker name)
                    t.info["env_lane"] = f"env{self.index}/{t.info['env_index']}"
            ray.get(self.dm.add_group.remote(group_id, group.trajectories, list(members)))
            undelivered.pop(key, None)

        try:
            self.scheduler.stream(pull, deliver, self._stop.is_set)
        except BaseException:
            for group_id, members in undelivered:
                ray.get(self.dm.abandon.remote(group_id, list(members)))
            raise
        finally:
            s = self.scheduler.last_stats
            for k in self.totals:
                self.totals[k] += int(getattr(s, k))
        return dict(self.totals)

    def stop(self) -> None:
        self._stop.set()

    def events(self) -> list[dict[str, Any]]:
        return self.log.rows()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for obj in (self.pool, self.store):
            try:
                obj.close()
            except Exception:  # noqa: BLE001 - best effort on shutdown
                pass
