"""The scheduling shared by the ``guigym tasks check`` commands: ``check_parallel`` spreads the
items over several envs (``--workers N``), reports rows in item order and closes every env.
Fake envs (plain objects): what is tested here is the scheduling, not a device."""
from __future__ import annotations

import io
import threading

import pytest

from guigym.envs.check_table import check_parallel


class FakeEnv:
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_items_are_spread_over_the_envs_which_run_at_once_and_rows_keep_item_order():
    envs = [FakeEnv("a"), FakeEnv("b")]
    # the first item of each env waits for the other env's first item: a scheduler that ran the
    # envs one after the other would break the barrier (its timeout only ends a failing run)
    both_running = threading.Barrier(2, timeout=120)
    seen: dict[str, list[int]] = {"a": [], "b": []}

    def check(env: FakeEnv, item: int) -> tuple[int, str]:
        if not seen[env.name]:
            both_running.wait()
        seen[env.name].append(item)
        return item, env.name

    out = io.StringIO()
    rows = check_parallel(envs, list(range(7)), check, lambda r: f"row {r[0]}", out)
    assert [r[0] for r in rows] == list(range(7))  # item order, whichever env ran it
    assert sorted(seen["a"] + seen["b"]) == list(range(7))  # each item exactly once
    assert seen["a"] and seen["b"]
    assert all(rows[i][1] == name for name, items in seen.items() for i in items)
    assert sorted(out.getvalue().splitlines()) == sorted(f"row {i}" for i in range(7))  # a line per row
    assert [e.closed for e in envs] == [1, 1]


def test_a_failing_check_stops_new_items_closes_every_env_and_is_raised():
    envs = [FakeEnv("a"), FakeEnv("b")]
    started: list[int] = []
    a_thread: list[threading.Thread] = []
    a_started = threading.Event()

    def check(env: FakeEnv, item: int) -> int:
        started.append(item)
        if env.name == "a":
            a_thread.append(threading.current_thread())
            a_started.set()
            raise RuntimeError(f"desktop fell over on item {item}")
        # b's first item ends only after a's thread has failed and gone: b must then stop
        assert a_started.wait(120)
        a_thread[0].join(120)
        return item

    with pytest.raises(RuntimeError, match="desktop fell over"):
        check_parallel(envs, list(range(50)), check, str)
    assert [e.closed for e in envs] == [1, 1]
    # a's failing item and at most b's running one (b may not have taken any before a failed):
    # nothing is taken after the failure
    assert len(started) <= 2 and started.count(started[0]) == 1


def test_an_env_that_fails_to_close_does_not_leave_the_others_open():
    class BadClose(FakeEnv):
        def close(self) -> None:
            super().close()
            raise OSError("close failed")

    envs = [BadClose("a"), FakeEnv("b")]
    with pytest.raises(OSError, match="close failed"):
        check_parallel(envs, [1, 2, 3], lambda env, item: item, str)
    assert [e.closed for e in envs] == [1, 1]


def test_desktop_check_workers_option_is_validated():
    from guigym.envs.desktop import check

    assert check.build_parser().parse_args(["--workers", "2"]).workers == 2
    assert check.build_parser().parse_args([]).workers == 1  # one desktop unless asked
    for bad in ("0", "-1", "two"):
        with pytest.raises(SystemExit):
            check.build_parser().parse_args(["--workers", bad])
    with pytest.raises(ValueError, match="workers"):
        check.run_check([], workers=0)
