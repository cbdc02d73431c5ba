"""A stateful embedded site served by two instances, one live and one restored on standby.

Why: a stateful site (a shop, a forum) can be restored only once its episode is over, so the
next episode's start page could not be opened before that episode's ``reset()``: the reset had to
restore the site and then load the page (Django rendering, CSS/JS parsing: 350-800 ms here).
With two instances of the site, the standby one is restored while the current episode runs on
the live one, and the next start page is opened on it in the agent's turn; ``reset()`` then only
swaps the two.

Both instances stay behind the same base URLs, so task configs, cookies and answers keep their
origins: each base URL is a loopback :class:`TcpRelay` that connects every new connection to
the live instance's port. The browser context opened ahead reaches the standby instance directly
(its policy proxy is given :meth:`StandbySite.upstreams` ``(standby=True)``), and keeps doing so after the
swap made that instance live.

Usage::

    site = StandbySite(lambda d: SpiritSite(d), workdir)  # builds/serves workdir/a and workdir/b
    site.start(); site.urls                                # the relays' URLs
    site.prepare_standby()                                 # restore the standby (idle) instance
    site.reset(standby_ready=True)                         # swap: the standby goes live
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional, Union
from urllib.parse import urlsplit, urlunsplit

from guigym.core.errors import EnvInfraError
from guigym.envs.web.policy_proxy import pipe

class TcpRelay:
    """A loopback TCP listener whose every new connection is piped to ``target()``'s
    ``(host, port)`` at the moment it connects; runs on its own event-loop thread.

    Connections already open keep their instance when the target changes (a page of an ended
    episode finishes its request where it started it)."""

    def __init__(self, target: Callable[[], tuple[str, int]]) -> None:
        self.target = target
        self._server: Optional[asyncio.AbstractServer] = None
        self.port = 0

    async def start(self) -> "TcpRelay":
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, port = self.target()
        try:
            up_r, up_w = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            return
        try:
            await pipe(reader, writer, up_r, up_w)
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()


def _hostport(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if not parts.hostname:
        raise EnvInfraError(f"site URL {url!r} has no host")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


class StandbySite:
    """The site contract of sites/__init__.py over two instances of one site class.

    Args:
        factory: builds one instance given its directory (``workdir/a``, ``workdir/b``).
        workdir: this site's directory.
        prepare: called with ``workdir/a`` before the instance is made (e.g. to copy a cached
            build into it). The second instance's directory is a copy of the first one's once
            its seed is built, so both serve the very same seed (Fossil's ids are random).
    """

    def __init__(self, factory: Callable[[Path], Any], workdir: Union[str, Path],
                 prepare: Optional[Callable[[Path], None]] = None) -> None:
        self.workdir = Path(workdir)
        dirs = [self.workdir / "a", self.workdir / "b"]
        if prepare is not None:
            prepare(dirs[0])
        self.instances = [factory(d) for d in dirs]
        first = self.instances[0]
        self.key = first.key
        self.logins = dict(getattr(first, "logins", {}) or {})
        self.resets_sessions = bool(getattr(first, "resets_sessions", False))
        #: which of ``instances`` serves the episode (the relays' target)
        self.live_index = 0
        #: True when prepare_standby restored the standby instance since the last swap
        self.standby_clean = False
        self._relays: list[TcpRelay] = []
        self._urls: dict[str, str] = {}
        self._instance_urls: list[dict[str, str]] = []  # each instance's own site_urls, once started
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    # -- the site contract --------------------------------------------------------------------
    def start(self) -> str:
        """Start both instances and one relay per base URL; returns the (relayed) main URL."""
        from guigym.envs.web.webarena.sites import site_urls

        try:
            first, second = self.instances
            seed = getattr(first, "seed", None)
            if seed is not None and not Path(seed).exists():
                first.build()
            if not second.workdir.exists():
                shutil.copytree(first.workdir, second.workdir, symlinks=True)
            with concurrent.futures.ThreadPoolExecutor(2) as pool:  # servers start in parallel
                for fut in [pool.submit(inst.start) for inst in self.instances]:
                    fut.result()
            own = [site_urls(inst) for inst in self.instances]
            if list(own[0]) != list(own[1]):
                raise EnvInfraError(f"the two instances of site {self.key!r} serve different keys: {own}")
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name=f"relay-{self.key}", daemon=True)
            self._thread.start()
            for key in own[0]:
                targets = [_hostport(own[i][key]) for i in (0, 1)]
                relay = TcpRelay(lambda t=targets: t[self.live_index])
                asyncio.run_coroutine_threadsafe(relay.start(), self._loop).result(10)
                self._relays.append(relay)
                parts = urlsplit(own[0][key])
                self._urls[key] = urlunsplit((parts.scheme, f"127.0.0.1:{relay.port}", parts.path, parts.query, ""))
            self._instance_urls = own
        except BaseException:
            self.close()
            raise
        self.standby_clean = False
        return self.url

    @property
    def url(self) -> str:
        """The main key's base URL (a relay)."""
        if self.key not in self._urls:
            raise EnvInfraError(f"site {self.key!r} is not started")
        return self._urls[self.key]

    @property
    def urls(self) -> dict[str, str]:
        """Site key -> base URL (a relay), for every key the site serves."""
        if not self._urls:
            raise EnvInfraError(f"site {self.key!r} is not started")
        return dict(self._urls)

    @property
    def live_instance(self) -> Any:
        """The instance serving the current episode (the relays' target)."""
        return self.instances[self.live_index]

    @property
    def standby_instance(self) -> Any:
        """The other instance: restored by :meth:`prepare_standby`, live after the next reset."""
        return self.instances[1 - self.live_index]

    def prepare_standby(self) -> float:
        """Restore the standby instance to the seed (nothing may be using it); returns seconds."""
        with self._lock:
            took = self.instances[1 - self.live_index].reset()
            self.standby_clean = True
            return took

    def reset(self, standby_ready: bool = False) -> float:
        """Make the standby instance live, restoring it first unless ``standby_ready`` (it was
        restored by :meth:`prepare_standby` and only the page opened ahead has used it since);
        returns seconds taken. The instance that was live becomes the standby, to be restored
        by the next :meth:`prepare_standby`."""
        t0 = time.perf_counter()
        with self._lock:
            if not (standby_ready and self.standby_clean):
                self.instances[1 - self.live_index].reset()
            self.live_index = 1 - self.live_index
            self.standby_clean = False
        return time.perf_counter() - t0

    def upstreams(self, standby: bool = False) -> dict[tuple[str, int], tuple[str, int]]:
        """(host, port) of each relay -> (host, port) of the live instance's server (or the standby
        one's): where an episode's browser context connects, so that it keeps its instance
        whatever the relays point to later."""
        inst = self._instance_urls[1 - self.live_index if standby else self.live_index]
        return {_hostport(self._urls[k]): _hostport(inst[k]) for k in self._urls}

    def close(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(5)
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(5)
            if not loop.is_running():
                loop.close()
        self._relays.clear()
        self._urls.clear()
        for inst in self.instances:
            inst.close()

    async def _shutdown(self) -> None:
        """Stop listening and end the relayed connections (on the relay loop)."""
        for relay in self._relays:
            await relay.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def __enter__(self) -> "StandbySite":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
