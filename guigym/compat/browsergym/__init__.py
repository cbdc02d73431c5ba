"""guigym's tasks as BrowserGym tasks (issue 36, item 3; docs/coming_from_browsergym.md).

``import guigym.compat.browsergym`` in a Python that has ``browsergym-core`` registers, with
BrowserGym's own ``register_task``:

* ``browsergym/guigym.miniwob.<name>``: every MiniWoB++ task of the installed ``miniwob`` package;
* ``browsergym/guigym.webarena.<task_id>``: every task of guigym's embedded WebArena sites'
  suites (Fossil, kiwix, Spirit, the Oscar shop, the map).

``gym.make(id)`` then builds BrowserGym's unmodified ``BrowserEnv`` on them, so its
``HighLevelActionSet`` and AgentLab's agents run unchanged. :mod:`.tasks` holds the task classes
(BrowserGym's side); :mod:`.host` runs an embedded site in guigym's own Python.

Without browsergym installed (guigym's own Python, which runs :mod:`.host`) importing this
package registers nothing and imports only the standard library.
"""
from __future__ import annotations

import importlib.util

#: the ids registered by this import (empty without browsergym-core)
REGISTERED: list[str] = []

if importlib.util.find_spec("browsergym") is not None and importlib.util.find_spec("browsergym.core") is not None:
    from guigym.compat.browsergym.tasks import register

    REGISTERED = register()
