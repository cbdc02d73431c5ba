"""Task metadata for reporting: name, template, difficulty, optimal steps, apps.

``difficulty`` and ``optimal_steps`` of the tasks implemented here are AndroidWorld's published values
(``android_world/task_metadata.json``, google-research/android_world, Apache-2.0), kept as a small
table of facts; templates and apps come from the task classes. :func:`load_task_metadata` reads
AndroidWorld's full file (all 116 tasks) when the user has it, e.g. from a checkout of the repository.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from guigym.core.errors import TaskSpecError

#: AndroidWorld's (difficulty, optimal_steps) for the tasks implemented here
_PUBLISHED: dict[str, tuple[str, int]] = {
    "AudioRecorderRecordAudioWithFileName": ("easy", 10),
    "CameraTakePhoto": ("easy", 2),
    "CameraTakeVideo": ("medium", 3),
    "ContactsAddContact": ("easy", 5),
    "ExpenseAddMultiple": ("medium", 20),
    "ExpenseAddMultipleFromGallery": ("hard", 10),
    "ExpenseAddMultipleFromMarkor": ("hard", 15),
    "ExpenseAddSingle": ("easy", 6),
    "ExpenseDeleteDuplicates": ("medium", 6),
    "ExpenseDeleteDuplicates2": ("medium", 9),
    "ExpenseDeleteMultiple": ("easy", 10),
    "ExpenseDeleteMultiple2": ("hard", 17),
    "ExpenseDeleteSingle": ("easy", 3),
    "FilesDeleteFile": ("medium", 4),
    "FilesMoveFile": ("medium", 10),
    "MarkorAddNoteHeader": ("medium", 6),
    "MarkorChangeNoteContent": ("medium", 5),
    "MarkorCreateFolder": ("easy", 4),
    "MarkorCreateNote": ("medium", 8),
    "MarkorCreateNoteAndSms": ("hard", 9),
    "MarkorDeleteAllNotes": ("easy", 7),
    "MarkorDeleteNote": ("easy", 5),
    "MarkorEditNote": ("easy", 4),
    "MarkorMergeNotes": ("hard", 39),
    "MarkorMoveNote": ("medium", 7),
    "OpenAppTaskEval": ("easy", 2),
    "RecipeAddMultipleRecipes": ("medium", 34),
    "RecipeAddMultipleRecipesFromImage": ("hard", 13),
    "RecipeAddMultipleRecipesFromMarkor": ("hard", 24),
    "RecipeAddMultipleRecipesFromMarkor2": ("hard", 26),
    "RecipeAddSingleRecipe": ("easy", 12),
    "RecipeDeleteDuplicateRecipes": ("easy", 4),
    "RecipeDeleteDuplicateRecipes2": ("medium", 11),
    "RecipeDeleteDuplicateRecipes3": ("medium", 16),
    "RecipeDeleteMultipleRecipes": ("easy", 12),
    "RecipeDeleteMultipleRecipesWithConstraint": ("hard", 20),
    "RecipeDeleteMultipleRecipesWithNoise": ("medium", 17),
    "RecipeDeleteSingleRecipe": ("easy", 5),
    "RecipeDeleteSingleWithRecipeWithNoise": ("easy", 10),
    "SaveCopyOfReceiptTaskEval": ("hard", 8),
    "SimpleCalendarAddOneEvent": ("hard", 17),
    "SimpleCalendarAddOneEventInTwoWeeks": ("medium", 10),
    "SimpleCalendarAddOneEventRelativeDay": ("easy", 17),
    "SimpleCalendarAddOneEventTomorrow": ("easy", 13),
    "SimpleCalendarAddRepeatingEvent": ("easy", 14),
    "SimpleCalendarAnyEventsOnDate": ("easy", 4),
    "SimpleCalendarDeleteEvents": ("easy", 7),
    "SimpleCalendarDeleteEventsOnRelativeDay": ("medium", 6),
    "SimpleCalendarDeleteOneEvent": ("easy", 6),
    "SimpleCalendarEventOnDateAtTime": ("medium", 3),
    "SimpleCalendarEventsInNextWeek": ("easy", 3),
    "SimpleCalendarEventsInTimeRange": ("easy", 2),
    "SimpleCalendarEventsOnDate": ("medium", 4),
    "SimpleCalendarFirstEventAfterStartTime": ("easy", 2),
    "SimpleCalendarLocationOfEvent": ("easy", 4),
    "SimpleCalendarNextEvent": ("easy", 4),
    "SimpleCalendarNextMeetingWithPerson": ("medium", 5),
    "SimpleDrawProCreateDrawing": ("easy", 9),
    "SimpleSmsReply": ("easy", 4),
    "SimpleSmsReplyMostRecent": ("medium", 5),
    "SimpleSmsResend": ("medium", 6),
    "SimpleSmsSend": ("medium", 6),
    "SimpleSmsSendReceivedAddress": ("medium", 9),
    "SystemBluetoothTurnOff": ("easy", 2),
    "SystemBluetoothTurnOffVerify": ("easy", 2),
    "SystemBluetoothTurnOn": ("easy", 2),
    "SystemBluetoothTurnOnVerify": ("easy", 2),
    "SystemBrightnessMax": ("easy", 3),
    "SystemBrightnessMaxVerify": ("easy", 2),
    "SystemBrightnessMin": ("easy", 3),
    "SystemBrightnessMinVerify": ("easy", 3),
    "SystemWifiTurnOff": ("easy", 3),
    "SystemWifiTurnOffVerify": ("easy", 3),
    "SystemWifiTurnOn": ("easy", 3),
    "SystemWifiTurnOnVerify": ("easy", 3),
    "TasksCompletedTasksForDate": ("medium", 5),
    "TasksDueNextWeek": ("medium", 6),
    "TasksDueOnDate": ("easy", 2),
    "TasksHighPriorityTasks": ("medium", 2),
    "TasksHighPriorityTasksDueOnDate": ("medium", 5),
    "TasksIncompleteTasksOnDate": ("easy", 2),
    "TurnOffWifiAndTurnOnBluetooth": ("medium", 5),
    "TurnOnWifiAndOpenApp": ("easy", 4),
}


def published(name: str) -> "tuple[str, int] | None":
    """AndroidWorld's published (difficulty, optimal_steps) of task ``name``; None when unknown."""
    return _PUBLISHED.get(name)


@dataclass(frozen=True)
class TaskMetadata:
    """One reporting row. ``max_steps`` is ``int(10 * complexity)`` (None for rows read from
    AndroidWorld's file, which does not carry the complexity)."""

    name: str
    template: str
    difficulty: str
    optimal_steps: int
    apps: tuple[str, ...]
    tags: tuple[str, ...] = ()
    max_steps: "int | None" = None


def metadata_table() -> list[TaskMetadata]:
    """A row per implemented task, sorted by name."""
    from guigym.envs.android.androidworld.base import TASKS  # the package __init__ (run before any submodule) registered every task

    rows = []
    for name in TASKS.names():
        cls = TASKS.get(name)
        difficulty, steps = _PUBLISHED[name]
        template = cls.template or getattr(cls, "goal_summary", "")
        rows.append(TaskMetadata(name, template, difficulty, steps, tuple(cls.app_names), (), cls.max_steps()))
    return rows


def load_task_metadata(path: Union[str, Path]) -> list[TaskMetadata]:
    """Rows of AndroidWorld's ``task_metadata.json`` (``task_name``, ``task_template``, ``difficulty``,
    ``tags``, ``optimal_steps`` as a string). TaskSpecError names the file and the bad entry."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise TaskSpecError(f"{p}: cannot read AndroidWorld task metadata ({e})") from None
    if not isinstance(data, list):
        raise TaskSpecError(f"{p}: expected a JSON list of tasks")
    out = []
    for i, t in enumerate(data):
        try:
            out.append(TaskMetadata(str(t["task_name"]), str(t["task_template"]), str(t["difficulty"]),
                                    int(t["optimal_steps"]), (), tuple(x for x in t.get("tags", []) if x)))
        except (KeyError, TypeError, ValueError) as e:
            label = t.get("task_name", "?") if isinstance(t, dict) else repr(t)
            raise TaskSpecError(f"{p}: task #{i} ({label}): bad or missing field {e}") from None
    return out
