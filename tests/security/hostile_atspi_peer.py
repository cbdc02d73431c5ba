"""A hostile AT-SPI application (issue 35, item 3): what an agent can start from the desktop's
terminal to attack the a11y walk. Run with the desktop's own ``/usr/bin/python3`` (dbus-python
and PyGObject); not a test module.

It embeds itself in the AT-SPI registry like any toolkit's bridge (``Socket.Embed``) and answers
every accessibility call of the walk itself, as ``MODE`` (argv[1]) says:

* ``huge``: 256 KiB names, 16 attributes and 10^6 actions with 16 KiB strings, 200,000
  characters of text per node, an endless tree of 200 children per node (each reply small, so
  that it comes well within the per-call timeout even on a loaded machine);
* ``slow``: a small tree (8 actions a node), but every reply comes just under the walk's
  per-call timeout (1.3 s of libatspi's 1.5 s), so no call ever counts as a timeout;
* ``malformed``: replies of the wrong D-Bus type for every property and method, and a toolkit
  name of ``Chromium`` with a peer-to-peer address (a D-Bus server of its own on an abstract socket), so
  the walk's batched path (``_prefetch``: one pipelined batch of ``GetState``/``GetExtents``/
  ``GetChildren``) reads malformed replies too.

It prints ``EMBEDDED`` once registered, then serves until killed.
"""
from __future__ import annotations

import os
import sys
import time

import dbus
import dbus.mainloop.glib
import dbus.server
import dbus.service
from gi.repository import GLib

MODE = sys.argv[1] if len(sys.argv) > 1 else "huge"
ROOT = "/org/a11y/atspi/accessible/root"
A, APP, ACT, TXT, COMP = ("org.a11y.atspi." + n for n in ("Accessible", "Application", "Action", "Text",
                                                          "Component"))
PROPS = "org.freedesktop.DBus.Properties"
# STATE_VISIBLE (30) and STATE_SHOWING (25) as AT-SPI's two 32-bit words
STATES = dbus.Array([dbus.UInt32((1 << 30) | (1 << 25)), dbus.UInt32(0)], signature="u")
BIG = "n" * (256 << 10)
DESC = "d" * (16 << 10)
TEXT = "t" * 200_000

dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
bus = dbus.bus.BusConnection(os.environ["AT_SPI_BUS_ADDRESS"])
me = bus.get_unique_name()


def slow() -> None:
    if MODE == "slow":
        time.sleep(1.3)


def ref(path: str) -> tuple:
    return dbus.Struct((me, dbus.ObjectPath(path)), signature="so")


class Node(dbus.service.FallbackObject):
    """Every object path under /org/a11y/atspi/accessible is one node of the endless tree."""

    def _kids(self) -> int:
        return 200 if MODE == "huge" else 3

    @dbus.service.method(PROPS, in_signature="ss", out_signature="v", rel_path_keyword="rel")
    def Get(self, iface: str, prop: str, rel: str = "") -> object:  # noqa: N802 (D-Bus names)
        slow()
        if MODE == "malformed":
            return {"Name": dbus.Int32(7), "ChildCount": "many", "NActions": "lots",
                    "CharacterCount": dbus.Array([1, 2], signature="i"), "ToolkitName": "Chromium",
                    }.get(prop, dbus.Dictionary({"x": "y"}, signature="ss"))
        return {"Name": dbus.String(BIG if MODE == "huge" else "hostile"), "Description": "",
                "ChildCount": dbus.Int32(self._kids()), "NActions": dbus.Int32({"huge": 1_000_000, "slow": 8}.get(MODE, 1)),
                "CharacterCount": dbus.Int32(len(TEXT) if MODE == "huge" else 5),
                "ToolkitName": "hostile", "Version": "1", "AtspiVersion": "2.1", "Id": dbus.Int32(1),
                "Parent": ref(ROOT), "Locale": "C", "AccessibleId": ""}.get(prop, dbus.String(""))

    @dbus.service.method(PROPS, in_signature="s", out_signature="a{sv}")
    def GetAll(self, iface: str) -> dict:  # noqa: N802
        slow()
        return {}

    @dbus.service.method(A, in_signature="i", out_signature="(so)", rel_path_keyword="rel")
    def GetChildAtIndex(self, i: int, rel: str = "") -> tuple:  # noqa: N802
        slow()
        return ref("/org/a11y/atspi/accessible/n%d" % (abs(hash((rel, i))) % 10**12))

    @dbus.service.method(A, in_signature="", out_signature="a(so)")
    def GetChildren(self) -> list:  # noqa: N802
        slow()
        return [ref("/org/a11y/atspi/accessible/c%d" % i) for i in range(self._kids())]

    @dbus.service.method(A, in_signature="", out_signature="u")
    def GetRole(self) -> int:  # noqa: N802
        slow()
        return dbus.UInt32(23)  # frame

    @dbus.service.method(A, in_signature="", out_signature="s")
    def GetRoleName(self) -> str:  # noqa: N802
        slow()
        return "frame"

    @dbus.service.method(A, in_signature="", out_signature="au")
    def GetState(self) -> list:  # noqa: N802
        slow()
        return STATES

    @dbus.service.method(A, in_signature="", out_signature="a{ss}")
    def GetAttributes(self) -> dict:  # noqa: N802
        slow()
        if MODE == "huge":
            return {"k%d" % i: DESC for i in range(16)}
        return {"toolkit": "hostile"}

    @dbus.service.method(A, in_signature="", out_signature="as")
    def GetInterfaces(self) -> list:  # noqa: N802
        slow()
        return [A, ACT, TXT, COMP, APP]

    @dbus.service.method(A, in_signature="", out_signature="i")
    def GetIndexInParent(self) -> int:  # noqa: N802
        slow()
        return 0

    @dbus.service.method(A, in_signature="", out_signature="(so)")
    def GetApplication(self) -> tuple:  # noqa: N802
        return ref(ROOT)

    @dbus.service.method(A, in_signature="", out_signature="a(ua(so))")
    def GetRelationSet(self) -> list:  # noqa: N802
        return dbus.Array([], signature="(ua(so))")

    @dbus.service.method(APP, in_signature="", out_signature="s")
    def GetApplicationBusAddress(self) -> str:  # noqa: N802
        return PEER_ADDRESS

    @dbus.service.method(APP, in_signature="u", out_signature="s")
    def GetLocale(self, lctype: int) -> str:  # noqa: N802
        return "C"

    @dbus.service.method(ACT, in_signature="i", out_signature="s")
    def GetName(self, i: int) -> str:  # noqa: N802
        slow()
        return "click%d" % i

    @dbus.service.method(ACT, in_signature="i", out_signature="s")
    def GetDescription(self, i: int) -> str:  # noqa: N802
        slow()
        return DESC if MODE == "huge" else "d"

    @dbus.service.method(ACT, in_signature="i", out_signature="s")
    def GetKeyBinding(self, i: int) -> str:  # noqa: N802
        slow()
        return DESC if MODE == "huge" else "k"

    @dbus.service.method(TXT, in_signature="ii", out_signature="s")
    def GetText(self, start: int, end: int) -> str:  # noqa: N802
        slow()
        return TEXT if MODE == "huge" else "hello"

    @dbus.service.method(COMP, in_signature="u", out_signature="(iiii)")
    def GetExtents(self, coords: int) -> tuple:  # noqa: N802
        slow()
        return dbus.Struct((10, 10, 100, 100), signature="iiii")


class Malformed(Node):
    """The peer-to-peer side in ``malformed`` mode: the batched calls get replies of the wrong shape."""

    @dbus.service.method(A, in_signature="", out_signature="as")
    def GetChildren(self) -> list:  # noqa: N802 - not (so) pairs
        return ["a", "bc", "def"]

    @dbus.service.method(A, in_signature="", out_signature="as")
    def GetState(self) -> list:  # noqa: N802
        return ["x"]

    @dbus.service.method(COMP, in_signature="u", out_signature="s")
    def GetExtents(self, coords: int) -> str:  # noqa: N802
        return "nowhere"


PEER_ADDRESS = ""
if MODE == "malformed":
    peers: list = []

    class PeerServer(dbus.server.Server):
        def connection_added(self, conn: object) -> None:
            peers.append(Malformed(conn, "/org/a11y/atspi/accessible"))

    # an abstract socket: the agent shares the network namespace with the walk
    server = PeerServer("unix:abstract=guigym-hostile-%d" % os.getpid())
    PEER_ADDRESS = server.address

node = Node(bus, "/org/a11y/atspi/accessible")
bus.call_blocking("org.a11y.atspi.Registry", ROOT, "org.a11y.atspi.Socket", "Embed", "(so)",
                  [(me, dbus.ObjectPath(ROOT))])
print("EMBEDDED", MODE, flush=True)
GLib.MainLoop().run()
