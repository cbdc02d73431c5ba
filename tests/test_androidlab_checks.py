"""AndroidLab per-task checks on recorded final screens (written here in the uiautomator dump format),
both ways; answer judges; SR / Sub-Goal SR / RRR / ROR worked by hand."""
from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from threading import Thread
from typing import Any

import numpy as np
import pytest
from lxml import etree

from guigym.core.errors import ConfigError
from guigym.envs.android.androidlab_checks import (
    CHECKS, DEVIATIONS, ExactJudge, FuzzyJudge, Judgement, OpenAIJudge, Screen, alarms, bill, judge_task,
    parse_clock_time, reasonable_operation_ratio, reversed_redundancy_ratio, screen_similarity,
    subgoal_success_rate, success_rate,
)
from guigym.envs.android.androidlab_tasks import load_dir

FIX = Path(__file__).parent.parent / "guigym" / "envs" / "android" / "suite" / "androidlab"
HS = "\u200a"  # Google Clock puts a hair space between the time and AM/PM

_BOOLS = ("checkable", "checked", "clickable", "enabled", "focusable", "focused", "scrollable",
          "long-clickable", "password", "selected")


# ---- a tiny writer of uiautomator dumps ----------------------------------------------------------
def N(cls: str, text: str = "", desc: str = "", *children: dict, **flags: bool) -> dict:
    """A node; ``cls`` without a dot gets android.widget. Flags use _ for - (long_clickable)."""
    full = cls if "." in cls else f"android.widget.{cls}"
    return {"cls": full, "text": text, "desc": desc, "children": list(children),
            "flags": {k.replace("_", "-"): v for k, v in flags.items()}}


def dump(*roots: dict, size: tuple[int, int] = (1080, 2400), package: str = "com.example") -> str:
    """The real dump format: every attribute present, children stacked top to bottom in the parent."""
    h = etree.Element("hierarchy", rotation="0")

    def put(parent: etree._Element, nodes: list[dict], box: tuple[int, int, int, int]) -> None:
        x1, y1, x2, y2 = box
        step = (y2 - y1) // max(1, len(nodes))
        for i, n in enumerate(nodes):
            b = (x1, y1 + i * step, x2, y1 + (i + 1) * step)
            attrs = {"index": str(i), "text": n["text"], "resource-id": "", "class": n["cls"], "package": package,
                     "content-desc": n["desc"]}
            for k in _BOOLS:
                attrs[k] = "true" if n["flags"].get(k, k == "enabled") else "false"
            attrs["bounds"] = f"[{b[0]},{b[1]}][{b[2]},{b[3]}]"
            el = etree.SubElement(parent, "node", attrs)
            put(el, n["children"], b)

    put(h, [N("FrameLayout", "", "", *roots)], (0, 0, size[0], size[1]))
    return "<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>" + etree.tostring(h, encoding="unicode")


def run(task_id: str, *screens: str, **kw: Any) -> Judgement:
    return judge_task(task_id, "q", list(screens), **kw)


def ok(task_id: str, *screens: str) -> None:
    r = run(task_id, *screens)
    assert r.success is True, (task_id, r)


def bad(task_id: str, *screens: str) -> Judgement:
    r = run(task_id, *screens)
    assert r.success is False, (task_id, r)
    return r


# ---- registry ------------------------------------------------------------------------------------
def test_every_task_has_a_check() -> None:
    ids = {t.id for t in load_dir(FIX, expect=138)}
    assert ids == set(CHECKS)
    for tid in DEVIATIONS:
        assert tid in CHECKS


def test_unknown_task_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="nope_1"):
        judge_task("nope_1", "q", [])


# ---- Clock ---------------------------------------------------------------------------------------
def alarm_row(time: str, on: bool, label: str = "", days: str = "Not scheduled") -> dict:
    kids = [N("TextView", time.replace(" ", HS), "", clickable=True)]
    if label:
        kids.append(N("TextView", label, "Label", clickable=True))
    kids.append(N("TextView", days))
    kids.append(N("Switch", "", "", checkable=True, clickable=True, checked=on))
    return N("ViewGroup", "", "", *kids, clickable=True)


def alarm_list(*rows: dict) -> str:
    return dump(N("RecyclerView", "", "", *rows, scrollable=True), N("ImageButton", "", "Add alarm", clickable=True),
                N("TextView", "", "Alarm", selected=True, clickable=True))


def expanded_alarm(time: str, on: bool, vibrate: bool, ringtone: str) -> str:
    return alarm_list(N("ViewGroup", "", "",
                        N("TextView", time.replace(" ", HS), "", clickable=True),
                        N("ImageButton", "", "Collapse alarm", clickable=True),
                        N("Switch", "", "", checkable=True, clickable=True, checked=on),
                        N("TextView", ringtone, "Ringtone", clickable=True),
                        N("CheckBox", "Vibrate", "", checkable=True, clickable=True, checked=vibrate),
                        N("Button", "Delete", "", clickable=True)))


def test_alarm_parser_reads_rows() -> None:
    s = Screen(alarm_list(alarm_row("3:00 PM", True, "meeting"), alarm_row("7:00 AM", False, days="Mon, Tue, Wed, Thu, Fri")))
    a = alarms(s)
    assert [(x.time, x.on, x.label) for x in a] == [(900, True, "meeting"), (420, False, "")]
    assert a[1].days == ["Mon", "Tue", "Wed", "Thu", "Fri"]
    assert parse_clock_time(f"12:05{HS}AM") == 5 and parse_clock_time("12:00 PM") == 720


def test_clock_1_label_and_state() -> None:
    ok("clock_1", alarm_list(alarm_row("3:00 PM", True, "meeting")))
    r = bad("clock_1", alarm_list(alarm_row("3:00 PM", False, "meeting")))  # set but left off
    assert r.subgoals == {"1": True, "2": True, "3": False} and r.subgoal_score == pytest.approx(2 / 3)
    bad("clock_1", alarm_list(alarm_row("3:00 PM", True, "meetings")))


def test_clock_2_expanded_alarm() -> None:
    ok("clock_2", expanded_alarm("6:45 AM", True, vibrate=False, ringtone="Argon"))
    r = bad("clock_2", expanded_alarm("6:45 AM", True, vibrate=True, ringtone="Argon"))
    assert r.subgoals == {"1": True, "2": False, "3": True, "4": True}


def test_clock_3_weekdays() -> None:
    ok("clock_3", alarm_list(alarm_row("7:00 AM", True, days="Mon, Tue, Wed, Thu, Fri")))
    bad("clock_3", alarm_list(alarm_row("7:00 AM", True, days="Mon, Tue, Wed, Thu, Fri, Sat")))


def test_clock_7_all_off() -> None:
    ok("clock_7", alarm_list(alarm_row("7:00 AM", False), alarm_row("9:00 AM", False)))
    bad("clock_7", alarm_list(alarm_row("7:00 AM", False), alarm_row("9:00 AM", True)))


def test_clock_8_none_after_2pm() -> None:
    ok("clock_8", alarm_list(alarm_row("12:30 PM", True), alarm_row("2:00 PM", True), alarm_row("9:00 AM", True)))
    bad("clock_8", alarm_list(alarm_row("9:00 AM", True), alarm_row("2:01 PM", False)))


def test_clock_9_and_26_and_27_alarm_state() -> None:
    ok("clock_9", alarm_list(alarm_row("4:00 PM", False)))
    bad("clock_9", alarm_list(alarm_row("4:00 PM", True)))
    ok("clock_27", alarm_list(alarm_row("3:00 PM", True)))
    bad("clock_27", alarm_list(alarm_row("3:00 AM", True)))


def test_clock_18_timer() -> None:
    ok("clock_18", dump(N("TextView", "", "1 hour, 15 minutes, 0 seconds")))
    r = bad("clock_18", dump(N("TextView", "", "1 hour, 5 minutes, 0 seconds")))
    assert r.subgoals == {"1": True, "2": False, "3": True}


def test_clock_19_bedtime() -> None:
    ok("clock_19", dump(N("TextView", "BEDTIME"), N("TextView", "Bedtime 10:00 PM", clickable=True),
                        N("TextView", "Wake-up 7:00 AM", clickable=True)))
    r = bad("clock_19", dump(N("TextView", "Bedtime 10:00 AM", clickable=True), N("TextView", "Wake-up 7:00 AM")))
    assert r.subgoals == {"1": False, "2": True}


# ---- Settings ------------------------------------------------------------------------------------
def toggle_row(title: str, on: bool, summary: str = "") -> dict:
    kids = [N("TextView", title)] + ([N("TextView", summary)] if summary else [])
    kids.append(N("Switch", "", "", checkable=True, checked=on))
    return N("LinearLayout", "", "", *kids, clickable=True)


def test_setting_1_wifi_auto_off_with_non_breaking_hyphen() -> None:
    title = "Turn on Wi\u2011Fi automatically"
    ok("setting_1", dump(toggle_row(title, False, "Wi\u2011Fi will turn back on near saved networks")))
    bad("setting_1", dump(toggle_row(title, True)))


def test_setting_5_battery_percentage() -> None:
    ok("setting_5", dump(toggle_row("Battery percentage", True)))
    bad("setting_5", dump(toggle_row("Battery percentage", False)))


def test_setting_7_dark_theme() -> None:
    ok("setting_7", dump(N("TextView", "Dark theme"), toggle_row("Use Dark theme", True)))
    bad("setting_7", dump(N("TextView", "Dark theme"), toggle_row("Use Dark theme", False)))


def test_setting_8_brightness() -> None:
    ok("setting_8", dump(N("LinearLayout", "", "", N("TextView", "Brightness level"), N("TextView", "0%"), clickable=True)))
    bad("setting_8", dump(N("LinearLayout", "", "", N("TextView", "Brightness level"), N("TextView", "10%"), clickable=True)))


def test_setting_15_second_language() -> None:
    def page(first: str, second: str) -> str:
        return dump(N("LinearLayout", "", "", N("TextView", "1"), N("TextView", first), clickable=True),
                    N("LinearLayout", "", "", N("TextView", "2"), N("TextView", second), clickable=True),
                    N("TextView", "Add a language", clickable=True))
    ok("setting_15", page("English (United States)", "Español (Estados Unidos)"))
    r = bad("setting_15", page("Español (Estados Unidos)", "English (United States)"))
    assert r.subgoals == {"1": True, "2": False}


def test_setting_18_contacts_notifications() -> None:
    def page(allowed: list[str], blocked: list[str]) -> str:
        rows = [N("TextView", "Allowed")] + [toggle_row(a, True) for a in allowed]
        rows += [N("TextView", "Not allowed")] + [toggle_row(b, False) for b in blocked]
        return dump(N("RecyclerView", "", "", *rows, scrollable=True))
    ok("setting_18", page(["Calendar", "Clock"], ["Contacts"]))
    bad("setting_18", page(["Calendar", "Contacts"], ["Clock"]))


def test_setting_19_default_browser() -> None:
    def page(chosen: str) -> str:
        rows = [N("LinearLayout", "", "", N("RadioButton", "", "", checkable=True, checked=(b == chosen)),
                  N("TextView", b), clickable=True) for b in ("Chrome", "Firefox")]
        return dump(N("TextView", "Default browser app"), *rows)
    ok("setting_19", page("Firefox"))
    bad("setting_19", page("Chrome"))


def test_settings_adb_tasks() -> None:
    q = "adb shell settings list system | grep volume_ring_speaker"
    assert run("setting_9", adb={q: "volume_ring_speaker=0\n"}).success is True
    assert run("setting_9", adb={q: "volume_ring_speaker=10\n"}).success is False  # contains a 0, is not 0
    assert run("setting_0", adb={"adb shell settings get global airplane_mode_on": "1"}).success is True
    assert run("setting_0", adb={"adb shell settings get global airplane_mode_on": "0\n"}).success is False
    miss = run("setting_0")
    assert miss.success is None and "missing" in miss.reason and success_rate([miss]) is None
    pm = "adb shell pm list packages | grep 'com.booking'"
    assert run("setting_20", adb={pm: ""}).success is True
    assert run("setting_20", adb={pm: "package:com.booking\n"}).success is False


def test_settings_answer_from_adb() -> None:
    tz = "adb shell 'getprop persist.sys.timezone'"
    r = judge_task("setting_14", "What is my time zone", [], answer_text="Your time zone is Asia/Shanghai",
                   adb={tz: "Asia/Shanghai\n"}, judge=FuzzyJudge())
    assert r.success is True
    r = judge_task("setting_22", "airplane?", [], answer_text="not open",
                   adb={"adb shell settings get global airplane_mode_on": "1"}, judge=ExactJudge())
    assert r.success is False  # expected "open"


# ---- Calendar, Zoom, Contacts, Maps.me -----------------------------------------------------------
def event_page(*texts: str) -> str:
    return dump(*[N("TextView", t) for t in texts])


def test_calendar_1_and_6() -> None:
    ok("calendar_1", event_page("work", "Today", "5:00 PM"))
    r = bad("calendar_1", event_page("work", "Today", "5:30 PM"))
    assert r.subgoals == {"1": True, "2": True, "3": False}
    ok("calendar_6", event_page("homework", "May 21", "10 minutes before", "classroom 101"))
    bad("calendar_6", event_page("homework", "May 21", "10 minutes before", "classroom 102"))


def test_zoom_3_and_5() -> None:
    def join(audio_off: bool, video_off: bool, number: str = "123 456 7890") -> str:
        return dump(N("EditText", number, "", clickable=True), N("TextView", "Join with a personal link name", clickable=True),
                    toggle_row("Don't Connect To Audio", audio_off), toggle_row("Turn Off My Video", video_off))
    ok("zoom_3", join(True, True))
    r = bad("zoom_3", join(True, False))
    assert r.subgoals == {"1": True, "2": True, "3": False}

    def skin(chosen: str) -> str:
        return dump(N("TextView", "Reaction skin tone"),
                    *[N("CheckedTextView", t, "", checkable=True, checked=(t == chosen), clickable=True)
                      for t in ("Default", "Light", "Medium-light")])
    ok("zoom_5", skin("Medium-light"))
    bad("zoom_5", skin("Light"))


def contact_page(name: str, *rows: tuple[str, str]) -> str:
    return dump(N("TextView", name), N("ImageView", "", "Contact photo"),
                *[N("LinearLayout", "", desc, N("TextView", val), clickable=True) for desc, val in rows])


def test_contacts_2_and_11() -> None:
    ok("contacts_2", contact_page("John Smith", ("Call Mobile", "1 (234) 567-8"), ("Email Work", "123456@gmail.com")))
    r = bad("contacts_2", contact_page("John Smith", ("Call Mobile", "1 (234) 567-8"), ("Email Home", "123456@gmail.com")))
    assert r.subgoals == {"1": True, "2": False}

    def contact_list(*names: str) -> str:
        return dump(*[N("TextView", n, n, clickable=True) for n in names])
    ok("contacts_11", contact_list("ABC", "Chen", "Lee"))
    bad("contacts_11", contact_list("AAA", "ABC", "Chen"))


def test_map_11_work_address() -> None:
    def places(work: str) -> str:
        return dump(N("TextView", "My places"), N("TextView", "Home", clickable=True),
                    N("LinearLayout", "", "", N("TextView", "Work"), N("TextView", work), clickable=True))
    ok("map_11", places("18th Street, 3180 • 50.6 km"))
    bad("map_11", places("18th Street, 3181 • 50.6 km"))


# ---- Cantook, Pi Music, Bluecoins (history-dependent ones included) ------------------------------
def test_cantook_6_import() -> None:
    ok("cantook_6", dump(N("TextView", "Alice's Adventures in Wonderland"), N("TextView", "Lewis Carroll")))
    bad("cantook_6", dump(N("TextView", "Don Quixote")))
    # the file picker still open is not the library page: no judgement from it
    assert run("cantook_6", dump(N("TextView", "alice.epub"))).subgoals == {}


def test_cantook_11_remembers_the_categories_tab() -> None:
    cats = dump(N("TextView", "", "", N("TextView", "Categories"), selected=True, clickable=True))
    final = dump(N("TextView", "Tragedies"), N("TextView", "Hamlet"), N("TextView", "Romeo and Juliet"))
    ok("cantook_11", cats, final)
    r = bad("cantook_11", final)  # reached the list some other way
    assert r.subgoals == {"1": False, "2": True, "3": True}


def track_list(*durations: str, sort_seen: bool = False) -> list[str]:
    tabs = N("TextView", "", "", N("TextView", "TRACKS"), selected=True, clickable=True)
    rows = []
    for i, d in enumerate(durations):
        rows += [N("TextView", f"Song {i}"), N("TextView", "Artist"), N("TextView", d)]
    screens = [dump(N("TextView", "Sort By"))] if sort_seen else []
    return screens + [dump(tabs, *rows)]


def test_pimusic_12_sorted_ascending() -> None:
    ok("pimusic_12", *track_list("2:05", "3:10", "1:02:00", sort_seen=True))
    r = bad("pimusic_12", *track_list("2:05", "1:10", "3:00", sort_seen=True))
    assert r.subgoals == {"1": True, "2": False}
    bad("pimusic_12", *track_list("2:05", "3:10"))  # sorted already, but the sort menu never opened


def test_pimusic_10_seek() -> None:
    def playing(pos: str) -> str:
        return dump(N("TextView", "Now Playing list", clickable=True), N("TextView", "Equalizer", clickable=True),
                    N("TextView", pos))
    ok("pimusic_10", playing("1:27"))
    bad("pimusic_10", playing("1:28"))


def editor(kind: str, date: str, amount: str, note: str = "Notes", sign: str = "-") -> str:
    return dump(N("TextView", kind),
                N("TextView", sign, "", clickable=True),
                N("LinearLayout", "", "", N("TextView", "CNY"),
                  N("EditText", amount, "", clickable=True, long_clickable=True, focusable=True)),
                N("TextView", date, "", clickable=True),
                N("EditText", note, "", clickable=True, long_clickable=True, focusable=True))


def test_bill_extraction() -> None:
    b = bill(Screen(editor("Income", "March 8, 2024", "3.14", "Weixin red packet", "+")))
    assert (b.type, b.date, b.amount, b.note, b.sign) == ("Income", "March 8, 2024", "3.14", "Weixin red packet", "+")
    assert bill(Screen(editor("Expense", "May 1, 2024", "5.00"))).note == ""  # placeholder


def test_bluecoins_7_and_9() -> None:
    ok("bluecoins_7", editor("Income", "May 20, 2024", "8,000.00", "salary", "+"))
    r = bad("bluecoins_7", editor("Expense", "May 20, 2024", "8000.00", "Salary"))
    assert r.subgoals == {"1": False, "2": True, "3": True}
    ok("bluecoins_9", editor("Income", "March 8, 2024", "3.14", "Weixin red packet", "+"))
    bad("bluecoins_9", editor("Income", "March 9, 2024", "3.14", "Weixin red packet", "+"))


def test_bluecoins_13_needs_the_original_first() -> None:
    origin = editor("Expense", "May 13, 2024", "66.00", "Dinner", "-")
    done = editor("Income", "May 13, 2024", "66.00", "Gift", "+")
    ok("bluecoins_13", origin, done)
    r = bad("bluecoins_13", origin, editor("Income", "May 13, 2024", "66.00", "Gift", "-"))
    assert r.subgoals == {"1": True, "2": False, "3": True, "4": True}
    # the same final editor without having opened the original transaction: never judged
    assert run("bluecoins_13", done).subgoals == {}


def test_last_applicable_screen_decides() -> None:
    on = dump(toggle_row("Battery percentage", True))
    off = dump(toggle_row("Battery percentage", False))
    home = dump(N("TextView", "Phone", "", clickable=True))
    r = run("setting_5", off, on, home)  # went home after turning it on: the Settings step counts
    assert r.success is True and r.step == 1
    assert run("setting_5", on, off).success is False


# ---- answers -------------------------------------------------------------------------------------
def test_answer_tasks_need_a_judge_and_an_answer() -> None:
    r = judge_task("clock_10", "earliest alarm?", [], answer_text="7:30 AM")
    assert r.success is None and "no answer judge" in r.reason
    r = judge_task("clock_10", "earliest alarm?", [], answer_text=None, judge=ExactJudge())
    assert r.success is False  # did not answer: a real failure
    assert judge_task("clock_10", "q", [], answer_text="7:30AM.", judge=ExactJudge()).success is True
    assert judge_task("clock_10", "q", [], answer_text="7:30 AM", judge=ExactJudge()).success is False
    assert judge_task("clock_10", "q", [], answer_text="7:30AM it is", judge=FuzzyJudge()).success is True
    assert judge_task("bluecoins_1", "q", [], answer_text="You spent 11400.00 CNY", judge=FuzzyJudge()).success
    assert judge_task("bluecoins_1", "q", [], answer_text="You spent 11300.00 CNY", judge=FuzzyJudge()).success is False
    assert judge_task("clock_11", "q", [], answer_text="No, there is none", judge=FuzzyJudge()).success is True
    assert judge_task("clock_11", "q", [], answer_text="Yes", judge=FuzzyJudge()).success is False


def test_setting_6_expected_value_read_from_screen() -> None:
    s = dump(N("LinearLayout", "", "", N("TextView", "Apps"), N("TextView", "1.2 GB"), clickable=True))
    assert judge_task("setting_6", "q", [s], answer_text="Apps use 1.2 GB", judge=FuzzyJudge()).success is True
    assert judge_task("setting_6", "q", [s], answer_text="2.1 GB", judge=FuzzyJudge()).success is False
    assert judge_task("setting_6", "q", [], answer_text="1.2 GB", judge=FuzzyJudge()).success is None


class _Judge(BaseHTTPRequestHandler):
    reply = "CORRECT"
    seen: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Judge.seen.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        data = json.dumps({"choices": [{"message": {"content": _Judge.reply}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a: Any) -> None:
        pass


def test_openai_judge_against_a_local_endpoint() -> None:
    srv = HTTPServer(("127.0.0.1", 0), _Judge)
    t = Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        j = OpenAIJudge(f"http://127.0.0.1:{srv.server_port}/v1", model="m", api_key="k")
        _Judge.reply = "CORRECT"
        assert judge_task("map_10", "how long?", [], answer_text="about nine minutes", judge=j).success is True
        sent = _Judge.seen[-1]
        assert sent["path"] == "/v1/chat/completions" and sent["auth"] == "Bearer k"
        assert "9min" in sent["body"]["messages"][0]["content"] and sent["body"]["model"] == "m"
        _Judge.reply = "INCORRECT"
        assert judge_task("map_10", "q", [], answer_text="1 hour", judge=j).success is False
        _Judge.reply = "maybe"
        r = judge_task("map_10", "q", [], answer_text="x", judge=j)
        assert r.success is None and "no verdict" in r.reason
    finally:
        srv.shutdown()
        srv.server_close()
    dead = OpenAIJudge(f"http://127.0.0.1:{srv.server_port}/v1", model="m", timeout=2)
    r = judge_task("map_10", "q", [], answer_text="x", judge=dead)
    assert r.success is None and "failed" in r.reason
    with pytest.raises(ConfigError):
        OpenAIJudge("file:///etc/passwd", model="m")


# ---- metrics, worked by hand ---------------------------------------------------------------------
def test_sr_and_subgoal_sr() -> None:
    rs = [Judgement("a", True, {"1": True}), Judgement("b", False, {"1": True, "2": False, "3": False, "4": True}),
          Judgement("c", False, {}), Judgement("d", None, None, "no judge")]
    # SR over the 3 scorable: 1/3; Sub-Goal SR: (1 + 2/4 + 0) / 3 = 0.5
    assert success_rate(rs) == pytest.approx(1 / 3)
    assert subgoal_success_rate(rs) == pytest.approx(0.5)
    assert success_rate([]) is None


def test_rrr() -> None:
    assert reversed_redundancy_ratio(6, 8, True) == 0.75
    assert reversed_redundancy_ratio(6, 8, False) is None
    assert reversed_redundancy_ratio(None, 8, True) is None


def test_ror_hand_worked() -> None:
    a = np.zeros((2, 2, 3), np.uint8)
    b = a.copy()
    b[0, 0] = 7  # 3 of 12 channels differ: similarity 9/12
    white = np.full((2, 2, 3), 255, np.uint8)
    assert screen_similarity(a, b) == 0.75
    assert screen_similarity(white, white) == 0.0
    # 5 shots [a, a, b, b, x]: the last is dropped; pairs (a,a) same, (a,b) differ, (b,b) same -> 2 no-ops
    # ROR = 1 - 2 / (5 - 1) = 0.5
    assert reasonable_operation_ratio([a, a, b, b, white]) == 0.5
    assert reasonable_operation_ratio([a, a]) == 1.0  # two shots: AndroidLab counts no pairs
    assert reasonable_operation_ratio([a]) == 1.0
    assert reasonable_operation_ratio([a, b, a]) == 1.0


def test_ground_truth_lengths_cover_the_tasks() -> None:
    lengths = json.loads((FIX / "ground_truth_length.json").read_text())
    assert lengths["bluecoins_1"] == 3 and lengths["bluecoins_10"] == 9
    assert set(CHECKS) <= set(lengths)
