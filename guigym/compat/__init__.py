"""Run code written for other GUI-agent packages on guigym's environments, unchanged.

* :mod:`guigym.compat.osworld`: OSWorld's own ``desktop_env.DesktopEnv`` (PyPI ``desktop-env``)
  drives guigym's local sandbox desktop (docs/coming_from_osworld.md).

Layer: above ``envs`` (it starts envs' desktops), below agents/train/eval, which never import it.
"""
