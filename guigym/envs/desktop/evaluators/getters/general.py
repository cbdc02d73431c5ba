"""OSWorld's general getters, and what several getter families share.

A getter spec is ``{"type": name, ...options}``; :func:`guigym.envs.desktop.evaluators.get` looks
``name`` up in :data:`~guigym.envs.desktop.evaluators.base.GETTERS` and returns what OSWorld's
``get_<name>`` returns. A value missing in the desktop gives None, which
:func:`guigym.envs.desktop.evaluators.evaluate` scores 0 with a reason; transport failures raise
:class:`EnvInfraError` (never a 0 score).

Registered here: ``vm_command_line``, ``vm_command_error``, ``vm_terminal_output``,
``accessibility_tree`` (upstream ``general.py``), ``active_url_from_accessTree`` and
``profile_name`` (upstream ``chrome.py``). Shared: the desktop's HOME and a home file copied to
the cache (:mod:`.vlc`, :mod:`.gimp`), the Chrome/Chromium profile readers (:mod:`.chrome`,
:mod:`.browser`). Files are in :mod:`.file`, rules and dates in :mod:`.misc`, screen and window
size in :mod:`.info`.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Optional
from xml.etree import ElementTree as ET

from guigym.envs.desktop.evaluators.base import GETTERS, GetterContext, _cache_target, _need, atomic_write

log = logging.getLogger(__name__)

__all__ = ["read_profile_json", "extension_settings"]


# --------------------------------------------------------------------------- general.py


def _execute(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[Mapping[str, Any]]:
    command = _need(spec, "command", (str, list))
    shell = spec.get("shell", False)
    if isinstance(shell, str):
        shell = shell.strip().lower() in ("1", "true", "yes", "on")
    res = ctx.client.execute(command, shell=bool(shell), timeout=float(spec.get("timeout", 120)))
    if not isinstance(res, Mapping) or res.get("status") not in (None, "success"):
        log.info("getter %s: command %r failed: %r", spec["type"], command, res)
        return None
    return res


@GETTERS.register("vm_command_line")
def get_vm_command_line(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[str]:
    """stdout of ``command`` (``shell`` optional) run in the desktop; None if it could not run."""
    res = _execute(ctx, spec)
    return None if res is None else str(res.get("output") or "")


@GETTERS.register("vm_command_error")
def get_vm_command_error(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[str]:
    """stderr of ``command`` run in the desktop; None if it could not run."""
    res = _execute(ctx, spec)
    return None if res is None else str(res.get("error") or "")


@GETTERS.register("vm_terminal_output")
def get_vm_terminal_output(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[str]:
    """Text of the focused terminal (``/terminal``), None when no terminal is active."""
    return ctx.client.terminal_output()


@GETTERS.register("accessibility_tree")
def get_accessibility_tree(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[str]:
    """The desktop's a11y tree as OSWorld XML."""
    return ctx.client.accessibility_tree()


# --------------------------------------------------------------------------- chrome.py


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


@GETTERS.register("active_url_from_accessTree")
def get_active_url_from_accessTree(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[str]:
    """The active tab's url read from the browser's address bar in the a11y tree, as OSWorld.

    OSWorld selects every ``entry[name="Address and search bar"]`` inside
    ``application[name="Google Chrome"]`` (``Chromium`` on arm VMs), returns None when none
    exists or the *last* one has no text, and otherwise returns ``goto_prefix`` (default
    ``https://``) + the *first* one's text, verbatim: no scheme check, no ``www.`` folding.
    Here ``Google Chrome`` entries are used when that application is in the tree, else
    ``Chromium`` ones (Debian's Chromium answers as google-chrome but names itself Chromium).
    """
    xml = ctx.client.accessibility_tree()
    if not xml:
        return None
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        log.info("active_url_from_accessTree: unparseable a11y tree: %s", e)
        return None
    entries: dict[str, list[ET.Element]] = {"Google Chrome": [], "Chromium": []}
    for app in root.iter():
        if _local(app.tag) == "application" and app.get("name") in entries:
            entries[app.get("name", "")].extend(
                el for el in app.iter() if _local(el.tag) == "entry" and el.get("name") == "Address and search bar")
    found = entries["Google Chrome"] or entries["Chromium"]
    if not found or not found[-1].text:
        return None
    prefix = spec.get("goto_prefix", "https://")
    return f"{'' if prefix is None else prefix}{found[0].text or ''}"


# --------------------------------------------------------------------------- app config files


def _desktop_home(ctx: GetterContext) -> str:
    """HOME inside the desktop (what OSWorld's ``os.path.expanduser('~')`` gives there)."""
    res = ctx.client.execute(["sh", "-c", 'printf %s "$HOME"'], shell=False, timeout=30)
    home = str(res.get("output") or "").strip() if isinstance(res, Mapping) else ""
    if not home.startswith("/"):
        from guigym.core.errors import EnvInfraError

        raise EnvInfraError(f"cannot read HOME in the desktop (got {res!r})")
    return home


def _home_file_to_cache(ctx: GetterContext, rel: str, dest: str) -> Optional[str]:
    data = ctx.client.get_file(f"{_desktop_home(ctx)}/{rel}")
    if data is None:
        return None
    target = _cache_target(ctx, dest)
    atomic_write(target, data)
    return str(target)


#: profile folders tried in order: Google Chrome's (what OSWorld's tasks use), then Chromium's
BROWSER_PROFILES = ("google-chrome", "chromium")
#: :func:`read_profile_json`'s value for a profile file that exists but is not JSON
NOT_JSON = object()


def read_profile_json(ctx: GetterContext, name: str) -> Optional[Any]:
    """The parsed ``~/.config/<browser>/Default/<name>`` of the first profile in
    :data:`BROWSER_PROFILES` that has the file; :data:`NOT_JSON` when that file is not JSON; None
    when no profile has it."""
    import json

    home = _desktop_home(ctx)
    for browser in BROWSER_PROFILES:
        data = ctx.client.get_file(f"{home}/.config/{browser}/Default/{name}")
        if data is None:
            continue
        try:
            return json.loads(data.decode("utf-8", "replace"))
        except ValueError:
            log.warning("%s's %s is not JSON", browser, name)
            return NOT_JSON
    return None


def extension_settings(ctx: GetterContext) -> Optional[list[dict[str, Any]]]:
    """Every entry of ``extensions.settings`` in ``Preferences`` and then ``Secure Preferences``
    (Chrome keeps installed extensions in the latter) of the first profile in
    :data:`BROWSER_PROFILES` that has either file, in file order; unreadable files and entries
    that are not objects are skipped. None when no profile has either file."""
    import json

    home = _desktop_home(ctx)
    for browser in BROWSER_PROFILES:
        files = [ctx.client.get_file(f"{home}/.config/{browser}/Default/{name}")
                 for name in ("Preferences", "Secure Preferences")]
        if all(data is None for data in files):
            continue
        entries: list[dict[str, Any]] = []
        for data in files:
            try:
                prefs = json.loads(data.decode("utf-8", "replace")) if data is not None else None
            except ValueError:
                continue
            ext = prefs.get("extensions") if isinstance(prefs, dict) else None
            settings = ext.get("settings") if isinstance(ext, dict) else None
            if isinstance(settings, dict):
                entries.extend(e for e in settings.values() if isinstance(e, dict))
        return entries
    return None


@GETTERS.register("profile_name")
def get_profile_name(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[str]:
    """``profile.name`` of the browser's ``Default/Preferences`` (Google Chrome's profile as
    OSWorld, else Chromium's); None when neither exists or it is not JSON."""
    prefs = read_profile_json(ctx, "Preferences")
    profile = prefs.get("profile") if isinstance(prefs, dict) else None
    return profile.get("name") if isinstance(profile, dict) else None


# The getters in these modules register themselves into GETTERS on import.
