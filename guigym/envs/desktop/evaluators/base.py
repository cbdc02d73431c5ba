"""The bottom of the desktop evaluators: the getter and metric registries and what getters,
metrics and setup steps share. Every module in ``getters/``, ``metrics/`` and ``setup/`` may
import this one; it imports none of them (:func:`guigym.envs.desktop.evaluators.load_all`
imports them all, so their decorators fill :data:`GETTERS` and :data:`METRICS`).

* registries: :data:`GETTERS` (getter type -> ``getter(ctx, spec)``), :data:`METRICS` (OSWorld
  metric name -> ``metric(result, expected_or_rules, **options) -> float``);
* getter helpers: :class:`GetterContext`, :func:`_need` (a spec field of the right type or a
  TaskSpecError naming it), :func:`_cache_target` (a dest confined to the cache dir),
  :func:`atomic_write`;
* optional libraries: :class:`MetricDependencyError`, :func:`require`;
* host cache and the errors of things a desktop lacks: :class:`SetupUnavailableError`,
  :class:`MissingToolError`, :class:`MissingResourceError`, :func:`download_cache_path`,
  :func:`fetch_url_to_cache` (setup's ``download`` and the ``cloud_file`` getter), :func:`_returncode`.
"""
from __future__ import annotations

import importlib
import os
import socket
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Optional, Union

from guigym.core.errors import EnvInfraError, GuigymError, TaskSpecError
from guigym.core.registry import Registry

__all__ = [
    "GETTERS", "METRICS", "Getter", "GetterContext", "Metric", "MetricDependencyError",
    "MissingResourceError", "MissingToolError", "SetupUnavailableError", "atomic_write",
    "download_cache_path", "fetch_url_to_cache", "require",
]


# --------------------------------------------------------------------------- registries


@dataclass
class GetterContext:
    """What getters may use: the desktop, the host cache dir and a few evaluation settings.

    ``now``: the evaluation time for ``rule_relativeTime`` (tz-aware or naive; None = the
    real clock). ``timezone``: the default zone name when the rule names none (None = the
    desktop's own UTC offset, see ``getters.general._desktop_timezone``). ``network_ok`` as in
    :func:`guigym.envs.desktop.setup.run_setup` (``cloud_file``).
    """

    client: Any
    cache_dir: Path
    now: Optional[datetime] = None
    timezone: Optional[str] = None
    network_ok: Optional[bool] = None


Getter = Callable[[GetterContext, Mapping[str, Any]], Any]

#: getter type -> function(ctx, spec); OSWorld names (without the ``get_`` prefix).
GETTERS: Registry[Getter] = Registry("osworld getter")


Metric = Callable[..., float]

#: name -> metric function, OSWorld names.
METRICS: Registry[Metric] = Registry("osworld metric")


# --------------------------------------------------------------------------- getter helpers


def _need(spec: Mapping[str, Any], key: str, types: Union[type, tuple[type, ...]] = str) -> Any:
    """``spec[key]`` when present and of ``types``, else a TaskSpecError naming the field."""
    if key not in spec:
        raise TaskSpecError(f"getter {spec.get('type')!r}: field {key!r} is missing")
    value = spec[key]
    if not isinstance(value, types):
        want = types.__name__ if isinstance(types, type) else "/".join(t.__name__ for t in types)
        raise TaskSpecError(f"getter {spec.get('type')!r}: field {key!r} must be {want}, got {value!r}")
    return value


def _cache_target(ctx: GetterContext, dest: str) -> Path:
    """``cache_dir/dest``, refusing names that leave the cache dir."""
    target = (ctx.cache_dir / dest).resolve()
    root = ctx.cache_dir.resolve()
    if root != target and root not in target.parents:
        raise TaskSpecError(f"dest {dest!r} points outside the cache dir {root}")
    return target


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file + rename (getters, setup steps, the download cache)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# --------------------------------------------------------------------------- optional libraries


class MetricDependencyError(GuigymError, ImportError):
    """A metric needs an optional library that is not installed; the message names it."""


def require(module: str, package: str, metric: str) -> Any:
    """Import ``module`` or raise :class:`MetricDependencyError` naming pip ``package``."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MetricDependencyError(
            f"metric {metric!r} needs the {package!r} library, which is not installed "
            f"(pip install {package})") from None


# --------------------------------------------------------------------------- setup errors, download cache


class SetupUnavailableError(EnvInfraError):
    """This desktop cannot run a setup step (a program, a file or a service is missing).

    An infrastructure limit, never scored as task failure. ``missing`` names what is missing
    (a program, a url, a step type); ``step_index``/``step_type`` say where (None outside a step).
    """

    def __init__(self, message: str, missing: str = "", step_index: Optional[int] = None,
                 step_type: str = "") -> None:
        super().__init__(message)
        self.missing = missing
        self.step_index = step_index
        self.step_type = step_type


class MissingToolError(SetupUnavailableError):
    """A program a step needs is not installed in the desktop; ``missing`` is its name."""


class MissingResourceError(SetupUnavailableError):
    """A file a step needs is neither in the cache nor reachable; ``missing`` is the url or
    local path, ``cache_path`` the file that would satisfy it."""

    def __init__(self, message: str, missing: str = "", cache_path: str = "", **kw: Any) -> None:
        super().__init__(message, missing, **kw)
        self.cache_path = cache_path


def _returncode(result: Any) -> Optional[int]:
    """The exit status in an /execute result (``returncode`` or ``return_code``), None if absent."""
    if not isinstance(result, Mapping):
        return None
    rc = result.get("returncode", result.get("return_code"))
    return rc if isinstance(rc, int) else None


def download_cache_path(cache_dir: Union[str, Path], url: str, path: str) -> Path:
    """OSWorld's cache file for a ``download`` step: ``uuid5(NAMESPACE_URL, url)_basename(path)``."""
    return Path(cache_dir) / f"{uuid.uuid5(uuid.NAMESPACE_URL, url)}_{os.path.basename(path)}"


def _network_reason(url: str, timeout: float = 3.0) -> Optional[str]:
    """None when ``url``'s host accepts a TCP connection, else why not."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"not an http(s) url: {url!r}"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            return None
    except OSError as e:
        return f"{parts.hostname}:{port} unreachable ({e.strerror or e})"


def fetch_url_to_cache(url: str, dest: Path, *, network_ok: Optional[bool], timeout: float = 300.0,
                       what: str = "download") -> Path:
    """Make ``dest`` hold the content of ``url``: kept if it exists, else fetched over the
    network when ``network_ok`` allows (None: when the host answers). Atomic write.

    Raises :class:`MissingResourceError` naming ``url`` and ``dest`` when neither works.
    """
    if dest.is_file():
        return dest
    hint = f"put the file at {dest} (the cache file for {url})"
    if network_ok is False:
        raise MissingResourceError(f"{what}: {url} is not cached and network use is off; {hint}",
                                   missing=url, cache_path=str(dest))
    reason = _network_reason(url)
    if reason is not None:
        raise MissingResourceError(f"{what}: {url} is not cached and the network is unavailable "
                                   f"({reason}); {hint}", missing=url, cache_path=str(dest))
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - task data urls
            data = resp.read()
    except (urllib.error.URLError, OSError) as e:
        raise MissingResourceError(f"{what}: fetching {url} failed ({e}); {hint}",
                                   missing=url, cache_path=str(dest)) from None
    atomic_write(dest, data)
    return dest
