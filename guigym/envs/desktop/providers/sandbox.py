"""The bubblewrap command lines of one local desktop: the infra zone and the agent zone.

Two trust zones (docs/architecture.md, "Trust zones"):

* the INFRA zone is the outer sandbox made by :func:`bwrap_argv`: the init, Xvfb, D-Bus, AT-SPI,
  openbox, the in-desktop server and the terminal's tmux server (+ the xterm showing it);
* the AGENT zone is a nested sandbox the init makes at every reset (:func:`zone_argv`): every
  process an agent can drive (the shell in the terminal, apps, setup commands) runs there and
  sees neither ``/run/guigym`` (token, sockets, config, logs) nor the infra's ``/tmp``.

Layout of the INFRA zone (``SandboxSpec`` fields in brackets are host paths):

=========================  ===========================================================
``/``                      the host file system, read-only
``/home/user``             [home_dir] the agent's HOME (OSWorld's VM user ``user``), rw
``/tmp``                   [tmp_dir] the infra's private /tmp (X socket dir), rw
``/run/guigym``            [run_dir] server socket, token, control socket, tmux socket,
                           Xauthority, config, logs, the infra's own HOME; rw
``/run/guigym-zone/tmp``   [zone_tmp_dir] the agent zone's /tmp (restored on reset)
``/run/guigym-cg/<i>``     [rw_binds] the agent cgroup, one per hierarchy (infra only), rw
``/run/user/1000``         XDG_RUNTIME_DIR of the infra (its D-Bus, AT-SPI), private tmpfs
``/run/guigym-sys/server``     the in-desktop server package (read-only)
``/run/guigym-sys/bin``        shims put first on PATH: sudo, python, python3 (read-only)
``/run/guigym-sys/init.py``    the sandbox init (:mod:`.sandbox_init`), read-only
``/run/guigym-sys/template``   [template_dir] what HOME is restored from on every reset
``/etc/passwd``, group     a passwd with ``user`` (uid 1000, HOME /home/user)
=========================  ===========================================================

``hide`` paths (the guigym package and checkout, task folders, caches: they hold the expected
answers) are covered with an empty tmpfs in the infra zone, so the agent zone (which starts from
the infra's view) cannot see them either. The infra sandbox gets new user, PID, IPC and UTS
namespaces (and a network namespace with only loopback unless ``network``), a new session (no
TIOCSTI into the host terminal) and dies with the thread that spawned it. ``ro_bind_fds`` bind
already-open directories: a root host opens what the unprivileged sandbox uid may not traverse
(e.g. an interpreter under /root).
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence, Union

#: Where things live inside the sandbox (see the module docstring).
SANDBOX_HOME = "/home/user"
SANDBOX_USER = "user"
SANDBOX_UID = 1000
SANDBOX_RUN = "/run/guigym"
SANDBOX_XDG_RUNTIME = f"/run/user/{SANDBOX_UID}"
SANDBOX_OPT = "/run/guigym-sys"  # under the /run tmpfs: the host /opt is read-only
SANDBOX_SERVER_DIR = f"{SANDBOX_OPT}/server"
SANDBOX_BIN = f"{SANDBOX_OPT}/bin"
SANDBOX_INIT = f"{SANDBOX_OPT}/init.py"
SANDBOX_TEMPLATE = f"{SANDBOX_OPT}/template"
SANDBOX_ZONE_TMP = "/run/guigym-zone/tmp"  # the infra's view of the agent zone's /tmp
SANDBOX_CGROUPS = "/run/guigym-cg"  # the infra's view of the agent cgroups (providers/bounds.py)
SANDBOX_INFRA_HOME = f"{SANDBOX_RUN}/infra-home"  # HOME of infra processes (openbox, xterm)
#: What the agent zone sees of the infra's files (read-only): sudo's hash and the X cookie.
ZONE_SUDO_SHA256 = f"{SANDBOX_OPT}/sudo.sha256"
ZONE_XAUTHORITY = f"{SANDBOX_OPT}/Xauthority"
SANDBOX_PATH = f"{SANDBOX_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

PASSWD = (
    "root:x:0:0:root:/root:/bin/bash\n"
    f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_UID}:{SANDBOX_USER}:{SANDBOX_HOME}:/bin/bash\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
)
GROUP = (
    "root:x:0:\n"
    f"sudo:x:27:{SANDBOX_USER}\n"
    f"{SANDBOX_USER}:x:{SANDBOX_UID}:\n"
    "nogroup:x:65534:\n"
)


@dataclass
class SandboxSpec:
    """Everything :func:`bwrap_argv` needs; host paths must exist before bwrap starts."""

    home_dir: Path
    tmp_dir: Path
    zone_tmp_dir: Path
    run_dir: Path
    server_dir: Path
    bin_dir: Path
    init_script: Path
    template_dir: Path
    passwd_file: Path
    group_file: Path
    command: Sequence[str]
    env: dict[str, str] = field(default_factory=dict)
    network: bool = False
    hostname: str = "user-virtual-machine"
    hide: Sequence[Path] = ()
    ro_binds: Sequence[tuple[Path, str]] = ()
    ro_bind_fds: Sequence[tuple[int, str]] = ()
    info_fd: Optional[int] = None
    bwrap: str = "bwrap"
    #: (host path, sandbox path) read-write binds made last (the agent cgroups' directories)
    rw_binds: Sequence[tuple[Path, str]] = ()
    #: a cgroup namespace for the sandbox; off with cgroup v2 bounds, whose agent cgroup is a
    #: sibling of the sandbox's (outside a namespace rooted at the sandbox's own cgroup)
    unshare_cgroup: bool = True


def bwrap_argv(spec: SandboxSpec) -> list[str]:
    """The full ``bwrap ... -- command`` argv for ``spec`` (no shell involved)."""
    argv = [spec.bwrap,
            "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
            "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            *(["--unshare-cgroup-try"] if spec.unshare_cgroup else []),
            "--hostname", spec.hostname,
            "--die-with-parent", "--new-session",
            "--ro-bind", "/", "/",
            "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/run", "--tmpfs", "/var/tmp", "--tmpfs", "/home"]
    if not spec.network:
        argv.append("--unshare-net")
    binds = [Path(inside) for _, inside in spec.ro_binds]

    def under_bind(path: Path) -> bool:
        return any(Path(path) == b or b in Path(path).parents for b in binds)

    for path in spec.hide:  # before the binds below, which may live under a hidden path
        if not under_bind(path):
            argv += ["--tmpfs", str(path)]
    argv += [
        "--bind", str(spec.home_dir), SANDBOX_HOME,
        "--bind", str(spec.tmp_dir), "/tmp",
        "--bind", str(spec.run_dir), SANDBOX_RUN,
        "--bind", str(spec.zone_tmp_dir), SANDBOX_ZONE_TMP,
        "--perms", "0700", "--dir", SANDBOX_XDG_RUNTIME,
        "--ro-bind", str(spec.server_dir), SANDBOX_SERVER_DIR,
        "--ro-bind", str(spec.bin_dir), SANDBOX_BIN,
        "--ro-bind", str(spec.init_script), SANDBOX_INIT,
        "--ro-bind", str(spec.template_dir), SANDBOX_TEMPLATE,
        "--ro-bind", str(spec.passwd_file), "/etc/passwd",
        "--ro-bind", str(spec.group_file), "/etc/group",
    ]
    for host, inside in spec.ro_binds:
        argv += ["--ro-bind", str(host), inside]
    for fd, inside in spec.ro_bind_fds:
        argv += ["--ro-bind-fd", str(fd), inside]
    for host, inside in spec.rw_binds:
        argv += ["--bind", str(host), inside]
    # a hidden path inside a bound tree (guigym installed into the venv whose interpreter the
    # sandbox keeps) is hidden after the bind, on top of it: hiding it first would be undone
    for path in spec.hide:
        if under_bind(path):
            argv += ["--tmpfs", str(path)]
    if spec.info_fd is not None:
        argv += ["--info-fd", str(spec.info_fd)]
    argv.append("--clearenv")
    for key, value in sorted(spec.env.items()):
        argv += ["--setenv", key, value]
    argv.append("--")
    argv += list(spec.command)
    return argv


#: Top-level directories the agent zone sees (read-only): the system, never the rest of the
#: host file system. Anything else readable on the host (another guigym checkout under /work, a
#: user's files under /home or /srv, /mnt, /media) could hold task files and their answers, and
#: hiding paths one by one misses copies nobody listed (found by the adversarial check). /opt is
#: left out too: it is where people unpack checkouts and tools.
ZONE_SYSTEM_ROOTS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "var", "sys")


def system_root_args(root: str = "/") -> list[str]:
    """bwrap options that show the agent zone only :data:`ZONE_SYSTEM_ROOTS` of ``root``: a
    symlink (merged-/usr ``/bin -> usr/bin``) as the same symlink, a directory as a read-only
    bind (recursive, so the infra's own binds inside, e.g. ``/etc/passwd``, come along)."""
    args: list[str] = []
    for name in ZONE_SYSTEM_ROOTS:
        path = os.path.join(root, name)
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), f"/{name}"]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, f"/{name}"]
    return args


def zone_argv_head(bwrap: str = "bwrap", rebinds: Sequence[str] = (),
                   tmpfs_bytes: Optional[int] = None) -> list[str]:
    """The agent zone's ``bwrap`` options (paths as the INFRA zone sees them).

    The init appends ``--info-fd``, the environment and the command at every reset. The zone gets
    new user and PID namespaces (so SIGKILL of its pid 1 ends every process an agent started, and
    it sees no infra process), a mount view of the infra's system directories only
    (:data:`ZONE_SYSTEM_ROOTS`) minus ``/run`` (token, sockets, config,
    logs, the server package) and minus the infra's ``/tmp``; it keeps the network, IPC and UTS
    namespaces (X, loopback, MIT-SHM work). ``/dev`` is the infra's (a second ``--dev`` would make
    bwrap add a user namespace that ``nsenter`` could not enter with the caps it needs), with a
    private ``/dev/shm``. Sockets of the infra the agent must reach are bound read-only, so it can
    connect to them but never replace them: the X socket dir (when Xvfb made one; it usually listens on an abstract socket only) and the AT-SPI bus. ``rebinds``: infra
    paths outside the system directories that must stay visible (the interpreter behind
    ``python``, extra read-only binds). ``tmpfs_bytes``: size of each of the zone's own tmpfs
    (``/dev/shm``, ``/run``, ``/var/tmp``; the kernel's default is half the RAM), the disk bound.
    """
    size = ["--size", str(tmpfs_bytes)] if tmpfs_bytes else []
    argv = [bwrap, "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
            "--unshare-pid", "--as-pid-1", "--die-with-parent", "--new-session",
            *system_root_args(),
            "--dev-bind", "/dev", "/dev", *size, "--tmpfs", "/dev/shm", "--proc", "/proc",
            *size, "--tmpfs", "/run", *size, "--tmpfs", "/var/tmp",
            "--bind", SANDBOX_HOME, SANDBOX_HOME,
            "--bind", SANDBOX_ZONE_TMP, "/tmp",
            "--ro-bind-try", "/tmp/.X11-unix", "/tmp/.X11-unix",
            "--perms", "0700", "--dir", SANDBOX_XDG_RUNTIME,
            "--ro-bind-try", f"{SANDBOX_XDG_RUNTIME}/at-spi", f"{SANDBOX_XDG_RUNTIME}/at-spi",
            "--ro-bind", SANDBOX_BIN, SANDBOX_BIN,
            "--ro-bind", f"{SANDBOX_RUN}/sudo.sha256", ZONE_SUDO_SHA256,
            "--ro-bind", f"{SANDBOX_RUN}/Xauthority", ZONE_XAUTHORITY]
    for path in rebinds:
        argv += ["--ro-bind", path, path]
    return argv


def find_bwrap() -> Optional[str]:
    """Path of the ``bwrap`` binary, or None."""
    return os.environ.get("GUIGYM_BWRAP") or shutil.which("bwrap")


@functools.lru_cache(maxsize=4)
def bwrap_problem(run_as: Union[tuple[int, int], None, str] = "auto") -> Optional[str]:
    """None when bubblewrap can build our kind of sandbox here, else a sentence saying why not.

    Runs a no-op sandbox with the same namespaces once per process (about 10 ms); user
    namespaces are the usual obstacle (Docker's default seccomp profile, or
    ``kernel.unprivileged_userns_clone=0``). ``run_as``: (uid, gid) the sandbox will run as, None
    for this process's uid, "auto" for what :func:`.identity.sandbox_identity` picks (a root host
    drops to an unprivileged uid); the probe runs as it and nests a second sandbox, as the agent
    zone does.
    """
    bwrap = find_bwrap()
    if bwrap is None:
        return "bubblewrap is not installed (Debian package `bubblewrap`)"
    if run_as == "auto":  # the uid the local provider would use (not root)
        from guigym.core.errors import ConfigError
        from guigym.envs.desktop.providers.identity import sandbox_identity

        try:
            run_as = sandbox_identity()
        except ConfigError as exc:
            return str(exc)
    probe = [bwrap, "--unshare-user", "--uid", str(SANDBOX_UID), "--unshare-pid", "--unshare-net",
             "--unshare-ipc", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
             "--die-with-parent", "--new-session", "--",
             bwrap, "--unshare-user", "--uid", str(SANDBOX_UID), "--unshare-pid", "--as-pid-1",
             "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc", "--", "/bin/true"]
    kw: dict = {}
    if run_as is not None:
        kw = {"user": run_as[0], "group": run_as[1], "extra_groups": [], "cwd": "/"}
    try:
        out = subprocess.run(probe, capture_output=True, text=True, timeout=20, **kw)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not run: {exc}"
    if out.returncode != 0:
        return ("bubblewrap cannot create user/PID/network namespaces here: "
                + (out.stderr.strip() or f"exit code {out.returncode}"))
    return None
