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
import threading
from typing import Any, Awaitable, Optional, TypeVar

from guigym.core.errors import EnvInfraError

T = TypeVar("T")

#: Flags for a quiet, fast headless Chromium. The background-networking family stops Chromium
#: from dialling out (this project runs on closed networks); the vsync/frame-rate flags let a
#: screenshot return as soon as a frame is ready instead of waiting for a 60 Hz tick (17 ms ->
#: 7 ms per click + screenshot in a one-off measurement, see docs/benchmarks.md).
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
    "--allow-file-access-from-files",
)

SYSTEM_CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome",
                   "/usr/bin/google-chrome-stable")


def find_chromium(playwright_default: Optional[str] = None) -> Optional[str]:
    """Path of the Chromium to launch, or None to let Playwright use its own.

    Order: ``$GUIGYM_CHROMIUM``; Playwright's own browser when it is installed
    (``playwright_default`` exists); the first system Chromium found.
    """
    env = os.environ.get("GUIGYM_CHROMIUM")
    if env:
        if not os.path.exists(env):
            raise EnvInfraError(f"GUIGYM_CHROMIUM={env} does not exist")
        return env
    if playwright_default and os.path.exists(playwright_default):
        return None
    for path in SYSTEM_CHROMIUM:
        if os.path.exists(path):
            return path
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise EnvInfraError(
        "no Chromium found: install Debian's `chromium` package, run `playwright install chromium`, "
        "or set GUIGYM_CHROMIUM to a Chromium binary"
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


def _is_playwright_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("playwright")


class BrowserRuntime:
    """Owns the Playwright driver and one Chromium; relaunches Chromium only after a crash."""

    def __init__(self, headless: bool = True, executable_path: Optional[str] = None,
                 extra_args: tuple[str, ...] = (), launch_timeout_s: float = 30.0) -> None:
        self.headless = headless
        self.executable_path = executable_path
        self.extra_args = tuple(extra_args)
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
            raise EnvInfraError(f"{what} timed out after {timeout_s:.1f} s") from None
        except EnvInfraError:
            raise
        except Exception as exc:  # noqa: BLE001 - classify below
            if _is_playwright_error(exc) or isinstance(exc, (ConnectionError, OSError)):
                raise EnvInfraError(f"{what} failed: {type(exc).__name__}: {str(exc).splitlines()[0]}") from exc
            raise

    def submit(self, coro: Awaitable[T]) -> "concurrent.futures.Future[T]":
        assert self._loop is not None
        return self._loop.submit(coro)

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
        self.run(self._launch(), self.launch_timeout_s, "launching Chromium")

    async def _launch(self) -> None:
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
        path = self.executable_path or find_chromium(self._pw.chromium.executable_path)
        self._disconnected.clear()
        self.browser = await self._pw.chromium.launch(
            headless=self.headless, executable_path=path, args=list(CHROMIUM_ARGS + self.extra_args),
            timeout=self.launch_timeout_s * 1000,
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
