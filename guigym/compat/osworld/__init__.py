"""OSWorld's ``DesktopEnv`` on guigym's local desktop (issue 36, item 2).

Two halves, in two interpreters, because desktop-env's pins (gymnasium 0.28, numpy<2, torch 2.5)
clash with guigym's:

* :mod:`.provider` runs in the OSWorld user's Python next to the unmodified ``desktop_env``
  package (stdlib only, plus ``desktop_env`` itself). ``from guigym.compat.osworld import
  DesktopEnv`` is the one-line change: it returns OSWorld's own ``DesktopEnv`` whose VM is a
  guigym local desktop.
* :mod:`.bridge` runs in guigym's Python: it starts the local sandbox desktop and serves
  OSWorld's in-VM HTTP protocol for it on a loopback port, token required.

Nothing here is imported by ``import guigym``; this package imports only the standard library
at module level, so it loads in desktop-env's venv.
"""
from __future__ import annotations

from typing import Any

__all__ = ["DesktopEnv", "register"]


def __getattr__(name: str) -> Any:
    # lazy: the bridge side (guigym's python) never needs desktop_env importable
    if name in __all__:
        from guigym.compat.osworld import provider

        return getattr(provider, name)
    raise AttributeError(name)
