"""``guigym tasks check`` on the desktop: a task without ``postconfig`` runs its no-op and its
reference on one reset (issue 33 item 6: one app start per task instead of two), and the
verdicts stay those of separate episodes: the no-op is scored on the state right after setup,
a reference that does not solve the task still fails, a no-op that scores still fails.

A stand-in env (named as such) plays the desktop: one file the setup writes and ``type`` edits;
the verifier is the real one (:func:`guigym.envs.desktop.env.verify_task` with the real
``vm_command_line`` getter and ``exact_match`` metric), reading the file through the client.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from guigym.core import actions as A
from guigym.core.dialect import parse_action
from guigym.envs.desktop import check
from guigym.envs.desktop.env import verify_task
from guigym.envs.desktop.tasks import parse_osworld_task


class FakeClient:
    """Answers the check's tool probes and the getter's ``cat`` from :class:`FakeDesktopEnv`."""

    def __init__(self, env: "FakeDesktopEnv") -> None:
        self.env = env

    def execute(self, command: Any, shell: bool = False, timeout: float = 0) -> dict[str, Any]:
        if command == "cat ~/note.txt":
            return {"status": "success", "returncode": 0, "output": self.env.file}
        return {"status": "success", "returncode": 0, "output": ""}  # `command -v ...`: present


class FakeDesktopEnv:
    """Stand-in for OSWorldEnv under ``check_task`` (no desktop): reset = restore + setup
    (writes ``setup_text``), ``type(text=...)`` replaces the file, ``done()`` ends the episode
    and scores it with the real verifier; ``events`` records resets, actions and postconfig."""

    def __init__(self, tmp: Path) -> None:
        self.client = FakeClient(self)
        self.tmp = tmp
        self.network = False
        self.timings: dict[str, float] = {}
        self.observe_a11y = True
        self.resets = 0
        self.file = ""
        self.events: list[str] = []
        self.task: Any = None

    # what verify_task uses
    def eval_dir(self, task: Any) -> Path:
        return self.tmp / task.id

    def run_steps(self, steps: Any, task: Any, label: str) -> list:
        self.events.append(label)  # e.g. OSWorld's "save, then close the app" before the getters read
        return []

    # the Gymnasium surface check_task drives
    def reset(self, options: dict) -> tuple[dict, dict]:
        self.resets += 1
        self.task = options["task"]
        self.file = self.task.extra["setup_text"]  # every episode starts from the same state
        self.events.append("reset")
        return {"a11y": "", "screenshot": None}, {}

    def step(self, action: str) -> tuple[dict, float, bool, bool, dict]:
        typed = parse_action(action)
        self.events.append(typed.name)
        if isinstance(typed, A.Type):
            self.file = typed.text
        if typed.ends_episode:
            score, details = verify_task(self, self.task, typed)
            return {}, score, True, False, {"verifier": details}
        return {}, 0.0, False, False, {}


def _task(tid: str, setup_text: str, reference: list, postconfig: bool = False):
    evaluator: dict[str, Any] = {
        "func": "exact_match",
        "result": {"type": "vm_command_line", "command": "cat ~/note.txt", "shell": True},
        "expected": {"type": "rule", "rules": {"expected": "final"}},
    }
    if postconfig:
        evaluator["postconfig"] = [{"type": "execute", "parameters": {"command": "true", "shell": True}}]
    return parse_osworld_task({"id": tid, "instruction": "write final", "config": [], "evaluator": evaluator,
                               "setup_text": setup_text, "guigym_reference": reference})


SOLVES = ['type(text="final")', "done()"]


def test_a_task_without_postconfig_gets_one_reset_and_both_verdicts(tmp_path):
    env = FakeDesktopEnv(tmp_path)
    row = check.check_task(env, _task("t-ok", "draft", SOLVES))
    assert (row.noop, row.reference, row.status) == (0.0, 1.0, "ok"), row
    assert env.resets == 1 and row.details["schedule"] == "one reset"
    # the no-op is scored on the state the setup left (before the reference typed anything)
    assert env.events == ["reset", "type", "done"]


def test_the_shared_schedule_still_catches_a_scoring_noop_and_a_failing_reference(tmp_path):
    env = FakeDesktopEnv(tmp_path)
    # setup already leaves the answer: the no-op scores 1 -> mismatch, even though the reference passes
    row = check.check_task(env, _task("t-noop-scores", "final", SOLVES))
    assert row.noop == 1.0 and row.reference == 1.0 and row.status == "mismatch"
    assert "no-op scored 1" in row.reason
    # a reference that writes the wrong text scores 0 -> mismatch
    row = check.check_task(env, _task("t-bad-ref", "draft", ['type(text="wrong")', "done()"]))
    assert (row.noop, row.reference, row.status) == (0.0, 0.0, "mismatch")
    assert "reference scored 0" in row.reason


@pytest.mark.parametrize("why", ["postconfig", "separate", "default"])
def test_postconfig_or_separate_episodes_give_each_its_own_reset(tmp_path, why):
    env = FakeDesktopEnv(tmp_path)
    task = _task("t-" + why, "draft", SOLVES, postconfig=why == "postconfig")
    row = check.check_task(env, task, share_reset=why != "separate")
    if why == "default":  # the control: same task, default flags -> one reset
        assert env.resets == 1
        return
    assert (row.noop, row.reference, row.status) == (0.0, 1.0, "ok"), row
    assert env.resets == 2 and "schedule" not in row.details
    if why == "postconfig":
        # the no-op's postconfig acted on the desktop, so the reference had to start afresh
        assert env.events == ["reset", "done", "postconfig", "reset", "type", "done", "postconfig"]


def test_the_embedded_suite_shares_a_reset_for_the_tasks_without_postconfig():
    """Which embedded tasks take the one-reset schedule (the count the CI saving rests on)."""
    from guigym.envs.desktop.env import select_tasks

    tasks = select_tasks(suite="embedded")
    shared = [t.id for t in tasks if check.can_share_reset(t)]
    with_post = [t.id for t in tasks if t.evaluator.get("postconfig")]
    assert len(shared) + len(with_post) == len(tasks) and with_post
    assert len(shared) >= 45  # of 55: the saving docs/architecture.md states
    assert all(t.startswith(("impress-", "writer-", "thunderbird-")) for t in with_post)
