"""Benchmark action dialects, each registered in :data:`guigym.core.dialect_base.DIALECTS`.

Importing this package registers them all; :func:`guigym.core.dialect.get_dialect` imports it on
the first unknown name, so ``get_dialect("webarena")`` just works. Construct a dialect directly to
pass options (most take ``screen=(width, height)``)::

    from guigym.core.dialect import DIALECTS
    uitars = DIALECTS.get("uitars")(screen=(1920, 1080), coords="absolute")
    uitars.parse("Thought: ...\\nAction: click(point='<point>100 200</point>')")

==============  =================================================================================
name            format
==============  =================================================================================
uitars          UI-TARS 1.0 / 1.5 ``Action: click(start_box=...)`` (computer and mobile)
thought         ``Thought: ...\nAction: <canonical action>`` (reasoning SFT replies, MobileRL sec. 2.1)
computer_13     OSWorld computer_13 JSON dicts
pyautogui       OSWorld pyautogui code, a safe subset read with ``ast``
androidlab      AndroidLab ``do(action="Tap", element=[...])`` / ``finish(message=...)``
androidworld    AndroidWorld JSONAction dicts
webarena        WebArena ``click [12]`` / ``type [12] [text] [1]`` / ``stop [answer]``
browsergym      BrowserGym high-level ``click('12')`` / ``fill('12', 'x')``
webrl           WebRL ``do(action="Click", element="12")`` / ``exit(message=...)``
==============  =================================================================================
"""
from guigym.core.dialects import (  # noqa: F401  (imported to register)
    androidlab, androidworld, browsergym, computer_13, pyautogui, thought, uitars, webarena, webrl,
)
from guigym.core.dialects.androidlab import AndroidLabDialect
from guigym.core.dialects.androidworld import AndroidWorldDialect
from guigym.core.dialects.browsergym import BrowserGymDialect
from guigym.core.dialects.computer_13 import Computer13Dialect
from guigym.core.dialects.pyautogui import PyAutoGUIDialect
from guigym.core.dialects.thought import ThoughtDialect
from guigym.core.dialects.uitars import UITarsDialect, smart_resize
from guigym.core.dialects.webarena import WebArenaDialect
from guigym.core.dialects.webrl import WebRLDialect

__all__ = [
    "AndroidLabDialect", "AndroidWorldDialect", "BrowserGymDialect", "Computer13Dialect", "PyAutoGUIDialect",
    "ThoughtDialect", "UITarsDialect", "WebArenaDialect", "WebRLDialect", "smart_resize",
]
