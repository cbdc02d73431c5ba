"""Run commands and touch files in the local desktop's AGENT zone (standard library only).

In the local sandbox (providers/local.py) the server is infrastructure: it holds the token and
its sockets in a directory the agent cannot see. Everything it does *for* a task, a getter or an
agent (``/execute``, ``/setup/launch``, reading or writing a file in HOME, ...) happens inside
the agent zone instead, as the agent's uid, with the zone's fixed environment: so a path an agent
planted (a symlink to the token) resolves in the agent's view, and a process it starts dies with
the zone at the next reset.

``$GUIGYM_ZONE_FILE`` names ``zone.json`` (written by the sandbox init: the zone's pid, the inode
of its PID namespace, its environment). When the variable is unset (a VM, a container, a test
server) commands run directly, as before.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from typing import Any, Optional, Sequence

NAMESPACES = ("user", "mnt", "pid")
#: A directory walk run inside the zone (OSWorld's /list_directory tree), JSON on stdout.
_WALK = r"""
import json, os, sys
def walk(d):
    tree = {"type": "directory", "name": os.path.basename(d), "children": []}
    try:
        for e in os.listdir(d):
            f = os.path.join(d, e)
            if os.path.isdir(f) and not os.path.islink(f):
                tree["children"].append(walk(f))
            else:
                tree["children"].append({"type": "file", "name": e})
    except OSError as exc:
        return {"error": str(exc)}
    return tree
print(json.dumps(walk(sys.argv[1])) if os.path.isdir(sys.argv[1]) else "null")
"""


class ZoneUnavailable(RuntimeError):
    """The agent zone is gone and could not be started again."""


def zone_file() -> Optional[str]:
    return os.environ.get("GUIGYM_ZONE_FILE") or None


def load() -> Optional[dict]:
    """The zone's ``zone.json`` (pid, pidns inode, env, ...); None with no zone file configured,
    ``{}`` while it is missing or half-written (the zone is being started)."""
    path = zone_file()
    if path is None:
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _ask_init_for_zone(path: str) -> None:
    """Ask the sandbox init (ctl.sock next to zone.json, infra-only) to start the zone again."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    try:
        sock.connect(os.path.join(os.path.dirname(path), "ctl.sock"))
        sock.sendall(b'{"op": "zone"}\n')
        sock.makefile("rb").readline()
    except OSError as exc:
        raise ZoneUnavailable(f"the agent zone is gone and the init did not answer: {exc}") from None
    finally:
        sock.close()


def _open_namespaces(zone: dict) -> list[int]:
    """File descriptors of the zone's user, mount and PID namespaces, checked against the PID
    namespace recorded at its start (a recycled pid never sends a command elsewhere)."""
    fds: list[int] = []
    try:
        for ns in NAMESPACES:
            fds.append(os.open(f"/proc/{int(zone['pid'])}/ns/{ns}", os.O_RDONLY | os.O_CLOEXEC))
        if os.fstat(fds[-1]).st_ino != int(zone["pidns"]):
            raise OSError("the zone's pid now belongs to another process")
    except (OSError, KeyError, ValueError):
        for fd in fds:
            os.close(fd)
        raise
    return fds


def _enter(argv: Sequence[str], cwd: Optional[str], bounded: bool = False) -> tuple[list[str], list[int]]:
    """(argv that runs ``argv`` in the zone, fds to pass) or (argv, []) with no zone.

    ``bounded``: inside the agent's resource bounds too (zone.json's ``enter`` prefix: agent
    cgroups, rlimits), for processes the agent can drive (apps a setup launches). Commands the
    server waits for stay outside, so a zone at its bound can still be verified (issue 35)."""
    zone = load()
    if zone is None:
        return list(argv), []
    for attempt in range(2):
        try:
            fds = _open_namespaces(zone)
            break
        except (OSError, KeyError, ValueError):
            if attempt:
                raise ZoneUnavailable("the agent zone is gone") from None
            _ask_init_for_zone(zone_file() or "")
            zone = load() or {}
    env = zone.get("env") or {}
    options = ("--user", "--mount", "--pid")  # nsenter's names for NAMESPACES
    head = list(zone.get("enter") or []) if bounded else []
    wrapped = [*head, "nsenter", *[f"{opt}=/proc/self/fd/{fd}" for opt, fd in zip(options, fds)],
               "--preserve-credentials", "--", "/usr/bin/env", "-i", "-C", cwd or zone.get("home") or "/",
               *[f"{k}={v}" for k, v in sorted(env.items())], *argv]
    return wrapped, fds


def _argv(command: Any, shell: bool) -> list[str]:
    return ["/bin/sh", "-c", command] if shell else list(command)


def popen(command: Any, shell: bool = False, cwd: Optional[str] = None, bounded: bool = False,
          **kw: Any) -> subprocess.Popen:
    """``subprocess.Popen`` of ``command`` (argv list, or a string with ``shell``) in the zone;
    ``bounded``: inside the agent's resource bounds (see :func:`_enter`)."""
    argv, fds = _enter(_argv(command, shell), cwd, bounded)
    try:
        if fds:
            return subprocess.Popen(argv, pass_fds=fds, **kw)
        return subprocess.Popen(argv, cwd=cwd, **kw)
    finally:
        for fd in fds:
            os.close(fd)


def run(command: Any, shell: bool = False, cwd: Optional[str] = None, timeout: Optional[float] = None,
        input: Optional[bytes] = None, **kw: Any) -> subprocess.CompletedProcess:
    """``subprocess.run`` in the zone (same arguments; ``input`` needs ``stdin`` unset)."""
    if input is not None:
        kw["stdin"] = subprocess.PIPE
    with popen(command, shell=shell, cwd=cwd, **kw) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def which(name: str) -> Optional[str]:
    if load() is None:
        return shutil.which(name)
    r = run(["/bin/sh", "-c", 'command -v -- "$1"', "sh", name], stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, timeout=30)
    out = r.stdout.decode(errors="replace").strip()
    return out if r.returncode == 0 and out else None


def test(flag: str, path: str) -> bool:
    """``test -e/-f/-d path`` as the agent sees it."""
    if load() is None:
        return {"-e": os.path.exists, "-f": os.path.isfile, "-d": os.path.isdir}[flag](path)
    return run(["test", flag, path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL, timeout=30).returncode == 0


def read_file(path: str) -> Optional[bytes]:
    """The bytes of regular file ``path`` as the agent's uid reads it; None when it is not one."""
    if load() is None:
        if not os.path.isfile(path):
            return None
        with open(path, "rb") as f:
            return f.read()
    r = run(["/bin/sh", "-c", 'test -f "$1" || exit 3; exec cat -- "$1"', "sh", path],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    if r.returncode == 3:
        return None
    if r.returncode != 0:
        raise OSError(r.stderr.decode(errors="replace").strip() or f"cat exited with {r.returncode}")
    return r.stdout


def write_file(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file + rename) as the agent's uid."""
    if load() is None:
        d = os.path.dirname(path)
        if d:
            os.makedirs(d, exist_ok=True)
        tmp = f"{path}.part{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return
    script = 'd=$(dirname -- "$1") && mkdir -p -- "$d" && cat > "$1.part$$" && mv -f -- "$1.part$$" "$1"'
    r = run(["/bin/sh", "-c", script, "sh", path], input=data, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, timeout=300)
    if r.returncode != 0:
        raise OSError(r.stderr.decode(errors="replace").strip() or f"write exited with {r.returncode}")


def list_tree(path: str) -> Optional[dict]:
    """OSWorld's directory tree of ``path`` (None when it is not a directory)."""
    if load() is None:
        out = subprocess.run(["/usr/bin/python3", "-I", "-S", "-c", _WALK, path], capture_output=True,
                             timeout=120)
    else:
        out = run(["/usr/bin/python3", "-I", "-S", "-c", _WALK, path], stdin=subprocess.DEVNULL,
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    if out.returncode != 0:
        raise OSError(out.stderr.decode(errors="replace").strip())
    return json.loads(out.stdout)
