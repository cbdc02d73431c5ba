"""Action dialects: text an agent writes <-> typed :mod:`guigym.core.actions` (the canonical
format and how parsing stays safe: :mod:`guigym.core.dialect_base`).

This module is the look-up above the dialects: :func:`get_dialect` loads the benchmark dialects
(:mod:`guigym.core.dialects`) on the first name it does not know. The registry, the protocol and
the canonical dialect sit below them at the bottom of core, in :mod:`guigym.core.dialect_base`, and are re-exported here.
"""
from __future__ import annotations

from guigym.core import actions as A
from guigym.core.dialect_base import (  # noqa: F401  (re-exported: the public names of this module)
    CANONICAL, DIALECTS, MAX_ACTION_CHARS, CanonicalDialect, Dialect, build_action, parse_call,
)
from guigym.core.errors import ActionParseError

__all__ = [
    "CANONICAL", "DIALECTS", "MAX_ACTION_CHARS", "CanonicalDialect", "Dialect", "build_action",
    "format_action", "get_dialect", "parse_action", "parse_call",
]


def parse_action(text: str | A.Action, dialect: str = "canonical") -> A.Action:
    """Parse ``text`` in the named dialect (a typed action passes through after validation)."""
    if isinstance(text, A.Action):
        try:
            text.validate()
        except ValueError as exc:
            raise ActionParseError(str(exc)) from None
        return text
    return get_dialect(dialect).parse(text)


def format_action(action: A.Action, dialect: str = "canonical") -> str:
    return get_dialect(dialect).format(action)


_INSTANCES: dict[str, Dialect] = {"canonical": CANONICAL}


def get_dialect(name: str) -> Dialect:
    if name not in _INSTANCES:
        if name not in DIALECTS:
            import guigym.core.dialects  # noqa: F401  (registers the benchmark dialects on first use)
        _INSTANCES[name] = DIALECTS.get(name)()
    return _INSTANCES[name]
