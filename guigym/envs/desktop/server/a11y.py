"""AT-SPI accessibility tree -> OSWorld's XML (the ``{"AT": xml}`` of its ``/accessibility``).

Format (OSWorld desktop_env/server/main.py, Ubuntu branch): one element per accessible, the tag
is the role name with spaces as ``-`` (``push-button``), ``name`` attribute, states as
``st:<state>="true"``, object attributes as ``attr:<key>``, for visible+showing nodes
``cp:screencoord="(x, y)"`` and ``cp:size="(w, h)"`` (screen coordinates), ``image`` /
``selection`` flags, ``val:value|min|max|step``, ``act:<action>_desc|_kb``, and the node's text
as element text. The root is ``desktop-frame``.

Unlike OSWorld the walk is bounded by a node cap and a time cap; when either stops it, the root
gets ``truncated="nodes"`` / ``truncated="time"`` (and ``truncated="depth"``/``"width"`` for the
depth and fan-out caps OSWorld also has; several reasons are joined with ``,``). Cheap prunes that
keep the XML consistent with OSWorld's own filter (it keeps only showing+visible nodes when it
linearises): the children of a node without ``showing`` are not walked (the node itself is kept
whole: pcmanfm's folder icons never say ``showing``). A ``menu`` whose first and last items are
not showing (a closed menu) is emitted without its items and gets ``truncated="hidden-items"``
(LibreOffice's menu bar holds ~600 such items).

A big table (Calc's sheet: ~10^9 cells, ~1000 on screen) yields only its on-screen cells that
show ink on screen (:mod:`.cellgrid`: text, the cell cursor, a border) plus its selected cells; a
cell that looks blank is left out. Such a table gets ``truncated="empty-cells"`` and
``visible-range="A1:S47"`` (the names of its top-left and bottom-right on-screen cells), and the
root's ``truncated`` lists ``empty-cells``. When the screen cannot be read, every on-screen cell
is walked (at most MAX_WIDTH). The geometry is read from one cell per row/column pair (along the
diagonal); the screen is the caller's grab when it passes one (``screen``: the server's observe
grabs once for the screenshot and the ink test).

Tool bars, menu bars and status bars of GTK/ATK applications are kept between walks and reused
until an AT-SPI event touches a node in them (:mod:`.chrome`; LibreOffice's tool bars are most
of its calls). The listener's events are drained every DRAIN_S between walks.
In Chromium windows (a web page, VS Code) each node's name, role, text and actions are kept
until an event names the node, and its child list while one ``GetChildren`` call says the
children are the same (:mod:`.chrome`, ``NODE_CACHE``): ~2-3 calls a node instead of ~15; the
XML equals a walk without the cache (tests/test_desktop_a11y_web.py).

Whatever an application answers is untrusted (the agent can start one that embeds itself in the
registry; tests/security/test_hostile_atspi_peer.py), so the walk is bounded in what it keeps as
well as in time: every call checks the walk's deadline first (a walk ends at most one call
timeout, plus one batch of :meth:`_Walk._prefetch`, after its time budget, however many calls a
node needs and however slowly the app answers below the timeout), a string is cut at
:data:`MAX_STRING_CHARS` (the root's ``truncated`` lists ``long-string``), a node reads at most
:data:`MAX_ACTIONS` actions and :data:`MAX_ATTRIBUTES` attributes (``long-list``), and the whole XML stays
within ``max_bytes`` characters (escapes counted; the walk stops with ``truncated="bytes"``).
Replies of the batched peer-to-peer path that have not the shape AT-SPI defines are dropped
(the node is then read through libatspi, which checks the types itself).

A hung or overloaded application costs one libatspi timeout, not the whole time budget: once a
call into an application times out, the rest of its subtree is skipped, its ``application`` node
gets ``skipped="timeout"`` and the root's ``truncated`` lists ``app-timeout``. The application is
remembered for :data:`SLOW_APP_RETRY_S` seconds, during which later walks skip it at once
(``skipped="recent-timeout"``) and then try it again. pyatspi is not thread-safe: one walk at a time.
"""
from __future__ import annotations

import os
import re
import threading
import time
import xml.etree.ElementTree as ET
from typing import Any, Callable, Optional

from . import cellgrid, chrome, zone

#: OSWorld's namespace URIs for Ubuntu (``_accessibility_ns_map["ubuntu"]``)
NS: dict[str, str] = {
    "st": "https://accessibility.ubuntu.example.org/ns/state",
    "attr": "https://accessibility.ubuntu.example.org/ns/attributes",
    "cp": "https://accessibility.ubuntu.example.org/ns/component",
    "doc": "https://accessibility.ubuntu.example.org/ns/document",
    "docattr": "https://accessibility.ubuntu.example.org/ns/document/attributes",
    "txt": "https://accessibility.ubuntu.example.org/ns/text",
    "val": "https://accessibility.ubuntu.example.org/ns/value",
    "act": "https://accessibility.ubuntu.example.org/ns/action",
}
for _prefix, _uri in NS.items():
    ET.register_namespace(_prefix, _uri)

DEFAULT_MAX_NODES = 5000
DEFAULT_TIME_BUDGET_S = 5.0
#: characters of XML a walk keeps at most (escapes counted): the env's A11Y_MAX_CHARS, so the env
#: never has to cut the XML
DEFAULT_MAX_BYTES = 4_000_000
#: a name, attribute value, role or action string longer than this is cut (UI strings are short;
#: the text of a node has MAX_TEXT_CHARS)
MAX_STRING_CHARS = 10_000
#: actions and object attributes read per node (real widgets have a handful)
MAX_ACTIONS = 32
MAX_ATTRIBUTES = 64
#: characters counted per element besides its strings (tag, attribute names, quotes)
_NODE_COST = 64
MAX_DEPTH = 50      # OSWorld's MAX_DEPTH
MAX_WIDTH = 1024    # OSWorld's MAX_WIDTH (children per node)
MAX_TEXT_CHARS = 1_000_000
#: libatspi D-Bus call timeouts (ms): per call, and while an app is starting up. libatspi lets a
#: call wait up to the startup timeout for an app it first saw less than that long ago, so a
#: loading LibreOffice could block a walk for 15 s; no extra leeway here, since a slow app is
#: skipped and retried after SLOW_APP_RETRY_S instead.
CALL_TIMEOUT_MS = 1500
STARTUP_TIMEOUT_MS = CALL_TIMEOUT_MS
#: a failed call that took this share of CALL_TIMEOUT_MS counts as a timeout
_TIMEOUT_SHARE = 0.8
#: a call that returned (a default) after this share of CALL_TIMEOUT_MS counts as a timeout
_SWALLOWED_SHARE = 0.97
#: seconds an application that timed out is skipped by later walks before it is tried again
SLOW_APP_RETRY_S = 10.0
#: containers with more children than this walk only their showing children (tables: visible cells)
LARGE_CONTAINER = 256
#: in a large non-table container, stop after this many non-showing children in a row past the showing ones
_HIDDEN_RUN = 64
#: True: walk as before issue 17 -- every on-screen cell of a big table and closed menus' items
#: (bench/desktop_reset.py's before/after for Calc)
EXHAUSTIVE = False
#: False: read every node of Chromium windows afresh (the per-node cache of :mod:`.chrome` off;
#: the tests' and bench's reference walk)
NODE_CACHE = True
#: at most this many selected cells of a big table are added to the inked ones
MAX_SELECTED_CELLS = 64
#: applications whose extents are relative to their window frame, not their client area (cellgrid)
_FRAME_RELATIVE_APPS = ("soffice",)

_ST = "{%s}" % NS["st"]
_ATTR = "{%s}" % NS["attr"]
_CP = "{%s}" % NS["cp"]
_VAL = "{%s}" % NS["val"]
_ACT = "{%s}" % NS["act"]
# characters XML 1.0 forbids (terminal text carries escape codes); OSWorld's lxml would raise
_XML_BAD = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_NAME_BAD = re.compile(r"[^\w.-]")

_lock = threading.Lock()
_pyatspi: Any = None
#: pid -> monotonic time of the app's last timeout; pid -> app name from a walk that could read
#: it (a hung app's name is a call into it). Both read and written under _lock.
_slow_apps: dict[int, float] = {}
_app_names: dict[int, str] = {}
#: tool bars and menu bars kept between walks (:mod:`.chrome`); under _lock
_chrome = chrome.ChromeCache()
#: (app name, frame, prior) -> the grid shift cellgrid found for that window last time; under _lock
_shift_hints: dict[Any, tuple[int, int]] = {}


class A11yUnavailable(RuntimeError):
    """pyatspi cannot be imported or the AT-SPI bus is unreachable."""


class _AppTimedOut(BaseException):
    """A call into the current application timed out. A BaseException so that the per-attribute
    ``except Exception`` guards of :meth:`_Walk.node` do not swallow it."""


def _is_timeout(exc: BaseException, elapsed_s: float) -> bool:
    """libatspi reports a D-Bus NoReply/timeout as a GLib.Error whose message names it; a failure
    that took most of the call timeout counts too, whatever its message."""
    if elapsed_s >= _TIMEOUT_SHARE * CALL_TIMEOUT_MS / 1000:
        return True
    msg = str(exc).lower()
    return any(k in msg for k in ("timeout", "timed out", "did not receive a reply", "noreply"))


def _atspi() -> Any:
    global _pyatspi
    if _pyatspi is None:
        try:
            import pyatspi  # noqa: PLC0415  (heavy, and absent on some hosts)
        except Exception as exc:  # ImportError, or GLib errors when no bus
            raise A11yUnavailable(f"pyatspi unavailable: {exc}") from exc
        try:
            # one hung app must not block a walk for libatspi's default 25 s per call
            pyatspi.setTimeout(CALL_TIMEOUT_MS, STARTUP_TIMEOUT_MS)
        except Exception:
            pass
        _pyatspi = pyatspi
    return _pyatspi


def _clean(s: Any) -> str:
    return _XML_BAD.sub("", s if isinstance(s, str) else str(s))


def _xml_cost(s: str) -> int:
    """Characters ``s`` takes in the XML: ``&``, ``<``, ``>``, quotes and white space controls are
    escaped (``&quot;`` is 6 characters for 1)."""
    return len(s) + 5 * sum(s.count(c) for c in '&<>"\n\r\t')


def _states_reply(v: Any) -> Optional[tuple[int, int]]:
    """AT-SPI's ``GetState`` reply (``au``: two 32-bit words), None for anything else."""
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(w, int) and 0 <= w < 1 << 32 for w in v):
        return int(v[0]), int(v[1])
    return None


def _extents_reply(v: Any) -> Optional[tuple[int, int, int, int]]:
    """``GetExtents`` reply (``(iiii)``: x, y, width, height), None for anything else."""
    if isinstance(v, (list, tuple)) and len(v) == 4 and all(isinstance(n, int) and abs(n) < 1 << 31 for n in v):
        return tuple(int(n) for n in v)  # type: ignore[return-value]
    return None


def _children_reply(v: Any) -> Optional[list[tuple[str, str]]]:
    """``GetChildren`` reply (``a(so)``: bus name, object path), None for anything else."""
    if not isinstance(v, (list, tuple)):
        return None
    out = []
    for ch in v:
        if not (isinstance(ch, (list, tuple)) and len(ch) == 2 and all(isinstance(x, str) for x in ch)):
            return None
        out.append((str(ch[0]), str(ch[1])))
    return out


def _tag(role: str) -> str:
    tag = _NAME_BAD.sub("-", (role or "").strip().replace(" ", "-")) or "unknown"
    return tag if tag[0].isalpha() else "tag" + tag


#: seconds between drains of the AT-SPI events queued for the chrome listener between walks
DRAIN_S = 1.0
_drain_thread: Optional[threading.Thread] = None


_SOCKET_DIR = re.compile(r"at-spi2-[A-Za-z0-9]+")


#: seconds one :func:`_ask_new_apps` spends asking at most (an app that never answers costs 0.3 s)
ASK_BUDGET_S = 0.5
#: a11y bus names already asked for their socket; the GDBus connection that asks (or False)
_asked: set[str] = set()
_gdbus: Any = None


def _ask_new_apps() -> None:
    """Ask each app registered since the last call for its socket address, on a connection of
    our own: at-spi2-atk creates the socket directory only when first asked, and libatspi
    connects at once when it asks, too soon for :func:`_link_app_sockets` to have linked it."""
    global _gdbus
    try:
        from gi.repository import Gio, GLib  # noqa: PLC0415

        if _gdbus is None:
            _gdbus = False
            _gdbus = Gio.DBusConnection.new_for_address_sync(
                os.environ["AT_SPI_BUS_ADDRESS"], Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT
                | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION, None, None)
        if not _gdbus:
            return
        apps = _gdbus.call_sync("org.a11y.atspi.Registry", "/org/a11y/atspi/accessible/root",
                                "org.a11y.atspi.Accessible", "GetChildren", None,
                                GLib.VariantType("(a(so))"), Gio.DBusCallFlags.NONE, 500, None).unpack()[0]
    except Exception:  # no bus address, no GLib: libatspi still routes calls through the bus
        return
    _asked.intersection_update(name for name, _path in apps)  # forget apps that quit
    t0 = time.monotonic()
    for name, _path in apps:
        if name in _asked:
            continue
        if time.monotonic() - t0 > ASK_BUDGET_S:  # many silent apps: the rest are asked next time
            break
        _asked.add(name)  # once, answered or not (a hung app must not cost every walk)
        try:
            _gdbus.call_sync(name, "/org/a11y/atspi/accessible/root", "org.a11y.atspi.Application",
                             "GetApplicationBusAddress", None, GLib.VariantType("(s)"),
                             Gio.DBusCallFlags.NONE, 300, None)
        except Exception:
            pass


#: bus name -> dbus-python connection to that application's own socket (None: none to be had)
_peers: dict[str, Any] = {}


def _peer(bus_name: str) -> Any:
    """A dbus-python connection to application ``bus_name``'s own socket (the address it answers
    to ``GetApplicationBusAddress``), made once; None without dbus-python (python3-dbus) or an
    address. libdbus calls in this thread: ~0.14 ms each against Chromium here, like libatspi's
    own, where GDBus from Python takes ~0.3 ms."""
    if bus_name in _peers:
        return _peers[bus_name]
    if len(_peers) > 64:  # apps come and go between episodes
        for conn in _peers.values():
            try:
                if conn is not None:
                    conn.close()
            except Exception:
                pass
        _peers.clear()
    _peers[bus_name] = None
    try:
        import dbus  # noqa: PLC0415
        from gi.repository import Gio, GLib  # noqa: PLC0415

        bus = _gdbus or Gio.DBusConnection.new_for_address_sync(
            os.environ["AT_SPI_BUS_ADDRESS"], Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT
            | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION, None, None)
        try:
            addr = bus.call_sync(bus_name, "/org/a11y/atspi/accessible/root", "org.a11y.atspi.Application",
                                 "GetApplicationBusAddress", None, GLib.VariantType("(s)"),
                                 Gio.DBusCallFlags.NONE, 300, None).unpack()[0]
        finally:
            if bus is not _gdbus:  # a connection of its own (no shared one): not kept open per app
                bus.close_sync(None)
        if addr:
            _peers[bus_name] = dbus.connection.Connection(addr)
    except Exception:  # no dbus-python, no bus, an app that does not answer: children read one by one
        pass
    return _peers[bus_name]


def _link_app_sockets() -> None:
    """Make the agent zone's apps reachable peer to peer from this process.

    libatspi asks each app for its own socket (``GetApplicationBusAddress``, a
    ``$XDG_RUNTIME_DIR/at-spi2-XXXXXX/socket`` that at-spi2-atk opens at start) and then calls it
    directly; when that path does not exist here it routes every call through the AT-SPI bus
    daemon instead, which made GIMP's walk about twice as slow (two more hops per call). The
    apps run in the agent zone, whose runtime directory is another mount, so each of their
    socket directories gets a same-named symlink in ours, through ``/proc/<zone pid>/root``.
    Called before AT-SPI messages are dispatched (an app object asks for the address when
    created); a failure leaves the bus route, which is slower but reads the same tree."""
    z = zone.load()
    if not z:
        return
    _ask_new_apps()
    own = os.environ.get("XDG_RUNTIME_DIR")
    try:
        theirs = z["env"]["XDG_RUNTIME_DIR"]
        pid = int(z["pid"])
    except (KeyError, TypeError, ValueError):
        return
    if not own or not theirs or pid <= 0:
        return
    root = f"/proc/{pid}/root{theirs}"
    try:
        if os.stat(f"/proc/{pid}/ns/pid").st_ino != int(z["pidns"]):
            return  # a recycled pid: never link into another process's files
        names = {n for n in os.listdir(root) if _SOCKET_DIR.fullmatch(n)}
        mine = {n for n in os.listdir(own) if _SOCKET_DIR.fullmatch(n)}
    except (OSError, KeyError, ValueError):
        return
    for n in names | mine:
        link, target = os.path.join(own, n), os.path.join(root, n)
        try:
            if n in mine:
                if not os.path.islink(link) or (n in names and os.readlink(link) == target):
                    continue  # our own app's directory, or already linked
                os.unlink(link)  # a quit app's, or one of an earlier zone
            if n in names:
                os.symlink(target, link)
        except OSError:
            pass


def _drain_events() -> None:
    """Dispatch queued AT-SPI events every DRAIN_S while no walk runs: with the chrome listener
    registered every application sends its events here, and unread ones would pile up in this
    process and on the bus (which drops a client that falls too far behind)."""
    while True:
        time.sleep(DRAIN_S)
        with _lock:
            _link_app_sockets()
            _pump()


def _listen() -> None:
    """Register the chrome cache's event listener and start draining its events (once)."""
    global _drain_thread
    if _chrome.listen() and _drain_thread is None:
        _drain_thread = threading.Thread(target=_drain_events, name="a11y-events", daemon=True)
        _drain_thread.start()


def _pump() -> None:
    """Dispatch pending AT-SPI signals so libatspi's cache sees new windows and renames."""
    try:
        from gi.repository import GLib  # noqa: PLC0415

        ctx = GLib.MainContext.default()
        for _ in range(10_000):
            if not ctx.iteration(False):
                break
    except Exception:  # no GLib: the cache may lag, the tree is still valid
        pass


class _Walk:
    def __init__(self, max_nodes: int, deadline: float, screen: Optional[Callable[[], Any]] = None,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_nodes = max_nodes
        #: characters of XML kept so far (see :func:`_xml_cost`) and the cap
        self.bytes = 0
        self.max_bytes = max_bytes
        #: set once a call found the deadline passed: the walk ends (the app is not marked slow)
        self.expired = False
        #: the caller's screenshot of this moment (see :func:`tree`), else the walk grabs its own
        self.screen = screen
        self.deadline = deadline
        self.count = 0
        self.reasons: list[str] = []
        #: set when a call into the application being walked timed out; cleared per application
        self.app_dead = False
        #: name of the application being walked, and (name, box) of the frame being walked
        self.app_name = ""
        #: toolkit of the application being walked (``gtk``, ``qt``...), lower case
        self.app_toolkit = ""
        self.frame: Optional[tuple[str, tuple[int, int, int, int]]] = None
        self.pa = _atspi()
        self.state_names: dict[int, str] = {
            int(k): v.split("_", 1)[1].lower() for k, v in self.pa.StateType._enum_lookup.items()
        }
        #: while a chrome subtree is walked: (keys of its nodes, reasons it reported)
        self.collect: Optional[tuple[set[chrome.Key], list[str]]] = None
        #: while a Chromium app is walked: object path -> {"states": [w0, w1], "extents": (x, y, w,
        #: h), "children": [path, ...]} read in one pipelined batch (:meth:`_prefetch`)
        self.pre: dict[str, dict[str, Any]] = {}
        #: nodes whose readings came from a prefetch batch
        self.prefetched = 0

    @property
    def truncated(self) -> Optional[str]:
        return ",".join(self.reasons) or None

    def cut(self, v: Any) -> str:
        """``v`` as XML-safe text of at most MAX_STRING_CHARS characters (noting ``long-string``)."""
        v = v if isinstance(v, str) else str(v)
        if len(v) > MAX_STRING_CHARS:
            v = v[:MAX_STRING_CHARS]
            self.reason("long-string")
        return _clean(v)

    def reason(self, why: str) -> None:
        if why not in self.reasons:
            self.reasons.append(why)
        if self.collect is not None and why not in self.collect[1]:
            self.collect[1].append(why)

    def _stop(self) -> bool:
        if self.count >= self.max_nodes:
            self.reason("nodes")
            return True
        if self.bytes >= self.max_bytes:
            self.reason("bytes")
            return True
        if time.monotonic() > self.deadline:
            self.reason("time")
            return True
        return False

    def call(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)``, turning a timeout into :class:`_AppTimedOut` (and refusing further calls
        into an application that already timed out in this walk)."""
        if self.app_dead:
            raise _AppTimedOut
        t = time.monotonic()
        if t > self.deadline:  # a node may need many calls: the budget is checked before each
            self.reason("time")
            self.expired = self.app_dead = True
            raise _AppTimedOut
        try:
            out = fn(*args)
        except Exception as exc:
            if _is_timeout(exc, time.monotonic() - t):
                self.app_dead = True
                raise _AppTimedOut from exc
            raise
        # some getters (get_name) swallow the D-Bus error and return a default after the timeout;
        # a merely slow answer (a loaded machine) must not count, hence the tighter share
        if time.monotonic() - t >= _SWALLOWED_SHARE * CALL_TIMEOUT_MS / 1000:
            self.app_dead = True
            raise _AppTimedOut
        return out

    def node(self, acc: Any, depth: int) -> ET.Element:
        """One element for ``acc`` and (bounded) its subtree. Stops early, keeping what it has,
        when the application times out."""
        self.count += 1
        if depth == 1:
            self.pre = {}  # another application: its paths are its own
        # Chromium's nodes: name, role, text, actions and children as last read, until an event
        # names the node (:mod:`.chrome`); states, attributes, extents, values are always read
        cache_node = (depth > 1 and NODE_CACHE and not EXHAUSTIVE and self.app_toolkit in chrome.NODE_TOOLKITS)
        k = chrome.key_of(acc) if cache_node or self.collect is not None else None
        if self.collect is not None and k is not None:
            self.collect[0].add(k)
        props = _chrome.node(k) if cache_node else None
        fresh = cache_node and props is None
        attrib: dict[str, str] = {}
        role = "unknown"
        text = ""
        states: Optional[set[str]] = None
        box: Optional[tuple[int, int, int, int]] = None
        ifaces: set[str] = set()
        actions: dict[str, str] = {}
        try:
            if props is not None:
                attrib["name"], role = props.name, props.role
            else:
                self._name(acc, attrib)
                try:
                    role = (self.call(acc.get_role_name) or "unknown")[:64]
                except _AppTimedOut:
                    raise
                except Exception:
                    pass
            states = self._states(acc, attrib)
            # every node is read whole, showing or not: some toolkits never set ``showing`` on
            # what is on screen (pcmanfm's folder icons), and their text is what agents and the
            # suite's references look for. (Closed menus' items, the bulk of LibreOffice's hidden
            # nodes, are not walked at all: see _closed_menu.)
            self._attributes(acc, attrib)
            try:
                ifaces = set(self.call(acc.get_interfaces) or ())
            except _AppTimedOut:
                raise
            except Exception:  # unknown: ask every interface, as pyatspi's query* would
                ifaces = {"Component", "Text", "Image", "Selection", "Value", "Action", "Table"}
            if "Component" in ifaces and states and "visible" in states and "showing" in states:
                box = self._extents(acc, attrib)
            if "Text" in ifaces:
                text = props.text if props is not None else self._text(acc)
            for flag, iface in (("image", "Image"), ("selection", "Selection")):
                if iface in ifaces:
                    attrib[flag] = "true"
            if "Value" in ifaces:
                self._value(acc, attrib)
            if "Action" in ifaces:
                if props is not None:
                    actions = props.actions
                else:
                    self._actions(acc, actions)
                attrib.update(actions)
        except _AppTimedOut:
            pass
        if depth == 1:
            self.app_name = attrib.get("name", "")
            self.app_toolkit = ""
            try:  # libatspi keeps it on the application after the first call
                self.app_toolkit = (self.call(acc.get_toolkit_name) or "").lower()
            except _AppTimedOut:
                pass
            except Exception:
                pass
            if self.app_toolkit in chrome.NODE_TOOLKITS and NODE_CACHE and not EXHAUSTIVE and not self.app_dead:
                self.pre = self._prefetch(acc)
        el = ET.Element(_tag(role), attrib)
        if text:
            el.text = _clean(text)
        cost = _element_cost(el)
        if self.bytes + cost > self.max_bytes:  # kept as a bare element: the walk stops here
            self.reason("bytes")
            self.bytes = self.max_bytes
            return ET.Element(el.tag, {"truncated": "bytes"})
        self.bytes += cost
        if self.app_dead:
            return el
        if fresh:
            props = chrome.NodeProps(attrib["name"], role, text, actions)
            _chrome.put_node(k, props)
        if depth >= MAX_DEPTH:
            self.reason("depth")
            return el
        # OSWorld drops non-showing nodes when it linearises, and their subtrees are non-showing
        # too: the node keeps all its attributes (checkers read e.g. a hidden scroll bar's value),
        # its subtree (a closed menu's items) is not walked. Applications have no showing state.
        if states is not None and "showing" not in states and role != "application":
            return el
        kids = self._cached_kids(acc, props) if props is not None and props.children is not None else None
        if kids is not None:
            n_children = len(kids)
        else:
            try:
                n_children = self.call(acc.get_child_count)
            except _AppTimedOut:
                return el
            except Exception:
                n_children = 0
        if role == "menu" and n_children > 0 and not EXHAUSTIVE and self._closed_menu(acc, n_children):
            el.set("truncated", "hidden-items")
            return el
        if (el.tag in chrome.ROLES and self.app_toolkit in chrome.TOOLKITS and not EXHAUSTIVE
                and self.collect is None and n_children > 0):
            return self._chrome_children(acc, el, n_children, depth, box, ifaces)
        self._walk_children(acc, el, n_children, depth, role, box, ifaces, props, kids)
        return el

    def _prefetch(self, app: Any) -> dict[str, dict[str, Any]]:
        """States and screen extents of the app's nodes as last walked (reached through the
        children each had then), and child paths of those whose child list is stored, asked
        all at once on the app's socket: the replies come back in one go instead of a round
        trip each (on a loaded 2-core machine most of a call is waiting for Chromium's thread to
        be scheduled). The walk takes a value from here instead of asking for it, so what it
        reads is the same, a few ms earlier. Returns path -> {"states"|"extents"|"children": the
        reply's value}; {} without a peer connection, and when the app does not answer (then
        ``app_dead``: skipped like an app whose call timed out)."""
        k = chrome.key_of(app)
        conn = _peer(k[0]) if k is not None else None
        if conn is None:
            return {}
        try:
            import dbus  # noqa: PLC0415

            roots = _children_reply(self.call(conn.call_blocking, None, app.path, "org.a11y.atspi.Accessible",
                                              "GetChildren", "", [], CALL_TIMEOUT_MS / 1000))
        except _AppTimedOut:
            return {}
        except Exception:
            return {}
        if roots is None:  # not a(so): read the app through libatspi instead
            self.reason("malformed")
            return {}
        todo: list[tuple[str, str, str, str, list[Any]]] = []
        frontier, seen = roots[:self.max_nodes], set()
        while frontier and len(seen) < self.max_nodes:
            nxt = []
            for key in frontier:
                if len(seen) >= self.max_nodes:  # (an app's reply may list any number of children)
                    break
                if key in seen:
                    continue
                seen.add(key)
                props = _chrome.nodes.get(key)
                todo.append((key[1], "org.a11y.atspi.Accessible", "GetState", "", []))
                todo.append((key[1], "org.a11y.atspi.Component", "GetExtents", "u", [0]))  # 0: screen
                if props is not None and props.children is not None:
                    todo.append((key[1], "org.a11y.atspi.Accessible", "GetChildren", "", []))
                nxt.extend(_chrome.hints.get(key, ()))
            frontier = nxt
        out: dict[str, dict[str, Any]] = {}
        names = {"GetState": "states", "GetExtents": "extents", "GetChildren": "children"}
        # the app's replies are checked against AT-SPI's types; a reply of another shape is
        # dropped, and the walk reads that value through libatspi instead
        checks = {"states": _states_reply, "extents": _extents_reply, "children": _children_reply}
        timed_out: list[str] = []
        malformed: list[str] = []

        def reply(path: str, what: str) -> Callable[[Any], None]:
            def done(msg: Any) -> None:
                if isinstance(msg, dbus.lowlevel.MethodReturnMessage):
                    args = msg.get_args_list()
                    good = checks[what](args[0]) if len(args) == 1 else None
                    if good is not None:
                        out.setdefault(path, {})[what] = good
                    else:
                        malformed.append(path)
                elif isinstance(msg, dbus.lowlevel.ErrorMessage) and "NoReply" in (msg.get_error_name() or ""):
                    timed_out.append(path)
            return done

        try:
            pending = []
            for path, iface, method, sig, args in todo:
                msg = dbus.lowlevel.MethodCallMessage(None, path, iface, method)
                if sig:
                    msg.append(*args, signature=sig)
                pending.append(conn.send_message_with_reply(msg, reply(path, names[method]), CALL_TIMEOUT_MS / 1000,
                                                            require_main_loop=False))
            for pc in pending:
                pc.block()
        except Exception:
            return {}
        if timed_out:  # (not the batch's time: a big page under load may take long, and answers)
            self.app_dead = True  # hung: the app is skipped as when one call times out
            return {}
        if malformed:
            self.reason("malformed")
        self.prefetched += len(out)
        return out

    def _cached_kids(self, acc: Any, props: chrome.NodeProps) -> Optional[list[Any]]:
        """``props.children`` when the node's children are still those (their object paths, one
        ``GetChildren`` call: Chromium does not always send children-changed to the parent we
        see, e.g. when the DOM parent is an ignored node), else None (read them one by one)."""
        k = chrome.key_of(acc)
        conn = _peer(k[0]) if k is not None else None
        if conn is None or props.children is None:
            return None
        paths = self.pre.get(acc.path, {}).pop("children", None)
        if paths is None:
            try:
                paths = _children_reply(self.call(conn.call_blocking, None, acc.path, "org.a11y.atspi.Accessible",
                                                  "GetChildren", "", [], CALL_TIMEOUT_MS / 1000))
            except _AppTimedOut:
                raise
            except Exception:
                return None
            if paths is None:
                return None
        have = [getattr(c, "path", None) for c in props.children]
        return props.children if [str(p) for _, p in paths] == have else None

    def _walk_children(self, acc: Any, el: ET.Element, n_children: int, depth: int, role: str,
                       box: Optional[tuple[int, int, int, int]], ifaces: set[str],
                       props: Optional[chrome.NodeProps] = None, kids: Optional[list[Any]] = None) -> None:
        """``props``: the node's cached reading, whose child list is filled when the children
        are read one by one; ``kids``: its checked child list (see :meth:`_cached_kids`)."""
        outer_frame = self.frame
        if role == "frame" and box is not None:
            self.frame = (el.get("name", ""), box)
        try:
            if n_children > LARGE_CONTAINER:
                self._large_children(acc, el, n_children, depth, box if "Table" in ifaces else None)
            else:
                self._children(acc, el, range(n_children), depth, props, kids)
        except _AppTimedOut:
            pass
        finally:
            self.frame = outer_frame

    def _chrome_children(self, acc: Any, el: ET.Element, n_children: int, depth: int,
                         box: Optional[tuple[int, int, int, int]], ifaces: set[str]) -> ET.Element:
        """Children of a tool bar or menu bar: the ones stored by an earlier walk when nothing in
        that subtree changed since (:mod:`.chrome`), else walked and stored."""
        k = chrome.key_of(acc)
        hit = _chrome.get(k, el, n_children)
        kept = _chrome.children(hit) if hit is not None and self.count + hit.nodes <= self.max_nodes else None
        cost = sum(_element_cost(e) for kid in kept for e in kid.iter()) if kept is not None else 0
        if hit is not None and kept is not None and self.bytes + cost <= self.max_bytes:
            el.extend(kept)
            self.count += hit.nodes
            self.bytes += cost
            for why in hit.reasons:
                self.reason(why)
            return el
        head = (el.tag, dict(el.attrib), el.text or "")
        before = self.count
        self.collect = (set(), [])
        try:
            self._walk_children(acc, el, n_children, depth, el.tag, box, ifaces)
        finally:
            keys, reasons = self.collect
            self.collect = None
        # a subtree cut short by a cap or a hung app is not kept
        if not self.app_dead and not {"nodes", "time", "bytes"} & set(reasons):
            _chrome.put(k, el, n_children, keys, self.count - before, reasons, head)
        return el

    def _closed_menu(self, acc: Any, n: int) -> bool:
        """True when the first and last items of menu ``acc`` are not showing: a closed menu,
        whose items OSWorld's linearisation drops (LibreOffice's menu bar: ~600 of them)."""
        try:
            for i in {0, n - 1}:
                ch = self.call(acc.get_child_at_index, i)
                if ch is None or self.call(ch.get_state_set).contains(self.pa.STATE_SHOWING):
                    return False
                if self.collect is not None:  # an event from either item drops a stored menu bar
                    k = chrome.key_of(ch)
                    if k is not None:
                        self.collect[0].add(k)
        except _AppTimedOut:
            raise
        except Exception:
            return False
        return True

    def _children(self, acc: Any, el: ET.Element, indices: range, depth: int,
                  props: Optional[chrome.NodeProps] = None, kids: Optional[list[Any]] = None) -> None:
        if kids is not None and len(kids) != len(indices):
            kids = None
        got: Optional[list[Any]] = [] if props is not None and kids is None else None
        for i in indices:
            if self._stop() or self.app_dead:
                return
            if kids is not None:
                ch = kids[i]
            else:
                try:
                    ch = self.call(acc.get_child_at_index, i)
                except Exception:
                    got = None  # a child that could not be read: do not keep the list
                    continue
                if got is not None:
                    got.append(ch)
            if ch is not None:
                el.append(self.node(ch, depth + 1))
        if got is not None and props is not None:
            props.children = got
            _chrome.hint(chrome.key_of(acc), got)

    def _large_children(self, acc: Any, el: ET.Element, n: int, depth: int,
                        table_box: Optional[tuple[int, int, int, int]]) -> None:
        """Children of a container too big to walk (Calc's sheet): the on-screen cells of a
        table, else the showing children (they are contiguous in lists), at most MAX_WIDTH."""
        if table_box is not None and self._visible_cells(acc, el, depth, table_box):
            return
        seen_showing, hidden_run, walked = False, 0, 0
        for i in range(n):
            if self._stop() or self.app_dead:
                return
            if walked >= MAX_WIDTH:
                self.reason("width")
                return
            try:
                ch = self.call(acc.get_child_at_index, i)
                showing = ch is not None and self.call(ch.get_state_set).contains(self.pa.STATE_SHOWING)
            except _AppTimedOut:
                raise
            except Exception:
                continue
            walked += 1
            if showing:
                seen_showing, hidden_run = True, 0
                el.append(self.node(ch, depth + 1))
            else:
                hidden_run += 1
                if seen_showing and hidden_run >= _HIDDEN_RUN:
                    return

    def _visible_cells(self, acc: Any, el: ET.Element, depth: int, box: tuple[int, int, int, int]) -> bool:
        """Append the on-screen cells of table ``acc`` that show ink, then its selected cells
        (row-major, at most MAX_WIDTH); every on-screen cell when the screen cannot be read.
        False when the table cannot say which cells are on screen."""
        from gi.repository import Atspi  # noqa: PLC0415  (pyatspi already loaded it)

        x, y, w, h = box
        if w <= 2 or h <= 2:
            return False
        try:
            corners, names = [], []
            for px, py in ((x + 1, y + 1), (x + w - 2, y + h - 2)):
                cell = self.call(Atspi.Component.get_accessible_at_point, acc, px, py, Atspi.CoordType.SCREEN)
                if cell is None:
                    return False
                idx = self.call(cell.get_index_in_parent)
                corners.append((self.call(Atspi.Table.get_row_at_index, acc, idx),
                                self.call(Atspi.Table.get_column_at_index, acc, idx)))
                names.append(self.call(cell.get_name) or "")
        except _AppTimedOut:
            raise
        except Exception:
            return False
        (r0, c0), (r1, c1) = corners
        if min(r0, c0, r1, c1) < 0 or r1 < r0 or c1 < c0:
            return False
        if all(names):
            el.set("visible-range", self.cut("%s:%s" % tuple(names)))
        inked = None if EXHAUSTIVE else self._inked(acc, r0, c0, r1, c1)
        if inked is None:
            picked = [(r, c) for r in range(r0, r1 + 1) for c in range(c0, c1 + 1)]
        else:
            el.set("truncated", "empty-cells")
            self.reason("empty-cells")
            picked = sorted(inked | self._selected_cells(acc, r0, c0, r1, c1))
        if len(picked) > MAX_WIDTH:
            self.reason("width")
        for r, c in picked[:MAX_WIDTH]:
            if self._stop() or self.app_dead:
                return True
            try:
                cell = self.call(Atspi.Table.get_accessible_at, acc, r, c)
            except _AppTimedOut:
                raise
            except Exception:
                continue
            if cell is not None:
                el.append(self.node(cell, depth + 1))
        return True

    def _inked(self, acc: Any, r0: int, c0: int, r1: int, c1: int) -> Optional[set[tuple[int, int]]]:
        """``{(row, col)}`` of the on-screen cells whose box shows ink (see :mod:`.cellgrid`):
        2 calls per visible row and column, one screen grab. None when the grid's geometry or
        the screen cannot be read."""
        from gi.repository import Atspi  # noqa: PLC0415

        # one cell per step along the diagonal gives a column's (x, width) and a row's (y, height):
        # max(rows, cols) cells asked, not rows + cols
        nr, nc = r1 - r0 + 1, c1 - c0 + 1
        cols: list[cellgrid.Span] = []
        rows: list[cellgrid.Span] = []
        try:
            for i in range(max(nr, nc)):
                cell = self.call(Atspi.Table.get_accessible_at, acc, r0 + min(i, nr - 1), c0 + min(i, nc - 1))
                e = self.call(cell.get_extents, self.pa.XY_SCREEN)
                if i < nc:
                    cols.append((e.x, e.width))
                if i < nr:
                    rows.append((e.y, e.height))
        except _AppTimedOut:
            raise
        except Exception:
            return None
        prior = (0, 0)
        if self.app_name in _FRAME_RELATIVE_APPS and self.frame is not None:
            prior = cellgrid.client_offset(self.frame[0], self.frame[1][:2])
        try:
            img = self.screen() if self.screen is not None else None
            if img is None:
                img = cellgrid.grab()
        except Exception:  # no X display or no PIL here: walk every cell instead
            return None
        # the shift is the window's decoration: the same as last time unless the window moved
        hint_key = (self.app_name, self.frame, prior)
        dx, dy = cellgrid.grid_shift(img, cols, rows, prior, hint=_shift_hints.get(hint_key))
        if len(_shift_hints) > 16:
            _shift_hints.clear()
        _shift_hints[hint_key] = (dx, dy)
        hits = cellgrid.inked_cells(img, -dx, -dy, cols, rows)
        return {(r0 + j, c0 + i) for j, i in hits}

    def _selected_cells(self, acc: Any, r0: int, c0: int, r1: int, c1: int) -> set[tuple[int, int]]:
        """(row, col) of the table's selected cells inside the on-screen range (at most
        MAX_SELECTED_CELLS asked); empty when the table has no Selection interface."""
        from gi.repository import Atspi  # noqa: PLC0415

        out: set[tuple[int, int]] = set()
        try:
            n = self.call(Atspi.Selection.get_n_selected_children, acc)
            for i in range(min(n, MAX_SELECTED_CELLS)):
                ch = self.call(Atspi.Selection.get_selected_child, acc, i)
                if ch is None:
                    continue
                idx = self.call(ch.get_index_in_parent)
                r = self.call(Atspi.Table.get_row_at_index, acc, idx)
                c = self.call(Atspi.Table.get_column_at_index, acc, idx)
                if r0 <= r <= r1 and c0 <= c <= c1:
                    out.add((r, c))
        except _AppTimedOut:
            raise
        except Exception:
            pass
        return out

    # ---- per-node attribute readers (each may raise _AppTimedOut) --------------------------------
    def _name(self, acc: Any, attrib: dict[str, str]) -> None:
        attrib["name"] = ""
        try:
            attrib["name"] = self.cut(self.call(acc.get_name) or "")
        except _AppTimedOut:
            raise
        except Exception:
            pass

    def _attributes(self, acc: Any, attrib: dict[str, str]) -> None:
        try:
            got = self.call(acc.get_attributes) or {}
            for i, (k, v) in enumerate(got.items()):
                if i >= MAX_ATTRIBUTES:
                    self.reason("long-list")
                    break
                if k:
                    attrib[_ATTR + _NAME_BAD.sub("-", str(k)[:64])] = self.cut(v)
        except _AppTimedOut:
            raise
        except Exception:
            pass

    def _states(self, acc: Any, attrib: dict[str, str]) -> Optional[set[str]]:
        """State nicks (also written as ``st:`` attributes); None when they cannot be read."""
        bits = self.pre.get(acc.path, {}).pop("states", None) if self.pre else None
        if bits is not None:  # AT-SPI's two 32-bit words: state i is bit i, as libatspi reads them
            word = int(bits[0]) | (int(bits[1]) << 32)
            raw: Any = [i for i in range(64) if word >> i & 1]
        else:
            try:
                raw = self.call(acc.get_state_set).get_states()
            except _AppTimedOut:
                raise
            except Exception:
                return None
        states = set()
        for st in raw:
            nick = self.state_names.get(int(st))
            if nick:
                states.add(nick)
                attrib[_ST + nick] = "true"
        return states

    def _extents(self, acc: Any, attrib: dict[str, str]) -> Optional[tuple[int, int, int, int]]:
        box = self.pre.get(acc.path, {}).pop("extents", None) if self.pre else None
        if box is not None:
            x, y, w, h = (int(v) for v in box)
            attrib[_CP + "screencoord"] = "(%d, %d)" % (x, y)
            attrib[_CP + "size"] = "(%d, %d)" % (w, h)
            return (x, y, w, h)
        try:
            r = self.call(acc.get_extents, self.pa.XY_SCREEN)
        except _AppTimedOut:
            raise
        except Exception:
            return None
        attrib[_CP + "screencoord"] = "(%d, %d)" % (r.x, r.y)
        attrib[_CP + "size"] = "(%d, %d)" % (r.width, r.height)
        return (r.x, r.y, r.width, r.height)

    def _text(self, acc: Any) -> str:
        try:
            n = min(self.call(acc.get_character_count), MAX_TEXT_CHARS)
            if n <= 0:
                return ""
            # (an app may answer with more than it was asked for)
            return self.call(acc.get_text, 0, n)[:n].replace("\ufffc", "").replace("\ufffd", "")
        except _AppTimedOut:
            raise
        except Exception:
            return ""

    def _value(self, acc: Any, attrib: dict[str, str]) -> None:
        # item by item through libatspi (Properties.Get each): one Properties.GetAll of the
        # Value interface would be a single round trip, but Qt's AT-SPI bridge crashes on it
        # (VLC died at its first observation; tests/test_desktop_a11y_apps.py)
        for key, getter in (("value", acc.get_current_value), ("min", acc.get_minimum_value),
                            ("max", acc.get_maximum_value), ("step", acc.get_minimum_increment)):
            try:
                attrib[_VAL + key] = self.cut(self.call(getter))
            except _AppTimedOut:
                raise
            except Exception:
                pass

    def _actions(self, acc: Any, attrib: dict[str, str]) -> None:
        # item by item: the bus's Action.GetActions would be one call, but it returns localized
        # names ("Click", not OSWorld's "click")
        try:
            n = self.call(acc.get_n_actions)
        except _AppTimedOut:
            raise
        except Exception:
            return
        if n > MAX_ACTIONS:
            self.reason("long-list")
        for i in range(min(n, MAX_ACTIONS)):
            try:
                an = _NAME_BAD.sub("-", (self.call(acc.get_action_name, i) or "")[:64].replace(" ", "-"))
                if an:
                    attrib[_ACT + an + "_desc"] = self.cut(self.call(acc.get_action_description, i) or "")
                    attrib[_ACT + an + "_kb"] = self.cut(self.call(acc.get_key_binding, i) or "")
            except _AppTimedOut:
                raise
            except Exception:
                pass


def _element_cost(el: ET.Element) -> int:
    """Characters ``el`` alone (not its children) takes in the XML, about (see :func:`_xml_cost`)."""
    return (_NODE_COST + sum(len(k) + _xml_cost(v) for k, v in el.attrib.items())
            + (_xml_cost(el.text) if el.text else 0))


def _app_pid(app: Any) -> int:
    """Process id of an application, -1 if unknown. Asked of the AT-SPI bus daemon, not of the
    application, so it answers even when the application hangs (its name may not)."""
    try:
        return int(app.get_process_id())
    except Exception:
        return -1


def tree(max_nodes: int = DEFAULT_MAX_NODES, time_budget: float = DEFAULT_TIME_BUDGET_S,
         screen: Optional[Callable[[], Any]] = None,
         max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[ET.Element, dict[str, Any]]:
    """Walk every application on the AT-SPI desktop.

    ``screen``: returns a PIL RGB image of the whole screen taken after the walk began, without
    the pointer (or None: the walk then grabs its own); the ink test of big tables reads it, so
    that an observation grabs the screen once (the server's ``/guigym/observe``). ``max_bytes``:
    characters of XML kept at most (``truncated="bytes"`` past it).

    Returns ``(root element, stats)`` with stats ``{"nodes": int, "truncated": str|None,
    "ms": float, "skipped_apps": [name, ...], "prefetched": int}`` (prefetched: nodes of
    Chromium windows read in a batch, see ``_Walk._prefetch``). Raises :class:`A11yUnavailable` when AT-SPI
    cannot be reached.
    """
    if max_nodes < 1 or time_budget <= 0 or max_bytes < 1:
        raise ValueError(f"max_nodes and max_bytes must be >= 1 and time_budget > 0, "
                         f"got {max_nodes}, {max_bytes}, {time_budget}")
    t0 = time.monotonic()
    skipped: list[str] = []
    with _lock:
        pa = _atspi()
        _link_app_sockets()  # before any app object is made (they ask for their address then)
        if not EXHAUSTIVE:
            _listen()
        _pump()
        _chrome.sweep()
        try:
            desktop = pa.Registry.getDesktop(0)
            apps = [desktop.getChildAtIndex(i) for i in range(desktop.childCount)]
        except Exception as exc:
            raise A11yUnavailable(f"AT-SPI registry unreachable: {exc}") from exc
        walk = _Walk(max_nodes, t0 + time_budget, screen, max_bytes)
        root = ET.Element("desktop-frame")
        now = time.monotonic()
        for pid, when in list(_slow_apps.items()):
            if now - when >= SLOW_APP_RETRY_S:
                del _slow_apps[pid]
        pids = []
        for app in apps:
            if walk._stop():
                break
            if app is None:
                continue
            pid = _app_pid(app)
            pids.append(pid)
            if pid in _slow_apps:
                walk.count += 1
                name = _app_names.get(pid, "")
                root.append(ET.Element("application", {"name": name, "skipped": "recent-timeout"}))
                walk.reason("app-timeout")
                skipped.append(name)
                continue
            walk.app_dead = False
            try:
                el = walk.node(app, 1)
            except Exception:  # an app that quits mid-walk (or answers nonsense): skip it, say so
                root.append(ET.Element("application", {"name": _app_names.get(pid, ""), "skipped": "error"}))
                walk.reason("app-error")
                continue
            if el.get("name"):
                _app_names[pid] = el.get("name", "")
            if walk.app_dead and not walk.expired:  # (expired: the budget ran out, not the app)
                el.tag = "application"  # its role may be what timed out
                el.set("skipped", "timeout")
                if not el.get("name"):
                    el.set("name", _app_names.get(pid, ""))
                if pid >= 0:
                    _slow_apps[pid] = time.monotonic()
                walk.reason("app-timeout")
                skipped.append(el.get("name", ""))
            root.append(el)
        if not walk.reasons:  # every app was seen: forget the names of the ones that quit
            for pid in set(_app_names) - set(pids):
                del _app_names[pid]
        walk.app_dead = False
    if walk.truncated:
        root.set("truncated", walk.truncated)
    return root, {"nodes": walk.count, "truncated": walk.truncated, "ms": (time.monotonic() - t0) * 1e3,
                  "skipped_apps": skipped, "prefetched": walk.prefetched}


def to_xml(root: ET.Element) -> str:
    """Serialise with every OSWorld prefix declared on the root (ElementTree only declares used ones)."""
    s = ET.tostring(root, encoding="unicode")
    missing = [p for p, u in NS.items() if ('xmlns:%s="%s"' % (p, u)) not in s.split(">", 1)[0]]
    if missing:
        decl = "".join(' xmlns:%s="%s"' % (p, NS[p]) for p in missing)
        head_end = s.index("desktop-frame") + len("desktop-frame")
        s = s[:head_end] + decl + s[head_end:]
    return s


def accessibility_tree(max_nodes: int = DEFAULT_MAX_NODES, time_budget: float = DEFAULT_TIME_BUDGET_S,
                       screen: Optional[Callable[[], Any]] = None,
                       max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[str, dict[str, Any]]:
    """(OSWorld XML string, stats); see :func:`tree`."""
    root, stats = tree(max_nodes, time_budget, screen, max_bytes)
    return to_xml(root), stats


def terminal_output(root: Optional[ET.Element] = None) -> Optional[str]:
    """Text of the focused ``terminal`` node inside an active frame, as OSWorld's ``/terminal``
    reads gnome-terminal; any VTE terminal qualifies here. ``None`` when there is none."""
    if root is None:
        root, _ = tree()
    found: list[str] = []
    for frame in root.iter("frame"):
        if frame.get(_ST + "active") != "true":
            continue
        for term in frame.iter("terminal"):
            if term.get(_ST + "focused") == "true":
                found.append((term.text or "").rstrip())
    return found[0] if len(found) == 1 else None
