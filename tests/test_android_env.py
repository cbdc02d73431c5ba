"""AndroidLab-v0 / AndroidWorld-v0 end to end: gym.make -> the adb provider -> the REAL adb server ->
the named stand-in device (guigym.envs.android.standin), and gym.make_vec over two stand-ins.

The stand-in serves AndroidLab-style screens written in the uiautomator dump format; its
screen-transition table turns the tap on the alarm's switch into the "alarm on" screen, so the
episode's outcome depends on what the agent taps. Killing the stand-in mid-episode must raise
EnvInfraError, never give a score.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import guigym  # noqa: F401 - registers the envs
from guigym.core.errors import ConfigError, EnvInfraError, TaskSpecError
from guigym.envs.android.adb_query import parse_adb_query
from guigym.envs.android.observation import simplify, ui_elements
from guigym.envs.android.standin import StandinDevice

from _android_adb import adb_client  # noqa: F401 - the module's adb server
from test_androidlab_checks import alarm_list, alarm_row, dump, N

CLOCK = "com.google.android.deskclock"
HOME = dump(N("TextView", "Clock", "", clickable=True), N("TextView", "Settings", "", clickable=True))
ALARM_OFF = alarm_list(alarm_row("3:00 PM", False), alarm_row("7:00 AM", True))
ALARM_ON = alarm_list(alarm_row("3:00 PM", True), alarm_row("7:00 AM", True))


def first_switch(xml: str) -> tuple[int, int, int, int]:
    return next(e.bbox for e in ui_elements(xml) if e.class_name.endswith("Switch"))


def clock_standin() -> StandinDevice:
    """Home -> (monkey -p deskclock) -> the alarm list with 3 PM off; tapping its switch turns it on."""
    return StandinDevice({"home": HOME, CLOCK: ALARM_OFF, "clock_on": ALARM_ON},
                         {CLOCK: [(first_switch(ALARM_OFF), "clock_on")]}, home="home",
                         packages=["com.android.settings", CLOCK],
                         settings={"global": {"airplane_mode_on": "0"}})


@pytest.fixture
def standin(adb_client):  # noqa: F811
    dev = clock_standin().start()
    try:
        yield dev
    finally:
        dev.stop()
        try:
            adb_client.disconnect(dev.serial)
        except Exception:  # noqa: BLE001 - already gone
            pass


def tap_centre(box: tuple[int, int, int, int]) -> str:
    return f"tap(x={(box[0] + box[2]) // 2}, y={(box[1] + box[3]) // 2})"


def test_androidlab_episode_through_real_adb_scores_what_the_agent_did(standin):
    env = gym.make("AndroidLab-v0", task="clock_27", serial=standin.serial, dialect="canonical", settle_s=0)
    try:
        obs, info = env.reset(seed=0)
        assert info["task_id"] == "clock_27" and obs["instruction"] == "Set an alarm at 3PM"
        # the env started the task's app from the YAML's package, through monkey
        assert ["monkey", "-p", CLOCK, "-c", "android.intent.category.LAUNCHER", "1"] in standin.commands
        assert obs["xml"] == ALARM_OFF and obs["screenshot"].shape == (2400, 1080, 3)
        assert obs["a11y"] == simplify(ALARM_OFF, (1080, 2400))
        assert env.observation_space.contains(obs)
        box = first_switch(ALARM_OFF)
        obs, r, term, trunc, info = env.step(tap_centre(box))
        assert r == 0.0 and not term and obs["xml"] == ALARM_ON
        cx, cy = (box[0] + box[2]) // 2, (box[1] + box[3]) // 2
        assert ["input", "tap", str(cx), str(cy)] in standin.commands
        _, r, term, _, info = env.step("done()")
        assert term and r == 1.0 and info["success"] is True and info["verifier"]["subgoals"] == {"1": True}

        # the same task, the agent does nothing useful: a failure, scored 0
        obs, _ = env.reset(seed=1)
        assert obs["xml"] == ALARM_OFF  # reset went home and relaunched the app
        _, r, term, _, info = env.step("done()")
        assert term and r == 0.0 and info["success"] is False
    finally:
        env.close()


def test_androidlab_adb_state_and_answer_tasks(standin):
    env = gym.make("AndroidLab-v0", tasks=["setting_0", "setting_22"], serial=standin.serial, dialect="canonical",
                   settle_s=0, launch_app=False)
    try:
        env.reset(options={"task": "setting_0"})  # "turn on airplane mode": judged by settings get
        _, r, _, _, info = env.step("done()")
        assert r == 0.0 and info["success"] is False
        assert ["settings", "get", "global", "airplane_mode_on"] in standin.commands
        standin.settings["global"]["airplane_mode_on"] = "1"  # as if the agent had flipped the switch
        env.reset(options={"task": "setting_0"})
        _, r, _, _, info = env.step("done()")
        assert r == 1.0 and info["success"] is True

        # an answer task with no judge configured: unscorable, not a silent 0
        env.reset(options={"task": "setting_22"})
        _, r, term, _, info = env.step('done(answer="open")')
        assert term and info["unscorable"] is True and info["success"] is None
    finally:
        env.close()
    env = gym.make("AndroidLab-v0", task="setting_22", serial=standin.serial, dialect="canonical", settle_s=0,
                   launch_app=False, judge="exact")
    try:
        env.reset()
        _, r, _, _, info = env.step('done(answer="open")')  # airplane_mode_on is "1": "open" is right
        assert r == 1.0
        env.reset()
        _, r, _, _, info = env.step('done(answer="not open")')
        assert r == 0.0 and info["success"] is False
    finally:
        env.close()


def test_androidworld_episode_initialises_and_validates_through_adb(standin):
    env = gym.make("AndroidWorld-v0", task="SystemBluetoothTurnOn", serial=standin.serial, settle_s=0)
    try:
        obs, info = env.reset(seed=3)
        assert obs["instruction"] == "Turn bluetooth on." and info["max_steps"] == 10
        # the initialiser put Bluetooth in the task's start state through adb (AndroidWorld's svc call;
        # the stand-in records it, a phone would also flip global/bluetooth_on)
        assert ["svc", "bluetooth", "disable"] in standin.commands
        standin.settings["global"]["bluetooth_on"] = "0"
        _, r, term, _, _ = env.step('{"action_type": "status", "goal_status": "complete"}')
        assert term and r == 0.0
        env.reset(seed=3)
        standin.settings["global"]["bluetooth_on"] = "1"  # what tapping the toggle does on a phone
        _, r, _, _, info = env.step('{"action_type": "status", "goal_status": "complete"}')
        assert r == 1.0 and info["success"] is True
    finally:
        env.close()


def test_killing_the_device_mid_episode_is_an_infrastructure_failure(standin):
    env = gym.make("AndroidLab-v0", task="clock_27", serial=standin.serial, dialect="canonical", settle_s=0)
    try:
        env.reset(seed=0)
        standin.stop()
        with pytest.raises(EnvInfraError):
            env.step(tap_centre(first_switch(ALARM_OFF)))
        with pytest.raises(EnvInfraError):  # the episode is not scored afterwards either
            env.step("done()")
    finally:
        env.close()


def test_make_vec_drives_one_standin_per_env(adb_client):  # noqa: F811
    devs = [clock_standin().start(), clock_standin().start()]
    try:
        venv = gym.make_vec("AndroidLab-v0", num_envs=2, serials=[d.serial for d in devs], vector_mode="sync",
                            task="clock_27", dialect="canonical", settle_s=0)
        try:
            obs, _ = venv.reset(seed=0)
            assert obs["screenshot"].shape == (2, 2400, 1080, 3)
            # env 0 taps the switch, env 1 taps empty space: only env 0's device changes screen
            obs, r, term, trunc, info = venv.step([tap_centre(first_switch(ALARM_OFF)), "tap(x=5, y=2395)"])
            assert [devs[0].screen, devs[1].screen] == ["clock_on", CLOCK]
            obs, r, term, trunc, info = venv.step(["done()", "done()"])
            assert term.tolist() == [True, True] and r.tolist() == [1.0, 0.0]
        finally:
            venv.close()
        with pytest.raises(ConfigError, match="serials"):
            gym.make_vec("AndroidLab-v0", num_envs=2, serials=[devs[0].serial] * 2, task="clock_27")
    finally:
        for d in devs:
            d.stop()


def test_bad_arguments_name_the_field():
    with pytest.raises(ConfigError, match="serial"):
        gym.make("AndroidLab-v0", task="clock_27")
    with pytest.raises(TaskSpecError, match="clock_999"):
        gym.make("AndroidLab-v0", task="clock_999", serial="127.0.0.1:1")
    with pytest.raises(TaskSpecError, match="NoSuchTask"):
        gym.make("AndroidWorld-v0", task="NoSuchTask", serial="127.0.0.1:1")


@pytest.mark.parametrize("query, argv, grep", [
    ("adb shell settings get global airplane_mode_on", ("settings", "get", "global", "airplane_mode_on"), None),
    ("adb shell 'getprop persist.sys.timezone'", ("getprop", "persist.sys.timezone"), None),
    ("adb shell settings list system | grep volume_ring_speaker", ("settings", "list", "system"), "volume_ring_speaker"),
    ("adb shell pm list packages | grep 'com.booking'", ("pm", "list", "packages"), "com.booking"),
])
def test_adb_queries_parse_into_argv_and_a_host_side_grep(query, argv, grep):
    q = parse_adb_query(query)
    assert (q.argv, q.grep) == (argv, grep)


@pytest.mark.parametrize("query", ["adb shell rm -rf / ; reboot", "adb shell ls > /sdcard/x", "adb push a b",
                                   "adb shell ls | grep a | wc -l", "adb shell echo $(id)", "adb shell ls | sort"])
def test_other_adb_query_shapes_are_refused(query):
    with pytest.raises(TaskSpecError, match="adb_query"):
        parse_adb_query(query)


def test_adb_query_grep_filters_lines_on_the_host():
    class Dev:
        def shell(self, argv, timeout_s=20.0):
            assert argv == ["settings", "list", "system"]
            return "volume_alarm_speaker=7\nvolume_ring_speaker=0\nscreen_brightness=80\n"

    q = parse_adb_query("adb shell settings list system | grep volume_ring_speaker")
    assert q.run(Dev()) == "volume_ring_speaker=0\n"


def test_eval_cli_lists_the_android_suites():
    from guigym.cli import _task_ids

    assert len(_task_ids("AndroidLab-v0", None, None)) == 138
    assert _task_ids("AndroidLab-v0", "clock_27,setting_0", None) == ["clock_27", "setting_0"]
    assert "SystemBluetoothTurnOn" in _task_ids("AndroidWorld-v0", None, None)
    with pytest.raises(TaskSpecError, match="clock_999"):
        _task_ids("AndroidLab-v0", "clock_999", None)
