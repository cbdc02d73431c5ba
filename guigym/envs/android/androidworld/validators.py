"""State readers, writers and comparisons for AndroidWorld-style tasks, over the AndroidDevice Protocol only.

Behaviour follows google-research/android_world (read, not copied): ``utils/fuzzy_match_lib.py``
(case-insensitive ``difflib`` ratio >= 0.9), ``task_evals/common_validators/sqlite_validators.py``
(row addition / removal integrity), ``sms_validators.py`` (a sent message matches by address with
spaces and dashes removed, fuzzy body, and a date within the last 5 minutes of device time),
``utils/contacts_utils.py`` (``content://contacts/phones/`` with ``display_name:number``, numbers
compared digits-only) and ``utils/file_utils.py`` (existence by a recursive ``find``).

Every command goes through ``device.shell(argv)`` with one argv element per argument (the device
quotes each), so nothing here builds a shell string. SQLite databases are pulled to the host, read
or changed with :mod:`sqlite3`, and pushed back (``-wal``/``-shm`` companions removed on the device
so the app cannot replay stale pages), given back to the app's uid with its SELinux label, and the
owning app is force-stopped so it reopens the file.
On a real device this needs ``adb root`` (an emulator image without Google Play), as AndroidWorld's
own setup does.
"""
from __future__ import annotations

import dataclasses
import difflib
import os
import posixpath
import re
import sqlite3
import tempfile
from contextlib import contextmanager
from typing import Any, Iterator, Optional, Sequence, Type, TypeVar

from guigym.core.errors import EnvInfraError
from guigym.envs.android.device import AndroidDevice

FUZZY_MIN_RATIO = 0.9
SD = "/storage/emulated/0"
MARKOR_DATA = f"{SD}/Documents/Markor"
SMS_DB = "/data/data/com.android.providers.telephony/databases/mmssms.db"
SMS_RECENT_MINUTES = 5

R = TypeVar("R")


# --------------------------------------------------------------------------- comparisons


def fuzzy_match(a: Optional[str], b: Optional[str], ignore_case: bool = True) -> bool:
    """AndroidWorld's fuzzy match: ``difflib.SequenceMatcher`` ratio >= 0.9 (case-insensitive)."""
    if a is None or b is None:
        return False
    a, b = str(a), str(b)
    if ignore_case:
        a, b = a.lower(), b.lower()
    return difflib.SequenceMatcher(None, a, b).ratio() >= FUZZY_MIN_RATIO


def digits(s: str) -> str:
    return re.sub(r"\D", "", s or "")


def _number(s: str) -> Optional[float]:
    t = s.strip().replace(",", "")
    t = re.sub(r"^[$€£]", "", t)
    try:
        return float(t)
    except ValueError:
        return None


def answer_matches(answer: Optional[str], expected: str) -> bool:
    """The agent's final answer vs the expected one: numbers compare by value (``"$1,200"`` ==
    ``"1200.0"``), other text by :func:`fuzzy_match` after trimming whitespace and a final period."""
    if answer is None:
        return False
    got, want = answer.strip().rstrip("."), expected.strip().rstrip(".")
    gn, wn = _number(got), _number(want)
    if gn is not None and wn is not None:
        return abs(gn - wn) < 1e-6
    return fuzzy_match(got, want)


# --------------------------------------------------------------------------- settings / system


def toggle_service(device: AndroidDevice, service: str, on: bool) -> None:
    """``svc wifi|bluetooth enable|disable`` (AndroidWorld's ``adb_utils._toggle_svc``)."""
    if service not in ("wifi", "bluetooth", "data"):
        raise ValueError(f"service must be wifi, bluetooth or data, got {service!r}")
    device.shell(["svc", service, "enable" if on else "disable"])


def setting_int(device: AndroidDevice, namespace: str, key: str) -> Optional[int]:
    """``settings get`` as an int; None when unset or not a number."""
    value = device.settings_get(namespace, key)
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


_RESUMED = re.compile(r"(?:mResumedActivity|topResumedActivity|ResumedActivity)\s*[:=]\s*"
                      r"ActivityRecord\{\S+\s+\S+\s+([\w.]+)/([\w.$]+)")


def foreground_package(device: AndroidDevice) -> Optional[str]:
    """The package of the resumed activity (``dumpsys activity activities``), or None."""
    out = device.shell(["dumpsys", "activity", "activities"])
    m = _RESUMED.search(out or "")
    return m.group(1) if m else None


def device_time_ms(device: AndroidDevice) -> int:
    """The device clock in milliseconds (``date +%s``)."""
    out = (device.shell(["date", "+%s"]) or "").strip()
    if not out.isdigit():
        raise EnvInfraError(f"{device.serial}: `date +%s` answered {out[:80]!r}")
    return int(out) * 1000


def force_stop(device: AndroidDevice, package: str) -> None:
    device.shell(["am", "force-stop", package])


# --------------------------------------------------------------------------- files


def remove(device: AndroidDevice, path: str) -> None:
    device.shell(["rm", "-rf", path])


def mkdir(device: AndroidDevice, path: str) -> None:
    device.shell(["mkdir", "-p", path])


def clear_directory(device: AndroidDevice, path: str) -> None:
    """Empty ``path`` (remove and recreate: arguments are quoted, so no glob would expand)."""
    remove(device, path)
    mkdir(device, path)


def write_file(device: AndroidDevice, path: str, content: str) -> None:
    """Create ``path`` on the device with ``content`` (UTF-8), via a host temp file and push."""
    mkdir(device, posixpath.dirname(path))
    with tempfile.TemporaryDirectory(prefix="guigym-aw-") as tmp:
        local = os.path.join(tmp, posixpath.basename(path) or "file")
        with open(local, "w", encoding="utf-8") as f:
            f.write(content)
        device.push(local, path)


def read_file(device: AndroidDevice, path: str) -> str:
    """The text of ``path`` (pulled to the host; CR removed)."""
    with tempfile.TemporaryDirectory(prefix="guigym-aw-") as tmp:
        local = os.path.join(tmp, "pulled")
        device.pull(path, local)
        with open(local, "rb") as f:
            return f.read().decode("utf-8", "replace").replace("\r", "")


def list_tree(device: AndroidDevice, base: str) -> list[str]:
    """Every path under ``base`` (``find base``), ``base`` itself excluded; [] when it is missing.

    Lines that are not paths under ``base`` (``find: ...: No such file or directory`` on merged
    stderr) are ignored.
    """
    base = base.rstrip("/")
    out = device.shell(["find", base]) or ""
    if f"{base}: Permission denied" in out or f"'{base}': Permission denied" in out:
        raise EnvInfraError(f"{device.serial}: cannot list {base} (Permission denied); app data needs `adb root` "
                            "(an emulator image without Google Play)")
    return [ln.rstrip("/") for ln in out.replace("\r", "").splitlines()
            if ln.startswith(base + "/") and ln.rstrip("/") != base]


def exists_under(device: AndroidDevice, name: str, base: str) -> bool:
    """A file or folder called ``name`` exists anywhere under ``base`` (AndroidWorld's
    ``check_file_or_folder_exists``)."""
    return any(posixpath.basename(p) == name for p in list_tree(device, base))


def list_files(device: AndroidDevice, directory: str) -> list[str]:
    """Names directly inside ``directory``."""
    directory = directory.rstrip("/")
    return sorted(posixpath.basename(p) for p in list_tree(device, directory)
                  if posixpath.dirname(p) == directory)


# --------------------------------------------------------------------------- content providers


def list_contacts(device: AndroidDevice) -> list[tuple[str, str]]:
    """(display_name, digits-only number) of every phone entry (``content://contacts/phones/``)."""
    rows = device.content_query("content://contacts/phones/", projection=["display_name", "number"])
    return [(r.get("display_name", ""), digits(r.get("number", ""))) for r in rows]


def clear_contacts(device: AndroidDevice) -> None:
    """Wipe the contacts provider's data (AndroidWorld's ``contacts_utils.clear_contacts``)."""
    device.shell(["pm", "clear", "com.android.providers.contacts"])


def add_contact(device: AndroidDevice, name: str, number: str) -> None:
    """Insert a contact through the contacts provider (no UI): a raw contact, then its name and
    phone data rows (``content insert``)."""
    device.shell(["content", "insert", "--uri", "content://com.android.contacts/raw_contacts",
                  "--bind", "account_type:n:", "--bind", "account_name:n:"])
    rows = device.content_query("content://com.android.contacts/raw_contacts", projection=["_id"])
    ids = [int(r["_id"]) for r in rows if str(r.get("_id", "")).isdigit()]
    if not ids:
        raise EnvInfraError(f"{device.serial}: contact insert left no raw contact")
    rid = str(max(ids))
    for mime, value, extra in (("vnd.android.cursor.item/name", name, []),
                               ("vnd.android.cursor.item/phone_v2", number, ["--bind", "data2:i:2"])):
        device.shell(["content", "insert", "--uri", "content://com.android.contacts/data",
                      "--bind", f"raw_contact_id:i:{rid}", "--bind", f"mimetype:s:{mime}",
                      "--bind", f"data1:s:{value}", *extra])


def sms_rows(device: AndroidDevice, box: str = "sent") -> list[dict[str, str]]:
    """Rows of ``content://sms/<box>`` (inbox, sent, ...)."""
    return device.content_query(f"content://sms/{box}")


def sms_was_sent(rows: Sequence[dict[str, str]], number: str, body: str, now_ms: int,
                 minutes: int = SMS_RECENT_MINUTES) -> bool:
    """AndroidWorld's ``was_sent``: same address (spaces/dashes removed), fuzzy body, sent within
    the last ``minutes`` of device time."""
    want = number.replace("-", "").replace(" ", "")
    for r in rows:
        addr = r.get("address", "").replace("-", "").replace(" ", "")
        try:
            date = int(r.get("date", "0"))
        except ValueError:
            continue
        if addr == want and fuzzy_match(r.get("body", ""), body) and now_ms - date <= minutes * 60_000:
            return True
    return False


def sql_literal(value: Any) -> str:
    """A SQLite literal for a str/int/float/None (strings single-quoted, quotes doubled)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def device_sql(device: AndroidDevice, db_path: str, sql: str) -> str:
    """Run ``sqlite3 DB SQL`` on the device (emulator images ship ``sqlite3``; needs adb root)."""
    return device.shell(["sqlite3", db_path, sql])


def clear_sms(device: AndroidDevice) -> None:
    """Empty the telephony provider's ``sms`` and ``threads`` tables (as AndroidWorld does)."""
    device_sql(device, SMS_DB, "DELETE FROM sms; DELETE FROM threads;")


def receive_sms(device: AndroidDevice, number: str, body: str, date_ms: int) -> None:
    """Put a received (inbox, unread) message into the telephony database."""
    device_sql(device, SMS_DB, "INSERT INTO sms (address, body, date, type, read) VALUES ("
               f"{sql_literal(number)}, {sql_literal(body)}, {int(date_ms)}, 1, 0);")


# --------------------------------------------------------------------------- SQLite app databases


@contextmanager
def pulled_db(device: AndroidDevice, db_path: str) -> Iterator[str]:
    """Pull ``db_path`` (and its ``-wal``/``-shm`` when present) into a temp dir; yield the local path.

    Raises FileNotFoundError when the database does not exist on the device.
    """
    directory, name = posixpath.split(db_path)
    present = set(list_files(device, directory))
    if name not in present:
        raise FileNotFoundError(db_path)
    with tempfile.TemporaryDirectory(prefix="guigym-aw-db-") as tmp:
        for suffix in ("", "-wal", "-shm"):
            if name + suffix in present:
                device.pull(db_path + suffix, os.path.join(tmp, name + suffix))
        yield os.path.join(tmp, name)


def row_dicts(db_path_local: str, table: str) -> list[dict[str, Any]]:
    con = sqlite3.connect(db_path_local)
    try:
        con.row_factory = sqlite3.Row
        return [dict(r) for r in con.execute(f'SELECT * FROM "{table}"')]  # table: a class constant
    finally:
        con.close()


def read_rows(device: AndroidDevice, db_path: str, table: str, row_type: Type[R]) -> list[R]:
    """All rows of ``table`` as ``row_type`` dataclasses (columns not in the dataclass ignored)."""
    names = {f.name for f in dataclasses.fields(row_type)}  # type: ignore[arg-type]
    with pulled_db(device, db_path) as local:
        return [row_type(**{k: v for k, v in r.items() if k in names}) for r in row_dicts(local, table)]


def modify_db(device: AndroidDevice, db_path: str, package: str,
              statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
    """Apply parameterised SQL ``statements`` to the app database and put it back.

    The file is checkpointed into a single rollback-journal file before the push; the device's
    ``-wal``/``-shm`` are removed; the owning app is force-stopped so it reopens the new file.
    """
    with pulled_db(device, db_path) as local:
        con = sqlite3.connect(local)
        try:
            for sql, params in statements:
                con.execute(sql, tuple(params))
            con.commit()
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            con.execute("PRAGMA journal_mode=DELETE")
        finally:
            con.close()
        force_stop(device, package)
        for suffix in ("-wal", "-shm", "-journal"):
            device.shell(["rm", "-f", db_path + suffix])
        device.push(local, db_path)
    _restore_owner(device, db_path)
    force_stop(device, package)


def _restore_owner(device: AndroidDevice, path: str) -> None:
    """Give a pushed file back to the app: the uid:gid of its folder, mode 660, SELinux label.

    A root adbd writes the pushed file as root, which the app could read but not write.
    """
    owner = (device.shell(["stat", "-c", "%u:%g", posixpath.dirname(path)]) or "").strip()
    if re.fullmatch(r"\d+:\d+", owner):
        device.shell(["chown", owner, path])
    device.shell(["chmod", "660", path])
    device.shell(["restorecon", path])


def insert_sql(table: str, row: Any, exclude: Optional[str]) -> tuple[str, list[Any]]:
    """``INSERT`` of a row dataclass (``exclude``: the auto-increment key)."""
    fields = [f.name for f in dataclasses.fields(row) if f.name != exclude]
    cols = ", ".join(f'"{c}"' for c in fields)
    marks = ", ".join("?" for _ in fields)
    return f'INSERT INTO "{table}" ({cols}) VALUES ({marks})', [getattr(row, c) for c in fields]


def rows_removed_intact(before: Sequence[Any], after: Sequence[Any], ids: Sequence[int], key: str) -> bool:
    """AndroidWorld's removal integrity: every row with an id in ``ids`` is gone, every other row of
    ``before`` is still there unchanged, and nothing new appeared."""
    for row in before:
        if getattr(row, key) in ids:
            if row in after:
                return False
        elif row not in after:
            return False
    return all(row in before for row in after)


def rows_added_intact(before: Sequence[Any], after: Sequence[Any], reference: Sequence[Any],
                      compare: Sequence[str], free_form: Sequence[str] = ()) -> bool:
    """AndroidWorld's addition integrity: each reference row has a match in ``after`` (exact on
    ``compare`` fields, fuzzy on ``free_form`` ones), exactly ``len(reference)`` rows were added,
    and every row of ``before`` is unchanged."""
    def matches(ref: Any, row: Any) -> bool:
        for f in compare:
            a, b = getattr(ref, f), getattr(row, f)
            if f in free_form:
                if not ((not a and not b) or fuzzy_match(a, b)):
                    return False
            elif a != b:
                return False
        return True

    if not all(any(matches(ref, row) for row in after) for ref in reference):
        return False
    if len(after) != len(before) + len(reference):
        return False
    return all(row in after for row in before)
