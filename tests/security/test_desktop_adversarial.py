"""``guigym tasks check --adversarial`` (issue 10, item 7) on a real local desktop: the scripted
attacker (reads task files, token and sockets; writes the answer key into the file the verifier
reads; plants fake sockets; kills every process it sees; says done()) scores 0 and finds nothing,
while the same task still scores 0 for the no-op agent and 1 for its reference solution.
"""
from __future__ import annotations

import pytest

from guigym.envs.desktop.check import run_check
from guigym.envs.desktop.env import select_tasks

from desktop_needs import need_desktop

pytestmark = pytest.mark.slow  # three episodes on a real desktop: ~40 s on a loaded 2-core box


def test_scripted_attacker_scores_zero_on_an_answer_key_task():
    need_desktop()
    # editor-append-line's verifier is `cat ~/notes.txt` == a string in the task file: an agent
    # that can read the file can write the answer without doing the task.
    tasks = select_tasks(tasks=["editor-append-line"], suite="embedded")
    (row,) = run_check(tasks, provider_kwargs={"screen_size": (1024, 768)}, adversarial=True)
    assert not isinstance(row.details["adversarial"], list), row  # a list holds what the attacker found
    assert row.adversarial == 0.0, row
    assert (row.noop, row.reference, row.status) == (0.0, 1.0, "ok"), row
