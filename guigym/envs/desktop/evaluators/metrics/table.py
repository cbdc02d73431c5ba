"""Spreadsheet (calc) metric ``compare_table``, as OSWorld's ``desktop_env/evaluators/metrics/table.py``;
the rule types beyond sheet names/data/print are in :mod:`.table_rules`. Its libraries (openpyxl +
pandas) are not guigym dependencies: they are imported when the metric runs, and a missing one
raises :class:`MetricDependencyError` naming the package to install.
"""
from __future__ import annotations

import itertools
import os
from typing import Any, Optional

from guigym.envs.desktop.evaluators.base import METRICS, MetricDependencyError, require  # noqa: F401  (re-exported)
# a private name: coverage.py reads _SUPPORTED_TABLE_RULES, the full rule list
from guigym.envs.desktop.evaluators.metrics.table_rules import TABLE_RULES as _MORE_TABLE_RULES
from guigym.envs.desktop.evaluators.metrics.table_rules import TableBooks, _sheet_ref
from guigym.envs.desktop.evaluators.metrics.utils import TEXT_ENCODINGS, read_text_lines  # noqa: F401  (re-exported)


# --------------------------------------------------------------------------- compare_table

#: every compare_table rule type handled here (the last ones by table_rules.TABLE_RULES)
_SUPPORTED_TABLE_RULES = ("sheet_name", "sheet_data", "sheet_print", *_MORE_TABLE_RULES)


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


@METRICS.register("compare_table")
def compare_table(result: Optional[str], expected: Optional[str] = None, **options: Any) -> float:
    """OSWorld ``table.py`` ``compare_table``: xlsx ``result`` vs gold ``expected`` under
    ``options["rules"]``, applied in order; 1.0 only if every rule passes.

    Rule types implemented: ``sheet_name`` (same sheet names), ``sheet_data`` (pandas frames
    equal after rounding to ``precision`` digits, default 4), ``sheet_print`` (the printed CSV
    exports equal, ``ignore_case`` optional), and those of
    :data:`guigym.envs.desktop.evaluators.metrics.table_rules.TABLE_RULES` (chart, pivot_table, check_cell,
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
