"""The a11y walk bounded by what the screen shows, on LibreOffice Calc (issue 17): of a big AT-SPI
table (Calc's sheet) only on-screen cells that show ink plus the cursor and selected cells, of a
closed menu no items; each cut flagged with a ``truncated`` attribute.

Tool bars and menu bars are kept between walks until an AT-SPI event touches them
(guigym.envs.desktop.server.chrome): checked with stand-in accessibles here, and on a real Calc
(the Name Box inside the cached Formula Tool Bar follows the cell cursor).

The pixel part (guigym.envs.desktop.server.cellgrid) is checked on images drawn here; the walk
on a real Calc in the local desktop (skips with the reason when the sandbox, LibreOffice Calc or
ssconvert is missing).
"""
from __future__ import annotations

import shutil
import time
import xml.etree.ElementTree as ET

import pytest
from PIL import Image, ImageDraw

from desktop_needs import need_desktop
from guigym.envs.desktop.server import cellgrid, chrome

NS = {p: f"https://accessibility.ubuntu.example.org/ns/{w}" for p, w in
      (("st", "state"), ("cp", "component"), ("val", "value"))}
GRID, BG = (192, 192, 192), (255, 255, 255)


def _grid(cols: list[tuple[int, int]], rows: list[tuple[int, int]], size: tuple[int, int],
          shift: tuple[int, int] = (0, 0)) -> Image.Image:
    """White image with a grey grid line on each span's last pixel, moved by ``shift``."""
    img = Image.new("RGB", size, BG)
    d = ImageDraw.Draw(img)
    for x, w in cols:
        d.line([(x + w - 1 + shift[0], 0), (x + w - 1 + shift[0], size[1])], fill=GRID)
    for y, h in rows:
        d.line([(0, y + h - 1 + shift[1]), (size[0], y + h - 1 + shift[1])], fill=GRID)
    return img


# --------------------------------------------------------------------------- pixels, no desktop
def test_inked_cells_are_the_ones_with_text_or_a_cursor_border():
    cols = [(10 + 50 * i, 50) for i in range(4)] + [(210, 0)]  # the last column is hidden
    rows = [(20 + 18 * j, 18) for j in range(5)]
    img = _grid(cols, rows, (300, 130))
    d = ImageDraw.Draw(img)
    d.text((65, 40), "ab", fill=(0, 0, 0))                   # row 1, col 1
    d.rectangle([10, 20, 59, 37], outline=(53, 132, 228), width=2)  # cursor on (0, 0)
    d.rectangle([110, 74, 158, 90], fill=(255, 255, 0))     # a filled but blank cell (3, 2)
    assert cellgrid.inked_cells(img, 0, 0, cols, rows) == {(1, 1), (0, 0)}
    # the same grid seen through a crop: coordinates are screen ones, the image starts at (10, 20)
    crop = img.crop((10, 20, 300, 130))
    assert cellgrid.inked_cells(crop, 10, 20, cols, rows) == {(1, 1), (0, 0)}


def test_grid_shift_finds_where_the_grid_really_is():
    cols = [(40 + 95 * i, 95) for i in range(8)]
    rows = [(150 + 18 * j, 18) for j in range(20)]
    # LibreOffice's cells drawn 25 px below where it reports them; the title bar says 19
    img = _grid(cols, rows, (900, 600), shift=(0, 25))
    assert cellgrid.grid_shift(img, cols, rows, prior=(0, 19)) == (0, 25)
    # rows repeat every 18 px, but the grid's edges do not: a shift by whole rows (7 = 25 - 18)
    # misses the last border; the column headers' border above the first row is a line too
    assert cellgrid.grid_shift(img, cols, rows, prior=(0, 0)) == (0, 25)
    ImageDraw.Draw(img).line([(0, 150 - 1 + 25), (900, 150 - 1 + 25)], fill=(146, 149, 149))
    assert cellgrid.grid_shift(img, cols, rows, prior=(0, 0)) == (0, 25)
    # a grid that continues past both ends (lines every 18 px over the whole image) is ambiguous:
    # the shift nearest the prior wins
    endless = [(150 + 18 * j, 18) for j in range(-8, 30)]
    assert cellgrid.grid_shift(_grid(cols, endless, (900, 800), shift=(0, 25)), cols, rows, prior=(0, 0)) == (0, 7)
    assert cellgrid.grid_shift(_grid(cols, rows, (900, 600), shift=(-3, 0)), cols, rows) == (-3, 0)
    # no grid lines drawn: the prior stands
    blank = Image.new("RGB", (900, 600), BG)
    assert cellgrid.grid_shift(blank, cols, rows, prior=(0, 19)) == (0, 19)


def test_grid_shift_takes_a_hint_only_where_every_border_is_a_line():
    cols = [(40 + 95 * i, 95) for i in range(8)]
    rows = [(150 + 18 * j, 18) for j in range(20)]
    img = _grid(cols, rows, (900, 600), shift=(0, 25))
    ImageDraw.Draw(img).line([(0, 150 - 1 + 25), (900, 150 - 1 + 25)], fill=(146, 149, 149))
    assert cellgrid.grid_shift(img, cols, rows, prior=(0, 19), hint=(0, 25)) == (0, 25)
    # a wrong hint (by a whole row: every row line matches, the headers' border does not) is searched past
    assert cellgrid.grid_shift(img, cols, rows, prior=(0, 19), hint=(0, 7)) == (0, 25)
    assert cellgrid.grid_shift(img, cols, rows, prior=(0, 0), hint=(5, 25)) == (0, 25)


class _App:
    bus_name = ":1.7"


class _Acc:
    """Stand-in for a libatspi accessible: only the fields chrome.key_of reads."""

    def __init__(self, path: str) -> None:
        self.app, self.path = _App(), path


class _Event:
    def __init__(self, path: str) -> None:
        self.source = _Acc(path)


def _bar(name: str = "Standard") -> ET.Element:
    bar = ET.Element("tool-bar", {"name": name})
    ET.SubElement(bar, "push-button", {"name": "Save"})
    return bar


def test_chrome_cache_reuses_a_subtree_until_an_event_touches_it():
    c = chrome.ChromeCache()
    c.listening = True  # as after listen() registered the AT-SPI listener
    root, child = chrome.key_of(_Acc("/bar")), chrome.key_of(_Acc("/bar/save"))
    head = ET.Element("tool-bar", {"name": "Standard"})
    assert c.get(root, head, 1) is None
    c.put(root, _bar(), 1, {child}, 1, ["width"], ("tool-bar", {"name": "Standard"}, ""))
    hit = c.get(root, head, 1)
    assert hit is not None and hit.nodes == 1 and hit.reasons == ["width"]
    kids = c.children(hit)
    assert [k.get("name") for k in kids] == ["Save"]
    kids[0].set("name", "changed by a caller")  # copies are handed out, the stored tree stays
    assert c.children(c.get(root, head, 1))[0].get("name") == "Save"
    # an event from a node of an other subtree changes nothing; one from inside drops the subtree
    c._on_event(_Event("/elsewhere"))
    c.sweep()
    assert c.get(root, head, 1) is not None
    c._on_event(_Event("/bar/save"))
    c.sweep()
    assert c.get(root, head, 1) is None


def test_chrome_cache_drops_a_subtree_whose_root_reads_differently_or_that_is_old():
    c = chrome.ChromeCache()
    c.listening = True
    root = chrome.key_of(_Acc("/bar"))
    stored = ("tool-bar", {"name": "Standard"}, "")
    c.put(root, _bar(), 1, set(), 1, [], stored)
    moved = ET.Element("tool-bar", {"name": "Standard", "x": "moved"})
    assert c.get(root, moved, 1) is None and root not in c.entries  # e.g. moved: its extents differ
    c.put(root, _bar(), 1, set(), 1, [], stored)
    assert c.get(root, ET.Element("tool-bar", {"name": "Standard"}), 2) is None  # a child was added
    c.put(root, _bar(), 1, set(), 1, [], stored)
    c.entries[root].stored -= chrome.MAX_AGE_S + 1
    c.sweep()
    assert root not in c.entries
    # without the event listener nothing is stored (no change signal)
    off = chrome.ChromeCache()
    off.put(root, _bar(), 1, set(), 1, [], stored)
    assert not off.entries and off.get(root, ET.Element("tool-bar", {"name": "Standard"}), 1) is None


# --------------------------------------------------------------------------- a real Calc
#: cell -> text written into the sheet; H20 is far from the rest but on screen at 1280x800
DATA = {"A1": "name", "B1": "qty", "A2": "apple", "B2": "3", "A3": "pear", "B3": "5", "H20": "far"}


def _csv() -> str:
    rows = []
    for r in range(1, 21):
        rows.append(",".join(DATA.get(f"{chr(ord('A') + c)}{r}", "") for c in range(8)))
    return "\n".join(rows) + "\n"


@pytest.fixture(scope="module")
def calc():
    need_desktop()
    missing = [t for t in ("localc", "ssconvert") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"needs {' and '.join(missing)} (libreoffice-calc, gnumeric) for a real sheet")
    from guigym.envs.desktop.providers.local import LocalProvider
    from guigym.envs.desktop.providers.sandbox import bwrap_problem

    problem = bwrap_problem()
    if problem:
        pytest.skip(problem)
    provider = LocalProvider(screen_size=(1280, 800))
    client = provider.start()
    try:
        csv = _csv().replace("'", "")
        r = client.execute(f"mkdir -p ~/Documents && printf '%s' '{csv}' > /tmp/t.csv && "
                           "ssconvert /tmp/t.csv ~/Documents/t.xlsx", shell=True, timeout=60)
        assert r["returncode"] == 0, r
        client.launch("exec localc --norestore --nologo ~/Documents/t.xlsx", shell=True)
        r = client.execute("timeout 120 xdotool search --sync --onlyvisible --name 't.xlsx - LibreOffice Calc'",
                           shell=True, timeout=130)
        assert r["returncode"] == 0, r
        _wait_table(client, lambda t: t is not None and "H20" in _cells(t))
        yield client
    finally:
        provider.stop()


def _table(client) -> tuple[ET.Element, ET.Element | None]:
    root = ET.fromstring(client.accessibility_tree(time_budget=30))
    tables = [t for t in root.iter("table") if t.get("visible-range")]
    return root, (tables[0] if tables else None)


def _cells(table: ET.Element) -> dict[str, ET.Element]:
    return {c.get("name"): c for c in table if c.tag == "table-cell"}


def _wait_table(client, ok, timeout: float = 90.0) -> tuple[ET.Element, ET.Element]:
    end = time.monotonic() + timeout
    root, table = _table(client)
    while not ok(table) and time.monotonic() < end:
        time.sleep(0.5)
        root, table = _table(client)
    assert ok(table), ET.tostring(table, encoding="unicode")[:2000] if table is not None else "no sheet table"
    return root, table


def test_non_empty_visible_cells_are_kept_with_osworld_attributes(calc):
    root, table = _wait_table(calc, lambda t: t is not None and "H20" in _cells(t))
    cells = _cells(table)
    for name, text in DATA.items():
        assert name in cells, (name, sorted(cells))
        assert (cells[name].text or "") == text
        assert cells[name].get("{%s}showing" % NS["st"]) == "true"
        assert cells[name].get("{%s}screencoord" % NS["cp"]) and cells[name].get("{%s}size" % NS["cp"])
    # blank cells are left out, and that is said on the table and on the root
    first, last = table.get("visible-range").split(":")
    assert first == "A1" and int("".join(ch for ch in last if ch.isdigit())) >= 20
    assert len(cells) <= len(DATA) + 2, sorted(cells)  # the data, plus the cursor cell at most
    assert table.get("truncated") == "empty-cells"
    assert "empty-cells" in root.get("truncated", "").split(",")


def test_the_cursor_cell_and_selected_cells_are_kept_even_when_empty(calc):
    from guigym.core import actions as A

    calc.act(A.Hotkey(keys=("ctrl", "Home")))
    for key in ("Right", "Right", "Right", "Down", "Down", "Down", "Down"):  # D5, empty
        calc.act(A.Press(key=key))
    _, table = _wait_table(calc, lambda t: t is not None and "D5" in _cells(t))
    d5 = _cells(table)["D5"]
    assert not (d5.text or "") and d5.get("{%s}focused" % NS["st"]) == "true"
    # a selected empty range D5:E6 (Calc paints a uniform tint there: found by the Selection interface)
    calc.act(A.Hotkey(keys=("shift", "Right")))
    calc.act(A.Hotkey(keys=("shift", "Down")))
    _, table = _wait_table(calc, lambda t: t is not None and {"D5", "E5", "D6", "E6"} <= set(_cells(t)))
    cells = _cells(table)
    for name in ("E5", "D6", "E6"):
        assert cells[name].get("{%s}selected" % NS["st"]) == "true", name
    assert set(DATA) <= set(cells)  # the data is still there
    calc.act(A.Press(key="Escape"))


def test_closed_menus_have_no_items_and_an_open_menu_has_all_of_them(calc):
    from guigym.core import actions as A

    root, _ = _table(calc)
    bars = [b for b in root.iter("menu-bar") if any(m.get("name") == "File" for m in b)]
    assert bars, "no menu bar with a File menu"
    menus = {m.get("name"): m for m in bars[0] if m.tag == "menu"}
    assert {"File", "Edit", "Help"} <= set(menus)
    for m in menus.values():
        assert m.get("truncated") == "hidden-items" and len(m) == 0, m.get("name")
    calc.act(A.Hotkey(keys=("alt", "f")))
    try:
        end, items = time.monotonic() + 30, []
        while not items and time.monotonic() < end:
            time.sleep(0.5)
            root, _ = _table(calc)
            files = [m for m in root.iter("menu") if m.get("name") == "File" and len(m)]
            items = [i for f in files for i in f if i.get("{%s}showing" % NS["st"]) == "true"]
        names = {i.get("name") for i in items}
        assert {"Open...", "Save"} <= names, names
        assert all(f.get("truncated") is None for f in files)
    finally:
        calc.act(A.Press(key="Escape"))
        calc.act(A.Press(key="Escape"))


def _name_box(root: ET.Element) -> str | None:
    """Text of the Name Box: the ``text`` node of the Formula Tool Bar (a cell reference)."""
    for bar in root.iter("tool-bar"):
        if bar.get("name") == "Formula Tool Bar":
            for t in bar.iter("text"):
                return (t.text or "").strip()
    return None


def _status(root: ET.Element) -> list[str]:
    """Texts of the status bar's labels (Calc: "Sheet 1 of 1", "Average: 5; Sum: 5", ...)."""
    return [(t.text or "") for bar in root.iter("status-bar") for t in bar]


def _wait_name_box(client, want: str, sum_text: str | None = None, timeout: float = 8.0) -> ET.Element:
    """The first tree whose Name Box says ``want`` (and whose status bar shows ``sum_text``).
    ``timeout`` (Calc updates both asynchronously) is well under chrome.MAX_AGE_S: a tool bar
    or status bar kept past its change would stay stale longer."""
    def ok(root: ET.Element) -> bool:
        return _name_box(root) == want and (sum_text is None or any(sum_text in t for t in _status(root)))

    end = time.monotonic() + timeout
    root, _ = _table(client)
    while not ok(root) and time.monotonic() < end:
        time.sleep(0.3)
        root, _ = _table(client)
    assert ok(root), (_name_box(root), _status(root))
    return root


def test_toolbars_name_box_and_sheet_tabs_are_current_in_every_walk(calc):
    from guigym.core import actions as A

    calc.act(A.Hotkey(keys=("ctrl", "Home")))
    _wait_name_box(calc, "A1")
    for key in ("Right", "Right", "Down", "Down", "Down"):
        calc.act(A.Press(key=key))
    # the Formula Tool Bar was stored by the walks above: its Name Box must follow the cursor
    _wait_name_box(calc, "C4")
    for key in ("Left", "Up"):  # B3 holds 5, the status bar sums the selection
        calc.act(A.Press(key=key))
    _wait_name_box(calc, "B3", sum_text="Sum: 5")
    calc.act(A.Press(key="Up"))
    _wait_name_box(calc, "B2", sum_text="Sum: 3")
    calc.act(A.Hotkey(keys=("ctrl", "Home")))
    _wait_name_box(calc, "A1")
    for _ in range(2):  # a walk that stores the tool bars and one that reuses them
        root, table = _wait_table(calc, lambda t: t is not None and "H20" in _cells(t))
        bars = {b.get("name"): b for b in root.iter("tool-bar")}
        assert "Standard" in bars, sorted(bars)
        on_screen = {b.get("name"): b for b in bars["Standard"]
                     if b.get("{%s}showing" % NS["st"]) == "true" and b.get("{%s}screencoord" % NS["cp"])}
        assert {"Open", "Save"} <= set(on_screen), sorted(on_screen)
        assert on_screen["Save"].get("{%s}size" % NS["cp"])
        # the sheet tabs, and the table named after the shown one
        tabs = [t.get("name") for t in root.iter("page-tab")]
        assert tabs and table.get("name") == "Sheet " + tabs[0], (tabs, table.get("name"))
        assert _name_box(root) == "A1"
