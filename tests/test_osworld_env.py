"""OSWorld-v0: the env loop against a recording stand-in provider (verifier order, infeasible
rule, dialects, the pyautogui-code opt-in, infra errors) and on the real local desktop
(check_env, two desktops side by side, dialect strings acting on real apps)."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any, Optional

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import guigym  # noqa: F401 - registers the envs
from guigym.core import actions as A
from guigym.core.errors import ConfigError, EnvInfraError
from guigym.envs.desktop.env import OSWorldEnv
from guigym.envs.desktop.tasks import parse_osworld_task

from desktop_needs import need_desktop


# --------------------------------------------------------------------------- stand-in provider


class RecordingClient:
    """Records every call; files live in a dict. Stands in for DesktopClient in logic tests."""

    def __init__(self, size=(64, 48)) -> None:
        self.size = size
        self.calls: list[tuple[str, Any]] = []
        self.files: dict[str, bytes] = {}
        self.fail_next = False

    def _maybe_fail(self, what: str) -> None:
        if self.fail_next:
            raise EnvInfraError(f"{what}: connection refused")

    def observe(self, a11y: bool = True) -> dict:
        self._maybe_fail("/guigym/observe")
        self.calls.append(("observe", a11y))
        return {"screenshot": np.zeros((self.size[1], self.size[0], 3), np.uint8),
                "a11y": "<desktop-frame/>" if a11y else None}

    def act(self, action: A.Action) -> None:
        self._maybe_fail("/guigym/action")
        self.calls.append(("act", action))

    def execute(self, command: Any, shell: bool = False, timeout: float = 60) -> dict:
        self.calls.append(("execute", command))
        text = command if isinstance(command, str) else " ".join(command)
        if text.startswith("touch "):
            self.files[text.split()[1]] = b""
        out = "present\n" if "test -e /tmp/flag" in text and "/tmp/flag" in self.files else "absent\n"
        return {"status": "success", "output": out, "error": "", "returncode": 0}

    def terminal_output(self) -> Optional[str]:
        return "$ "

    def get_file(self, path: str) -> Optional[bytes]:
        return self.files.get(path)

    def screen_size(self):
        return self.size

    def close(self) -> None:
        pass


class RecordingProvider:
    def __init__(self, name: str = "local", vm: bool = False) -> None:
        self.name, self.vm = name, vm
        self.screen_size = (64, 48)
        self.client: Optional[RecordingClient] = None
        self.events: list[str] = []

    def start(self) -> RecordingClient:
        self.events.append("start")
        self.client = RecordingClient()
        return self.client

    def reset_home(self) -> RecordingClient:
        self.events.append("reset_home")
        return self.client

    revert = reset_home

    def stop(self) -> None:
        self.events.append("stop")
        self.client = None


def task(evaluator: dict, config: Optional[list] = None, tid: str = "t") -> Any:
    return parse_osworld_task({"id": tid, "instruction": "do it", "config": config or [], "evaluator": evaluator})


FLAG_TASK = task({"postconfig": [{"type": "execute", "parameters": {"command": "touch /tmp/flag", "shell": True}}],
                  "func": "exact_match",
                  "result": {"type": "vm_command_line", "command": "test -e /tmp/flag && echo present || echo absent",
                             "shell": True},
                  "expected": {"type": "rule", "rules": {"expected": "present\n"}}},
                 config=[{"type": "execute", "parameters": {"command": "echo setup", "shell": True}}])
INFEASIBLE = task({"func": "infeasible"}, tid="inf")


def make(tasks, **kw) -> tuple[OSWorldEnv, RecordingProvider]:
    prov = kw.pop("provider", None) or RecordingProvider()
    env = OSWorldEnv(tasks=tasks, provider=prov, observe_terminal=True, settle_s=0, **kw)
    return env, prov


def test_verifier_runs_postconfig_before_the_getters_and_scores_their_result():
    env, prov = make([FLAG_TASK])
    env.reset(options={"task": "t"})
    _, reward, terminated, _, info = env.step("done()")
    assert terminated and reward == 1.0 and info["success"]
    cmds = [c for kind, c in prov.client.calls if kind == "execute"]
    assert cmds.index("touch /tmp/flag") < next(i for i, c in enumerate(cmds) if "test -e /tmp/flag" in c)
    assert cmds[0] == "echo setup"  # config ran at reset


def test_infeasible_scores_1_only_when_the_agent_says_fail_and_fail_zeroes_feasible_tasks():
    env, _ = make([INFEASIBLE, FLAG_TASK])
    env.reset(options={"task": "inf"})
    assert env.step("fail()")[1] == 1.0
    env.reset(options={"task": "inf"})
    assert env.step("done()")[1] == 0.0
    env.reset(options={"task": "inf"})
    env.max_steps_override = 1
    assert env.step("wait(seconds=0)")[1:4] == (0.0, False, True)  # budget ran out
    env.max_steps_override = None
    env.reset(options={"task": "t"})
    _, reward, _, _, info = env.step("fail()")
    assert reward == 0.0 and "FAIL" in info["verifier"]["reason"]


def test_observation_space_and_reset_restores_the_provider_between_episodes():
    env, prov = make([FLAG_TASK])
    obs, info = env.reset(options={"task": "t"})
    assert obs in env.observation_space and obs["terminal"] == "$ " and obs["instruction"] == "do it"
    env.reset(options={"task": "t"})
    assert prov.events == ["start", "reset_home"]


def test_dialect_strings_become_typed_actions_sent_to_the_desktop():
    env, prov = make([FLAG_TASK], dialect="pyautogui")
    env.reset(options={"task": "t"})
    env.step("pyautogui.write('ls -l')")
    env.step("pyautogui.hotkey('ctrl', 'alt', 't')")
    acts = [c for kind, c in prov.client.calls if kind == "act"]
    assert acts == [A.Type(text="ls -l"), A.Hotkey(keys=("ctrl", "alt", "t"))]
    _, _, _, _, info = env.step("import os; os.system('rm -rf /')")
    assert info["action_error"] and "could not parse" in info["action_error"]
    assert not any("rm -rf" in str(c) for _, c in prov.client.calls)

    env, prov = make([FLAG_TASK], dialect="computer_13")
    env.reset(options={"task": "t"})
    env.step('{"action_type": "CLICK", "x": 10, "y": 20}')
    assert [c for k, c in prov.client.calls if k == "act"] == [A.Click(x=10, y=20)]


def test_off_screen_points_and_element_actions_cost_a_step_without_reaching_the_desktop():
    env, prov = make([FLAG_TASK])
    env.reset(options={"task": "t"})
    _, _, _, _, info = env.step("click(x=64, y=10)")
    assert "off the 64x48 screen" in info["action_error"]
    _, _, _, _, info = env.step('click(element="3")')
    assert "element" in info["action_error"]
    assert not [c for k, c in prov.client.calls if k == "act"]


def test_arbitrary_pyautogui_code_is_refused_on_the_local_provider():
    with pytest.raises(ConfigError, match="VM provider"):
        OSWorldEnv(tasks=[FLAG_TASK], provider=RecordingProvider("local"), dialect="pyautogui",
                   allow_pyautogui_code=True)
    with pytest.raises(ConfigError, match="VM provider"):
        gym.make("OSWorld-v0", task="terminal-mkdir", dialect="pyautogui", allow_pyautogui_code=True)


def test_opted_in_pyautogui_code_runs_inside_the_vm_through_execute():
    env, prov = make([FLAG_TASK], provider=RecordingProvider("qemu", vm=True), dialect="pyautogui",
                     allow_pyautogui_code=True)
    env.reset(options={"task": "t"})
    code = "for i in range(3):\n    pyautogui.press('down')"
    _, _, _, _, info = env.step(f"```python\n{code}\n```")
    assert info["action_error"] is None and info["action"].startswith("pyautogui_code(")
    argv = [c for k, c in prov.client.calls if k == "execute"][-1]
    assert argv[:2] == ["python3", "-c"] and argv[2].endswith(code)
    env.step("pyautogui.press('enter')")  # the safe subset still becomes a typed action
    assert [c for k, c in prov.client.calls if k == "act"] == [A.Press(key="enter")]


def test_infrastructure_failure_raises_and_the_next_reset_rebuilds_the_desktop():
    env, prov = make([FLAG_TASK])
    env.reset(options={"task": "t"})
    prov.client.fail_next = True
    with pytest.raises(EnvInfraError, match="connection refused"):
        env.step("press(key='a')")
    with pytest.raises(EnvInfraError):
        env.step("press(key='a')")
    obs, _ = env.reset(options={"task": "t"})
    assert prov.events[-2:] == ["stop", "start"] and obs in env.observation_space


def test_unknown_provider_and_task_are_named():
    with pytest.raises(ConfigError, match="nosuch"):
        OSWorldEnv(task="terminal-mkdir", provider="nosuch")
    with pytest.raises(Exception, match="no-such-task"):
        OSWorldEnv(task="no-such-task", provider=RecordingProvider())


# --------------------------------------------------------------------------- real local desktop




SMALL = {"screen_size": (1024, 768)}


def test_check_env_passes_with_the_local_provider():
    need_desktop()
    env = gym.make("OSWorld-v0", task="terminal-mkdir", provider="local", provider_kwargs=SMALL)
    try:
        check_env(env.unwrapped, skip_render_check=True)
        obs, _ = env.reset()
        assert obs["screenshot"].shape == (768, 1024, 3) and obs["screenshot"].std() > 0
        assert "<" in obs["a11y"] and obs["instruction"].startswith("In the open terminal")
    finally:
        env.close()


def test_pyautogui_strings_drive_the_real_terminal_and_the_verifier_sees_it():
    need_desktop()
    env = gym.make("OSWorld-v0", task="terminal-mkdir", provider="local", provider_kwargs=SMALL,
                   dialect="pyautogui")
    try:
        env.reset()
        env.step("pyautogui.write('mkdir ~/projects')")
        obs, *_ = env.step("pyautogui.press('enter')")
        time.sleep(0.5)
        assert "mkdir ~/projects" in obs["terminal"]
        _, reward, terminated, _, info = env.step("DONE")
        assert terminated and reward == 1.0, info["verifier"]
        env.reset()  # HOME restored: the directory is gone, a no-op scores 0 again
        assert env.step("DONE")[1] == 0.0
    finally:
        env.close()


def test_make_vec_runs_two_desktops_side_by_side_without_interfering():
    need_desktop()
    envs = gym.make_vec("OSWorld-v0", num_envs=2, vectorization_mode="async",
                        task="terminal-write-file", provider="local", provider_kwargs=SMALL)
    try:
        obs, _ = envs.reset(seed=0)
        assert obs["screenshot"].shape == (2, 768, 1024, 3)
        # env 0 writes the answer, env 1 something else, each into its own HOME
        envs.step(("type(text=\"echo 'Hello, guigym' > ~/hello.txt\")", 'type(text="echo other > ~/hello.txt")'))
        envs.step(('press(key="Enter")', 'press(key="Enter")'))
        envs.step(("wait(seconds=1)", "wait(seconds=1)"))
        _, rewards, terminated, _, infos = envs.step(("done()", "done()"))
        assert list(rewards) == [1.0, 0.0] and all(terminated)
        a, b = envs.call("desktop_info")
        assert a["display"] != b["display"] and a["state_dir"] != b["state_dir"]
    finally:
        envs.close()


def test_an_agent_typing_rm_rf_of_a_host_path_leaves_the_host_file_intact_and_the_server_wants_its_token():
    need_desktop()
    if not os.access("/var/lib", os.W_OK):
        pytest.skip("needs a writable /var/lib on the host to place a canary file the sandbox can see")
    from guigym.envs.desktop.providers.local import unix_http_get

    # a host file the sandbox can see (its /tmp, /var/tmp and HOME are private, so a file there
    # would prove nothing): /var/lib is one of the system directories the agent zone sees read-only
    canary_dir = Path("/var/lib") / f"guigym-canary-{os.getpid()}"
    canary_dir.mkdir(exist_ok=True)
    canary = canary_dir / "keep.txt"
    canary.write_text("host data")
    env = gym.make("OSWorld-v0", task="terminal-mkdir", provider="local", provider_kwargs=SMALL)
    try:
        env.reset()
        env.step(f'type(text="rm -rf {canary_dir} && echo gone")')
        env.step('press(key="Enter")')
        env.step("wait(seconds=1)")
        assert canary.read_text() == "host data"
        out = env.unwrapped.client.execute(f"ls {canary_dir} 2>&1; echo rc=$?", shell=True)["output"]
        assert "keep.txt" in out  # the sandbox sees the host file, read-only
        sock = str(env.unwrapped.provider.server_socket)
        status, _ = unix_http_get(sock, "/platform", None)
        assert status == 401
        status, _ = unix_http_get(sock, "/platform", "not-the-token")
        assert status == 401
    finally:
        env.close()
        shutil.rmtree(canary_dir, ignore_errors=True)
