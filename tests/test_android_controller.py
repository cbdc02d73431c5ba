"""AdbDevice (guigym.envs.android.controller) through the REAL adb server against the named stand-in
device (guigym.envs.android.standin), plus a live class for a real device in GUIGYM_ADB_SERIAL.

The adb server is started from ``adb`` on PATH or adbutils' bundled binary, on a private port (not
5037, so a user's server is untouched), and killed at the end of the module.
"""
from __future__ import annotations

import io
import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from guigym.core.errors import ActionNotPossible, ConfigError, EnvInfraError
from guigym.envs.android.device import AndroidDevice
from guigym.envs.android.standin import StandinDevice, split_commands

from _android_adb import adb_client  # noqa: F401,E402 - the module's adb server
from guigym.envs.android.providers import default_adb  # noqa: E402

adbutils = pytest.importorskip("adbutils", reason="adbutils is not installed (pip install 'guigym[android]')")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from guigym.envs.android.controller import (  # noqa: E402
    AdbDevice, input_text_chunks, parse_content_rows, pull_sqlite, shell_line)

FIXTURES = Path(__file__).parent / "fixtures" / "android"
API27 = (FIXTURES / "UIAUTOMATOR_DUMP_API27.xml").read_text(encoding="utf-8")
API17 = (FIXTURES / "UIAUTOMATOR_DUMP_API17_CHINESE.xml").read_text(encoding="utf-8")
DATE_BOX = (166, 84, 655, 346)  # "Sunday, May 19" on the API 27 home screen
CONTACTS = [{"_id": "1", "display_name": "Ann Lee", "number": "555-0101"},
            {"_id": "2", "display_name": "Bo, Jr.", "number": "555 0102"}]


def _attach(client, serial: str) -> None:
    answer = client.connect(serial, timeout=20)
    assert "connected to" in answer, answer
    client.wait_for(serial, state="device", timeout=20)


@pytest.fixture
def standin(adb_client):
    dev = StandinDevice({"api27": API27, "api17": API17}, {"api27": [(DATE_BOX, "api17")]},
                        packages=["com.android.settings", "net.gsantner.markor"],
                        content={"content://contacts/phones/": CONTACTS}).start()
    try:
        _attach(adb_client, dev.serial)
        yield dev, AdbDevice(dev.serial, client=adb_client, retry_delay_s=0)
    finally:
        dev.stop()
        adb_client.disconnect(dev.serial)


# --------------------------------------------------------------------------- observation


def test_adb_device_satisfies_the_protocol(standin):
    assert isinstance(standin[1], AndroidDevice)


def test_screenshot_is_the_served_png_as_rgb(standin):
    dev, d = standin
    img = d.screenshot()
    assert img.shape == (1794, 1080, 3) and img.dtype == np.uint8
    from PIL import Image

    want = np.asarray(Image.open(io.BytesIO(dev.screenshot_png())).convert("RGB"))
    assert np.array_equal(img, want)
    assert dev.commands == [["screencap", "-p"]]


def test_ui_xml_is_the_served_dump(standin):
    dev, d = standin
    assert d.ui_xml() == API27
    assert dev.commands == [["rm", "-f", "/sdcard/window_dump.xml"], ["uiautomator", "dump", "/sdcard/window_dump.xml"]]
    assert d.screen_size() == (1080, 1794)


def test_tap_follows_the_transition_table_and_back_returns(standin):
    dev, d = standin
    d.tap(10, 1700)  # outside the box: no transition
    assert d.ui_xml() == API27
    d.tap(300, 200)
    assert dev.screen == "api17" and d.ui_xml() == API17
    assert d.screenshot().shape == (1216, 800, 3)
    d.back()
    assert d.ui_xml() == API27


def test_dump_failure_is_retried_then_env_infra_error(standin):
    dev, d = standin
    dev.fail_dumps = 2
    assert d.ui_xml() == API27  # third try succeeds
    dev.fail_dumps = 5
    dev.commands.clear()
    with pytest.raises(EnvInfraError, match=r"uiautomator dump failed 3 times.*could not get idle state"):
        d.ui_xml()
    dumps = [c for c in dev.commands if c[0] == "uiautomator"]
    assert dumps == [["uiautomator", "dump", "/sdcard/window_dump.xml"]] * 3


# --------------------------------------------------------------------------- exact commands


@pytest.mark.parametrize("call, expected", [
    (lambda d: d.tap(12, 34), [["input", "tap", "12", "34"]]),
    (lambda d: d.swipe(1, 2, 3, 4, 500), [["input", "swipe", "1", "2", "3", "4", "500"]]),
    (lambda d: d.long_press(50, 60), [["input", "swipe", "50", "60", "50", "60", "1000"]]),
    (lambda d: d.keyevent("KEYCODE_DEL"), [["input", "keyevent", "KEYCODE_DEL"]]),
    (lambda d: d.keyevent(66), [["input", "keyevent", "66"]]),
    (lambda d: d.home(), [["input", "keyevent", "KEYCODE_HOME"]]),
    (lambda d: d.enter(), [["input", "keyevent", "KEYCODE_ENTER"]]),
    (lambda d: d.input_text("hi there"), [["pm", "list", "packages", "com.android.adbkeyboard"],
                                          ["input", "text", "hi%sthere"]]),
    (lambda d: d.launch_app("Markor"), [["monkey", "-p", "net.gsantner.markor", "-c",
                                         "android.intent.category.LAUNCHER", "1"]]),
    (lambda d: d.launch_app("com.android.settings"), [["monkey", "-p", "com.android.settings", "-c",
                                                       "android.intent.category.LAUNCHER", "1"]]),
    (lambda d: d.settings_put("system", "screen_brightness", "10"), [["settings", "put", "system",
                                                                       "screen_brightness", "10"]]),
    (lambda d: d.content_query("content://sms/inbox", ["address", "body"], "read=0"),
     [["content", "query", "--uri", "content://sms/inbox", "--projection", "address:body", "--where", "read=0"]]),
])
def test_exact_commands(standin, call, expected):
    dev, d = standin
    call(d)
    assert dev.commands == expected


def test_settings_round_trip_and_null(standin):
    dev, d = standin
    assert d.settings_get("global", "airplane_mode_on") is None
    d.settings_put("global", "airplane_mode_on", "1")
    assert d.settings_get("global", "airplane_mode_on") == "1" and dev.settings["global"]["airplane_mode_on"] == "1"


def test_content_query_rows(standin):
    _, d = standin
    assert d.content_query("content://contacts/phones/") == CONTACTS
    assert d.content_query("content://contacts/phones/", ["display_name"]) == [
        {"display_name": "Ann Lee"}, {"display_name": "Bo, Jr."}]
    assert d.content_query("content://sms/sent") == []


def test_parse_content_rows_keeps_commas_and_newlines_in_values():
    text = "Row: 0 _id=3, body=hi, there\nsecond line, address=+1 555\nRow: 1 _id=4, body=, address=NULL\n"
    assert parse_content_rows(text) == [{"_id": "3", "body": "hi, there\nsecond line", "address": "+1 555"},
                                        {"_id": "4", "body": "", "address": "NULL"}]
    assert parse_content_rows("No result found.\n") == []


def test_launch_app_errors(standin):
    _, d = standin
    with pytest.raises(ActionNotPossible, match="known"):
        d.launch_app("no such app")
    with pytest.raises(ActionNotPossible, match="com.example.absent"):
        d.launch_app("com.example.absent")


def test_text_without_adb_keyboard_rejects_non_ascii(standin):
    dev, d = standin
    with pytest.raises(ConfigError, match="ADB Keyboard"):
        d.input_text("café")
    assert not any(c[0] == "input" for c in dev.commands)


def test_text_with_adb_keyboard_uses_base64_broadcast(standin):
    dev, d = standin
    dev.packages.append("com.android.adbkeyboard")
    d.input_text("héllo wörld 你好")
    d.input_text("second")
    assert dev.typed == ["héllo wörld 你好", "second"]
    assert dev.commands[:3] == [["pm", "list", "packages", "com.android.adbkeyboard"],  # asked once
                                ["ime", "enable", "com.android.adbkeyboard/.AdbIME"],
                                ["ime", "set", "com.android.adbkeyboard/.AdbIME"]]
    assert [c[:6] for c in dev.commands[3:]] == [["am", "broadcast", "-a", "ADB_INPUT_B64", "--es", "msg"]] * 2


def test_set_time(standin):
    dev, d = standin
    d.set_time(1_700_000_000)
    assert dev.commands == [["settings", "put", "global", "auto_time", "0"], ["date", "-u", "111422132023.20"]]
    assert time.gmtime(int(d.shell(["date", "+%s"])))[:3] == (2023, 11, 14)  # the stand-in's clock moved


# --------------------------------------------------------------------------- files


def test_push_pull_round_trip(standin, tmp_path):
    dev, d = standin
    blob = bytes(range(256)) * 800 + os.urandom(1000)  # > one 64 KiB sync chunk, every byte value
    src, back = tmp_path / "src.bin", tmp_path / "back.bin"
    src.write_bytes(blob)
    d.push(str(src), "/sdcard/Download/data.bin")
    assert dev.files["/storage/emulated/0/Download/data.bin"] == blob
    d.pull("/sdcard/Download/data.bin", str(back))
    assert back.read_bytes() == blob
    with pytest.raises(FileNotFoundError, match="missing.bin"):
        d.pull("/sdcard/missing.bin", str(tmp_path / "x"))


def test_pull_sqlite_reads_rows_on_the_host(standin, tmp_path):
    _, d = standin
    db = tmp_path / "app.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE expense (id INTEGER PRIMARY KEY, name TEXT, amount INTEGER)")
    con.executemany("INSERT INTO expense (name, amount) VALUES (?, ?)", [("tea", 3), ("bus", 2)])
    con.commit()
    con.close()
    d.push(str(db), "/data/data/com.arduia.expense/databases/accounting.db")
    path = "/data/data/com.arduia.expense/databases/accounting.db"
    assert pull_sqlite(d, path, table="expense") == [{"id": 1, "name": "tea", "amount": 3},
                                                     {"id": 2, "name": "bus", "amount": 2}]
    assert pull_sqlite(d, path, "SELECT name FROM expense WHERE amount > ?", [2]) == [{"name": "tea"}]
    with pytest.raises(FileNotFoundError):
        pull_sqlite(d, "/data/data/x/databases/none.db", table="t")


def test_androidworld_tasks_judge_through_the_controller(standin):
    """Task code written against the Protocol runs unchanged over adb against the stand-in."""
    from guigym.envs.android.androidworld import validators as V
    from guigym.envs.android.androidworld.base import TASKS

    dev, d = standin
    note = TASKS.get("MarkorCreateNote")({"file_name": "n.md", "text": "hello from guigym"})
    note.initialize_task(d)
    assert note.is_successful(d) == 0.0
    V.write_file(d, f"{V.MARKOR_DATA}/n.md", "hello from guigym")  # what the agent would have typed
    assert note.is_successful(d) == 1.0
    assert dev.files["/storage/emulated/0/Documents/Markor/n.md"] == b"hello from guigym"
    bright = TASKS.get("SystemBrightnessMax")({"max_or_min": "max"})
    bright.initialize_task(d)
    assert bright.is_successful(d) == 0.0
    d.settings_put("system", "screen_brightness", "255")
    assert bright.is_successful(d) == 1.0


# --------------------------------------------------------------------------- quoting


SAMPLES = ["; reboot", "$(reboot)", "`reboot`", "a'b", 'a"b', "line1\nline2", "x && rm -rf /", "|cat", "$HOME",
           "\\", "'", "''", " ", "%s", "--es msg x", "a\\'b", "${x}", "&", "#not a comment", "*", "~"]
HOSTILE = st.one_of(st.sampled_from(SAMPLES),
                    st.text(alphabet=st.sampled_from(list("ab ;|&$()`'\"\\\n\t#*?~<>{}é你")), max_size=30))
HOSTILE_ASCII = st.one_of(st.sampled_from([x for x in SAMPLES if "\n" not in x]),
                          st.text(alphabet=st.sampled_from(list("ab ;|&$()`'\"\\#*?~<>{}%")), min_size=1, max_size=30),
                          st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), min_size=1))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=HOSTILE)
def test_hostile_shell_argument_is_one_argv_element(standin, s):
    dev, d = standin
    dev.commands.clear()
    out = d.shell(["echo", s, "end"])
    assert dev.commands == [["echo", s, "end"]]
    assert out == f"{s} end\n"


def test_shell_wants_an_argv_list(standin):
    with pytest.raises(ConfigError, match="argv"):
        standin[1].shell("echo hi")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=HOSTILE_ASCII)
def test_hostile_input_text_is_one_argv_element(standin, s):
    dev, d = standin
    dev.commands.clear()
    dev.typed.clear()
    d.input_text(s)
    sent = [c for c in dev.commands if c[:1] != ["pm"]]  # pm list packages: first call only
    assert sent == [["input", "text", chunk] for chunk in input_text_chunks(s)]
    assert "".join(dev.typed) == s  # what `input text` types, %s read as a space


def test_input_text_chunks_keep_a_literal_percent_s():
    assert input_text_chunks("hi there") == ["hi%sthere"]
    assert input_text_chunks("5%sure 2") == ["5%", "sure%s2"]
    assert input_text_chunks("%s%s") == ["%", "s%", "s"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=st.one_of(HOSTILE, st.text(min_size=1, max_size=40).filter(lambda t: "\0" not in t)))
def test_hostile_text_through_adb_keyboard_arrives_intact(standin, s):
    dev, d = standin
    if "com.android.adbkeyboard" not in dev.packages:
        dev.packages.append("com.android.adbkeyboard")
    dev.typed.clear()
    d.input_text(s)
    assert dev.typed == ([s] if s else [])


def test_standin_shell_commands(standin):
    dev, d = standin
    assert d.shell(["getprop", "sys.boot_completed"]) == "1\n"
    assert d.shell(["frobnicate", "x"]) == "/system/bin/sh: frobnicate: not found\n"
    assert d.shell(["pm", "list", "packages"]) == "package:com.android.settings\npackage:net.gsantner.markor\n"
    d.shell(["mkdir", "-p", "/sdcard/Documents/Markor/sub"])
    d.push(str(FIXTURES / "README.md"), "/sdcard/Documents/Markor/note.md")
    assert d.shell(["ls", "/sdcard/Documents/Markor"]) == "note.md\nsub\n"
    assert d.shell(["find", "/sdcard/Documents"]).split() == [
        "/sdcard/Documents", "/sdcard/Documents/Markor", "/sdcard/Documents/Markor/note.md",
        "/sdcard/Documents/Markor/sub"]
    assert d.shell(["cat", "/sdcard/Documents/Markor/note.md"]) == (FIXTURES / "README.md").read_text()
    assert sorted(f.path for f in d._dev.sync.list("/sdcard/Documents/Markor")) == ["note.md", "sub"]  # sync LIST
    d.shell(["rm", "-rf", "/sdcard/Documents/Markor"])
    assert d.shell(["ls", "/sdcard/Documents/Markor"]).startswith("ls: /sdcard/Documents/Markor: No such file")
    assert "frobnicate" in dev.commands[1]


def test_standin_shell_would_expose_unquoted_text():
    """The checks above mean something: the stand-in splits and substitutes like sh does."""
    dev = StandinDevice()
    dev.run("echo $(reboot) ; input text a b")
    assert dev.commands == [["reboot"], ["echo"], ["input", "text", "a", "b"]]
    assert split_commands(shell_line(["echo", "$(reboot); x"])) == [["echo", "$(reboot); x"]]
    assert split_commands("a 'b c'\"d\\\"e\" f\\ g\nh") == [["a", 'b cd"e', "f g"], ["h"]]


def test_adb_command_line_talks_to_the_standin(standin, adb_client, tmp_path):
    """Not only adbutils: the adb program's own shell, push and pull work against the stand-in."""
    dev, _ = standin
    adb = [default_adb(), "-P", str(adb_client.port), "-s", dev.serial]
    out = subprocess.run([*adb, "shell", "echo", "hello"], capture_output=True, text=True, timeout=60)
    assert out.stdout == "hello\n" and dev.commands == [["echo", "hello"]]
    src, back = tmp_path / "a.txt", tmp_path / "b.txt"
    src.write_bytes(b"x" * 70_000 + "é".encode())
    assert subprocess.run([*adb, "push", str(src), "/sdcard/a.txt"], capture_output=True, timeout=60).returncode == 0
    assert subprocess.run([*adb, "pull", "/sdcard/a.txt", str(back)], capture_output=True, timeout=60).returncode == 0
    assert back.read_bytes() == src.read_bytes()


# --------------------------------------------------------------------------- the device going away


def test_killing_the_standin_gives_env_infra_error(standin):
    dev, d = standin
    d.tap(1, 1)
    dev.stop()
    for call in (lambda: d.tap(1, 1), d.screenshot, d.ui_xml, lambda: d.pull("/sdcard/x", "/tmp/x")):
        with pytest.raises(EnvInfraError, match=dev.serial.replace(".", r"\.")):
            call()


def test_standin_subprocess_killed_mid_episode(adb_client, tmp_path):
    port = None
    table = tmp_path / "transitions.json"
    table.write_text(json.dumps({"home": [[list(DATE_BOX), "other"]]}))
    proc = subprocess.Popen([sys.executable, "-m", "guigym.envs.android.standin", "--port", "0",
                             "--screens", f"home={FIXTURES / 'UIAUTOMATOR_DUMP_API27.xml'}",
                             f"other={FIXTURES / 'UIAUTOMATOR_DUMP_API17_CHINESE.xml'}", "--transitions", str(table)],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        serial = f"127.0.0.1:{port}"
        _attach(adb_client, serial)
        d = AdbDevice(serial, client=adb_client, retry_delay_s=0)
        assert d.ui_xml() == API27
        d.tap(300, 200)
        assert d.ui_xml() == API17
        proc.kill()
        proc.wait(timeout=30)
        with pytest.raises(EnvInfraError, match=serial.replace(".", r"\.")):
            d.screenshot()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        if port is not None:
            adb_client.disconnect(f"127.0.0.1:{port}")


# --------------------------------------------------------------------------- a real device


LIVE_SERIAL = os.environ.get("GUIGYM_ADB_SERIAL", "")
USER_ADB_PORT = int(os.environ.get("ANDROID_ADB_SERVER_PORT", "5037"))  # read before the fixture changes it


@pytest.mark.skipif(not LIVE_SERIAL, reason="GUIGYM_ADB_SERIAL is not set (no real Android device given)")
class TestLiveDevice:
    """Read-only checks against a real device or emulator (the user's own adb server)."""

    @pytest.fixture(scope="class")
    def device(self):
        return AdbDevice(LIVE_SERIAL, connect=":" in LIVE_SERIAL, adb_port=USER_ADB_PORT)

    def test_boot_completed(self, device):
        assert device.shell(["getprop", "sys.boot_completed"]).strip() == "1"

    def test_observation(self, device):
        w, h = device.screen_size()
        img = device.screenshot()
        assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3 and {img.shape[0], img.shape[1]} == {w, h}
        assert "<hierarchy" in device.ui_xml()

    @pytest.mark.parametrize("s", ["; echo pwned", "$(id)", "`id`", "a'b\"c", "two\nlines"])
    def test_hostile_echo(self, device, s):
        assert device.shell(["echo", s]).replace("\r\n", "\n") == s + "\n"
