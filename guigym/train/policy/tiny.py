"""Moved to :mod:`guigym.models.tiny` (issue 33): model code that agents, serve and the trainer
share sits below all three. This alias keeps the old path working for one release; import
``guigym.models.tiny`` instead. It is the same module object, so private names and monkeypatching
reach the code through either path.
"""
import sys

if __name__ == "__main__":  # python -m guigym.train.policy.tiny DIR: run the new module's CLI
    import runpy

    runpy.run_module("guigym.models.tiny", run_name="__main__", alter_sys=True)
else:
    import guigym.models.tiny as _moved

    sys.modules[__name__] = _moved
