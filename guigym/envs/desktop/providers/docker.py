"""``docker`` provider: OSWorld's ``happysixd/osworld-docker`` image (QEMU in a container).

As OSWorld's ``desktop_env/providers/docker/provider.py``: environment ``DISK_SIZE``/
``RAM_SIZE``/``CPU_CORES``, ``/dev/kvm`` passed through when present (``KVM=N`` otherwise),
the Ubuntu qcow2 mounted read-only at ``/System.qcow2``, container ports 5000 (server), 9222
(Chromium), 8006 (VNC web), 8080 (VLC) published on host ports allocated under a file lock,
readiness = ``GET /screenshot`` answering 200. What we add: every port is published on
127.0.0.1 only (OSWorld publishes on all interfaces, i.e. an unauthenticated code-execution
server on the LAN), the ports stay claimed in a lock-protected file until ``stop`` (so two
providers never race for one port between allocation and bind), and containers are removed on
exit and on SIGTERM/SIGINT. ``revert`` is OSWorld's: a new container (cold boot).

The docker SDK (``pip install docker``) is imported only when a provider starts. This module
also holds the pieces the ``qemu`` provider shares: :class:`PortAllocator`, :func:`wait_ready`,
:func:`kvm_available` and the exit/signal cleanup registry.
"""
from __future__ import annotations

import atexit
import logging
import os
import signal
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from typing import Any, Callable, ContextManager, Mapping, Optional, Sequence, Union

from guigym.core.errors import ConfigError, EnvInfraError
from guigym.core.port_claims import locked_claims, port_free
from guigym.envs.desktop.providers import PROVIDERS
from guigym.envs.desktop.providers.base import Provider

log = logging.getLogger(__name__)

IMAGE = "happysixd/osworld-docker"
#: container port -> role; host ports are allocated from these numbers upward (OSWorld's starts)
CONTAINER_PORTS: dict[str, int] = {"server": 5000, "chromium": 9222, "vnc": 8006, "vlc": 8080}
PORT_STARTS: dict[str, int] = {"server": 5000, "chromium": 9222, "vnc": 8006, "vlc": 8080}
LOOPBACK = "127.0.0.1"

__all__ = ["DockerProvider", "PortAllocator", "wait_ready", "kvm_available", "container_kwargs",
           "register_cleanup", "unregister_cleanup"]


# --------------------------------------------------------------------------- KVM


def kvm_available(path: str = "/dev/kvm") -> bool:
    """``path`` exists and this process may open it read-write (what QEMU needs for KVM)."""
    return os.path.exists(path) and os.access(path, os.R_OK | os.W_OK)


# --------------------------------------------------------------------------- ports


def _default_state_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"guigym-ports-{os.getuid()}"


class PortAllocator:
    """Host ports for VMs, claimed in ``<state_dir>/claims.json`` under an ``flock``.

    A port is handed out when no live claim holds it, nothing is bound to it, and it is not in
    ``busy`` (e.g. ports Docker has published). Claims name the owning pid; a dead pid's claims
    are dropped at the next allocation. ``release`` gives ports back.
    """

    def __init__(self, state_dir: Union[str, Path, None] = None, lock_timeout: float = 600.0) -> None:
        self.state_dir = Path(state_dir) if state_dir is not None else _default_state_dir()
        self.lock_timeout = lock_timeout

    def _locked(self) -> ContextManager[dict[str, Any]]:
        return locked_claims(self.state_dir, self.lock_timeout, poll_s=0.05)

    def allocate(self, starts: Mapping[str, int], owner: str = "", busy: Sequence[int] = (),
                 host: str = LOOPBACK) -> dict[str, int]:
        """One free port per role, each the first free one at or above its start."""
        out: dict[str, int] = {}
        with self._locked() as claims:
            taken = {int(p) for p in claims} | set(busy)
            for role, start in starts.items():
                port = int(start)
                while port < 65535 and (port in taken or not port_free(port, host)):
                    port += 1
                if port >= 65535:
                    raise EnvInfraError(f"no free port at or above {start} for {role}")
                taken.add(port)
                out[role] = port
                claims[str(port)] = {"pid": os.getpid(), "owner": owner, "role": role}
        return out

    def release(self, ports: Sequence[int]) -> None:
        with self._locked() as claims:
            for p in ports:
                claims.pop(str(p), None)

    def release_quietly(self, ports: Mapping[str, int]) -> dict[str, int]:
        """Release ``ports`` (role -> port) for a ``stop()`` that must not raise; returns ``{}``
        for the caller to store in place of its port map."""
        if ports:
            try:
                self.release(list(ports.values()))
            except Exception as e:  # noqa: BLE001
                log.warning("port release failed: %s", e)
        return {}

    def claimed(self) -> dict[int, dict[str, Any]]:
        """Live claims: port -> {pid, owner, role}."""
        with self._locked() as claims:
            return {int(p): dict(c) for p, c in claims.items()}


# --------------------------------------------------------------------------- readiness


def wait_ready(base_url: str, *, path: str = "/screenshot", token: Optional[str] = None,
               timeout: float = 300.0, interval: float = 1.0,
               alive: Optional[Callable[[], Optional[str]]] = None) -> float:
    """Poll ``GET base_url + path`` until it answers 200; return the seconds waited.

    ``alive()`` is called between polls; a string return means the VM died (the string says
    why) and stops the wait at once. Raises :class:`EnvInfraError` naming the url on timeout.
    """
    url = base_url.rstrip("/") + path
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    start = time.monotonic()
    last = "no answer yet"
    while True:
        try:
            with opener.open(urllib.request.Request(url, headers=headers), timeout=max(1.0, interval * 5)) as r:
                if r.status == 200:
                    return time.monotonic() - start
                last = f"HTTP {r.status}"
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code}"
        except (urllib.error.URLError, OSError) as e:
            last = str(getattr(e, "reason", e))
        if alive is not None:
            dead = alive()
            if dead:
                raise EnvInfraError(f"the VM behind {url} stopped before it was ready: {dead}")
        waited = time.monotonic() - start
        if waited >= timeout:
            raise EnvInfraError(f"{url} was not ready after {timeout:g} s (last: {last})")
        time.sleep(min(interval, max(0.0, timeout - waited)))


# --------------------------------------------------------------------------- cleanup on exit / signals

_live: "weakref.WeakSet[Any]" = weakref.WeakSet()
_installed = False
_install_lock = threading.Lock()
_previous: dict[int, Any] = {}


def _cleanup_all() -> None:
    for p in list(_live):
        try:
            p.stop()
        except Exception as e:  # noqa: BLE001 - best effort at exit
            log.warning("cleanup of %r failed: %s", p, e)


def _on_signal(signum: int, frame: Any) -> None:
    _cleanup_all()
    prev = _previous.get(signum)
    if callable(prev):
        prev(signum, frame)
    elif prev == signal.SIG_IGN:
        return
    else:  # default action: die of the signal, as without us
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def register_cleanup(provider: Any) -> None:
    """Stop ``provider`` at interpreter exit and on SIGTERM/SIGINT (previous handlers still
    run afterwards). Signal handlers can only be set from the main thread; elsewhere only the
    exit hook is installed."""
    global _installed
    _live.add(provider)
    with _install_lock:
        if _installed:
            return
        _installed = True
        atexit.register(_cleanup_all)
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                _previous[sig] = signal.getsignal(sig)
                signal.signal(sig, _on_signal)


def unregister_cleanup(provider: Any) -> None:
    _live.discard(provider)


# --------------------------------------------------------------------------- docker


def container_kwargs(*, qcow2: Union[str, Path], ports: Mapping[str, int], kvm: bool,
                     disk_size: str = "32G", ram_size: str = "4G", cpu_cores: Union[int, str] = 4,
                     image: str = IMAGE, name: Optional[str] = None) -> dict[str, Any]:
    """Keyword arguments for ``docker.from_env().containers.run`` (docker SDK).

    ``ports``: role (``server``/``chromium``/``vnc``/``vlc``) -> host port, each published on
    127.0.0.1 only.
    """
    environment = {"DISK_SIZE": str(disk_size), "RAM_SIZE": str(ram_size), "CPU_CORES": str(cpu_cores)}
    if not kvm:
        environment["KVM"] = "N"
    unknown = set(ports) - set(CONTAINER_PORTS)
    if unknown:
        raise ConfigError(f"ports: unknown roles {sorted(unknown)}; known: {sorted(CONTAINER_PORTS)}")
    kw: dict[str, Any] = {
        "image": image,
        "environment": environment,
        "cap_add": ["NET_ADMIN"],
        "devices": ["/dev/kvm"] if kvm else [],
        "volumes": {str(Path(qcow2).resolve()): {"bind": "/System.qcow2", "mode": "ro"}},
        "ports": {f"{CONTAINER_PORTS[role]}/tcp": (LOOPBACK, int(port)) for role, port in ports.items()},
        "labels": {"guigym": "desktop", "guigym.pid": str(os.getpid())},
        "detach": True,
    }
    if name:
        kw["name"] = name
    return kw


def _docker_client() -> Any:
    try:
        import docker  # type: ignore[import-not-found]
    except ImportError:
        raise EnvInfraError("the docker provider needs the docker SDK: pip install 'docker>=7'") from None
    try:
        return docker.from_env()
    except Exception as e:  # noqa: BLE001 - DockerException has no stable import path
        raise EnvInfraError(f"no Docker engine reachable ({e}); start dockerd or set DOCKER_HOST") from None


def _published_ports(client: Any) -> set[int]:
    """Host ports Docker containers publish (started or only created)."""
    used: set[int] = set()
    try:
        for c in client.api.containers(all=True):
            for p in c.get("Ports", []) or []:
                if p.get("PublicPort"):
                    used.add(int(p["PublicPort"]))
    except Exception as e:  # noqa: BLE001 - a best-effort extra check; binding is checked anyway
        log.debug("could not list docker ports: %s", e)
    return used


@PROVIDERS.register("docker")
class DockerProvider(Provider):
    """OSWorld's docker VM. ``start()`` -> a token-less DesktopClient (stock OSWorld server).

    Args:
        qcow2: path of OSWorld's ``Ubuntu.qcow2``.
        disk_size/ram_size/cpu_cores: the container's ``DISK_SIZE``/``RAM_SIZE``/``CPU_CORES``.
        kvm: pass ``/dev/kvm`` (None: when it is usable here).
        ready_timeout: seconds to wait for ``GET /screenshot`` (OSWorld waits 300).
        port_state_dir: where port claims live (shared by all guigym VM providers of a user).
        docker_client: an SDK client to use instead of ``docker.from_env()``.
    """

    name = "docker"
    vm = True

    def __init__(self, qcow2: Union[str, Path], *, disk_size: str = "32G", ram_size: str = "4G",
                 cpu_cores: Union[int, str] = 4, kvm: Optional[bool] = None, image: str = IMAGE,
                 ready_timeout: float = 300.0, port_state_dir: Union[str, Path, None] = None,
                 docker_client: Any = None, client_timeout: float = 60.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.qcow2 = Path(qcow2)
        self.disk_size, self.ram_size, self.cpu_cores = disk_size, ram_size, cpu_cores
        self.kvm = kvm_available() if kvm is None else bool(kvm)
        self.image = image
        self.ready_timeout = ready_timeout
        self.ports_alloc = PortAllocator(port_state_dir)
        self.client_timeout = client_timeout
        self._docker = docker_client
        self.container: Any = None
        self.ports: dict[str, int] = {}
        
    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.ports['server']}"

    def _container_alive(self) -> Optional[str]:
        try:
            self.container.reload()
        except Exception as e:  # noqa: BLE001
            return f"container vanished ({e})"
        if self.container.status in ("exited", "dead"):
            logs = b""
            try:
                logs = self.container.logs(tail=20)
            except Exception:  # noqa: BLE001
                pass
            return f"container {self.container.status}: {logs.decode('utf-8', 'replace')[-800:]}"
        return None

    def start(self) -> Any:
        if self._client is not None and self.container is not None:
            return self._client
        from guigym.envs.desktop.client import DesktopClient

        t0 = time.monotonic()
        if not self.qcow2.is_file():
            raise EnvInfraError(f"docker provider: the OSWorld qcow2 {self.qcow2} does not exist "
                                "(download Ubuntu.qcow2 from OSWorld's release first)")
        if self._docker is None:
            self._docker = _docker_client()
        self.ports = self.ports_alloc.allocate(PORT_STARTS, owner=f"docker:{id(self)}",
                                               busy=sorted(_published_ports(self._docker)))
        register_cleanup(self)
        try:
            kw = container_kwargs(qcow2=self.qcow2, ports=self.ports, kvm=self.kvm, disk_size=self.disk_size,
                                  ram_size=self.ram_size, cpu_cores=self.cpu_cores, image=self.image)
            try:
                self.container = self._docker.containers.run(**kw)
            except Exception as e:  # noqa: BLE001 - SDK errors -> infra errors
                raise EnvInfraError(f"docker run {self.image} failed: {e}") from None
            wait_ready(self.base_url, path="/screenshot", timeout=self.ready_timeout, alive=self._container_alive)
        except BaseException:
            self.stop()
            raise
        self._client = DesktopClient(self.base_url, token=None, timeout=self.client_timeout)
        self.timings = {"start": time.monotonic() - t0}
        return self._client

    def revert(self) -> Any:
        """OSWorld's revert for docker: a fresh container from the read-only qcow2."""
        self.stop()
        return self.start()

    def stop(self) -> None:
        self._drop_client()
        if self.container is not None:
            c, self.container = self.container, None
            try:
                c.stop(timeout=10)
            except Exception as e:  # noqa: BLE001
                log.warning("docker stop failed: %s", e)
            try:
                c.remove(force=True)
            except Exception as e:  # noqa: BLE001
                log.warning("docker rm failed: %s", e)
        self.ports = self.ports_alloc.release_quietly(self.ports)
        unregister_cleanup(self)
