"""One Chromium per process, driven by Playwright's async API on a private event-loop thread.

Why a thread: the env API is synchronous, but we want two things only async gives: overlapping
calls (screenshot and a11y snapshot in flight together) and work in the background (the next
episode's browser context is built while the agent is still acting). Every call goes through
:meth:`BrowserRuntime.run`, which enforces a timeout and turns Playwright's errors into
:class:`~guigym.core.errors.EnvInfraError`.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import tempfile
import threading
from typing import Any, Awaitable, Optional, TypeVar

from guigym.core.errors import ConfigError, EnvInfraError
from guigym.core.waits import scaled

T = TypeVar("T")

#: Flags for a quiet, fast headless Chromium. The background-networking family stops Chromium
#: from dialling out (this project runs on closed networks); the vsync/frame-rate flags let a
#: screenshot return as soon as a frame is ready instead of waiting for a 60 Hz tick (17 ms ->
#: 7 ms per click + screenshot in a one-off measurement, see docs/benchmarks.md).
#: Nothing here widens what a page may read: no ``--allow-file-access-from-files``, no
#: ``--disable-web-security``, no remote-debugging port (Playwright talks CDP over a pipe). Task
#: pages are served over loopback http, never file:// (envs/web/url_policy.py, miniwob.py).
#: ``--no-sandbox``: Chromium refuses to start as root without it (CI runs as root); pages are the
#: task's own sites, and the agent cannot run script in them.
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-quic",
    "--mute-audio",
    "--disable-gpu-vsync",
    "--disable-frame-rate-limit",
)
#: Flags that would let a page (or an agent driving it) reach past its own origin; refused in
#: ``extra_args`` so no caller can bring them back by accident.
FORBIDDEN_ARGS = ("--allow-file-access-from-files", "--allow-file-access", "--disable-web-security",
                  "--remote-debugging-port", "--remote-debugging-address", "--user-data-dir",
                  "--disable-site-isolation-trials", "--allow-running-insecure-content")
#: Host variables Chromium may see (values copied when set); everything else in the host's
#: environment (API keys, database URLs, tokens) stays out of the browser's processes.
CHROMIUM_ENV_ALLOW = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TZ", "TMPDIR")
#: ... and additionally when the window is shown on an X server
CHROMIUM_ENV_ALLOW_HEADFUL = ("DISPLAY", "XAUTHORITY")


def chromium_env(home: str, headless: bool) -> dict[str, str]:
    """The whole environment Chromium starts with: an allow-list of host variables and a private
    ``HOME`` (with its XDG dirs inside), so nothing the host process holds reaches the browser."""
    allow = CHROMIUM_ENV_ALLOW + (() if headless else CHROMIUM_ENV_ALLOW_HEADFUL)
    env = {k: os.environ[k] for k in allow if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(HOME=home, XDG_CONFIG_HOME=os.path.join(home, ".config"),
               XDG_CACHE_HOME=os.path.join(home, ".cache"), XDG_DATA_HOME=os.path.join(home, ".local", "share"))
    return env

#: idle-machine seconds for starting the Playwright driver and Chromium; the default launch bound
#: is this times the machine's load factor (guigym.core.waits): both are processes whose start
#: needs CPU time, and Playwright returns as soon as the browser answers on its pipe (or fails
#: at once when it exits), so the bound is only a hang guard
LAUNCH_BASE_S = 30.0

SYSTEM_CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome",
                   "/usr/bin/google-chrome-stable")
#: Chromium's headless shell (Debian package ``chromium-headless-shell``), preferred for headless runs.
#: The binary itself, not Debian's ``/usr/bin`` wrapper: that one is a shell script that runs it as
#: a child (no ``exec``), so signals and pids would reach the shell instead of the browser.
SYSTEM_HEADLESS_SHELL = ("/usr/lib/chromium/chromium-headless-shell",)


def find_chromium(playwright_default: Optional[str] = None, headless: bool = False) -> Optional[str]:
    """Path of the Chromium to launch, or None to let Playwright use its own.

    Order: ``$GUIGYM_CHROMIUM``; Playwright's own browser when it is installed
    (``playwright_default`` exists); for a headless launch, Debian's ``chromium-headless-shell``
    when it is installed (what Playwright itself launches headless: the shell builds a fresh
    context + tab + MiniWoB page for ~370 ms of CPU where full Chromium in ``--headless`` mode
    takes ~975 ms, measured on 2 cores, bench/web_step.py); the first system Chromium found.
    """
    env = os.environ.get("GUIGYM_CHROMIUM")
    if env:
        if not os.path.exists(env):
            raise EnvInfraError(f"GUIGYM_CHROMIUM={env} does not exist")
        return env
    if playwright_default and os.path.exists(playwright_default):
        return None
    candidates = (SYSTEM_HEADLESS_SHELL if headless else ()) + SYSTEM_CHROMIUM
    for path in candidates:
        if os.path.exists(path):
            return path
    names = ("chromium", "chromium-browser", "google-chrome")
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    raise EnvInfraError(
        "no Chromium found: install Debian's `chromium` (and `chromium-headless-shell`) package, run "
        "`playwright install chromium`, or set GUIGYM_CHROMIUM to a Chromium binary"
    )


class LoopThread:
    """An asyncio event loop running forever on a daemon thread."""

    def __init__(self, name: str = "guigym-browser") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coro: Awaitable[T]) -> "concurrent.futures.Future[T]":
        return asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)


_DRIVER_START_LOCK = threading.Lock()


def _child_pids() -> set[int]:
    """PIDs of this process's direct children."""
    import psutil

    return {c.pid for c in psutil.Process().children(recursive=False)}


class PageUnresponsive(EnvInfraError):
    """A call timed out because a page's renderer did not answer while the browser did (e.g. a
    page script in an endless loop). An EnvInfraError unless the caller knows better: the web
    controller closes the hung tab and counts it as the agent's outcome (controller.py)."""


def is_playwright_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("playwright")


async def cdp_send(cdp: Any, method: str, params: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """``cdp.send(method, params)`` (a Playwright CDPSession) without the async API's copy of the result.

    The public ``send`` passes its result through Playwright's impl-to-API mapping, which rebuilds
    every dict and list of it in Python; for a large result that copy costs as much as Chromium's
    own work (an 836-node ``Accessibility.getFullAXTree`` of the shop's catalogue, 371 KB of JSON:
    ~50 of ~100 ms). A CDP result is plain JSON, which the mapping returns unchanged, so the
    session's implementation object is asked directly; a Playwright without one (it is not
    public API) gets the public call. tests/test_webarena_obs.py checks both give equal results."""
    impl = getattr(cdp, "_impl_obj", None)
    send = getattr(impl, "send", None)
    if send is None:
        return await cdp.send(method, params)
    return await send(method, params, None)


class BrowserRuntime:
    """Owns the Playwright driver and one Chromium; relaunches Chromium only after a crash.

    Chromium runs with :func:`chromium_env` (a private ``HOME``, created here and removed in
    :meth:`close`) and a fresh profile (Playwright's ``launch`` makes a new 0700 temp
    ``--user-data-dir`` per launch and deletes it on close).

    ``launch_timeout_s``: bound of one start of the driver + Chromium; None (default):
    :data:`LAUNCH_BASE_S` times the load factor at that moment; a number is used as given. Running
    out is an EnvInfraError naming the launch.
    """

    def __init__(self, headless: bool = True, executable_path: Optional[str] = None,
                 extra_args: tuple[str, ...] = (), launch_timeout_s: Optional[float] = None) -> None:
        bad = [a for a in extra_args if a.split("=", 1)[0] in FORBIDDEN_ARGS]
        if bad:
            raise ConfigError(f"extra_args: {', '.join(bad)} would widen what pages can reach; not allowed")
        self.headless = headless
        self.executable_path = executable_path
        self.extra_args = tuple(extra_args)
        self._home: Optional[str] = None
        self.launch_timeout_s = launch_timeout_s
        self._loop: Optional[LoopThread] = None
        self._pw: Any = None
        self._driver_pids: set[int] = set()  # the Playwright driver process(es) this runtime started
        self.browser: Any = None
        self._disconnected = threading.Event()

    # -- plumbing ---------------------------------------------------------------------------------
    def run(self, coro: Awaitable[T], timeout_s: float, what: str) -> T:
        """Run ``coro`` on the browser thread; infrastructure failures become EnvInfraError."""
        if self._loop is None:
            raise EnvInfraError(f"{what}: the browser runtime is not started")
        fut = self._loop.submit(coro)
        try:
            return fut.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            if self.alive and self.browser_answers():
                raise PageUnresponsive(f"{what}: no answer from the page within {timeout_s:.1f} s, "
                                       "while the browser itself answers") from None
            raise EnvInfraError(f"{what} timed out after {timeout_s:.1f} s") from None
        except EnvInfraError:
            raise
        except Exception as exc:  # noqa: BLE001 - classify below
            if is_playwright_error(exc) or isinstance(exc, (ConnectionError, OSError)):
                raise EnvInfraError(f"{what} failed: {type(exc).__name__}: {str(exc).splitlines()[0]}") from exc
            raise

    def submit(self, coro: Awaitable[T]) -> "concurrent.futures.Future[T]":
        assert self._loop is not None
        return self._loop.submit(coro)

    def browser_answers(self, timeout_s: float = 5.0) -> bool:
        """True when Chromium's browser process answers a browser-level CDP call. It runs apart
        from the pages' renderers, so it tells a hung page from a hung or gone browser."""
        async def probe() -> None:
            session = await self.browser.new_browser_cdp_session()
            try:
                await session.send("Browser.getVersion")
            finally:
                await session.detach()

        try:
            self.submit(probe()).result(timeout=timeout_s)
            return True
        except Exception:  # noqa: BLE001 - any failure means: not answering
            return False

    @property
    def alive(self) -> bool:
        return self.browser is not None and not self._disconnected.is_set()

    # -- lifecycle --------------------------------------------------------------------------------
    def ensure_started(self) -> None:
        """Start the driver and Chromium if they are not running (first use or after a crash)."""
        if self.alive:
            return
        if self._loop is None:
            self._loop = LoopThread()
        timeout_s = self.launch_timeout()
        self.run(self._launch(timeout_s), timeout_s, "launching Chromium")

    def launch_timeout(self) -> float:
        """Seconds one launch may take now (see the class docstring)."""
        return self.launch_timeout_s if self.launch_timeout_s is not None else scaled(LAUNCH_BASE_S)

    async def _launch(self, timeout_s: float) -> None:
        from playwright.async_api import async_playwright

        if self.browser is not None:  # crashed: drop what is left
            try:
                await self.browser.close()
            except Exception:  # noqa: BLE001 - it is already gone
                pass
            self.browser = None
        if self._pw is None:
            # the driver is the child process that appears while Playwright starts; the lock keeps
            # two runtimes of one process from starting theirs at the same moment
            with _DRIVER_START_LOCK:
                before = _child_pids()
                self._pw = await async_playwright().start()
                self._driver_pids = _child_pids() - before
        path = self.executable_path or find_chromium(self._pw.chromium.executable_path, headless=self.headless)
        self._disconnected.clear()
        if self._home is None or not os.path.isdir(self._home):
            self._home = tempfile.mkdtemp(prefix="guigym-chromium-home-")  # mode 0700
        self.browser = await self._pw.chromium.launch(
            headless=self.headless, executable_path=path, args=list(CHROMIUM_ARGS + self.extra_args),
            env=chromium_env(self._home, self.headless), timeout=timeout_s * 1000,
        )
        self.browser.on("disconnected", lambda _b: self._disconnected.set())

    def close(self) -> None:
        if self._loop is None:
            return

        async def _shutdown() -> None:
            if self.browser is not None:
                try:
                    await self.browser.close()
                except Exception:  # noqa: BLE001
                    pass
            if self._pw is not None:
                await self._pw.stop()

        try:
            self._loop.submit(_shutdown()).result(timeout=10)
        except Exception:  # noqa: BLE001 - closing must not raise
            pass
        self.browser = None
        self._pw = None
        self._driver_pids = set()
        self._loop.stop()
        self._loop = None
        if self._home is not None:
            shutil.rmtree(self._home, ignore_errors=True)
            self._home = None

    def chromium_pids(self) -> list[int]:
        """PIDs of this runtime's Chromium processes (descendants of its own Playwright driver,
        not those of other runtimes in the same process)."""
        import psutil

        roots = []
        for pid in self._driver_pids:
            try:
                roots.append(psutil.Process(pid))
            except psutil.Error:
                continue
        pids = []
        for proc in roots:
            try:
                children = proc.children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                try:
                    if "chrom" in child.name().lower():
                        pids.append(child.pid)
                except psutil.Error:
                    continue
        return pids
