"""BrowserGym's high-level action set (``click('12')``, ``fill('12', 'x')``, ...).

Format, as documented by (read for facts, not copied):

* ServiceNow/BrowserGym ``browsergym/core/src/browsergym/core/action/functions.py`` (the
  docstrings of the action functions): ``click(bid, button="left", modifiers=[])``,
  ``dblclick(bid, button, modifiers)``, ``hover(bid)``, ``fill(bid, value,
  enable_autocomplete_menu=False)``, ``select_option(bid, options)``, ``press(bid, key_comb)``,
  ``scroll(delta_x, delta_y)`` (pixels, positive right/down), ``scroll_at(x, y, dx, dy)``,
  ``mouse_move``, ``mouse_click(x, y, button)``, ``mouse_dblclick``, ``mouse_drag_and_drop(from_x,
  from_y, to_x, to_y)``, ``keyboard_press(key)``, ``keyboard_down``, ``keyboard_up``,
  ``keyboard_type(text)``, ``keyboard_insert_text(text)``, ``goto(url)``, ``go_back()``,
  ``go_forward()``, ``new_tab()``, ``tab_close()``, ``tab_focus(index)``,
  ``send_msg_to_user(text)``, ``report_infeasible(reason)``, ``noop(wait_ms=1000)``.
* ``action/parsers.py`` / ``action/highlevel.py``: Python-like calls with literal arguments,
  comments ignored; several calls only when ``multiaction`` is on.

Mapping: click/dblclick/hover/fill/select_option -> Click/DoubleClick/Hover/Fill/Select with
``element``; the mouse_* functions -> the pixel versions and Drag; scroll -> Scroll; scroll_at ->
Scroll at a point; keyboard_press and press -> Press or Hotkey (``+``-joined); keyboard_type and
keyboard_insert_text -> Type; keyboard_down/up -> KeyDown/KeyUp; goto/go_back/go_forward/new_tab/
tab_close/tab_focus -> Goto/GoBack/GoForward/NewTab/CloseTab/TabFocus; send_msg_to_user ->
Done(answer); report_infeasible -> Fail(reason); noop -> Wait. ``press(bid, key)`` loses its bid:
the key goes to whatever has focus. One action per string.
"""
from __future__ import annotations

from typing import Any, Optional

from guigym.core import actions as A
from guigym.core.dialect_base import DIALECTS
from guigym.core.dialects._common import (
    Call, DialectBase, between, bind, call_or_extract, fenced_blocks, is_number, join_combo, parse_combo, py_str,
    split_combo,
)

# function -> (parameters in positional order, required)
_SIGNATURES: dict[str, tuple[list[str], list[str]]] = {
    "click": (["bid", "button", "modifiers"], ["bid"]),
    "dblclick": (["bid", "button", "modifiers"], ["bid"]),
    "hover": (["bid"], ["bid"]),
    "fill": (["bid", "value", "enable_autocomplete_menu"], ["bid", "value"]),
    "select_option": (["bid", "options"], ["bid", "options"]),
    "press": (["bid", "key_comb"], ["bid", "key_comb"]),
    "scroll": (["delta_x", "delta_y"], ["delta_x", "delta_y"]),
    "scroll_at": (["x", "y", "dx", "dy"], ["x", "y", "dx", "dy"]),
    "mouse_move": (["x", "y"], ["x", "y"]),
    "mouse_click": (["x", "y", "button"], ["x", "y"]),
    "mouse_dblclick": (["x", "y", "button"], ["x", "y"]),
    "mouse_drag_and_drop": (["from_x", "from_y", "to_x", "to_y"], ["from_x", "from_y", "to_x", "to_y"]),
    "keyboard_press": (["key"], ["key"]),
    "keyboard_down": (["key"], ["key"]),
    "keyboard_up": (["key"], ["key"]),
    "keyboard_type": (["text"], ["text"]),
    "keyboard_insert_text": (["text"], ["text"]),
    "goto": (["url"], ["url"]),
    "go_back": ([], []),
    "go_forward": ([], []),
    "new_tab": ([], []),
    "tab_close": ([], []),
    "tab_focus": (["index"], ["index"]),
    "send_msg_to_user": (["text"], ["text"]),
    "report_infeasible": (["reason"], ["reason"]),
    "noop": (["wait_ms"], []),
}
_NO_EQUIVALENT = {"check", "uncheck", "focus", "clear", "drag_and_drop", "upload_file", "mouse_down", "mouse_up",
                  "mouse_upload_file"}


@DIALECTS.register("browsergym")
class BrowserGymDialect(DialectBase):
    """BrowserGym high-level actions (bid-based and coordinate-based), one call per string."""

    name = "browsergym"

    # ---- parsing ----------------------------------------------------------------------------------
    @staticmethod
    def _source(text: str) -> Optional[str]:
        """The action inside a model response: ``<action>...</action>`` or the last fenced block."""
        inner = between(text, "<action>", "</action>")
        if inner is not None:
            return inner
        blocks = fenced_blocks(text)
        return blocks[-1].body if blocks else None

    def parse(self, text: str) -> A.Action:
        self.check_text(text)
        call = call_or_extract(self, text, self._source)
        if call.owner is not None or call.name not in _SIGNATURES:
            if call.owner is None and call.name in _NO_EQUIVALENT:
                raise self.error(f"{call.name}() has no typed equivalent in guigym", text)
            raise self.error(f"unknown action {call.qualname!r}; supported: {', '.join(_SIGNATURES)}", text)
        params, required = _SIGNATURES[call.name]
        kw = bind(call, params, required, self, text)
        return self._to_action(call, kw, text)

    def _str(self, kw: dict[str, Any], key: str, call: Call, text: str) -> str:
        value = kw[key]
        if isinstance(value, (int, float)) and not isinstance(value, bool) and key == "bid":
            value = str(value)  # click(12) for click('12')
        if not isinstance(value, str):
            raise self.error(f"{call.name}(): {key} must be a string, got {value!r}", text)
        return value

    def _to_action(self, call: Call, kw: dict[str, Any], text: str) -> A.Action:
        name = call.name
        if name in ("click", "dblclick"):
            if kw.get("modifiers"):
                raise self.error(f"{name}(): modifiers have no typed equivalent", text)
            button = kw.get("button", "left")
            if name == "click":
                return self.build(A.Click, text, element=self._str(kw, "bid", call, text), button=button)
            if button != "left":
                raise self.error("dblclick(): only the left button has a typed equivalent", text)
            return self.build(A.DoubleClick, text, element=self._str(kw, "bid", call, text))
        if name == "hover":
            return self.build(A.Hover, text, element=self._str(kw, "bid", call, text))
        if name == "fill":
            return self.build(A.Fill, text, element=self._str(kw, "bid", call, text), text=kw["value"])
        if name == "select_option":
            options = kw["options"]
            if isinstance(options, (list, tuple)):
                if len(options) != 1:
                    raise self.error("select_option(): selecting several options has no typed equivalent", text)
                options = options[0]
            return self.build(A.Select, text, element=self._str(kw, "bid", call, text), option=options)
        if name in ("press", "keyboard_press"):
            combo = kw["key_comb" if name == "press" else "key"]
            if not isinstance(combo, str) or not combo:
                raise self.error(f"{name}(): key must be a non-empty string, got {combo!r}", text)
            return parse_combo(combo)
        if name == "scroll":
            return self.build(A.Scroll, text, dx=kw["delta_x"], dy=kw["delta_y"])
        if name == "scroll_at":
            return self.build(A.Scroll, text, dx=kw["dx"], dy=kw["dy"], x=kw["x"], y=kw["y"])
        if name in ("mouse_move", "mouse_click", "mouse_dblclick"):
            button = kw.get("button", "left")
            if name == "mouse_click":
                return self.build(A.Click, text, x=kw["x"], y=kw["y"], button=button)
            if button != "left":
                raise self.error(f"{name}(): only the left button has a typed equivalent", text)
            return self.build(A.Hover if name == "mouse_move" else A.DoubleClick, text, x=kw["x"], y=kw["y"])
        if name == "mouse_drag_and_drop":
            return self.build(A.Drag, text, x1=kw["from_x"], y1=kw["from_y"], x2=kw["to_x"], y2=kw["to_y"])
        if name in ("keyboard_down", "keyboard_up"):
            return self.build(A.KeyDown if name == "keyboard_down" else A.KeyUp, text, key=kw["key"])
        if name in ("keyboard_type", "keyboard_insert_text"):
            return self.build(A.Type, text, text=kw["text"])
        if name == "goto":
            return self.build(A.Goto, text, url=kw["url"])
        if name == "tab_focus":
            return self.build(A.TabFocus, text, index=kw["index"])
        if name == "send_msg_to_user":
            return self.build(A.Done, text, answer=kw["text"] or None)
        if name == "report_infeasible":
            return self.build(A.Fail, text, reason=kw["reason"] or None)
        if name == "noop":
            ms = kw.get("wait_ms", 1000)
            if not is_number(ms):
                raise self.error(f"noop(): wait_ms must be a number, got {ms!r}", text)
            return self.build(A.Wait, text, seconds=ms / 1000)
        bare = {"go_back": A.GoBack, "go_forward": A.GoForward, "new_tab": A.NewTab, "tab_close": A.CloseTab}
        return bare[name]()

    # ---- printing ---------------------------------------------------------------------------------
    def format(self, action: A.Action) -> str:
        a = action
        if isinstance(a, (A.Click, A.DoubleClick, A.Hover)):
            button = getattr(a, "button", "left")
            extra = "" if button == "left" else f", button=\"{button}\""
            if a.element is not None:
                fn = {A.Click: "click", A.DoubleClick: "dblclick", A.Hover: "hover"}[type(a)]
                return f"{fn}({py_str(a.element)}{extra})"
            fn = {A.Click: "mouse_click", A.DoubleClick: "mouse_dblclick", A.Hover: "mouse_move"}[type(a)]
            return f"{fn}({a.x!r}, {a.y!r}{extra})"
        if isinstance(a, A.RightClick):
            if a.element is not None:
                return f"click({py_str(a.element)}, button=\"right\")"
            return f"mouse_click({a.x!r}, {a.y!r}, button=\"right\")"
        if isinstance(a, A.Drag):
            return f"mouse_drag_and_drop({a.x1!r}, {a.y1!r}, {a.x2!r}, {a.y2!r})"
        if isinstance(a, A.Scroll):
            if a.element is not None:
                raise self.error("browsergym scrolls at the pointer or at a point, not at an element id")
            if a.x is None:
                return f"scroll({a.dx!r}, {a.dy!r})"
            return f"scroll_at({a.x!r}, {a.y!r}, {a.dx!r}, {a.dy!r})"
        if isinstance(a, A.Fill):
            return f"fill({py_str(a.element)}, {py_str(a.text)})"
        if isinstance(a, A.Select):
            return f"select_option({py_str(a.element)}, {py_str(a.option)})"
        if isinstance(a, A.Type):
            return f"keyboard_type({py_str(a.text)})"
        if isinstance(a, A.Press):
            if split_combo(a.key) is not None:
                raise self.error(f"cannot write key {py_str(a.key)}: '+' joins keys in browsergym")
            return f"keyboard_press({py_str(a.key)})"
        if isinstance(a, A.Hotkey):
            return f"keyboard_press({py_str(join_combo(a.keys, self))})"
        if isinstance(a, (A.KeyDown, A.KeyUp)):
            return f"keyboard_{'down' if isinstance(a, A.KeyDown) else 'up'}({py_str(a.key)})"
        if isinstance(a, A.Goto):
            return f"goto({py_str(a.url)})"
        if isinstance(a, A.TabFocus):
            return f"tab_focus({a.index!r})"
        bare = {A.GoBack: "go_back", A.GoForward: "go_forward", A.NewTab: "new_tab", A.CloseTab: "tab_close"}
        if type(a) in bare:
            return f"{bare[type(a)]}()"
        if isinstance(a, A.Done):
            return f"send_msg_to_user({py_str(a.answer or '')})"
        if isinstance(a, A.Fail):
            return f"report_infeasible({py_str(a.reason or '')})"
        if isinstance(a, A.Wait):
            if a.seconds == 1:
                return "noop()"
            ms = round(a.seconds * 1000, 6)
            return f"noop({int(ms) if float(ms).is_integer() else ms!r})"
        raise self.cannot(a)
