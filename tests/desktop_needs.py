"""Skip rule shared by the tests that start a real local desktop."""
from __future__ import annotations

import os
import shutil

import pytest

CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need_desktop() -> None:
    """Skip (fail in CI, where .ci/run installs them) when the local desktop cannot run here."""
    missing = [t for t in ("bwrap", "Xvfb", "openbox", "xterm", "xdotool") if shutil.which(t) is None]
    try:
        from guigym.envs.desktop.client import DesktopClient  # noqa: F401
        from guigym.envs.desktop.providers.local import LocalProvider  # noqa: F401
    except ImportError as e:
        missing.append(f"guigym desktop module ({e})")
    if missing:
        if CI:
            pytest.fail(f"the local desktop needs {missing}, which .ci/run installs")
        pytest.skip(f"the local desktop needs {missing}")
