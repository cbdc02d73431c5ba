"""docker / qemu / remote providers, tested up to the boundary this machine allows.

Real here: the port lock (files + flock, two processes), the readiness probe against real local
HTTP servers, the signal cleanup (a real child process and SIGTERM), qemu-img and
qemu-system-x86_64 themselves when installed (a tiny disk with no OS: argv accepted, loopback-only
port forward, savevm/loadvm through the monitor). Stand-in: the Docker engine (none on this
machine) is replaced by ``FakeDockerEngine``, which records ``containers.run`` kwargs and serves
the published server port with a real HTTP server. Tests that need a real engine or OSWorld's
qcow2 skip and say so.
"""
from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from guigym.core.errors import ConfigError, EnvInfraError
from guigym.envs.desktop.providers import docker as dk
from guigym.envs.desktop.providers import qemu as qm
from guigym.envs.desktop.providers.remote import RemoteProvider

HAVE_QEMU = shutil.which("qemu-system-x86_64") is not None and shutil.which("qemu-img") is not None


# --------------------------------------------------------------------------- a real HTTP server


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):  # quiet
        pass

    def do_GET(self):
        srv = self.server
        srv.hits.append((self.path, self.headers.get("Authorization")))
        if srv.token and self.headers.get("Authorization") != f"Bearer {srv.token}":
            self.send_response(401)
            self.end_headers()
            return
        if time.monotonic() < srv.ready_at:
            self.send_response(503)
            self.end_headers()
            return
        body = b"Linux" if self.path == "/platform" else b"\x89PNG\r\n\x1a\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def serve(port: int = 0, delay: float = 0.0, token: str | None = None):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Handler)
    srv.ready_at = time.monotonic() + delay
    srv.token = token
    srv.hits = []
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- readiness


def test_wait_ready_returns_once_the_server_turns_ready():
    srv = serve(delay=0.6)
    try:
        waited = dk.wait_ready(f"http://127.0.0.1:{srv.server_port}", path="/screenshot", timeout=10, interval=0.1)
        assert 0.5 <= waited < 5
        assert {p for p, _ in srv.hits} == {"/screenshot"}
        assert len(srv.hits) >= 3  # it polled through the 503s
    finally:
        srv.shutdown()


def test_wait_ready_timeout_names_the_url_and_last_status():
    srv = serve(delay=999)
    url = f"http://127.0.0.1:{srv.server_port}"
    try:
        t0 = time.monotonic()
        with pytest.raises(EnvInfraError) as ei:
            dk.wait_ready(url, path="/platform", timeout=0.8, interval=0.1)
        assert time.monotonic() - t0 < 3
        assert f"{url}/platform" in str(ei.value) and "503" in str(ei.value)
    finally:
        srv.shutdown()
    port = free_port()  # nothing listens at all
    with pytest.raises(EnvInfraError, match=f"127.0.0.1:{port}/screenshot"):
        dk.wait_ready(f"http://127.0.0.1:{port}", timeout=0.5, interval=0.1)


def test_wait_ready_stops_at_once_when_the_vm_died():
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(EnvInfraError, match="stopped before it was ready: exit 3"):
        dk.wait_ready(f"http://127.0.0.1:{port}", timeout=30, interval=0.1, alive=lambda: "exit 3")
    assert time.monotonic() - t0 < 2


def test_wait_ready_sends_the_token():
    srv = serve(token="s3cret")
    url = f"http://127.0.0.1:{srv.server_port}"
    try:
        with pytest.raises(EnvInfraError, match="401"):
            dk.wait_ready(url, path="/platform", timeout=0.5, interval=0.1)
        dk.wait_ready(url, path="/platform", token="s3cret", timeout=5, interval=0.1)
        assert srv.hits[-1] == ("/platform", "Bearer s3cret")
    finally:
        srv.shutdown()


# --------------------------------------------------------------------------- ports


def test_port_allocator_gives_two_providers_different_ports_and_skips_bound_ones(tmp_path):
    start = free_port()
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", start))
    blocker.listen()
    try:
        a = dk.PortAllocator(tmp_path).allocate({"server": start, "vnc": start}, owner="a")
        b = dk.PortAllocator(tmp_path).allocate({"server": start}, owner="b")
    finally:
        blocker.close()
    assert start not in a.values() and start not in b.values()
    assert len({a["server"], a["vnc"], b["server"]}) == 3
    claims = dk.PortAllocator(tmp_path).claimed()
    assert {c["owner"] for c in claims.values()} == {"a", "b"}
    dk.PortAllocator(tmp_path).release(list(a.values()))
    assert set(dk.PortAllocator(tmp_path).claimed()) == {b["server"]}


def test_port_allocator_busy_list_is_respected(tmp_path):
    start = free_port()
    got = dk.PortAllocator(tmp_path).allocate({"server": start}, busy=[start, start + 1])
    assert got["server"] >= start + 2


def _alloc_in_child(state_dir, start, barrier, q):
    q.put(dk.PortAllocator(state_dir).allocate({"server": start}, owner=str(os.getpid()))["server"])
    barrier.wait(timeout=120)  # stay alive until every child allocated (a dead owner's claim is dropped)


def test_port_lock_across_processes(tmp_path):
    from dist_helpers import gather_from_children

    start = free_port()
    ports = gather_from_children(_alloc_in_child, (str(tmp_path), start), 3)
    assert len(set(ports)) == 3
    # the children are dead now: their claims are stale and dropped at the next allocation
    assert dk.PortAllocator(tmp_path).allocate({"server": start})["server"] == min(ports)


# --------------------------------------------------------------------------- kvm detection


def test_kvm_available_checks_read_write_access(tmp_path):
    dev = tmp_path / "kvm"
    assert not dk.kvm_available(str(dev))
    dev.write_text("")
    assert dk.kvm_available(str(dev))
    if os.geteuid() != 0:  # root may open anything
        dev.chmod(0o400)
        assert not dk.kvm_available(str(dev))


# --------------------------------------------------------------------------- docker kwargs


def test_container_kwargs_kvm_on(tmp_path):
    q = tmp_path / "Ubuntu.qcow2"
    q.write_bytes(b"")
    kw = dk.container_kwargs(qcow2=q, ports={"server": 5001, "chromium": 9300, "vnc": 8010, "vlc": 8090},
                             kvm=True, disk_size="32G", ram_size="4G", cpu_cores=4)
    assert kw["image"] == "happysixd/osworld-docker"
    assert kw["environment"] == {"DISK_SIZE": "32G", "RAM_SIZE": "4G", "CPU_CORES": "4"}
    assert kw["devices"] == ["/dev/kvm"]
    assert kw["cap_add"] == ["NET_ADMIN"]
    assert kw["volumes"] == {str(q.resolve()): {"bind": "/System.qcow2", "mode": "ro"}}
    assert kw["ports"] == {"5000/tcp": ("127.0.0.1", 5001), "9222/tcp": ("127.0.0.1", 9300),
                           "8006/tcp": ("127.0.0.1", 8010), "8080/tcp": ("127.0.0.1", 8090)}
    assert kw["detach"] is True


def test_container_kwargs_kvm_off_and_every_port_on_loopback(tmp_path):
    kw = dk.container_kwargs(qcow2=tmp_path / "x.qcow2", ports={"server": 5000}, kvm=False)
    assert kw["environment"]["KVM"] == "N" and kw["devices"] == []
    assert all(host == "127.0.0.1" for host, _ in kw["ports"].values())
    with pytest.raises(ConfigError, match="unknown roles"):
        dk.container_kwargs(qcow2="x", ports={"ssh": 22}, kvm=False)


class FakeDockerEngine:
    """Stand-in for a Docker engine: records ``containers.run`` kwargs and serves the published
    server port with a real HTTP server that becomes ready after ``delay`` s. ``api.containers``
    reports one other container publishing host port 5000."""

    def __init__(self, delay: float = 0.3, die: bool = False):
        self.delay, self.die = delay, die
        self.runs: list[dict] = []
        self.made: list[FakeContainer] = []
        self.containers = self
        self.api = _Api()

    def run(self, **kw):
        self.runs.append(kw)
        host, port = kw["ports"]["5000/tcp"]
        srv = None if self.die else serve(port=port, delay=self.delay)
        c = FakeContainer(srv, dead=self.die)
        self.made.append(c)
        return c


class FakeContainer:
    def __init__(self, srv, dead=False):
        self.srv = srv
        self.status = "exited" if dead else "running"
        self.calls: list[str] = []

    def reload(self):
        pass

    def logs(self, tail=20):
        return b"qemu: could not open /System.qcow2"

    def stop(self, timeout=10):
        self.calls.append("stop")
        if self.srv:
            self.srv.shutdown()
            self.srv.server_close()

    def remove(self, force=False):
        self.calls.append("remove")


class _Api:
    def containers(self, all=True):  # noqa: A002
        return [{"Ports": [{"PublicPort": 5000}]}]


def _engine(**kw):
    return FakeDockerEngine(**kw)


@pytest.fixture
def qcow2(tmp_path):
    q = tmp_path / "Ubuntu.qcow2"
    q.write_bytes(b"QFI\xfb")
    return q


def test_docker_provider_start_waits_for_readiness_then_cleans_up(tmp_path, qcow2):
    eng = _engine(delay=0.5)
    p = dk.DockerProvider(qcow2, kvm=False, docker_client=eng, port_state_dir=tmp_path / "ports",
                          ready_timeout=20)
    t0 = time.monotonic()
    client = p.start()
    assert time.monotonic() - t0 >= 0.4  # it waited for the 503s to end
    kw = eng.runs[0]
    assert kw["environment"]["KVM"] == "N" and kw["devices"] == []
    host, port = kw["ports"]["5000/tcp"]
    assert host == "127.0.0.1" and port != 5000  # 5000 is published by another container
    assert client is p.client and p.base_url == f"http://127.0.0.1:{port}"
    claimed = set(dk.PortAllocator(tmp_path / "ports").claimed())
    assert claimed == {hp for _, hp in kw["ports"].values()}
    p.stop()
    assert eng.made[0].calls == ["stop", "remove"]
    assert dk.PortAllocator(tmp_path / "ports").claimed() == {}
    assert p not in dk._live


def test_docker_provider_container_that_dies_fails_fast_and_is_removed(tmp_path, qcow2):
    eng = _engine(die=True)
    p = dk.DockerProvider(qcow2, kvm=True, docker_client=eng, port_state_dir=tmp_path / "ports",
                          ready_timeout=60)
    t0 = time.monotonic()
    with pytest.raises(EnvInfraError, match="could not open /System.qcow2"):
        p.start()
    assert time.monotonic() - t0 < 10
    assert eng.runs[0]["devices"] == ["/dev/kvm"] and "KVM" not in eng.runs[0]["environment"]
    assert eng.made[0].calls == ["stop", "remove"]
    assert dk.PortAllocator(tmp_path / "ports").claimed() == {}


def test_docker_provider_two_instances_get_different_ports(tmp_path, qcow2):
    eng = _engine(delay=0)
    ps = [dk.DockerProvider(qcow2, kvm=False, docker_client=eng, port_state_dir=tmp_path / "p") for _ in range(2)]
    try:
        for p in ps:
            p.start()
        a, b = (set(hp for _, hp in r["ports"].values()) for r in eng.runs)
        assert not a & b
    finally:
        for p in ps:
            p.stop()


def test_docker_provider_missing_qcow2_is_a_clear_error(tmp_path):
    p = dk.DockerProvider(tmp_path / "nope.qcow2", docker_client=_engine())
    with pytest.raises(EnvInfraError, match="nope.qcow2 does not exist"):
        p.start()


def test_docker_provider_real_engine():
    try:
        import docker

        docker.from_env().ping()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no Docker engine on this machine ({type(e).__name__}); the fake engine tests cover the kwargs")
    q = os.environ.get("GUIGYM_OSWORLD_QCOW2")
    if not q:
        pytest.skip("set GUIGYM_OSWORLD_QCOW2 to OSWorld's Ubuntu.qcow2 to boot the real docker VM")
    with dk.DockerProvider(q) as p:  # pragma: no cover - needs docker + the image
        client = p.start()
        assert client.platform() == "Linux"


# --------------------------------------------------------------------------- signal cleanup


def test_sigterm_stops_registered_providers(tmp_path):
    marker = tmp_path / "stopped"
    code = textwrap.dedent(f"""
        import os, signal, sys, time
        from guigym.envs.desktop.providers.docker import register_cleanup
        class P:
            def stop(self):
                open({str(marker)!r}, "a").write("stopped\\n")
        p = P()
        register_cleanup(p)
        print("ready", flush=True)
        time.sleep(30)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=20)
    finally:
        proc.kill()
    assert rc == -signal.SIGTERM  # still dies of the signal, as without the handler
    assert marker.read_text() == "stopped\n"  # stopped exactly once (not again at exit)


# --------------------------------------------------------------------------- qemu argv


def test_qemu_img_argv(tmp_path):
    argv = qm.qemu_img_create_argv("base.qcow2", tmp_path / "o.qcow2")
    assert argv == ["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(Path("base.qcow2").resolve()),
                    "-F", "qcow2", str(tmp_path / "o.qcow2")]


def test_qemu_argv_kvm_loopback_forwards_and_loadvm(tmp_path):
    ports = {"server": 15001, "chromium": 19300, "vlc": 18081}
    on = qm.qemu_argv(overlay=tmp_path / "o.qcow2", ports=ports, monitor=tmp_path / "m.sock", kvm=True,
                      memory="2G", cpus=2, loadvm="guigym-ready")
    off = qm.qemu_argv(overlay=tmp_path / "o.qcow2", ports=ports, monitor=tmp_path / "m.sock", kvm=False)
    assert on[0] == "qemu-system-x86_64"
    assert "-enable-kvm" in on and on[on.index("-cpu") + 1] == "host"
    assert "-enable-kvm" not in off and off[off.index("-cpu") + 1] == "max"
    net = on[on.index("-netdev") + 1]
    fwds = [f for f in net.split(",") if f.startswith("hostfwd=")]
    assert sorted(fwds) == sorted(["hostfwd=tcp:127.0.0.1:15001-:5000", "hostfwd=tcp:127.0.0.1:19300-:9222",
                                   "hostfwd=tcp:127.0.0.1:18081-:8080"])
    assert on[on.index("-drive") + 1] == f"file={tmp_path / 'o.qcow2'},if=virtio,format=qcow2"
    assert on[on.index("-loadvm") + 1] == "guigym-ready" and "-loadvm" not in off
    assert on[on.index("-m") + 1] == "2G" and on[on.index("-smp") + 1] == "2"
    assert on[on.index("-monitor") + 1] == f"unix:{tmp_path / 'm.sock'},server=on,wait=off"
    assert "-vnc" not in on and on[on.index("-display") + 1] == "none"
    vnc = qm.qemu_argv(overlay="o", ports={}, monitor="m", kvm=False, vnc=3)
    assert vnc[vnc.index("-vnc") + 1] == "127.0.0.1:3"


def test_qemu_provider_kvm_flag_follows_injected_detection(tmp_path, monkeypatch):
    monkeypatch.setattr(qm, "kvm_available", lambda: False)
    assert qm.QemuProvider(tmp_path / "b.qcow2", state_dir=tmp_path / "s").kvm is False
    monkeypatch.setattr(qm, "kvm_available", lambda: True)
    assert qm.QemuProvider(tmp_path / "b.qcow2", state_dir=tmp_path / "s").kvm is True


@pytest.mark.skipif(not HAVE_QEMU, reason="qemu-system-x86_64/qemu-img not installed "
                    "(apt install qemu-system-x86 qemu-utils)")
def test_real_qemu_overlay_loopback_forward_savevm_loadvm(tmp_path):
    """A real QEMU on a blank 16 MB disk (no OS, so the server never answers): the argv boots,
    the overlay leaves the base untouched, the forward listens on 127.0.0.1 only, the monitor
    saves and loads a VM state, readiness times out naming the url, stop cleans up."""
    base = tmp_path / "base.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(base), "16M"], check=True)
    base_bytes = base.read_bytes()
    p = qm.QemuProvider(base, state_dir=tmp_path / "env0", memory="64M", cpus=1,
                        port_state_dir=tmp_path / "ports", ready_timeout=1.0, kvm=dk.kvm_available())
    p._check_tools()
    p.state_dir.mkdir(parents=True)
    p.ports = p.ports_alloc.allocate(qm.HOST_PORT_STARTS, owner="test")
    try:
        p._new_overlay()
        info = json.loads(subprocess.run(["qemu-img", "info", "--output=json", "-U", str(p.overlay)],
                                         capture_output=True, text=True, check=True).stdout)
        assert info["backing-filename"] == str(base.resolve()) and info["backing-filename-format"] == "qcow2"
        p._launch(None)
        assert p._alive() is None
        port = p.ports["server"]
        deadline = time.monotonic() + 10  # the monitor socket comes up before the netdev
        while not _listening_addrs(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        listening = _listening_addrs(port)
        assert listening == {"127.0.0.1"}, listening  # only loopback
        with pytest.raises(EnvInfraError, match=f"127.0.0.1:{port}/screenshot"):
            p._wait_ready()
        p.save()
        assert qm.STATE_TAG in qm.image_snapshots(p.overlay)
        p.monitor.command(f"loadvm {qm.STATE_TAG}", timeout=60)
        with pytest.raises(EnvInfraError, match="loadvm nosuchtag"):
            p.monitor.command("loadvm nosuchtag")
    finally:
        p.stop()
    assert p.proc is None and not p.overlay.exists() and not p.monitor_path.exists()
    assert base.read_bytes() == base_bytes
    assert dk.PortAllocator(tmp_path / "ports").claimed() == {}


def _listening_addrs(port: int) -> set[str]:
    """Local addresses with a TCP listener on ``port`` (from /proc/net/tcp{,6})."""
    out = set()
    for name, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            addr, p = f[1].split(":")
            if int(p, 16) != port or f[3] != "0A":  # 0A = LISTEN
                continue
            if v6:
                out.add("::" if set(addr) == {"0"} else addr)
            else:
                out.add(socket.inet_ntoa(bytes.fromhex(addr)[::-1]))
    return out


def test_real_qemu_with_osworld_image():
    q = os.environ.get("GUIGYM_OSWORLD_QCOW2")
    if not q or not HAVE_QEMU:
        pytest.skip("set GUIGYM_OSWORLD_QCOW2 to OSWorld's Ubuntu.qcow2 (and install qemu) to boot the real VM")
    with qm.QemuProvider(q, env_name="pytest") as p:  # pragma: no cover - needs the 10 GB image
        client = p.start()
        assert client.platform() == "Linux"
        p.revert()
        assert p.last_reset == "loadvm"


# --------------------------------------------------------------------------- remote


def test_remote_provider_waits_for_platform_with_token(tmp_path):
    port = free_port()
    tok = tmp_path / "token"
    tok.write_text("t0k\n")
    p = RemoteProvider(f"http://127.0.0.1:{port}", token_file=tok, ready_timeout=10)
    assert p.token == "t0k"
    srv = None

    def later():
        nonlocal srv
        time.sleep(0.4)
        srv = serve(port=port, token="t0k")

    th = threading.Thread(target=later)
    th.start()
    try:
        p.start()
        th.join()
        assert ("/platform", "Bearer t0k") in srv.hits
    finally:
        p.stop()
        th.join()
        if srv:
            srv.shutdown()


def test_remote_provider_bad_config_and_wrong_token():
    with pytest.raises(ConfigError, match="url"):
        RemoteProvider("ftp://x")
    with pytest.raises(ConfigError, match="at most one"):
        RemoteProvider("http://127.0.0.1:1", token="a", token_file="b")
    srv = serve(token="right")
    try:
        p = RemoteProvider(f"http://127.0.0.1:{srv.server_port}", token="wrong", ready_timeout=0.5)
        with pytest.raises(EnvInfraError, match=r"/platform was not ready .*401"):
            p.start()
    finally:
        srv.shutdown()


# --------------------------------------------------------------------------- qemu CPU model fallback

# Refuses what a nested-virtualisation host refuses (KVM with -cpu host or max: QEMU aborts with
# "failed to set MSR 0x10a") and runs the real QEMU for anything else; logs each -cpu it got.
_NESTED_QEMU = """#!/bin/sh
cpu=default; kvm=no; prev=""
for a in "$@"; do
  [ "$prev" = "-cpu" ] && cpu="$a"
  [ "$a" = "-enable-kvm" ] && kvm=yes
  prev="$a"
done
echo "$kvm $cpu" >> "{calls}"
if [ "$kvm" = yes ] && {{ [ "$cpu" = host ] || [ "$cpu" = max ] || [ -n "{fail_all}" ]; }}; then
  echo "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69" >&2
  echo "qemu-system-x86_64: ../../target/i386/kvm/kvm.c:3183: kvm_buf_set_msrs: Assertion failed." >&2
  kill -ABRT $$
fi
[ -n "{fail_all}" ] && {{ echo "qemu-system-x86_64: TCG refused too" >&2; exit 1; }}
exec "{real}" "$@"
"""


def _nested_qemu(tmp_path: Path, fail_all: bool = False) -> tuple[str, Path]:
    calls = tmp_path / "calls.txt"
    wrapper = tmp_path / "qemu-nested"
    wrapper.write_text(_NESTED_QEMU.format(calls=calls, fail_all="1" if fail_all else "",
                                           real=shutil.which("qemu-system-x86_64") or "/nonexistent"))
    wrapper.chmod(0o755)
    return str(wrapper), calls


def test_qemu_argv_cpu_model_choice():
    base = dict(overlay="o", ports={}, monitor="m")
    assert qm.accel_candidates(True) == [(True, "host"), (True, "max"), (True, None), (False, "max")]
    assert qm.accel_candidates(False) == [(False, "max")]
    default = qm.qemu_argv(kvm=True, cpu=None, **base)
    assert "-enable-kvm" in default and "-cpu" not in default
    tcg = qm.qemu_argv(kvm=False, cpu="max", **base)
    assert "-enable-kvm" not in tcg and tcg[tcg.index("-cpu") + 1] == "max"


@pytest.mark.skipif(not HAVE_QEMU, reason="qemu-system-x86_64/qemu-img not installed "
                    "(apt install qemu-system-x86 qemu-utils)")
def test_qemu_falls_back_to_a_cpu_model_the_host_accepts(tmp_path):
    """KVM with host/max aborting (as on a nested host): the provider tries host, max, then QEMU's
    default model under KVM, runs with it, says so, and keeps it for the next boot."""
    wrapper, calls = _nested_qemu(tmp_path)
    base = tmp_path / "base.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(base), "16M"], check=True)
    kvm = dk.kvm_available()
    p = qm.QemuProvider(base, state_dir=tmp_path / "env0", memory="64M", cpus=1, port_state_dir=tmp_path / "ports",
                        kvm=kvm, binary=wrapper)
    p.state_dir.mkdir(parents=True)
    p.ports = p.ports_alloc.allocate(qm.HOST_PORT_STARTS, owner="test")
    try:
        p._new_overlay()
        p._launch(None)
        assert p._alive() is None
        tried = calls.read_text().split("\n")[:-1]
        if kvm:
            assert tried == ["yes host", "yes max", "yes default"]
            assert p.accel == (True, None) and p.accel_name == "kvm (default cpu)"
            assert len(p.accel_failures) == 2 and all("failed to set MSR 0x10a" in f for f in p.accel_failures)
        else:  # no KVM: TCG straight away
            assert tried == ["no max"] and p.accel == (False, "max")
        assert p.monitor.command("info status").startswith("VM status")
        p._kill()
        p._launch(None)  # the next boot reuses the choice without retrying the refused models
        assert calls.read_text().split("\n")[:-1] == tried + [tried[-1]]
    finally:
        p.stop()


def test_qemu_names_qemus_message_when_no_cpu_model_starts(tmp_path):
    wrapper, calls = _nested_qemu(tmp_path, fail_all=True)
    p = qm.QemuProvider(tmp_path / "base.qcow2", state_dir=tmp_path / "env0", kvm=True, binary=wrapper,
                        port_state_dir=tmp_path / "ports")
    p.state_dir.mkdir(parents=True)
    with pytest.raises(EnvInfraError, match=r"failed to set MSR 0x10a[\s\S]*TCG refused too") as e:
        p._launch(None)
    assert calls.read_text().split("\n")[:-1] == ["yes host", "yes max", "yes default", "no max"]
    assert "kvm -cpu host" in str(e.value) and "tcg -cpu max" in str(e.value)
    assert p.proc is None and p.accel is None


def test_qemu_envs_built_with_the_same_kwargs_get_their_own_state_dirs(tmp_path, monkeypatch):
    """N envs from one set of kwargs (eval --num-envs, Ray actors) must not share an overlay and
    a monitor socket: the default name is the first envN no running env holds."""
    monkeypatch.setenv("HOME", str(tmp_path))
    a, b = qm.QemuProvider(tmp_path / "b.qcow2"), qm.QemuProvider(tmp_path / "b.qcow2")
    a._lock_state_dir()
    b._lock_state_dir()
    try:
        assert a.state_dir != b.state_dir and a.overlay != b.overlay and a.monitor_path != b.monitor_path
        assert {a.state_dir.name, b.state_dir.name} == {"env0", "env1"}
    finally:
        a._unlock_state_dir()
    c = qm.QemuProvider(tmp_path / "b.qcow2")  # env0 is free again once a stopped
    c._lock_state_dir()
    assert c.state_dir.name == "env0"
    c._unlock_state_dir()
    b._unlock_state_dir()


def test_qemu_env_refuses_a_state_dir_another_env_holds(tmp_path):
    a = qm.QemuProvider(tmp_path / "b.qcow2", state_dir=tmp_path / "shared")
    b = qm.QemuProvider(tmp_path / "b.qcow2", state_dir=tmp_path / "shared")
    a._lock_state_dir()
    try:
        with pytest.raises(ConfigError, match="in use by another running qemu env"):
            b._lock_state_dir()
    finally:
        a._unlock_state_dir()
    b._lock_state_dir()  # free once the first env stopped
    b._unlock_state_dir()
