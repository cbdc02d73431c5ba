"""OSWorld-compatible evaluators of the desktop: getters fetch state, metrics compare it.

The layout is OSWorld's ``desktop_env/evaluators/``: ``getters/<family>.py`` and
``metrics/<family>.py`` (chrome, vlc, impress, table (calc), docs, writer, slides, gimp, file,
general, misc, ...), each registering its functions with a decorator into the registries of
:mod:`.base`, the module at the bottom that they all import and that imports none of them.
:func:`load_all` imports every family; :func:`get` and :func:`evaluate` (the entry points the env
uses) call it first, so a caller never sees a half-filled registry.

    from guigym.envs.desktop.evaluators import METRICS, evaluate, get
    "compare_table" in METRICS   # True: GETTERS/METRICS read from here load every family first
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Optional, Union

from guigym.core.errors import TaskSpecError
from guigym.envs.desktop.evaluators import base as _base
from guigym.envs.desktop.evaluators.base import Getter, GetterContext, Metric, MetricDependencyError

__all__ = ["GETTERS", "METRICS", "Getter", "GetterContext", "Metric", "MetricDependencyError",
           "evaluate", "get", "get_metric", "load_all"]

_loaded = False


def load_all() -> None:
    """Import every getter and metric module so that their decorators fill GETTERS and METRICS."""
    global _loaded
    if _loaded:
        return
    # every module of getters/ and metrics/ (tests/test_moved_modules.py checks none is missing)
    from guigym.envs.desktop.evaluators.getters import (  # noqa: F401
        browser, chrome, file as g_file, general, gimp as g_gimp, impress, info, misc as g_misc, port_owner,
        system, vlc,
    )
    from guigym.envs.desktop.evaluators.metrics import (  # noqa: F401
        apps, chrome as m_chrome, docs, file, general as m_general, gimp, images, impress as m_impress,
        media, misc, slides, table, table_rules, thunderbird, utils, vlc as m_vlc, writer,
    )
    _loaded = True


def __getattr__(name: str) -> Any:
    """``GETTERS`` / ``METRICS`` read from this package are always complete (PEP 562): the first
    access loads every family. The modules that fill them import :mod:`.base` instead."""
    if name in ("GETTERS", "METRICS"):
        load_all()
        return getattr(_base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_metric(name: str) -> Metric:
    """The metric registered as ``name`` (KeyError listing the known ones otherwise)."""
    load_all()
    return _base.METRICS.get(name)


def get(client: Any, spec: Mapping[str, Any], cache_dir: Union[str, Path], *,
        now: Optional[datetime] = None, timezone: Optional[str] = None,
        network_ok: Optional[bool] = None) -> Any:
    """Run the getter ``spec["type"]`` against the desktop behind ``client``.

    ``spec`` is not modified (OSWorld's ``rule_relativeTime`` rewrites its config in place;
    we return a copy). Unknown types raise :class:`TaskSpecError` naming the type.
    """
    if not isinstance(spec, Mapping) or not isinstance(spec.get("type"), str):
        raise TaskSpecError(f"a getter spec must be an object with a string 'type', got {spec!r}")
    kind = spec["type"]
    load_all()
    getters = _base.GETTERS
    if kind not in getters:
        raise TaskSpecError(f"unknown getter type {kind!r}; known: {', '.join(getters.names())}")
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    ctx = GetterContext(client=client, cache_dir=cache, now=now, timezone=timezone, network_ok=network_ok)
    return getters.get(kind)(ctx, copy.deepcopy(dict(spec)))


# --------------------------------------------------------------------------- evaluate


def _as_list(value: Any, n: int) -> list[Any]:
    if isinstance(value, list):
        return value
    return [value] * n


def _present(spec: Mapping[str, Any], key: str) -> bool:
    value = spec.get(key)
    return value is not None and not (isinstance(value, (list, dict, str)) and len(value) == 0)


def _run_one(func: str, result: Any, expected: Any, has_expected: bool, options: Optional[Mapping[str, Any]]
             ) -> dict[str, Any]:
    if result is None:
        return {"func": func, "score": 0.0,
                "reason": f"{func}: result is missing (the getter found no file or value)"}
    metric = get_metric(func)
    opts = dict(options or {})
    raw = metric(result, expected, **opts) if has_expected else metric(result, **opts)
    score = float(raw) if raw is not None else 0.0
    item: dict[str, Any] = {"func": func, "score": min(1.0, max(0.0, score))}
    if item["score"] != score:
        item["raw_score"] = score
    return item


def evaluate(evaluator_spec: Mapping[str, Any], results: Any, expected: Any = None, *,
             last_action: Optional[str] = None) -> tuple[float, dict[str, Any]]:
    """Score one episode as OSWorld's ``DesktopEnv.evaluate`` does.

    ``evaluator_spec`` is the task's ``evaluator`` dict; ``results``/``expected`` are what its
    getters fetched (one value each for a single ``func``, lists as long as ``func`` otherwise;
    ``expected`` is ignored where the spec has no ``expected``). ``last_action`` is the agent's
    last action (``"FAIL"`` matters).

    * ``func == "infeasible"``: 1 if the last action is FAIL, else 0. Any other task whose last
      action is FAIL scores 0.
    * A result that is None (missing file) scores 0 for that metric, with a reason.
    * ``conj="and"`` (default): any metric at 0 makes the score 0 at once; otherwise the mean.
      ``conj="or"``: any metric at 1 makes it 1 at once; otherwise the maximum.

    Returns ``(score in [0, 1], details)``; details has ``funcs``, ``conj``, ``items`` (one per
    metric run: func, score, reason if any) and ``reason``. Metric exceptions propagate.
    """
    func = evaluator_spec["func"]
    conj = evaluator_spec.get("conj", "and")
    details: dict[str, Any] = {"funcs": func, "conj": conj, "items": []}
    if func == "infeasible":
        score = float(last_action == "FAIL")
        details["reason"] = ("agent said FAIL on an infeasible task" if score
                             else "infeasible task: the agent's last action was not FAIL")
        return score, details
    if last_action == "FAIL":
        details["reason"] = "the agent gave up (FAIL) on a feasible task"
        return 0.0, details

    has_expected = _present(evaluator_spec, "expected")
    if isinstance(func, str):
        item = _run_one(func, results, expected, has_expected, evaluator_spec.get("options"))
        details["items"].append(item)
        details["reason"] = item.get("reason", f"{func} scored {item['score']:g}")
        return item["score"], details

    n = len(func)
    results_l = _as_list(results, n)
    expected_l = _as_list(expected, n)
    exp_specs = _as_list(evaluator_spec.get("expected"), n) if has_expected else [None] * n
    opts_l = _as_list(evaluator_spec.get("options"), n)
    if not (len(results_l) == len(expected_l) == n):
        raise ValueError(f"evaluate: func lists {n} metrics but got {len(results_l)} results "
                         f"and {len(expected_l)} expected values")
    scores: list[float] = []
    for i, name in enumerate(func):
        item = _run_one(name, results_l[i], expected_l[i], bool(exp_specs[i]), opts_l[i])
        details["items"].append(item)
        scores.append(item["score"])
        if conj == "and" and item["score"] == 0.0:
            details["reason"] = item.get("reason", f"{name} scored 0 (conj 'and')")
            return 0.0, details
        if conj == "or" and item["score"] == 1.0:
            details["reason"] = f"{name} scored 1 (conj 'or')"
            return 1.0, details
    score = sum(scores) / len(scores) if conj == "and" else max(scores)
    details["reason"] = f"{'mean' if conj == 'and' else 'max'} of {len(scores)} metrics"
    return score, details
