"""AndroidLab's ``do(action=...)`` / ``finish(message=...)`` operations (XML and SoM-by-box modes).

Format, as documented by (read for facts, not copied):

* THUDM/Android-Lab ``templates/text_only_mobile.py`` (``SYSTEM_PROMPT_ANDROID_TEXT_GPT``):
  ``do(action, element=None, **kwargs)`` with actions "Tap", "Type", "Swipe", "Long Press",
  "Home", "Back", "Enter", "Wait"; ``element`` is a box ``[x1, y1, x2, y2]`` (its centre) or, for
  Swipe, a start point ``[x, y]`` (screen centre when omitted); Type takes ``text=``; Swipe takes
  ``direction`` (up/down/left/right) and ``dist`` (long/medium/short, default medium);
  ``finish(message=None)``. Example: ``do(action="Swipe", element=[680, 2016, 760, 2276],
  direction="up", dist="long")``.
* ``templates/android_screenshot_template.py``: the older names "Press Home", "Press Back",
  "Press Enter" and ``argument=`` for the Type text or the Swipe direction.
* ``page_executor/text_executor.py`` (``TextOnlyExecutor.do``): also "Launch" with ``app=``;
  "Wait" sleeps 5 s; Type presses Enter after typing; ``is_relative_bbox`` configs give
  coordinates in 0-1000 of the screen.
* ``utils_mobile/and_controller.py`` (``AndroidController.swipe``): unit = int(width / 10);
  short = 1 unit, medium = 2 units, long = 10 units, or ``dist`` pixels as a number; up/down move
  2 units vertically, left/right 1 unit horizontally; swipes take 400 ms.

Mapping: Tap -> Tap, Long Press -> LongPress, Swipe -> Swipe (end point computed as above, which
needs ``screen`` for a named distance or an omitted element), Type -> Type, Home/Back/Enter (and the
"Press ..." names) -> Home/Back/Enter, Wait -> Wait(5), Launch -> Launch, finish -> Done(message).
Note that AndroidLab's executor presses Enter after Type; guigym's Type does not.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from guigym.core import actions as A
from guigym.core.dialect_base import DIALECTS
from guigym.core.dialects._common import (
    DialectBase, Number, as_point, between, bind, call_or_extract, fenced_blocks, is_number, py_str, tidy,
)
from guigym.core.errors import ConfigError

WAIT_SECONDS = 5.0
SWIPE_MS = 400
RELATIVE_SCALE = 1000
_DIST_UNITS = {"short": 1, "medium": 2, "long": 10}
# direction -> (x units, y units) per distance unit
_DIRECTIONS = {"up": (0, -2), "down": (0, 2), "left": (-1, 0), "right": (1, 0)}
_KEY_ACTIONS = {"home": A.Home, "press home": A.Home, "back": A.Back, "press back": A.Back,
                "enter": A.Enter, "press enter": A.Enter}


@DIALECTS.register("androidlab")
class AndroidLabDialect(DialectBase):
    """AndroidLab operations.

    Args:
        screen: (width, height) of the screen; needed for Swipe distances named short/medium/long,
            Swipe without an element, and relative coordinates.
        coords: ``"absolute"`` (screen pixels, the XML mode) or ``"relative"`` (0-1000 of the screen).
    """

    name = "androidlab"

    def __init__(self, screen: Optional[Sequence[int]] = None, coords: str = "absolute") -> None:
        super().__init__(screen)
        if coords not in ("absolute", "relative"):
            raise ConfigError(f"androidlab: coords must be 'absolute' or 'relative', got {coords!r}")
        self.coords = coords

    # ---- coordinates ------------------------------------------------------------------------------
    def _to_screen(self, x: Number, y: Number) -> tuple[Number, Number]:
        if self.coords == "absolute":
            return x, y
        w, h = self.need_screen("coords='relative'")
        return tidy(x * w / RELATIVE_SCALE), tidy(y * h / RELATIVE_SCALE)

    def _to_model(self, x: Number, y: Number) -> tuple[Number, Number]:
        if self.coords == "absolute":
            return x, y
        w, h = self.need_screen("coords='relative'")
        return round(x * RELATIVE_SCALE / w), round(y * RELATIVE_SCALE / h)

    def _unit(self, dist: Any, text: str) -> Number:
        if isinstance(dist, str) and dist.strip().lower() in _DIST_UNITS:
            w, _ = self.need_screen(f"a swipe of dist={dist!r}")
            return int(w / 10) * _DIST_UNITS[dist.strip().lower()]
        if is_number(dist) and dist > 0:
            return dist
        raise self.error(f"Swipe: dist must be short, medium, long or a positive number of pixels, got {dist!r}",
                         text)

    # ---- parsing ----------------------------------------------------------------------------------
    @staticmethod
    def _source(text: str) -> Optional[str]:
        """The operation inside a model response: last fenced block, or ``<answer>...</answer>``."""
        blocks = fenced_blocks(text)
        if blocks:
            return blocks[-1].body
        for start, end in (("<answer>", "</answer>"), ("<|begin_of_box|>", "<|end_of_box|>")):
            inner = between(text, start, end)
            if inner is not None:
                return inner
        return None

    def parse(self, text: str) -> A.Action:
        self.check_text(text)
        call = call_or_extract(self, text, self._source)
        if call.owner is not None:
            raise self.error(f"unknown operation {call.qualname!r}", text)
        if call.name == "finish":
            kw = bind(call, ["message"], [], self, text)
            msg = kw.get("message")
            if msg is not None and not isinstance(msg, str):
                raise self.error(f"finish(): message must be a string, got {msg!r}", text)
            return A.Done(answer=msg or None)
        if call.name != "do":
            raise self.error(f"unknown operation {call.name!r}; expected do(action=...) or finish(message=...)",
                             text)
        kw = bind(call, ["action", "argument", "element", "text", "direction", "dist", "app", "duration"],
                  ["action"], self, text)
        action = kw["action"]
        key = action.strip().lower() if isinstance(action, str) else None
        if key in ("tap", "long press"):
            if kw.get("element") is None:
                raise self.error(f"{action}: element=[x1, y1, x2, y2] is required", text)
            x, y = self._to_screen(*as_point(kw["element"], "element", self, text))
            return self.build(A.Tap if key == "tap" else A.LongPress, text, x=x, y=y)
        if key == "type":
            value = kw.get("text", kw.get("argument"))
            if not isinstance(value, str):
                raise self.error(f'Type: text="..." is required, got {value!r}', text)
            return self.build(A.Type, text, text=value)
        if key == "swipe":
            return self._swipe(kw, text)
        if key in _KEY_ACTIONS:
            return _KEY_ACTIONS[key]()
        if key == "wait":
            return A.Wait(seconds=WAIT_SECONDS)
        if key == "launch":
            app = kw.get("app", kw.get("argument"))
            if not isinstance(app, str) or not app:
                raise self.error(f'Launch: app="..." is required, got {app!r}', text)
            return self.build(A.Launch, text, app=app)
        raise self.error(f"unknown action {action!r}; known: Tap, Type, Swipe, Long Press, Home, Back, Enter, "
                         f"Wait, Launch", text)

    def _swipe(self, kw: dict[str, Any], text: str) -> A.Action:
        direction = kw.get("direction", kw.get("argument"))
        if not isinstance(direction, str) or direction.strip().lower() not in _DIRECTIONS:
            raise self.error(f"Swipe: direction must be up, down, left or right, got {direction!r}", text)
        if kw.get("element") is None:
            w, h = self.need_screen("a swipe without element")
            x, y = w // 2, h // 2
        else:
            x, y = self._to_screen(*as_point(kw["element"], "element", self, text))
        unit = self._unit(kw.get("dist", "medium"), text)
        ux, uy = _DIRECTIONS[direction.strip().lower()]
        x2 = x if ux == 0 else tidy(x + ux * unit)
        y2 = y if uy == 0 else tidy(y + uy * unit)
        return self.build(A.Swipe, text, x1=x, y1=y, x2=x2, y2=y2, duration_ms=SWIPE_MS)

    # ---- printing ---------------------------------------------------------------------------------
    def format(self, action: A.Action) -> str:
        a = action
        if isinstance(a, (A.Tap, A.LongPress)):
            x, y = self._to_model(a.x, a.y)
            name = "Tap" if isinstance(a, A.Tap) else "Long Press"
            return f'do(action="{name}", element=[{x!r}, {y!r}, {x!r}, {y!r}])'
        if isinstance(a, A.Swipe):
            return self._format_swipe(a)
        if isinstance(a, A.Type):
            return f'do(action="Type", text={py_str(a.text)})'
        if isinstance(a, (A.Home, A.Back, A.Enter)):
            return f'do(action="{type(a).__name__}")'
        if isinstance(a, A.Wait):
            return 'do(action="Wait")'
        if isinstance(a, A.Launch):
            return f'do(action="Launch", app={py_str(a.app)})'
        if isinstance(a, A.Done):
            return "finish()" if a.answer is None else f"finish(message={py_str(a.answer)})"
        raise self.cannot(a)

    def _format_swipe(self, a: A.Swipe) -> str:
        dx, dy = a.x2 - a.x1, a.y2 - a.y1
        if (dx == 0) == (dy == 0):
            raise self.error(f"androidlab swipes along one axis only, got ({a.x1}, {a.y1}) -> ({a.x2}, {a.y2})")
        if dx != 0:
            direction, unit = ("right" if dx > 0 else "left"), abs(dx)
        else:
            direction, unit = ("down" if dy > 0 else "up"), abs(dy) / 2
        unit = tidy(unit)
        dist: Any = unit
        if self.screen is not None:
            for name, n in _DIST_UNITS.items():
                if unit == int(self.screen[0] / 10) * n:
                    dist = name
                    break
        x, y = self._to_model(a.x1, a.y1)
        dist_s = py_str(dist) if isinstance(dist, str) else repr(dist)
        return f'do(action="Swipe", element=[{x!r}, {y!r}], direction="{direction}", dist={dist_s})'
