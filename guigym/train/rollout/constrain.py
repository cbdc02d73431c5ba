"""Moved to :mod:`guigym.models.constrain` (issue 33: model code used by agents, serve and the trainer sits below
all three). This alias keeps the old import path working for one release and will then be
removed: import ``guigym.models.constrain`` instead. The alias is the same module object, so its private names
and monkeypatching work through either path.
"""
import sys

import guigym.models.constrain as _moved

sys.modules[__name__] = _moved
