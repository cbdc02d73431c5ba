"""Run OSWorld setup steps (a task's ``config`` and ``evaluator.postconfig``) on a desktop.

Each step is ``{"type": str, "parameters": dict}``; the types and their parameter names are
those of the ``_<type>_setup`` methods of OSWorld's ``desktop_env/controllers/setup.py``
(SetupController). Everything goes through a :class:`~guigym.envs.desktop.client.DesktopClient`
(the in-desktop server's protocol), so the same code drives the local sandbox and OSWorld VMs.

Supported types and where we differ from OSWorld (on purpose, each with a reason):

* ``execute`` / ``command`` (``command``, ``shell``, ``stdout``, ``stderr``, ``until``): as
  OSWorld, the command is re-run until ``until`` (``returncode`` / ``stdout`` / ``stderr``
  substring) holds; OSWorld loops forever, we stop after ``until_timeout`` seconds with an
  :class:`EnvInfraError`. A command whose program does not exist in the desktop (exit 127,
  or the server could not start it) is logged as a warning naming the program and the setup
  goes on, as OSWorld's ``_execute_setup`` does (it logs every answer and never checks the
  return code); the step's record then holds ``result.missing_program``. With ``until`` the
  step ends there instead of re-running a command that cannot succeed. In ``postconfig``
  (``agent_state``: the agent's state) a command the server killed at its timeout and an
  ``until`` that never held are recorded (``result.timed_out`` / ``result.until_unmet``) and the
  steps go on, so the episode is scored rather than lost (issue 35).
* ``launch`` (``command``, ``shell``): the program is looked up in the desktop first (a launch
  returns before the program runs, so a missing app would otherwise go unnoticed).
* ``open`` (``path``), ``activate_window`` / ``close_window`` (``window_name``, ``strict``,
  ``by_class``; a window that is not there is logged and skipped, as OSWorld does, after up to
  30 s of waiting when a ``launch``/``open`` of the same setup may still be opening it), ``sleep``
  (``seconds``), ``upload_file`` (``files``: ``local_path``, ``path``; ``local_path`` must lie
  under the task file's folder or the cache dir, where OSWorld reads any host path).
* ``execute``'s ``stdout``/``stderr`` names must stay inside the cache dir (no ``..``, no
  absolute path, no symlink out); violations raise :class:`TaskSpecError` naming the field.
* ``download`` (``files``: ``url``, ``path``): from ``cache_dir`` first, under OSWorld's own
  cache name ``uuid5(NAMESPACE_URL, url) + "_" + basename(path)``; from the network only when
  ``network_ok`` allows and the host answers, otherwise :class:`MissingResourceError` naming the
  url and the cache file to fill.
* ``execute_with_verification`` (``command``, ``verification`` {``window_exists``,
  ``command_success``}, ``max_wait_time``, ``check_interval``, ``shell``): OSWorld's server
  runs the command and polls the checks; we do the same polling from the client through
  ``/execute`` so stock VMs and our server behave alike.
* ``chrome_open_tabs`` (``urls_to_open``) / ``chrome_close_tabs`` (``urls_to_close``): OSWorld
  connects Playwright over CDP from the host; we call Chromium's HTTP debugging endpoints
  (``/json/list``, ``/json/new?<url>``, ``/json/close/<id>``) from *inside* the desktop via
  ``/execute``, because the local sandbox may share no network namespace with the host.

* ``update_browse_history`` (``history``): setup/history.py (the browser creates its own empty
  History instead of OSWorld's downloaded one).

Other OSWorld types (``change_wallpaper``, ``googledrive``, ``login``, ``proxy``, ``tidy_desktop``,
``act``, ``replay``) raise :class:`SetupUnavailableError`; an unknown type or malformed
parameters raise :class:`TaskSpecError` naming the step index.
``{CLIENT_PASSWORD}``/``{SCREEN_*}`` placeholders are substituted in every parameter.
Paths under ``~/.config/google-chrome`` in any parameter are rewritten to ``~/.config/chromium``
when the desktop has no real Google Chrome (no ``/opt/google/chrome`` and no Chrome profile):
there ``google-chrome`` is Debian's Chromium, whose profile lives in ``~/.config/chromium``.
On such a desktop ``pkill chrome`` / ``killall chrome`` (OSWorld's postconfigs quit the browser
so it writes its profile to disk) target ``chromium``: the process is named ``chromium``, which
the pattern ``chrome`` does not match (:func:`map_chrome_kill`), and ``activate_window`` /
``close_window`` on ``Google Chrome`` look for Chromium's window titles.
"""
from __future__ import annotations

import copy
import inspect
import json
import logging
import os
import re
import shlex
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Union

from guigym.core.errors import EnvInfraError, TaskSpecError
from guigym.core.paths import confine
from guigym.envs.desktop.evaluators.base import (  # noqa: F401  (errors and cache helpers re-exported: setup's public names)
    MissingResourceError, MissingToolError, SetupUnavailableError, _returncode, atomic_write, download_cache_path,
    fetch_url_to_cache,
)
from guigym.envs.desktop.evaluators.metrics.utils import compare_urls
from guigym.envs.desktop.setup.history import step_update_browse_history
from guigym.envs.desktop.tasks import SETUP_STEP_TYPES, osworld_vars, substitute

log = logging.getLogger(__name__)

__all__ = [
    "MissingResourceError", "MissingToolError", "SetupUnavailableError", "SetupContext",
    "STEP_HANDLERS", "UNSUPPORTED_STEPS", "run_setup", "download_cache_path", "compare_urls",
    "fetch_url_to_cache", "map_chrome_profile", "map_chrome_kill",
]


#: OSWorld step types that exist upstream but cannot run here, with the reason.
UNSUPPORTED_STEPS: dict[str, str] = {
    "change_wallpaper": "not implemented by guigym's desktop client",
    "googledrive": "needs Google Drive credentials and network access",
    "login": "needs website credentials and network access",
    "proxy": "needs OSWorld's proxy pool",
    "tidy_desktop": "not implemented upstream either (NotImplementedError)",
    "act": "not implemented upstream either (NotImplementedError)",
    "replay": "not implemented upstream either (NotImplementedError)",
}


# --------------------------------------------------------------------------- context

_KILLERS = frozenset({"pkill", "killall"})
# "pkill chrome", "pkill -9 chrome", "killall chrome": the word chrome as the process pattern
_KILL_CHROME = re.compile(r"(?<![\w/.-])((?:/usr)?(?:/s?bin/)?(?:pkill|killall)(?:\s+-\S+)*\s+)chrome(?![\w.-])")


@dataclass
class SetupContext:
    """What the step handlers share for one :func:`run_setup` call.

    ``network_ok``: True = downloads may use the network; False = never; None = try it with a
    short connect timeout and treat failure as "unreachable".
    """

    client: Any
    cache_dir: Path
    network_ok: Optional[bool] = None
    password: str = "password"
    base_dir: Optional[Path] = None
    chromium_port: int = 9222
    until_timeout: float = 60.0
    cdp_timeout: float = 30.0
    command_timeout: float = 120.0
    download_timeout: float = 300.0
    sleep: Callable[[float], None] = time.sleep
    #: where ``execute``'s ``stdout``/``stderr`` captures go (None: ``cache_dir``); the env gives
    #: the task's getter cache so ``cache_file`` reads them, as in OSWorld (one dir per task)
    capture_dir: Optional[Path] = None
    #: how long ``activate_window`` waits for a window that a ``launch``/``open`` of the same
    #: setup may still be opening (VS Code's takes ~10 s here); 0 = OSWorld's no wait
    window_wait_s: float = 30.0
    clock: Callable[[], float] = time.monotonic
    #: the steps run on the state the agent left (``postconfig``): a command that times out or
    #: an ``until`` that never holds is then the agent's doing (a hung converter on an
    #: agent-made file): logged, recorded in the step's result and the evaluation goes on, so
    #: the episode is scored instead of lost (issue 35). Before the episode (``config``) the
    #: desktop is fresh and either stays an EnvInfraError.
    agent_state: bool = False
    #: ``clock()`` at the last ``launch``/``open`` step of this setup, None before one
    launched_at: Optional[float] = None
    _tool_cache: dict[str, bool] = field(default_factory=dict)
    _chrome_is_chromium: Optional[bool] = None

    def has_tool(self, name: str) -> bool:
        """Whether ``name`` resolves in the desktop's PATH (``command -v``), cached per call."""
        if name not in self._tool_cache:
            res = self.client.execute(["sh", "-c", 'command -v -- "$1" >/dev/null 2>&1', "sh", name],
                                      shell=False, timeout=30)
            self._tool_cache[name] = _returncode(res) == 0
        return self._tool_cache[name]

    def chrome_is_chromium(self) -> bool:
        """True when the desktop's ``google-chrome`` is Chromium: no Google Chrome install
        (``/opt/google/chrome``) and no Chrome profile (``~/.config/google-chrome``). Cached."""
        if self._chrome_is_chromium is None:
            res = self.client.execute(["sh", "-c", 'test -e /opt/google/chrome || test -d "$HOME/.config/google-chrome"'],
                                      shell=False, timeout=30)
            self._chrome_is_chromium = _returncode(res) not in (0, None)
        return self._chrome_is_chromium


#: ``.config/google-chrome`` as a path component (``~/.config/google-chrome/Default``,
#: ``/home/user/.config/google-chrome``), not a url that merely mentions google-chrome
_CHROME_PROFILE = re.compile(r"(?<=\.config/)google-chrome(?=$|[/\s\"';&|)])")


def map_chrome_kill(command: Any) -> Any:
    """``command`` (a list or a shell string) with ``pkill chrome`` / ``killall chrome`` aimed at
    Chromium's process name ``chromium``; anything else is returned unchanged.

    >>> map_chrome_kill(["pkill", "chrome"])
    ['pkill', 'chromium']
    >>> map_chrome_kill("pkill -f google-chrome; killall chrome")
    'pkill -f google-chrome; killall chromium'
    """
    if isinstance(command, str):
        return _KILL_CHROME.sub(r"\1chromium", command)
    if isinstance(command, list) and command:
        if os.path.basename(str(command[0])) in _KILLERS:
            return [("chromium" if i > 0 and a == "chrome" else a) for i, a in enumerate(command)]
        return [map_chrome_kill(a) if isinstance(a, str) else a for a in command]  # ["bash", "-c", "pkill chrome"]
    return command


def map_chrome_profile(value: Any) -> Any:
    """``value`` (nested dicts/lists of strings) with ``.config/google-chrome`` paths pointing
    at Chromium's ``.config/chromium``.

    >>> map_chrome_profile({"command": "cd ~/.config/google-chrome/Default && ls"})
    {'command': 'cd ~/.config/chromium/Default && ls'}
    """
    if isinstance(value, str):
        return _CHROME_PROFILE.sub("chromium", value)
    if isinstance(value, Mapping):
        return {k: map_chrome_profile(v) for k, v in value.items()}
    if isinstance(value, list):
        return [map_chrome_profile(v) for v in value]
    return value


def _as_bool(value: Any) -> bool:
    """OSWorld passes ``shell`` through JSON as is; a few task files say ``"true"``. Strings
    are read as words (``"false"`` is False) instead of Python truthiness."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


# --------------------------------------------------------------------------- helpers: programs


_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SHELL_META = set("|&;<>()$`\\\"'*?[]#~{}")
_NOT_FOUND = [re.compile(p) for p in (
    r"(?:^|\n)\S*?:\s*(?:line \d+:\s*)?(\S+): command not found",  # bash
    r"(?:^|\n)\S*?: \d+: (\S+): not found",                      # dash: "sh: 1: foo: not found"
    r"(?:^|\n)(?:env|nohup|sudo): '?([^':\s]+)'?: No such file or directory",
)]


def program_of(command: Union[str, Sequence[str]], shell: bool) -> Optional[str]:
    """The program a command runs, when it can be told without running it.

    A list runs ``command[0]``; a shell string runs its first word after ``NAME=value``
    assignments (``sudo``/``env``/``nohup`` prefixes are the program then). Returns None for
    shell strings with metacharacters before the first word, or empty commands.

    >>> program_of("VLC_VERBOSE=-1 vlc --no-audio", shell=True)
    'vlc'
    >>> program_of(["python", "-c", "pass"], shell=False)
    'python'
    """
    if isinstance(command, str):
        if not shell:
            words = command.split()
        else:
            try:
                words = shlex.split(command)
            except ValueError:
                return None
        for w in words:
            if _ASSIGN.match(w):
                continue
            if shell and any(c in _SHELL_META for c in w):
                return None
            return w
        return None
    if not command:
        return None
    first = str(command[0])
    # OSWorld sometimes passes a whole shell line as a one-element list with shell=True
    return program_of(first, shell=True) if shell else first


def _missing_from_stderr(stderr: str) -> Optional[str]:
    for pat in _NOT_FOUND:
        m = pat.search(stderr or "")
        if m:
            return m.group(1)
    return None


def _check_program(ctx: SetupContext, command: Any, shell: bool, what: str) -> None:
    prog = program_of(command, shell)
    if prog and "/" not in prog and not ctx.has_tool(prog):
        raise MissingToolError(f"{what}: program {prog!r} is not installed in the desktop", missing=prog)
    if prog and "/" in prog:
        res = ctx.client.execute(["test", "-x", prog], shell=False, timeout=30)
        if _returncode(res) not in (0, None):
            raise MissingToolError(f"{what}: program {prog!r} does not exist in the desktop", missing=prog)


# --------------------------------------------------------------------------- execute / command


class CommandTimedOut(EnvInfraError):
    """The desktop's server answered that a setup command ran past its timeout and was killed
    (the server itself is alive); ``result`` is its answer."""

    def __init__(self, message: str, result: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(message)
        self.result = dict(result or {})


def _run_command(ctx: SetupContext, command: Any, shell: bool, tolerate_missing: bool = False) -> dict[str, Any]:
    """One ``/execute`` call; a failure caused by a missing program becomes MissingToolError,
    or with ``tolerate_missing`` a logged warning and a result ``{"returncode": 127,
    "missing_program": name, ...}`` (what OSWorld's ``_execute_setup`` carries on with)."""
    if not tolerate_missing:
        return _run_command_strict(ctx, command, shell)
    try:
        return _run_command_strict(ctx, command, shell)
    except MissingToolError as e:
        log.warning("setup command %r: %s; continuing as OSWorld does (the task will likely score 0)",
                    command, e)
        res = dict(getattr(e, "result", None) or {"status": "error", "returncode": 127, "output": "",
                                                  "error": str(e)})
        res["missing_program"] = e.missing
        return res


def _run_command_strict(ctx: SetupContext, command: Any, shell: bool) -> dict[str, Any]:
    try:
        res = ctx.client.execute(command, shell=shell, timeout=ctx.command_timeout)
    except EnvInfraError:
        # the server may answer 500 for FileNotFoundError; tell that apart from a dead link
        prog = program_of(command, shell)
        if prog and "/" not in prog:
            try:
                present = ctx.has_tool(prog)
            except EnvInfraError:
                present = True
            if not present:
                raise MissingToolError(f"program {prog!r} is not installed in the desktop", missing=prog) from None
        raise
    if not isinstance(res, Mapping):
        raise EnvInfraError(f"/execute returned {type(res).__name__}, expected a JSON object")
    res = dict(res)
    rc = _returncode(res)
    if res.get("status") not in (None, "success") and rc is None:
        prog = program_of(command, shell)
        msg = str(res.get("message") or res.get("error") or "")
        if prog and ("No such file or directory" in msg or "not found" in msg) and not ctx.has_tool(prog):
            raise MissingToolError(f"program {prog!r} is not installed in the desktop", missing=prog)
        if "timed out" in msg.lower():  # the server is alive and killed the command at its timeout
            raise CommandTimedOut(f"command {command!r} timed out in the desktop: {msg[:300]}", result=res)
        # the server could not run it at all (OSWorld raises after its retries too)
        raise EnvInfraError(f"command {command!r} could not run in the desktop: {msg[:300] or res}")
    if rc == 127:
        missing = _missing_from_stderr(str(res.get("error") or ""))
        if missing is None and not shell:
            prog = program_of(command, shell)
            if prog and not ctx.has_tool(prog):
                missing = prog
        if missing:
            err = MissingToolError(f"program {missing!r} is not installed in the desktop "
                                   f"(exit 127: {str(res.get('error') or '').strip()[:200]})", missing=missing)
            err.result = res  # type: ignore[attr-defined]  # the real answer, kept when tolerated
            raise err
    return res


def _until_met(until: Mapping[str, Any], res: Mapping[str, Any]) -> bool:
    """OSWorld's ``until``: any of returncode equal / stdout substring / stderr substring."""
    if "returncode" in until and _returncode(res) == until["returncode"]:
        return True
    if "stdout" in until and str(until["stdout"]) in str(res.get("output") or ""):
        return True
    if "stderr" in until and str(until["stderr"]) in str(res.get("error") or ""):
        return True
    return False


def _write_cache_text(ctx: SetupContext, field: str, name: str, text: str) -> None:
    """Write ``text`` to ``capture_dir/name`` (default ``cache_dir``); a name that leaves that
    dir (``../x``, ``/x``, a symlink out) raises TaskSpecError naming ``field``."""
    root = ctx.capture_dir if ctx.capture_dir is not None else ctx.cache_dir
    root.mkdir(parents=True, exist_ok=True)
    path = confine(root, name, field, "the cache directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text.encode("utf-8"))


def step_execute(ctx: SetupContext, command: Any, stdout: str = "", stderr: str = "",
                 shell: Any = False, until: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """``_execute_setup``: run ``command`` (re-run until ``until`` holds); save stdout/stderr
    into ``cache_dir/<stdout>`` / ``cache_dir/<stderr>`` when named."""
    if not command:
        raise TaskSpecError("parameter 'command' is empty")
    if until is not None and not isinstance(until, Mapping):
        raise TaskSpecError(f"parameter 'until' must be an object, got {type(until).__name__}")
    shell = _as_bool(shell)
    until = dict(until or {})
    deadline = time.monotonic() + ctx.until_timeout
    while True:
        try:
            res = _run_command(ctx, command, shell, tolerate_missing=True)
        except CommandTimedOut as e:
            if not ctx.agent_state:
                raise
            log.warning("postconfig: %s; evaluating the state as it is (the agent's doing)", e)
            res = {**e.result, "timed_out": True}
        if stdout:
            _write_cache_text(ctx, "parameters.stdout", stdout, str(res.get("output") or ""))
        if stderr:
            _write_cache_text(ctx, "parameters.stderr", stderr, str(res.get("error") or ""))
        if not until or _until_met(until, res) or "missing_program" in res or "timed_out" in res:
            return res
        if time.monotonic() >= deadline:
            if ctx.agent_state:
                log.warning("postconfig: command %r did not reach until=%s within %g s; evaluating the "
                            "state as it is (the agent's doing)", command, until, ctx.until_timeout)
                return {**res, "until_unmet": True}
            raise EnvInfraError(f"command {command!r} did not reach until={until} within "
                                f"{ctx.until_timeout:g} s (last returncode {_returncode(res)})")
        ctx.sleep(0.3)  # OSWorld's retry pause


def step_command(ctx: SetupContext, command: Any, stdout: str = "", stderr: str = "",
                 shell: Any = False, until: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """``_command_setup``: the same as ``execute``."""
    return step_execute(ctx, command, stdout=stdout, stderr=stderr, shell=shell, until=until)


# --------------------------------------------------------------------------- launch / open / windows


def step_launch(ctx: SetupContext, command: Any, shell: Any = False) -> None:
    """``_launch_setup``: start a program without waiting. A non-shell string with spaces is
    split on whitespace as OSWorld does."""
    if not command:
        raise TaskSpecError("parameter 'command' is empty")
    shell = _as_bool(shell)
    if not shell and isinstance(command, str) and len(command.split()) > 1:
        command = command.split()
    _check_program(ctx, command, shell, "launch")
    ctx.client.launch(command, shell=shell)
    ctx.launched_at = ctx.clock()


def step_open(ctx: SetupContext, path: str) -> None:
    """``_open_setup``: open a file with its default application (``/setup/open_file``)."""
    if not path:
        raise TaskSpecError("parameter 'path' is empty")
    ctx.client.open_file(path)
    ctx.launched_at = ctx.clock()


def _window_step(ctx: SetupContext, call: Callable[..., Any], what: str, window_name: str, strict: Any,
                 by_class: Any, wait_s: float = 0.0) -> None:
    """OSWorld logs a window that is not there and goes on (the task may not need it); a dead
    server still raises. ``wait_s``: keep asking that long (every 0.25 s) while the window is
    missing, for a window an app launched just before may still be opening."""
    if not window_name:
        raise TaskSpecError("parameter 'window_name' is empty")
    give_up = ctx.clock() + wait_s
    while True:
        try:
            call(window_name, strict=_as_bool(strict), by_class=_as_bool(by_class))
            return
        except EnvInfraError as e:
            if getattr(e, "status", None) != 404:
                raise
            if ctx.clock() >= give_up:
                log.warning("%s: no window %r (%s); continuing as OSWorld does", what, window_name, e)
                return
        ctx.sleep(0.25)


def _chrome_window_name(ctx: SetupContext, window_name: str, strict: Any, by_class: Any) -> str:
    """OSWorld's ``Google Chrome`` (a substring of Chrome's window titles, "... - Google Chrome")
    as Chromium's titles end (" - Chromium") on a desktop whose ``google-chrome`` is Chromium."""
    if (isinstance(window_name, str) and window_name.lower() == "google chrome" and not _as_bool(strict)
            and not _as_bool(by_class) and ctx.chrome_is_chromium()):
        return "Chromium"
    return window_name


def step_activate_window(ctx: SetupContext, window_name: str, strict: bool = False,
                         by_class: bool = False) -> None:
    """``_activate_window_setup``: raise the window whose title (or class) matches.

    Unlike OSWorld, a window missing after a ``launch``/``open`` of this setup is waited for, up
    to ``ctx.window_wait_s`` from that launch: OSWorld's VM opens apps within its fixed pauses and
    its runner sleeps 60 s before the first observation, while here the agent's first
    observation follows setup at once, so an app still starting (VS Code: ~10 s) would be shown
    unopened and never raised. A window that never comes costs that wait once, then the step
    goes on as OSWorld's does."""
    wait = 0.0
    if ctx.launched_at is not None:
        wait = max(0.0, ctx.launched_at + ctx.window_wait_s - ctx.clock())
    window_name = _chrome_window_name(ctx, window_name, strict, by_class)
    _window_step(ctx, ctx.client.activate_window, "activate_window", window_name, strict, by_class, wait)


def step_close_window(ctx: SetupContext, window_name: str, strict: bool = False,
                      by_class: bool = False) -> None:
    """``_close_window_setup``: close the window whose title (or class) matches."""
    window_name = _chrome_window_name(ctx, window_name, strict, by_class)
    _window_step(ctx, ctx.client.close_window, "close_window", window_name, strict, by_class)


def step_sleep(ctx: SetupContext, seconds: float) -> None:
    """``_sleep_setup``."""
    try:
        s = float(seconds)
    except (TypeError, ValueError):
        raise TaskSpecError(f"parameter 'seconds' must be a number, got {seconds!r}") from None
    if s < 0:
        raise TaskSpecError(f"parameter 'seconds' must be >= 0, got {s}")
    ctx.sleep(s)


# --------------------------------------------------------------------------- files


def _file_list(files: Any, keys: tuple[str, ...]) -> list[Mapping[str, Any]]:
    if not isinstance(files, list):
        raise TaskSpecError(f"parameter 'files' must be a list of objects with {keys}, got {type(files).__name__}")
    for j, f in enumerate(files):
        if not isinstance(f, Mapping):
            raise TaskSpecError(f"files[{j}] must be an object with {keys}, got {type(f).__name__}")
        for k in keys:
            if not isinstance(f.get(k), str) or not f.get(k):
                raise TaskSpecError(f"files[{j}].{k} must be a non-empty string, got {f.get(k)!r}")
    return files


def _upload_source(ctx: SetupContext, local_path: str, field: str) -> Path:
    """The host file an ``upload_file`` step may copy: under the task's own folder (``base_dir``)
    or the cache dir, symlinks resolved. A relative path is read from ``base_dir`` (the cache
    dir when the task has no folder). Anything else (``/etc/shadow``, ``~/.ssh/id_rsa``,
    ``../../secret``) raises TaskSpecError naming ``field``: a task file must not be able to copy
    arbitrary host files into the desktop, where the agent can read them."""
    roots = [(r, what) for r, what in ((ctx.base_dir, "the task's directory"), (ctx.cache_dir, "the cache directory"))
             if r is not None]
    if not os.path.isabs(local_path):
        roots = roots[:1]  # a relative path means the task's folder (the cache dir without one)
    for root, what in roots:
        try:
            return confine(root, local_path, field, what)
        except TaskSpecError:
            continue
    names = " and ".join(f"{what} ({Path(root).resolve()})" for root, what in roots)
    raise TaskSpecError(f"{field}: {local_path!r} lies outside {names}")


def step_upload_file(ctx: SetupContext, files: Any) -> None:
    """``_upload_file_setup``: copy host files into the desktop. ``local_path`` must lie under
    ``base_dir`` (the task file's folder; relative paths are read from there) or ``cache_dir``."""
    for j, f in enumerate(_file_list(files, ("local_path", "path"))):
        local = _upload_source(ctx, f["local_path"], f"parameters.files[{j}].local_path")
        if not local.is_file():
            raise MissingResourceError(f"files[{j}].local_path {str(local)!r} does not exist on the host",
                                       missing=str(local), cache_path=str(local))
        ctx.client.upload_file(str(local), f["path"])


def step_download(ctx: SetupContext, files: Any) -> None:
    """``_download_setup``: put ``url`` at ``path`` in the desktop, through the local cache."""
    for f in _file_list(files, ("url", "path")):
        cached = download_cache_path(ctx.cache_dir, f["url"], f["path"])
        fetch_url_to_cache(f["url"], cached, network_ok=ctx.network_ok, timeout=ctx.download_timeout)
        ctx.client.upload_file(str(cached), f["path"])


# --------------------------------------------------------------------------- execute_with_verification


def _window_exists(ctx: SetupContext, name: str) -> bool:
    """OSWorld's check: ``name`` (case-insensitive) occurs in ``wmctrl -l``; xdotool when the
    desktop has no wmctrl."""
    if ctx.has_tool("wmctrl"):
        res = ctx.client.execute(["wmctrl", "-l"], shell=False, timeout=30)
        return _returncode(res) == 0 and name.lower() in str(res.get("output") or "").lower()
    if ctx.has_tool("xdotool"):
        # xdotool matches titles with a case-insensitive POSIX regex: escape its metacharacters
        pattern = re.sub(r"([.\[\]{}()\\*+?^$|])", r"\\\1", name)
        res = ctx.client.execute(["xdotool", "search", "--onlyvisible", "--name", pattern], shell=False, timeout=30)
        return _returncode(res) == 0 and bool(str(res.get("output") or "").strip())
    raise MissingToolError("execute_with_verification: window_exists needs wmctrl or xdotool in the desktop",
                           missing="wmctrl")


def step_execute_with_verification(ctx: SetupContext, command: Any, verification: Optional[Mapping[str, Any]] = None,
                                   max_wait_time: float = 10, check_interval: float = 1.0,
                                   shell: Any = False) -> dict[str, Any]:
    """Run ``command`` once, then poll the checks every ``check_interval`` s until all pass or
    ``max_wait_time`` s are over (then :class:`EnvInfraError`): ``window_exists`` (a window
    title contains it), ``command_success`` (a shell command exits 0)."""
    if not command:
        raise TaskSpecError("parameter 'command' is empty")
    verification = dict(verification or {})
    unknown = set(verification) - {"window_exists", "command_success"}
    if unknown:
        raise TaskSpecError(f"parameter 'verification' has unknown checks {sorted(unknown)}; "
                            "known: command_success, window_exists")
    shell = _as_bool(shell)
    res = _run_command(ctx, command, shell)
    if not verification:
        return res
    start = time.monotonic()
    while True:
        ok = True
        if "window_exists" in verification:
            ok = _window_exists(ctx, str(verification["window_exists"]))
        if ok and "command_success" in verification:
            check = ctx.client.execute(verification["command_success"], shell=True, timeout=30)
            ok = _returncode(check) == 0
        waited = time.monotonic() - start
        if ok:
            return {**res, "verification": "passed", "wait_time": waited}
        if waited >= float(max_wait_time):
            raise EnvInfraError(f"execute_with_verification: {verification} still failing after "
                                f"{float(max_wait_time):g} s for command {command!r}")
        ctx.sleep(float(check_interval))


# --------------------------------------------------------------------------- Chromium tabs (CDP HTTP)

# Runs inside the desktop (argv: METHOD URL); our own fixed code, the url is data in argv.
_HTTP_SNIPPET = (
    "import sys,urllib.request as u\n"
    "o=u.build_opener(u.ProxyHandler({}))\n"
    "r=o.open(u.Request(sys.argv[2],method=sys.argv[1]),timeout=10)\n"
    "sys.stdout.write(r.read().decode('utf-8','replace'))\n"
)


def _desktop_http(ctx: SetupContext, method: str, url: str) -> Optional[str]:
    """HTTP request made from inside the desktop (curl, else python3); None when it failed."""
    # curl starts in milliseconds; a python3 start can take a second on a busy 2-core desktop
    for tool, argv in (("curl", ["curl", "-sS", "-f", "--noproxy", "*", "-m", "10", "-X", method, url]),
                       ("python3", ["python3", "-c", _HTTP_SNIPPET, method, url])):
        if not ctx.has_tool(tool):
            continue
        res = ctx.client.execute(argv, shell=False, timeout=30)
        return str(res.get("output") or "") if _returncode(res) == 0 else None
    raise MissingToolError("chrome tabs: the desktop has neither curl nor python3 to reach Chromium's "
                           "debugging endpoint", missing="curl")


def _cdp_pages(ctx: SetupContext) -> list[dict[str, Any]]:
    """``/json/list`` page targets, retried until Chromium answers or ``cdp_timeout``."""
    base = f"http://127.0.0.1:{ctx.chromium_port}"
    deadline = time.monotonic() + ctx.cdp_timeout
    while True:
        body = _desktop_http(ctx, "GET", f"{base}/json/list")
        if body is not None:
            try:
                targets = json.loads(body)
            except ValueError:
                targets = None
            if isinstance(targets, list):
                return [t for t in targets if isinstance(t, dict) and t.get("type") == "page"]
        if time.monotonic() >= deadline:
            raise EnvInfraError(f"Chromium's debugging endpoint {base}/json/list did not answer within "
                                f"{ctx.cdp_timeout:g} s (is the browser running with "
                                f"--remote-debugging-port={ctx.chromium_port}?)")
        ctx.sleep(0.5)


def step_chrome_open_tabs(ctx: SetupContext, urls_to_open: Sequence[str]) -> None:
    """``_chrome_open_tabs_setup``: open each url in a new tab; after the first, close the tab
    that was there before (OSWorld closes the default tab)."""
    if not isinstance(urls_to_open, list) or not all(isinstance(u, str) for u in urls_to_open):
        raise TaskSpecError("parameter 'urls_to_open' must be a list of strings")
    before = _cdp_pages(ctx)
    base = f"http://127.0.0.1:{ctx.chromium_port}"
    for i, url in enumerate(urls_to_open):
        # Chromium unescapes the query of /json/new; quoting keeps '&' and '#' in the url
        body = _desktop_http(ctx, "PUT", f"{base}/json/new?{urllib.parse.quote(url, safe='')}")
        if body is None:
            raise EnvInfraError(f"Chromium refused to open a tab for {url!r} ({base}/json/new)")
        if i == 0 and before:
            _desktop_http(ctx, "GET", f"{base}/json/close/{before[0]['id']}")


def step_chrome_close_tabs(ctx: SetupContext, urls_to_close: Sequence[str]) -> None:
    """``_chrome_close_tabs_setup``: for each url close the first tab whose url matches it
    (:func:`compare_urls`)."""
    if not isinstance(urls_to_close, list) or not all(isinstance(u, str) for u in urls_to_close):
        raise TaskSpecError("parameter 'urls_to_close' must be a list of strings")
    pages = _cdp_pages(ctx)
    base = f"http://127.0.0.1:{ctx.chromium_port}"
    for url in urls_to_close:
        for page in pages:
            if compare_urls(str(page.get("url", "")), url):
                _desktop_http(ctx, "GET", f"{base}/json/close/{page['id']}")
                pages.remove(page)
                break


# --------------------------------------------------------------------------- dispatch


StepHandler = Callable[..., Any]

#: step type -> handler(ctx, **parameters)
STEP_HANDLERS: dict[str, StepHandler] = {
    "execute": step_execute,
    "command": step_command,
    "launch": step_launch,
    "open": step_open,
    "activate_window": step_activate_window,
    "close_window": step_close_window,
    "sleep": step_sleep,
    "upload_file": step_upload_file,
    "download": step_download,
    "execute_with_verification": step_execute_with_verification,
    "chrome_open_tabs": step_chrome_open_tabs,
    "chrome_close_tabs": step_chrome_close_tabs,
    "update_browse_history": step_update_browse_history,
}


def _check_params(handler: StepHandler, params: Mapping[str, Any], where: str) -> None:
    sig = inspect.signature(handler)
    try:
        sig.bind(None, **params)
    except TypeError as e:
        names = [n for n in sig.parameters if n != "ctx"]
        raise TaskSpecError(f"{where}: bad parameters {sorted(params)}: {e}; this step takes {names}") from None


def _wrap(err: Exception, where: str, index: int, kind: str) -> Exception:
    """The same error (class and attributes kept) with the step named in front of its message;
    anything that is not a guigym error becomes an EnvInfraError."""
    msg = f"{where}: {err}"
    if not isinstance(err, (TaskSpecError, EnvInfraError)):
        return EnvInfraError(f"{msg} ({type(err).__name__})")
    new = copy.copy(err)
    new.args = (msg,)
    if isinstance(new, SetupUnavailableError):
        new.step_index, new.step_type = index, kind
    return new


def run_setup(client: Any, steps: Sequence[Mapping[str, Any]], *, cache_dir: Union[str, Path],
              network_ok: Optional[bool] = None, password: str = "password",
              screen_size: Optional[tuple[int, int]] = None, base_dir: Union[str, Path, None] = None,
              chromium_port: int = 9222, until_timeout: float = 60.0, cdp_timeout: float = 30.0,
              label: str = "config", sleep: Callable[[float], None] = time.sleep,
              capture_dir: Union[str, Path, None] = None, window_wait_s: float = 30.0,
              clock: Callable[[], float] = time.monotonic, agent_state: bool = False,
              command_timeout: float = 120.0) -> list[dict[str, Any]]:
    """Run OSWorld setup ``steps`` in order on the desktop behind ``client``.

    Args:
        client: a DesktopClient (or anything with its methods).
        steps: ``[{"type": str, "parameters": dict}, ...]`` (a task's ``config`` or
            ``evaluator.postconfig``).
        cache_dir: host folder for downloads and ``stdout``/``stderr`` captures (created).
        network_ok: whether ``download`` may fetch uncached urls (None: if reachable).
        password: the ``{CLIENT_PASSWORD}`` value; ``screen_size`` (w, h) the ``{SCREEN_*}``
            values (asked from the desktop when a step needs them and it is None).
        base_dir: folder relative ``upload_file`` local paths are read from.
        chromium_port: Chromium's debugging port inside the desktop (OSWorld: 9222).
        label: what to call the step list in errors (``config`` / ``postconfig``).
        capture_dir: host folder for ``stdout``/``stderr`` captures instead of ``cache_dir``
            (the task's getter cache, where ``cache_file`` looks).
        window_wait_s: how long after a ``launch``/``open`` an ``activate_window`` waits for its
            window (:func:`step_activate_window`); ``clock`` measures it (with ``sleep``).
        agent_state: the steps run on the agent's state (``postconfig``): a command that times
            out or an ``until`` that never holds is recorded (``result.timed_out`` /
            ``result.until_unmet``) and the steps go on (:attr:`SetupContext.agent_state`).
        command_timeout: seconds the desktop lets one ``execute``/``command`` run before it
            kills it.

    Returns one record per step: ``{"index", "type", "seconds"}`` (+ ``"result"`` for commands).

    Raises:
        TaskSpecError: a malformed or unknown step (the message names ``label[index]``).
        SetupUnavailableError: MissingToolError / MissingResourceError / unsupported type.
        EnvInfraError: the desktop failed or a wait timed out.
    """
    if not isinstance(steps, Sequence) or isinstance(steps, (str, bytes)):
        raise TaskSpecError(f"{label} must be a list of setup steps, got {type(steps).__name__}")
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    ctx = SetupContext(client=client, cache_dir=cache, network_ok=network_ok, password=password,
                       base_dir=Path(base_dir) if base_dir is not None else None,
                       chromium_port=chromium_port, until_timeout=until_timeout, cdp_timeout=cdp_timeout,
                       sleep=sleep, capture_dir=Path(capture_dir) if capture_dir is not None else None,
                       window_wait_s=window_wait_s, clock=clock, agent_state=agent_state,
                       command_timeout=command_timeout)
    size = screen_size
    records: list[dict[str, Any]] = []
    for i, step in enumerate(steps):
        where = f"{label}[{i}]"
        if not isinstance(step, Mapping):
            raise TaskSpecError(f"{where}: a setup step must be an object with 'type' and 'parameters', "
                                f"got {type(step).__name__}")
        kind = step.get("type")
        if not isinstance(kind, str):
            raise TaskSpecError(f"{where}.type must be a string, got {kind!r}")
        where = f"{where} ({kind})"
        params = step.get("parameters", {})
        if not isinstance(params, Mapping):
            raise TaskSpecError(f"{where}: 'parameters' must be an object, got {type(params).__name__}")
        if kind in UNSUPPORTED_STEPS:
            raise SetupUnavailableError(f"{where}: setup step type {kind!r} cannot run here: "
                                        f"{UNSUPPORTED_STEPS[kind]}", missing=f"setup step {kind}",
                                        step_index=i, step_type=kind)
        handler = STEP_HANDLERS.get(kind)
        if handler is None:
            known = ", ".join(sorted(STEP_HANDLERS))
            hint = " (an OSWorld type)" if kind in SETUP_STEP_TYPES else ""
            raise TaskSpecError(f"{where}: unknown setup step type {kind!r}{hint}; known: {known}")
        if size is None and "{SCREEN_" in json.dumps(params, default=str):
            size = tuple(client.screen_size())  # type: ignore[assignment]
        w, h = size if size is not None else (1920, 1080)
        params = substitute(dict(params), osworld_vars(password, w, h))
        if ".config/google-chrome" in json.dumps(params, default=str) and ctx.chrome_is_chromium():
            params = map_chrome_profile(params)
            log.info("%s: ~/.config/google-chrome mapped to Chromium's ~/.config/chromium", where)
        if "command" in params and map_chrome_kill(params["command"]) != params["command"] and ctx.chrome_is_chromium():
            params = {**params, "command": map_chrome_kill(params["command"])}
            log.info("%s: 'chrome' process pattern mapped to Chromium's 'chromium'", where)
        _check_params(handler, params, where)
        t0 = time.monotonic()
        try:
            result = handler(ctx, **params)
        except Exception as e:  # noqa: BLE001 - re-raised with the step named
            raise _wrap(e, where, i, kind) from e
        rec: dict[str, Any] = {"index": i, "type": kind, "seconds": time.monotonic() - t0}
        if isinstance(result, Mapping):
            rec["result"] = dict(result)
        records.append(rec)
        log.debug("%s done in %.3f s", where, rec["seconds"])
    return records
