"""Checks of env constructor options, before anything is built.

``gym.make("MiniWoB-v0", max_step=3)`` would otherwise fail with Python's bare ``TypeError``
inside Gymnasium, and an eval or training run would only find out in its env workers, after it
had started. :func:`check_kwargs` names the unknown option and the closest known one;
:func:`check_dialect` does the same for action dialects; :func:`check_env_options` is the
whole check for a registered env id, used by ``guigym eval``, ``guigym train`` (also ``--check``)
and :class:`~guigym.envs.base.GUIEnv` itself.
"""
from __future__ import annotations

import difflib
import importlib
import inspect
from pathlib import Path
from typing import Any, Iterable, Mapping

from guigym.core.errors import ConfigError


class UnknownOptionError(ConfigError):
    """An option no constructor takes. Deliberately not a TypeError: Gymnasium's ``make`` rewraps
    TypeErrors with its own long suffix, and this message already names the env and the option."""


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``known`` (difflib ratio >= 0.6), else ``""``."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def accepted_kwargs(cls: type) -> set[str] | None:
    """Keyword names ``cls(...)`` accepts: its ``__init__`` parameters, plus those of the next
    ``__init__`` up the MRO while a class forwards ``**kwargs`` to it. None when the chain ends
    in a ``**kwargs`` that reaches no guigym class (anything goes)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        if klass is object or not klass.__module__.startswith("guigym."):
            return None  # forwarded to a class we cannot read (e.g. gymnasium.Env): accept
        params = inspect.signature(init).parameters
        names |= {n for n, p in params.items() if n != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            return names
    return None


def check_kwargs(cls: type, kwargs: Mapping[str, Any], what: str) -> None:
    """Raise :class:`UnknownOptionError` naming the first option of ``kwargs`` that ``cls`` does
    not take (``what`` names the env in the message) and the closest known option."""
    known = accepted_kwargs(cls)
    if known is None:
        return
    for key in kwargs:
        if key not in known:
            raise UnknownOptionError(f"{what}: unknown option {key!r}{did_you_mean(key, known)} "
                                     f"(options: {', '.join(sorted(known))})")


def known_dialects() -> list[str]:
    """Names of every registered action dialect (the benchmark dialects register on import)."""
    import guigym.core.dialects  # noqa: F401 - registers the benchmark dialects
    from guigym.core.dialect import DIALECTS

    return DIALECTS.names()


def check_dialect(dialect: str, field: str = "dialect") -> None:
    """ConfigError naming ``field`` when ``dialect`` is not a registered dialect."""
    known = known_dialects()
    if dialect not in known:
        raise ConfigError(f"{field}: unknown action dialect {dialect!r}{did_you_mean(str(dialect), known)} "
                          f"(known: {', '.join(known)})")


def env_class(env_id: str) -> type:
    """The class behind a registered Gymnasium id (ConfigError with did-you-mean when unknown)."""
    import gymnasium as gym

    import guigym  # noqa: F401 - registers the envs

    if env_id not in gym.registry:
        ours = [k for k, s in gym.registry.items() if str(s.entry_point).startswith("guigym.")]
        raise ConfigError(f"env: unknown env id {env_id!r}{did_you_mean(env_id, ours)} "
                          f"(guigym envs: {', '.join(sorted(ours))})")
    entry = gym.registry[env_id].entry_point
    if not isinstance(entry, str):
        return entry  # type: ignore[return-value]
    module, _, name = entry.partition(":")
    return getattr(importlib.import_module(module), name)


#: options that name a file or directory on the host, per env id (checked to exist up front)
PATH_OPTIONS = {"WebArena-v0": ("config_file",), "AndroidLab-v0": ("task_dir",), "OSWorld-v0": ("suite",)}


def missing_paths(env_id: str, kwargs: Mapping[str, Any], field: str = "env options") -> list[str]:
    """One message per host path option of ``kwargs`` (:data:`PATH_OPTIONS`) that does not exist."""
    out = []
    for key in PATH_OPTIONS.get(env_id, ()):
        value = kwargs.get(key)
        if value is None or (key == "suite" and value == "embedded"):
            continue
        for one in ([value] if isinstance(value, (str, Path)) else list(value)):
            if not Path(one).expanduser().exists():
                out.append(f"{field}: {key}: {str(one)!r} does not exist")
    return out


def check_env_options(env_id: str, kwargs: Mapping[str, Any], field: str = "env options",
                      paths: bool = True) -> None:
    """Everything about ``gym.make(env_id, **kwargs)`` that can be known without building it:
    the env id, unknown options (did-you-mean), the dialect and (with ``paths``) host paths that
    must exist. Raises ConfigError naming ``field`` and the option."""
    cls = env_class(env_id)
    check_kwargs(cls, kwargs, f"{field} of {env_id}")
    if "dialect" in kwargs:
        check_dialect(str(kwargs["dialect"]), f"{field}: dialect")
    missing = missing_paths(env_id, kwargs, field) if paths else []
    if missing:
        raise ConfigError(missing[0])


#: env ids whose task lists :func:`resolve_task_ids` knows (others check their tasks when built)
LISTED_ENVS = ("MiniWoB-v0", "OSWorld-v0", "WebArena-v0", "AndroidLab-v0", "AndroidWorld-v0", "LatencyModel-v0")


def _names(tasks: str | Iterable[str] | None) -> list[str] | None:
    if tasks is None:
        return None
    items = tasks.split(",") if isinstance(tasks, str) else [str(t) for t in tasks]
    return [t.strip() for t in items if t.strip()] or None


def resolve_task_ids(env_id: str, tasks: str | Iterable[str] | None, env_kwargs: Mapping[str, Any] | None = None,
                     suite: str | None = None) -> list[str]:
    """The task ids of ``env_id`` a run would use: ``tasks`` (a comma-separated string or a list),
    checked against the suite the env will load with ``env_kwargs``, or every task of that suite
    (MiniWoB: of ``suite``, ``all`` or ``flight``). TaskSpecError naming the unknown ids (with the
    closest known id) before any env starts; ConfigError for an env id without a task list here."""
    from guigym.core.errors import TaskSpecError

    kwargs = dict(env_kwargs or {})
    names = _names(tasks)

    def checked(known: list[str], wanted: list[str] | None, where: str) -> list[str]:
        if wanted is None:
            return known
        missing = [n for n in wanted if n not in known]
        if missing:
            raise TaskSpecError(f"{env_id} has no task(s) {missing} in {where}{did_you_mean(missing[0], known)}")
        return wanted

    if env_id == "MiniWoB-v0":
        from guigym.envs.web.miniwob import select_tasks

        return [t.id for t in select_tasks(tasks=names, suite=suite or str(kwargs.get("suite", "all")))]
    if env_id == "OSWorld-v0":
        from guigym.envs.desktop.env import suite_tasks

        where = kwargs.get("suite") or suite or "embedded"
        known = [t.id for t in suite_tasks(where)]
        if names is None:
            return known
        # a task file path is a task too (OSWorldEnv loads it): only bare ids are checked
        checked(known, [n for n in names if not n.endswith(".json")], f"suite {str(where)!r}")
        from guigym.envs.desktop.env import select_tasks as osworld_tasks

        return [t.id for t in osworld_tasks(tasks=names, suite=where)]
    if env_id == "WebArena-v0":
        from guigym.envs.web.webarena.tasks import load_configs, task_id

        config_file = kwargs.get("config_file")
        if not config_file:
            raise TaskSpecError("WebArena-v0 needs its task configs (WebArena config JSON): --env-opt config_file=PATH "
                                "in guigym eval, env.kwargs.config_file in a recipe")
        files = [config_file] if isinstance(config_file, (str, Path)) else list(config_file)
        known = [task_id(c.task_id) for f in files for c in load_configs(f)]
        # "12" and "webarena.12" both name config task_id 12
        wanted = None if names is None else [n if n.startswith("webarena.") else task_id(n) for n in names]
        return checked(known, wanted, str(config_file))
    if env_id == "AndroidLab-v0":
        from guigym.envs.android.androidlab_tasks import default_task_dir, load_dir
        from guigym.envs.android.env import ANDROIDLAB_SUITE

        task_dir = kwargs.get("task_dir") or default_task_dir() or ANDROIDLAB_SUITE
        return checked([t.id for t in load_dir(task_dir)], names, str(task_dir))
    if env_id == "AndroidWorld-v0":
        from guigym.envs.android.androidworld import TASKS

        return checked(TASKS.names(), names, "AndroidWorld's task classes")
    if env_id == "LatencyModel-v0":  # a stand-in: its suite is generated from its options
        from guigym.envs.latency_model import LatencyModelEnv

        suite = {k: v for k, v in kwargs.items() if k in ("n_tasks", "n_elements", "max_targets", "task_seed",
                                                          "max_steps")}
        return checked([t.id for t in LatencyModelEnv(**suite).tasks], names, "its generated suite")
    env_class(env_id)  # an unknown id: ConfigError with did-you-mean
    raise ConfigError(f"env: {env_id} lists no tasks here; available: {', '.join(LISTED_ENVS)}")
