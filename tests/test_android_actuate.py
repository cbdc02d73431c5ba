"""Typed actions -> exact AndroidDevice calls, for each dialect (parse the dialect's text, then actuate)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from guigym.core import actions as A
from guigym.core.dialects import AndroidLabDialect, AndroidWorldDialect, UITarsDialect
from guigym.core.errors import ActionNotPossible, ConfigError
from guigym.envs.android.actuate import Actuator, androidlab_swipe, box_center, relative_to_pixels
from guigym.envs.android.observation import parse_bounds, parse_ui_xml, simplify, ui_elements

W, H = 1080, 2400

# a small dump in uiautomator's format: element 0 = frame, 1 = edit field, 2 = button, 3 = list
DUMP = """<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>
<hierarchy rotation="0">
  <node index="0" text="" resource-id="" class="android.widget.FrameLayout" package="com.x" content-desc=""
        checkable="false" checked="false" clickable="false" enabled="true" focusable="false" focused="false"
        scrollable="false" long-clickable="false" password="false" selected="false" bounds="[0,0][1080,2400]">
    <node index="0" text="" resource-id="com.x:id/name" class="android.widget.EditText" package="com.x"
          content-desc="" checkable="false" checked="false" clickable="true" enabled="true" focusable="true"
          focused="false" scrollable="false" long-clickable="true" password="false" selected="false"
          bounds="[40,300][1040,420]" />
    <node index="1" text="Save" resource-id="com.x:id/save" class="android.widget.Button" package="com.x"
          content-desc="" checkable="false" checked="false" clickable="true" enabled="true" focusable="true"
          focused="false" scrollable="false" long-clickable="false" password="false" selected="false"
          bounds="[801,500][1001,601]" />
    <node index="2" text="" resource-id="com.x:id/list" class="androidx.recyclerview.widget.RecyclerView"
          package="com.x" content-desc="" checkable="false" checked="false" clickable="false" enabled="true"
          focusable="true" focused="false" scrollable="true" long-clickable="false" password="false"
          selected="false" bounds="[0,700][1080,2300]" />
  </node>
</hierarchy>"""


class RecordingDevice:
    """Records every AndroidDevice call as a tuple; serves ``DUMP`` and a fixed screen size."""

    serial = "fake-1"

    def __init__(self, xml: str = DUMP, size: tuple[int, int] = (W, H)) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.xml, self.size = xml, size

    def screen_size(self) -> tuple[int, int]:
        self.calls.append(("screen_size",))
        return self.size

    def ui_xml(self) -> str:
        self.calls.append(("ui_xml",))
        return self.xml

    def tap(self, x, y):
        self.calls.append(("tap", x, y))

    def swipe(self, x1, y1, x2, y2, duration_ms=300):
        self.calls.append(("swipe", x1, y1, x2, y2, duration_ms))

    def long_press(self, x, y, duration_ms=1000):
        self.calls.append(("long_press", x, y, duration_ms))

    def input_text(self, text):
        self.calls.append(("input_text", text))

    def keyevent(self, key):
        self.calls.append(("keyevent", key))

    def home(self):
        self.calls.append(("home",))

    def back(self):
        self.calls.append(("back",))

    def enter(self):
        self.calls.append(("enter",))

    def launch_app(self, name):
        self.calls.append(("launch_app", name))

    def shell(self, argv, timeout_s=20.0):
        self.calls.append(("shell", tuple(argv)))
        return ""

    def actions(self) -> list[tuple[Any, ...]]:
        """Calls that change the device (reads of screen size / dump left out)."""
        return [c for c in self.calls if c[0] not in ("screen_size", "ui_xml")]


def run(action: A.Action, coords: str = "absolute", **kw: Any):
    dev, sleeps = RecordingDevice(), []
    res = Actuator(dev, coords, sleep=sleeps.append, **kw).execute(action)  # type: ignore[arg-type]
    return dev, res, sleeps


# --------------------------------------------------------------------------- geometry


def test_relative_to_pixels_rounds_and_clamps():
    assert relative_to_pixels(500, 1080) == 540
    assert relative_to_pixels(333, 1080) == 360  # 359.64 -> 360
    assert relative_to_pixels(999, 1080) == 1079  # 1078.92 -> 1079
    assert relative_to_pixels(1000, 1080) == 1079  # clamped to the last pixel
    assert relative_to_pixels(-5, 1080) == 0


def test_box_center_and_bad_box():
    assert box_center([100, 200, 300, 401]) == (200.0, 300.5)
    with pytest.raises(ConfigError, match="box"):
        box_center([1, 2, 3])
    with pytest.raises(ConfigError, match="box"):
        box_center([10, 10, 5, 20])


def test_androidlab_swipe_units_follow_published_controller():
    # unit = int(1080 / 10) = 108 for every direction; vertical moves 2 units per unit of dist
    assert androidlab_swipe("up", "short", (W, H)) == (540, 1200, 540, 1200 - 216)
    assert androidlab_swipe("down", "medium", (W, H), start=(100, 900)) == (100, 900, 100, 900 + 432)
    assert androidlab_swipe("left", "long", (W, H), start=(1000, 500)) == (1000, 500, 1000 - 1080, 500)
    assert androidlab_swipe("right", 50, (W, H), start=(10, 10)) == (10, 10, 60, 10)
    with pytest.raises(ConfigError, match="direction"):
        androidlab_swipe("sideways", "short", (W, H))
    with pytest.raises(ConfigError, match="dist"):
        androidlab_swipe("up", "far", (W, H))


@pytest.mark.parametrize("direction", ["up", "down", "left", "right"])
@pytest.mark.parametrize("dist", ["short", "medium", "long"])
def test_androidlab_dialect_swipe_matches_geometry(direction, dist):
    text = f'do(action="Swipe", element=[300, 1500], direction="{direction}", dist="{dist}")'
    dev, _, _ = run(AndroidLabDialect(screen=(W, H)).parse(text))
    assert dev.actions() == [("swipe", *androidlab_swipe(direction, dist, (W, H), start=(300, 1500)), 400)]


def test_relative_tap_lands_inside_the_pixel_bounds_of_v4_nodes():
    """A tap at the centre of a node's v4 (0-999) bounds, converted back, hits that node."""
    fixture = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "android" / "UIAUTOMATOR_DUMP_API27.xml"
    if not fixture.exists():
        pytest.skip(f"shared fixture missing: {fixture}")
    xml = fixture.read_text(encoding="utf-8")
    tree = parse_ui_xml(xml)
    screen = tree.screen_size()
    rel_lines = simplify(tree, screen, relative=True).splitlines()[1:]
    px_lines = simplify(tree, screen).splitlines()
    assert len(rel_lines) == len(px_lines) > 5
    checked = 0
    for rel, px in zip(rel_lines, px_lines):
        rb, pb = parse_bounds(rel.rsplit(";", 1)[1]), parse_bounds(px.rsplit(";", 1)[1])
        if pb[2] - pb[0] < 8 or pb[3] - pb[1] < 8:
            continue  # a few pixels wide: below the 0-999 grid's resolution
        dev = RecordingDevice(size=screen)
        Actuator(dev, "relative999").tap_box(rb)
        (_, x, y), = dev.actions()
        assert pb[0] <= x < pb[2] and pb[1] <= y < pb[3], (rel, px, x, y)
        checked += 1
    assert checked >= 5


# --------------------------------------------------------------------------- AndroidLab dialect


def test_androidlab_absolute_tap_longpress_type_keys_launch_finish():
    d = AndroidLabDialect(screen=(W, H))
    cases = [
        ('do(action="Tap", element=[100, 200, 300, 400])', [("tap", 200, 300)]),
        ('do(action="Long Press", element=[0, 0, 10, 10])', [("long_press", 5, 5, 1000)]),
        ('do(action="Type", text="héllo wörld")', [("input_text", "héllo wörld")]),
        ('do(action="Back")', [("back",)]),
        ('do(action="Press Home")', [("home",)]),
        ('do(action="Enter")', [("enter",)]),
        ('do(action="Launch", app="Calendar")', [("launch_app", "Calendar")]),
    ]
    for text, expected in cases:
        dev, res, _ = run(d.parse(text))
        assert dev.actions() == expected, text
        assert not res.ended
    dev, res, sleeps = run(d.parse('do(action="Wait")'))
    assert dev.actions() == [] and sleeps == [5.0]
    dev, res, _ = run(d.parse('finish(message="The meeting is at 3 pm")'))
    assert res.ended and res.answer == "The meeting is at 3 pm" and res.status == "complete" and dev.actions() == []


def test_androidlab_relative_boxes_through_relative999():
    # boxes in 0-999 units, parsed without conversion, converted by the actuator
    d = AndroidLabDialect()
    dev, res, _ = run(d.parse('do(action="Tap", element=[100, 200, 300, 400])'), "relative999")
    assert dev.actions() == [("tap", round(200 * W / 1000), round(300 * H / 1000))] == [("tap", 216, 720)]
    assert res.points == [(216, 720)]


def test_type_then_enter_option_and_androidlab_enter_semantics():
    dev, _, _ = run(A.Type(text="a b"), enter_after_type=True)
    assert dev.actions() == [("input_text", "a b"), ("enter",)]


# --------------------------------------------------------------------------- AndroidWorld dialect


def test_androidworld_index_actions_resolve_through_ui_elements():
    d = AndroidWorldDialect(screen=(W, H))
    els = ui_elements(DUMP)
    assert [e.class_name.rsplit(".", 1)[-1] for e in els] == ["FrameLayout", "EditText", "Button", "RecyclerView"]
    dev, res, _ = run(d.parse('{"action_type": "click", "index": 2}'))
    assert dev.actions() == [("tap", 901, 550)]  # int((801+1001)/2), int((500+601)/2)
    dev, _, sleeps = run(d.parse('{"action_type": "double_tap", "index": 2}'))
    assert dev.actions() == [("tap", 901, 550), ("tap", 901, 550)] and len(sleeps) == 1
    dev, _, _ = run(d.parse('{"action_type": "input_text", "text": "Ann Lee", "index": 1}'))
    assert dev.actions() == [("tap", 540, 360), ("shell", ("input", "keycombination", "113", "29")),
                             ("keyevent", "KEYCODE_DEL"), ("input_text", "Ann Lee")]


def test_androidworld_bad_index_is_not_possible():
    with pytest.raises(ActionNotPossible, match=r"element index 9 is not on screen \(valid: 0..3\)"):
        run(AndroidWorldDialect().parse('{"action_type": "click", "index": 9}'))


def test_androidworld_scroll_geometry_screen_and_element():
    d = AndroidWorldDialect(screen=(W, H))
    dev, _, _ = run(d.parse('{"action_type": "scroll", "direction": "down"}'))
    assert dev.actions() == [("swipe", 540, 1200, 540, 0, 300)]  # finger moves up to the top edge
    dev, _, _ = run(d.parse('{"action_type": "scroll", "direction": "up"}'))
    assert dev.actions() == [("swipe", 540, 1200, 540, 2400, 300)]
    dev, _, _ = run(d.parse('{"action_type": "scroll", "direction": "down", "index": 3}'))
    assert dev.actions() == [("swipe", 540, 1500, 540, 700, 300)]  # inside the list's bbox
    dev, _, _ = run(d.parse('{"action_type": "scroll", "direction": "left", "index": 3}'))
    assert dev.actions() == [("swipe", 540, 1500, 1080, 1500, 300)]


def test_androidworld_points_keys_app_answer_status():
    d = AndroidWorldDialect(screen=(W, H))
    expect = {
        '{"action_type": "click", "x": 12, "y": 34}': [("tap", 12, 34)],
        '{"action_type": "long_press", "x": 12, "y": 34}': [("long_press", 12, 34, 1000)],
        '{"action_type": "input_text", "text": "x y"}': [("input_text", "x y")],
        '{"action_type": "navigate_back"}': [("back",)],
        '{"action_type": "navigate_home"}': [("home",)],
        '{"action_type": "keyboard_enter"}': [("enter",)],
        '{"action_type": "open_app", "app_name": "Contacts"}': [("launch_app", "Contacts")],
        '{"action_type": "swipe", "direction": "up"}': [("swipe", 540, 2400, 540, 0, 500)],
    }
    for text, calls in expect.items():
        dev, _, _ = run(d.parse(text))
        assert dev.actions() == calls, text
    _, res, _ = run(d.parse('{"action_type": "answer", "text": "42"}'))
    assert res.ended and res.answer == "42"
    _, res, _ = run(d.parse('{"action_type": "status", "goal_status": "infeasible"}'))
    assert res.ended and res.status == "infeasible" and res.answer is None
    _, _, sleeps = run(d.parse('{"action_type": "wait"}'))
    assert sleeps == [1.0]


# --------------------------------------------------------------------------- UI-TARS mobile


def test_uitars_mobile_actions():
    d = UITarsDialect(platform="android")
    expect = {
        "Action: click(point='<point>100 200</point>')": [("tap", 100, 200)],
        "Action: long_press(point='<point>100 200</point>')": [("long_press", 100, 200, 1000)],
        "Action: type(content='hi there')": [("input_text", "hi there")],
        "Action: press_back()": [("back",)],
        "Action: press_home()": [("home",)],
        "Action: open_app(app_name='Clock')": [("launch_app", "Clock")],
        "Action: drag(start_point='<point>10 2000</point>', end_point='<point>10 500</point>')":
            [("swipe", 10, 2000, 10, 500, 300)],
    }
    for text, calls in expect.items():
        dev, _, _ = run(d.parse(text))
        assert dev.actions() == calls, text
    scroll = d.parse("Action: scroll(point='<point>540 1200</point>', direction='down')")
    dev, _, _ = run(scroll)
    assert dev.actions() == [("swipe", 540, 1200, 540, 1200 - int(abs(scroll.dy)), 300)]
    _, res, _ = run(d.parse("Action: finished(content='all done')"))
    assert res.ended and res.answer == "all done"


# --------------------------------------------------------------------------- refusals / options


@pytest.mark.parametrize("action", [A.Hover(x=1, y=2), A.RightClick(x=1, y=2), A.Hotkey(keys=("ctrl", "c")),
                                    A.Goto(url="http://x"), A.Click(x=1, y=2, button="right")])
def test_desktop_and_web_actions_are_not_possible(action):
    with pytest.raises(ActionNotPossible):
        run(action)


def test_press_maps_keys_and_refuses_unknown():
    dev, _, _ = run(A.Press(key="Backspace"))
    assert dev.actions() == [("keyevent", "KEYCODE_DEL")]
    dev, _, _ = run(A.Press(key="Enter"))
    assert dev.actions() == [("enter",)]
    with pytest.raises(ActionNotPossible, match="F13"):
        run(A.Press(key="F13"))


def test_bad_coords_option():
    with pytest.raises(ConfigError, match="coords"):
        Actuator(RecordingDevice(), "relative")  # type: ignore[arg-type]


def test_screen_size_read_once_and_only_when_needed():
    dev = RecordingDevice()
    act = Actuator(dev, "relative999", sleep=lambda s: None)
    act.execute(A.Tap(x=500, y=500))
    act.execute(A.Tap(x=0, y=999))
    assert dev.calls.count(("screen_size",)) == 1
    assert dev.actions() == [("tap", 540, 1200), ("tap", 0, 2398)]
    dev2 = RecordingDevice()
    Actuator(dev2).execute(A.Tap(x=5, y=6))
    assert ("screen_size",) not in dev2.calls
