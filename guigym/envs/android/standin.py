"""A named STAND-IN for a real Android device, used in tests because no Android system image can
run on this project's machines (issue 13). It is not an emulator.

It is a small server speaking the *device* side of the adb transport protocol over TCP on
127.0.0.1, so the real adb server attaches to it with ``adb connect 127.0.0.1:PORT`` and adbutils /
:class:`~guigym.envs.android.controller.AdbDevice` talk to it exactly as to a phone. Protocol (AOSP
``protocol.txt``, ``SYNC.TXT``): a message is a 24-byte little-endian header ``command, arg0, arg1,
data_length, data_check (byte sum), magic (command ^ 0xffffffff)`` plus the payload. The host sends
``CNXN(version, max_payload, "host::...")``; the stand-in answers ``CNXN`` with :data:`BANNER`
(no authentication). The banner advertises only ``cmd``, so adb uses the plain shell service (no
``shell_v2``), sync v1 (no ``stat_v2``/``sendrecv_v2``) and one-outstanding-``WRTE`` flow control
(no ``delayed_ack``): ``OPEN(host_id, 0, "service")`` -> ``OKAY(dev_id, host_id)``, every ``WRTE``
is acknowledged by an ``OKAY`` before the next, ``CLSE`` ends a stream. Services: ``shell:CMD`` and
``exec:CMD`` (run, send the output, close) and ``sync:`` (``STAT``, ``LIST``, ``SEND``, ``RECV``,
``QUIT`` requests: 4-byte id + little-endian length + data; replies ``STAT``, ``DENT``/``DONE``,
``DATA``/``DONE``, ``OKAY``, ``FAIL``).

The "device": screens are recorded ``uiautomator dump`` XML (name -> XML), each with a PNG rendered
from its node bounds and texts; ``input tap x y`` follows a screen-transition table (screen ->
[((x1, y1, x2, y2), target)]), ``KEYCODE_BACK`` returns to the previous screen and ``KEYCODE_HOME``
to the home screen. Command lines are split as ``sh`` splits them (:func:`split_commands`) and
every command is recorded in :attr:`StandinDevice.commands` as its argv. Known commands:
``uiautomator dump``, ``cat``, ``screencap -p``, ``wm size``, ``input``, ``getprop``, ``settings``,
``content query``, ``pm list packages``, ``monkey -p``, ``am``, ``dumpsys activity activities`` (the
current screen's package is the resumed activity), ``date``, ``rm``, ``ls``,
``mkdir -p``, ``find``, ``echo``; others answer ``/system/bin/sh: X: not found``. Files live in
memory. In-process: ``with StandinDevice(...) as dev: dev.serial``; as a program (prints the port,
serves until killed)::

    python -m guigym.envs.android.standin --port 0 --screens home=home.xml app=app.xml --transitions t.json
"""
from __future__ import annotations

import argparse
import base64
import calendar
import contextlib
import io
import json
import posixpath
import re
import socket
import stat
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence, Union

from lxml import etree

__all__ = ["StandinDevice", "BANNER", "split_commands", "main"]

A_VERSION = 0x01000001
MAX_PAYLOAD = 256 * 1024
SYNC_CHUNK = 64 * 1024
BANNER = (b"device::ro.product.name=guigym_standin;ro.product.model=standin;"
          b"ro.product.device=standin;features=cmd")
HEADER = struct.Struct("<6I")
SDCARD = "/storage/emulated/0"

Bounds = tuple[int, int, int, int]
Transitions = Mapping[str, Sequence[tuple[Sequence[int], str]]]

_HOME_XML = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?><hierarchy rotation="0"><node index="0" text=""'
             ' class="android.widget.FrameLayout" package="com.android.launcher" content-desc="" enabled="true"'
             ' bounds="[0,0][1080,2400]"><node index="0" text="Settings" class="android.widget.TextView"'
             ' package="com.android.launcher" content-desc="" clickable="true" enabled="true"'
             ' bounds="[100,200][400,400]"/></node></hierarchy>')  # attributes left out read as false


def _cmd(name: bytes) -> int:
    return struct.unpack("<I", name)[0]


CNXN, OPEN, OKAY, WRTE, CLSE = (_cmd(n) for n in (b"CNXN", b"OPEN", b"OKAY", b"WRTE", b"CLSE"))


# --------------------------------------------------------------------------- sh-like command splitting


_SUB = r"\$\((?:[^()]|\([^()]*\))*\)|`[^`]*`"  # $(...) (one nesting level) or `...`
_VAR = r"\$\{[^}]*\}|\$\w+"
_TOKEN = re.compile(rf"""(?P<sq>'[^']*') | (?P<dq>"(?:\\.|[^"\\])*") | (?P<esc>\\.) | (?P<sub>{_SUB}) | (?P<var>{_VAR})
    | (?P<sep>[;&|\n]) | (?P<space>[ \t\r]+) | (?P<comment>\#[^\n]*) | (?P<bad>['"`]|\$\() | (?P<lit>.)""", re.X | re.S)
_DQ_PART = re.compile(rf"""(?P<esc>\\[$`"\\\n]) | (?P<sub>{_SUB}) | (?P<var>{_VAR}) | (?P<lit>.)""", re.X | re.S)


def split_commands(line: str, substitute: Callable[[str], str] = lambda inner: "") -> list[list[str]]:
    """Split a ``sh -c`` command line into commands, each a list of words, as ``sh`` would.

    Single quotes keep everything literal; double quotes keep all but ``\\`` escapes and
    substitutions; unquoted ``;`` ``&`` ``|`` and newlines end a command; ``#`` at a word's start
    begins a comment. ``$(...)`` and backquotes put ``substitute(inner)`` in place (the stand-in runs
    and records ``inner``, as a real shell would); ``$NAME`` / ``${NAME}`` expand to "" (nothing is
    set). Unterminated quotes raise ValueError (the shell's syntax error).
    """
    commands: list[list[str]] = []
    words: list[str] = []
    word: list[str] = []
    quoted, pos = False, 0  # quoted: the word exists even when empty ('' is a word)

    def expand(kind: str, tok: str) -> str:
        if kind == "esc":
            return "" if tok[1] == "\n" else tok[1]  # backslash-newline joins lines
        if kind == "sub":
            return substitute(tok[2:-1] if tok.startswith("$(") else tok[1:-1]).rstrip("\n")
        return "" if kind == "var" else tok

    def end_word() -> None:
        nonlocal quoted
        text = "".join(word)
        if text or quoted:  # an unquoted empty expansion is no word at all
            words.append(text)
        word.clear()
        quoted = False

    while pos < len(line):
        m = _TOKEN.match(line, pos)
        assert m is not None  # (?P<lit>.) matches any character
        kind, tok = m.lastgroup or "lit", m.group()
        if kind == "comment" and (word or quoted):  # "a#b": not a comment
            kind, tok = "lit", "#"
        pos += len(tok)
        if kind == "bad":
            raise ValueError(f"unterminated {tok!r}")
        if kind in ("space", "comment", "sep"):
            end_word()
            if kind == "sep" and words:
                commands.append(words)
                words = []
        elif kind == "sq":
            word.append(tok[1:-1])
            quoted = True
        elif kind == "dq":
            word.extend(expand(p.lastgroup or "lit", p.group()) for p in _DQ_PART.finditer(tok[1:-1]))
            quoted = True
        else:
            word.append(expand(kind, tok))
            quoted = quoted or (kind == "esc" and tok != "\\\n")
    end_word()
    if words:
        commands.append(words)
    return commands


# --------------------------------------------------------------------------- screens


def _bounds(text: str) -> Optional[Bounds]:
    try:
        a, b = text.strip("[]").split("][")
        x1, y1 = (int(v) for v in a.split(","))
        x2, y2 = (int(v) for v in b.split(","))
        return x1, y1, x2, y2
    except ValueError:
        return None


def render_screen(xml: str) -> bytes:
    """A PNG of the dump, as large as its largest bounds: white, each node's bounds outlined, its text inside."""
    from PIL import Image, ImageDraw

    root = etree.fromstring(xml.encode("utf-8"))
    nodes = [(b, (n.get("text") or n.get("content-desc") or ""))
             for n in root.iter("node") if (b := _bounds(n.get("bounds", ""))) is not None]
    size = (max([b[2] for b, _ in nodes] + [1]), max([b[3] for b, _ in nodes] + [1]))
    img = Image.new("RGB", size, (255, 255, 255))
    draw = ImageDraw.Draw(img)
    for (x1, y1, x2, y2), text in nodes:
        if x2 > x1 and y2 > y1:
            draw.rectangle([x1, y1, x2 - 1, y2 - 1], outline=(60, 60, 60))
            if text:
                draw.text((x1 + 4, y1 + 4), text[:60], fill=(0, 0, 160))
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


# --------------------------------------------------------------------------- streams


@dataclass
class _Stream:
    local: int
    remote: int
    kind: str  # "shell" or "sync"
    outbox: list[bytes] = field(default_factory=list)
    waiting: bool = False  # a WRTE is out and not yet acknowledged
    close_after: bool = False
    inbuf: bytearray = field(default_factory=bytearray)
    send_path: Optional[str] = None
    send_data: bytearray = field(default_factory=bytearray)


class StandinDevice:
    """The stand-in device (see the module docstring). Thread-safe enough for one adb server.

    Args:
        screens: name -> uiautomator XML text or a path to a dump (default: one tiny home screen).
        transitions: screen -> [((x1, y1, x2, y2), target)], applied to ``input tap x y``.
        home: the screen ``KEYCODE_HOME`` goes to (default: the first screen).
        packages: installed packages (``pm list packages``, ``monkey -p``); add
            ``com.android.adbkeyboard`` to make the ADB Keyboard "installed".
        content: content URI -> rows (dicts) served by ``content query --uri``.
        settings: initial ``{"system"|"secure"|"global": {key: value}}``.
        props: extra ``getprop`` values (``sys.boot_completed`` is "1").
        port: TCP port on 127.0.0.1 (0 = any free port, see :attr:`port` after ``start()``).

    Attributes:
        commands: every command received, as argv lists, in order (``uiautomator dump`` included).
        typed: texts received through the ADB Keyboard broadcast or ``input text``.
        files: device path -> bytes; ``dirs``: existing directories.
        screen: the current screen's name. ``fail_dumps``: the next N dumps fail.
    """

    def __init__(self, screens: Optional[Mapping[str, Union[str, Path]]] = None,
                 transitions: Optional[Transitions] = None, *, home: Optional[str] = None,
                 packages: Iterable[str] = ("com.android.settings",),
                 content: Optional[Mapping[str, Sequence[Mapping[str, str]]]] = None,
                 settings: Optional[Mapping[str, Mapping[str, str]]] = None,
                 props: Optional[Mapping[str, str]] = None, port: int = 0) -> None:
        self.screens: dict[str, str] = {}
        for name, xml in (screens or {"home": _HOME_XML}).items():
            is_path = isinstance(xml, Path) or not str(xml).lstrip().startswith("<")
            self.screens[name] = Path(xml).read_text(encoding="utf-8") if is_path else str(xml)
        self.transitions = {k: [(tuple(int(v) for v in b), t) for b, t in rows]
                            for k, rows in (transitions or {}).items()}
        self.home = home or next(iter(self.screens))
        self.screen = self.home
        self.history: list[str] = []
        self.packages = list(packages)
        self.content = {k: [dict(r) for r in rows] for k, rows in (content or {}).items()}
        self.settings = {ns: dict((settings or {}).get(ns, {})) for ns in ("system", "secure", "global")}
        self.props = {"sys.boot_completed": "1", "ro.product.model": "standin", "ro.build.version.sdk": "34",
                      **dict(props or {})}
        self.files: dict[str, bytes] = {}
        self.dirs = {"/", "/data", "/data/local", "/data/local/tmp", "/storage", SDCARD}
        self.commands: list[list[str]] = []
        self.typed: list[str] = []
        self.fail_dumps = 0
        self.clock_offset = 0.0
        self.port = port
        self._png: dict[str, bytes] = {}
        self._server: Optional[socket.socket] = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    # -- life cycle --------------------------------------------------------------------------------
    @property
    def serial(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "StandinDevice":
        """Listen on 127.0.0.1 and serve adb connections on a daemon thread."""
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", self.port))
        srv.listen(4)
        self._server, self.port = srv, srv.getsockname()[1]
        threading.Thread(target=self._accept, args=(srv,), name=f"standin-{self.port}", daemon=True).start()
        return self

    def stop(self) -> None:
        """Close the listening socket and every adb connection (the device "disappears")."""
        srv, self._server = self._server, None
        with self._lock:
            conns, self._conns = ([srv] if srv else []) + self._conns, []
        for c in conns:  # shutdown also wakes the thread blocked in accept(), which close alone does not
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()

    def __enter__(self) -> "StandinDevice":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self, srv: socket.socket) -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:  # stop() shut the listening socket
                return
            if self._server is not srv:  # stopped while accepting
                conn.close()
                return
            with self._lock:
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    # -- transport ---------------------------------------------------------------------------------
    def _serve(self, conn: socket.socket) -> None:
        streams: dict[int, _Stream] = {}
        next_id = [1]
        max_out = [MAX_PAYLOAD]

        def send(command: int, arg0: int, arg1: int, data: bytes = b"") -> None:
            conn.sendall(HEADER.pack(command, arg0, arg1, len(data), sum(data) & 0xFFFFFFFF,
                                     command ^ 0xFFFFFFFF) + data)

        def pump(s: _Stream) -> None:  # one WRTE in flight per stream; CLSE after the last ack
            if s.waiting:
                return
            if s.outbox:
                chunk = s.outbox[0][:max_out[0]]  # a WRTE stays within the host's max payload
                s.outbox[0] = s.outbox[0][len(chunk):]
                if not s.outbox[0]:
                    s.outbox.pop(0)
                s.waiting = True
                send(WRTE, s.local, s.remote, chunk)
            elif s.close_after:
                send(CLSE, s.local, s.remote)
                streams.pop(s.local, None)

        try:
            while True:
                head = _recv_exact(conn, HEADER.size)
                command, arg0, arg1, length, _check, _magic = HEADER.unpack(head)
                data = _recv_exact(conn, length) if length else b""
                if command == CNXN:
                    max_out[0] = max(1024, min(arg1, MAX_PAYLOAD))
                    send(CNXN, min(arg0, A_VERSION), MAX_PAYLOAD, BANNER)
                elif command == OPEN:
                    service = data.rstrip(b"\0").decode("utf-8", "replace")
                    local = next_id[0]
                    next_id[0] += 1
                    if service.startswith(("shell:", "exec:")):
                        s = _Stream(local, arg0, "shell", close_after=True)
                        out = self.run(service.split(":", 1)[1])
                        s.outbox = [out] if out else []
                    elif service == "sync:":
                        s = _Stream(local, arg0, "sync")
                    else:  # unknown service: refuse the open, as adbd does
                        send(CLSE, 0, arg0)
                        continue
                    streams[local] = s
                    send(OKAY, local, arg0)
                    pump(s)
                elif command == OKAY and arg1 in streams:
                    streams[arg1].waiting = False
                    pump(streams[arg1])
                elif command == WRTE and arg1 in streams:
                    s = streams[arg1]
                    send(OKAY, s.local, s.remote)
                    if s.kind == "sync":
                        s.inbuf += data
                        self._sync(s)
                    pump(s)
                elif command == CLSE:
                    streams.pop(arg1, None)
        except (OSError, EOFError):
            pass
        finally:
            conn.close()

    # -- sync service ------------------------------------------------------------------------------
    def _sync(self, s: _Stream) -> None:
        """Handle every complete sync request in ``s.inbuf``; replies go to ``s.outbox``."""
        buf = s.inbuf
        while len(buf) >= 8:
            rid, length = buf[:4].decode("latin-1"), struct.unpack("<I", buf[4:8])[0]
            if s.send_path is not None and rid == "DONE":  # end of a SEND: length is the mtime
                del buf[:8]
                self._write(s.send_path, bytes(s.send_data))
                s.send_path, s.send_data = None, bytearray()
                s.outbox.append(b"OKAY" + struct.pack("<I", 0))
                continue
            if len(buf) < 8 + length:
                return
            body = bytes(buf[8:8 + length])
            del buf[:8 + length]
            if s.send_path is not None and rid == "DATA":
                s.send_data += body
            elif rid == "STAT":
                mode, size = self._stat(body.decode("utf-8"))
                s.outbox.append(b"STAT" + struct.pack("<III", mode, size, int(time.time()) if mode else 0))
            elif rid == "LIST":
                s.outbox.append(self._list(body.decode("utf-8")))
            elif rid == "RECV":
                path = self._norm(body.decode("utf-8"))
                if path not in self.files:
                    s.outbox.append(_sync_msg(b"FAIL", b"No such file or directory"))
                    continue
                blob = self.files[path]
                s.outbox += [_sync_msg(b"DATA", blob[k:k + SYNC_CHUNK]) for k in range(0, len(blob), SYNC_CHUNK)]
                s.outbox.append(b"DONE" + struct.pack("<I", 0))
            elif rid == "SEND":
                s.send_path = body.decode("utf-8").rsplit(",", 1)[0]
            elif rid == "QUIT":
                s.close_after = True
            else:
                s.outbox.append(_sync_msg(b"FAIL", f"unknown sync request {rid!r}".encode()))
                s.close_after = True

    def _stat(self, path: str) -> tuple[int, int]:
        path = self._norm(path)
        if path in self.files:
            return stat.S_IFREG | 0o660, len(self.files[path])
        return (stat.S_IFDIR | 0o771, 4096) if path in self.dirs else (0, 0)

    def _list(self, path: str) -> bytes:
        out = bytearray()
        for name in self._children(self._norm(path)):
            mode, size = self._stat(posixpath.join(self._norm(path), name))
            raw = name.encode("utf-8")
            out += b"DENT" + struct.pack("<IIII", mode, size, int(time.time()), len(raw)) + raw
        return bytes(out + b"DONE" + bytes(16))

    # -- file system -------------------------------------------------------------------------------
    @staticmethod
    def _norm(path: str) -> str:
        path = posixpath.normpath("/" + path.lstrip("/")) if path else "/"
        for alias in ("/sdcard", "/mnt/sdcard", "/storage/self/primary"):
            if path == alias or path.startswith(alias + "/"):
                return SDCARD + path[len(alias):]
        return path

    def _write(self, path: str, data: bytes) -> None:
        path = self._norm(path)
        self.files[path] = data
        self._mkdirs(posixpath.dirname(path))

    def _mkdirs(self, path: str) -> None:
        while path not in self.dirs:
            self.dirs.add(path)
            path = posixpath.dirname(path)

    def _children(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted({p[len(prefix):].split("/")[0] for p in (*self.files, *self.dirs)
                       if p.startswith(prefix) and p != prefix})

    # -- the "shell" -------------------------------------------------------------------------------
    def run(self, line: str) -> bytes:
        """Run a ``sh -c`` command line: record and execute each command; returns the output."""
        try:
            commands = split_commands(line, substitute=self._substitute)
        except ValueError:
            self.commands.append(["<syntax error>", line])
            return b"/system/bin/sh: syntax error: unterminated quoted string\n"
        return b"".join(self._execute(argv) for argv in commands)

    def _substitute(self, inner: str) -> str:
        """``$(inner)``: its stdout (the shell's "not found" goes to stderr, not into the word)."""
        out = self.run(inner).decode("utf-8", "replace")
        return "".join(ln for ln in out.splitlines(True) if not ln.startswith("/system/bin/sh: "))

    def screenshot_png(self) -> bytes:
        if self.screen not in self._png:
            self._png[self.screen] = render_screen(self.screens[self.screen])
        return self._png[self.screen]

    def _go(self, target: str) -> None:
        if target in self.screens and target != self.screen:
            self.history.append(self.screen)
            self.screen = target

    def _execute(self, argv: list[str]) -> bytes:
        self.commands.append(list(argv))
        name, args = argv[0], argv[1:]
        text: Optional[str] = None
        if name == "uiautomator" and args[:1] == ["dump"]:
            if self.fail_dumps > 0:
                self.fail_dumps -= 1
                return b"ERROR: could not get idle state.\n"
            path = args[1] if len(args) > 1 and not args[1].startswith("-") else "/sdcard/window_dump.xml"
            self._write(path, self.screens[self.screen].encode("utf-8"))
            text = f"UI hierchary dumped to: {path}"  # sic: uiautomator's own spelling
        elif name == "screencap":
            png = self.screenshot_png()
            if args and not args[-1].startswith("-"):
                self._write(args[-1], png)
                return b""
            return png
        elif name == "cat":
            out = b""
            for p in args:
                out += self.files.get(self._norm(p), f"cat: {p}: No such file or directory\n".encode())
            return out
        elif name == "input":
            text = self._input(args)
        elif name == "wm" and args[:1] == ["size"]:
            root = etree.fromstring(self.screens[self.screen].encode("utf-8"))
            b = _bounds(next(root.iter("node")).get("bounds", "")) or (0, 0, 1080, 2400)
            text = f"Physical size: {b[2]}x{b[3]}"
        elif name == "getprop":
            text = self.props.get(args[0], "") if args else "\n".join(f"[{k}]: [{v}]" for k, v in self.props.items())
        elif name == "settings" and len(args) >= 3 and args[0] in ("get", "put"):
            ns = self.settings.setdefault(args[1], {})
            if args[0] == "get":
                text = ns.get(args[2], "null")
            else:
                ns[args[2]] = args[3] if len(args) > 3 else ""
        elif name == "content" and args[:1] == ["query"]:
            text = self._content_query(args[1:])
        elif name == "pm" and args[:2] == ["list", "packages"]:
            want = [a for a in args[2:] if not a.startswith("-")]
            text = "\n".join(f"package:{p}" for p in self.packages if not want or want[0] in p)
        elif name == "monkey":
            pkg = args[args.index("-p") + 1] if "-p" in args[:-1] else ""
            if pkg not in self.packages:
                text = "** No activities found to run, monkey aborted."
            else:
                self._go(pkg)
                text = "Events injected: 1"
        elif name == "dumpsys" and args[:2] == ["activity", "activities"]:
            # the current screen's app is the resumed activity (what AndroidWorld's validators read)
            m = re.search(r'package="([\w.]+)"', self.screens[self.screen])
            if m:
                text = f"  mResumedActivity: ActivityRecord{{1a2b3c u0 {m.group(1)}/.MainActivity t1}}"
            else:
                text = ""
        elif name == "am":
            if args[:1] == ["broadcast"] and "ADB_INPUT_B64" in args and "--es" in args[:-2]:
                self.typed.append(base64.b64decode(args[args.index("--es") + 2]).decode("utf-8"))
            text = "Broadcast completed: result=0" if args[:1] == ["broadcast"] else ""
        elif name == "date":
            text = self._date(args)
        elif name == "echo":
            return (" ".join(args) + "\n").encode("utf-8")
        elif name in ("rm", "mkdir", "ls", "find"):
            text = self._files_cmd(name, args)
        elif name == "svc" and len(args) >= 2 and args[0] in ("wifi", "bluetooth") and args[1] in ("enable", "disable"):
            self.settings["global"][f"{args[0]}_on"] = "1" if args[1] == "enable" else "0"  # as a phone's svc does
            text = ""
        elif name in ("svc", "dumpsys", "sleep", "true", "ime"):
            text = ""
        else:
            return f"/system/bin/sh: {name}: not found\n".encode()
        return (text + "\n").encode("utf-8") if text else b""

    def _input(self, args: list[str]) -> str:
        if args[:1] == ["tap"] and len(args) == 3:
            x, y = float(args[1]), float(args[2])
            for (x1, y1, x2, y2), target in self.transitions.get(self.screen, []):
                if x1 <= x < x2 and y1 <= y < y2:
                    self._go(target)
                    break
        elif args[:1] == ["keyevent"] and args[1:]:
            key = args[1].upper()
            if key in ("KEYCODE_HOME", "3"):
                self._go(self.home)
            elif key in ("KEYCODE_BACK", "4") and self.history:
                self.screen = self.history.pop()
        elif args[:1] == ["text"] and args[1:]:
            self.typed.append(args[1].replace("%s", " "))
        elif args[:1] not in (["swipe"], ["tap"], ["keyevent"], ["text"]):
            return "Error: Unknown command: " + " ".join(args[:1])
        return ""

    def _content_query(self, args: list[str]) -> str:
        opts = {args[k]: args[k + 1] for k in range(len(args) - 1) if args[k].startswith("--")}
        rows = self.content.get(opts.get("--uri", ""), [])
        if not rows:
            return "No result found."
        cols = opts["--projection"].split(":") if "--projection" in opts else None
        return "\n".join(f"Row: {i} " + ", ".join(f"{k}={'NULL' if r.get(k) is None else r.get(k)}"
                                                   for k in (cols or list(r)))
                         for i, r in enumerate(rows))

    def _date(self, args: list[str]) -> str:
        now = time.time() + self.clock_offset
        sets = [a for a in args if not a.startswith(("-", "+"))]
        if sets:  # toybox's MMDDhhmmCCYY.ss, taken as UTC (the controller passes -u)
            now = calendar.timegm(time.strptime(sets[0], "%m%d%H%M%Y.%S"))
            self.clock_offset = now - time.time()
        if "+%s" in args:
            return str(int(now))
        return time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(now))

    def _files_cmd(self, name: str, args: list[str]) -> str:
        paths = [a for a in args if not a.startswith("-")]
        if name == "mkdir":
            for p in paths:
                self._mkdirs(self._norm(p))
            return ""
        out = []
        for p in paths:
            path = self._norm(p)
            under = [q for q in (*self.files, *self.dirs) if q == path or q.startswith(path.rstrip("/") + "/")]
            if not under:
                if not (name == "rm" and "-f" in "".join(a for a in args if a.startswith("-"))):
                    out.append(f"{name}: {p}: No such file or directory")
            elif name == "rm":
                for q in under:
                    self.files.pop(q, None)
                    self.dirs.discard(q)
            elif name == "ls":
                out.extend(self._children(path) if path in self.dirs else [p])
            else:  # find
                out.extend(sorted(p + q[len(path):] for q in under))
        return "\n".join(out)


def _sync_msg(rid: bytes, data: bytes) -> bytes:
    return rid + struct.pack("<I", len(data)) + data


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EOFError("peer closed")
        buf += chunk
    return bytes(buf)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m guigym.envs.android.standin``: serve until killed; prints the port first."""
    ap = argparse.ArgumentParser(prog="python -m guigym.envs.android.standin", description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free port)")
    ap.add_argument("--screens", nargs="*", default=[], help="NAME=DUMP.xml or DUMP.xml (name = file stem)")
    ap.add_argument("--transitions", help='JSON file: {"screen": [[[x1, y1, x2, y2], "target"], ...]}')
    ap.add_argument("--packages", nargs="*", default=["com.android.settings"])
    a = ap.parse_args(argv)
    screens = {}
    for spec in a.screens:
        name, _, path = spec.rpartition("=")
        screens[name or Path(path).stem] = Path(path)
    transitions = json.loads(Path(a.transitions).read_text()) if a.transitions else None
    dev = StandinDevice(screens or None, transitions, packages=a.packages, port=a.port).start()
    print(dev.port, flush=True)
    try:
        threading.Event().wait()  # until killed
    finally:
        dev.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
