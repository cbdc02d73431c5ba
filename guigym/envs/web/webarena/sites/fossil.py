"""Fossil (Debian ``fossil``) as an embedded code-hosting site (WebArena's ``gitlab`` key).

One Fossil repository is one SQLite file holding tickets, wiki pages and users with their
roles, and ``fossil server`` opens it afresh for every request (one forked child per
connection). So a reset is a file swap between requests: the seeded repository is copied next
to the live one and renamed over it (atomic); no server restart.

* :meth:`FossilSite.build` seeds the repository from a fixed list (:data:`TICKETS`,
  :data:`WIKI`, :data:`USERS`) through Fossil's own command line (nothing downloaded).
* :meth:`FossilSite.start` serves it with ``fossil server --localhost`` (127.0.0.1 only) on a
  free port; ``url`` is its base URL.
* :meth:`FossilSite.reset` restores the seed (seconds taken are returned).

Fossil keeps its per-user settings in ``FOSSIL_HOME``; we point it into the site's own
directory, so nothing outside it is written.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Optional, Union

from guigym.core.errors import ConfigError, EnvInfraError
from guigym.core.waits import Deadline
from guigym.envs.web.webarena.login import LoginRecipe
from guigym.envs.web.webarena.sites._process import (checked_timeout, free_port, kill_group, start_deadline,
                                                     start_failed, wait_answering)

#: (title, type, status, priority): the ticket table of the seed
TICKETS: tuple[tuple[str, str, str, str], ...] = (
    ("Crash on start", "Code_Defect", "Open", "Immediate"),
    ("Slow search on large repositories", "Code_Defect", "Fixed", "High"),
    ("Add dark theme", "Feature_Request", "Open", "Low"),
    ("Typo in the install guide", "Documentation", "Closed", "Low"),
    ("Export tickets as CSV", "Feature_Request", "Review", "Medium"),
    ("Login page rejects long passwords", "Code_Defect", "Open", "High"),
)
#: wiki page name -> markdown body
WIKI: dict[str, str] = {
    "Roadmap": "# Roadmap\n\nRelease 2.0 ships the new search index in March.\n",
    "Install": "# Install\n\nRun `make install` as root, then open port 8080.\n",
    "Contributors": "# Contributors\n\nbyteblaze maintains the project; Alice Chen reviews patches.\n",
}
#: (login, password, capabilities, contact): users and roles (Fossil capability letters:
#: s = setup/admin, d/e/i/o = developer rights, r/n/w = ticket read/new/write)
USERS: tuple[tuple[str, str, str, str], ...] = (
    ("byteblaze", "hello1234", "s", "byteblaze@example.com"),
    ("alice", "alice1234", "deiorw", "alice.chen@example.com"),
    ("bob", "bob12345", "jnrw", "bob@example.com"),
)
PROJECT_NAME = "Orbit"
#: Fossil's login form (``/login``: fields ``u`` and ``p``, button ``in``); ``/setup`` is the probe:
#: a logged-out browser is redirected from it to ``/login?g=setup``. WebArena's ``gitlab`` account
#: (byteblaze / hello1234) is the seeded admin.
LOGINS = {"gitlab": LoginRecipe("/login", (("css:#u", "username"), ("css:#p", "password")), "css:input[name=in]",
                                "/setup")}


#: idle-machine seconds the server may take to answer its first request (x the load factor)
START_BASE_S = 20.0


class FossilSite:
    """A seeded Fossil repository served on loopback (see the module docstring).

    Args:
        workdir: the site's own directory (created): ``seed.fossil``, ``live.fossil``, ``home/``.
        key: the WebArena site key it stands for (default ``gitlab``).
        binary: the ``fossil`` executable.
        start_timeout_s: how long the server may take to answer its first request;
            None (default): 20 idle-machine seconds stretched by the machine's load
            (:func:`._process.start_deadline`); a number: exactly that many seconds.
    """

    def __init__(self, workdir: Union[str, Path], key: str = "gitlab", binary: str = "fossil",
                 start_timeout_s: Optional[float] = None) -> None:
        self.workdir = Path(workdir)
        self.key = key
        self.logins = {key: LOGINS["gitlab"]}
        #: Fossil keeps login sessions in the repository's user table, so a reset logs everyone out
        self.resets_sessions = True
        self.binary = shutil.which(binary) or ""
        if not self.binary:
            raise ConfigError(f"the Fossil site needs the {binary!r} program (Debian package 'fossil', "
                              "scripts/install.sh)")
        self.start_timeout_s = checked_timeout("start_timeout_s", start_timeout_s)
        self.seed = self.workdir / "seed.fossil"
        self.live = self.workdir / "live.fossil"
        self.home = self.workdir / "home"
        self.port: Optional[int] = None
        self._proc: Optional[subprocess.Popen[bytes]] = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise EnvInfraError("the Fossil site is not started")
        return f"http://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        # only what fossil needs: no host secrets reach the server
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "FOSSIL_HOME": str(self.home),
                "HOME": str(self.home), "USER": USERS[0][0], "LANG": "C.UTF-8"}

    def _fossil(self, *args: str, repo: Optional[Path] = None, stdin: Optional[bytes] = None) -> str:
        cmd = [self.binary, *args] + (["-R", str(repo)] if repo is not None else [])
        res = subprocess.run(cmd, input=stdin, capture_output=True, env=self._env(), cwd=self.workdir, timeout=60)
        if res.returncode != 0:
            raise EnvInfraError(f"fossil {' '.join(args[:2])} failed: {res.stderr.decode(errors='replace')[:300]}")
        return res.stdout.decode(errors="replace")

    # ---- seed ---------------------------------------------------------------------------------------
    def build(self) -> Path:
        """Create ``seed.fossil`` (tickets, wiki, users; see the module constants) atomically."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(exist_ok=True)
        tmp = self.workdir / ".seed.building.fossil"
        tmp.unlink(missing_ok=True)
        admin, password, _, _ = USERS[0]
        self._fossil("init", str(tmp), "--admin-user", admin)
        self._fossil("user", "password", admin, password, repo=tmp)
        for login, pw, caps, contact in USERS[1:]:
            self._fossil("user", "new", login, contact, pw, repo=tmp)
            self._fossil("user", "capabilities", login, caps, repo=tmp)
        self._fossil("sqlite3", repo=tmp, stdin=(
            f"REPLACE INTO config(name, value, mtime) VALUES ('project-name', '{PROJECT_NAME}', now());").encode())
        for name, body in WIKI.items():
            page = self.workdir / ".page.md"
            page.write_text(body, encoding="utf-8")
            self._fossil("wiki", "create", name, str(page), "--mimetype", "text/x-markdown", repo=tmp)
            page.unlink()
        for title, kind, status, priority in TICKETS:
            self._fossil("ticket", "add", "title", title, "type", kind, "status", status, "priority", priority,
                         repo=tmp)
        os.replace(tmp, self.seed)
        return self.seed

    # ---- serve --------------------------------------------------------------------------------------
    def start(self) -> str:
        """Build the seed if missing, restore it, serve on 127.0.0.1; returns the base URL."""
        if not self.seed.exists():
            self.build()
        self.reset()
        for _ in range(3):  # the port may be taken between choosing and binding it
            self.port = free_port()
            self._proc = subprocess.Popen(
                [self.binary, "server", "--localhost", "--port", str(self.port), str(self.live)],
                env=self._env(), cwd=self.workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True)
            deadline = self.start_deadline()
            if self._wait_ready(deadline):
                return self.url
            self.close()
            if deadline.expired():
                break  # a hang, not a port taken meanwhile
        raise EnvInfraError(start_failed("fossil server", deadline))

    def start_deadline(self) -> Deadline:
        """The hang guard of one start attempt (the fossil server to answer on 127.0.0.1)."""
        return start_deadline(self.start_timeout_s, START_BASE_S, "the fossil server to answer on 127.0.0.1")

    def _wait_ready(self, deadline: Deadline) -> bool:
        return wait_answering(self._proc, f"{self.url}/home", deadline, request_timeout_s=2, poll_s=0.05)

    def reset(self) -> float:
        """Put the seed back (copy next to the live file, then rename over it); returns seconds."""
        t0 = time.perf_counter()
        tmp = self.workdir / ".live.restoring.fossil"
        shutil.copyfile(self.seed, tmp)
        os.replace(tmp, self.live)
        return time.perf_counter() - t0

    def close(self) -> None:
        proc, self._proc = self._proc, None
        kill_group(proc)

    def __enter__(self) -> "FossilSite":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

