"""``qemu`` provider: OSWorld's Ubuntu qcow2 run directly with ``qemu-system-x86_64``.

* One copy-on-write overlay per env (``qemu-img create -f qcow2 -b BASE -F qcow2 OVERLAY``):
  the base image is never written, so any number of envs share it.
* KVM when ``/dev/kvm`` is usable, TCG otherwise. The CPU model is the first of
  :data:`KVM_CPU_MODELS` (``host``, ``max``, QEMU's default) that QEMU accepts on this host,
  then TCG: on a nested-virtualisation host KVM refuses ``host`` and ``max`` (QEMU aborts with
  ``failed to set MSR 0x10a``: the outer hypervisor does not let the guest set
  IA32_ARCH_CAPABILITIES) while the default model runs. A candidate counts as started once
  its monitor answers ``info status``; the choice is logged, kept in ``provider.accel`` and
  reused by later boots; when nothing starts, :class:`EnvInfraError` quotes QEMU's messages.
* User-mode networking; the guest's server port (5000), Chromium (9222) and VLC (8080) are
  forwarded to loopback ports allocated under the shared port lock
  (``hostfwd=tcp:127.0.0.1:HOST-:GUEST``); nothing listens on other interfaces.
* An HMP monitor on a unix socket in the env's state dir (mode 0700).
* Reset: with ``save_state`` (default) the first boot is followed by ``savevm`` into the overlay;
  ``revert()`` is then ``loadvm`` of that state (the VM resumes where it was saved, no reboot),
  and a later ``start()`` with ``keep_overlay`` boots straight into it with ``-loadvm``.
  Without a saved state ``revert()`` discards the overlay and cold-boots a new one. A snapshot
  has to live in the top image: QEMU does not load internal snapshots of a backing file through
  an overlay, so a state saved inside the base image itself cannot be used.
"""
from __future__ import annotations

import fcntl
import logging
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from guigym.core.errors import ConfigError, EnvInfraError
from guigym.envs.desktop.providers import PROVIDERS
from guigym.envs.desktop.providers.base import Provider
from guigym.envs.desktop.providers.docker import (
    LOOPBACK, PortAllocator, kvm_available, register_cleanup, unregister_cleanup, wait_ready,
)

log = logging.getLogger(__name__)

#: guest port per role in OSWorld's Ubuntu image
GUEST_PORTS: dict[str, int] = {"server": 5000, "chromium": 9222, "vlc": 8080}
HOST_PORT_STARTS: dict[str, int] = {"server": 15000, "chromium": 19222, "vlc": 18080}
STATE_TAG = "guigym-ready"

#: CPU models tried in order under KVM (None = no ``-cpu``: QEMU's default model), before TCG
KVM_CPU_MODELS: tuple[Optional[str], ...] = ("host", "max", None)
#: TCG's CPU model (every feature QEMU can emulate)
TCG_CPU_MODEL = "max"
_CPU_DEFAULT = "auto"

__all__ = ["QemuProvider", "qemu_img_create_argv", "qemu_argv", "Monitor", "image_snapshots", "accel_candidates",
           "KVM_CPU_MODELS"]


def accel_candidates(kvm: bool) -> list[tuple[bool, Optional[str]]]:
    """(use KVM, CPU model) pairs to try in order: KVM with each of :data:`KVM_CPU_MODELS`, then
    TCG; without KVM only TCG."""
    return ([(True, m) for m in KVM_CPU_MODELS] if kvm else []) + [(False, TCG_CPU_MODEL)]


def describe_accel(kvm: bool, cpu: Optional[str]) -> str:
    """``"kvm -cpu host"``, ``"kvm (default cpu)"``, ``"tcg -cpu max"``."""
    return f"{'kvm' if kvm else 'tcg'} " + (f"-cpu {cpu}" if cpu else "(default cpu)")


def qemu_img_create_argv(base: Union[str, Path], overlay: Union[str, Path], qemu_img: str = "qemu-img") -> list[str]:
    """``qemu-img`` argv creating a qcow2 overlay on ``base`` (absolute path, format pinned so
    QEMU never probes it)."""
    return [qemu_img, "create", "-q", "-f", "qcow2", "-b", str(Path(base).resolve()), "-F", "qcow2", str(overlay)]


def qemu_argv(*, overlay: Union[str, Path], ports: dict[str, int], monitor: Union[str, Path], kvm: bool,
              memory: str = "4G", cpus: int = 4, loadvm: Optional[str] = None, vnc: Optional[int] = None,
              name: str = "guigym", binary: str = "qemu-system-x86_64",
              extra: Sequence[str] = (), cpu: Optional[str] = _CPU_DEFAULT) -> list[str]:
    """The ``qemu-system-x86_64`` argv for one env.

    ``ports``: role -> host port; each role's guest port (:data:`GUEST_PORTS`) is forwarded
    from 127.0.0.1 only. ``vnc``: a VNC display number on 127.0.0.1 (None: no display at all).
    ``loadvm``: start from this saved state of the overlay. ``cpu``: the ``-cpu`` model (None:
    QEMU's default, no ``-cpu``; by default ``host`` with KVM, ``max`` without).
    """
    unknown = set(ports) - set(GUEST_PORTS)
    if unknown:
        raise ConfigError(f"ports: unknown roles {sorted(unknown)}; known: {sorted(GUEST_PORTS)}")
    fwd = ",".join(f"hostfwd=tcp:{LOOPBACK}:{int(h)}-:{GUEST_PORTS[r]}" for r, h in sorted(ports.items()))
    argv = [binary, "-name", name, "-machine", "q35"]
    if cpu == _CPU_DEFAULT:
        cpu = "host" if kvm else TCG_CPU_MODEL
    argv += ["-enable-kvm"] if kvm else []
    argv += ["-cpu", cpu] if cpu else []
    argv += [
        "-m", str(memory), "-smp", str(int(cpus)),
        "-drive", f"file={overlay},if=virtio,format=qcow2",
        "-netdev", f"user,id=net0,{fwd}" if fwd else "user,id=net0",
        "-device", "virtio-net-pci,netdev=net0",
        "-monitor", f"unix:{monitor},server=on,wait=off",
        "-serial", "null", "-parallel", "none",
    ]
    argv += ["-display", "none"] + (["-vnc", f"{LOOPBACK}:{int(vnc)}"] if vnc is not None else [])
    if loadvm:
        argv += ["-loadvm", loadvm]
    return argv + list(extra)


def image_snapshots(image: Union[str, Path], qemu_img: str = "qemu-img") -> list[str]:
    """Tags of the internal snapshots of a qcow2 image (``qemu-img snapshot -l``)."""
    try:
        out = subprocess.run([qemu_img, "snapshot", "-l", "-U", str(image)], capture_output=True,
                             text=True, timeout=60, check=False)
    except FileNotFoundError:
        raise EnvInfraError(f"{qemu_img} not found (apt install qemu-utils)") from None
    tags = []
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].isdigit():
            tags.append(parts[1])
    return tags


class Monitor:
    """A minimal QEMU HMP client over the monitor's unix socket."""

    PROMPT = b"(qemu) "

    def __init__(self, path: Union[str, Path], timeout: float = 10.0) -> None:
        self.path = str(path)
        self.timeout = timeout

    def command(self, line: str, timeout: Optional[float] = None) -> str:
        """Send one HMP command and return its output; raise when QEMU reports an error."""
        deadline = time.monotonic() + (timeout or self.timeout)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                s.connect(self.path)
                self._read_prompt(s, deadline)
                s.sendall(line.encode() + b"\n")
                out = self._read_prompt(s, deadline)
            except (OSError, socket.timeout) as e:
                raise EnvInfraError(f"QEMU monitor {self.path}: {line!r} failed ({e})") from None
        text = out.decode("utf-8", "replace").replace("\r", "")
        lines = [ln for ln in text.split("\n") if ln.strip() and line not in ln]  # drop the echo
        result = "\n".join(lines).strip()
        if "Error" in result or result.lower().startswith("error"):
            raise EnvInfraError(f"QEMU monitor: {line!r} failed: {result}")
        return result

    def _read_prompt(self, s: socket.socket, deadline: float) -> bytes:
        buf = b""
        while not buf.endswith(self.PROMPT):
            s.settimeout(max(0.1, deadline - time.monotonic()))
            chunk = s.recv(65536)
            if not chunk:
                raise OSError("monitor closed the connection")
            buf += chunk
            if time.monotonic() > deadline:
                raise socket.timeout("no prompt")
        return buf[: -len(self.PROMPT)]


@PROVIDERS.register("qemu")
class QemuProvider(Provider):
    """OSWorld's Ubuntu qcow2 under QEMU, one overlay per env.

    Args:
        base: the qcow2 (never written).
        state_dir: this env's folder (overlay, monitor socket, log); default
            ``~/.cache/guigym/qemu/<env_name>``. A running env holds an ``flock`` on
            ``<state_dir>/.lock``: a second env given the same folder gets a ConfigError instead
            of sharing the overlay and the monitor socket.
        env_name: distinguishes envs sharing a base (the state dir name); None (default): the
            first of ``env0``, ``env1``, ... that no running env holds, so N envs built with the
            same kwargs (``guigym eval --num-envs N``, Ray actors) get one folder each.
        memory/cpus: guest RAM (QEMU size string) and vCPUs.
        kvm: use KVM (None: when ``/dev/kvm`` is usable).
        save_state: ``savevm`` after the first boot so ``revert`` is a ``loadvm``.
        keep_overlay: keep the overlay (and its saved state) after ``stop`` for the next start.
        token: bearer token of the guest's server (None: a stock, token-less OSWorld VM).
        vnc: VNC display number on 127.0.0.1 (None: headless).
    """

    name = "qemu"
    vm = True

    def __init__(self, base: Union[str, Path], *, state_dir: Union[str, Path, None] = None,
                 env_name: Optional[str] = None, memory: str = "4G", cpus: int = 4, kvm: Optional[bool] = None,
                 save_state: bool = True, keep_overlay: bool = False, token: Optional[str] = None,
                 ready_timeout: float = 300.0, vnc: Optional[int] = None, binary: str = "qemu-system-x86_64",
                 qemu_img: str = "qemu-img", port_state_dir: Union[str, Path, None] = None,
                 ready_path: str = "/screenshot", client_timeout: float = 60.0,
                 extra_args: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base = Path(base)
        self._explicit_dir = state_dir is not None or env_name is not None
        self.env_name = env_name or "env0"
        self.state_dir = Path(state_dir) if state_dir is not None else (
            Path.home() / ".cache" / "guigym" / "qemu" / self.env_name)
        self._dir_lock: Optional[int] = None  # fd holding the state dir's flock while running
        self.memory, self.cpus = memory, cpus
        self.kvm = kvm_available() if kvm is None else bool(kvm)
        self.save_state, self.keep_overlay = save_state, keep_overlay
        self.token = token
        self.ready_timeout = ready_timeout
        self.vnc = vnc
        self.binary, self.qemu_img = binary, qemu_img
        self.ports_alloc = PortAllocator(port_state_dir)
        self.ready_path = ready_path
        self.client_timeout = client_timeout
        self.extra_args = list(extra_args)
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.ports: dict[str, int] = {}
        self.has_state = False
        self.last_reset: str = ""  # "loadvm" | "cold" after revert()
        #: (use KVM, CPU model) QEMU started with; chosen by the first boot, reused afterwards
        self.accel: Optional[tuple[bool, Optional[str]]] = None
        self.accel_name = ""  # e.g. "kvm (default cpu)"
        self.accel_failures: list[str] = []  # why the candidates before it were refused

    # ---- paths -------------------------------------------------------------------------------
    @property
    def overlay(self) -> Path:
        return self.state_dir / "overlay.qcow2"

    @property
    def monitor_path(self) -> Path:
        return self.state_dir / "monitor.sock"

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.ports['server']}"

    @property
    def monitor(self) -> Monitor:
        return Monitor(self.monitor_path)

    # ---- pieces ------------------------------------------------------------------------------
    def _lock_state_dir(self) -> None:
        """Hold ``<state_dir>/.lock`` for as long as this env runs (see ``state_dir``)."""
        if self._dir_lock is not None:
            return
        for k in range(1 if self._explicit_dir else 4096):
            if not self._explicit_dir:
                self.env_name = f"env{k}"
                self.state_dir = self.state_dir.parent / self.env_name
            self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.state_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self._dir_lock = fd
            return
        raise ConfigError(f"state_dir {self.state_dir} is in use by another running qemu env; give each env "
                          "its own state_dir or env_name")

    def _unlock_state_dir(self) -> None:
        fd, self._dir_lock = self._dir_lock, None
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the flock

    def _check_tools(self) -> None:
        for tool in (self.binary, self.qemu_img):
            if shutil.which(tool) is None:
                raise EnvInfraError(f"qemu provider: {tool} not found (apt install qemu-system-x86 qemu-utils)")
        if not self.base.is_file():
            raise EnvInfraError(f"qemu provider: base image {self.base} does not exist "
                                "(download OSWorld's Ubuntu.qcow2 first)")

    def _new_overlay(self) -> None:
        self.overlay.unlink(missing_ok=True)
        argv = qemu_img_create_argv(self.base, self.overlay, self.qemu_img)
        res = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if res.returncode != 0:
            raise EnvInfraError(f"{' '.join(argv)} failed: {res.stderr.strip()}")
        self.has_state = False

    def _alive(self) -> Optional[str]:
        if self.proc is None:
            return "not started"
        if self.proc.poll() is not None:
            return f"qemu exited with {self.proc.returncode}: {self._log_tail()}"
        return None

    def _log_tail(self) -> str:
        try:
            return (self.state_dir / "qemu.log").read_text(errors="replace")[-800:]
        except OSError:
            return ""

    def _launch(self, loadvm: Optional[str]) -> None:
        """Start QEMU with the first (KVM, CPU model) candidate this host accepts (the one chosen
        before, once there is one: a saved VM state belongs to its CPU model)."""
        candidates = [self.accel] if self.accel is not None else accel_candidates(self.kvm)
        failures: list[str] = []
        for kvm, cpu in candidates:
            why = self._launch_one(loadvm, kvm, cpu)
            if why is None:
                if self.accel is None:
                    level = logging.WARNING if failures else logging.INFO
                    log.log(level, "qemu %s: running with %s%s", self.env_name, describe_accel(kvm, cpu),
                            f" (refused: {'; '.join(failures)})" if failures else "")
                self.accel, self.accel_name, self.accel_failures = (kvm, cpu), describe_accel(kvm, cpu), failures
                return
            failures.append(f"{describe_accel(kvm, cpu)}: {why}")
            log.warning("qemu %s: %s did not start (%s)", self.env_name, describe_accel(kvm, cpu), why)
        raise EnvInfraError("qemu did not start with any CPU model: " + " | ".join(failures))

    def _launch_one(self, loadvm: Optional[str], kvm: bool, cpu: Optional[str]) -> Optional[str]:
        """Start QEMU once; None when its monitor answers, else why it died (QEMU's own output).
        A QEMU that stays alive but silent raises EnvInfraError (not a CPU model problem)."""
        self.monitor_path.unlink(missing_ok=True)
        argv = qemu_argv(overlay=self.overlay, ports=self.ports, monitor=self.monitor_path, kvm=kvm,
                         memory=self.memory, cpus=self.cpus, loadvm=loadvm, vnc=self.vnc,
                         name=f"guigym-{self.env_name}", binary=self.binary, extra=self.extra_args, cpu=cpu)
        log.info("qemu: %s", " ".join(argv))
        with open(self.state_dir / "qemu.log", "wb") as logf:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + 30
        last = "no monitor socket yet"
        while True:
            # the monitor socket appears early; KVM may still refuse the CPU at the first vCPU
            # reset, so QEMU counts as started only once the monitor answers
            if self.monitor_path.exists():
                try:
                    Monitor(self.monitor_path, timeout=5).command("info status", timeout=5)
                    return None
                except EnvInfraError as e:
                    last = str(e)
            dead = self._alive()
            if dead:
                self.proc = None
                self.monitor_path.unlink(missing_ok=True)
                return dead
            if time.monotonic() > deadline:
                self._kill()
                raise EnvInfraError(f"qemu ({describe_accel(kvm, cpu)}) started but its monitor "
                                    f"{self.monitor_path} did not answer within 30 s ({last})")
            time.sleep(0.05)

    def _wait_ready(self) -> None:
        wait_ready(self.base_url, path=self.ready_path, token=self.token, timeout=self.ready_timeout,
                   alive=self._alive)

    def _make_client(self) -> Any:
        from guigym.envs.desktop.client import DesktopClient

        self._client = DesktopClient(self.base_url, token=self.token, timeout=self.client_timeout)
        return self._client

    # ---- Provider API ------------------------------------------------------------------------
    def start(self) -> Any:
        """Boot (or resume the saved state) and return a DesktopClient once the server answers."""
        if self._client is not None and self._alive() is None:
            return self._client
        t0 = time.monotonic()
        self._check_tools()
        self._lock_state_dir()
        self.ports = self.ports_alloc.allocate(HOST_PORT_STARTS, owner=f"qemu:{self.env_name}")
        register_cleanup(self)
        try:
            resume = (self.keep_overlay and self.overlay.is_file()
                      and STATE_TAG in image_snapshots(self.overlay, self.qemu_img))
            if not resume:
                self._new_overlay()
            self.has_state = resume
            self._launch(STATE_TAG if resume else None)
            self._wait_ready()
            if self.save_state and not self.has_state:
                self.save()
        except BaseException:
            self.stop()
            raise
        self.timings = {"start": time.monotonic() - t0}
        return self._make_client()

    def save(self, tag: str = STATE_TAG) -> None:
        """``savevm`` the running VM (disk and RAM) into the overlay."""
        self.monitor.command(f"savevm {tag}", timeout=600)
        self.has_state = True

    def revert(self) -> Any:
        """Back to the saved state (``loadvm``, no reboot) or, without one, a fresh overlay and
        a cold boot. Returns the DesktopClient."""
        if self.proc is None:
            return self.start()
        t0 = time.monotonic()
        if self.has_state and self._alive() is None:
            self.monitor.command(f"loadvm {STATE_TAG}", timeout=600)
            self.last_reset = "loadvm"
            self._wait_ready()
            self.timings = {"revert": time.monotonic() - t0}
            return self._client or self._make_client()
        self._kill()
        self._new_overlay()
        self._launch(None)
        self._wait_ready()
        if self.save_state:
            self.save()
        self.last_reset = "cold"
        self.timings = {"revert": time.monotonic() - t0}
        return self._client or self._make_client()

    def _kill(self) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            try:
                Monitor(self.monitor_path, timeout=2).command("quit", timeout=2)
            except EnvInfraError:
                pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.monitor_path.unlink(missing_ok=True)

    def stop(self) -> None:
        self._drop_client()
        self._kill()
        if not self.keep_overlay:
            self.overlay.unlink(missing_ok=True)
            self.has_state = False
        self.ports = self.ports_alloc.release_quietly(self.ports)
        self._unlock_state_dir()
        unregister_cleanup(self)
