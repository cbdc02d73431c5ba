"""Constrained-decoding candidates for Android: MobileRL's action space over its simplified XML.

MobileRL (Xu et al. 2025, "MobileRL", sec. 3.1 and appendix C) shows the agent the simplified XML
of the screen (one line per kept node, ``Class;actions statuses;text;[x1,y1][x2,y2]``, indented
by depth: :func:`guigym.envs.android.observation.simplify`) and takes AndroidLab's operations
(``do(action="Tap", element=[x1, y1, x2, y2])``, ``do(action="Back")``, ``finish(message=...)``:
the ``androidlab`` dialect). :func:`candidates_from_mobilerl` turns one such observation into the
complete replies a constrained policy may give: a Tap on the box of every node whose action words
include ``click`` (the box exactly as the observation writes it, so pixel and 0-999 "v4" bounds
both work), then the argument-free system operations. Operations that take free text (Type,
Launch, a finish message) or a chosen direction (Swipe) have no finite candidate set and are left
out, as web candidates leave out ``fill``.
"""
from __future__ import annotations

import re
from typing import Sequence

#: one simplified-XML line: indent, class, action words and statuses, text (may hold ';'), bounds
_LINE_RE = re.compile(r"^\s*([^;]*);([^;]*);(.*);\[(-?\d+),(-?\d+)\]\[(-?\d+),(-?\d+)\]\s*$")

#: argument-free operations offered on every screen (AndroidLab dialect), in this order
SYSTEM_OPERATIONS = ('do(action="Back")', 'do(action="Home")', "finish()")


def candidates_from_mobilerl(a11y: str, system: Sequence[str] = SYSTEM_OPERATIONS) -> list[str]:
    """AndroidLab-dialect replies for a MobileRL simplified-XML observation.

    Args:
        a11y: the env's ``a11y`` text (``xml_format`` ``"mobilerl"`` or ``"mobilerl-v4"``; the v4
            header line and lines without bounds are skipped).
        system: operations offered on every screen (default :data:`SYSTEM_OPERATIONS`).
    Returns:
        ``['do(action="Tap", element=[x1, y1, x2, y2])', ...]`` for each clickable node in line
        order (one per distinct box), then ``system``; never empty when ``system`` is not.
    """
    out: list[str] = []
    for line in a11y.splitlines():
        if line.lstrip().startswith("#"):
            continue
        m = _LINE_RE.match(line)
        if m is None or "click" not in m.group(2).split():
            continue
        x1, y1, x2, y2 = (int(v) for v in m.groups()[3:])
        if x2 <= x1 or y2 <= y1:
            continue
        out.append(f'do(action="Tap", element=[{x1}, {y1}, {x2}, {y2}])')
    return list(dict.fromkeys(out + list(system)))
