"""Who owns a loopback port inside the desktop: the check that app getters run before they trust
an answer on an app's local interface (Chromium's DevTools port, VLC's HTTP interface).

Why: a getter such as ``vlc_playing_info`` asks ``127.0.0.1:8080`` inside the desktop whether
VLC plays. An agent with a terminal could start its own server on that port before VLC does (or
after killing it) and answer "playing"; OSWorld trusts whatever answers. Reward integrity says
the agent may change what the verifier reads only by doing the task, so the getters first
resolve the listening socket to its process and accept the answer only from the app's own
binary.

:data:`PORT_OWNER_CODE` is Python source (stdlib only) prepended to the getters' in-desktop
programs. It defines ``port_owner_verdict(port, names)`` -> ``(verdict, detail)``:

* ``"ok"``: the process listening on ``port`` runs an executable whose real path lies under
  :data:`SYSTEM_DIRS` (installed software, not writable by the desktop user) and whose file name
  is one of ``names``; a ``socat`` there (OSWorld's Chrome tasks forward 9222 to Chromium's 1337
  with it) is followed to the port it forwards to, which must pass the same check;
* ``"none"``: nothing listens on the port;
* ``"impostor"``: something else listens (the detail names its executable and pid), or the
  app's binary in an instance the task's setup did not start (``allowed``, below);
* ``"unknown"``: a socket listens but no visible process owns it (another pid namespace or
  user), so the answer cannot be verified.

``allowed``: the ``[pid, start time]`` pairs of the processes the task's setup started (and
what they forked: :mod:`guigym.envs.desktop.server.launched`, asked with :func:`allowed_arg`),
or None where the desktop cannot say (a stock OSWorld server): then the binary check alone
decides. With it, the agent's own instance of the app (VLC with an HTTP source directory of
its own, Chromium with a profile it wrote) is an impostor too, and the getter reads the task's
instance or, when that is gone, scores as if the app were not running.

How: ``/proc/net/tcp`` and ``tcp6`` give the LISTEN sockets' inodes for the port; the
``/proc/<pid>/fd`` links give the process holding the inode; ``/proc/<pid>/exe`` its binary.
"""
from __future__ import annotations

import json
from typing import Any

__all__ = ["PORT_OWNER_CODE", "SYSTEM_DIRS", "CHROMIUM_NAMES", "VLC_NAMES", "allowed_arg"]

#: an app binary must live under one of these (read-only to the desktop user in the sandbox and VM)
SYSTEM_DIRS = ("/usr/", "/opt/", "/snap/")

#: executable names of Chromium/Chrome builds (Debian's chromium and headless shell, Google's)
CHROMIUM_NAMES = ("chromium", "chrome", "chromium-browser", "google-chrome", "chromium-headless-shell",
                  "chrome-headless-shell", "headless_shell")

#: VLC's executable (``cvlc``/``vlc-wrapper`` exec it)
VLC_NAMES = ("vlc",)

PORT_OWNER_CODE = r'''
import os as _os, re as _re
_SYSTEM_DIRS = %(dirs)r

def _listen_inodes(port):
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f[9])
    return inodes

def _socket_owner(inodes):
    want = set("socket:[%%s]" %% i for i in inodes)
    for pid in _os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fds = _os.listdir("/proc/%%s/fd" %% pid)
        except OSError:
            continue
        for fd in fds:
            try:
                if _os.readlink("/proc/%%s/fd/%%s" %% (pid, fd)) in want:
                    return pid
            except OSError:
                continue
    return None

def _started(pid):
    try:
        raw = open("/proc/%%s/stat" %% pid, "rb").read().decode("ascii", "replace")
        return int(raw[raw.rfind(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None

def port_owner_verdict(port, names, depth=0, allowed=None):
    inodes = _listen_inodes(port)
    if not inodes:
        return "none", "nothing listens on port %%d" %% port
    pid = _socket_owner(inodes)
    if pid is None:
        return "unknown", "no visible process owns the socket on port %%d" %% port
    try:
        exe = _os.path.realpath(_os.readlink("/proc/%%s/exe" %% pid))
        argv = open("/proc/%%s/cmdline" %% pid, "rb").read().decode("utf-8", "replace").split("\0")
    except OSError as e:
        return "unknown", "process %%s on port %%d: %%s" %% (pid, port, e)
    system = exe.startswith(_SYSTEM_DIRS)
    name = _os.path.basename(exe)
    if allowed is not None and [int(pid), _started(pid)] not in [list(a) for a in allowed]:
        return "impostor", "port %%d is held by %%s (pid %%s), an instance the task's setup did not start" %% (
            port, exe, pid)
    if system and name == "socat" and depth < 2:
        targets = [m.group(1) for a in argv for m in [_re.match(r"(?i)tcp[46]?:(?:localhost|127\.0\.0\.1|\[::1\]):(\d+)", a)] if m]
        if targets:
            return port_owner_verdict(int(targets[-1]), names, depth + 1, allowed)
    if system and name in names:
        return "ok", "%%s (pid %%s)" %% (exe, pid)
    return "impostor", "port %%d is held by %%s (pid %%s), not by %%s" %% (port, exe, pid, "/".join(names))
''' % {"dirs": SYSTEM_DIRS}


def allowed_arg(client: Any) -> str:
    """JSON for the ``allowed`` argument of ``port_owner_verdict``: the processes the task's setup
    started, as the desktop's server records them (``GET /guigym/launched``), or ``null`` when
    the client cannot ask (a stock OSWorld server, a test double)."""
    ask = getattr(client, "launched", None)
    procs = ask() if callable(ask) else None
    return json.dumps(None if procs is None else [[int(p), int(t)] for p, t in procs])
