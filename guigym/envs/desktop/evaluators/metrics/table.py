"""Office-document metrics: ``compare_table`` (spreadsheets) and ``compare_docx_files``.

They follow OSWorld's ``desktop_env/evaluators/metrics/table.py`` and ``docs.py``. Their libraries
(openpyxl + pandas, python-docx) are not guigym dependencies: they are imported when a metric
runs, and a missing one raises :class:`MetricDependencyError` naming the package to install.
"""
from __future__ import annotations

import importlib
import itertools
import os
import re
from typing import Any, Optional, Union

from guigym.core.errors import GuigymError
# a private name: coverage.py would read a public office.TABLE_RULES as the full rule list
from guigym.envs.desktop.office_rules import TABLE_RULES as _MORE_TABLE_RULES
from guigym.envs.desktop.office_rules import TableBooks
from guigym.envs.desktop.textsim import ratio


class MetricDependencyError(GuigymError, ImportError):
    """A metric needs an optional library that is not installed; the message names it."""


def require(module: str, package: str, metric: str) -> Any:
    """Import ``module`` or raise :class:`MetricDependencyError` naming pip ``package``."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MetricDependencyError(
            f"metric {metric!r} needs the {package!r} library, which is not installed "
            f"(pip install {package})") from None


# --------------------------------------------------------------------------- compare_table

#: every compare_table rule type handled here (the last ones by office_rules.TABLE_RULES)
_SUPPORTED_TABLE_RULES = ("sheet_name", "sheet_data", "sheet_print", *_MORE_TABLE_RULES)


def _sheet_ref(idx: Union[int, str], result_names: list[str], expected_names: Optional[list[str]]
               ) -> tuple[str, str]:
    """OSWorld's ``_parse_sheet_idx``: 0 / "RI0" / "RNSheet1" (result), "EI0" / "ENSheet1"
    (expected) -> ("result" | "expected", sheet name); an index out of range gives ""."""
    def by_index(names: Optional[list[str]], i: int) -> str:
        try:
            return names[i] if names is not None else ""
        except IndexError:
            return ""

    if isinstance(idx, int):
        return "result", by_index(result_names, idx)
    if not isinstance(idx, str):
        raise ValueError(f"compare_table: unrecognised sheet index {idx!r}")
    kind, rest = idx[:2], idx[2:]
    if kind == "RI":
        return "result", by_index(result_names, int(rest))
    if kind == "RN":
        return "result", rest
    if kind == "EI":
        return "expected", by_index(expected_names, int(rest))
    if kind == "EN":
        return "expected", rest
    raise ValueError(f"compare_table: unrecognised sheet index {idx!r}")


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


def _printed_sheet(book_path: str, sheet: str) -> Optional[list[str]]:
    """``sheet_print`` reads ``<book>-<sheet>.csv`` (written by OSWorld's getter) with
    :func:`read_text_lines`, stripped lines, trailing empty lines dropped; None when it cannot be
    read."""
    csv_name = f"{os.path.splitext(book_path)[0]}-{sheet}.csv"
    try:
        lines = [line.strip() for line in read_text_lines(csv_name)]
    except OSError:
        return None
    return list(reversed(list(itertools.dropwhile(lambda s: not s, reversed(lines)))))


def compare_table(result: Optional[str], expected: Optional[str] = None, **options: Any) -> float:
    """OSWorld ``table.py`` ``compare_table``: xlsx ``result`` vs gold ``expected`` under
    ``options["rules"]``, applied in order; 1.0 only if every rule passes.

    Rule types implemented: ``sheet_name`` (same sheet names), ``sheet_data`` (pandas frames
    equal after rounding to ``precision`` digits, default 4), ``sheet_print`` (the printed CSV
    exports equal, ``ignore_case`` optional), and those of
    :data:`guigym.envs.desktop.office_rules.TABLE_RULES` (chart, pivot_table, check_cell,
    sheet_fuzzy, style). Other OSWorld rule types raise NotImplementedError naming the type.
    A missing result scores 0; an unreadable result workbook scores 0.
    """
    if result is None:
        return 0.0
    openpyxl = require("openpyxl", "openpyxl", "compare_table")
    pd = require("pandas", "pandas", "compare_table")
    try:
        result_xl = openpyxl.load_workbook(filename=result)
        result_book = pd.ExcelFile(result)
    except Exception:  # OSWorld: a result that does not open scores 0
        return 0.0
    books: dict[str, Any] = {"result": result_book}
    paths: dict[str, Optional[str]] = {"result": result, "expected": expected}
    expected_names: Optional[list[str]] = None
    if expected is not None:
        books["expected"] = pd.ExcelFile(expected)
        expected_names = list(books["expected"].sheet_names)
    result_names = list(result_book.sheet_names)
    tables: Optional[TableBooks] = None  # made for the first rule that needs it

    for rule in options.get("rules", []):
        kind = rule.get("type")
        if kind == "sheet_name":
            ok = result_names == expected_names
        elif kind == "sheet_data":
            digits = rule.get("precision", 4)
            frames = []
            for key in ("sheet_idx0", "sheet_idx1"):
                which, name = _sheet_ref(rule[key], result_names, expected_names)
                try:
                    frames.append(pd.read_excel(books[which], name).round(digits))
                except Exception:
                    frames.append(None)
            if frames[0] is None:
                return 0.0
            ok = frames[1] is not None and bool(frames[0].equals(frames[1]))
        elif kind == "sheet_print":
            sheets = []
            for key in ("sheet_idx0", "sheet_idx1"):
                which, name = _sheet_ref(rule[key], result_names, expected_names)
                path = paths[which]
                sheets.append(_printed_sheet(path, name) if path else None)
            if sheets[0] is None:
                return 0.0
            if rule.get("ignore_case", False) and sheets[1] is not None:
                sheets = [[s.lower() for s in sheet] for sheet in sheets]  # type: ignore[union-attr]
            ok = sheets[0] == sheets[1]
        else:
            if kind not in _MORE_TABLE_RULES:
                raise NotImplementedError(
                    f"compare_table rule type {kind!r} is not implemented here; "
                    f"implemented: {', '.join(_SUPPORTED_TABLE_RULES)}")
            if tables is None:
                tables = TableBooks(paths=dict(paths), names={"result": result_names, "expected": expected_names},
                                    workbooks={"result": result_xl})
            verdict = _MORE_TABLE_RULES[kind](rule, tables)
            if verdict is None:  # OSWorld returns 0 at once (e.g. check_cell on a missing sheet)
                return 0.0
            ok = verdict
        if not ok:
            return 0.0
    return 1.0


# --------------------------------------------------------------------------- compare_docx_files


def _docx_paragraphs(path: str) -> Optional[list[str]]:
    docx = require("docx", "python-docx", "compare_docx_files")
    try:
        return [p.text for p in docx.Document(path).paragraphs]
    except Exception:
        return None


def compare_docx_files(file1: Optional[str], file2: Optional[str], **options: Any) -> float:
    """OSWorld ``docs.py`` ``compare_docx_files``: paragraph texts of two .docx files.

    Options (OSWorld's defaults): ``ignore_blanks`` (True: whole text, whitespace runs collapsed),
    ``ignore_case``, ``ignore_order`` (sort paragraphs), ``content_only`` (fuzzy ratio of the
    collapsed texts), ``fuzzy_match`` (ratio instead of equality), ``delete_empty_lines``.
    Returns 1/0, or a ratio in [0, 1] for the fuzzy modes. ``.odt`` files (odfpy upstream)
    are not supported here and raise MetricDependencyError; other extensions score 0.
    """
    if not file1 or not file2:
        return 0.0
    f1, f2 = str(file1), str(file2)
    if f1.endswith(".odt") and f2.endswith(".odt"):
        raise MetricDependencyError("metric 'compare_docx_files' on .odt files needs odfpy, "
                                    "which guigym does not support yet")
    if not (f1.endswith(".docx") and f2.endswith(".docx")):
        return 0.0
    paras1, paras2 = _docx_paragraphs(f1), _docx_paragraphs(f2)
    if paras1 is None or paras2 is None:
        return 0.0
    return score_paragraphs(paras1, paras2, **options)


def score_paragraphs(paras1: list[str], paras2: list[str], **options: Any) -> float:
    """The comparison part of ``compare_docx_files``, on paragraph texts (no file I/O)."""
    ignore_blanks = options.get("ignore_blanks", True)
    ignore_case = options.get("ignore_case", False)
    if options.get("ignore_order", False):
        paras1, paras2 = sorted(paras1), sorted(paras2)
    if options.get("delete_empty_lines", False):
        paras1 = [p for p in paras1 if p.strip()]
        paras2 = [p for p in paras2 if p.strip()]

    def collapsed(paras: list[str]) -> str:
        text = re.sub(r"\s+", " ", "\n".join(paras)).strip()
        return text.lower() if ignore_case else text

    if options.get("content_only", False):
        return ratio(collapsed(paras1), collapsed(paras2)) / 100.0
    if ignore_blanks:
        t1, t2 = collapsed(paras1), collapsed(paras2)
        if options.get("fuzzy_match", False):
            return ratio(t1, t2) / 100.0
        return float(t1 == t2)
    if len(paras1) != len(paras2):
        return 0.0
    if ignore_case:
        paras1 = [p.lower() for p in paras1]
        paras2 = [p.lower() for p in paras2]
    if options.get("fuzzy_match", False):
        if not paras1:
            return 1.0
        return sum(ratio(p1, p2) / 100.0 for p1, p2 in zip(paras1, paras2)) / len(paras1)
    return float(paras1 == paras2)
