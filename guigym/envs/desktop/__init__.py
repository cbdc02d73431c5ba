"""OSWorld-compatible desktop platform.

``env`` (OSWorld-v0) drives a desktop through ``client`` (the in-desktop ``server/``), born by
one of ``providers/``; ``tasks`` loads OSWorld task JSON unmodified into
:class:`guigym.core.Task`; ``setup/`` runs a task's config steps; ``evaluators/`` holds the
OSWorld getters and metrics (``evaluators/{getters,metrics}/<family>.py`` over
``evaluators/base.py``) and the ``conj``-aware ``evaluate``; ``suite/`` the embedded tasks;
``check`` is ``guigym tasks check``; ``cache``/``coverage`` are ``guigym osworld cache`` and
``guigym tasks coverage``. Nothing heavy is imported here; import the submodules directly.

The modules' old names (``guigym.envs.desktop.metrics``, ``getters_chrome``, ``office``, ...)
still import for one release, with a DeprecationWarning (:mod:`._moved`).
"""
from guigym.envs.desktop._moved import install as _install_moved

_install_moved()
