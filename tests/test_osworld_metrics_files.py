"""OSWorld file metrics on real files generated here: pptx (python-pptx), docx (python-docx), xlsx
(openpyxl), pdf (a minimal writer below), png (Pillow), csv in several encodings, json, zip/tar.

Each metric scores 1 for a matching pair and 0 for a specific difference it must catch; the
compare_table CSV-encoding and check_direct_json_object divergences from OSWorld are covered.
"""
from __future__ import annotations

import importlib.util
import json
import tarfile
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from PIL import Image

from guigym.envs.desktop import evaluators as EV

from guigym.envs.desktop.evaluators.metrics import docs as DOCS, general as M, table as TABLE
from guigym.envs.desktop.evaluators.metrics.file import match_value_to_rule
from guigym.envs.desktop.evaluators.metrics.images import ssim
from guigym.envs.desktop.evaluators.metrics.utils import read_text_lines

NEW_METRICS = ("compare_pptx_files", "check_list", "compare_pdfs", "compare_images", "compare_docx_tables",
               "compare_csv", "check_json", "compare_line_spacing", "compare_archive", "check_json_keybindings",
               "check_structure_sim", "check_brightness_decrease_and_structure_sim")


#: every registered metric by name (the new ones live in their own modules, not as attributes of M)
X = SimpleNamespace(**{name: EV.get_metric(name) for name in EV.METRICS.names()})


def _need(module: str, package: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{package} is not installed (pip install {package}); the metric needs it")


def test_new_metrics_are_registered():
    for name in NEW_METRICS:
        assert name in EV.METRICS, name


# --------------------------------------------------------------------------- divergences


def test_check_direct_json_object_ignore_list_order_only_inside_expected():
    result = {"modelList": ["b", "a"], "q": "x"}
    # at the rules level (as OSWorld's chrome task f79439ad has it) the flag is not honoured
    assert M.check_direct_json_object(result, {"expected": {"modelList": ["a", "b"]}, "ignore_list_order": True}) == 0.0
    inside = {"expected": {"modelList": ["a", "b"], "q": "x", "ignore_list_order": True}}
    assert M.check_direct_json_object(result, inside) == 1.0
    assert M.check_direct_json_object({"modelList": ["a", "c"], "q": "x"}, inside) == 0.0
    assert M.check_direct_json_object({"q": "x"}, inside) == 0.0  # missing list cannot be sorted
    # upstream sorts every expected value under the flag: a number cannot be sorted, scores 0
    assert M.check_direct_json_object({"n": 1}, {"expected": {"n": 1, "ignore_list_order": True}}) == 0.0


def _book(path: Path, title: str = "Sheet1") -> str:
    openpyxl = pytest.importorskip("openpyxl")
    wb = openpyxl.Workbook()
    wb.active.title = title
    wb.active.append(["a", "b"])
    wb.save(path)
    return str(path)


PRINTED = [{"type": "sheet_print", "sheet_idx0": "RNSheet1", "sheet_idx1": "ENSheet1"}]


def test_compare_table_sheet_print_reads_bom_and_legacy_encodings(tmp_path):
    pytest.importorskip("pandas")
    r, e = _book(tmp_path / "r.xlsx"), _book(tmp_path / "e.xlsx")
    # UTF-8 with BOM on both sides (LibreOffice's export option): readable and equal
    (tmp_path / "r-Sheet1.csv").write_bytes(b"\xef\xbb\xbfname,city\nJos\xc3\xa9,K\xc3\xb6ln\n")
    (tmp_path / "e-Sheet1.csv").write_bytes(b"\xef\xbb\xbfname,city\nJos\xc3\xa9,K\xc3\xb6ln\n")
    assert TABLE.compare_table(r, e, rules=PRINTED) == 1.0
    # OSWorld reads plain utf-8 first, so the BOM stays in the first line: BOM vs no BOM differs
    (tmp_path / "e-Sheet1.csv").write_bytes("name,city\nJosé,Köln\n".encode())
    assert TABLE.compare_table(r, e, rules=PRINTED) == 0.0
    # cp1252 bytes (0xe9) are not UTF-8: no decode error escapes, equal files still score 1
    (tmp_path / "r-Sheet1.csv").write_bytes("name\ncafé\n".encode("cp1252"))
    (tmp_path / "e-Sheet1.csv").write_bytes("name\ncafé\n".encode("cp1252"))
    assert TABLE.compare_table(r, e, rules=PRINTED) == 1.0
    (tmp_path / "e-Sheet1.csv").write_bytes("name\ncafe\n".encode("cp1252"))
    assert TABLE.compare_table(r, e, rules=PRINTED) == 0.0
    # gbk bytes likewise
    (tmp_path / "r-Sheet1.csv").write_bytes("城市\n北京\n".encode("gbk"))
    (tmp_path / "e-Sheet1.csv").write_bytes("城市\n北京\n".encode("gbk"))
    assert TABLE.compare_table(r, e, rules=PRINTED) == 1.0
    (tmp_path / "e-Sheet1.csv").write_bytes("城市\n上海\n".encode("gbk"))
    assert TABLE.compare_table(r, e, rules=PRINTED) == 0.0


def test_read_text_lines_encoding_order(tmp_path):
    p = tmp_path / "t.csv"
    p.write_bytes(b"\xef\xbb\xbfa\nb")
    assert read_text_lines(str(p)) == ["\ufeffa", "b"]  # utf-8 first, as OSWorld
    p.write_bytes("é".encode("cp1252"))
    assert read_text_lines(str(p)) == ["é"]  # the latin-1 step decodes 0xe9 the same way
    with pytest.raises(OSError):
        read_text_lines(str(tmp_path / "missing.csv"))


# --------------------------------------------------------------------------- compare_csv


def test_compare_csv(tmp_path):
    a, b, c = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    a.write_bytes("Name , Ville\nZoë,Orléans\n".encode("cp1252"))
    b.write_bytes("Name , Ville\nZoë,Orléans\n".encode("cp1252"))
    assert X.compare_csv(str(a), str(b)) == 1.0
    c.write_text("name, ville\nzoë,orléans\n", encoding="latin-1")
    assert X.compare_csv(str(a), str(c)) == 0.0
    assert X.compare_csv(str(a), str(c), ignore_case=True) == 0.0  # "Name , " vs "name, " still differ
    assert X.compare_csv(str(a), str(c), ignore_case=True, strict=False) == 0.0  # inner spaces stay
    c.write_text("  name , ville \nzoë,orléans\n", encoding="latin-1")
    assert X.compare_csv(str(a), str(c), ignore_case=True, strict=False) == 1.0
    assert X.compare_csv(str(a), str(c), ignore_case=True) == 0.0
    # a list of candidates: any match scores 1, missing candidates are skipped
    assert X.compare_csv(str(a), [str(tmp_path / "missing.csv"), str(c), str(b)]) == 1.0
    assert X.compare_csv(str(a), [str(c)]) == 0.0
    assert X.compare_csv(None, str(b)) == 0.0
    assert X.compare_csv(str(tmp_path / "nope.csv"), str(b)) == 0.0


# --------------------------------------------------------------------------- check_list, check_json


def test_check_list(tmp_path):
    f = tmp_path / "list.txt"
    f.write_text("alpha 1\nbeta 22\ngamma\n")
    rules = {"expect": [r"^beta \d+$", "alp"], "unexpect": ["delta"]}
    assert X.check_list(str(f), rules) == 1.0
    assert X.check_list(str(f), {**rules, "expect": [r"^beta \d+$", "epsilon"]}) == 0.0
    assert X.check_list(str(f), {**rules, "unexpect": ["gam+a"]}) == 0.0
    assert X.check_list(None, rules) == 0.0
    assert X.check_list(str(tmp_path / "missing"), rules) == 0.0


def test_match_value_to_rule_methods():
    assert match_value_to_rule("Hello", {"method": "re.I", "ref": "^hello$"})
    assert not match_value_to_rule("Hello", {"method": "re", "ref": "^hello$"})
    assert match_value_to_rule(3, {"method": "ge", "ref": 3}) and not match_value_to_rule(3, {"method": "lt", "ref": 3})
    assert match_value_to_rule("2.04", {"method": "approx:0.05", "ref": 2.0})
    assert not match_value_to_rule("2.1", {"method": "approx:0.05", "ref": 2.0})
    assert not match_value_to_rule("n/a", {"method": "approx:0.05", "ref": 2.0})
    assert match_value_to_rule(2, {"method": "range.te", "ref": [0, 2]})  # 0 < 2 <= 2
    assert not match_value_to_rule(0, {"method": "range.te", "ref": [0, 2]})
    assert match_value_to_rule("'b,a'", {"method": "str_set_eq", "ref": ["a", "b"]})
    assert not match_value_to_rule("b,a", {"method": "str_list_eq", "ref": ["a", "b"]})
    with pytest.raises(NotImplementedError, match="nope"):
        match_value_to_rule(1, {"method": "nope", "ref": 1})


def test_check_json(tmp_path):
    f = tmp_path / "settings.json"
    f.write_text(json.dumps({"editor": {"fontSize": 14, "theme": "Dark+"}, "tabs": [1, 2]}))
    expect = [{"key": ["editor", "fontSize"], "method": "eq", "ref": 14},
              {"key": ["editor", "theme"], "method": "re", "ref": "^Dark"}]
    assert X.check_json(str(f), {"expect": expect}) == 1.0
    assert X.check_json(str(f), {"expect": [{**expect[0], "ref": 12}]}) == 0.0
    assert X.check_json(str(f), {"expect": [{"key": ["editor", "nope"], "method": "eq", "ref": 1}]}) == 0.0
    # unexpect: a missing key tests None, which does not equal the ref
    assert X.check_json(str(f), {"expect": expect, "unexpect": [{"key": ["x"], "method": "eq", "ref": 1}]}) == 1.0
    assert X.check_json(str(f), {"unexpect": [{"key": ["editor", "fontSize"], "method": "eq", "ref": 14}]}) == 0.0
    # a rule that raises (regex on an int) scores 0, as upstream
    assert X.check_json(str(f), {"expect": [{"key": ["tabs", 0], "method": "re", "ref": "1"}]}) == 0.0
    (tmp_path / "bad.json").write_text("{oops")
    assert X.check_json(str(tmp_path / "bad.json"), {"expect": expect}) == 0.0
    assert X.check_json(None, {"expect": expect}) == 0.0
    if importlib.util.find_spec("yaml") is not None:
        y = tmp_path / "c.yaml"
        y.write_text("editor:\n  fontSize: 14\n  theme: Dark+\n")
        assert X.check_json(str(y), {"expect": expect}, is_yaml=True) == 1.0
        y.write_text("")
        assert X.check_json(str(y), {"expect": expect}, is_yaml=True) == 0.0


def test_check_json_keybindings(tmp_path):
    binding = {"key": "ctrl+f", "command": "-list.find", "when": "listFocus && listSupportsFind"}
    f = tmp_path / "keybindings.json"
    f.write_text("// Place your key bindings in this file to override the defaults\n" + json.dumps([binding]))
    assert X.check_json_keybindings(str(f), {"expected": binding}) == 1.0
    f.write_text(json.dumps([{**binding, "when": "listFocus"}]))
    assert X.check_json_keybindings(str(f), {"expected": binding}) == 0.0
    f.write_text(json.dumps(binding))  # an object, not a list
    assert X.check_json_keybindings(str(f), {"expected": binding}) == 0.0
    assert X.check_json_keybindings(None, {"expected": binding}) == 0.0


# --------------------------------------------------------------------------- pdf


def write_pdf(path: Path, lines: list[str]) -> str:
    """A one-page PDF with Helvetica text lines, written byte by byte (xref offsets included)."""
    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    content = "BT /F1 12 Tf 72 720 Td " + " ".join(f"({esc(s)}) Tj 0 -16 Td" for s in lines) + " ET"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        ("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
         "/Contents 5 0 R >>"),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        f"<< /Length {len(content)} >>\nstream\n{content}\nendstream",
    ]
    out = b"%PDF-1.4\n"
    offsets = []
    for i, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    path.write_bytes(out)
    return str(path)


def test_compare_pdfs(tmp_path):
    _need("pypdf", "pypdf")
    a = write_pdf(tmp_path / "a.pdf", ["Invoice 2024", "Total: 42 EUR"])
    b = write_pdf(tmp_path / "b.pdf", ["Invoice 2024", "Total: 42 EUR"])
    c = write_pdf(tmp_path / "c.pdf", ["Receipt 1999", "Sum: 7 USD"])
    assert X.compare_pdfs(a, b) == 1.0
    partial = X.compare_pdfs(a, c)
    assert 0.0 < partial < 0.6
    # lists: pairwise, mean over the second list; an unreadable pair adds 0
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"not a pdf")
    assert X.compare_pdfs([a, a], [b, str(broken)]) == pytest.approx(0.5)
    assert X.compare_pdfs(str(broken), b) == 0.0


# --------------------------------------------------------------------------- images


def _pattern(w: int = 64, h: int = 48) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    r = (x * 4) % 256
    g = (y * 5) % 256
    b = ((x // 8 + y // 8) % 2) * 200 + 30
    return np.stack([r, g, b], axis=-1).astype(np.uint8)


def _png(path: Path, arr: np.ndarray) -> str:
    Image.fromarray(arr).save(path)
    return str(path)


def test_ssim_is_one_for_identical_and_drops_for_noise():
    a = _pattern()
    assert ssim(a[..., 0], a[..., 0]) == pytest.approx(1.0)
    noisy = np.clip(a.astype(int) + np.random.default_rng(0).integers(-60, 60, a.shape), 0, 255).astype(np.uint8)
    assert ssim(a, noisy, channel_axis=2) < 0.9
    with pytest.raises(ValueError):
        ssim(a[:5, :5, 0], a[:5, :5, 0])  # smaller than the 7x7 window


def test_compare_images(tmp_path):
    a = _png(tmp_path / "a.png", _pattern())
    b = _png(tmp_path / "b.png", _pattern())
    other = _png(tmp_path / "o.png", np.flipud(np.fliplr(_pattern())))
    assert X.compare_images(a, b) == pytest.approx(1.0)
    low = X.compare_images(a, other)
    assert low < 0.5
    assert X.compare_images(a, b, reference_base_result=0.5) == pytest.approx(1.0)
    assert X.compare_images(a, other, reference_base_result=max(low, 0.0)) == 0.0
    # different sizes: both resized to the smaller, so a downscaled copy is still close
    small = tmp_path / "s.png"
    Image.fromarray(_pattern()).resize((32, 24), Image.Resampling.LANCZOS).save(small)
    assert X.compare_images(a, str(small)) > 0.8
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    assert X.compare_images(a, str(empty)) == 0.0
    assert X.compare_images(None, a) == 0.0


def test_check_structure_sim(tmp_path):
    a = _png(tmp_path / "a.png", _pattern())
    b = _png(tmp_path / "b.png", _pattern())
    assert X.check_structure_sim(a, b) == 1.0
    shifted = _png(tmp_path / "s.png", np.roll(_pattern(), 9, axis=1))
    assert X.check_structure_sim(a, shifted) == 0.0
    resized = _png(tmp_path / "r.png", _pattern(66, 48))
    assert X.check_structure_sim(a, resized) == 0.0  # sizes differ
    assert X.check_structure_sim(a, str(tmp_path / "missing.png")) == 0.0


def test_check_brightness_decrease_and_structure_sim(tmp_path):
    original = _png(tmp_path / "orig.png", _pattern())
    darker = _png(tmp_path / "dark.png", (_pattern().astype(np.float32) * 0.7).astype(np.uint8))
    assert X.check_brightness_decrease_and_structure_sim(darker, original) == 1.0
    assert X.check_brightness_decrease_and_structure_sim(original, original) == 0.0  # not darker
    assert X.check_brightness_decrease_and_structure_sim(original, darker) == 0.0  # brighter
    # darker but a different picture: structure check fails
    other = _png(tmp_path / "other.png", (np.flipud(np.fliplr(_pattern())) * 0.5).astype(np.uint8))
    assert X.check_brightness_decrease_and_structure_sim(other, original) == 0.0
    # the threshold option loosens it
    assert X.check_brightness_decrease_and_structure_sim(other, original, threshold=10.0) == 1.0
    black = _png(tmp_path / "black.png", np.zeros((48, 64, 3), np.uint8))
    assert X.check_brightness_decrease_and_structure_sim(black, original) == 0.0


# --------------------------------------------------------------------------- docx


def _docx_with_table(path: Path, cells: list[list[str]], spacing: float = 1.0, text: str = "Report") -> str:
    docx = pytest.importorskip("docx")
    doc = docx.Document()
    para = doc.add_paragraph(text)
    para.paragraph_format.line_spacing = spacing
    doc.add_paragraph("Second paragraph").paragraph_format.line_spacing = spacing
    table = doc.add_table(rows=len(cells), cols=len(cells[0]))
    for i, row in enumerate(cells):
        for j, value in enumerate(row):
            table.cell(i, j).text = value
    doc.save(path)
    return str(path)


def test_compare_docx_tables(tmp_path):
    cells = [["Name", "Score"], ["Ann", "9"]]
    a = _docx_with_table(tmp_path / "a.docx", cells)
    b = _docx_with_table(tmp_path / "b.docx", [["Name ", "Score"], ["Ann", " 9"]])  # stripped equal
    assert X.compare_docx_tables(a, b) == 1.0
    assert X.compare_docx_tables(a, _docx_with_table(tmp_path / "c.docx", [["Name", "Score"], ["Ann", "8"]])) == 0.0
    assert X.compare_docx_tables(a, _docx_with_table(tmp_path / "d.docx", [["Name", "Score", "X"], ["Ann", "9", ""]])) == 0.0
    bad = tmp_path / "bad.docx"
    bad.write_bytes(b"not a zip")
    assert X.compare_docx_tables(str(bad), a) == 0.0
    assert X.compare_docx_tables(None, a) == 0.0


def test_compare_line_spacing(tmp_path):
    cells = [["x"]]
    a = _docx_with_table(tmp_path / "a.docx", cells, spacing=1.5)
    assert X.compare_line_spacing(a, _docx_with_table(tmp_path / "b.docx", cells, spacing=1.5)) == 1.0
    assert X.compare_line_spacing(a, _docx_with_table(tmp_path / "c.docx", cells, spacing=2.0)) == 0.0
    # same spacing, different text: the compare_docx_files gate fails
    assert X.compare_line_spacing(a, _docx_with_table(tmp_path / "d.docx", cells, spacing=1.5, text="Other")) == 0.0


# --------------------------------------------------------------------------- pptx


def make_deck(path: Path, **v: Any) -> str:
    """A two-slide deck; keyword overrides change one property each (see the test)."""
    pptx = pytest.importorskip("pptx")
    from pptx.dml.color import RGBColor
    from pptx.enum.text import PP_ALIGN
    from pptx.util import Emu, Inches, Pt

    prs = pptx.Presentation()
    for _ in range(v.get("slides", 2)):
        slide = prs.slides.add_slide(prs.slide_layouts[6])  # blank
        fill = slide.background.fill
        fill.solid()
        fill.fore_color.rgb = RGBColor.from_string(v.get("bg", "FFFFFF"))
        box = slide.shapes.add_textbox(Inches(1) + Emu(v.get("shift", 0)), Inches(1), Inches(4), Inches(1))
        para = box.text_frame.paragraphs[0]
        para.alignment = v.get("align", PP_ALIGN.LEFT)
        para.level = v.get("level", 0)
        run = para.add_run()
        run.text = v.get("text", "Quarterly results")
        run.font.name = "Arial"
        run.font.size = Pt(v.get("size", 24))
        run.font.bold = v.get("bold", True)
        run.font.color.rgb = RGBColor.from_string(v.get("color", "112233"))
        run.font.underline = v.get("underline", None)
        if v.get("strike"):
            run.font._element.set("strike", "sngStrike")
        if v.get("bullet"):
            from lxml import etree

            ppr = para._p.get_or_add_pPr()
            etree.SubElement(ppr, "{http://schemas.openxmlformats.org/drawingml/2006/main}buChar",
                             char=v["bullet"])
        table = slide.shapes.add_table(2, 2, Inches(1), Inches(3), Inches(4), Inches(1)).table
        for i in range(2):
            for j in range(2):
                table.cell(i, j).text = f"c{i}{j}"
        table.cell(0, 0).text_frame.paragraphs[0].runs[0].font.bold = v.get("cell_bold", None)
        group = slide.shapes.add_group_shape()
        inner = group.shapes.add_textbox(Inches(6), Inches(1), Inches(2), Inches(1))
        inner.text_frame.text = v.get("group_text", "grouped")
        slide.notes_slide.notes_text_frame.text = v.get("notes", "speaker notes")
    prs.save(path)
    return str(path)


def test_compare_pptx_files_equal_and_each_difference(tmp_path):
    from_enum = pytest.importorskip("pptx.enum.text")
    gold = make_deck(tmp_path / "gold.pptx")
    assert X.compare_pptx_files(make_deck(tmp_path / "same.pptx"), gold) == 1.0
    cases = {
        # the bullets pass compares paragraph texts and levels too, so both switches are needed
        "text": ({"text": "Quarterly result"}, ("examine_text", "examine_bullets")),
        "bold": ({"bold": False}, "examine_font_bold"),
        "size": ({"size": 28}, "examine_font_size"),
        "color": ({"color": "FF0000"}, "examine_color_rgb"),
        "underline": ({"underline": True}, "examine_font_underline"),
        "strike": ({"strike": True}, "examine_strike_through"),
        "align": ({"align": from_enum.PP_ALIGN.CENTER}, "examine_alignment"),
        "level": ({"level": 1}, ("examine_indent", "examine_bullets")),
        "bullet": ({"bullet": "•"}, "examine_bullets"),
        "shift": ({"shift": 400000}, "examine_shape"),
        "bg": ({"bg": "000080"}, "examine_background_color"),
        "notes": ({"notes": "other notes"}, "examine_note"),
        "slides": ({"slides": 3}, "examine_number_of_slides"),
    }
    for name, (change, flag) in cases.items():  # caught by default, passes with its switch off
        result = make_deck(tmp_path / f"{name}.pptx", **change)
        assert X.compare_pptx_files(result, gold) == 0.0, name
        flags = (flag,) if isinstance(flag, str) else flag
        assert X.compare_pptx_files(result, gold, **{f: False for f in flags}) == 1.0, name
    # a shift within the relative tolerance passes, a wider tolerance accepts a larger one
    assert X.compare_pptx_files(make_deck(tmp_path / "tiny.pptx", shift=2000), gold) == 1.0
    assert X.compare_pptx_files(make_deck(tmp_path / "wide.pptx", shift=400000), gold,
                                approximately_tolerance=0.5) == 1.0
    # table runs are compared for bold whatever the examine_* flags say (as upstream)
    cell = make_deck(tmp_path / "cell.pptx", cell_bold=True)
    assert X.compare_pptx_files(cell, gold) == 0.0
    assert X.compare_pptx_files(cell, gold, examine_font_bold=False) == 0.0
    # text inside a group is compared in the final text-shape pass
    assert X.compare_pptx_files(make_deck(tmp_path / "grp.pptx", group_text="other"), gold) == 0.0
    # unknown options (OSWorld's enable_debug) are ignored
    assert X.compare_pptx_files(make_deck(tmp_path / "dbg.pptx"), gold, enable_debug=True) == 1.0


def test_compare_pptx_files_unreadable_result_and_evaluate(tmp_path):
    gold = make_deck(tmp_path / "gold.pptx")
    bad = tmp_path / "bad.pptx"
    bad.write_bytes(b"not a presentation")
    assert X.compare_pptx_files(str(bad), gold) == 0.0
    assert X.compare_pptx_files(None, gold) == 0.0
    spec = {"func": "compare_pptx_files", "result": {"type": "vm_file"}, "expected": {"type": "cloud_file"},
            "options": {"examine_shape": False}}
    shifted = make_deck(tmp_path / "shift.pptx", shift=400000)
    assert EV.evaluate(spec, shifted, gold)[0] == 1.0
    assert EV.evaluate({**spec, "options": {}}, shifted, gold)[0] == 0.0


# --------------------------------------------------------------------------- compare_archive


def _zip(path: Path, files: dict[str, str]) -> str:
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return str(path)


def test_compare_archive(tmp_path):
    files = {"a.txt": "hello\n", "b.txt": "world\n"}
    gold = _zip(tmp_path / "gold.zip", files)
    assert X.compare_archive(_zip(tmp_path / "same.zip", files), gold) == 1.0
    # one of two files differs: the mean of the per-file scores
    assert X.compare_archive(_zip(tmp_path / "half.zip", {**files, "b.txt": "earth\n"}), gold) == 0.5
    assert X.compare_archive(_zip(tmp_path / "names.zip", {"a.txt": "hello\n", "c.txt": "world\n"}), gold) == 0.0
    # options pass on to the per-file metric (compare_text_file's ignore_case)
    upper = _zip(tmp_path / "upper.zip", {"a.txt": "HELLO\n", "b.txt": "WORLD\n"})
    assert X.compare_archive(upper, gold) == 0.0
    assert X.compare_archive(upper, gold, ignore_case=True) == 1.0
    # tar.gz against zip, a sub-folder via file_path, csv files
    src = tmp_path / "src" / "data"
    src.mkdir(parents=True)
    (src / "t.csv").write_text("x,y\n1,2\n")
    tgz = tmp_path / "pred.tar.gz"
    with tarfile.open(tgz, "w:gz") as t:
        t.add(src, arcname="data")
    gold_csv = _zip(tmp_path / "gold_csv.zip", {"data/t.csv": "x,y\n1,2\n"})
    assert X.compare_archive(str(tgz), gold_csv, file_path="data", file_type="csv") == 1.0
    gold_csv2 = _zip(tmp_path / "gold_csv2.zip", {"data/t.csv": "x,y\n1,3\n"})
    assert X.compare_archive(str(tgz), gold_csv2, file_path="data", file_type="csv") == 0.0
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"junk")
    assert X.compare_archive(str(bad), gold) == 0.0
    assert X.compare_archive(None, gold) == 0.0
    with pytest.raises(ValueError, match="file_type"):
        X.compare_archive(gold, gold, file_type="hologram")
