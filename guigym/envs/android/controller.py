"""``AdbDevice``: the :class:`~guigym.envs.android.device.AndroidDevice` over adbutils and the real adb server.

One object per device serial (``emulator-5554``, ``127.0.0.1:5555``, a phone's serial). Every call
goes to the adb server (``ANDROID_ADB_SERVER_PORT`` or ``adb_port``, default 5037) through
adbutils; the server forwards it to the device's adbd. What is sent:

* observation: ``exec:screencap -p`` (raw PNG, decoded with Pillow to uint8 RGB (H, W, 3));
  ``rm -f DUMP`` + ``uiautomator dump DUMP`` + a sync pull of ``DUMP`` for the UI tree, each try
  bounded by ``dump_timeout_s`` and tried ``dump_retries`` times; ``wm size``;
* input: ``input tap X Y``, ``input swipe X1 Y1 X2 Y2 MS`` (long press = the same point held
  1000 ms), ``input keyevent KEY``; text through the ADB Keyboard
  (``am broadcast -a ADB_INPUT_B64 --es msg BASE64``) when ``com.android.adbkeyboard`` is installed
  (checked once with ``pm list packages``; then selected with ``ime enable/set``), else
  ``input text`` with spaces as ``%s`` (printable ASCII only; anything else is a ConfigError that
  names the ADB Keyboard);
* apps: ``monkey -p PKG -c android.intent.category.LAUNCHER 1`` with PKG from :data:`APP_PACKAGES`
  (human names of AndroidWorld / AndroidLab apps) or a package name;
* state: ``settings get/put``, ``content query --uri U [--projection a:b] [--where W]`` parsed from
  its ``Row: N k=v, k=v`` lines, ``date -u MMDDhhmmCCYY.ss``, sync push/pull.

Shell commands are built by :func:`shell_line`: every argv element is ``shlex.quote``-d, so agent
text is one argument of one command, never shell syntax. Any adb failure (device gone, socket
closed, ``adbutils.AdbError``, a timeout) is raised as :class:`EnvInfraError` naming the serial.
"""
from __future__ import annotations

import base64
import io
import os
import re
import shlex
import socket
import sqlite3
import time
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Optional, Sequence

import numpy as np

from guigym.core.errors import ActionNotPossible, ConfigError, EnvInfraError

__all__ = ["AdbDevice", "APP_PACKAGES", "ADB_KEYBOARD", "shell_line", "parse_content_rows", "pull_sqlite",
           "input_text_chunks"]

ADB_KEYBOARD = "com.android.adbkeyboard"
ADB_IME = "com.android.adbkeyboard/.AdbIME"  # the ADB Keyboard's input method id
DUMP_PATH = "/sdcard/window_dump.xml"

#: human app name (lower case) -> package. AndroidWorld's apps (its adb_utils app patterns, on
#: its Pixel emulator image) and AndroidLab's (package fields of its task YAMLs).
APP_PACKAGES: dict[str, str] = {
    # system and Google apps
    "settings": "com.android.settings", "system settings": "com.android.settings",
    "contacts": "com.google.android.contacts", "clock": "com.google.android.deskclock",
    "camera": "com.android.camera2", "chrome": "com.android.chrome", "google chrome": "com.android.chrome",
    "files": "com.google.android.documentsui", "file manager": "com.google.android.documentsui",
    "dialer": "com.google.android.dialer", "phone": "com.google.android.dialer",
    "messages": "com.google.android.apps.messaging",
    # AndroidWorld's open-source apps
    "markor": "net.gsantner.markor",
    "simple calendar pro": "com.simplemobiletools.calendar.pro",
    "simple calendar": "com.simplemobiletools.calendar.pro",
    "calendar": "com.simplemobiletools.calendar.pro",
    "simple sms messenger": "com.simplemobiletools.smsmessenger", "simple sms": "com.simplemobiletools.smsmessenger",
    "sms messenger": "com.simplemobiletools.smsmessenger",
    "simple gallery pro": "com.simplemobiletools.gallery.pro", "simple gallery": "com.simplemobiletools.gallery.pro",
    "simple draw pro": "com.simplemobiletools.draw.pro",
    "pro expense": "com.arduia.expense", "expense": "com.arduia.expense", "pro expense app": "com.arduia.expense",
    "broccoli": "com.flauschcode.broccoli", "broccoli app": "com.flauschcode.broccoli",
    "recipe app": "com.flauschcode.broccoli",
    "audio recorder": "com.dimowner.audiorecorder", "osmand": "net.osmand", "tasks": "org.tasks",
    "opentracks": "de.dennisguse.opentracks", "open tracks": "de.dennisguse.opentracks",
    "joplin": "net.cozic.joplin", "vlc": "org.videolan.vlc", "retro music": "code.name.monkey.retromusic",
    "clipper": "ca.zgrs.clipper",
    # AndroidLab's apps
    "bluecoins": "com.rammigsoftware.bluecoins", "zoom": "us.zoom.videomeetings",
    "maps.me": "com.mapswithme.maps.pro", "map.me": "com.mapswithme.maps.pro",
    "pi music player": "com.Project100Pi.themusicplayer", "pimusic": "com.Project100Pi.themusicplayer",
}

_PACKAGE_RE = re.compile(r"^[A-Za-z][\w]*(\.[A-Za-z_][\w]*)+$")
_ROW_RE = re.compile(r"^Row: \d+ ", re.M)
_KEY_RE = re.compile(r"(?:^|, )([\w.\-]+)=")


def shell_line(argv: Sequence[Any]) -> str:
    """The ``sh -c`` text for ``argv``: each element ``shlex.quote``-d, joined by spaces."""
    if isinstance(argv, (str, bytes)) or not argv:
        raise ConfigError(f"argv: expected a non-empty list of arguments, got {argv!r}")
    return " ".join(shlex.quote(str(a)) for a in argv)


def parse_content_rows(text: str) -> list[dict[str, str]]:
    """``content query`` output -> one dict per ``Row: N k=v, k=v`` line.

    Values may contain ``, `` and line breaks; a value runs until the next ``, key=`` whose key is one
    of the row's column names (taken from the first row, where adb prints all of them).
    "No result found." -> [].
    """
    starts = [m.start() for m in _ROW_RE.finditer(text)]
    rows: list[dict[str, str]] = []
    known: Optional[set[str]] = None
    for i, s in enumerate(starts):
        body = text[s:starts[i + 1] if i + 1 < len(starts) else len(text)]
        body = body.split(" ", 2)[2].rstrip("\r\n")
        keys = [m for m in _KEY_RE.finditer(body) if known is None or m.group(1) in known]
        if known is None:  # first row: a key is a word followed by "=" right after ", "
            known = {m.group(1) for m in keys}
        row = {}
        for j, m in enumerate(keys):
            end = keys[j + 1].start() if j + 1 < len(keys) else len(body)
            row[m.group(1)] = body[m.end():end]
        rows.append(row)
    return rows


def input_text_chunks(text: str) -> list[str]:
    """Arguments for successive ``input text`` calls that type ``text`` (printable ASCII).

    ``input text`` turns ``%s`` into a space, so spaces are sent as ``%s``; a literal ``%s`` in
    ``text`` is split between two calls (``"5%sure"`` -> ``["5%", "sure"]``) so that it stays literal.
    """
    parts = text.split("%s")
    if len(parts) > 1:
        parts = [parts[0] + "%"] + ["s" + p + "%" for p in parts[1:-1]] + ["s" + parts[-1]]
    return [p.replace(" ", "%s") for p in parts]


class AdbDevice:
    """An Android device reached through the adb server (see the module docstring).

    Args:
        serial: the adb serial.
        client: an ``adbutils.AdbClient`` (default: one for ``adb_host``/``adb_port``).
        adb_port: adb server port (default: ``ANDROID_ADB_SERVER_PORT`` or 5037).
        connect: ``adb connect`` the serial first (for ``host:port`` serials not yet attached).
        dump_timeout_s, dump_retries, retry_delay_s: the UI dump's bound, tries and pause between tries.
        packages: extra human name -> package entries for :meth:`launch_app`.
        select_adb_ime: make the ADB Keyboard the current input method before its first use.
    """

    def __init__(self, serial: str, *, client: Any = None, adb_host: str = "127.0.0.1",
                 adb_port: Optional[int] = None, connect: bool = False, dump_timeout_s: float = 30.0,
                 dump_retries: int = 3, retry_delay_s: float = 1.0, dump_path: str = DUMP_PATH,
                 packages: Optional[Mapping[str, str]] = None, select_adb_ime: bool = True) -> None:
        try:
            import adbutils
        except ImportError:
            raise EnvInfraError("the adb controller needs adbutils: pip install 'guigym[android]'") from None
        if not serial:
            raise ConfigError("serial: an adb serial is required (e.g. emulator-5554 or 127.0.0.1:5555)")
        self.serial = serial
        self._adbutils = adbutils
        if client is None:
            port = adb_port or int(os.environ.get("ANDROID_ADB_SERVER_PORT", "5037"))
            client = adbutils.AdbClient(host=adb_host, port=port)
        self.client = client
        self.dump_timeout_s = float(dump_timeout_s)
        self.dump_retries = max(1, int(dump_retries))
        self.retry_delay_s = float(retry_delay_s)
        self.dump_path = dump_path
        self.packages = {**APP_PACKAGES, **{k.lower(): v for k, v in (packages or {}).items()}}
        self._has_adb_keyboard: Optional[bool] = None
        self.select_adb_ime = select_adb_ime
        self._dev = client.device(serial=serial)
        if connect:
            with self._adb_errors("adb connect"):
                answer = client.connect(serial, timeout=20)
            if "connected to" not in (answer or ""):
                raise EnvInfraError(f"{serial}: adb connect failed: {answer}")

    def __repr__(self) -> str:
        return f"AdbDevice({self.serial!r})"

    @contextmanager
    def _adb_errors(self, what: str) -> Iterator[None]:
        """adb, socket and protocol failures -> EnvInfraError naming the serial and the operation."""
        try:
            yield
        except EnvInfraError:
            raise
        except (self._adbutils.AdbError, OSError, EOFError, socket.timeout, UnicodeDecodeError) as e:
            raise EnvInfraError(f"{self.serial}: {what} failed: {type(e).__name__}: {e}") from e

    # -- shell -------------------------------------------------------------------------------------
    def shell(self, argv: Sequence[str], timeout_s: float = 20.0) -> str:
        line = shell_line(argv)
        with self._adb_errors(f"shell {line[:120]}"):
            out = self._dev.shell(line, timeout=timeout_s, encoding=None, rstrip=False)
        return out.decode("utf-8", "replace")

    def _exec_bytes(self, line: str, timeout_s: float) -> bytes:
        """``exec:`` service (no shell protocol, no tty: binary-safe output)."""
        with self._adb_errors(f"exec {line}"):
            conn = self._dev.open_transport(timeout=timeout_s)
            try:
                conn.send_command("exec:" + line)
                conn.check_okay()
                return conn.read_until_close(encoding=None)
            finally:
                conn.close()

    # -- observation -------------------------------------------------------------------------------
    def screenshot(self) -> np.ndarray:
        from PIL import Image, UnidentifiedImageError

        png = self._exec_bytes("screencap -p", timeout_s=30.0)
        try:
            img = Image.open(io.BytesIO(png))
            img.load()
        except (UnidentifiedImageError, OSError) as e:
            raise EnvInfraError(f"{self.serial}: screencap -p returned no image ({len(png)} bytes: "
                                f"{png[:80]!r}): {e}") from None
        return np.asarray(img.convert("RGB"), dtype=np.uint8)

    def ui_xml(self) -> str:
        last = ""
        for attempt in range(self.dump_retries):
            if attempt:
                time.sleep(self.retry_delay_s)
            try:
                self.shell(["rm", "-f", self.dump_path], timeout_s=self.dump_timeout_s)  # no stale dump
                out = self.shell(["uiautomator", "dump", self.dump_path], timeout_s=self.dump_timeout_s)
                if "dumped to" not in out:
                    last = out.strip()[:200] or "no output"
                    continue
                with self._adb_errors(f"pull {self.dump_path}"):
                    xml = self._dev.sync.read_bytes(self.dump_path).decode("utf-8", "replace")
                if "<hierarchy" in xml:
                    return xml
                last = f"dump file holds no <hierarchy>: {xml[:120]!r}"
            except EnvInfraError as e:
                last = str(e)
        raise EnvInfraError(f"{self.serial}: uiautomator dump failed {self.dump_retries} times "
                            f"(timeout {self.dump_timeout_s:g} s each); last: {last}")

    def screen_size(self) -> tuple[int, int]:
        out = self.shell(["wm", "size"])
        sizes = dict(re.findall(r"(Physical|Override) size:\s*(\d+x\d+)", out))
        size = sizes.get("Override") or sizes.get("Physical")
        if not size:
            raise EnvInfraError(f"{self.serial}: `wm size` answered {out.strip()[:120]!r}")
        w, h = size.split("x")
        return int(w), int(h)

    # -- input -------------------------------------------------------------------------------------
    def tap(self, x: int, y: int) -> None:
        self.shell(["input", "tap", int(x), int(y)])

    def swipe(self, x1: int, y1: int, x2: int, y2: int, duration_ms: int = 300) -> None:
        self.shell(["input", "swipe", int(x1), int(y1), int(x2), int(y2), int(duration_ms)])

    def long_press(self, x: int, y: int, duration_ms: int = 1000) -> None:
        self.swipe(x, y, x, y, duration_ms)

    def keyevent(self, key: str | int) -> None:
        self.shell(["input", "keyevent", key])

    def home(self) -> None:
        self.keyevent("KEYCODE_HOME")

    def back(self) -> None:
        self.keyevent("KEYCODE_BACK")

    def enter(self) -> None:
        self.keyevent("KEYCODE_ENTER")

    def has_adb_keyboard(self) -> bool:
        """Whether the ADB Keyboard app is installed (asked once, then remembered). When it is and
        ``select_adb_ime`` is set, it is made the current input method (``ime enable/set``): its
        broadcast types only while it is the active keyboard."""
        if self._has_adb_keyboard is None:
            out = self.shell(["pm", "list", "packages", ADB_KEYBOARD])
            self._has_adb_keyboard = f"package:{ADB_KEYBOARD}" in out.split()
            if self._has_adb_keyboard and self.select_adb_ime:
                self.shell(["ime", "enable", ADB_IME])
                self.shell(["ime", "set", ADB_IME])
        return self._has_adb_keyboard

    def input_text(self, text: str) -> None:
        if not text:
            return
        if self.has_adb_keyboard():
            msg = base64.b64encode(text.encode("utf-8")).decode("ascii")
            self.shell(["am", "broadcast", "-a", "ADB_INPUT_B64", "--es", "msg", msg])
            return
        if not all(" " <= ch <= "~" for ch in text):
            raise ConfigError(f"text: {text[:40]!r} has non-ASCII or control characters, which `input text` cannot "
                              f"type; install the ADB Keyboard ({ADB_KEYBOARD}) on {self.serial} and make it the "
                              "current input method")
        for chunk in input_text_chunks(text):
            self.shell(["input", "text", chunk])

    def launch_app(self, name: str) -> None:
        """``monkey`` launch by human name (:data:`APP_PACKAGES`) or package; ActionNotPossible when
        the name is unknown or the package has no launcher activity."""
        key = " ".join(str(name).lower().split())
        package = self.packages.get(key)
        if package is None:  # agent text: an unknown app is a step the device cannot carry out
            if not _PACKAGE_RE.match(str(name).strip()):
                raise ActionNotPossible(f"open app: {name!r} is neither a known app name nor a package name; "
                                        f"known: {', '.join(sorted(self.packages))}")
            package = str(name).strip()
        out = self.shell(["monkey", "-p", package, "-c", "android.intent.category.LAUNCHER", "1"])
        if "No activities found" in out or "monkey aborted" in out:
            raise ActionNotPossible(f"open app: {name!r} ({package}) has no launcher activity on {self.serial} "
                                    "(not installed?)")

    # -- state -------------------------------------------------------------------------------------
    def settings_get(self, namespace: str, key: str) -> Optional[str]:
        value = self.shell(["settings", "get", namespace, key]).strip()
        return None if value == "null" else value

    def settings_put(self, namespace: str, key: str, value: str) -> None:
        self.shell(["settings", "put", namespace, key, value])

    def content_query(self, uri: str, projection: Optional[Sequence[str]] = None,
                      where: Optional[str] = None) -> list[dict[str, str]]:
        argv = ["content", "query", "--uri", uri]
        if projection:
            argv += ["--projection", ":".join(projection)]
        if where:
            argv += ["--where", where]
        out = self.shell(argv)
        if out.lstrip().startswith(("Error", "Exception")) or "java.lang." in out.split("\n", 1)[0]:
            raise EnvInfraError(f"{self.serial}: content query {uri} failed: {out.strip()[:200]}")
        return parse_content_rows(out.replace("\r\n", "\n"))

    def push(self, local_path: str, device_path: str) -> None:
        with self._adb_errors(f"push {local_path} -> {device_path}"):
            self._dev.sync.push(local_path, device_path)

    def pull(self, device_path: str, local_path: str) -> None:
        """Copy a device file to the host; FileNotFoundError when it does not exist (as the fakes do)."""
        with self._adb_errors(f"pull {device_path}"):
            info = self._dev.sync.stat(device_path)
            missing = not info.mode  # sync STAT answers all zeros for a missing path
            if not missing:
                self._dev.sync.pull_file(device_path, local_path)
        if missing:  # the device answered: an absent file is a fact about the task, not an infra failure
            raise FileNotFoundError(f"{self.serial}: {device_path}: no such file on the device")

    def set_time(self, epoch_s: float) -> None:
        """``settings put global auto_time 0`` then toybox ``date -u MMDDhhmmCCYY.ss`` (UTC)."""
        self.settings_put("global", "auto_time", "0")
        stamp = time.strftime("%m%d%H%M%Y.%S", time.gmtime(float(epoch_s)))
        out = self.shell(["date", "-u", stamp])
        if any(w in out.lower() for w in ("not permitted", "bad date", "usage:", "denied")):
            raise EnvInfraError(f"{self.serial}: setting the clock failed (needs root): {out.strip()[:200]}")


def pull_sqlite(device: Any, device_path: str, query: str = "", params: Sequence[Any] = (),
                table: Optional[str] = None) -> list[dict[str, Any]]:
    """Pull the SQLite database ``device_path`` (with its ``-wal``/``-shm``) and read it on the host.

    ``query`` (with ``params``) or ``table`` (``SELECT *``) chooses the rows; returns one dict per row.
    Uses :func:`guigym.envs.android.androidworld.validators.pulled_db`, so it works on any
    AndroidDevice. FileNotFoundError when the database is missing.
    """
    from guigym.envs.android.androidworld.validators import pulled_db

    if not query:
        if not table:
            raise ConfigError("pull_sqlite: pass query= or table=")
        query = 'SELECT * FROM "' + table.replace('"', '""') + '"'
    with pulled_db(device, device_path) as local:
        con = sqlite3.connect(local)
        try:
            con.row_factory = sqlite3.Row
            return [dict(r) for r in con.execute(query, tuple(params))]
        finally:
            con.close()

