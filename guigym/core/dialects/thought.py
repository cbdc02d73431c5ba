"""``Thought: <reasoning>\\nAction: <canonical action>``: a reasoning reply around a canonical action.

The reply format of a policy trained by reasoning SFT (MobileRL, Xu et al. 2025, sec. 2.1
"Reasoning SFT": reasoning-augmented pairs (x, c, a*) whose reply is the reasoning c followed by
the expert action a*), written by ``guigym.train`` as ``sft.reply_template`` (default shape
``Thought: $reasoning\\nAction: $action``) with guigym's canonical action syntax, so the RL stage
that follows can act on the same replies: ``gym.make(..., dialect="thought")``.

Parsing: the text after the *last* line starting with ``Action:`` is one canonical call
(:class:`~guigym.core.dialect.CanonicalDialect`); the reasoning before it is ignored, whatever it
says (an ``Action:`` inside the reasoning is superseded by the final one). A reply without an
``Action:`` line is parsed whole as a canonical action, so a reasoning-free reply (the previous
SFT stage's) still acts. Nothing is executed: the canonical dialect reads the call with ``ast``
and literal arguments only.

Formatting prints ``Action: <canonical>`` (a typed action has no reasoning to print).

Differs from ``uitars``: UI-TARS replies use UI-TARS verbs and point/box arguments
(``click(start_box=...)``), which cannot name an a11y element id; this dialect takes every
canonical action, element ids included (``click(element="12")``).
"""
from __future__ import annotations

import re

from guigym.core import actions as A
from guigym.core.dialect_base import CANONICAL, DIALECTS
from guigym.core.dialects._common import DialectBase
from guigym.core.errors import ActionParseError

_ACTION_LINE = re.compile(r"(?:^|\n)[ \t]*Action[ \t]*:[ \t]*")


@DIALECTS.register("thought")
class ThoughtDialect(DialectBase):
    """``Thought: ...\\nAction: <canonical call>`` (or a bare canonical call)."""

    name = "thought"

    def action_source(self, text: str) -> str:
        """The text after the last ``Action:`` line (the whole text when there is none)."""
        last = None
        for last in _ACTION_LINE.finditer(text):
            pass
        return text[last.end():].strip() if last is not None else text.strip()

    def parse(self, text: str) -> A.Action:
        self.check_text(text)
        src = self.action_source(text)
        try:
            return CANONICAL.parse(src)
        except ActionParseError as exc:
            raise self.error(str(exc), text) from None

    def format(self, action: A.Action) -> str:
        return "Action: " + CANONICAL.format(action)
