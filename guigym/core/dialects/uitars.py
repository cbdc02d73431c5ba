"""UI-TARS action strings (UI-TARS-1.0 and UI-TARS-1.5; computer and mobile action spaces).

Format, as documented by (read for facts, not copied):

* bytedance/UI-TARS ``codes/ui_tars/action_parser.py`` (``parse_action_to_structure_output``,
  ``parsing_response_to_pyautogui_code``): the response is ``Thought: ...\\nAction: ...``; the
  ``point=``/``start_point=``/``end_point=`` forms are aliases of ``start_box=``/``end_box=``; a box
  ``(x1,y1,x2,y2)`` means its centre; UI-TARS-1.5 ("qwen25vl") coordinates are pixels of the image
  after ``smart_resize`` and are divided by the resized width/height, UI-TARS-1.0 ("qwen2vl")
  coordinates are relative, divided by 1000; ``scroll`` turns into ``pyautogui.scroll(±5)``;
  ``hotkey(key='ctrl c')`` splits on spaces; ``type`` content ending in ``\\n`` submits.
* the UI-TARS-1.5 prompts ``COMPUTER_USE_DOUBAO`` / ``MOBILE_USE_DOUBAO`` (``codes/prompts.py``):
  ``click(point='<point>x1 y1</point>')``, ``left_double``, ``right_single``,
  ``drag(start_point=..., end_point=...)``, ``hotkey(key='ctrl c')``, ``type(content='xxx')``,
  ``scroll(point=..., direction='down or up or right or left')``, ``wait()`` (5 s),
  ``finished(content='xxx')``, ``long_press``, ``open_app(app_name='')``, ``press_home()``,
  ``press_back()``.
* the UI-TARS-1.0 prompts (OSWorld ``mm_agents/uitars_agent.py``):
  ``click(start_box='<|box_start|>(x1,y1)<|box_end|>')``, ``call_user()``, and for mobile
  ``long_press(start_box=..., time='')`` and ``hotkey(key='')`` with enter/back/home.

Mapping: ``click`` -> Click (Tap when ``platform="android"``), ``left_double`` -> DoubleClick,
``right_single`` -> RightClick, ``hover`` -> Hover, ``drag``/``select`` -> Drag (Swipe on android),
``scroll`` with a direction -> Scroll by ``scroll_px`` (``scroll`` with an ``end_box`` is a drag),
``hotkey`` -> Press (one key) or Hotkey, ``keydown``/``keyup`` -> KeyDown/KeyUp, ``type`` -> Type,
``wait`` -> Wait(5), ``finished`` -> Done(answer), ``call_user`` -> Fail, ``long_press`` ->
LongPress, ``open_app`` -> Launch, ``press_home``/``press_back`` -> Home/Back, and on android
``hotkey(key='enter'|'back'|'home')`` -> Enter/Back/Home. ``format`` drops what the strings cannot
hold: the wait length, the scroll amount (only its direction is printed), a fail reason, the
long-press and swipe durations.
"""
from __future__ import annotations

import math
import re
from typing import Any, Optional, Sequence

from guigym.core import actions as A
from guigym.core.dialect_base import DIALECTS
from guigym.core.dialects._common import (
    DEFAULT_SCROLL_PX, Call, DialectBase, Number, bind, is_number, mid, parse_calls, py_single_quoted, tidy,
)
from guigym.core.errors import ActionParseError, ConfigError

IMAGE_FACTOR = 28
MIN_PIXELS = 100 * 28 * 28
MAX_PIXELS = 16384 * 28 * 28  # UI-TARS-1.5's setting
MAX_RATIO = 200
RELATIVE_SCALE = 1000  # UI-TARS-1.0 coordinates are in [0, 1000)
WAIT_SECONDS = 5.0  # "wait() #Sleep for 5s and take a screenshot"


def smart_resize(height: int, width: int, factor: int = IMAGE_FACTOR, min_pixels: int = MIN_PIXELS,
                 max_pixels: int = MAX_PIXELS) -> tuple[int, int]:
    """(height, width) that the Qwen2-VL image processor resizes an image to before UI-TARS sees it.

    Documented conditions (UI-TARS README_coordinates.md / qwen_vl_utils): both sides are multiples
    of ``factor``; the pixel count lies in [``min_pixels``, ``max_pixels``]; the aspect ratio is
    kept as closely as possible. Each side is rounded to the nearest multiple of ``factor``; if the
    area is then too large (small) both sides are scaled by the same factor and rounded down (up) to
    a multiple of ``factor``. Aspect ratios beyond 200 are refused with ``ValueError``.
    """
    if height <= 0 or width <= 0:
        raise ValueError(f"image size must be positive, got {height}x{width}")
    if max(height, width) / min(height, width) > MAX_RATIO:
        raise ValueError(f"absolute aspect ratio must be smaller than {MAX_RATIO}, got "
                         f"{max(height, width) / min(height, width)}")
    h = max(factor, factor * round(height / factor))
    w = max(factor, factor * round(width / factor))
    if h * w > max_pixels:
        shrink = math.sqrt(height * width / max_pixels)
        h = max(factor, factor * math.floor(height / shrink / factor))
        w = max(factor, factor * math.floor(width / shrink / factor))
    elif h * w < min_pixels:
        grow = math.sqrt(min_pixels / (height * width))
        h = factor * math.ceil(height * grow / factor)
        w = factor * math.ceil(width * grow / factor)
    return h, w


_BOX_TOKENS = re.compile(r"<\|box_start\|>|<\|box_end\|>|</?point>|</?bbox>|\[EOS\]")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_ACTION_LINE = re.compile(r"(?:^|\n)[ \t]*Action[ \t]*:[ \t]*")
_CONTENT_CALL = re.compile(r"^(type|finished)\(\s*content\s*=\s*(['\"])(.*)\2\s*\)\s*$", re.S)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "'": "'", '"': '"', "\\": "\\"}
_DIRECTIONS = {"down": (0, 1), "up": (0, -1), "right": (1, 0), "left": (-1, 0)}
_POINT_ALIASES = {"point": "start_box", "start_point": "start_box", "end_point": "end_box"}


@DIALECTS.register("uitars")
class UITarsDialect(DialectBase):
    """UI-TARS ``Thought: ...\\nAction: verb(arg='...')`` strings.

    Args:
        screen: (width, height) of the screenshot the agent saw.
        coords: ``"absolute"`` (UI-TARS-1.5: pixels of the smart-resized image, mapped to screenshot
            pixels with :func:`smart_resize`; without ``screen`` they are taken as screenshot pixels)
            or ``"relative"`` (UI-TARS-1.0: 0-1000 of the screen; needs ``screen``).
        platform: ``"desktop"`` or ``"web"`` (click -> Click, drag -> Drag) or ``"android"``
            (click -> Tap, drag -> Swipe, hotkey enter/back/home -> Enter/Back/Home).
        style: how ``format`` writes points: ``"point"`` (``point='<point>x y</point>'``, the 1.5
            prompts) or ``"box"`` (``start_box='<|box_start|>(x,y)<|box_end|>'``, the 1.0 prompts);
            default: point for absolute, box for relative coordinates.
        min_pixels, max_pixels, factor: the smart_resize settings of the model's image processor.
        scroll_px: pixels one ``scroll(direction=...)`` moves.
    """

    name = "uitars"

    def __init__(self, screen: Optional[Sequence[int]] = None, coords: str = "absolute",
                 platform: str = "desktop", style: Optional[str] = None, min_pixels: int = MIN_PIXELS,
                 max_pixels: int = MAX_PIXELS, factor: int = IMAGE_FACTOR,
                 scroll_px: Number = DEFAULT_SCROLL_PX) -> None:
        super().__init__(screen)
        if coords not in ("absolute", "relative"):
            raise ConfigError(f"uitars: coords must be 'absolute' or 'relative', got {coords!r}")
        if platform not in ("desktop", "web", "android"):
            raise ConfigError(f"uitars: platform must be 'desktop', 'web' or 'android', got {platform!r}")
        style = style or ("point" if coords == "absolute" else "box")
        if style not in ("point", "box"):
            raise ConfigError(f"uitars: style must be 'point' or 'box', got {style!r}")
        if not is_number(scroll_px) or scroll_px <= 0:
            raise ConfigError(f"uitars: scroll_px must be a positive number, got {scroll_px!r}")
        self.coords, self.platform, self.style, self.scroll_px = coords, platform, style, scroll_px
        self.mobile = platform == "android"
        self.model_size: Optional[tuple[int, int]] = None  # (width, height) of the image the model saw
        if coords == "absolute" and self.screen is not None:
            try:
                h, w = smart_resize(self.screen[1], self.screen[0], factor, min_pixels, max_pixels)
            except ValueError as exc:
                raise ConfigError(f"uitars: {exc}") from None
            self.model_size = (w, h)

    # ---- coordinates ------------------------------------------------------------------------------
    def to_screen(self, mx: Number, my: Number) -> tuple[Number, Number]:
        """Model coordinates -> screenshot pixels."""
        if self.coords == "relative":
            w, h = self.need_screen("coords='relative'")
            return tidy(mx * w / RELATIVE_SCALE), tidy(my * h / RELATIVE_SCALE)
        if self.model_size is None:
            return mx, my
        (w, h), (mw, mh) = self.screen, self.model_size  # type: ignore[misc]
        return tidy(mx * w / mw), tidy(my * h / mh)

    def to_model(self, x: Number, y: Number) -> tuple[int, int]:
        """Screenshot pixels -> the integer coordinates the model writes."""
        if self.coords == "relative":
            w, h = self.need_screen("coords='relative'")
            return round(x * RELATIVE_SCALE / w), round(y * RELATIVE_SCALE / h)
        if self.model_size is None:
            return round(x), round(y)
        (w, h), (mw, mh) = self.screen, self.model_size  # type: ignore[misc]
        return round(x * mw / w), round(y * mh / h)

    def _point(self, value: Any, what: str, text: str) -> tuple[Number, Number]:
        if isinstance(value, str):
            nums: list[Any] = [float(n) if "." in n else int(n) for n in _NUMBER.findall(_BOX_TOKENS.sub(" ", value))]
        elif isinstance(value, (list, tuple)):
            nums = list(value)
        else:
            nums = []
        if len(nums) not in (2, 4) or not all(is_number(n) for n in nums):
            raise self.error(f"{what} must be a point like '<point>x y</point>' or '(x,y)' or a box "
                             f"'(x1,y1,x2,y2)', got {value!r}", text)
        mx, my = (nums[0], nums[1]) if len(nums) == 2 else (mid(nums[0], nums[2]), mid(nums[1], nums[3]))
        return self.to_screen(mx, my)

    def _write_point(self, x: Number, y: Number, arg: str = "start") -> str:
        mx, my = self.to_model(x, y)
        if self.style == "point":
            name = {"start": "point", "end": "end_point", "drag": "start_point"}[arg]
            return f"{name}='<point>{mx} {my}</point>'"
        name = "end_box" if arg == "end" else "start_box"
        return f"{name}='<|box_start|>({mx},{my})<|box_end|>'"

    # ---- parsing ----------------------------------------------------------------------------------
    def _action_source(self, text: str) -> str:
        m = _ACTION_LINE.search(text)
        return text[m.end():].strip() if m else text.strip()

    def _calls(self, src: str, text: str) -> list[Call]:
        try:
            return parse_calls(src, self, text)
        except ActionParseError:
            m = _CONTENT_CALL.match(src)  # type(content='it's') with an unescaped quote
            if not m:
                raise
            raw = re.sub(r"\\(.)", lambda e: _ESCAPES.get(e.group(1), e.group(0)), m.group(3), flags=re.S)
            return [Call(m.group(1), None, (), {"content": raw})]

    def parse(self, text: str) -> A.Action:
        self.check_text(text)
        calls = self._calls(self._action_source(text), text)
        if len(calls) > 1:
            raise self.error(f"one action per step, got {len(calls)}: "
                             f"{', '.join(c.qualname for c in calls)}", text)
        return self._to_action(calls[0], text)

    def _args(self, call: Call, params: Sequence[str], required: Sequence[str], text: str) -> dict[str, Any]:
        return bind(call, params, required, self, text, aliases=_POINT_ALIASES)

    def _to_action(self, call: Call, text: str) -> A.Action:
        verb = call.name
        if call.owner is not None:
            raise self.error(f"unknown action {call.qualname!r}", text)
        if verb in ("click", "left_single", "left_double", "right_single", "hover", "long_press"):
            kw = self._args(call, ["start_box", "time"] if verb == "long_press" else ["start_box"],
                            ["start_box"], text)
            x, y = self._point(kw["start_box"], "start_box", text)
            cls = {"click": A.Tap if self.mobile else A.Click, "left_single": A.Tap if self.mobile else A.Click,
                   "left_double": A.DoubleClick, "right_single": A.RightClick, "hover": A.Hover,
                   "long_press": A.LongPress}[verb]
            return self.build(cls, text, x=x, y=y)
        if verb in ("drag", "select"):
            kw = self._args(call, ["start_box", "end_box"], ["start_box", "end_box"], text)
            return self._drag(kw, text)
        if verb == "scroll":
            kw = self._args(call, ["start_box", "direction", "end_box"], [], text)
            if kw.get("direction") in (None, "") and kw.get("end_box") not in (None, ""):
                if kw.get("start_box") in (None, ""):
                    raise self.error("scroll with end_box needs a start_box", text)
                return self._drag(kw, text)
            direction = str(kw.get("direction") or "").strip().lower()
            if direction not in _DIRECTIONS:
                raise self.error(f"scroll direction must be down, up, left or right, got {kw.get('direction')!r}",
                                 text)
            sx, sy = _DIRECTIONS[direction]
            at = {}
            if kw.get("start_box") not in (None, ""):
                at["x"], at["y"] = self._point(kw["start_box"], "start_box", text)
            return self.build(A.Scroll, text, dx=sx * self.scroll_px, dy=sy * self.scroll_px, **at)
        if verb == "type":
            kw = self._args(call, ["content"], ["content"], text)
            return self.build(A.Type, text, text=kw["content"])
        if verb == "hotkey":
            kw = self._args(call, ["key", "hotkey"], [], text)
            combo = kw.get("key", kw.get("hotkey"))
            if not isinstance(combo, str) or not combo.split():
                raise self.error(f"hotkey needs key='ctrl c' (keys separated by spaces), got {combo!r}", text)
            keys = combo.split()
            if len(keys) > 1:
                return self.build(A.Hotkey, text, keys=tuple(keys))
            if self.mobile and keys[0].lower() in ("enter", "back", "home"):
                return {"enter": A.Enter, "back": A.Back, "home": A.Home}[keys[0].lower()]()
            return self.build(A.Press, text, key=keys[0])
        if verb in ("keydown", "keyup"):
            kw = self._args(call, ["key"], ["key"], text)
            return self.build(A.KeyDown if verb == "keydown" else A.KeyUp, text, key=kw["key"])
        if verb == "wait":
            self._args(call, [], [], text)
            return A.Wait(seconds=WAIT_SECONDS)
        if verb == "finished":
            kw = self._args(call, ["content"], [], text)
            return self.build(A.Done, text, answer=kw.get("content") or None)
        if verb == "call_user":
            self._args(call, [], [], text)
            return A.Fail()
        if verb == "open_app":
            kw = self._args(call, ["app_name"], ["app_name"], text)
            return self.build(A.Launch, text, app=kw["app_name"])
        if verb in ("press_home", "press_back"):
            self._args(call, [], [], text)
            return A.Home() if verb == "press_home" else A.Back()
        raise self.error(f"unknown action {verb!r}; known: click, left_double, right_single, hover, drag, "
                         f"scroll, hotkey, keydown, keyup, type, wait, finished, call_user, long_press, "
                         f"open_app, press_home, press_back", text)

    def _drag(self, kw: dict[str, Any], text: str) -> A.Action:
        x1, y1 = self._point(kw["start_box"], "start_box", text)
        x2, y2 = self._point(kw["end_box"], "end_box", text)
        return self.build(A.Swipe if self.mobile else A.Drag, text, x1=x1, y1=y1, x2=x2, y2=y2)

    # ---- printing ---------------------------------------------------------------------------------
    def format(self, action: A.Action) -> str:
        a = action
        if isinstance(a, (A.Click, A.DoubleClick, A.RightClick, A.Hover)) and a.element is not None:
            raise self.cannot(a, "UI-TARS points at pixels, not element ids")
        if isinstance(a, A.Click):
            if a.button == "middle":
                raise self.error("uitars has no middle click")
            verb = "right_single" if a.button == "right" else "click"
            return f"{verb}({self._write_point(a.x, a.y)})"
        if isinstance(a, A.Tap):
            return f"click({self._write_point(a.x, a.y)})"
        if isinstance(a, (A.DoubleClick, A.RightClick, A.Hover, A.LongPress)):
            verb = {A.DoubleClick: "left_double", A.RightClick: "right_single", A.Hover: "hover",
                    A.LongPress: "long_press"}[type(a)]
            return f"{verb}({self._write_point(a.x, a.y)})"
        if isinstance(a, (A.Drag, A.Swipe)):
            return f"drag({self._write_point(a.x1, a.y1, 'drag')}, {self._write_point(a.x2, a.y2, 'end')})"
        if isinstance(a, A.Scroll):
            return self._format_scroll(a)
        if isinstance(a, A.Type):
            return f"type(content={py_single_quoted(a.text)})"
        if isinstance(a, (A.Press, A.Hotkey)):
            keys = (a.key,) if isinstance(a, A.Press) else a.keys
            for k in keys:
                if not k or k != k.strip() or len(k.split()) != 1:
                    raise self.error(f"cannot write key {k!r}: UI-TARS separates keys with spaces")
            return f"hotkey(key={py_single_quoted(' '.join(keys))})"
        if isinstance(a, (A.KeyDown, A.KeyUp)):
            verb = "keydown" if isinstance(a, A.KeyDown) else "keyup"
            return f"{verb}(key={py_single_quoted(a.key)})"
        if isinstance(a, A.Enter):
            return "hotkey(key='enter')"
        if isinstance(a, A.Wait):
            return "wait()"
        if isinstance(a, A.Done):
            return "finished()" if a.answer is None else f"finished(content={py_single_quoted(a.answer)})"
        if isinstance(a, A.Fail):
            return "call_user()"
        if isinstance(a, A.Launch):
            return f"open_app(app_name={py_single_quoted(a.app)})"
        if isinstance(a, A.Home):
            return "press_home()"
        if isinstance(a, A.Back):
            return "press_back()"
        raise self.cannot(a)

    def _format_scroll(self, a: A.Scroll) -> str:
        if a.element is not None:
            raise self.error("uitars scrolls at a point, not at an element id")
        if (a.dx == 0) == (a.dy == 0):
            raise self.error(f"uitars scrolls in one direction at a time, got dx={a.dx}, dy={a.dy}")
        direction = ("down" if a.dy > 0 else "up") if a.dy != 0 else ("right" if a.dx > 0 else "left")
        where = "" if a.x is None else self._write_point(a.x, a.y) + ", "
        return f"scroll({where}direction='{direction}')"
