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

Chromium (:data:`NODE_TOOLKITS`: Chromium and the VS Code window, whose AT-SPI bridge is
Chromium's own) is cached per node instead: a web page has no tool bars, and most of its nodes
keep their name, role, text and actions from one step to the next. A node's :class:`NodeProps`
are reused until an event names the node (or its child, see the listener); its states,
attributes, extents and value are read on every walk, so what Chromium changes without an
event (scrolling moves boxes and flips ``showing``) is always read afresh. Its child list is
reused only while one ``GetChildren`` call returns the same object paths (``a11y._cached_kids``):
Chromium does not always send children-changed to the parent an AT-SPI client sees. Readings
older than MAX_AGE_S are read again, REFRESH_PER_WALK a walk (a safety net, not the change
signal). tests/test_desktop_a11y_web.py checks, for each kind of change to a page and to VS
Code, that a cached walk equals a walk without the cache.

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
#: toolkits whose nodes' own readings are kept between walks (:class:`NodeProps`): Chromium's
#: AT-SPI bridge sends name, text, state and children events for each node it changes
#: (tests/test_desktop_a11y_web.py)
NODE_TOOLKITS = frozenset({"chromium"})
#: at most this many nodes' readings are stored (all dropped when full: a page that grows past it)
MAX_NODES = 20_000
#: node readings older than MAX_AGE_S read afresh per walk, at most: a page's nodes are mostly
#: stored by one walk, and reading them all again in one later walk would cost that step a full walk
REFRESH_PER_WALK = 32
#: a stored subtree (or node reading) older than this (seconds) is read afresh even without an event
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


@dataclass
class NodeProps:
    """What a walk read of one node that only an event on it changes: ``name``, ``role`` (role
    name), ``text`` (element text as read), ``actions`` (the ``act:*`` attributes in walk order);
    and ``children``, the child accessibles in index order as last read (None until its children
    were walked: a node that was not showing), used only after a check of their paths."""
    name: str
    role: str
    text: str
    actions: dict[str, str]
    children: Optional[list[Any]] = None
    stored: float = field(default_factory=time.monotonic)


class ChromeCache:
    def __init__(self) -> None:
        self.entries: dict[Key, Entry] = {}
        #: per-node readings of NODE_TOOLKITS apps
        self.nodes: dict[Key, NodeProps] = {}
        #: node -> its children's keys when last read; kept through events: only a guide to which
        #: nodes a walk will likely meet (``a11y._Walk._prefetch``), never put into the XML
        self.hints: dict[Key, list[Key]] = {}
        self.dirty: set[Key] = set()
        self.listening = False
        self._listener: Any = None
        #: walks that reused / read each subtree (for benches and tests)
        self.hits = 0
        self.misses = 0
        #: node readings reused (NODE_TOOLKITS)
        self.node_hits = 0
        #: old node readings this walk may still drop (REFRESH_PER_WALK, reset by sweep)
        self.refresh_left = REFRESH_PER_WALK

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
        for k in dirty:
            self.nodes.pop(k, None)
        self.refresh_left = REFRESH_PER_WALK

    def clear(self) -> None:
        self.entries.clear()
        self.nodes.clear()
        self.hints.clear()
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

    def node(self, k: Optional[Key]) -> Optional[NodeProps]:
        """The stored reading of node ``k`` (None when absent, or nothing listens); an old one
        (MAX_AGE_S) is dropped while this walk's REFRESH_PER_WALK lasts, else still served."""
        if k is None or not self.listening:
            return None
        p = self.nodes.get(k)
        if p is not None and time.monotonic() - p.stored > MAX_AGE_S and self.refresh_left > 0:
            self.refresh_left -= 1
            del self.nodes[k]
            return None
        if p is not None:
            self.node_hits += 1
        return p

    def put_node(self, k: Optional[Key], props: NodeProps) -> None:
        if k is None or not self.listening:
            return
        if len(self.nodes) >= MAX_NODES:
            self.nodes.clear()
        self.nodes[k] = props
        if props.children is not None:
            self.hint(k, props.children)

    def hint(self, k: Optional[Key], children: list[Any]) -> None:
        """Remember the keys of ``k``'s children (accessibles) as just read."""
        if k is None or not self.listening:
            return
        if len(self.hints) >= MAX_NODES:
            self.hints.clear()
        self.hints[k] = [c for c in map(key_of, children) if c is not None]

    @staticmethod
    def children(e: Entry) -> list[ET.Element]:
        return [copy.deepcopy(c) for c in e.children]
