"""OSWorld system getters: the wallpaper, the default video player, a VS Code command's output
file, a row of a desktop spreadsheet. Registered on import (see
:func:`guigym.envs.desktop.evaluators.load_all`).

Names and return values follow ``desktop_env/evaluators/getters/`` ``info.py``
(``get_vm_wallpaper``), ``vlc.py`` (``get_default_video_player``), ``vscode.py``
(``get_vscode_config``) and ``file.py`` (``get_content_from_vm_file``).
"""
from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any, Optional

from guigym.core import actions as A
from guigym.core.errors import EnvInfraError, TaskSpecError
from guigym.envs.desktop.evaluators.base import (
    GETTERS,
    GetterContext,
    _cache_target,
    _need,
    atomic_write,
)
from guigym.envs.desktop.evaluators.getters.file import get_vm_file

log = logging.getLogger(__name__)

__all__ = ["VIDEO_SUBTYPES", "get_vm_wallpaper", "get_default_video_player", "get_vscode_config",
           "get_content_from_vm_file"]


@GETTERS.register("vm_wallpaper")
def get_vm_wallpaper(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[str]:
    """The desktop's wallpaper image (the server's ``POST /wallpaper``, the file GNOME's
    ``picture-uri`` names) saved to ``cache_dir/dest``; its path, or None when the server finds
    no wallpaper file (upstream then fails writing None)."""
    target = _cache_target(ctx, _need(spec, "dest"))
    status, _, data = ctx.client.request("POST", "/wallpaper")
    if status != 200:
        log.info("vm_wallpaper: the desktop has no wallpaper file (HTTP %s: %r)", status, data[:200])
        return None
    atomic_write(target, data)
    return str(target)


#: the ``video/<subtype>`` MIME types OSWorld asks ``xdg-mime`` about (its list, duplicates dropped)
VIDEO_SUBTYPES = (
    "3gp", "3gpp", "3gpp2", "avi", "divx", "dv", "fli", "flv", "mp2t", "mp4", "mp4v-es", "mpeg",
    "mpeg-system", "msvideo", "ogg", "quicktime", "vnd.divx", "vnd.mpegurl", "vnd.rn-realvideo", "webm",
    "x-anim", "x-avi", "x-flc", "x-fli", "x-flv", "x-m4v", "x-matroska", "x-mpeg", "x-mpeg-system", "x-mpeg2",
    "x-ms-asf", "x-ms-asf-plugin", "x-ms-asx", "x-ms-wm", "x-ms-wmv", "x-ms-wmx", "x-ms-wvx", "x-msvideo",
    "x-nsv", "x-ogm", "x-ogm+ogg", "x-theora", "x-theora+ogg",
)

# one line per subtype: the .desktop file xdg-mime names as its default (empty when none)
_XDG_DEFAULTS = 'for t in "$@"; do printf "%s\\n" "$(xdg-mime query default "video/$t" 2>/dev/null)"; done'


@GETTERS.register("default_video_player")
def get_default_video_player(ctx: GetterContext, spec: Mapping[str, Any]) -> str:
    """The ``.desktop`` file that is the default application of most video types
    (``xdg-mime query default video/<t>`` for each of :data:`VIDEO_SUBTYPES`), e.g.
    ``"vlc.desktop"``; ``"unknown"`` when no type has one. Ties go to the type listed first, as
    upstream. Upstream runs one command per type and lists every type but ``x-ogm+ogg`` twice, so
    counts double there (the same winner unless that one type breaks a tie); it returns the name
    with xdg-mime's trailing newline, stripped here. Linux only, as upstream."""
    res = ctx.client.execute(["sh", "-c", _XDG_DEFAULTS, "sh", *VIDEO_SUBTYPES], shell=False, timeout=60)
    if not isinstance(res, Mapping) or res.get("status") not in (None, "success"):
        raise EnvInfraError(f"asking xdg-mime for the default video player failed: {res!r}"[:500])
    apps = [line.strip() for line in str(res.get("output") or "").splitlines() if line.strip()]
    if not apps:
        return "unknown"
    return Counter(apps).most_common(1)[0][0]


#: seconds to let VS Code's command palette open before typing (upstream's separate /execute
#: calls took about this long) and to let the command write its file (upstream's 1 s)
_PALETTE_OPEN_S, _COMMAND_DONE_S = 0.5, 1.0


@GETTERS.register("vscode_config")
def get_vscode_config(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[str]:
    """Run the VS Code command ``vscode_extension_command`` (ctrl+shift+p, type its name, enter,
    in the focused VS Code window), wait, then copy ``path`` to ``cache_dir/dest`` as ``vm_file``
    (None when the command wrote no file). OSWorld's tasks ship an extension whose command writes
    the open folder's name to that file."""
    command = _need(spec, "vscode_extension_command")
    path, dest = _need(spec, "path"), _need(spec, "dest")
    ctx.client.act(A.Hotkey(keys=("ctrl", "shift", "p")))
    time.sleep(_PALETTE_OPEN_S)
    ctx.client.act(A.Type(text=command))
    ctx.client.act(A.Press(key="enter"))
    time.sleep(_COMMAND_DONE_S)
    return get_vm_file(ctx, {"type": "vm_file", "path": path, "dest": dest})


@GETTERS.register("content_from_vm_file")
def get_content_from_vm_file(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[list[str]]:
    """A part of a desktop file: ``file_type: "xlsx"`` with ``file_content: "last_row"`` gives the
    last data row of the first sheet (pandas ``read_excel``, header row excluded) as strings
    (``str`` of each pandas value: ``"nan"`` for an empty cell). The file is cached as its base
    name. None when the file is missing or the sheet has no data row (upstream raises there);
    other types/contents raise TaskSpecError (upstream: NotImplementedError / None)."""
    from guigym.envs.desktop.evaluators.base import require

    path = _need(spec, "path")
    file_type, content = _need(spec, "file_type"), _need(spec, "file_content")
    if (file_type, content) != ("xlsx", "last_row"):
        raise TaskSpecError(f"getter 'content_from_vm_file': file_type {file_type!r} with file_content "
                            f"{content!r} is not supported (only xlsx / last_row)")
    pd = require("pandas", "pandas", "content_from_vm_file")
    require("openpyxl", "openpyxl", "content_from_vm_file")
    local = get_vm_file(ctx, {"type": "vm_file", "path": path, "dest": os.path.basename(path)})
    if local is None:
        return None
    try:
        frame = pd.read_excel(local)
    except Exception as e:  # noqa: BLE001 - pandas/openpyxl raise many types for a broken file
        log.info("content_from_vm_file: cannot read %s: %s", path, e)
        return None
    if frame.empty:
        return None
    return frame.iloc[-1].astype(str).tolist()
