"""OSWorld's info getters (``desktop_env/evaluators/getters/info.py``): the screen and window
size and a directory listing.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from guigym.envs.desktop.evaluators.base import GETTERS, GetterContext, _need

# --------------------------------------------------------------------------- info.py


@GETTERS.register("vm_screen_size")
def get_vm_screen_size(ctx: GetterContext, spec: Mapping[str, Any]) -> dict[str, int]:
    """``{"width": w, "height": h}`` as OSWorld's ``/screen_size`` JSON."""
    w, h = ctx.client.screen_size()
    return {"width": int(w), "height": int(h)}


@GETTERS.register("vm_window_size")
def get_vm_window_size(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[dict[str, int]]:
    """``{"width", "height"}`` of the first window of X class ``app_class_name`` (xdotool in
    the desktop); None when there is none."""
    cls = _need(spec, "app_class_name")
    res = ctx.client.execute(["sh", "-c", 'w=$(xdotool search --class "$1" | head -n1) && '
                              '[ -n "$w" ] && xdotool getwindowgeometry --shell "$w"', "sh", cls],
                             shell=False, timeout=30)
    out = str(res.get("output") or "") if isinstance(res, Mapping) else ""
    geo = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    if "WIDTH" not in geo or "HEIGHT" not in geo:
        return None
    return {"width": int(geo["WIDTH"]), "height": int(geo["HEIGHT"])}


@GETTERS.register("list_directory")
def get_list_directory(ctx: GetterContext, spec: Mapping[str, Any]) -> Any:
    """The directory tree of ``path`` in the desktop, as the server's ``/list_directory``
    returns it (OSWorld: ``{"type": "directory", "name", "children": [...]}``)."""
    tree = ctx.client.list_directory(_need(spec, "path"))
    if isinstance(tree, Mapping) and "directory_tree" in tree:  # the raw endpoint JSON
        return tree["directory_tree"]
    return tree
