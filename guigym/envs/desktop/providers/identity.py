"""Which host uid a local desktop runs as: never host root.

bubblewrap's ``--unshare-user --uid 1000`` maps the sandbox's uid 1000 to the uid that started
bwrap; started by root, "uid 1000" inside would be host root (issue 10, item 2: ``head
/etc/shadow`` worked from the desktop's terminal). A root host therefore starts the sandbox as the
dedicated system user :data:`AGENT_USER` (``scripts/install.sh`` creates it; so does the first
root run when ``useradd`` exists). Any other uid runs the sandbox as itself.
"""
from __future__ import annotations

import logging
import os
import pwd
import shutil
import subprocess
from typing import Optional

from guigym.core.errors import ConfigError

log = logging.getLogger(__name__)

AGENT_USER = "guigym-agent"
USERADD = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", AGENT_USER]


def sandbox_identity() -> Optional[tuple[int, int]]:
    """(uid, gid) the sandbox must be started as, or None to run it as this process's uid.

    Raises ConfigError when this process is root and :data:`AGENT_USER` neither exists nor can
    be created.
    """
    if os.geteuid() != 0:
        return None
    try:
        pw = pwd.getpwnam(AGENT_USER)
    except KeyError:
        if shutil.which("useradd") is None:
            raise ConfigError(f"guigym runs as root, so the local desktop must run as the system user "
                              f"{AGENT_USER!r}, which does not exist; create it: {' '.join(USERADD)}") from None
        out = subprocess.run(USERADD, capture_output=True, text=True, timeout=30)
        if out.returncode != 0 and "already exists" not in out.stderr:
            raise ConfigError(f"cannot create the system user {AGENT_USER!r} for the local desktop "
                              f"({' '.join(USERADD)}): {out.stderr.strip()}")
        log.warning("created the system user %s: the local desktop never runs as root", AGENT_USER)
        pw = pwd.getpwnam(AGENT_USER)
    if pw.pw_uid == 0:
        raise ConfigError(f"the system user {AGENT_USER!r} has uid 0; it must be unprivileged")
    return pw.pw_uid, pw.pw_gid
