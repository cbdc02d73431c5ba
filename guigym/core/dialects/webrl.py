"""WebRL's ``do(action=..., argument=..., element=...)`` / ``exit(message=...)`` operations.

Format, as documented by (read for facts, not copied):

* the WebRL policy prompt (THUDM/WebRL training data; quoted in ``LLaMA-Factory/data/web_prompt.py``
  of repositories built on it): ``do(action, argument, element)`` with actions "Click",
  "Right Click", "Type", "Search" ("equivalent to Type plus Enter"), "Hover", "Scroll Up",
  "Scroll Down", "Press Enter", "Switch Tab" (argument: tab number from 0), "Select Dropdown
  Option", "Wait"; ``exit(message)``; ``go_backward()``, ``go_forward()``; examples such as
  ``do(action="Click", element="7")``, ``do(action="Type", argument="01/01/2023", element="22")``,
  lines of ``# Element: ...`` comments before the call.
* THUDM/VisualAgentBench ``VAB-WebArena-Lite/new/actions.py`` (``create_webrl_id_based_action``,
  ``execute_action_webrl``): also ``do(action="Go Backward")`` / ``"Go Forward"``; Type clicks the
  element, selects all, deletes and types; Search does the same then presses Enter; Scroll moves
  2/3 of the viewport height; ``exit(message=...)`` is the stop action with the answer.

Mapping: Click -> Click(element), Right Click -> RightClick(element), Hover -> Hover(element),
Type -> Fill(element, text), Search -> Fill(element, text + "\\n"), Select Dropdown Option ->
Select, Press Enter -> Press("Enter"), Scroll Up/Down -> Scroll(dy=∓scroll_px; 2/3 of the screen
height when ``screen`` is known), Switch Tab -> TabFocus, Go Backward/Forward (or
``go_backward()``/``go_forward()``) -> GoBack/GoForward, Wait -> Wait(), exit -> Done(message)
(an empty message is no answer).
"""
from __future__ import annotations

from typing import Optional, Sequence

from guigym.core import actions as A
from guigym.core.dialect_base import DIALECTS
from guigym.core.dialects._common import (
    DEFAULT_SCROLL_PX, DialectBase, Number, bind, call_or_extract, fenced_blocks, is_number, py_str, tidy,
)
from guigym.core.errors import ConfigError

_ELEMENT_ACTIONS = {"click": A.Click, "right click": A.RightClick, "hover": A.Hover}


def _last_fenced(text: str) -> Optional[str]:
    blocks = fenced_blocks(text)
    return blocks[-1].body if blocks else None


@DIALECTS.register("webrl")
class WebRLDialect(DialectBase):
    """WebRL operations.

    Args:
        screen: (width, height) of the viewport; 2/3 of its height is the default scroll amount.
        scroll_px: pixels one "Scroll Down" moves (default: 2/3 of the viewport height, else 500).
    """

    name = "webrl"

    def __init__(self, screen: Optional[Sequence[int]] = None, scroll_px: Optional[Number] = None) -> None:
        super().__init__(screen)
        if scroll_px is not None and (not is_number(scroll_px) or scroll_px <= 0):
            raise ConfigError(f"webrl: scroll_px must be a positive number, got {scroll_px!r}")
        self.scroll_px = scroll_px if scroll_px is not None else (
            tidy(self.screen[1] * 2 / 3) if self.screen is not None else DEFAULT_SCROLL_PX)

    # ---- parsing ----------------------------------------------------------------------------------
    def parse(self, text: str) -> A.Action:
        self.check_text(text)
        call = call_or_extract(self, text, _last_fenced)
        if call.owner is not None:
            raise self.error(f"unknown operation {call.qualname!r}", text)
        if call.name in ("go_backward", "go_forward"):
            bind(call, [], [], self, text)
            return A.GoBack() if call.name == "go_backward" else A.GoForward()
        if call.name == "exit":
            kw = bind(call, ["message"], [], self, text)
            msg = kw.get("message")
            if msg is not None and not isinstance(msg, str):
                raise self.error(f"exit(): message must be a string, got {msg!r}", text)
            return A.Done(answer=msg or None)
        if call.name != "do":
            raise self.error(f"unknown operation {call.name!r}; expected do(...), exit(...), go_backward() or "
                             f"go_forward()", text)
        kw = bind(call, ["action", "argument", "element"], ["action"], self, text)
        action = kw["action"]
        key = " ".join(action.lower().split()) if isinstance(action, str) else None
        element = kw.get("element")
        if isinstance(element, int) and not isinstance(element, bool):
            element = str(element)
        needs_element = key in _ELEMENT_ACTIONS or key in ("type", "search", "select dropdown option")
        if needs_element and not isinstance(element, str):
            raise self.error(f'{action}: element="<id>" is required', text)
        if key in _ELEMENT_ACTIONS:
            return self.build(_ELEMENT_ACTIONS[key], text, element=element)
        if key in ("type", "search", "select dropdown option"):
            arg = kw.get("argument")
            if not isinstance(arg, str):
                raise self.error(f'{action}: argument="..." is required, got {arg!r}', text)
            if key == "select dropdown option":
                return self.build(A.Select, text, element=element, option=arg)
            return self.build(A.Fill, text, element=element, text=arg + ("\n" if key == "search" else ""))
        if key in ("scroll down", "scroll up"):
            return A.Scroll(dy=self.scroll_px if key == "scroll down" else -self.scroll_px)
        if key == "press enter":
            return A.Press(key="Enter")
        if key == "switch tab":
            arg = kw.get("argument")
            if isinstance(arg, str) and arg.strip().isdigit():
                arg = int(arg.strip())
            if not isinstance(arg, int) or isinstance(arg, bool):
                raise self.error(f"Switch Tab: argument must be a tab number, got {kw.get('argument')!r}", text)
            return self.build(A.TabFocus, text, index=arg)
        if key in ("go backward", "go forward"):
            return A.GoBack() if key == "go backward" else A.GoForward()
        if key == "wait":
            return A.Wait()
        raise self.error(f"unknown action {action!r}; known: Click, Right Click, Type, Search, Hover, Scroll Up, "
                         f"Scroll Down, Press Enter, Switch Tab, Select Dropdown Option, Wait, Go Backward, "
                         f"Go Forward", text)

    # ---- printing ---------------------------------------------------------------------------------
    @staticmethod
    def _do(action: str, argument: Optional[str] = None, element: Optional[str] = None) -> str:
        parts = [f"action={py_str(action)}"]
        if argument is not None:
            parts.append(f"argument={py_str(argument)}")
        if element is not None:
            parts.append(f"element={py_str(element)}")
        return f"do({', '.join(parts)})"

    def format(self, action: A.Action) -> str:
        a = action
        if isinstance(a, (A.Click, A.RightClick, A.Hover)):
            if a.element is None:
                raise self.cannot(a, "webrl acts on element ids, not pixels")
            if isinstance(a, A.Click) and a.button == "middle":
                raise self.error("webrl has no middle-button click")
            name = "Right Click" if isinstance(a, A.RightClick) or getattr(a, "button", "") == "right" else (
                "Click" if isinstance(a, A.Click) else "Hover")
            return self._do(name, element=a.element)
        if isinstance(a, A.Fill):
            if a.text.endswith("\n"):
                return self._do("Search", a.text[:-1], a.element)
            return self._do("Type", a.text, a.element)
        if isinstance(a, A.Select):
            return self._do("Select Dropdown Option", a.option, a.element)
        if isinstance(a, (A.Press, A.Enter)):
            if isinstance(a, A.Press) and a.key.lower() not in ("enter", "return"):
                raise self.error(f"webrl can only press Enter, not {a.key!r}")
            return self._do("Press Enter")
        if isinstance(a, A.Scroll):
            if a.dx != 0 or a.dy == 0 or a.x is not None or a.element is not None:
                raise self.error("webrl only scrolls the whole page up or down")
            return self._do("Scroll Down" if a.dy > 0 else "Scroll Up")
        if isinstance(a, A.TabFocus):
            return self._do("Switch Tab", str(a.index))
        if isinstance(a, A.GoBack):
            return self._do("Go Backward")
        if isinstance(a, A.GoForward):
            return self._do("Go Forward")
        if isinstance(a, A.Wait):
            return self._do("Wait")
        if isinstance(a, A.Done):
            return f"exit(message={py_str(a.answer or '')})"
        raise self.cannot(a)
