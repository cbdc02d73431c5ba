"""Tasks drawn ahead for the coming resets (GUIEnv.presample_task): what lets an env open the next
episodes' pages in the background. Drawing ahead must not change which task and episode seed
each reset gets, however far ahead it looks; a reset given a seed or task forgets the draws."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pytest

from guigym.core import actions as A
from guigym.core.task import Task
from guigym.envs.base import GUIEnv


class ManyTasksEnv(GUIEnv):
    """Twenty tasks, nothing to run: only the reset's choice of task and seed matters here."""

    def __init__(self) -> None:
        super().__init__([Task(id=f"t{i}", instruction="go", platform="web", suite="test") for i in range(20)])

    def _start_episode(self, task: Task, seed: int) -> None:
        pass

    def _observe(self) -> dict[str, Any]:
        return {"screenshot": np.zeros((2, 2, 3), np.uint8), "instruction": "go"}

    def _execute(self, action: A.Action) -> None:
        pass

    def _verify(self, task: Task, last_action: Optional[A.Action]) -> tuple[Optional[float], dict[str, Any]]:
        return 0.0, {}


def _episodes(env: GUIEnv, resets: int, look_ahead: int) -> list[tuple[str, int]]:
    out = []
    for _ in range(resets):
        _, info = env.reset()
        out.append((info["task_id"], info["seed"]))
        for n in range(1, look_ahead + 1):  # what an env opening `look_ahead` pages ahead asks
            env.presample_task(n)
    return out


@pytest.mark.parametrize("look_ahead", [1, 2, 3])
def test_drawing_ahead_changes_no_resets_task_or_seed(look_ahead):
    plain, ahead = ManyTasksEnv(), ManyTasksEnv()
    plain.reset(seed=11)
    ahead.reset(seed=11)
    expected = _episodes(plain, 8, look_ahead=0)
    assert len({t for t, _ in expected}) > 3  # the draws do vary
    assert _episodes(ahead, 8, look_ahead) == expected


def test_the_tasks_drawn_ahead_are_the_next_resets_tasks_in_order():
    env = ManyTasksEnv()
    env.reset(seed=3)
    drawn = [env.presample_task(n).id for n in (1, 2, 3)]
    assert env.presample_next_task().id == drawn[0] and env.presample_task(3).id == drawn[2]  # drawn once
    assert [env.reset()[1]["task_id"] for _ in range(3)] == drawn


def test_a_reset_given_a_task_or_seed_forgets_the_draws_ahead():
    env = ManyTasksEnv()
    env.reset(seed=5)
    env.presample_task(2)
    env.reset(options={"task": "t0"})
    assert env._presampled == []
    reseeded, fresh = ManyTasksEnv(), ManyTasksEnv()
    reseeded.reset(seed=5)
    reseeded.presample_task(3)
    fresh.reset(seed=9)
    assert reseeded.reset(seed=9)[1]["task_id"] == ManyTasksEnv().reset(seed=9)[1]["task_id"]
    assert _episodes(reseeded, 4, 0) == _episodes(fresh, 4, 0)  # as if nothing had been drawn ahead
    with pytest.raises(ValueError, match="from 1"):
        env.presample_task(0)


def test_the_env_says_whether_the_last_reset_drew_its_task_itself():
    env = ManyTasksEnv()
    env.reset(seed=1)
    assert not env.last_reset_drew_task  # a seed: its draw is not the one made ahead
    env.reset()
    assert env.last_reset_drew_task
    env.reset(options={"task": "t3"})
    assert not env.last_reset_drew_task
