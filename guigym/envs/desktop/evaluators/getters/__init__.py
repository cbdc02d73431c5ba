"""OSWorld getters, one module per app family (``desktop_env/evaluators/getters/<family>.py``):

* :mod:`.file` -- vm_file, cache_file, cloud_file; :mod:`.misc` -- rules and relative times;
  :mod:`.info` -- screen/window size, directory listing;
* :mod:`.general` -- commands, terminal, a11y tree, the active URL, the browser-profile readers
  and the desktop-HOME helpers the app families share;
* :mod:`.chrome` -- Chrome settings, profile, cookies, history; :mod:`.browser` -- the open tabs
  and pages over CDP (both halves of upstream's ``chrome.py``);
* :mod:`.vlc` -- VLC's HTTP status and vlcrc; :mod:`.gimp` -- GIMP config files;
  :mod:`.impress` -- media inside a slide;
* :mod:`.system` -- wallpaper, default video player, VS Code command output, a spreadsheet row;
* :mod:`.port_owner` -- the in-desktop check that a port belongs to the app it should.

Each module registers into :data:`guigym.envs.desktop.evaluators.base.GETTERS` on import;
:func:`guigym.envs.desktop.evaluators.load_all` imports them all. Nothing is imported here.
"""
