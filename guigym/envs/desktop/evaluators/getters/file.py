"""OSWorld's file getters (``desktop_env/evaluators/getters/file.py``): ``vm_file`` (files copied
from the desktop into ``cache_dir``), ``cache_file`` and ``cloud_file`` (from the host cache or
the network, :func:`~guigym.envs.desktop.evaluators.base.fetch_url_to_cache`). One file gives its
local path, several a list (``multi``); a file missing in the desktop gives None.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Optional

from guigym.core.errors import TaskSpecError
from guigym.envs.desktop.evaluators.base import GETTERS, GetterContext, _cache_target, _need, atomic_write, fetch_url_to_cache

log = logging.getLogger(__name__)


def _files(spec: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    if spec.get("multi", False):
        paths, dests = _need(spec, "path", list), _need(spec, "dest", list)
        if len(paths) != len(dests):
            raise TaskSpecError(f"getter {spec['type']!r}: 'path' has {len(paths)} entries but "
                                f"'dest' has {len(dests)}")
        return [str(p) for p in paths], [str(d) for d in dests]
    return [_need(spec, "path")], [_need(spec, "dest")]


def _gives(spec: Mapping[str, Any]) -> set[int]:
    gives = spec.get("gives", [0])
    if not isinstance(gives, list) or not all(isinstance(g, int) for g in gives):
        raise TaskSpecError(f"getter {spec['type']!r}: 'gives' must be a list of indices, got {gives!r}")
    return set(gives)


def _one_or_list(paths: list[Optional[str]]) -> Any:
    """OSWorld returns the single path when one file is given, else the list."""
    return paths[0] if len(paths) == 1 else paths




# --------------------------------------------------------------------------- file.py


@GETTERS.register("vm_file")
def get_vm_file(ctx: GetterContext, spec: Mapping[str, Any]) -> Any:
    """Copy desktop file(s) into the cache; ``path``/``dest`` (lists with ``multi``), ``gives``
    (indices returned, default [0]), ``time_suffix``/``time_format`` (single file: the dest
    name gets ``_<now formatted>`` before its extension). A missing file gives None in its
    place; the return is one path when one index is given, else the list."""
    paths, dests = _files(spec)
    if not spec.get("multi", False) and spec.get("time_suffix", False):
        fmt = spec.get("time_format", "%Y%m%d_%H%M%S")
        stamp = (ctx.now or datetime.now()).strftime(fmt)
        dests = [f"{os.path.splitext(d)[0]}_{stamp}{os.path.splitext(d)[1]}" for d in dests]
    gives = _gives(spec)
    out: list[Optional[str]] = []
    for i, (p, d) in enumerate(zip(paths, dests)):
        target = _cache_target(ctx, d)
        data = ctx.client.get_file(p)
        if data is None:
            log.info("vm_file: %s does not exist in the desktop", p)
            if i in gives:
                out.append(None)
            continue
        atomic_write(target, data)
        if i in gives:
            out.append(str(target))
    return _one_or_list(out)


@GETTERS.register("cache_file")
def get_cache_file(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[str]:
    """``cache_dir/path`` (a file a setup step saved, e.g. ``execute``'s ``stdout``); None when
    it does not exist (OSWorld asserts)."""
    target = _cache_target(ctx, _need(spec, "path"))
    return str(target) if target.exists() else None


@GETTERS.register("cloud_file")
def get_cloud_file(ctx: GetterContext, spec: Mapping[str, Any]) -> Any:
    """Download url(s) ``path`` to ``cache_dir/dest`` (``multi``/``gives`` as ``vm_file``); a
    file already in the cache is used as is; otherwise the network is used when allowed
    (:class:`~guigym.envs.desktop.setup.MissingResourceError` names the url and cache file)."""

    paths, dests = _files(spec)
    gives = _gives(spec)
    out: list[Optional[str]] = []
    for i, (p, d) in enumerate(zip(paths, dests)):
        target = _cache_target(ctx, d)
        fetch_url_to_cache(p, target, network_ok=ctx.network_ok, what="cloud_file")
        if i in gives:
            out.append(str(target))
    return _one_or_list(out)
