"""Simple Calendar Pro question tasks (AndroidWorld's information-retrieval tasks over the calendar,
``information_retrieval/proto/tasks.textproto`` and ``calendar_utils.py``, re-written as classes).

Each instance puts its target events and 75 random October 2023 events into the app's ``events``
table (shuffled); a random event is redrawn while it could change the answer (AndroidWorld's
exclusion conditions, written here as one predicate per task). The agent answers with titles (a
comma-separated list, :func:`answers.list_matches`) or, for the next meeting, a date and time.
Parameter values are AndroidWorld's lists; a date in the goal is reworded as AndroidWorld does
("today", "this Monday", "October 16", ...). Device time: Sunday 15 October 2023 15:34 UTC.
"""
from __future__ import annotations

import datetime as dt
import random
from typing import Any, ClassVar, Optional

from guigym.envs.android.androidworld import answers as A
from guigym.envs.android.androidworld.base import AndroidWorldTask, register
from guigym.envs.android.androidworld.calendar import DESCRIPTIONS, TITLES, CalendarEvent, _Calendar
from guigym.envs.android.androidworld.queries import _RowQuery
from guigym.envs.android.device import AndroidDevice

N_NOISE = 75
DATES = tuple(f"October {d} 2023" for d in range(15, 30))
TIMES = ("11:00am", "1:30pm", "9:45am", "21:45", "10:00am", "3:15pm", "12pm", "6:30am", "8:00pm", "12am", "5:20pm",
         "23:59", "7:45am", "4pm", "10:30am", "16:15", "2:45am", "9:15pm", "11:30am", "20:00")
DURATIONS = ("30 m", "60 minutes", "45min", "1 h", "2 hours", "15 minutes", "1.5 hours", "90 min", "20 min", "3 h",
             "25 minutes", "10 min", "50 min", "2.5 hours", "75 minutes", "5 minutes")
Q_TITLES = ("Team Meeting", "1-on-1 with Manager", "Product demo", "Team lunch", "Coffee with CEO", "Quarterly review",
            "Scrum meeting", "Doctor's appointment", "Birthday party", "Coding challenge", "Board meeting",
            "Marketing strategy workshop", "Movie night", "Dinner with friends", "Concert", "Game night", "Date night",
            "Weekend trip", "Family reunion", "Volunteer cleanup", "Sports game")
PERSONS = ("Amanda", "John", "David", "Lucas", "James", "Ava", "Isabella", "Mia", "Elijah", "Charlotte", "Emily",
           "Muhammad", "Sofia", "Mateo", "Aaliyah", "Daniel")
_SUFFIX = "Answer with the titles only. If there are multiples titles, format your answer in a comma separated list."


def make_event(start: dt.datetime, seconds: int, title: str, description: str = "") -> CalendarEvent:
    ts = int(start.timestamp())
    return CalendarEvent(start_ts=ts, end_ts=ts + seconds, title=title, description=description, location="")


def _span(ev: CalendarEvent) -> tuple[dt.datetime, dt.datetime]:
    utc = dt.timezone.utc
    return dt.datetime.fromtimestamp(ev.start_ts, utc), dt.datetime.fromtimestamp(ev.end_ts, utc)


def overlaps_day(ev: CalendarEvent, day: dt.date) -> bool:
    """The event starts, ends or runs on ``day``."""
    s, e = _span(ev)
    return s.date() <= day <= e.date()


def overlaps(ev: CalendarEvent, lo: dt.datetime, hi: dt.datetime) -> bool:
    """The event's [start, end] meets [lo, hi]."""
    s, e = _span(ev)
    return s <= hi and e >= lo


def random_noise_event(rng: random.Random) -> CalendarEvent:
    """An October 2023 event at a random minute, 15-60 minutes long (AndroidWorld's noise)."""
    start = dt.datetime(2023, 10, 1, tzinfo=dt.timezone.utc) + dt.timedelta(minutes=rng.randrange(31 * 24 * 60))
    return make_event(start, 60 * rng.choice([15, 30, 45, 60]), rng.choice(TITLES), rng.choice(DESCRIPTIONS))


class _CalendarQuery(_Calendar, _RowQuery):
    """75 noise events (AndroidWorld's count for the calendar)."""

    n_noise = N_NOISE

    @classmethod
    def _noise_row(cls, rng: random.Random) -> CalendarEvent:
        return random_noise_event(rng)


class _OneEventQuery(_CalendarQuery):
    """A question about one target event: drawn on a date at one of ``times``, lasting a drawn duration."""

    times: ClassVar[tuple[str, ...]] = TIMES

    @classmethod
    def _values(cls, rng: random.Random) -> dict[str, Any]:
        return {"date": rng.choice(DATES), "time": rng.choice(cls.times), "duration": rng.choice(DURATIONS),
                "title": rng.choice(cls.titles)}

    @classmethod
    def _targets(cls, p: dict[str, Any]) -> list[CalendarEvent]:
        return [make_event(A.at(p["date"], p["time"]), A.parse_duration_s(p["duration"]), p["title"])]


@register
class SimpleCalendarEventsOnDate(_OneEventQuery):
    schema = ("date", "time", "duration", "title")
    template = ("What events do I have {date} in Simple Calendar Pro? Answer with the titles only. If there are "
                "multiple titles, format your answer as a comma separated list.")
    titles: ClassVar[tuple[str, ...]] = ("Data Dive", "Bug Bash", "Dan's Birthday Party", "Trivia Night") + Q_TITLES[2:]

    @classmethod
    def _excluded(cls, ev: CalendarEvent, p: dict[str, Any]) -> bool:
        return overlaps_day(ev, A.parse_date(p["date"]))


@register
class SimpleCalendarEventOnDateAtTime(SimpleCalendarEventsOnDate):
    template = "What is on my schedule for {date} at {time} in Simple Calendar Pro? " + _SUFFIX
    titles = Q_TITLES

    @classmethod
    def _excluded(cls, ev: CalendarEvent, p: dict[str, Any]) -> bool:
        when = A.at(p["date"], p["time"])
        return overlaps(ev, when, when)


@register
class SimpleCalendarAnyEventsOnDate(_CalendarQuery):
    """Three one-hour events on the date (distinct times and titles)."""

    schema = ("date",)
    template = "Do I have any events {date} in Simple Calendar Pro? " + _SUFFIX

    @classmethod
    def _values(cls, rng: random.Random) -> dict[str, Any]:
        return {"date": rng.choice(DATES), "times": rng.sample(TIMES, 3), "titles": rng.sample(Q_TITLES, 3)}

    @classmethod
    def _targets(cls, p: dict[str, Any]) -> list[CalendarEvent]:
        return [make_event(A.at(p["date"], t), 3600, title) for t, title in zip(p["times"], p["titles"])]

    @classmethod
    def _excluded(cls, ev: CalendarEvent, p: dict[str, Any]) -> bool:
        return overlaps_day(ev, A.parse_date(p["date"]))


@register
class SimpleCalendarNextEvent(_CalendarQuery):
    """An event later today; nothing else starts or runs between 15:30 and it."""

    schema = ("time", "title")
    template = ("What is my next upcoming event in Simple Calendar Pro? Answer with the title only. If there are "
                "multiples titles, format your answer in a comma separated list.")
    #: AndroidWorld's list less "12:00am" (midnight of today is in the past, so it cannot be next)
    times: ClassVar[tuple[str, ...]] = ("3:53pm", "21:45", "5pm", "17:30", "16:00", "18:30", "18:45", "7pm", "7:15pm",
                                        "8pm", "8:10pm", "5:20pm", "23:59", "4:00pm", "16:15", "9:15pm", "20:40",
                                        "22:35")

    @classmethod
    def _values(cls, rng: random.Random) -> dict[str, Any]:
        return {"time": rng.choice(cls.times), "duration": rng.choice(DURATIONS), "title": rng.choice(Q_TITLES)}

    @classmethod
    def _targets(cls, p: dict[str, Any]) -> list[CalendarEvent]:
        return [make_event(A.at("October 15 2023", p["time"]), A.parse_duration_s(p["duration"]), p["title"])]

    @classmethod
    def _excluded(cls, ev: CalendarEvent, p: dict[str, Any]) -> bool:
        return overlaps(ev, A.at("October 15 2023", "15:30"), A.at("October 15 2023", p["time"]))


@register
class SimpleCalendarNextMeetingWithPerson(_CalendarQuery):
    """"Drinks with <person>" (30 minutes); no other event names the person. Answered as a date and a
    24-hour time."""

    schema = ("person",)
    template = ("When is my next meeting with {person} in Simple Calendar Pro? Express your answer in the format "
                "<month name> <day> <year> <hour in 24-hour format>:<minutes>.")
    times: ClassVar[tuple[str, ...]] = ("11:00", "1:30pm", "9:45am", "11:00am", "21:45", "10:00am", "3:15pm", "12pm",
                                        "6:30am", "8:00pm", "5:20pm", "23:59", "7:45am", "4pm", "10:30am", "16:15",
                                        "9:15pm", "11:30am", "20:00")

    @classmethod
    def _values(cls, rng: random.Random) -> dict[str, Any]:
        # dates from the device's day on, times after now on the 15th: the meeting is still to come
        date = rng.choice(DATES)
        times = [t for t in cls.times if A.at(date, t) > A.DEVICE_NOW]
        return {"person": rng.choice(PERSONS), "meeting_date": date, "time": rng.choice(times)}

    @classmethod
    def _targets(cls, p: dict[str, Any]) -> list[CalendarEvent]:
        return [make_event(A.at(p["meeting_date"], p["time"]), 1800, f"Drinks with {p['person']}")]

    @classmethod
    def _excluded(cls, ev: CalendarEvent, p: dict[str, Any]) -> bool:
        return p["person"] in ev.title

    def expected_at(self) -> dt.datetime:
        return A.at(self.params["meeting_date"], self.params["time"])

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        AndroidWorldTask.is_successful(self, device, answer)  # the initialised check only
        return 1.0 if A.datetime_matches(answer, self.expected_at()) else 0.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        return self.expected_at().strftime(A.DATE_FORMAT + " %H:%M")


@register
class SimpleCalendarEventsInNextWeek(_CalendarQuery):
    """Two events on distinct days of Monday 16 - Sunday 22 October; no other event that week
    (from today on)."""

    template = ("What events do I have in the next week in Simple Calendar Pro? Assume the week starts from Monday. "
                + _SUFFIX)
    titles: ClassVar[tuple[str, ...]] = ("Product demo", "Team lunch", "Coffee with CEO", "Quarterly review",
                                         "Scrum meeting", "Doctor's appointment", "Birthday party", "Coding challenge",
                                         "Board meeting", "Marketing strategy workshop")

    @classmethod
    def _values(cls, rng: random.Random) -> dict[str, Any]:
        times = ("11:00am", "1:30pm", "9:45am", "21:45", "10:00am", "3:15pm", "12:00pm", "6:30am", "8pm", "12:00am",
                 "5:20pm", "23:59", "7:45am", "4pm", "10:30am", "16:15", "2:45am", "9:15pm", "11:30am", "20:00")
        return {"dates": rng.sample([f"October {d} 2023" for d in range(16, 23)], 2), "times": rng.sample(times, 2),
                "titles": rng.sample(cls.titles, 2), "duration": rng.choice(DURATIONS)}

    @classmethod
    def _targets(cls, p: dict[str, Any]) -> list[CalendarEvent]:
        secs = [A.parse_duration_s(p["duration"]), 1800]
        return [make_event(A.at(d, t), s, title) for d, t, s, title in zip(p["dates"], p["times"], secs, p["titles"])]

    @classmethod
    def _excluded(cls, ev: CalendarEvent, p: dict[str, Any]) -> bool:
        return overlaps(ev, A.at("October 15 2023"), A.at("October 22 2023", "23:59"))


@register
class SimpleCalendarFirstEventAfterStartTime(_OneEventQuery):
    """An event on the date at the time; no other event on that date runs at or after it."""

    schema = ("time", "date", "title")
    template = "What is my first event after {time} {date} in Simple Calendar Pro? " + _SUFFIX
    titles: ClassVar[tuple[str, ...]] = ("Sales Call", "Client Meeting", "Training Session", "Project Kickoff",
                                         "Team Brainstorming", "Dentist Appointment", "Haircut", "Grocery Shopping",
                                         "School Pickup", "Soccer Practice")
    times: ClassVar[tuple[str, ...]] = ("18:05", "11:00am", "1:30pm", "9:45am", "10:00am", "3:15pm", "12pm", "6:30am",
                                        "8:00pm", "5:20pm", "7:45am", "4pm", "10:30am", "16:15", "9:15pm", "11:30am",
                                        "20:00")

    @classmethod
    def _excluded(cls, ev: CalendarEvent, p: dict[str, Any]) -> bool:
        start = A.at(p["date"], p["time"])
        return overlaps(ev, start, start.replace(hour=23, minute=59) + dt.timedelta(minutes=1))


@register
class SimpleCalendarEventsInTimeRange(_CalendarQuery):
    """An event on the date starting at ``start_time``; no other event on the date meets
    [start_time, 8pm]."""

    schema = ("start_time", "date", "title")
    template = "Do I have any events between {start_time} and 8pm {date} in Simple Calendar Pro? " + _SUFFIX
    titles: ClassVar[tuple[str, ...]] = ("Gym", "Dinner with Friends", "Happy Hour", "Evening Walk", "Yoga Class",
                                         "Run in the Park", "Cooking Class", "Movie Night", "Grocery Shopping",
                                         "Pick up Kids from School")
    starts: ClassVar[tuple[str, ...]] = ("11:00am", "1:30pm", "9:45am", "10:00am", "3:15pm", "12pm", "6:30am",
                                         "5:20pm", "7:45am", "4pm", "10:30am", "4:15pm", "11:30am")

    @classmethod
    def _values(cls, rng: random.Random) -> dict[str, Any]:
        return {"start_time": rng.choice(cls.starts), "date": rng.choice(DATES), "duration": rng.choice(DURATIONS),
                "title": rng.choice(cls.titles)}

    @classmethod
    def _targets(cls, p: dict[str, Any]) -> list[CalendarEvent]:
        return [make_event(A.at(p["date"], p["start_time"]), A.parse_duration_s(p["duration"]), p["title"])]

    @classmethod
    def _excluded(cls, ev: CalendarEvent, p: dict[str, Any]) -> bool:
        return overlaps(ev, A.at(p["date"], p["start_time"]), A.at(p["date"], "8pm"))
