"""OSWorld's general metrics (the evaluator that combines metrics, ``evaluate``, is
:func:`guigym.envs.desktop.evaluators.evaluate`).

Every metric has OSWorld's name, signature ``metric(result, expected_or_rules, **options)`` and
return value (a float, mostly 0/1), as in ``desktop_env/evaluators/metrics/`` (``general.py``,
``vscode.py``, ``vlc.py``, ``gimp.py``, ``table.py``, ``docs.py``). ``result`` is what the
result getter fetched (a local file path, a string, a dict); for the ``rule`` getter the
expected value is the task's ``rules`` dict. ``compare_table`` is in :mod:`.table`,
``compare_docx_files`` in :mod:`.docs`.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from guigym.envs.desktop.evaluators.base import METRICS
from guigym.envs.desktop.evaluators.textsim import ratio

def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


# --------------------------------------------------------------------------- general.py


@METRICS.register("exact_match")
def exact_match(result: Any, rules: Mapping[str, Any], **options: Any) -> float:
    """``result == rules["expected"]`` (general.py)."""
    return float(result == rules["expected"])


@METRICS.register("match_in_list")
def match_in_list(result: Any, rules: Mapping[str, Any], **options: Any) -> float:
    """``result in rules["expected"]`` (general.py)."""
    return float(result in rules["expected"])


@METRICS.register("is_in_list")
def is_in_list(result: Any, rules: Mapping[str, Any], **options: Any) -> float:
    """``rules["expected"] in result`` (general.py); a None result scores 0."""
    if result is None:
        return 0.0
    return float(rules["expected"] in result)


@METRICS.register("check_include_exclude")
def check_include_exclude(result: Optional[str], rules: Mapping[str, Sequence[str]], **options: Any) -> float:
    """Every ``rules["include"]`` string occurs in ``result`` and no ``rules["exclude"]`` string
    does (general.py); None scores 0."""
    if result is None:
        return 0.0
    include, exclude = rules.get("include", []), rules.get("exclude", [])
    return float(all(s in result for s in include) and all(s not in result for s in exclude))


@METRICS.register("literal_match")
def literal_match(result: Any, expected: Any, **options: Any) -> float:
    """general.py ``literal_match``: ``type="str"`` compares ``str()`` forms; ``type="list"``
    compares element-wise ``str()`` forms of two equally long lists/tuples; ``ignore_case``."""
    kind = options.get("type", "str")
    fold = (lambda s: str(s).lower()) if options.get("ignore_case", False) else str
    if kind == "str":
        return float(fold(result) == fold(expected))
    if kind == "list":
        if not isinstance(result, (list, tuple)) or not isinstance(expected, (list, tuple)):
            return 0.0
        if len(result) != len(expected):
            return 0.0
        return float([fold(x) for x in result] == [fold(x) for x in expected])
    raise NotImplementedError(f"literal_match: type {kind!r} is not supported (use 'str' or 'list')")


@METRICS.register("fuzzy_match")
def fuzzy_match(result: Optional[str], rules: Mapping[str, Any], **options: Any) -> float:
    """``rapidfuzz.fuzz.ratio(result, rules["expected"]) / 100`` (general.py), in [0, 1]."""
    return ratio(result, rules["expected"]) / 100.0


@METRICS.register("file_contains")
def file_contains(file_path: Optional[str], config: Mapping[str, Any], **options: Any) -> float:
    """Every string of ``config["expected"]`` occurs in the file (general.py); an unreadable
    or missing file scores 0."""
    if not file_path:
        return 0.0
    try:
        text = _read_text(file_path)
    except (OSError, UnicodeDecodeError):
        return 0.0
    return float(all(s in text for s in config["expected"]))


_TIME_RE = re.compile(r"([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)")


@METRICS.register("check_line_number")
def check_line_number(file_path: Optional[str], line_number: Mapping[str, Any], **options: Any) -> float:
    """The number of lines holding an ``HH:MM:SS`` time equals ``int(line_number["expected"])``
    (general.py); a missing file scores 0."""
    if file_path is None or not os.path.isfile(file_path):
        return 0.0
    try:
        count = sum(1 for line in _read_text(file_path).splitlines() if _TIME_RE.search(line))
        return float(count == int(line_number["expected"]))
    except (OSError, UnicodeDecodeError, ValueError):
        return 0.0


@METRICS.register("check_direct_json_object")
def check_direct_json_object(result: Any, rules: Mapping[str, Any], **options: Any) -> float:
    """general.py ``check_direct_json_object``: compare a JSON object with ``rules["expected"]``.

    A string result is stripped, ``'`` become ``"``, and it is parsed (unparseable -> 0; OSWorld
    raises). Without ``expect_in_result`` every expected key must be equal; when ``expected``
    itself holds ``"ignore_list_order": true`` every value is compared sorted (a missing or
    unsortable value scores 0). As upstream, ``ignore_list_order`` at the rules level is ignored.
    Upstream also compares the flag key itself (``sorted(True)`` raises, so it always scores 0);
    here the flag key is skipped. With
    ``expect_in_result``: a list of candidates matches when one is in the result's list or equals
    its string; a string must be a substring of the result's value. An expected value
    ``"__EVALUATION_FAILED__"`` scores 0.
    """
    if isinstance(result, str):
        try:
            result = json.loads(result.strip().replace("'", '"'))
        except ValueError:
            return 0.0
    if result is None:
        return 0.0
    expected = rules.get("expected", {})
    try:
        if any(v == "__EVALUATION_FAILED__" for v in expected.values()):
            return 0.0
        if not rules.get("expect_in_result", False):
            ignore_order = expected.get("ignore_list_order", False)
            for key, want in expected.items():
                if key == "ignore_list_order":
                    continue
                got = result.get(key)
                if ignore_order:
                    if got is None or sorted(want) != sorted(got):
                        return 0.0
                elif want != got:
                    return 0.0
            return 1.0
        for key, want in expected.items():
            got = result.get(key)
            if isinstance(want, list):
                if not any((isinstance(got, list) and w in got) or (isinstance(got, str) and w == got)
                           for w in want):
                    return 0.0
            elif isinstance(want, str):
                if not isinstance(got, str) or want not in got:
                    return 0.0
            else:
                return 0.0
        return 1.0
    except (AttributeError, TypeError):  # result not a dict, unsortable lists: OSWorld scores 0
        return 0.0


# --------------------------------------------------------------------------- vscode.py


@METRICS.register("check_json_settings")
def check_json_settings(actual: Optional[str], expected: Mapping[str, Any], **options: Any) -> float:
    """vscode.py: the JSON file at ``actual`` has every key/value of ``expected["expected"]``;
    a missing or unparseable file scores 0."""
    if not actual:
        return 0.0
    try:
        data = json.loads(_read_text(actual))
    except (OSError, ValueError):
        return 0.0
    if not isinstance(data, dict):
        return 0.0
    return float(all(k in data and data[k] == v for k, v in expected["expected"].items()))


def _normalise_text(text: str, ignore_blanks: bool, ignore_case: bool) -> str:
    if ignore_blanks:
        text = re.sub(r"\s+", " ", re.sub(r"[\t\n]", " ", text).strip())
    return text.lower() if ignore_case else text


@METRICS.register("compare_text_file")
def compare_text_file(actual: Optional[str], expected: str, **options: Any) -> float:
    """vscode.py: two text files are equal, optionally ``ignore_blanks`` (tabs/newlines to
    spaces, strip, collapse whitespace) and ``ignore_case``; a missing result scores 0."""
    if not actual:
        return 0.0
    blanks, case = options.get("ignore_blanks", False), options.get("ignore_case", False)
    a = _normalise_text(_read_text(actual), blanks, case)
    b = _normalise_text(_read_text(expected), blanks, case)
    return float(a == b)


# --------------------------------------------------------------------------- vlc.py, gimp.py


@METRICS.register("check_qt_max_volume")
def check_qt_max_volume(actual_config_path: Optional[str], rule: Mapping[str, Any], **options: Any) -> float:
    """vlc.py: the last ``qt-max-volume=`` line of vlcrc (default 125) equals
    ``rule["expected_qt_max_volume"]`` as a string."""
    if not actual_config_path:
        return 0.0
    value = "125"
    for line in _read_text(actual_config_path).split("\n"):
        if "qt-max-volume=" in line:
            value = line.split("=")[-1].strip()
    return float(value == str(rule["expected_qt_max_volume"]))


@METRICS.register("check_config_status")
def check_config_status(actual_config_path: Optional[str], rule: Mapping[str, Any], **options: Any) -> float:
    """gimp.py: some ``(key ... value)`` line of gimprc has first item ``rule["key"]`` (or the
    first two items when ``key`` is a 2-list) and last item ``rule["value"]``."""
    if actual_config_path is None:
        return 0.0
    key, value = rule["key"], rule["value"]
    for line in _read_text(actual_config_path).splitlines():
        if line.startswith("#") or not line.strip():
            continue
        items = line.strip().lstrip("(").rstrip(")\n").split()
        if not items:
            continue
        if isinstance(key, str) and items[0] == key and items[-1] == value:
            return 1.0
        if isinstance(key, list) and len(key) == 2 and len(items) >= 2 \
                and items[0] == key[0] and items[1] == key[1] and items[-1] == value:
            return 1.0
    return 0.0


# --------------------------------------------------------------------------- basic_os.py


def _python_list(text: Any) -> Optional[list[Any]]:
    """A Python list literal (gsettings prints ``['a.desktop', 'b.desktop']``); OSWorld eval()s
    it, we only accept literals."""
    import ast

    try:
        value = ast.literal_eval(str(text).strip())
    except (ValueError, SyntaxError):
        return None
    return list(value) if isinstance(value, (list, tuple)) else None


@METRICS.register("check_gnome_favorite_apps")
def check_gnome_favorite_apps(apps_str: Optional[str], rule: Mapping[str, Any], **options: Any) -> float:
    """basic_os.py: the favourites list has exactly the expected apps (any order)."""
    apps = _python_list(apps_str)
    expected = list(rule["expected"])
    if apps is None or len(apps) != len(expected):
        return 0.0
    return float(set(apps) == set(expected))


@METRICS.register("is_utc_0")
def is_utc_0(timedatectl_output: Optional[str], **options: Any) -> float:
    """basic_os.py: line 4 of ``timedatectl status`` (``Time zone: ... (XXX, +0000)``) ends with
    ``+0000)``; shorter output scores 0 (OSWorld raises IndexError)."""
    lines = str(timedatectl_output or "").split("\n")
    return float(len(lines) > 3 and lines[3].endswith("+0000)"))


@METRICS.register("check_text_enlarged")
def check_text_enlarged(scaling_factor_str: Optional[str], **options: Any) -> float:
    """basic_os.py: the GNOME ``text-scaling-factor`` is above 1.0 (unparseable -> 0)."""
    try:
        return float(float(str(scaling_factor_str).strip()) > 1.0)
    except ValueError:
        return 0.0


@METRICS.register("check_moved_jpgs")
def check_moved_jpgs(directory_list: Optional[Mapping[str, Any]], rule: Mapping[str, Any], **options: Any) -> float:
    """basic_os.py: the names of ``directory_list["children"]`` (the ``list_directory`` getter's
    tree) are exactly ``rule["expected"]`` (any order)."""
    if not isinstance(directory_list, Mapping):
        return 0.0
    names = [node.get("name") for node in directory_list.get("children", []) if isinstance(node, Mapping)]
    expected = list(rule["expected"])
    return float(len(names) == len(expected) and set(names) == set(expected))


# --------------------------------------------------------------------------- infeasible


@METRICS.register("infeasible")
def infeasible(result: Any = None, expected: Any = None, *, last_action: Optional[str] = None,
               **options: Any) -> float:
    """metrics/__init__.py ``infeasible`` is a marker: DesktopEnv.evaluate scores such a task 1
    when the agent's last action was ``FAIL``, else 0.
    :func:`guigym.envs.desktop.evaluators.evaluate` applies that rule."""
    return float(last_action == "FAIL")
