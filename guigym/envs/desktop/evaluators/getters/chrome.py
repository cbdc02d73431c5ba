"""OSWorld Chrome settings/profile getters (``desktop_env/evaluators/getters/chrome.py``).

Settings come from the browser profile in the desktop: ``Default/Preferences``,
``Default/Secure Preferences``, the profile root's ``Local State`` and the SQLite databases
``Cookies`` and ``History``. Google Chrome's profile (``~/.config/google-chrome``, what OSWorld
reads) is used when it has the file, else Chromium's (``~/.config/chromium``), as
:func:`guigym.envs.desktop.evaluators.getters.general.read_profile_json`.

The SQLite files are copied into the cache dir and read on the host. They are agent-influenced
data: they are opened read-only (``mode=ro`` URI), with ``trusted_schema`` off and
``query_only`` on, and only fixed queries run on them.

Return values are OSWorld's, including its string booleans (``"true"``/``"false"``). Where we
differ, on purpose (each getter's docstring says so too): an unreadable profile gives the
"unset" answer (``"false"``) where OSWorld returns ``"Google"`` from its error path;
``data_delete_automacally`` checks the cookie setting itself (OSWorld's check is true for every
new profile of current Chrome); extension
names come from ``Preferences`` and ``Secure Preferences`` and entries without a manifest name are
skipped (OSWorld reads ``Preferences`` only and returns ``"Google"`` when any entry lacks one).

``page_info`` loads the page in the desktop's own browser over DevTools (network inside the
desktop); ``info_from_website``, ``pdf_from_url`` and ``gotoRecreationPage_and_get_html_content``
need the live web and are registered as such (NotImplementedError).
"""
from __future__ import annotations

import json
import logging
import sqlite3
import time
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from guigym.core.errors import EnvInfraError
from guigym.envs.desktop.evaluators.getters.port_owner import CHROMIUM_NAMES, PORT_OWNER_CODE, allowed_arg
from guigym.envs.desktop.evaluators.base import GETTERS, GetterContext, _cache_target, _need, atomic_write
from guigym.envs.desktop.evaluators.getters.general import (
    BROWSER_PROFILES, NOT_JSON, _desktop_home, extension_settings, read_profile_json,
)

log = logging.getLogger(__name__)

__all__ = ["read_browser_file", "query_profile_db", "CHROME_DEFAULT_FONT_SIZE"]

#: Chrome's default ``webkit.webprefs`` (what OSWorld's getter returns when the profile has none)
CHROME_DEFAULT_WEBPREFS = {"default_fixed_font_size": 13, "default_font_size": 16, "minimum_font_size": 13}
#: Chrome's default font size; Chrome leaves ``default_font_size`` out of webprefs at this value
CHROME_DEFAULT_FONT_SIZE = 16

#: ``session.restore_on_startup`` value of "Open the New Tab page"
_RESTORE_NEW_TAB_PAGE = 5
#: content-setting value "session only" (``CONTENT_SETTING_SESSION_ONLY``): for cookies, site
#: data is deleted when the last window closes
_COOKIES_SESSION_ONLY = 4


# --------------------------------------------------------------------------- profile files


def read_browser_file(ctx: GetterContext, rel: str) -> Optional[tuple[str, bytes]]:
    """``(browser, bytes)`` of ``~/.config/<browser>/<rel>`` for the first browser of
    :data:`BROWSER_PROFILES` that has it; None when none has it. ``rel`` is relative to the
    user-data dir (``"Local State"``, ``"Default/History"``)."""
    home = _desktop_home(ctx)
    for browser in BROWSER_PROFILES:
        data = ctx.client.get_file(f"{home}/.config/{browser}/{rel}")
        if data is not None:
            return browser, data
    return None


def _root_json(ctx: GetterContext, rel: str) -> Optional[Any]:
    """Parsed ``~/.config/<browser>/<rel>``; None when missing or not JSON."""
    found = read_browser_file(ctx, rel)
    if found is None:
        return None
    try:
        return json.loads(found[1].decode("utf-8", "replace"))
    except ValueError:
        log.warning("%s's %s is not JSON", found[0], rel)
        return None


def _preferences(ctx: GetterContext) -> Optional[dict[str, Any]]:
    """The profile's ``Default/Preferences`` as a dict; None when missing or not a JSON object."""
    prefs = read_profile_json(ctx, "Preferences")
    if prefs is NOT_JSON or not isinstance(prefs, dict):
        return None
    return prefs


def _obj(value: Any, key: str) -> dict[str, Any]:
    """``value[key]`` when both are dicts, else {} (profile JSON is agent-influenced)."""
    got = value.get(key) if isinstance(value, dict) else None
    return got if isinstance(got, dict) else {}


def query_profile_db(path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` (a fixed query; values only through ``params``) on the SQLite file
    ``path``, opened read-only. Raises :class:`sqlite3.DatabaseError` when the file is not a
    database or lacks the table."""
    uri = f"file:{urllib.parse.quote(str(path))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True)
    try:
        # the file comes from the desktop: no schema-defined side effects, no writes
        conn.execute("PRAGMA trusted_schema=OFF")
        conn.execute("PRAGMA query_only=ON")
        return [tuple(r) for r in conn.execute(sql, params).fetchall()]
    finally:
        conn.close()


def _profile_db(ctx: GetterContext, spec: Mapping[str, Any], names: tuple[str, ...],
                sql: str) -> Optional[list[tuple[Any, ...]]]:
    """Copy the first of ``Default/<name>`` that exists (Chrome's profile first) to
    ``cache_dir/dest`` and return ``sql``'s rows; None when no file exists or it is not a
    database with that table (OSWorld logs and returns None)."""
    dest = _need(spec, "dest")
    for name in names:
        found = read_browser_file(ctx, f"Default/{name}")
        if found is None:
            continue
        target = _cache_target(ctx, dest)
        atomic_write(target, found[1])
        try:
            return query_profile_db(target, sql)
        except sqlite3.DatabaseError as e:
            log.info("getter %s: %s's Default/%s is unreadable: %s", spec["type"], found[0], name, e)
            return None
    log.info("getter %s: no %s in any browser profile", spec["type"], "/".join(names))
    return None


# --------------------------------------------------------------------------- Preferences


@GETTERS.register("default_search_engine")
def get_default_search_engine(ctx: GetterContext, spec: Mapping[str, Any]) -> Any:
    """``default_search_provider_data.template_url_data.short_name`` of ``Preferences``
    (e.g. ``"Bing"``); ``"Google"`` when it is not set or the profile cannot be read, as OSWorld."""
    prefs = _preferences(ctx)
    data = _obj(_obj(prefs, "default_search_provider_data"), "template_url_data")
    return data.get("short_name", "Google")


@GETTERS.register("chrome_font_size")
def get_chrome_font_size(ctx: GetterContext, spec: Mapping[str, Any]) -> dict[str, Any]:
    """``webkit.webprefs`` of ``Preferences`` (``{"default_font_size": 20, ...}``); Chrome's
    defaults (:data:`CHROME_DEFAULT_WEBPREFS`) when the profile has none or cannot be read.
    Keys Chrome left at their default may be absent (check_font_size reads them as defaults)."""
    prefs = _preferences(ctx)
    if prefs is None:
        return dict(CHROME_DEFAULT_WEBPREFS)
    webkit = _obj(prefs, "webkit")
    if "webprefs" not in webkit:
        return dict(CHROME_DEFAULT_WEBPREFS)
    webprefs = webkit["webprefs"]
    return dict(webprefs) if isinstance(webprefs, dict) else {}


def _flag(value: bool) -> str:
    return "true" if value else "false"


@GETTERS.register("enable_do_not_track")
def get_enable_do_not_track(ctx: GetterContext, spec: Mapping[str, Any]) -> str:
    """``"true"`` when ``Preferences``' ``enable_do_not_track`` is truthy, else ``"false"``."""
    prefs = _preferences(ctx)
    return _flag(bool(prefs.get("enable_do_not_track")) if prefs else False)


@GETTERS.register("enable_enhanced_safety_browsing")
def get_enable_enhanced_safety_browsing(ctx: GetterContext, spec: Mapping[str, Any]) -> str:
    """``"true"`` when ``safebrowsing.enhanced`` is truthy, else ``"false"`` (also for an
    unreadable profile, where OSWorld returns ``"Google"``; both fail an ``"true"`` check)."""
    return _flag(bool(_obj(_preferences(ctx), "safebrowsing").get("enhanced")))


@GETTERS.register("new_startup_page")
def get_new_startup_page(ctx: GetterContext, spec: Mapping[str, Any]) -> str:
    """``"true"`` when Chrome opens the New Tab page on start: ``Preferences`` has no
    ``session`` key (a fresh profile) or ``session.restore_on_startup == 5``; else ``"false"``
    (also for an unreadable profile, where OSWorld returns ``"Google"``)."""
    prefs = _preferences(ctx)
    if prefs is None:
        return "false"
    if "session" not in prefs:
        return "true"
    return _flag(_obj(prefs, "session").get("restore_on_startup") == _RESTORE_NEW_TAB_PAGE)


@GETTERS.register("data_delete_automacally")
def get_data_delete_automacally(ctx: GetterContext, spec: Mapping[str, Any]) -> str:  # OSWorld's spelling
    """``"true"`` when site data is deleted when all windows close: ``Preferences``'
    ``profile.default_content_setting_values.cookies`` is :data:`_COOKIES_SESSION_ONLY` (what
    that setting writes); else ``"false"``. **(differs)** OSWorld answers ``"true"`` as soon as
    ``default_content_setting_values`` exists; current Chrome/Chromium write that object into
    every new profile (``{"has_migrated_local_network_access": true}``), so that test would pass
    without the agent doing anything."""
    values = _obj(_obj(_preferences(ctx), "profile"), "default_content_setting_values")
    return _flag(values.get("cookies") == _COOKIES_SESSION_ONLY)


@GETTERS.register("find_installed_extension_name")
def get_find_installed_extension_name(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[list[str]]:
    """``manifest.name`` of every extension in ``extensions.settings`` of ``Preferences`` and
    ``Secure Preferences`` (Chrome keeps installed extensions in the latter), first seen first,
    without repeats; entries without a manifest name are skipped. None when the profile has
    neither file."""
    entries = extension_settings(ctx)
    if entries is None:
        return None
    names: list[str] = []
    for entry in entries:
        name = _obj(entry, "manifest").get("name")
        if isinstance(name, str) and name not in names:
            names.append(name)
    return names


# --------------------------------------------------------------------------- Local State


@GETTERS.register("enabled_experiments")
def get_enabled_experiments(ctx: GetterContext, spec: Mapping[str, Any]) -> list[Any]:
    """``browser.enabled_labs_experiments`` of ``Local State`` (the user-data dir's, not the
    profile's): flags as ``chrome://flags`` writes them (``"name"`` or ``"name@<option>"``);
    ``[]`` when none are enabled or the file cannot be read, as OSWorld."""
    flags = _obj(_root_json(ctx, "Local State"), "browser").get("enabled_labs_experiments", [])
    return list(flags) if isinstance(flags, list) else []


# --------------------------------------------------------------------------- SQLite


@GETTERS.register("cookie_data")
def get_cookie_data(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[list[tuple[Any, ...]]]:
    """Every row of the ``cookies`` table (``SELECT *``; Chrome's layout starts
    ``creation_utc, host_key, ...``) of the profile's cookie database copied to
    ``cache_dir/dest``: ``Default/Cookies`` (OSWorld's path, where Chrome on Linux keeps it),
    else ``Default/Network/Cookies`` (Chrome 96+ on Windows). None when there is none or it
    cannot be read."""
    return _profile_db(ctx, spec, ("Cookies", "Network/Cookies"), "SELECT * FROM cookies")


@GETTERS.register("history")
def get_history(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[list[tuple[Any, ...]]]:
    """``(url, title, last_visit_time)`` of every row of the ``urls`` table of the profile's
    ``Default/History`` copied to ``cache_dir/dest``; None when it is missing or unreadable."""
    return _profile_db(ctx, spec, ("History",), "SELECT url, title, last_visit_time FROM urls")


# --------------------------------------------------------------------------- desktop shortcuts


@GETTERS.register("shortcuts_on_desktop")
def get_shortcuts_on_desktop(ctx: GetterContext, spec: Mapping[str, Any]) -> dict[str, str]:
    """``{file name: text}`` of every ``*.desktop`` file directly in ``~/Desktop`` (Linux
    shortcuts, e.g. Chrome's "Create shortcut"); {} when there is no Desktop folder."""
    desktop = f"{_desktop_home(ctx)}/Desktop"
    tree = ctx.client.list_directory(desktop)
    if isinstance(tree, Mapping) and "directory_tree" in tree:  # the raw endpoint JSON
        tree = tree["directory_tree"]
    children = tree.get("children") if isinstance(tree, Mapping) else None
    out: dict[str, str] = {}
    for child in children if isinstance(children, list) else []:
        name = child.get("name") if isinstance(child, Mapping) else None
        if not isinstance(name, str) or not name.endswith(".desktop") or child.get("type") == "directory":
            continue
        data = ctx.client.get_file(f"{desktop}/{name}")
        if data is not None:
            out[name] = data.decode("utf-8", "replace")
    return out


# --------------------------------------------------------------------------- pages

# Runs inside the desktop: python3 -c SNIPPET PORTS ACTION ARG NAMES ALLOWED (NAMES: the browser
# executables whose port is trusted, ALLOWED: JSON of the task's own processes, port_owner.py). ACTION "open": open ARG (a url)
# in a new tab, print the target JSON; "close": close the target id ARG. Prints {"error": ...}
# when no port answers.
_TAB_SNIPPET = PORT_OWNER_CODE + r'''
import json, sys, urllib.error, urllib.parse, urllib.request
ports, action, arg = [int(p) for p in sys.argv[1].split(",")], sys.argv[2], sys.argv[3]
names, allowed = tuple(sys.argv[4].split(",")), json.loads(sys.argv[5])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
errors = []
for port in ports:
    verdict, detail = port_owner_verdict(port, names, allowed=allowed)
    if verdict != "ok":  # not the browser's own binary (port_owner.py): never talked to
        errors.append(detail)
        continue
    base = "http://127.0.0.1:%d/json/" % port
    try:
        if action == "open":
            req = urllib.request.Request(base + "new?" + urllib.parse.quote(arg, safe=""), method="PUT")
        else:
            req = urllib.request.Request(base + "close/" + urllib.parse.quote(arg, safe=""))
        body = opener.open(req, timeout=10).read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as e:
        errors.append("%d: %s" % (port, e))
        continue
    sys.stdout.write(body if action == "open" else json.dumps({"closed": arg}))
    sys.exit(0)
sys.stdout.write(json.dumps({"error": "unreachable", "detail": "; ".join(errors)}))
'''

# The page's title, url and HTML (with doctype) once it has loaded; null while the new tab still
# shows its initial blank document.
_PAGE_INFO_JS = r'''
new Promise(function (resolve) {
  var done = false;
  function go() {
    if (done) return;
    done = true;
    if (location.href === "about:blank") { resolve(null); return; }
    var d = document.doctype;
    resolve({title: document.title, url: location.href,
             content: (d ? new XMLSerializer().serializeToString(d) : "") + document.documentElement.outerHTML});
  }
  if (document.readyState === "complete") go();
  else { window.addEventListener("load", go); setTimeout(go, 20000); }
})
'''

#: how long page_info waits for the new tab to show the page
PAGE_INFO_TIMEOUT = 40.0


def _tab_request(ctx: GetterContext, action: str, arg: str) -> Optional[dict[str, Any]]:
    from guigym.envs.desktop.evaluators.getters.browser import chromium_ports

    ports = ",".join(str(p) for p in chromium_ports(ctx))
    res = ctx.client.execute(["python3", "-c", _TAB_SNIPPET, ports, action, arg, ",".join(CHROMIUM_NAMES),
                              allowed_arg(ctx.client)],
                             shell=False, timeout=40)
    if not isinstance(res, Mapping) or res.get("returncode") not in (None, 0):
        raise EnvInfraError(f"page_info: the tab helper failed in the desktop: {res!r}"[:500])
    try:
        answer = json.loads(str(res.get("output") or ""))
    except ValueError:
        raise EnvInfraError(f"page_info: the tab helper printed no JSON: {str(res.get('output'))[-300:]!r}") from None
    if not isinstance(answer, dict) or answer.get("error") == "unreachable":
        log.info("page_info: no browser debugging endpoint: %s", answer)
        return None
    return answer


@GETTERS.register("page_info")
def get_page_info(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[dict[str, str]]:
    """``{"title", "url", "content"}`` of ``url`` loaded in a new tab of the desktop's browser
    (DevTools), which is closed afterwards, as OSWorld's Playwright ``new_page().goto(url)``.
    None when no browser listens or the page did not show within :data:`PAGE_INFO_TIMEOUT`
    (also when it redirected elsewhere: the tab is read by its url, so when the agent has a tab
    with that url open too, the first one DevTools lists is read). **(differs)** OSWorld starts
    a browser when none listens."""
    from guigym.envs.desktop.evaluators.getters.browser import cdp_evaluate

    url = _need(spec, "url")
    opened = _tab_request(ctx, "open", url)
    if opened is None:
        return None
    tab_id = opened.get("id")
    deadline = time.monotonic() + PAGE_INFO_TIMEOUT
    try:
        while True:
            try:
                answer = cdp_evaluate(ctx, url, _PAGE_INFO_JS)
            except EnvInfraError as e:  # the page navigated while being read: read it again
                if time.monotonic() >= deadline:
                    raise
                log.info("page_info: retrying after %s", e)
                answer = {}
            value = (answer or {}).get("value")
            if isinstance(value, dict):
                return {"title": str(value.get("title") or ""), "url": str(value.get("url") or ""),
                        "content": str(value.get("content") or "")}
            if answer is None or time.monotonic() >= deadline:
                log.info("page_info: %s did not show in a tab", url)
                return None
            time.sleep(1.0)
    finally:
        if isinstance(tab_id, str):
            _tab_request(ctx, "close", tab_id)


def _network_only(name: str, reason: str) -> None:
    def getter(ctx: GetterContext, spec: Mapping[str, Any]) -> Any:
        raise NotImplementedError(f"getter {name!r} needs the live web: {reason}")

    getter.__doc__ = f"Not implemented: needs the live web ({reason})."
    GETTERS.register(name)(getter)


_network_only("info_from_website", "it reads elements of a live web page (its 'backups' stand for a failed load, "
              "not for the page)")
_network_only("pdf_from_url", "it prints a live web page to PDF as the expected file")
_network_only("gotoRecreationPage_and_get_html_content",
              "it searches recreation.gov live and reads the result page")
