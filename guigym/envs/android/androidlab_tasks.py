"""AndroidLab task YAMLs, loaded unmodified into guigym :class:`~guigym.core.task.Task` objects.

Format (THUDM/Android-Lab ``evaluation/config/<app>.yaml``, Xu et al. 2024, "AndroidLab"; read for
facts): top-level ``APP`` (app name), ``package`` (Android package) and ``tasks``, a list of objects
with ``task_id`` (``<app>_<n>``), ``task`` (the instruction), ``metric_type`` (``operation``: judged on
the device state; ``query_detect``: judged on the agent's answer, sometimes on an ``adb_query``),
``metric_func`` (the python module of AndroidLab's evaluator, kept as a label), optional
``category`` and optional ``adb_query`` (a shell command AndroidLab runs after each step; AndroidLab
runs the full string through ``adb``, we keep it as data and never pass it to a shell here).

Mapping: ``id`` = task_id, ``instruction`` = task, ``domain`` = APP, ``suite`` = "androidlab",
``max_steps`` = 25 (``max_rounds`` in every config AndroidLab ships), ``evaluator`` =
``{"metric_type", "metric_func", "adb_query"?}``, ``extra`` = ``{"package", "category"?}``,
``tags`` = [metric_type, category?]. The raw task dict is kept in ``extra["raw"]``. One spelling
variant in the released files (``operations``, map_14) is read as ``operation``.

Every field the judge relies on is checked at load time: bad input raises
:class:`~guigym.core.errors.TaskSpecError` naming the file, the task and the field.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Union

import yaml

from guigym.core.errors import TaskSpecError
from guigym.core.task import Task

SUITE = "androidlab"
METRIC_TYPES = ("operation", "query_detect")
#: spellings found in AndroidLab's released files -> canonical metric_type (map.yaml, map_14, says
#: "operations"; AndroidLab itself never reads the value, its evaluator class decides)
METRIC_TYPE_ALIASES = {"operations": "operation"}
MAX_ROUNDS = 25  # AndroidLab configs/*.yaml: task.args.max_rounds
TASK_KEYS = ("task_id", "task", "metric_type", "metric_func", "category", "adb_query")
TOP_KEYS = ("APP", "package", "tasks")


def _err(path: Union[str, Path], task: str, field: str, msg: str) -> TaskSpecError:
    where = f"{path}: task {task!r}" if task else f"{path}"
    return TaskSpecError(f"{where}: field {field!r}: {msg}")


def _nonempty_str(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def tasks_from_data(data: Any, source: Union[str, Path]) -> list[Task]:
    """Tasks of one parsed AndroidLab YAML document (``source`` is used in messages and ``Task.source``)."""
    if not isinstance(data, dict):
        raise _err(source, "", "<top>", f"expected a mapping with {', '.join(TOP_KEYS)}, got {type(data).__name__}")
    for key in ("APP", "package"):
        if not _nonempty_str(data.get(key)):
            raise _err(source, "", key, f"must be a non-empty string, got {data.get(key)!r}")
    unknown = set(data) - set(TOP_KEYS)
    if unknown:
        raise _err(source, "", sorted(unknown)[0], f"unknown top-level key; known: {', '.join(TOP_KEYS)}")
    raw_tasks = data.get("tasks")
    if not isinstance(raw_tasks, list) or not raw_tasks:
        raise _err(source, "", "tasks", f"must be a non-empty list, got {raw_tasks!r}")
    out: list[Task] = []
    seen: set[str] = set()
    for i, t in enumerate(raw_tasks):
        if not isinstance(t, dict):
            raise _err(source, f"#{i}", "<task>", f"expected a mapping, got {type(t).__name__}")
        tid = t.get("task_id")
        if not _nonempty_str(tid):
            raise _err(source, f"#{i}", "task_id", f"must be a non-empty string, got {tid!r}")
        if tid in seen:
            raise _err(source, tid, "task_id", "duplicate")
        seen.add(tid)
        unknown = set(t) - set(TASK_KEYS)
        if unknown:
            raise _err(source, tid, sorted(unknown)[0], f"unknown key; known: {', '.join(TASK_KEYS)}")
        if not _nonempty_str(t.get("task")):
            raise _err(source, tid, "task", f"must be a non-empty string, got {t.get('task')!r}")
        metric_type = METRIC_TYPE_ALIASES.get(t.get("metric_type"), t.get("metric_type"))
        if metric_type not in METRIC_TYPES:
            raise _err(source, tid, "metric_type", f"must be one of {METRIC_TYPES}, got {t.get('metric_type')!r}")
        if not _nonempty_str(t.get("metric_func")):
            raise _err(source, tid, "metric_func", f"must be a non-empty string, got {t.get('metric_func')!r}")
        for opt in ("category", "adb_query"):
            if opt in t and not _nonempty_str(t[opt]):
                raise _err(source, tid, opt, f"must be a non-empty string when present, got {t[opt]!r}")
        evaluator: dict[str, Any] = {"metric_type": metric_type, "metric_func": t["metric_func"]}
        if "adb_query" in t:
            evaluator["adb_query"] = t["adb_query"]
        extra: dict[str, Any] = {"package": data["package"], "raw": dict(t)}
        if "category" in t:
            extra["category"] = t["category"]
        tags = [metric_type] + ([t["category"]] if "category" in t else [])
        try:
            out.append(Task(id=tid, instruction=t["task"], platform="android", suite=SUITE, domain=data["APP"],
                            evaluator=evaluator, max_steps=MAX_ROUNDS, tags=tags, source=str(source),
                            extra=extra))
        except ValueError as exc:  # TaskSpecError from the id check, or pydantic's ValidationError
            raise _err(source, tid, "task_id", str(exc).splitlines()[0]) from exc
    return out


def load_file(path: Union[str, Path]) -> list[Task]:
    """Tasks of one AndroidLab ``<app>.yaml``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise TaskSpecError(f"{p}: cannot read AndroidLab task file: {exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TaskSpecError(f"{p}: not valid YAML: {exc}") from exc
    return tasks_from_data(data, p)


def load_dir(directory: Union[str, Path], expect: int | None = None) -> list[Task]:
    """All ``*.yaml`` task files in ``directory`` (AndroidLab's ``evaluation/config``), sorted by file name.

    Task ids must be unique across files. ``expect``: the number of tasks there must be (138 for the
    released benchmark); a different count raises :class:`TaskSpecError`.
    """
    d = Path(directory)
    files = sorted(f for f in d.glob("*.yaml") if f.is_file()) if d.is_dir() else []
    if not files:
        raise TaskSpecError(f"{d}: no AndroidLab *.yaml task files found")
    out: list[Task] = []
    where: dict[str, Path] = {}
    for f in files:
        for task in load_file(f):
            if task.id in where:
                raise _err(f, task.id, "task_id", f"duplicate of the task in {where[task.id]}")
            where[task.id] = f
            out.append(task)
    if expect is not None and len(out) != expect:
        raise TaskSpecError(f"{d}: expected {expect} AndroidLab tasks, found {len(out)}")
    return out


def default_task_dir() -> Path | None:
    """``$GUIGYM_ANDROIDLAB_TASKS`` (a checkout's ``evaluation/config``), or None when unset."""
    value = os.environ.get("GUIGYM_ANDROIDLAB_TASKS")
    return Path(value) if value else None


#: AndroidLab's human reference lengths (``evaluation/tasks/human_ground_turth/ground_truth_length.json``,
#: shipped next to the YAMLs): task id -> steps of the human demonstration, RRR's numerator
GROUND_TRUTH_LENGTHS = Path(__file__).parent / "suite" / "androidlab" / "ground_truth_length.json"


def load_ground_truth_lengths(path: Union[str, Path] = GROUND_TRUTH_LENGTHS) -> dict[str, int]:
    """Task id -> reference (human) step count; TaskSpecError naming the file and the entry when a
    value is not a positive integer or the file is not a JSON object."""
    import json

    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TaskSpecError(f"{p}: cannot read AndroidLab ground-truth lengths: {exc}") from None
    if not isinstance(data, dict):
        raise TaskSpecError(f"{p}: expected a JSON object task_id -> steps, got {type(data).__name__}")
    for tid, n in data.items():
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise _err(p, tid, "steps", f"must be a positive integer, got {n!r}")
    return dict(data)


def by_id(tasks: Iterable[Task]) -> dict[str, Task]:
    return {t.id: t for t in tasks}
