"""OSWorld's OS and multi-app metrics (``basic_os.py``, ``others.py``, ``general.py``,
``vscode.py``, ``table.py``). Registered on import (see
``guigym.envs.desktop.evaluators.load_all``); VLC's are in :mod:`.vlc`, Thunderbird's in
:mod:`.thunderbird`. A missing or unreadable agent file scores 0 where upstream would raise.
Optional libraries (python-docx, openpyxl, pypdf, mutagen) raise
:class:`~guigym.envs.desktop.evaluators.base.MetricDependencyError` naming the package.
"""
from __future__ import annotations

import datetime as dt
import difflib
import logging
import sqlite3
import urllib.parse
import zipfile
from collections.abc import Mapping
from typing import Any, Optional

from guigym.envs.desktop.evaluators.base import METRICS, require
from guigym.envs.desktop.evaluators.metrics.utils import match_value_to_rule
from guigym.envs.desktop.evaluators.metrics.utils import read_text as _read
from guigym.envs.desktop.evaluators.textsim import ratio

log = logging.getLogger(__name__)

__all__: list[str] = []


# --------------------------------------------------------------------------- others.py, basic_os.py


@METRICS.register("check_mp3_meta")
def check_mp3_meta(result: Optional[str], meta: Mapping[str, Mapping[str, Any]], **options: Any) -> float:
    """others.py: for each ``key: {"method", "ref"}`` of ``meta`` the file's ID3 ``key`` (mutagen
    EasyID3: ``title``, ``artist``...; several values joined with ``,``; absent: "") matches the
    rule (``_match_value_to_rule``). A file without an ID3 tag scores 0 (upstream raises).
    Needs ``mutagen``."""
    easyid3 = require("mutagen.easyid3", "mutagen", "check_mp3_meta")
    mutagen = require("mutagen", "mutagen", "check_mp3_meta")
    if not result:
        return 0.0
    try:
        tags = easyid3.EasyID3(result)
    except (mutagen.MutagenError, OSError) as e:
        log.info("check_mp3_meta: no ID3 tag in %s: %s", result, e)
        return 0.0
    for key, rule in meta.items():
        value = tags.get(key, "")
        if isinstance(value, list):
            value = ",".join(value)
        try:
            if not match_value_to_rule(value, rule):
                return 0.0
        except TypeError:
            return 0.0
    return 1.0


@METRICS.register("is_in_vm_clickboard")
def is_in_vm_clickboard(config: Mapping[str, Any], terminal_output: Optional[str], **options: Any) -> float:
    """basic_os.py: ``config["expected"]`` (a string, or a list whose every string must occur) is
    in the clipboard text (the tasks' ``xsel --clipboard --output``). No text scores 0."""
    if terminal_output is None:
        return 0.0
    expected = config["expected"]
    if isinstance(expected, list):
        return float(all(str(e) in terminal_output for e in expected))
    return float(str(expected) in terminal_output)


# --------------------------------------------------------------------------- general.py


@METRICS.register("compare_python_pure_text")
def compare_python_pure_text(py_file_path: Optional[str], gold_file_path: Optional[str], **options: Any) -> float:
    """general.py (OSWorld 1.0.2): the two files are equal after :func:`_python_normalize`: blank
    lines dropped, tabs expanded to 4 columns, trailing blanks stripped, and a shebang or coding
    line among the first three skipped. Spaces inside a line and indentation count (an older
    OSWorld removed every whitespace character). A file that is missing or not UTF-8 scores 0."""
    texts = []
    for path in (py_file_path, gold_file_path):
        if not path:
            return 0.0
        try:
            with open(path, encoding="utf-8") as f:
                texts.append(f.read())
        except (OSError, UnicodeDecodeError):
            return 0.0
    return float(_python_normalize(texts[0]) == _python_normalize(texts[1]))


def _python_normalize(text: str) -> str:
    """OSWorld 1.0.2's ``_normalize`` of compare_python_pure_text: leading shebang / coding lines
    (only while they lead, within the first three lines) dropped, then every non-blank line
    ``expandtabs(4).rstrip()``, joined by newlines."""
    lines = text.splitlines()
    i = 0
    while i < min(len(lines), 3) and lines[i].strip().startswith(("#!", "# -*- coding:", "# coding:", "# coding=")):
        i += 1
    return "\n".join(line.expandtabs(4).rstrip() for line in lines[i:] if line.strip())


#: sqlite VM steps between progress checks, and how many checks a query may take (~10^9 steps):
#: an agent-made database may hold a view that never ends (a recursive CTE)
_SQLITE_CHECK_EVERY, _SQLITE_MAX_CHECKS = 1000, 1_000_000


@METRICS.register("run_sqlite3")
def run_sqlite3(result: Optional[str], rules: Mapping[str, Any], **options: Any) -> float:
    """general.py: ``float(first column of the first row of rules["sql"] or 0)`` on the database
    file ``result``.

    The database comes from the agent: it is opened read-only and immutable (no journal, no
    writes, no locks) with ``trusted_schema=OFF`` (SQL in its schema cannot call functions that
    are not innocuous), and a query that runs past ~10^9 sqlite VM steps is interrupted. The SQL
    comes from the task file. No row, a non-number, a broken database or an interrupted query
    scores 0 (upstream raises on some of these).
    """
    if not result:
        return 0.0
    uri = f"file:{urllib.parse.quote(result)}?mode=ro&immutable=1"
    checks = [0]

    def progress() -> int:
        checks[0] += 1
        return int(checks[0] > _SQLITE_MAX_CHECKS)

    try:
        conn = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as e:
        log.info("run_sqlite3: cannot open %s: %s", result, e)
        return 0.0
    try:
        # the schema is the agent's: its views, triggers and generated columns may call only
        # innocuous functions (sqlite.org/lang_pragma.html#pragma_trusted_schema; issue 35)
        conn.execute("PRAGMA trusted_schema=OFF")
        conn.set_progress_handler(progress, _SQLITE_CHECK_EVERY)
        row = conn.execute(rules["sql"]).fetchone()
        return float(row[0] or 0) if row else 0.0
    except (sqlite3.Error, TypeError, ValueError) as e:
        log.info("run_sqlite3: query failed on %s: %s", result, e)
        return 0.0
    finally:
        conn.close()


#: fuzzy_place_math's word count (upstream's constant, although its one task asks for 5 addresses)
PLACE_WORDS = 3


@METRICS.register("fuzzy_place_math")
def fuzzy_place_math(result_file_path: Optional[str], rules: Mapping[str, Any], **options: Any) -> float:
    """general.py: split every paragraph of the docx on whitespace; score each word by its best
    ``rapidfuzz.fuzz.ratio / 100`` against ``rules["expected"]``; unless there are exactly
    :data:`PLACE_WORDS` (3) words the score is 0, else their mean.

    As upstream: the only task using it asks for 5 addresses, so an agent that does what it is
    told scores 0; the constant is kept so scores stay comparable with OSWorld's.
    An unreadable docx scores 0."""
    docx = require("docx", "python-docx", "fuzzy_place_math")
    if not result_file_path:
        return 0.0
    try:
        doc = docx.Document(result_file_path)
    except Exception:  # noqa: BLE001 - python-docx raises several types for a broken package
        return 0.0
    words = [w for p in doc.paragraphs for w in p.text.split()]
    if len(words) != PLACE_WORDS:
        return 0.0
    expected = list(rules["expected"])
    return sum(max((ratio(w, e) / 100.0 for e in expected), default=0.0) for w in words) / PLACE_WORDS


@METRICS.register("compare_time_in_speedtest_results")
def compare_time_in_speedtest_results(speedtest_result_path: Optional[str], time_diff: Any, *,
                                      now: Optional[dt.datetime] = None, **options: Any) -> float:
    """general.py: the last 5 characters (``HH:MM``) of the 2nd comma field of the CSV's 2nd line
    are less than ``int(time_diff)`` minutes from ``now`` (default: the local clock). Upstream
    ignores the date; the difference here goes the short way round midnight (upstream: 23:55 vs
    00:05 is 1430 minutes). Anything unparseable scores 0."""
    text = _read(speedtest_result_path)
    if text is None:
        return 0.0
    lines = text.splitlines()
    try:
        stamp = dt.datetime.strptime(lines[1].split(",")[1][-5:], "%H:%M")
        limit = int(time_diff)
    except (IndexError, ValueError, TypeError):
        return 0.0
    clock = now or dt.datetime.now()
    minutes = abs((stamp.hour * 60 + stamp.minute) - (clock.hour * 60 + clock.minute))
    return float(min(minutes, 24 * 60 - minutes) < limit)


# --------------------------------------------------------------------------- vscode.py


def _same_member(z1: zipfile.ZipFile, z2: zipfile.ZipFile, name: str) -> bool:
    """Byte-equal members, streamed (an agent's zip may be large)."""
    if z1.getinfo(name).file_size != z2.getinfo(name).file_size:
        return False
    with z1.open(name) as f1, z2.open(name) as f2:
        while True:
            b1, b2 = f1.read(1 << 20), f2.read(1 << 20)
            if b1 != b2:
                return False
            if not b1:
                return True


def _pdf_member_text(z: zipfile.ZipFile, name: str) -> str:
    import io

    pypdf = require("pypdf", "pypdf", "compare_zip_files")
    try:
        reader = pypdf.PdfReader(io.BytesIO(z.read(name)))
        return "".join(page.extract_text() or "" for page in reader.pages)
    except pypdf.errors.PyPdfError as e:
        raise ValueError(f"{name}: not a readable PDF ({e})") from None


@METRICS.register("compare_zip_files")
def compare_zip_files(actual: Optional[str], expected: str, **options: Any) -> float:
    """vscode.py: both archives hold the same set of names; ``.pdf`` members have texts whose
    ``difflib.SequenceMatcher`` ratio is >= 0.95 (pypdf; upstream PyPDF2), every other member is
    byte-equal. A missing or broken result archive or result PDF scores 0."""
    if not actual:
        return 0.0
    try:
        z1 = zipfile.ZipFile(actual)
    except (OSError, zipfile.BadZipFile):
        return 0.0
    with z1, zipfile.ZipFile(expected) as z2:
        names = set(z1.namelist())
        if names != set(z2.namelist()):
            return 0.0
        for name in sorted(names):
            try:
                if name.lower().endswith(".pdf"):
                    t1, t2 = _pdf_member_text(z1, name), _pdf_member_text(z2, name)
                    if difflib.SequenceMatcher(None, t1, t2).ratio() < 0.95:
                        return 0.0
                elif not _same_member(z1, z2, name):
                    return 0.0
            except (zipfile.BadZipFile, ValueError, OSError) as e:  # pypdf errors are ValueErrors
                log.info("compare_zip_files: cannot read %s: %s", name, e)
                return 0.0
    return 1.0


@METRICS.register("compare_result_files")
def compare_result_files(src_path: Optional[str], tgt_path: Optional[str], **options: Any) -> float:
    """vscode.py: with both texts stripped, when the gold is a number: 1 if the gold text occurs in
    the result (a sentence around the number) or the result is a number within 1e-4 of it; when
    the gold is not a number, or the result is not one: 1 only if the texts are equal."""
    src, tgt = _read(src_path), _read(tgt_path)
    if src is None or tgt is None:
        return 0.0
    src, tgt = src.strip(), tgt.strip()
    try:
        gold = float(tgt)
        if tgt in src:
            return 1.0
        return float(abs(float(src) - gold) < 1e-4)
    except ValueError:
        return float(src == tgt)


@METRICS.register("check_python_file_by_test_suite")
def check_python_file_by_test_suite(actual_files: Any, test_file: Any, **options: Any) -> float:
    """vscode.py imports the task's test file on the evaluating host, and the test imports and runs
    the agent's edited Python files there. guigym never runs agent code on the host, and a metric
    has no way into the desktop (it only gets the fetched local files), so this is not
    implemented."""
    raise NotImplementedError(
        "check_python_file_by_test_suite: upstream imports and runs the agent's Python files on the "
        "evaluating host; guigym runs no agent code on the host and a metric cannot reach the desktop")


# --------------------------------------------------------------------------- table.py


@METRICS.register("compare_conference_city_in_order")
def compare_conference_city_in_order(actual_city_list_path: Optional[str], expected_city: Mapping[str, Any],
                                     **options: Any) -> float:
    """table.py: cells C2:C22 of the active sheet, in order; cell i must contain
    ``expected[i]`` (a string) or one of its strings (a list). An empty or non-text cell, fewer
    expected entries than cells, an expected entry of another type (upstream raises TypeError
    and catches it) or an unreadable workbook scores 0."""
    openpyxl = require("openpyxl", "openpyxl", "compare_conference_city_in_order")
    if not actual_city_list_path:
        return 0.0
    expected = list(expected_city["expected"])
    try:
        sheet = openpyxl.load_workbook(actual_city_list_path).active
    except Exception:  # noqa: BLE001 - openpyxl raises several types for a broken file
        return 0.0
    cells = [c.value for row in sheet["C2:C22"] for c in row]
    if len(expected) < len(cells):
        return 0.0
    for got, want in zip(cells, expected):
        if not isinstance(got, str):
            return 0.0
        choices = [want] if isinstance(want, str) else want
        if not isinstance(choices, list) or not any(isinstance(c, str) and c in got for c in choices):
            return 0.0
    return 1.0
