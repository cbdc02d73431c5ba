"""HTTP routing, authentication and the OSWorld endpoints of the in-desktop server.

Protocol: the paths and payloads of OSWorld's in-VM Flask server (xlang-ai/OSWorld,
desktop_env/server/main.py), reimplemented on ``http.server`` so that it runs under Debian's
python with no pip packages. Differences on purpose:

* every request needs ``Authorization: Bearer <token>`` (401 otherwise, constant-time compare,
  checked before any body byte is read) unless the server was started with ``--insecure-no-token``;
* it fails closed (:mod:`.httpguard`): at most ``--max-connections`` connections (more get 503),
  headers within ``--header-timeout`` s, each body read/reply write within ``--io-timeout`` s,
  bodies of at most ``--max-body`` bytes with a strict ``Content-Length`` (or chunked, capped
  per chunk before reading it);
* it binds a unix socket or a loopback address (``--allow-remote`` for a VM's NIC);
* window management uses EWMH directly instead of spawning ``wmctrl``;
* ``/accessibility`` is bounded by a node cap and a time cap (``?max_nodes=&time_budget=``);
* ``/start_recording`` answers 501 when ffmpeg is absent;
* extensions under ``/guigym/``: ``version``, ``action`` (typed action JSON -> XTest) and
  ``observe`` (screenshot + a11y in one response, see :func:`Handler.guigym_observe`).
"""
from __future__ import annotations

import argparse
import hmac
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional

from . import PROTOCOL_VERSION, SERVER_NAME
from . import a11y as a11y_mod
from . import launched
from . import multipart
from . import zone
from .httpguard import (
    DEFAULT_HEADER_TIMEOUT_S, DEFAULT_IO_TIMEOUT_S, DEFAULT_MAX_CONNECTIONS, BodyError, GuardedHandlerMixin,
    GuardedServerMixin, body_length, read_chunked, read_exact, refuse_unauthorized,
)
from .input import ActionError, Input
from .screen import Screen, encode_png
from .windows import Windows

#: OSWorld's /execute timeout in seconds
EXECUTE_TIMEOUT_S = 120.0
#: OSWorld's open_file default wait (their TIMEOUT is 1800 s; we cap what a caller may ask)
OPEN_FILE_TIMEOUT_S = 1800.0
#: largest request body (``/setup/upload`` carries whole files); ``--max-body`` changes it
DEFAULT_MAX_BODY = 1 << 30
LOOPBACK_HOSTS = {"127.0.0.1", "::1", "localhost"}
OBSERVE_CONTENT_TYPE = "application/x-guigym-observe"


class Desktop:
    """Lazily opened per-display resources shared by all request threads."""

    def __init__(self, display: Optional[str]) -> None:
        self.display = display
        self._lock = threading.Lock()
        self._screen: Optional[Screen] = None
        self._input: Optional[Input] = None
        self._windows: Optional[Windows] = None
        self.recording: Optional[subprocess.Popen] = None
        self.recording_path = os.path.join(tempfile.gettempdir(), f"guigym-recording-{os.getpid()}.mp4")
        self.children: list[subprocess.Popen] = []
        #: (pid, start time) of each process started for a setup step: the sessions whose
        #: processes are the task's app instances (:mod:`.launched`)
        self.leaders: list[tuple[int, int]] = []

    def started(self, p: subprocess.Popen) -> None:
        """Keep ``p`` (started for a setup step, a session leader) and record its session."""
        self.children.append(p)
        self.children[:] = [c for c in self.children if c.poll() is None]
        t = launched.start_time(p.pid)
        if t is not None:
            self.leaders.append((p.pid, t))
            del self.leaders[:-256]  # (a leader's session outlives it: kept until then, at most 256)

    @property
    def screen(self) -> Screen:
        with self._lock:
            if self._screen is None:
                self._screen = Screen(self.display)
            return self._screen

    @property
    def input(self) -> Input:
        with self._lock:
            if self._input is None:
                self._input = Input(self.display)
            return self._input

    @property
    def windows(self) -> Windows:
        with self._lock:
            if self._windows is None:
                self._windows = Windows(self.display)
            return self._windows


def tmux_terminal_output() -> Optional[str]:
    """Text of the local sandbox's terminal (xterm running tmux; the provider sets the env vars)."""
    sock = os.environ.get("GUIGYM_TMUX_SOCKET")
    if not sock or not os.path.exists(sock) or shutil.which("tmux") is None:
        return None
    session = os.environ.get("GUIGYM_TMUX_SESSION", "term")
    try:
        r = subprocess.run(["tmux", "-S", sock, "capture-pane", "-p", "-J", "-t", session],
                           capture_output=True, text=True, errors="replace", timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.rstrip("\n") if r.returncode == 0 else None


class HTTPError(Exception):
    """Answer ``status`` with a JSON body ``{"status": "error", "message": ...}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _expand(arg: str) -> str:
    return os.path.expanduser(arg) if isinstance(arg, str) and arg.startswith("~/") else arg


def _command(data: dict[str, Any]) -> tuple[Any, bool]:
    """OSWorld's command convention: list (argv) or string (shlex-split unless ``shell``)."""
    shell = bool(data.get("shell", False))
    command = data.get("command", "" if shell else [])
    if isinstance(command, str) and not shell:
        command = shlex.split(command)
    if isinstance(command, list):
        command = [_expand(a) for a in command]
        if not command:
            raise HTTPError(400, "command is empty")
    elif not isinstance(command, str):
        raise HTTPError(400, f"command must be a list or a string, got {type(command).__name__}")
    return command, shell


def _float_field(data: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    v = data.get(key, default)
    try:
        v = float(v)
    except (TypeError, ValueError):
        raise HTTPError(400, f"{key} must be a number, got {v!r}") from None
    if not lo <= v <= hi:
        raise HTTPError(400, f"{key} must be in [{lo:g}, {hi:g}], got {v:g}")
    return v


class Handler(GuardedHandlerMixin, BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one connection per client
    server_version = SERVER_NAME + "/" + PROTOCOL_VERSION
    server: "DesktopHTTPServer"

    # ---- plumbing ---------------------------------------------------------------------------
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
        if self.server.verbose:
            sys.stderr.write("%s %s\n" % (self.log_date_time_string(), format % args))

    def address_string(self) -> str:
        return str(self.client_address[0]) if self.client_address else "unix"

    def _authorized(self) -> bool:
        token = self.server.token
        if token is None:
            return True
        got = self.headers.get("Authorization", "")
        expected = b"Bearer " + token
        return hmac.compare_digest(got.encode("utf-8", "replace"), expected)

    def _read_body(self) -> bytes:
        """The body, framing checked before reading (httpguard.body_length): BodyError -> 4xx/5xx."""
        n = body_length(self.headers, self.server.max_body, allow_chunked=True)
        return read_chunked(self.rfile, self.server.max_body) if n is None else read_exact(self.rfile, n)

    def _json_body(self) -> dict[str, Any]:
        body = self._body
        if not body:
            return {}
        ctype = self.headers.get("Content-Type", "")
        if ctype.startswith("application/x-www-form-urlencoded"):
            return {k: v[-1] for k, v in urllib.parse.parse_qs(body.decode("utf-8"), keep_blank_values=True).items()}
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise HTTPError(400, f"body is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise HTTPError(400, "JSON body must be an object")
        return data

    def _form(self) -> dict[str, Any]:
        """Fields of a urlencoded or multipart form (or a JSON object, accepted too)."""
        ctype = self.headers.get("Content-Type", "")
        if ctype.startswith("multipart/form-data"):
            try:
                parts = multipart.parse(self._body, ctype)
            except multipart.MultipartError as exc:
                raise HTTPError(400, str(exc)) from None
            return {k: (p if p.filename is not None else p.data.decode("utf-8")) for k, p in parts.items()}
        return self._json_body()

    def send(self, status: int, body: bytes, ctype: str, headers: Optional[dict[str, str]] = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, obj: Any, status: int = 200) -> None:
        self.send(status, json.dumps(obj).encode("utf-8"), "application/json")

    def send_text(self, text: str, status: int = 200) -> None:
        self.send(status, text.encode("utf-8"), "text/html; charset=utf-8")

    def _dispatch(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        self.query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        self._body = b""
        try:
            if not self._authorized():
                # strangers get no big reads: at most a small body is drained, then 401 and hang up
                refuse_unauthorized(self, b'{"status": "error", "message": "missing or wrong bearer token"}',
                                    {"WWW-Authenticate": 'Bearer realm="guigym"'})
                return
            try:
                self._body = self._read_body()
            except BodyError as exc:
                self.close_connection = True  # the body was not (fully) read: the stream is out of step
                raise HTTPError(exc.status, exc.message) from None
            except TimeoutError:
                self.close_connection = True  # no body byte for --io-timeout seconds: drop the client
                return
            route = ROUTES.get(url.path.rstrip("/") or "/")
            if route is None:
                raise HTTPError(404, f"no endpoint {url.path}")
            methods, fn = route
            if method not in methods:
                raise HTTPError(405, f"{url.path} accepts {', '.join(sorted(methods))}, not {method}")
            fn(self)
        except HTTPError as exc:
            self.send_json({"status": "error", "message": exc.message}, exc.status)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # report, keep serving
            if self.server.verbose:
                traceback.print_exc()
            try:
                self.send_json({"status": "error", "message": f"{type(exc).__name__}: {exc}"}, 500)
            except OSError:
                self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    @property
    def desk(self) -> Desktop:
        return self.server.desktop

    # ---- OSWorld endpoints ------------------------------------------------------------------
    def platform_(self) -> None:
        self.send_text(platform.system())

    def screenshot(self) -> None:
        img = self.desk.screen.grab(cursor=self.query.get("cursor", "1") != "0")
        self.send(200, encode_png(img, int(self.query.get("level", "1"))), "image/png")

    def _a11y_caps(self) -> tuple[int, float]:
        try:
            n = int(self.query.get("max_nodes", a11y_mod.DEFAULT_MAX_NODES))
            t = float(self.query.get("time_budget", a11y_mod.DEFAULT_TIME_BUDGET_S))
        except ValueError:
            raise HTTPError(400, "max_nodes must be an integer and time_budget a number") from None
        if not (1 <= n <= 1_000_000 and 0 < t <= 600):
            raise HTTPError(400, f"max_nodes must be in [1, 1e6] and time_budget in (0, 600], got {n}, {t}")
        return n, t

    def accessibility(self) -> None:
        n, t = self._a11y_caps()
        try:
            xml, _ = a11y_mod.accessibility_tree(n, t)
        except a11y_mod.A11yUnavailable as exc:
            raise HTTPError(503, str(exc)) from None
        self.send_json({"AT": xml})

    def terminal(self) -> None:
        try:
            out, a11y_error = a11y_mod.terminal_output(), None
        except a11y_mod.A11yUnavailable as exc:
            out, a11y_error = None, str(exc)
        if out is None:
            # xterm is not on AT-SPI: the local sandbox runs it with tmux, which can be read directly
            out = tmux_terminal_output()
        if out is None and a11y_error:
            raise HTTPError(503, a11y_error)
        self.send_json({"output": out, "status": "success"})

    def guigym_terminal(self) -> None:
        """The local sandbox's terminal text (its tmux pane) only, no AT-SPI walk: ``{"output":
        text or null}``. The host asks here instead of running a tmux client itself."""
        self.send_json({"output": tmux_terminal_output(), "status": "success"})

    def screen_size(self) -> None:
        w, h = self.desk.screen.size()
        self.send_json({"width": w, "height": h})

    def cursor_position(self) -> None:
        x, y = self.desk.screen.cursor_position()
        self.send_json([x, y])

    def execute(self) -> None:
        data = self._json_body()
        command, shell = _command(data)
        timeout = _float_field(data, "timeout", EXECUTE_TIMEOUT_S, 0.001, 3600)
        try:
            r = zone.run(command, shell=shell, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, errors="replace", timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise HTTPError(500, f"command timed out after {timeout:g} s") from None
        except (OSError, zone.ZoneUnavailable) as exc:
            raise HTTPError(500, str(exc)) from None
        self.send_json({"status": "success", "output": r.stdout, "error": r.stderr, "returncode": r.returncode})

    def execute_with_verification(self) -> None:
        data = self._json_body()
        command, shell = _command(data)
        verification = data.get("verification") or {}
        max_wait = _float_field(data, "max_wait_time", 10, 0, 3600)
        interval = _float_field(data, "check_interval", 1, 0.01, 60)
        try:
            r = zone.run(command, shell=shell, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         errors="replace", timeout=EXECUTE_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except (subprocess.TimeoutExpired, OSError, zone.ZoneUnavailable) as exc:
            raise HTTPError(500, str(exc)) from None
        base = {"output": r.stdout, "error": r.stderr, "returncode": r.returncode}
        if not verification:
            self.send_json({"status": "success", **base})
            return
        t0 = time.monotonic()
        while True:
            ok = True
            if "window_exists" in verification:
                ok = bool(self.desk.windows.find(str(verification["window_exists"])))
            if ok and "command_success" in verification:
                try:
                    ok = zone.run(verification["command_success"], shell=True, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, timeout=5).returncode == 0
                except (subprocess.TimeoutExpired, OSError, zone.ZoneUnavailable):
                    ok = False
            waited = time.monotonic() - t0
            if ok:
                self.send_json({"status": "success", **base, "verification": "passed", "wait_time": waited})
                return
            if waited >= max_wait:
                self.send_json({"status": "verification_failed", **base, "verification": "failed",
                                "wait_time": max_wait}, 500)
                return
            time.sleep(interval)

    def launch(self) -> None:
        command, shell = _command(self._json_body())
        if isinstance(command, list) and command[0] == "google-chrome" and zone.which("google-chrome") is None:
            # OSWorld swaps in chromium where Chrome does not exist (they do it on arm64)
            for alt in ("chromium", "chromium-browser"):
                if zone.which(alt):
                    command = [alt] + command[1:]
                    break
        try:
            p = zone.popen(command, shell=shell, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True, bounded=True)
        except (OSError, zone.ZoneUnavailable) as exc:
            raise HTTPError(500, str(exc)) from None
        self.desk.started(p)
        self.send_text("{} launched successfully".format(command if shell else " ".join(command)))

    def open_file(self) -> None:
        data = self._json_body()
        path = data.get("path")
        if not path:
            raise HTTPError(400, "Path not supplied!")
        timeout = _float_field(data, "timeout_seconds", OPEN_FILE_TIMEOUT_S, 0, OPEN_FILE_TIMEOUT_S)
        full = os.path.expandvars(os.path.expanduser(path))
        if zone.test("-e", full):
            opener = zone.which("xdg-open")
            if opener is None:
                raise HTTPError(500, "xdg-open is not installed; cannot open files")
            argv = [opener, full]
            base = os.path.basename(full)
            candidates = [data.get("window_name")] if data.get("window_name") else [base, os.path.splitext(base)[0]]
        elif zone.which(path):
            argv = [path]
            candidates = [data.get("window_name") or path]
        else:
            raise HTTPError(404, f"Application/file not found: {path}")
        p = zone.popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, start_new_session=True, bounded=True)
        self.desk.started(p)
        if self.desk.windows.wait_for([c for c in candidates if c], timeout) is None:
            raise HTTPError(500, f"Failed to find window for {candidates} within {timeout:g} seconds.")
        self.send_text("File opened and window activated successfully")

    def _window_args(self) -> tuple[str, bool, bool]:
        data = self._json_body()
        name = data.get("window_name")
        if not name:
            raise HTTPError(400, "window_name required")
        return str(name), bool(data.get("strict", False)), bool(data.get("by_class", False))

    def activate_window(self) -> None:
        name, strict, by_class = self._window_args()
        if self.desk.windows.activate(name, strict, by_class) is None:
            raise HTTPError(404, f"Window {name} not found")
        self.send_text("Window activated successfully")

    def close_window(self) -> None:
        name, strict, by_class = self._window_args()
        if self.desk.windows.close(name, strict, by_class) is None:
            raise HTTPError(404, f"Window {name} not found")
        self.send_text("Window closed successfully.")

    def upload(self) -> None:
        form = self._form()
        path, part = form.get("file_path"), form.get("file_data")
        if not isinstance(path, str) or not isinstance(part, multipart.Part):
            raise HTTPError(400, "file_path and file_data are required")
        full = os.path.expandvars(os.path.expanduser(path))
        try:
            zone.write_file(full, part.data)  # as the agent: its symlinks resolve in its own view
        except (OSError, subprocess.TimeoutExpired, zone.ZoneUnavailable) as exc:
            raise HTTPError(500, f"Failed to upload file: {exc}") from None
        self.send_text(f"File Uploaded: {len(part.data)} bytes")

    def file(self) -> None:
        form = self._form()
        path = form.get("file_path")
        if not isinstance(path, str) or not path:
            raise HTTPError(400, "file_path is required")
        full = os.path.expandvars(os.path.expanduser(path))
        try:
            data = zone.read_file(full)
        except (OSError, subprocess.TimeoutExpired, zone.ZoneUnavailable) as exc:
            raise HTTPError(500, f"cannot read {full}: {exc}") from None
        if data is None:
            raise HTTPError(404, "File not found")
        self.send(200, data, "application/octet-stream",
                  {"Content-Disposition": "attachment; filename=%s" % json.dumps(os.path.basename(full))})

    def list_directory(self) -> None:
        data = self._json_body()
        if "path" not in data:
            raise HTTPError(400, "Missing 'path' parameter")
        start = os.path.expanduser(str(data["path"]))
        try:
            tree = zone.list_tree(start)
        except (OSError, ValueError, subprocess.TimeoutExpired, zone.ZoneUnavailable) as exc:
            raise HTTPError(500, f"cannot list {start}: {exc}") from None
        if tree is None:
            raise HTTPError(400, "The provided path is not a directory")
        self.send_json({"directory_tree": tree})

    def window_size(self) -> None:
        cls = self._form().get("app_class_name")
        if not cls:
            raise HTTPError(400, "app_class_name is required")
        for w in self.desk.windows.list():
            if cls.lower() in [c.lower() for c in w.wm_class.split(".")]:
                from Xlib import display as xdisplay  # noqa: PLC0415

                d = xdisplay.Display(self.desk.display)
                try:
                    g = d.create_resource_object("window", w.wid).get_geometry()
                    self.send_json({"width": g.width, "height": g.height})
                finally:
                    d.close()
                return
        raise HTTPError(404, f"no window of class {cls}")

    def desktop_path(self) -> None:
        p = os.path.join(os.path.expanduser("~"), "Desktop")
        if not zone.test("-e", p):
            raise HTTPError(404, "Unsupported operating system or desktop path not found")
        self.send_json({"desktop_path": p})

    def wallpaper(self) -> None:
        try:
            r = zone.run(["gsettings", "get", "org.gnome.desktop.background", "picture-uri"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10)
            if r.returncode != 0:
                raise OSError(r.stderr.decode(errors="replace").strip())
            path = r.stdout.decode().strip().replace("file://", "").replace("'", "")
            data = zone.read_file(path)
        except (OSError, subprocess.SubprocessError, zone.ZoneUnavailable) as exc:
            raise HTTPError(404, f"Wallpaper file not found: {exc}") from None
        if data is None:
            raise HTTPError(404, "Wallpaper file not found")
        self.send(200, data, "image/png")

    def change_wallpaper(self) -> None:
        path = self._json_body().get("path")
        if not path:
            raise HTTPError(400, "Path not supplied!")
        full = os.path.expandvars(os.path.expanduser(path))
        if not zone.test("-e", full):
            raise HTTPError(404, f"File not found: {full}")
        try:
            zone.run(["gsettings", "set", "org.gnome.desktop.background", "picture-uri", f"file://{full}"],
                     stdin=subprocess.DEVNULL, timeout=10)
        except (OSError, subprocess.SubprocessError, zone.ZoneUnavailable) as exc:
            raise HTTPError(500, f"Failed to change wallpaper. Error: {exc}") from None
        self.send_text("Wallpaper changed successfully")

    def download_file(self) -> None:
        data = self._json_body()
        url, path = data.get("url"), data.get("path")
        if not url or not path:
            raise HTTPError(400, "Path or URL not supplied!")
        full = os.path.expandvars(os.path.expanduser(path))
        err: Optional[Exception] = None
        for _ in range(3):
            try:  # fetched here, written as the agent (its HOME is not ours to write into)
                with urllib.request.urlopen(url, timeout=300) as r:
                    payload = r.read()
                zone.write_file(full, payload)
                self.send_text(f"File downloaded successfully: {len(payload)} bytes")
                return
            except Exception as exc:  # network unreachable inside a --unshare-net sandbox, 404...
                err = exc
        raise HTTPError(500, f"Failed to download {url}. No retries left. Error: {err}")

    def run_python(self) -> None:
        code = self._json_body().get("code")
        if not code:
            raise HTTPError(400, "Code not supplied!")
        try:  # the desktop's python3 (in the agent zone when there is one), code as one argument
            r = zone.run(["python3", "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         errors="replace", timeout=30, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            self.send_json({"status": "error", "message": "Execution timeout: Code took too long to execute",
                            "error": "TimeoutExpired", "need_more": False, "output": None}, 500)
            return
        except (OSError, zone.ZoneUnavailable) as exc:
            raise HTTPError(500, str(exc)) from None
        msg = r.stdout + (("\n" if r.stdout else "") + r.stderr if r.stderr else "")
        self.send_json({"status": "success" if r.returncode == 0 else "error", "message": msg, "need_more": False,
                        "output": r.stdout, "error": r.stderr, "return_code": r.returncode})

    def run_bash_script(self) -> None:
        data = self._json_body()
        script = data.get("script")
        if not script:
            self.send_json({"status": "error", "output": "Script not supplied!", "error": "", "returncode": -1}, 400)
            return
        timeout = _float_field(data, "timeout", 100, 0.001, 3600)
        cwd = data.get("working_dir")
        if cwd:
            cwd = os.path.expanduser(cwd)
            if not zone.test("-d", cwd):
                self.send_json({"status": "error", "output": f"Working directory does not exist: {cwd}",
                                "error": "", "returncode": -1}, 400)
                return
        if "#!/bin/bash" not in script:
            script = "#!/bin/bash\n\n" + script
        try:  # the script is one argument of bash -c: nothing is written where the agent could swap it
            r = zone.run(["/bin/bash", "-c", script, "bash"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, errors="replace", timeout=timeout, cwd=cwd or None, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            self.send_json({"status": "error", "output": f"Script execution timed out after {timeout:g} seconds",
                            "error": "", "returncode": -1}, 500)
            return
        except (OSError, zone.ZoneUnavailable) as exc:
            raise HTTPError(500, str(exc)) from None
        self.send_json({"status": "success" if r.returncode == 0 else "error", "output": r.stdout,
                        "error": "", "returncode": r.returncode})

    def start_recording(self) -> None:
        desk = self.desk
        if desk.recording is not None and desk.recording.poll() is None:
            raise HTTPError(400, "Recording is already in progress.")
        ffmpeg = shutil.which("ffmpeg")
        if ffmpeg is None:
            raise HTTPError(501, "Recording needs ffmpeg, which is not installed in this desktop")
        if os.path.exists(desk.recording_path):
            os.unlink(desk.recording_path)
        w, h = desk.screen.size()
        disp = desk.display or os.environ.get("DISPLAY", ":0")
        desk.recording = subprocess.Popen(
            [ffmpeg, "-y", "-f", "x11grab", "-draw_mouse", "1", "-s", f"{w}x{h}", "-i", disp,
             "-c:v", "libx264", "-r", "30", desk.recording_path],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            desk.recording.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.send_json({"status": "success", "message": "Started recording successfully."})
            return
        err = desk.recording.stderr.read() if desk.recording.stderr else ""
        desk.recording = None
        raise HTTPError(500, f"Failed to start recording. ffmpeg terminated unexpectedly. Error: {err}")

    def end_recording(self) -> None:
        desk = self.desk
        rec = desk.recording
        if rec is None or rec.poll() is not None:
            desk.recording = None
            raise HTTPError(400, "No recording in progress to stop.")
        rec.send_signal(signal.SIGINT)
        try:
            _, err = rec.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            rec.kill()
            _, err = rec.communicate()
            desk.recording = None
            raise HTTPError(500, f"Recording process was unresponsive and had to be killed. Stderr: {err}") from None
        desk.recording = None
        if not os.path.exists(desk.recording_path) or os.path.getsize(desk.recording_path) == 0:
            raise HTTPError(500, f"Recording failed. The output file is missing or empty. ffmpeg stderr: {err}")
        with open(desk.recording_path, "rb") as f:
            self.send(200, f.read(), "video/mp4")

    # ---- guigym extensions ------------------------------------------------------------------
    def guigym_version(self) -> None:
        self.send_json({"server": SERVER_NAME, "protocol": PROTOCOL_VERSION, "python": platform.python_version(),
                        "display": self.desk.display or os.environ.get("DISPLAY"),
                        "token_required": self.server.token is not None})

    def guigym_launched(self) -> None:
        """``{"processes": [[pid, start time], ...]}``: the live processes of the sessions the
        setup steps started (pids as the agent zone numbers them; :mod:`.launched`)."""
        self.send_json({"processes": [list(m) for m in launched.members(self.desk.leaders)]})

    def guigym_action(self) -> None:
        """POST ``{"name": "click", "args": {"x": 10, "y": 20}}``; 400 names the bad field."""
        data = self._json_body()
        t0 = time.perf_counter()
        try:
            self.desk.input.perform(data.get("name"), data.get("args") or {})
        except ActionError as exc:
            raise HTTPError(400, f"{data.get('name')}: {exc}") from None
        self.send_json({"status": "success", "ms": (time.perf_counter() - t0) * 1e3})

    def guigym_observe(self) -> None:
        """Screenshot and a11y tree in one response.

        Query: ``image=png|raw`` (raw = packed RGB rows, fastest over a unix socket),
        ``level`` (PNG compression, default 1), ``a11y=0|1``, ``max_nodes``, ``time_budget``,
        ``cursor=0|1``. Body: one line of JSON (``width``, ``height``, ``format``, ``a11y``
        (XML string or null), ``a11y_error``, ``a11y_truncated``, ``cursor`` [x, y], ``ms``
        timings), a newline, then the image bytes.
        """
        fmt = self.query.get("image", "png")
        if fmt not in ("png", "raw"):
            raise HTTPError(400, f"image must be png or raw, got {fmt!r}")
        want_a11y = self.query.get("a11y", "1") != "0"
        n, t = self._a11y_caps()
        result: dict[str, Any] = {"a11y": None, "a11y_error": None, "a11y_truncated": None}
        t0 = time.perf_counter()
        # the walk's ink test of big tables (Calc's sheet) reads this grab instead of its own
        raw: dict[str, Any] = {}
        grabbed = threading.Event()

        def shared_screen() -> Any:
            grabbed.wait(30)
            return raw.get("img")

        def collect() -> None:
            try:
                xml, stats = a11y_mod.accessibility_tree(n, t, shared_screen)
                result.update(a11y=xml, a11y_truncated=stats["truncated"], a11y_ms=stats["ms"])
            except Exception as exc:  # A11yUnavailable or an app dying mid-walk
                result["a11y_error"] = f"{type(exc).__name__}: {exc}"

        worker = threading.Thread(target=collect, daemon=True) if want_a11y else None
        if worker is not None:
            worker.start()  # AT-SPI waits on D-Bus, so it overlaps with the grab and encode
        try:
            img = raw["img"] = self.desk.screen.grab(cursor=False)
        finally:
            grabbed.set()
        if self.query.get("cursor", "1") != "0":
            img = self.desk.screen.add_cursor(img.copy())  # the walk may still read the raw grab
        payload = encode_png(img, int(self.query.get("level", "1"))) if fmt == "png" else img.tobytes()
        shot_ms = (time.perf_counter() - t0) * 1e3
        if worker is not None:
            worker.join()
        head = {"width": img.width, "height": img.height, "format": "png" if fmt == "png" else "rgb",
                "cursor": list(self.desk.screen.cursor_position()),
                "ms": {"screenshot": shot_ms, "a11y": result.pop("a11y_ms", None),
                       "total": (time.perf_counter() - t0) * 1e3}, **result}
        self.send(200, json.dumps(head).encode("utf-8") + b"\n" + payload, OBSERVE_CONTENT_TYPE)


_G, _P, _GP = frozenset({"GET"}), frozenset({"POST"}), frozenset({"GET", "POST"})
ROUTES: dict[str, tuple[frozenset, Callable[[Handler], None]]] = {
    "/platform": (_G, Handler.platform_),
    "/screenshot": (_G, Handler.screenshot),
    "/accessibility": (_G, Handler.accessibility),
    "/terminal": (_G, Handler.terminal),
    "/screen_size": (_GP, Handler.screen_size),
    "/cursor_position": (_G, Handler.cursor_position),
    "/execute": (_P, Handler.execute),
    "/setup/execute": (_P, Handler.execute),
    "/execute_with_verification": (_P, Handler.execute_with_verification),
    "/setup/execute_with_verification": (_P, Handler.execute_with_verification),
    "/setup/launch": (_P, Handler.launch),
    "/setup/open_file": (_P, Handler.open_file),
    "/setup/activate_window": (_P, Handler.activate_window),
    "/setup/close_window": (_P, Handler.close_window),
    "/setup/upload": (_P, Handler.upload),
    "/setup/change_wallpaper": (_P, Handler.change_wallpaper),
    "/setup/download_file": (_P, Handler.download_file),
    "/file": (_P, Handler.file),
    "/list_directory": (_P, Handler.list_directory),
    "/window_size": (_P, Handler.window_size),
    "/desktop_path": (_P, Handler.desktop_path),
    "/wallpaper": (_P, Handler.wallpaper),
    "/run_python": (_P, Handler.run_python),
    "/run_bash_script": (_P, Handler.run_bash_script),
    "/start_recording": (_P, Handler.start_recording),
    "/end_recording": (_P, Handler.end_recording),
    "/guigym/version": (_G, Handler.guigym_version),
    "/guigym/action": (_P, Handler.guigym_action),
    "/guigym/observe": (_G, Handler.guigym_observe),
    "/guigym/launched": (_G, Handler.guigym_launched),
    "/guigym/terminal": (_G, Handler.guigym_terminal),
}


class DesktopHTTPServer(GuardedServerMixin, ThreadingHTTPServer):
    """ThreadingHTTPServer over TCP (IPv4/IPv6) or a unix socket, with token and desktop state;
    connections, header time and per-read time bounded (httpguard.GuardedServerMixin)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: Any, token: Optional[bytes], desktop: Desktop, unix: bool = False,
                 verbose: bool = False, max_body: int = DEFAULT_MAX_BODY,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS, header_timeout: float = DEFAULT_HEADER_TIMEOUT_S,
                 io_timeout: float = DEFAULT_IO_TIMEOUT_S) -> None:
        self.guard(max_connections, header_timeout, io_timeout)
        self.unix = unix
        if unix:
            self.address_family = socket.AF_UNIX
        elif ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.token = token
        self.desktop = desktop
        self.verbose = verbose
        self.max_body = max_body
        super().__init__(address, Handler)

    def server_bind(self) -> None:
        if not self.unix:
            super().server_bind()
            return
        # HTTPServer.server_bind calls getfqdn on (host, port); a socket path has neither
        old = os.umask(0o177)  # socket file mode 0600: only our user may connect
        try:
            socketserver.TCPServer.server_bind(self)
        finally:
            os.umask(old)
        self.server_name, self.server_port = "localhost", 0


def _read_token(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            token = f.read().strip()
    except OSError as exc:
        raise SystemExit(f"--token-file {path}: {exc.strerror}") from None
    if not token:
        raise SystemExit(f"--token-file {path} is empty")
    return token


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python3 -m guigym.envs.desktop.server",
        description="guigym's in-desktop server (OSWorld in-VM protocol + /guigym/ extensions).")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--unix-socket", metavar="PATH", help="listen on this unix socket (mode 0600)")
    where.add_argument("--host", help="listen on this address (127.0.0.1 or ::1 unless --allow-remote)")
    p.add_argument("--port", type=int, default=5000, help="TCP port with --host (OSWorld uses 5000)")
    p.add_argument("--token-file", metavar="PATH",
                   help="file holding the bearer token every request must send")
    p.add_argument("--insecure-no-token", action="store_true",
                   help="serve without a token (like stock OSWorld); only inside an isolated VM")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow --host to be a non-loopback address (a VM's NIC); still needs the token")
    p.add_argument("--display", help="X display (default $DISPLAY); exported to launched commands")
    p.add_argument("--max-body", type=int, default=DEFAULT_MAX_BODY,
                   help=f"largest request body in bytes (default {DEFAULT_MAX_BODY})")
    p.add_argument("--max-connections", type=int, default=DEFAULT_MAX_CONNECTIONS,
                   help=f"connections served at once, one thread each (default {DEFAULT_MAX_CONNECTIONS}); more get 503")
    p.add_argument("--header-timeout", type=float, default=DEFAULT_HEADER_TIMEOUT_S,
                   help=f"seconds for a request's headers to arrive (default {DEFAULT_HEADER_TIMEOUT_S:g})")
    p.add_argument("--io-timeout", type=float, default=DEFAULT_IO_TIMEOUT_S,
                   help=f"seconds one body read or reply write may block (default {DEFAULT_IO_TIMEOUT_S:g})")
    p.add_argument("--verbose", action="store_true", help="log requests and tracebacks to stderr")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.token_file and args.insecure_no_token:
        raise SystemExit("give --token-file or --insecure-no-token, not both")
    if not args.token_file and not args.insecure_no_token:
        raise SystemExit("--token-file is required (or --insecure-no-token for a stock-compatible server)")
    token = _read_token(args.token_file) if args.token_file else None
    if args.host is not None and args.host not in LOOPBACK_HOSTS and not args.allow_remote:
        raise SystemExit(f"--host {args.host} is not a loopback address; pass --allow-remote to serve it")
    if args.display:
        os.environ["DISPLAY"] = args.display
    if not os.environ.get("DISPLAY"):
        raise SystemExit("no X display: pass --display or set DISPLAY")
    desktop = Desktop(args.display or os.environ["DISPLAY"])
    limits = dict(max_body=args.max_body, max_connections=args.max_connections, header_timeout=args.header_timeout,
                  io_timeout=args.io_timeout)
    if args.unix_socket:
        if os.path.exists(args.unix_socket):
            os.unlink(args.unix_socket)  # a stale socket from a killed server
        server = DesktopHTTPServer(args.unix_socket, token, desktop, unix=True, verbose=args.verbose, **limits)
        where = args.unix_socket
    else:
        host = "127.0.0.1" if args.host == "localhost" else args.host
        server = DesktopHTTPServer((host, args.port), token, desktop, verbose=args.verbose, **limits)
        where = "%s:%d" % (host, server.server_address[1])

    def stop(signum: int, frame: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    sys.stderr.write(f"{SERVER_NAME} {PROTOCOL_VERSION} listening on {where} (display {desktop.display})\n")
    sys.stderr.flush()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        if args.unix_socket and os.path.exists(args.unix_socket):
            os.unlink(args.unix_socket)
        if desktop.recording is not None and desktop.recording.poll() is None:
            desktop.recording.kill()
    return 0
