"""How many of OSWorld's offline test_all tasks set up and evaluate here (issue 17, done-when 2).

    python3 bench/osworld_offline_count.py --tasks /path/to/evaluation_examples
        [--domain os chrome ...] [--provider local] [--json rows.json] [--list]

1. Select: ``guigym tasks coverage``'s static audit (envs/desktop/coverage.py) of the index's
   tasks (``test_all.json``), keeping those that download nothing (no ``download`` step, no
   ``cloud_file`` getter) and open no live web page (no live url, no network program such as
   ``apt``): the tasks that could run with no network and an empty cache.
2. Run: ``guigym tasks check --noop-only`` on them (envs/desktop/check.py; one desktop reused,
   tasks in turn, never in parallel): per task the setup, then ``done()`` at once, then the
   postconfig and the verifier. A task either *ran* (set up + evaluated; its no-op score is
   recorded) or *failed* with the reason naming what is missing (a program, a GSettings schema,
   a setup type, ...).
3. Count: per domain, selected / ran / no-op 0 / no-op 1 / failed, the tasks a no-op solves (with
   whether the task is infeasible-by-design) and the failures grouped by what is missing.

``--list`` only prints the selection (no desktop). The CPU cost is one desktop plus each task's
apps; the 66 tasks of OSWorld's test_all take about 4 minutes of wall time on a busy 2-core machine.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from guigym.core.errors import GuigymError  # noqa: E402
from guigym.envs.desktop.check import Row, run_check  # noqa: E402
from guigym.envs.desktop.coverage import TaskAudit, audit_dir  # noqa: E402
from guigym.envs.desktop.tasks import load_osworld_task  # noqa: E402

#: what a failure reason names, most specific first: (regex, label template)
_MISSING = [
    (re.compile(r"missing program '([^']+)'"), "program {}"),
    (re.compile(r"missing GSettings schema '([^']+)'"), "GSettings schema {}"),
    (re.compile(r"setup step '([^']+)'"), "setup step {}"),
    (re.compile(r"metric '([^']+)' is not implemented"), "metric {}"),
    (re.compile(r"getter '([^']+)' is not implemented"), "getter {}"),
    (re.compile(r"\[missing: ([^\]]+)\]"), "{}"),
]


def offline(audit: TaskAudit) -> bool:
    """No downloads, no live urls, nothing else that needs the network."""
    return not audit.downloads and not audit.live_urls and not audit.blocked.get("network")


def select(tasks_dir: Path, domains: Optional[Sequence[str]] = None) -> list[TaskAudit]:
    """The offline tasks of the index under ``tasks_dir`` (optionally only ``domains``)."""
    from guigym.envs.desktop.cache import default_cache_dir

    audits = [a for a in audit_dir(tasks_dir, default_cache_dir()) if offline(a) and "invalid" not in a.blocked]
    return [a for a in audits if not domains or a.domain in domains]


def missing_items(reason: str) -> list[str]:
    """What a failed row's reason names as missing (the reason itself when nothing matches)."""
    found: list[str] = []
    for pat, label in _MISSING:
        for m in pat.finditer(reason):
            item = label.format(m.group(1))
            if item not in found:
                found.append(item)
    return found or [reason[:120]]


def count(rows: Sequence[Row], infeasible: set[str]) -> dict[str, Any]:
    """``{"domains": {d: {selected, ran, noop_0, noop_1, failed}}, "total": {...},
    "noop_1": [{task, domain, infeasible}], "missing": {item: n tasks}}``."""
    domains: dict[str, Counter] = defaultdict(Counter)
    solved: list[dict[str, Any]] = []
    missing: Counter = Counter()
    for r in rows:
        c = domains[r.domain]
        c["selected"] += 1
        if r.status == "ran" and r.noop is not None:
            c["ran"] += 1
            c["noop_1" if r.noop >= 1 else "noop_0"] += 1
            if r.noop >= 1:
                solved.append({"task": r.task, "domain": r.domain, "infeasible": r.task in infeasible})
        else:
            c["failed"] += 1
            missing.update(missing_items(r.reason))
    keys = ("selected", "ran", "noop_0", "noop_1", "failed")
    table = {d: {k: c[k] for k in keys} for d, c in sorted(domains.items())}
    total = {k: sum(v[k] for v in table.values()) for k in keys}
    return {"domains": table, "total": total, "noop_1": solved, "missing": dict(missing.most_common())}


def render(doc: dict[str, Any]) -> str:
    """The count as a markdown table plus the no-op solves and what is missing."""
    lines = ["| domain | selected | set up + evaluated | no-op 0 | no-op 1 | failed |",
             "|---|---:|---:|---:|---:|---:|"]
    for d, v in [*doc["domains"].items(), ("**total**", doc["total"])]:
        lines.append(f"| {d} | {v['selected']} | {v['ran']} | {v['noop_0']} | {v['noop_1']} | {v['failed']} |")
    if doc["noop_1"]:
        lines.append("\nno-op scored 1: " + ", ".join(
            f"{s['domain']}/{s['task'][:8]} ({'infeasible-by-design' if s['infeasible'] else 'feasible'})"
            for s in doc["noop_1"]))
    if doc["missing"]:
        lines.append("\nfailed because missing (tasks): " + ", ".join(f"{k} ({n})" for k, n in doc["missing"].items()))
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", required=True, help="OSWorld evaluation_examples dir (with test_all.json) or an index")
    p.add_argument("--domain", nargs="+", default=None, help="only these domains")
    p.add_argument("--provider", default="local", help="desktop provider (default: the local sandbox)")
    p.add_argument("--json", default=None, metavar="PATH", help="write the rows and the count as JSON")
    p.add_argument("--list", action="store_true", help="only print the selected tasks (no desktop)")
    args = p.parse_args(argv)
    try:
        audits = select(Path(args.tasks), args.domain)
        tasks = [load_osworld_task(a.path, domain=a.domain) for a in audits]
    except GuigymError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{len(tasks)} offline tasks: " + ", ".join(f"{d} {n}" for d, n in sorted(Counter(a.domain for a in audits).items())))
    if args.list:
        for a in audits:
            print(f"{a.domain:<20} {a.id}")
        return 0
    rows = run_check(tasks, provider=args.provider, noop_only=True, out=sys.stdout)
    infeasible = {t.id for t in tasks if t.evaluator.get("func") == "infeasible"}
    doc = count(rows, infeasible)
    print("\n" + render(doc))
    if args.json:
        Path(args.json).write_text(json.dumps({"count": doc, "rows": [asdict(r) for r in rows]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
