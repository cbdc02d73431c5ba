"""AndroidWorld-style tasks against an in-memory fake device that keeps settings, content providers,
files and app SQLite databases: params differ by seed; initialise -> not yet successful (Verify tasks:
already successful); doing the task as the app would -> 1.0; a near-miss -> 0 (or half credit)."""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import posixpath
import re
import sqlite3
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Optional

import pytest

from guigym.core.errors import EnvInfraError, TaskSpecError
from guigym.envs.android.androidworld import TASKS, load_task_metadata, metadata_table
from guigym.envs.android.androidworld import validators as V
from guigym.envs.android.androidworld.data import EXPENSE_CATEGORIES as D_CATEGORIES
from guigym.envs.android.androidworld.sqlite_apps import Expense
from guigym.envs.android.androidworld.tasks_app import DB_PATH as TASKS_DB
from guigym.envs.android.device import AndroidDevice
from guigym.envs.android.standin_apps import _db_bytes, app_databases

APP_DBS = app_databases()  # what installing each app would leave on the device: path -> schema
NOW_S = 1697371200  # 2023-10-15 12:00 UTC
NOW = dt.datetime(2023, 10, 15, 15, 34, tzinfo=dt.timezone.utc)  # AndroidWorld's device clock for its questions


class FakeDevice:
    """An in-memory AndroidDevice: settings, files (path -> bytes), a contacts provider, the SMS
    provider backed by the telephony database file, ``sqlite3`` run on database files, a foreground
    package. Unknown shell commands fail the test (so every command the tasks send is accounted for)."""

    serial = "fake-aw"

    def __init__(self) -> None:
        self.settings: dict[tuple[str, str], str] = {("global", "wifi_on"): "1", ("global", "bluetooth_on"): "0",
                                                     ("system", "screen_brightness"): "128"}
        self.files: dict[str, bytes] = {p: _db_bytes(s) for p, s in APP_DBS.items()}
        self.dirs: set[str] = {"/storage/emulated/0"} | {posixpath.dirname(p) for p in APP_DBS}
        self.raw_contacts: list[int] = []
        self.contact_data: list[dict[str, str]] = []
        self.foreground = "com.google.android.apps.nexuslauncher"
        self.now_s = NOW_S
        self.shell_log: list[tuple[str, ...]] = []
        self.launched: list[str] = []

    # -- Protocol: state ---------------------------------------------------------------------------
    def settings_get(self, namespace: str, key: str) -> Optional[str]:
        return self.settings.get((namespace, key))

    def settings_put(self, namespace: str, key: str, value: str) -> None:
        self.settings[(namespace, key)] = value

    def push(self, local_path: str, device_path: str) -> None:
        assert posixpath.dirname(device_path) in self.dirs or device_path in APP_DBS, device_path
        self.files[device_path] = Path(local_path).read_bytes()

    def pull(self, device_path: str, local_path: str) -> None:
        if device_path not in self.files:
            raise FileNotFoundError(device_path)
        Path(local_path).write_bytes(self.files[device_path])

    def content_query(self, uri: str, projection=None, where=None) -> list[dict[str, str]]:
        if uri == "content://contacts/phones/":
            names = {d["raw_contact_id"]: d["data1"] for d in self.contact_data
                     if d["mimetype"] == "vnd.android.cursor.item/name"}
            return [{"display_name": names.get(d["raw_contact_id"], ""), "number": d["data1"]}
                    for d in self.contact_data if d["mimetype"] == "vnd.android.cursor.item/phone_v2"]
        if uri == "content://com.android.contacts/raw_contacts":
            return [{"_id": str(i)} for i in self.raw_contacts]
        m = re.fullmatch(r"content://sms/(inbox|sent)", uri)
        if m:
            kind = 1 if m.group(1) == "inbox" else 2
            return [{k: str(v) for k, v in r.items()} for r in self.sql(V.SMS_DB, "SELECT * FROM sms WHERE type=?",
                                                                           (kind,))]
        raise AssertionError(f"unexpected content query {uri}")

    def sql(self, path: str, query: str, params: tuple = ()) -> list[dict[str, Any]]:
        with tempfile.TemporaryDirectory() as tmp:
            local = os.path.join(tmp, "db")
            Path(local).write_bytes(self.files[path])
            con = sqlite3.connect(local)
            con.row_factory = sqlite3.Row
            if params:
                rows = [dict(r) for r in con.execute(query, params)]
            else:
                con.executescript(query)
                rows = []
            con.commit()
            con.close()
            self.files[path] = Path(local).read_bytes()
        return rows

    # -- Protocol: shell ---------------------------------------------------------------------------
    def shell(self, argv, timeout_s: float = 20.0) -> str:
        a = tuple(argv)
        self.shell_log.append(a)
        if a[:1] == ("svc",) and a[1] in ("wifi", "bluetooth"):
            self.settings[("global", f"{a[1]}_on")] = "1" if a[2] == "enable" else "0"
            return ""
        if a == ("dumpsys", "activity", "activities"):
            return (f"  Display #0\n    mResumedActivity: ActivityRecord{{7d1c u0 {self.foreground}/.Main t12}}\n")
        if a == ("date", "+%s"):
            return f"{self.now_s}\n"
        if a == ("cmd", "connectivity", "airplane-mode", "disable"):
            self.settings[("global", "airplane_mode_on")] = "0"
            return ""
        if a[:2] == ("am", "force-stop"):
            return ""
        if a[:2] in (("rm", "-rf"), ("rm", "-f")):
            p = a[2].rstrip("/")
            self.files = {k: v for k, v in self.files.items() if k != p and not k.startswith(p + "/")}
            self.dirs = {d for d in self.dirs if d != p and not d.startswith(p + "/")}
            return ""
        if a[:2] == ("mkdir", "-p"):
            p = a[2].rstrip("/")
            while p and p != "/":
                self.dirs.add(p)
                p = posixpath.dirname(p)
            return ""
        if a[:1] == ("find",):
            base = a[1].rstrip("/")
            if base not in self.dirs:
                return f"find: {base}: No such file or directory\n"
            under = sorted([d for d in self.dirs if d.startswith(base + "/")] +
                           [f for f in self.files if f.startswith(base + "/")])
            return "\n".join([base] + under) + "\n"
        if a == ("pm", "clear", "com.android.providers.contacts"):
            self.raw_contacts, self.contact_data = [], []
            return "Success\n"
        if a[:4] == ("content", "insert", "--uri", "content://com.android.contacts/raw_contacts"):
            self.raw_contacts.append(max(self.raw_contacts, default=0) + 1)
            return ""
        if a[:4] == ("content", "insert", "--uri", "content://com.android.contacts/data"):
            binds = dict(b.split(":", 2)[0::2] for b in a[5::2])
            self.contact_data.append(binds)
            return ""
        if a[:3] == ("stat", "-c", "%u:%g"):
            return "10123:10123\n" if a[3] in self.dirs else f"stat: '{a[3]}': No such file or directory\n"
        if a[:1] in (("chown",), ("chmod",), ("restorecon",)):
            assert a[-1] in self.files, a
            return ""
        if a[:1] == ("sqlite3",):
            self.sql(a[1], a[2])
            return ""
        raise AssertionError(f"unexpected shell command {a}")

    # -- Protocol: input (the agent's side; tasks only use home/launch) ----------------------------
    def home(self) -> None:
        self.foreground = "com.google.android.apps.nexuslauncher"

    def launch_app(self, name: str) -> None:
        self.launched.append(name)
        if "." in name:  # a package: it comes to the front, as ``monkey -p`` brings it
            self.foreground = name

    # -- helpers playing "the app" -----------------------------------------------------------------
    def _select(self, path: str, table: str) -> list[dict[str, Any]]:
        with tempfile.TemporaryDirectory() as tmp:
            local = os.path.join(tmp, "db")
            Path(local).write_bytes(self.files[path])
            con = sqlite3.connect(local)
            con.row_factory = sqlite3.Row
            rows = [dict(r) for r in con.execute(f"SELECT * FROM {table}")]
            con.close()
        return rows

    def db_exec(self, path: str, query: str, params: tuple = ()) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            local = os.path.join(tmp, "db")
            Path(local).write_bytes(self.files[path])
            con = sqlite3.connect(local)
            con.execute(query, params)
            con.commit()
            con.close()
            self.files[path] = Path(local).read_bytes()

    def write(self, path: str, text: str) -> None:
        self.shell(["mkdir", "-p", posixpath.dirname(path)])
        self.files[path] = text.encode()

    def send_sms(self, number: str, body: str, age_s: int = 10) -> None:
        self.db_exec(V.SMS_DB, "INSERT INTO sms (address, body, date, type, read) VALUES (?, ?, ?, 2, 1)",
                     (number, body, (self.now_s - age_s) * 1000))


def test_tasks_use_only_what_the_fake_implements():
    """The fake has only the state half of AndroidDevice (plus home/launch_app); a task reaching for
    anything else (an input method, a screenshot) would fail with AttributeError in the tests below."""
    protocol = {m for m in dir(AndroidDevice) if not m.startswith("_")}
    implemented = {m for m in protocol if callable(getattr(FakeDevice, m, None))}
    assert implemented == {"settings_get", "settings_put", "shell", "content_query", "push", "pull", "home",
                           "launch_app"}


# --------------------------------------------------------------------------- per-task play


def _insert_row(dev: FakeDevice, task, row) -> None:
    cols = [f.name for f in dataclasses.fields(row) if f.name != task.key]
    dev.db_exec(task.db_path, f"INSERT INTO {task.table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                tuple(getattr(row, c) for c in cols))


def _delete_title(dev: FakeDevice, task, field: str, value: str) -> None:
    dev.db_exec(task.db_path, f"DELETE FROM {task.table} WHERE {field} = ?", (value,))


def _sms_solve(dev: FakeDevice, t) -> None:
    dev.foreground = "com.simplemobiletools.smsmessenger"
    dev.send_sms(t.params["number"], t.params["message"])


def _files_move(dev: FakeDevice, src: str, dst: str) -> None:
    dev.shell(["mkdir", "-p", posixpath.dirname(dst)])
    dev.files[dst] = dev.files.pop(src)


SD, MARKOR = V.SD, V.MARKOR_DATA
AUDIO = "/storage/emulated/0/Android/data/com.dimowner.audiorecorder/files/Music/records"  # AndroidWorld's


def solve(name: str, dev: FakeDevice, t) -> None:
    """Change the fake's state as the app would when the agent does the task."""
    p = t.params
    if name.startswith("SystemWifi"):
        dev.settings[("global", "wifi_on")] = "1" if p["on_or_off"] == "on" else "0"
    elif name.startswith("SystemBluetooth"):
        dev.settings[("global", "bluetooth_on")] = "1" if p["on_or_off"] == "on" else "0"
    elif name.startswith("SystemBrightness"):
        dev.settings[("system", "screen_brightness")] = "255" if p["max_or_min"] == "max" else "1"
    elif name == "OpenAppTaskEval":
        from guigym.envs.android.androidworld.system import OPEN_APP_PACKAGES
        dev.foreground = OPEN_APP_PACKAGES[p["app_name"]]
    elif name == "TurnOnWifiAndOpenApp":
        from guigym.envs.android.androidworld.system import OPEN_APP_PACKAGES
        dev.settings[("global", "wifi_on")] = "1"
        dev.foreground = OPEN_APP_PACKAGES[p["app_name"]]
    elif name == "TurnOffWifiAndTurnOnBluetooth":
        dev.settings[("global", "wifi_on")] = "0"
        dev.settings[("global", "bluetooth_on")] = "1"
    elif name == "ContactsAddContact":
        dev.shell(["content", "insert", "--uri", "content://com.android.contacts/raw_contacts"])
        rid = str(dev.raw_contacts[-1])
        dev.contact_data += [{"raw_contact_id": rid, "mimetype": "vnd.android.cursor.item/name", "data1": p["name"]},
                             {"raw_contact_id": rid, "mimetype": "vnd.android.cursor.item/phone_v2",
                              "data1": re.sub(r"(\d{3})(\d{3})(\d{4})$", r"(\1) \2-\3", p["number"])}]
    elif name.startswith("SimpleSms"):
        _sms_solve(dev, t)
    elif "DeleteDuplicate" in name:  # one of the two copies goes
        dev.db_exec(t.db_path, f"DELETE FROM {t.table} WHERE {t.key} = (SELECT MAX({t.key}) FROM {t.table})")
    elif name == "MarkorChangeNoteContent":
        dev.write(f"{MARKOR}/{p['new_name']}", p["updated_content"].lower())  # fuzzy: case differs
        dev.shell(["rm", "-f", f"{MARKOR}/{p['original_name']}"])
    elif name == "MarkorAddNoteHeader":
        dev.write(f"{MARKOR}/{p['new_name']}", f"{p['header']}\n\n{p['original_content']}\n")
        dev.shell(["rm", "-f", f"{MARKOR}/{p['original_name']}"])
    elif name == "MarkorMergeNotes":
        dev.write(f"{MARKOR}/{p['new_file_name']}", "\n\n".join(p[f"file{i}_content"] for i in (1, 2, 3)))
    elif name.startswith(("ExpenseAdd", "RecipeAdd", "SimpleCalendarAdd")):
        for row in p["row_objects"]:
            _insert_row(dev, t, dataclasses.replace(row, **({"note": row.note.upper()} if name.startswith("Expense")
                                                            and row.note else {})))  # fuzzy: case differs
    elif name.startswith("SimpleCalendarDelete"):
        for key in t.to_delete:
            dev.db_exec(t.db_path, "DELETE FROM events WHERE id = ?", (key,))
    elif name.startswith("ExpenseDelete"):
        for row in p["row_objects"]:
            _delete_title(dev, t, "name", row.name)
    elif name.startswith("RecipeDelete"):
        for row in p["row_objects"]:
            _delete_title(dev, t, "title", row.title)
    elif name == "SimpleCalendarLocationOfEvent" or name in CALENDAR_QUERIES | TASKS_QUERIES:
        pass  # answering is the task
    elif name == "MarkorCreateNote":
        dev.write(f"{MARKOR}/{p['file_name']}", p["text"] + "\n")
    elif name == "MarkorCreateNoteAndSms":
        dev.write(f"{MARKOR}/{p['file_name']}", p["text"] + "\n")
        dev.foreground = "com.simplemobiletools.smsmessenger"
        dev.send_sms(p["number"], p["text"])
    elif name == "MarkorEditNote":
        body = {"header": f"{p.get('header')}\n{p['original_content']}", "footer": f"{p['original_content']}\n"
                f"{p.get('footer')}", "replace": p.get("replace_text")}[p["edit_type"]]
        dev.write(f"{MARKOR}/{p['file_name']}", body + "\n")
    elif name == "MarkorCreateFolder":
        dev.shell(["mkdir", "-p", f"{MARKOR}/{p['folder_name']}"])
    elif name == "MarkorDeleteNote":
        dev.shell(["rm", "-f", f"{MARKOR}/{p['file_name']}"])
    elif name == "MarkorDeleteAllNotes":
        for f in [f for f in dev.files if f.startswith(MARKOR + "/")]:
            dev.shell(["rm", "-f", f])
    elif name == "MarkorMoveNote":
        _files_move(dev, f"{MARKOR}/{p['source_folder']}/{p['file_name']}",
                    f"{MARKOR}/{p['destination_folder']}/{p['file_name']}")
    elif name == "FilesDeleteFile":
        dev.shell(["rm", "-f", f"{SD}/{p['subfolder']}/{p['file_name']}"])
    elif name == "FilesMoveFile":
        _files_move(dev, f"{SD}/{p['source_folder']}/{p['file_name']}",
                    f"{SD}/{p['destination_folder']}/{p['file_name']}")
    elif name == "CameraTakePhoto":  # AndroidWorld's PHOTOS_DATA, /sdcard/Pictures
        dev.write(f"{SD}/Pictures/PXL_20231015_153512.jpg", "jpeg")
    elif name == "CameraTakeVideo":  # VIDEOS_DATA, /sdcard/Movies
        dev.write(f"{SD}/Movies/PXL_20231015_153512.mp4", "mp4")
    elif name == "SimpleDrawProCreateDrawing":
        dev.write(f"{SD}/Pictures/{p['file_name']}", "png")
    elif name == "AudioRecorderRecordAudioWithFileName":  # the app adds .m4a in its own folder
        dev.write(f"{AUDIO}/{p['file_name']}.m4a", "m4a")
    elif name == "SaveCopyOfReceiptTaskEval":  # AndroidWorld's DOWNLOAD_DATA
        dev.files[f"{SD}/Download/{p['file_name']}"] = dev.files[f"{SD}/DCIM/{p['file_name']}"]
    else:
        raise AssertionError(f"no solver for {name}")


# --------------------------------------------------------------------------- calendar questions

CALENDAR_QUERIES = {"SimpleCalendarEventsOnDate", "SimpleCalendarEventOnDateAtTime", "SimpleCalendarAnyEventsOnDate",
                    "SimpleCalendarNextEvent", "SimpleCalendarNextMeetingWithPerson", "SimpleCalendarEventsInNextWeek",
                    "SimpleCalendarFirstEventAfterStartTime", "SimpleCalendarEventsInTimeRange"}
UTC = dt.timezone.utc


def _when(date_text: str, time_text: str = "00:00") -> dt.datetime:
    """The test's own reading of AndroidWorld's "October 15 2023" / "1:30pm" / "21:45" / "4pm"."""
    t = time_text.strip().lower()
    m = re.fullmatch(r"(\d{1,2})(?::(\d\d))?\s*(am|pm)?", t)
    assert m, time_text
    hour, minute = int(m.group(1)), int(m.group(2) or 0)
    if m.group(3):
        hour = hour % 12 + (12 if m.group(3) == "pm" else 0)
    day = dt.datetime.strptime(date_text, "%B %d %Y")
    return day.replace(hour=hour, minute=minute, tzinfo=UTC)


def calendar_answer(name: str, t, dev: FakeDevice) -> str:
    """The answer read from the seeded ``events`` table by the test's own rules (not the task's):
    titles in reverse start order and upper case (order and case must not matter)."""
    rows = [(dt.datetime.fromtimestamp(r["start_ts"], UTC), dt.datetime.fromtimestamp(r["end_ts"], UTC), r["title"])
            for r in dev._select(t.db_path, "events")]
    p = t.params
    if name == "SimpleCalendarNextMeetingWithPerson":
        starts = sorted(s for s, _, title in rows if p["person"] in title and s > NOW)
        return starts[0].strftime("%B %d %Y %H:%M")
    if name in ("SimpleCalendarEventsOnDate", "SimpleCalendarAnyEventsOnDate"):
        day = _when(p["date"]).date()
        hits = [(s, ti) for s, e, ti in rows if s.date() <= day <= e.date()]
    elif name == "SimpleCalendarEventOnDateAtTime":
        at = _when(p["date"], p["time"])
        hits = [(s, ti) for s, e, ti in rows if s <= at <= e]
    elif name == "SimpleCalendarNextEvent":
        hits = [min((s, ti) for s, _, ti in rows if s > NOW)]
    elif name == "SimpleCalendarEventsInNextWeek":  # Monday 16 to Sunday 22 October
        hits = [(s, ti) for s, _, ti in rows if dt.date(2023, 10, 16) <= s.date() <= dt.date(2023, 10, 22)]
    elif name == "SimpleCalendarFirstEventAfterStartTime":
        after = _when(p["date"], p["time"])
        hits = [min((s, ti) for s, _, ti in rows if s >= after)]
    else:  # SimpleCalendarEventsInTimeRange
        lo, hi = _when(p["date"], p["start_time"]), _when(p["date"], "8pm")
        hits = [(s, ti) for s, e, ti in rows if s <= hi and e >= lo]
    assert hits, (name, p)
    return ", ".join(ti.upper() for _, ti in sorted(hits, reverse=True))


TASKS_QUERIES = {"TasksDueOnDate", "TasksHighPriorityTasks", "TasksHighPriorityTasksDueOnDate", "TasksDueNextWeek",
                 "TasksCompletedTasksForDate", "TasksIncompleteTasksOnDate"}


def tasks_answer(name: str, t, dev: FakeDevice) -> str:
    """The answer read from the seeded Tasks ``tasks`` table by the test's own rules (importance 0 is
    the app's high priority; dates in ms), titles reversed and lower-cased."""
    rows = dev._select(TASKS_DB, "tasks")
    p = t.params

    def due(r):
        return dt.datetime.fromtimestamp(r["dueDate"] / 1000, UTC).date() if r["dueDate"] else None

    day = _when(p["date"]).date() if "date" in p else None
    if name == "TasksDueNextWeek":
        return str(sum(1 for r in rows if due(r) and dt.date(2023, 10, 16) <= due(r) <= dt.date(2023, 10, 22)))
    if name in ("TasksDueOnDate", "TasksCompletedTasksForDate"):
        hits = [r for r in rows if due(r) == day]
    elif name == "TasksHighPriorityTasks":
        hits = [r for r in rows if r["importance"] == 0]
    elif name == "TasksHighPriorityTasksDueOnDate":
        hits = [r for r in rows if r["importance"] == 0 and due(r) == day]
    else:  # TasksIncompleteTasksOnDate
        hits = [r for r in rows if not r["completed"] and due(r) and due(r) <= day]
    assert hits, (name, p)
    return ", ".join(r["title"].lower() for r in reversed(hits))


def answer_for(name: str, t, dev: FakeDevice) -> Optional[str]:
    if name == "SimpleCalendarLocationOfEvent":
        return f"  {t.params['location'].upper()}. "
    if name in CALENDAR_QUERIES:
        return calendar_answer(name, t, dev)
    if name in TASKS_QUERIES:
        return tasks_answer(name, t, dev)
    return None


def near_miss(name: str, dev: FakeDevice, t) -> tuple[Optional[str], float]:
    """Almost the task (the answer to give and the expected score)."""
    p = t.params
    if name.startswith("SystemWifi"):
        dev.settings[("global", "wifi_on")] = "0" if p["on_or_off"] == "on" else "1"
    elif name.startswith("SystemBluetooth"):
        dev.settings[("global", "bluetooth_on")] = "0" if p["on_or_off"] == "on" else "1"
    elif name.startswith("SystemBrightness"):
        dev.settings[("system", "screen_brightness")] = "254" if p["max_or_min"] == "max" else "2"
    elif name == "OpenAppTaskEval":
        dev.foreground = "com.android.vending"  # another app
    elif name == "TurnOnWifiAndOpenApp":
        dev.settings[("global", "wifi_on")] = "1"  # wifi done, app not opened
        return None, 0.5
    elif name == "TurnOffWifiAndTurnOnBluetooth":
        dev.settings[("global", "bluetooth_on")] = "1"  # bluetooth done, wifi still on
        return None, 0.5
    elif name == "ContactsAddContact":
        dev.shell(["content", "insert", "--uri", "content://com.android.contacts/raw_contacts"])
        rid = str(dev.raw_contacts[-1])
        wrong = p["number"][:-1] + str((int(p["number"][-1]) + 1) % 10)  # one digit off
        dev.contact_data += [{"raw_contact_id": rid, "mimetype": "vnd.android.cursor.item/name", "data1": p["name"]},
                             {"raw_contact_id": rid, "mimetype": "vnd.android.cursor.item/phone_v2", "data1": wrong}]
    elif name == "SimpleSmsResend":
        _sms_solve(dev, t)
        _sms_solve(dev, t)  # resent twice
    elif name.startswith("SimpleSms"):
        dev.foreground = "com.simplemobiletools.smsmessenger"
        dev.send_sms(p["number"], p["message"], age_s=6 * 60)  # sent, but 6 minutes ago
    elif name.startswith("ExpenseAdd"):
        for row in p["row_objects"]:
            _insert_row(dev, t, dataclasses.replace(row, amount=row.amount + 100))  # $1 off
    elif "DeleteDuplicate" in name:  # both copies gone
        dev.db_exec(t.db_path, f"DELETE FROM {t.table} WHERE {t.key} IN (SELECT {t.key} FROM {t.table} "
                               f"ORDER BY {t.key} DESC LIMIT 2)")
    elif name == "MarkorChangeNoteContent":
        dev.write(f"{MARKOR}/{p['new_name']}", p["updated_content"])  # renamed by copying: the original stays
    elif name == "MarkorAddNoteHeader":
        dev.write(f"{MARKOR}/{p['new_name']}", f"{p['header']}\n{p['original_content']}\n")  # no blank line
        dev.shell(["rm", "-f", f"{MARKOR}/{p['original_name']}"])
    elif name == "MarkorMergeNotes":
        dev.write(f"{MARKOR}/{p['new_file_name']}", "\n".join(p[f"file{i}_content"] for i in (1, 2, 3)))  # no blanks
    elif name.startswith("RecipeAdd"):
        _insert_row(dev, t, p["row_objects"][0])
        _insert_row(dev, t, p["row_objects"][0])  # the first added twice, the others not
    elif name.startswith("SimpleCalendarAdd"):
        ev = p["row_objects"][0]
        _insert_row(dev, t, dataclasses.replace(ev, start_ts=ev.start_ts + 3600, end_ts=ev.end_ts + 3600))
    elif name.startswith("SimpleCalendarDelete"):  # the events asked for, and one more
        for key in t.to_delete:
            dev.db_exec(t.db_path, "DELETE FROM events WHERE id = ?", (key,))
        dev.db_exec(t.db_path, "DELETE FROM events WHERE id = (SELECT MIN(id) FROM events)")
    elif name.startswith("ExpenseDelete"):
        for row in p["row_objects"]:
            _delete_title(dev, t, "name", row.name)
        any_other = dev._select(t.db_path, t.table)
        if any_other:
            _delete_title(dev, t, "name", any_other[0]["name"])
        else:
            _insert_row(dev, t, Expense(name="Extra", amount=100, category=1))
    elif name.startswith("RecipeDelete"):
        for row in p["row_objects"]:
            dev.db_exec(t.db_path, "UPDATE recipes SET title = title || ' (copy)' WHERE title = ?", (row.title,))
    elif name == "SimpleCalendarLocationOfEvent":
        return "The location is somewhere else entirely", 0.0
    elif name == "SimpleCalendarNextMeetingWithPerson":  # an hour off
        when = dt.datetime.strptime(calendar_answer(name, t, dev), "%B %d %Y %H:%M") + dt.timedelta(hours=1)
        return when.strftime("%B %d %Y %H:%M"), 0.0
    elif name == "TasksDueNextWeek":  # one too many
        return str(int(tasks_answer(name, t, dev)) + 1), 0.0
    elif name in TASKS_QUERIES:  # the right titles less one
        return ", ".join(tasks_answer(name, t, dev).split(", ")[1:]) or "none", 0.0
    elif name in CALENDAR_QUERIES:  # the right titles plus one more of the table's
        right = calendar_answer(name, t, dev)
        other = next(r["title"] for r in dev._select(t.db_path, "events") if r["title"] not in right)
        return f"{right}, {other}", 0.0
    elif name == "MarkorCreateNote":
        dev.write(f"{MARKOR}/{p['file_name']}", "A completely different note body.")
    elif name == "MarkorCreateNoteAndSms":  # the note only, no SMS
        dev.write(f"{MARKOR}/{p['file_name']}", p["text"] + "\n")
        return None, 0.5
    elif name == "MarkorEditNote":  # the edit's text alone, the original text lost (or kept, for replace)
        extra = p.get("header") or p.get("footer")
        body = extra if extra else p["original_content"] + "\n" + p["replace_text"]
        dev.write(f"{MARKOR}/{p['file_name']}", body + "\n")
    elif name == "MarkorCreateFolder":
        dev.shell(["mkdir", "-p", f"{MARKOR}/{p['folder_name']}x"])
    elif name == "MarkorDeleteNote":
        victim = next(f for f in dev.files if f.startswith(MARKOR + "/") and not f.endswith(p["file_name"]))
        dev.shell(["rm", "-f", victim])
    elif name == "MarkorDeleteAllNotes":
        for f in sorted(f for f in dev.files if f.startswith(MARKOR + "/"))[:-1]:
            dev.shell(["rm", "-f", f])  # all but one
    elif name == "MarkorMoveNote":
        src = f"{MARKOR}/{p['source_folder']}/{p['file_name']}"
        dev.files[f"{MARKOR}/{p['destination_folder']}/{p['file_name']}"] = dev.files[src]  # copied, not moved
    elif name == "FilesDeleteFile":
        victim = next(f for f in dev.files
                      if f.startswith(f"{SD}/{p['subfolder']}/") and not f.endswith(p["file_name"]))
        dev.shell(["rm", "-f", victim])
    elif name == "CameraTakePhoto":  # two photos, not one
        dev.write(f"{SD}/Pictures/PXL_1.jpg", "jpeg")
        dev.write(f"{SD}/Pictures/PXL_2.jpg", "jpeg")
    elif name == "CameraTakeVideo":  # a photo instead of a video
        dev.write(f"{SD}/Pictures/PXL_1.jpg", "jpeg")
    elif name == "SimpleDrawProCreateDrawing":  # saved to Download instead of Pictures
        dev.write(f"{SD}/Download/{p['file_name']}", "png")
    elif name == "AudioRecorderRecordAudioWithFileName":  # saved under the app's default name
        dev.write(f"{AUDIO}/Record-1.m4a", "m4a")
    elif name == "SaveCopyOfReceiptTaskEval":  # copied into Documents instead of Download
        dev.write(f"{SD}/Documents/{p['file_name']}", "jpeg")
    elif name == "FilesMoveFile":
        _files_move(dev, f"{SD}/{p['source_folder']}/{p['file_name']}", f"{SD}/Download/{p['file_name']}"
                    if p["destination_folder"] != "Download" else f"{SD}/Music/{p['file_name']}")
    else:
        raise AssertionError(f"no near miss for {name}")
    return answer_for(name, t, dev), 0.0


VERIFY = {n for n in TASKS.names() if n.endswith("Verify")}
UNPARAMETERISED = ({n for n in TASKS.names() if n.startswith("System")}
                   | {"TurnOffWifiAndTurnOnBluetooth", "CameraTakePhoto", "CameraTakeVideo"})
ALL = TASKS.names()


def test_at_least_20_tasks_over_6_apps():
    apps = {a for n in ALL for a in TASKS.get(n).app_names}
    assert len(ALL) >= 20 and len(apps) >= 6, (len(ALL), apps)


@pytest.mark.parametrize("name", sorted(set(ALL) - UNPARAMETERISED))
def test_params_differ_across_seeds_and_repeat_for_a_seed(name):
    cls = TASKS.get(name)
    params = {repr(sorted(cls.generate_random_params(seed).items())) for seed in range(6)}
    assert len(params) >= 2, params
    cls(cls.generate_random_params(0)).goal  # every instance renders its goal
    assert cls.generate_random_params(3) == cls.generate_random_params(3)


@pytest.mark.parametrize("name", ALL)
def test_initialise_then_solve_scores_one(name):
    cls = TASKS.get(name)
    dev = FakeDevice()
    t = cls(cls.generate_random_params(11))
    t.initialize_task(dev)
    before = t.is_successful(dev, answer=None)
    assert before == (1.0 if name in VERIFY else 0.0)
    solve(name, dev, t)
    assert t.is_successful(dev, answer=answer_for(name, t, dev)) == 1.0
    t.tear_down(dev)


@pytest.mark.parametrize("name", ALL)
def test_near_miss_scores_zero_or_partial(name):
    cls = TASKS.get(name)
    dev = FakeDevice()
    t = cls(cls.generate_random_params(5))
    t.initialize_task(dev)
    answer, expected = near_miss(name, dev, t)
    assert t.is_successful(dev, answer=answer) == expected


# --------------------------------------------------------------------------- initialisation details


def test_initialisers_set_state_through_the_device():
    dev = FakeDevice()
    t = TASKS.get("SystemWifiTurnOn")({"on_or_off": "on"})
    t.initialize_task(dev)
    assert ("svc", "wifi", "disable") in dev.shell_log and dev.settings[("global", "wifi_on")] == "0"

    dev = FakeDevice()
    cls = TASKS.get("ExpenseDeleteMultiple")
    t = cls(cls.generate_random_params(2))
    t.initialize_task(dev)
    names = [r["name"] for r in dev._select(t.db_path, "expense")]
    assert names == [r.name for r in t.params["row_objects"]]
    assert ("am", "force-stop", "com.arduia.expense") in dev.shell_log  # app reopens the pushed DB
    log = dev.shell_log
    assert ("rm", "-f", t.db_path + "-wal") in log
    i = log.index(("chown", "10123:10123", t.db_path))  # the pushed file goes back to the app's uid
    assert log[i + 1:i + 4] == [("chmod", "660", t.db_path), ("restorecon", t.db_path),
                                ("am", "force-stop", "com.arduia.expense")]

    dev = FakeDevice()
    cls = TASKS.get("SimpleSmsSendReceivedAddress")
    t = cls(cls.generate_random_params(4))
    t.initialize_task(dev)
    inbox = dev.content_query("content://sms/inbox")
    assert [(r["address"], r["body"]) for r in inbox] == [(t.params["name2_number"], t.params["message"])]
    contacts = V.list_contacts(dev)
    assert (t.params["name1"], V.digits(t.params["number"])) in contacts and len(contacts) == 2


def test_sms_in_the_wrong_app_scores_zero():
    dev = FakeDevice()
    cls = TASKS.get("SimpleSmsSend")
    t = cls(cls.generate_random_params(1))
    t.initialize_task(dev)
    dev.send_sms(t.params["number"], t.params["message"])
    dev.foreground = "com.google.android.apps.messaging"
    assert t.is_successful(dev) == 0.0


def test_unreadable_app_data_is_infra_with_the_cause():
    dev = FakeDevice()
    real_shell = dev.shell

    def shell(argv, timeout_s=20.0):
        if argv[0] == "find" and argv[1].startswith("/data/data/"):
            return f"find: '{argv[1]}': Permission denied\n"
        return real_shell(argv, timeout_s)

    dev.shell = shell  # type: ignore[method-assign]
    cls = TASKS.get("RecipeDeleteSingleRecipe")
    with pytest.raises(EnvInfraError, match="Permission denied.*adb root"):
        cls(cls.generate_random_params(0)).initialize_task(dev)


def test_missing_app_database_is_infra_not_failure():
    dev = FakeDevice()
    del dev.files["/data/data/com.arduia.expense/databases/accounting.db"]
    cls = TASKS.get("ExpenseAddSingle")
    t = cls(cls.generate_random_params(1))
    t.launch_wait_s = 0.0
    with pytest.raises(EnvInfraError, match="accounting.db does not exist even after launching 'pro expense'"):
        t.initialize_task(dev)
    assert dev.launched == ["pro expense"]


def test_scoring_before_initialise_and_missing_params_are_spec_errors():
    cls = TASKS.get("ContactsAddContact")
    with pytest.raises(TaskSpecError, match="params missing number"):
        cls({"name": "A B"})
    with pytest.raises(TaskSpecError, match="before initialize_task"):
        cls(cls.generate_random_params(0)).is_successful(FakeDevice())


# --------------------------------------------------------------------------- validators


def test_answer_matching():
    assert V.answer_matches(" Conference Room A. ", "conference room a")
    assert V.answer_matches("$1,200", "1200.0")
    assert not V.answer_matches("1201", "1200")
    assert not V.answer_matches(None, "x")
    assert not V.answer_matches("City Park", "Art Museum")


def test_fuzzy_match_threshold_is_androidworlds():
    assert V.fuzzy_match("Call me when you land", "call me when you land.")  # ratio ~0.98
    assert not V.fuzzy_match("Call me when you land", "Call me when you leave")


def test_sms_recency_window():
    rows = [{"address": "+1 555-123-4567", "body": "hi there", "date": str(NOW_S * 1000 - 4 * 60_000)}]
    assert V.sms_was_sent(rows, "+15551234567", "Hi there", NOW_S * 1000)
    assert not V.sms_was_sent(rows, "+15551234567", "Hi there", NOW_S * 1000 + 2 * 60_000)


def test_sql_literal_quotes():
    assert V.sql_literal("Sara's \"bakery\"; DROP TABLE sms;") == "'Sara''s \"bakery\"; DROP TABLE sms;'"
    assert V.sql_literal(None) == "NULL" and V.sql_literal(5) == "5"


# --------------------------------------------------------------------------- metadata


def test_metadata_table_and_step_budget():
    rows = {r.name: r for r in metadata_table()}
    assert set(rows) == set(ALL)
    r = rows["ContactsAddContact"]
    assert (r.difficulty, r.optimal_steps, r.apps, r.max_steps) == ("easy", 5, ("contacts",), 12)
    assert rows["SimpleCalendarAddOneEvent"].max_steps == 34  # int(10 * 3.4)
    assert all(r.template for r in rows.values())


def test_load_androidworld_metadata_file(tmp_path):
    mirror = Path("/work/.mirror/google-research+android_world/repo")
    src = None
    if mirror.exists():
        try:
            src = subprocess.run(["git", "-C", str(mirror), "show", "HEAD:android_world/task_metadata.json"],
                                 capture_output=True, text=True, check=True, timeout=30).stdout
        except (subprocess.SubprocessError, OSError):
            src = None
    if src is None:
        pytest.skip("AndroidWorld's task_metadata.json is not available on this machine")
    path = tmp_path / "task_metadata.json"
    path.write_text(src)
    rows = {r.name: r for r in load_task_metadata(path)}
    assert len(rows) == 116
    ours = {r.name: r for r in metadata_table()}
    for name, r in ours.items():  # our table agrees with the published file
        assert (rows[name].difficulty, rows[name].optimal_steps) == (r.difficulty, r.optimal_steps), name
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"task_name": "X", "difficulty": "easy"}]))
    with pytest.raises(TaskSpecError, match="bad.json: task #0 \\(X\\)"):
        load_task_metadata(bad)


# --------------------------------------------------------------------------- a real device


def test_settings_tasks_on_a_real_device_when_given():
    serial = os.environ.get("GUIGYM_ADB_SERIAL")
    if not serial:
        pytest.skip("set GUIGYM_ADB_SERIAL to run AndroidWorld tasks on a real device or emulator")
    try:
        from guigym.envs.android.controller import AdbDevice
    except ImportError as e:
        pytest.skip(f"the adb controller is not importable here: {e}")
    dev = AdbDevice(serial)
    old = dev.settings_get("system", "screen_brightness")
    try:
        t = TASKS.get("SystemBrightnessMax")({"max_or_min": "max"})
        t.initialize_task(dev)
        assert t.is_successful(dev) == 0.0
        dev.settings_put("system", "screen_brightness", "255")  # what the slider does
        assert t.is_successful(dev) == 1.0
        m = TASKS.get("MarkorCreateNote")({"file_name": "guigym_live.md", "text": "hello from guigym"})
        m.initialize_task(dev)
        assert m.is_successful(dev) == 0.0
        V.write_file(dev, f"{MARKOR}/guigym_live.md", "hello from guigym")
        assert m.is_successful(dev) == 1.0
        m.tear_down(dev)
    finally:
        if old is not None:
            dev.settings_put("system", "screen_brightness", old)


# --------------------------------------------------------------------------- the causation check


@pytest.mark.parametrize("name", ALL)
def test_causation_check_on_the_fake(name):
    """``guigym tasks check``'s verdict per task: no-op 0 (1 for *Verify), the reference end state 1."""
    from guigym.envs.android.check import check_task

    row = check_task(name, FakeDevice(), seed=4)
    assert row.status == "ok", row
    assert row.noop == (1.0 if name in VERIFY else 0.0) and row.reference == 1.0


def test_causation_check_catches_a_wrong_reference_a_winning_noop_and_a_missing_reference():
    from guigym.envs.android.androidworld.base import AndroidWorldTask
    from guigym.envs.android.androidworld.system import SystemWifiTurnOn
    from guigym.envs.android.check import check_task, counts

    class WrongReference(SystemWifiTurnOn):
        def reference(self, device):
            return None  # leaves wifi off

    class StartsSolved(SystemWifiTurnOn):
        initial = "on"  # start state is the goal, but the task does not say so

        @classmethod
        def start_is_goal(cls) -> bool:
            return False

    class NoReference(AndroidWorldTask):
        pass

    rows = [check_task("w", FakeDevice(), cls=WrongReference), check_task("s", FakeDevice(), cls=StartsSolved),
            check_task("n", FakeDevice(), cls=NoReference)]
    assert [(r.status, r.noop, r.reference) for r in rows] == [
        ("mismatch", 0.0, 0.0), ("mismatch", 1.0, 1.0), ("unchecked", 0.0, None)]
    assert rows[0].reason == "reference scored 0 (expected 1)"
    assert rows[1].reason == "no-op scored 1 (expected 0)"
    assert counts(rows) == {"ok": 0, "mismatch": 2, "unchecked": 1, "infra": 0, "total": 3}


def test_docs_state_the_computed_task_counts():
    """docs/envs/android.md's AndroidWorld counts are the registry's (and every task has a reference)."""
    from guigym.envs.android.androidworld.base import AndroidWorldTask

    text = (Path(__file__).parent.parent / "docs" / "envs" / "android.md").read_text()
    apps = {a for n in ALL for a in TASKS.get(n).app_names}
    with_reference = [n for n in ALL if TASKS.get(n).reference is not AndroidWorldTask.reference]
    assert len(with_reference) == len(ALL)
    assert f"{len(ALL)} of AndroidWorld's 116 task classes" in text
    assert f"over {len(apps)} apps" in text
    assert f"`guigym tasks check --env AndroidWorld-v0` checks all {len(with_reference)}" in text


# --------------------------------------------------------------------------- harder Expense / Broccoli variants


def test_constraint_recipes_are_exactly_those_whose_directions_use_the_ingredient():
    cls = TASKS.get("RecipeDeleteMultipleRecipesWithConstraint")
    dev = FakeDevice()
    t = cls(cls.generate_random_params(3))
    t.initialize_task(dev)
    rows = dev._select(t.db_path, "recipes")
    using = sorted(r["recipeId"] for r in rows if t.params["ingredient"] in r["directions"].lower())
    assert len(rows) == 32 and len(using) == 3 and sorted(t.to_delete) == using
    for key in using[:2]:  # two of the three deleted: not done yet
        dev.db_exec(t.db_path, "DELETE FROM recipes WHERE recipeId = ?", (key,))
    assert t.is_successful(dev) == 0.0


def test_expenses_from_markor_are_the_marked_lines_and_either_note_form_passes():
    cls = TASKS.get("ExpenseAddMultipleFromMarkor")
    for marked_note in (False, True):
        dev = FakeDevice()
        t = cls(cls.generate_random_params(8))
        t.initialize_task(dev)
        lines = dev.files[f"{MARKOR}/my_expenses.txt"].decode().splitlines()
        marked = [ln.split(",") for ln in lines[1:] if ln.endswith("Reimbursable.")]
        assert len(lines) == 103 and len(marked) == 2 and len(dev._select(t.db_path, "expense")) == 100
        for name, dollars, category, note in marked:  # what the agent reads, typed into the app
            cat = next(k for k, v in D_CATEGORIES.items() if v == category)
            note = note if marked_note else note[: -len(". Reimbursable.")]
            dev.db_exec(t.db_path, "INSERT INTO expense (name, amount, category, note, created_date, modified_date) "
                        "VALUES (?, ?, ?, ?, 0, 0)", (name, round(float(dollars) * 100), cat, note))
        assert t.is_successful(dev) == 1.0
        unmarked = lines[1].split(",") if not lines[1].endswith("Reimbursable.") else lines[2].split(",")
        dev.db_exec(t.db_path, "INSERT INTO expense (name, amount, category, note) VALUES (?, ?, 1, ?)",
                    (unmarked[0], round(float(unmarked[1]) * 100), unmarked[3]))
        assert t.is_successful(dev) == 0.0  # a transaction that is not reimbursable was logged too


def test_duplicate_recipes_3_keeps_look_alikes_that_are_not_duplicates():
    cls = TASKS.get("RecipeDeleteDuplicateRecipes3")
    dev = FakeDevice()
    t = cls(cls.generate_random_params(2))
    t.initialize_task(dev)
    rows = dev._select(t.db_path, "recipes")
    fields = [k for k in rows[0] if k != "recipeId"]
    as_tuples = [tuple(r[k] for k in fields) for r in rows]
    dupes = {x for x in as_tuples if as_tuples.count(x) > 1}
    assert len(rows) == 32 and len(dupes) == 1
    (dupe,) = dupes
    look_alikes = [r for r in rows if r["title"] == dupe[0] and tuple(r[k] for k in fields) != dupe]
    assert look_alikes, "the noise has rows sharing the duplicate's title but differing elsewhere"
    dev.db_exec(t.db_path, "DELETE FROM recipes WHERE recipeId = ?", (look_alikes[0]["recipeId"],))
    assert t.is_successful(dev) == 0.0  # deleting a look-alike is not deduplicating
