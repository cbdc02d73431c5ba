"""Old import paths of the desktop evaluators and setup, kept for one release (issue 33).

The evaluators moved to OSWorld's layout, ``evaluators/{getters,metrics}/<family>.py`` over
``evaluators/base.py``; :data:`MOVED` maps each old module name to where its code is now.
``import guigym.envs.desktop.metrics_gimp`` (and ``from ... import``) still works: a finder on
``sys.meta_path`` hands back the new module itself (same object, so monkeypatching reaches the
code), with a DeprecationWarning naming the new path. The three modules that were split
(``getters``, ``metrics``, ``office``) become a read-only view over their new homes, looked up in
order, with every getter and metric loaded as the old modules did on import. Remove in 0.3.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings
from typing import Any, Optional, Sequence

_PKG = "guigym.envs.desktop"
_EV = "guigym.envs.desktop.evaluators"

#: old module (under guigym.envs.desktop) -> new module(s); several = a view over them, in order
MOVED: dict[str, tuple[str, ...]] = {
    "getters": (_EV, f"{_EV}.base", f"{_EV}.getters.general", f"{_EV}.getters.file",
                f"{_EV}.getters.misc", f"{_EV}.getters.info", f"{_EV}.getters.vlc", f"{_EV}.getters.gimp"),
    "getters_apps": (f"{_EV}.getters.vlc",),
    "getters_browser": (f"{_EV}.getters.browser",),
    "getters_chrome": (f"{_EV}.getters.chrome",),
    "getters_slides": (f"{_EV}.getters.impress",),
    "getters_system": (f"{_EV}.getters.system",),
    "port_owner": (f"{_EV}.getters.port_owner",),
    "metrics": (_EV, f"{_EV}.base", f"{_EV}.metrics.general", f"{_EV}.metrics.table",
                f"{_EV}.metrics.docs"),
    "metrics_apps": (f"{_EV}.metrics.apps", f"{_EV}.metrics.thunderbird", f"{_EV}.metrics.vlc"),
    "metrics_chrome": (f"{_EV}.metrics.chrome",),
    "metrics_docs": (f"{_EV}.metrics.docs",),
    "metrics_files": (f"{_EV}.metrics.file",),
    "metrics_gimp": (f"{_EV}.metrics.gimp",),
    "metrics_images": (f"{_EV}.metrics.images",),
    "metrics_impress": (f"{_EV}.metrics.impress",),
    "metrics_misc": (f"{_EV}.metrics.misc", f"{_EV}.metrics.vlc", f"{_EV}.metrics.thunderbird"),
    "metrics_slides": (f"{_EV}.metrics.slides",),
    "metrics_writer": (f"{_EV}.metrics.writer",),
    "office": (f"{_EV}.base", f"{_EV}.metrics.table", f"{_EV}.metrics.docs", f"{_EV}.metrics.utils",
               f"{_EV}.metrics.table_rules"),
    "office_rules": (f"{_EV}.metrics.table_rules",),
    "media": (f"{_EV}.metrics.media",),
    "textsim": (f"{_EV}.textsim",),
    "setup_history": (f"{_PKG}.setup.history",),
}


def _view(name: str, sources: Sequence[str]) -> types.ModuleType:
    """A module whose attributes are looked up in ``sources`` in order (the old split module)."""
    mods = [importlib.import_module(s) for s in sources]
    importlib.import_module(_EV).load_all()  # the old getters/metrics modules loaded every family
    view = types.ModuleType(name, f"Moved: {', '.join(sources)} (see guigym.envs.desktop._moved).")

    def __getattr__(attr: str) -> Any:
        for m in mods:
            if hasattr(m, attr):
                return getattr(m, attr)
        raise AttributeError(f"module {name!r} has no attribute {attr!r} (it moved to {', '.join(sources)})")

    view.__getattr__ = __getattr__  # type: ignore[method-assign]  # PEP 562
    view.__all__ = sorted({a for m in mods for a in getattr(m, "__all__", ())})  # type: ignore[attr-defined]
    return view


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves the old names in :data:`MOVED`; nothing else."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Any = None) -> Any:
        prefix, _, old = fullname.rpartition(".")
        if prefix != _PKG or old not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> types.ModuleType:
        old = spec.name.rpartition(".")[2]
        sources = MOVED[old]
        warnings.warn(f"{spec.name} moved to {' + '.join(sources)}; the old path goes in guigym 0.3",
                      DeprecationWarning, stacklevel=2)
        if len(sources) == 1:
            return importlib.import_module(sources[0])  # the module itself: one object, two names
        return _view(spec.name, sources)

    def exec_module(self, module: types.ModuleType) -> None:
        pass  # already executed under its new name


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (after the path finders: real modules win)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
