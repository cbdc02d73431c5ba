"""OSWorld metrics on plain files: lists, JSON, CSV, archives, VS Code keybindings.

Names, signatures ``metric(result, expected_or_rules, **options) -> float`` and semantics follow
OSWorld's ``desktop_env/evaluators/metrics/`` (``general.py`` check_list/check_json, ``table.py``
compare_csv, ``chrome.py`` compare_archive, ``vscode.py`` check_json_keybindings, ``utils.py``
``_match_value_to_rule``). ``result`` is a local file path fetched by the result getter; None or a
missing file scores 0.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

from guigym.envs.desktop.evaluators.base import METRICS, require
from guigym.envs.desktop.evaluators.metrics.utils import match_value_to_rule, read_text_lines  # noqa: F401  (match_value_to_rule: in __all__)

__all__ = ["check_list", "check_json", "match_value_to_rule", "compare_csv", "compare_archive",
           "check_json_keybindings"]


# --------------------------------------------------------------------------- general.py


@METRICS.register("check_list")
def check_list(result: Optional[str], rules: Mapping[str, Sequence[str]], **options: Any) -> float:
    """general.py: every regex of ``rules["expect"]`` matches (``re.search``) some line of the file
    and no regex of ``rules["unexpect"]`` matches any line. Missing/undecodable file -> 0."""
    if not result:
        return 0.0
    expect = [re.compile(p) for p in rules.get("expect", [])]
    unexpect = [re.compile(p) for p in rules.get("unexpect", [])]
    found = [False] * len(expect)
    try:
        with open(result, encoding="utf-8") as f:
            for line in f:
                for i, pattern in enumerate(expect):
                    found[i] = found[i] or pattern.search(line) is not None
                if any(p.search(line) for p in unexpect):
                    return 0.0
    except (OSError, UnicodeDecodeError):
        return 0.0
    return float(all(found))


def _load_json_or_yaml(path: str, is_yaml: bool) -> Any:
    with open(path, encoding="utf-8") as f:
        if is_yaml:
            yaml = require("yaml", "pyyaml", "check_json")
            return yaml.safe_load(f)
        return json.load(f)


@METRICS.register("check_json")
def check_json(result: Optional[str], rules: Mapping[str, Any], is_yaml: bool = False, **options: Any) -> float:
    """general.py ``check_json``: the JSON (or YAML, ``is_yaml``) file at ``result`` satisfies
    ``rules["expect"]`` and violates every ``rules["unexpect"]``.

    Each rule is ``{"key": [k0, k1, ...], "method": ..., "ref": ...}``: the value at that key path
    is matched with :func:`match_value_to_rule`. An expect rule whose path is missing scores 0; an
    unexpect rule whose path is missing tests None. A missing, unreadable or unparseable (or empty
    YAML) file scores 0, as does any rule that raises.
    """
    if not result or not os.path.exists(result):
        return 0.0
    try:
        data = _load_json_or_yaml(result, is_yaml)
    except (OSError, UnicodeDecodeError, ValueError):
        return 0.0
    except Exception as exc:  # yaml.YAMLError without importing yaml here
        if type(exc).__module__.startswith("yaml"):
            return 0.0
        raise
    if is_yaml and data is None:
        return 0.0
    ok = True
    for rule in rules.get("expect", []):
        value = data
        try:
            for key in rule["key"]:
                value = value[key]
        except (KeyError, IndexError, TypeError):
            return 0.0
        try:
            ok = ok and match_value_to_rule(value, rule)
        except (TypeError, ValueError, AttributeError, re.error):
            return 0.0
    for rule in rules.get("unexpect", []):
        value = data
        try:
            for key in rule["key"]:
                value = value[key]
        except (KeyError, IndexError, TypeError):
            value = None
        try:
            ok = ok and not match_value_to_rule(value, rule)
        except (TypeError, ValueError, AttributeError, re.error):
            return 0.0
    return float(ok)


# --------------------------------------------------------------------------- table.py


@METRICS.register("compare_csv")
def compare_csv(result: Optional[str], expected: Union[str, Sequence[str]], **options: Any) -> float:
    """table.py ``compare_csv``: the result file's lines equal some expected file's lines.

    Files are read with :func:`guigym.envs.desktop.evaluators.metrics.utils.read_text_lines` (OSWorld's encoding
    order). ``expected`` is a path or a list of candidate paths (missing ones are skipped).
    Options: ``strict`` (default True; False strips every line), ``ignore_case``.
    """
    if result is None:
        return 0.0
    try:
        result_lines = read_text_lines(result)
    except OSError:
        return 0.0

    def normalise(lines: list[str]) -> list[str]:
        if not options.get("strict", True):
            lines = [s.strip() for s in lines]
        if options.get("ignore_case", False):
            lines = [s.lower() for s in lines]
        return lines

    candidates = [expected] if isinstance(expected, str) else list(expected)
    for path in candidates:
        try:
            if normalise(result_lines) == normalise(read_text_lines(path)):
                return 1.0
        except OSError:
            continue
    return 0.0


# --------------------------------------------------------------------------- chrome.py

#: compare_archive's ``file_type`` -> the metric that compares one pair of extracted files.
_ARCHIVE_FILE_METRICS = {"text": "compare_text_file", "pdf": "compare_pdfs", "docx": "compare_docx_files",
                         "ppt": "compare_pptx_files", "image": "compare_images", "csv": "compare_csv",
                         "table": "compare_table", "audio": "compare_audios", "video": "compare_videos"}


def _unpack(archive: str, dest: str) -> None:
    """``shutil.unpack_archive``; tar members are filtered with the ``data`` filter (no absolute
    paths, no escaping links) where Python supports it."""
    try:
        shutil.unpack_archive(archive, dest, filter="data")  # type: ignore[call-arg]
    except TypeError:  # Python without extraction filters
        shutil.unpack_archive(archive, dest)


@METRICS.register("compare_archive")
def compare_archive(pred_path: Optional[str], gold_path: str, **options: Any) -> float:
    """chrome.py ``compare_archive``: unpack both archives (zip, tar, tar.gz, ...); the sorted
    entry names of ``file_path`` (option, default the archive root) must be equal; then the mean
    score of comparing each pair of files with the metric named by ``file_type`` (text, pdf, docx,
    ppt, image, csv, table, audio, video; default text), passing the remaining options on.

    An archive that does not unpack, or a missing ``file_path`` inside it, scores 0. Two empty
    listings score 0 (upstream divides by zero). An unknown ``file_type`` raises ValueError.
    """
    if not pred_path:
        return 0.0
    options = dict(options)
    sub = options.pop("file_path", "")
    file_type = options.pop("file_type", "text")
    if file_type not in _ARCHIVE_FILE_METRICS:
        raise ValueError(f"compare_archive: file_type {file_type!r} is not supported "
                         f"(one of {', '.join(_ARCHIVE_FILE_METRICS)})")
    with tempfile.TemporaryDirectory(prefix="guigym_archive_") as tmp:
        pred_dir, gold_dir = os.path.join(tmp, "pred"), os.path.join(tmp, "gold")
        try:
            _unpack(pred_path, pred_dir)
        except (OSError, ValueError, shutil.ReadError, tarfile.TarError):
            return 0.0
        _unpack(gold_path, gold_dir)
        try:
            pred_files = sorted(os.listdir(os.path.join(pred_dir, sub)))
            gold_files = sorted(os.listdir(os.path.join(gold_dir, sub)))
        except OSError:
            return 0.0
        if pred_files != gold_files or not pred_files:
            return 0.0
        compare = METRICS.get(_ARCHIVE_FILE_METRICS[file_type])
        total = 0.0
        for name in pred_files:
            total += float(compare(os.path.join(pred_dir, sub, name), os.path.join(gold_dir, sub, name), **options)
                           or 0.0)
        return total / len(pred_files)


# --------------------------------------------------------------------------- vscode.py


def _load_keybindings(path: str) -> Optional[list[Any]]:
    """keybindings.json as a list: parsed whole, or after its first line (VS Code writes a
    ``// Place your key bindings ...`` comment there); None otherwise."""
    for skip_first in (False, True):
        try:
            with open(path, encoding="utf-8") as f:
                if skip_first:
                    f.readline()
                data = json.load(f)
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if isinstance(data, list):
            return data
    return None


@METRICS.register("check_json_keybindings")
def check_json_keybindings(actual: Optional[str], expected: Mapping[str, Any], **options: Any) -> float:
    """vscode.py: the keybindings file (a JSON list, optionally after one comment line) contains
    ``expected["expected"]`` as an element (exact dict equality)."""
    if not actual:
        return 0.0
    data = _load_keybindings(actual)
    if data is None:
        return 0.0
    return float(expected["expected"] in data)


@METRICS.register("diff_text_file")
def diff_text_file(result: Optional[str], expected: Optional[str], **options: Any) -> float:
    """general.py ``diff_text_file``: the similarity of the two files' line lists,
    ``difflib.SequenceMatcher(a=result_lines, b=expected_lines).ratio()`` in [0, 1] (a partial
    score, not 0/1). A missing result scores 0."""
    import difflib

    if result is None or expected is None:
        return 0.0
    with open(result, encoding="utf-8", errors="replace") as f:
        got = f.read().splitlines()
    with open(expected, encoding="utf-8", errors="replace") as f:
        want = f.read().splitlines()
    return float(difflib.SequenceMatcher(a=got, b=want).ratio())


def _record_matches(pattern: Mapping[str, Any], record: Mapping[str, Any]) -> bool:
    """Every key of ``pattern`` is a column of ``record`` with exactly that (string) value."""
    return all(k in record and record[k] == v for k, v in pattern.items())


@METRICS.register("check_csv")
def check_csv(result: Optional[str], rules: Mapping[str, Any], **options: Any) -> float:
    """general.py ``check_csv``: ``rules = {"expect": [{column: value}], "unexpect": [...]}`` over
    the rows of a CSV with a header (``csv.DictReader``): 1 when every ``expect`` pattern matches
    some row and no row matches any ``unexpect`` pattern. A missing file scores 0."""
    import csv

    if result is None:
        return 0.0
    expect = list(rules.get("expect", []))
    unexpect = list(rules.get("unexpect", []))
    found = [False] * len(expect)
    with open(result, newline="", encoding="utf-8", errors="replace") as f:
        for row in csv.DictReader(f):
            found = [hit or _record_matches(p, row) for hit, p in zip(found, expect)]
            if any(_record_matches(p, row) for p in unexpect):
                return 0.0
    return float(all(found))
