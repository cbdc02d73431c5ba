"""Moved to :mod:`guigym.models.hf_policy` (issue 33): model code that agents, serve and the trainer
share sits below all three. This alias keeps the old path working for one release; import
``guigym.models.hf_policy`` instead. It is the same module object, so private names and monkeypatching
reach the code through either path.
"""
import sys

import guigym.models.hf_policy as _moved

sys.modules[__name__] = _moved
