"""Moved to :mod:`guigym.models.logprobs` (issue 33): model code that agents, serve and the trainer
share sits below all three. This alias keeps the old path working for one release; import
``guigym.models.logprobs`` instead. It is the same module object, so private names and monkeypatching
reach the code through either path.
"""
import sys

import guigym.models.logprobs as _moved

sys.modules[__name__] = _moved
