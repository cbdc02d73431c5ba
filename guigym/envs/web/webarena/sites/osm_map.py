"""The embedded map (WebArena's ``map`` key): map_app.py over real OpenStreetMap data of central
Helsinki (osm_data.py), served on loopback by its own process.

The app is read-only (search, place pages, directions), so :meth:`MapSite.reset` has nothing to
restore. Its URLs follow OpenStreetMap.org's (``/search?query=``, ``/node/<id>``,
``/directions?engine=fossgis_osrm_foot&route=LAT,LON;LAT,LON``), which WebArena's map tasks
compare with ``url_match``.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Optional, Union

from guigym.core.errors import EnvInfraError
from guigym.core.waits import Deadline
from guigym.envs.web.webarena.sites.osm_data import pbf_path
from guigym.envs.web.webarena.sites._process import (checked_timeout, free_port, kill_group, start_deadline,
                                                     start_failed, wait_answering)


#: idle-machine seconds the server may take to answer its first request (x the load factor)
START_BASE_S = 60.0


class MapSite:
    """The map app on 127.0.0.1 (see the module docstring).

    Args:
        workdir: the site's own directory (created; the app's working directory).
        key: the WebArena site key it stands for (default ``map``).
        pbf: the OpenStreetMap extract (default: osm_data's cached Helsinki file).
        start_timeout_s: how long the app may take to load the data and answer;
            None (default): 60 idle-machine seconds stretched by the machine's load
            (:func:`._process.start_deadline`); a number: exactly that many seconds.
    """

    def __init__(self, workdir: Union[str, Path], key: str = "map", pbf: Optional[Path] = None,
                 start_timeout_s: Optional[float] = None) -> None:
        self.workdir = Path(workdir)
        self.key = key
        self.read_only = True  # reset() restores nothing: the env may open a start page ahead
        self.pbf = Path(pbf) if pbf is not None else pbf_path()
        self.start_timeout_s = checked_timeout("start_timeout_s", start_timeout_s)
        self.port: Optional[int] = None
        self._proc: Optional[subprocess.Popen[bytes]] = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise EnvInfraError("the map site is not started")
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> str:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for _ in range(3):  # the port may be taken between choosing and binding it
            self.port = free_port()
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "guigym.envs.web.webarena.sites.map_app", "--pbf", str(self.pbf),
                 "--port", str(self.port)],
                # only what Python needs: no host secrets reach the app
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.workdir), "LANG": "C.UTF-8",
                     "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
                cwd=self.workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
            deadline = self.start_deadline()
            if self._wait_ready(deadline):
                return self.url
            err = self._stderr()
            self.close()
            if err:
                raise EnvInfraError(f"the map app failed to start: {err}")
            if deadline.expired():
                break  # a hang, not a port taken meanwhile
        raise EnvInfraError(start_failed("the map app", deadline))

    def _stderr(self) -> str:
        proc = self._proc
        if proc is None or proc.poll() is None or proc.stderr is None:
            return ""
        return proc.stderr.read().decode(errors="replace")[-500:]

    def start_deadline(self) -> Deadline:
        """The hang guard of one start attempt (the map app to answer on 127.0.0.1)."""
        return start_deadline(self.start_timeout_s, START_BASE_S, "the map app to answer on 127.0.0.1")

    def _wait_ready(self, deadline: Deadline) -> bool:
        return wait_answering(self._proc, f"{self.url}/search?query=", deadline, request_timeout_s=2, poll_s=0.1)

    def reset(self) -> float:
        """Nothing to restore: the app is read-only."""
        return 0.0

    def close(self) -> None:
        proc, self._proc = self._proc, None
        kill_group(proc)
        if proc is not None and proc.stderr is not None:
            proc.stderr.close()

    def __enter__(self) -> "MapSite":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
