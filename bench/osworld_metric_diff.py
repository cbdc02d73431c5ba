"""OSWorld metric differential (issue 36 item 1): OSWorld's own metric functions against guigym's
on the same inputs, and a table per metric of cases, agree, disagree.

    bash scripts/install_osworld_reference.sh            # once: the isolated desktop-env venv
    python bench/osworld_metric_diff.py                   # harvest cases, run both sides, table
    python bench/osworld_metric_diff.py --cases DIR --no-harvest --show 20 --json out.json
    python bench/osworld_metric_diff.py --cases DIR --no-harvest --results RES --family table docs
        # by family; RES keeps each side's outcomes as they come, a rerun resumes from them

1. **Cases** are the metric calls the test suite already makes on the real files it generates
   (xlsx with charts and pivots, docx, pptx, pdf, images, csv in several encodings, json,
   archives, prefs, a11y XML, VLC status XML...): the metric test files run under pytest with the
   recorder plugin (bench/_osworld_case_recorder.py), which writes each outermost metric call and
   copies of its files to ``--cases`` (default: a fresh temporary directory).
2. **Reference**: OSWorld's functions from PyPI ``desktop-env`` 1.0.2, in the isolated venv
   (``--no-deps`` plus the libraries its evaluators import; its pins, numpy<2, pandas<2.3,
   torch~=2.5, conflict with ours), run by bench/_osworld_ref_runner.py in a subprocess: JSON
   over stdin, one result line per case. Their code is never imported into this process.
3. **Ours**: ``METRICS[name](*args, **kwargs)`` by the same runner under guigym's python, on a
   separate copy of the files (a metric may write next to its inputs).

Each case has a SIGALRM bound (``--timeout``) inside the runner, but SIGALRM only interrupts
Python code: upstream's run_sqlite3 on the recorded endless-recursive-view database spins in
sqlite's C loop forever, which is why earlier full runs never finished. The driver therefore
watches the result file and kills the runner's process group when a case makes no progress for
``--timeout`` + ``KILL_GRACE_S`` seconds, scores that case a timeout error, and restarts the runner
on the cases after it.

Outcome of a case on one side: its score (a float), or an error. An error counts as 0: OSWorld's
``DesktopEnv.evaluate`` lets a metric's exception end the episode without a passing score, and
ours scores a missing or unreadable result 0. Agree = both outcomes within 1e-6. A case either
side cannot run here (a stubbed library on theirs, a missing optional library on ours) is
"unavailable" and left out of the counts. Metrics only one side has are not compared.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Optional

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
RUNNER = BENCH / "_osworld_ref_runner.py"
INSTALL_CMD = "bash scripts/install_osworld_reference.sh"
#: the test files whose metric calls become cases (the ones that build real input files)
DEFAULT_TESTS = (
    "tests/test_osworld_metrics_apps.py", "tests/test_osworld_metrics_files.py",
    "tests/test_osworld_metrics_gimp.py", "tests/test_osworld_metrics_impress.py",
    "tests/test_osworld_metrics_misc.py", "tests/test_osworld_metrics_more.py",
    "tests/test_osworld_metrics_writer.py", "tests/test_osworld_chrome_profile.py",
)
TOL = 1e-6

sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))


def venv_python() -> Path:
    """The isolated venv's python (``GUIGYM_DESKTOP_ENV_VENV`` or the install script's default)."""
    env = os.environ.get("GUIGYM_DESKTOP_ENV_VENV")
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "guigym" / "venvs" / "desktop-env"
    return Path(env or base) / "bin" / "python"


def venv_ready() -> bool:
    """True when the install script finished (it writes ``.guigym-ready`` last)."""
    return (venv_python().parent.parent / ".guigym-ready").exists()


# ----------------------------------------------------------------------------- cases


def harvest(case_dir: Path, tests: Iterable[str], *, timeout_s: int = 1800) -> None:
    """Run ``tests`` under pytest with the recorder plugin; cases land in ``case_dir``."""
    case_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GUIGYM_METRIC_CASES=str(case_dir),
               PYTHONPATH=os.pathsep.join([str(ROOT), str(BENCH), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "_osworld_case_recorder", "-p", "no:cacheprovider",
           *[str(ROOT / t) for t in tests]]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    print(f"harvest: pytest exit {proc.returncode}: {last}", file=sys.stderr)


def load_cases(case_dir: Path) -> list[dict[str, Any]]:
    """The recorded cases, one per id (the first origin kept)."""
    seen: dict[str, dict[str, Any]] = {}
    path = case_dir / "cases.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                case = json.loads(line)
                seen.setdefault(case["id"], case)
    return list(seen.values())


#: seconds a side gets to import its metrics before its first case counts as stuck
STARTUP_S = 300
#: seconds over a case's own SIGALRM bound before the driver kills its process: SIGALRM only
#: interrupts Python code, and a metric inside a C loop (upstream's run_sqlite3 on an endless
#: recursive view) never returns to the interpreter, so the bound the run relies on is this one
KILL_GRACE_S = 15


def _files_copy(case_dir: Path, dest: Path) -> str:
    """A private copy of the case files for one side; its root."""
    if (case_dir / "files").exists():
        shutil.copytree(case_dir / "files", dest / "files", symlinks=True)
    (dest / "missing").mkdir(parents=True, exist_ok=True)
    return str(dest)


# ----------------------------------------------------------------------------- both sides


def _read_results(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a runner's result file (a line being written is left for later)."""
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text.split("\n")[:-1] if line.strip()]


def _drive(side: str, cases: list[dict[str, Any]], root: str, *, python: Path, env: dict[str, str],
           timeout_s: int, results: Optional[Path] = None, log: Any = None) -> dict[str, dict[str, Any]]:
    """One side's outcome for every case, run by bench/_osworld_ref_runner.py in a subprocess.

    The runner appends one line per case to ``results`` (a temporary file unless given); a case
    that makes no progress for ``timeout_s + KILL_GRACE_S`` seconds (``STARTUP_S`` more for the
    first) gets its process group killed, is scored ``{"error": "Timeout: killed ..."}``, and the
    runner restarts on the cases after it. Cases already in ``results`` are not run again (resume).
    Returns ``{id: {"score": x} | {"error": s} | {"unavailable": s}}``.
    """
    tmp = None
    if results is None:
        tmp = tempfile.TemporaryDirectory(prefix=f"osdiff-{side}-")
        results = Path(tmp.name) / f"{side}.jsonl"
    try:
        if results.exists():  # a line torn by a kill of the whole run: drop it, its case reruns
            text = results.read_text()
            results.write_text(text[: text.rfind("\n") + 1])
        done = {r["id"]: r for r in _read_results(results)}
        pending = [c for c in cases if c["id"] not in done]
        while pending:
            request = {"root": root, "timeout_s": timeout_s, "side": side,
                       "cases": [{k: c[k] for k in ("id", "metric", "args", "kwargs")} for c in pending]}
            before = len(_read_results(results))
            with tempfile.TemporaryFile("w+") as err:
                proc = subprocess.Popen([str(python), str(RUNNER), str(results)], stdin=subprocess.PIPE,
                                        stdout=err, stderr=err, text=True, env=env, cwd=root,
                                        start_new_session=True)  # its own group: a kill takes its children
                killed = False
                try:
                    assert proc.stdin is not None
                    proc.stdin.write(json.dumps(request))
                    proc.stdin.close()
                    seen, deadline = before, time.monotonic() + STARTUP_S + timeout_s + KILL_GRACE_S
                    while proc.poll() is None:
                        now = len(_read_results(results))
                        if now > seen:
                            seen, deadline = now, time.monotonic() + timeout_s + KILL_GRACE_S
                            if log is not None:
                                print(f"{side}: {len(done) + now - before}/{len(cases)}", file=log, flush=True)
                        elif time.monotonic() > deadline:
                            killed = True
                            break
                        time.sleep(0.2)
                finally:
                    if proc.poll() is None:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
                new = _read_results(results)[before:]
                err.seek(0)
                stderr = err.read()
            for r in new:
                done[r["id"]] = r
            pending = [c for c in pending if c["id"] not in done]
            if killed and pending:
                stuck = pending.pop(0)
                rec = {"id": stuck["id"], "error": f"Timeout: killed after {timeout_s + KILL_GRACE_S} s "
                                                  "(the metric never returned to the interpreter)"}
                with open(results, "a") as fh:
                    fh.write(json.dumps(rec) + "\n")
                done[stuck["id"]] = rec
                if log is not None:
                    print(f"{side}: killed {stuck['metric']} case {stuck['id']}", file=log, flush=True)
            elif pending and not new:
                raise RuntimeError(f"the {side} runner failed (exit {proc.returncode}): {stderr.strip()[-800:]}")
        return done
    finally:
        if tmp is not None:
            tmp.cleanup()


def run_ours(cases: list[dict[str, Any]], root: str, timeout_s: int = 60, *,
             results: Optional[Path] = None, log: Any = None) -> dict[str, dict[str, Any]]:
    """guigym's metric on every case (``METRICS[name]``, guigym's python, this checkout)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return _drive("ours", cases, root, python=Path(sys.executable), env=env, timeout_s=timeout_s,
                  results=results, log=log)


def run_theirs(cases: list[dict[str, Any]], root: str, *, python: Optional[Path] = None,
               timeout_s: int = 60, results: Optional[Path] = None, log: Any = None) -> dict[str, dict[str, Any]]:
    """OSWorld's metric on every case, in the isolated venv (nothing of guigym on its path)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONWARNINGS"] = "ignore"
    return _drive("theirs", cases, root, python=python or venv_python(), env=env, timeout_s=timeout_s,
                  results=results, log=log)


# ----------------------------------------------------------------------------- comparison


def outcome(res: dict[str, Any]) -> Optional[float]:
    """The score a side gave (an error scores 0); None when the case was unavailable."""
    if "unavailable" in res:
        return None
    score = res.get("score")
    if score is None or (isinstance(score, float) and math.isnan(score)):
        return 0.0
    return score


def compare(cases: list[dict[str, Any]], ours: dict[str, dict[str, Any]],
            theirs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per-metric counts and the list of disagreements.

    Returns ``{"metrics": {name: {"cases", "agree", "disagree", "unavailable"}}, "total": {...},
    "disagreements": [{"id", "metric", "origin", "ours", "theirs"}]}``.
    """
    per: dict[str, dict[str, int]] = defaultdict(lambda: {"cases": 0, "agree": 0, "disagree": 0, "unavailable": 0})
    bad: list[dict[str, Any]] = []
    for case in cases:
        row = per[case["metric"]]
        a, b = ours.get(case["id"], {"unavailable": "not run"}), theirs.get(case["id"], {"unavailable": "not run"})
        oa, ob = outcome(a), outcome(b)
        if oa is None or ob is None:
            row["unavailable"] += 1
            continue
        row["cases"] += 1
        if abs(oa - ob) <= TOL:
            row["agree"] += 1
        else:
            row["disagree"] += 1
            bad.append({"id": case["id"], "metric": case["metric"], "origin": case.get("origin", ""),
                        "ours": a, "theirs": b})
    total = {k: sum(r[k] for r in per.values()) for k in ("cases", "agree", "disagree", "unavailable")}
    total["metrics"] = sum(1 for r in per.values() if r["cases"])
    return {"metrics": dict(sorted(per.items())), "total": total, "disagreements": bad}


def family_of(metric: str) -> str:
    """guigym's module (family) that defines ``metric``."""
    from guigym.envs.desktop.evaluators import METRICS

    fn = METRICS.get(metric)
    fn = getattr(fn, "__guigym_recorded__", fn)
    return fn.__module__.rsplit(".", 1)[-1]


def table(report: dict[str, Any]) -> str:
    """The per-metric table (markdown), with each metric's family and the totals."""
    lines = ["| metric | family | cases | agree | disagree | unavailable |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    for name, r in report["metrics"].items():
        lines.append(f"| {name} | {family_of(name)} | {r['cases']} | {r['agree']} | {r['disagree']} | {r['unavailable']} |")
    t = report["total"]
    share = t["agree"] / t["cases"] if t["cases"] else 0.0
    lines.append(f"| **total ({t['metrics']} metrics)** | | **{t['cases']}** | **{t['agree']}** "
                 f"| **{t['disagree']}** | **{t['unavailable']}** |")
    lines.append("")
    lines.append(f"agreement: {t['agree']}/{t['cases']} = {share:.1%} of (metric, case) pairs")
    return "\n".join(lines)


def select(cases: list[dict[str, Any]], metrics: Optional[Iterable[str]] = None,
           families: Optional[Iterable[str]] = None) -> list[dict[str, Any]]:
    """The cases of the named metrics and/or families (guigym's module name, e.g. ``table``)."""
    want_m = set(metrics or ())
    want_f = set(families or ())
    if not want_m and not want_f:
        return cases
    return [c for c in cases if c["metric"] in want_m or (want_f and _family_or_none(c["metric"]) in want_f)]


def _family_or_none(metric: str) -> Optional[str]:
    from guigym.envs.desktop.evaluators import METRICS

    return family_of(metric) if metric in METRICS else None


def run(case_dir: Path, *, python: Optional[Path] = None, timeout_s: int = 60,
        results: Optional[Path] = None, cases: Optional[list[dict[str, Any]]] = None,
        log: Any = None) -> dict[str, Any]:
    """Both sides on the cases in ``case_dir`` (or the given subset); the :func:`compare` report.
    With ``results``, each side's outcomes are appended to ``results/{ours,theirs}.jsonl`` as they
    come and a rerun skips the cases already there, so a cut-short run loses nothing."""
    cases = load_cases(case_dir) if cases is None else cases
    if results is not None:
        results.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="osdiff-") as tmp:
        ours = run_ours(cases, _files_copy(case_dir, Path(tmp) / "ours"), timeout_s,
                        results=results / "ours.jsonl" if results else None, log=log)
        theirs = run_theirs(cases, _files_copy(case_dir, Path(tmp) / "theirs"), python=python, timeout_s=timeout_s,
                            results=results / "theirs.jsonl" if results else None, log=log)
    return compare(cases, ours, theirs)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=Path, help="case directory (default: a fresh temporary one)")
    ap.add_argument("--no-harvest", action="store_true", help="use the cases already in --cases")
    ap.add_argument("--tests", nargs="*", default=list(DEFAULT_TESTS), help="test files to harvest from")
    ap.add_argument("--timeout", type=int, default=60, help="seconds per case and side")
    ap.add_argument("--show", type=int, default=0, help="print this many disagreements")
    ap.add_argument("--json", type=Path, help="write the full report here")
    ap.add_argument("--results", type=Path,
                    help="keep each side's outcomes here as they come; a rerun resumes from them")
    ap.add_argument("--metric", nargs="*", default=[], help="only these metrics")
    ap.add_argument("--family", nargs="*", default=[],
                    help="only these families (guigym's metric module: table, docs, slides, ...)")
    args = ap.parse_args(argv)
    if not venv_ready():
        print(f"no desktop-env reference venv at {venv_python().parent.parent}: run `{INSTALL_CMD}`", file=sys.stderr)
        return 2
    from _machine import machine

    tmp = None
    case_dir = args.cases
    if case_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="osdiff-cases-")
        case_dir = Path(tmp.name)
    try:
        if not args.no_harvest:
            harvest(case_dir, args.tests)
        cases = select(load_cases(case_dir), args.metric, args.family)
        report = run(case_dir, timeout_s=args.timeout, results=args.results, cases=cases, log=sys.stderr)
    finally:
        if tmp is not None:
            tmp.cleanup()
    report["machine"] = machine()
    print(f"OSWorld metric differential, desktop-env 1.0.2 vs guigym; {report['machine']}")
    print(table(report))
    for d in report["disagreements"][: args.show]:
        print(f"- {d['metric']} [{d['origin']}] ours={d['ours']} theirs={d['theirs']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
