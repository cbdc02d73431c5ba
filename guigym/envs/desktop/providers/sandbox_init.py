"""Init of the local desktop sandbox: runs INSIDE bubblewrap under Debian's /usr/bin/python3.

Standard library and python3-xlib only (it is started as a script, not imported from guigym).
Usage: ``/usr/bin/python3 -I init.py /run/guigym/config.json``.

It starts the long-lived parts of the desktop once (Xvfb, the session D-Bus, the AT-SPI bus,
openbox, the in-desktop server), then answers a control socket (``ctl.sock`` next to the
config; one JSON line in, one JSON line out):

* ``{"op": "reset", "terminal": true}``: kill every process of the previous episode (all but the
  infrastructure), release held keys and mouse buttons, centre the pointer, empty /tmp and
  XDG_RUNTIME_DIR (but the sockets of the infrastructure), restore HOME from the template, start
  the terminal (xterm running tmux, so the env can read its text) and wait until it shows a
  prompt. Answers ``{"ok": true, "timings": {...}}``, or ``{"ok": false, "error": ...}`` when a
  part of the infrastructure died (the host then rebuilds the whole sandbox).
* ``{"op": "status"}``: which infrastructure processes are alive.
* ``{"op": "shutdown"}``: stop everything and exit (the sandbox then ends).

Processes started by anyone else (the server's /setup/launch, the terminal, sudo) are episode
processes and die at the next reset, unless their environment has ``GUIGYM_KEEP_ON_RESET=1``
(for long-lived helpers of the server).
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback

KEEP_ENV = b"GUIGYM_KEEP_ON_RESET=1"


def log(msg: str) -> None:
    sys.stderr.write(f"[init {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def force_remove(func, path, _exc) -> None:
    """``shutil.rmtree`` onerror: a task may chmod 000 a directory; we own it, so allow it and
    retry (also used by the host side, providers/local.py)."""
    try:
        os.chmod(os.path.dirname(path), 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
        func(path)
    except OSError:
        pass


def rmtree_contents(path: str, keep: frozenset = frozenset()) -> None:
    """Delete everything inside ``path`` except the names in ``keep``; fixes read-only dirs."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return
    for name in names:
        if name in keep:
            continue
        full = os.path.join(path, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full, onerror=force_remove)
        else:
            try:
                os.unlink(full)
            except FileNotFoundError:
                pass
            except PermissionError:
                force_remove(os.unlink, full, None)


def proc_table() -> dict[int, int]:
    """pid -> ppid of every live (non-zombie) process in this PID namespace."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rfind(b")") + 2:].split()
        if rest and rest[0] not in (b"Z", b"X"):
            table[int(name)] = int(rest[1])
    return table


def has_keep_env(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return KEEP_ENV in f.read().split(b"\0")
    except OSError:
        return False


def exe_name(pid: int) -> str:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return ""


class Init:
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.run_dir = os.path.dirname(os.path.abspath(cfg["config_path"]))
        self.log_dir = os.path.join(self.run_dir, "logs")
        os.makedirs(self.log_dir, exist_ok=True)
        self.display_num = int(cfg["display"])
        self.display = f":{self.display_num}"
        self.width, self.height = int(cfg["width"]), int(cfg["height"])
        self.env = dict(os.environ)
        self.infra: dict[str, subprocess.Popen] = {}
        self.terminal: subprocess.Popen | None = None
        self.xdpy = None  # python-xlib Display, when python3-xlib is present

    # ------------------------------------------------------------------ start
    def spawn(self, name: str, argv: list, env: dict | None = None, **kw) -> subprocess.Popen:
        out = open(os.path.join(self.log_dir, f"{name}.log"), "ab", buffering=0)
        proc = subprocess.Popen(argv, env=env or self.env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, cwd=self.cfg["home"], **kw)
        out.close()
        return proc

    def start_infra(self) -> dict:
        t = {}
        t0 = time.monotonic()
        self.restore_home()
        # Xauthority with a fresh cookie: with network=True the X server's abstract socket is
        # reachable from the host's network namespace, and the cookie keeps other users out.
        xauth = self.env["XAUTHORITY"]
        open(xauth, "wb").close()
        subprocess.run(["xauth", "-q", "-f", xauth, "add", self.display, "MIT-MAGIC-COOKIE-1",
                        os.urandom(16).hex()], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=10)
        rfd, wfd = os.pipe()
        self.infra["Xvfb"] = self.spawn("Xvfb", [
            "Xvfb", self.display, "-screen", "0", f"{self.width}x{self.height}x24",
            "-nolisten", "tcp", "-auth", xauth, "-noreset", "-dpi", "96", "-displayfd", str(wfd),
        ], pass_fds=(wfd,))
        os.close(wfd)
        self.read_line(rfd, "Xvfb", 15.0)  # -displayfd: written once the server accepts clients
        t["xvfb"] = time.monotonic() - t0

        rfd, wfd = os.pipe()
        bus = f"unix:path={self.env['XDG_RUNTIME_DIR']}/bus"
        self.infra["dbus"] = self.spawn("dbus", [
            "dbus-daemon", "--session", "--nofork", "--nopidfile", f"--address={bus}",
            f"--print-address={wfd}"], pass_fds=(wfd,))
        os.close(wfd)
        self.read_line(rfd, "dbus-daemon", 10.0)
        self.env["DBUS_SESSION_BUS_ADDRESS"] = bus
        t["dbus"] = time.monotonic() - t0

        self.connect_x()
        launcher = self.cfg.get("atspi_launcher") or "/usr/libexec/at-spi-bus-launcher"
        if os.path.exists(launcher):
            self.infra["at-spi-bus-launcher"] = self.spawn("atspi", [launcher, "--launch-immediately"])
        else:
            log(f"{launcher} missing: no accessibility tree")
        self.infra["openbox"] = self.spawn("openbox", ["openbox", "--sm-disable"])
        self.set_background()
        if "at-spi-bus-launcher" in self.infra:
            self.wait_root_property("AT_SPI_BUS", "the AT-SPI bus", 10.0)
        t["atspi"] = time.monotonic() - t0
        self.wait_root_property("_NET_SUPPORTING_WM_CHECK", "openbox", 10.0)
        t["openbox"] = time.monotonic() - t0
        if self.cfg.get("server_argv"):
            server_env = dict(self.env)
            server_env.update(self.cfg.get("server_env") or {})
            self.infra["server"] = self.spawn("server", self.cfg["server_argv"], env=server_env)
        t["server_spawned"] = time.monotonic() - t0
        return t

    def read_line(self, fd: int, what: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        buf = b""
        try:
            while b"\n" not in buf:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    raise RuntimeError(f"{what} did not become ready in {timeout:.0f} s")
                chunk = os.read(fd, 256)
                if not chunk:
                    raise RuntimeError(f"{what} exited during start-up (see logs/)")
                buf += chunk
        finally:
            os.close(fd)
        return buf.decode().strip()

    def connect_x(self) -> None:
        try:
            from Xlib import display as xdisplay
        except ImportError:
            log("python3-xlib missing: no input reset, no window checks")
            return
        self.xdpy = xdisplay.Display(self.display)

    def set_background(self) -> None:
        if self.xdpy is None:
            return
        colour = int(str(self.cfg.get("background", "#3c4a57")).lstrip("#"), 16)
        root = self.xdpy.screen().root
        root.change_attributes(background_pixel=colour)
        root.clear_area(0, 0, self.width, self.height)
        self.xdpy.sync()

    def wait_root_property(self, name: str, what: str, timeout: float) -> None:
        if self.xdpy is None:
            time.sleep(0.3)
            return
        atom = self.xdpy.intern_atom(name)
        root = self.xdpy.screen().root
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if root.get_full_property(atom, 0) is not None:
                return
            self.check_infra()
            time.sleep(0.01)
        raise RuntimeError(f"{what} did not start in {timeout:.0f} s (no {name} on the root window)")

    def check_infra(self) -> None:
        for name, proc in self.infra.items():
            code = proc.poll()
            if code is not None:
                raise RuntimeError(f"{name} exited with code {code} (see logs/{name}.log in the run dir)")

    # ------------------------------------------------------------------ reset
    def keep_pids(self, table: dict[int, int]) -> set[int]:
        keep = {1, os.getpid()} | {p.pid for p in self.infra.values()}
        children: dict[int, list[int]] = {}
        for pid, ppid in table.items():
            children.setdefault(ppid, []).append(pid)
        # The AT-SPI launcher's own bus daemon and the registry it activates are infrastructure.
        launcher = self.infra.get("at-spi-bus-launcher")
        stack = [launcher.pid] if launcher else []
        while stack:
            for child in children.get(stack.pop(), []):
                keep.add(child)
                stack.append(child)
        for pid in table:
            if pid not in keep and (exe_name(pid) == "at-spi2-registryd" or has_keep_env(pid)):
                keep.add(pid)
        return keep

    def kill_episode_processes(self, timeout: float = 3.0) -> int:
        """SIGKILL every non-infrastructure process (a VM revert does not let apps save either)
        until none is left: a process forked while the first wave was sent dies in the next."""
        deadline = time.monotonic() + timeout
        seen: set[int] = set()
        while True:
            self.reap()
            table = proc_table()
            victims = [pid for pid in table if pid not in self.keep_pids(table)]
            if not victims:
                return len(seen)
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes {victims} survived SIGKILL for {timeout} s")
            for pid in victims:
                if pid not in seen:
                    seen.add(pid)
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            time.sleep(0.005)

    def reap(self) -> None:
        if self.terminal is not None and self.terminal.poll() is not None:
            self.terminal = None
        while True:  # our other children (sudo, ...) are reaped by bwrap's pid 1, not us
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    def reset_input(self) -> None:
        """Release keys and buttons an agent left held, and centre the pointer."""
        if self.xdpy is None:
            return
        from Xlib import X
        from Xlib.ext import xtest

        keymap = self.xdpy.query_keymap()
        for byte_index, byte in enumerate(keymap):
            for bit in range(8):
                if byte & (1 << bit):
                    xtest.fake_input(self.xdpy, X.KeyRelease, byte_index * 8 + bit)
        root = self.xdpy.screen().root
        mask = root.query_pointer().mask
        for button, bmask in ((1, X.Button1Mask), (2, X.Button2Mask), (3, X.Button3Mask)):
            if mask & bmask:
                xtest.fake_input(self.xdpy, X.ButtonRelease, button)
        xtest.fake_input(self.xdpy, X.MotionNotify, x=self.width // 2, y=self.height // 2)
        self.xdpy.sync()

    def restore_home(self) -> None:
        home, template = self.cfg["home"], self.cfg["template"]
        rmtree_contents(home)
        shutil.copytree(template, home, symlinks=True, dirs_exist_ok=True)

    def clean_tmp(self) -> None:
        keep = frozenset({".X11-unix", f".X{self.display_num}-lock", ".ICE-unix", *self.cfg.get("tmp_keep", ())})
        rmtree_contents("/tmp", keep)
        rmtree_contents(self.env["XDG_RUNTIME_DIR"], frozenset({"bus", "at-spi"}))
        for name in ("tmux.sock",):
            try:
                os.unlink(os.path.join(self.run_dir, name))
            except FileNotFoundError:
                pass

    def tmux(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", "-S", self.cfg["tmux_socket"], *args], env=self.env,
                              capture_output=True, text=True, timeout=5)

    def start_terminal(self, timeout: float = 10.0) -> None:
        term = self.cfg["terminal"]
        tmux = ["tmux", "-S", self.cfg["tmux_socket"], "-f", self.cfg["tmux_conf"],
                "new-session", "-s", self.cfg["tmux_session"], "-c", self.cfg["home"]]
        self.terminal = self.spawn("terminal", [
            "xterm", "-title", term.get("title", "Terminal"), "-geometry", term["geometry"],
            "-fa", term.get("font", "DejaVu Sans Mono"), "-fs", str(term.get("font_size", 12)),
            "-bg", term.get("bg", "#300a24"), "-fg", term.get("fg", "#ffffff"), "+sb",
            "-xrm", "XTerm*selectToClipboard: true", "-e", *tmux])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:  # a shell prompt in the pane and xterm attached
            if self.terminal.poll() is not None:
                raise RuntimeError(f"the terminal exited with code {self.terminal.returncode}: "
                                   + self.log_tail("terminal"))
            out = self.tmux("capture-pane", "-p", "-t", self.cfg["tmux_session"])
            if out.returncode == 0 and out.stdout.strip():
                clients = self.tmux("list-clients")
                if clients.returncode == 0 and clients.stdout.strip() and self.terminal_mapped():
                    time.sleep(0.03)  # let xterm paint what tmux just sent it
                    return
            time.sleep(0.02)
        raise RuntimeError(f"the terminal showed no prompt in {timeout:.0f} s")

    def log_tail(self, name: str, chars: int = 600) -> str:
        try:
            with open(os.path.join(self.log_dir, f"{name}.log"), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - chars))
                return f.read().decode(errors="replace").strip()
        except OSError:
            return f"(no logs/{name}.log)"

    def terminal_mapped(self) -> bool:
        if self.xdpy is None:
            return True
        from Xlib import X

        root = self.xdpy.screen().root
        prop = root.get_full_property(self.xdpy.intern_atom("_NET_CLIENT_LIST"), X.AnyPropertyType)
        for wid in (prop.value if prop is not None else []):
            win = self.xdpy.create_resource_object("window", wid)
            try:
                cls = win.get_wm_class() or ()
                if "XTerm" in cls and win.get_attributes().map_state == X.IsViewable:
                    return True
            except Exception:  # noqa: BLE001 - the window went away meanwhile
                continue
        return False

    def reset(self, terminal: bool) -> dict:
        self.check_infra()
        t0 = time.monotonic()
        timings = {}
        nprocs = self.kill_episode_processes()
        timings["kill"] = time.monotonic() - t0
        self.reset_input()
        self.clean_tmp()
        self.restore_home()
        timings["restore"] = time.monotonic() - t0
        if terminal:
            self.start_terminal()
        timings["terminal"] = time.monotonic() - t0
        self.check_infra()
        return {"ok": True, "timings": timings, "killed": nprocs}

    # ------------------------------------------------------------------ control socket
    def serve(self, ready: dict, status_path: str) -> None:
        path = os.path.join(self.run_dir, "ctl.sock")
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        os.chmod(path, 0o600)
        srv.listen(4)
        self.ready_info = ready
        write_status(status_path, {"ok": True, "timings": ready})  # only once we listen
        while True:
            if not select.select([srv], [], [], 1.0)[0]:
                self.reap()
                continue
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(60)
                try:
                    line = conn.makefile("rb").readline()
                    req = json.loads(line or b"{}")
                    reply = self.handle(req)
                except Exception as exc:  # noqa: BLE001 - report to the host, keep serving
                    reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                    log(traceback.format_exc())
                try:
                    conn.sendall(json.dumps(reply).encode() + b"\n")
                except OSError:
                    pass
                if req.get("op") == "shutdown":
                    self.shutdown()
                    return

    def handle(self, req: dict) -> dict:
        op = req.get("op")
        if op == "reset":
            return self.reset(bool(req.get("terminal", True)))
        if op == "status":
            return {"ok": True, "ready": self.ready_info,
                    "infra": {n: p.poll() is None for n, p in self.infra.items()}}
        if op == "shutdown":
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def shutdown(self) -> None:
        for proc in list(self.infra.values())[::-1]:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.infra.values():
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.kill()


def write_status(path: str, status: dict) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(status, f)
    os.replace(path + ".tmp", path)


def main(argv: list) -> int:
    with open(argv[1]) as f:
        cfg = json.load(f)
    cfg["config_path"] = argv[1]
    init = Init(cfg)
    signal.signal(signal.SIGTERM, lambda *_: (init.shutdown(), os._exit(0)))
    status = os.path.join(init.run_dir, "init.status")
    try:
        ready = init.start_infra()
    except Exception as exc:  # noqa: BLE001 - the host reads init.status and init.log
        log(traceback.format_exc())
        write_status(status, {"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        init.shutdown()
        return 1
    init.serve(ready, status)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
