"""Android providers up to the boundary: exact argv, console-port allocation across processes,
boot-readiness polling, snapshot reset, loopback-only docker ports; real emulator / Docker when present."""
from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any, Optional

import pytest

from guigym.core.errors import ConfigError, EnvInfraError
from guigym.envs.android import providers as P
_real_default_adb = P.default_adb


# --------------------------------------------------------------------------- fakes


class BootingDevice:
    """A device whose ``sys.boot_completed`` turns "1" on poll number ``boot_after`` (None: never)."""

    def __init__(self, serial: str = "emulator-5554", boot_after: Optional[int] = 3, offline_polls: int = 0) -> None:
        self.serial = serial
        self.boot_after = boot_after
        self.offline_polls = offline_polls
        self.polls = 0
        self.calls: list[list[str]] = []

    def shell(self, argv, timeout_s: float = 20.0) -> str:
        self.calls.append(list(argv))
        assert list(argv) == ["getprop", "sys.boot_completed"]
        self.polls += 1
        if self.polls <= self.offline_polls:
            raise RuntimeError("device offline")
        if self.boot_after is not None and self.polls >= self.boot_after:
            return "1\n"
        return "\n"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


@pytest.fixture(autouse=True)
def _adb_named_adb(monkeypatch):
    """The recorded argv below start with plain "adb" whatever adb this machine has."""
    monkeypatch.setattr(P, "default_adb", lambda: "adb")


def test_default_adb_prefers_path_then_the_bundled_binary(monkeypatch, tmp_path):
    real = _real_default_adb
    fake = tmp_path / "adb"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert real() == str(fake)
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    adbutils = pytest.importorskip("adbutils", reason="adbutils is not installed")
    bundled = adbutils.adb_path()
    assert real() == (bundled if os.path.exists(bundled) else "adb")


class Runner:
    """Records adb argv; answers by the first matching prefix."""

    def __init__(self, answers: Optional[dict[tuple[str, ...], tuple[int, str]]] = None) -> None:
        self.calls: list[list[str]] = []
        self.answers = answers or {}

    def __call__(self, argv, **kw: Any) -> subprocess.CompletedProcess:
        self.calls.append(list(argv))
        for prefix, (code, out) in self.answers.items():
            if tuple(argv[: len(prefix)]) == prefix:
                return subprocess.CompletedProcess(argv, code, out, "")
        return subprocess.CompletedProcess(argv, 0, "OK\n", "")


class FakeProc:
    def __init__(self, argv, dies_with: Optional[int] = None, **kw: Any) -> None:
        self.argv = list(argv)
        self.kw = kw
        self.code = dies_with
        self.pid = 424242

    def poll(self) -> Optional[int]:
        return self.code

    def wait(self, timeout: Optional[float] = None) -> int:
        self.code = 0 if self.code is None else self.code
        return self.code

    def kill(self) -> None:
        self.code = -9

    def terminate(self) -> None:
        self.terminated = True
        self.code = -15


def _allocator(tmp_path: Path, busy: frozenset[int] = frozenset(), first: int = P.CONSOLE_PORT_FIRST
               ) -> P.ConsolePortAllocator:
    return P.ConsolePortAllocator(tmp_path / "ports", port_free=lambda p: p not in busy, first=first)


# --------------------------------------------------------------------------- readiness


def test_readiness_polls_until_boot_completed_after_k_polls():
    dev, clk = BootingDevice(boot_after=4), FakeClock()
    polls = P.wait_boot_completed(dev, timeout=60, interval=2.0, clock=clk.clock, sleep=clk.sleep)
    assert polls == 4 and dev.polls == 4
    assert clk.sleeps == [2.0, 2.0, 2.0]  # slept between polls only


def test_readiness_counts_offline_device_as_not_booted():
    dev, clk = BootingDevice(boot_after=3, offline_polls=2), FakeClock()
    assert P.wait_boot_completed(dev, timeout=60, interval=1.0, clock=clk.clock, sleep=clk.sleep) == 3


def test_readiness_deadline_raises_env_infra_error_naming_serial():
    dev, clk = BootingDevice(serial="emulator-5560", boot_after=None), FakeClock()
    with pytest.raises(EnvInfraError, match=r"emulator-5560: not booted after 10 s") as ei:
        P.wait_boot_completed(dev, timeout=10, interval=3.0, clock=clk.clock, sleep=clk.sleep)
    assert "sys.boot_completed=''" in str(ei.value)
    assert clk.now == pytest.approx(10.0)  # the last sleep is cut to the deadline
    assert dev.polls == 5  # t = 0, 3, 6, 9, 10


def test_readiness_stops_at_once_when_host_died():
    dev, clk = BootingDevice(boot_after=None), FakeClock()
    with pytest.raises(EnvInfraError, match="stopped before it finished booting: emulator exited"):
        P.wait_boot_completed(dev, timeout=300, clock=clk.clock, sleep=clk.sleep,
                              alive=lambda: "emulator exited with status 1")
    assert dev.polls == 1


# --------------------------------------------------------------------------- argv


def test_emulator_argv_exact():
    argv = P.emulator_argv("Pixel_6_API_33", 5556, binary="/sdk/emulator/emulator")
    assert argv == ["/sdk/emulator/emulator", "-avd", "Pixel_6_API_33", "-no-window", "-no-snapshot-save",
                    "-read-only", "-port", "5556", "-no-audio", "-no-boot-anim", "-gpu", "swiftshader_indirect"]
    argv = P.emulator_argv("a", 5554, snapshot="clean", gpu=None, memory_mb=4096, extra=["-no-metrics"])
    assert argv == ["emulator", "-avd", "a", "-no-window", "-no-snapshot-save", "-read-only", "-port", "5554",
                    "-snapshot", "clean", "-no-audio", "-no-boot-anim", "-memory", "4096", "-no-metrics"]


@pytest.mark.parametrize("avd,port,field", [("", 5554, "avd"), ("-wipe-data", 5554, "avd"), ("a b", 5554, "avd"),
                                            ("ok", 5555, "console port"), ("ok", 5700, "console port")])
def test_emulator_argv_rejects_bad_input(avd, port, field):
    with pytest.raises(ConfigError, match=field):
        P.emulator_argv(avd, port)


def test_reset_to_snapshot_argv_and_console_ko():
    r = Runner()
    assert P.reset_to_snapshot("emulator-5556", "clean", runner=r) == \
        ["adb", "-s", "emulator-5556", "emu", "avd", "snapshot", "load", "clean"]
    assert r.calls == [["adb", "-s", "emulator-5556", "emu", "avd", "snapshot", "load", "clean"]]
    bad = Runner({("adb",): (0, "KO: snapshot 'clean' not found\n")})
    with pytest.raises(EnvInfraError, match="snapshot load 'clean' failed: KO"):
        P.reset_to_snapshot("emulator-5556", "clean", runner=bad)


def test_missing_emulator_binary_names_android_sdk_root(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="ANDROID_SDK_ROOT") as ei:
        P.find_emulator_binary(env={"ANDROID_SDK_ROOT": str(tmp_path / "sdk")})
    assert "'emulator'" in str(ei.value) and str(tmp_path / "sdk" / "emulator" / "emulator") in str(ei.value)
    exe = tmp_path / "sdk" / "emulator" / "emulator"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    assert P.find_emulator_binary(env={"ANDROID_SDK_ROOT": str(tmp_path / "sdk")}) == str(exe)


# --------------------------------------------------------------------------- ports


def test_ports_are_even_pairs_skipping_claimed_and_busy(tmp_path):
    alloc = _allocator(tmp_path, busy=frozenset({5557, 5558}))  # 5556's adb port and 5558 are taken
    assert alloc.allocate() == 5554
    assert alloc.allocate() == 5560
    alloc.release(5554)
    assert alloc.allocate() == 5554
    assert set(alloc.claimed()) == {5554, 5560}


def test_claims_of_dead_processes_are_dropped(tmp_path):
    alloc = _allocator(tmp_path)
    (tmp_path / "ports").mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / "ports" / "claims.json").write_text(f'{{"5554": {{"pid": {dead.pid}, "owner": "x"}}}}')
    assert alloc.allocate() == 5554


def _claim_in_child(state_dir: str, barrier: Any, out: Any) -> None:
    alloc = P.ConsolePortAllocator(state_dir, port_free=lambda p: True)
    out.put(alloc.allocate(owner=f"child-{os.getpid()}"))
    barrier.wait(timeout=120)  # stay alive until every child allocated (a dead owner's claim is dropped)


def test_port_allocation_across_processes_never_collides(tmp_path):
    from dist_helpers import gather_from_children

    n = 6
    got = sorted(gather_from_children(_claim_in_child, (str(tmp_path / "ports"),), n))
    assert got == [5554 + 2 * i for i in range(n)]  # distinct, even, densest packing


# --------------------------------------------------------------------------- adb provider


def test_adb_provider_connects_remote_serial_and_disconnects():
    r = Runner({("adb", "connect"): (0, "connected to 10.1.2.3:5555\n")})
    dev = BootingDevice(serial="10.1.2.3:5555", boot_after=2)
    prov = P.make_android_provider("adb", serial="10.1.2.3:5555", runner=r, device_factory=lambda s: dev,
                                   sleep=lambda s: None, poll_interval=0.0)
    assert prov.acquire() == "10.1.2.3:5555"
    assert r.calls == [["adb", "connect", "10.1.2.3:5555"]] and dev.polls == 2
    assert prov.health().ok
    prov.release()
    assert r.calls[-1] == ["adb", "disconnect", "10.1.2.3:5555"]
    assert not prov.health().ok


def test_adb_provider_local_serial_needs_no_connect_and_failed_connect_is_infra():
    r = Runner()
    prov = P.AdbProvider("emulator-5554", runner=r, device_factory=lambda s: BootingDevice(s, 1))
    assert prov.acquire() == "emulator-5554" and r.calls == []
    prov.release()
    r2 = Runner({("adb", "connect"): (0, "failed to connect to '10.9.9.9:5555': Connection refused\n")})
    with pytest.raises(EnvInfraError, match="adb connect 10.9.9.9:5555 failed"):
        P.AdbProvider("10.9.9.9:5555", runner=r2, device_factory=lambda s: BootingDevice(s, 1)).acquire()


def test_adb_provider_reset_loads_named_snapshot():
    r = Runner()
    prov = P.AdbProvider("emulator-5556", snapshot="clean", runner=r, device_factory=lambda s: BootingDevice(s, 1))
    prov.acquire()
    prov.reset()
    assert r.calls == [["adb", "-s", "emulator-5556", "emu", "avd", "snapshot", "load", "clean"]]


@pytest.mark.parametrize("bad", ["", "  ", "emulator 5554", None])
def test_adb_provider_rejects_bad_serial(bad):
    with pytest.raises(ConfigError, match="serial"):
        P.AdbProvider(bad)


def test_unknown_provider_name():
    with pytest.raises(ConfigError, match="provider='genymotion' is unknown; known: adb, docker, emulator"):
        P.make_android_provider("genymotion")


# --------------------------------------------------------------------------- emulator provider


def _emulator_provider(tmp_path, devices: dict, procs: list, dies_with=None, busy=frozenset(),
                       first: int = P.CONSOLE_PORT_FIRST, **kw):
    def popen(argv, **pkw):
        proc = FakeProc(argv, dies_with=dies_with, **pkw)
        procs.append(proc)
        return proc

    def factory(serial):
        devices[serial] = devices.get(serial) or BootingDevice(serial, boot_after=2)
        return devices[serial]

    exe = tmp_path / "sdk" / "emulator" / "emulator"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return P.EmulatorProvider("Pixel_6_API_33", emulator_binary=str(exe), popen=popen, device_factory=factory,
                              allocator=_allocator(tmp_path, busy, first), log_dir=tmp_path / "logs",
                              sleep=lambda s: None, poll_interval=0.0, **kw)


def test_emulator_provider_acquire_reset_release(tmp_path):
    devices, procs, r = {}, [], Runner()
    a = _emulator_provider(tmp_path, devices, procs, runner=r, snapshot="clean")
    b = _emulator_provider(tmp_path, devices, procs, runner=r, snapshot="clean")
    assert a.acquire() == "emulator-5554"
    assert b.acquire() == "emulator-5556"  # second env of the same AVD: next pair
    assert procs[0].argv[1:] == ["-avd", "Pixel_6_API_33", "-no-window", "-no-snapshot-save", "-read-only",
                                 "-port", "5554", "-snapshot", "clean", "-no-audio", "-no-boot-anim",
                                 "-gpu", "swiftshader_indirect"]
    assert procs[1].argv[procs[1].argv.index("-port") + 1] == "5556" and b.adb_port == 5557
    assert procs[0].kw["start_new_session"] is True
    a.reset()
    assert r.calls[-1] == ["adb", "-s", "emulator-5554", "emu", "avd", "snapshot", "load", "clean"]
    assert devices["emulator-5554"].polls == 3  # 2 polls at boot, 1 after the snapshot load (still booted)
    a.release()
    assert ["adb", "-s", "emulator-5554", "emu", "kill"] in r.calls and procs[0].code == 0
    assert set(b.ports.claimed()) == {5556}
    b.release()
    a.release()  # idempotent
    assert b.ports.claimed() == {}


def test_emulator_that_dies_while_booting_is_infra_and_frees_port(tmp_path):
    devices, procs = {"emulator-5554": BootingDevice(boot_after=None)}, []
    prov = _emulator_provider(tmp_path, devices, procs, dies_with=1, runner=Runner())
    with pytest.raises(EnvInfraError, match="emulator exited with status 1"):
        prov.acquire()
    assert prov.ports.claimed() == {} and prov.serial is None


def test_emulator_boot_deadline_is_infra(tmp_path):
    devices, procs = {"emulator-5554": BootingDevice(boot_after=None)}, []
    prov = _emulator_provider(tmp_path, devices, procs, runner=Runner(), boot_timeout=0.05)
    with pytest.raises(EnvInfraError, match="not booted after 0.05 s"):
        prov.acquire()
    assert prov.ports.claimed() == {}


def test_emulator_beyond_adb_autodetect_range_is_connected_by_address(tmp_path):
    devices, procs = {}, []
    r = Runner({("adb", "connect"): (0, "connected to 127.0.0.1:5587\n"),
                ("adb", "-s", "127.0.0.1:5587", "emu", "kill"): (1, "error: no emulator detected\n")})
    prov = _emulator_provider(tmp_path, devices, procs, runner=r, first=5586)
    assert prov.acquire() == "127.0.0.1:5587"
    assert r.calls[0] == ["adb", "connect", "127.0.0.1:5587"]
    prov.release()
    assert getattr(procs[0], "terminated", False)  # emu kill refused: stopped by its process handle
    assert r.calls[-1] == ["adb", "disconnect", "127.0.0.1:5587"]


def test_acquire_all_boots_in_parallel_and_releases_everything_on_failure(tmp_path):
    devices, procs, r = {}, [], Runner()
    provs = [_emulator_provider(tmp_path, devices, procs, runner=r) for _ in range(3)]
    assert sorted(P.acquire_all(provs)) == ["emulator-5554", "emulator-5556", "emulator-5558"]
    for p in provs:
        p.release()
    devices2 = {"emulator-5556": BootingDevice("emulator-5556", boot_after=None)}
    provs = [_emulator_provider(tmp_path, devices2, [], runner=Runner(), boot_timeout=0.2) for _ in range(3)]
    with pytest.raises(EnvInfraError, match="emulator-5556: not booted"):
        P.acquire_all(provs)
    assert all(p.serial is None for p in provs) and provs[0].ports.claimed() == {}


# --------------------------------------------------------------------------- docker provider


class FakeContainer:
    def __init__(self) -> None:
        self.status = "running"
        self.stopped = self.removed = False

    def reload(self) -> None: ...

    def stop(self, timeout: int = 10) -> None:
        self.stopped = True

    def remove(self, force: bool = False) -> None:
        self.removed = True


class FakeDocker:
    def __init__(self) -> None:
        self.run_calls: list[dict] = []
        self.container = FakeContainer()
        outer = self

        class Containers:
            def run(self, **kw):
                outer.run_calls.append(kw)
                return outer.container

        self.containers = Containers()


def test_docker_run_kwargs_publish_on_loopback_only_and_fill_environment():
    kw = P.docker_run_kwargs(P.DOCKER_IMAGES["mobilerl-androidworld"], host_ports={"adb": 15555}, kvm=True,
                             adb_key="KEYDATA", token="tok")
    assert kw["image"] == "xuyifan0731/mobilerl-androidworld-eval"
    assert kw["ports"] == {"5555/tcp": ("127.0.0.1", 15555)}
    assert kw["environment"] == {"ADB_PORT": "5555", "GRPC_PORT": "8554", "TOKEN": "tok", "ADB_KEY": "KEYDATA"}
    assert kw["devices"] == ["/dev/kvm:/dev/kvm:rwm"]
    aw = P.docker_run_kwargs(P.DOCKER_IMAGES["androidworld"], host_ports={"adb": 15556, "server": 15000}, kvm=False)
    assert aw["ports"] == {"5555/tcp": ("127.0.0.1", 15556), "5000/tcp": ("127.0.0.1", 15000)}
    assert aw["devices"] == []
    with pytest.raises(ConfigError, match="adb_key"):
        P.docker_run_kwargs(P.DOCKER_IMAGES["mobilerl-androidlab"], host_ports={"adb": 1}, kvm=True)
    with pytest.raises(ConfigError, match="missing roles"):
        P.docker_run_kwargs(P.DOCKER_IMAGES["androidworld"], host_ports={"adb": 1}, kvm=True)


def test_docker_provider_runs_container_with_loopback_ports_and_connects(tmp_path):
    fake, r = FakeDocker(), Runner({("adb", "connect"): (0, "connected to 127.0.0.1:15555\n")})
    dev = {}
    prov = P.make_android_provider("docker", image="androidworld", docker_client=fake, runner=r, kvm=False,
                                   port_state_dir=tmp_path / "p", sleep=lambda s: None, poll_interval=0.0,
                                   device_factory=lambda s: dev.setdefault(s, BootingDevice(s, 2)))
    serial = prov.acquire()
    (kw,) = fake.run_calls
    for container_port, binding in kw["ports"].items():
        assert binding[0] == "127.0.0.1", container_port  # never 0.0.0.0
    assert serial == f"127.0.0.1:{kw['ports']['5555/tcp'][1]}"
    assert ["adb", "connect", serial] in r.calls and dev[serial].polls == 2
    prov.reset()  # no snapshot: a fresh container
    assert fake.container.removed and len(fake.run_calls) == 2
    prov.release()
    assert ["adb", "disconnect", serial] in r.calls


def test_unknown_docker_image_is_config_error():
    with pytest.raises(ConfigError, match="image='nope' is unknown"):
        P.DockerAndroidProvider("nope", docker_client=FakeDocker())


def test_no_docker_engine_is_a_clear_infra_error(monkeypatch):
    pytest.importorskip("docker", reason="docker SDK not installed")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/guigym-test-docker.sock")
    with pytest.raises(EnvInfraError, match="no Docker engine reachable"):
        P._docker_client()


# --------------------------------------------------------------------------- the real thing


def test_real_emulator_boots_when_sdk_and_avd_present(tmp_path):
    try:
        P.find_emulator_binary()
    except ConfigError as e:
        pytest.skip(f"no Android SDK emulator here: {e}")
    avd = os.environ.get("GUIGYM_ANDROID_AVD")
    if not avd:
        pytest.skip("set GUIGYM_ANDROID_AVD to an AVD name to boot a real emulator")
    pytest.importorskip("adbutils", reason="the adb controller needs adbutils")
    with P.EmulatorProvider(avd, port_state_dir=tmp_path / "ports", boot_timeout=600) as prov:
        assert prov.serial.startswith("emulator-") and prov.health().ok


def test_real_docker_engine_runs_an_image_when_present(tmp_path):
    docker = pytest.importorskip("docker", reason="docker SDK not installed")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no Docker engine here: {e}")
    image = os.environ.get("GUIGYM_ANDROID_DOCKER_IMAGE")
    if not image:
        pytest.skip("set GUIGYM_ANDROID_DOCKER_IMAGE (mobilerl-androidworld, androidworld) to boot a real container")
    with P.DockerAndroidProvider(image, port_state_dir=tmp_path / "p", boot_timeout=900) as prov:
        assert prov.health().ok


def test_real_adb_device_when_given():
    serial = os.environ.get("GUIGYM_ADB_SERIAL")
    if not serial:
        pytest.skip("set GUIGYM_ADB_SERIAL (a serial or host:port) to check the adb provider on a real device")
    try:
        import guigym.envs.android.controller  # noqa: F401
    except ImportError as e:
        pytest.skip(f"the adb controller is not importable here: {e}")
    with P.AdbProvider(serial, boot_timeout=120) as prov:
        assert prov.serial == serial and prov.health().ok
