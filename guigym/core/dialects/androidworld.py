"""AndroidWorld's ``JSONAction`` dicts.

Format, as documented by (read for facts, not copied):

* google-research/android_world ``android_world/env/json_action.py``: action types click,
  double_tap, scroll, swipe, input_text, navigate_home, navigate_back, keyboard_enter, open_app,
  status, wait, long_press, answer; fields index, x, y, text, direction (up/down/left/right),
  app_name, goal_status, clear_text; "either an index or a <x, y>".
* ``android_world/env/actuation.py`` (``execute_adb_action``): click/double_tap/long_press at
  (x, y) or at the centre of element ``index``; input_text focuses the target if given, clears it
  when ``clear_text``, types, then presses Enter; scroll swipes from the centre of the screen (or
  element) to its edge, "down" moving the finger up; swipe goes edge to edge (mid-screen) in
  500 ms, "down" from the top edge to the bottom edge; wait sleeps 1 s.
* ``android_world/agents/m3a.py`` (prompt): ``{"action_type": "status", "goal_status":
  "complete"|"infeasible"}``, ``{"action_type": "answer", "text": ...}``, click/long_press/
  input_text by ``index``, scroll with an optional ``index``; the response reads
  ``Reason: ...\\nAction: {...}`` (``agent_utils.extract_json`` takes the first ``{...}``).

Mapping: click (x, y) -> Tap, click index -> Click(element=str(index)), double_tap -> DoubleClick,
long_press (x, y) -> LongPress, input_text -> Type (with index: Fill(element, text)), scroll ->
Scroll of ``scroll_px`` (default: half the screen height/width when ``screen`` is known) at the
element if any, swipe -> Swipe edge to edge (needs ``screen``), navigate_home/back -> Home/Back,
keyboard_enter -> Enter, open_app -> Launch, wait -> Wait(1), status complete/infeasible ->
Done()/Fail(), answer -> Done(answer). long_press by index has no typed equivalent (LongPress takes
a point). Note that AndroidWorld presses Enter after input_text; guigym's Type and Fill do not.
"""
from __future__ import annotations

import re
from typing import Any, Optional, Sequence

from guigym.core import actions as A
from guigym.core.dialect_base import DIALECTS
from guigym.core.dialects._common import (
    DEFAULT_SCROLL_PX, DialectBase, Number, fenced_blocks, first_json_object, is_number, json_dumps, load_json_object,
    tidy,
)
from guigym.core.errors import ActionParseError, ConfigError

SWIPE_MS = 500
_INDEX = re.compile(r"0|[1-9][0-9]*")
_ACTION_LINE = re.compile(r"(?:^|\n)[ \t]*Action[ \t]*:")
_KEYS = ("action_type", "index", "x", "y", "text", "direction", "goal_status", "app_name", "clear_text")
_DIRECTIONS = {"down": (0, 1), "up": (0, -1), "right": (1, 0), "left": (-1, 0)}


@DIALECTS.register("androidworld")
class AndroidWorldDialect(DialectBase):
    """AndroidWorld JSON actions.

    Args:
        screen: (width, height) of the screen; needed for swipe, and sets the default scroll amount.
        scroll_px: pixels one scroll moves (default: half the screen side when ``screen`` is known,
            else 500).
    """

    name = "androidworld"

    def __init__(self, screen: Optional[Sequence[int]] = None, scroll_px: Optional[Number] = None) -> None:
        super().__init__(screen)
        if scroll_px is not None and (not is_number(scroll_px) or scroll_px <= 0):
            raise ConfigError(f"androidworld: scroll_px must be a positive number, got {scroll_px!r}")
        self.scroll_px = scroll_px

    def _scroll_amount(self, horizontal: bool) -> Number:
        if self.scroll_px is not None:
            return self.scroll_px
        if self.screen is None:
            return DEFAULT_SCROLL_PX
        return self.screen[0 if horizontal else 1] // 2

    def _swipe_ends(self, direction: str) -> tuple[Number, Number, Number, Number]:
        w, h = self.need_screen("swipe")
        cx, cy = tidy(w / 2), tidy(h / 2)
        return {"down": (cx, 0, cx, h), "up": (cx, h, cx, 0), "left": (0, cy, w, cy), "right": (w, cy, 0, cy)}[direction]

    # ---- parsing ----------------------------------------------------------------------------------
    def parse(self, text: str) -> A.Action:
        self.check_text(text)
        d = self._json(text)
        if not isinstance(d, dict) or not isinstance(d.get("action_type"), str):
            raise self.error(f'expected a JSON object with an "action_type", got {str(d)[:120]!r}', text)
        unknown = sorted(set(d) - set(_KEYS))
        if unknown:
            raise self.error(f"unknown field(s) {', '.join(unknown)}; expected {', '.join(_KEYS)}", text)
        kind = d["action_type"]
        index = d.get("index")
        if index is not None:
            if isinstance(index, str) and _INDEX.fullmatch(index.strip()):
                index = int(index)
            if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                raise self.error(f"index must be a non-negative integer, got {d['index']!r}", text)
            if d.get("x") is not None or d.get("y") is not None:
                raise self.error("give either an index or x and y, not both", text)
        point = {k: d[k] for k in ("x", "y") if d.get(k) is not None}
        if kind in ("click", "double_tap", "long_press"):
            if index is not None:
                if kind == "long_press":
                    raise self.error("long_press by index has no typed equivalent; give x and y", text)
                cls = A.Click if kind == "click" else A.DoubleClick
                return self.build(cls, text, element=str(index))
            if len(point) != 2:
                raise self.error(f"{kind} needs x and y (or an index)", text)
            cls = {"click": A.Tap, "double_tap": A.DoubleClick, "long_press": A.LongPress}[kind]
            return self.build(cls, text, **point)
        if kind == "input_text":
            if not isinstance(d.get("text"), str):
                raise self.error(f"input_text needs a text string, got {d.get('text')!r}", text)
            if index is not None:
                return self.build(A.Fill, text, element=str(index), text=d["text"])
            if point:
                raise self.error("input_text at x, y has no typed equivalent; click first or give an index", text)
            return self.build(A.Type, text, text=d["text"])
        if kind == "scroll":
            direction = d.get("direction")
            if direction not in _DIRECTIONS:
                raise self.error(f"scroll direction must be up, down, left or right, got {direction!r}", text)
            if point:
                raise self.error("scroll takes an optional index, not x and y", text)
            sx, sy = _DIRECTIONS[direction]
            amount = self._scroll_amount(horizontal=sx != 0)
            at = {} if index is None else {"element": str(index)}
            return self.build(A.Scroll, text, dx=sx * amount, dy=sy * amount, **at)
        if kind == "swipe":
            direction = d.get("direction")
            if direction not in _DIRECTIONS:
                raise self.error(f"swipe direction must be up, down, left or right, got {direction!r}", text)
            x1, y1, x2, y2 = self._swipe_ends(direction)
            return self.build(A.Swipe, text, x1=x1, y1=y1, x2=x2, y2=y2, duration_ms=SWIPE_MS)
        simple = {"navigate_home": A.Home, "navigate_back": A.Back, "keyboard_enter": A.Enter}
        if kind in simple:
            return simple[kind]()
        if kind == "wait":
            return A.Wait(seconds=1.0)
        if kind == "open_app":
            if not isinstance(d.get("app_name"), str) or not d["app_name"]:
                raise self.error("open_app needs an app_name", text)
            return self.build(A.Launch, text, app=d["app_name"])
        if kind == "status":
            status = d.get("goal_status")
            if status == "complete":
                return A.Done()
            if status == "infeasible":
                return A.Fail()
            raise self.error(f"status goal_status must be complete or infeasible, got {status!r}", text)
        if kind == "answer":
            if not isinstance(d.get("text"), str):
                raise self.error(f"answer needs a text string, got {d.get('text')!r}", text)
            return self.build(A.Done, text, answer=d["text"])
        raise self.error(f"unknown action_type {kind!r}; known: click, double_tap, long_press, input_text, scroll, "
                         f"swipe, navigate_home, navigate_back, keyboard_enter, open_app, wait, status, answer", text)

    def _json(self, text: str) -> Any:
        """The whole text as JSON, else the object after ``Action:``, in a fence, or anywhere."""
        stripped = text.strip()
        if stripped.startswith("{"):
            try:
                return load_json_object(stripped, self, text)
            except ActionParseError:
                pass
        m = _ACTION_LINE.search(text)
        if m:
            return first_json_object(text[m.end():], self, text)
        blocks = fenced_blocks(text)
        return first_json_object(blocks[-1].body if blocks else text, self, text)

    # ---- printing ---------------------------------------------------------------------------------
    def _index(self, element: str) -> int:
        if not _INDEX.fullmatch(element):
            raise self.error(f"androidworld refers to elements by integer index, got element {element!r}")
        return int(element)

    @staticmethod
    def _dump(d: dict[str, Any]) -> str:
        return json_dumps(d)

    def format(self, action: A.Action) -> str:
        a = action
        if isinstance(a, (A.Tap, A.LongPress)):
            kind = "click" if isinstance(a, A.Tap) else "long_press"
            return self._dump({"action_type": kind, "x": a.x, "y": a.y})
        if isinstance(a, (A.Click, A.DoubleClick)):
            if isinstance(a, A.Click) and a.button != "left":
                raise self.error(f"androidworld has no {a.button}-button click")
            kind = "click" if isinstance(a, A.Click) else "double_tap"
            if a.element is not None:
                return self._dump({"action_type": kind, "index": self._index(a.element)})
            return self._dump({"action_type": kind, "x": a.x, "y": a.y})
        if isinstance(a, A.Type):
            return self._dump({"action_type": "input_text", "text": a.text})
        if isinstance(a, A.Fill):
            return self._dump({"action_type": "input_text", "text": a.text, "index": self._index(a.element),
                               "clear_text": True})
        if isinstance(a, A.Scroll):
            if a.x is not None:
                raise self.error("androidworld scrolls the screen or an element by index, not at a point")
            if (a.dx == 0) == (a.dy == 0):
                raise self.error(f"androidworld scrolls in one direction at a time, got dx={a.dx}, dy={a.dy}")
            direction = ("down" if a.dy > 0 else "up") if a.dy != 0 else ("right" if a.dx > 0 else "left")
            d: dict[str, Any] = {"action_type": "scroll", "direction": direction}
            if a.element is not None:
                d["index"] = self._index(a.element)
            return self._dump(d)
        if isinstance(a, A.Swipe):
            for direction in _DIRECTIONS:
                if self.screen is not None and (a.x1, a.y1, a.x2, a.y2) == self._swipe_ends(direction):
                    return self._dump({"action_type": "swipe", "direction": direction})
            raise self.error("androidworld swipes only edge to edge through the middle of the screen "
                             "(swipe with a direction); a free swipe has no equivalent")
        simple = {A.Home: "navigate_home", A.Back: "navigate_back", A.Enter: "keyboard_enter", A.Wait: "wait"}
        if type(a) in simple:
            return self._dump({"action_type": simple[type(a)]})
        if isinstance(a, A.Launch):
            return self._dump({"action_type": "open_app", "app_name": a.app})
        if isinstance(a, A.Done):
            if a.answer is None:
                return self._dump({"action_type": "status", "goal_status": "complete"})
            return self._dump({"action_type": "answer", "text": a.answer})
        if isinstance(a, A.Fail):
            return self._dump({"action_type": "status", "goal_status": "infeasible"})
        raise self.cannot(a)
