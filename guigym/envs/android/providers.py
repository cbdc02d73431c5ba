"""Android providers: where an env's device comes from and how it gets back to its initial state.

Three providers, registered in :data:`ANDROID_PROVIDERS` (``make_android_provider(name, **kw)``):

* ``adb``: a device that already exists -- a phone, a running emulator (``emulator-5554``) or a
  remote emulator (``host:port``, reached with ``adb connect``; android_world#222 asks for this).
  Nothing is started; ``reset`` loads an emulator snapshot when one is named.
* ``emulator``: starts one Android SDK emulator from the user's AVD per provider::

      emulator -avd NAME -no-window -no-snapshot-save -read-only -port P [-no-audio -no-boot-anim ...]

  ``-read-only`` lets N emulators share one AVD (android_env#201: parallel envs otherwise need AVD
  copies); ``-no-snapshot-save`` keeps the AVD's snapshots unchanged. The console port ``P`` is even
  and the adb port is ``P + 1`` (the emulator's own convention, serial ``emulator-P``); both are
  claimed in a file under an ``fcntl`` lock, so providers in different processes never pick the same
  pair. ``reset`` = ``adb -s emulator-P emu avd snapshot load NAME``. The adb server discovers
  emulators by itself only up to console port 5584 (16 emulators); beyond that the provider attaches
  ``127.0.0.1:P+1`` with ``adb connect`` (serial ``127.0.0.1:P+1``). :func:`acquire_all` boots N
  providers in parallel.
* ``docker``: an evaluation image (MobileRL's AndroidWorld / AndroidLab images, or a user-built
  AndroidWorld image) through the docker SDK; the container's adb port is published on 127.0.0.1
  only and reached with ``adb connect 127.0.0.1:PORT``. ``reset`` loads a snapshot or recreates the
  container.

Readiness everywhere is ``getprop sys.boot_completed`` == ``"1"`` polled until a deadline
(:func:`wait_boot_completed`), on an :class:`~guigym.envs.android.device.AndroidDevice` built by
``device_factory(serial)`` (default: ``guigym.envs.android.controller.AdbDevice``), so tests drive
readiness and reset with fakes. Life cycle: ``acquire() -> serial``, ``reset()`` any number of times,
``release()`` (idempotent; also at interpreter exit and on SIGTERM/SIGINT for started emulators and
containers). Failures to start or boot are :class:`EnvInfraError` (never scored); a missing SDK or
AVD is :class:`ConfigError` naming it.
"""
from __future__ import annotations

import abc
import logging
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, ContextManager, Mapping, Optional, Sequence, Union

from guigym.core.errors import ConfigError, EnvInfraError
from guigym.core.port_claims import locked_claims, port_free
from guigym.core.registry import Registry

if TYPE_CHECKING:
    from guigym.envs.android.device import AndroidDevice

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
#: the emulator accepts console ports 5554..5682 (even); adb is console + 1
CONSOLE_PORT_FIRST = 5554
CONSOLE_PORT_LAST = 5682
DEFAULT_SNAPSHOT = "default_boot"  # the emulator's quick-boot snapshot
#: the adb server finds emulators on its own only up to console port 5584 (16 emulators; adb's
#: ADB_LOCAL_TRANSPORT_MAX_PORT); beyond it the provider ``adb connect``s 127.0.0.1:<adb port>
ADB_AUTODETECT_LAST_CONSOLE = 5584

Runner = Callable[..., "subprocess.CompletedProcess[str]"]
DeviceFactory = Callable[[str], "AndroidDevice"]

__all__ = [
    "acquire_all", "ANDROID_PROVIDERS", "AndroidProvider", "AdbProvider", "EmulatorProvider", "DockerAndroidProvider",
    "ProviderHealth", "ConsolePortAllocator", "DockerImage", "DOCKER_IMAGES", "emulator_argv",
    "find_emulator_binary", "wait_boot_completed", "reset_to_snapshot", "docker_run_kwargs",
    "make_android_provider",
]


# --------------------------------------------------------------------------- readiness / reset


def wait_boot_completed(device: "AndroidDevice", *, timeout: float = 300.0, interval: float = 2.0,
                        alive: Optional[Callable[[], Optional[str]]] = None,
                        clock: Callable[[], float] = time.monotonic,
                        sleep: Callable[[float], None] = time.sleep) -> int:
    """Poll ``getprop sys.boot_completed`` on ``device`` until it reads ``"1"``.

    A poll that raises (device still offline, adb not yet attached) counts as "not booted".
    ``alive()`` is called after each unsuccessful poll; a string return (why the emulator or
    container died) stops the wait at once. ``clock``/``sleep`` are injectable for tests.

    Returns: the number of polls made (>= 1).
    Raises: :class:`EnvInfraError` naming the serial when ``timeout`` seconds pass first.
    """
    start = clock()
    polls = 0
    last = "no answer yet"
    while True:
        polls += 1
        try:
            value = (device.shell(["getprop", "sys.boot_completed"], timeout_s=10.0) or "").strip()
            if value == "1":
                return polls
            last = f"sys.boot_completed={value!r}"
        except Exception as e:  # noqa: BLE001 - any failure before boot means "not yet"
            last = f"{type(e).__name__}: {e}"
        if alive is not None:
            dead = alive()
            if dead:
                raise EnvInfraError(f"{device.serial}: stopped before it finished booting: {dead}")
        waited = clock() - start
        if waited >= timeout:
            raise EnvInfraError(f"{device.serial}: not booted after {timeout:g} s "
                                f"({polls} polls of getprop sys.boot_completed; last: {last})")
        sleep(max(0.0, min(interval, timeout - waited)))


def reset_to_snapshot(serial: str, snapshot: str, *, adb: str = "adb", runner: Runner = subprocess.run,
                      timeout: float = 120.0) -> list[str]:
    """``adb -s SERIAL emu avd snapshot load SNAPSHOT`` (emulators only); returns the argv run.

    The emulator console answers ``OK`` on success and ``KO: ...`` on failure; both come back on
    stdout, so the text is checked, not only the exit status.
    """
    argv = [adb, "-s", serial, "emu", "avd", "snapshot", "load", snapshot]
    try:
        out = runner(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise ConfigError(f"adb: program {adb!r} not found (install platform-tools or pip install adbutils)") from None
    except subprocess.TimeoutExpired:
        raise EnvInfraError(f"{serial}: snapshot load {snapshot!r} timed out after {timeout:g} s") from None
    text = f"{out.stdout or ''}{out.stderr or ''}".strip()
    if out.returncode != 0 or any(ln.strip().startswith("KO") for ln in text.splitlines()):
        raise EnvInfraError(f"{serial}: snapshot load {snapshot!r} failed: {text or f'exit {out.returncode}'}")
    return argv


def default_adb() -> str:
    """The adb program: ``adb`` on PATH (platform-tools, Debian's ``adb``), else the one bundled in
    adbutils' wheel, else plain ``"adb"`` (a missing program is reported when first run)."""
    found = shutil.which("adb")
    if found:
        return found
    try:
        import adbutils

        bundled = adbutils.adb_path()
    except Exception:  # noqa: BLE001 - adbutils absent, or no binary for this platform
        return "adb"
    return bundled if bundled and os.path.exists(bundled) else "adb"


def _default_device_factory(serial: str) -> "AndroidDevice":
    try:
        from guigym.envs.android.controller import AdbDevice
    except ImportError as e:
        raise EnvInfraError(f"the adb controller is unavailable ({e}); pip install 'guigym[android]'") from None
    return AdbDevice(serial)  # type: ignore[call-arg]


@dataclass
class ProviderHealth:
    """What :meth:`AndroidProvider.health` reports: ``ok`` plus a one-line ``detail``."""

    ok: bool
    detail: str
    serial: Optional[str] = None


# --------------------------------------------------------------------------- base


class AndroidProvider(abc.ABC):
    """One Android device for one env. Subclasses set ``name`` and implement the hooks.

    Args:
        device_factory: serial -> AndroidDevice used for readiness and reset (default: AdbDevice).
        boot_timeout: seconds :func:`wait_boot_completed` waits.
        poll_interval: seconds between boot polls.
        adb: the adb program (default :func:`default_adb`: ``adb`` on PATH, else adbutils' bundled one).
        runner: ``subprocess.run``-compatible callable for adb commands (tests record argv).
    """

    name: ClassVar[str] = ""

    def __init__(self, *, device_factory: Optional[DeviceFactory] = None, boot_timeout: float = 300.0,
                 poll_interval: float = 2.0, adb: Optional[str] = None, runner: Runner = subprocess.run,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.device_factory = device_factory or _default_device_factory
        self.boot_timeout = float(boot_timeout)
        self.poll_interval = float(poll_interval)
        self.adb = adb or default_adb()
        self.runner = runner
        self.sleep = sleep
        self.serial: Optional[str] = None
        self.device: Optional["AndroidDevice"] = None
        self.timings: dict[str, float] = {}

    # -- life cycle --------------------------------------------------------------------------------
    @abc.abstractmethod
    def acquire(self) -> str:
        """Make the device available and booted; return its adb serial (idempotent)."""

    @abc.abstractmethod
    def reset(self) -> str:
        """Return the device to its initial state; return the serial (rebuilds a dead device)."""

    @abc.abstractmethod
    def release(self) -> None:
        """Give everything back (stop what was started); idempotent, never raises."""

    def _alive(self) -> Optional[str]:
        """None while whatever hosts the device runs, else why it stopped (for readiness waits)."""
        return None

    def health(self) -> ProviderHealth:
        """A cheap liveness check: host process/container alive and ``sys.boot_completed`` == 1."""
        if self.serial is None or self.device is None:
            return ProviderHealth(False, "not acquired")
        dead = self._alive()
        if dead:
            return ProviderHealth(False, dead, self.serial)
        try:
            value = (self.device.shell(["getprop", "sys.boot_completed"], timeout_s=10.0) or "").strip()
        except Exception as e:  # noqa: BLE001
            return ProviderHealth(False, f"adb: {type(e).__name__}: {e}", self.serial)
        return ProviderHealth(value == "1", f"sys.boot_completed={value!r}", self.serial)

    # -- shared pieces -----------------------------------------------------------------------------
    def _wait_ready(self, serial: str) -> "AndroidDevice":
        device = self.device_factory(serial)
        t0 = time.monotonic()
        wait_boot_completed(device, timeout=self.boot_timeout, interval=self.poll_interval, alive=self._alive,
                            sleep=self.sleep)
        self.timings["boot_wait"] = time.monotonic() - t0
        return device

    def _adb(self, *args: str, timeout: float = 60.0) -> "subprocess.CompletedProcess[str]":
        argv = [self.adb, *args]
        try:
            return self.runner(argv, capture_output=True, text=True, timeout=timeout, check=False)
        except FileNotFoundError:
            raise ConfigError(f"adb: program {self.adb!r} not found "
                              "(install platform-tools or pip install adbutils)") from None
        except subprocess.TimeoutExpired:
            raise EnvInfraError(f"{' '.join(argv)} timed out after {timeout:g} s") from None

    def _adb_connect(self, address: str) -> None:
        """``adb connect host:port``; adb exits 0 even on failure, so its text is checked."""
        out = self._adb("connect", address)
        text = f"{out.stdout or ''}{out.stderr or ''}".strip()
        if out.returncode != 0 or not ("connected to" in text):  # "connected to" / "already connected to"
            raise EnvInfraError(f"adb connect {address} failed: {text or f'exit {out.returncode}'}")

    def _connect_until_ready(self, address: str) -> None:
        """``adb connect`` retried until the device's adb port answers, the host dies, or the boot deadline."""
        deadline = time.monotonic() + self.boot_timeout
        while True:
            try:
                self._adb_connect(address)
                return
            except EnvInfraError as e:
                dead = self._alive()
                if dead:
                    raise EnvInfraError(f"{address}: {dead}") from None
                if time.monotonic() >= deadline:
                    raise EnvInfraError(f"{address}: adb never connected within {self.boot_timeout:g} s "
                                        f"({e})") from None
            self.sleep(self.poll_interval)

    def close(self) -> None:
        self.release()

    def __enter__(self) -> "AndroidProvider":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


ANDROID_PROVIDERS: Registry[type[AndroidProvider]] = Registry("android provider")


def make_android_provider(name: str, **kwargs: Any) -> AndroidProvider:
    """Build (not acquire) the provider called ``name``; ConfigError naming ``provider`` otherwise."""
    try:
        cls = ANDROID_PROVIDERS.get(name)
    except KeyError:
        raise ConfigError(f"provider={name!r} is unknown; known: {', '.join(ANDROID_PROVIDERS.names())}") from None
    return cls(**kwargs)


def _is_network_serial(serial: str) -> bool:
    host, sep, port = serial.rpartition(":")
    return bool(sep and host and port.isdigit())


# --------------------------------------------------------------------------- adb


@ANDROID_PROVIDERS.register("adb")
class AdbProvider(AndroidProvider):
    """An existing device: ``serial`` is an adb serial (``emulator-5554``, a USB serial) or
    ``host:port`` of a remote emulator / network device (``adb connect`` on acquire, ``adb
    disconnect`` on release).

    ``snapshot``: for emulators, the snapshot ``reset`` loads (None: ``reset`` only re-checks
    readiness, as a physical phone cannot be rewound; task initialisers set the state).
    """

    name = "adb"

    def __init__(self, serial: str, *, snapshot: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not isinstance(serial, str) or not serial.strip() or any(c.isspace() for c in serial):
            raise ConfigError(f"serial: expected an adb serial or host:port, got {serial!r}")
        self.target = serial.strip()
        self.snapshot = snapshot
        self._connected = False

    def acquire(self) -> str:
        if self.serial is not None and self.device is not None:
            return self.serial
        if _is_network_serial(self.target):
            self._adb_connect(self.target)
            self._connected = True
        self.device = self._wait_ready(self.target)
        self.serial = self.target
        return self.serial

    def reset(self) -> str:
        if self.serial is None:
            return self.acquire()
        if self.snapshot:
            reset_to_snapshot(self.serial, self.snapshot, adb=self.adb, runner=self.runner)
        self.device = self._wait_ready(self.serial)
        return self.serial

    def release(self) -> None:
        if self._connected:
            try:
                self._adb("disconnect", self.target, timeout=20.0)
            except Exception as e:  # noqa: BLE001 - release never raises
                log.warning("adb disconnect %s failed: %s", self.target, e)
            self._connected = False
        self.serial, self.device = None, None


# --------------------------------------------------------------------------- emulator ports


def _default_port_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"guigym-android-ports-{os.getuid()}"


def _port_bindable(port: int) -> bool:
    return port_free(port, LOOPBACK)


class ConsolePortAllocator:
    """Emulator console ports (even, adb = console + 1), claimed in ``<state_dir>/claims.json``.

    Allocation takes an exclusive ``fcntl.flock`` on ``<state_dir>/ports.lock`` for the whole
    read-check-write, so concurrent processes serialise; a claim records the owner's pid and is
    dropped once that pid is dead. A pair is free when neither port is claimed and both can be
    bound on 127.0.0.1 (an emulator started outside guigym holds them).
    """

    def __init__(self, state_dir: Union[str, Path, None] = None, *, first: int = CONSOLE_PORT_FIRST,
                 last: int = CONSOLE_PORT_LAST, lock_timeout: float = 120.0,
                 port_free: Callable[[int], bool] = _port_bindable) -> None:
        if first % 2 or first < 1024 or last < first:
            raise ConfigError(f"console ports: first must be an even port >= 1024 and <= last, got {first}..{last}")
        self.state_dir = Path(state_dir) if state_dir is not None else _default_port_dir()
        self.first, self.last = first, last
        self.lock_timeout = lock_timeout
        self.port_free = port_free

    def _locked(self) -> ContextManager[dict[str, Any]]:
        return locked_claims(self.state_dir, self.lock_timeout)

    def allocate(self, owner: str = "") -> int:
        """Claim and return a free even console port (its adb port is the next one)."""
        with self._locked() as claims:
            for port in range(self.first, self.last + 1, 2):
                if str(port) in claims:
                    continue
                if not (self.port_free(port) and self.port_free(port + 1)):
                    continue
                claims[str(port)] = {"pid": os.getpid(), "owner": owner}
                return port
        raise EnvInfraError(f"no free emulator console port pair in {self.first}..{self.last} "
                            "(too many emulators running?)")

    def release(self, port: Optional[int]) -> None:
        if port is None:
            return
        with self._locked() as claims:
            claims.pop(str(port), None)

    def claimed(self) -> dict[int, dict[str, Any]]:
        with self._locked() as claims:
            return {int(p): dict(c) for p, c in claims.items()}


# --------------------------------------------------------------------------- emulator


def find_emulator_binary(explicit: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> str:
    """The SDK ``emulator`` program: ``explicit``, else ``$ANDROID_SDK_ROOT/emulator/emulator``
    (or ``$ANDROID_HOME``), else ``emulator`` on PATH. ConfigError naming what to set otherwise."""
    env = os.environ if env is None else env
    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return explicit
        found = shutil.which(explicit)
        if found:
            return found
        raise ConfigError(f"emulator: program {explicit!r} does not exist or is not executable")
    tried = []
    for var in ("ANDROID_SDK_ROOT", "ANDROID_HOME"):
        root = env.get(var)
        if root:
            cand = os.path.join(root, "emulator", "emulator")
            tried.append(cand)
            if os.path.isfile(cand) and os.access(cand, os.X_OK):
                return cand
    found = shutil.which("emulator")
    if found:
        return found
    where = f" (tried {', '.join(tried)})" if tried else ""
    raise ConfigError("emulator provider: the Android SDK 'emulator' program was not found"
                      f"{where}; install the SDK's emulator package and set ANDROID_SDK_ROOT")


def emulator_argv(avd: str, console_port: int, *, binary: str = "emulator", snapshot: Optional[str] = None,
                  window: bool = False, audio: bool = False, boot_anim: bool = False,
                  gpu: Optional[str] = "swiftshader_indirect", memory_mb: Optional[int] = None,
                  extra: Sequence[str] = ()) -> list[str]:
    """The argv starting one emulator from ``avd`` on ``console_port`` (even; adb on +1).

    Always ``-no-snapshot-save -read-only`` (the AVD is shared and never written).
    ``snapshot``: boot from this snapshot (``-snapshot NAME``); None: the quick-boot one.
    """
    if not isinstance(avd, str) or not avd or avd.startswith("-") or any(c.isspace() for c in avd):
        raise ConfigError(f"avd: expected an AVD name (see `emulator -list-avds`), got {avd!r}")
    if console_port % 2 or not CONSOLE_PORT_FIRST <= console_port <= CONSOLE_PORT_LAST:
        raise ConfigError(f"console port must be even in {CONSOLE_PORT_FIRST}..{CONSOLE_PORT_LAST}, got {console_port}")
    argv = [binary, "-avd", avd]
    if not window:
        argv.append("-no-window")
    argv += ["-no-snapshot-save", "-read-only", "-port", str(int(console_port))]
    if snapshot:
        argv += ["-snapshot", snapshot]
    if not audio:
        argv.append("-no-audio")
    if not boot_anim:
        argv.append("-no-boot-anim")
    if gpu:
        argv += ["-gpu", gpu]
    if memory_mb:
        argv += ["-memory", str(int(memory_mb))]
    return argv + list(extra)


def _register_cleanup(obj: Any) -> None:
    from guigym.envs.desktop.providers.docker import register_cleanup

    register_cleanup(obj)


def _unregister_cleanup(obj: Any) -> None:
    from guigym.envs.desktop.providers.docker import unregister_cleanup

    unregister_cleanup(obj)


@ANDROID_PROVIDERS.register("emulator")
class EmulatorProvider(AndroidProvider):
    """One SDK emulator started from the user's AVD (one provider per env; N envs share the AVD).

    Args:
        avd: the AVD name (``emulator -list-avds``).
        snapshot: the snapshot ``reset`` loads and the emulator boots from (default_boot: the
            quick-boot snapshot; create a clean one once with the emulator UI or ``adb emu avd
            snapshot save NAME`` on a non-read-only run).
        emulator_binary: path of ``emulator`` (default: from ANDROID_SDK_ROOT / PATH).
        port_state_dir: where console-port claims live (shared by all providers of a user).
        log_dir: where the emulator's output goes (default: a temp dir per provider).
        popen: ``subprocess.Popen``-compatible callable (tests).
    """

    name = "emulator"

    def __init__(self, avd: str, *, snapshot: str = DEFAULT_SNAPSHOT, emulator_binary: Optional[str] = None,
                 port_state_dir: Union[str, Path, None] = None, log_dir: Union[str, Path, None] = None,
                 window: bool = False, gpu: Optional[str] = "swiftshader_indirect", memory_mb: Optional[int] = None,
                 extra_args: Sequence[str] = (), popen: Callable[..., Any] = subprocess.Popen,
                 allocator: Optional[ConsolePortAllocator] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        emulator_argv(avd, CONSOLE_PORT_FIRST)  # validates the name early (ConfigError)
        self.avd, self.snapshot = avd, snapshot
        self.emulator_binary = emulator_binary
        self.ports = allocator or ConsolePortAllocator(port_state_dir)
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.window, self.gpu, self.memory_mb = window, gpu, memory_mb
        self.extra_args = list(extra_args)
        self.popen = popen
        self.proc: Any = None
        self.console_port: Optional[int] = None
        self.argv: list[str] = []
        self._log_file: Any = None

    @property
    def adb_port(self) -> Optional[int]:
        return None if self.console_port is None else self.console_port + 1

    def _alive(self) -> Optional[str]:
        if self.proc is None:
            return "emulator not started"
        code = self.proc.poll()
        if code is None:
            return None
        tail = ""
        if self._log_file is not None:
            try:
                tail = Path(self._log_file.name).read_text(errors="replace")[-600:]
            except OSError:
                pass
        return f"emulator exited with status {code}" + (f": {tail}" if tail else "")

    def acquire(self) -> str:
        if self.serial is not None and self.proc is not None and self.proc.poll() is None:
            return self.serial
        binary = find_emulator_binary(self.emulator_binary)
        t0 = time.monotonic()
        self.console_port = self.ports.allocate(owner=f"emulator:{self.avd}:{id(self)}")
        _register_cleanup(self)
        try:
            self.argv = emulator_argv(self.avd, self.console_port, binary=binary, snapshot=self.snapshot,
                                      window=self.window, gpu=self.gpu, memory_mb=self.memory_mb,
                                      extra=self.extra_args)
            log_dir = self.log_dir or Path(tempfile.mkdtemp(prefix="guigym-emulator-"))
            log_dir.mkdir(parents=True, exist_ok=True)
            self._log_file = open(log_dir / f"emulator-{self.console_port}.log", "w")
            try:
                self.proc = self.popen(self.argv, stdout=self._log_file, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
            except FileNotFoundError:
                raise ConfigError(f"emulator: program {binary!r} not found; set ANDROID_SDK_ROOT") from None
            if self.console_port <= ADB_AUTODETECT_LAST_CONSOLE:
                serial = f"emulator-{self.console_port}"
            else:  # adb does not scan this far: attach it ourselves once the port listens
                serial = f"{LOOPBACK}:{self.adb_port}"
                self._connect_until_ready(serial)
            self.device = self._wait_ready(serial)
            self.serial = serial
        except BaseException:
            self.release()
            raise
        self.timings["acquire"] = time.monotonic() - t0
        return self.serial

    def reset(self) -> str:
        if self.serial is None or self._alive():
            self.release()
            return self.acquire()
        reset_to_snapshot(self.serial, self.snapshot, adb=self.adb, runner=self.runner)
        self.device = self._wait_ready(self.serial)
        return self.serial

    def release(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            asked = False
            if self.serial:  # ask politely first: the console's kill lets the emulator clean up
                try:
                    asked = self._adb("-s", self.serial, "emu", "kill", timeout=15.0).returncode == 0
                except Exception as e:  # noqa: BLE001
                    log.debug("adb emu kill failed: %s", e)
            try:
                if not asked:
                    proc.terminate()  # our own child, by its handle
                proc.wait(timeout=20 if asked else 10)
            except Exception:  # noqa: BLE001
                try:
                    proc.kill()
                    proc.wait(timeout=10)
                except Exception as e:  # noqa: BLE001
                    log.warning("could not stop emulator pid %s: %s", getattr(proc, "pid", "?"), e)
        if self.serial and self.serial.startswith(LOOPBACK + ":"):
            try:
                self._adb("disconnect", self.serial, timeout=20.0)
            except Exception:  # noqa: BLE001
                pass
        if self._log_file is not None:
            try:
                self._log_file.close()
            except OSError:
                pass
            self._log_file = None
        try:
            self.ports.release(self.console_port)
        except Exception as e:  # noqa: BLE001
            log.warning("port release failed: %s", e)
        self.console_port = None
        self.serial, self.device = None, None
        try:
            _unregister_cleanup(self)
        except Exception:  # noqa: BLE001
            pass

    stop = release  # the exit/signal cleanup registry calls stop()


# --------------------------------------------------------------------------- docker


@dataclass(frozen=True)
class DockerImage:
    """An evaluation image: its name, the container's adb port and what its environment needs.

    ``environment`` values may contain ``{adb_port}``, ``{grpc_port}``, ``{token}``, ``{adb_key}``.
    ``extra_ports``: role -> container port published next to adb (also loopback only).
    """

    image: str
    adb_port: int = 5555
    environment: Mapping[str, str] = field(default_factory=dict)
    extra_ports: Mapping[str, int] = field(default_factory=dict)
    needs_adb_key: bool = False
    kvm: bool = True
    privileged: bool = False
    source: str = ""


#: known images. MobileRL's (THUDM/MobileRL inference README and AgentRL delegation): the
#: container's emulator listens for adb on ADB_PORT and trusts the adb key passed as ADB_KEY.
#: AndroidWorld's own Dockerfile builds ``android_world:latest`` (server on 5000; adb on 5555
#: only if the image's emulator listens on all interfaces).
DOCKER_IMAGES: dict[str, DockerImage] = {
    "mobilerl-androidworld": DockerImage(
        image="xuyifan0731/mobilerl-androidworld-eval", adb_port=5555,
        environment={"ADB_PORT": "{adb_port}", "GRPC_PORT": "{grpc_port}", "TOKEN": "{token}", "ADB_KEY": "{adb_key}"},
        needs_adb_key=True, source="THUDM/MobileRL inference/ (AgentRL android_world delegation)"),
    "mobilerl-androidlab": DockerImage(
        image="xuyifan0731/mobilerl-androidlab-eval", adb_port=5555,
        environment={"ADB_PORT": "{adb_port}", "GRPC_PORT": "{grpc_port}", "TOKEN": "{token}", "ADB_KEY": "{adb_key}"},
        needs_adb_key=True, source="THUDM/MobileRL README"),
    "androidworld": DockerImage(
        image="android_world:latest", adb_port=5555, extra_ports={"server": 5000}, kvm=True, privileged=True,
        source="google-research/android_world Dockerfile (build it yourself)"),
}
GRPC_CONTAINER_PORT = 8554


def docker_run_kwargs(spec: DockerImage, *, host_ports: Mapping[str, int], kvm: bool, adb_key: str = "",
                      token: str = "guigym", name: Optional[str] = None) -> dict[str, Any]:
    """Keyword arguments for ``docker.from_env().containers.run`` (docker SDK).

    ``host_ports``: role (``adb`` and each of ``spec.extra_ports``) -> host port; every port is
    published on 127.0.0.1 only (an adb port on the LAN is a remote shell on the device).
    """
    roles = {"adb": spec.adb_port, **dict(spec.extra_ports)}
    missing = sorted(set(roles) - set(host_ports))
    if missing:
        raise ConfigError(f"host_ports: missing roles {missing}")
    if spec.needs_adb_key and not adb_key:
        raise ConfigError(f"adb_key: image {spec.image} needs the host's adb private key (ADB_KEY or "
                          "~/.android/adbkey) so that its emulator accepts this adb")
    values = {"adb_port": str(spec.adb_port), "grpc_port": str(GRPC_CONTAINER_PORT), "token": token,
              "adb_key": adb_key}
    kw: dict[str, Any] = {
        "image": spec.image,
        "environment": {k: v.format(**values) for k, v in spec.environment.items()},
        "ports": {f"{roles[r]}/tcp": (LOOPBACK, int(host_ports[r])) for r in sorted(roles)},
        "devices": ["/dev/kvm:/dev/kvm:rwm"] if (kvm and spec.kvm) else [],
        "labels": {"guigym": "android", "guigym.pid": str(os.getpid())},
        "detach": True,
    }
    if spec.privileged:
        kw["privileged"] = True
    if name:
        kw["name"] = name
    return kw


def _docker_client() -> Any:
    try:
        import docker  # type: ignore[import-not-found]
    except ImportError:
        raise EnvInfraError("the docker android provider needs the docker SDK: pip install 'docker>=7'") from None
    try:
        return docker.from_env()
    except Exception as e:  # noqa: BLE001 - DockerException has no stable import path
        raise EnvInfraError(f"docker android provider: no Docker engine reachable ({e}); "
                            "start dockerd or set DOCKER_HOST") from None


def _read_adb_key() -> str:
    key = os.environ.get("ADB_KEY", "")
    if key:
        return key
    path = Path.home() / ".android" / "adbkey"
    try:
        return path.read_text().strip()
    except OSError:
        return ""


@ANDROID_PROVIDERS.register("docker")
class DockerAndroidProvider(AndroidProvider):
    """An emulator in a container from :data:`DOCKER_IMAGES` (``image=`` a key or a DockerImage).

    Args:
        image: ``"mobilerl-androidworld"``, ``"mobilerl-androidlab"``, ``"androidworld"`` or a DockerImage.
        snapshot: reset by loading this snapshot over adb (None: reset recreates the container).
        adb_key: the host adb private key for images that need it (default: ADB_KEY or ~/.android/adbkey).
        docker_client: an SDK client (tests pass a fake; default ``docker.from_env()``).
        port_state_dir: where host-port claims live (shared with the desktop providers).
    """

    name = "docker"

    def __init__(self, image: Union[str, DockerImage] = "mobilerl-androidworld", *, snapshot: Optional[str] = None,
                 adb_key: Optional[str] = None, token: str = "guigym", kvm: Optional[bool] = None,
                 docker_client: Any = None, port_state_dir: Union[str, Path, None] = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(image, str):
            if image not in DOCKER_IMAGES:
                raise ConfigError(f"image={image!r} is unknown; known: {', '.join(sorted(DOCKER_IMAGES))} "
                                  "(or pass a DockerImage)")
            image = DOCKER_IMAGES[image]
        self.spec: DockerImage = image
        self.snapshot = snapshot
        self._adb_key = adb_key
        self.token = token
        from guigym.envs.desktop.providers.docker import PortAllocator, kvm_available

        self.kvm = kvm_available() if kvm is None else bool(kvm)
        self.ports_alloc = PortAllocator(port_state_dir)
        self._docker = docker_client
        self.container: Any = None
        self.host_ports: dict[str, int] = {}
        self.run_kwargs: dict[str, Any] = {}

    def _alive(self) -> Optional[str]:
        if self.container is None:
            return "container not started"
        try:
            self.container.reload()
        except Exception as e:  # noqa: BLE001
            return f"container vanished ({e})"
        if getattr(self.container, "status", "") in ("exited", "dead"):
            return f"container {self.container.status}"
        return None

    def acquire(self) -> str:
        if self.serial is not None and self.container is not None:
            return self.serial
        if self._docker is None:
            self._docker = _docker_client()
        adb_key = self._adb_key if self._adb_key is not None else (_read_adb_key() if self.spec.needs_adb_key else "")
        starts = {"adb": 15555, **{r: 15000 + i for i, r in enumerate(sorted(self.spec.extra_ports))}}
        t0 = time.monotonic()
        self.host_ports = self.ports_alloc.allocate(starts, owner=f"android-docker:{id(self)}")
        _register_cleanup(self)
        try:
            self.run_kwargs = docker_run_kwargs(self.spec, host_ports=self.host_ports, kvm=self.kvm,
                                                adb_key=adb_key, token=self.token)
            try:
                self.container = self._docker.containers.run(**self.run_kwargs)
            except Exception as e:  # noqa: BLE001 - SDK errors -> infra errors
                raise EnvInfraError(f"docker run {self.spec.image} failed: {e}") from None
            address = f"{LOOPBACK}:{self.host_ports['adb']}"
            self._connect_until_ready(address)
            self.device = self._wait_ready(address)
            self.serial = address
        except BaseException:
            self.release()
            raise
        self.timings["acquire"] = time.monotonic() - t0
        return self.serial

    def reset(self) -> str:
        if self.serial is None or self._alive():
            self.release()
            return self.acquire()
        if self.snapshot:
            reset_to_snapshot(self.serial, self.snapshot, adb=self.adb, runner=self.runner)
            self.device = self._wait_ready(self.serial)
            return self.serial
        self.release()
        return self.acquire()

    def release(self) -> None:
        if self.serial:
            try:
                self._adb("disconnect", self.serial, timeout=20.0)
            except Exception:  # noqa: BLE001
                pass
        c, self.container = self.container, None
        if c is not None:
            for step in (lambda: c.stop(timeout=10), lambda: c.remove(force=True)):
                try:
                    step()
                except Exception as e:  # noqa: BLE001
                    log.warning("docker cleanup failed: %s", e)
        self.host_ports = self.ports_alloc.release_quietly(self.host_ports)
        self.serial, self.device = None, None
        try:
            _unregister_cleanup(self)
        except Exception:  # noqa: BLE001
            pass

    stop = release


# --------------------------------------------------------------------------- many at once


def acquire_all(providers: Sequence[AndroidProvider], max_workers: Optional[int] = None) -> list[str]:
    """Acquire ``providers`` concurrently (N emulators boot in parallel, not one after another);
    returns their serials in order. If any fails, all are released and the first error is raised."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max_workers or max(1, len(providers))) as pool:
        futures = [pool.submit(p.acquire) for p in providers]
        errors = [f.exception() for f in futures]
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        for p in providers:
            p.release()
        raise first
    return [f.result() for f in futures]
