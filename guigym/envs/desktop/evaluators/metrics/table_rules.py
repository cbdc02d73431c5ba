"""``compare_table`` rules beyond sheet names/data/print: charts, pivot tables, cell checks,
fuzzy ranges and cell styles.

Each rule follows the branch of the same ``type`` in OSWorld's ``compare_table``
(``desktop_env/evaluators/metrics/table.py``) and its helpers in ``metrics/utils.py``
(``load_charts``, ``load_pivot_tables``, ``read_cell_value``, ``_read_cell_style``,
``load_xlsx_styles``). A rule function takes the rule dict and a :class:`TableBooks` and returns
True/False (the rule passes or not) or None ("score 0 at once", as OSWorld's early returns).

Where we differ, on purpose:

* :func:`read_cell_value` finds a sheet's XML through the workbook relationships; OSWorld opens
  ``xl/worksheets/sheet<sheetId>.xml``, which is the same file for LibreOffice/openpyxl output
  but the wrong one after sheets were deleted or reordered in Excel.
* ``style``: a conditional format's dxf that lacks the part a property needs (font, fill,
  number format) yields the cell's own value (OSWorld raises or gives None). Conditional formats
  of type ``cellIs`` (operands: constants or single cells) and ``containsText`` / ``notContainsText`` /
  ``beginsWith`` / ``endsWith`` are evaluated natively (OSWorld compiles the formulas with the
  ``formulas`` library, which gives the same answer for these); ``expression`` and the other
  formula types raise NotImplementedError naming the type.
* Unknown ``sheet_fuzzy`` sub-rule types raise NotImplementedError (OSWorld keeps the previous
  sub-rule's verdict).
"""
from __future__ import annotations

import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union
from xml.etree import ElementTree as ET

from guigym.envs.desktop.evaluators.textsim import ratio

__all__ = ["TABLE_RULES", "TableBooks", "read_cell_value", "read_cell_style", "load_charts",
           "load_pivot_tables", "load_xlsx_styles"]

_NS_MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_NS_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_NS_PKG_REL = "http://schemas.openxmlformats.org/package/2006/relationships"


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


@dataclass
class TableBooks:
    """The two workbooks of one ``compare_table`` call.

    ``paths``/``names`` are keyed ``"result"``/``"expected"`` (the expected entries may be None);
    openpyxl workbooks are loaded on first use; parsed sheet XML is cached for cell reads.
    """

    paths: dict[str, Optional[str]]
    names: dict[str, Optional[list[str]]]
    workbooks: dict[str, Any] = field(default_factory=dict)
    _cells: dict[tuple[str, str], Optional[dict[str, Any]]] = field(default_factory=dict)

    def ref(self, idx: Union[int, str]) -> tuple[str, str]:
        """``sheet_idx`` -> (``"result"`` | ``"expected"``, sheet name); see office._sheet_ref."""

        return _sheet_ref(idx, self.names["result"] or [], self.names["expected"])

    def workbook(self, which: str) -> Any:
        if which not in self.workbooks:
            import openpyxl

            path = self.paths[which]
            self.workbooks[which] = openpyxl.load_workbook(filename=path) if path else None
        return self.workbooks[which]

    def worksheet(self, idx: Union[int, str]) -> Any:
        """The openpyxl worksheet of ``idx``, None when the book or sheet is missing."""
        which, name = self.ref(idx)
        book = self.workbook(which)
        if book is None or name not in book.sheetnames:
            return None
        return book[name]

    def value(self, idx: Union[int, str], coordinate: str) -> Any:
        """:func:`read_cell_value` of the sheet ``idx`` (sheet XML parsed once per call)."""
        which, name = self.ref(idx)
        path = self.paths[which]
        if path is None:
            return None
        key = (path, name)
        if key not in self._cells:
            self._cells[key] = _sheet_cells(path, name)
        return _cell_value(self._cells[key], coordinate)


# --------------------------------------------------------------------------- cell values (raw XML)


def _q(tag: str) -> str:
    return f"{{{_NS_MAIN}}}{tag}"


def _sheet_cells(path: str, sheet: str) -> Optional[dict[str, Any]]:
    """``{"strings": [shared strings], "cells": {coordinate: <c> element}}`` of one sheet, None
    when the file, the sheet or its XML is missing or broken."""
    try:
        with zipfile.ZipFile(path) as z:
            try:
                sst = ET.fromstring(z.read("xl/sharedStrings.xml"))
                # every <t> below <si>: plain strings and rich-text runs (OSWorld's "oo|t")
                strings = ["".join(t.text or "" for t in si.iter(_q("t"))) for si in sst.findall(_q("si"))]
            except (KeyError, ET.ParseError):
                strings = []
            book = ET.fromstring(z.read("xl/workbook.xml"))
            rel_id = None
            for sh in book.iter(_q("sheet")):
                if sh.get("name") == sheet:
                    rel_id = sh.get(f"{{{_NS_REL}}}id")
                    break
            if rel_id is None:
                return None
            rels = ET.fromstring(z.read("xl/_rels/workbook.xml.rels"))
            target = next((r.get("Target") for r in rels.iter(f"{{{_NS_PKG_REL}}}Relationship")
                           if r.get("Id") == rel_id), None)
            if not target:
                return None
            member = target.lstrip("/") if target.startswith("/") else f"xl/{target}"
            root = ET.fromstring(z.read(member))
    except (OSError, zipfile.BadZipFile, KeyError, ET.ParseError):
        return None
    cells = {c.get("r"): c for row in root.iter(_q("row")) for c in row.findall(_q("c")) if c.get("r")}
    return {"strings": strings, "cells": cells}


def _cell_value(sheet: Optional[dict[str, Any]], coordinate: str) -> Any:
    """OSWorld's ``read_cell_value`` on a parsed sheet: numbers (``t`` absent or ``n``) as float,
    shared/inline/formula strings and errors as str; booleans, dates, empty and missing cells
    give None (upstream falls through for ``b``/``d``)."""
    if sheet is None:
        return None
    cell = sheet["cells"].get(coordinate)
    if cell is None:
        return None
    kind = cell.get("t", "n")
    v = cell.find(_q("v"))
    text = v.text if v is not None else None
    try:
        if kind == "n":
            return float(text) if text is not None else None
        if kind == "s":
            return sheet["strings"][int(text)] if text is not None else None
        if kind in ("str", "e"):
            return text
        if kind == "inlineStr":
            t = cell.find(f"{_q('is')}/{_q('t')}")
            return t.text if t is not None else None
    except (ValueError, IndexError):
        return None
    return None


def read_cell_value(path: str, sheet: str, coordinate: str) -> Any:
    """The stored value of ``sheet!coordinate`` in the xlsx at ``path`` (see :func:`_cell_value`)."""
    return _cell_value(_sheet_cells(path, sheet), coordinate)


# --------------------------------------------------------------------------- cell styles


def _font_attr(src: Any, attr: str) -> Any:
    font = getattr(src, "font", None)
    return None if font is None else getattr(font, attr)


def read_cell_style(name: str, cell: Any, diff_style: Any = None) -> Any:
    """OSWorld's ``_read_cell_style``: one style property of an openpyxl cell, or of the
    differential style ``diff_style`` of an active conditional format.

    ``number_format`` (numeric cells only), ``font_name``/``font_family``/``font_color``
    (aRGB)/``font_bold``/``font_italic``/``font_underline``/``font_size`` (None for empty cells),
    ``fill_type`` (``patternFill``/``gradientFill``), ``bgcolor``/``fgcolor`` (the fill's fgColor;
    a dxf's bgColor), ``hyperlink`` (target, "" when none), ``merge`` (a covered merged cell).
    Unknown names raise NotImplementedError. A dxf without the font/fill/format part the
    property needs gives the cell's own value, which is what the sheet shows (OSWorld raises
    AttributeError for a missing font or format, and gives None for a missing fill).
    """
    part = {"number_format": "numFmt", "fill_type": "fill", "bgcolor": "fill", "fgcolor": "fill"}.get(
        name, "font" if name.startswith("font_") else None)
    if diff_style is not None and part is not None and getattr(diff_style, part, None) is None:
        diff_style = None
    src = diff_style if diff_style is not None else cell
    has_value = cell.value is not None
    if name == "number_format":
        if not (has_value and cell.data_type == "n"):
            return None
        return cell.number_format if diff_style is None else diff_style.numFmt.formatCode
    if name.startswith("font_"):
        attr = name[5:]
        if attr not in ("name", "family", "color", "bold", "italic", "underline", "size"):
            raise NotImplementedError(f"compare_table: unsupported style {name!r}")
        if not has_value:
            return None
        if attr == "color":
            color = _font_attr(src, "color")
            return None if color is None else color.rgb
        return _font_attr(src, attr)
    if name == "fill_type":
        fill = getattr(src, "fill", None)
        return None if fill is None else fill.tagname
    if name in ("bgcolor", "fgcolor"):
        try:
            return diff_style.fill.bgColor.rgb if diff_style is not None else cell.fill.fgColor.rgb
        except AttributeError:
            return None
    if name == "hyperlink":
        if not has_value:
            return None
        link = cell.hyperlink
        return (link.target if link is not None else None) or ""
    if name == "merge":
        from openpyxl.cell.cell import MergedCell

        return isinstance(cell, MergedCell)
    raise NotImplementedError(f"compare_table: unsupported style {name!r}")


_CELL_REF = re.compile(r"^\$?([A-Z]{1,3})\$?(\d+)$")


def _cf_operand(formula: str, cell_value: Callable[[str], Any]) -> Any:
    """A ``cellIs`` operand: a number, a quoted string, or a single cell reference (its stored
    value, via ``cell_value(coordinate)``); other formulas raise NotImplementedError."""
    f = formula.strip()
    if len(f) >= 2 and f[0] == f[-1] == '"':
        return f[1:-1].replace('""', '"')
    ref = _CELL_REF.match(f)
    if ref:
        return cell_value(ref.group(1) + ref.group(2))
    try:
        return float(f)
    except ValueError:
        raise NotImplementedError(f"compare_table style: conditional-format operand {formula!r} is not a "
                                  "constant or a cell; formula operands are not supported") from None


_CF_OPS: dict[str, Callable[[Any, list[Any]], bool]] = {
    "lessThan": lambda v, r: v < r[0],
    "lessThanOrEqual": lambda v, r: v <= r[0],
    "equal": lambda v, r: v == r[0],
    "notEqual": lambda v, r: v != r[0],
    "greaterThan": lambda v, r: v > r[0],
    "greaterThanOrEqual": lambda v, r: v >= r[0],
    "between": lambda v, r: min(r) <= v <= max(r),
    "notBetween": lambda v, r: v < min(r) or v > max(r),
}


def _cf_condition(rule: Any, cell_value: Callable[[str], Any]) -> Optional[Callable[[Any], bool]]:
    """A predicate on a cell's stored value for one conditional-format rule; None for types
    OSWorld also skips (top10, aboveAverage, duplicates, colour scales, data bars...)."""
    kind = rule.type
    if kind == "cellIs":
        refs = [_cf_operand(f, cell_value) for f in rule.formula]
        op = _CF_OPS.get(rule.operator)
        if op is None:
            return None
        return lambda v: op(v, refs)
    text = (rule.text or "").lower()
    text_tests: dict[str, Callable[[str], bool]] = {
        "containsText": lambda s: text in s,
        "notContainsText": lambda s: text not in s,
        "beginsWith": lambda s: s.startswith(text),
        "endsWith": lambda s: s.endswith(text),
    }
    if kind in text_tests:
        test = text_tests[kind]
        return lambda v: test(("" if v is None else (f"{v:g}" if isinstance(v, float) else str(v))).lower())
    if kind in ("expression", "containsErrors", "notContainsErrors", "containsBlanks", "notContainsBlanks",
                "timePeriod"):
        raise NotImplementedError(f"compare_table style: conditional formats of type {kind!r} are not supported")
    return None


def load_xlsx_styles(books: TableBooks, idx: Union[int, str], props: list[str]) -> dict[str, list[Any]]:
    """OSWorld's ``load_xlsx_styles``: ``{coordinate: [style of each prop]}`` for every cell of
    the sheet; cells where a conditional format is active take that format's dxf style. A missing
    sheet gives {}."""
    ws = books.worksheet(idx)
    if ws is None:
        return {}
    styles: dict[str, list[Any]] = {}
    for col in ws.iter_cols():
        for c in col:
            styles[c.coordinate] = [read_cell_style(p, c) for p in props]
    from openpyxl.utils import get_column_letter

    for fmt in ws.conditional_formatting:
        for rule in fmt.rules:
            active = _cf_condition(rule, lambda coord: books.value(idx, coord))
            if active is None:
                continue
            for rng in fmt.cells:
                misses = 0
                for row, col in rng.cells:
                    coord = f"{get_column_letter(col)}{row}"
                    value = books.value(idx, coord)
                    if value is None:
                        misses += 1
                        if misses > 50:  # as upstream: stop a range after 50 empty cells
                            break
                        continue
                    try:
                        hit = bool(active(value))
                    except TypeError:  # comparing text with a number: not active
                        hit = False
                    if hit:
                        cell = ws.cell(row=row, column=col)
                        styles[coord] = [read_cell_style(p, cell, rule.dxf) for p in props]
    return styles


# --------------------------------------------------------------------------- charts, pivots


def _rich_title(title: Any) -> Optional[str]:
    try:
        return title.tx.rich.p[0].r[0].t
    except (AttributeError, IndexError, TypeError):
        return None


def _ref_formula(source: Any) -> str:
    for kind in ("numRef", "strRef"):
        ref = getattr(source, kind, None)
        if ref is not None and getattr(ref, "f", None) is not None:
            return ref.f
    return ""


def load_charts(ws: Any, chart_props: list[str]) -> dict[str, dict[str, Any]]:
    """OSWorld's ``load_charts``: ``{"<val ref>,<cat ref>;...": {prop: value}}`` per chart of the
    worksheet (a later chart with the same series replaces an earlier one, as upstream).

    Props: ``title``, ``legend`` (position), ``anchor`` ([editAs, from.col, to.row, to.col,
    to.row], upstream's list), ``width``, ``height``, ``type`` (tag, e.g. ``barChart``),
    ``direction`` (bar/col), ``xtitle``/``ytitle``/``ztitle``.
    """
    if ws is None:
        return {}
    props = set(chart_props)
    out: dict[str, dict[str, Any]] = {}
    for ch in ws._charts:
        key = ";".join(f"{_ref_formula(s.val)},{_ref_formula(s.cat)}" for s in ch.series)
        info: dict[str, Any] = {}
        if "title" in props:
            info["title"] = _rich_title(ch.title)
        if "legend" in props:
            info["legend"] = ch.legend.position if ch.legend is not None else None
        if "anchor" in props:
            a = ch.anchor
            info["anchor"] = [getattr(a, "editAs", None), a._from.col, a.to.row, a.to.col, a.to.row]
        if "width" in props:
            info["width"] = ch.width
        if "height" in props:
            info["height"] = ch.height
        if "type" in props:
            info["type"] = ch.tagname
        if "direction" in props:
            info["direction"] = getattr(ch, "barDir", None)
        for axis in ("x", "y", "z"):
            if f"{axis}title" in props:
                info[f"{axis}title"] = _rich_title(getattr(getattr(ch, f"{axis}_axis", None), "title", None))
        out[key] = info
    return out


def load_pivot_tables(ws: Any, pivot_props: list[str]) -> dict[str, dict[str, Any]]:
    """OSWorld's ``load_pivot_tables``: ``{"<type>;<(r,c)>:<(r,c)>;<sheet>": {prop: value}}``.

    The source range is the cache's worksheet range narrowed by the leading/trailing pivot fields
    that select no items. Props: ``name``, ``show_total``, ``show_empty_row``/``_col``,
    ``show_headers``, ``location``, ``selection``/``filter`` (per field the (hidden, index) item
    pairs, sets unless ``ordered``), ``filter`` adds ``filter_fields``, ``col_fields``/
    ``row_fields`` (field indices), ``data_fields`` (``"fld;name;subtotal;showDataAs"``, name only
    with ``data_fields_name``).
    """
    if ws is None:
        return {}
    from openpyxl.utils import coordinate_to_tuple

    props = set(pivot_props)
    out: dict[str, dict[str, Any]] = {}
    for pvt in ws._pivots:
        raw = [[(it.h, it.x) for it in f.items if it.x is not None] for f in pvt.pivotFields]
        left = 0
        while left < len(raw) and not raw[left]:
            left += 1
        right = len(raw)
        while right > left and not raw[right - 1]:
            right -= 1
        selection = raw[left:right]
        right_bias = len(raw) - right
        src = pvt.cache.cacheSource
        a, b = src.worksheetSource.ref.split(":")
        r1, c1 = coordinate_to_tuple(a)
        r2, c2 = coordinate_to_tuple(b)
        key = f"{src.type};{(r1, c1 + left)}:{(r2, c2 - right_bias)};{src.worksheetSource.sheet}"
        info: dict[str, Any] = {}
        if "name" in props:
            info["name"] = pvt.name
        if "show_total" in props:
            info["show_total"] = pvt.visualTotals
        if "show_empty_row" in props:
            info["show_empty_row"] = pvt.showEmptyRow
        if "show_empty_col" in props:
            info["show_empty_col"] = pvt.showEmptyCol
        if "show_headers" in props:
            info["show_headers"] = pvt.showHeaders
        if "location" in props:
            info["location"] = pvt.location
        if "filter" in props or "selection" in props:
            info["selection"] = selection if "ordered" in props else [set(s) for s in selection]
        if "filter" in props:
            info["filter_fields"] = {f.fld for f in pvt.pageFields}
        if "col_fields" in props:
            info["col_fields"] = [f.x - left for f in pvt.colFields]
        if "row_fields" in props:
            info["row_fields"] = [f.x - left for f in pvt.rowFields]
        if "data_fields" in props:
            with_name = "data_fields_name" in props
            info["data_fields"] = [f"{f.fld - left:d};{f.name if with_name else ''};{f.subtotal};{f.showDataAs}"
                                   for f in pvt.dataFields]
        out[key] = info
    return out


# --------------------------------------------------------------------------- the rules


def _rule_chart(rule: Mapping[str, Any], books: TableBooks) -> bool:
    props = list(rule.get("chart_props", []))
    return load_charts(books.worksheet(rule["sheet_idx0"]), props) == \
        load_charts(books.worksheet(rule["sheet_idx1"]), props)


def _rule_pivot_table(rule: Mapping[str, Any], books: TableBooks) -> bool:
    props = list(rule.get("pivot_props", []))
    return load_pivot_tables(books.worksheet(rule["sheet_idx0"]), props) == \
        load_pivot_tables(books.worksheet(rule["sheet_idx1"]), props)


def _rule_style(rule: Mapping[str, Any], books: TableBooks) -> bool:
    props = list(rule.get("props", []))
    return load_xlsx_styles(books, rule["sheet_idx0"], props) == load_xlsx_styles(books, rule["sheet_idx1"], props)


def _rule_check_cell(rule: Mapping[str, Any], books: TableBooks) -> Optional[bool]:
    """Each ``props`` entry ``{"value" | style: {"method", "ref"}}`` of the cell ``coordinate``
    matches (``value`` is the stored value, :func:`read_cell_value`); any failure scores 0."""
    from guigym.envs.desktop.evaluators.metrics.utils import match_value_to_rule

    try:
        ws = books.worksheet(rule["sheet_idx"])
        if ws is None:
            return None
        cell = ws[rule["coordinate"]]
        ok = True
        for prop, want in rule["props"].items():
            if prop == "value":
                got = books.value(rule["sheet_idx"], rule["coordinate"])
            else:
                try:
                    got = read_cell_style(prop, cell)
                except Exception:  # noqa: BLE001 - upstream reads a failed style as None
                    got = None
            ok = ok and match_value_to_rule(got, want)
        return ok
    except Exception:  # noqa: BLE001 - OSWorld scores any error in check_cell 0
        return None


def _fuzzy_pair(v1: str, v2: str, rl: Mapping[str, Any]) -> bool:
    for old, new in rl.get("normalization", []):
        v1, v2 = v1.replace(old, new), v2.replace(old, new)
    if "trim_leadings" in rl:
        v1, v2 = v1.lstrip(rl["trim_leadings"]), v2.lstrip(rl["trim_leadings"])
    if "trim_trailings" in rl:
        v1, v2 = v1.rstrip(rl["trim_trailings"]), v2.rstrip(rl["trim_trailings"])
    if "ignore_chars" in rl:
        drop = set(rl["ignore_chars"])
        v1, v2 = "".join(c for c in v1 if c not in drop), "".join(c for c in v2 if c not in drop)
    if rl.get("ignore_case", False):
        v1, v2 = v1.lower(), v2.lower()
    kind = rl["type"]
    if kind == "includes":
        return v2 in v1
    if kind == "included_by":
        return v1 in v2
    if kind == "fuzzy_match":
        return ratio(v1, v2) >= rl.get("threshold", 85.0)
    if kind == "exact_match":
        return v1 == v2
    raise NotImplementedError(f"compare_table sheet_fuzzy: sub-rule type {kind!r} is not supported "
                              "(includes, included_by, fuzzy_match, exact_match)")


def _rule_sheet_fuzzy(rule: Mapping[str, Any], books: TableBooks) -> bool:
    """For every cell of each sub-rule's ``range``: ``str()`` of both stored values (None ->
    "None", numbers as floats, as upstream), normalised, then compared by the sub-rule ``type``."""
    from openpyxl.utils import get_column_letter
    from openpyxl.worksheet.cell_range import MultiCellRange

    ok = True
    for rl in rule["rules"]:
        for rng in MultiCellRange(rl["range"]):
            for row, col in rng.cells:
                coord = f"{get_column_letter(col)}{row}"
                v1 = str(books.value(rule["sheet_idx0"], coord))
                v2 = str(books.value(rule["sheet_idx1"], coord))
                ok = _fuzzy_pair(v1, v2, rl) and ok
    return ok


# --------------------------------------------------------------------------- sheet settings
# freeze, zoom, data_validation, row_props/col_props, filter, sparkline: OSWorld's branches of the
# same names and utils.py load_rows_or_cols / load_filters / load_sparklines.


def _rule_freeze(rule: Mapping[str, Any], books: TableBooks) -> Optional[bool]:
    """Both sheets have the same ``freeze_panes`` (top-left unfrozen cell, e.g. ``"B2"``, or
    None); a missing first sheet scores 0 at once, a missing second one fails the rule
    (OSWorld raises there)."""
    ws0 = books.worksheet(rule["sheet_idx0"])
    if ws0 is None:
        return None
    ws1 = books.worksheet(rule["sheet_idx1"])
    return ws1 is not None and ws0.freeze_panes == ws1.freeze_panes


def _safe_match(value: Any, rule: Mapping[str, Any]) -> bool:
    """``match_value_to_rule``, a type mismatch (``lt`` between text and a number, ``str_set_eq``
    on a missing formula) read as no match (OSWorld raises out of the metric)."""
    from guigym.envs.desktop.evaluators.metrics.utils import match_value_to_rule

    try:
        return match_value_to_rule(value, rule)
    except (TypeError, AttributeError):
        return False


def _rule_zoom(rule: Mapping[str, Any], books: TableBooks) -> Optional[bool]:
    """The sheet view's ``zoomScale`` (100 when unset) matches ``{"method", "ref"}`` of the rule
    itself (e.g. ``"method": "lt", "ref": 260``); a missing sheet scores 0."""
    ws = books.worksheet(rule["sheet_idx"])
    if ws is None:
        return None
    return _safe_match(ws.sheet_view.zoomScale or 100.0, rule)


def _rule_data_validation(rule: Mapping[str, Any], books: TableBooks) -> Optional[bool]:
    """The sheet has at least ``len(dv_props)`` data validations and each of them matches one
    entry of ``dv_props``: every ``{attribute: {"method", "ref"}}`` of the entry holds for the
    openpyxl DataValidation's attribute (``ranges`` = its sqref as a MultiCellRange, ``type``,
    ``formula1`` such as ``'"Pass,Fail,Held"'``, ``operator``, ``allowBlank``...). A missing sheet
    scores 0."""
    ws = books.worksheet(rule["sheet_idx"])
    if ws is None:
        return None
    validations = list(ws.data_validations.dataValidation)
    wanted = list(rule["dv_props"])
    if len(validations) < len(wanted):
        return False
    return all(any(all(_safe_match(getattr(dv, attr, None), mr) for attr, mr in entry.items()) for entry in wanted)
               for dv in validations)


def load_rows_or_cols(ws: Any, obj: str, props: list[str]) -> dict[Any, dict[str, Any]]:
    """OSWorld's ``load_rows_or_cols``: ``{row number | column letter: {prop: value}}`` over the
    dimensions the sheet file defines (``obj`` ``"row"`` or ``"column"``; props are openpyxl
    RowDimension/ColumnDimension attributes: ``hidden``, ``height``, ``width``,
    ``outline_level``...). A missing sheet gives {}."""
    if ws is None:
        return {}
    dims = getattr(ws, f"{obj}_dimensions")
    return {key: {p: getattr(dim, p) for p in set(props)} for key, dim in dims.items()}


def _rule_dims(obj: str) -> Callable[[Mapping[str, Any], TableBooks], bool]:
    def rule_fn(rule: Mapping[str, Any], books: TableBooks) -> bool:
        props = list(rule.get("props", []))
        return load_rows_or_cols(books.worksheet(rule["sheet_idx0"]), obj, props) == \
            load_rows_or_cols(books.worksheet(rule["sheet_idx1"]), obj, props)

    rule_fn.__doc__ = f"The {obj} dimensions (``props``) of both sheets are equal."
    return rule_fn


def load_filters(ws: Any) -> dict[str, Any]:
    """OSWorld's ``load_filters``: the sheet's autofilter as ``{"ref", "filter_column": [per
    column (sorted by colId): col_id, hidden_button, show_button, filters_blank/filters (set of
    values), custom_filters_op/custom_filters (set of (operator, val))], "sort_state": {sort,
    case, method, ref, condition: [...]}}`` (sort_state only when set). A missing sheet gives {}."""
    if ws is None:
        return {}
    auto = ws.auto_filter
    columns = []
    for col in auto.filterColumn:
        info: dict[str, Any] = {"col_id": col.colId, "hidden_button": col.hiddenButton,
                                "show_button": col.showButton}
        if col.filters is not None:
            info["filters_blank"] = col.filters.blank
            info["filters"] = set(col.filters.filter)
        if col.customFilters is not None:
            info["custom_filters_op"] = col.customFilters._and
            info["custom_filters"] = {(f.operator, f.val) for f in col.customFilters.customFilter}
        columns.append(info)
    out: dict[str, Any] = {"ref": auto.ref, "filter_column": sorted(columns, key=lambda d: d["col_id"])}
    sort = auto.sortState
    if sort is not None:
        out["sort_state"] = {
            "sort": sort.columnSort, "case": sort.caseSensitive, "method": sort.sortMethod, "ref": sort.ref,
            "condition": [{"descending": c.descending, "key": c.sortBy, "ref": c.ref, "custom_list": c.customList,
                           "dxf_id": c.dxfId, "icon": c.iconSet, "iconid": c.iconId} for c in sort.sortCondition],
        }
    return out


def _rule_filter(rule: Mapping[str, Any], books: TableBooks) -> bool:
    return load_filters(books.worksheet(rule["sheet_idx0"])) == load_filters(books.worksheet(rule["sheet_idx1"]))


_NS_X14 = "http://schemas.microsoft.com/office/spreadsheetml/2009/9/main"
_NS_XM = "http://schemas.microsoft.com/office/excel/2006/main"


def _sheet_member(z: zipfile.ZipFile, sheet: str) -> Optional[str]:
    """The zip member of the sheet named ``sheet`` (through the workbook relationships)."""
    book = ET.fromstring(z.read("xl/workbook.xml"))
    rel_id = next((sh.get(f"{{{_NS_REL}}}id") for sh in book.iter(_q("sheet")) if sh.get("name") == sheet), None)
    if rel_id is None:
        return None
    rels = ET.fromstring(z.read("xl/_rels/workbook.xml.rels"))
    target = next((r.get("Target") for r in rels.iter(f"{{{_NS_PKG_REL}}}Relationship") if r.get("Id") == rel_id),
                  None)
    if not target:
        return None
    return target.lstrip("/") if target.startswith("/") else f"xl/{target}"


def load_sparklines(path: Optional[str], sheet: str) -> dict[str, str]:
    """OSWorld's ``load_sparklines``: ``{cell: data range}`` (``xm:sqref`` -> ``xm:f``, e.g.
    ``{"F3": "Sheet1!C3:E3"}``) of the sheet's ``x14:sparkline`` elements; {} when the file or
    sheet is missing or broken (OSWorld raises for a missing sheet)."""
    if not path:
        return {}
    try:
        with zipfile.ZipFile(path) as z:
            member = _sheet_member(z, sheet)
            if member is None:
                return {}
            root = ET.fromstring(z.read(member))
    except (OSError, zipfile.BadZipFile, KeyError, ET.ParseError):
        return {}
    out: dict[str, str] = {}
    for sp in root.iter(f"{{{_NS_X14}}}sparkline"):
        ref, data = sp.find(f"{{{_NS_XM}}}sqref"), sp.find(f"{{{_NS_XM}}}f")
        if ref is not None and data is not None:
            out[ref.text or ""] = data.text or ""
    return out


def _rule_sparkline(rule: Mapping[str, Any], books: TableBooks) -> bool:
    def sparklines(idx: Union[int, str]) -> dict[str, str]:
        which, name = books.ref(idx)
        return load_sparklines(books.paths[which], name)

    return sparklines(rule["sheet_idx0"]) == sparklines(rule["sheet_idx1"])


#: rule type -> function(rule, books) -> True/False, or None for "score 0 now"
TABLE_RULES: dict[str, Callable[[Mapping[str, Any], TableBooks], Optional[bool]]] = {
    "chart": _rule_chart,
    "pivot_table": _rule_pivot_table,
    "check_cell": _rule_check_cell,
    "sheet_fuzzy": _rule_sheet_fuzzy,
    "style": _rule_style,
    "freeze": _rule_freeze,
    "zoom": _rule_zoom,
    "data_validation": _rule_data_validation,
    "row_props": _rule_dims("row"),
    "col_props": _rule_dims("column"),
    "filter": _rule_filter,
    "sparkline": _rule_sparkline,
}
