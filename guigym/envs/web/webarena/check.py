"""``guigym tasks check --env WebArena-v0``: no-op scores 0, the reference solution scores 1.

    guigym tasks check --env WebArena-v0 [--tasks FILE] [--references FILE] [--task ID ...]
                       [--url SITE=URL ...] [--embedded NAME|all [--available]] [--evaluator webarena|webarena-lite]
                       [--max-steps N] [--json PATH]

``FILE`` is a WebArena config file (``test.raw.json`` format, unmodified); the reference
solutions come from ``reference_solutions.json`` next to it unless ``--references`` names
another file (format: reference.py). Site URLs: ``--url shopping=http://...`` over the ``WA_*``
variables; ``--embedded NAME`` starts an embedded site (sites/__init__.py, e.g. ``fossil`` for the
``gitlab`` key) in a temporary directory, restored to its seed at every reset; without ``--tasks``
the suites written for the named sites are checked (``--embedded all``, the default: every
site; one this machine cannot run is reported as skipped with its reason and makes the exit
status 2, unless ``--available`` asked for only the sites that can run). One env (one Chromium)
per suite runs every task in turn, each episode in a fresh browser context. Per task:

* no-op: reset, then ``stop []`` at once (no action, no answer) -> must score 0;
* reference: :class:`~guigym.envs.web.webarena.reference.ReferenceAgent` plays the task's
  solution from the observations -> must score 1.

A task whose evaluation is unscorable (``fuzzy_match`` with no judge) is reported as such: it
was not checked. Exit status: 0 all good; 1 any mismatch (a no-op above 0, a reference below 1,
a task without a reference); 2 no mismatch but some task could not be checked (infrastructure
or unscorable).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from guigym.core.errors import ConfigError, EnvInfraError, GuigymError, TaskSpecError
from guigym.core.task import Task
from guigym.envs.check_table import check_all, fmt_score
from guigym.envs.check_table import exit_code as check_exit_code
from guigym.envs.web.webarena.reference import FILE_NAME, ReferenceAgent, load_references
from guigym.envs.web.webarena.sites import EMBEDDED, select, suite_task_count


@dataclass
class Row:
    """One task's result: ``status`` is ok, mismatch, unscorable or infra."""

    task: str
    sites: str
    noop: Optional[float] = None
    reference: Optional[float] = None
    status: str = "ok"
    reason: str = ""
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)


class NoopAgent:
    """Stops at once without acting or answering."""

    name = "noop"

    def reset(self, info: Mapping[str, Any]) -> None:
        pass

    def act(self, obs: Mapping[str, Any]) -> str:
        return "stop []"


def run_episode(env: Any, task: Task, agent: Any) -> tuple[Optional[float], dict[str, Any]]:
    """One episode; (score, last info). The score is None when the evaluation was unscorable."""
    obs, info = env.reset(options={"task": task.id})
    agent.reset(info)
    while True:
        obs, reward, terminated, truncated, info = env.step(agent.act(obs))
        if terminated or truncated:
            return (None if info.get("unscorable") else float(reward)), info


def _why(info: Mapping[str, Any]) -> str:
    v = info.get("verifier") or {}
    return str(v.get("unscorable_reason") or v.get("checks") or "")[:300]


def check_task(env: Any, task: Task, steps: Optional[Sequence[Any]]) -> Row:
    """The no-op and reference episodes of ``task`` (``steps``: its reference solution or None)."""
    cfg = task.extra.get("webarena_config", {})
    row = Row(task=task.id, sites="+".join(cfg.get("sites", [])))
    t0 = time.perf_counter()
    try:
        row.noop, info = run_episode(env, task, NoopAgent())
        row.details["noop"] = _why(info)
        if not steps:
            row.status, row.reason = "mismatch", f"task {task.id} has no reference solution"
            return row
        agent = ReferenceAgent(steps)
        row.reference, info = run_episode(env, task, agent)
        row.details["reference"] = agent.error or _why(info)
        if row.noop is None or row.reference is None:
            row.status, row.reason = "unscorable", f"the evaluation is unscorable: {_why(info)}"
            return row
        bad = []
        if row.noop > 0:
            bad.append(f"no-op scored {row.noop:g} ({row.details['noop']})")
        if row.reference < 1:
            bad.append(f"reference scored {row.reference:g} ({row.details['reference']})")
        if bad:
            row.status, row.reason = "mismatch", "; ".join(bad)
    except (EnvInfraError, TaskSpecError) as e:
        row.status, row.reason = "infra", f"{type(e).__name__}: {e}"
    finally:
        row.seconds = time.perf_counter() - t0
    return row


def run_check(config_file: str | Path, references: Mapping[int, Sequence[Any]], task_ids: Optional[Sequence[int]] = None,
              urls: Optional[Mapping[str, str]] = None, out: Any = None, **env_kwargs: Any) -> list[Row]:
    """Check the tasks of ``config_file`` (all, or ``task_ids``) on one WebArenaEnv."""
    from guigym.envs.web.webarena.env import WebArenaEnv

    env = WebArenaEnv(config_file=config_file, task_ids=task_ids, urls=urls, **env_kwargs)
    return check_all(env, env.tasks,
                     lambda task: check_task(env, task, references.get(task.extra["webarena_config"]["task_id"])),
                     _line, out)


_HEADER = f"{'task':<20} {'sites':<24} {'noop':>5} {'ref':>5} {'status':<10} {'secs':>6}  reason"


def _line(row: Row) -> str:
    return (f"{row.task:<20} {row.sites:<24} {fmt_score(row.noop):>5} {fmt_score(row.reference):>5} "
            f"{row.status:<10} {row.seconds:>6.1f}  {row.reason}")


def exit_code(rows: Sequence[Row]) -> int:
    return check_exit_code([r.status for r in rows], infra=("infra", "unscorable"))


def _urls(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        site, sep, url = item.partition("=")
        if not sep or not site or not url:
            raise ConfigError(f"--url expects SITE=URL (e.g. shopping=http://127.0.0.1:7770), got {item!r}")
        out[site] = url
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="guigym tasks check --env WebArena-v0", description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default=None, metavar="FILE",
                   help="WebArena config JSON (a list, one object, or .gz); default: the suites of --embedded")
    p.add_argument("--references", default=None, metavar="FILE",
                   help=f"reference solutions (default: {FILE_NAME} next to --tasks)")
    p.add_argument("--task", nargs="+", type=int, default=None, metavar="ID", help="only these task_ids")
    p.add_argument("--url", action="append", default=[], metavar="SITE=URL",
                   help="site base URL (shopping, shopping_admin, reddit, gitlab, wikipedia, map, homepage); "
                        "repeatable; default: the WA_* variables")
    p.add_argument("--embedded", action="append", default=[], choices=[*EMBEDDED, "all"],
                   help="start this embedded site (sites/__init__.py) for the check, restored to its seed at "
                        "every reset; its URL wins over --url; 'all' = every one (see --available); repeatable")
    p.add_argument("--available", action="store_true",
                   help="check only the named sites this machine can run; without it a site that cannot run is "
                        "reported as skipped and the exit status is 2")
    p.add_argument("--evaluator", default="webarena", choices=["webarena", "webarena-lite"])
    p.add_argument("--max-steps", type=int, default=30, help="step budget of a reference episode")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the rows as JSON")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``guigym tasks check --env WebArena-v0``; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        names, skipped = select(args.embedded or ([] if args.tasks else ["all"]))  # default: every site
        skipped_tasks = 0
        for name, why in skipped.items():
            n = suite_task_count(name)
            skipped_tasks += n
            print(f"skipped: embedded site {name} ({n} tasks): cannot run here, {why}", file=sys.stderr, flush=True)
        if args.tasks is None and not names:
            raise ConfigError("--tasks FILE is needed unless --embedded names the sites whose suites to check"
                              + (" (none of them can run here, see above)" if skipped else ""))
        suites = [Path(args.tasks)] if args.tasks else [EMBEDDED[n].suite for n in names]
        if args.references and len(suites) > 1:
            raise ConfigError("--references goes with one --tasks file")
        urls = _urls(args.url)
        print(_HEADER, flush=True)
        t0 = time.perf_counter()
        rows: list[Row] = []
        for suite in suites:
            refs = load_references(Path(args.references) if args.references else suite.with_name(FILE_NAME))
            rows += run_check(suite, refs, task_ids=args.task, urls=urls, out=sys.stdout, evaluator=args.evaluator,
                              max_steps=args.max_steps, embedded=names or None)
    except GuigymError as e:
        print(f"guigym tasks check: {e}", file=sys.stderr)
        return 2
    counts: dict[str, int] = {"tasks": len(rows)}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    if skipped_tasks:  # "all" means all: what did not run is counted, never left out
        counts["skipped"] = skipped_tasks
    print(f"\n{', '.join(f'{k}: {v}' for k, v in counts.items())} in {time.perf_counter() - t0:.0f} s", flush=True)
    if args.json:
        tmp = Path(args.json + ".tmp")
        tmp.write_text(json.dumps([asdict(r) for r in rows], indent=1))
        os.replace(tmp, args.json)
    code = exit_code(rows)
    if skipped and not args.available and code == 0:
        print(f"{skipped_tasks} tasks of {len(skipped)} sites were not checked (skipped above); --available checks "
              "only what can run here", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
