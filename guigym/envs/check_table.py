"""Pieces shared by the env-specific ``guigym tasks check`` commands (OSWorld-v0's
:mod:`guigym.envs.desktop.check`, WebArena-v0's :mod:`guigym.envs.web.webarena.check`): run every
task on one env while printing a table line per task, format scores, and map rows to an exit code
(1 = a task scored wrongly, 2 = infrastructure trouble or a task that cannot be scored, 0 = all
as expected)."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional, Sequence, TypeVar

R = TypeVar("R")
T = TypeVar("T")


def check_all(env: Any, items: Iterable[T], check: Callable[[T], R], line: Callable[[R], str],
              out: Any = None) -> list[R]:
    """``check(item)`` for every item, one ``line(row)`` printed to ``out`` as each ends; the env is
    closed at the end, also when a check raises."""
    rows: list[R] = []
    try:
        for item in items:
            row = check(item)
            rows.append(row)
            if out is not None:
                print(line(row), file=out, flush=True)
    finally:
        env.close()
    return rows


def fmt_score(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:g}"


def exit_code(statuses: Sequence[str], infra: Sequence[str] = ("infra",)) -> int:
    """1 if any status is ``mismatch``, else 2 if any is in ``infra``, else 0."""
    if "mismatch" in statuses:
        return 1
    if any(s in infra for s in statuses):
        return 2
    return 0
