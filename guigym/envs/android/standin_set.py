"""``guigym android standin``: the stand-in device (standin.py) with a screen set the shipped task
suites can run on, for trying AndroidLab-v0 / AndroidWorld-v0 without a phone.

    guigym android standin [--port 0]
    # prints: serial 127.0.0.1:PORT, then serves until Ctrl-C; in another shell:
    guigym eval --env AndroidWorld-v0 --env-opt serial=127.0.0.1:PORT --tasks OpenAppTaskEval --agent random --out runs/aw

The screen set (:func:`app_screens`): a launcher home screen with one icon per app the suites
open (every package of ``controller.APP_PACKAGES`` and of AndroidLab's task YAMLs, all
"installed": ``pm list packages`` lists them and ``monkey -p`` opens them), and per app a screen
titled with its name whose root node carries its package (so ``dumpsys activity activities``
names it as the resumed app). Tapping an icon opens its app; Back and Home work. It is a
STAND-IN: the apps have no content, so tasks judged on app state (alarms, contacts, files) score
0 whatever the agent does; tasks judged on settings or the foreground app (e.g.
``OpenAppTaskEval``) can succeed.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Optional, Sequence
from xml.sax.saxutils import quoteattr

#: the stand-in's screen (pixels): a common 1080x2400 phone
WIDTH, HEIGHT = 1080, 2400
LAUNCHER = "com.android.launcher"
_COLS, _ROW_H, _TOP = 4, 200, 100


def _node(text: str, package: str, bounds: tuple[int, int, int, int], cls: str = "android.widget.TextView",
          clickable: bool = False, children: str = "") -> str:
    x1, y1, x2, y2 = bounds
    attrs = (f'index="0" text={quoteattr(text)} class="{cls}" package="{package}" content-desc="" '
             f'clickable="{str(clickable).lower()}" enabled="true" bounds="[{x1},{y1}][{x2},{y2}]"')
    return f"<node {attrs}>{children}</node>" if children else f"<node {attrs}/>"


def _dump(root: str) -> str:
    return f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><hierarchy rotation="0">{root}</hierarchy>'


def app_packages() -> dict[str, str]:
    """App name -> package for every app the shipped suites open (one name per package)."""
    from guigym.envs.android.androidlab_tasks import load_dir
    from guigym.envs.android.controller import APP_PACKAGES
    from guigym.envs.android.env import ANDROIDLAB_SUITE

    out: dict[str, str] = {}
    for name, pkg in APP_PACKAGES.items():
        out.setdefault(pkg, name.title())
    for task in load_dir(ANDROIDLAB_SUITE):
        pkg = str(task.extra.get("package") or "")
        if "." in pkg:  # a package name (a few YAMLs name the app instead)
            out.setdefault(pkg, pkg.rsplit(".", 1)[-1].title())
    return {name: pkg for pkg, name in sorted(out.items(), key=lambda kv: kv[1])}


def icon_bounds(i: int) -> tuple[int, int, int, int]:
    """Bounds of the ``i``-th icon on the home screen (4 columns, rows of 200 px)."""
    w = WIDTH // _COLS
    row, col = divmod(i, _COLS)
    return (col * w, _TOP + row * _ROW_H, (col + 1) * w, _TOP + (row + 1) * _ROW_H)


def app_screens() -> dict[str, object]:
    """Keyword arguments of :class:`~guigym.envs.android.standin.StandinDevice` for the screen set:
    ``screens`` (``home`` + one per package), ``transitions`` (icon -> app), ``home``, ``packages``."""
    apps = app_packages()
    icons = "".join(_node(name, LAUNCHER, icon_bounds(i), clickable=True) for i, name in enumerate(apps))
    screens: dict[str, object] = {"home": _dump(_node("", LAUNCHER, (0, 0, WIDTH, HEIGHT),
                                                       "android.widget.FrameLayout", children=icons))}
    for name, pkg in apps.items():
        title = _node(name, pkg, (0, 80, WIDTH, 240))
        screens[pkg] = _dump(_node("", pkg, (0, 0, WIDTH, HEIGHT), "android.widget.FrameLayout", children=title))
    transitions = {"home": [(list(icon_bounds(i)), pkg) for i, pkg in enumerate(apps.values())]}
    return {"screens": screens, "transitions": transitions, "home": "home", "packages": list(apps.values()),
            "settings": {"global": {"airplane_mode_on": "0", "bluetooth_on": "0", "wifi_on": "1"}}}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``guigym android standin``: start the stand-in with :func:`app_screens`, print its serial,
    serve until Ctrl-C or SIGTERM (exit 0)."""
    from guigym.envs.android.standin import StandinDevice

    p = argparse.ArgumentParser(prog="guigym android", description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=["standin"])
    p.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (default 0: any free port)")
    args = p.parse_args(argv)
    dev = StandinDevice(**app_screens(), port=args.port).start()  # type: ignore[arg-type]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"serial {dev.serial}", flush=True)
    print(f"a stand-in device (not an emulator) with {len(dev.packages)} empty apps; try:\n"
          f"  guigym eval --env AndroidWorld-v0 --env-opt serial={dev.serial} --tasks OpenAppTaskEval "
          f"--agent random --out runs/standin\nCtrl-C stops it.", file=sys.stderr, flush=True)
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        dev.stop()
    return 0
