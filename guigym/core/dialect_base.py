"""The bottom of the action dialects: the :data:`DIALECTS` registry, the :class:`Dialect`
protocol, :func:`build_action` / :func:`parse_call` and the canonical dialect. Every benchmark
dialect in :mod:`guigym.core.dialects` imports this module and registers itself; this module
imports none of them (the look-up that loads them all is :func:`guigym.core.dialect.get_dialect`,
which re-exports everything here, so ``from guigym.core.dialect import DIALECTS`` keeps working).

The canonical dialect prints one call per line with keyword arguments, in field order,
omitting fields that hold their default::

    click(x=12, y=40)        click(element="17")        type(text="hi")
    hotkey(keys=["ctrl", "c"])    scroll(dy=120)        done(answer="42")

Parsing uses :mod:`ast` on a single expression and :func:`ast.literal_eval` on each argument, so
agent text is never executed: only a call of a known verb with literal arguments is accepted.
Positional arguments fill fields in order (``click(12, 40)``).
"""
from __future__ import annotations

import ast
import json
from dataclasses import MISSING, fields
from typing import Any, Protocol, Union, get_args, get_origin, get_type_hints

from guigym.core import actions as A
from guigym.core.errors import ActionParseError
from guigym.core.registry import Registry

#: longest action string we try to parse; longer text is refused before ``ast`` sees it
MAX_ACTION_CHARS = 20_000


class Dialect(Protocol):
    """Parses agent text into a typed action and prints a typed action back."""

    name: str

    def parse(self, text: str) -> A.Action: ...

    def format(self, action: A.Action) -> str: ...


DIALECTS: Registry[type] = Registry("action dialect")


def _quote(value: str) -> str:
    # JSON string syntax is a subset of Python's literal syntax; ensure_ascii=False keeps astral
    # characters whole (JSON would split them into surrogate pairs that literal_eval keeps split).
    return json.dumps(value, ensure_ascii=False)


def _format_value(value: Any) -> str:
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_format_value(v) for v in value) + "]"
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return repr(value)  # keep the float type so print->parse is the identity
    return repr(value)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type[A.Action]) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = get_type_hints(cls)
    return _HINTS[cls]


def _coerce(cls: type[A.Action], field: str, value: Any) -> Any:
    """Check ``value`` against the field's annotation; return it converted (list -> tuple)."""
    hint = _hints(cls)[field]
    allowed = get_args(hint) if get_origin(hint) is Union else (hint,)
    if type(value) in allowed:  # exact match first: keeps 3.0 a float where floats are allowed
        return value
    for typ in allowed:
        if typ is type(None) and value is None:
            return None
        if typ in (int, float) and isinstance(value, (int, float)) and not isinstance(value, bool):
            if typ is int and isinstance(value, float):
                if not value.is_integer():
                    continue
                return int(value)
            return value
        if typ is str and isinstance(value, str):
            return value
        if get_origin(typ) is tuple and isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return tuple(value)
    want = " or ".join("null" if t is type(None) else getattr(t, "__name__", str(t)) for t in allowed)
    raise ActionParseError(f"{cls.name}: argument {field}={value!r} should be {want}")


def build_action(cls: type[A.Action], kwargs: dict[str, Any], text: str = "") -> A.Action:
    """Construct and validate ``cls(**kwargs)``, turning every problem into an ActionParseError."""
    names = [f.name for f in fields(cls)]
    unknown = sorted(set(kwargs) - set(names))
    if unknown:
        raise ActionParseError(
            f"{cls.name}: unknown argument(s) {', '.join(unknown)}; expected {', '.join(names) or 'none'}", text
        )
    values = {k: _coerce(cls, k, v) for k, v in kwargs.items()}
    missing = [f.name for f in fields(cls) if f.default is MISSING and f.name not in values]
    if missing:
        raise ActionParseError(f"{cls.name}: missing argument(s) {', '.join(missing)}", text)
    action = cls(**values)
    try:
        action.validate()
    except ValueError as exc:
        raise ActionParseError(str(exc), text) from None
    return action


def parse_call(text: str) -> tuple[str, list[Any], dict[str, Any]]:
    """Parse ``verb(arg, key=value, ...)`` with literal arguments; return (verb, args, kwargs)."""
    if not isinstance(text, str):
        raise ActionParseError(f"action must be a string, got {type(text).__name__}", str(text))
    src = text.strip()
    if not src:
        raise ActionParseError("empty action: expected a call such as click(x=10, y=20)", text)
    if len(src) > MAX_ACTION_CHARS:
        raise ActionParseError(f"action is {len(src)} characters long; the limit is {MAX_ACTION_CHARS}", text[:200])
    try:
        tree = ast.parse(src, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ActionParseError(f"not a single call expression ({type(exc).__name__}): {src[:120]!r}", text) from None
    call = tree.body
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        raise ActionParseError(f"expected a call like click(x=10, y=20), got {src[:120]!r}", text)
    try:
        args = [ast.literal_eval(a) for a in call.args]
        kwargs: dict[str, Any] = {}
        for kw in call.keywords:
            if kw.arg is None:
                raise ActionParseError("**kwargs are not allowed in an action", text)
            if kw.arg in kwargs:
                raise ActionParseError(f"argument {kw.arg!r} given twice", text)
            kwargs[kw.arg] = ast.literal_eval(kw.value)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError) as exc:
        raise ActionParseError(f"arguments must be literals (numbers, strings, lists): {exc}", text) from None
    return call.func.id, args, kwargs


@DIALECTS.register("canonical")
class CanonicalDialect:
    """guigym's own dialect: ``verb(field=value, ...)`` over :data:`actions.ACTIONS_BY_NAME`."""

    name = "canonical"

    def parse(self, text: str) -> A.Action:
        verb, args, kwargs = parse_call(text)
        cls = A.ACTIONS_BY_NAME.get(verb)
        if cls is None:
            known = ", ".join(sorted(A.ACTIONS_BY_NAME))
            raise ActionParseError(f"unknown action {verb!r}; known actions: {known}", text)
        names = [f.name for f in fields(cls)]
        if len(args) > len(names):
            raise ActionParseError(f"{verb}: takes at most {len(names)} positional argument(s), got {len(args)}", text)
        for name, value in zip(names, args):
            if name in kwargs:
                raise ActionParseError(f"{verb}: argument {name!r} given twice", text)
            kwargs[name] = value
        return build_action(cls, kwargs, text)

    def format(self, action: A.Action) -> str:
        parts = []
        for f in fields(action):  # type: ignore[arg-type]
            value = getattr(action, f.name)
            if f.default is not MISSING and value == f.default and type(value) is type(f.default):
                continue
            parts.append(f"{f.name}={_format_value(value)}")
        return f"{action.name}({', '.join(parts)})"


CANONICAL = CanonicalDialect()
