"""EnvPool: N envs in N worker processes, each stepped on its own schedule (no lockstep).

Gymnasium's vector envs step every sub-env together; GUI episodes have very uneven step times,
so the eval runner and the rollout scheduler instead submit work per env and collect whatever
finished first::

    pool = EnvPool("MiniWoB-v0", num_envs=4, env_kwargs={"task": "click-test"})
    pool.reset_async(0, seed=1)
    for res in pool.wait():          # PoolResult(index, kind, value, lost, error)
        ...
        pool.step_async(res.index, "click(x=10, y=20)")

Failure handling: an :class:`EnvInfraError` inside a worker, a worker that dies (segfault,
``kill -9``, OOM) or a call that exceeds ``call_timeout_s`` all come back as
``PoolResult(lost=True, error=...)``. A dead or hung worker is replaced by a fresh process; the
episode it was running is lost, never scored.
"""
from __future__ import annotations

import multiprocessing as mp
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait as mp_wait
from typing import Any, Callable, Optional, Sequence


@dataclass
class PoolResult:
    index: int
    kind: str  # "reset" | "step"
    value: Any = None  # (obs, info) for reset; (obs, reward, terminated, truncated, info) for step
    lost: bool = False
    error: Optional[str] = None
    #: the error is the caller's configuration (ConfigError/TaskSpecError from gym.make or reset,
    #: e.g. an unknown option or a task the env does not have): never lost, never retried
    config_error: bool = False


def result_from_reply(i: int, kind: str, status: str, value: Any) -> PoolResult:
    """A worker's ``(status, value)`` reply as a PoolResult: ``"ok"`` -> value, ``"infra"`` (an
    EnvInfraError inside the env) -> lost, ``"config"`` -> a config error, anything else -> an env
    error (not retried)."""
    if status == "ok":
        return PoolResult(i, kind, value=value)
    return PoolResult(i, kind, lost=status == "infra", error=value, config_error=status == "config")


def error_reply(exc: Exception) -> tuple[str, str]:
    """``(status, message)`` a worker sends for ``exc``: ``"infra"`` for an EnvInfraError,
    ``"config"`` for a ConfigError or TaskSpecError, else ``"error"`` with a short traceback."""
    from guigym.core.errors import ConfigError, EnvInfraError, TaskSpecError

    if isinstance(exc, EnvInfraError):
        return "infra", f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (ConfigError, TaskSpecError)):
        return "config", f"{type(exc).__name__}: {exc}"
    return "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"


def wait_for_replies(busy: dict[int, tuple[Any, ...]], timeout: Optional[float],
                     ready: Callable[[float], list[int]], collect: Callable[[int], PoolResult],
                     restart: Callable[[int], None], timeout_s: float, what: str) -> list[PoolResult]:
    """The wait loop of both pools (EnvPool over pipes, RayEnvPool over object refs).

    ``busy``: index -> (kind, deadline, ...) of the envs with a call in flight; ``ready(limit)``
    blocks at most ``limit`` seconds and returns the indices whose reply has arrived;
    ``collect(i)`` turns env i's reply into a result (and removes it from ``busy``). Returns the
    results of every env that finished, at least one unless ``timeout`` passes first; an env past
    its deadline comes back lost and is restarted (:func:`expire_overdue`)."""
    if not busy:
        return []
    end = None if timeout is None else time.monotonic() + timeout
    while True:
        now = time.monotonic()
        limit = min(entry[1] for entry in busy.values()) - now
        if end is not None:
            limit = min(limit, end - now)
        results = [collect(i) for i in ready(max(0.0, limit))]
        now = time.monotonic()
        results += expire_overdue(busy, now, restart, timeout_s, what)
        if results or (end is not None and now >= end):
            return results


def expire_overdue(busy: dict[int, tuple[Any, ...]], now: float, restart: Callable[[int], None],
                   timeout_s: float, what: str) -> list[PoolResult]:
    """Lost results for the envs in ``busy`` (index -> (kind, deadline, ...)) whose deadline has
    passed; each is removed from ``busy`` and restarted (``what``: "env worker", "env actor")."""
    out = []
    for i, entry in list(busy.items()):
        kind, deadline = entry[0], entry[1]
        if deadline <= now:
            del busy[i]
            restart(i)
            out.append(PoolResult(i, kind, lost=True,
                                  error=f"{what} {i} did not answer a {kind} within {timeout_s:.0f} s; restarted"))
    return out


def _worker(env_id: str, env_kwargs: dict[str, Any], conn: Connection) -> None:
    """Worker loop: build the env lazily, answer one command at a time."""
    import os
    import signal

    # Ctrl-C goes to the terminal's foreground process group: the parent alone decides (it closes
    # the pool). A worker and what it starts (Playwright's driver, Chromium, which reset SIGINT
    # themselves) get a group of their own, so none dies mid-step printing its own traceback; a
    # worker whose parent died still ends, on EOF of its pipe
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(os, "setpgrp"):
        os.setpgrp()
    import gymnasium as gym

    import guigym  # noqa: F401 - registers the envs in this process

    env = None
    while True:
        try:
            cmd, payload = conn.recv()
        except (EOFError, KeyboardInterrupt):
            break
        if cmd == "close":
            break
        try:
            if env is None:
                env = gym.make(env_id, **env_kwargs).unwrapped
            if cmd == "reset":
                out = env.reset(seed=payload.get("seed"), options=payload.get("options"))
            elif cmd == "step":
                out = env.step(payload)
            else:
                raise ValueError(f"unknown command {cmd!r}")
            conn.send(("ok", out))
        except Exception as exc:  # noqa: BLE001 - report, keep serving
            conn.send(error_reply(exc))
    if env is not None:
        try:
            env.close()
        except Exception:  # noqa: BLE001
            pass
    conn.close()


def per_env_kwargs(env_kwargs: Optional[dict[str, Any]], num_envs: int, serials: Optional[Sequence[str]] = None,
                   field: str = "serials") -> dict[str, Any] | list[dict[str, Any]]:
    """``env_kwargs`` for a pool of ``num_envs``: as they are without ``serials``, else one dict per
    env with its own device (``serial=serials[i]``, the Android envs' adb provider), so env ``i`` and
    every restart of it drive ``serials[i]``.

    ``serials`` must have at least ``num_envs`` distinct entries (the first ``num_envs`` are used:
    an eval with fewer episodes than devices starts fewer envs) and cannot be combined with a
    ``serial`` in ``env_kwargs``; ConfigError naming ``field`` otherwise.
    """
    from guigym.core.errors import ConfigError

    base = dict(env_kwargs or {})
    if not serials:
        return base
    serials = [str(s).strip() for s in serials]
    if any(not s for s in serials):
        raise ConfigError(f"{field}: an empty serial in {serials!r}")
    if len(set(serials)) != len(serials):
        raise ConfigError(f"{field}: each env needs its own device, got duplicates in {serials!r}")
    if len(serials) < num_envs:
        raise ConfigError(f"{field}: {len(serials)} serial(s) for {num_envs} envs; give one device per env")
    if "serial" in base:
        raise ConfigError(f"{field}: cannot be combined with a single serial ({base['serial']!r}) in the env options")
    return [{**base, "serial": s} for s in serials[:num_envs]]


class EnvPool:
    """Runs ``num_envs`` copies of a registered env in separate processes.

    Args:
        env_id: a Gymnasium id such as ``"MiniWoB-v0"``.
        env_kwargs: keyword arguments for ``gym.make`` in every worker, or a list with one dict
            per env (different tasks per env).
        call_timeout_s: a reset/step that takes longer is treated as a hung worker.
    """

    def __init__(self, env_id: str, num_envs: int, env_kwargs: dict[str, Any] | list[dict[str, Any]] | None = None,
                 call_timeout_s: float = 120.0, start_method: str = "spawn") -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        kwargs = env_kwargs if isinstance(env_kwargs, list) else [dict(env_kwargs or {}) for _ in range(num_envs)]
        if len(kwargs) != num_envs:
            raise ValueError(f"env_kwargs has {len(kwargs)} entries for {num_envs} envs")
        self.env_id = env_id
        self.num_envs = num_envs
        self.env_kwargs = kwargs
        self.call_timeout_s = call_timeout_s
        self._ctx = mp.get_context(start_method)
        self._procs: list[Any] = [None] * num_envs
        self._conns: list[Optional[Connection]] = [None] * num_envs
        self._busy: dict[int, tuple[str, float]] = {}  # index -> (kind, deadline)
        self.restarts = 0
        for i in range(num_envs):
            self._start(i)

    # ---- process management ---------------------------------------------------------------------
    def _start(self, i: int) -> None:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_worker, args=(self.env_id, self.env_kwargs[i], child), daemon=True,
                                 name=f"guigym-env-{i}")
        proc.start()
        child.close()
        self._procs[i], self._conns[i] = proc, parent

    def _restart(self, i: int) -> None:
        proc, conn = self._procs[i], self._conns[i]
        if conn is not None:
            conn.close()
        if proc is not None and proc.is_alive():
            proc.kill()
        if proc is not None:
            proc.join(timeout=10)
        self.restarts += 1
        self._start(i)

    def pid(self, i: int) -> int:
        return self._procs[i].pid

    # ---- submitting work ------------------------------------------------------------------------
    def _send(self, i: int, cmd: str, payload: Any) -> None:
        if i in self._busy:
            raise RuntimeError(f"env {i} is still busy with a {self._busy[i][0]}")
        conn = self._conns[i]
        assert conn is not None
        try:
            conn.send((cmd, payload))
        except (BrokenPipeError, OSError):
            # the worker is already dead: report it as lost from wait()
            pass
        self._busy[i] = (cmd, time.monotonic() + self.call_timeout_s)

    def reset_async(self, i: int, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None) -> None:
        self._send(i, "reset", {"seed": seed, "options": options})

    def step_async(self, i: int, action: Any) -> None:
        self._send(i, "step", action)

    @property
    def busy(self) -> list[int]:
        return sorted(self._busy)

    def wait(self, timeout: Optional[float] = None) -> list[PoolResult]:
        """Results of every env that finished (at least one unless ``timeout`` passes first)."""
        def ready(limit: float) -> list[int]:
            by_conn = {self._conns[i]: i for i in self._busy}
            return [by_conn[c] for c in mp_wait(list(by_conn), timeout=limit)]  # type: ignore[index]

        return wait_for_replies(self._busy, timeout, ready, self._collect, self._restart, self.call_timeout_s,
                                "env worker")

    def _collect(self, i: int) -> PoolResult:
        kind, _ = self._busy.pop(i)
        conn = self._conns[i]
        assert conn is not None
        try:
            status, value = conn.recv()
        except (EOFError, OSError, ConnectionResetError):
            proc = self._procs[i]
            proc.join(timeout=5)
            code = proc.exitcode
            self._restart(i)
            return PoolResult(i, kind, lost=True, error=f"env worker {i} died (exit code {code}); restarted")
        return result_from_reply(i, kind, status, value)

    # ---- synchronous helpers --------------------------------------------------------------------
    def call(self, i: int, cmd: str, payload: Any = None) -> PoolResult:
        """Submit one command to env ``i`` and wait for its result.

        For sequential use (tests, scripts) while no other env is busy: results of other envs that
        finish meanwhile are dropped.
        """
        if cmd == "reset":
            self.reset_async(i, **(payload or {}))
        else:
            self.step_async(i, payload)
        while True:
            for res in self.wait():
                if res.index == i:
                    return res

    def close(self) -> None:
        for i, conn in enumerate(self._conns):
            if conn is None:
                continue
            try:
                conn.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
        for i, proc in enumerate(self._procs):
            if proc is None:
                continue
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
            conn = self._conns[i]
            if conn is not None:
                conn.close()
        self._busy.clear()

    def __enter__(self) -> "EnvPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
