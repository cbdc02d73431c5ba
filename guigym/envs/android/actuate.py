"""Execute typed actions (:mod:`guigym.core.actions`) on an :class:`~guigym.envs.android.device.AndroidDevice`.

Coordinates. Typed actions carry points; ``coords`` says what their numbers mean:

* ``"absolute"``: screen pixels (AndroidLab XML mode, AndroidWorld, UI-TARS after its own scaling);
* ``"relative999"``: 0..999 units of the screen (MobileRL, AndroidLab's relative-bbox configs),
  converted per axis as ``round(v * size / 1000)`` -- the inverse of the ``round(v * 1000 / size)``
  that :func:`guigym.envs.android.observation.to_relative` uses for the v4 simplified XML (same
  :data:`~guigym.envs.android.observation.RELATIVE_SCALE`) -- and clamped to the screen. Use it for
  actions parsed *without* a conversion of their own (e.g. the ``androidlab`` dialect with
  ``coords="absolute"`` fed 0-999 boxes); a dialect that already converted (``androidlab`` with
  ``coords="relative"``) needs ``"absolute"`` here.

A box ``[x1, y1, x2, y2]`` means its centre (:func:`box_center`; the centre is taken in the box's
own units, then converted: one rounding). Element-index actions (AndroidWorld ``index``: typed
``Click/DoubleClick/Fill/Scroll(element="3")``) resolve through
:func:`guigym.envs.android.observation.ui_elements` of a fresh ``ui_xml()`` dump; the tap point is
``int`` of the bbox centre, as AndroidWorld's ``actuation.execute_adb_action``.

Geometry, from the public sources (read for behaviour, not copied):

* AndroidLab ``Swipe(direction, dist)`` (THUDM/Android-Lab ``utils_mobile/and_controller.py``
  ``AndroidController.swipe``): ``unit = int(width / 10)`` for every direction; ``short`` = 1 unit,
  ``medium`` = 2, ``long`` = 10, or ``dist`` pixels when a number; up/down move ``2 * unit``
  vertically, left/right ``1 * unit`` horizontally; start = the element's centre, or the screen
  centre ``(width // 2, height // 2)``; 400 ms. The ``androidlab`` dialect already turns a Swipe into
  a typed Swipe with these end points; :func:`androidlab_swipe` is the same rule for callers holding
  the raw (direction, dist).
* AndroidWorld ``scroll`` (``android_world/env/actuation.py``): from the centre of the element (or
  screen) to its edge; ``down`` ends at the top edge (the finger moves up). Typed ``Scroll`` with
  ``dy > 0`` is "scroll down"; its magnitude is ignored when it has no point (AndroidWorld always
  scrolls to the edge). A Scroll at a point swipes from the point by ``-dy``/``-dx`` pixels.
  (AndroidWorld tests ``if action.index:``, so index 0 scrolls the whole screen there; here index 0
  is element 0.)
* AndroidWorld ``input_text`` with an index (typed ``Fill``): tap the element, clear it (``input
  keycombination 113 29`` = Ctrl+A, then ``KEYCODE_DEL``), type. AndroidWorld and AndroidLab press
  Enter after typing; set ``enter_after_type=True`` for that.
* LongPress: ``device.long_press`` (a zero-distance swipe held ``duration_ms``, 1000 by default).
* Done(answer) / AndroidLab ``finish(message)`` end the episode with that answer; Fail ends it as
  infeasible; Wait sleeps.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Literal, Optional, Sequence, Union

from guigym.core import actions as A
from guigym.core.errors import ActionNotPossible, ConfigError
from guigym.envs.android.device import AndroidDevice
from guigym.envs.android.observation import RELATIVE_SCALE, UIElement, ui_elements

Number = Union[int, float]
Coords = Literal["absolute", "relative999"]

ANDROIDLAB_SWIPE_MS = 400
ANDROIDLAB_DIST_UNITS = {"short": 1, "medium": 2, "long": 10}
#: direction -> (x units, y units) moved per distance unit (AndroidLab)
ANDROIDLAB_DIRECTIONS = {"up": (0, -2), "down": (0, 2), "left": (-1, 0), "right": (1, 0)}
SCROLL_MS = 300
DOUBLE_TAP_GAP_S = 0.1
#: typed Press key names (Playwright/pyautogui spelling, lower-cased) -> Android keycodes
KEYCODES = {
    "enter": "KEYCODE_ENTER", "return": "KEYCODE_ENTER", "back": "KEYCODE_BACK", "home": "KEYCODE_HOME",
    "backspace": "KEYCODE_DEL", "delete": "KEYCODE_FORWARD_DEL", "tab": "KEYCODE_TAB", "escape": "KEYCODE_ESCAPE",
    "esc": "KEYCODE_ESCAPE", "space": "KEYCODE_SPACE", "arrowup": "KEYCODE_DPAD_UP", "up": "KEYCODE_DPAD_UP",
    "arrowdown": "KEYCODE_DPAD_DOWN", "down": "KEYCODE_DPAD_DOWN", "arrowleft": "KEYCODE_DPAD_LEFT",
    "left": "KEYCODE_DPAD_LEFT", "arrowright": "KEYCODE_DPAD_RIGHT", "right": "KEYCODE_DPAD_RIGHT",
    "menu": "KEYCODE_MENU", "volumeup": "KEYCODE_VOLUME_UP", "volumedown": "KEYCODE_VOLUME_DOWN",
    "power": "KEYCODE_POWER", "appswitch": "KEYCODE_APP_SWITCH",
}

__all__ = ["Actuator", "ActuationResult", "Coords", "relative_to_pixels", "box_center", "androidlab_swipe",
           "execute", "KEYCODES"]


def relative_to_pixels(v: Number, size: int) -> int:
    """0..999 relative units -> pixel on an axis of ``size`` pixels: ``round(v * size / 1000)``,
    clamped to ``[0, size - 1]``."""
    return max(0, min(int(size) - 1, round(float(v) * size / RELATIVE_SCALE)))


def box_center(box: Sequence[Number]) -> tuple[float, float]:
    """Centre of ``[x1, y1, x2, y2]`` (any units); ConfigError naming ``box`` when malformed."""
    if len(box) != 4:
        raise ConfigError(f"box: expected [x1, y1, x2, y2], got {list(box)!r}")
    x1, y1, x2, y2 = (float(v) for v in box)
    if x2 < x1 or y2 < y1:
        raise ConfigError(f"box: x2 >= x1 and y2 >= y1 required, got {list(box)!r}")
    return (x1 + x2) / 2, (y1 + y2) / 2


def androidlab_swipe(direction: str, dist: Union[str, int], screen: tuple[int, int],
                     start: Optional[tuple[Number, Number]] = None) -> tuple[int, int, int, int]:
    """AndroidLab's swipe end points ``(x1, y1, x2, y2)`` in pixels (see module docstring).

    Args:
        direction: up / down / left / right.
        dist: short / medium / long, or a positive number of pixels per unit.
        screen: (width, height) pixels.
        start: start point (an element's centre); default the screen centre.
    """
    d = direction.strip().lower() if isinstance(direction, str) else direction
    if d not in ANDROIDLAB_DIRECTIONS:
        raise ConfigError(f"direction: expected up, down, left or right, got {direction!r}")
    w, h = screen
    if isinstance(dist, str) and dist.strip().lower() in ANDROIDLAB_DIST_UNITS:
        unit = int(w / 10) * ANDROIDLAB_DIST_UNITS[dist.strip().lower()]
    elif isinstance(dist, (int, float)) and not isinstance(dist, bool) and dist > 0:
        unit = int(dist)
    else:
        raise ConfigError(f"dist: expected short, medium, long or a positive number, got {dist!r}")
    x, y = (w // 2, h // 2) if start is None else (int(start[0]), int(start[1]))
    ux, uy = ANDROIDLAB_DIRECTIONS[d]
    return x, y, x + ux * unit, y + uy * unit


@dataclass
class ActuationResult:
    """What one executed action did.

    ``ended``: the action ends the episode (Done/Fail). ``answer``: Done's answer (AndroidLab's
    ``finish(message)``, AndroidWorld's ``answer``). ``status``: ``"complete"`` (Done),
    ``"infeasible"`` (Fail) or None. ``points``: the pixel points the action touched, in order.
    """

    action: A.Action
    ended: bool = False
    answer: Optional[str] = None
    status: Optional[str] = None
    points: list[tuple[int, int]] = field(default_factory=list)


class Actuator:
    """Runs typed actions on one device.

    Args:
        device: the AndroidDevice.
        coords: ``"absolute"`` or ``"relative999"`` (see module docstring).
        screen: (width, height) pixels; default ``device.screen_size()`` on first need.
        enter_after_type: press Enter after Type/Fill (AndroidLab's and AndroidWorld's executors do).
        sleep: ``time.sleep``-compatible (tests pass a recorder).
    """

    def __init__(self, device: AndroidDevice, coords: Coords = "absolute", screen: Optional[tuple[int, int]] = None,
                 *, enter_after_type: bool = False, sleep: Callable[[float], None] = time.sleep) -> None:
        if coords not in ("absolute", "relative999"):
            raise ConfigError(f"coords: expected 'absolute' or 'relative999', got {coords!r}")
        self.device = device
        self.coords: Coords = coords
        self._screen = (int(screen[0]), int(screen[1])) if screen is not None else None
        self.enter_after_type = enter_after_type
        self.sleep = sleep

    # -- geometry ----------------------------------------------------------------------------------
    @property
    def screen(self) -> tuple[int, int]:
        if self._screen is None:
            w, h = self.device.screen_size()
            self._screen = (int(w), int(h))
        return self._screen

    def refresh_screen(self) -> tuple[int, int]:
        """Re-read the screen size (after a rotation)."""
        self._screen = None
        return self.screen

    def to_pixels(self, x: Number, y: Number) -> tuple[int, int]:
        """An action point in ``coords`` units -> integer screen pixels."""
        if self.coords == "relative999":
            w, h = self.screen
            return relative_to_pixels(x, w), relative_to_pixels(y, h)
        return int(round(x)), int(round(y))

    def box_to_pixels(self, box: Sequence[Number]) -> tuple[int, int]:
        """The tap point of a box in ``coords`` units."""
        return self.to_pixels(*box_center(box))

    def element(self, ref: str) -> UIElement:
        """The ui_element numbered ``ref`` on the current screen (ActionNotPossible when absent)."""
        try:
            index = int(ref)
        except (TypeError, ValueError):
            raise ActionNotPossible(f"element {ref!r}: android elements are integer indexes") from None
        elements = ui_elements(self.device.ui_xml())
        if not 0 <= index < len(elements):
            raise ActionNotPossible(f"element index {index} is not on screen (valid: 0..{len(elements) - 1})")
        return elements[index]

    def _element_point(self, ref: str) -> tuple[int, int]:
        cx, cy = self.element(ref).center
        return int(cx), int(cy)

    def _point(self, x: Optional[Number], y: Optional[Number], element: Optional[str]) -> tuple[int, int]:
        if element is not None:
            return self._element_point(element)
        assert x is not None and y is not None
        return self.to_pixels(x, y)

    # -- execution ---------------------------------------------------------------------------------
    def tap_box(self, box: Sequence[Number]) -> ActuationResult:
        """Tap the centre of ``box`` (in ``coords`` units)."""
        x, y = self.box_to_pixels(box)
        self.device.tap(x, y)
        return ActuationResult(A.Tap(x=x, y=y), points=[(x, y)])

    def execute(self, action: A.Action) -> ActuationResult:
        """Carry out ``action``; ActionNotPossible for actions a phone has no meaning for."""
        a, d = action, self.device
        res = ActuationResult(a)
        if isinstance(a, (A.Tap, A.Click)):
            if isinstance(a, A.Click) and a.button != "left":
                raise ActionNotPossible(f"click: a phone has no {a.button} button")
            x, y = self._point(a.x, a.y, getattr(a, "element", None))
            d.tap(x, y)
            res.points.append((x, y))
        elif isinstance(a, A.DoubleClick):
            x, y = self._point(a.x, a.y, a.element)
            d.tap(x, y)
            self.sleep(DOUBLE_TAP_GAP_S)
            d.tap(x, y)
            res.points += [(x, y), (x, y)]
        elif isinstance(a, A.LongPress):
            x, y = self.to_pixels(a.x, a.y)
            d.long_press(x, y, int(a.duration_ms))
            res.points.append((x, y))
        elif isinstance(a, (A.Swipe, A.Drag)):
            x1, y1 = self.to_pixels(a.x1, a.y1)
            x2, y2 = self.to_pixels(a.x2, a.y2)
            d.swipe(x1, y1, x2, y2, int(getattr(a, "duration_ms", 300)))
            res.points += [(x1, y1), (x2, y2)]
        elif isinstance(a, A.Scroll):
            x1, y1, x2, y2 = self._scroll_ends(a)
            d.swipe(x1, y1, x2, y2, SCROLL_MS)
            res.points += [(x1, y1), (x2, y2)]
        elif isinstance(a, A.Type):
            d.input_text(a.text)
            if self.enter_after_type:
                d.enter()
        elif isinstance(a, A.Fill):
            x, y = self._element_point(a.element)
            d.tap(x, y)
            res.points.append((x, y))
            d.shell(["input", "keycombination", "113", "29"])  # Ctrl+A selects the field's text
            d.keyevent("KEYCODE_DEL")
            d.input_text(a.text)
            if self.enter_after_type:
                d.enter()
        elif isinstance(a, A.Back):
            d.back()
        elif isinstance(a, A.Home):
            d.home()
        elif isinstance(a, A.Enter):
            d.enter()
        elif isinstance(a, A.Press):
            key = KEYCODES.get(a.key.strip().lower().replace("_", ""))
            if key is None:
                raise ActionNotPossible(f"press: no Android key for {a.key!r}; known: {', '.join(sorted(KEYCODES))}")
            {"KEYCODE_ENTER": d.enter, "KEYCODE_BACK": d.back, "KEYCODE_HOME": d.home}.get(
                key, lambda: d.keyevent(key))()
        elif isinstance(a, A.Launch):
            d.launch_app(a.app)
        elif isinstance(a, A.Wait):
            self.sleep(float(a.seconds))
        elif isinstance(a, A.Done):
            res.ended, res.answer, res.status = True, a.answer, "complete"
        elif isinstance(a, A.Fail):
            res.ended, res.status = True, "infeasible"
        else:
            raise ActionNotPossible(f"{a.name}: not an action a phone can carry out")
        return res

    def _scroll_ends(self, a: A.Scroll) -> tuple[int, int, int, int]:
        if (a.dx == 0) == (a.dy == 0):
            raise ActionNotPossible(f"scroll: one direction at a time, got dx={a.dx}, dy={a.dy}")
        w, h = self.screen
        if a.x is not None and a.y is not None:  # from the point, finger opposite to the content
            x, y = self.to_pixels(a.x, a.y)
            dx, dy = (self.to_pixels(abs(a.dx), abs(a.dy)) if self.coords == "relative999"
                      else (int(abs(a.dx)), int(abs(a.dy))))
            sx = -1 if a.dx > 0 else (1 if a.dx < 0 else 0)
            sy = -1 if a.dy > 0 else (1 if a.dy < 0 else 0)
            return x, y, max(0, min(w - 1, x + sx * dx)), max(0, min(h - 1, y + sy * dy))
        if a.element is not None:
            b = self.element(a.element).bbox
            x1, y1, x2, y2 = max(b[0], 0), max(b[1], 0), min(b[2], w), min(b[3], h)
        else:
            x1, y1, x2, y2 = 0, 0, w, h
        cx, cy = (x1 + x2) // 2, (y1 + y2) // 2
        if a.dy > 0:
            return cx, cy, cx, y1  # scroll down: finger moves up to the top edge
        if a.dy < 0:
            return cx, cy, cx, y2
        if a.dx > 0:
            return cx, cy, x1, cy  # scroll right: finger moves to the left edge
        return cx, cy, x2, cy


def execute(device: AndroidDevice, action: A.Action, coords: Coords = "absolute", **kwargs: object) -> ActuationResult:
    """One-shot :meth:`Actuator.execute` (reads the screen size when a conversion needs it)."""
    return Actuator(device, coords, **kwargs).execute(action)  # type: ignore[arg-type]
