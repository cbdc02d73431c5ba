"""The a11y walk bounded by what the screen shows, on LibreOffice Calc (issue 17): of a big AT-SPI
table (Calc's sheet) only on-screen cells that show ink plus the cursor and selected cells, of a
closed menu no items; each cut flagged with a ``truncated`` attribute.

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
from guigym.envs.desktop.server import cellgrid

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
