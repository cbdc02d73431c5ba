"""VS Code in the local desktop: where code-server is installed (issue 17).

OSWorld's vs_code tasks call ``code``; in guigym's local desktop that is the shell wrapper
``sandbox_bin/code``, backed by code-server (VS Code served to a Chromium ``--app`` window),
installed by ``scripts/install_code_server.sh``. The wrapper exists in a desktop only when
code-server is installed on the host; the provider then binds its prefix at
:data:`SANDBOX_CODE_SERVER_PREFIX`, the one path the wrapper knows.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

__all__ = ["CODE_SERVER_VERSION", "DEFAULT_PREFIX", "INSTALL_HINT", "SANDBOX_CODE_SERVER_PREFIX",
           "code_server_bin", "find_code_server"]

#: the version scripts/install_code_server.sh pins (VS Code 1.100.3; the last whose engines accept node 20)
CODE_SERVER_VERSION = "4.100.3"
#: where install_code_server.sh installs by default (``GUIGYM_CODE_SERVER_PREFIX`` overrides both)
DEFAULT_PREFIX = "/opt/guigym/code-server"
#: where the desktop sees the prefix, whatever its host path
SANDBOX_CODE_SERVER_PREFIX = "/opt/guigym/code-server"
INSTALL_HINT = "GUIGYM_VSCODE=1 bash scripts/install.sh (or bash scripts/install_code_server.sh)"


def code_server_bin(prefix: str | Path) -> Path:
    """The code-server launcher inside an npm ``--prefix`` install."""
    return Path(prefix) / "node_modules" / ".bin" / "code-server"


def find_code_server() -> Optional[Path]:
    """The host prefix of a usable code-server install (launcher executable, ``node`` on the
    host PATH), or None. ``GUIGYM_CODE_SERVER_PREFIX`` names a non-default prefix."""
    prefix = Path(os.environ.get("GUIGYM_CODE_SERVER_PREFIX") or DEFAULT_PREFIX)
    launcher = code_server_bin(prefix)
    if not os.access(launcher, os.X_OK):
        return None
    # the launcher is a `#!/usr/bin/env node` script; the desktop sees the host's /usr
    if not any(os.access(Path(d) / "node", os.X_OK) for d in ("/usr/bin", "/usr/local/bin")):
        return None
    return prefix
