"""A postconfig command that hangs on state the agent left is scored, never a lost episode
(issue 35 item 3, docs/security.md "Agent-reachable EnvInfraError paths").

The agent makes the file a postconfig command reads a FIFO (no writer ever comes), so the command
blocks until the desktop's server kills it at its timeout. Before: ``EnvInfraError`` at episode
end, the episode lost (an agent could turn a failure into "never scored"). Now: the timeout is
logged in the step's record and the evaluation goes on: the episode is scored.
"""
from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

import guigym  # noqa: F401 - registers the envs
from guigym.core import EnvInfraError
from guigym.core import actions as A
from guigym.envs.desktop.setup import run_setup
from guigym.envs.desktop.tasks import parse_osworld_task

from desktop_needs import need_desktop
from terminal_helpers import type_command, wait_marker

pytestmark = pytest.mark.slow  # one real desktop for the module

#: the postconfig reads ~/report.txt (a converter would); the metric checks ~/projects
TASK = {
    "id": "postconfig-reads-agent-file",
    "instruction": "Create the folder ~/projects.",
    "config": [],
    "evaluator": {
        "postconfig": [{"type": "execute", "parameters": {"command": ["cat", "/home/user/report.txt"],
                                                          "stdout": "report.txt"}}],
        "func": "exact_match",
        "result": {"type": "vm_command_line", "command": "[ -d ~/projects ] && echo yes || echo no", "shell": True},
        "expected": {"type": "rule", "rules": {"expected": "yes\n"}},
    },
}
COMMAND_TIMEOUT_S = 3.0  # the desktop kills the hung command after this; OSWorld's default is 120


@pytest.fixture(scope="module")
def env():
    need_desktop()
    e = gym.make("OSWorld-v0", task=parse_osworld_task(TASK, source="test"), provider="local",
                 provider_kwargs={"screen_size": (1024, 768)}, max_steps=50, observe_terminal=True)
    e.unwrapped.setup_command_timeout_s = COMMAND_TIMEOUT_S
    try:
        yield e
    finally:
        e.close()


def test_a_postconfig_command_hung_on_an_agent_fifo_is_scored(env):
    env.reset()
    wait_marker(env, type_command(env, "mkdir ~/projects && mkfifo ~/report.txt && ls -l ~/report.txt"))
    _, reward, terminated, _, info = env.step(A.Done())  # before: EnvInfraError here
    assert terminated
    assert reward == 1.0 and info["success"] is True  # the metric ran on the agent's state
    env.reset()  # the agent's FIFO is the episode's: reset restores HOME
    assert "NOFIFO" in wait_marker(env, type_command(env, "test -p ~/report.txt || echo NO''FIFO"))


def test_the_same_hang_before_the_episode_is_still_infra(env, tmp_path: Path):
    """A config command that times out ran on a fresh desktop: that stays an EnvInfraError."""
    env.reset()
    wait_marker(env, type_command(env, "mkfifo ~/report.txt"))
    with pytest.raises(EnvInfraError, match="timed out"):
        run_setup(env.unwrapped.client, TASK["evaluator"]["postconfig"], cache_dir=tmp_path, label="config",
                  command_timeout=COMMAND_TIMEOUT_S)
    records = run_setup(env.unwrapped.client, TASK["evaluator"]["postconfig"], cache_dir=tmp_path,
                        label="postconfig", agent_state=True, command_timeout=COMMAND_TIMEOUT_S)
    assert records[0]["result"]["timed_out"] is True
    assert (tmp_path / "report.txt").read_text() == ""  # the capture holds what the command printed
