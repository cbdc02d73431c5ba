"""The stand-in device with AndroidWorld's app state: a named STAND-IN, not an emulator.

:class:`AppStandin` is :class:`~guigym.envs.android.standin.StandinDevice` (the real adb transport,
files, settings) plus the device-side pieces AndroidWorld's tasks set up and read:

* the apps' SQLite databases at their real paths, created from the apps' table layouts
  (:data:`APP_DATABASES`), and ``sqlite3 DB SQL`` run on them with the host's SQLite (output in
  ``sqlite3``'s list mode, ``|``-separated);
* the contacts provider (``content insert`` into ``raw_contacts`` / ``data``, ``pm clear``,
  ``content query`` of ``content://contacts/phones/`` and ``raw_contacts``) and the SMS provider
  (``content://sms/inbox|sent``, read from the telephony database as Android's provider does);
* ``dumpsys activity activities`` naming the app last launched with ``monkey -p`` (the launcher after
  HOME), ``stat -c %u:%g``, ``chown``/``chmod``/``restorecon`` (accepted for existing files) and
  ``cmd connectivity airplane-mode``.

What it cannot stand in for is an app's UI and any state only the UI holds; ``guigym tasks check
--env AndroidWorld-v0`` (:mod:`guigym.envs.android.check`) runs against it.
"""
from __future__ import annotations

import os
import posixpath
import sqlite3
import tempfile
from typing import Any, Optional

from guigym.envs.android.standin import SDCARD, StandinDevice

LAUNCHER = "com.google.android.apps.nexuslauncher"
SMS_DB = "/data/data/com.android.providers.telephony/databases/mmssms.db"
SMS_SCHEMA = ("CREATE TABLE sms (_id INTEGER PRIMARY KEY AUTOINCREMENT, thread_id INTEGER, address TEXT, "
              "date INTEGER, body TEXT, type INTEGER, read INTEGER DEFAULT 0);"
              "CREATE TABLE threads (_id INTEGER PRIMARY KEY AUTOINCREMENT, recipient_ids TEXT)")
#: folders AndroidWorld's tasks write into on a fresh image
SD_FOLDERS = ("Documents", "Documents/Markor", "Download", "Music", "Movies", "Pictures", "DCIM", "Alarms",
              "Audiobooks", "Notifications", "Podcasts", "Recordings", "Ringtones")
APP_UID = "10123:10123"


def app_databases() -> dict[str, str]:
    """Database path -> its tables' CREATE statements (the apps' column layouts)."""
    from guigym.envs.android.androidworld.calendar import EVENTS_SCHEMA
    from guigym.envs.android.androidworld.sqlite_apps import EXPENSE_SCHEMA, RECIPE_SCHEMA
    from guigym.envs.android.androidworld.tasks_app import DB_PATH as TASKS_DB, TASKS_SCHEMA

    return {
        "/data/data/com.arduia.expense/databases/accounting.db": EXPENSE_SCHEMA,
        "/data/data/com.flauschcode.broccoli/databases/broccoli": RECIPE_SCHEMA,
        "/data/data/com.simplemobiletools.calendar.pro/databases/events.db": EVENTS_SCHEMA,
        TASKS_DB: TASKS_SCHEMA,
        SMS_DB: SMS_SCHEMA,
    }


def _db_bytes(schema: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "x.db")
        con = sqlite3.connect(path)
        con.executescript(schema)
        con.commit()
        con.close()
        with open(path, "rb") as f:
            return f.read()


class AppStandin(StandinDevice):
    """A stand-in seeded as a fresh AndroidWorld image: app databases, shared-storage folders,
    installed packages, Wi-Fi on and Bluetooth off (see the module docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        from guigym.envs.android.controller import APP_PACKAGES

        kwargs.setdefault("packages", sorted(set(APP_PACKAGES.values())))
        settings = kwargs.setdefault("settings", {})
        settings.setdefault("global", {"wifi_on": "1", "bluetooth_on": "0", "airplane_mode_on": "0"})
        settings.setdefault("system", {"screen_brightness": "128"})
        super().__init__(**kwargs)
        for path, schema in app_databases().items():
            self._write(path, _db_bytes(schema))
        for folder in SD_FOLDERS:
            self._mkdirs(posixpath.join(SDCARD, folder))
        self.foreground = LAUNCHER
        self.raw_contacts: list[int] = []
        self.contact_data: list[dict[str, str]] = []

    # -- the shell ---------------------------------------------------------------------------------
    def _execute(self, argv: list[str]) -> bytes:
        name, args = argv[0], argv[1:]
        if name == "sqlite3" and len(args) == 2:
            self.commands.append(list(argv))
            return self._sqlite(self._norm(args[0]), args[1]).encode("utf-8")
        if name == "content" and args[:1] == ["insert"]:
            self.commands.append(list(argv))
            return self._content_insert(args[1:]).encode("utf-8")
        if name == "pm" and args[:1] == ["clear"] and args[1:]:
            self.commands.append(list(argv))
            if args[1] == "com.android.providers.contacts":
                self.raw_contacts, self.contact_data = [], []
            return b"Success\n"
        if name == "stat" and args[:2] == ["-c", "%u:%g"] and args[2:]:
            self.commands.append(list(argv))
            path = self._norm(args[2])
            found = path in self.dirs or path in self.files
            return (APP_UID if found else f"stat: '{args[2]}': No such file or directory").encode() + b"\n"
        if name in ("chown", "chmod", "restorecon") and args:
            self.commands.append(list(argv))
            path = self._norm(args[-1])
            return b"" if path in self.files or path in self.dirs else f"{name}: {args[-1]}: No such file\n".encode()
        if name == "cmd" and args[:2] == ["connectivity", "airplane-mode"] and args[2:]:
            self.commands.append(list(argv))
            self.settings["global"]["airplane_mode_on"] = "1" if args[2] == "enable" else "0"
            return b""
        if name == "dumpsys" and args[:2] == ["activity", "activities"]:
            self.commands.append(list(argv))
            return (f"  Display #0\n    mResumedActivity: ActivityRecord{{7d1c u0 {self.foreground}/.Main t12}}\n"
                    .encode())
        out = super()._execute(argv)
        if name == "monkey" and "-p" in args[:-1] and args[args.index("-p") + 1] in self.packages:
            self.foreground = args[args.index("-p") + 1]
        elif name == "input" and args[:1] == ["keyevent"] and args[1:] and args[1].upper() in ("KEYCODE_HOME", "3"):
            self.foreground = LAUNCHER
        return out

    def _sqlite(self, path: str, sql: str) -> str:
        """``sqlite3 DB SQL`` with the host's SQLite on the device file; rows ``|``-joined."""
        if path not in self.files:
            return f"Error: unable to open database \"{path}\": unable to open database file\n"
        with tempfile.TemporaryDirectory() as tmp:
            local = os.path.join(tmp, "db")
            with open(local, "wb") as f:
                f.write(self.files[path])
            con = sqlite3.connect(local)
            try:
                rows: list[tuple[Any, ...]] = []
                for stmt in _statements(sql):
                    rows += con.execute(stmt).fetchall()
                con.commit()
            except sqlite3.Error as exc:
                return f"Error: {exc}\n"
            finally:
                con.close()
            with open(local, "rb") as f:
                self.files[path] = f.read()
        return "".join("|".join("" if v is None else str(v) for v in r) + "\n" for r in rows)

    # -- providers ---------------------------------------------------------------------------------
    def _content_insert(self, args: list[str]) -> str:
        opts = [(args[k], args[k + 1]) for k in range(0, len(args) - 1) if args[k].startswith("--")]
        uri = next((v for k, v in opts if k == "--uri"), "")
        binds = {}
        for k, v in opts:
            if k == "--bind":
                col, _, rest = v.partition(":")
                binds[col] = rest.partition(":")[2]
        if uri == "content://com.android.contacts/raw_contacts":
            self.raw_contacts.append(max(self.raw_contacts, default=0) + 1)
        elif uri == "content://com.android.contacts/data":
            self.contact_data.append(binds)
        else:
            return f"Error: no provider for {uri}\n"
        return ""

    def _content_query(self, args: list[str]) -> str:
        opts = {args[k]: args[k + 1] for k in range(len(args) - 1) if args[k].startswith("--")}
        uri = opts.get("--uri", "")
        rows: Optional[list[dict[str, Any]]] = None
        if uri.rstrip("/") == "content://contacts/phones":
            names = {d.get("raw_contact_id"): d.get("data1", "") for d in self.contact_data
                     if d.get("mimetype") == "vnd.android.cursor.item/name"}
            rows = [{"display_name": names.get(d.get("raw_contact_id"), ""), "number": d.get("data1", "")}
                    for d in self.contact_data if d.get("mimetype") == "vnd.android.cursor.item/phone_v2"]
        elif uri == "content://com.android.contacts/raw_contacts":
            rows = [{"_id": str(i)} for i in self.raw_contacts]
        elif uri in ("content://sms/inbox", "content://sms/sent") and SMS_DB in self.files:
            kind = 1 if uri.endswith("inbox") else 2
            rows = self._sms_rows(kind)
        if rows is None:
            return super()._content_query(args)
        if not rows:
            return "No result found."
        cols = opts["--projection"].split(":") if "--projection" in opts else None
        return "\n".join(f"Row: {i} " + ", ".join(f"{k}={'NULL' if r.get(k) is None else r.get(k)}"
                                                   for k in (cols or list(r))) for i, r in enumerate(rows))

    def _sms_rows(self, kind: int) -> list[dict[str, Any]]:
        with tempfile.TemporaryDirectory() as tmp:
            local = os.path.join(tmp, "db")
            with open(local, "wb") as f:
                f.write(self.files[SMS_DB])
            con = sqlite3.connect(local)
            con.row_factory = sqlite3.Row
            try:
                return [dict(r) for r in con.execute("SELECT * FROM sms WHERE type = ? ORDER BY _id", (kind,))]
            finally:
                con.close()


def _statements(sql: str) -> list[str]:
    """``sql`` split into complete statements (sqlite3.complete_statement decides where one ends)."""
    out, buf = [], ""
    for part in sql.split(";"):
        buf += part + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \n;"):
                out.append(buf)
            buf = ""
    if buf.strip(" \n;"):
        out.append(buf)
    return out
