"""Run metric functions on recorded cases, one side of bench/osworld_metric_diff.py per process.

The reference side ("theirs", the default) runs OSWorld's own metric functions under the isolated
venv's python (scripts/install_osworld_reference.sh: PyPI ``desktop-env`` 1.0.2 with ``--no-deps``
plus the libraries its evaluators import), never inside guigym's process, and imports nothing from
guigym. The "ours" side runs guigym's registry (``METRICS``) under guigym's python, so both sides
are scored by the same code and watched by the same driver. Protocol, JSON over stdin and a result
file written one line per finished case (so a driver that has to kill a case that never returns
keeps every result before it)::

    stdin : {"root": DIR, "timeout_s": 60, "side": "theirs" | "ours",
             "cases": [{"id": "c1", "metric": NAME, "args": [...], "kwargs": {...}}, ...]}
                                                         # {"$file": REL} = DIR/REL
    argv[1]: the JSONL file to append {"id": "c1", "score": 1.0} | {"id", "error": "Type: msg"}
             | {"id", "unavailable": "why"} to, one line per case, in case order (stdout stays
             free for upstream's prints)

``python _osworld_ref_runner.py --check`` imports the metrics and prints the package version.

Three libraries its evaluators import are not installed, each for a reason (docs/benchmarks.md):
``easyocr`` (OCR model weights from the network: compare_image_text), ``librosa`` (numba/llvmlite,
~100 MB, for compare_audios) and ``acoustid`` (needs the fpcalc binary); they are stubbed so the
rest imports, and a case that reaches a stub is reported ``unavailable``, never scored.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import signal
import sys
import types
from typing import Any

STUBBED = ("easyocr", "librosa", "acoustid")


class ReferenceUnavailable(BaseException):
    """Raised by a stubbed library: this case cannot be scored by the reference here.

    A BaseException, not an Exception: upstream wraps library calls in ``except Exception`` (its
    compare_audios scores two files librosa "cannot load" as identical, 1.0), which would turn the
    stub into a score instead of leaving the case out."""


def _stub(name: str) -> types.ModuleType:
    """A module whose every attribute raises :class:`ReferenceUnavailable` naming ``name``."""
    mod = types.ModuleType(name)

    def _missing(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise ReferenceUnavailable(f"{name}.{attr}: {name} is not installed in the reference venv")

    mod.__getattr__ = _missing  # type: ignore[method-assign]
    return mod


def load_metrics() -> Any:
    """``desktop_env.evaluators.metrics`` with the stubs of :data:`STUBBED` in place where missing."""
    for name in STUBBED:
        try:
            importlib.import_module(name)
        except ImportError:
            sys.modules[name] = _stub(name)
    return importlib.import_module("desktop_env.evaluators.metrics")


def _resolve(value: Any, root: str) -> Any:
    """Replace every ``{"$file": rel}`` in ``value`` by ``root/rel``."""
    if isinstance(value, dict):
        if set(value) == {"$file"}:
            return f"{root}/{value['$file']}"
        return {k: _resolve(v, root) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, root) for v in value]
    return value


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout()


def load_side(side: str) -> tuple[Any, type, type]:
    """``(lookup, unavailable, catch)`` of one side: ``lookup(name)`` is the metric function or
    None, ``unavailable`` the exception meaning "this side cannot run the case here", ``catch``
    what counts as the metric's error (upstream raises anything, SystemExit included)."""
    if side == "ours":
        from guigym.envs.desktop.evaluators import METRICS, MetricDependencyError

        return (lambda name: METRICS.get(name) if name in METRICS else None), MetricDependencyError, Exception
    if side != "theirs":
        raise ValueError(f"side must be 'theirs' or 'ours', not {side!r}")
    metrics = load_metrics()
    return (lambda name: getattr(metrics, name, None)), ReferenceUnavailable, BaseException


def run_case(lookup: Any, case: dict[str, Any], root: str, timeout_s: int,
             unavailable: type = ReferenceUnavailable, catch: type = BaseException,
             side: str = "theirs") -> dict[str, Any]:
    """One case: its score as a float, or why there is none."""
    out: dict[str, Any] = {"id": case["id"]}
    fn = lookup(case["metric"])
    if fn is None:
        out["unavailable"] = f"{'guigym' if side == 'ours' else 'desktop_env'} has no metric {case['metric']!r}"
        return out
    args = _resolve(case.get("args", []), root)
    kwargs = _resolve(case.get("kwargs", {}), root)
    return score_call(out, lambda: fn(*args, **kwargs), timeout_s, unavailable, catch)


def score_call(out: dict[str, Any], call: Any, timeout_s: int, unavailable: type, catch: type) -> dict[str, Any]:
    """Run one metric call under SIGALRM (``_alarm`` installed) and record its outcome in ``out``:
    ``score`` (float), ``unavailable`` (``unavailable`` raised: a library this side cannot have) or
    ``error`` (None returned, timeout, or any ``catch`` exception). Both sides of the differential
    score calls with it, so they count outcomes the same way."""
    signal.alarm(timeout_s)
    try:
        raw = call()
        if raw is None:
            out["error"] = "returned None"
        else:
            out["score"] = float(raw)
    except unavailable as exc:
        out["unavailable"] = str(exc)
    except _Timeout:
        out["error"] = f"Timeout: over {timeout_s} s"
    except catch as exc:  # noqa: BLE001 -- the outcome is the comparison's input
        out["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    finally:
        signal.alarm(0)
    return out


def main() -> int:
    if sys.argv[1:] == ["--check"]:
        load_metrics()
        from importlib.metadata import version
        print("desktop-env", version("desktop-env"))
        return 0
    request = json.load(sys.stdin)
    side = request.get("side", "theirs")
    timeout_s = int(request.get("timeout_s", 60))
    signal.signal(signal.SIGALRM, _alarm)
    # upstream prints freely: keep stdout for nothing but that, and write results to the file
    with contextlib.redirect_stdout(sys.stderr), open(sys.argv[1], "a") as res:
        lookup, unavailable, catch = load_side(side)
        for case in request["cases"]:
            out = run_case(lookup, case, request["root"], timeout_s, unavailable, catch, side)
            res.write(json.dumps(out, default=str) + "\n")
            res.flush()  # the driver reads progress from this file and may kill a stuck case
    return 0


if __name__ == "__main__":
    sys.exit(main())
