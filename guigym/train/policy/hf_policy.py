"""Moved to :mod:`guigym.models.hf_policy` (issue 33: model code used by agents, serve and the trainer sits below
all three). This alias keeps the old import path working for one release and will then be
removed: import ``guigym.models.hf_policy`` instead. The alias is the same module object, so its private names
and monkeypatching work through either path.
"""
import sys

import guigym.models.hf_policy as _moved

sys.modules[__name__] = _moved
