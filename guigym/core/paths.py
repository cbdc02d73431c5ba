"""Confining paths that come from task files, results files and episode records to their root.

A task file, a ``results.jsonl`` or an ``episode.json`` is data someone else may have written;
every path it names is relative to a root the host chose (the setup cache, the eval output
directory, the task's own folder). :func:`confine` resolves the path *with symlinks followed*
and refuses anything that ends up outside the root, so ``../../etc/passwd``, ``/etc/passwd``,
``~/.ssh/id_rsa`` and a symlink inside the root pointing out of it are all refused with a
:class:`~guigym.core.errors.TaskSpecError` naming the field.

Task ids become directory names (``out/trajectories/<task_id>/``, ``cache/eval/<task_id>``), so
:func:`check_task_id` allows only a conservative charset that covers the benchmarks' own ids:
OSWorld's UUIDs, MiniWoB++'s ``click-test-2`` / ``flight.AA``, WebArena's numeric ids,
AndroidWorld's class names, AndroidLab's ``calendar_1``.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Union

from guigym.core.errors import TaskSpecError

__all__ = ["TASK_ID_PATTERN", "TASK_ID_MAX_LEN", "check_task_id", "confine", "is_within"]

#: first char alphanumeric or '_' (no leading '.' or '-'), then [A-Za-z0-9._-]; '..' is refused apart
TASK_ID_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
#: a file name is at most 255 bytes; leave room for suffixes the runner and caches append
TASK_ID_MAX_LEN = 200

PathLike = Union[str, "os.PathLike[str]"]


def check_task_id(task_id: object, field: str = "id") -> str:
    """``task_id`` if it is safe as one directory name, else :class:`TaskSpecError` naming ``field``."""
    if not isinstance(task_id, str) or not task_id:
        raise TaskSpecError(f"{field}: a task id must be a non-empty string, got {task_id!r}")
    if len(task_id) > TASK_ID_MAX_LEN:
        raise TaskSpecError(f"{field}: task id {task_id[:40]!r}... is longer than {TASK_ID_MAX_LEN} characters")
    if ".." in task_id or not TASK_ID_PATTERN.fullmatch(task_id):
        raise TaskSpecError(f"{field}: task id {task_id!r} is not a safe directory name: use letters, digits, "
                            "'.', '_' and '-' only, starting with a letter, digit or '_', and no '..'")
    return task_id


def is_within(path: Path, root: Path) -> bool:
    """Whether resolved ``path`` is ``root`` or below it (both already resolved)."""
    return path == root or root in path.parents


def confine(root: PathLike, rel: object, field: str, what: str = "the root directory",
            allow_root: bool = False) -> Path:
    """``root / rel`` resolved (symlinks followed), or :class:`TaskSpecError` when it escapes.

    Args:
        root: the directory the path must stay under (resolved here too).
        rel: the untrusted path, relative to ``root``. Absolute paths, ``~`` and NUL are refused
            (an absolute path that happens to lie under ``root`` is accepted).
        field: where ``rel`` came from, for the message (``config[2].parameters.stdout``).
        what: a name for ``root`` in the message (``the cache directory``).
        allow_root: accept ``rel`` resolving to ``root`` itself (not for file names).
    """
    if not isinstance(rel, (str, os.PathLike)):
        raise TaskSpecError(f"{field}: must be a path string, got {type(rel).__name__}")
    text = os.fspath(rel)
    if not text or "\x00" in text:
        raise TaskSpecError(f"{field}: {text!r} is not a valid path")
    if text.startswith("~"):
        raise TaskSpecError(f"{field}: {text!r} escapes {what} ('~' is not expanded)")
    base = Path(root).resolve()
    target = (base / text).resolve()  # strict=False: a file still to be written need not exist
    if not is_within(target, base) or (target == base and not allow_root):
        raise TaskSpecError(f"{field}: {text!r} escapes {what} ({base})")
    return target
