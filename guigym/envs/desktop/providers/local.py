"""``local`` provider: a desktop made of Debian packages, one bubblewrap sandbox per env.

What runs inside (see :mod:`.sandbox` for the file-system layout and :mod:`.sandbox_init` for
the init), in two trust zones (docs/architecture.md, "Trust zones"):

* infra zone: Xvfb on a display number of its own, a D-Bus bus, the AT-SPI bus (so pyatspi sees
  GTK/Qt apps), openbox, the in-desktop server (:mod:`guigym.envs.desktop.server`) on a unix
  socket, and the terminal's tmux server with the xterm showing it (OSWorld's Ubuntu desktop
  shows a terminal; tmux lets the server read its text);
* agent zone (nested, new at every reset): the shell in the terminal, every app and every
  command the server runs for a task or a getter. It sees neither the token nor any socket or
  file the host or the infra connects to or reads (they are in ``/run/guigym``).

The host file system is read-only, HOME (``/home/user``) and /tmp are private and restored on
every reset, the network is only loopback unless ``network=True``, and the guigym package and
checkout, task folders and caches (they hold the expected answers) and the host user's HOME are
hidden. A root host runs the sandbox as the unprivileged system user ``guigym-agent``
(:mod:`.identity`), never as root.

Time: ``start()`` ~1-2 s; ``revert()`` keeps Xvfb, D-Bus, AT-SPI, openbox and the server alive
and only kills the episode's processes, restores HOME and /tmp and restarts the terminal
(numbers in the report / docs/benchmarks.md). Everything dies with ``stop()``, at interpreter
exit, on SIGTERM, and (``--die-with-parent``) when the process that started it dies.

Terminal text: the terminal is tmux session :data:`TERMINAL_TMUX_SESSION` on the infra-only
tmux socket :data:`TERMINAL_TMUX_SOCKET`; the host asks the in-desktop server for it
(``GET /guigym/terminal``) and never runs a tmux client itself.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import hashlib
import http.client
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from guigym.core.errors import ConfigError, EnvInfraError
from guigym.core.waits import Deadline, scaled
from guigym.envs.desktop.providers import PROVIDERS
from guigym.envs.desktop.providers.base import Provider
from guigym.envs.desktop.providers import cgroups as cg
from guigym.envs.desktop.providers.bounds import (
    FALLBACK_NICE, MIB, DesktopBounds, can_mount_tmpfs, cgroup_limits, describe, desktop_cpu_weight, enter_argv,
    rlimit_args,
)
from guigym.envs.desktop.providers.display import DisplayLock
from guigym.envs.desktop.providers.home import prepare_template
from guigym.envs.desktop.providers.sandbox import (
    GROUP, PASSWD, SANDBOX_CGROUPS, SANDBOX_HOME, SANDBOX_PATH, SANDBOX_RUN, SANDBOX_SERVER_DIR,
    SANDBOX_INFRA_HOME, SANDBOX_INIT, SANDBOX_TEMPLATE, SANDBOX_USER, SANDBOX_XDG_RUNTIME, SANDBOX_ZONE_TMP,
    ZONE_SUDO_SHA256, ZONE_XAUTHORITY, SandboxSpec, bwrap_argv, bwrap_problem, find_bwrap, zone_argv_head,
)
from guigym.envs.desktop.providers.identity import sandbox_identity
from guigym.envs.desktop.providers.sandbox_init import force_remove, read_to_eof  # stdlib-only: safe to import here
from guigym.envs.desktop.vscode import SANDBOX_CODE_SERVER_PREFIX, find_code_server

if TYPE_CHECKING:
    from guigym.envs.desktop.client import DesktopClient

log = logging.getLogger(__name__)

#: tmux socket (path inside the sandbox) and session name of the desktop's terminal.
TERMINAL_TMUX_SOCKET = f"{SANDBOX_RUN}/tmux.sock"
TERMINAL_TMUX_SESSION = "term"
#: The server's unix socket and token file, inside the sandbox (the same files on the host are
#: in ``provider.run_dir``).
SERVER_SOCKET = f"{SANDBOX_RUN}/server.sock"
TOKEN_FILE = f"{SANDBOX_RUN}/token"
SUDO_SHA256_FILE = f"{SANDBOX_RUN}/sudo.sha256"
XAUTHORITY = f"{SANDBOX_RUN}/Xauthority"

#: idle-machine seconds for ``start()`` and for one ``revert()``, stretched by the load when the
#: caller leaves ``start_timeout_s`` / ``reset_timeout_s`` unset (:mod:`guigym.core.waits`)
START_BASE_S = 60.0
RESET_BASE_S = 30.0
#: idle-machine seconds for the init's waits outside a start or reset (its spare agent zone)
INIT_WAIT_BASE_S = 30.0

_PACKAGE_DIR = Path(__file__).resolve().parent  # .../guigym/envs/desktop/providers
_DESKTOP_DIR = _PACKAGE_DIR.parent
SERVER_DIR = _DESKTOP_DIR / "server"
SANDBOX_BIN_DIR = _DESKTOP_DIR / "sandbox_bin"
INIT_SCRIPT = _PACKAGE_DIR / "sandbox_init.py"
SYSTEM_PYTHON = "/usr/bin/python3"

_TMUX_CONF = """# tmux of the guigym desktop terminal: looks like a plain terminal.
# Its server is infra: no key may run a tmux command (no prefix, no bindings, no mouse menus),
# so typing into the terminal only ever reaches the shell in the agent zone.
set -g prefix None
set -g prefix2 None
unbind -a
unbind -a -T root
unbind -a -T copy-mode
unbind -a -T copy-mode-vi
set -g mouse off
set -g allow-rename off
set -g status off
set -g history-limit 10000
set -g escape-time 0
set -g default-terminal "tmux-256color"
# the xterm keeps its title "Terminal" (task setups find the window by that name)
set -g set-titles off
"""

#: Accessibility switches: GTK loads the AT-SPI bridge, Qt exposes its tree, LibreOffice uses
#: its GTK3 backend (whose a11y works through AT-SPI).
A11Y_ENV = {
    "GTK_MODULES": "gail:atk-bridge",
    "NO_AT_BRIDGE": "0",
    "QT_ACCESSIBILITY": "1",
    "QT_LINUX_ACCESSIBILITY_ALWAYS_ON": "1",
    "ACCESSIBILITY_ENABLED": "1",
    "GNOME_ACCESSIBILITY": "1",
    "SAL_USE_VCLPLUGIN": "gtk3",
}


# --------------------------------------------------------------------------- process plumbing

_spawner: Optional[tuple[int, concurrent.futures.ThreadPoolExecutor]] = None
_spawner_lock = threading.Lock()


def _spawn(argv: list[str], **kw: Any) -> subprocess.Popen:
    """Popen on a thread that lives as long as this process.

    bubblewrap's ``--die-with-parent`` is PR_SET_PDEATHSIG, which fires when the *thread* that
    forked exits; spawning from a short-lived caller thread would kill the sandbox with it.
    """
    global _spawner
    with _spawner_lock:
        if _spawner is None or _spawner[0] != os.getpid():  # fresh after fork
            _spawner = (os.getpid(), concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="guigym-sandbox-spawner"))
        pool = _spawner[1]
    return pool.submit(subprocess.Popen, argv, **kw).result()


_live: "weakref.WeakSet[LocalProvider]" = weakref.WeakSet()
_signals_installed = False


def _stop_all() -> None:
    for provider in list(_live):
        provider.stop()


def _install_exit_hooks() -> None:
    """Stop every live sandbox at interpreter exit and on SIGTERM (chaining any handler)."""
    global _signals_installed
    if _signals_installed:
        return
    _signals_installed = True
    atexit.register(_stop_all)
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread; atexit + pdeathsig remain
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: Any) -> None:
        _stop_all()
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    try:
        signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:
        pass


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def unix_http_get(path: str, url: str, token: Optional[str], timeout: float = 2.0) -> tuple[int, bytes]:
    """GET ``url`` from an HTTP server on unix socket ``path``: (status, body)."""
    conn = _UnixHTTPConnection(path, timeout)
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        conn.request("GET", url, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _has_pyautogui(python: str) -> bool:
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        import importlib.util

        return importlib.util.find_spec("pyautogui") is not None
    try:
        return subprocess.run([python, "-c", "import importlib.util as u, sys; "
                               "sys.exit(u.find_spec('pyautogui') is None)"],
                              capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


_python_choice: Optional[tuple[str, bool]] = None


def sandbox_python() -> tuple[str, bool]:
    """(interpreter behind ``python`` in the sandbox, whether it can import pyautogui).

    ``$GUIGYM_SANDBOX_PYTHON`` if set; else the first of this interpreter and Debian's that has
    pyautogui (OSWorld's VM has it for ``python``); else Debian's. Cached per process.
    """
    global _python_choice
    if _python_choice is None:
        forced = os.environ.get("GUIGYM_SANDBOX_PYTHON")
        if forced:
            _python_choice = (forced, _has_pyautogui(forced))
        else:
            candidates = [sys.executable, SYSTEM_PYTHON]
            found = next((p for p in candidates if os.path.exists(p) and _has_pyautogui(p)), None)
            _python_choice = (found, True) if found else (SYSTEM_PYTHON, False)
    return _python_choice


def checkout_root() -> Optional[Path]:
    """The source checkout guigym runs from (the directory holding ``guigym/``), if it is one."""
    root = _DESKTOP_DIR.parent.parent.parent
    if (root / "pyproject.toml").exists() or (root / ".git").exists():
        return root
    return None


def guigym_package_dirs() -> list[Path]:
    """Every ``guigym`` package directory an interpreter here could import: this one (checkout
    or site-packages) and any other copy on ``sys.path`` (a non-editable install next to a
    checkout). Each holds the embedded suite's task files with their expected answers."""
    dirs = {_DESKTOP_DIR.parent.parent}
    for entry in sys.path:
        candidate = Path(entry or ".") / "guigym"
        if (candidate / "__init__.py").is_file():
            dirs.add(candidate.resolve())
    return sorted(dirs)


def default_hidden_paths() -> list[Path]:
    """What the sandbox must not see: the guigym package and checkout (task files hold expected
    answers) and the host user's HOME (keys, tokens, shell history). The interpreter behind
    ``python`` stays visible even when it lives under one of them (``_launch`` binds it back)."""
    paths = [p for p in [checkout_root(), *guigym_package_dirs()] if p]
    home = Path.home()
    if home.is_dir() and home.resolve() != Path("/"):
        paths.append(home)
    return paths


# --------------------------------------------------------------------------- the provider


@PROVIDERS.register("local")
class LocalProvider(Provider):
    """A desktop in a bubblewrap sandbox on this machine (see the module docstring).

    Args:
        screen_size: (width, height) of the Xvfb screen.
        client_password: the password the sudo shim accepts (OSWorld's ``{CLIENT_PASSWORD}``).
        network: share the host's network; default False (loopback only).
        terminal: start the xterm+tmux terminal at every reset (OSWorld's desktop shows one).
        home_template: a directory HOME is restored from; default: :mod:`.home`'s template.
        hostname: the sandbox's host name (OSWorld's VM: ``user-virtual-machine``).
        state_dir: where the per-sandbox host directory is made (default: the temp dir).
        hide: host paths covered with an empty tmpfs inside; default: the guigym checkout and
            the host user's HOME (:func:`default_hidden_paths`).
        ro_binds: extra (host path, sandbox path) read-only binds, e.g. a dataset cache.
        server_argv: command of the in-desktop server inside the sandbox (default: guigym's
            server on :data:`SERVER_SOCKET`); tests may pass a stand-in.
        start_timeout_s / reset_timeout_s: limits of ``start()`` / ``revert()`` in seconds, each
            a hang guard only (every step waits for its event and a process that exits fails it
            at once). Default None: :data:`START_BASE_S` (60) / :data:`RESET_BASE_S` (30) times the
            machine's load factor (:func:`guigym.core.waits.load_factor`, 1 when idle, up to 20);
            a number is used as given. A start or reset that runs out is an EnvInfraError.
        bounds: what the agent zone may use (:class:`.bounds.DesktopBounds`, a mapping of its
            fields, True/None for the defaults, False for none); how each is enforced on this
            host is in :attr:`bounds_report` once started.
    """

    name = "local"
    vm = False

    def __init__(self, screen_size: tuple[int, int] = (1920, 1080), client_password: str = "password",
                 network: bool = False, terminal: bool = True,
                 home_template: Optional[Union[str, Path]] = None,
                 hostname: str = "user-virtual-machine", state_dir: Optional[Union[str, Path]] = None,
                 hide: Optional[Sequence[Union[str, Path]]] = None,
                 ro_binds: Sequence[tuple[Union[str, Path], str]] = (),
                 server_argv: Optional[Sequence[str]] = None,
                 start_timeout_s: Optional[float] = None, reset_timeout_s: Optional[float] = None,
                 client_timeout_s: float = 30.0,
                 bounds: Union[DesktopBounds, dict, bool, None] = None) -> None:
        super().__init__(client_password=client_password, screen_size=screen_size)
        w, h = self.screen_size
        if not (320 <= w <= 8192 and 200 <= h <= 8192):
            raise ConfigError(f"screen_size={screen_size!r}: width must be 320..8192, height 200..8192")
        if home_template is not None and not Path(home_template).is_dir():
            raise ConfigError(f"home_template={str(home_template)!r} is not a directory")
        self.network = bool(network)
        self.terminal = bool(terminal)
        self.home_template = home_template
        self.hostname = hostname
        self.state_root = Path(state_dir) if state_dir else None
        self.hide = None if hide is None else [Path(p) for p in hide]
        #: more host paths to hide on top of ``hide`` (the env adds its task folders and cache)
        self.extra_hide: list[Path] = []
        self.ro_binds = [(Path(a), b) for a, b in ro_binds]
        self.server_argv = list(server_argv) if server_argv is not None else None
        for name, value in (("start_timeout_s", start_timeout_s), ("reset_timeout_s", reset_timeout_s)):
            if value is not None and not value > 0:
                raise ConfigError(f"{name}={value!r}: must be > 0 seconds (or None for the load-scaled default)")
        self.start_timeout_s = start_timeout_s
        self.reset_timeout_s = reset_timeout_s
        self.client_timeout_s = client_timeout_s
        self.display: Optional[int] = None
        self.state_dir: Optional[Path] = None
        self.token: Optional[str] = None
        self.python_has_pyautogui = False
        self._display_lock: Optional[DisplayLock] = None
        self._bwrap: Optional[subprocess.Popen] = None
        self._ns_init_pid: Optional[int] = None
        self._run_as: Optional[tuple[int, int]] = None
        self._lock = threading.RLock()
        self.bounds = DesktopBounds.from_any(bounds)
        #: bound -> how it is enforced on this host (set by ``start``)
        self.bounds_report: dict[str, str] = {}
        self._cgroups: Optional[cg.DesktopCgroups] = None
        self._disk_mount: Optional[Path] = None

    # ------------------------------------------------------------------ host paths
    @property
    def run_dir(self) -> Path:
        """Host side of ``/run/guigym`` (sockets, token, logs)."""
        assert self.state_dir is not None, "not started"
        return self.state_dir / "run"

    @property
    def home_dir(self) -> Path:
        """Host side of ``/home/user``."""
        assert self.state_dir is not None, "not started"
        return self.state_dir / "disk" / "home"

    @property
    def zone_tmp_dir(self) -> Path:
        """Host side of the agent zone's ``/tmp`` (on the same quota as HOME)."""
        assert self.state_dir is not None, "not started"
        return self.state_dir / "disk" / "tmp"

    @property
    def server_socket(self) -> Path:
        return self.run_dir / "server.sock"

    @property
    def alive(self) -> bool:
        return self._bwrap is not None and self._bwrap.poll() is None

    @property
    def root_pid(self) -> Optional[int]:
        """Host pid of the sandbox's bwrap: every process of this desktop descends from it (its
        PID namespace's init reaps orphans), so its tree is the desktop's memory
        (``bench/density.py``). None when stopped."""
        return self._bwrap.pid if self.alive and self._bwrap is not None else None

    # ------------------------------------------------------------------ start
    def start(self) -> "DesktopClient":
        with self._lock:
            if self.alive and self._client is not None:
                return self._client
            self.stop()
            self._run_as = sandbox_identity()
            problem = bwrap_problem(self._run_as)
            if problem:
                raise EnvInfraError(f"local desktop provider: {problem}")
            t0 = time.monotonic()
            self.timings = {}
            deadline = self._deadline(self.start_timeout_s, START_BASE_S, "the local desktop to start")
            try:
                self._launch(deadline)
                self.timings["sandbox_up"] = time.monotonic() - t0
                self._ctl_reset()
                self.timings["first_reset"] = time.monotonic() - t0
                self._client = self._wait_server(deadline)
            except BaseException:
                self.stop()
                raise
            self.timings["start"] = time.monotonic() - t0
            return self._client

    @staticmethod
    def _deadline(given: Optional[float], base_s: float, what: str) -> Deadline:
        """A caller's exact limit, or ``base_s`` stretched by the load (module docstring)."""
        return Deadline(base_s if given is None else given, what, scale=given is None)

    def _launch(self, deadline: Deadline) -> None:
        self._display_lock = DisplayLock()
        self.display = self._display_lock.number
        root = self.state_root or Path(tempfile.gettempdir())
        root.mkdir(parents=True, exist_ok=True)
        self.state_dir = Path(tempfile.mkdtemp(prefix=f"guigym-desktop-{self.display}-", dir=root))
        os.chmod(self.state_dir, 0o700)
        run = self.run_dir
        self._setup_disk()
        for d in (self.home_dir, self.state_dir / "tmp", self.zone_tmp_dir, run, run / "logs",
                  self.state_dir / "etc"):
            d.mkdir(parents=True, exist_ok=True)
        template = prepare_template(self.state_dir / "template", self.home_template)
        (self.state_dir / "etc/passwd").write_text(PASSWD)
        (self.state_dir / "etc/group").write_text(GROUP)
        self.token = secrets.token_urlsafe(32)
        _write_private(run / "token", self.token)
        _write_private(run / "sudo.sha256",
                       hashlib.sha256(self.client_password.encode()).hexdigest())
        (run / "tmux.conf").write_text(_TMUX_CONF)
        python, self.python_has_pyautogui = sandbox_python()
        if not self.python_has_pyautogui:
            log.warning("no interpreter with pyautogui for `python` in the sandbox; "
                        "install it: pip install 'pyautogui>=0.9.54'")
        w, h = self.screen_size
        cfg = {
            "display": self.display, "width": w, "height": h, "home": SANDBOX_HOME,
            "template": SANDBOX_TEMPLATE, "tmux_socket": TERMINAL_TMUX_SOCKET,
            "tmux_session": TERMINAL_TMUX_SESSION, "tmux_conf": f"{SANDBOX_RUN}/tmux.conf",
            "terminal": {"geometry": _terminal_geometry(w, h)},
            "server_argv": self._server_argv(), "server_env": {"HOME": SANDBOX_HOME},
            "zone_tmp": SANDBOX_ZONE_TMP, "zone_env": self._zone_env(python),
            # the init cannot import guigym.core.waits: it gets its budgets sized for the load
            "start_budget_s": deadline.left(), "wait_s": scaled(INIT_WAIT_BASE_S),
        }
        hide = _outermost([*(self.hide if self.hide is not None else default_hidden_paths()),
                           *self.extra_hide])
        if not (_under(root, "/tmp") or _under(root, "/var/tmp")):  # covered by private tmpfs
            hide = [*hide, root]  # other sandboxes' dirs (tokens, HOMEs)
        if self._run_as is not None:
            # what the unprivileged uid cannot traverse to is out of its sight already, and bwrap,
            # running as that uid, could not mount over it (unless a bind below re-exposes it:
            # bwrap_argv hides those again after the binds)
            hide = [h for h in hide if _world_traversable(h.parent) or any(
                _under(h, prefix) for prefix in {sys.prefix, sys.base_prefix})]
        ro_binds = list(self.ro_binds)
        code_server = find_code_server()  # VS Code: `code` exists in the desktop only with it
        if code_server is not None:
            ro_binds.append((code_server, SANDBOX_CODE_SERVER_PREFIX))
        tmp_keep: list[str] = []
        for prefix in {sys.prefix, sys.base_prefix, os.path.dirname(os.path.dirname(python))}:
            in_tmp = _under(Path(prefix), "/tmp")  # e.g. a venv in /tmp: the private /tmp hides it
            if in_tmp or any(_under(Path(prefix), h) for h in hide):  # the sandbox's python must stay visible
                ro_binds.append((Path(prefix), prefix))
            if in_tmp:
                tmp_keep.append(Path(prefix).relative_to("/tmp").parts[0])  # never emptied by reset
        cfg["tmp_keep"] = sorted(set(tmp_keep))
        bwrap = find_bwrap() or "bwrap"
        # the agent zone sees only the system directories, so every extra bind (the interpreter
        # behind `python`, a dataset cache) is bound again for it
        cgroup_binds = self._setup_cgroups()
        b = self.bounds
        cfg["zone_argv"] = zone_argv_head(bwrap, [inside for _, inside in ro_binds],
                                          tmpfs_bytes=b.disk_mib * MIB if b.enabled else None)
        cfg["bounds_enter"] = self._enter_argv([inside for _, inside in cgroup_binds])
        _write_private(run / "config.json", json.dumps(cfg, indent=1))
        aliases: list[Path] = []
        server_dir = SERVER_DIR if SERVER_DIR.is_dir() else run / "logs"
        bin_dir, init_script = SANDBOX_BIN_DIR, INIT_SCRIPT
        if self._run_as is not None and not all(map(_world_traversable, (server_dir, bin_dir, init_script))):
            # guigym installed where the unprivileged uid cannot reach (a venv under /root, a 0700
            # directory): the sandbox gets a copy of the files it runs, staged in its own state dir
            server_dir, bin_dir, init_script = _stage_package_files(self.state_dir / "pkg", server_dir)
        if code_server is None:  # no `code` wrapper without code-server (never a stand-in)
            bin_dir = _stage_bin_dir(bin_dir, self.state_dir / "pkg" / "sandbox_bin", skip=("code",))
        if self._run_as is not None:
            _chown_tree(self.state_dir, *self._run_as)
            # what the unprivileged uid cannot traverse to (e.g. an interpreter under /root) is
            # bound by root into /mnt of a private mount namespace first (see _drop_to)
            for n, (host, inside) in enumerate(list(ro_binds)):
                if not _world_traversable(host):
                    ro_binds[n] = (Path(f"{_ALIAS_DIR}/{len(aliases)}"), inside)
                    aliases.append(host)
        rfd, wfd = os.pipe()
        spec = SandboxSpec(
            home_dir=self.home_dir, tmp_dir=self.state_dir / "tmp", zone_tmp_dir=self.zone_tmp_dir,
            run_dir=run,
            server_dir=server_dir, bin_dir=bin_dir, init_script=init_script, template_dir=template,
            passwd_file=self.state_dir / "etc/passwd", group_file=self.state_dir / "etc/group",
            command=[SYSTEM_PYTHON, "-I", SANDBOX_INIT, f"{SANDBOX_RUN}/config.json"],
            env=self._sandbox_env(python), network=self.network, hostname=self.hostname,
            hide=[*hide, Path(_ALIAS_DIR)] if aliases else hide, ro_binds=ro_binds, info_fd=wfd, bwrap=bwrap,
            rw_binds=cgroup_binds,
            unshare_cgroup=not (self._cgroups is not None and self._cgroups.host.version == 2),
        )
        argv = bwrap_argv(spec)
        if self._run_as is not None:  # never host root inside (issue 10, item 2)
            argv = _drop_to(self._run_as, aliases, argv)
        if self._cgroups is not None:  # the sandbox starts in infra/; the zone moves to agent/
            argv = enter_argv(self._cgroups.procs("infra"), (), None) + argv
        with open(run / "logs" / "init.log", "ab") as out:
            if self._run_as is not None:
                os.fchown(out.fileno(), *self._run_as)
            try:
                self._bwrap = _spawn(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd="/",
                                     pass_fds=(wfd,), start_new_session=True)
            except OSError as exc:
                os.close(rfd)
                raise EnvInfraError(f"local desktop: cannot run bubblewrap: {exc}") from exc
            finally:
                os.close(wfd)
        _live.add(self)
        _install_exit_hooks()
        try:
            info = read_to_eof(rfd, max(deadline.left(), 0.1), "bwrap --info-fd")
            self._ns_init_pid = int(json.loads(info)["child-pid"]) if info else None
        except (ValueError, KeyError, TimeoutError):
            self._ns_init_pid = None
        # the init's own budget ends first (it reports which part did not start); this is the
        # guard for an init that hangs, and it only grows with the load meanwhile
        status_file = run / "init.status"
        while not status_file.exists():
            if self._bwrap.poll() is not None:
                raise EnvInfraError(f"local desktop: the sandbox exited with code "
                                    f"{self._bwrap.returncode} during start-up: {self._log_tail()}")
            if deadline.expired():
                raise EnvInfraError(f"local desktop: {deadline.message('no init.status')}: {self._log_tail()}")
            time.sleep(0.01)
        status = json.loads(_read_nofollow(status_file))
        if not status.get("ok"):
            raise EnvInfraError(f"local desktop failed to start: {status.get('error')}; "
                                f"{self._log_tail()}")
        self.timings["init"] = dict(status.get("timings") or {})  # type: ignore[assignment]

    def _server_argv(self) -> Optional[list[str]]:
        if self.server_argv is not None:
            return self.server_argv
        if not (SERVER_DIR / "__main__.py").exists():
            return None
        return [SYSTEM_PYTHON, SANDBOX_SERVER_DIR, "--unix-socket", SERVER_SOCKET,
                "--token-file", TOKEN_FILE, "--display", f":{self.display}"]

    def _sandbox_env(self, python: str) -> dict[str, str]:
        """The infra zone's environment: an allow-list, nothing from the host's (``--clearenv``)."""
        env = {
            "HOME": SANDBOX_INFRA_HOME, "USER": SANDBOX_USER, "LOGNAME": SANDBOX_USER,
            "SHELL": "/bin/bash", "PATH": SANDBOX_PATH, "LANG": "C.UTF-8",
            "TERM": "xterm-256color", "DISPLAY": f":{self.display}", "XAUTHORITY": XAUTHORITY,
            "XDG_RUNTIME_DIR": SANDBOX_XDG_RUNTIME, "XDG_SESSION_TYPE": "x11",
            "DBUS_SESSION_BUS_ADDRESS": f"unix:path={SANDBOX_XDG_RUNTIME}/bus",
            "GTK_USE_PORTAL": "0",
            "GUIGYM_SANDBOX": "local", "GUIGYM_PYTHON": python,
            "GUIGYM_SUDO_SHA256_FILE": SUDO_SHA256_FILE,
            "GUIGYM_TMUX_SOCKET": TERMINAL_TMUX_SOCKET, "GUIGYM_TMUX_SESSION": TERMINAL_TMUX_SESSION,
            "GUIGYM_SCREEN_SIZE": f"{self.screen_size[0]}x{self.screen_size[1]}",
            **A11Y_ENV,
        }
        tz = _valid_tz(os.environ.get("TZ"))
        if tz:
            env["TZ"] = tz
        return env

    def _zone_env(self, python: str) -> dict[str, str]:
        """The agent zone's environment: the infra's allow-list with the agent's HOME and paths,
        without anything naming an infra file (the tmux socket) or the infra's D-Bus."""
        env = self._sandbox_env(python)
        for key in ("GUIGYM_TMUX_SOCKET", "GUIGYM_TMUX_SESSION"):
            env.pop(key)
        env.update(HOME=SANDBOX_HOME, XAUTHORITY=ZONE_XAUTHORITY, GUIGYM_SUDO_SHA256_FILE=ZONE_SUDO_SHA256)
        return env

    def _wait_server(self, deadline: Deadline) -> "DesktopClient":
        """Poll the in-desktop server's ``GET /platform`` until it answers 200; EnvInfraError at
        once when the server process exited, or when ``deadline`` expires."""
        argv = self._server_argv()
        if argv is None:
            raise EnvInfraError("local desktop: the in-desktop server is missing "
                                f"({SERVER_DIR}/__main__.py does not exist)")
        sock, last = str(self.server_socket), "no answer yet"
        while not deadline.expired():
            try:  # one request may take long on a busy machine: its bound grows with the load too
                status, _ = unix_http_get(sock, "/platform", self.token,
                                          timeout=max(0.1, min(scaled(2.0), deadline.left())))
                if status == 200:
                    return self._make_client()
                last = f"GET /platform answered {status}"
            except (OSError, http.client.HTTPException) as exc:
                last = f"{type(exc).__name__}: {exc}"
            reply = self._ctl({"op": "status"}, timeout=max(scaled(5.0), deadline.left()))
            if reply.get("infra", {}).get("server") is False:
                raise EnvInfraError(f"local desktop: the in-desktop server exited: "
                                    f"{self._log_tail('server.log')}")
            time.sleep(0.02)
        raise EnvInfraError(f"local desktop: {deadline.message(f'the server answered no GET /platform ({last})')}; "
                            f"{self._log_tail('server.log')}")

    def _make_client(self) -> "DesktopClient":
        try:
            from guigym.envs.desktop.client import DesktopClient
        except ImportError as exc:
            raise EnvInfraError(f"local desktop: guigym.envs.desktop.client is missing: {exc}") from exc
        return DesktopClient(unix_socket=str(self.server_socket), token=self.token,
                             timeout=self.client_timeout_s)

    # ------------------------------------------------------------------ control socket
    def _ctl(self, request: dict, timeout: float) -> dict:
        assert self.state_dir is not None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(str(self.run_dir / "ctl.sock"))
            sock.sendall(json.dumps(request).encode() + b"\n")
            data = sock.makefile("rb").readline()
        except (OSError, socket.timeout) as exc:
            raise EnvInfraError(f"local desktop: control request {request.get('op')!r} failed: "
                                f"{type(exc).__name__}: {exc}") from exc
        finally:
            sock.close()
        if not data:
            raise EnvInfraError(f"local desktop: control request {request.get('op')!r} got no answer; "
                                f"{self._log_tail()}")
        return json.loads(data)

    def _ctl_reset(self) -> dict:
        budget = self._deadline(self.reset_timeout_s, RESET_BASE_S, "the desktop's reset").total()
        # the init spends at most `budget` and then answers with what did not finish; the socket
        # waits longer, so that answer (not a bare socket timeout) is what the caller sees
        reply = self._ctl({"op": "reset", "terminal": self.terminal, "budget_s": budget},
                          timeout=1.25 * budget + scaled(5.0))
        if not reply.get("ok"):
            raise EnvInfraError(f"local desktop: reset failed: {reply.get('error')}")
        self.timings["sandbox_reset"] = dict(reply.get("timings") or {})  # type: ignore[assignment]
        return reply

    # ------------------------------------------------------------------ revert / stop
    def revert(self) -> "DesktopClient":
        """Kill the episode's processes, restore HOME and /tmp, restart the terminal.

        Xvfb, D-Bus, AT-SPI, openbox and the server stay up; when any of them died (or the
        reset fails) the whole sandbox is rebuilt.
        """
        with self._lock:
            if not self.alive or self._client is None:
                return self.start()
            t0 = time.monotonic()
            try:
                self._ctl_reset()
                status, _ = unix_http_get(str(self.server_socket), "/platform", self.token, scaled(5.0))
                if status != 200:
                    raise EnvInfraError(f"local desktop: server answered {status} after reset")
            except (EnvInfraError, OSError, http.client.HTTPException) as exc:
                log.warning("local desktop reset failed (%s); rebuilding the sandbox", exc)
                client = self.start_fresh()
                self.timings["revert"] = time.monotonic() - t0
                self.timings["rebuilt"] = 1.0
                return client
            self.timings["revert"] = time.monotonic() - t0
            return self._client

    def start_fresh(self) -> "DesktopClient":
        """Stop and start again (a new display, HOME and server)."""
        self.stop()
        return self.start()

    def stop(self) -> None:
        """Kill the sandbox's PID namespace (every process in it), delete its host dirs."""
        # Bounded wait: at interpreter exit another thread may be stuck inside start().
        locked = self._lock.acquire(timeout=30)
        try:
            self._stop_locked()
        finally:
            if locked:
                self._lock.release()

    def _stop_locked(self) -> None:
        self._drop_client()
        proc, self._bwrap = self._bwrap, None
        if proc is not None:
            # SIGKILL of the namespace's pid 1 makes the kernel kill every process in it.
            for pid in (self._ns_init_pid, proc.pid):
                if pid is None:
                    continue
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log.error("bwrap %d did not exit after SIGKILL", proc.pid)
        self._ns_init_pid = None
        _live.discard(self)
        self._teardown_bounds()
        if self.state_dir is not None and self.state_dir.exists():
            shutil.rmtree(self.state_dir, onerror=force_remove)
        self.state_dir = None
        if self._display_lock is not None:
            self._display_lock.release()
            self._display_lock = None

    # ------------------------------------------------------------------ bounds (issue 35)
    def _setup_disk(self) -> None:
        """HOME and the zone's /tmp on one tmpfs of ``disk_mib`` (needs root; else per-file
        RLIMIT_FSIZE only, see :mod:`.bounds`)."""
        assert self.state_dir is not None
        disk = self.state_dir / "disk"
        disk.mkdir(mode=0o700, exist_ok=True)
        if not self.bounds.enabled or not can_mount_tmpfs():
            return
        owner = self._run_as or (os.geteuid(), os.getegid())
        opts = f"size={self.bounds.disk_mib}m,mode=0700,uid={owner[0]},gid={owner[1]},nosuid,nodev"
        out = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "guigym-desktop-disk", str(disk)],
                             capture_output=True, text=True, timeout=30)
        if out.returncode != 0:
            log.warning("local desktop: no disk quota (mount tmpfs failed: %s); per-file limit only",
                        out.stderr.strip())
            return
        self._disk_mount = disk

    def _setup_cgroups(self) -> list[tuple[Path, str]]:
        """Make the desktop's cgroups when the host allows; (host dir, sandbox path) rw binds of
        the agent cgroup for the infra zone (empty without cgroups)."""
        self._cgroups = None
        if not self.bounds.enabled:
            return []
        host = cg.detect()
        if host.version:
            owner = self._run_as or (os.geteuid(), os.getegid())
            try:
                self._cgroups = cg.DesktopCgroups(host, f"{cg.PREFIX}{os.getpid()}-{self.display}-{secrets.token_hex(3)}", owner,
                                                  cgroup_limits(self.bounds, host.version),
                                                  desktop_cpu_weight(host.version))
            except OSError as exc:
                log.warning("local desktop: cannot make cgroups (%s); falling back to rlimits", exc)
        if host.problem:
            log.info("local desktop bounds: %s", host.problem)
        return [(d, f"{SANDBOX_CGROUPS}/{i}") for i, d in
                enumerate(self._cgroups.agent_dirs() if self._cgroups else [])]

    def _enter_argv(self, cgroup_dirs: Sequence[str]) -> list[str]:
        """The argv prefix that puts an agent-zone process inside the bounds (sandbox paths)."""
        ctrls = sorted(self._cgroups.host.dirs) if self._cgroups else []
        disk = self._disk_mount is not None
        version = self._cgroups.host.version if self._cgroups else 0
        self.bounds_report = describe(self.bounds, version, ctrls, disk)
        if not self.bounds.enabled:
            return []
        nice = FALLBACK_NICE if "cpu" not in ctrls else None
        return enter_argv([f"{d}/cgroup.procs" for d in cgroup_dirs], rlimit_args(self.bounds, ctrls, disk), nice)

    def _teardown_bounds(self) -> None:
        if self._disk_mount is not None:
            out = subprocess.run(["umount", str(self._disk_mount)], capture_output=True, timeout=30)
            if out.returncode != 0:  # a process of ours still has it open: detach it now
                subprocess.run(["umount", "-l", str(self._disk_mount)], capture_output=True, timeout=30)
            self._disk_mount = None
        if self._cgroups is not None:
            self._cgroups.remove()
            self._cgroups = None

    def bound_events(self) -> dict[str, int]:
        """How often the agent zone hit each cgroup bound so far (``pids.events`` max,
        ``memory.failcnt`` / ``memory.events`` oom_kill); {} without cgroups."""
        out: dict[str, int] = {}
        if self._cgroups is None:
            return out
        for ctrl, fname, key in (("pids", "pids.events", "max"), ("memory", "memory.events", "oom_kill"),
                                 ("memory", "memory.failcnt", None)):
            text = self._cgroups.read(ctrl, fname)
            if text is None:
                continue
            if key is None:
                out["memory.failcnt"] = int(text.strip() or 0)
            else:
                for line in text.splitlines():
                    k, _, v = line.partition(" ")
                    if k == key:
                        out[f"{fname}:{key}"] = int(v)
        return out

    # ------------------------------------------------------------------ conveniences
    def terminal_text(self) -> Optional[str]:
        """What the terminal shows now ("" when the agent closed it; None when stopped).

        Asked of the in-desktop server, whose tmux client connects to the infra-only socket; the
        host never runs a tmux client (issue 10, item 1)."""
        if not self.alive:
            return None
        status, body = unix_http_get(str(self.server_socket), "/guigym/terminal", self.token, timeout=10)
        if status != 200:
            raise EnvInfraError(f"local desktop: GET /guigym/terminal answered {status}: {body[:200]!r}")
        return json.loads(body).get("output") or ""  # no terminal (the agent closed it) is no error

    def _log_tail(self, name: str = "init.log", chars: int = 1500) -> str:
        try:
            text = _read_nofollow(self.run_dir / "logs" / name)
        except (OSError, AssertionError):
            return f"(no {name})"
        return f"{name}: ...{text[-chars:]}" if len(text) > chars else f"{name}: {text}"

    def __repr__(self) -> str:
        state = f"display :{self.display}" if self.alive else "stopped"
        return f"LocalProvider({state}, network={self.network})"


# --------------------------------------------------------------------------- helpers


def _terminal_geometry(width: int, height: int) -> str:
    """xterm geometry ``COLSxROWS+X+Y``: 100x30 cells (about 1000x570 px) centred, or less."""
    cell_w, cell_h = 10, 19  # DejaVu Sans Mono 12 pt at 96 dpi
    cols = max(40, min(100, (width - 80) // cell_w))
    rows = max(10, min(30, (height - 120) // cell_h))
    x = max(0, (width - cols * cell_w) // 2)
    y = max(0, (height - rows * cell_h) // 3)
    return f"{cols}x{rows}+{x}+{y}"


_ALIAS_DIR = "/mnt"  # in the private mount namespace of a root host's launcher only
_DROP_SCRIPT = """set -e
uid=$1 gid=$2 n=$3; shift 3
if [ "$n" -gt 0 ]; then
  mount -t tmpfs -o mode=0755 guigym-binds "$ALIAS_DIR"
  i=0
  while [ "$i" -lt "$n" ]; do mkdir "$ALIAS_DIR/$i"; mount --bind "$1" "$ALIAS_DIR/$i"; shift; i=$((i+1)); done
fi
shift
exec setpriv --reuid "$uid" --regid "$gid" --clear-groups -- "$@"
"""


def _drop_to(ident: tuple[int, int], aliases: Sequence[Path], argv: list[str]) -> list[str]:
    """``argv`` run as the unprivileged ``ident`` (uid, gid) instead of root.

    Paths that uid cannot reach (an interpreter under /root, mode 0700) are bind-mounted by root
    to ``/mnt/<i>`` of a private mount namespace (invisible to the rest of the host) before
    ``setpriv`` drops to the uid; bwrap then binds them back to their own paths inside.
    """
    if not aliases:
        return ["setpriv", f"--reuid={ident[0]}", f"--regid={ident[1]}", "--clear-groups", "--", *argv]
    return ["unshare", "--mount", "--propagation", "private", "--", "/usr/bin/env", f"ALIAS_DIR={_ALIAS_DIR}",
            "/bin/sh", "-c", _DROP_SCRIPT, "sh", str(ident[0]), str(ident[1]), str(len(aliases)),
            *[str(a) for a in aliases], "--", *argv]


def _outermost(paths: Sequence[Path]) -> list[Path]:
    """Existing ``paths`` minus those inside another one, shortest first: a tmpfs over a parent
    already hides its children (and an unprivileged bwrap could not traverse to them)."""
    out: list[Path] = []
    for path in sorted({Path(p).resolve() for p in paths if Path(p).exists()}, key=lambda p: len(p.parts)):
        if not any(_under(path, kept) for kept in out):
            out.append(path)
    return out


def _read_nofollow(path: Path) -> str:
    """Read a file of the run dir without following a symlink planted in its place."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        return f.read().decode(errors="replace")


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    """chown ``root`` and everything below it (no symlink is followed)."""
    os.chown(root, uid, gid, follow_symlinks=False)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)


def _stage_package_files(dest: Path, server_dir: Path) -> tuple[Path, Path, Path]:
    """Copies of the in-desktop server, the PATH shims (modes kept) and the sandbox init script
    under ``dest``: (server dir, bin dir, init script)."""
    dest.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    server = Path(shutil.copytree(server_dir, dest / "server", ignore=ignore, dirs_exist_ok=True))
    shims = Path(shutil.copytree(SANDBOX_BIN_DIR, dest / "sandbox_bin", ignore=ignore, dirs_exist_ok=True))
    init = Path(shutil.copy2(INIT_SCRIPT, dest / INIT_SCRIPT.name))
    return server, shims, init


def _stage_bin_dir(src: Path, dest: Path, skip: Sequence[str]) -> Path:
    """``dest``: a fresh copy of the PATH shims in ``src`` (modes kept) without the ``skip`` names."""
    if dest.resolve() != Path(src).resolve():
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in skip:
        (dest / name).unlink(missing_ok=True)
    return dest


def _world_traversable(path: Path) -> bool:
    """True when every ancestor of ``path`` lets any uid through (o+x)."""
    p = Path(path).resolve()
    for d in [*reversed(p.parents), p]:
        try:
            if not os.stat(d).st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


def _valid_tz(tz: Optional[str]) -> Optional[str]:
    """``TZ`` if it names a zone in the system's zoneinfo (no paths, no POSIX rule strings)."""
    if not tz or tz.startswith(":") or ".." in tz or tz.startswith("/"):
        return None
    return tz if Path("/usr/share/zoneinfo", tz).is_file() else None


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _under(path: Path, parent: Union[str, Path]) -> bool:
    try:
        Path(path).resolve().relative_to(Path(parent).resolve())
        return True
    except ValueError:
        return False


