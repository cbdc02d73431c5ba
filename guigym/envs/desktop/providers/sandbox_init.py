"""Init of the local desktop sandbox: runs INSIDE bubblewrap (the infra zone) under Debian's python3.

Standard library and python3-xlib only (it is started as a script, not imported from guigym).
Usage: ``/usr/bin/python3 -I init.py /run/guigym/config.json``.

It starts the long-lived parts of the desktop once (Xvfb, the infra's D-Bus, the AT-SPI bus,
openbox, the in-desktop server), then answers a control socket (``ctl.sock`` next to the
config, in the infra-only run dir; one JSON line in, one JSON line out):

* ``{"op": "reset", "terminal": true}``: SIGKILL the agent zone's pid 1 (the kernel then kills
  every process of the previous episode: there is no opt-out), kill the terminal, release held
  keys and mouse buttons, centre the pointer, drop X resources an agent set, empty the zone's
  /tmp, restore HOME from the template, start a new agent zone (nested bwrap, its own session
  D-Bus) and the terminal (xterm running a locked-down tmux whose pane enters the zone), and wait
  until it shows a prompt. Answers ``{"ok": true, "timings": {...}}``, or ``{"ok": false,
  "error": ...}`` when a part of the infrastructure died (the host then rebuilds the sandbox).
* ``{"op": "zone"}``: start the agent zone again if it died (HOME and /tmp are left as they are).
* ``{"op": "status"}``: which infrastructure processes are alive.
* ``{"op": "shutdown"}``: stop everything and exit (the sandbox then ends).

Waits: every start-up step waits for its event (a ``-displayfd``/``--print-address`` line, a
root window property, a pane with text, a process exiting) and the deadline is only a hang
guard. The host sizes it for the machine's load (guigym.core.waits, which this stdlib-only
script cannot import): ``start_budget_s`` in the config covers the whole infra start,
``budget_s`` in a reset request the whole reset, and ``wait_s`` the waits of neither (the spare
zone). A step gets what is left of its operation's budget, so a slow first step leaves less for
the next one instead of each step having its own short constant (issue 33, item 5).

The agent zone's pid, namespaces and environment are in ``zone.json`` next to the config; the
server enters the zone with ``nsenter`` (it is the user namespace's owner, so it has the caps to;
``execve`` as uid 1000 drops them) for every command it runs on the desktop.
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

#: the zone's PulseAudio sink volume at the start of an episode (65536 = 100%): 50%, a stated
#: choice **(differs)**: OSWorld's VM image does not publish its own, and its os task
#: 28cc3b7e ("turn up to the max volume") presumes it is below the max (sandbox_bin/pactl's
#: stand-in starts at the same value)
PULSE_VOLUME = 32768

#: pid 1 of the agent zone: starts the zone's own session D-Bus (and PulseAudio when installed),
#: says "ready" on stdout, then reaps orphans for ever. SIGCHLD stays blocked (sigwait), so it has no signal handler and a
#: signal sent from inside the zone cannot end it (the kernel ignores those for a pid 1).
ZONE_INIT = r"""
import os, signal, time
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
r, w = os.pipe()
os.set_inheritable(w, True)
bus = "unix:path=" + os.environ["XDG_RUNTIME_DIR"] + "/bus"
try:
    os.posix_spawnp("dbus-daemon", ["dbus-daemon", "--session", "--nofork", "--nopidfile",
                    "--address=" + bus, "--print-address=%d" % w], os.environ, setsigmask=())
except OSError as exc:
    os.write(2, ("zone: dbus-daemon: %s" % exc).encode() + bytes([10]))
os.close(w)
line = b""
while not line.endswith(b"\n"):
    chunk = os.read(r, 256)
    if not chunk:
        break
    line += chunk
os.close(r)
# PulseAudio, when the host has it: the zone's own sound server (a null sink, no sound device),
# so `pactl` is the real one (sandbox_bin/pactl uses it when the socket is there) and its
# state dies with the zone, like a VM revert. Its sink starts at PULSE_VOLUME.
pa = "/usr/bin/pulseaudio"
if os.path.exists(pa):
    run = os.environ["XDG_RUNTIME_DIR"]
    script = run + "/guigym-pulse.pa"
    with open(script, "w") as f:
        f.write("load-module module-null-sink sink_name=guigym-null-sink "
                "sink_properties=device.description=guigym-null-sink\n"
                "load-module module-native-protocol-unix auth-anonymous=1\n"
                "set-default-sink guigym-null-sink\n"
                "set-sink-volume guigym-null-sink PULSE_VOLUME\n")
    try:
        os.posix_spawn(pa, [pa, "-n", "-F", script, "--daemonize=no", "--exit-idle-time=-1",
                            "--log-target=stderr", "--log-level=error"], os.environ, setsigmask=())
        for _ in range(250):  # up to 5 s for its socket; a missing one leaves pactl's stand-in
            if os.path.exists(run + "/pulse/native"):
                break
            time.sleep(0.02)
        else:
            os.write(2, b"zone: pulseaudio: no socket after 5 s" + bytes([10]))
    except OSError as exc:
        os.write(2, ("zone: pulseaudio: %s" % exc).encode() + bytes([10]))
os.write(1, b"ready\n")
os.close(1)
while True:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
    signal.sigwait({signal.SIGCHLD})
"""


class Budget:
    """One deadline for an operation of several waits: ``left()`` seconds remain of
    ``seconds`` (never less than a sliver, so a last poll still happens)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = float(seconds)
        self.end = time.monotonic() + self.seconds

    def left(self) -> float:
        return max(0.05, self.end - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.end


def log(msg: str) -> None:
    sys.stderr.write(f"[init {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def read_to_eof(fd: int, timeout: float, what: str) -> str:
    """Everything written to ``fd`` until its writer closes it (bwrap's ``--info-fd``), within
    ``timeout`` s; closes ``fd``. TimeoutError naming ``what`` when the writer is too slow."""
    deadline, buf = time.monotonic() + timeout, b""
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(f"{what} did not start in {timeout:.0f} s")
            chunk = os.read(fd, 4096)
            if not chunk:
                return buf.decode()
            buf += chunk
    finally:
        os.close(fd)


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


def write_json(path: str, obj: dict) -> None:
    """Atomic write of a private JSON file."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def openbox_config(dest_dir: str, system_rc: str = "/etc/xdg/openbox/rc.xml") -> str:
    """An openbox rc.xml without anything that runs a program or ends openbox.

    openbox is infra: an ``Execute`` binding (the default root menu has "Terminal emulator") or a
    menu would start a process in the infra zone at an agent's click. Keeps focus, move, resize,
    maximise and the window buttons. Returns the path of the written rc.xml.
    """
    import xml.etree.ElementTree as ET

    ns = "http://openbox.org/3.4/rc"
    ET.register_namespace("", ns)
    banned = {"execute", "exit", "restart", "reconfigure", "sessionlogout", "showmenu"}
    try:
        tree = ET.parse(system_rc)
    except (OSError, ET.ParseError):
        tree = ET.ElementTree(ET.fromstring(f'<openbox_config xmlns="{ns}"/>'))
    root = tree.getroot()
    for parent in list(root.iter()):
        for child in list(parent):
            if child.tag in (f"{{{ns}}}keybind", f"{{{ns}}}mousebind") and any(
                    str(a.get("name", "")).lower() in banned for a in child.iter(f"{{{ns}}}action")):
                parent.remove(child)
    menu_xml = os.path.join(dest_dir, "menu.xml")
    with open(menu_xml, "w") as f:
        f.write('<openbox_menu xmlns="http://openbox.org/3.4/menu"></openbox_menu>\n')
    for old in root.findall(f"{{{ns}}}menu"):
        root.remove(old)
    menu = ET.SubElement(root, f"{{{ns}}}menu")
    ET.SubElement(menu, f"{{{ns}}}file").text = menu_xml
    rc = os.path.join(dest_dir, "rc.xml")
    tree.write(rc, encoding="utf-8", xml_declaration=True)
    return rc


class Init:
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.run_dir = os.path.dirname(os.path.abspath(cfg["config_path"]))
        self.log_dir = os.path.join(self.run_dir, "logs")
        os.makedirs(self.log_dir, exist_ok=True)
        self.display_num = int(cfg["display"])
        self.display = f":{self.display_num}"
        self.width, self.height = int(cfg["width"]), int(cfg["height"])
        self.env = dict(os.environ)  # the infra's environment (HOME is the infra's own)
        self.infra: dict[str, subprocess.Popen] = {}
        self.terminal: subprocess.Popen | None = None
        self.zone: subprocess.Popen | None = None  # the nested bwrap of the agent zone
        self.spare: tuple[subprocess.Popen, dict] | None = None  # the next episode's zone
        self.zone_info: dict = {}
        self.zone_file = os.path.join(self.run_dir, "zone.json")
        self.zone_env: dict = dict(cfg.get("zone_env") or {})
        self.xdpy = None  # python-xlib Display, when python3-xlib is present
        #: seconds for waits outside a start or a reset (the spare zone, rebuilding a dead zone)
        self.wait_s = float(cfg.get("wait_s", 30.0))

    # ------------------------------------------------------------------ start
    def spawn(self, name: str, argv: list, env: dict | None = None, **kw) -> subprocess.Popen:
        out = open(os.path.join(self.log_dir, f"{name}.log"), "ab", buffering=0)
        kw.setdefault("stdout", out)
        stderr = out if kw["stdout"] is subprocess.PIPE else subprocess.STDOUT
        proc = subprocess.Popen(argv, env=env or self.env, stdin=subprocess.DEVNULL,
                                stderr=stderr, cwd=self.env.get("HOME", "/"), **kw)
        out.close()
        return proc

    def start_infra(self) -> dict:
        """Start Xvfb, D-Bus, AT-SPI, openbox and the server, all within ``start_budget_s``."""
        t = {}
        t0 = time.monotonic()
        budget = Budget(float(self.cfg.get("start_budget_s", 60.0)))
        self.restore_home()
        os.makedirs(self.env["HOME"], mode=0o700, exist_ok=True)  # the infra's HOME, not the agent's
        self.openbox_rc = openbox_config(self.env["HOME"])
        # Xauthority with a fresh cookie: with network=True the X server's abstract socket is
        # reachable from the host's network namespace, and the cookie keeps other users out.
        xauth = self.env["XAUTHORITY"]
        open(xauth, "wb").close()
        subprocess.run(["xauth", "-q", "-f", xauth, "add", self.display, "MIT-MAGIC-COOKIE-1",
                        os.urandom(16).hex()], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=budget.left())
        rfd, wfd = os.pipe()
        self.infra["Xvfb"] = self.spawn("Xvfb", [
            "Xvfb", self.display, "-screen", "0", f"{self.width}x{self.height}x24",
            "-nolisten", "tcp", "-auth", xauth, "-noreset", "-dpi", "96", "-displayfd", str(wfd),
        ], pass_fds=(wfd,))
        os.close(wfd)
        self.read_line(rfd, "Xvfb", budget.left())  # -displayfd: written once the server accepts clients
        t["xvfb"] = time.monotonic() - t0

        rfd, wfd = os.pipe()
        bus = f"unix:path={self.env['XDG_RUNTIME_DIR']}/bus"
        self.infra["dbus"] = self.spawn("dbus", [
            "dbus-daemon", "--session", "--nofork", "--nopidfile", f"--address={bus}",
            f"--print-address={wfd}"], pass_fds=(wfd,))
        os.close(wfd)
        self.read_line(rfd, "dbus-daemon", budget.left())
        self.env["DBUS_SESSION_BUS_ADDRESS"] = bus
        t["dbus"] = time.monotonic() - t0

        self.connect_x()
        launcher = self.cfg.get("atspi_launcher") or "/usr/libexec/at-spi-bus-launcher"
        if os.path.exists(launcher):
            self.infra["at-spi-bus-launcher"] = self.spawn("atspi", [launcher, "--launch-immediately"])
        else:
            log(f"{launcher} missing: no accessibility tree")
        self.infra["openbox"] = self.spawn("openbox", ["openbox", "--sm-disable",
                                                       "--config-file", self.openbox_rc])
        self.set_background()
        if "at-spi-bus-launcher" in self.infra:
            address = self.wait_root_property("AT_SPI_BUS", "the AT-SPI bus", budget.left())
            if address:  # read before any agent process exists: later it could set the property
                self.env["AT_SPI_BUS_ADDRESS"] = self.zone_env["AT_SPI_BUS_ADDRESS"] = address
        t["atspi"] = time.monotonic() - t0
        self.wait_root_property("_NET_SUPPORTING_WM_CHECK", "openbox", budget.left())
        t["openbox"] = time.monotonic() - t0
        if self.cfg.get("server_argv"):
            server_env = dict(self.env)
            server_env.update(self.cfg.get("server_env") or {})
            server_env["GUIGYM_ZONE_FILE"] = self.zone_file
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
                    raise RuntimeError(f"{what} did not become ready in {timeout:.1f} s (no readiness line)")
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

    def wait_root_property(self, name: str, what: str, timeout: float) -> str | None:
        """Wait for root window property ``name``; its value when it is a string."""
        if self.xdpy is None:
            time.sleep(0.3)
            return None
        atom = self.xdpy.intern_atom(name)
        root = self.xdpy.screen().root
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            prop = root.get_full_property(atom, 0)
            if prop is not None:
                value = prop.value
                return value.decode(errors="replace") if isinstance(value, bytes) else None
            self.check_infra()
            time.sleep(0.01)
        raise RuntimeError(f"{what} did not start in {timeout:.1f} s (no {name} on the root window)")

    def check_infra(self) -> None:
        for name, proc in self.infra.items():
            code = proc.poll()
            if code is not None:
                raise RuntimeError(f"{name} exited with code {code} (see logs/{name}.log in the run dir)")

    # ------------------------------------------------------------------ reset
    def keep_pids(self, table: dict[int, int]) -> set[int]:
        """The infra's processes: pid 1, this init, what it started and the AT-SPI launcher's
        descendants (its bus daemon and registryd). No name or environment earns an exception."""
        keep = {1, os.getpid()} | {p.pid for p in self.infra.values()}
        children: dict[int, list[int]] = {}
        for pid, ppid in table.items():
            children.setdefault(ppid, []).append(pid)
        # The AT-SPI launcher's own bus daemon and the registry it activates are infrastructure.
        launcher = self.infra.get("at-spi-bus-launcher")
        stack = [launcher.pid] if launcher else []
        if self.spare is not None:  # not an episode's: nothing of an agent ever ran in it
            keep.add(self.spare[0].pid)
            stack.append(self.spare[0].pid)
        while stack:
            for child in children.get(stack.pop(), []):
                keep.add(child)
                stack.append(child)
        return keep

    def kill_zone(self, timeout: float | None = None) -> None:
        """SIGKILL the agent zone's pid 1: the kernel kills every process in its PID namespace."""
        zone, self.zone = self.zone, None
        pid = self.zone_info.get("pid")
        self.zone_info = {}
        try:
            os.unlink(self.zone_file)
        except FileNotFoundError:
            pass
        self.kill_zone_proc(zone, pid, timeout)

    def kill_zone_proc(self, zone: subprocess.Popen | None, pid: int | None,
                       timeout: float | None = None) -> None:
        """SIGKILL a zone and wait for its bwrap to exit (up to ``timeout`` s, default
        ``wait_s``: a loaded machine may take seconds to schedule the exits)."""
        timeout = self.wait_s if timeout is None else timeout
        for victim in (pid, zone.pid if zone else None):
            if victim:
                try:
                    os.kill(victim, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if zone is not None:
            try:
                zone.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"the agent zone's bwrap survived SIGKILL for {timeout:.1f} s") from None

    def kill_episode_processes(self, timeout: float | None = None) -> int:
        """Kill the agent zone, then SIGKILL every other non-infra process of the infra zone (the
        terminal's xterm and tmux server, ``nsenter`` parents of the server's commands) until none
        is left: a process forked while the first wave was sent dies in the next. Waits up to
        ``timeout`` s (default ``wait_s``) for the last one to go."""
        timeout = self.wait_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        self.kill_zone(timeout)
        seen: set[int] = set()
        while True:
            self.reap()
            table = proc_table()
            victims = [pid for pid in table if pid not in self.keep_pids(table)]
            if not victims:
                return len(seen)
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes {victims} survived SIGKILL for {timeout:.1f} s")
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
        if self.zone is not None and self.zone.poll() is not None:
            self.zone = None
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
        # X resources an agent set with xrdb would configure the next (infra) xterm, whose
        # translations can run programs (exec-formatted): drop them before it starts.
        for name in ("RESOURCE_MANAGER", "SCREEN_RESOURCES"):
            root.delete_property(self.xdpy.intern_atom(name))
        self.xdpy.sync()

    def restore_home(self) -> None:
        home, template = self.cfg["home"], self.cfg["template"]
        rmtree_contents(home)
        shutil.copytree(template, home, symlinks=True, dirs_exist_ok=True)

    def clean_tmp(self) -> None:
        """Empty the agent zone's /tmp (its XDG_RUNTIME_DIR is a tmpfs that died with it)."""
        rmtree_contents(self.cfg["zone_tmp"], frozenset({".X11-unix", *self.cfg.get("tmp_keep", ())}))
        try:
            os.unlink(self.cfg["tmux_socket"])
        except FileNotFoundError:
            pass

    # ------------------------------------------------------------------ agent zone
    def start_zone(self, timeout: float | None = None) -> None:
        """Make the spare zone (or a new one, within ``timeout`` s, default ``wait_s``) the agent
        zone and write ``zone.json``."""
        spare, self.spare = self.spare, None
        if spare is not None and spare[0].poll() is None:
            self.zone, self.zone_info = spare
        else:
            if spare is not None:
                self.kill_zone_proc(spare[0], spare[1].get("pid"), timeout)
            self.zone, self.zone_info = self.make_zone(timeout)
        write_json(self.zone_file, self.zone_info)

    def prepare_spare(self) -> None:
        """Start the next episode's zone now, while the host observes (it takes tens of ms).

        A spare runs nothing but its pid 1 and its own D-Bus; no agent process can reach it (its
        own PID namespace, its own /run/user) until a reset hands it over."""
        if self.spare is None and self.zone is not None:
            try:
                self.spare = self.make_zone()
            except Exception:  # noqa: BLE001 - the next reset makes one itself and reports
                log(traceback.format_exc())

    def make_zone(self, timeout: float | None = None) -> tuple[subprocess.Popen, dict]:
        """Start an agent zone (nested bwrap); returns it once its D-Bus is up (``timeout`` s for
        both, default ``wait_s``)."""
        budget = Budget(self.wait_s if timeout is None else timeout)
        info_r, info_w = os.pipe()
        # bounds_enter (providers/bounds.py): join the agent cgroups, lower rlimits, then bwrap,
        # so the zone's pid 1 and all it starts are inside the agent's bounds
        argv = [*self.cfg.get("bounds_enter", []), *self.cfg["zone_argv"], "--info-fd", str(info_w), "--clearenv"]
        for key, value in sorted(self.zone_env.items()):
            argv += ["--setenv", key, str(value)]
        argv += ["--", "/usr/bin/python3", "-I", "-S", "-c", ZONE_INIT.replace("PULSE_VOLUME", str(PULSE_VOLUME))]
        zone = self.spawn("zone", argv, env={"PATH": self.env.get("PATH", "/usr/bin:/bin")},
                          pass_fds=(info_w,), stdout=subprocess.PIPE)
        os.close(info_w)
        info: dict = {}
        try:
            info = json.loads(read_to_eof(info_r, budget.left(), "the agent zone") or "{}")
            line = self.read_line(os.dup(zone.stdout.fileno()), "the agent zone's D-Bus", budget.left())
            if line != "ready":
                raise RuntimeError(f"the agent zone did not start: {line!r} ({self.log_tail('zone')})")
            pid = int(info["child-pid"])
            zone_info = {"pid": pid, "pidns": os.stat(f"/proc/{pid}/ns/pid").st_ino,
                         "env": self.zone_env, "home": self.cfg["home"],
                         "enter": list(self.cfg.get("bounds_enter", []))}
        except BaseException:
            self.kill_zone_proc(zone, info.get("child-pid"), budget.left() + self.wait_s)
            raise
        finally:
            zone.stdout.close()
        return zone, zone_info

    def zone_alive(self) -> bool:
        self.reap()
        return self.zone is not None

    def zone_exec_argv(self, argv: list, cwd: str) -> list:
        """``argv`` run inside the agent zone as its uid, with only the zone's environment and
        inside the agent's bounds."""
        pid = str(self.zone_info["pid"])
        return [*self.cfg.get("bounds_enter", []), "nsenter", "-t", pid, "-U", "-m", "-p", "--preserve-credentials", "--",
                "/usr/bin/env", "-i", "-C", cwd, *[f"{k}={v}" for k, v in sorted(self.zone_env.items())],
                *argv]

    def tmux(self, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
        """A tmux client of the infra's own socket (in the infra-only run dir), ``timeout`` s
        (default ``wait_s``)."""
        return subprocess.run(["tmux", "-S", self.cfg["tmux_socket"], *args], env=self.env,
                              capture_output=True, text=True, timeout=self.wait_s if timeout is None else timeout)

    def start_terminal(self, timeout: float | None = None) -> None:
        """Start xterm + tmux and wait (``timeout`` s, default ``wait_s``) until the pane shows
        text (the shell's prompt), xterm is attached to the session and its window is mapped;
        fails at once when xterm exits."""
        budget = Budget(self.wait_s if timeout is None else timeout)
        term = self.cfg["terminal"]
        # tmux runs in the infra zone (its socket is infra-only); the shell in its pane enters
        # the agent zone; its config leaves no key that runs a tmux command.
        tmux = ["tmux", "-S", self.cfg["tmux_socket"], "-f", self.cfg["tmux_conf"],
                "new-session", "-s", self.cfg["tmux_session"], "--",
                *self.zone_exec_argv(["/bin/bash", "-l"], self.cfg["home"])]
        self.terminal = self.spawn("terminal", [
            "xterm", "-title", term.get("title", "Terminal"), "-geometry", term["geometry"],
            "-fa", term.get("font", "DejaVu Sans Mono"), "-fs", str(term.get("font_size", 12)),
            "-bg", term.get("bg", "#300a24"), "-fg", term.get("fg", "#ffffff"), "+sb",
            "-xrm", "XTerm*selectToClipboard: true", "-e", *tmux])
        seen = "no tmux session yet"
        while not budget.expired():  # a shell prompt in the pane and xterm attached
            if self.terminal.poll() is not None:
                raise RuntimeError(f"the terminal exited with code {self.terminal.returncode}: "
                                   + self.log_tail("terminal"))
            try:
                out = self.tmux("capture-pane", "-p", "-t", self.cfg["tmux_session"], timeout=budget.left())
            except subprocess.TimeoutExpired:
                continue  # a slow tmux client on a busy machine: ask again while time is left
            if out.returncode == 0 and out.stdout.strip():
                seen = "a prompt, but xterm not attached or its window not mapped"
                try:
                    clients = self.tmux("list-clients", timeout=budget.left())
                except subprocess.TimeoutExpired:
                    continue
                if clients.returncode == 0 and clients.stdout.strip() and self.terminal_mapped():
                    time.sleep(0.03)  # let xterm paint what tmux just sent it
                    return
            elif out.returncode == 0:
                seen = "an empty pane (no prompt yet)"
            time.sleep(0.02)
        raise RuntimeError(f"the terminal showed no prompt in {budget.seconds:.1f} s ({seen})")

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

    def reset(self, terminal: bool, budget_s: float | None = None) -> dict:
        """Kill the episode, restore HOME and /tmp, start a zone (and the terminal), all within
        ``budget_s`` (default ``wait_s``)."""
        self.check_infra()
        budget = Budget(self.wait_s if budget_s is None else budget_s)
        t0 = time.monotonic()
        timings = {}
        nprocs = self.kill_episode_processes(budget.left())
        timings["kill"] = time.monotonic() - t0
        self.reset_input()
        self.clean_tmp()
        self.restore_home()
        timings["restore"] = time.monotonic() - t0
        self.start_zone(budget.left())
        timings["zone"] = time.monotonic() - t0
        if terminal:
            self.start_terminal(budget.left())
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
                if self.zone_info and not self.zone_alive():
                    self.ensure_zone()  # it never dies on its own; rebuild it for the verifier
                continue
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(60)
                req: dict = {}
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
            if req.get("op") == "reset" and reply.get("ok"):
                self.prepare_spare()

    def handle(self, req: dict) -> dict:
        op = req.get("op")
        if op == "reset":
            budget = req.get("budget_s")
            return self.reset(bool(req.get("terminal", True)), float(budget) if budget else None)
        if op == "zone":
            self.ensure_zone()
            return {"ok": True, "pid": self.zone_info.get("pid")}
        if op == "status":
            return {"ok": True, "ready": self.ready_info,
                    "infra": {n: p.poll() is None for n, p in self.infra.items()}}
        if op == "shutdown":
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def ensure_zone(self) -> None:
        if not self.zone_alive():
            log("the agent zone died; starting a new one")
            self.kill_zone()
            self.start_zone()

    def shutdown(self) -> None:
        try:
            self.kill_zone()
            if self.spare is not None:
                self.kill_zone_proc(self.spare[0], self.spare[1].get("pid"))
        except RuntimeError:
            pass
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
