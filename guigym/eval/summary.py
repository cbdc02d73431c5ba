"""Aggregate results.jsonl records into overall, per-domain and per-task tables.

Success rate (SR), mean score, mean steps and pass@k count scored episodes (``status="done"``)
only: ``episodes`` is their number. Lost episodes (infrastructure failures) and unscorable ones
(ran to their end, but the verifier could not score them, e.g. WebArena's ``fuzzy_match`` without
an LLM judge) are counted separately in ``lost`` and ``unscorable`` and are never failures or
successes. pass@k: a (task, seed) counts as solved when any of its scored attempts succeeded.

AndroidLab's metrics (Xu et al., 2024, "AndroidLab", section 3.3), reported where the records
carry what they need (otherwise None):

* Sub-Goal SR: mean sub-goal score, from ``verifier["subgoal_score"]`` or ``verifier["subgoals"]``
  (a list of bools or AndroidLab's ``{key: bool}``; see :func:`_subgoal_score`).
* RRR (Reversed Redundancy Ratio): reference length / agent steps, averaged over successful
  episodes of tasks with a reference length (AndroidLab-v0: the human step counts of AndroidLab's
  ``ground_truth_length.json``; elsewhere the task's reference plan). Higher = fewer wasted steps.
* ROR (Reasonable Operation Ratio): per episode, ``1 - same / (N - 1)`` over its N steps, where
  ``same`` counts the steps among the first N - 2 after which the screen stayed the same
  (AndroidLab's screenshot similarity above 0.999, :func:`episode_ror`); 1 for a one-step episode.
  Averaged over scored episodes (records from before ``ror`` was recorded fall back to the share
  of operations that changed the screen).

AndroidWorld's difficulty (easy / medium / hard, its ``task_metadata.json``) groups the records
that carry one into ``per_difficulty``, as AndroidWorld's paper tables report SR.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Optional, Sequence

#: statuses of an episode that ran to its end; "unscorable" ones have score and success None
FINISHED = ("done", "unscorable")


def latest_records(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """One record per episode key; a finished record (scored or unscorable) wins over a lost one,
    and the first finished one is kept."""
    by_key: dict[str, dict[str, Any]] = {}
    for r in records:
        old = by_key.get(r["key"])
        if old is None or (old.get("status") not in FINISHED and r.get("status") in FINISHED):
            by_key[r["key"]] = r
    return by_key


def unfinished(records: Iterable[dict[str, Any]], keys: Iterable[str]) -> tuple[int, dict[str, int]]:
    """Episodes of ``keys`` with no finished record, and their causes: the first line of their
    lost record's error (at most 160 characters) -> count; ``"not run"`` for keys with
    no record at all (e.g. a run stopped early)."""
    latest = latest_records(records)
    causes: dict[str, int] = defaultdict(int)
    n = 0
    for key in keys:
        r = latest.get(key)
        if r is not None and r.get("status") in FINISHED:
            continue
        n += 1
        cause = "not run" if r is None else (str(r.get("error") or "lost").strip().splitlines() or ["lost"])[0][:160]
        causes[cause] += 1
    return n, dict(sorted(causes.items(), key=lambda kv: -kv[1]))


def episode_stats(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """Scored episodes, lost, unscorable, success rate, mean score, mean steps and pass@k of a
    group of records (see the module docstring)."""
    done = [r for r in rs if r.get("status") == "done"]
    unscorable = sum(r.get("status") == "unscorable" for r in rs)
    lost = len(rs) - len(done) - unscorable
    n = len(done)
    solved: dict[tuple[str, int], bool] = defaultdict(bool)
    for r in done:
        solved[(r["task_id"], r["seed"])] |= bool(r.get("success"))
    return {
        "episodes": n,
        "lost": lost,
        "unscorable": unscorable,
        "success_rate": (sum(bool(r.get("success")) for r in done) / n) if n else None,
        "mean_score": (sum(float(r.get("score", 0.0)) for r in done) / n) if n else None,
        "mean_steps": (sum(int(r.get("steps", 0)) for r in done) / n) if n else None,
        "pass_at_k": (sum(solved.values()) / len(solved)) if solved else None,
        **androidlab_stats(done),
    }


def _subgoal_score(verifier: dict[str, Any]) -> Any:
    """One episode's sub-goal score: the verifier's ``subgoal_score`` (AndroidLab-v0: 1 when the task
    is complete, else the share of sub-goals met), else the share of true ``subgoals`` (a list of
    bools, or AndroidLab's ``{key: bool}``); None when it has neither."""
    if isinstance(verifier.get("subgoal_score"), (int, float)):
        return float(verifier["subgoal_score"])
    goals = verifier.get("subgoals")
    values = list(goals.values()) if isinstance(goals, dict) else goals
    if not values or not isinstance(values, list):
        return None
    return sum(map(bool, values)) / len(values)


def episode_ror(unchanged: Sequence[Optional[bool]]) -> Optional[float]:
    """AndroidLab's ROR of one episode (Xu et al. 2024, section 3.3; its ``add_metrics``).

    ``unchanged[i]``: the screen after step ``i`` was (near-)identical to the one before it (None:
    not known, counted as changed). AndroidLab compares consecutive screenshots of the trace
    without its last one, so of N steps only the first N - 2 can count as no-ops, and divides by
    N - 1: ``1 - sum(unchanged[:N-2]) / (N - 1)``; 1 for N = 1, None for an episode without steps.
    """
    n = len(unchanged)
    if n == 0:
        return None
    if n == 1:
        return 1.0
    return 1.0 - sum(bool(u) for u in unchanged[:n - 2]) / (n - 1)


def _ror_of(r: dict[str, Any]) -> Optional[float]:
    """The record's ``ror``, else (older records) its share of screen-changing operations."""
    if isinstance(r.get("ror"), (int, float)):
        return float(r["ror"])
    ops = int(r.get("operations") or 0)
    return int(r.get("changing_operations") or 0) / ops if ops else None


def androidlab_stats(done: list[dict[str, Any]]) -> dict[str, Any]:
    """Sub-Goal SR, RRR and ROR of scored records (see the module docstring); None where unknown."""
    subgoals = [_subgoal_score(r["verifier"]) for r in done if isinstance(r.get("verifier"), dict)]
    subgoals = [g for g in subgoals if g is not None]
    rrr = [r["reference_steps"] / r["steps"] for r in done
           if r.get("success") and r.get("reference_steps") and r.get("steps")]
    ror = [x for x in map(_ror_of, done) if x is not None]
    return {
        "sub_goal_sr": (sum(subgoals) / len(subgoals)) if subgoals else None,
        "rrr": (sum(rrr) / len(rrr)) if rrr else None,
        "ror": (sum(ror) / len(ror)) if ror else None,
    }


def _grouped(episodes: list[dict[str, Any]], field: str, missing: str) -> dict[str, dict[str, Any]]:
    """``episode_stats`` per distinct value of ``field`` (sorted; empty values become ``missing``)."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in episodes:
        groups[str(r.get(field) or missing)].append(r)
    return {name: episode_stats(groups[name]) for name in sorted(groups)}


def summarize(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """``overall``, ``per_domain`` and ``per_task`` statistics of the latest record of each episode,
    plus ``per_difficulty`` when any record carries a difficulty (AndroidWorld-v0)."""
    episodes = list(latest_records(records).values())
    out = {
        "overall": episode_stats(episodes),
        "per_domain": _grouped(episodes, "domain", "unknown"),
        "per_task": _grouped(episodes, "task_id", "unknown"),
    }
    if any(r.get("difficulty") for r in episodes):
        out["per_difficulty"] = _grouped(episodes, "difficulty", "unknown")
    return out


def render_table(summary: dict[str, Any], section: str = "per_task") -> Any:
    """A rich Table of one section of the summary (``per_task`` or ``per_domain``) plus OVERALL."""
    from rich.table import Table

    def fmt(v: Any, pct: bool = False) -> str:
        if v is None:
            return "-"
        return f"{100 * v:.1f}%" if pct else f"{v:.2f}"

    label = {"per_domain": "domain", "per_difficulty": "difficulty"}.get(section, "task")
    table = Table(title=f"guigym eval ({label})")
    rows = list(summary.get(section, {}).items()) + [("OVERALL", summary["overall"])]
    lab = androidlab_columns(s for _, s in rows)
    for col in (label, "episodes", "lost", "unscorable", "success", "mean score", "mean steps", "pass@k",
                *(title for _, title, _ in lab)):
        table.add_column(col, justify="left" if col == label else "right")
    for name, s in rows:
        table.add_row(name, str(s["episodes"]), str(s["lost"]), str(s.get("unscorable", 0)), fmt(s["success_rate"], True),
                      fmt(s["mean_score"]), fmt(s["mean_steps"]), fmt(s["pass_at_k"], True),
                      *(fmt(s.get(key), pct) for key, _, pct in lab),
                      style="bold" if name == "OVERALL" else None)
    return table


#: AndroidLab's metric columns: (summary key, column title, shown as a percentage)
ANDROIDLAB_COLUMNS = (("sub_goal_sr", "Sub-Goal SR", True), ("rrr", "RRR", True), ("ror", "ROR", True))


def androidlab_columns(stats: Iterable[dict[str, Any]]) -> list[tuple[str, str, bool]]:
    """The AndroidLab metric columns that have a value in any of ``stats`` (none for a web run)."""
    stats = list(stats)
    return [c for c in ANDROIDLAB_COLUMNS if any(s.get(c[0]) is not None for s in stats)]
