"""Reference solutions of the embedded suite, played as an agent that only reads observations.

A task's ``guigym_reference`` key (a guigym extension of OSWorld's task JSON; OSWorld ignores
unknown keys) is a list of steps:

* a string: one canonical action, sent as is (``'type(text="ls")'``, ``'hotkey(keys=["ctrl", "s"])'``);
* ``{"find": QUERY, "then": "click" | "double_click" | "right_click" | "hover", "timeout": s}``:
  locate the element in the observation's a11y tree and act at the centre of its box;
  With ``"until": QUERY`` (and ``"max": n``, default 10) the element is clicked again, one click
  per step, until ``QUERY`` matches (e.g. Mousepad's "Replace All" replaces one match per click
  and shows how many remain);
* ``{"wait_for": QUERY, "timeout": s}`` / ``{"wait_gone": QUERY, "timeout": s}``: wait until an
  element appears / disappears;
* ``{"wait_screen": {"stable_s": s, "unchanged_s": u}, "timeout": s}``: wait until the screenshot
  differs from the episode's first one and has then not changed for ``stable_s`` seconds (for
  apps whose a11y tree says nothing of their progress, e.g. VLC's Qt dialogs here, or says it
  too early: LibreOffice's document node appears before the document takes keys). Prefer
  ``wait_for`` on what the app shows (a dialog, a status-bar message, a window title): it ends
  as soon as the app is ready and does not pass early on a loaded machine, as a fixed
  ``wait(seconds=...)`` can. With ``unchanged_s``, a screen that has not changed at all for ``u`` seconds since
  the first observation counts as settled too: the app was already drawn when the episode began
  (whether it is depends on how fast the reset was).

``QUERY``: ``role`` (AT-SPI role name; ``push button`` and ``push-button`` are the same),
optional ``name`` (the accessible name, compared after stripping blanks; Mousepad pads menu
names), ``text`` (the element's text content), ``within`` (another QUERY the element must be
inside) and ``index`` (which of several matches, in document order; default 0). Only elements
with a box on screen count (AT-SPI reports hidden menu items at -2^31).

While it waits, the agent emits ``wait(seconds=poll_s)``, so waiting costs steps (the env's
step budget bounds it) and a query that never matches makes the agent ``fail()`` with the
reason in :attr:`ReferenceAgent.error`.
"""
from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from guigym.core import actions as A
from guigym.core.dialect import format_action, parse_action
from guigym.core.errors import TaskSpecError

_THEN = {"click": A.Click, "double_click": A.DoubleClick, "right_click": A.RightClick, "hover": A.Hover}
_QUERY_KEYS = {"role", "name", "text", "within", "index"}
_KINDS = ("find", "wait_for", "wait_gone", "wait_screen")


@dataclass(frozen=True)
class Element:
    """One a11y node: role (normalised), name, text and box (x, y, w, h) in screen pixels."""

    role: str
    name: str
    text: str
    box: Optional[tuple[int, int, int, int]]
    visible: bool = False

    @property
    def center(self) -> tuple[int, int]:
        assert self.box is not None
        x, y, w, h = self.box
        return x + w // 2, y + h // 2


def _norm_role(role: str) -> str:
    return role.strip().lower().replace(" ", "-").replace("_", "-")


def _local(key: str) -> str:
    return key.rsplit("}", 1)[-1] if key.startswith("{") else key.split(":")[-1]


def _pair(value: Optional[str]) -> Optional[tuple[int, int]]:
    if not value:
        return None
    try:
        a, b = value.strip().strip("()[]").split(",")[:2]
        return int(float(a)), int(float(b))
    except ValueError:
        return None


def _box(attrs: Mapping[str, str]) -> Optional[tuple[int, int, int, int]]:
    """Box from OSWorld's ``cp:screencoord`` + ``cp:size``, or a ``bbox="x,y,w,h"``."""
    if "bbox" in attrs:
        parts = attrs["bbox"].split(",")
        if len(parts) == 4:
            try:
                x, y, w, h = (int(float(p)) for p in parts)
                return x, y, w, h
            except ValueError:
                return None
    pos, size = _pair(attrs.get("screencoord")), _pair(attrs.get("size"))
    if pos is None or size is None:
        return None
    return pos[0], pos[1], size[0], size[1]


def _visible(box: Optional[tuple[int, int, int, int]]) -> bool:
    return box is not None and box[0] >= 0 and box[1] >= 0 and box[2] > 0 and box[3] > 0


def parse_tree(xml: str) -> Optional[ET.Element]:
    """The a11y XML as an ElementTree root, or None when it does not parse (e.g. empty)."""
    if not xml or not xml.strip():
        return None
    try:
        return ET.fromstring(xml)
    except ET.ParseError:
        return None


def _element(node: ET.Element) -> Element:
    attrs = {_local(k): v for k, v in node.attrib.items()}
    box = _box(attrs)
    # OSWorld's tree gives a box only to visible+showing nodes; some widgets (PCManFM's icons
    # after a refresh) are visible but lose "showing", so presence also counts st:visible
    visible = _visible(box) or attrs.get("visible") == "true"
    return Element(role=_norm_role(_local(node.tag)), name=(attrs.get("name") or "").strip(),
                   text=(node.text or "").strip(), box=box, visible=visible)


def check_query(query: Any, where: str = "query") -> None:
    """Raise TaskSpecError naming the field when ``query`` is not a valid QUERY."""
    if not isinstance(query, Mapping) or not isinstance(query.get("role"), str):
        raise TaskSpecError(f"{where}: must be an object with a string 'role', got {query!r}")
    unknown = set(query) - _QUERY_KEYS
    if unknown:
        raise TaskSpecError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(_QUERY_KEYS)}")
    if "within" in query:
        check_query(query["within"], f"{where}.within")
    if not isinstance(query.get("index", 0), int) or query.get("index", 0) < 0:
        raise TaskSpecError(f"{where}.index: must be a non-negative integer, got {query.get('index')!r}")


def _matches(node: ET.Element, query: Mapping[str, Any], clickable: bool) -> bool:
    el = _element(node)
    if el.role != _norm_role(query["role"]) or not (_visible(el.box) if clickable else el.visible):
        return False
    if "name" in query and el.name != str(query["name"]).strip():
        return False
    if "text" in query and el.text != str(query["text"]).strip():
        return False
    return True


def _search(root: ET.Element, query: Mapping[str, Any], clickable: bool) -> list[ET.Element]:
    scopes = [root]
    if "within" in query:
        scopes = _search(root, query["within"], False)
    seen: set[int] = set()
    out: list[ET.Element] = []
    for scope in scopes:
        for node in scope.iter():
            if node is not scope and id(node) not in seen and _matches(node, query, clickable):
                seen.add(id(node))
                out.append(node)
    return out


def find_element(xml: str, query: Mapping[str, Any], clickable: bool = True) -> Optional[Element]:
    """The ``query["index"]``-th element matching ``query`` in the a11y XML, or None.

    ``clickable``: only elements with a box on screen count (for clicks); otherwise elements
    that are visible (a box, or ``st:visible="true"``) count too (for waits).
    """
    root = parse_tree(xml)
    if root is None:
        return None
    hits = _search(root, query, clickable)
    index = int(query.get("index", 0))
    return _element(hits[index]) if index < len(hits) else None


def check_reference(steps: Any, where: str) -> None:
    """Validate a ``guigym_reference`` list; TaskSpecError names the step."""
    if not isinstance(steps, list) or not steps:
        raise TaskSpecError(f"{where}: must be a non-empty list of steps")
    for i, step in enumerate(steps):
        at = f"{where}[{i}]"
        if isinstance(step, str):
            try:
                parse_action(step)
            except ValueError as e:
                raise TaskSpecError(f"{at}: not a canonical action: {e}") from None
            continue
        if not isinstance(step, Mapping):
            raise TaskSpecError(f"{at}: must be an action string or an object, got {type(step).__name__}")
        kinds = [k for k in _KINDS if k in step]
        if len(kinds) != 1:
            raise TaskSpecError(f"{at}: needs exactly one of {' / '.join(_KINDS)}")
        if kinds[0] == "wait_screen":
            spec = step["wait_screen"]
            if not isinstance(spec, Mapping) or set(spec) - {"stable_s", "unchanged_s"} or any(
                    not isinstance(spec.get(k, 1.0), (int, float)) or spec.get(k, 1.0) <= 0
                    for k in ("stable_s", "unchanged_s")):
                raise TaskSpecError(f"{at}.wait_screen: must be {{'stable_s': seconds > 0, optional "
                                    f"'unchanged_s': seconds > 0}}, got {spec!r}")
            continue
        check_query(step[kinds[0]], f"{at}.{kinds[0]}")
        if "until" in step:
            if kinds[0] != "find":
                raise TaskSpecError(f"{at}.until: only a find step can repeat")
            check_query(step["until"], f"{at}.until")
        if kinds[0] == "find" and step.get("then", "click") not in _THEN:
            raise TaskSpecError(f"{at}.then: must be one of {sorted(_THEN)}, got {step.get('then')!r}")


class ReferenceAgent:
    """Plays a task's reference solution from observations (Agent protocol: reset / act).

    Args:
        steps: the task's ``guigym_reference`` list.
        poll_s: seconds each ``wait`` lasts while a query is not yet satisfied.
        clock: time source (tests).
    """

    name = "reference"

    def __init__(self, steps: Sequence[Any], poll_s: float = 0.2, clock: Any = time.monotonic) -> None:
        check_reference(list(steps), "guigym_reference")
        self.steps = list(steps)
        self.poll_s = poll_s
        self.clock = clock
        self.reset({})

    def reset(self, task_info: Mapping[str, Any]) -> None:
        self.i = 0
        self.clicks = 0
        self.first_screen: Optional[bytes] = None
        self.first_at = 0.0
        self.last_screen: Optional[bytes] = None
        self.changed_at = 0.0
        self.deadline: Optional[float] = None
        self.error: Optional[str] = None

    def needs_a11y(self) -> bool:
        """Whether the next :meth:`act` reads the a11y tree (a harness may skip collecting it
        otherwise: ``OSWorldEnv.observe_a11y``)."""
        return self.i < len(self.steps) and isinstance(self.steps[self.i], Mapping) \
            and "wait_screen" not in self.steps[self.i]

    def _watch_screen(self, obs: Mapping[str, Any]) -> None:
        shot = obs.get("screenshot")
        if shot is None:
            return
        key = bytes(memoryview(shot[::4, ::4]).tobytes()) if hasattr(shot, "shape") else bytes(shot)
        if self.first_screen is None:
            self.first_screen, self.first_at = key, self.clock()
        if key != self.last_screen:
            self.last_screen, self.changed_at = key, self.clock()

    def _wait_screen(self, step: Mapping[str, Any], obs: Mapping[str, Any]) -> str:
        now = self.clock()
        spec = step["wait_screen"]
        stable_s = float(spec.get("stable_s", 1.0))
        settled = self.last_screen is not None and self.last_screen != self.first_screen \
            and now - self.changed_at >= stable_s
        drawn_from_start = "unchanged_s" in spec and self.last_screen is not None \
            and self.last_screen == self.first_screen and now - self.first_at >= float(spec["unchanged_s"])
        if settled or drawn_from_start:
            self.i, self.deadline = self.i + 1, None
            return self.act(obs)
        if self.deadline is None:
            self.deadline = now + float(step.get("timeout", 60))
        if now > self.deadline:
            return self._give_up(f"step {self.i} (wait_screen) the screen did not settle within "
                                 f"{step.get('timeout', 60)} s")
        return self._wait()

    def _wait(self) -> str:
        return format_action(A.Wait(seconds=self.poll_s))

    def _give_up(self, why: str) -> str:
        self.error = why
        self.i = len(self.steps)
        return format_action(A.Fail(reason=why))

    def act(self, obs: Mapping[str, Any]) -> str:
        """The next canonical action for observation ``obs`` (needs ``obs["a11y"]``)."""
        self._watch_screen(obs)
        if self.i >= len(self.steps):
            return format_action(A.Done())
        step = self.steps[self.i]
        if isinstance(step, str):
            self.i += 1
            return step
        if self.clicks and "until" in step:  # a repeated find: done once "until" shows up
            if find_element(str(obs.get("a11y", "")), step["until"], clickable=False) is not None:
                self.i, self.clicks, self.deadline = self.i + 1, 0, None
                return self.act(obs)
            if self.clicks >= int(step.get("max", 10)):
                return self._give_up(f"step {self.i}: {dict(step['until'])} not reached after {self.clicks} clicks")
        kind = next(k for k in _KINDS if k in step)
        if kind == "wait_screen":
            return self._wait_screen(step, obs)
        query = step[kind]
        el = find_element(str(obs.get("a11y", "")), query, clickable=(kind == "find"))
        satisfied = (el is None) if kind == "wait_gone" else (el is not None)
        if not satisfied:
            now = self.clock()
            if self.deadline is None:
                self.deadline = now + float(step.get("timeout", 15))
            if now > self.deadline:
                return self._give_up(f"step {self.i} ({kind} {dict(query)}) not satisfied within "
                                     f"{step.get('timeout', 15)} s")
            return self._wait()
        self.deadline = None
        if kind != "find":
            self.i += 1
            return self.act(obs)  # a satisfied wait costs no step
        if "until" in step:
            self.clicks += 1
        else:
            self.i += 1
        x, y = el.center  # type: ignore[union-attr]
        return format_action(_THEN[step.get("then", "click")](x=x, y=y))
