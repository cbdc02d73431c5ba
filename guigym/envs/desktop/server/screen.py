"""Screenshots of the X display with the pointer drawn in (what the agent would see).

Xvfb does not draw the cursor into the framebuffer, so we grab the root window with PIL
(XCB, one ``GetImage``), read the current cursor image with XFixes ``GetCursorImage``
(premultiplied ARGB, with its hotspot and the pointer position) and alpha-composite it.
"""
from __future__ import annotations

import array
import io
import threading
from typing import Optional

from PIL import Image, ImageGrab
from Xlib import display as xdisplay
from Xlib.ext import xfixes  # noqa: F401  (registers the XFixes requests on Display)


class Screen:
    """One X display: size, pointer position and screenshots with the cursor.

    ``display_name`` is an X display string (``":5"``); ``None`` means ``$DISPLAY``.
    """

    def __init__(self, display_name: Optional[str] = None) -> None:
        self.display_name = display_name
        self._lock = threading.Lock()
        self._d = xdisplay.Display(display_name)
        self._root = self._d.screen().root
        self._xfixes = self._d.has_extension("XFIXES")
        if self._xfixes:
            self._d.xfixes_query_version()

    def size(self) -> tuple[int, int]:
        """(width, height) of the root window in pixels (re-read: xrandr may resize it)."""
        with self._lock:
            g = self._root.get_geometry()
            return int(g.width), int(g.height)

    def cursor_position(self) -> tuple[int, int]:
        """(x, y) of the pointer on the root window."""
        with self._lock:
            p = self._root.query_pointer()
            return int(p.root_x), int(p.root_y)

    def _cursor(self) -> Optional[tuple[Image.Image, int, int]]:
        """(RGBA cursor image, left, top) where the image goes, or None without XFixes."""
        if not self._xfixes:
            return None
        with self._lock:
            drain_events(self._d)
            c = self._d.xfixes_get_cursor_image(self._root)
        if not c.width or not c.height:
            return None
        # CARD32 ARGB per pixel, premultiplied; native little-endian bytes read as B,G,R,A
        data = array.array("I", c.cursor_image).tobytes()
        img = Image.frombytes("RGBA", (c.width, c.height), data, "raw", "BGRa")
        return img, int(c.x) - int(c.xhot), int(c.y) - int(c.yhot)

    def grab(self, cursor: bool = True) -> Image.Image:
        """RGB screenshot (mode ``RGB``, size = :meth:`size`), pointer composited when ``cursor``."""
        img = ImageGrab.grab(xdisplay=self.display_name)
        if img.mode != "RGB":
            img = img.convert("RGB")
        return self.add_cursor(img) if cursor else img

    def add_cursor(self, img: Image.Image) -> Image.Image:
        """``img`` (a screenshot) with the pointer composited in place; returned."""
        cur = self._cursor()
        if cur is not None:
            cimg, left, top = cur
            img.paste(cimg, (left, top), cimg)
        return img

    def close(self) -> None:
        with self._lock:
            self._d.close()


def drain_events(d: xdisplay.Display) -> None:
    """Discard queued events: X sends MappingNotify to every client when the keymap changes
    (input.py remaps spare keycodes), and python-xlib would queue them forever."""
    while d.pending_events():
        d.next_event()


def encode_png(img: Image.Image, compress_level: int = 1) -> bytes:
    """PNG bytes of ``img``; level 1 is ~3x faster than the default 6 for ~20 % more bytes."""
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=compress_level)
    return buf.getvalue()
