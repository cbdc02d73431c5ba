#!/usr/bin/env python
"""Step and reset latency of MiniWoB++ envs: guigym vs the Farama ``miniwob`` env vs BrowserGym.

Usage::

    python bench/web_step.py                       # 4 default tasks, 3 episodes x 10 steps each
    python bench/web_step.py --tasks click-test enter-text --episodes 5 --json /tmp/web_step.json

What runs
---------
Three envs, on the same MiniWoB++ task pages (the ``html/miniwob/*.html`` of the ``miniwob``
package installed in the system Python), all in the same headless Chromium: Debian's
``chromium-headless-shell`` when installed (the binary Playwright itself launches for headless
runs; the Farama env's chromedriver drives it too), else ``/usr/bin/chromium`` (``--chromium``).
The Farama row needs Debian's ``chromium-driver`` (``apt install chromium-driver``).

1. ``guigym``: ``gym.make("MiniWoB-v0", task=T)`` (Playwright, system Python), its default
   ``isolation="clean"`` (a reused browser context emptied between episodes). Observation:
   screenshot (uint8 HxWx3) + accessibility-tree XML + instruction + url. No-op action:
   ``"wait(seconds=0)"``. Rows ``guigym-context`` and ``guigym-page``: the same env with
   ``isolation="context"`` (a fresh context per episode) and ``"page"`` (the task restarted in the
   open page, as the Farama env does).
2. ``farama``: ``gym.make("miniwob/T-v1")`` from the ``miniwob`` package (Selenium +
   ``/usr/bin/chromedriver``, system Python), with its defaults: screenshot + DOM element list +
   utterance. No-op action: ``env.unwrapped.create_action(ActionTypes.NONE)``.
3. ``browsergym``: ``gym.make("browsergym/miniwob.T")`` with its default observation (screenshot
   + AXTree + DOM snapshot + extra element properties, chat messages, ...) and the no-op of its
   default high-level action set, ``noop()``. Note that BrowserGym's ``noop()`` is
   ``page.wait_for_timeout(1000)`` and every BrowserGym step also sleeps
   ``pre_observation_delay=0.5`` s and runs Playwright with the MiniWoB task's ``slow_mo=100`` ms:
   those are BrowserGym's defaults and are part of what is measured. A diagnostic row
   ``browsergym noop(0)`` (action ``noop(wait_ms=0)``, everything else default) shows how much of
   the step is the 1 s wait; the targets are checked against the default ``noop()`` row.

   BrowserGym is installed into a separate venv (``scripts/install_browsergym_reference.sh``'s,
   ``~/.cache/guigym/venvs/browsergym``; created with ``pip install browsergym-miniwob`` when
   missing), never into the system Python. Its Playwright is pointed at
   the system Chromium by symlinking the browser paths it expects (inside
   ``PLAYWRIGHT_BROWSERS_PATH=<venv>/ms-playwright``) to ``/usr/bin/chromium``, so
   that both BrowserGym's task browser and its chat-window browser (which ignores any
   ``executable_path``) use it. Playwright passes ``--no-sandbox`` itself (its default
   ``chromium_sandbox=False``), which is what running as root needs. ``MINIWOB_URL`` is set to
   ``file://<system miniwob>/html/miniwob/``. Nothing leaves the machine but pip's downloads.

Method
------
Every (env, task) pair runs in a fresh worker process (this script re-invoked with ``--worker``;
BrowserGym's with the venv's Python), so no env inherits another's browser or threads. Pairs are
interleaved: for each task, every env runs once, in an order rotated from task to task, so a
burst of load from elsewhere on the machine does not land on one env only. In a worker:

* the env is created; one warm-up episode (reset + ``--steps`` no-op steps) is run and discarded
  (it includes the browser launch; its first reset is reported as ``cold_start_ms``);
* then ``--episodes`` measured episodes: ``reset(seed=s)`` timed, then ``--steps`` no-op steps,
  each ``step()`` timed (an episode the page ends early stops there; with no-ops none should);
* every latency is one ``time.perf_counter()`` difference around the env's own ``reset``/``step``
  call on ``env.unwrapped`` (wall time including the observation the call returns);
* the env is closed.

Reported: the median over all measured resets and over all measured steps of all tasks (pooled),
the ratio peer/guigym of those medians (>1 means guigym is faster), per-task medians, where an env
reports it a breakdown of its step, and the machine (date, ``nproc``, CPU model, Chromium version,
load average before/after; the machine has 2 cores and may be shared, so load is printed).
Targets checked (printed PASS/FAIL, nothing is adjusted): guigym step >= 10x and reset >= 5x
faster than BrowserGym; step >= 2x faster than Farama and reset no slower than Farama.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

HERE = Path(__file__).resolve().parent
#: the venv scripts/install_browsergym_reference.sh builds (browsergym-core + browsergym-miniwob 0.14.3,
#: pinned), shared with tests/test_browsergym_compat.py
DEFAULT_VENV = Path(os.environ.get("GUIGYM_BROWSERGYM_VENV") or Path(os.environ.get(
    "XDG_CACHE_HOME", Path.home() / ".cache")) / "guigym" / "venvs" / "browsergym")
DEFAULT_TASKS = ("click-test", "click-button", "enter-text", "click-checkboxes")
SYSTEM_CHROMIUM = ("/usr/lib/chromium/chromium-headless-shell" if os.path.exists("/usr/lib/chromium/chromium-headless-shell")
                   else "/usr/bin/chromium")
SYSTEM_CHROMEDRIVER = "/usr/bin/chromedriver"
BROWSERGYM_SPEC = "browsergym-miniwob==0.14.3"
RESULT_MARK = "@@WEB_STEP_RESULT@@ "

#: rows of the table: (row name, worker kind, action override or None for the env's default no-op)
VARIANTS = {
    "guigym": ("guigym MiniWoB-v0 (clean)", "guigym", None),
    "guigym-context": ("guigym isolation=context [opt]", "guigym", None),
    "guigym-page": ("guigym isolation=page [opt]", "guigym", None),
    "farama": ("farama miniwob", "farama", None),
    "browsergym": ("browsergym noop()", "browsergym", "noop()"),
    "browsergym-noop0": ("browsergym noop(0) [diag]", "browsergym", "noop(wait_ms=0)"),
}
PEERS = ("farama", "browsergym", "browsergym-noop0")


# ================================================================================================
# workers (run in a child process; only stdlib is imported at module level so the BrowserGym venv
# can run this file too)
# ================================================================================================
def _median(xs: list[float]) -> Optional[float]:
    return statistics.median(xs) if xs else None


def _shape(a: Any) -> list[int]:
    return list(getattr(a, "shape", ()))


def _run_episodes(reset: Callable[[int], Any], step: Callable[[], tuple[Any, bool]], episodes: int,
                  steps: int, seed: int) -> dict[str, Any]:
    """Warm-up episode (discarded), then ``episodes`` measured ones. Returns the samples in ms."""
    out: dict[str, Any] = {"reset_ms": [], "step_ms": [], "episodes_ended_early": 0, "first_obs": None,
                           "cold_start_ms": None}
    for ep in range(episodes + 1):
        measured = ep > 0
        t0 = time.perf_counter()
        obs = reset(seed + ep)
        dt = (time.perf_counter() - t0) * 1e3
        if measured:
            out["reset_ms"].append(dt)
        elif out["cold_start_ms"] is None:
            out["cold_start_ms"] = dt
        for i in range(steps):
            t0 = time.perf_counter()
            obs, done = step()
            dt = (time.perf_counter() - t0) * 1e3
            if measured:
                out["step_ms"].append(dt)
                if out["first_obs"] is None:
                    out["first_obs"] = obs
            if done:
                if i < steps - 1 and measured:
                    out["episodes_ended_early"] += 1
                break
    return out


def _worker_guigym(task: str, args: argparse.Namespace) -> dict[str, Any]:
    import gymnasium as gym

    import guigym  # noqa: F401 - registers MiniWoB-v0

    action = args.action or "wait(seconds=0)"
    t0 = time.perf_counter()
    env = gym.make("MiniWoB-v0", task=task, **({"isolation": args.isolation} if args.isolation else {}))
    make_ms = (time.perf_counter() - t0) * 1e3
    u = env.unwrapped
    parts: dict[str, list[float]] = {"action_ms": [], "observe_ms": []}
    errors = []

    def reset(seed: int) -> Any:
        return u.reset(seed=seed)[0]

    def step() -> tuple[Any, bool]:
        obs, _r, term, trunc, info = u.step(action)
        if info.get("action_error"):
            errors.append(info["action_error"])
        # guigym's own split of the step (info["timings"] in older versions, env.timings in newer)
        tm = info.get("timings") or getattr(u, "timings", None) or {}
        if "action_s" in tm:
            parts["action_ms"].append(tm["action_s"] * 1e3)
        obs_s = tm.get("observe_s", info.get("observe_s"))
        if obs_s is not None:
            parts["observe_ms"].append(obs_s * 1e3)
        return obs, term or trunc

    try:
        res = _run_episodes(reset, step, args.episodes, args.steps, args.seed)
        version = u.controller.runtime.browser.version
    finally:
        env.close()
    obs = res.pop("first_obs")
    res.update(
        make_ms=make_ms, action=action, browser_version=version, action_errors=errors[:5],
        n_action_errors=len(errors),
        obs={"keys": sorted(obs), "screenshot": _shape(obs["screenshot"]), "a11y_chars": len(obs["a11y"])},
        breakdown_ms={k: _median(v[-len(res["step_ms"]):]) for k, v in parts.items() if v},
    )
    return res


def _worker_farama(task: str, args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("MINIWOB_CHROME_BINARY", SYSTEM_CHROMIUM)
    os.environ.setdefault("MINIWOB_CHROMEDRIVER", SYSTEM_CHROMEDRIVER)
    import gymnasium as gym

    import miniwob  # noqa: F401 - registers miniwob/*-v1
    from miniwob.action import ActionTypes

    t0 = time.perf_counter()
    env = gym.make(f"miniwob/{task}-v1")
    make_ms = (time.perf_counter() - t0) * 1e3
    u = env.unwrapped
    noop = u.create_action(ActionTypes.NONE)

    def reset(seed: int) -> Any:
        return u.reset(seed=seed)[0]

    def step() -> tuple[Any, bool]:
        obs, _r, term, trunc, _info = u.step(noop)
        return obs, term or trunc

    try:
        res = _run_episodes(reset, step, args.episodes, args.steps, args.seed)
        version = u.instance.driver.capabilities.get("browserVersion")
    finally:
        env.close()
    obs = res.pop("first_obs")
    res.update(
        make_ms=make_ms, action="create_action(ActionTypes.NONE)", browser_version=version,
        n_action_errors=0,
        obs={"keys": sorted(obs), "screenshot": _shape(obs["screenshot"]), "dom_elements": len(obs["dom_elements"])},
        breakdown_ms={},
    )
    return res


def _worker_browsergym(task: str, args: argparse.Namespace) -> dict[str, Any]:
    import logging

    logging.getLogger("browsergym").setLevel(logging.ERROR)
    import gymnasium as gym

    import browsergym.miniwob  # noqa: F401 - registers browsergym/miniwob.*

    action = args.action or "noop()"
    t0 = time.perf_counter()
    env = gym.make(f"browsergym/miniwob.{task}")
    make_ms = (time.perf_counter() - t0) * 1e3
    u = env.unwrapped
    parts: dict[str, list[float]] = {"action_ms": [], "pre_observation_wait_ms": [], "validate_ms": [],
                                     "observe_ms": []}
    errors = []

    def reset(seed: int) -> Any:
        return u.reset(seed=seed)[0]

    def step() -> tuple[Any, bool]:
        obs, _r, term, trunc, info = u.step(action)
        if obs.get("last_action_error"):
            errors.append(obs["last_action_error"])
        parts["action_ms"].append((info["action_exec_stop"] - info["action_exec_start"]) * 1e3)
        parts["pre_observation_wait_ms"].append(
            (info["wait_for_page_loading_stop"] - info["wait_for_page_loading_start"]) * 1e3)
        parts["validate_ms"].append((info["validation_stop"] - info["validation_start"]) * 1e3)
        parts["observe_ms"].append((info["get_observation_stop"] - info["get_observation_start"]) * 1e3)
        return obs, term or trunc

    try:
        res = _run_episodes(reset, step, args.episodes, args.steps, args.seed)
        version = u.browser.version
    finally:
        env.close()
        try:
            from browsergym.core import _get_global_playwright

            _get_global_playwright().stop()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass
    obs = res.pop("first_obs")
    n = len(res["step_ms"])
    res.update(
        make_ms=make_ms, action=action, browser_version=version, action_errors=errors[:5],
        n_action_errors=len(errors),
        obs={"keys": sorted(obs), "screenshot": _shape(obs["screenshot"]),
             "axtree_nodes": len(obs["axtree_object"].get("nodes", ())),
             "dom_strings": len(obs["dom_object"].get("strings", ()))},
        breakdown_ms={k: _median(v[-n:]) for k, v in parts.items()},
    )
    return res


def _worker_probe_playwright(args: argparse.Namespace) -> dict[str, Any]:
    """In the BrowserGym venv: symlink every Chromium path Playwright expects to the system one.

    Links ``chromium.executable_path`` and then whatever path a headless launch reports missing
    (e.g. a headless-shell build on newer Playwright), only inside ``PLAYWRIGHT_BROWSERS_PATH``.
    """
    from playwright.sync_api import sync_playwright

    root = os.path.abspath(os.environ["PLAYWRIGHT_BROWSERS_PATH"])
    target = args.chromium
    linked: list[str] = []

    def link(path: str) -> None:
        p = Path(os.path.abspath(path))
        if not str(p).startswith(root + os.sep):
            raise SystemExit(f"refusing to create {p}: outside PLAYWRIGHT_BROWSERS_PATH={root}")
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.is_symlink() or p.exists():
            if p.is_symlink() and os.readlink(p) == target:
                return
            p.unlink()
        p.symlink_to(target)
        linked.append(str(p))

    with sync_playwright() as pw:
        link(pw.chromium.executable_path)
        last = ""
        for _ in range(4):
            try:
                browser = pw.chromium.launch(headless=True)
            except Exception as exc:  # noqa: BLE001 - look for the path it wants
                last = str(exc)
                m = re.search(r"Executable doesn't exist at (\S+)", last)
                if not m:
                    raise
                link(m.group(1))
                continue
            version = browser.version
            browser.close()
            import importlib.metadata as md

            pkgs = {}
            for name in ("browsergym-core", "browsergym-miniwob", "playwright", "gymnasium"):
                try:
                    pkgs[name] = md.version(name)
                except md.PackageNotFoundError:
                    pkgs[name] = None
            return {"linked": linked, "executable_path": pw.chromium.executable_path,
                    "browser_version": version, "packages": pkgs}
        raise SystemExit(f"could not launch Playwright's chromium: {last}")


def worker_main(args: argparse.Namespace) -> None:
    if args.worker == "probe-playwright":
        res = _worker_probe_playwright(args)
    else:
        fn = {"guigym": _worker_guigym, "farama": _worker_farama, "browsergym": _worker_browsergym}[args.worker]
        res = fn(args.task, args)
        res.update(env=args.worker, task=args.task, python=sys.version.split()[0])
    sys.stdout.flush()
    print(RESULT_MARK + json.dumps(res), flush=True)


# ================================================================================================
# driver
# ================================================================================================
def _run_child(cmd: list[str], env: dict[str, str], timeout_s: float, what: str) -> dict[str, Any]:
    """Run a worker in its own session; return its JSON result or raise RuntimeError with its stderr."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # the worker's own process group: it and the browsers it started
            proc.communicate()
            raise RuntimeError(f"{what}: timed out after {timeout_s:.0f} s") from None
        err.seek(0)
        stderr = err.read()
    for line in reversed(out.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK):])
    tail = "\n".join((stderr.strip().splitlines() or ["(no stderr)"])[-15:])
    raise RuntimeError(f"{what}: exit code {proc.returncode}, no result\n{tail}")


def miniwob_url() -> str:
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the `miniwob` package is not installed in this Python")
    html = Path(list(spec.submodule_search_locations)[0]) / "html" / "miniwob"
    return html.as_uri() + "/"


def ensure_browsergym_venv(venv: Path, spec: str, chromium: str) -> tuple[Path, dict[str, str], dict[str, Any]]:
    """Create the venv and install BrowserGym when missing; link Playwright to the system Chromium.

    Returns (venv python, environment for BrowserGym workers, probe result).
    """
    py = venv / "bin" / "python"
    if not py.exists():
        print(f"[setup] creating venv {venv}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    probe = subprocess.run([str(py), "-c", "import browsergym.miniwob, playwright"], capture_output=True)
    if probe.returncode != 0:
        print(f"[setup] pip install {spec} into {venv} (not the system Python)", flush=True)
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", spec], check=True)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env["PLAYWRIGHT_BROWSERS_PATH"] = str(venv / "ms-playwright")
    env["MINIWOB_URL"] = miniwob_url()
    res = _run_child([str(py), str(Path(__file__).resolve()), "--worker", "probe-playwright", "--chromium", chromium],
                     env, 300, "linking BrowserGym's Playwright to the system Chromium")
    return py, env, res


def _cmd_output(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def machine_info(chromium: str) -> dict[str, Any]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import importlib.metadata as md

    pkgs = {}
    for name in ("guigym", "miniwob", "selenium", "playwright", "gymnasium"):
        try:
            pkgs[name] = md.version(name)
        except md.PackageNotFoundError:
            pkgs[name] = None
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "nproc": _cmd_output(["nproc"]) or str(os.cpu_count()),
        "cpu_model": cpu,
        "chromium": _cmd_output([chromium, "--version"]),
        "chromedriver": _cmd_output([SYSTEM_CHROMEDRIVER, "--version"]).split(" (")[0],
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "system_packages": pkgs,
        "loadavg_start": list(os.getloadavg()),
    }


def _fmt(x: Optional[float], nd: int = 1) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def _ratio(peer: Optional[float], base: Optional[float]) -> Optional[float]:
    if peer is None or not base:
        return None
    return peer / base


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    summary: dict[str, dict[str, Any]] = {}
    for key, rs in runs.items():
        resets = [x for r in rs for x in r["reset_ms"]]
        steps = [x for r in rs for x in r["step_ms"]]
        parts: dict[str, list[float]] = {}
        for r in rs:
            for k, v in r.get("breakdown_ms", {}).items():
                if v is not None:
                    parts.setdefault(k, []).append(v)

        def q(xs: list[float], p: float) -> Optional[float]:
            if len(xs) < 2:
                return xs[0] if xs else None
            return statistics.quantiles(xs, n=100, method="inclusive")[int(p) - 1]

        summary[key] = {
            "reset_median_ms": _median(resets), "step_median_ms": _median(steps),
            "reset_p90_ms": q(resets, 90), "step_p90_ms": q(steps, 90),
            "n_resets": len(resets), "n_steps": len(steps),
            "cold_start_median_ms": _median([r["cold_start_ms"] for r in rs if r.get("cold_start_ms") is not None]),
            "per_task": {r["task"]: {"reset_median_ms": _median(r["reset_ms"]), "step_median_ms": _median(r["step_ms"])}
                         for r in rs},
            "step_breakdown_median_of_task_medians_ms": {k: _median(v) for k, v in parts.items()},
            "n_action_errors": sum(r.get("n_action_errors", 0) for r in rs),
            "episodes_ended_early": sum(r.get("episodes_ended_early", 0) for r in rs),
            "browser_versions": sorted({str(r.get("browser_version")) for r in rs}),
            "obs": rs[0]["obs"] if rs else None,
            "action": rs[0]["action"] if rs else None,
        }
    return summary


def print_report(info: dict[str, Any], summary: dict[str, dict[str, Any]], failures: dict[str, str],
                 keys: list[str], tasks: list[str], args: argparse.Namespace) -> dict[str, Any]:
    print()
    print(f"MiniWoB++ step/reset latency -- {info['date']}")
    print(f"machine: nproc={info['nproc']}  cpu={info['cpu_model']}  {info['chromium']}  "
          f"(chromedriver {info['chromedriver'].replace('ChromeDriver ', '')})")
    la0, la1 = info["loadavg_start"], info.get("loadavg_end", [float("nan")] * 3)
    print(f"load average (1/5/15 min): start {la0[0]:.2f}/{la0[1]:.2f}/{la0[2]:.2f}, "
          f"end {la1[0]:.2f}/{la1[1]:.2f}/{la1[2]:.2f}")
    print(f"tasks: {', '.join(tasks)}; per task: 1 warm-up episode + {args.episodes} measured episodes "
          f"x {args.steps} no-op steps; medians pooled over tasks")
    print()
    base = summary.get("guigym", {})
    header = ["env", "reset median ms", "step median ms", "reset ratio (peer/guigym)", "step ratio (peer/guigym)",
              "reset p90 ms", "step p90 ms", "n resets/steps"]
    rows = []
    for key in keys:
        name = VARIANTS[key][0]
        if key in failures:
            rows.append([name, "FAILED", "", "", "", "", "", ""])
            continue
        s = summary[key]
        rr = _ratio(s["reset_median_ms"], base.get("reset_median_ms")) if key != "guigym" else 1.0
        sr = _ratio(s["step_median_ms"], base.get("step_median_ms")) if key != "guigym" else 1.0
        rows.append([name, _fmt(s["reset_median_ms"]), _fmt(s["step_median_ms"]),
                     "-" if rr is None else f"{rr:.2f}x", "-" if sr is None else f"{sr:.2f}x",
                     _fmt(s["reset_p90_ms"]), _fmt(s["step_p90_ms"]), f"{s['n_resets']}/{s['n_steps']}"])
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: " | ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    print(line(header))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(line(r))

    # per-task medians
    print()
    print("per task (reset / step median ms):")
    ok_keys = [k for k in keys if k not in failures]
    th = ["task"] + [VARIANTS[k][0] for k in ok_keys]
    trows = [[t] + [f"{_fmt(summary[k]['per_task'].get(t, {}).get('reset_median_ms'))} / "
                    f"{_fmt(summary[k]['per_task'].get(t, {}).get('step_median_ms'))}" for k in ok_keys]
             for t in tasks]
    tw = [max(len(str(r[i])) for r in trows + [th]) for i in range(len(th))]
    print("  " + " | ".join(str(c).ljust(w) for c, w in zip(th, tw)))
    for r in trows:
        print("  " + " | ".join(str(c).ljust(w) for c, w in zip(r, tw)))

    print()
    print("what each env observed and did:")
    for key in ok_keys:
        s = summary[key]
        bd = s["step_breakdown_median_of_task_medians_ms"]
        bd_s = (", step breakdown " + ", ".join(f"{k}={_fmt(v)}" for k, v in bd.items())) if bd else ""
        print(f"  {VARIANTS[key][0]}: action {s['action']!r}; obs {json.dumps(s['obs'])}; "
              f"cold start (launch + 1st reset) {_fmt(s['cold_start_median_ms'])} ms; browser {', '.join(s['browser_versions'])}; "
              f"action errors {s['n_action_errors']}, episodes ended early {s['episodes_ended_early']}{bd_s}")
    for key, msg in failures.items():
        print(f"  {VARIANTS[key][0]}: FAILED: {msg}")

    # targets
    def target(name: str, peer: str, metric: str, need: float, base: str = "guigym") -> dict[str, Any]:
        if peer in failures or base in failures or peer not in summary or base not in summary:
            return {"target": name, "ratio": None, "need": need, "result": "n/a"}
        r = _ratio(summary[peer][metric], summary[base][metric])
        return {"target": name, "ratio": r, "need": need, "result": "n/a" if r is None else ("PASS" if r >= need else "FAIL")}

    targets = [
        target("guigym step >= 10x faster than BrowserGym", "browsergym", "step_median_ms", 10.0),
        target("guigym reset >= 5x faster than BrowserGym", "browsergym", "reset_median_ms", 5.0),
        target("guigym step >= 2x faster than Farama", "farama", "step_median_ms", 2.0),
        target("guigym reset no slower than Farama", "farama", "reset_median_ms", 1.0),
        # the fresh-context mode, and like for like: Farama restarts the task inside the open page,
        # as isolation="page" does (no isolation between episodes; see docs/benchmarks.md)
        target("guigym[context] step >= 2x faster than Farama", "farama", "step_median_ms", 2.0, "guigym-context"),
        target("guigym[context] reset no slower than Farama", "farama", "reset_median_ms", 1.0, "guigym-context"),
        target("guigym[page] step >= 2x faster than Farama", "farama", "step_median_ms", 2.0, "guigym-page"),
        target("guigym[page] reset no slower than Farama", "farama", "reset_median_ms", 1.0, "guigym-page"),
    ]
    print()
    print("targets (ratio = peer median / guigym median):")
    for t in targets:
        r = "-" if t["ratio"] is None else f"{t['ratio']:.2f}x"
        print(f"  {t['target']:<48} {r:>9} (need >= {t['need']:g}x)  {t['result']}")
    if "browsergym-noop0" in summary and "browsergym-noop0" not in failures and "guigym" in summary:
        s = summary["browsergym-noop0"]
        print(f"  (diagnostic, not a target: vs BrowserGym with noop(wait_ms=0): step "
              f"{_fmt(_ratio(s['step_median_ms'], summary['guigym']['step_median_ms']), 2)}x, reset "
              f"{_fmt(_ratio(s['reset_median_ms'], summary['guigym']['reset_median_ms']), 2)}x)")
    return {"targets": targets}


def driver_main(args: argparse.Namespace) -> int:
    keys = [k.strip() for k in args.envs.split(",") if k.strip()]
    unknown = [k for k in keys if k not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown env(s) {unknown}; choose from {list(VARIANTS)}")
    if "guigym" not in keys:
        keys.insert(0, "guigym")
    tasks = list(args.tasks)
    info = machine_info(args.chromium)
    me = str(Path(__file__).resolve())

    base_env = dict(os.environ)
    base_env.pop("PLAYWRIGHT_BROWSERS_PATH", None)  # guigym: system Playwright, finds /usr/bin/chromium itself
    base_env.setdefault("MINIWOB_CHROME_BINARY", args.chromium)
    base_env.setdefault("MINIWOB_CHROMEDRIVER", SYSTEM_CHROMEDRIVER)
    pythons = {"guigym": sys.executable, "farama": sys.executable}
    envs = {"guigym": base_env, "farama": base_env}
    failures: dict[str, str] = {}
    if any(VARIANTS[k][1] == "browsergym" for k in keys):
        try:
            py, bg_env, probe = ensure_browsergym_venv(Path(args.venv), args.browsergym_spec, args.chromium)
            pythons["browsergym"], envs["browsergym"] = str(py), bg_env
            info["browsergym_venv"] = {"path": str(args.venv), "miniwob_url": bg_env["MINIWOB_URL"], **probe}
            print(f"[setup] BrowserGym venv ready: {probe['packages']}; Playwright's chromium path "
                  f"{probe['executable_path']} -> {args.chromium} (Chromium {probe['browser_version']})", flush=True)
        except (RuntimeError, subprocess.CalledProcessError, OSError) as exc:
            for k in keys:
                if VARIANTS[k][1] == "browsergym":
                    failures[k] = f"setup: {exc}"

    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in keys}
    t_start = time.perf_counter()
    for ti, task in enumerate(tasks):
        order = keys[ti % len(keys):] + keys[:ti % len(keys)]
        for key in order:
            if key in failures:
                continue
            kind, action = VARIANTS[key][1], VARIANTS[key][2]
            cmd = [pythons[kind], me, "--worker", kind, "--task", task, "--episodes", str(args.episodes),
                   "--steps", str(args.steps), "--seed", str(args.seed)]
            if action:
                cmd += ["--action", action]
            if key in ("guigym-page", "guigym-context"):
                cmd += ["--isolation", key.split("-", 1)[1]]
            t0 = time.perf_counter()
            try:
                res = _run_child(cmd, envs[kind], args.worker_timeout, f"{key} on {task}")
            except RuntimeError as exc:
                failures[key] = str(exc)
                print(f"[run] {key:<17} {task:<17} FAILED: {exc}", flush=True)
                continue
            runs[key].append(res)
            print(f"[run] {key:<17} {task:<17} reset median {_fmt(_median(res['reset_ms'])):>8} ms, "
                  f"step median {_fmt(_median(res['step_ms'])):>8} ms  ({time.perf_counter() - t0:.0f} s)", flush=True)
    info["loadavg_end"] = list(os.getloadavg())
    info["wall_s"] = time.perf_counter() - t_start

    summary = summarize({k: v for k, v in runs.items() if k not in failures})
    report = print_report(info, summary, failures, keys, tasks, args)
    if args.json:
        doc = {"machine": info, "config": {"tasks": tasks, "episodes": args.episodes, "steps": args.steps,
                                           "seed": args.seed, "envs": keys},
               "summary": summary, "failures": failures, "targets": report["targets"],
               "runs": runs}
        Path(args.json).write_text(json.dumps(doc, indent=2))
        print(f"\nwrote {args.json}")
    if failures:
        return 1
    if args.strict and any(t["result"] != "PASS" for t in report["targets"]):
        return 2
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS), help="MiniWoB task names")
    ap.add_argument("--episodes", type=int, default=3, help="measured episodes per task and env (after 1 warm-up)")
    ap.add_argument("--steps", type=int, default=10, help="no-op steps per episode")
    ap.add_argument("--seed", type=int, default=0, help="seed of the warm-up episode; episode i uses seed+i")
    ap.add_argument("--envs", default="guigym,guigym-context,guigym-page,farama,browsergym,browsergym-noop0",
                    help=f"comma-separated rows to run, from {list(VARIANTS)} (guigym always runs)")
    ap.add_argument("--json", metavar="PATH", help="also write all numbers to this JSON file")
    ap.add_argument("--venv", default=str(DEFAULT_VENV), help="BrowserGym's venv (created when missing)")
    ap.add_argument("--browsergym-spec", default=BROWSERGYM_SPEC, help="pip requirement installed into the venv")
    ap.add_argument("--chromium", default=SYSTEM_CHROMIUM, help="the Chromium every env uses")
    ap.add_argument("--worker-timeout", type=float, default=1800, help="seconds one (env, task) worker may take")
    ap.add_argument("--strict", action="store_true", help="exit 2 when a target is not met")
    # internal
    ap.add_argument("--isolation", default=None, help=argparse.SUPPRESS)  # None: the env's default
    ap.add_argument("--worker", choices=["guigym", "farama", "browsergym", "probe-playwright"], help=argparse.SUPPRESS)
    ap.add_argument("--task", help=argparse.SUPPRESS)
    ap.add_argument("--action", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.episodes < 1 or args.steps < 1:
        ap.error("--episodes and --steps must be >= 1")
    if args.worker:
        worker_main(args)
        return 0
    return driver_main(args)


if __name__ == "__main__":
    sys.exit(main())
