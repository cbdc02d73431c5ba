"""A stateful embedded site served by a ring of instances: one live, the others restored on standby.

Why: a stateful site (a shop, a forum) can be restored only once its episode is over, so the
next episode's start page could not be opened before that episode's ``reset()``: the reset had to
restore the site and then load the page (Django rendering, CSS/JS parsing: 350-800 ms here).
With a second instance of the site, the standby one is restored while the current episode runs
on the live one, and the next start page is opened on it in the agent's turn; ``reset()`` then
only moves the live role on. With ``k`` instances the start pages of the next ``k - 1`` episodes
can be opened ahead, each on its own instance, so a page that takes longer to open than one
agent turn (the shop's catalogue: ~0.7 s on 2 cores) has ``k - 1`` turns to do it.

The live role goes round the ring: the instance ``n`` places after the live one (:meth:`instance`)
serves the ``n``-th next episode; the one an episode just left is the last, restored once nothing
of that episode can reach it (:meth:`prepare_standby`). Every instance stays behind the same base
URLs, so task configs, cookies and answers keep their origins: each base URL is a loopback
:class:`TcpRelay` that connects every new connection to the live instance's port. A browser
context opened ahead reaches its own instance directly (its policy proxy is given
:meth:`StandbySite.upstreams` ``(ahead=n)``), and keeps doing so once that instance is live.

Usage::

    site = StandbySite(lambda d: SpiritSite(d), workdir)  # builds/serves workdir/a and workdir/b
    site.start(); site.urls                                # the relays' URLs
    site.prepare_standby()                                 # restore the next (idle) instance
    site.reset(standby_ready=True)                         # it goes live, without a restore
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

from guigym.core.errors import ConfigError, EnvInfraError
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
    """The site contract of sites/__init__.py over ``instances`` instances of one site class.

    Args:
        factory: builds one instance given its directory (``workdir/a``, ``workdir/b``, ...).
        workdir: this site's directory.
        prepare: called with ``workdir/a`` before the instance is made (e.g. to copy a cached
            build into it). The other instances' directories are copies of the first one's once
            its seed is built, so all serve the very same seed (Fossil's ids are random).
        instances: how many (>= 2); the start pages of ``instances - 1`` next episodes can be
            opened ahead (:attr:`depth`).
    """

    def __init__(self, factory: Callable[[Path], Any], workdir: Union[str, Path],
                 prepare: Optional[Callable[[Path], None]] = None, instances: int = 2) -> None:
        if isinstance(instances, bool) or not isinstance(instances, int) or not 2 <= instances <= 26:
            raise ConfigError(f"a standby site needs 2 to 26 instances, got {instances!r}")
        self.workdir = Path(workdir)
        dirs = [self.workdir / chr(ord("a") + i) for i in range(instances)]
        if prepare is not None:
            prepare(dirs[0])
        self.instances = [factory(d) for d in dirs]
        first = self.instances[0]
        self.key = first.key
        self.logins = dict(getattr(first, "logins", {}) or {})
        self.resets_sessions = bool(getattr(first, "resets_sessions", False))
        #: which of ``instances`` serves the episode (the relays' target)
        self.live_index = 0
        #: per instance: restored by prepare_standby since it was last live (only pages opened
        #: ahead may have used it since)
        self._clean = [False] * instances
        self._relays: list[TcpRelay] = []
        self._urls: dict[str, str] = {}
        self._instance_urls: list[dict[str, str]] = []  # each instance's own site_urls, once started
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    # -- the site contract --------------------------------------------------------------------
    def start(self) -> str:
        """Start every instance and one relay per base URL; returns the (relayed) main URL."""
        from guigym.envs.web.webarena.sites.base import site_urls

        try:
            first, *others = self.instances
            seed = getattr(first, "seed", None)
            if seed is not None and not Path(seed).exists():
                first.build()
            for other in others:
                if not other.workdir.exists():
                    shutil.copytree(first.workdir, other.workdir, symlinks=True)
            with concurrent.futures.ThreadPoolExecutor(len(self.instances)) as pool:  # servers start in parallel
                for fut in [pool.submit(inst.start) for inst in self.instances]:
                    fut.result()
            own = [site_urls(inst) for inst in self.instances]
            if any(list(o) != list(own[0]) for o in own):
                raise EnvInfraError(f"the instances of site {self.key!r} serve different keys: {own}")
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name=f"relay-{self.key}", daemon=True)
            self._thread.start()
            for key in own[0]:
                targets = [_hostport(o[key]) for o in own]
                relay = TcpRelay(lambda t=targets: t[self.live_index])
                asyncio.run_coroutine_threadsafe(relay.start(), self._loop).result(10)
                self._relays.append(relay)
                parts = urlsplit(own[0][key])
                self._urls[key] = urlunsplit((parts.scheme, f"127.0.0.1:{relay.port}", parts.path, parts.query, ""))
            self._instance_urls = own
        except BaseException:
            self.close()
            raise
        self._clean = [False] * len(self.instances)
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
    def depth(self) -> int:
        """How many next episodes have an instance of their own (``len(instances) - 1``)."""
        return len(self.instances) - 1

    def index(self, ahead: int = 0) -> int:
        """The position in :attr:`instances` of the one that serves the ``ahead``-th next episode
        (0: the live one), as things stand (each reset moves it)."""
        if isinstance(ahead, bool) or not isinstance(ahead, int) or not 0 <= ahead <= self.depth:
            raise ConfigError(f"ahead must be an int from 0 to {self.depth} for site {self.key!r}, got {ahead!r}")
        return (self.live_index + ahead) % len(self.instances)

    def instance(self, ahead: int = 0) -> Any:
        """The instance that serves the ``ahead``-th next episode (0: the live one)."""
        return self.instances[self.index(ahead)]

    def prepare_standby(self, ahead: int = 1) -> float:
        """Restore the ``ahead``-th next instance to the seed (nothing may be using it); returns seconds."""
        if ahead == 0:
            raise ConfigError("prepare_standby restores a standby instance, not the live one (ahead >= 1)")
        return self.restore_instance(self.index(ahead))

    def restore_instance(self, i: int) -> float:
        """Restore ``instances[i]`` to the seed (nothing may be using it) and count it ready for
        the reset that makes it live; returns seconds. For work queued before that reset, which
        names the instance by position: the live instance is refused (EnvInfraError), as a
        reset in between would have moved the live role onto it."""
        with self._lock:
            if i == self.live_index:
                raise EnvInfraError(f"instance {i} of site {self.key!r} is live: it is not restored under its episode")
            took = self.instances[i].reset()
            self._clean[i] = True
            return took

    def reset(self, standby_ready: bool = False) -> float:
        """Make the next instance live, restoring it first unless ``standby_ready`` (it was
        restored by :meth:`prepare_standby` and only the page opened ahead has used it since);
        returns seconds taken. The instance that was live goes to the end of the ring, to be
        restored by a later :meth:`prepare_standby`."""
        t0 = time.perf_counter()
        with self._lock:
            nxt = self.index(1)
            if not (standby_ready and self._clean[nxt]):
                self.instances[nxt].reset()
            self.live_index = nxt
            self._clean[nxt] = False
        return time.perf_counter() - t0

    def upstreams(self, ahead: int = 0) -> dict[tuple[str, int], tuple[str, int]]:
        """(host, port) of each relay -> (host, port) of the server of the instance that serves
        the ``ahead``-th next episode (0: the live one): where an episode's browser context
        connects, so that it keeps its instance whatever the relays point to later."""
        inst = self._instance_urls[self.index(ahead)]
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
