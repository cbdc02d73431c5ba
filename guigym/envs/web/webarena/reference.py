"""Reference solutions for WebArena-format tasks, played as an agent that reads only observations.

WebArena's task configs have no reference solution field, and their schema stays untouched: our
solutions live in a sibling file ``reference_solutions.json`` next to the task file::

    {"format": "guigym-webarena-reference/1",
     "solutions": {"<task_id>": [STEP, ...], ...}}

A STEP produces one action in WebArena's id-based dialect from the observation the agent sees:

* a string: sent as is (``"tab_focus [1]"``, ``"scroll [down]"``, ``"stop []"``);
* ``{"do": "click [{id}]", "find": {"role": "link", "name": "Blue Mug", "index": 0}}``: ``{id}``
  becomes the id of the ``index``-th line ``[id] role 'name'`` of the observation's tree text;
* ``{"do": "stop [{match}]", "match": "StaticText '(\\$[\\d.]+)'"}``: ``{match}`` becomes group 1
  (else the whole match) of the first match of the regular expression in the tree text.

Both keys may appear in one step. Nothing in the file is executed: ``do`` is filled by plain
substitution and parsed by the env like any agent reply. A step whose element or pattern is not
in the observation makes the agent answer ``stop []`` with the reason in
:attr:`ReferenceAgent.error`, so a broken solution scores 0 and says why.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional, Union

from guigym.core.errors import TaskSpecError

FORMAT = "guigym-webarena-reference/1"
FILE_NAME = "reference_solutions.json"
_STEP_KEYS = {"do", "find", "match"}
_FIND_KEYS = {"role", "name", "index"}


def check_step(step: Any, where: str) -> None:
    """TaskSpecError naming ``where`` when ``step`` is not a STEP of the module docstring."""
    if isinstance(step, str):
        if not step.strip():
            raise TaskSpecError(f"{where}: an empty action")
        return
    if not isinstance(step, Mapping):
        raise TaskSpecError(f"{where}: a step is an action string or an object, got {type(step).__name__}")
    unknown = set(step) - _STEP_KEYS
    if unknown:
        raise TaskSpecError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(_STEP_KEYS)}")
    do = step.get("do")
    if not isinstance(do, str) or not do.strip():
        raise TaskSpecError(f"{where}: field 'do' must be an action string")
    if "find" in step:
        find = step["find"]
        if not isinstance(find, Mapping) or not isinstance(find.get("role"), str) or \
                not isinstance(find.get("name"), str) or set(find) - _FIND_KEYS:
            raise TaskSpecError(f"{where}: field 'find' must be {{'role': str, 'name': str[, 'index': int]}}")
        if not isinstance(find.get("index", 0), int) or find.get("index", 0) < 0:
            raise TaskSpecError(f"{where}: field 'find.index' must be an int >= 0")
        if "{id}" not in do:
            raise TaskSpecError(f"{where}: field 'do' has no {{id}} for the element 'find' locates")
    if "match" in step:
        if not isinstance(step["match"], str):
            raise TaskSpecError(f"{where}: field 'match' must be a regular expression string")
        try:
            re.compile(step["match"])
        except re.error as exc:
            raise TaskSpecError(f"{where}: field 'match': {exc}") from None
        if "{match}" not in do:
            raise TaskSpecError(f"{where}: field 'do' has no {{match}} for what 'match' finds")
    if "{id}" in do and "find" not in step:
        raise TaskSpecError(f"{where}: field 'do' uses {{id}} but the step has no 'find'")
    if "{match}" in do and "match" not in step:
        raise TaskSpecError(f"{where}: field 'do' uses {{match}} but the step has no 'match'")


def load_references(path: Union[str, Path]) -> dict[int, list[Any]]:
    """``task_id -> steps`` from a ``reference_solutions.json``; every step validated."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TaskSpecError(f"{path}: cannot read reference solutions: {exc}") from None
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise TaskSpecError(f"{path}: field 'format' must be {FORMAT!r}")
    sols = data.get("solutions")
    if not isinstance(sols, Mapping):
        raise TaskSpecError(f"{path}: field 'solutions' must map task ids to step lists")
    out: dict[int, list[Any]] = {}
    for key, steps in sols.items():
        if not str(key).isdigit():
            raise TaskSpecError(f"{path}: solutions key {key!r} is not a task id")
        if not isinstance(steps, list) or not steps:
            raise TaskSpecError(f"{path}: field 'solutions.{key}' must be a non-empty list of steps")
        for i, step in enumerate(steps):
            check_step(step, f"{path}: field 'solutions.{key}[{i}]'")
        out[int(key)] = list(steps)
    return out


def find_id(a11y: str, role: str, name: str, index: int = 0) -> Optional[str]:
    """The id of the ``index``-th ``[id] role 'name'`` line of a WebArena tree text, or None."""
    pattern = rf"^\s*\[(\d+)\] {re.escape(role)} {re.escape(repr(name))}"
    ids = re.findall(pattern, a11y, flags=re.MULTILINE)
    return ids[index] if len(ids) > index else None


class ReferenceAgent:
    """Plays ``steps`` (module docstring) one per observation; then ``stop []``."""

    name = "reference"

    def __init__(self, steps: Sequence[Any]) -> None:
        self.steps = list(steps)
        self.k = 0
        self.error: Optional[str] = None

    def reset(self, info: Mapping[str, Any]) -> None:
        self.k, self.error = 0, None

    def act(self, obs: Mapping[str, Any]) -> str:
        if self.error is not None or self.k >= len(self.steps):
            return "stop []"
        step = self.steps[self.k]
        self.k += 1
        if isinstance(step, str):
            return step
        a11y = str(obs.get("a11y", ""))
        action = str(step["do"])
        if "find" in step:
            f = step["find"]
            found = find_id(a11y, f["role"], f["name"], int(f.get("index", 0)))
            if found is None:
                return self._fail(f"step {self.k - 1}: no {f['role']} {f['name']!r} in the observation")
            action = action.replace("{id}", found)
        if "match" in step:
            m = re.search(step["match"], a11y)
            if m is None:
                return self._fail(f"step {self.k - 1}: pattern {step['match']!r} not in the observation")
            action = action.replace("{match}", m.group(1) if m.groups() else m.group(0))
        return action

    def _fail(self, why: str) -> str:
        self.error = why
        return "stop []"
