"""OSWorld's Thunderbird metrics (``desktop_env/evaluators/metrics/thunderbird.py``): prefs.js
values, message filters and the messages of a mail folder (mbox). Rule values are matched with
OSWorld's ``_match_value_to_rule`` (:func:`.utils.match_value_to_rule`).
"""
from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

from guigym.envs.desktop.evaluators.base import METRICS
from guigym.envs.desktop.evaluators.metrics.utils import match_value_to_rule
from guigym.envs.desktop.evaluators.metrics.utils import read_text as _read

log = logging.getLogger(__name__)

__all__ = ["check_thunderbird_prefs", "check_thunderbird_filter", "parse_thunderbird_filters", "split_mbox"]


def _safe_match(value: Any, rule: Mapping[str, Any]) -> bool:
    """:func:`match_value_to_rule`, with a type mismatch (``re`` on a number, ``lt`` between a
    string and a number) read as no match; OSWorld raises out of the metric there."""
    try:
        return match_value_to_rule(value, rule)
    except TypeError:
        return False


def _match_record(pattern: Mapping[str, Any], item: Mapping[str, Any]) -> bool:
    """utils.py ``_match_record``: every key of ``pattern`` is in ``item`` with an equal value."""
    return all(k in item and item[k] == v for k, v in pattern.items())


# --------------------------------------------------------------------------- thunderbird.py

#: one prefs.js line: ``user_pref("key", <JSON value>);``
_PREF_LINE = re.compile(r'^user_pref\("(?P<key>(?:[^"]|\\")+)", (?P<val>.+)\);$')


@METRICS.register("check_thunderbird_prefs")
def check_thunderbird_prefs(result: Optional[str], rule: Mapping[str, Any], **options: Any) -> float:
    """thunderbird.py: ``result`` is a ``prefs.js`` path; ``rule = {"expect": {key: {"method",
    "ref"}}, "unexpect": {key: {...}}}``.

    Every ``expect`` key must be set and its last value must match its rule; no value of an
    ``unexpect`` key may match its rule. Values are the JSON of each ``user_pref`` line; a line
    whose value is not JSON is skipped (OSWorld raises). A missing file scores 0.
    """
    if result is None:
        return 0.0
    expect, unexpect = rule.get("expect", {}), rule.get("unexpect", {})
    found = {k: False for k in expect}
    clean = True
    try:
        with open(result, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return 0.0
    for line in lines:
        m = _PREF_LINE.match(line.strip())
        if m is None:
            continue
        key = m.group("key")
        try:
            value = json.loads(m.group("val"))
        except ValueError:
            log.info("check_thunderbird_prefs: value of %s is not JSON: %r", key, m.group("val"))
            continue
        if key in expect:
            found[key] = _safe_match(value, expect[key])
        elif key in unexpect:
            clean = clean and not _safe_match(value, unexpect[key])
    return float(all(found.values()) and clean)


#: one filter condition term of msgFilterRules.dat: ``AND (subject,contains,text)``, quoted
#: values may hold ``)``; or the ``ALL`` condition
_CONDITION = re.compile(r'\b(?:AND|OR) \((?:[\w ]+),(?:[\w \']+),(?:"(?:[^"]|\")+"|[^)]+)\)|\bALL\b')


def _unescape(value: str) -> str:
    return value.replace('\\"', '"').replace("\\\\", "\\")


def parse_thunderbird_filters(text: str) -> list[dict[str, Any]]:
    """Filters of a ``msgFilterRules.dat``: each ``{"name", "enabled", "type", "action",
    "actionValue", "condition": [terms]}`` (string values unescaped; a later ``action`` of the
    same filter replaces an earlier one). As OSWorld, a filter is complete at its ``condition=``
    line; one without a condition is dropped."""
    filters: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    for line in text.splitlines():
        key, sep, raw = line.partition("=")
        if not sep or key not in ("name", "enabled", "type", "action", "actionValue", "condition"):
            continue
        value = raw[1:-1] if len(raw) >= 2 and raw[0] == raw[-1] == '"' else raw
        value = _unescape(value)
        if key == "name":
            current = {"name": value}
        elif key == "condition":
            current["condition"] = _CONDITION.findall(value)
            filters.append(current)
        else:
            current[key] = value
    return filters


@METRICS.register("check_thunderbird_filter")
def check_thunderbird_filter(result: Optional[str], rules: Mapping[str, Sequence[Mapping[str, Any]]],
                             **options: Any) -> float:
    """thunderbird.py: ``result`` is a ``msgFilterRules.dat`` path; every record of
    ``rules["expect"]`` must equal (on its keys) some filter of :func:`parse_thunderbird_filters`
    and no record of ``rules["unexpect"]`` may. A missing file scores 0."""
    if result is None:
        return 0.0
    try:
        with open(result, encoding="utf-8", errors="replace") as f:
            filters = parse_thunderbird_filters(f.read())
    except OSError:
        return 0.0
    expect, unexpect = rules.get("expect", []), rules.get("unexpect", [])
    found = [any(_match_record(r, flt) for flt in filters) for r in expect]
    clean = not any(_match_record(r, flt) for flt in filters for r in unexpect)
    return float(all(found) and clean)


# --------------------------------------------------------------------------- thunderbird.py

#: an mbox envelope line: "From <sender> <ctime date>" (Thunderbird: "From - Mon Jan 29 10:00:00 2024");
#: the clock time keeps a body line like "From now on, ..." of an unescaped .eml from matching
_MBOX_FROM = re.compile(r"^From \S+ .*\b\d\d:\d\d:\d\d\b", re.MULTILINE)


def split_mbox(text: str) -> list[str]:
    """The messages of an mbox text, each without its ``From `` envelope line (sender and a
    ``HH:MM:SS`` time, see :data:`_MBOX_FROM`); text before the
    first envelope line (all of a single ``.eml``) is a message of its own when not blank. Line
    ends become ``\\n``."""
    text = text.replace("\r\n", "\n")
    starts = [m.start() for m in _MBOX_FROM.finditer(text)]
    head = text[:starts[0]] if starts else text
    messages = [head] if head.strip() else []
    for s, e in zip(starts, starts[1:] + [len(text)]):
        messages.append(text[s:e].partition("\n")[2])
    return messages


def _normalise_message(msg: str, ignore_status: bool, ignore_keys: bool) -> str:
    """Drop X-Mozilla-Status/Status2 (``ignore_status``) and X-Mozilla-Keys (``ignore_keys``)
    header lines, then strip."""
    head, sep, body = msg.partition("\n\n")
    lines = head.split("\n")
    if ignore_status:
        lines = [ln for ln in lines if not re.match(r"X-Mozilla-Status\d?:", ln)]
    if ignore_keys:
        lines = [ln for ln in lines if not ln.startswith("X-Mozilla-Keys:")]
    return ("\n".join(lines) + sep + body).strip()


def _folder_messages(path: str, options: Mapping[str, Any]) -> Optional[list[str]]:
    text = _read(path)
    if text is None:
        return None
    out = []
    for msg in split_mbox(text):
        if options.get("remove_deleted", True) and re.search(r"X-Mozilla-Status: 000[89]", msg):
            continue
        out.append(_normalise_message(msg, options.get("ignore_status", False), options.get("ignore_keys", False)))
    if options.get("remove_duplicate", True):
        out = list(set(out))
    return sorted(out)


@METRICS.register("check_thunderbird_folder")
def check_thunderbird_folder(result: Union[str, Sequence[Optional[str]], None],
                             reference: Union[str, Sequence[str]], **options: Any) -> float:
    """thunderbird.py: each result folder file (an mbox, or one ``.eml``) holds the same messages
    as its reference, in any order.

    Options as upstream: ``remove_deleted`` (default True: skip messages whose
    ``X-Mozilla-Status`` is 0008/0009, expunged but still in the file), ``remove_duplicate``
    (default True), ``ignore_status`` / ``ignore_keys`` (default False: drop the
    ``X-Mozilla-Status``/``Status2`` / ``X-Mozilla-Keys`` headers before comparing).

    Divergence, on purpose: upstream splits on ``"FROM - "`` and then skips every non-empty
    chunk (``if mail.strip(): continue``), so it compares empty lists and scores 1 for any two
    readable files. Here the messages are really compared. The ``From `` envelope line is left
    out: Thunderbird stamps it with the time the message was written to the folder. A missing
    result file scores 0.
    """
    if isinstance(reference, (list, tuple)):
        results = list(result) if isinstance(result, (list, tuple)) else [result]
        refs = list(reference)
    else:
        results, refs = [result], [reference]
    if len(results) < len(refs):
        return 0.0
    for pred, gold in zip(results, refs):
        if pred is None:
            return 0.0
        got, want = _folder_messages(pred, options), _folder_messages(gold, options)
        if got is None or want is None or got != want:
            return 0.0
    return 1.0
