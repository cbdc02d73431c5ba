"""Moved to :mod:`guigym.models.tiny` (issue 33: model code used by agents, serve and the trainer sits below
all three). This alias keeps the old import path working for one release and will then be
removed: import ``guigym.models.tiny`` instead. The alias is the same module object, so its private names
and monkeypatching work through either path.
"""
import runpy
import sys

import guigym.models.tiny as _moved

if __name__ == "__main__":  # python -m guigym.train.policy.tiny DIR: run the new module's CLI
    runpy.run_module("guigym.models.tiny", run_name="__main__", alter_sys=True)
else:
    sys.modules[__name__] = _moved
