"""pytest plugin: record the OSWorld-metric calls the test suite makes, with copies of their files.

Loaded by bench/osworld_metric_diff.py as ``python -m pytest -p _osworld_case_recorder TESTS``
(``bench/`` on PYTHONPATH) with ``GUIGYM_METRIC_CASES=DIR``. Before any test module is imported
it wraps every function registered in ``METRICS`` (the registry entry and the module attribute of
``guigym.envs.desktop.evaluators.metrics.*``, so ``METRICS[name]``, ``get_metric`` and
``from ...metrics.docs import f`` all reach the wrapper). Each outermost call (a metric calling
another records once) appends one line to ``DIR/cases.jsonl``::

    {"id": sha, "metric": NAME, "args": [...], "kwargs": {...}, "origin": TEST_NODEID}

Every absolute path argument that names a file (or a directory under the temp dir) is copied to
``DIR/files/<sha16>/<basename>`` (content-addressed; the basename is kept because metrics read the
suffix) and written as ``{"$file": "files/<sha16>/<basename>"}``; a path under the temp dir that
does not exist becomes ``{"$file": "missing/<basename>"}``. Calls with arguments JSON cannot hold
(objects, bytes) are counted in ``DIR/skipped.json`` instead. The test's own outcome is untouched:
the wrapper calls the real function with the original arguments and returns its result.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Callable

_DIR = Path(os.environ.get("GUIGYM_METRIC_CASES", "osworld-metric-cases"))
_MAX_FILE = 64 << 20  # bigger inputs are not worth a copy
_state: dict[str, Any] = {"nodeid": "", "depth": 0}
_skipped: Counter[str] = Counter()


class _NotJSON(TypeError):
    pass


def _tmp_roots() -> tuple[str, ...]:
    return tuple({os.path.realpath(tempfile.gettempdir()), "/tmp"})


def _store(path: Path) -> dict[str, str]:
    """Copy a file or directory into the case store; its ``{"$file": rel}``."""
    h = hashlib.sha256()
    if path.is_dir():
        for sub in sorted(path.rglob("*")):
            if sub.is_file():
                h.update(str(sub.relative_to(path)).encode())
                h.update(sub.read_bytes())
    else:
        h.update(path.read_bytes())
    rel = Path("files") / h.hexdigest()[:16] / (path.name or "root")
    dest = _DIR / rel
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            shutil.copytree(path, dest, symlinks=False)
        else:
            shutil.copyfile(path, dest)
    return {"$file": str(rel)}


def _encode(value: Any) -> Any:
    """``value`` as JSON, paths replaced by store references; :class:`_NotJSON` otherwise."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        if value.startswith("/") and "\n" not in value and len(value) < 4096:
            path = Path(value)
            real = os.path.realpath(value)
            under_tmp = real.startswith(_tmp_roots())
            try:
                if path.is_file() and path.stat().st_size <= _MAX_FILE:
                    return _store(path)
                if path.is_dir() and under_tmp:
                    return _store(path)
                if under_tmp and not path.exists():
                    return {"$file": f"missing/{path.name}"}
            except OSError:
                pass
        return value
    if isinstance(value, os.PathLike):
        return _encode(os.fspath(value))
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise _NotJSON("non-string key")
        return {k: _encode(v) for k, v in value.items()}
    raise _NotJSON(type(value).__name__)


def _record(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    try:
        case = {"metric": name, "args": _encode(list(args)), "kwargs": _encode(kwargs)}
    except _NotJSON as exc:
        _skipped[f"{name}: {exc}"] += 1
        return
    blob = json.dumps(case, sort_keys=True)
    case["id"] = hashlib.sha256(blob.encode()).hexdigest()[:16]
    case["origin"] = _state["nodeid"]
    with open(_DIR / "cases.jsonl", "a") as fh:
        fh.write(json.dumps(case) + "\n")


def _wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        if _state["depth"] == 0:
            try:
                _record(name, args, kwargs)
            except Exception as exc:  # noqa: BLE001 -- recording must never change a test's outcome
                _skipped[f"{name}: record failed: {type(exc).__name__}"] += 1
        _state["depth"] += 1
        try:
            return fn(*args, **kwargs)
        finally:
            _state["depth"] -= 1

    recorded.__guigym_recorded__ = fn  # type: ignore[attr-defined]
    return recorded


def pytest_configure(config: Any) -> None:
    from guigym.envs.desktop.evaluators import base, load_all

    _DIR.mkdir(parents=True, exist_ok=True)
    load_all()
    items: dict[str, Callable[..., Any]] = base.METRICS._items  # noqa: SLF001 -- a bench tool
    wrapped: dict[int, Callable[..., Any]] = {}
    for name, fn in list(items.items()):
        items[name] = wrapped.setdefault(id(fn), _wrap(name, fn))
    prefix = "guigym.envs.desktop.evaluators.metrics."
    for modname, mod in list(sys.modules.items()):
        if modname.startswith(prefix) and mod is not None:
            for attr, val in list(vars(mod).items()):
                if callable(val) and id(val) in wrapped:
                    setattr(mod, attr, wrapped[id(val)])


def pytest_runtest_setup(item: Any) -> None:
    _state["nodeid"] = item.nodeid


def pytest_unconfigure(config: Any) -> None:
    (_DIR / "skipped.json").write_text(json.dumps(dict(_skipped), indent=1, sort_keys=True))
