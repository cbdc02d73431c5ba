"""OSWorld Writer/document metrics (docs.py, pdf.py check_pdf_pages, others.py compare_epub) on
files generated here with python-docx, pypdf, Pillow and zipfile: each scores 1 (or its full
ratio) on a matching result and 0 / less on the specific mistake a wrong agent result shows."""
from __future__ import annotations

import io
import zipfile

import pytest

from guigym.core.errors import ConfigError
from guigym.envs.desktop.evaluators import get_metric
from guigym.envs.desktop.evaluators.metrics.writer import ciede2000, rgb_to_lab

docx = pytest.importorskip("docx", reason="python-docx is needed to build the .docx fixtures")
from docx.enum.text import WD_BREAK, WD_PARAGRAPH_ALIGNMENT, WD_TAB_ALIGNMENT
from docx.oxml import OxmlElement
from docx.oxml.ns import qn
from docx.shared import Inches, Pt, RGBColor


def save(doc, tmp_path, name: str) -> str:
    path = str(tmp_path / name)
    doc.save(path)
    return path


def doc_with(paragraphs, tmp_path, name: str) -> str:
    """A .docx with one paragraph per text."""
    doc = docx.Document()
    for text in paragraphs:
        doc.add_paragraph(text)
    return save(doc, tmp_path, name)


# --------------------------------------------------------------------------- check_tabstops


def tab_doc(tmp_path, name, lines, stops):
    """Each line gets the tab stops ``stops``: [(inches, alignment)]."""
    doc = docx.Document()
    for line in lines:
        p = doc.add_paragraph(line)
        for inches, align in stops:
            p.paragraph_format.tab_stops.add_tab_stop(Inches(inches), align)
    return save(doc, tmp_path, name)


def test_check_tabstops_scores_position_difference_and_word_count(tmp_path):
    lines = ["The quick fox\tjumps over the dog", "Three words here\tand the rest"]
    gold = tab_doc(tmp_path, "gold.docx", lines, [(6.0, WD_TAB_ALIGNMENT.RIGHT)])
    f = get_metric("check_tabstops")
    opts = {"word_number_split_by_tabstop": 3, "index": 0}
    same = tab_doc(tmp_path, "same.docx", lines, [(6.0, WD_TAB_ALIGNMENT.RIGHT)])
    assert f(same, gold, **opts) == pytest.approx(1.0)
    # the stop half an inch off: 1 - 0.5in / the gold's text width (page width minus margins)
    sec = docx.Document(gold).sections[0]
    width_in = (sec.page_width - sec.left_margin - sec.right_margin) / Inches(1)
    off = tab_doc(tmp_path, "off.docx", lines, [(5.5, WD_TAB_ALIGNMENT.RIGHT)])
    assert f(off, gold, **opts) == pytest.approx(1 - 0.5 / width_in)
    assert f(off, gold, **opts) < 1.0
    # a LEFT stop where a RIGHT one belongs, or no stop at all
    left = tab_doc(tmp_path, "left.docx", lines, [(6.0, WD_TAB_ALIGNMENT.LEFT)])
    assert f(left, gold, **opts) == 0.0
    assert f(tab_doc(tmp_path, "none.docx", lines, []), gold, **opts) == 0.0
    # tab after the wrong word: four words before the tab
    moved = tab_doc(tmp_path, "moved.docx", ["The quick fox jumps\tover the dog", "Three words here\tand the rest"],
                    [(6.0, WD_TAB_ALIGNMENT.RIGHT)])
    assert f(moved, gold, **opts) == 0.0
    assert f(moved, gold) == pytest.approx(1.0)  # without the option only stops count
    assert f(None, gold) == 0.0


# --------------------------------------------------------------------------- run formatting


def test_compare_subscript_contains_needs_a_subscript_run_in_both(tmp_path):
    def chem(sub: bool, name: str) -> str:
        doc = docx.Document()
        p = doc.add_paragraph()
        p.add_run("H")
        p.add_run("2").font.subscript = sub
        p.add_run("O")
        return save(doc, tmp_path, name)

    gold = chem(True, "gold.docx")
    f = get_metric("compare_subscript_contains")
    assert f(chem(True, "ok.docx"), gold) == 1.0
    assert f(chem(False, "plain.docx"), gold) == 0.0
    assert f(str(tmp_path / "missing.docx"), gold) == 0.0


def add_page_field(paragraph, shown: str) -> None:
    """A complex PAGE field as LibreOffice writes it: begin, instrText, separate, result, end."""
    def run_with(child):
        r = OxmlElement("w:r")
        r.append(child)
        paragraph._p.append(r)

    def fld(kind):
        el = OxmlElement("w:fldChar")
        el.set(qn("w:fldCharType"), kind)
        return el

    run_with(fld("begin"))
    instr = OxmlElement("w:instrText")
    instr.text = " PAGE "
    run_with(instr)
    run_with(fld("separate"))
    t = OxmlElement("w:t")
    t.text = shown
    run_with(t)
    run_with(fld("end"))


def test_has_page_numbers_in_footers_checks_every_section(tmp_path):
    f = get_metric("has_page_numbers_in_footers")
    doc = docx.Document()
    doc.add_paragraph("body")
    add_page_field(doc.sections[0].footer.paragraphs[0], "1")
    assert f(save(doc, tmp_path, "numbered.docx")) == 1.0

    plain = docx.Document()
    plain.add_paragraph("body")
    plain.sections[0].footer.paragraphs[0].text = "Company confidential"
    assert f(save(plain, tmp_path, "text_footer.docx")) == 0.0
    assert f(doc_with(["no footer"], tmp_path, "bare.docx")) == 0.0
    assert f(None) == 0.0


def test_compare_font_names_every_run(tmp_path):
    def fonts(names, name):
        doc = docx.Document()
        p = doc.add_paragraph()
        for i, font in enumerate(names):
            p.add_run(f"w{i} ").font.name = font
        return save(doc, tmp_path, name)

    f = get_metric("compare_font_names")
    rules = {"font_name": "Times New Roman"}
    assert f(fonts(["Times New Roman"] * 3, "ok.docx"), rules) == 1.0
    assert f(fonts(["Times New Roman", "Arial", "Times New Roman"], "mixed.docx"), rules) == 0.0
    assert f(fonts([None], "inherited.docx"), rules) == 0.0


def test_is_first_line_centered(tmp_path):
    def first(align, name):
        doc = docx.Document()
        doc.add_paragraph("Title").alignment = align
        doc.add_paragraph("Body").alignment = WD_PARAGRAPH_ALIGNMENT.CENTER
        return save(doc, tmp_path, name)

    f = get_metric("is_first_line_centered")
    assert f(first(WD_PARAGRAPH_ALIGNMENT.CENTER, "c.docx")) == 1.0
    assert f(first(WD_PARAGRAPH_ALIGNMENT.RIGHT, "r.docx")) == 0.0
    assert f(first(None, "inherit.docx")) == 0.0
    assert f(save(docx.Document(), tmp_path, "empty.docx")) == 0.0


def test_evaluate_strike_through_last_paragraph(tmp_path):
    def struck(strikes, text_last="to be removed", name="r.docx"):
        doc = docx.Document()
        doc.add_paragraph("keep this")
        p = doc.add_paragraph()
        words = text_last.split(" ")
        for i, (word, s) in enumerate(zip(words, strikes)):
            p.add_run(word + (" " if i < len(words) - 1 else "")).font.strike = s
        return save(doc, tmp_path, name)

    gold = struck([True, True, True], name="gold.docx")
    f = get_metric("evaluate_strike_through_last_paragraph")
    assert f(struck([True, True, True], name="ok.docx"), gold) == 1.0
    assert f(struck([True, False, True], name="partial.docx"), gold) == 0.0
    # struck, but the text changed
    assert f(struck([True, True, True], text_last="to be deleted", name="edited.docx"), gold) == 0.0


def test_check_italic_font_size_14(tmp_path):
    def italic(size, name, text="plain and slanted"):
        doc = docx.Document()
        p = doc.add_paragraph()
        a, b = text.split(" and ")
        p.add_run(a + " and ")
        run = p.add_run(b)
        run.italic = True
        if size is not None:
            run.font.size = Pt(size)
        return save(doc, tmp_path, name)

    gold = italic(14, "gold.docx")
    f = get_metric("check_italic_font_size_14")
    assert f(italic(14, "ok.docx"), gold) == 1.0
    assert f(italic(12, "twelve.docx"), gold) == 0.0
    assert f(italic(None, "unsized.docx"), gold) == 0.0
    assert f(italic(14, "text.docx", text="plain and upright"), gold) == 0.0


def test_contains_page_break(tmp_path):
    f = get_metric("contains_page_break")
    doc = docx.Document()
    doc.add_paragraph("page one").add_run().add_break(WD_BREAK.PAGE)
    doc.add_paragraph("page two")
    assert f(save(doc, tmp_path, "break.docx")) == 1.0
    line = docx.Document()
    line.add_paragraph("one line").add_run().add_break(WD_BREAK.LINE)
    assert f(save(line, tmp_path, "line.docx")) == 0.0
    assert f(None) == 0.0


def test_contains_page_break_checks_the_rules_page_break_count(tmp_path):
    # OSWorld 1.0.2 (docs.py): rules["page_break_count"], when given, must equal the number of
    # page breaks; real task files pass it (e.g. a document that needs exactly one break)
    f = get_metric("contains_page_break")
    doc = docx.Document()
    doc.add_paragraph("one").add_run().add_break(WD_BREAK.PAGE)
    doc.add_paragraph("two").add_run().add_break(WD_BREAK.PAGE)
    doc.add_paragraph("three")
    two = save(doc, tmp_path, "two.docx")
    assert f(two, {"page_break_count": 2}) == 1.0
    assert f(two, {"page_break_count": 1}) == 0.0
    assert f(two, {}) == 1.0                         # no count asked: any break passes
    none = docx.Document()
    none.add_paragraph("no break")
    assert f(save(none, tmp_path, "none.docx"), {"page_break_count": 0}) == 0.0  # a break is still needed


# --------------------------------------------------------------------------- colours


def test_ciede2000_matches_published_reference_pairs():
    # Sharma, Wu & Dalal (2005) test data, pairs 1, 7 and 8
    assert ciede2000((50, 2.6772, -79.7751), (50, 0, -82.7485)) == pytest.approx(2.0425, abs=1e-4)
    assert ciede2000((50, 0, 0), (50, -1, 2)) == pytest.approx(2.3669, abs=1e-4)
    assert ciede2000((50, 2.5, 0), (50, 0, -2.5)) == pytest.approx(4.3065, abs=1e-4)
    assert rgb_to_lab((255, 0, 0)) == pytest.approx((53.2406, 80.0923, 67.2028), abs=1e-3)


def test_evaluate_colored_words_in_tables(tmp_path):
    words = ["apple", "ball", "Egg", "cat"]

    def table(colours, name):
        doc = docx.Document()
        doc.add_paragraph("Word list")
        t = doc.add_table(rows=2, cols=2)
        for cell, word, colour in zip(t._cells, words, colours):
            run = cell.paragraphs[0].add_run(word)
            if colour is not None:
                run.font.color.rgb = RGBColor(*colour)
        return save(doc, tmp_path, name)

    red, blue = (255, 0, 0), (0, 0, 255)
    gold = table([red, blue, red, blue], "gold.docx")
    f = get_metric("evaluate_colored_words_in_tables")
    assert f(table([red, blue, red, blue], "ok.docx"), gold) == 1.0
    # a near-red within the 3.5 CIEDE2000 threshold passes
    assert f(table([(254, 1, 0), blue, red, blue], "near.docx"), gold) == 1.0
    assert f(table([blue, blue, red, blue], "swapped.docx"), gold) == 0.0
    assert f(table([red, blue, red, None], "uncoloured.docx"), gold) == 0.0
    assert f(table([red, blue, (200, 0, 0), blue], "dark.docx"), gold) == 0.0


# --------------------------------------------------------------------------- .odt highlight


def odt(tmp_path, name: str, highlighted: bool, text: str = "Call the candidate") -> str:
    """A minimal OpenDocument text package whose second span is (or is not) yellow-highlighted."""
    bg = "#ffff00" if highlighted else "transparent"
    content = f"""<?xml version="1.0" encoding="UTF-8"?>
<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"
 xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0"
 xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"
 xmlns:fo="urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0" office:version="1.3">
<office:automatic-styles>
 <style:style style:name="T1" style:family="text"><style:text-properties fo:font-weight="bold"/></style:style>
 <style:style style:name="T2" style:family="text"><style:text-properties fo:background-color="{bg}"/></style:style>
</office:automatic-styles>
<office:body><office:text>
 <text:p text:style-name="Standard">Script</text:p>
 <text:p text:style-name="Standard"><text:span text:style-name="T1">Hello, </text:span><text:span text:style-name="T2">{text}</text:span> today.</text:p>
</office:text></office:body></office:document-content>"""
    path = str(tmp_path / name)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", "application/vnd.oasis.opendocument.text", compress_type=zipfile.ZIP_STORED)
        z.writestr("content.xml", content)
        z.writestr("META-INF/manifest.xml", """<?xml version="1.0" encoding="UTF-8"?>
<manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" manifest:version="1.3">
 <manifest:file-entry manifest:full-path="/" manifest:media-type="application/vnd.oasis.opendocument.text"/>
 <manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/>
</manifest:manifest>""")
    return path


def test_check_highlighted_words_on_odt(tmp_path):
    gold = odt(tmp_path, "gold.odt", highlighted=False)
    f = get_metric("check_highlighted_words")
    assert f(odt(tmp_path, "clean.odt", highlighted=False), gold) == 1.0
    assert f(odt(tmp_path, "still.odt", highlighted=True), gold) == 0.0
    assert f(odt(tmp_path, "edited.odt", highlighted=False, text="Call the manager"), gold) == 0.0
    assert f(doc_with(["not odt"], tmp_path, "x.docx"), gold) == 0.0


# --------------------------------------------------------------------------- images


def png(colour, size=(6, 4)) -> io.BytesIO:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG")
    buf.seek(0)
    return buf


def test_compare_contains_image_pairs_runs(tmp_path):
    def pic_doc(with_picture, name):
        doc = docx.Document()
        doc.add_paragraph("Intro")
        if with_picture:
            doc.add_picture(png("red"))
        else:
            doc.add_paragraph().add_run("[image]")
        return save(doc, tmp_path, name)

    gold = pic_doc(True, "gold.docx")
    f = get_metric("compare_contains_image")
    assert f(pic_doc(True, "ok.docx"), gold) == 1.0
    assert f(pic_doc(False, "noimg.docx"), gold) == 0.0


def test_compare_docx_images_compares_pixels(tmp_path):
    def pic_doc(colours, name, fmt="PNG"):
        doc = docx.Document()
        for c in colours:
            from PIL import Image

            buf = io.BytesIO()
            Image.new("RGB", (6, 4), c).save(buf, format=fmt)
            buf.seek(0)
            doc.add_picture(buf)
        return save(doc, tmp_path, name)

    gold = pic_doc(["red", "blue"], "gold.docx")
    f = get_metric("compare_docx_images")
    assert f(pic_doc(["red", "blue"], "ok.docx"), gold) == 1.0
    # same pixels in another container format still match
    assert f(pic_doc(["red", "blue"], "bmp.docx", fmt="BMP"), gold) == 1.0
    assert f(pic_doc(["red", "green"], "wrong.docx"), gold) == 0.0
    assert f(pic_doc(["red"], "one.docx"), gold) == 0.0
    assert f(doc_with(["no pictures"], tmp_path, "none.docx"), gold) == 0.0


# --------------------------------------------------------------------------- text comparisons


def test_compare_docx_lines_is_a_set_comparison(tmp_path):
    gold = doc_with(["alpha", "beta", "", "gamma"], tmp_path, "gold.docx")
    f = get_metric("compare_docx_lines")
    assert f(doc_with(["gamma", "  alpha ", "beta"], tmp_path, "shuffled.docx"), gold) == 1.0
    assert f(doc_with(["alpha", "beta"], tmp_path, "short.docx"), gold) == 0.0
    assert f(doc_with(["alpha", "beta", "gamma", "delta"], tmp_path, "extra.docx"), gold) == 0.0


def test_compare_docx_files_and_ignore_new_lines(tmp_path):
    gold = doc_with(["Q1: answer one", "Q2: answer two"], tmp_path, "gold.docx")
    f = get_metric("compare_docx_files_and_ignore_new_lines")
    spaced = doc_with(["Q1: answer one", "", "", "Q2: answer two", ""], tmp_path, "spaced.docx")
    assert f(spaced, gold, ignore_blanks=False) == 1.0
    assert f(spaced, gold) == 1.0
    merged = doc_with(["Q1: answer one Q2: answer two"], tmp_path, "merged.docx")
    assert f(merged, gold, ignore_blanks=False) == 0.0   # paragraph by paragraph
    assert f(merged, gold) == 1.0                        # whitespace-collapsed whole text
    wrong = doc_with(["Q1: answer one", "Q2: answer 2"], tmp_path, "wrong.docx")
    assert f(wrong, gold, ignore_blanks=False) == 0.0
    odt_like = tmp_path / "x.odt"
    odt_like.write_bytes(b"")
    assert f(str(odt_like), gold) == 0.0


def test_compare_references_rescales_mean_similarity(tmp_path):
    body = ["Case study", "Some text."]
    refs = ["Smith, J. (2020). A study of things. Journal, 1(2).",
            "Doe, A. (2019). Another study. Press."]
    gold = doc_with(body + ["References"] + refs, tmp_path, "gold.docx")
    f = get_metric("compare_references")
    opts = {"content_only": True, "reference_base_result": 0.92}
    assert f(doc_with(body + ["References", ""] + refs, tmp_path, "ok.docx"), gold, **opts) == pytest.approx(1.0)
    # one small typo: mean ratio r is just under 1, rescaled (r - 0.92) / 0.08
    typo = [refs[0].replace("things", "thing"), refs[1]]
    r = (2 * (len(refs[0]) - 1) / (2 * len(refs[0]) - 1) + 1) / 2
    got = f(doc_with(body + ["References"] + typo, tmp_path, "typo.docx"), gold, **opts)
    assert got == pytest.approx((r - 0.92) / 0.08)
    assert 0 < got < 1
    # a reference left unformatted beyond recognition, one missing, or no heading at all
    bad = [refs[0], "Doe A 2019"]
    assert f(doc_with(body + ["References"] + bad, tmp_path, "bad.docx"), gold, **opts) == 0.0
    assert f(doc_with(body + ["References"] + refs[:1], tmp_path, "missing.docx"), gold, **opts) == 0.0
    assert f(doc_with(body + refs, tmp_path, "noheading.docx"), gold, **opts) == 0.0
    neither = doc_with(body, tmp_path, "neither.docx")
    assert f(neither, doc_with(body, tmp_path, "neither2.docx")) == 1.0


# --------------------------------------------------------------------------- settings file

XCU = """<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema"
 xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<item oor:path="/org.openoffice.Office.Common/Misc"><prop oor:name="FirstRun" oor:op="fuse"><value>false</value></prop></item>
{font}
<item oor:path="/org.openoffice.Office.Writer/DefaultFont"><prop oor:name="Heading" oor:op="fuse"><value>Arial</value></prop></item>
</oor:items>
"""


def test_find_default_font_reads_registrymodifications(tmp_path):
    def xcu(font_item: str) -> str:
        p = tmp_path / "registrymodifications.xcu"
        p.write_text(XCU.format(font=font_item), encoding="utf-8")
        return str(p)

    f = get_metric("find_default_font")
    rules = {"font_name": "Times New Roman"}
    item = ('<item oor:path="/org.openoffice.Office.Writer/DefaultFont"><prop oor:name="Standard" '
            'oor:op="fuse"><value>{}</value></prop></item>')
    assert f(xcu(item.format("Times New Roman")), rules) == 1.0
    assert f(xcu(item.format("Liberation Serif")), rules) == 0.0
    assert f(xcu(""), rules) == 0.0                        # never changed: only Heading is set
    # the Standard font of another module (Calc) does not count
    assert f(xcu(item.format("Times New Roman").replace("Office.Writer", "Office.Calc")), rules) == 0.0
    broken = tmp_path / "broken.xcu"
    broken.write_text("<oor:items", encoding="utf-8")
    assert f(str(broken), rules) == 0.0
    assert f(None, rules) == 0.0


# --------------------------------------------------------------------------- pdf.py


def test_check_pdf_pages_relations(tmp_path):
    pypdf = pytest.importorskip("pypdf", reason="pypdf writes the PDF fixtures")

    def pdf(pages: int) -> str:
        w = pypdf.PdfWriter()
        for _ in range(pages):
            w.add_blank_page(width=200, height=200)
        path = str(tmp_path / f"p{pages}.pdf")
        with open(path, "wb") as fh:
            w.write(fh)
        return path

    f = get_metric("check_pdf_pages")
    one, three = pdf(1), pdf(3)
    assert f(one, {"relation": "eq", "ref_value": 1}) == 1.0
    assert f(three, {"relation": "eq", "ref_value": 1}) == 0.0
    assert f(three, {"relation": "ge", "ref_value": 2}) == 1.0
    assert f(one, {"relation": "gt", "ref_value": 1}) == 0.0
    assert f(None, {"relation": "eq", "ref_value": 1}) == 0.0
    notpdf = tmp_path / "x.pdf"
    notpdf.write_text("not a pdf")
    assert f(str(notpdf), {"relation": "eq", "ref_value": 1}) == 0.0
    with pytest.raises(ConfigError, match="relation"):
        f(one, {"relation": "attrgetter", "ref_value": 1})


# --------------------------------------------------------------------------- others.py epub


def epub(tmp_path, name: str, chapters: list[str], book_id: str = "uuid-1") -> str:
    """A Calibre-layout EPUB 2: metadata at the root, one html member per chapter."""
    manifest = "\n".join(f'    <item id="c{i}" href="index_split_{i:03}.html" media-type="application/xhtml+xml"/>'
                         for i in range(len(chapters)))
    spine = "\n".join(f'    <itemref idref="c{i}"/>' for i in range(len(chapters)))
    opf = f"""<?xml version="1.0" encoding="utf-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="2.0" unique-identifier="uuid_id">
  <metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
    <dc:title>Pass Through</dc:title>
    <dc:identifier id="uuid_id">{book_id}</dc:identifier>
  </metadata>
  <manifest>
{manifest}
    <item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>
  </manifest>
  <spine toc="ncx">
{spine}
  </spine>
</package>"""
    nav = "\n".join(f'    <navPoint id="{book_id}-{i}" playOrder="{i + 1}"><navLabel><text>Chapter {i + 1}</text>'
                    f'</navLabel><content src="index_split_{i:03}.html"/></navPoint>' for i in range(len(chapters)))
    ncx = f"""<?xml version="1.0" encoding="utf-8"?>
<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1">
  <head><meta name="dtb:uid" content="book"/></head>
  <docTitle><text>Pass Through</text></docTitle>
  <navMap>
{nav}
  </navMap>
</ncx>"""
    path = str(tmp_path / name)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        z.writestr("META-INF/container.xml", """<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
  <rootfiles><rootfile full-path="content.opf" media-type="application/oebps-package+xml"/></rootfiles>
</container>""")
        z.writestr("content.opf", opf)
        z.writestr("toc.ncx", ncx)
        for i, body in enumerate(chapters):
            paras = "".join(f"<p>{line}</p>\n" for line in body.split("\n"))
            z.writestr(f"index_split_{i:03}.html",
                       f'<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Ch {i + 1}</title></head>\n'
                       f"<body>\n<h2>Chapter {i + 1}</h2>\n{paras}</body></html>")
    return path


def test_compare_epub_ignores_ids_and_scores_text_differences(tmp_path):
    chapters = ["It was late.\nThe road was empty.", "Morning came.\nShe left."]
    gold = epub(tmp_path, "gold.epub", chapters, book_id="uuid-gold")
    f = get_metric("compare_epub")
    # another book id and other navPoint ids: still a perfect match
    assert f(epub(tmp_path, "ok.epub", chapters, book_id="uuid-other"), gold) == pytest.approx(1.0)
    changed = epub(tmp_path, "changed.epub", ["It was late.\nThe road was full.", chapters[1]])
    assert 0.0 < f(changed, gold) < 1.0
    # OSWorld 1.0.2 averages the parts' line ratios (an older one multiplied them): the parts are
    # content.opf, two chapters and toc.ncx; chapter 1 is 8 lines (html, head, body, h2, p, p,
    # /body, /html) of which one differs, ratio 2*7/16, the other three parts are equal
    assert f(changed, gold) == pytest.approx((1 + 2 * 7 / 16 + 1 + 1) / 4)
    # only the first chapter converted: the ncx and opf lists differ
    assert f(epub(tmp_path, "half.epub", chapters[:1]), gold) < f(changed, gold)
    notzip = tmp_path / "novel.epub"
    notzip.write_text("Chapter 1\nIt was late.")
    assert f(str(notzip), gold) == 0.0
    assert f(None, gold) == 0.0
