"""The default HOME template of the local desktop: a small ``/home/user`` like OSWorld's VM.

OSWorld's Ubuntu VM has user ``user`` with HOME ``/home/user`` and the XDG folders (Desktop,
Documents, Downloads, ...); task setups download into them and getters read from them. The
template is a few kilobytes, so restoring HOME from it on every reset is a plain copy.

One divergence from GNOME's defaults (:data:`INITIAL_GSETTINGS`, in the template's dconf user
database): the screen lock starts off. OSWorld's task os/a4d98375 ("have my computer locked
automatically after I leave") checks only ``org.gnome.desktop.screensaver lock-enabled``, which
GNOME (and OSWorld's VM image, whose setup guide changes only Screen Blank and Suspend) ships as
``true``: the task would be solved before the agent acts.
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional, Union

from guigym.core.errors import ConfigError

log = logging.getLogger(__name__)

#: The XDG user folders of a fresh Ubuntu account (``xdg-user-dirs-update``).
XDG_DIRS = ("Desktop", "Documents", "Downloads", "Music", "Pictures", "Public", "Templates",
            "Videos")

_BASHRC = r"""# ~/.bashrc of the guigym local desktop (template; restored on every reset)
case $- in *i*) ;; *) return;; esac
HISTCONTROL=ignoreboth
HISTFILE=~/.bash_history
shopt -s histappend checkwinsize
PS1='\[\033[01;32m\]\u@\h\[\033[00m\]:\[\033[01;34m\]\w\[\033[00m\]\$ '
alias ls='ls --color=auto'
alias grep='grep --color=auto'
alias ll='ls -alF'
"""

_PROFILE = """# ~/.profile of the guigym local desktop (template)
if [ -n "$BASH_VERSION" ] && [ -f "$HOME/.bashrc" ]; then . "$HOME/.bashrc"; fi
"""

_USER_DIRS = "".join(
    f'XDG_{name.upper()}_DIR="$HOME/{folder}"\n'
    for name, folder in (("desktop", "Desktop"), ("documents", "Documents"),
                         ("download", "Downloads"), ("music", "Music"), ("pictures", "Pictures"),
                         ("publicshare", "Public"), ("templates", "Templates"), ("videos", "Videos"))
)

# No animations: screenshots right after an action show the final state, not a frame of a fade.
_GTK3_SETTINGS = "[Settings]\ngtk-enable-animations=false\n"

#: video types OSWorld's default_video_player getter asks xdg-mime about (getters_system.py)
_VIDEO_TYPES = ("3gp", "3gpp", "3gpp2", "avi", "divx", "dv", "fli", "flv", "mp2t", "mp4", "mp4v-es", "mpeg",
                "mpeg-system", "msvideo", "ogg", "quicktime", "vnd.divx", "vnd.mpegurl", "vnd.rn-realvideo",
                "webm", "x-anim", "x-avi", "x-flc", "x-fli", "x-flv", "x-m4v", "x-matroska", "x-mpeg",
                "x-mpeg-system", "x-mpeg2", "x-ms-asf", "x-ms-asf-plugin", "x-ms-asx", "x-ms-wm", "x-ms-wmv",
                "x-ms-wmx", "x-ms-wvx", "x-msvideo", "x-nsv", "x-ogm", "x-ogm+ogg", "x-theora", "x-theora+ogg")

#: Ubuntu's GNOME default for videos is Totem (GNOME Videos, gnome-mimeapps.list), as in OSWorld's
#: VM; without it the only installed player (often VLC) is the default and OSWorld's task
#: multi_apps/937087b6 ("set the default video player as VLC") is solved before the agent acts.
#: xdg-mime skips a default whose .desktop file is absent, so this matters where totem is installed
#: (GUIGYM_OSWORLD_APPS=1 bash scripts/install.sh installs it with VLC).
_MIMEAPPS = "[Default Applications]\n" + "".join(f"video/{t}=org.gnome.Totem.desktop\n" for t in _VIDEO_TYPES)


#: (schema, key, GVariant value) the desktop starts with instead of GNOME's default (module doc)
INITIAL_GSETTINGS: tuple[tuple[str, str, str], ...] = (
    ("org.gnome.desktop.screensaver", "lock-enabled", "false"),
)


def write_gsettings(home: Union[str, Path],
                    settings: tuple[tuple[str, str, str], ...] = INITIAL_GSETTINGS) -> bool:
    """Store ``settings`` in ``home/.config/dconf/user`` (the dconf user database GSettings reads)
    by running ``gsettings set`` on a private D-Bus session whose HOME is ``home``.

    Returns False, with a warning naming what is missing, when the host has no
    ``dbus-run-session``/``gsettings`` or a schema; the desktop then keeps GNOME's defaults.
    """
    if not settings:
        return True
    for tool in ("dbus-run-session", "gsettings"):
        if shutil.which(tool) is None:
            log.warning("HOME template: no %s on this machine; GSettings keep GNOME's defaults", tool)
            return False
    sets = " && ".join(f"gsettings set {s} {k} {v}" for s, k, v in settings)  # our constants, no task text
    with tempfile.TemporaryDirectory(prefix="guigym-dconf-") as runtime:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "XDG_RUNTIME_DIR": runtime}
        try:
            p = subprocess.run(["dbus-run-session", "--", "sh", "-c", sets], env=env, capture_output=True,
                               text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            log.warning("HOME template: gsettings failed (%s); GSettings keep GNOME's defaults", e)
            return False
    if p.returncode != 0 or not (Path(home) / ".config" / "dconf" / "user").is_file():
        log.warning("HOME template: gsettings set failed (exit %s: %s); GSettings keep GNOME's defaults",
                    p.returncode, p.stderr.strip()[-300:])
        return False
    return True


def build_default_home(dest: Union[str, Path]) -> Path:
    """Write the default template into the empty or missing directory ``dest``; returns it."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for folder in XDG_DIRS:
        (dest / folder).mkdir(exist_ok=True)
    files = {
        ".bashrc": _BASHRC,
        ".profile": _PROFILE,
        ".config/user-dirs.dirs": _USER_DIRS,
        ".config/gtk-3.0/settings.ini": _GTK3_SETTINGS,
        ".config/mimeapps.list": _MIMEAPPS,
    }
    for rel, text in files.items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (dest / ".local/share").mkdir(parents=True, exist_ok=True)
    (dest / ".cache").mkdir(exist_ok=True)
    write_gsettings(dest)
    os.chmod(dest, 0o755)
    return dest


def prepare_template(dest: Union[str, Path], source: Optional[Union[str, Path]] = None) -> Path:
    """Fill ``dest`` with the HOME template: a copy of ``source`` (a directory) or the default.

    Raises :class:`ConfigError` naming ``home_template`` when ``source`` is not a directory.
    """
    dest = Path(dest)
    if source is None:
        return build_default_home(dest)
    src = Path(source)
    if not src.is_dir():
        raise ConfigError(f"home_template={str(source)!r} is not a directory")
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest, symlinks=True)
    return dest
