"""`guigym tasks check --env AndroidWorld-v0` through the REAL adb server against the app stand-in
(guigym.envs.android.standin_apps.AppStandin): tasks that exercise its SQLite databases (pull /
push / ownership), the contacts provider, the SMS provider with ``sqlite3`` and the foreground
app are set up over adb, score 0 untouched and 1 with their reference end state. The full
run over every AndroidWorld task is the CLI's; the fake-device tests in test_androidworld_tasks.py cover every task.
"""
from __future__ import annotations

import pytest

from guigym.cli import main
from guigym.envs.android.check import check_task, standin_device

from _android_adb import adb_client  # noqa: F401 - the module's adb server

pytestmark = pytest.mark.timeout(420)


def test_check_through_adb_on_the_app_standin(adb_client, capsys):  # noqa: F811
    tasks = ["ContactsAddContact", "SimpleSmsSend", "ExpenseDeleteDuplicates"]
    assert main(["tasks", "check", "--env", "AndroidWorld-v0", *(a for t in tasks for a in ("--task", t))]) == 0
    out = capsys.readouterr().out
    for t in tasks:
        line = next(ln for ln in out.splitlines() if ln.startswith(t))
        assert "no-op   0 (want 0)" in line and "reference   1" in line and line.rstrip().endswith("ok"), line
    assert "3/3 tasks as expected" in out


def test_the_standin_keeps_what_adb_writes_and_a_wrong_end_state_fails(adb_client):  # noqa: F811
    from guigym.envs.android.androidworld import validators as V
    from guigym.envs.android.androidworld.messaging import SMS_PACKAGE, SimpleSmsSend

    class WrongNumber(SimpleSmsSend):
        def reference(self, device):  # the right message, sent from the app, to another number
            device.launch_app(SMS_PACKAGE)
            V.device_sql(device, V.SMS_DB, "INSERT INTO sms (address, body, date, type, read) VALUES ('+15550000000', "
                         f"{V.sql_literal(self.params['message'])}, {V.device_time_ms(device)}, 2, 1);")
            return None

    with standin_device() as dev:
        row = check_task("SimpleSmsSend", dev, seed=1, cls=WrongNumber)
    assert (row.status, row.noop, row.reference) == ("mismatch", 0.0, 0.0)
