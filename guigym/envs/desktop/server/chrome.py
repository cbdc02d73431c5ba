"""Subtrees of an application's chrome (tool bars, menu bars, status bars) kept between a11y walks.

LibreOffice's tool bars are most of its tree (Calc: ~200 of ~320 nodes, two thirds of the AT-SPI
calls of a walk, most of them hidden overflow buttons) and hardly change from one step to the
next. A walk that meets a chrome root (a node whose role is in :data:`ROLES`) whose own reading
(name, states, attributes, extents, text, child count: the element without children) equals the
one stored with its subtree reuses that subtree instead of walking it again.

Change signal: AT-SPI events. A listener for every ``object:`` event (state, name, value, text,
children, bounds, ...) records each event's source; the walk pumps pending events first
(``a11y._pump``), and a stored subtree any of whose nodes was the source of an event since it
was read is dropped. A toolkit that changes a node without an event is covered by the check of
the root's own reading (a moved, resized, hidden or refilled tool bar) and by :data:`MAX_AGE_S`
(every subtree is read afresh at least that often). Without the listener (it could not be
registered) nothing is stored; only applications of the :data:`TOOLKITS` are cached.

Keys are ``(bus name, object path)`` of the accessibles (libatspi fields, no D-Bus call).
Not thread-safe: used under ``a11y._lock``.
"""
from __future__ import annotations

import copy
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any, Optional

#: roles whose subtrees are kept between walks
ROLES = frozenset({"tool-bar", "menu-bar", "status-bar"})
#: toolkits (``Application.ToolkitName``, lower case) whose subtrees are kept: ATK's bridge
#: (GTK apps, LibreOffice's gtk3 VCL) sends an event for every change ATK signals. Others (Qt,
#: Gecko, Chromium) are walked in full every time until their events are checked the same way.
TOOLKITS = frozenset({"gtk", "gail"})
#: a stored subtree older than this (seconds) is read afresh even without an event
MAX_AGE_S = 20.0
#: at most this many subtrees are stored (oldest dropped first)
MAX_ENTRIES = 64

Key = tuple[str, str]


def key_of(acc: Any) -> Optional[Key]:
    """``(bus name, path)`` of a libatspi accessible, None when it has none."""
    try:
        app, path = acc.app, acc.path
        return (app.bus_name, path) if app is not None and path else None
    except Exception:
        return None


@dataclass
class Entry:
    #: the root's element without children, as ``(tag, attrib, text)``
    head: tuple[str, dict[str, str], str]
    n_children: int
    #: the root's children (elements, never handed out: copies are)
    children: list[ET.Element]
    #: keys of the root and of every node below it
    keys: set[Key]
    #: nodes below the root
    nodes: int
    #: reasons the walk of this subtree reported (``width``, ``depth``, ``hidden-items``...)
    reasons: list[str]
    stored: float = field(default_factory=time.monotonic)


class ChromeCache:
    def __init__(self) -> None:
        self.entries: dict[Key, Entry] = {}
        self.dirty: set[Key] = set()
        self.listening = False
        self._listener: Any = None
        #: walks that reused / read each subtree (for benches and tests)
        self.hits = 0
        self.misses = 0

    def listen(self) -> bool:
        """Register the event listener once; True when events are being recorded."""
        if self._listener is None:
            try:
                import gi  # noqa: PLC0415

                gi.require_version("Atspi", "2.0")
                from gi.repository import Atspi  # noqa: PLC0415

                listener = Atspi.EventListener.new(self._on_event)
                self.listening = bool(listener.register("object:"))
            except Exception:
                listener, self.listening = False, False
            self._listener = listener  # False: registration failed, do not try every walk
        return self.listening

    def _on_event(self, event: Any) -> None:
        src = event.source
        k = key_of(src)
        if k is not None:
            self.dirty.add(k)
        # and its parent as libatspi knows it (a struct field, no D-Bus call): the items of a
        # closed menu are not walked, an event from one (the menu opens) reaches its menu
        try:
            pk = key_of(src.accessible_parent)
        except Exception:
            pk = None
        if pk is not None:
            self.dirty.add(pk)

    def sweep(self) -> None:
        """Drop the subtrees an event touched (call after pumping the events) or that are old."""
        now = time.monotonic()
        dirty, self.dirty = self.dirty, set()
        for k in [k for k, e in self.entries.items() if now - e.stored > MAX_AGE_S or e.keys & dirty]:
            del self.entries[k]

    def clear(self) -> None:
        self.entries.clear()
        self.dirty.clear()

    def get(self, k: Optional[Key], el: ET.Element, n_children: int) -> Optional[Entry]:
        """The stored subtree of the root ``k`` when its reading (``el`` without children,
        ``n_children``) is unchanged; a stale one is dropped."""
        if k is None or not self.listening:
            return None
        e = self.entries.get(k)
        if e is None:
            self.misses += 1
            return None
        if e.head != (el.tag, dict(el.attrib), el.text or "") or e.n_children != n_children:
            del self.entries[k]
            self.misses += 1
            return None
        self.hits += 1
        return e

    def put(self, k: Optional[Key], el: ET.Element, n_children: int, keys: set[Key], nodes: int,
            reasons: list[str], head: tuple[str, dict[str, str], str]) -> None:
        if k is None or not self.listening:
            return
        if len(self.entries) >= MAX_ENTRIES:
            del self.entries[min(self.entries, key=lambda x: self.entries[x].stored)]
        self.entries[k] = Entry(head, n_children, [copy.deepcopy(c) for c in el], keys | {k}, nodes,
                                list(reasons))

    @staticmethod
    def children(e: Entry) -> list[ET.Element]:
        return [copy.deepcopy(c) for c in e.children]
