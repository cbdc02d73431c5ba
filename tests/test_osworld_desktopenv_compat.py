"""OSWorld's own ``DesktopEnv`` loop on guigym's local desktop (issue 36, item 2).

The end-to-end test runs ``desktop_env.desktop_env.DesktopEnv`` (PyPI desktop-env 1.0.2,
unmodified, in its isolated venv) through :mod:`guigym.compat.osworld` on one local desktop:
embedded-suite tasks and OSWorld's own ``os`` tasks (tests/fixtures/osworld_os), each with a
reference solution and a no-op, in both of OSWorld's action spaces (pyautogui code and
computer_13 dicts). On every episode OSWorld's ``evaluate()`` must equal guigym's verifier on the
same final desktop state, and be 1 for the reference and 0 for the no-op. It also checks the
security rules: the endpoint refuses requests without its token and listens on loopback only,
and the desktop cannot see the host folders that hold answers.

The unit tests below need neither the venv nor a desktop.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Optional

import pytest

from desktop_needs import need_desktop
from guigym.compat.osworld import bridge, provider
from guigym.core import EnvInfraError

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "guigym" / "envs" / "desktop" / "suite"
OS_DIR = Path(__file__).parent / "fixtures" / "osworld_os" / "os"
INSTALL_CMD = "bash scripts/install_osworld_reference.sh"
#: the driver's hard bound: 8 episodes on one desktop take ~2-4 min on a loaded 2-core machine
DRIVER_TIMEOUT_S = 1500


def _venv_dir() -> Path:
    env = os.environ.get("GUIGYM_DESKTOP_ENV_VENV")
    return Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "guigym/venvs/desktop-env"


# --------------------------------------------------------------------------- front server (no desktop)


class _Recorder:
    """A stand-in for the desktop's server behind the front: records what was relayed."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, str, Optional[bytes], Optional[str]]] = []
        self.fail = fail

    def __call__(self, method: str, path: str, body: Optional[bytes], ctype: Optional[str]) -> Any:
        self.calls.append((method, path, body, ctype))
        if self.fail:
            raise EnvInfraError("POST /execute at unix:/x: timed out after 1 s")
        return 200, {"content-type": "application/json"}, b'{"status": "success", "output": "hi"}'


@pytest.fixture
def front():
    servers = []

    def make(forward: Any) -> tuple[str, str]:
        srv = bridge.FrontServer("t0ken" * 8, forward)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}", srv.token

    yield make
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _req(url: str, token: Optional[str] = None, body: Optional[bytes] = None,
         auth: Optional[str] = None) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if auth is not None:
        headers["Authorization"] = auth
    req = urllib.request.Request(url, data=body, headers=headers, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_front_refuses_requests_without_the_token_and_relays_none_of_them(front):
    rec = _Recorder()
    base, token = front(rec)
    assert _req(base + "/platform")[0] == 401
    assert _req(base + "/execute", body=b'{"command": ["id"]}')[0] == 401
    assert _req(base + "/platform", token="x" + token[1:])[0] == 401
    assert _req(base + "/platform", auth=f"Basic {token}")[0] == 401  # only the bearer form
    assert _req(base + "/platform", auth=f"Bearer {token} ")[0] == 401
    assert rec.calls == []


def test_front_relays_method_path_body_and_content_type_unchanged(front):
    rec = _Recorder()
    base, token = front(rec)
    status, data = _req(base + "/setup/execute?x=1", token=token, body=b'{"command": "ls", "shell": true}')
    assert (status, json.loads(data)["output"]) == (200, "hi")
    assert rec.calls == [("POST", "/setup/execute?x=1", b'{"command": "ls", "shell": true}', "application/json")]


def test_front_answers_502_naming_the_desktop_fault(front):
    base, token = front(_Recorder(fail=True))
    status, data = _req(base + "/execute", token=token, body=b"{}")
    assert status == 502
    assert "timed out" in json.loads(data)["message"]


def test_front_listens_on_loopback_only(front):
    base, _ = front(_Recorder())
    assert base.startswith("http://127.0.0.1:")


# --------------------------------------------------------------------------- provider side (no desktop)


def test_requests_hook_adds_the_token_only_for_a_running_bridge_address(monkeypatch):
    requests = pytest.importorskip("requests")
    seen: list[tuple[str, Any]] = []

    def fake(self: Any, method: str, url: Any, *a: Any, **kw: Any) -> None:
        seen.append((url, (kw.get("headers") or {}).get("Authorization")))

    monkeypatch.setattr(requests.sessions.Session, "request", fake)  # restored after the test
    monkeypatch.setattr(provider, "_tokens", {"127.0.0.1:4242": "tok"})
    provider._hook_requests()
    s = requests.Session()
    s.request("GET", "http://127.0.0.1:4242/screenshot")
    s.request("POST", "http://127.0.0.1:4243/execute", headers={"X": "1"})
    s.request("GET", "https://127.0.0.1:4242/screenshot")  # another scheme: another service
    s.request("GET", "http://127.0.0.1:4242.evil.example/x")
    assert seen == [("http://127.0.0.1:4242/screenshot", "Bearer tok"), ("http://127.0.0.1:4243/execute", None),
                    ("https://127.0.0.1:4242/screenshot", None), ("http://127.0.0.1:4242.evil.example/x", None)]


def test_vm_path_carries_the_screen_size_to_the_provider():
    path = provider.GuigymVMManager().get_vm_path(os_type="Ubuntu", region="guigym", screen_size=(1280, 720))
    assert provider._size_from_path(path) == (1280, 720)
    with pytest.raises(ValueError, match="os_type='Windows'"):
        provider.GuigymVMManager().get_vm_path(os_type="Windows")


def test_system_folders_are_never_hidden(monkeypatch, tmp_path):
    monkeypatch.chdir("/")
    assert provider._cwd_to_hide() == []
    monkeypatch.chdir("/usr")
    assert provider._cwd_to_hide() == []
    monkeypatch.chdir(tmp_path)
    assert provider._cwd_to_hide() == [str(tmp_path.resolve())]


def test_stub_raises_naming_the_missing_library_when_used():
    mod = provider._stub("pydrive.auth")
    cls = mod.GoogleAuth  # importable, as desktop-env's `from pydrive.auth import GoogleAuth` needs
    with pytest.raises(provider.Unavailable, match="pydrive.auth.GoogleAuth"):
        cls()


def test_factory_refuses_another_provider_name():
    with pytest.raises(ValueError, match="provider_name='vmware'"):
        provider.DesktopEnv(provider_name="vmware")


# --------------------------------------------------------------------------- OSWorld's loop, end to end


def _episodes() -> list[dict[str, Any]]:
    mkdir = SUITE / "terminal" / "terminal-mkdir.json"
    write = SUITE / "terminal" / "terminal-write-file.json"
    rename = OS_DIR / "e0df059f-28a6-4169-924f-b9623e7184cc.json"  # OSWorld os: rename a folder
    bluetooth = OS_DIR / "b3d4a89c-53f2-4d6b-8b6a-541fb5d205fa.json"  # OSWorld os: infeasible
    home = "import os; h = os.path.expanduser('~/Desktop/'); "
    return [
        # pyautogui code typed into the task's terminal (GUI input through the desktop's pyautogui)
        dict(name="mkdir/ref", task=mkdir, action_space="pyautogui", want=1.0,
             actions=["pyautogui.typewrite('mkdir ~/projects'); pyautogui.press('enter')", "WAIT"]),
        dict(name="mkdir/noop", task=mkdir, action_space="pyautogui", want=0.0, actions=[]),
        # computer_13 dicts
        dict(name="write/ref", task=write, action_space="computer_13", want=1.0,
             actions=[{"action_type": "TYPING", "parameters": {"text": "echo 'Hello, guigym' > ~/hello.txt"}},
                      {"action_type": "PRESS", "parameters": {"key": "enter"}}, "WAIT"]),
        dict(name="write/noop", task=write, action_space="computer_13", want=0.0, actions=[]),
        # pyautogui action space is Python code in the desktop: a non-GUI reference is valid there
        dict(name="os-rename/ref", task=rename, action_space="pyautogui", want=1.0,
             actions=[home + "os.rename(h + 'todo_list_Jan_1', h + 'todo_list_Jan_2')"]),
        dict(name="os-rename/noop", task=rename, action_space="pyautogui", want=0.0, actions=[]),
        dict(name="os-infeasible/ref", task=bluetooth, action_space="pyautogui", want=1.0, actions=["FAIL"],
             last_action="FAIL"),
        dict(name="os-infeasible/noop", task=bluetooth, action_space="pyautogui", want=0.0, actions=[]),
    ]


@pytest.fixture(scope="module")
def loop_result(tmp_path_factory) -> dict[str, Any]:
    venv = _venv_dir()
    if not (venv / ".guigym-desktopenv-ready").exists():
        pytest.skip(f"no desktop-env venv with the DesktopEnv loop extras at {venv}: run `{INSTALL_CMD}`")
    need_desktop()
    work = tmp_path_factory.mktemp("osworld-loop")
    probe = work / "answers"  # stands for the user's task folder: must stay invisible to the desktop
    probe.mkdir()
    (probe / "answer.txt").write_text("SECRET-ANSWER-7f3a\n")
    episodes = _episodes()
    plan = {"probe_dir": str(probe), "cache_dir": str(work / "cache"),
            "episodes": [{k: (str(v) if isinstance(v, Path) else v) for k, v in e.items() if k != "want"}
                         for e in episodes]}
    (work / "plan.json").write_text(json.dumps(plan))
    env = dict(os.environ, PYTHONPATH=str(ROOT), GUIGYM_HOST_PYTHON=sys.executable)
    proc = subprocess.Popen([str(venv / "bin" / "python"), str(Path(__file__).parent / "_osworld_desktopenv_driver.py"),
                             str(work / "plan.json"), str(work / "out.json")], cwd=work, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=DRIVER_TIMEOUT_S)
    finally:
        if proc.poll() is None:  # timed out or interrupted: the driver, its bridge and desktop go too
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
    assert proc.returncode == 0, f"driver failed ({proc.returncode}):\n{log[-4000:]}"
    out = json.loads((work / "out.json").read_text())
    out["want"] = {e["name"]: e["want"] for e in episodes}
    print(json.dumps({k: out[k] for k in ("timings", "episodes")}, indent=1))  # the numbers for docs
    return out


def test_osworld_evaluate_equals_guigym_score_reference_1_noop_0(loop_result):
    got = {e["name"]: (e["osworld"], e["guigym"]) for e in loop_result["episodes"]}
    assert set(got) == set(loop_result["want"])
    for name, want in loop_result["want"].items():
        osworld, guigym = got[name]
        assert osworld == pytest.approx(want), (name, got[name])
        assert guigym == pytest.approx(osworld), (name, got[name])


def test_endpoint_requires_the_token_on_loopback(loop_result):
    auth = loop_result["auth"]
    assert auth["vm_ip"] == "127.0.0.1"
    assert (auth["no_token"], auth["wrong_token"], auth["token"]) == (401, 401, 200)


def test_desktop_cannot_read_the_answer_folders(loop_result):
    seen = loop_result["hidden"]
    text = json.dumps(seen)
    assert "SECRET-ANSWER-7f3a" not in text and "answer.txt" not in text.replace("/answer.txt", "")
    assert seen["returncode"] != 0  # cat of the hidden file failed inside the desktop


def test_bridge_argv_hides_cache_cwd_and_extra_paths_and_keeps_the_token_off_argv(monkeypatch, tmp_path):
    seen: dict[str, Any] = {}

    class FakePopen:
        def __init__(self, argv: list[str], **kw: Any) -> None:
            seen["argv"], seen["env"] = argv, kw["env"]
            raise OSError("stop here")

    monkeypatch.setattr(provider.subprocess, "Popen", FakePopen)
    monkeypatch.chdir(tmp_path)
    p = provider.GuigymProvider(hide=[], host_python="/x/python3", screen_size=(1280, 800), terminal=False)
    with pytest.raises(OSError, match="stop here"):
        p.start_emulator("guigym-local:1920x1080")
    argv = seen["argv"]
    hidden = [argv[i + 1] for i, a in enumerate(argv) if a == "--hide"]
    assert hidden == [str((tmp_path / "cache").resolve()), str(tmp_path.resolve())]  # DesktopEnv's default cache_dir, cwd
    assert argv[:3] == ["/x/python3", "-m", "guigym.compat.osworld.bridge"]
    assert argv[argv.index("--screen") + 1] == "1280x800" and "--no-terminal" in argv
    assert seen["env"]["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)  # the same guigym as this one
