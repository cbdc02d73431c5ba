"""Load OSWorld task JSON files, unmodified, into :class:`guigym.core.Task`.

The native format is OSWorld's ``evaluation_examples/examples/<domain>/<id>.json``:

* ``id``, ``instruction`` (required strings);
* ``config``: list of setup steps ``{"type": str, "parameters": dict}``; the types are the
  ``_<type>_setup`` methods of OSWorld's ``desktop_env/controllers/setup.py``;
* ``evaluator``: ``func`` (str or list of str), ``result``/``expected``/``options`` (a dict each,
  or lists as long as ``func``), ``conj`` ("and"/"or"), ``postconfig`` (more setup steps);
  ``desktop_env/desktop_env.py`` (``_set_evaluator_info``) defines these rules;
* anything else (``snapshot``, ``source``, ``trajectory``, ``related_apps``, ``proxy``,
  ``fixed_ip``, ``possibility_of_env_change``, ...) is kept verbatim in ``Task.extra``.

``Task.setup`` is the ``config`` list and ``Task.evaluator`` the ``evaluator`` dict, both
unchanged; :func:`to_osworld_dict` rebuilds the original JSON object from a Task. Placeholders
such as ``{CLIENT_PASSWORD}`` are left in place on load and replaced at setup time with
:func:`substitute` (OSWorld does this in its SetupController).
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional, Union

from guigym.core.errors import ConfigError, TaskSpecError
from guigym.core.task import Task

SUITE = "osworld"

#: Setup step types OSWorld's SetupController knows (``_<type>_setup`` methods).
SETUP_STEP_TYPES: frozenset[str] = frozenset({
    "download", "upload_file", "change_wallpaper", "tidy_desktop", "open", "launch", "execute",
    "execute_with_verification", "command", "sleep", "act", "replay", "activate_window",
    "close_window", "chrome_open_tabs", "chrome_close_tabs", "googledrive", "login",
    "update_browse_history", "proxy",
})

#: Top-level keys mapped onto Task fields; every other key goes to ``Task.extra``.
_CORE_KEYS = ("id", "instruction", "config", "evaluator")

PathLike = Union[str, Path]


# --------------------------------------------------------------------------- placeholders


def osworld_vars(client_password: str = "password", screen_width: int = 1920,
                 screen_height: int = 1080) -> dict[str, str]:
    """The placeholder values OSWorld's SetupController substitutes (halves are floor-divided)."""
    return {
        "CLIENT_PASSWORD": str(client_password),
        "SCREEN_WIDTH": str(int(screen_width)),
        "SCREEN_HEIGHT": str(int(screen_height)),
        "SCREEN_WIDTH_HALF": str(int(screen_width) // 2),
        "SCREEN_HEIGHT_HALF": str(int(screen_height) // 2),
    }


def _effective_vars(vars: Optional[Mapping[str, Any]]) -> dict[str, str]:
    out = osworld_vars()
    if not vars:
        return out
    given = {str(k).strip("{}"): v for k, v in vars.items()}
    for dim in ("WIDTH", "HEIGHT"):  # a custom size also moves its half unless given
        if f"SCREEN_{dim}" in given and f"SCREEN_{dim}_HALF" not in given:
            given[f"SCREEN_{dim}_HALF"] = int(given[f"SCREEN_{dim}"]) // 2
    out.update({k: str(v) for k, v in given.items()})
    return out


def substitute(value: Any, vars: Optional[Mapping[str, Any]] = None) -> Any:
    """Replace ``{NAME}`` placeholders in every string inside nested dicts/lists/tuples.

    ``vars`` maps names (with or without braces) to values and is laid over the defaults
    (password ``"password"``, 1920x1080, halves 960x540); a custom ``SCREEN_WIDTH`` or
    ``SCREEN_HEIGHT`` also sets its ``_HALF`` unless that is given too. Dict keys and
    non-string leaves are left alone; the input is not modified.

    >>> substitute({"cmd": ["echo {CLIENT_PASSWORD}", "{SCREEN_WIDTH_HALF}"], "n": 3})
    {'cmd': ['echo password', '960'], 'n': 3}
    """
    table = _effective_vars(vars)
    return _subst(value, [("{" + k + "}", v) for k, v in table.items()])


def _subst(value: Any, pairs: list[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        for old, new in pairs:
            if old in value:
                value = value.replace(old, new)
        return value
    if isinstance(value, Mapping):
        return {k: _subst(v, pairs) for k, v in value.items()}
    if isinstance(value, list):
        return [_subst(v, pairs) for v in value]
    if isinstance(value, tuple):
        return tuple(_subst(v, pairs) for v in value)
    return value


# --------------------------------------------------------------------------- validation


def _fail(source: str, field: str, problem: str) -> TaskSpecError:
    where = source or "<task dict>"
    return TaskSpecError(f"{where}: field {field!r} {problem}")


def _type_name(value: Any) -> str:
    return type(value).__name__


def _check_steps(steps: Any, field: str, source: str) -> None:
    """Setup steps as OSWorld's ``SetupController.setup`` reads them."""
    if not isinstance(steps, list):
        raise _fail(source, field, f"must be a list of setup steps, got {_type_name(steps)}")
    for i, step in enumerate(steps):
        where = f"{field}[{i}]"
        if not isinstance(step, Mapping):
            raise _fail(source, where, f"must be an object with 'type' and 'parameters', got {_type_name(step)}")
        kind = step.get("type")
        if not isinstance(kind, str):
            raise _fail(source, f"{where}.type", f"must be a string, got {_type_name(kind)}")
        if kind not in SETUP_STEP_TYPES:
            known = ", ".join(sorted(SETUP_STEP_TYPES))
            raise _fail(source, f"{where}.type", f"is an unknown setup step type {kind!r}; known: {known}")
        if not isinstance(step.get("parameters"), Mapping):
            raise _fail(source, f"{where}.parameters",
                        f"must be an object of keyword parameters, got {_type_name(step.get('parameters'))}")


def _check_getter(spec: Any, field: str, source: str, *, allow_none: bool) -> None:
    if spec is None and allow_none:
        return
    if not isinstance(spec, Mapping):
        raise _fail(source, field, f"must be a getter object with a 'type', got {_type_name(spec)}")
    if not isinstance(spec.get("type"), str):
        raise _fail(source, f"{field}.type", f"must be a string naming a getter, got {_type_name(spec.get('type'))}")


def _present(evaluator: Mapping[str, Any], key: str) -> bool:
    """OSWorld treats a missing key and an empty value alike (``len(...) > 0``)."""
    value = evaluator.get(key)
    return value is not None and not (isinstance(value, (list, dict, str)) and len(value) == 0)


def validate_evaluator(evaluator: Any, source: str = "") -> None:
    """Check an OSWorld ``evaluator`` dict against the rules of ``desktop_env.py``.

    Raises :class:`TaskSpecError` naming ``source`` and the offending field.
    """
    if not isinstance(evaluator, Mapping):
        raise _fail(source, "evaluator", f"must be an object, got {_type_name(evaluator)}")
    if "func" not in evaluator:
        raise _fail(source, "evaluator.func", "is missing")
    func = evaluator["func"]
    if isinstance(func, str):
        if not func:
            raise _fail(source, "evaluator.func", "must not be empty")
        if _present(evaluator, "result"):
            _check_getter(evaluator["result"], "evaluator.result", source, allow_none=False)
        if _present(evaluator, "expected"):
            _check_getter(evaluator["expected"], "evaluator.expected", source, allow_none=False)
        if "options" in evaluator and not isinstance(evaluator["options"], (Mapping, type(None))):
            raise _fail(source, "evaluator.options",
                        f"must be an object when 'func' is a string, got {_type_name(evaluator['options'])}")
    elif isinstance(func, list):
        if not func:
            raise _fail(source, "evaluator.func", "must not be an empty list")
        for i, name in enumerate(func):
            if not isinstance(name, str) or not name:
                raise _fail(source, f"evaluator.func[{i}]", f"must be a non-empty string, got {name!r}")
        n = len(func)
        for key in ("result", "expected", "options"):
            if key == "options" and key not in evaluator:
                continue
            if key != "options" and not _present(evaluator, key):
                continue
            value = evaluator[key]
            if not isinstance(value, list):
                raise _fail(source, f"evaluator.{key}",
                            f"must be a list of {n} entries like 'func', got {_type_name(value)}")
            if len(value) != n:
                raise _fail(source, f"evaluator.{key}",
                            f"has {len(value)} entries but 'func' has {n}; OSWorld needs equal lengths")
            for i, item in enumerate(value):
                if key == "options":
                    if not isinstance(item, (Mapping, type(None))):
                        raise _fail(source, f"evaluator.options[{i}]",
                                    f"must be an object or null, got {_type_name(item)}")
                else:
                    _check_getter(item, f"evaluator.{key}[{i}]", source, allow_none=(key == "expected"))
    else:
        raise _fail(source, "evaluator.func", f"must be a string or a list of strings, got {_type_name(func)}")
    conj = evaluator.get("conj", "and")
    if conj not in ("and", "or"):
        raise _fail(source, "evaluator.conj", f"must be 'and' or 'or', got {conj!r}")
    if "postconfig" in evaluator:
        _check_steps(evaluator["postconfig"], "evaluator.postconfig", source)


# --------------------------------------------------------------------------- loading


def _domain_from(data: Mapping[str, Any]) -> str:
    apps = data.get("related_apps")
    if isinstance(apps, list) and apps:
        return str(apps[0]) if len(apps) == 1 else "multi_apps"
    return ""


def parse_osworld_task(data: Any, *, source: str = "", domain: Optional[str] = None,
                       max_steps: Optional[int] = None) -> Task:
    """Build a Task from one OSWorld task object (already parsed JSON).

    ``domain``: the examples folder name when known (what OSWorld's result tables use);
    otherwise the single ``related_apps`` entry, ``"multi_apps"`` for several, or ``""``.
    """
    if not isinstance(data, Mapping):
        raise _fail(source, "<root>", f"must be a JSON object, got {_type_name(data)}")
    for key in ("id", "instruction"):
        if key not in data:
            raise _fail(source, key, "is missing")
        if not isinstance(data[key], str) or not data[key].strip():
            raise _fail(source, key, f"must be a non-empty string, got {data[key]!r}")
    if "evaluator" not in data:
        raise _fail(source, "evaluator", "is missing")
    config = data.get("config", [])
    _check_steps(config, "config", source)
    validate_evaluator(data["evaluator"], source)
    extra = {k: v for k, v in data.items() if k not in _CORE_KEYS}
    kwargs: dict[str, Any] = {}
    if max_steps is not None:
        kwargs["max_steps"] = max_steps
    return Task(
        id=data["id"], instruction=data["instruction"], platform="desktop", suite=SUITE,
        domain=domain if domain is not None else _domain_from(data),
        setup=list(config), evaluator=dict(data["evaluator"]), source=source, extra=extra, **kwargs,
    )


def load_osworld_task(path: PathLike, domain: Optional[str] = None, *,
                      max_steps: Optional[int] = None) -> Task:
    """Load one OSWorld task file; see :func:`parse_osworld_task` for ``domain``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise TaskSpecError(f"{path}: cannot read task file: {e.strerror or e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise TaskSpecError(f"{path}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    return parse_osworld_task(data, source=str(path), domain=domain, max_steps=max_steps)


def load_osworld_dir(path: PathLike, *, max_steps: Optional[int] = None) -> list[Task]:
    """Load every ``<domain>/<id>.json`` under ``path`` (OSWorld's ``examples`` folder).

    The folder name is the domain. A folder that holds task files directly is read as one
    domain. Tasks come sorted by (domain, file name); a repeated id is an error.
    """
    root = Path(path)
    if not root.is_dir():
        raise TaskSpecError(f"{root}: not a directory of OSWorld tasks (<domain>/<id>.json)")
    files = [(d.name, f) for d in sorted(root.iterdir()) if d.is_dir() for f in sorted(d.glob("*.json"))]
    if not files:
        files = [(root.name, f) for f in sorted(root.glob("*.json"))]
    if not files:
        raise TaskSpecError(f"{root}: no task files found (expected <domain>/<id>.json)")
    tasks: list[Task] = []
    seen: dict[str, str] = {}
    for domain, f in files:
        task = load_osworld_task(f, domain=domain, max_steps=max_steps)
        if task.id in seen:
            raise TaskSpecError(f"{f}: field 'id' {task.id!r} repeats the id of {seen[task.id]}")
        seen[task.id] = str(f)
        tasks.append(task)
    return tasks


def to_osworld_dict(task: Task) -> dict[str, Any]:
    """The OSWorld JSON object a Task was loaded from (key order aside; a missing ``config``
    comes back as ``[]``)."""
    out: dict[str, Any] = {"id": task.id, "instruction": task.instruction, "config": list(task.setup),
                           "evaluator": dict(task.evaluator)}
    out.update(task.extra)
    return out


# --------------------------------------------------------------------------- task files


def _index_tasks(index: Path, examples: Path) -> list[tuple[str, Path]]:
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"--tasks: cannot read task index {index}: {e}") from None
    if not isinstance(data, Mapping) or not all(isinstance(v, list) for v in data.values()):
        raise ConfigError(f"--tasks: {index} is not an OSWorld index ({{domain: [task id, ...]}})")
    return [(str(d), examples / str(d) / f"{i}.json") for d, ids in data.items() for i in ids]


def find_task_files(root: Path) -> list[tuple[str, Path]]:
    """``(domain, task file)`` pairs under ``root`` (layouts: OSWorld's ``evaluation_examples``
    with a ``test_all.json`` index + ``examples/``, an ``examples`` folder of
    ``<domain>/<id>.json``, one domain folder, or an index JSON file next to an ``examples``
    folder).

    With an index, every indexed id is listed even when its file is missing (the audit then
    marks it ``invalid``). Without one, ``template.json`` and files outside domain folders of an
    ``examples`` tree are skipped.
    """
    root = Path(root)
    if root.is_file():
        return _index_tasks(root, root.parent / "examples")
    if not root.is_dir():
        raise ConfigError(f"--tasks: {root} is neither a directory nor a task index file")
    if (root / "test_all.json").is_file() and (root / "examples").is_dir():
        return _index_tasks(root / "test_all.json", root / "examples")
    if (root / "evaluation_examples" / "test_all.json").is_file():
        return find_task_files(root / "evaluation_examples")
    base = root / "examples" if (root / "examples").is_dir() else root
    pairs = [(d.name, f) for d in sorted(base.iterdir()) if d.is_dir() for f in sorted(d.glob("*.json"))]
    if not pairs:
        pairs = [(root.name, f) for f in sorted(root.glob("*.json")) if f.name != "template.json"]
    if not pairs:
        raise ConfigError(f"--tasks: no OSWorld task files under {root} (expected <domain>/<id>.json)")
    return pairs
