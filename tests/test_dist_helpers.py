"""The multi-process test harness itself (tests/dist_helpers.py): a rank that never returns
fails the test at the bound instead of hanging it, and no rank outlives the test."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from dist_helpers import run_ranks  # noqa: E402


def _rank1_hangs(rank: int, world: int, flag: str) -> None:
    if rank == 1:
        Path(flag).write_text(str(os.getpid()))
        time.sleep(3600)  # stuck: never reaches the barrier


def test_a_hung_rank_fails_the_test_and_every_rank_is_killed(tmp_path):
    flag = tmp_path / "rank1.pid"
    with pytest.raises(pytest.fail.Exception, match="distributed ranks failed"):
        # rank 0 finishes and waits in the barrier; whichever comes first (the 30 s bound, or the
        # barrier's gloo timeout failing rank 0) ends the test, and both ranks are killed
        run_ranks(_rank1_hangs, 2, (str(flag),), tmp_path, bound_s=30)
    assert flag.exists(), "rank 1 never started"
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left running
        os.kill(int(flag.read_text()), 0)
