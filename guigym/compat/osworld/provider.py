"""A provider for OSWorld's unmodified ``desktop_env.DesktopEnv`` whose VM is guigym's local desktop.

Runs in the OSWorld user's Python (desktop-env's venv); standard library only at module level.
The one-line change in an OSWorld run loop::

    from guigym.compat.osworld import DesktopEnv      # was: from desktop_env.desktop_env import DesktopEnv
    env = DesktopEnv(action_space="pyautogui")        # provider_name / path_to_vm are not needed
    obs = env.reset(task_config=task)                 # OSWorld's own reset, step, evaluate
    obs, reward, done, info = env.step("pyautogui.typewrite('ls')")
    score = env.evaluate()

What it does, and why it is the smallest route that leaves desktop-env's code untouched:

* ``DesktopEnv.__init__`` builds its provider with ``create_vm_manager_and_provider(name,
  region)``, a fixed if-chain, and accepts only its seven provider names. :func:`register` wraps
  that factory (as bound in ``desktop_env.desktop_env``) so that ``provider_name="docker",
  region="guigym"`` gives :class:`GuigymVMManager` / :class:`GuigymProvider`; every other
  name/region still reaches desktop-env's own providers. "docker" is the built-in whose contract
  ours has: a local process whose server answers on loopback ports handed back as
  ``"host:server:chromium:vnc:vlc"``, clean at start (``is_environment_used = False``).
* :class:`GuigymProvider` starts :mod:`guigym.compat.osworld.bridge` with guigym's own Python
  (``GUIGYM_HOST_PYTHON``, else the first ``python3`` on PATH outside this venv), which starts
  the local sandbox desktop and serves OSWorld's in-VM protocol on ``127.0.0.1:<port>``, refusing
  (401) any request without its token. The token reaches this process over the bridge's stdout
  pipe (never argv, env or disk). OSWorld's controllers and getters call ``requests`` with URLs
  they build themselves (``http://{vm_ip}:{server_port}/...``) and no headers hook, so
  :func:`register` wraps ``requests.Session.request`` once: a request whose URL is exactly
  ``http://127.0.0.1:<port of a running bridge>`` gets ``Authorization: Bearer <token>``; every
  other request passes through unchanged. (URL user info, ``token@127.0.0.1``, would need no hook,
  but ``requests`` ignores a user name without a password and DesktopEnv splits ``vm_ip`` on
  ``:``.)
* ``revert_to_snapshot`` is the local desktop's revert (the episode's processes killed, HOME
  and /tmp restored: milliseconds to a second instead of a VM restore).
* Libraries desktop-env imports at module level but cannot use here are stubbed when missing
  (:data:`STUBBED`): a metric or setup step that reaches one raises :class:`Unavailable` naming it.

Not served: the chromium / VNC / VLC-HTTP ports (reported as port 0, so a connection fails at
once). The sandbox has its own network namespace; guigym drives Chromium's debugging port from
inside the desktop instead (docs/coming_from_osworld.md lists what this leaves out).
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import threading
import types
import urllib.parse
from pathlib import Path
from typing import Any, Optional, Sequence

from guigym.compat.hostproc import guigym_pythonpath, host_python_default, read_json_line, stop

#: ``DesktopEnv(provider_name="docker", region=REGION)`` selects guigym's local desktop
REGION = "guigym"
#: modules desktop-env imports at import time that its venv here does not hold, and why:
#: OCR weights from the network (easyocr, for compare_image_text), numba/llvmlite (librosa,
#: compare_audios), the fpcalc binary (acoustid), Google Drive credentials (pydrive, googledrive
#: setup steps: no network in the sandbox by default)
STUBBED = ("easyocr", "librosa", "acoustid", "pydrive", "pydrive.auth", "pydrive.drive")
#: what the bridge must answer within when it starts (a cold sandbox takes a few seconds)
START_TIMEOUT_S = 180.0
#: one control request (revert, score) may take this long
CONTROL_TIMEOUT_S = 600.0

_lock = threading.Lock()
_registered = False
#: ``"127.0.0.1:<port>"`` of each running bridge -> its token (what the requests hook adds)
_tokens: dict[str, str] = {}
#: options for the next GuigymProvider, set by :func:`DesktopEnv` (the factory sees only name/region)
_pending: dict[str, Any] = {}


class Unavailable(RuntimeError):
    """A stubbed library was reached: that metric or setup step cannot run on this install."""


def _stub(name: str) -> types.ModuleType:
    """A module whose attributes are classes/functions that raise :class:`Unavailable` when used
    (``from pydrive.auth import GoogleAuth`` must import; calling it must not pass silently)."""
    mod = types.ModuleType(name)

    def _missing(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)

        class _Missing:
            def __init__(self, *a: Any, **k: Any) -> None:
                raise Unavailable(f"{name}.{attr}: {name} is not installed next to desktop-env "
                                  f"(guigym.compat.osworld.provider.STUBBED says why)")

        _Missing.__name__ = attr
        return _Missing

    mod.__getattr__ = _missing  # type: ignore[method-assign]
    mod.__path__ = []  # a package, so ``pydrive.auth`` can be imported below it
    return mod


def _install_stubs() -> None:
    for name in STUBBED:
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except ImportError:
            sys.modules[name] = _stub(name)


def _hook_requests() -> None:
    """Add the bridge's bearer token to requests sent to a running bridge's exact address."""
    import requests

    original = requests.sessions.Session.request

    def request(self: Any, method: str, url: Any, *args: Any, **kwargs: Any) -> Any:
        token = _tokens.get(_netloc(url)) if _tokens else None
        if token is not None:
            headers = dict(kwargs.get("headers") or {})
            headers["Authorization"] = f"Bearer {token}"
            kwargs["headers"] = headers
        return original(self, method, url, *args, **kwargs)

    request.__wrapped__ = original  # type: ignore[attr-defined]
    request.__doc__ = original.__doc__
    requests.sessions.Session.request = request  # type: ignore[method-assign]


def _netloc(url: Any) -> str:
    """``host:port`` of an ``http://`` URL, else ``""``."""
    text = url.decode() if isinstance(url, bytes) else str(url)
    parts = urllib.parse.urlsplit(text)
    return parts.netloc if parts.scheme == "http" else ""


def register() -> None:
    """Make ``DesktopEnv(provider_name="docker", region="guigym")`` use guigym's local desktop.

    Idempotent. Imports ``desktop_env.desktop_env`` (with :data:`STUBBED` in place where missing).
    """
    global _registered
    with _lock:
        if _registered:
            return
        _install_stubs()
        _hook_requests()
        de = importlib.import_module("desktop_env.desktop_env")
        providers = importlib.import_module("desktop_env.providers")
        original = de.create_vm_manager_and_provider

        def create_vm_manager_and_provider(provider_name: str, region: str, use_proxy: bool = False) -> Any:
            if provider_name.lower().strip() == "docker" and region == REGION:
                opts = dict(_pending)
                _pending.clear()
                return GuigymVMManager(), GuigymProvider(**opts)
            return original(provider_name, region, use_proxy=use_proxy)

        create_vm_manager_and_provider.__doc__ = original.__doc__
        de.create_vm_manager_and_provider = create_vm_manager_and_provider
        providers.create_vm_manager_and_provider = create_vm_manager_and_provider
        _registered = True


def DesktopEnv(*, provider_name: Optional[str] = None, hide: Sequence[str] = (), host_python: Optional[str] = None,
               network: bool = False, terminal: bool = True, **kwargs: Any) -> Any:  # noqa: N802 (stands in for the class)
    """OSWorld's own ``desktop_env.desktop_env.DesktopEnv`` on a guigym local desktop.

    Args:
        provider_name: None or ``"guigym"``; any other value is refused (use desktop-env's class).
        hide: more host paths the desktop must not see (task files with answers); DesktopEnv's
            ``cache_dir`` and the current directory (where OSWorld's ``evaluation_examples``
            live) are hidden already, unless the current directory is ``/`` or a system folder.
        host_python: guigym's interpreter for the bridge (default: ``GUIGYM_HOST_PYTHON``, else
            ``python3`` on PATH outside this venv).
        network: let the desktop reach the host's network (default: loopback only).
        terminal: open guigym's xterm+tmux terminal at every reset, as OSWorld-v0 does (False:
            a bare desktop; tasks that need a terminal open one in their setup).
        kwargs: DesktopEnv's own arguments (action_space, screen_size, cache_dir,
            require_a11y_tree, require_terminal, client_password, ...).

    Returns: a ``desktop_env.desktop_env.DesktopEnv`` instance (the class itself, not a subclass).
    """
    if provider_name not in (None, "guigym"):
        raise ValueError(f"provider_name={provider_name!r}: guigym's DesktopEnv runs the guigym local desktop; "
                         f"for desktop-env's own providers use desktop_env.desktop_env.DesktopEnv")
    if "region" in kwargs or "path_to_vm" in kwargs:
        raise ValueError("region / path_to_vm: not used with the guigym provider (it is always the local desktop)")
    register()
    from desktop_env.desktop_env import DesktopEnv as OSWorldDesktopEnv

    cache_dir = Path(kwargs.get("cache_dir", "cache")).expanduser().resolve()
    cache_dir.mkdir(parents=True, exist_ok=True)  # hidden only if it exists when the desktop starts
    width, height = kwargs.get("screen_size", (int(os.environ.get("SCREEN_WIDTH", 1920)),
                                               int(os.environ.get("SCREEN_HEIGHT", 1080))))
    with _lock:
        _pending.clear()
        _pending.update(hide=[str(cache_dir), *_cwd_to_hide(), *map(str, hide)], host_python=host_python,
                        client_password=kwargs.get("client_password") or "password",
                        screen_size=(int(width), int(height)), network=network, terminal=terminal)
    try:
        return OSWorldDesktopEnv(provider_name="docker", region=REGION, **kwargs)
    finally:
        _pending.clear()


_SYSTEM_DIRS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/opt", "/var", "/run", "/proc", "/sys", "/dev",
                "/boot", "/nix")


def _cwd_to_hide() -> list[str]:
    """The current directory, unless hiding it would hide the system the desktop runs on."""
    cwd = Path.cwd().resolve()
    s = str(cwd)
    if s == "/" or any(s == d or s.startswith(d + "/") for d in _SYSTEM_DIRS):
        return []
    return [s]


class GuigymVMManager:
    """desktop-env's VMManager interface for one local desktop: no registry, nothing to clean."""

    checked_and_cleaned = True

    def initialize_registry(self, **kwargs: Any) -> None:
        pass

    def add_vm(self, vm_path: str, *args: Any, **kwargs: Any) -> None:
        pass

    def delete_vm(self, vm_path: str, *args: Any, **kwargs: Any) -> None:
        pass

    def occupy_vm(self, vm_path: str, pid: int, *args: Any, **kwargs: Any) -> None:
        pass

    def list_free_vms(self, *args: Any, **kwargs: Any) -> list[str]:
        return []

    def check_and_clean(self, *args: Any, **kwargs: Any) -> None:
        pass

    def get_vm_path(self, os_type: str = "Ubuntu", region: Optional[str] = None,
                    screen_size: tuple[int, int] = (1920, 1080), **kwargs: Any) -> str:
        """A name, not a file: ``guigym-local:<W>x<H>`` (the local desktop is built, not copied)."""
        if os_type != "Ubuntu":
            raise ValueError(f"os_type={os_type!r}: guigym's local desktop is Linux (OSWorld's 'Ubuntu')")
        return f"guigym-local:{int(screen_size[0])}x{int(screen_size[1])}"


class GuigymProvider:
    """desktop-env's Provider interface over a :mod:`guigym.compat.osworld.bridge` process.

    ``start_emulator`` starts the bridge once (a second call while it runs is a no-op, as
    DesktopEnv calls it again after each revert), ``revert_to_snapshot`` asks it to revert,
    ``stop_emulator`` closes its stdin (it stops the desktop and exits; killed after 30 s).
    """

    def __init__(self, hide: Sequence[str] = (), host_python: Optional[str] = None,
                 client_password: str = "password", screen_size: Optional[tuple[int, int]] = None,
                 network: bool = False, terminal: bool = True) -> None:
        self.region = REGION
        self.hide = list(hide) or [str(Path("cache").resolve()), *_cwd_to_hide()]
        self.host_python = host_python
        self.client_password = client_password
        self.screen_size = screen_size
        self.network = bool(network)
        self.terminal = bool(terminal)
        self.proc: Optional[subprocess.Popen] = None
        self.port: Optional[int] = None
        #: the bridge's first line minus the token (display, start seconds)
        self.info: dict[str, Any] = {}
        self._ctl_lock = threading.Lock()

    # ---- desktop-env's Provider interface -------------------------------------------------------
    def start_emulator(self, path_to_vm: str, headless: bool = True, os_type: str = "Ubuntu", *a: Any) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        size = self.screen_size or _size_from_path(path_to_vm)
        # the bridge imports guigym from the same place this module was imported from
        env = guigym_pythonpath()
        argv = [self.host_python or host_python_default(), "-m", "guigym.compat.osworld.bridge",
                "--screen", f"{size[0]}x{size[1]}", "--client-password", self.client_password]
        for h in self.hide:
            argv += ["--hide", h]
        if self.network:
            argv.append("--network")
        if not self.terminal:
            argv.append("--no-terminal")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
                                     bufsize=1)
        hello = self._read_line(START_TIMEOUT_S, "start")
        if not hello.get("ok"):
            self.stop_emulator(path_to_vm)
            raise RuntimeError(f"guigym local desktop did not start: {hello.get('error')}")
        self.port = int(hello["port"])
        _tokens[f"127.0.0.1:{self.port}"] = str(hello["token"])
        self.info = {k: v for k, v in hello.items() if k != "token"}

    def get_ip_address(self, path_to_vm: str) -> str:
        """``"127.0.0.1:<server>:0:0:0"``: DesktopEnv's "docker" form, no chromium / VNC / VLC
        port (0: a connection fails at once)."""
        if self.port is None:
            raise RuntimeError("guigym local desktop not started")
        return f"127.0.0.1:{self.port}:0:0:0"

    def save_state(self, path_to_vm: str, snapshot_name: str) -> None:
        raise NotImplementedError("the guigym local desktop has one state to revert to: its start state")

    def revert_to_snapshot(self, path_to_vm: str, snapshot_name: str) -> str:
        reply = self.control({"op": "revert"})
        if not reply.get("ok"):
            raise RuntimeError(f"guigym local desktop revert failed: {reply.get('error')}")
        return path_to_vm

    def stop_emulator(self, path_to_vm: str = "", *a: Any, **k: Any) -> None:
        proc, self.proc = self.proc, None
        if self.port is not None:
            _tokens.pop(f"127.0.0.1:{self.port}", None)
        self.port = None
        if proc is not None:
            stop(proc)

    # ---- guigym extras --------------------------------------------------------------------------
    def control(self, request: dict[str, Any], timeout: float = CONTROL_TIMEOUT_S) -> dict[str, Any]:
        """One control request to the bridge (``revert``; ``score``: guigym's own verifier on the
        desktop's current state, ``{"op": "score", "task": task_config, "last_action": ...}``)."""
        with self._ctl_lock:
            if self.proc is None or self.proc.poll() is not None or self.proc.stdin is None:
                raise RuntimeError("guigym local desktop is not running")
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            return self._read_line(timeout, str(request.get("op")))

    def guigym_score(self, task_config: dict[str, Any], last_action: Optional[str] = None) -> float:
        """guigym's score of the desktop's current state for ``task_config`` (its postconfig runs)."""
        reply = self.control({"op": "score", "task": task_config, "last_action": last_action})
        if not reply.get("ok"):
            raise RuntimeError(f"guigym verifier failed: {reply.get('error')}")
        return float(reply["score"])

    def _read_line(self, timeout: float, what: str) -> dict[str, Any]:
        assert self.proc is not None
        return read_json_line(self.proc, timeout, what, "guigym bridge")


def _size_from_path(path_to_vm: str) -> tuple[int, int]:
    try:
        w, h = path_to_vm.rsplit(":", 1)[1].split("x")
        return int(w), int(h)
    except (IndexError, ValueError):
        return 1920, 1080
