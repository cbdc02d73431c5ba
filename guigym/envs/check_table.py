"""Pieces shared by the env-specific ``guigym tasks check`` commands (OSWorld-v0's
:mod:`guigym.envs.desktop.check`, WebArena-v0's :mod:`guigym.envs.web.webarena.check`): run every
task on one env while printing a table line per task, format scores, and map rows to an exit code
(1 = a task scored wrongly, 2 = infrastructure trouble or a task that cannot be scored, 0 = all
as expected)."""
from __future__ import annotations

import threading
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


def check_parallel(envs: Sequence[Any], items: Sequence[T], check: Callable[[Any, T], R],
                   line: Callable[[R], str], out: Any = None) -> list[R]:
    """``check(env, item)`` for every item, spread over ``envs``: one thread per env, each taking
    the next unchecked item when its last one ends (a slow item does not hold up the others).
    Rows come back in the order of ``items``; ``line(row)`` is printed to ``out`` as each ends.
    Every env is closed at the end. When a check raises, no env takes a new item, the running
    ones finish, and the first exception is raised again.

    Threads, not processes: an env's work runs in its own device (desktop, browser, phone) and
    the host side mostly waits on it, so envs overlap even under the GIL.
    """
    rows: list[Optional[R]] = [None] * len(items)
    nxt = iter(range(len(items)))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work(env: Any) -> None:
        while True:
            with lock:
                i = None if errors else next(nxt, None)
            if i is None:
                return
            try:
                row = check(env, items[i])
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                with lock:
                    errors.append(e)
                return
            with lock:
                rows[i] = row
                if out is not None:
                    print(line(row), file=out, flush=True)

    threads = [threading.Thread(target=work, args=(env,), name=f"check-{k}", daemon=True) for k, env in enumerate(envs)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        close_errors = []
        for env in envs:  # every env, even when one fails to close
            try:
                env.close()
            except Exception as e:  # noqa: BLE001 - raised below, after the others are closed
                close_errors.append(e)
        if close_errors and not errors:
            raise close_errors[0]
    if errors:
        raise errors[0]
    return [r for r in rows if r is not None]


def fmt_score(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:g}"


def exit_code(statuses: Sequence[str], infra: Sequence[str] = ("infra",)) -> int:
    """1 if any status is ``mismatch``, else 2 if any is in ``infra``, else 0."""
    if "mismatch" in statuses:
        return 1
    if any(s in infra for s in statuses):
        return 2
    return 0
