"""OSWorld app metrics (Thunderbird, browser, a11y tree), compare_table's chart/pivot/cell/fuzzy/
style rules, and the browser getters.

Metric inputs are real files written in tmp_path (prefs.js, msgFilterRules.dat, xlsx with charts,
pivot tables and conditional formats made with openpyxl, a11y XML). Getters run against a fake
client that records its calls, and once against a real headless Chromium when one is installed.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional
from xml.sax.saxutils import escape

import pytest

from _devtools_chromium import devtools_chromium, free_port, run_here
from guigym.core.errors import EnvInfraError, TaskSpecError
from guigym.envs.desktop.evaluators.getters import browser as GB
from guigym.envs.desktop.evaluators import GETTERS, GetterContext, get
from guigym.envs.desktop.evaluators import METRICS
from guigym.envs.desktop.evaluators.metrics.table import compare_table

openpyxl = pytest.importorskip("openpyxl", reason="openpyxl (desktop extra) is not installed")
pytest.importorskip("pandas", reason="pandas (desktop extra) is not installed")


def m(name: str):
    return METRICS.get(name)


# --------------------------------------------------------------------------- Thunderbird

PREFS = """// Mozilla User Preferences
user_pref("mail.spam.manualMark", true);
user_pref("mail.spam.manualMarkMode", 1);
user_pref("mail.identity.id1.htmlSigText", "Best,\\nAnn");
user_pref("mail.server.server2.name", "ann@example.com");
user_pref("mail.spam.manualMarkMode", 0);
not a pref line
"""


@pytest.fixture
def prefs(tmp_path: Path) -> str:
    p = tmp_path / "prefs.js"
    p.write_text(PREFS)
    return str(p)


def test_thunderbird_prefs_match_and_differences(prefs: str) -> None:
    f = m("check_thunderbird_prefs")
    rule = {"expect": {"mail.spam.manualMark": {"method": "eq", "ref": True},
                       "mail.identity.id1.htmlSigText": {"method": "re", "ref": r"^Best,\nAnn$"}},
            "unexpect": {"mail.server.server2.name": {"method": "re.I", "ref": "BOB@"}}}
    assert f(prefs, rule) == 1.0
    # the last value of a repeated key counts (0 after 1)
    assert f(prefs, {"expect": {"mail.spam.manualMarkMode": {"method": "eq", "ref": 0}}}) == 1.0
    assert f(prefs, {"expect": {"mail.spam.manualMarkMode": {"method": "eq", "ref": 1}}}) == 0.0
    # an expected key that is not set
    assert f(prefs, {"expect": {"mail.spam.markAsReadOnSpam": {"method": "eq", "ref": True}}}) == 0.0
    # an unexpected value that is present
    assert f(prefs, {"unexpect": {"mail.server.server2.name": {"method": "re.I", "ref": "ANN@"}}}) == 0.0
    # a regex on a boolean is no match, not a crash
    assert f(prefs, {"expect": {"mail.spam.manualMark": {"method": "re", "ref": "true"}}}) == 0.0
    assert f(None, rule) == 0.0


FILTERS = '''version="9"
logging="no"
name="Promo \\"deals\\""
enabled="yes"
type="17"
action="Move to folder"
actionValue="mailbox://nobody@Local%20Folders/Promotions"
condition="AND (subject,contains,discount) AND (from,contains,\\"shop, inc\\")"
name="All to archive"
enabled="no"
type="1"
action="Mark read"
condition="ALL"
'''


def test_thunderbird_filter_match_and_differences(tmp_path: Path) -> None:
    from guigym.envs.desktop.evaluators.metrics.thunderbird import parse_thunderbird_filters

    p = tmp_path / "msgFilterRules.dat"
    p.write_text(FILTERS)
    parsed = parse_thunderbird_filters(FILTERS)
    assert parsed[0]["name"] == 'Promo "deals"'
    assert parsed[0]["condition"] == ["AND (subject,contains,discount)", 'AND (from,contains,"shop, inc")']
    assert parsed[1] == {"name": "All to archive", "enabled": "no", "type": "1", "action": "Mark read",
                         "condition": ["ALL"]}
    f = m("check_thunderbird_filter")
    want = {"name": 'Promo "deals"', "enabled": "yes", "action": "Move to folder",
            "actionValue": "mailbox://nobody@Local%20Folders/Promotions",
            "condition": ["AND (subject,contains,discount)", 'AND (from,contains,"shop, inc")']}
    assert f(str(p), {"expect": [want]}) == 1.0
    assert f(str(p), {"expect": [{**want, "condition": ["AND (subject,contains,sale)"]}]}) == 0.0
    assert f(str(p), {"expect": [{**want, "actionValue": "mailbox://nobody@Local%20Folders/Trash"}]}) == 0.0
    assert f(str(p), {"expect": [want], "unexpect": [{"condition": ["ALL"]}]}) == 0.0
    assert f(str(p), {"expect": [want], "unexpect": [{"name": "Spam"}]}) == 1.0


# --------------------------------------------------------------------------- browser metrics


def test_url_pattern_extension_and_active_tab() -> None:
    f = m("is_expected_url_pattern_match")
    url = "https://www.example.com/flights?from=SEA&to=NYC"
    assert f(url, {"expected": [r"from=SEA", r"to=NYC"]}) == 1.0
    assert f({"url": url, "title": "x"}, {"expected": [r"flights\?"]}) == 1.0
    assert f(url, {"expected": [r"from=SEA", r"to=BOS"]}) == 0.0
    assert f({"title": "no url"}, {"expected": ["."]}) == 0.0

    ext = m("is_extension_installed")
    paths = ["/home/user/Desktop/helloExtension", "/opt/other"]
    assert ext(paths, {"type": "contain", "expected": "/home/user/Desktop/helloExtension"}) == 1.0
    assert ext(paths, {"type": "contain", "expected": "/home/user/Desktop/other"}) == 0.0
    assert ext("ms-python.python\n", {"type": "not_contain", "expected": "ms-python.python"}) == 0.0
    assert ext("esbenp.prettier\n", {"type": "not_contain", "expected": "ms-python.python"}) == 1.0
    with pytest.raises(NotImplementedError, match="equal"):
        ext("x", {"type": "equal", "expected": "x"})

    tab = m("is_expected_active_tab")
    assert tab({"url": "https://www.drugs.com/npc"}, {"type": "url", "url": "https://drugs.com/npc"}) == 1.0
    assert tab("https://www.drugs.com/", {"type": "url", "url": "drugs.com"}) == 0.0  # http vs https
    assert tab("http://www.drugs.com/", {"type": "url", "url": "drugs.com"}) == 1.0
    assert tab("https://www.drugs.com/npc/", {"type": "url", "url": "https://drugs.com/otc"}) == 0.0
    assert tab("https://drugs.com/npc?x=1", {"type": "url", "url": "https://drugs.com/npc?x=2"}) == 0.0
    assert tab("https://drugs.com/npc", {"type": "title", "url": "https://drugs.com/npc"}) == 0.0


A11Y = """<desktop-frame xmlns:st="https://accessibility.ubuntu.example.org/ns/state"
  xmlns:attr="https://accessibility.ubuntu.example.org/ns/attributes">
  <application name="gnome-terminal-server">
    <frame name="Terminal" st:active="true">
      <terminal name="Terminal" st:focused="true">user@host:~$ ls</terminal>
      <label name="status" st:showing="true">Ready to print</label>
    </frame>
  </application>
</desktop-frame>"""


def test_check_accessibility_tree_css_xpath_and_text() -> None:
    pytest.importorskip("lxml", reason="lxml is not installed")
    pytest.importorskip("cssselect", reason="cssselect (desktop extra) is not installed")
    f = m("check_accessibility_tree")
    assert f(A11Y, [{"selectors": ['application[name="gnome-terminal-server"] terminal[st|focused="true"]']}]) == 1.0
    assert f(A11Y, [{"xpath": "//label[@name='status']", "text": "Ready to print", "exact": True}]) == 1.0
    assert f(A11Y, [{"xpath": "//label[@name='status']", "text": "Ready to print!"}]) == 0.0  # exact by default
    fuzzy = f(A11Y, [{"xpath": "//label[@name='status']", "text": "Ready to print!", "exact": False}])
    assert 0.9 < fuzzy < 1.0
    assert f(A11Y, [{"selectors": ['terminal[st|focused="false"]']}]) == 0.0
    assert f(A11Y, [{"selectors": ["frame"]}, {"xpath": "//push-button"}]) == 0.0
    with pytest.raises(ValueError, match="xpath"):
        f(A11Y, [{"text": "x"}])


# --------------------------------------------------------------------------- compare_table rules


def _book(path: Path, *, chart: Optional[str] = "bar", title: str = "Sales", pivot_subtotal: Optional[str] = "sum",
          bold_b2: bool = True, street: str = "12 Main Rd", cf: Optional[tuple[str, str]] = None,
          static_fill: tuple[str, ...] = ()) -> str:
    """A workbook: Sheet1 with a small table, optionally a chart, a pivot table on 'Pivot', a
    conditional format on C2:C4 (``cf`` = (operator, operand): red fill) or static red fills on
    ``static_fill``."""
    from openpyxl.chart import BarChart, LineChart, Reference
    from openpyxl.formatting.rule import CellIsRule
    from openpyxl.styles import Font, PatternFill

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Sheet1"
    for row in [("Region", "Sales", "Score", "Address"), ("East", 10, 3, street), ("West", 20, 7, "5 Oak St"),
                ("East", 5, 9, "1 Elm Ave")]:
        ws.append(row)
    ws["B2"].font = Font(bold=bold_b2)
    if chart:
        ch = BarChart() if chart == "bar" else LineChart()
        ch.title = title
        ch.add_data(Reference(ws, min_col=2, min_row=1, max_row=4), titles_from_data=True)
        ch.set_categories(Reference(ws, min_col=1, min_row=2, max_row=4))
        ws.add_chart(ch, "F2")
    if cf is not None:
        ws.conditional_formatting.add("C2:C4", CellIsRule(operator=cf[0], formula=[cf[1]],
                                                          fill=PatternFill(bgColor="FFFF0000")))
    for coord in static_fill:
        ws[coord].fill = PatternFill("solid", fgColor="FFFF0000")
    if pivot_subtotal:
        from openpyxl.pivot.cache import CacheDefinition, CacheField, CacheSource, SharedItems, WorksheetSource
        from openpyxl.pivot.table import DataField, FieldItem, Location, PivotField, RowColField, TableDefinition

        pv = wb.create_sheet("Pivot")
        cache = CacheDefinition(
            cacheSource=CacheSource(type="worksheet", worksheetSource=WorksheetSource(ref="A1:B4", sheet="Sheet1")),
            cacheFields=[CacheField(name="Region", sharedItems=SharedItems()),
                         CacheField(name="Sales", sharedItems=SharedItems())])
        table = TableDefinition(
            name="PivotTable1", cacheId=1, dataCaption="Values",
            location=Location(ref="A1:B3", firstHeaderRow=1, firstDataRow=1, firstDataCol=1),
            pivotFields=[PivotField(axis="axisRow", showAll=False,
                                    items=[FieldItem(x=0), FieldItem(x=1), FieldItem(t="default")]),
                         PivotField(dataField=True, showAll=False)],
            rowFields=[RowColField(x=0)], dataFields=[DataField(name="Sum - Sales", fld=1, subtotal=pivot_subtotal)])
        table.cache = cache
        pv._pivots.append(table)
    wb.save(path)
    return str(path)


def _rules(*rules: dict) -> dict:
    return {"rules": list(rules)}


def test_chart_rule(tmp_path: Path) -> None:
    gold = _book(tmp_path / "gold.xlsx")
    rule = {"type": "chart", "sheet_idx0": 0, "sheet_idx1": "EI0", "chart_props": ["title", "type", "direction"]}
    assert compare_table(_book(tmp_path / "same.xlsx"), gold, **_rules(rule)) == 1.0
    assert compare_table(_book(tmp_path / "title.xlsx", title="Revenue"), gold, **_rules(rule)) == 0.0
    assert compare_table(_book(tmp_path / "line.xlsx", chart="line"), gold, **_rules(rule)) == 0.0
    assert compare_table(_book(tmp_path / "none.xlsx", chart=None), gold, **_rules(rule)) == 0.0


def test_pivot_table_rule(tmp_path: Path) -> None:
    gold = _book(tmp_path / "gold.xlsx")
    rule = {"type": "pivot_table", "sheet_idx0": "RNPivot", "sheet_idx1": "ENPivot",
            "pivot_props": ["col_fields", "filter", "row_fields", "data_fields"]}
    assert compare_table(_book(tmp_path / "same.xlsx"), gold, **_rules(rule)) == 1.0
    assert compare_table(_book(tmp_path / "count.xlsx", pivot_subtotal="count"), gold, **_rules(rule)) == 0.0
    assert compare_table(_book(tmp_path / "nopivot.xlsx", pivot_subtotal=None), gold, **_rules(rule)) == 0.0

    from guigym.envs.desktop.evaluators.metrics.table_rules import load_pivot_tables

    info = load_pivot_tables(openpyxl.load_workbook(gold)["Pivot"], ["row_fields", "data_fields", "selection"])
    # the trailing data field selects no items, so upstream narrows the source to column 1
    assert info == {"worksheet;(1, 1):(4, 1);Sheet1": {"row_fields": [0], "data_fields": ["1;;sum;normal"],
                                                       "selection": [{(None, 0), (None, 1)}]}}


def test_check_cell_rule(tmp_path: Path) -> None:
    book = _book(tmp_path / "r.xlsx", chart=None, pivot_subtotal=None)
    ok = {"type": "check_cell", "sheet_idx": 0, "coordinate": "B2",
          "props": {"value": {"method": "eq", "ref": 10.0}, "font_bold": {"method": "eq", "ref": True}}}
    assert compare_table(book, None, **_rules(ok)) == 1.0
    assert compare_table(book, None, **_rules({**ok, "props": {"value": {"method": "eq", "ref": 11.0}}})) == 0.0
    assert compare_table(book, None, **_rules({**ok, "props": {"font_bold": {"method": "eq", "ref": False}}})) == 0.0
    text = {"type": "check_cell", "sheet_idx": "RNSheet1", "coordinate": "D3",
            "props": {"value": {"method": "re", "ref": r"^\d+ Oak"}}}
    assert compare_table(book, None, **_rules(text)) == 1.0
    # a sheet that does not exist scores 0 (no exception)
    assert compare_table(book, None, **_rules({**text, "sheet_idx": "RNNope"})) == 0.0


def test_sheet_fuzzy_rule(tmp_path: Path) -> None:
    gold = _book(tmp_path / "gold.xlsx", chart=None, pivot_subtotal=None, street="12 main Road")
    result = _book(tmp_path / "r.xlsx", chart=None, pivot_subtotal=None, street="12 Main Rd.")
    loose = {"type": "sheet_fuzzy", "sheet_idx0": "RI0", "sheet_idx1": "EI0",
             "rules": [{"range": ["D2:D4"], "type": "exact_match", "ignore_case": True,
                        "normalization": [["Rd", "Road"]], "trim_trailings": "."},
                       {"range": ["B2:B4"], "type": "exact_match"}]}
    assert compare_table(result, gold, **_rules(loose)) == 1.0
    strict = {**loose, "rules": [{"range": ["D2"], "type": "exact_match"}]}
    assert compare_table(result, gold, **_rules(strict)) == 0.0
    fuzzy = {**loose, "rules": [{"range": ["D2"], "type": "fuzzy_match", "threshold": 80, "ignore_case": True}]}
    assert compare_table(result, gold, **_rules(fuzzy)) == 1.0
    assert compare_table(result, gold, **_rules({**fuzzy, "rules": [{**fuzzy["rules"][0], "threshold": 99}]})) == 0.0
    includes = {**loose, "rules": [{"range": ["A2"], "type": "includes"}]}
    assert compare_table(result, gold, **_rules(includes)) == 1.0


def test_style_rule_with_conditional_format(tmp_path: Path) -> None:
    # the conditional format paints C3 and C4 (7, 9 > 5) like the gold's static fills
    gold = _book(tmp_path / "gold.xlsx", chart=None, pivot_subtotal=None, static_fill=("C3", "C4"))
    rule = {"type": "style", "sheet_idx0": 0, "sheet_idx1": "EI0", "props": ["bgcolor", "font_bold"]}
    assert compare_table(_book(tmp_path / "cf.xlsx", chart=None, pivot_subtotal=None, cf=("greaterThan", "5")),
                         gold, **_rules(rule)) == 1.0
    # threshold 8 leaves C3 unpainted
    assert compare_table(_book(tmp_path / "cf8.xlsx", chart=None, pivot_subtotal=None, cf=("greaterThan", "8")),
                         gold, **_rules(rule)) == 0.0
    # an operand that is a cell: C > B4 (5)
    assert compare_table(_book(tmp_path / "cfref.xlsx", chart=None, pivot_subtotal=None, cf=("greaterThan", "$B$4")),
                         gold, **_rules(rule)) == 1.0
    assert compare_table(_book(tmp_path / "cfless.xlsx", chart=None, pivot_subtotal=None, cf=("lessThan", "$B$4")),
                         gold, **_rules(rule)) == 0.0
    with pytest.raises(NotImplementedError, match="SUM"):
        compare_table(_book(tmp_path / "cfsum.xlsx", chart=None, pivot_subtotal=None, cf=("greaterThan", "SUM(B2:B3)")),
                      gold, **_rules(rule))
    # a bold difference
    bold = _book(tmp_path / "bold.xlsx", chart=None, pivot_subtotal=None, static_fill=("C3", "C4"), bold_b2=False)
    assert compare_table(bold, gold, **_rules(rule)) == 0.0
    assert compare_table(bold, gold, **_rules({**rule, "props": ["bgcolor"]})) == 1.0


def test_read_cell_value_and_unknown_rules(tmp_path: Path) -> None:
    from guigym.envs.desktop.evaluators.metrics.table_rules import read_cell_value

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Data"
    ws["A1"], ws["B1"], ws["C1"] = "text", 2.5, "=B1*2"
    other = wb.create_sheet("Other", 0)  # sheet order differs from sheetId order
    other["A1"] = "first"
    path = tmp_path / "v.xlsx"
    wb.save(path)
    assert read_cell_value(str(path), "Data", "A1") == "text"
    assert read_cell_value(str(path), "Data", "B1") == 2.5
    assert read_cell_value(str(path), "Other", "A1") == "first"
    assert read_cell_value(str(path), "Data", "Z9") is None
    assert read_cell_value(str(path), "Missing", "A1") is None
    with pytest.raises(NotImplementedError, match="no_such_rule"):
        compare_table(str(path), None, rules=[{"type": "no_such_rule", "sheet_idx0": 0, "sheet_idx1": 0}])


# --------------------------------------------------------------------------- getters (fake client)


def _a11y(url_text: str, app: str = "Google Chrome") -> str:
    return (f'<desktop-frame><application name="{app}"><frame>'
            f'<entry name="Address and search bar">{escape(url_text)}</entry></frame></application></desktop-frame>')


class FakeClient:
    """Stands in for DesktopClient: canned a11y tree, files and answers of the DevTools helper;
    records every call."""

    def __init__(self, a11y: str = "", files: Optional[dict[str, bytes]] = None,
                 cdp: Optional[dict] = None, cdp_rc: int = 0) -> None:
        self.a11y, self.files, self.cdp, self.cdp_rc = a11y, files or {}, cdp, cdp_rc
        self.calls: list[tuple[str, Any]] = []

    def accessibility_tree(self) -> str:
        self.calls.append(("accessibility_tree", None))
        return self.a11y

    def get_file(self, path: str) -> Optional[bytes]:
        self.calls.append(("get_file", path))
        return self.files.get(path)

    def execute(self, command: Any, shell: bool = False, timeout: float = 60) -> dict:
        self.calls.append(("execute", command))
        if command[0] == "python3":
            return {"status": "success", "output": json.dumps(self.cdp), "error": "boom" if self.cdp_rc else "",
                    "returncode": self.cdp_rc}
        if command[:2] == ["sh", "-c"] and "HOME" in command[2]:
            return {"status": "success", "output": "/home/user", "error": "", "returncode": 0}
        return {"status": "error", "output": "", "error": "unexpected", "returncode": None}


def test_active_tab_url_parse(tmp_path: Path) -> None:
    client = FakeClient(_a11y("www.shop.com/search?q=red+shoes&size=9,10&x=1"))
    spec = {"type": "active_tab_url_parse", "parse_keys": ["q", "size", "color"], "replace": {"q": "query"}}
    assert get(client, spec, tmp_path) == {"query": "red shoes", "size": "9,10", "color": ""}
    assert get(client, {**spec, "split_list": True}, tmp_path)["size"] == ["9", "10"]
    assert all(c[0] == "accessibility_tree" for c in client.calls)  # no browser round trip
    assert get(FakeClient("<desktop-frame/>"), spec, tmp_path) is None
    with pytest.raises(TaskSpecError, match="replace"):
        get(client, {**spec, "replace": {"nope": "x"}}, tmp_path)


def test_active_tab_html_parse_maps_answers(tmp_path: Path) -> None:
    url = "https://www.airline.com/flights/"
    cdp = {"pages": [{"id": "A", "url": url, "title": "Flights"}], "target": {"id": "A", "url": url},
           "value": [["$10", "$20"], ["SEA", "NYC"], ["Economy", "Basic"], ["Only"]]}
    client = FakeClient(_a11y("www.airline.com/flights"), cdp=cdp)
    spec = {"type": "active_tab_html_parse", "category": "class",
            "class_multiObject": {"price": {"1": "second", "4": "fifth"}},
            "class_multiObject_child": {"route": {"0": "from", "1": "to"}},
            "class_multiObject_search_exist": {"fare": ["Economy", "First", "is_other_exist"]},
            "class_singleObject": {"only": "single"}}
    got = get(client, spec, tmp_path)
    assert got == {"second": "$20", "fifth": "", "from": "SEA", "to": "NYC", "Economy": True, "First": False,
                   "is_other_exist": True, "single": "Only"}
    argv = next(c[1] for c in client.calls if c[0] == "execute")
    assert argv[0] == "python3" and argv[3] == f"{GB.DEFAULT_CHROMIUM_PORT},{GB.OSWORLD_LAUNCH_PORT}"
    request = json.loads(argv[4])
    assert request["url"] == "https://www.airline.com/flights"
    assert '["css", ".price"]' in request["expression"] and '["direct", ".route"]' in request["expression"]

    xpath = {"type": "active_tab_html_parse", "category": "xpath", "xpathObject": {"//h1": "h", "//h2": "missing"}}
    assert get(FakeClient(_a11y("a.com"), cdp={**cdp, "value": ["Title", None]}), xpath, tmp_path) == \
        {"h": "Title", "missing": ""}
    # class&url: keys present in texts / url, and texts outside the wanted keys
    cu = {"type": "active_tab_html_parse", "category": "class&url",
          "class_multiObject": {"filter": ["Nike", "Adidas"]}, "url_include_expected": ["Sale", "kids"]}
    got = get(FakeClient(_a11y("a.com"), cdp={**cdp, "value": [["nike", "Puma"], "https://a.com/sale/men"]}),
              cu, tmp_path)
    assert got == {"nike": True, "is_other_exist": True, "sale": True, "kids": False}
    # no tab with the active url, or no browser: {} as upstream
    assert get(FakeClient(_a11y("a.com"), cdp={"pages": [], "target": None}), xpath, tmp_path) == {}
    assert get(FakeClient(_a11y("a.com"), cdp={"error": "unreachable", "detail": "refused"}), xpath, tmp_path) == {}
    with pytest.raises(EnvInfraError, match="boom"):
        get(FakeClient(_a11y("a.com"), cdp={}, cdp_rc=1), xpath, tmp_path)
    with pytest.raises(TaskSpecError, match="category"):
        get(FakeClient(_a11y("a.com")), {"type": "active_tab_html_parse", "category": "css"}, tmp_path)


def test_active_tab_info_fake(tmp_path: Path) -> None:
    value = {"title": "Home", "url": "https://x.org/", "content": "<html></html>"}
    client = FakeClient(_a11y("x.org/"), cdp={"pages": [], "target": {"id": "1"}, "value": value})
    assert get(client, {"type": "active_tab_info"}, tmp_path) == value
    assert get(FakeClient(_a11y("x.org"), cdp={"pages": [], "target": None}), {"type": "active_tab_info"},
               tmp_path) is None


def test_find_unpacked_extension_path(tmp_path: Path) -> None:
    prefs = {"extensions": {"settings": {"abc": {"path": "/home/user/Desktop/helloExtension"},
                                         "def": {"manifest": {}}}}}
    secure = {"extensions": {"settings": {"ghi": {"path": "/opt/ext/two"},
                                          "abc": {"path": "/home/user/Desktop/helloExtension"}}}}
    base = "/home/user/.config/chromium/Default/"
    client = FakeClient(files={base + "Preferences": json.dumps(prefs).encode(),
                               base + "Secure Preferences": json.dumps(secure).encode()})
    got = get(client, {"type": "find_unpacked_extension_path"}, tmp_path)
    assert got == ["/home/user/Desktop/helloExtension", "/opt/ext/two"]
    assert ("get_file", "/home/user/.config/google-chrome/Default/Preferences") in client.calls  # Chrome first
    assert m("is_extension_installed")(got, {"type": "contain", "expected": "/opt/ext/two"}) == 1.0
    assert get(FakeClient(), {"type": "find_unpacked_extension_path"}, tmp_path) is None


# --------------------------------------------------------------------------- getters (real Chromium)


class LocalClient(FakeClient):
    """Runs the DevTools helper for real on this machine (the desktop is this machine)."""

    def execute(self, command: Any, shell: bool = False, timeout: float = 60) -> dict:
        self.calls.append(("execute", command))
        return run_here(command, timeout)


PAGE = """<!DOCTYPE html><html><head><title>Deals</title></head><body>
<div class="price">$10</div><div class="price">$20</div>
<div class="route">SEA<span class="sep"></span>NYC</div>
<p><span>Total amount: 42</span></p>
<input id="q" value="old">
<script>document.getElementById("q").value = "typed";</script>
</body></html>"""


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    base = tmp_path_factory.mktemp("chromium")
    page = base / "page.html"
    page.write_text(PAGE)
    with devtools_chromium(base, page.as_uri(), lambda targets: any(
            t.get("url") == page.as_uri() and t.get("title") == "Deals" for t in targets)) as port:
        yield port, page.as_uri()


def _dead_port() -> int:
    return free_port()  # bound, then released: nothing listens there


def test_html_parse_and_info_on_real_chromium(chromium, tmp_path: Path, monkeypatch) -> None:
    port, url = chromium
    client = LocalClient(_a11y(url, app="Chromium"))
    ctx = GetterContext(client=client, cache_dir=tmp_path)
    ctx.chromium_port = port  # type: ignore[attr-defined]  # the port this test's browser listens on

    def run(spec: dict) -> Any:
        return GETTERS.get(spec["type"])(ctx, {"goto_prefix": "", **spec})

    got = run({"type": "active_tab_html_parse", "category": "class",
               "class_multiObject": {"price": {"0": "p0", "1": "p1", "2": "p2"}},
               "class_multiObject_child": {"route": {"0": "from", "1": "to"}}})
    assert got == {"p0": "$10", "p1": "$20", "p2": "", "from": "SEA", "to": "NYC"}
    assert run({"type": "active_tab_html_parse", "category": "label",
                "labelObject": {"total AMOUNT": "total"}}) == {"total": "Total amount: 42"}
    assert run({"type": "active_tab_html_parse", "category": "input",
                "inputObject": {"//input[@id='q']": "q"}}) == {"q": "typed"}  # the live value, not the attribute
    assert run({"type": "active_tab_html_parse", "category": "xpath",
                "xpathObject": {"/html/body/p/span": "s", "//h9": "none"}}) == {"s": "Total amount: 42", "none": ""}
    info = run({"type": "active_tab_info"})
    assert info["title"] == "Deals" and info["url"] == url
    assert info["content"].startswith("<!DOCTYPE html>") and 'class="route"' in info["content"]
    # the configured port is dead: the OSWorld launch port (here: this browser's) is tried next
    monkeypatch.setattr(GB, "OSWORLD_LAUNCH_PORT", port)
    ctx.chromium_port = _dead_port()  # type: ignore[attr-defined]
    assert run({"type": "active_tab_info"})["title"] == "Deals"
    monkeypatch.setattr(GB, "OSWORLD_LAUNCH_PORT", _dead_port())
    assert run({"type": "active_tab_info"}) is None  # no browser listening
    ctx.chromium_port = port  # type: ignore[attr-defined]
    # a url no tab shows
    client.a11y = _a11y(url + "?other=1", app="Chromium")
    assert run({"type": "active_tab_info"}) is None
    assert run({"type": "active_tab_html_parse", "category": "xpath", "xpathObject": {"//p": "p"}}) == {}


def test_bookmarks_getter_reads_the_profile_then_the_metric_scores_it(tmp_path: Path) -> None:
    roots = {"bookmark_bar": {"children": [{"type": "folder", "name": "Work", "children": []},
                                           {"type": "url", "url": "https://news.example/"}]}, "other": {}}
    path = "/home/user/.config/chromium/Default/Bookmarks"
    client = FakeClient(files={path: json.dumps({"roots": roots, "version": 1}).encode()})
    got = get(client, {"type": "bookmarks"}, tmp_path)
    assert got == roots
    assert ("get_file", "/home/user/.config/google-chrome/Default/Bookmarks") in client.calls  # Chrome first
    assert m("is_expected_bookmarks")(got, {"type": "bookmark_bar_folders_names", "names": ["Work"]}) == 1.0
    assert get(FakeClient(), {"type": "bookmarks"}, tmp_path) == []          # no profile: nothing bookmarked
    assert m("is_expected_bookmarks")([], {"type": "bookmark_bar_folders_names", "names": ["Work"]}) == 0.0
    assert get(FakeClient(files={path: b"{not json"}), {"type": "bookmarks"}, tmp_path) == {}


def test_url_dash_part_takes_one_path_part_of_the_active_url(tmp_path: Path) -> None:
    client = FakeClient(_a11y("drugs.com/sfx/tamiflu-side-effects.html?id=3#top"))
    spec = {"type": "url_dashPart", "goto_prefix": "https://www.", "partIndex": -1, "needDeleteId": False,
            "returnType": "string"}
    assert get(client, spec, tmp_path) == "tamiflu-side-effects.html?id=3#top"
    assert get(client, {**spec, "needDeleteId": True}, tmp_path) == "tamiflu-side-effects.html"
    assert get(client, {**spec, "partIndex": -2, "returnType": "json", "key": "dir"}, tmp_path) == {"dir": "sfx"}
    assert get(client, {**spec, "partIndex": 9}, tmp_path) is None          # no such part
    assert get(FakeClient("<desktop-frame/>"), spec, tmp_path) is None      # no browser window
    with pytest.raises(TaskSpecError, match="partIndex"):
        get(client, {**spec, "returnType": "json"}, tmp_path)               # json without a key


def test_open_tabs_info_lists_page_targets_and_is_expected_tabs_scores_them(tmp_path: Path) -> None:
    pages = [{"id": "1", "url": "https://www.example.com/", "title": "Example"},
             {"id": "2", "url": "https://docs.python.org/3/", "title": "Python"}]
    client = FakeClient(cdp={"pages": pages, "target": pages[0]})
    got = get(client, {"type": "open_tabs_info"}, tmp_path)
    assert got == [{"title": "Example", "url": "https://www.example.com/"},
                   {"title": "Python", "url": "https://docs.python.org/3/"}]
    assert any(c[0] == "execute" and c[1][0] == "python3" for c in client.calls)  # asked inside the desktop
    rule = {"type": "url", "urls": ["https://example.com", "https://docs.python.org/3/"]}
    assert m("is_expected_tabs")(got, rule) == 1.0
    assert m("is_expected_tabs")(got[:1], rule) == 0.0
    gone = FakeClient(cdp={"error": "unreachable", "detail": "9222: refused"})
    assert get(gone, {"type": "open_tabs_info"}, tmp_path) == []


def _vlc_status(state: str, filename: str) -> bytes:
    return (f'<?xml version="1.0" encoding="utf-8"?><root><state>{state}</state><information>'
            f'<category name="meta"><info name="filename">{filename}</info></category></information></root>').encode()


def test_vlc_playing_info_saves_the_status_and_is_vlc_playing_reads_it(tmp_path: Path) -> None:
    import base64 as b64

    class VlcClient(FakeClient):
        def __init__(self, reply: str) -> None:
            super().__init__()
            self.reply = reply

        def execute(self, command: Any, shell: bool = False, timeout: float = 60) -> dict:
            self.calls.append(("execute", command))
            return {"status": "success", "output": self.reply, "error": "", "returncode": 0}

    body = _vlc_status("playing", "Baby Shark.mp4")
    client = VlcClient("OK " + b64.b64encode(body).decode())
    path = get(client, {"type": "vlc_playing_info", "dest": "status.xml"}, tmp_path)
    assert Path(path).read_bytes() == body and Path(path).parent == tmp_path
    assert client.calls[0][1][:2] == ["python3", "-c"] and client.calls[0][1][3:] == ["8080", "password", "vlc", "null"]  # null: no setup record
    f = m("is_vlc_playing")
    assert f(path, {"type": "file_name", "file_name": "Shark.mp4"}) == 1.0
    assert f(path, {"type": "file_name", "file_name": "Whale.mp4"}) == 0.0
    paused = tmp_path / "paused.xml"
    paused.write_bytes(_vlc_status("paused", "Baby Shark.mp4"))
    assert f(str(paused), {"type": "file_name", "file_name": "Shark.mp4"}) == 0.0
    assert get(VlcClient("DOWN [Errno 111] Connection refused"), {"type": "vlc_playing_info", "dest": "s.xml"},
               tmp_path) is None
    assert get(VlcClient("HTTP 401"), {"type": "vlc_playing_info", "dest": "s.xml"}, tmp_path) is None
