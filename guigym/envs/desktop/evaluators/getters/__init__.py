"""OSWorld getters, one module per app family (``desktop_env/evaluators/getters/<family>.py``):

* :mod:`.general` -- files (vm_file, cache_file, cloud_file), commands, rules and relative times,
  screen/window size, a11y tree, app config files, and the browser-profile helpers;
* :mod:`.chrome` -- Chrome settings, profile, cookies, history; :mod:`.browser` -- the open tabs
  and pages over CDP (both halves of upstream's ``chrome.py``);
* :mod:`.vlc` -- VLC's HTTP status; :mod:`.impress` -- media inside a slide;
* :mod:`.system` -- wallpaper, default video player, VS Code command output, a spreadsheet row;
* :mod:`.port_owner` -- the in-desktop check that a port belongs to the app it should.

Each module registers into :data:`guigym.envs.desktop.evaluators.base.GETTERS` on import;
:func:`guigym.envs.desktop.evaluators.load_all` imports them all. Nothing is imported here.
"""
