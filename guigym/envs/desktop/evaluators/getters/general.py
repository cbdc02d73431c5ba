"""OSWorld's general getters: fetch the state a metric compares (``evaluator.result`` / ``expected``).

A getter spec is ``{"type": name, ...options}``; :func:`guigym.envs.desktop.evaluators.get` looks
``name`` up in :data:`~guigym.envs.desktop.evaluators.base.GETTERS` and returns what OSWorld's
``get_<name>`` returns (``desktop_env/evaluators/getters/{file,general,misc,info,chrome}.py``):
files are copied into ``cache_dir`` and the local path is returned; a file missing in the desktop
gives None, which :func:`guigym.envs.desktop.evaluators.evaluate` scores 0 with a reason. Transport failures raise :class:`EnvInfraError` (never a 0 score).

Registered: ``vm_file``, ``cache_file``, ``cloud_file``, ``vm_command_line``,
``vm_command_error``, ``vm_terminal_output``, ``rule``, ``rule_relativeTime``, ``time_diff_range``,
``list_directory``, ``accessibility_tree``, ``vm_screen_size``, ``vm_window_size``,
``active_url_from_accessTree``, and app files: ``vlc_config``, ``gimp_config_file``,
``profile_name`` (Chrome/Chromium profile).
"""
from __future__ import annotations

import copy
import logging
import os
import re
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone as dt_timezone, tzinfo
from typing import Any, Optional
from xml.etree import ElementTree as ET
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from guigym.core.errors import TaskSpecError
from guigym.envs.desktop.evaluators.base import GETTERS, GetterContext, _cache_target, _need, atomic_write, fetch_url_to_cache

log = logging.getLogger(__name__)

__all__ = ["resolve_relative_time", "apply_time_format", "read_profile_json", "extension_settings"]


def _files(spec: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    if spec.get("multi", False):
        paths, dests = _need(spec, "path", list), _need(spec, "dest", list)
        if len(paths) != len(dests):
            raise TaskSpecError(f"getter {spec['type']!r}: 'path' has {len(paths)} entries but "
                                f"'dest' has {len(dests)}")
        return [str(p) for p in paths], [str(d) for d in dests]
    return [_need(spec, "path")], [_need(spec, "dest")]


def _gives(spec: Mapping[str, Any]) -> set[int]:
    gives = spec.get("gives", [0])
    if not isinstance(gives, list) or not all(isinstance(g, int) for g in gives):
        raise TaskSpecError(f"getter {spec['type']!r}: 'gives' must be a list of indices, got {gives!r}")
    return set(gives)


def _one_or_list(paths: list[Optional[str]]) -> Any:
    """OSWorld returns the single path when one file is given, else the list."""
    return paths[0] if len(paths) == 1 else paths


# --------------------------------------------------------------------------- file.py


@GETTERS.register("vm_file")
def get_vm_file(ctx: GetterContext, spec: Mapping[str, Any]) -> Any:
    """Copy desktop file(s) into the cache; ``path``/``dest`` (lists with ``multi``), ``gives``
    (indices returned, default [0]), ``time_suffix``/``time_format`` (single file: the dest
    name gets ``_<now formatted>`` before its extension). A missing file gives None in its
    place; the return is one path when one index is given, else the list."""
    paths, dests = _files(spec)
    if not spec.get("multi", False) and spec.get("time_suffix", False):
        fmt = spec.get("time_format", "%Y%m%d_%H%M%S")
        stamp = (ctx.now or datetime.now()).strftime(fmt)
        dests = [f"{os.path.splitext(d)[0]}_{stamp}{os.path.splitext(d)[1]}" for d in dests]
    gives = _gives(spec)
    out: list[Optional[str]] = []
    for i, (p, d) in enumerate(zip(paths, dests)):
        target = _cache_target(ctx, d)
        data = ctx.client.get_file(p)
        if data is None:
            log.info("vm_file: %s does not exist in the desktop", p)
            if i in gives:
                out.append(None)
            continue
        atomic_write(target, data)
        if i in gives:
            out.append(str(target))
    return _one_or_list(out)


@GETTERS.register("cache_file")
def get_cache_file(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[str]:
    """``cache_dir/path`` (a file a setup step saved, e.g. ``execute``'s ``stdout``); None when
    it does not exist (OSWorld asserts)."""
    target = _cache_target(ctx, _need(spec, "path"))
    return str(target) if target.exists() else None


@GETTERS.register("cloud_file")
def get_cloud_file(ctx: GetterContext, spec: Mapping[str, Any]) -> Any:
    """Download url(s) ``path`` to ``cache_dir/dest`` (``multi``/``gives`` as ``vm_file``); a
    file already in the cache is used as is; otherwise the network is used when allowed
    (:class:`~guigym.envs.desktop.setup.MissingResourceError` names the url and cache file)."""

    paths, dests = _files(spec)
    gives = _gives(spec)
    out: list[Optional[str]] = []
    for i, (p, d) in enumerate(zip(paths, dests)):
        target = _cache_target(ctx, d)
        fetch_url_to_cache(p, target, network_ok=ctx.network_ok, what="cloud_file")
        if i in gives:
            out.append(str(target))
    return _one_or_list(out)


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


# --------------------------------------------------------------------------- misc.py


@GETTERS.register("rule")
def get_rule(ctx: GetterContext, spec: Mapping[str, Any]) -> Any:
    """The spec's ``rules`` as they are."""
    return _need(spec, "rules", object)


@GETTERS.register("time_diff_range")
def get_time_diff_range(ctx: GetterContext, spec: Mapping[str, Any]) -> Any:
    """The spec's ``diff_range_in_minutes`` (None when absent, as OSWorld)."""
    return spec.get("diff_range_in_minutes")


@GETTERS.register("accessibility_tree")
def get_accessibility_tree(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[str]:
    """The desktop's a11y tree as OSWorld XML."""
    return ctx.client.accessibility_tree()


_DOW = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")


def apply_time_format(fmt: str, day: datetime) -> str:
    """OSWorld's ``apply_rules_to_timeFormat``: each placeholder replaced once: ``{DoW}`` Mon,
    ``{Month}`` Jan, ``{DayD}`` 5, ``{Year}`` 2024, ``{Month0D}`` 01, ``{month}`` january,
    ``{MonthFull}`` January, ``{Day0D}`` 05, ``{MonthD}`` 1 (applied in OSWorld's order)."""
    subs = (
        ("{DoW}", _DOW[day.weekday()]),
        ("{Month}", _MONTHS[day.month - 1][:3]),
        ("{DayD}", str(day.day)),
        ("{Year}", str(day.year)),
        ("{Month0D}", f"{day.month:02d}"),
        ("{month}", _MONTHS[day.month - 1].lower()),
        ("{MonthFull}", _MONTHS[day.month - 1]),
        ("{Day0D}", f"{day.day:02d}"),
        ("{MonthD}", str(day.month)),
    )
    for key, value in subs:
        fmt = fmt.replace(key, value, 1)
    return fmt


def _first_monday(tz: tzinfo, year: int, month: int) -> datetime:
    first = datetime(year, month, 1, tzinfo=tz)
    return first + timedelta(days=(7 - first.weekday()) % 7)


def _months_later(now: datetime, n: int) -> tuple[int, int]:
    k = now.month - 1 + n
    return now.year + k // 12, k % 12 + 1


def _next_month_day(now: datetime, day: int) -> datetime:
    year, month = _months_later(now, 1)
    return datetime(year, month, day, tzinfo=now.tzinfo)


def resolve_relative_time(name: str, now: datetime, from_day: Optional[datetime] = None,
                          from_name: Optional[str] = None) -> datetime:
    """The day a ``relativeTime`` phrase means at ``now`` (OSWorld's ``get_rule_relativeTime``).

    Day offsets keep ``now``'s time of day; "Nth next month" and "first monday ... later" are
    midnight. ``from_day``/``from_name`` are the already-resolved ``from`` of a range ("next
    Friday" after "next Monday" is that week's Friday; "next Sunday" after "next Friday"/"next
    Saturday" is that weekend's Sunday). OSWorld computes ``(month + 4) % 12`` for "four
    months later", which is month 0 (a crash) in August; we carry into the next year
    correctly, which agrees with OSWorld in every month it does not crash in.
    """
    wd = now.weekday()  # Monday = 0
    if name == "tomorrow":
        return now + timedelta(days=1)
    if name in ("5th next month", "10th next month", "11th next month"):
        return _next_month_day(now, int(name.split("th")[0]))
    if name == "this month":
        return now
    if name == "this Saturday":
        return now + timedelta(days=5 - wd)
    if name == "this Sunday":
        return now + timedelta(days=6 - wd)
    if name in ("next Monday", "next Monday split"):
        return now + timedelta(days=7 - wd)
    if name in ("next Friday", "next Friday split"):
        if from_day is not None and from_name in ("next Monday", "next Monday split"):
            return from_day + timedelta(days=4)
        if from_day is None:  # as a "from": this weekend's Friday unless it is Friday or later
            return now + timedelta(days=4 - wd if wd < 4 else 7 if wd == 4 else 11 - wd)
        return now + timedelta(days=4 - wd if wd < 4 else 11 - wd)
    if name == "next Saturday":
        return now + timedelta(days=5 - wd if wd < 5 else 7 if wd == 5 else 6)
    if name == "next Sunday":
        if from_day is not None and from_name in ("next Friday", "next Saturday"):
            return from_day + timedelta(days=6 - from_day.weekday())
        return now + timedelta(days=6 - wd if wd < 6 else 7)
    if name in ("next week Friday", "next week Saturday", "next week Sunday"):
        target = {"Friday": 4, "Saturday": 5, "Sunday": 6}[name.split()[-1]]
        if name == "next week Sunday" and from_day is not None and from_name in (
                "next week Friday", "next week Saturday"):
            return from_day + timedelta(days=6 - from_day.weekday())
        return now + timedelta(days=7 - wd + target)
    if name in ("first monday four months later", "first monday eight months later"):
        year, month = _months_later(now, 4 if "four" in name else 8)
        return _first_monday(now.tzinfo or dt_timezone.utc, year, month)
    raise TaskSpecError(f"rule_relativeTime: unknown relative time {name!r}")


def _desktop_timezone(ctx: GetterContext) -> tzinfo:
    """The desktop's current UTC offset (``date +%z``); UTC when it cannot be read.

    OSWorld guesses the zone from the host's IP (network) and falls back to UTC; the desktop's
    own offset is what its apps show, needs no network, and is the same thing on a VM whose
    clock follows the host.
    """
    try:
        res = ctx.client.execute(["date", "+%z"], shell=False, timeout=10)
        m = re.fullmatch(r"([+-])(\d\d)(\d\d)", str(res.get("output") or "").strip())
    except Exception:  # noqa: BLE001 - any failure means "unknown": fall back like OSWorld
        m = None
    if not m:
        return dt_timezone.utc
    delta = timedelta(hours=int(m.group(2)), minutes=int(m.group(3)))
    return dt_timezone(delta if m.group(1) == "+" else -delta)


def _zone(name: str) -> tzinfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise TaskSpecError(f"rule_relativeTime: unknown timezone {name!r} (an IANA name like "
                            "'Europe/Zurich')") from None


@GETTERS.register("rule_relativeTime")
def get_rule_relativeTime(ctx: GetterContext, spec: Mapping[str, Any]) -> dict[str, Any]:
    """``rules`` with relative dates made absolute (OSWorld misc.py).

    ``rules.relativeTime``: ``{"from": phrase}`` fills ``rules.expected.time``; ``{"from",
    "to"}`` fills ``expected.from`` and ``expected.to`` ("next Monday split" fills ``puDay``/
    ``puMonth``/``puYear``, "next Friday split" ``doDay``/``doMonth``/``doYear``), each a
    format of :func:`apply_time_format`. Zone: ``rules.timezone`` (IANA name), else the
    context's ``timezone``, else the desktop's UTC offset. ``now`` comes from the context
    (converted to that zone; a naive ``now`` is taken as wall time in it).
    """
    rules = copy.deepcopy(dict(_need(spec, "rules", Mapping)))
    rel = rules.get("relativeTime")
    if not isinstance(rel, Mapping) or not isinstance(rel.get("from"), str):
        raise TaskSpecError("rule_relativeTime: rules.relativeTime must be an object with a string 'from'")
    expected = rules.get("expected")
    if not isinstance(expected, dict):
        raise TaskSpecError("rule_relativeTime: rules.expected must be an object of time formats")
    if isinstance(rules.get("timezone"), str):
        tz = _zone(rules["timezone"])
    elif ctx.timezone:
        tz = _zone(ctx.timezone)
    else:
        tz = _desktop_timezone(ctx)
    now = ctx.now or datetime.now(tz)
    now = now.replace(tzinfo=tz) if now.tzinfo is None else now.astimezone(tz)

    def fill(key: str, day: datetime) -> None:
        if not isinstance(expected.get(key), str):
            raise TaskSpecError(f"rule_relativeTime: rules.expected.{key} must be a time format string")
        expected[key] = apply_time_format(expected[key], day)

    if "to" not in rel:
        fill("time", resolve_relative_time(rel["from"], now))
        return rules
    from_name, to_name = rel["from"], rel["to"]
    from_day = resolve_relative_time(from_name, now)
    if from_name == "next Monday split":
        for key in ("puDay", "puMonth", "puYear"):
            fill(key, from_day)
    else:
        fill("from", from_day)
    to_day = resolve_relative_time(to_name, now, from_day=from_day, from_name=from_name)
    if to_name == "next Friday split":
        for key in ("doDay", "doMonth", "doYear"):
            fill(key, to_day)
    else:
        fill("to", to_day)
    return rules


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


@GETTERS.register("vlc_config")
def get_vlc_config(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[str]:
    """VLC's ``~/.config/vlc/vlcrc`` copied to ``cache_dir/dest`` (None when VLC never wrote it)."""
    return _home_file_to_cache(ctx, ".config/vlc/vlcrc", _need(spec, "dest"))


@GETTERS.register("gimp_config_file")
def get_gimp_config_file(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[str]:
    """``~/.config/GIMP/2.10/<file_name>`` copied to ``cache_dir/dest`` (None when missing)."""
    name = _need(spec, "file_name")
    if "/" in name or name in ("", ".", ".."):
        raise TaskSpecError(f"getter 'gimp_config_file': file_name must be a plain file name, got {name!r}")
    return _home_file_to_cache(ctx, f".config/GIMP/2.10/{name}", _need(spec, "dest"))


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
