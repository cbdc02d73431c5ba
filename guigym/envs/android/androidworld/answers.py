"""Answer checks and date phrasing of AndroidWorld's information-retrieval tasks (its
``information_retrieval/proto_utils.py`` ``check_agent_answer`` and ``datetime_utils.py``, re-written).

An answer is a comma-separated list; it passes when it has as many items as the expected list and
every item matches some expected item: text by :func:`validators.fuzzy_match`, numbers within a
tolerance, date-times by value after parsing ``<Month> <day> <year> <HH:MM>``.
"""
from __future__ import annotations

import datetime as dt
import functools
import random
from typing import Optional, Sequence

from guigym.envs.android.androidworld import validators as V

#: AndroidWorld's device clock: Sunday 15 October 2023, 15:34 UTC (``env/device_constants.py``)
DEVICE_NOW = dt.datetime(2023, 10, 15, 15, 34, tzinfo=dt.timezone.utc)
DATE_FORMAT = "%B %d %Y"
_TIME_FORMATS = ("%H:%M", "%I:%M%p", "%I%p")


def parse_time(text: str) -> dt.time:
    """``"21:45"``, ``"1:30pm"`` or ``"4pm"`` -> a time; ValueError otherwise."""
    for fmt in _TIME_FORMATS:
        try:
            t = dt.datetime.strptime(text.strip(), fmt)
            return dt.time(t.hour, t.minute)
        except ValueError:
            pass
    raise ValueError(f"not a time: {text!r}")


def parse_date(text: str) -> dt.date:
    """``"October 15 2023"`` -> a date."""
    return dt.datetime.strptime(text.strip(), DATE_FORMAT).date()


@functools.lru_cache(maxsize=4096)  # noise draws call it per candidate event
def at(date_text: str, time_text: str = "") -> dt.datetime:
    """The UTC datetime of a ``DATE_FORMAT`` date and an optional time (midnight without one)."""
    d = parse_date(date_text)
    t = parse_time(time_text) if time_text else dt.time(0, 0)
    return dt.datetime.combine(d, t, tzinfo=dt.timezone.utc)


def parse_duration_s(text: str) -> int:
    """``"1.5 hours"``, ``"45min"``, ``"30 m"`` -> seconds (AndroidWorld: the number before the
    first ``h`` is hours, else before the first ``m`` minutes)."""
    if "h" in text:
        return int(3600 * float(text[: text.find("h")].strip()))
    if "m" in text:
        return 60 * int(text[: text.find("m")].strip())
    raise ValueError(f"not a duration: {text!r}")


def date_phrases(day: dt.date, today: dt.date = DEVICE_NOW.date()) -> list[str]:
    """The ways AndroidWorld words a date in a goal: ``October 16``, ``October 16 2023``, and
    today / tomorrow / yesterday, ``Monday`` / ``this Monday`` within a week ahead,
    ``the Monday after next`` within two weeks, ``Friday`` within a week back."""
    out = [day.strftime("%B %d"), day.strftime(DATE_FORMAT)]
    delta = (day - today).days
    out += {0: ["today"], 1: ["tomorrow"], -1: ["yesterday"]}.get(delta, [])
    name = day.strftime("%A")
    if 0 < delta <= 7:
        out += [name, f"this {name}"]
    elif 7 < delta <= 14:
        out.append(f"the {name} after next")
    elif -7 <= delta < 0:
        out.append(name)
    return out


def reword_date(rng: random.Random, date_text: str) -> str:
    """One of :func:`date_phrases` for a ``DATE_FORMAT`` date, drawn with ``rng``."""
    return rng.choice(date_phrases(parse_date(date_text)))


def _items(answer: str) -> list[str]:
    return [a.strip() for a in answer.split(",")]


def list_matches(answer: Optional[str], expected: Sequence[str]) -> bool:
    """Text answers: same count, each item fuzzy-equal to an expected one."""
    if answer is None:
        return False
    got = _items(answer.strip().rstrip("."))
    return len(got) == len(expected) and all(any(V.fuzzy_match(g, e) for e in expected) for g in got)


def number_matches(answer: Optional[str], expected: float, tolerance: float = 1e-6) -> bool:
    """A single number (``"$1,200"``, ``"12.5 km"`` read as its leading number) within ``tolerance``."""
    if answer is None:
        return False
    text = answer.strip().rstrip(".").replace(",", "").lstrip("$")
    head = text.split()[0] if text.split() else ""
    try:
        return abs(float(head) - expected) < tolerance
    except ValueError:
        return False


def datetime_matches(answer: Optional[str], expected: dt.datetime) -> bool:
    """``<month name> <day> <year> <HH:MM>`` (24-hour), equal to ``expected`` to the minute."""
    if answer is None:
        return False
    try:
        got = dt.datetime.strptime(answer.strip().rstrip("."), DATE_FORMAT + " %H:%M")
    except ValueError:
        return False
    return got.replace(tzinfo=None) == expected.replace(tzinfo=None, second=0, microsecond=0)
