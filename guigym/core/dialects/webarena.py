"""WebArena's id-based actions (``click [12]``, ``type [12] [text] [1]``, ``stop [answer]``, ...).

Format, as documented by (read for facts, not copied):

* web-arena-x/webarena ``agent/prompts/raw/p_cot_id_actree_2s.py``: ``click [id]``,
  ``type [id] [content] [press_enter_after=0|1]`` (Enter is pressed unless the flag is 0),
  ``hover [id]``, ``press [key_comb]`` (e.g. Ctrl+v), ``scroll [direction=down|up]``, ``new_tab``,
  ``tab_focus [tab_index]``, ``close_tab``, ``goto [url]``, ``go_back``, ``go_forward``,
  ``stop [answer]`` ("N/A" when the task is impossible); the answer ends with "In summary, the next
  action I will perform is ```click [1234]```".
* ``agent/prompts/prompt_constructor.py`` (``_extract_action``): the action is the first text
  between the action splitters (```).
* ``browser_env/actions.py`` (``create_id_based_action``): a missing enter flag means ``[1]``,
  which appends "\\n" to the text; ``scroll`` moves one window height (``execute_scroll``).

Mapping: click -> Click(element), hover -> Hover(element), type -> Fill(element, text + "\\n" when
the flag is 1), press -> Press or Hotkey (``+``-joined keys), scroll -> Scroll(dy=±scroll_px; the
screen height when ``screen`` is known), goto -> Goto, go_back/go_forward -> GoBack/GoForward,
new_tab -> NewTab, tab_focus -> TabFocus, close_tab -> CloseTab, stop -> Done(answer) (an empty
answer is no answer). ``format`` prints Fail as ``stop [N/A]``. WebArena's type does not clear the
field first; guigym's Fill does.
"""
from __future__ import annotations

import re
from typing import Optional, Sequence

from guigym.core import actions as A
from guigym.core.dialect_base import DIALECTS, MAX_ACTION_CHARS
from guigym.core.dialects._common import (
    DEFAULT_SCROLL_PX, DialectBase, Number, is_number, join_combo, parse_combo,
)
from guigym.core.errors import ConfigError

SUMMARY_PHRASE = "the next action I will perform is"
_FENCE = re.compile(r"```(.*?)```", re.S)
_ID = r"([^\[\]\s]+)"
_PATTERNS = {
    "click": re.compile(rf"click\s*\[{_ID}\]"),
    "hover": re.compile(rf"hover\s*\[{_ID}\]"),
    "type": re.compile(rf"type\s*\[{_ID}\]\s*\[(.*)\]\s*\[([01])\]", re.S),
    "type_default": re.compile(rf"type\s*\[{_ID}\]\s*\[(.*)\]", re.S),
    "press": re.compile(r"press\s*\[(.+)\]", re.S),
    "scroll": re.compile(r"scroll\s*\[?\s*(?:direction\s*=\s*)?(up|down)\s*\]?"),
    "goto": re.compile(r"goto\s*\[(.+)\]", re.S),
    "tab_focus": re.compile(r"tab_focus\s*\[(\d+)\]"),
    "stop": re.compile(r"stop\s*(?:\[(.*)\])?", re.S),
}
_BARE = {"new_tab": A.NewTab, "go_back": A.GoBack, "go_forward": A.GoForward, "close_tab": A.CloseTab}


@DIALECTS.register("webarena")
class WebArenaDialect(DialectBase):
    """WebArena id-based action strings.

    Args:
        screen: (width, height) of the viewport; its height is the default scroll amount.
        scroll_px: pixels one ``scroll [down]`` moves (default: the viewport height, else 500).
    """

    name = "webarena"

    def __init__(self, screen: Optional[Sequence[int]] = None, scroll_px: Optional[Number] = None) -> None:
        super().__init__(screen)
        if scroll_px is not None and (not is_number(scroll_px) or scroll_px <= 0):
            raise ConfigError(f"webarena: scroll_px must be a positive number, got {scroll_px!r}")
        self.scroll_px = scroll_px if scroll_px is not None else (
            self.screen[1] if self.screen is not None else DEFAULT_SCROLL_PX)

    # ---- parsing ----------------------------------------------------------------------------------
    @staticmethod
    def _source(text: str) -> str:
        """The fenced action after the summary phrase, else the first fenced one, else the text."""
        i = text.find(SUMMARY_PHRASE)
        for start in ([i] if i >= 0 else []) + [0]:
            m = _FENCE.search(text, start)
            if m:
                return m.group(1).strip()
        return text.strip()

    def parse(self, text: str) -> A.Action:
        self.check_text(text)
        src = self._source(text)
        if len(src) > MAX_ACTION_CHARS:
            raise self.error(f"action is {len(src)} characters long; the limit is {MAX_ACTION_CHARS}", text[:200])
        head = src.split("[", 1)[0].split()
        verb = head[0] if head else ""
        if verb in _BARE:
            if src != verb:
                raise self.error(f"{verb} takes no arguments, got {src[:120]!r}", text)
            return _BARE[verb]()
        if verb == "type":
            m = _PATTERNS["type"].fullmatch(src)
            if m:
                element, content, flag = m.groups()
            else:
                m = _PATTERNS["type_default"].fullmatch(src)
                if not m:
                    raise self.error("expected type [id] [content] [press_enter_after=0|1]", text)
                (element, content), flag = m.groups(), "1"
            return self.build(A.Fill, text, element=element, text=content + ("\n" if flag == "1" else ""))
        pattern = _PATTERNS.get(verb) if verb != "type_default" else None
        if pattern is None:
            known = "click, type, hover, press, scroll, new_tab, tab_focus, close_tab, goto, go_back, go_forward, stop"
            raise self.error(f"unknown action {verb or src[:40]!r}; known: {known}", text)
        m = pattern.fullmatch(src)
        if not m:
            usage = {"click": "click [id]", "hover": "hover [id]", "press": "press [key_comb]",
                     "scroll": "scroll [down] or scroll [up]", "goto": "goto [url]",
                     "tab_focus": "tab_focus [tab_index]", "stop": "stop [answer]"}[verb]
            raise self.error(f"expected {usage}, got {src[:120]!r}", text)
        arg = m.group(1)
        if verb in ("click", "hover"):
            return self.build(A.Click if verb == "click" else A.Hover, text, element=arg)
        if verb == "press":
            return parse_combo(arg)
        if verb == "scroll":
            return self.build(A.Scroll, text, dy=self.scroll_px if arg == "down" else -self.scroll_px)
        if verb == "goto":
            return self.build(A.Goto, text, url=arg)
        if verb == "tab_focus":
            return self.build(A.TabFocus, text, index=int(arg))
        return A.Done(answer=arg or None)  # stop

    # ---- printing ---------------------------------------------------------------------------------
    def _element(self, element: Optional[str], action: A.Action) -> str:
        if element is None:
            raise self.cannot(action, "webarena acts on element ids, not pixels")
        if not re.fullmatch(_ID, element):
            raise self.error(f"cannot write element id {element!r} in brackets")
        return element

    def format(self, action: A.Action) -> str:
        text = self._format(action)
        if "```" in text:
            raise self.error("cannot write ``` inside an action: webarena reads the action between ``` fences")
        return text

    def _format(self, action: A.Action) -> str:
        a = action
        if isinstance(a, A.Click):
            if a.button != "left":
                raise self.error(f"webarena has no {a.button}-button click")
            return f"click [{self._element(a.element, a)}]"
        if isinstance(a, A.Hover):
            return f"hover [{self._element(a.element, a)}]"
        if isinstance(a, A.Fill):
            content, flag = (a.text[:-1], 1) if a.text.endswith("\n") else (a.text, 0)
            if "\n" in content:
                raise self.error("webarena's type cannot hold a line break inside the text")
            return f"type [{self._element(a.element, a)}] [{content}] [{flag}]"
        if isinstance(a, (A.Press, A.Hotkey)):
            combo = a.key if isinstance(a, A.Press) else join_combo(a.keys, self)
            if "\n" in combo:
                raise self.error(f"cannot write key {combo!r}")
            if isinstance(a, A.Press) and parse_combo(combo) != a:
                raise self.error(f"cannot write key {a.key!r}: '+' joins keys in webarena")
            return f"press [{combo}]"
        if isinstance(a, A.Scroll):
            if a.dx != 0 or a.dy == 0 or a.x is not None or a.element is not None:
                raise self.error("webarena only scrolls the whole page up or down")
            return f"scroll [{'down' if a.dy > 0 else 'up'}]"
        if isinstance(a, A.Goto):
            if not a.url or "\n" in a.url:
                raise self.error(f"cannot write url {a.url!r}")
            return f"goto [{a.url}]"
        if isinstance(a, A.TabFocus):
            if a.index < 0:
                raise self.error(f"tab index must be >= 0, got {a.index}")
            return f"tab_focus [{a.index}]"
        for verb, cls in _BARE.items():
            if type(a) is cls:
                return verb
        if isinstance(a, A.Done):
            return f"stop [{a.answer or ''}]"
        if isinstance(a, A.Fail):
            return "stop [N/A]"
        raise self.cannot(a)
