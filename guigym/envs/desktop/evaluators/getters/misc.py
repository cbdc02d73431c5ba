"""OSWorld's misc getters (``desktop_env/evaluators/getters/misc.py``): ``rule``,
``time_diff_range`` and ``rule_relativeTime`` (dates such as "next Monday" resolved against the
evaluation time in the desktop's time zone, formatted as the rule says).
"""
from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone as dt_timezone, tzinfo
from typing import Any, Optional
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from guigym.core.errors import TaskSpecError
from guigym.envs.desktop.evaluators.base import GETTERS, GetterContext, _need

# --------------------------------------------------------------------------- misc.py


@GETTERS.register("rule")
def get_rule(ctx: GetterContext, spec: Mapping[str, Any]) -> Any:
    """The spec's ``rules`` as they are."""
    return _need(spec, "rules", object)


@GETTERS.register("time_diff_range")
def get_time_diff_range(ctx: GetterContext, spec: Mapping[str, Any]) -> Any:
    """The spec's ``diff_range_in_minutes`` (None when absent, as OSWorld)."""
    return spec.get("diff_range_in_minutes")


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
