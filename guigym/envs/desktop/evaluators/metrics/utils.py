"""Helpers several metric modules (and setup's ``chrome_close_tabs``) share; OSWorld keeps them in
``desktop_env/evaluators/metrics/utils.py``: ``_match_value_to_rule``, ``compare_urls`` and
``table.py``'s ``_safe_read_file``. Imports only :mod:`..base`.
"""
from __future__ import annotations

import builtins
import functools
import operator
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any, Optional

from guigym.envs.desktop.evaluators.base import require

__all__ = ["TEXT_ENCODINGS", "compare_urls", "match_value_to_rule", "read_text", "read_text_lines"]


def _regex_flags(method: str) -> re.RegexFlag:
    """``"re.I.M"`` -> ``re.I | re.M`` (OSWorld's ``re.FLAG`` method names)."""
    names = method.split(".")[1:]
    return functools.reduce(operator.or_, (getattr(re, n) for n in names), re.RegexFlag(0))


def match_value_to_rule(value: Any, rule: Mapping[str, Any]) -> bool:
    """utils.py ``_match_value_to_rule``: ``rule = {"method": ..., "ref": ...}``.

    Methods: ``re[.FLAG...]`` (``re.search(ref, value, flags)``), ``eq ne le lt ge gt``
    (``operator.<m>(value, ref)``), ``approx:T`` (``|float(value) - ref| <= T``, unparseable value
    False), ``range.XY`` (``ref[0] <X value <Y ref[1]``, X/Y in ``t`` (<) / ``e`` (<=)),
    ``str_list_eq`` / ``str_set_eq`` (value split on ``,`` after stripping quotes, compared with
    ``ref`` as list/set), ``spreadsheet_range`` (``ref[0]`` within value within ``ref[1]``,
    openpyxl ranges). Other methods raise NotImplementedError naming them.
    """
    method = rule["method"]
    ref = rule.get("ref")
    if method.startswith("re"):
        return re.search(ref, value, _regex_flags(method)) is not None
    if method in ("eq", "ne", "le", "lt", "ge", "gt"):
        return bool(getattr(operator, method)(value, ref))
    if method.startswith("approx"):
        threshold = float(method.split(":")[1])
        try:
            return abs(float(value) - ref) <= threshold
        except (TypeError, ValueError):
            return False
    if method.startswith("range."):
        left, right = method[6], method[7]
        return bool(getattr(operator, "l" + left)(ref[0], value) and getattr(operator, "l" + right)(value, ref[1]))
    if method in ("str_list_eq", "str_set_eq"):
        container = getattr(builtins, method[4:-3])
        return container(value.strip("\"'").split(",")) == container(ref)
    if method == "spreadsheet_range":
        cell_range = require("openpyxl.worksheet.cell_range", "openpyxl", "check_json")
        inner, outer = cell_range.MultiCellRange(ref[0]), cell_range.MultiCellRange(ref[1])
        return all(r in value for r in inner) and all(r in outer for r in value)
    raise NotImplementedError(f"rule method {method!r} is not implemented (OSWorld _match_value_to_rule)")


def compare_urls(url1: Optional[str], url2: Optional[str], full: bool = True) -> bool:
    """OSWorld's ``compare_urls`` (metrics/utils.py): scheme defaults to http, host lowercased
    without a lone ``www`` subdomain and without its public suffix, ``/`` path dropped; with
    ``full`` the params, query and fragment must match too.

    OSWorld finds the suffix with tldextract; we use a small rule (last label, or last two when
    the second-to-last is a generic second-level label like ``co``/``com``) so nothing is
    downloaded. Ports are dropped, as tldextract drops them.
    """
    if url1 is None or url2 is None:
        return url1 == url2
    return _norm_url(url1, full) == _norm_url(url2, full)


_SECOND_LEVEL = {"co", "com", "net", "org", "gov", "edu", "ac", "or", "ne", "go"}


def _norm_url(url: str, full: bool) -> tuple[str, ...]:
    if not re.match(r"^[a-zA-Z][a-zA-Z0-9+\-.]*://", url):
        url = "http://" + url
    p = urllib.parse.urlparse(url)
    host = (p.hostname or "").lower()
    labels = host.split(".") if host else []
    if host and not re.fullmatch(r"[\d.]+", host) and len(labels) > 1:
        cut = 2 if len(labels) > 2 and len(labels[-1]) == 2 and labels[-2] in _SECOND_LEVEL else 1
        labels = labels[:-cut]
    if len(labels) == 2 and labels[0] == "www":
        labels = labels[1:]
    path = p.path if p.path != "/" else ""
    rest = (p.params, p.query, p.fragment) if full else ("", "", "")
    return (p.scheme.lower(), ".".join(labels), path, *rest)


#: OSWorld's ``table.py`` ``_safe_read_file`` order. latin-1 decodes any byte string, so the later
#: entries are never reached; the list is kept as upstream has it.
TEXT_ENCODINGS = ("utf-8", "utf-8-sig", "latin-1", "cp1252", "gbk", "cp1251")


def read_text_lines(path: str) -> list[str]:
    """The lines of a text file, decoded with the first of :data:`TEXT_ENCODINGS` that works
    (OSWorld's ``_safe_read_file``). Plain utf-8 comes first, so a UTF-8 BOM stays as a leading
    U+FEFF, as upstream; a non-UTF-8 file never raises a decode error. OSError propagates."""
    for encoding in TEXT_ENCODINGS:
        try:
            with open(path, encoding=encoding) as f:
                return f.read().splitlines()
        except UnicodeDecodeError:
            continue
    with open(path, encoding="utf-8", errors="replace") as f:  # unreachable after latin-1
        return f.read().splitlines()


def read_text(path: Optional[str]) -> Optional[str]:
    """The file's text (undecodable bytes replaced), None when there is no file."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None
