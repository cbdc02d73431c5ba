"""Which on-screen cells of a big AT-SPI table have ink, from the screen's pixels.

A spreadsheet shows ~1000 cells, nearly all empty; asking the application about each costs
several D-Bus round trips (LibreOffice Calc: ~13 calls a cell, seconds for a screen). The a11y
walker instead reads the grid's geometry (one cell per row and per column), grabs the table's
screen once and asks only about cells whose inside (without the grid lines) holds more than one
colour: text, the cell cursor, a border, a chart over the cells. A cell that looks blank (no
content, or content drawn in its own background colour) is left out of the tree.

LibreOffice's extents are off the screen's: relative to its top-level window's frame rather than
its client area (the title bar under a reparenting window manager such as openbox; measured
here: 25 px down for Calc's cells with a 19 px title bar). The grab is lined up with the grid by
:func:`grid_shift`: starting from :func:`client_offset` (what the X server says the title bar
moves the client by) it picks the shift that puts the most predicted cell borders, and the
grid's edge, on horizontal/vertical lines of the image (the grid lines, the headers' border).
"""
from __future__ import annotations

import threading
from typing import Any, Optional, Sequence

#: (x, width) of each column or (y, height) of each row, screen pixels
Span = tuple[int, int]

#: pixels of each predicted grid line that grid_shift looks at
LINE_SAMPLE = 400

_lock = threading.Lock()
_xd: Any = None


def inked_cells(img: Any, left: int, top: int, cols: Sequence[Span], rows: Sequence[Span]) -> set[tuple[int, int]]:
    """``{(row_i, col_i)}`` of the grid cells whose box (inset by one pixel, so without its grid
    lines; clipped to ``img``) holds more than one colour. ``img`` is a PIL image of the screen
    area whose top-left pixel is at screen ``(left, top)``; indices are positions in
    ``rows``/``cols``. Zero-size spans (hidden rows/columns) and boxes outside the image are
    skipped."""
    w, h = img.size
    out: set[tuple[int, int]] = set()
    for j, (ry, rh) in enumerate(rows):
        y0, y1 = max(ry + 1 - top, 0), min(ry + rh - 1 - top, h)
        if y1 <= y0:
            continue
        for i, (cx, cw) in enumerate(cols):
            x0, x1 = max(cx + 1 - left, 0), min(cx + cw - 1 - left, w)
            if x1 <= x0:
                continue
            # getcolors(n) is None when the box has more than n distinct colours
            if img.crop((x0, y0, x1, y1)).getcolors(1) is None:
                out.add((j, i))
    return out


def grab() -> Any:
    """PIL RGB image of the whole screen of ``$DISPLAY``."""
    from PIL import ImageGrab  # noqa: PLC0415  (the server's dependency)

    return ImageGrab.grab().convert("RGB")


def _dominant(img: Any, box: tuple[int, int, int, int]) -> tuple[Any, float]:
    """(most frequent colour, its share) of ``img`` inside ``box``; (None, 0) for an empty box."""
    x0, y0, x1, y1 = box
    if x1 <= x0 or y1 <= y0:
        return None, 0.0
    colours = img.crop(box).getcolors((x1 - x0) * (y1 - y0))
    n, colour = max(colours, key=lambda t: t[0])
    return colour, n / ((x1 - x0) * (y1 - y0))


def _line_score(img: Any, positions: Sequence[int], lo: int, hi: int, vertical: bool,
                memo: dict[int, tuple[Any, float]]) -> int:
    """How many of ``positions`` (image rows, or columns when ``vertical``) are a one-pixel line
    across ``[lo, hi)``: one colour over most of it, not the colour of either neighbour.
    ``memo`` caches each row's/column's dominant colour between calls with the same axis."""
    w, h = img.size

    def dom(p: int) -> tuple[Any, float]:
        if p not in memo:
            memo[p] = _dominant(img, (p, lo, p + 1, hi) if vertical else (lo, p, hi, p + 1))
        return memo[p]

    score = 0
    for p in positions:
        if p < 1 or p >= (w if vertical else h) - 1:
            continue
        colour, share = dom(p)
        if colour is not None and share >= 0.6 and dom(p - 1)[0] != colour and dom(p + 1)[0] != colour:
            score += 1
    return score


def grid_shift(img: Any, cols: Sequence[Span], rows: Sequence[Span], prior: tuple[int, int] = (0, 0),
               reach: int = 40, hint: Optional[tuple[int, int]] = None) -> tuple[int, int]:
    """(dx, dy) to add to the grid's reported screen coordinates so that its cell borders fall on
    the lines of ``img`` (the whole screen): per axis the shift within ``prior +- reach`` whose
    predicted borders are lines most often, ties to the nearest the prior; the prior itself when
    no shift finds lines on at least half the borders (no grid lines drawn). The borders are
    each span's last pixel and the pixel before the first span (the edge of the grid, e.g. the
    column headers' border): grid lines repeat every row, and that edge is what tells a shift by
    whole rows apart. ``hint`` (the shift found for the same window before) is taken on an axis
    where every predicted border at it is a line, without searching the others."""
    out = []
    for spans, other, vertical, p in ((cols, rows, True, prior[0]), (rows, cols, False, prior[1])):
        if not spans or not other:
            out.append(p)
            continue
        lo = other[0][0] + (prior[1] if vertical else prior[0])
        hi = other[-1][0] + other[-1][1] + (prior[1] if vertical else prior[0])
        # a stretch of each line is enough (grid lines cross the whole grid) and 4x cheaper
        lo, hi = max(lo, 0), min(hi, lo + LINE_SAMPLE, img.size[1] if vertical else img.size[0])
        ends = [spans[0][0] - 1] + [a + b - 1 for a, b in spans if b > 0]
        memo: dict[int, tuple[Any, float]] = {}
        if hint is not None and hi > lo:
            h_s = hint[0] if vertical else hint[1]
            size = img.size[0] if vertical else img.size[1]
            inside = sum(1 for e in ends if 1 <= e + h_s < size - 1)
            if 2 * inside >= len(ends) and _line_score(img, [e + h_s for e in ends], lo, hi, vertical, memo) == inside:
                out.append(h_s)
                continue
        best, best_score = p, -1
        for s in sorted(range(p - reach, p + reach + 1), key=lambda v: abs(v - p)):
            sc = _line_score(img, [e + s for e in ends], lo, hi, vertical, memo) if hi > lo else 0
            if sc > best_score:
                best, best_score = s, sc
        out.append(best if 2 * best_score >= len(ends) else p)
    return out[0], out[1]


def _display() -> Any:
    global _xd
    if _xd is None:
        from Xlib import display as xdisplay  # noqa: PLC0415

        _xd = xdisplay.Display()
    return _xd


def client_offset(title: str, frame_xy: tuple[int, int]) -> tuple[int, int]:
    """(dx, dy) from the position a frame reports over AT-SPI to its X client window's position
    on screen, for the managed window titled exactly ``title``; (0, 0) when there is none, it is
    ambiguous, or the X server cannot be asked."""
    if not title:
        return 0, 0
    try:
        from Xlib import X  # noqa: PLC0415

        with _lock:
            d = _display()
            root = d.screen().root
            client_list = d.intern_atom("_NET_CLIENT_LIST")
            net_name, utf8 = d.intern_atom("_NET_WM_NAME"), d.intern_atom("UTF8_STRING")
            p = root.get_full_property(client_list, X.AnyPropertyType)
            found = []
            for wid in (p.value if p is not None else []):
                win = d.create_resource_object("window", wid)
                prop = win.get_full_property(net_name, utf8)
                name = prop.value if prop is not None else win.get_wm_name()
                if isinstance(name, bytes):
                    name = name.decode("utf-8", "replace")
                if name == title:
                    pos = win.translate_coords(root, 0, 0)
                    found.append((-int(pos.x), -int(pos.y)))  # root's origin in the window's coordinates
    except Exception:
        global _xd
        _xd = None  # a broken connection: open a new one next time
        return 0, 0
    if len(found) != 1:
        return 0, 0
    dx, dy = found[0][0] - frame_xy[0], found[0][1] - frame_xy[1]
    # a decoration, never more: anything else is a different window with the same title
    return (dx, dy) if 0 <= dx <= 64 and 0 <= dy <= 128 else (0, 0)
