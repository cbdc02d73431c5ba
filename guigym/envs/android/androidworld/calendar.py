"""Simple Calendar Pro tasks over its ``events`` table (AndroidWorld ``single/calendar/calendar.py`` and the
information-retrieval task ``SimpleCalendarLocationOfEvent`` in ``information_retrieval/proto/tasks.textproto``).

The database is ``/data/data/com.simplemobiletools.calendar.pro/databases/events.db``; the row layout
is AndroidWorld's ``CalendarEvent`` (timestamps in seconds, UTC; the other columns take the
defaults AndroidWorld writes). AndroidWorld's device clock is 2023-10-15; events lie in October 2023.

* SimpleCalendarAddOneEvent (absolute date) and its RelativeDay / Tomorrow / InTwoWeeks variants
  (the day named relative to Sunday 15 October): exactly one event added with the requested start,
  end, title and description (fuzzy on the texts), nothing else changed; AddRepeatingEvent also
  compares ``repeat_interval`` (daily / weekly seconds) and ``repeat_rule`` (the weekday bit).
* SimpleCalendarLocationOfEvent: an answer task; the final answer must match the event's location
  (:func:`validators.answer_matches`). No answer scores 0.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import random
from typing import Any, Optional

from guigym.envs.android.androidworld import validators as V
from guigym.envs.android.androidworld.base import register
from guigym.envs.android.androidworld.sqlite_apps import NOISE, ROWS, _AddRows, _DeleteRows, _distinct, _SQLiteTask
from guigym.envs.android.device import AndroidDevice

OCT_2023 = dt.datetime(2023, 10, 1, tzinfo=dt.timezone.utc)

TITLES = ("Marketing Brainstorm", "Lunch with Client", "Team Offsite", "Product demo", "Quarterly review",
          "Scrum meeting", "Doctor's appointment", "Birthday party", "Board meeting", "Movie night",
          "Dinner with friends", "Game night", "Family reunion", "Volunteer cleanup", "Book club")
LOCATIONS = ("Conference Room A", "City Park", "The Coffee Bean", "Zoom meeting", "Riverside Restaurant",
             "Local library", "Community center", "Art Museum", "Hiking trail", "Room 204")
DESCRIPTIONS = ("Bring the latest numbers.", "Discuss next steps.", "Casual catch-up.", "Agenda in the email.",
                "Remember to RSVP.", "")


@dataclasses.dataclass(frozen=True)
class CalendarEvent:
    """A Simple Calendar Pro ``events`` row (timestamps in seconds)."""

    start_ts: int
    end_ts: int
    title: str
    location: str = ""
    description: str = ""
    repeat_interval: int = 0
    repeat_rule: int = 0
    reminder_1_minutes: int = -1
    reminder_2_minutes: int = -1
    reminder_3_minutes: int = -1
    reminder_1_type: int = 0
    reminder_2_type: int = 0
    reminder_3_type: int = 0
    repeat_limit: int = 0
    repetition_exceptions: str = "[]"
    attendees: str = ""
    import_id: str = ""
    time_zone: str = "UTC"
    flags: int = 0
    event_type: int = 1
    parent_id: int = 0
    last_updated: int = 0
    source: str = "imported-ics"
    availability: int = 0
    color: int = 0
    type: int = 0
    id: int = -1

    @property
    def start(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.start_ts, dt.timezone.utc)


EVENTS_SCHEMA = ("CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, start_ts INTEGER NOT NULL, "
                 "end_ts INTEGER NOT NULL, title TEXT NOT NULL, location TEXT NOT NULL, description TEXT NOT NULL, "
                 "reminder_1_minutes INTEGER NOT NULL, reminder_2_minutes INTEGER NOT NULL, "
                 "reminder_3_minutes INTEGER NOT NULL, reminder_1_type INTEGER NOT NULL, "
                 "reminder_2_type INTEGER NOT NULL, reminder_3_type INTEGER NOT NULL, "
                 "repeat_interval INTEGER NOT NULL, repeat_rule INTEGER NOT NULL, repeat_limit INTEGER NOT NULL, "
                 "repetition_exceptions TEXT NOT NULL, attendees TEXT NOT NULL, import_id TEXT NOT NULL, "
                 "time_zone TEXT NOT NULL, flags INTEGER NOT NULL, event_type INTEGER NOT NULL, "
                 "parent_id INTEGER NOT NULL, last_updated INTEGER NOT NULL, source TEXT NOT NULL, "
                 "availability INTEGER NOT NULL, color INTEGER NOT NULL, type INTEGER NOT NULL)")


def random_event(rng: random.Random, title: Optional[str] = None, location: Optional[str] = None) -> CalendarEvent:
    day, hour = rng.randint(1, 31), rng.randint(7, 20)
    start = OCT_2023 + dt.timedelta(days=day - 1, hours=hour)
    minutes = rng.choice([15, 30, 45, 60, 90, 120])
    ts = int(start.timestamp())
    return CalendarEvent(start_ts=ts, end_ts=ts + 60 * minutes, title=title or rng.choice(TITLES),
                         location=location if location is not None else rng.choice(LOCATIONS),
                         description=rng.choice(DESCRIPTIONS))


class _Calendar(_SQLiteTask):
    app_names = ("simple calendar pro",)
    db_path = "/data/data/com.simplemobiletools.calendar.pro/databases/events.db"
    table, key, package, launch_name = "events", "id", "com.simplemobiletools.calendar.pro", "simple calendar pro"
    row_type = CalendarEvent


@register
class SimpleCalendarAddOneEvent(_Calendar, _AddRows):
    complexity = 3.4
    schema = ("year", "month", "day", "hour", "event_title", "event_description", "duration_mins")
    template = ("In Simple Calendar Pro, create a calendar event on {year}-{month}-{day} at {hour}h with the title "
                "'{event_title}' and the description '{event_description}'. The event should last for "
                "{duration_mins} mins.")
    compare = ("start_ts", "end_ts", "title", "description", "repeat_rule", "repeat_interval")
    free_form = ("title", "description")

    @classmethod
    def _target(cls, rng: random.Random) -> CalendarEvent:
        """The event to create (any October 2023 day here; subclasses pick the day)."""
        return random_event(rng)

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        ev = cls._target(rng)
        if not ev.description:
            ev = dataclasses.replace(ev, description=DESCRIPTIONS[0])
        noise = _distinct(rng, random_event, rng.randint(0, 12), "title", avoid=[ev])
        return {"year": 2023, "month": 10, "day": ev.start.day, "hour": ev.start.hour,
                "event_title": ev.title, "event_description": ev.description,
                "duration_mins": (ev.end_ts - ev.start_ts) // 60, ROWS: [ev], NOISE: noise,
                "day_of_week": ev.start.strftime("%A")}


_RELATIVE_TAIL = ("at {hour}h with the title '{event_title}' and the description '{event_description}'. The event "
                  "should last for {duration_mins} mins.")


@register
class SimpleCalendarAddOneEventRelativeDay(SimpleCalendarAddOneEvent):
    """The day is named as "this <weekday>": Monday 16 to Saturday 21 October (the device's date is
    Sunday the 15th)."""

    template = "In Simple Calendar Pro, create a calendar event for this {day_of_week} " + _RELATIVE_TAIL

    @classmethod
    def _target(cls, rng: random.Random) -> CalendarEvent:
        return event_on(rng, rng.randint(16, 21))


@register
class SimpleCalendarAddOneEventTomorrow(SimpleCalendarAddOneEvent):
    template = "In Simple Calendar Pro, create a calendar event for tomorrow " + _RELATIVE_TAIL

    @classmethod
    def _target(cls, rng: random.Random) -> CalendarEvent:
        return event_on(rng, 16)


@register
class SimpleCalendarAddOneEventInTwoWeeks(SimpleCalendarAddOneEvent):
    template = "In Simple Calendar Pro, create a calendar event in two weeks from today " + _RELATIVE_TAIL

    @classmethod
    def _target(cls, rng: random.Random) -> CalendarEvent:
        return event_on(rng, 29)


#: AndroidWorld's recurrence choices: the app's ``repeat_interval`` in seconds
REPEAT_INTERVALS = {"daily": 86400, "weekly": 7 * 86400}


def weekly_repeat_rule(iso_weekday: int) -> int:
    """Simple Calendar Pro's weekly ``repeat_rule``: a bit per weekday, Monday = 1 << 0 ... Sunday = 1 << 6."""
    if not 1 <= iso_weekday <= 7:
        raise ValueError(f"iso_weekday must be 1-7, got {iso_weekday}")
    return 1 << (iso_weekday - 1)


@register
class SimpleCalendarAddRepeatingEvent(SimpleCalendarAddOneEvent):
    """A recurring event: ``repeat_interval`` (daily / weekly) and, weekly, the start's weekday bit in
    ``repeat_rule`` are compared too."""

    schema = SimpleCalendarAddOneEvent.schema + ("repeat_rule",)
    template = ("In Simple Calendar Pro, create a recurring calendar event titled '{event_title}' starting on "
                "{year}-{month}-{day} at {hour}h. The event recurs {repeat_rule}, forever, and lasts for "
                "{duration_mins} minutes each occurrence. The event description should be '{event_description}'.")

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        p = super()._random_params(rng)
        kind = rng.choice(sorted(REPEAT_INTERVALS))
        ev = p[ROWS][0]
        rule = weekly_repeat_rule(ev.start.isoweekday()) if kind == "weekly" else 0
        p[ROWS] = [dataclasses.replace(ev, repeat_interval=REPEAT_INTERVALS[kind], repeat_rule=rule)]
        p["repeat_rule"] = kind
        return p


@register
class SimpleCalendarLocationOfEvent(_Calendar):
    complexity = 1.0
    schema = ("title", "location")
    template = "What is the location of my {title} event in Simple Calendar Pro? Answer with the location only."

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        title, location = rng.choice(TITLES), rng.choice(LOCATIONS)
        target = random_event(rng, title=title, location=location)
        noise = [e for e in _distinct(rng, random_event, rng.randint(3, 10), "title", avoid=[target])
                 if title not in e.title]
        return {"title": title, "location": location, ROWS: [target], NOISE: noise}

    def initialize_task(self, device: AndroidDevice) -> None:
        self._ensure_db(device)
        events = sorted(self.params[NOISE] + self.params[ROWS], key=lambda e: e.start_ts)
        self._reset_table(device, events)
        super().initialize_task(device)

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        return 1.0 if V.answer_matches(answer, self.params["location"]) else 0.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        return self.params["location"]  # an answer task: the end state is the answer


def event_on(rng: random.Random, day: int) -> CalendarEvent:
    """A random event moved to October ``day`` 2023 (same hour and duration)."""
    ev = random_event(rng)
    start = int((OCT_2023 + dt.timedelta(days=day - 1, hours=ev.start.hour)).timestamp())
    return dataclasses.replace(ev, start_ts=start, end_ts=start + (ev.end_ts - ev.start_ts))


def _noise_off_days(rng: random.Random, n: int, days: set[int]) -> list[CalendarEvent]:
    """``n`` random October events on none of ``days``."""
    out: list[CalendarEvent] = []
    while len(out) < n:
        ev = random_event(rng)
        if ev.start.day not in days:
            out.append(ev)
    return out


@register
class SimpleCalendarDeleteEvents(_Calendar, _DeleteRows):
    """Every event of one day (3) must go, the 20 events of other days stay (AndroidWorld: the
    removal integrity of ``calendar_evaluators``)."""

    complexity = 1.4
    n_rows = 3
    n_noise = 20
    schema = ("year", "month", "day")
    template = "In Simple Calendar Pro, delete all the calendar events on {year}-{month}-{day}"

    @classmethod
    def _day(cls, rng: random.Random) -> int:
        return rng.randint(1, 31)

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        day = cls._day(rng)
        events = [event_on(rng, day) for _ in range(cls.n_rows)]
        p = {"year": 2023, "month": 10, "day": day, ROWS: events, NOISE: _noise_off_days(rng, cls.n_noise, {day})}
        p["day_of_week"] = events[0].start.strftime("%A")
        return p


@register
class SimpleCalendarDeleteEventsOnRelativeDay(SimpleCalendarDeleteEvents):
    """The day is named relative to the device's date (Sunday 15 October 2023): this Monday
    (the 16th) to this Saturday (the 21st)."""

    complexity = 1.2
    n_rows = 2
    schema = ("day_of_week",)
    template = "In Simple Calendar Pro, delete all events scheduled for this {day_of_week}."

    @classmethod
    def _day(cls, rng: random.Random) -> int:
        return rng.randint(16, 21)


@register
class SimpleCalendarDeleteOneEvent(_Calendar, _DeleteRows):
    """One event named by date, hour and title; 20 others (other start, other title) stay."""

    complexity = 1.2
    n_rows = 1
    n_noise = 20
    schema = ("year", "month", "day", "hour", "event_title")
    template = ("In Simple Calendar Pro, delete the calendar event on {year}-{month}-{day} at {hour}h with the "
                "title '{event_title}'")

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        ev = random_event(rng)
        noise: list[CalendarEvent] = []
        while len(noise) < cls.n_noise:
            cand = random_event(rng)
            if cand.start_ts != ev.start_ts and cand.title != ev.title:
                noise.append(cand)
        return {"year": 2023, "month": 10, "day": ev.start.day, "hour": ev.start.hour, "event_title": ev.title,
                "duration_mins": (ev.end_ts - ev.start_ts) // 60, "event_description": ev.description,
                ROWS: [ev], NOISE: noise}
