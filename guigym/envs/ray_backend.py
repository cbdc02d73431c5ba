"""Ray backend for envs: each env is a Ray actor, placed on any node of a Ray cluster.

Needs the ``ray`` extra (``pip install 'guigym[ray]'``: Ray core, no dashboard). Two front ends:

* :class:`RayEnvPool`: the interface of :class:`~guigym.envs.pool.EnvPool` (``reset_async``,
  ``step_async``, ``wait``, ``call``, ``busy``, ``close``, :class:`PoolResult`), so the eval runner
  (``guigym eval --backend ray``) drives either::

      pool = RayEnvPool("MiniWoB-v0", num_envs=64, env_kwargs={"task": "click-test"},
                        num_cpus=1, resources={"desktop": 1}, address="auto")
      pool.reset_async(0, seed=1)
      for res in pool.wait():          # PoolResult(index, kind, value, lost, error)
          ...

* :class:`RayVectorEnv`: a Gymnasium ``VectorEnv`` over the same actors (see its docstring for
  the autoreset mode).

Resources: every actor asks Ray for ``num_cpus`` logical CPUs and the custom ``resources`` (e.g.
``{"desktop": 1}`` or ``{"android_device": 1}``, declared by ``ray start --resources``); Ray places
it on a node that has them. An already initialised Ray (``ray.init`` by the caller) is used as
is; otherwise the pool calls ``ray.init(address)`` itself and shuts Ray down on ``close()``.
Without an address that starts a local Ray with as many logical CPUs as the envs ask for (the
process backend likewise starts one process per env whatever the core count).

Failure handling, as in EnvPool: an :class:`EnvInfraError` inside the env, an actor that dies
(``ray.kill``, its node lost, segfault, OOM: :class:`ray.exceptions.RayActorError`) or a call that
exceeds ``call_timeout_s`` come back as ``PoolResult(lost=True, error=...)``. A dead or hung actor
is replaced by a fresh one with the same env id, kwargs and resources; the episode it was running
is lost, never scored (the eval runner runs it again).
"""
from __future__ import annotations

import functools
import logging
import math
import os
import time
from copy import deepcopy
from typing import Any, Callable, Optional, Sequence

import numpy as np
from gymnasium.vector import VectorEnv

from guigym.core.errors import ConfigError, EnvInfraError
from guigym.envs.pool import PoolResult, error_reply, result_from_reply, wait_for_replies

log = logging.getLogger(__name__)

__all__ = ["RayEnvActor", "RayEnvPool", "RayVectorEnv", "import_ray"]


def import_ray() -> Any:
    """The ``ray`` module, or a :class:`ConfigError` saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("backend: 'ray' needs the ray package: pip install 'guigym[ray]'") from exc
    return ray


# ---- the actor ----------------------------------------------------------------------------------
class RayEnvActor:
    """One env inside a Ray actor; start it with :meth:`launch`, which returns the actor handle.

    The env (``gym.make(env_id, **env_kwargs)``, ``.unwrapped`` unless ``unwrapped=False``) is
    built on the first command, like EnvPool's workers. Every method returns ``(status, value)``:
    ``("ok", value)``, ``("infra", message)`` for an :class:`EnvInfraError`, ``("config",
    message)`` for a ConfigError/TaskSpecError, ``("error", message_with_traceback)`` for any
    other exception (:func:`guigym.envs.pool.error_reply`); exceptions never cross the actor boundary,
    so a caller can tell an env's failure from the actor's death (a ``RayActorError``).
    """

    def __init__(self, env_id: str, env_kwargs: Optional[dict[str, Any]] = None, unwrapped: bool = True) -> None:
        import guigym  # noqa: F401 - registers the envs in this worker process

        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.unwrapped = unwrapped
        self.env: Any = None

    @classmethod
    def launch(cls, env_id: str, env_kwargs: Optional[dict[str, Any]] = None, *, num_cpus: float = 1.0,
               resources: Optional[dict[str, float]] = None, unwrapped: bool = True,
               actor_options: Optional[dict[str, Any]] = None) -> Any:
        """Start the actor on a node with ``num_cpus`` CPUs and ``resources`` free; return its handle.

        ``actor_options`` go to ``ActorClass.options`` as they are (e.g. ``scheduling_strategy``,
        ``runtime_env``). Ray never restarts the actor by itself: the pool does, so it knows the
        episode was lost.
        """
        opts = {"num_cpus": num_cpus, "resources": dict(resources or {}), "max_restarts": 0,
                **(actor_options or {})}
        return _actor_class().options(**opts).remote(env_id, env_kwargs or {}, unwrapped)

    def _env(self) -> Any:
        if self.env is None:
            import gymnasium as gym

            env = gym.make(self.env_id, **self.env_kwargs)
            self.env = env.unwrapped if self.unwrapped else env
        return self.env

    @staticmethod
    def _guard(fn: Callable[[], Any]) -> tuple[str, Any]:
        try:
            return "ok", fn()
        except Exception as exc:  # noqa: BLE001 - reported to the driver, the actor keeps serving
            return error_reply(exc)

    def ready(self) -> int:
        """The actor's process id (answers once the actor is placed and started)."""
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node (hex id) this actor runs on: which envs a lost node takes with it."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def reset(self, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None) -> tuple[str, Any]:
        """``("ok", (obs, info))``."""
        return self._guard(lambda: self._env().reset(seed=seed, options=options))

    def step(self, action: Any) -> tuple[str, Any]:
        """``("ok", (obs, reward, terminated, truncated, info))``."""
        return self._guard(lambda: self._env().step(action))

    def call(self, name: str, args: Sequence[Any] = (), kwargs: Optional[dict[str, Any]] = None) -> tuple[str, Any]:
        """Call the env's method ``name`` (or read the attribute when it is not callable)."""
        def run() -> Any:
            env = self._env()
            attr = env.get_wrapper_attr(name) if hasattr(env, "get_wrapper_attr") else getattr(env, name)
            return attr(*args, **(kwargs or {})) if callable(attr) else attr
        return self._guard(run)

    def set_attr(self, name: str, value: Any) -> tuple[str, Any]:
        def run() -> None:
            env = self._env()
            if hasattr(env, "set_wrapper_attr"):
                env.set_wrapper_attr(name, value)
            else:
                setattr(env, name, value)
        return self._guard(run)

    def spaces(self) -> tuple[str, Any]:
        """``("ok", (observation_space, action_space, metadata, render_mode))``."""
        def run() -> Any:
            env = self._env()
            return env.observation_space, env.action_space, dict(env.metadata), env.render_mode
        return self._guard(run)

    def close(self) -> None:
        if self.env is not None:
            try:
                self.env.close()
            finally:
                self.env = None


@functools.lru_cache(maxsize=None)
def _actor_class() -> Any:
    # one ActorClass per driver: ray.remote on every launch would export the class again
    return import_ray().remote(RayEnvActor)


# ---- the pool -----------------------------------------------------------------------------------
class RayEnvPool:
    """Runs ``num_envs`` copies of a registered env as Ray actors; same interface as EnvPool.

    Args:
        env_id: a Gymnasium id such as ``"MiniWoB-v0"``.
        env_kwargs: keyword arguments for ``gym.make`` in every actor, or a list with one dict
            per env.
        call_timeout_s: a reset/step that takes longer is treated as a hung actor (killed, restarted).
        num_cpus: logical CPUs each actor holds for its lifetime.
        resources: custom Ray resources each actor holds, e.g. ``{"desktop": 1}``.
        address: ``ray.init`` address when Ray is not initialised yet (``"auto"``,
            ``"ray://head:10001"``, ...); ``None`` starts a local Ray.
        unwrapped: actors hold ``gym.make(...).unwrapped`` like EnvPool (False: the wrapped env).
        actor_options: extra ``ActorClass.options`` (``scheduling_strategy="SPREAD"``, ``runtime_env``).
    """

    def __init__(self, env_id: str, num_envs: int, env_kwargs: dict[str, Any] | list[dict[str, Any]] | None = None,
                 call_timeout_s: float = 120.0, *, num_cpus: float = 1.0, resources: Optional[dict[str, float]] = None,
                 address: Optional[str] = None, unwrapped: bool = True,
                 actor_options: Optional[dict[str, Any]] = None) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        kwargs = env_kwargs if isinstance(env_kwargs, list) else [dict(env_kwargs or {}) for _ in range(num_envs)]
        if len(kwargs) != num_envs:
            raise ValueError(f"env_kwargs has {len(kwargs)} entries for {num_envs} envs")
        if num_cpus < 0:
            raise ConfigError(f"num_cpus must be >= 0, got {num_cpus}")
        self._ray = import_ray()
        self.env_id = env_id
        self.num_envs = num_envs
        self.env_kwargs = kwargs
        self.call_timeout_s = call_timeout_s
        self.num_cpus = float(num_cpus)
        self.resources = {k: float(v) for k, v in (resources or {}).items()}
        self.unwrapped = unwrapped
        self.actor_options = dict(actor_options or {})
        self.owns_ray = False
        self._local = False
        if not self._ray.is_initialized():
            self._init_ray(address)
        try:
            self._check_resources()
        except ConfigError:
            if self.owns_ray:
                self._ray.shutdown()
            raise
        self._actors: list[Any] = [None] * num_envs
        self._busy: dict[int, tuple[str, float, Any]] = {}  # index -> (kind, deadline, ObjectRef)
        self.restarts = 0
        for i in range(num_envs):
            self._start(i)

    # ---- Ray and actor management ---------------------------------------------------------------
    def _init_ray(self, address: Optional[str]) -> None:
        opts: dict[str, Any] = {"include_dashboard": False}
        if address is None:
            # local Ray: enough logical CPUs for every env (see the module docstring)
            opts["num_cpus"] = max(os.cpu_count() or 1, math.ceil(self.num_envs * self.num_cpus))
        self._ray.init(address=address, **opts)
        self.owns_ray = True
        # a local Ray started here can never gain a resource; a cluster may autoscale to one
        self._local = address is None and not os.environ.get("RAY_ADDRESS")

    def _check_resources(self) -> None:
        """Fail fast when no node could ever hold one env (an autoscaling cluster only gets a warning)."""
        have = self._ray.cluster_resources()
        want = {"CPU": self.num_cpus, **self.resources}
        short = {k: v for k, v in want.items() if v > 0 and have.get(k, 0.0) < v}
        if not short:
            return
        msg = (f"resources: each env asks for {want}, the Ray cluster has "
               f"{ {k: have.get(k, 0.0) for k in want} } in total")
        if self._local:
            raise ConfigError(msg + "; declare custom resources with `ray start --resources` and pass --ray-address")
        log.warning("%s; actors stay pending until nodes with them join", msg)

    def _start(self, i: int) -> None:
        self._actors[i] = RayEnvActor.launch(self.env_id, self.env_kwargs[i], num_cpus=self.num_cpus,
                                             resources=self.resources, unwrapped=self.unwrapped,
                                             actor_options=self.actor_options)

    def _restart(self, i: int) -> None:
        try:
            self._ray.kill(self._actors[i], no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        self.restarts += 1
        self._start(i)

    def actor(self, i: int) -> Any:
        """The Ray actor handle of env ``i`` (e.g. for ``ray.kill`` in tests)."""
        return self._actors[i]

    # ---- submitting work ------------------------------------------------------------------------
    def _submit(self, i: int, kind: str, ref: Any) -> None:
        self._busy[i] = (kind, time.monotonic() + self.call_timeout_s, ref)

    def _check_idle(self, i: int) -> None:
        if i in self._busy:
            raise RuntimeError(f"env {i} is still busy with a {self._busy[i][0]}")

    def reset_async(self, i: int, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None) -> None:
        self._check_idle(i)
        self._submit(i, "reset", self._actors[i].reset.remote(seed, options))

    def step_async(self, i: int, action: Any) -> None:
        self._check_idle(i)
        self._submit(i, "step", self._actors[i].step.remote(action))

    @property
    def busy(self) -> list[int]:
        return sorted(self._busy)

    def wait(self, timeout: Optional[float] = None) -> list[PoolResult]:
        """Results of every env that finished (at least one unless ``timeout`` passes first)."""
        ray = self._ray

        def ready(limit: float) -> list[int]:
            by_ref = {ref: i for i, (_, _, ref) in self._busy.items()}
            refs = list(by_ref)
            done, _ = ray.wait(refs, num_returns=1, timeout=limit)
            if done:  # collect every other env that is done too
                done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            return [by_ref[r] for r in done]

        return wait_for_replies(self._busy, timeout, ready, self._collect, self._restart, self.call_timeout_s,
                                "env actor")

    def _collect(self, i: int) -> PoolResult:
        from ray.exceptions import RayError, RayTaskError

        kind, _, ref = self._busy.pop(i)
        try:
            status, value = self._ray.get(ref)
        except RayTaskError as exc:  # the actor lives, only this call failed (e.g. unpicklable result)
            return PoolResult(i, kind, lost=False, error=f"{type(exc).__name__}: {exc}")
        except RayError as exc:  # RayActorError / ActorDiedError, node or object lost
            self._restart(i)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return PoolResult(i, kind, lost=True,
                              error=f"env actor {i} died ({type(exc).__name__}: {first}); restarted")
        return result_from_reply(i, kind, status, value)

    # ---- synchronous helpers --------------------------------------------------------------------
    def call(self, i: int, cmd: str, payload: Any = None) -> PoolResult:
        """Submit ``"reset"`` (payload: reset kwargs) or ``"step"`` (payload: the action) to env
        ``i`` and wait for its result; results of other envs finishing meanwhile are dropped."""
        if cmd == "reset":
            self.reset_async(i, **(payload or {}))
        else:
            self.step_async(i, payload)
        while True:
            for res in self.wait():
                if res.index == i:
                    return res

    def close(self, timeout_s: float = 30.0) -> None:
        """Close every env (its browser/VM), then end the actors; shut Ray down if this pool started it."""
        ray = self._ray
        refs = []
        for actor in self._actors:
            if actor is not None:
                try:
                    refs.append(actor.close.remote())
                except Exception:  # noqa: BLE001
                    pass
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        for i, actor in enumerate(self._actors):
            if actor is not None:
                try:
                    ray.kill(actor, no_restart=True)
                except Exception:  # noqa: BLE001
                    pass
                self._actors[i] = None
        self._busy.clear()
        if self.owns_ray and ray.is_initialized():
            ray.shutdown()
            self.owns_ray = False

    def __enter__(self) -> "RayEnvPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ---- Gymnasium vector env -----------------------------------------------------------------------
class RayVectorEnv(VectorEnv):
    """A Gymnasium ``VectorEnv`` whose sub-envs are Ray actors; all sub-envs step in parallel.

    Spaces are batched as ``SyncVectorEnv`` does (``batch_space`` of the first sub-env's spaces;
    every sub-env must have the same ones), observations concatenated with Gymnasium's
    ``concatenate`` and infos merged with ``VectorEnv._add_info``, so a batch equals
    SyncVectorEnv's for the same seeds.

    Autoreset: ``autoreset_mode`` as in Gymnasium >= 1.0 (``gymnasium.vector.AutoresetMode``),
    default ``NEXT_STEP``: the step that ends a sub-env's episode returns its last observation
    with ``terminated``/``truncated`` set; the *next* ``step`` ignores that sub-env's action and
    resets it (``reset()`` with no seed, so the env's own RNG continues), returning the first
    observation of the new episode with reward 0 and both flags False. ``SAME_STEP`` resets at
    once and puts the last observation/info in ``info["final_obs"]``/``info["final_info"]``;
    ``DISABLED`` leaves resets to the caller (``reset(options={"reset_mask": mask})``).

    Failures: when a sub-env's actor dies (or its env raises :class:`EnvInfraError`) the call
    raises :class:`EnvInfraError` naming the sub-env; its actor is already restarted, so call
    ``reset()`` and go on. ``gym.make_vec``-style use::

        envs = RayVectorEnv("MiniWoB-v0", num_envs=8, env_kwargs={"task": "click-test"},
                            num_cpus=1, address="auto")
        obs, info = envs.reset(seed=0)          # seeds 0..7
        obs, r, term, trunc, info = envs.step(["click(x=80, y=105)"] * 8)
    """

    def __init__(self, env_id: str, num_envs: int, env_kwargs: dict[str, Any] | list[dict[str, Any]] | None = None,
                 *, num_cpus: float = 1.0, resources: Optional[dict[str, float]] = None,
                 address: Optional[str] = None, copy: bool = True, autoreset_mode: Any = None,
                 call_timeout_s: float = 600.0, actor_options: Optional[dict[str, Any]] = None) -> None:
        from gymnasium.vector import AutoresetMode
        from gymnasium.vector.utils import batch_space, create_empty_array

        super().__init__()
        mode = AutoresetMode.NEXT_STEP if autoreset_mode is None else autoreset_mode
        self.autoreset_mode = mode if isinstance(mode, AutoresetMode) else AutoresetMode(mode)
        self.copy = copy
        self._pool = RayEnvPool(env_id, num_envs, env_kwargs, call_timeout_s, num_cpus=num_cpus,
                                resources=resources, address=address, unwrapped=False, actor_options=actor_options)
        self.num_envs = num_envs
        specs = self._gather_calls("spaces")
        obs_space, act_space, metadata, render_mode = specs[0]
        for i, (o, a, _, _) in enumerate(specs):
            if o != obs_space or a != act_space:
                self._pool.close()
                raise ConfigError(f"env_kwargs[{i}]: sub-env {i} has other spaces than sub-env 0 ({o}, {a})")
        self.metadata = {**metadata, "autoreset_mode": self.autoreset_mode}
        self.render_mode = render_mode
        self.single_observation_space, self.single_action_space = obs_space, act_space
        self.observation_space = batch_space(obs_space, num_envs)
        self.action_space = batch_space(act_space, num_envs)
        self._env_obs: list[Any] = [None] * num_envs
        self._observations = create_empty_array(obs_space, n=num_envs, fn=np.zeros)
        self._rewards = np.zeros((num_envs,), dtype=np.float64)
        self._terminations = np.zeros((num_envs,), dtype=np.bool_)
        self._truncations = np.zeros((num_envs,), dtype=np.bool_)
        self._autoreset_envs = np.zeros((num_envs,), dtype=np.bool_)

    # ---- helpers --------------------------------------------------------------------------------
    def _gather(self) -> dict[int, Any]:
        """Wait for every submitted reset/step; raise if any sub-env was lost or failed."""
        results: dict[int, PoolResult] = {}
        while self._pool.busy:
            for res in self._pool.wait():
                results[res.index] = res
        lost = {i: r.error for i, r in results.items() if r.lost}
        if lost:
            raise EnvInfraError(f"sub-env(s) {sorted(lost)} lost, their actors restarted; call reset(): {lost}")
        failed = {i: r.error for i, r in results.items() if r.error}
        if failed:
            raise RuntimeError(f"sub-env(s) {sorted(failed)} raised: {failed}")
        return {i: r.value for i, r in results.items()}

    def _gather_calls(self, method: str, *args: Any) -> list[Any]:
        ray = self._pool._ray
        refs = [getattr(self._pool.actor(i), method).remote(*args) for i in range(self.num_envs)]
        out = []
        for i, (status, value) in enumerate(ray.get(refs)):
            if status == "infra":
                raise EnvInfraError(f"sub-env {i}: {value}")
            if status != "ok":
                raise RuntimeError(f"sub-env {i}: {value}")
            out.append(value)
        return out

    def _batch(self) -> Any:
        from gymnasium.vector.utils import concatenate

        self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        return deepcopy(self._observations) if self.copy else self._observations

    # ---- VectorEnv API --------------------------------------------------------------------------
    def reset(self, *, seed: int | list[Optional[int]] | None = None,
              options: Optional[dict[str, Any]] = None) -> tuple[Any, dict[str, Any]]:
        """Reset all sub-envs (or those in ``options["reset_mask"]``); seeds as in SyncVectorEnv:
        ``None``, an int ``s`` (``s, s+1, ...``) or one per sub-env."""
        n = self.num_envs
        seeds = [None] * n if seed is None else [seed + i for i in range(n)] if isinstance(seed, int) else list(seed)
        if len(seeds) != n:
            raise ValueError(f"If seeds are passed as a list the length must match num_envs={n} but got length={len(seeds)}.")
        mask = np.ones((n,), dtype=np.bool_)
        if options is not None and "reset_mask" in options:
            options = dict(options)
            mask = options.pop("reset_mask")
            if not isinstance(mask, np.ndarray) or mask.shape != (n,) or mask.dtype != np.bool_ or not mask.any():
                raise ValueError(f"options['reset_mask'] must be a bool array of shape ({n},) with a True value")
        self._terminations[mask] = False
        self._truncations[mask] = False
        self._autoreset_envs[mask] = False
        for i in np.flatnonzero(mask):
            self._pool.reset_async(int(i), seed=seeds[i], options=options)
        values = self._gather()
        infos: dict[str, Any] = {}
        for i in sorted(values):
            self._env_obs[i], env_info = values[i]
            infos = self._add_info(infos, env_info, i)
        return self._batch(), infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        from gymnasium.vector import AutoresetMode
        from gymnasium.vector.utils import iterate

        mode = self.autoreset_mode
        acts = list(iterate(self.action_space, actions))
        if len(acts) != self.num_envs:
            raise ValueError(f"got {len(acts)} actions for {self.num_envs} envs")
        resetting = set()
        for i, action in enumerate(acts):
            if self._autoreset_envs[i]:
                if mode == AutoresetMode.DISABLED:
                    raise RuntimeError(f"sub-env {i} finished its episode; with autoreset_mode DISABLED reset it "
                                       "with reset(options={'reset_mask': mask})")
                if mode == AutoresetMode.NEXT_STEP:
                    resetting.add(i)
                    self._pool.reset_async(i)
                    continue
            self._pool.step_async(i, action)
        values = self._gather()
        infos: dict[str, Any] = {}
        finals: dict[int, tuple[Any, dict[str, Any]]] = {}
        step_infos: dict[int, dict[str, Any]] = {}
        for i in range(self.num_envs):
            if i in resetting:
                self._env_obs[i], step_infos[i] = values[i]
                self._rewards[i], self._terminations[i], self._truncations[i] = 0.0, False, False
            else:
                (self._env_obs[i], self._rewards[i], self._terminations[i], self._truncations[i],
                 step_infos[i]) = values[i]
                if mode == AutoresetMode.SAME_STEP and (self._terminations[i] or self._truncations[i]):
                    finals[i] = (self._env_obs[i], step_infos[i])
                    self._pool.reset_async(i)
        if finals:
            for i, (obs, info) in self._gather().items():
                self._env_obs[i], step_infos[i] = obs, info
        for i in range(self.num_envs):
            if i in finals:
                infos = self._add_info(infos, {"final_obs": finals[i][0], "final_info": finals[i][1]}, i)
            infos = self._add_info(infos, step_infos[i], i)
        self._autoreset_envs = np.logical_or(self._terminations, self._truncations)
        return (self._batch(), np.copy(self._rewards), np.copy(self._terminations), np.copy(self._truncations), infos)

    def render(self) -> tuple[Any, ...]:
        return self.call("render")

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` (or read attribute ``name``) of every sub-env."""
        return tuple(self._gather_calls("call", name, args, kwargs))

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"Values must be a list or tuple with length equal to the number of environments. "
                             f"Got `{len(values)}` values for {self.num_envs} environments.")
        ray = self._pool._ray
        refs = [self._pool.actor(i).set_attr.remote(name, v) for i, v in enumerate(values)]
        for i, (status, value) in enumerate(ray.get(refs)):
            if status != "ok":
                raise RuntimeError(f"sub-env {i}: {value}")

    def close_extras(self, **kwargs: Any) -> None:
        if hasattr(self, "_pool"):
            self._pool.close()

    def __repr__(self) -> str:
        return f"RayVectorEnv({self._pool.env_id}, num_envs={self.num_envs})"
