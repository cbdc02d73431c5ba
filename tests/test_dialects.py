"""Benchmark dialects: golden strings from each benchmark's documented format, print->parse round
trips for every action a dialect can express, and refusals that name the problem.

Golden strings are copied from (or built on) the examples in each benchmark's prompts and parsers;
the source is cited next to each group.
"""
from __future__ import annotations

import string
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guigym.core import actions as A
from guigym.core.dialect import DIALECTS
from guigym.core.dialects import smart_resize
from guigym.core.errors import ActionParseError, ConfigError

NAMES = ["uitars", "computer_13", "pyautogui", "androidlab", "androidworld", "webarena", "browsergym", "webrl", "thought"]


def make(name: str, **kwargs):
    return DIALECTS.get(name)(**kwargs)


def test_get_dialect_resolves_every_benchmark_name_lazily():
    # a fresh interpreter: nothing has imported guigym.core.dialects yet
    code = ("from guigym.core.dialect import DIALECTS, get_dialect\n"
            f"names = {NAMES!r}\n"
            "assert not set(names) & set(DIALECTS.names())\n"
            "for n in names:\n"
            "    d = get_dialect(n)\n"
            "    assert d.name == n and callable(d.parse) and callable(d.format)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ---- golden strings -------------------------------------------------------------------------------
UITARS = make("uitars")  # absolute coordinates, no screen: model pixels are screenshot pixels
UITARS_224 = make("uitars", screen=(224, 224), min_pixels=1)
UITARS_MOBILE = make("uitars", platform="android")
ANDROIDLAB = make("androidlab", screen=(1080, 2400))
ANDROIDWORLD = make("androidworld", screen=(1080, 2400))
WEBARENA = make("webarena", screen=(1280, 720))
WEBRL = make("webrl", screen=(1280, 720))

GOLDEN_PARSE = [
    # bytedance/UI-TARS codes/tests/action_parser_test.py (224x224 image, min_pixels=1: identity resize)
    (UITARS_224, "Thought: test\nAction: click(point='<point>200 300</point>')", A.Click(x=200, y=300)),
    (UITARS_224, "Thought: test\nAction: click(start_box='<|box_start|>(112,224)<|box_end|>')", A.Click(x=112, y=224)),
    # bytedance/UI-TARS README_coordinates.md: "Action: click(start_box='(197,525)')"
    (UITARS, "Thought: xxx\nAction: click(start_box='(197,525)')", A.Click(x=197, y=525)),
    # UI-TARS-1.5 COMPUTER_USE_DOUBAO action space (codes/prompts.py)
    (UITARS, "Action: left_double(point='<point>10 20</point>')", A.DoubleClick(x=10, y=20)),
    (UITARS, "Action: right_single(point='<point>10 20</point>')", A.RightClick(x=10, y=20)),
    (UITARS, "Action: drag(start_point='<point>1 2</point>', end_point='<point>3 4</point>')", A.Drag(1, 2, 3, 4)),
    (UITARS, "Action: hotkey(key='ctrl c')", A.Hotkey(keys=("ctrl", "c"))),
    (UITARS, "Action: hotkey(key='enter')", A.Press(key="enter")),
    (UITARS, "Action: type(content='hello\\n')", A.Type(text="hello\n")),
    (UITARS, "Action: scroll(point='<point>5 6</point>', direction='down')", A.Scroll(dy=500, x=5, y=6)),
    (UITARS, "Action: scroll(point='<point>5 6</point>', direction='left')", A.Scroll(dx=-500, x=5, y=6)),
    (UITARS, "Action: wait()", A.Wait(seconds=5.0)),
    (UITARS, "Action: finished(content='xxx')", A.Done(answer="xxx")),
    # UI-TARS-1.0 (OSWorld mm_agents/uitars_agent.py prompts): box tokens, a box means its centre
    (UITARS, "Action: click(start_box='<|box_start|>(100,200,300,400)<|box_end|>')", A.Click(x=200, y=300)),
    (UITARS, "Action: finished()", A.Done()),
    (UITARS, "Action: call_user()", A.Fail()),
    # UI-TARS-1.5 MOBILE_USE_DOUBAO (+ its "Output Example" with a <think> block)
    (UITARS_MOBILE, "<think>Now that...</think>\nThought: Let's click ...\nAction: click(point='<point>100 200</point>')",
     A.Tap(x=100, y=200)),
    (UITARS_MOBILE, "Action: long_press(point='<point>1 2</point>')", A.LongPress(x=1, y=2)),
    (UITARS_MOBILE, "Action: open_app(app_name='Settings')", A.Launch(app="Settings")),
    (UITARS_MOBILE, "Action: drag(start_point='<point>1 2</point>', end_point='<point>1 9</point>')", A.Swipe(1, 2, 1, 9)),
    (UITARS_MOBILE, "Action: press_home()", A.Home()),
    (UITARS_MOBILE, "Action: press_back()", A.Back()),
    (UITARS_MOBILE, "Action: hotkey(key='enter')", A.Enter()),
    # an unescaped quote inside type(content=...), which UI-TARS' own parser tolerates
    (UITARS, "Action: type(content='it's')", A.Type(text="it's")),

    # xlang-ai/OSWorld mm_agents/prompts.py (computer_13 ACTION_SPACE and its examples)
    (make("computer_13"), '```\n{\n  "action_type": "MOVE_TO",\n  "x": 1319.11,\n  "y": 65.06\n}\n```',
     A.Hover(x=1319.11, y=65.06)),
    (make("computer_13"), '```json\n{"action_type": "CLICK", "x": 10, "y": 20, "button": "right"}\n```',
     A.Click(x=10, y=20, button="right")),
    (make("computer_13"), '{"action_type": "CLICK", "parameters": {"x": 10, "y": 20, "num_clicks": 2}}',
     A.DoubleClick(x=10, y=20)),
    (make("computer_13"), '{"action_type": "TYPING", "text": "hello world"}', A.Type(text="hello world")),
    (make("computer_13"), '{"action_type": "HOTKEY", "keys": ["ctrl", "c"]}', A.Hotkey(keys=("ctrl", "c"))),
    (make("computer_13"), '{"action_type": "SCROLL", "dx": 0, "dy": -3}', A.Scroll(dx=0, dy=300)),
    (make("computer_13"), '{"action_type": "PRESS", "key": "enter"}', A.Press(key="enter")),
    (make("computer_13"), "DONE", A.Done()),
    (make("computer_13"), "```WAIT```", A.Wait()),
    (make("computer_13"), '```json\n{"action_type": "MOVE_TO", "x": 1, "y": 2}\n```\n```json\n'
                          '{"action_type": "DRAG_TO", "x": 3, "y": 4}\n```', A.Drag(1, 2, 3, 4)),

    # OSWorld mm_agents/prompts.py (pyautogui action space: code block or WAIT/FAIL/DONE) + pyautogui docs
    (make("pyautogui"), "```python\npyautogui.click(100, 200)\n```", A.Click(x=100, y=200)),
    (make("pyautogui"), "pyautogui.click(x=100, y=200, button='right')", A.Click(x=100, y=200, button="right")),
    (make("pyautogui"), "pyautogui.click(100, 200, clicks=2)", A.DoubleClick(x=100, y=200)),
    (make("pyautogui"), "pyautogui.rightClick(5, 6)", A.RightClick(x=5, y=6)),
    (make("pyautogui"), "pyautogui.moveTo(100, 200, 2)", A.Hover(x=100, y=200)),
    (make("pyautogui"), "pyautogui.moveTo(1, 2)\npyautogui.dragTo(300, 400, 2, button='left')", A.Drag(1, 2, 300, 400)),
    (make("pyautogui"), "pyautogui.scroll(10, x=100, y=100)", A.Scroll(dy=-1000, x=100, y=100)),
    (make("pyautogui"), "pyautogui.hscroll(-10)", A.Scroll(dx=-1000)),
    (make("pyautogui"), "pyautogui.typewrite('Hello world!', interval=0.25)", A.Type(text="Hello world!")),
    (make("pyautogui"), "pyautogui.press('enter')", A.Press(key="enter")),
    (make("pyautogui"), "pyautogui.hotkey('ctrl', 'shift', 'esc')", A.Hotkey(keys=("ctrl", "shift", "esc"))),
    (make("pyautogui"), "keyDown('shift')", A.KeyDown(key="shift")),
    (make("pyautogui"), "time.sleep(0.5)", A.Wait(seconds=0.5)),
    (make("pyautogui"), "```FAIL```", A.Fail()),

    # THUDM/Android-Lab templates/text_only_mobile.py (SYSTEM_PROMPT_ANDROID_TEXT_GPT examples)
    (ANDROIDLAB, '```\ndo(action="Swipe", element=[680, 2016, 760, 2276], direction="up", dist="long")\n```',
     A.Swipe(720, 2146, 720, 2146 - 2 * 1080, duration_ms=400)),
    (ANDROIDLAB, 'do(action="Tap", element=[863, 390, 1021, 672])', A.Tap(x=942, y=531)),
    (ANDROIDLAB, 'finish(message="The alarm has been set to go off at 9:00 a.m. once every Monday")',
     A.Done(answer="The alarm has been set to go off at 9:00 a.m. once every Monday")),
    (ANDROIDLAB, 'do(action="Long Press", element=[200, 300, 250, 350])', A.LongPress(x=225, y=325)),
    (ANDROIDLAB, 'do(action="Type", text="Hello World")', A.Type(text="Hello World")),
    # templates/android_screenshot_template.py (older names and argument=)
    (ANDROIDLAB, 'do(action="Swipe", argument="up")', A.Swipe(540, 1200, 540, 1200 - 2 * 216, duration_ms=400)),
    (ANDROIDLAB, 'do(action="Press Home")', A.Home()),
    (ANDROIDLAB, 'do(action="Press Back")', A.Back()),
    (ANDROIDLAB, 'do(action="Press Enter")', A.Enter()),
    (ANDROIDLAB, 'do(action="Type", argument="New York")', A.Type(text="New York")),
    # page_executor/text_executor.py (Launch, Wait = 5 s)
    (ANDROIDLAB, 'do(action="Launch", app="Clock")', A.Launch(app="Clock")),
    (ANDROIDLAB, 'do(action="Wait")', A.Wait(seconds=5.0)),

    # google-research/android_world android_world/agents/m3a.py prompt + env/json_action.py
    (ANDROIDWORLD, 'Reason: open it\nAction: {"action_type": "click", "index": 7}', A.Click(element="7")),
    (ANDROIDWORLD, '{"action_type": "click", "x": 100, "y": 200}', A.Tap(x=100, y=200)),
    (ANDROIDWORLD, '{"action_type": "input_text", "text": "hello", "index": 3}', A.Fill(element="3", text="hello")),
    (ANDROIDWORLD, '{"action_type": "input_text", "text": "hello"}', A.Type(text="hello")),
    (ANDROIDWORLD, '{"action_type": "scroll", "direction": "down"}', A.Scroll(dy=1200)),
    (ANDROIDWORLD, '{"action_type": "scroll", "direction": "left", "index": 2}', A.Scroll(dx=-540, element="2")),
    (ANDROIDWORLD, '{"action_type": "swipe", "direction": "up"}', A.Swipe(540, 2400, 540, 0, duration_ms=500)),
    (ANDROIDWORLD, '{"action_type": "long_press", "x": 1, "y": 2}', A.LongPress(x=1, y=2)),
    (ANDROIDWORLD, '{"action_type": "navigate_home"}', A.Home()),
    (ANDROIDWORLD, '{"action_type": "navigate_back"}', A.Back()),
    (ANDROIDWORLD, '{"action_type": "keyboard_enter"}', A.Enter()),
    (ANDROIDWORLD, '{"action_type": "open_app", "app_name": "Contacts"}', A.Launch(app="Contacts")),
    (ANDROIDWORLD, '{"action_type": "wait"}', A.Wait(seconds=1.0)),
    (ANDROIDWORLD, '{"action_type": "status", "goal_status": "complete"}', A.Done()),
    (ANDROIDWORLD, '{"action_type": "status", "goal_status": "infeasible"}', A.Fail()),
    (ANDROIDWORLD, '{"action_type": "answer", "text": "42"}', A.Done(answer="42")),
    (ANDROIDWORLD, "Action: {'action_type': 'double_tap', 'x': 3, 'y': 4}", A.DoubleClick(x=3, y=4)),

    # web-arena-x/webarena agent/prompts/raw/p_cot_id_actree_2s.py (few-shot answers) + browser_env/actions.py
    (WEBARENA, "Let's think step-by-step. ... Its price is $279.49. I think I have achieved the objective. I will "
               "issue the stop action with the answer. In summary, the next action I will perform is ```stop [$279.49]```",
     A.Done(answer="$279.49")),
    (WEBARENA, "In summary, the next action I will perform is ```type [164] [restaurants near CMU] [1]```",
     A.Fill(element="164", text="restaurants near CMU\n")),
    (WEBARENA, "type [164] [restaurants near CMU]", A.Fill(element="164", text="restaurants near CMU\n")),
    (WEBARENA, "type [164] [restaurants near CMU] [0]", A.Fill(element="164", text="restaurants near CMU")),
    (WEBARENA, "click [1234]", A.Click(element="1234")),
    (WEBARENA, "hover [12]", A.Hover(element="12")),
    (WEBARENA, "press [Ctrl+v]", A.Hotkey(keys=("Ctrl", "v"))),
    (WEBARENA, "press [Enter]", A.Press(key="Enter")),
    (WEBARENA, "scroll [direction=down]", A.Scroll(dy=720)),
    (WEBARENA, "scroll [up]", A.Scroll(dy=-720)),
    (WEBARENA, "goto [http://homepage.com/password.html]", A.Goto(url="http://homepage.com/password.html")),
    (WEBARENA, "go_back", A.GoBack()),
    (WEBARENA, "go_forward", A.GoForward()),
    (WEBARENA, "new_tab", A.NewTab()),
    (WEBARENA, "tab_focus [1]", A.TabFocus(index=1)),
    (WEBARENA, "close_tab", A.CloseTab()),
    (WEBARENA, "stop [N/A]", A.Done(answer="N/A")),
    (WEBARENA, "stop", A.Done()),

    # ServiceNow/BrowserGym browsergym/core/src/browsergym/core/action/functions.py (docstring examples)
    (make("browsergym"), "click('a51')", A.Click(element="a51")),
    (make("browsergym"), "click('b22', button=\"right\")", A.Click(element="b22", button="right")),
    (make("browsergym"), "dblclick('12')", A.DoubleClick(element="12")),
    (make("browsergym"), "hover('b8')", A.Hover(element="b8")),
    (make("browsergym"), "fill('45', \"multi-line\\nexample\")", A.Fill(element="45", text="multi-line\nexample")),
    (make("browsergym"), "fill('a12', \"example with \\\"quotes\\\"\")", A.Fill(element="a12", text='example with "quotes"')),
    (make("browsergym"), "select_option('a48', \"blue\")", A.Select(element="a48", option="blue")),
    (make("browsergym"), "press('88', 'Backspace')", A.Press(key="Backspace")),
    (make("browsergym"), "press('a61', 'Meta+Shift+t')", A.Hotkey(keys=("Meta", "Shift", "t"))),
    (make("browsergym"), "scroll(-50.2, -100.5)", A.Scroll(dx=-50.2, dy=-100.5)),
    (make("browsergym"), "scroll_at(50, 100, -50, -100)", A.Scroll(dx=-50, dy=-100, x=50, y=100)),
    (make("browsergym"), "mouse_move(65.2, 158.5)", A.Hover(x=65.2, y=158.5)),
    (make("browsergym"), "mouse_click(56, 712.56, 'right')", A.Click(x=56, y=712.56, button="right")),
    (make("browsergym"), "mouse_dblclick(5, 236)", A.DoubleClick(x=5, y=236)),
    (make("browsergym"), "mouse_drag_and_drop(10.7, 325, 235.6, 24.54)", A.Drag(10.7, 325, 235.6, 24.54)),
    (make("browsergym"), "keyboard_press('ControlOrMeta+a')", A.Hotkey(keys=("ControlOrMeta", "a"))),
    (make("browsergym"), "keyboard_up('Shift')", A.KeyUp(key="Shift")),
    (make("browsergym"), "keyboard_type('Hello world!')", A.Type(text="Hello world!")),
    (make("browsergym"), "keyboard_insert_text('Hello world!')", A.Type(text="Hello world!")),
    (make("browsergym"), "goto('http://www.example.com')", A.Goto(url="http://www.example.com")),
    (make("browsergym"), "go_back()", A.GoBack()),
    (make("browsergym"), "new_tab()", A.NewTab()),
    (make("browsergym"), "tab_close()", A.CloseTab()),
    (make("browsergym"), "tab_focus(2)", A.TabFocus(index=2)),
    (make("browsergym"), "send_msg_to_user(\"Based on the results of my search, the city was built in 1751.\")",
     A.Done(answer="Based on the results of my search, the city was built in 1751.")),
    (make("browsergym"), "report_infeasible(\"I cannot follow these instructions because there is no email field.\")",
     A.Fail(reason="I cannot follow these instructions because there is no email field.")),
    (make("browsergym"), "noop()", A.Wait(seconds=1.0)),
    (make("browsergym"), "noop(500)", A.Wait(seconds=0.5)),
    (make("browsergym"), "<action>\n# the search box\nfill('b12', 'cats')\n</action>", A.Fill(element="b12", text="cats")),

    # WebRL policy prompt examples (LLaMA-Factory/data/web_prompt.py in WebRL-based repos) and
    # THUDM/VisualAgentBench VAB-WebArena-Lite/new/actions.py (create_webrl_id_based_action)
    (WEBRL, "# Element: the 'REPORTS' section on the left sidebar\ndo(action=\"Click\", element=\"7\")", A.Click(element="7")),
    (WEBRL, "# Element: the 'Period' dropdown, middle center\ndo(action=\"Select Dropdown Option\", argument=\"Month\", "
            "element=\"20\")", A.Select(element="20", option="Month")),
    (WEBRL, "do(action=\"Type\", argument=\"01/01/2023\", element=\"22\")", A.Fill(element="22", text="01/01/2023")),
    (WEBRL, "do(action=\"Scroll Down\")", A.Scroll(dy=480)),
    (WEBRL, "do(action=\"Scroll Up\")", A.Scroll(dy=-480)),
    (WEBRL, "exit(message=\"The top-3 best-selling products in January 2023 are: 1\")",
     A.Done(answer="The top-3 best-selling products in January 2023 are: 1")),
    (WEBRL, "do(action=\"Search\", argument=\"international airport near Carnegie Mellon University\", element=\"13\")",
     A.Fill(element="13", text="international airport near Carnegie Mellon University\n")),
    (WEBRL, "do(action=\"Press Enter\")", A.Press(key="Enter")),
    (WEBRL, "do(action=\"Hover\", element=\"3\")", A.Hover(element="3")),
    (WEBRL, "do(action=\"Right Click\", element=\"3\")", A.RightClick(element="3")),
    (WEBRL, "do(action=\"Switch Tab\", argument=\"1\")", A.TabFocus(index=1)),
    (WEBRL, "do(action=\"Go Backward\")", A.GoBack()),
    (WEBRL, "go_backward()", A.GoBack()),
    (WEBRL, "go_forward()", A.GoForward()),
    (WEBRL, "do(action=\"Wait\")", A.Wait()),
]


@pytest.mark.parametrize("dialect,text,action", GOLDEN_PARSE, ids=lambda v: v.name if hasattr(v, "parse") else None)
def test_golden_strings_parse(dialect, text, action):
    assert dialect.parse(text) == action


GOLDEN_FORMAT = [
    (UITARS, A.Click(x=200, y=300), "click(point='<point>200 300</point>')"),
    (make("uitars", screen=(1920, 1080)), A.Click(x=960, y=540), "click(point='<point>966 546</point>')"),
    (make("uitars", screen=(1920, 1080), coords="relative"), A.Click(x=960, y=540),
     "click(start_box='<|box_start|>(500,500)<|box_end|>')"),
    (UITARS, A.Drag(1, 2, 3, 4), "drag(start_point='<point>1 2</point>', end_point='<point>3 4</point>')"),
    (UITARS, A.Hotkey(keys=("ctrl", "c")), "hotkey(key='ctrl c')"),
    (UITARS, A.Type(text="it's\n"), "type(content='it\\'s\\n')"),
    (UITARS, A.Scroll(dy=-500, x=5, y=6), "scroll(point='<point>5 6</point>', direction='up')"),
    (UITARS, A.Done(answer="xxx"), "finished(content='xxx')"),
    (UITARS_MOBILE, A.Tap(x=1, y=2), "click(point='<point>1 2</point>')"),
    (UITARS_MOBILE, A.Launch(app="Settings"), "open_app(app_name='Settings')"),
    (make("computer_13"), A.Click(x=10, y=20), '{"action_type": "CLICK", "x": 10, "y": 20}'),
    (make("computer_13"), A.Scroll(dy=300), '{"action_type": "SCROLL", "dx": 0, "dy": -3}'),
    (make("computer_13"), A.Hotkey(keys=("ctrl", "c")), '{"action_type": "HOTKEY", "keys": ["ctrl", "c"]}'),
    (make("computer_13"), A.Done(), '{"action_type": "DONE"}'),
    (make("computer_13"), A.Drag(1, 2, 3, 4), '```json\n{"action_type": "MOVE_TO", "x": 1, "y": 2}\n```\n'
                                              '```json\n{"action_type": "DRAG_TO", "x": 3, "y": 4}\n```'),
    (make("pyautogui"), A.Click(x=100, y=200), "pyautogui.click(100, 200)"),
    (make("pyautogui"), A.Scroll(dy=500), "pyautogui.scroll(-5)"),
    (make("pyautogui"), A.Hotkey(keys=("ctrl", "c")), 'pyautogui.hotkey("ctrl", "c")'),
    (make("pyautogui"), A.Drag(1, 2, 3, 4), 'pyautogui.moveTo(1, 2)\npyautogui.dragTo(3, 4, button="left")'),
    (make("pyautogui"), A.Wait(), "WAIT"),
    (make("pyautogui"), A.Done(), "DONE"),
    (ANDROIDLAB, A.Tap(x=942, y=531), 'do(action="Tap", element=[942, 531, 942, 531])'),
    (ANDROIDLAB, A.Swipe(720, 2146, 720, 2146 - 2160, duration_ms=400),
     'do(action="Swipe", element=[720, 2146], direction="up", dist="long")'),
    (ANDROIDLAB, A.Home(), 'do(action="Home")'),
    (ANDROIDLAB, A.Done(answer="ok"), 'finish(message="ok")'),
    (ANDROIDWORLD, A.Click(element="7"), '{"action_type": "click", "index": 7}'),
    (ANDROIDWORLD, A.Fill(element="3", text="hi"), '{"action_type": "input_text", "text": "hi", "index": 3, '
                                                   '"clear_text": true}'),
    (ANDROIDWORLD, A.Done(), '{"action_type": "status", "goal_status": "complete"}'),
    (WEBARENA, A.Fill(element="164", text="restaurants near CMU\n"), "type [164] [restaurants near CMU] [1]"),
    (WEBARENA, A.Hotkey(keys=("Ctrl", "v")), "press [Ctrl+v]"),
    (WEBARENA, A.Done(answer="$279.49"), "stop [$279.49]"),
    (make("browsergym"), A.Click(element="a51"), 'click("a51")'),
    (make("browsergym"), A.Fill(element="45", text="x"), 'fill("45", "x")'),
    (make("browsergym"), A.Scroll(dy=200), "scroll(0, 200)"),
    (make("browsergym"), A.CloseTab(), "tab_close()"),
    (WEBRL, A.Fill(element="13", text="airport\n"), 'do(action="Search", argument="airport", element="13")'),
    (WEBRL, A.Click(element="7"), 'do(action="Click", element="7")'),
    (WEBRL, A.Done(answer="1"), 'exit(message="1")'),
]


@pytest.mark.parametrize("dialect,action,text", GOLDEN_FORMAT, ids=lambda v: v.name if hasattr(v, "parse") else None)
def test_golden_strings_print(dialect, action, text):
    assert dialect.format(action) == text
    assert dialect.parse(text) == action


# format() drops what a dialect has no slot for; these print fine but do not parse back the same
LOSSY_FORMAT = [
    (WEBARENA, A.Fail(reason="no such page"), "stop [N/A]", A.Done(answer="N/A")),  # WebArena's "N/A" answer
    (UITARS, A.Wait(seconds=2), "wait()", A.Wait(seconds=5.0)),  # UI-TARS waits 5 s
    (UITARS, A.Fail(reason="stuck"), "call_user()", A.Fail()),
    (make("browsergym"), A.RightClick(element="3"), 'click("3", button="right")', A.Click(element="3", button="right")),
    (make("pyautogui"), A.Scroll(dy=150), "pyautogui.scroll(-2)", A.Scroll(dy=200)),  # whole wheel clicks
    (ANDROIDWORLD, A.Click(x=1, y=2), '{"action_type": "click", "x": 1, "y": 2}', A.Tap(x=1, y=2)),
    (ANDROIDLAB, A.LongPress(x=1, y=2, duration_ms=300), 'do(action="Long Press", element=[1, 2, 1, 2])',
     A.LongPress(x=1, y=2)),
]


@pytest.mark.parametrize("dialect,action,text,back", LOSSY_FORMAT,
                         ids=lambda v: v.name if hasattr(v, "parse") else None)
def test_lossy_prints_document_what_is_dropped(dialect, action, text, back):
    assert dialect.format(action) == text
    assert dialect.parse(text) == back


# ---- smart_resize and UI-TARS coordinates ---------------------------------------------------------
@pytest.mark.parametrize("size,kwargs,expected", [
    ((1080, 1920), {}, (1092, 1932)),  # each side rounded to a multiple of 28
    ((2160, 3840), {}, (2156, 3836)),
    ((224, 224), {"min_pixels": 1}, (224, 224)),
    ((1080, 1920), {"max_pixels": 1280 * 28 * 28}, (728, 1316)),  # scaled down, floored to 28
    ((10, 10), {}, (280, 280)),  # scaled up to min_pixels, ceiled to 28
])
def test_smart_resize_golden(size, kwargs, expected):
    assert smart_resize(*size, **kwargs) == expected


def test_smart_resize_refuses_extreme_aspect_ratios():
    with pytest.raises(ValueError, match="aspect ratio"):
        smart_resize(10, 2020)
    with pytest.raises(ConfigError, match="aspect ratio"):
        make("uitars", screen=(2020, 10))


@settings(max_examples=200, deadline=None)
@given(st.integers(28, 6000), st.integers(28, 6000))
def test_smart_resize_meets_its_documented_conditions(h, w):
    if max(h, w) / min(h, w) > 200:
        return
    rh, rw = smart_resize(h, w)
    assert rh % 28 == 0 and rw % 28 == 0
    assert 100 * 28 * 28 <= rh * rw <= 16384 * 28 * 28
    assert abs(rw / rh - w / h) / (w / h) < 0.2 + 28 / min(h, w)  # aspect ratio kept up to rounding


screens = st.tuples(st.integers(100, 1920), st.integers(100, 1920))


@settings(max_examples=150, deadline=None)
@given(screens, st.data(), st.sampled_from(["absolute", "relative"]), st.sampled_from(["desktop", "android"]))
def test_uitars_coordinates_round_trip_within_one_pixel(screen, data, coords, platform):
    w, h = screen
    x, y = data.draw(st.integers(0, w - 1)), data.draw(st.integers(0, h - 1))
    d = make("uitars", screen=screen, coords=coords, platform=platform)
    action = A.Tap(x=x, y=y) if platform == "android" else A.Click(x=x, y=y)
    back = d.parse("Thought: t\nAction: " + d.format(action))
    assert type(back) is type(action)
    assert abs(back.x - x) <= 1 and abs(back.y - y) <= 1


@settings(max_examples=60, deadline=None)
@given(screens, st.data())
def test_uitars_error_is_half_a_model_pixel_when_the_image_is_shrunk(screen, data):
    w, h = screen
    d = make("uitars", screen=screen, max_pixels=256 * 28 * 28)
    mw, mh = d.model_size
    x, y = data.draw(st.integers(0, w - 1)), data.draw(st.integers(0, h - 1))
    back = d.parse(d.format(A.Click(x=x, y=y)))
    assert abs(back.x - x) <= 0.5 * w / mw + 1e-3 and abs(back.y - y) <= 0.5 * h / mh + 1e-3


def test_uitars_relative_coordinates_need_the_screen():
    with pytest.raises(ConfigError, match="screen"):
        make("uitars", coords="relative").parse("Action: click(start_box='(1,2)')")


# ---- print -> parse round trips -------------------------------------------------------------------
ints = st.integers(0, 4000)
nums = st.one_of(ints, st.floats(0, 4000, allow_nan=False, allow_infinity=False))
texts = st.text(max_size=30)
answers = st.one_of(st.none(), st.text(min_size=1, max_size=30))
elements = st.text(alphabet="0123456789abc-", min_size=1, max_size=6)
indices = st.integers(0, 500).map(str)
simple_keys = st.text(alphabet=string.ascii_letters + string.digits, min_size=1, max_size=8)
any_keys = st.text(min_size=1, max_size=8)
hotkeys = st.lists(simple_keys, min_size=2, max_size=4).map(tuple)
buttons = st.sampled_from(["left", "right", "middle"])
no_fence = texts.filter(lambda t: "```" not in t)


def points(cls, xs=nums):
    return st.builds(cls, x=xs, y=xs)


def elem(cls, ids=elements):
    return st.builds(cls, element=ids)


def wheel(step):
    return st.integers(-20, 20).map(lambda k: k * step)


def axis_scroll(amount_x, amount_y, at=st.just({})):
    """A scroll along one axis by the dialect's fixed amount, in either direction."""
    return st.builds(lambda horizontal, sign, where: A.Scroll(dx=sign * amount_x if horizontal else 0,
                                                             dy=0 if horizontal else sign * amount_y, **where),
                     st.booleans(), st.sampled_from([1, -1]), at)


def point_kw(xs=ints):
    return st.one_of(st.just({}), st.builds(lambda x, y: {"x": x, "y": y}, xs, xs))


EXPRESSIBLE = {
    "uitars": (UITARS, st.one_of(
        st.builds(A.Click, x=ints, y=ints, button=st.sampled_from(["left"])), points(A.RightClick, ints),
        points(A.DoubleClick, ints), points(A.Hover, ints), points(A.LongPress, ints),
        st.builds(A.Drag, ints, ints, ints, ints), axis_scroll(500, 500, point_kw()),
        st.builds(A.Type, text=texts), st.builds(A.Press, key=simple_keys), st.builds(A.Hotkey, keys=hotkeys),
        st.builds(A.KeyDown, key=any_keys), st.builds(A.KeyUp, key=any_keys), st.just(A.Wait(seconds=5.0)),
        st.builds(A.Done, answer=answers), st.just(A.Fail()), st.builds(A.Launch, app=st.text(min_size=1)),
        st.just(A.Home()), st.just(A.Back()))),
    "uitars-android": (UITARS_MOBILE, st.one_of(
        points(A.Tap, ints), points(A.LongPress, ints), st.builds(A.Swipe, ints, ints, ints, ints),
        st.just(A.Enter()), st.just(A.Home()), st.just(A.Back()), st.builds(A.Type, text=texts),
        st.builds(A.Launch, app=st.text(min_size=1)), st.builds(A.Done, answer=answers))),
    "computer_13": (make("computer_13"), st.one_of(
        st.builds(A.Click, x=nums, y=nums, button=buttons), points(A.DoubleClick), points(A.RightClick),
        points(A.Hover), st.builds(A.Drag, nums, nums, nums, nums),
        st.builds(lambda dx, dy, at: A.Scroll(dx=dx, dy=dy, **at), wheel(100), wheel(100), point_kw(nums)),
        st.builds(A.Type, text=texts), st.builds(A.Press, key=any_keys), st.builds(A.KeyDown, key=any_keys),
        st.builds(A.KeyUp, key=any_keys), st.builds(A.Hotkey, keys=st.lists(any_keys, min_size=1, max_size=3).map(tuple)),
        st.just(A.Wait()), st.just(A.Fail()), st.just(A.Done()))),
    "pyautogui": (make("pyautogui"), st.one_of(
        st.builds(A.Click, x=nums, y=nums, button=buttons), points(A.DoubleClick), points(A.RightClick),
        points(A.Hover), st.builds(A.Drag, nums, nums, nums, nums),
        st.builds(lambda dy, at: A.Scroll(dy=dy, **at), wheel(100), point_kw(nums)),
        st.builds(lambda dx, at: A.Scroll(dx=dx, **at), wheel(100).filter(bool), point_kw(nums)),
        st.builds(A.Type, text=texts), st.builds(A.Press, key=any_keys), st.builds(A.KeyDown, key=any_keys),
        st.builds(A.KeyUp, key=any_keys), st.builds(A.Hotkey, keys=st.lists(any_keys, min_size=1, max_size=3).map(tuple)),
        st.builds(A.Wait, seconds=st.floats(0, 60)), st.just(A.Fail()), st.just(A.Done()))),
    "androidlab": (ANDROIDLAB, st.one_of(
        points(A.Tap), points(A.LongPress), st.builds(A.Type, text=texts),
        st.builds(lambda x, y, d, horizontal: A.Swipe(x, y, x + d if horizontal else x, y if horizontal else y + d,
                                                     duration_ms=400), ints, ints, st.integers(-3000, 3000).filter(bool),
                  st.booleans()),
        st.just(A.Home()), st.just(A.Back()), st.just(A.Enter()), st.just(A.Wait(seconds=5.0)),
        st.builds(A.Launch, app=st.text(min_size=1)), st.builds(A.Done, answer=answers))),
    "androidworld": (ANDROIDWORLD, st.one_of(
        points(A.Tap, ints), points(A.LongPress, ints), points(A.DoubleClick, ints), elem(A.Click, indices),
        elem(A.DoubleClick, indices), st.builds(A.Type, text=texts), st.builds(A.Fill, element=indices, text=texts),
        axis_scroll(540, 1200, st.one_of(st.just({}), st.builds(lambda e: {"element": e}, indices))),
        st.sampled_from([A.Swipe(540, 0, 540, 2400, 500), A.Swipe(540, 2400, 540, 0, 500),
                         A.Swipe(0, 1200, 1080, 1200, 500), A.Swipe(1080, 1200, 0, 1200, 500)]),
        st.just(A.Home()), st.just(A.Back()), st.just(A.Enter()), st.just(A.Wait(seconds=1.0)),
        st.builds(A.Launch, app=st.text(min_size=1)), st.builds(A.Done, answer=st.one_of(st.none(), texts)),
        st.just(A.Fail()))),
    "webarena": (WEBARENA, st.one_of(
        elem(A.Click), elem(A.Hover),
        st.builds(lambda e, t, enter: A.Fill(element=e, text=t + ("\n" if enter else "")), elements,
                  no_fence.filter(lambda t: "\n" not in t), st.booleans()),
        st.builds(A.Press, key=any_keys.filter(lambda k: "\n" not in k and "`" not in k and ("+" not in k or k == "+"))),
        st.builds(A.Hotkey, keys=hotkeys), axis_scroll(0, 720).filter(lambda s: s.dy != 0),
        st.builds(A.Goto, url=st.text(min_size=1).filter(lambda u: "\n" not in u and "```" not in u)),
        st.sampled_from([A.GoBack(), A.GoForward(), A.NewTab(), A.CloseTab()]),
        st.builds(A.TabFocus, index=st.integers(0, 50)),
        st.builds(A.Done, answer=st.one_of(st.none(), st.text(min_size=1).filter(lambda t: "```" not in t))))),
    "browsergym": (make("browsergym"), st.one_of(
        st.builds(A.Click, element=elements, button=buttons), st.builds(A.Click, x=nums, y=nums, button=buttons),
        elem(A.DoubleClick), points(A.DoubleClick), elem(A.Hover), points(A.Hover),
        st.builds(A.Drag, nums, nums, nums, nums),
        st.builds(lambda dx, dy, at: A.Scroll(dx=dx, dy=dy, **at), nums, nums, point_kw(nums)),
        st.builds(A.Fill, element=st.text(min_size=1), text=texts),
        st.builds(A.Select, element=st.text(min_size=1), option=texts), st.builds(A.Type, text=texts),
        st.builds(A.Press, key=any_keys.filter(lambda k: "+" not in k)), st.builds(A.Hotkey, keys=hotkeys),
        st.builds(A.KeyDown, key=any_keys), st.builds(A.KeyUp, key=any_keys), st.builds(A.Goto, url=texts),
        st.sampled_from([A.GoBack(), A.GoForward(), A.NewTab(), A.CloseTab()]),
        st.builds(A.TabFocus, index=st.integers(-5, 50)), st.builds(A.Done, answer=answers),
        st.builds(A.Fail, reason=answers), st.integers(0, 60_000).map(lambda ms: A.Wait(seconds=ms / 1000)))),
    "webrl": (WEBRL, st.one_of(
        elem(A.Click, st.text(min_size=1)), elem(A.RightClick), elem(A.Hover),
        st.builds(A.Fill, element=elements, text=texts), st.builds(A.Select, element=elements, option=texts),
        st.just(A.Press(key="Enter")), axis_scroll(0, 480).filter(lambda s: s.dy != 0),
        st.builds(A.TabFocus, index=st.integers(0, 50)), st.sampled_from([A.GoBack(), A.GoForward(), A.Wait()]),
        st.builds(A.Done, answer=answers))),
}


@pytest.mark.parametrize("key", sorted(EXPRESSIBLE))
def test_print_then_parse_is_identity(key):
    dialect, strategy = EXPRESSIBLE[key]

    @settings(max_examples=150, deadline=None)
    @given(strategy)
    def check(action):
        action.validate()
        text = dialect.format(action)
        back = dialect.parse(text)
        assert back == action, (text, back)

    check()


@pytest.mark.parametrize("name", NAMES)
def test_arbitrary_text_parses_or_raises_action_parse_error(name):
    dialect = make(name, screen=(1280, 720))

    @settings(max_examples=80, deadline=None)
    @given(st.one_of(st.text(max_size=200),
                     st.builds(lambda a, b: a + b, st.sampled_from(
                         ["do(action=", "click(", "Action: click(point='", '{"action_type": ', "```", "type [1] [",
                          "pyautogui.click(", "stop [", "fill('1', ", "finish(message="]), st.text(max_size=40))))
    def check(text):
        try:
            action = dialect.parse(text)
        except ActionParseError as exc:
            assert str(exc).startswith(name)
        else:
            assert isinstance(action, A.Action)
            action.validate()

    check()


# ---- refusals -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dialect,action,needle", [
    (WEBARENA, A.Drag(1, 2, 3, 4), "webarena has no drag action"),
    (WEBARENA, A.Click(x=1, y=2), "webarena acts on element ids"),
    (WEBARENA, A.Scroll(dx=10), "only scrolls the whole page up or down"),
    (WEBARENA, A.Fill(element="1", text="a\nb"), "line break"),
    (WEBARENA, A.Hotkey(keys=("Shift", "a+b")), "'+'-joined"),
    (WEBARENA, A.Fill(element="1 2", text="x"), "cannot write element id"),
    (WEBARENA, A.Tap(x=1, y=2), "webarena has no tap action"),
    (WEBRL, A.Press(key="Tab"), "webrl can only press Enter"),
    (WEBRL, A.Goto(url="http://x"), "webrl has no goto action"),
    (UITARS, A.Click(element="3"), "uitars has no click action (UI-TARS points at pixels"),
    (UITARS, A.Scroll(dx=5, dy=5), "one direction at a time"),
    (UITARS, A.Hotkey(keys=("a b", "c")), "separates keys with spaces"),
    (UITARS, A.Fill(element="1", text="x"), "uitars has no fill action"),
    (make("computer_13"), A.Done(answer="42"), "DONE carries no answer"),
    (make("computer_13"), A.Click(element="3"), "computer_13 has no click action"),
    (make("pyautogui"), A.Scroll(dx=100, dy=100), "one axis per call"),
    (make("pyautogui"), A.Tap(x=1, y=2), "pyautogui has no tap action"),
    (ANDROIDLAB, A.Swipe(0, 0, 10, 10), "one axis only"),
    (ANDROIDLAB, A.Click(x=1, y=2), "androidlab has no click action"),
    (ANDROIDWORLD, A.Click(element="a1"), "integer index"),
    (ANDROIDWORLD, A.Swipe(1, 2, 3, 4), "edge to edge"),
    (ANDROIDWORLD, A.Scroll(dy=5, x=1, y=2), "not at a point"),
    (make("browsergym"), A.Scroll(dy=5, element="3"), "not at an element id"),
    (make("browsergym"), A.Tap(x=1, y=2), "browsergym has no tap action"),
])
def test_format_refuses_what_the_dialect_cannot_express(dialect, action, needle):
    with pytest.raises(ActionParseError) as err:
        dialect.format(action)
    assert needle in str(err.value)


@pytest.mark.parametrize("dialect,text,needle", [
    (UITARS, "Action: teleport(point='<point>1 2</point>')", "unknown action 'teleport'"),
    (UITARS, "Action: click(point='<point>1</point>')", "start_box must be a point"),
    (UITARS, "Action: click(point='<point>1 2</point>')\n\nclick(point='<point>3 4</point>')", "one action per step"),
    (UITARS, "Action: scroll(point='<point>1 2</point>', direction='sideways')", "scroll direction"),
    (make("computer_13"), '{"action_type": "CLICK"}', "current pointer position"),
    (make("computer_13"), '{"action_type": "DRAG_TO", "x": 1, "y": 2}', "MOVE_TO and DRAG_TO"),
    (make("computer_13"), '{"action_type": "MOUSE_DOWN"}', "no typed equivalent"),
    (make("computer_13"), '{"action_type": "JUMP"}', "unknown action_type 'JUMP'"),
    (make("computer_13"), '{"action_type": "TYPING", "txt": "a"}', "unknown parameter(s) txt"),
    (make("computer_13"), "not json at all", "not valid JSON"),
    (make("pyautogui"), "import os\npyautogui.click(1, 2)", "unsupported construct: import statement"),
    (make("pyautogui"), "x = 5", "unsupported construct: variable assignment"),
    (make("pyautogui"), "for i in range(3): pyautogui.press('a')", "unsupported construct: for loop"),
    (make("pyautogui"), "os.system('ls')", "unsupported call os.system()"),
    (make("pyautogui"), "pyautogui.click(x, 2)", "must be a literal"),
    (make("pyautogui"), "pyautogui.screenshot()", "unsupported pyautogui function 'screenshot'"),
    (make("pyautogui"), "pyautogui.click(1, 2)\npyautogui.click(3, 4)", "one action per step, got 2 calls"),
    (make("pyautogui"), "pyautogui.dragTo(3, 4)", "moveTo(x1, y1) then"),
    (make("pyautogui"), "pyautogui.click()", "needs x and y"),
    (make("pyautogui"), "pyautogui.click(1, 2, clicks=3)", "no typed equivalent"),
    (make("pyautogui"), "pyautogui.typewrite(['a', 'enter'])", "list of key names"),
    (ANDROIDLAB, 'do(action="Tap", element=find_element_by_instruction(instruction="x"))', "must be a literal"),
    (ANDROIDLAB, 'do(action="Fly")', "unknown action 'Fly'"),
    (ANDROIDLAB, 'do(action="Swipe", element=[1, 2], direction="north")', "direction must be"),
    (make("androidlab"), 'do(action="Swipe", element=[1, 2], direction="up")', "screenshot size"),
    (ANDROIDWORLD, '{"action_type": "long_press", "index": 3}', "long_press by index"),
    (ANDROIDWORLD, '{"action_type": "click", "index": 3, "x": 1, "y": 2}', "either an index or x and y"),
    (ANDROIDWORLD, '{"action_type": "fly"}', "unknown action_type 'fly'"),
    (ANDROIDWORLD, "no json here", "no JSON object found"),
    (WEBARENA, "jump [1]", "unknown action 'jump'"),
    (WEBARENA, "click [a b]", "expected click [id]"),
    (WEBARENA, "go_back [1]", "go_back takes no arguments"),
    (make("browsergym"), "check('55')", "check() has no typed equivalent"),
    (make("browsergym"), "click('1')\nclick('2')", "one action per step"),
    (make("browsergym"), "select_option('c48', ['red', 'green', 'blue'])", "several options"),
    (make("browsergym"), "click('48', button='middle', modifiers=['Shift'])", "modifiers"),
    (make("browsergym"), "click('1', color='red')", "unsupported argument 'color'"),
    (WEBRL, 'do(action="Click")', 'element="<id>" is required'),
    (WEBRL, 'do(action="Teleport", element="1")', "unknown action 'Teleport'"),
])
def test_malformed_actions_name_the_problem(dialect, text, needle):
    with pytest.raises((ActionParseError, ConfigError)) as err:
        dialect.parse(text)
    assert needle in str(err.value)


@pytest.mark.parametrize("dialect,template", [
    (make("pyautogui"), "__import__('os').system('touch {t}')"),
    (make("pyautogui"), "pyautogui.write(open('{t}', 'w').write('x'))"),
    (make("pyautogui"), "```python\nimport os\nos.system('touch {t}')\n```"),
    (UITARS, "Action: type(content=__import__('os').system('touch {t}'))"),
    (ANDROIDLAB, "do(action=\"Type\", text=__import__('os').system('touch {t}'))"),
    (make("browsergym"), "fill('1', __import__('os').system('touch {t}'))"),
    (WEBRL, "exit(message=__import__('os').system('touch {t}'))"),
    (make("androidworld"), "{{'action_type': __import__('os').system('touch {t}')}}"),
    (make("computer_13"), "{{'action_type': __import__('os').system('touch {t}')}}"),
])
def test_agent_text_is_never_executed(tmp_path, dialect, template):
    target = tmp_path / "pwned"
    with pytest.raises(ActionParseError):
        dialect.parse(template.format(t=target))
    assert not target.exists()


def test_dialect_options_are_validated():
    for name, kwargs, needle in [("uitars", {"coords": "pixels"}, "coords"), ("uitars", {"platform": "ios"}, "platform"),
                                 ("webarena", {"screen": (0, 10)}, "screen"), ("pyautogui", {"wheel_px": 0}, "wheel_px"),
                                 ("androidlab", {"coords": "x"}, "coords")]:
        with pytest.raises(ConfigError, match=needle):
            make(name, **kwargs)
