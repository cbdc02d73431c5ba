"""Tasks app (org.tasks) question tasks (AndroidWorld's information-retrieval tasks over its ``tasks``
table: ``information_retrieval/task_app_utils.py`` and ``proto/tasks.textproto``, re-written).

The database is ``/data/data/org.tasks/databases/database``, table ``tasks`` (AndroidWorld's
``sqlite_schema_utils.Task`` row; dates in milliseconds, 0 = none; ``importance`` 0 is the app's
high priority). Each instance inserts its target tasks and 20 random ones that cannot change the
answer (:mod:`.queries`); the answer is a comma-separated list of titles, or a count.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import random
from typing import Any, ClassVar, Optional

from guigym.envs.android.androidworld import answers as A
from guigym.envs.android.androidworld.base import register
from guigym.envs.android.androidworld.queries import _RowQuery

DB_PATH = "/data/data/org.tasks/databases/database"
UTC = dt.timezone.utc


@dataclasses.dataclass(frozen=True)
class TaskRow:
    """A row of the Tasks app's ``tasks`` table (timestamps in ms)."""

    title: str
    importance: int = 2
    dueDate: int = 0  # noqa: N815 - the app's column names
    hideUntil: int = 0  # noqa: N815
    created: int = 0
    modified: int = 0
    completed: int = 0
    deleted: int = 0
    notes: Optional[str] = None
    estimatedSeconds: int = 0  # noqa: N815
    elapsedSeconds: int = 0  # noqa: N815
    timerStart: int = 0  # noqa: N815
    notificationFlags: int = 0  # noqa: N815
    lastNotified: int = 0  # noqa: N815
    recurrence: Optional[str] = None
    repeat_from: int = 0
    calendarUri: Optional[str] = None  # noqa: N815
    remoteId: str = ""  # noqa: N815
    collapsed: int = 0
    parent: int = 0
    order: Optional[int] = None
    read_only: int = 0
    _id: int = -1

    @property
    def due(self) -> Optional[dt.datetime]:
        return dt.datetime.fromtimestamp(self.dueDate / 1000, UTC) if self.dueDate else None


TASKS_SCHEMA = ('CREATE TABLE tasks (_id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT, importance INTEGER, '
                'dueDate INTEGER, hideUntil INTEGER, created INTEGER, modified INTEGER, completed INTEGER, '
                'deleted INTEGER, notes TEXT, estimatedSeconds INTEGER, elapsedSeconds INTEGER, timerStart INTEGER, '
                'notificationFlags INTEGER, lastNotified INTEGER, recurrence TEXT, repeat_from INTEGER, '
                'calendarUri TEXT, remoteId TEXT, collapsed INTEGER, parent INTEGER, "order" INTEGER, '
                'read_only INTEGER)')

WORK_TITLES = ("Complete project proposal", "Review code changes", "Schedule team meeting", "Submit expense report",
               "Update website content", "Review quarterly goals", "Organize files and folders",
               "Draft marketing email", "Attend networking event", "Prepare presentation for meeting",
               "Call client for follow-up", "Research market trends", "Follow up on support tickets",
               "Prepare agenda for weekly meeting", "Book flights for conference", "Plan team outing",
               "Participate in brainstorming session", "Review performance metrics", "Attend training session",
               "Send report to manager")
MORE_TITLES = WORK_TITLES + ("Dinner with friends", "Organize movie night", "Exercise session with coach",
                             "Read book for book club", "Plan family reunion")
NOTES = ("This is high priority.", "This is urgent.", "Remember to review ahead of time.", "Double-check details.",
         "Schedule time on calendar.", "Follow up with others.", "Send emails to everyone.", "Send an update.",
         "Monitor email for updates on this.", "Check handwritten notes.", "Complete survey.",
         "Schedule follow-up tasks.")
#: guigym's own everyday tasks for the random rows (title -> note)
NOISE_TASKS = {
    "Buy groceries": "Milk, eggs, rice and apples.", "Water the plants": "The fern needs less water.",
    "Renew library card": "Bring a proof of address.", "Fix the bike light": "Spare batteries in the drawer.",
    "Call the plumber": "Kitchen tap is dripping.", "Back up the laptop": "Use the external drive.",
    "Clean the garage": "Donate the old shelves.", "Pay electricity bill": "Due before the end of month.",
    "Book haircut": "Saturday morning if possible.", "Pick up dry cleaning": "Ticket is in the wallet.",
    "Write thank-you cards": "For the birthday gifts.", "Plan weekend hike": "Check the weather first.",
    "Update phone apps": "Free some storage first.", "Sort old photos": "Make an album for grandma.",
}
DATES = tuple(f"October {d} 2023" for d in range(15, 30))
TIMES = ("11:00am", "1:30pm", "9:45am", "21:45", "10:00am", "3:15pm", "12pm", "6:30am", "8:00pm", "12am", "5:20pm",
         "23:59", "7:45am", "4pm", "10:30am", "16:15", "2:45am", "9:15pm", "11:30am", "20:00")
_SUFFIX = "Answer with the titles only. If there are multiples titles, format your answer in a comma separated list."


def _ms(when: dt.datetime) -> int:
    return int(when.timestamp()) * 1000


def make_task(title: str, due: Optional[dt.datetime], importance: int = 2, notes: Optional[str] = None,
              hide_until: Optional[dt.datetime] = None, completed: Optional[dt.datetime] = None,
              remote_id: str = "") -> TaskRow:
    """A row as AndroidWorld writes it: created/modified 7 hours before the due date."""
    due_ms = _ms(due) if due else 0
    created = due_ms - 7 * 3600 * 1000 if due_ms else 0
    return TaskRow(title=title, importance=importance, dueDate=due_ms, hideUntil=_ms(hide_until) if hide_until else 0,
                   created=created, modified=created, completed=_ms(completed) if completed else 0, notes=notes,
                   remoteId=remote_id)


def random_task(rng: random.Random) -> TaskRow:
    """A random row: due at a random minute of 1 Oct - 14 Nov 2023, hidden until ~6 days before,
    completed (around 1 October) half the time."""
    due = dt.datetime(2023, 10, 1, tzinfo=UTC) + dt.timedelta(minutes=rng.randrange(45 * 24 * 60))
    hide = due - dt.timedelta(days=6) + dt.timedelta(minutes=rng.randrange(-2 * 24 * 60, 2 * 24 * 60))
    done = (dt.datetime(2023, 10, 1, tzinfo=UTC) + dt.timedelta(minutes=rng.randrange(-7 * 24 * 60, 7 * 24 * 60))
            if rng.random() < 0.5 else None)
    title = rng.choice(sorted(NOISE_TASKS))
    return make_task(title, due, rng.randint(0, 3), NOISE_TASKS[title] if rng.random() < 0.5 else None, hide, done,
                     str(rng.getrandbits(64)))


def _on(row: TaskRow, date_text: str) -> bool:
    return row.due is not None and row.due.date() == A.parse_date(date_text)


class _TasksQuery(_RowQuery):
    app_names = ("tasks",)
    db_path = DB_PATH
    table, key, package, launch_name = "tasks", "_id", "org.tasks", "tasks"
    row_type = TaskRow
    n_noise = 20

    @classmethod
    def _noise_row(cls, rng: random.Random) -> TaskRow:
        return random_task(rng)


@register
class TasksDueOnDate(_TasksQuery):
    """Three tasks due on the date; no other task is due that day."""

    schema = ("date",)
    template = "What tasks do I have due {date} in Tasks app? " + _SUFFIX
    hides: ClassVar[tuple[str, ...]] = ("October 10 2023 8:00", "October 9 2023 10:00", "October 11 2023 9:00")

    @classmethod
    def _values(cls, rng: random.Random) -> dict[str, Any]:
        return {"date": rng.choice(DATES), "titles": rng.sample(WORK_TITLES, 3),
                "importances": rng.sample([0, 0, 1, 1, 2, 2, 3, 3], 3), "notes": rng.sample(NOTES, 3)}

    @classmethod
    def _targets(cls, p: dict[str, Any]) -> list[TaskRow]:
        hides = [dt.datetime.strptime(h, "%B %d %Y %H:%M").replace(tzinfo=UTC) for h in cls.hides]
        return [make_task(t, A.at(p["date"]), i, n, h) for t, i, n, h in
                zip(p["titles"], p["importances"], p["notes"], hides)]

    @classmethod
    def _excluded(cls, row: TaskRow, p: dict[str, Any]) -> bool:
        return _on(row, p["date"])


@register
class TasksHighPriorityTasks(_TasksQuery):
    """One task of importance 0 (the app's high priority); every other task has another importance."""

    template = "What are my high priority tasks in Tasks app? " + _SUFFIX

    @classmethod
    def _values(cls, rng: random.Random) -> dict[str, Any]:
        return {"task_title": rng.choice(WORK_TITLES), "notes": rng.choice(NOTES),
                "due_date": f"October {rng.randint(16, 22)} 2023", "time": rng.choice(TIMES),
                "hide_until_date": f"October {rng.randint(10, 15)} 2023"}

    @classmethod
    def _targets(cls, p: dict[str, Any]) -> list[TaskRow]:
        return [make_task(p["task_title"], A.at(p["due_date"], p["time"]), 0, p["notes"],
                          A.at(p["hide_until_date"], p["time"]))]

    @classmethod
    def _excluded(cls, row: TaskRow, p: dict[str, Any]) -> bool:
        return row.importance == 0


@register
class TasksHighPriorityTasksDueOnDate(_TasksQuery):
    """One high-priority task due on the date; no other high-priority task is due that day."""

    schema = ("date",)
    template = ("Which tasks with high priority are due {date} in the Tasks app? Answer with the title only. If there "
                "are multiples titles, format your answer in a comma separated list.")
    titles: ClassVar[tuple[str, ...]] = ("Project Milestone Review", "Submit Budget Report", "Proposal Draft Submission",
                                         "Team Sync-Up Meeting", "Client Feedback Session", "Code Review",
                                         "Marketing Campaign Launch", "Product Design Review",
                                         "Stakeholder Update Meeting", "Quarterly Sales Review")
    times: ClassVar[tuple[str, ...]] = ("5:00pm", "12:00pm", "8:00am", "11:59pm", "2:00pm", "9:00am", "3:30pm",
                                        "10:00am", "4:45pm", "7:00pm")

    @classmethod
    def _values(cls, rng: random.Random) -> dict[str, Any]:
        return {"date": rng.choice(DATES), "time": rng.choice(cls.times), "title": rng.choice(cls.titles)}

    @classmethod
    def _targets(cls, p: dict[str, Any]) -> list[TaskRow]:
        return [make_task(p["title"], A.at(p["date"], p["time"]), 0)]

    @classmethod
    def _excluded(cls, row: TaskRow, p: dict[str, Any]) -> bool:
        return row.importance == 0 and _on(row, p["date"])


@register
class TasksDueNextWeek(_TasksQuery):
    """Six tasks due on distinct days of Monday 16 - Sunday 22 October; no other task due that week.
    Answered with the count."""

    complexity = 1.2
    answer_kind = "number"
    template = ("How many tasks do I have due next week in Tasks app? Assume the week starts from Monday. Express "
                "your answer as a single integer.")

    @classmethod
    def _values(cls, rng: random.Random) -> dict[str, Any]:
        return {"titles": rng.sample(MORE_TITLES, 6), "notes": rng.sample(NOTES, 6),
                "due_dates": rng.sample([f"October {d} 2023" for d in range(16, 23)], 6)}

    @classmethod
    def _targets(cls, p: dict[str, Any]) -> list[TaskRow]:
        return [make_task(t, A.at(d), 2, n) for t, n, d in zip(p["titles"], p["notes"], p["due_dates"])]

    @classmethod
    def _excluded(cls, row: TaskRow, p: dict[str, Any]) -> bool:
        return row.due is not None and dt.date(2023, 10, 16) <= row.due.date() <= dt.date(2023, 10, 22)

    @classmethod
    def _expected(cls, p: dict[str, Any], targets: list[TaskRow]) -> list[str]:
        return [str(len(targets))]


@register
class TasksCompletedTasksForDate(_TasksQuery):
    """Three tasks due on the date, completed on ``completed_date``; no other task is due that day."""

    schema = ("date",)
    template = "Which tasks have I completed for {date} in Tasks app? " + _SUFFIX

    @classmethod
    def _values(cls, rng: random.Random) -> dict[str, Any]:
        return {"date": f"October {rng.randint(10, 20)} 2023", "completed_date": f"October {rng.randint(10, 15)} 2023",
                "titles": rng.sample(MORE_TITLES, 3), "notes": rng.sample(NOTES, 3), "times": rng.sample(TIMES, 3)}

    @classmethod
    def _targets(cls, p: dict[str, Any]) -> list[TaskRow]:
        hides = ("October 10 2023", "October 9 2023", "October 11 2023")
        return [make_task(t, A.at(p["date"]), 2, n, A.at(h, tm), A.at(p["completed_date"], tm))
                for t, n, h, tm in zip(p["titles"], p["notes"], hides, p["times"])]

    @classmethod
    def _excluded(cls, row: TaskRow, p: dict[str, Any]) -> bool:
        return _on(row, p["date"])


@register
class TasksIncompleteTasksOnDate(_TasksQuery):
    """Three incomplete tasks due on the date; no other incomplete task is due by then."""

    schema = ("date",)
    template = "What incomplete tasks do I have still have to do by {date} in Tasks app? " + _SUFFIX

    @classmethod
    def _values(cls, rng: random.Random) -> dict[str, Any]:
        return {"date": rng.choice(DATES), "titles": rng.sample(MORE_TITLES, 3), "importances": rng.sample(range(4), 3),
                "notes": rng.sample(NOTES, 3), "times": rng.sample(TIMES, 3)}

    @classmethod
    def _targets(cls, p: dict[str, Any]) -> list[TaskRow]:
        hides = ("October 10 2023", "October 9 2023", "October 11 2023")
        return [make_task(t, A.at(p["date"]), i, n, A.at(h, tm))
                for t, i, n, h, tm in zip(p["titles"], p["importances"], p["notes"], hides, p["times"])]

    @classmethod
    def _excluded(cls, row: TaskRow, p: dict[str, Any]) -> bool:
        return not row.completed and row.due is not None and row.due.date() <= A.parse_date(p["date"])
