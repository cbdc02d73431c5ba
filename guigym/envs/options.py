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
