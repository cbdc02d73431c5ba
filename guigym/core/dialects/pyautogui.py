"""A safe subset of pyautogui calls, as OSWorld's ``pyautogui`` action space uses them.

The code is read with :mod:`ast` and never executed: only calls of the functions below with
literal arguments are accepted; imports, variables, loops and any other call raise an
ActionParseError naming the construct.

Format, as documented by (read for facts, not copied):

* xlang-ai/OSWorld ``mm_agents/prompts.py`` (``SYS_PROMPT_IN_SCREENSHOT_OUT_CODE``): the agent
  answers python code in a fenced block, or one of the special codes ```WAIT```, ```FAIL```,
  ```DONE```.
* the pyautogui documentation (pyautogui.readthedocs.io, "Mouse Control Functions" and "Keyboard
  Control Functions"): ``click(x, y, clicks=1, interval, button)``, ``doubleClick``,
  ``rightClick``, ``middleClick``, ``moveTo(x, y, duration)``, ``dragTo(x, y, duration, button)``
  (drags from the current position), ``scroll(clicks, x, y)`` (positive scrolls up),
  ``hscroll(clicks)`` (positive scrolls right), ``write``/``typewrite(message, interval)``,
  ``press(key, presses)``, ``hotkey(*keys)``, ``keyDown``, ``keyUp``.

Mapping: click -> Click (``clicks=2`` -> DoubleClick), doubleClick -> DoubleClick, rightClick ->
RightClick, middleClick -> Click(button="middle"), moveTo -> Hover, scroll/vscroll/hscroll ->
Scroll (wheel clicks times ``wheel_px``), write/typewrite -> Type, press -> Press, hotkey -> Hotkey,
keyDown/keyUp -> KeyDown/KeyUp, ``time.sleep(s)`` -> Wait(s), WAIT/DONE/FAIL -> Wait()/Done()/Fail().
One action per string; the one exception is ``moveTo(x1, y1)`` followed by ``dragTo(x2, y2)``, which
is a Drag (and how ``format`` prints a Drag). The ``pyautogui.`` prefix is optional.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from guigym.core import actions as A
from guigym.core.dialect_base import DIALECTS
from guigym.core.dialects._common import (
    WHEEL_CLICK_PX, Call, DialectBase, Number, bind, fenced_blocks, is_number, parse_calls, py_str, wheel_clicks,
)
from guigym.core.errors import ActionParseError, ConfigError

_SPECIAL = {"WAIT": A.Wait, "DONE": A.Done, "FAIL": A.Fail}
_BUTTONS = {"left": "left", "primary": "left", "right": "right", "secondary": "right", "middle": "middle"}
# name -> (parameters in positional order, required); timing arguments are accepted and ignored
_SIGNATURES: dict[str, tuple[list[str], list[str]]] = {
    "click": (["x", "y", "clicks", "interval", "button", "duration"], []),
    "doubleClick": (["x", "y", "interval", "button", "duration"], []),
    "rightClick": (["x", "y", "duration"], []),
    "middleClick": (["x", "y", "duration"], []),
    "moveTo": (["x", "y", "duration"], []),
    "dragTo": (["x", "y", "duration", "button", "mouseDownUp"], []),
    "scroll": (["clicks", "x", "y"], ["clicks"]),
    "vscroll": (["clicks", "x", "y"], ["clicks"]),
    "hscroll": (["clicks", "x", "y"], ["clicks"]),
    "write": (["message", "interval"], ["message"]),
    "typewrite": (["message", "interval"], ["message"]),
    "press": (["keys", "presses", "interval"], ["keys"]),
    "keyDown": (["key"], ["key"]),
    "keyUp": (["key"], ["key"]),
    "sleep": (["secs"], ["secs"]),
}


@DIALECTS.register("pyautogui")
class PyAutoGUIDialect(DialectBase):
    """pyautogui code (OSWorld ``pyautogui`` action space), parsed safely.

    Args:
        screen: unused (coordinates are screenshot pixels); accepted for a uniform constructor.
        wheel_px: pixels per wheel click, to convert ``scroll(clicks)`` to pixels and back.
    """

    name = "pyautogui"

    def __init__(self, screen: Optional[Sequence[int]] = None, wheel_px: Number = WHEEL_CLICK_PX) -> None:
        super().__init__(screen)
        if not is_number(wheel_px) or wheel_px <= 0:
            raise ConfigError(f"pyautogui: wheel_px must be a positive number, got {wheel_px!r}")
        self.wheel_px = wheel_px

    # ---- parsing ----------------------------------------------------------------------------------
    def parse(self, text: str) -> A.Action:
        self.check_text(text)
        if text.strip() in _SPECIAL:
            return _SPECIAL[text.strip()]()
        try:
            calls = parse_calls(text, self, text)
        except ActionParseError as whole:
            blocks = fenced_blocks(text)
            if not blocks:
                raise whole from None
            code = "\n".join(b.body for b in blocks)
            if code.strip() in _SPECIAL:
                return _SPECIAL[code.strip()]()
            calls = parse_calls(code, self, text)
        for call in calls:
            self._check_callee(call, text)
        if len(calls) == 2 and calls[0].name == "moveTo" and calls[1].name == "dragTo":
            x1, y1 = self._xy(calls[0], text, required=True)
            kw = self._bind(calls[1], text)
            x2, y2 = self._xy(calls[1], text, required=True, bound=kw)
            if _BUTTONS.get(kw.get("button", "left")) != "left" or kw.get("mouseDownUp", True) is not True:
                raise self.error("dragTo: only a left-button drag with mouseDownUp=True is supported", text)
            return self.build(A.Drag, text, x1=x1, y1=y1, x2=x2, y2=y2)
        if len(calls) != 1:
            raise self.error(f"one action per step, got {len(calls)} calls: "
                             f"{', '.join(c.qualname for c in calls)} (moveTo then dragTo is the only "
                             f"combination accepted)", text)
        return self._to_action(calls[0], text)

    def _check_callee(self, call: Call, text: str) -> None:
        if call.name == "sleep":
            if call.owner != "time":
                raise self.error(f"unsupported call {call.qualname}(); use time.sleep(seconds)", text)
            return
        if call.owner not in (None, "pyautogui"):
            raise self.error(f"unsupported call {call.qualname}(): only pyautogui functions and time.sleep "
                             f"are allowed", text)
        if call.name not in _SIGNATURES and call.name != "hotkey":
            raise self.error(f"unsupported pyautogui function {call.name!r}; supported: "
                             f"{', '.join(sorted(n for n in [*_SIGNATURES, 'hotkey'] if n != 'sleep'))} and time.sleep", text)

    def _bind(self, call: Call, text: str) -> dict[str, Any]:
        params, required = _SIGNATURES[call.name]
        args = call.args
        if call.name in ("click", "doubleClick", "rightClick", "middleClick", "moveTo", "dragTo") and args \
                and isinstance(args[0], (tuple, list)):
            if len(args[0]) != 2:
                raise self.error(f"{call.name}(): a point must be (x, y), got {args[0]!r}", text)
            args = (*args[0], *args[1:])  # click((x, y)) form
        return bind(Call(call.name, call.owner, args, call.kwargs), params, required, self, text)

    def _xy(self, call: Call, text: str, required: bool = False,
            bound: Optional[dict[str, Any]] = None) -> tuple[Any, Any]:
        kw = bound if bound is not None else self._bind(call, text)
        x, y = kw.get("x"), kw.get("y")
        if x is None or y is None:
            raise self.error(f"{call.name}() needs x and y: acting at the current pointer position cannot be "
                             f"expressed as a typed action", text)
        return x, y

    def _to_action(self, call: Call, text: str) -> A.Action:
        name = call.name
        if name == "hotkey":
            bad = set(call.kwargs) - {"interval"}
            if bad:
                raise self.error(f"hotkey() got unsupported argument(s) {', '.join(sorted(bad))}", text)
            return self.build(A.Hotkey, text, keys=tuple(call.args))
        kw = self._bind(call, text)
        if name == "sleep":
            return self.build(A.Wait, text, seconds=kw["secs"])
        if name in ("click", "doubleClick", "rightClick", "middleClick", "moveTo"):
            x, y = self._xy(call, text, bound=kw)
            button = _BUTTONS.get(kw.get("button", "left"))
            if button is None:
                raise self.error(f"{name}(): button must be left, right or middle, got {kw['button']!r}", text)
            if name == "click":
                clicks = kw.get("clicks", 1)
                if clicks == 1:
                    return self.build(A.Click, text, x=x, y=y, button=button)
                if clicks == 2 and button == "left":
                    return self.build(A.DoubleClick, text, x=x, y=y)
                raise self.error(f"click(clicks={clicks!r}, button={button!r}) has no typed equivalent", text)
            if name == "doubleClick":
                if button != "left":
                    raise self.error("doubleClick(): only the left button has a typed equivalent", text)
                return self.build(A.DoubleClick, text, x=x, y=y)
            if name == "middleClick":
                return self.build(A.Click, text, x=x, y=y, button="middle")
            return self.build(A.RightClick if name == "rightClick" else A.Hover, text, x=x, y=y)
        if name == "dragTo":
            raise self.error("dragTo() drags from the current pointer position; write moveTo(x1, y1) then "
                             "dragTo(x2, y2)", text)
        if name in ("scroll", "vscroll", "hscroll"):
            clicks = kw["clicks"]
            if not is_number(clicks):
                raise self.error(f"{name}(): clicks must be a number, got {clicks!r}", text)
            at = {}
            if kw.get("x") is not None or kw.get("y") is not None:
                at = {"x": kw.get("x"), "y": kw.get("y")}
            # pyautogui: positive scroll is up, positive hscroll is right; guigym: positive dy is down
            if name == "hscroll":
                return self.build(A.Scroll, text, dx=clicks * self.wheel_px, **at)
            return self.build(A.Scroll, text, dy=-clicks * self.wheel_px, **at)
        if name in ("write", "typewrite"):
            if not isinstance(kw["message"], str):
                raise self.error(f"{name}(): message must be a string (a list of key names is not supported; "
                                 f"use press or hotkey)", text)
            return self.build(A.Type, text, text=kw["message"])
        if name == "press":
            if not isinstance(kw["keys"], str):
                raise self.error("press(): give one key name; use hotkey() for combinations", text)
            if kw.get("presses", 1) != 1:
                raise self.error("press(): presses other than 1 have no typed equivalent", text)
            return self.build(A.Press, text, key=kw["keys"])
        if name in ("keyDown", "keyUp"):
            return self.build(A.KeyDown if name == "keyDown" else A.KeyUp, text, key=kw["key"])
        raise self.error(f"unsupported pyautogui function {name!r}", text)  # pragma: no cover

    # ---- printing ---------------------------------------------------------------------------------
    def format(self, action: A.Action) -> str:
        a = action
        if isinstance(a, (A.Click, A.DoubleClick, A.RightClick, A.Hover)):
            if a.element is not None:
                raise self.cannot(a, "pyautogui points at pixels, not element ids")
            if isinstance(a, A.Click):
                extra = "" if a.button == "left" else f", button={py_str(a.button)}"
                return f"pyautogui.click({a.x!r}, {a.y!r}{extra})"
            fn = {A.DoubleClick: "doubleClick", A.RightClick: "rightClick", A.Hover: "moveTo"}[type(a)]
            return f"pyautogui.{fn}({a.x!r}, {a.y!r})"
        if isinstance(a, A.Drag):
            return f"pyautogui.moveTo({a.x1!r}, {a.y1!r})\npyautogui.dragTo({a.x2!r}, {a.y2!r}, button=\"left\")"
        if isinstance(a, A.Scroll):
            if a.element is not None:
                raise self.error("pyautogui scrolls at a point, not at an element id")
            if a.dx != 0 and a.dy != 0:
                raise self.error("pyautogui scrolls one axis per call; split the scroll in two")
            at = "" if a.x is None else f", x={a.x!r}, y={a.y!r}"
            if a.dx != 0:
                return f"pyautogui.hscroll({wheel_clicks(a.dx, self.wheel_px)}{at})"
            return f"pyautogui.scroll({-wheel_clicks(a.dy, self.wheel_px)}{at})"
        if isinstance(a, A.Type):
            return f"pyautogui.write({py_str(a.text)})"
        if isinstance(a, A.Press):
            return f"pyautogui.press({py_str(a.key)})"
        if isinstance(a, A.Hotkey):
            return f"pyautogui.hotkey({', '.join(py_str(k) for k in a.keys)})"
        if isinstance(a, (A.KeyDown, A.KeyUp)):
            return f"pyautogui.{'keyDown' if isinstance(a, A.KeyDown) else 'keyUp'}({py_str(a.key)})"
        if isinstance(a, A.Wait):
            return "WAIT" if a.seconds == A.Wait().seconds else f"time.sleep({a.seconds!r})"
        if isinstance(a, A.Done):
            if a.answer is not None:
                raise self.error("pyautogui's DONE carries no answer")
            return "DONE"
        if isinstance(a, A.Fail):
            return "FAIL"
        raise self.cannot(a)
