"""OSWorld's ``computer_13`` action space: one JSON dict per action.

Format, as documented by (read for facts, not copied):

* xlang-ai/OSWorld ``mm_agents/prompts.py`` (``SYS_PROMPT_IN_SCREENSHOT_OUT_ACTION``): the
  ``ACTION_SPACE`` list -- MOVE_TO(x, y), CLICK(button, x, y, num_clicks), MOUSE_DOWN/MOUSE_UP
  (button), RIGHT_CLICK(x, y), DOUBLE_CLICK(x, y), DRAG_TO(x, y), SCROLL(dx, dy), TYPING(text),
  PRESS(key), KEY_DOWN(key), KEY_UP(key), HOTKEY(keys), WAIT, FAIL, DONE -- answered as a dict
  wrapped in backticks, e.g. ``{"action_type": "CLICK", "x": 1319.11, "y": 65.06}``.
* ``desktop_env/controllers/python.py`` (``PythonController.execute_action``): parameters sit
  either at top level or under ``"parameters"``; CLICK without x/y clicks where the pointer is;
  DRAG_TO drags from the current pointer position; SCROLL runs ``pyautogui.hscroll(dx)`` and
  ``pyautogui.vscroll(dy)`` (wheel clicks, positive dy scrolls *up*); the bare strings ``WAIT``,
  ``FAIL`` and ``DONE`` are accepted too.
* ``mm_agents/agent.py`` (``parse_actions_from_string``): every ```json fenced block of a response
  is one action, in order.

Mapping: CLICK -> Click (``num_clicks=2`` with the left button -> DoubleClick), RIGHT_CLICK ->
RightClick, DOUBLE_CLICK -> DoubleClick, MOVE_TO -> Hover, SCROLL -> Scroll (wheel clicks times
``wheel_px`` pixels, sign flipped for dy), TYPING -> Type, PRESS -> Press, KEY_DOWN/KEY_UP ->
KeyDown/KeyUp, HOTKEY -> Hotkey, WAIT -> Wait(), FAIL -> Fail(), DONE -> Done(). Because DRAG_TO and
SCROLL act at the current pointer position, a response with two blocks MOVE_TO then DRAG_TO is one
Drag and MOVE_TO then SCROLL is a Scroll at that point; ``format`` prints those two the same way.
CLICK without coordinates, MOUSE_DOWN/MOUSE_UP and a lone DRAG_TO have no typed equivalent.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from guigym.core import actions as A
from guigym.core.dialect_base import DIALECTS
from guigym.core.dialects._common import (
    WHEEL_CLICK_PX, DialectBase, Number, fenced_blocks, is_number, json_dumps, load_json_object, wheel_clicks,
)
from guigym.core.errors import ActionParseError, ConfigError

_SPECIAL = {"WAIT": A.Wait, "FAIL": A.Fail, "DONE": A.Done}
_PARAMS = {
    "MOVE_TO": ({"x", "y"}, {"x", "y"}), "CLICK": ({"x", "y", "button", "num_clicks"}, set()),
    "RIGHT_CLICK": ({"x", "y"}, set()), "DOUBLE_CLICK": ({"x", "y"}, set()), "DRAG_TO": ({"x", "y"}, {"x", "y"}),
    "SCROLL": ({"dx", "dy"}, set()), "TYPING": ({"text"}, {"text"}), "PRESS": ({"key"}, {"key"}),
    "KEY_DOWN": ({"key"}, {"key"}), "KEY_UP": ({"key"}, {"key"}), "HOTKEY": ({"keys"}, {"keys"}),
    "MOUSE_DOWN": ({"button"}, set()), "MOUSE_UP": ({"button"}, set()),
    "WAIT": (set(), set()), "FAIL": (set(), set()), "DONE": (set(), set()),
}


@DIALECTS.register("computer_13")
class Computer13Dialect(DialectBase):
    """OSWorld ``computer_13`` JSON actions.

    Args:
        screen: unused (coordinates are screenshot pixels); accepted for a uniform constructor.
        wheel_px: pixels per wheel click, to convert SCROLL's dx/dy clicks to pixels and back.
    """

    name = "computer_13"

    def __init__(self, screen: Optional[Sequence[int]] = None, wheel_px: Number = WHEEL_CLICK_PX) -> None:
        super().__init__(screen)
        if not is_number(wheel_px) or wheel_px <= 0:
            raise ConfigError(f"computer_13: wheel_px must be a positive number, got {wheel_px!r}")
        self.wheel_px = wheel_px

    # ---- parsing ----------------------------------------------------------------------------------
    def _steps(self, text: str) -> list[tuple[str, dict[str, Any]]]:
        stripped = text.strip()
        blocks = [stripped]
        if stripped not in _SPECIAL:
            try:
                load_json_object(stripped, self, text)
            except ActionParseError:
                blocks = [b.body for b in fenced_blocks(text)] or [stripped]
        steps: list[tuple[str, dict[str, Any]]] = []
        for body in blocks:
            if body.strip() in _SPECIAL:
                steps.append((body.strip(), {}))
                continue
            value = load_json_object(body, self, text)
            for item in value if isinstance(value, list) else [value]:
                steps.append(self._step(item, text))
        if not steps:
            raise self.error("no action found", text)
        return steps

    def _step(self, item: Any, text: str) -> tuple[str, dict[str, Any]]:
        if isinstance(item, str) and item in _SPECIAL:
            return item, {}
        if not isinstance(item, dict) or not isinstance(item.get("action_type"), str):
            raise self.error(f'expected a dict with an "action_type", got {str(item)[:120]!r}', text)
        kind = item["action_type"].upper()
        if kind not in _PARAMS:
            raise self.error(f"unknown action_type {item['action_type']!r}; known: {', '.join(_PARAMS)}", text)
        params = item.get("parameters")
        if isinstance(params, dict):
            extra = set(item) - {"action_type", "parameters"}
            if extra:
                raise self.error(f"{kind}: parameters given both inside and outside 'parameters': "
                                 f"{', '.join(sorted(extra))}", text)
        elif params is None:
            params = {k: v for k, v in item.items() if k != "action_type"}
        else:
            raise self.error(f"{kind}: 'parameters' must be a dict", text)
        allowed, required = _PARAMS[kind]
        unknown = sorted(set(params) - allowed)
        if unknown:
            raise self.error(f"{kind}: unknown parameter(s) {', '.join(unknown)}; expected "
                             f"{', '.join(sorted(allowed)) or 'none'}", text)
        missing = sorted(required - set(params))
        if missing:
            raise self.error(f"{kind}: missing parameter(s) {', '.join(missing)}", text)
        return kind, params

    def parse(self, text: str) -> A.Action:
        self.check_text(text)
        steps = self._steps(text)
        if len(steps) == 2 and steps[0][0] == "MOVE_TO" and steps[1][0] in ("DRAG_TO", "SCROLL"):
            (_, at), (kind, p) = steps
            if kind == "DRAG_TO":
                return self.build(A.Drag, text, x1=at["x"], y1=at["y"], x2=p["x"], y2=p["y"])
            return self._scroll(p, text, x=at["x"], y=at["y"])
        if len(steps) != 1:
            raise self.error(f"one action per step, got {len(steps)}: {', '.join(k for k, _ in steps)} "
                             f"(only MOVE_TO followed by DRAG_TO or SCROLL combine into one action)", text)
        kind, p = steps[0]
        if kind in _SPECIAL:
            return _SPECIAL[kind]()
        if kind in ("CLICK", "RIGHT_CLICK", "DOUBLE_CLICK") and ("x" not in p or "y" not in p):
            raise self.error(f"{kind} without x and y acts at the current pointer position, which a typed "
                             f"action cannot express; give x and y", text)
        if kind == "CLICK":
            button = p.get("button", "left")
            clicks = p.get("num_clicks", 1)
            if clicks == 1:
                return self.build(A.Click, text, x=p["x"], y=p["y"], button=button)
            if clicks == 2 and button == "left":
                return self.build(A.DoubleClick, text, x=p["x"], y=p["y"])
            raise self.error(f"CLICK with num_clicks={clicks!r} and button={button!r} has no typed equivalent "
                             f"(use num_clicks 1, or 2 with the left button)", text)
        if kind in ("RIGHT_CLICK", "DOUBLE_CLICK", "MOVE_TO"):
            cls = {"RIGHT_CLICK": A.RightClick, "DOUBLE_CLICK": A.DoubleClick, "MOVE_TO": A.Hover}[kind]
            return self.build(cls, text, x=p["x"], y=p["y"])
        if kind == "SCROLL":
            return self._scroll(p, text)
        if kind == "TYPING":
            return self.build(A.Type, text, text=p["text"])
        if kind in ("PRESS", "KEY_DOWN", "KEY_UP"):
            cls = {"PRESS": A.Press, "KEY_DOWN": A.KeyDown, "KEY_UP": A.KeyUp}[kind]
            return self.build(cls, text, key=p["key"])
        if kind == "HOTKEY":
            return self.build(A.Hotkey, text, keys=p["keys"])
        if kind == "DRAG_TO":
            raise self.error("DRAG_TO drags from the current pointer position; answer MOVE_TO and DRAG_TO "
                             "together (two ```json blocks) to drag", text)
        raise self.error(f"{kind} has no typed equivalent in guigym", text)

    def _scroll(self, p: dict[str, Any], text: str, **at: Any) -> A.Action:
        if "dx" not in p and "dy" not in p:
            raise self.error("SCROLL needs dx and/or dy (wheel clicks)", text)
        dx, dy = p.get("dx", 0), p.get("dy", 0)
        for name, v in (("dx", dx), ("dy", dy)):
            if not is_number(v):
                raise self.error(f"SCROLL: {name} must be a number of wheel clicks, got {v!r}", text)
        # pyautogui: positive vscroll is up and positive hscroll is right; guigym: positive dy is down
        return self.build(A.Scroll, text, dx=dx * self.wheel_px, dy=-dy * self.wheel_px, **at)

    # ---- printing ---------------------------------------------------------------------------------
    @staticmethod
    def _dump(*dicts: dict[str, Any]) -> str:
        if len(dicts) == 1:
            return json_dumps(dicts[0])
        return "\n".join(f"```json\n{json_dumps(d)}\n```" for d in dicts)

    def format(self, action: A.Action) -> str:
        a = action
        if isinstance(a, (A.Click, A.DoubleClick, A.RightClick, A.Hover)):
            if a.element is not None:
                raise self.cannot(a, "computer_13 points at pixels, not element ids")
            kind = {A.Click: "CLICK", A.DoubleClick: "DOUBLE_CLICK", A.RightClick: "RIGHT_CLICK",
                    A.Hover: "MOVE_TO"}[type(a)]
            d: dict[str, Any] = {"action_type": kind, "x": a.x, "y": a.y}
            if isinstance(a, A.Click) and a.button != "left":
                d["button"] = a.button
            return self._dump(d)
        if isinstance(a, A.Drag):
            return self._dump({"action_type": "MOVE_TO", "x": a.x1, "y": a.y1},
                              {"action_type": "DRAG_TO", "x": a.x2, "y": a.y2})
        if isinstance(a, A.Scroll):
            if a.element is not None:
                raise self.error("computer_13 scrolls at the pointer, not at an element id")
            scroll = {"action_type": "SCROLL", "dx": wheel_clicks(a.dx, self.wheel_px),
                      "dy": -wheel_clicks(a.dy, self.wheel_px)}
            if a.x is None:
                return self._dump(scroll)
            return self._dump({"action_type": "MOVE_TO", "x": a.x, "y": a.y}, scroll)
        if isinstance(a, A.Type):
            return self._dump({"action_type": "TYPING", "text": a.text})
        if isinstance(a, (A.Press, A.KeyDown, A.KeyUp)):
            kind = {A.Press: "PRESS", A.KeyDown: "KEY_DOWN", A.KeyUp: "KEY_UP"}[type(a)]
            return self._dump({"action_type": kind, "key": a.key})
        if isinstance(a, A.Hotkey):
            return self._dump({"action_type": "HOTKEY", "keys": list(a.keys)})
        if isinstance(a, A.Wait):
            return self._dump({"action_type": "WAIT"})
        if isinstance(a, A.Fail):
            return self._dump({"action_type": "FAIL"})
        if isinstance(a, A.Done):
            if a.answer is not None:
                raise self.error("computer_13 DONE carries no answer")
            return self._dump({"action_type": "DONE"})
        raise self.cannot(a)
