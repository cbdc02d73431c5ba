"""OSWorld Writer/document metrics: formatting checks on .docx (and one .odt), the Writer default
font in ``registrymodifications.xcu``, PDF page counts and EPUB comparison.

Names, signatures and scores follow OSWorld's ``desktop_env/evaluators/metrics/docs.py``,
``pdf.py`` (check_pdf_pages) and ``others.py`` (compare_epub). Every metric takes local file paths
fetched by the result/expected getters and returns a float (0/1 unless a docstring says a ratio).
A missing or unreadable result scores 0 (upstream mostly logs and returns 0 too). python-docx and
pypdf are optional libraries: a missing one raises
:class:`~guigym.envs.desktop.evaluators.base.MetricDependencyError`. The .odt reader and the CIEDE2000
colour difference are written here on lxml / plain math, so neither odfpy nor scikit-image is
needed.
"""
from __future__ import annotations

import difflib
import io
import math
import operator
import re
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Callable, Mapping
from typing import Any, Optional

from guigym.core.errors import ConfigError
from guigym.envs.desktop.evaluators.base import METRICS, require
from guigym.envs.desktop.evaluators.metrics.docs import _open_docx, compare_docx_files, score_paragraphs
from guigym.envs.desktop.evaluators.textsim import ratio

__all__ = [
    "check_tabstops", "compare_subscript_contains", "has_page_numbers_in_footers", "compare_font_names",
    "is_first_line_centered", "check_highlighted_words", "compare_contains_image", "compare_docx_lines",
    "evaluate_strike_through_last_paragraph", "evaluate_colored_words_in_tables", "check_italic_font_size_14",
    "contains_page_break", "find_default_font", "compare_docx_files_and_ignore_new_lines",
    "compare_docx_images", "compare_references", "check_pdf_pages", "compare_epub",
    "ciede2000", "rgb_to_lab", "odt_paragraphs", "epub_text_parts",
]

W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def _two_docs(path1: Optional[str], path2: Optional[str], metric: str) -> Optional[tuple[Any, Any]]:
    """Both documents opened with python-docx, or None when a path is empty or a file is broken."""
    if not path1 or not path2:
        return None
    doc1, doc2 = _open_docx(path1, metric), _open_docx(path2, metric)
    if doc1 is None or doc2 is None:
        return None
    return doc1, doc2


# --------------------------------------------------------------------------- formatting checks


@METRICS.register("check_tabstops")
def check_tabstops(docx_file1: Optional[str], docx_file2: Optional[str], **options: Any) -> float:
    """docs.py: result vs gold tab stops of the non-blank paragraphs, a score in [0, 1].

    The two documents must have as many non-blank paragraphs and, per paragraph, as many tab
    stops of equal alignments (CLEAR stops and a LEFT stop at 0 are ignored); the score is
    ``1 - mean over paragraphs of sum(|position difference|) / text width`` (page width minus
    margins of the gold's first section). Option ``word_number_split_by_tabstop=n`` (with
    ``index``, default 0) also requires the ``index``-th tab-separated part of every result
    paragraph to hold exactly ``n`` words.
    """
    docs = _two_docs(docx_file1, docx_file2, "check_tabstops")
    if docs is None:
        return 0.0
    enum_text = require("docx.enum.text", "python-docx", "check_tabstops")
    clear, left = enum_text.WD_TAB_ALIGNMENT.CLEAR, enum_text.WD_TAB_ALIGNMENT.LEFT
    para1 = [p for p in docs[0].paragraphs if p.text.strip()]
    para2 = [p for p in docs[1].paragraphs if p.text.strip()]
    if len(para1) != len(para2):
        return 0.0
    number = options.get("word_number_split_by_tabstop")
    if number is not None:
        index = options.get("index", 0)
        for p in para1:
            parts = p.text.split("\t")
            if not -len(parts) <= index < len(parts):  # upstream raises IndexError; a wrong result
                return 0.0
            if len(parts[index].split()) != number:
                return 0.0
    if not para1:  # upstream divides by zero; two documents without text have equal tab stops
        return 1.0
    section = docs[1].sections[0]
    width = section.page_width - section.left_margin - section.right_margin

    def kept(p: Any) -> list[Any]:
        return [t for t in p.paragraph_format.tab_stops
                if not (t.alignment == clear or (t.alignment == left and t.position == 0))]

    minus = 0.0
    for p1, p2 in zip(para1, para2):
        tabs1, tabs2 = kept(p1), kept(p2)
        if len(tabs1) != len(tabs2):
            return 0.0
        if any(t1.alignment != t2.alignment for t1, t2 in zip(tabs1, tabs2)):
            return 0.0
        minus += sum(abs(t1.position - t2.position) for t1, t2 in zip(tabs1, tabs2)) / width
    return 1.0 - minus / len(para1)


@METRICS.register("compare_subscript_contains")
def compare_subscript_contains(docx_file1: Optional[str], docx_file2: Optional[str], **options: Any) -> float:
    """docs.py: some run, paired by position (paragraph i, run j) in both documents, is subscript
    in both."""
    docs = _two_docs(docx_file1, docx_file2, "compare_subscript_contains")
    if docs is None:
        return 0.0
    for para1, para2 in zip(docs[0].paragraphs, docs[1].paragraphs):
        for run1, run2 in zip(para1.runs, para2.runs):
            if run1.font.subscript and run2.font.subscript:
                return 1.0
    return 0.0


@METRICS.register("has_page_numbers_in_footers")
def has_page_numbers_in_footers(docx_file: Optional[str], *_: Any, **options: Any) -> float:
    """docs.py: the first footer paragraph of every section holds a digit (a page-number field's
    shown value counts, since python-docx's text includes field result runs)."""
    if not docx_file:
        return 0.0
    doc = _open_docx(docx_file, "has_page_numbers_in_footers")
    if doc is None:
        return 0.0
    for section in doc.sections:
        paragraphs = section.footer.paragraphs
        text = paragraphs[0].text if paragraphs else ""
        if not any(ch.isdigit() for ch in text):
            return 0.0
    return 1.0


@METRICS.register("compare_font_names")
def compare_font_names(docx_file: Optional[str], rules: Mapping[str, Any], **options: Any) -> float:
    """docs.py: every run of every body paragraph has ``run.font.name == rules["font_name"]``
    (a run that inherits its font has name None and fails)."""
    if not docx_file:
        return 0.0
    doc = _open_docx(docx_file, "compare_font_names")
    if doc is None:
        return 0.0
    expected = rules["font_name"]
    return float(all(run.font.name == expected for p in doc.paragraphs for run in p.runs))


@METRICS.register("is_first_line_centered")
def is_first_line_centered(docx_file: Optional[str], *_: Any, **options: Any) -> float:
    """docs.py: the first paragraph's own alignment is CENTER (an empty document scores 0)."""
    if not docx_file:
        return 0.0
    doc = _open_docx(docx_file, "is_first_line_centered")
    if doc is None or not doc.paragraphs:
        return 0.0
    enum_text = require("docx.enum.text", "python-docx", "is_first_line_centered")
    return float(doc.paragraphs[0].paragraph_format.alignment == enum_text.WD_PARAGRAPH_ALIGNMENT.CENTER)


def _has_graphic(run: Any) -> bool:
    """The run holds a drawing (an ``a:graphicData`` element, whatever its namespace prefix)."""
    return any(el.tag.endswith("}graphicData") for el in run._element.iter() if isinstance(el.tag, str))


@METRICS.register("compare_contains_image")
def compare_contains_image(docx_file1: Optional[str], docx_file2: Optional[str], **options: Any) -> float:
    """docs.py: for every run paired by position (paragraph i, run j), either both runs hold an
    image or neither does. Runs beyond the shorter document are not compared (as upstream)."""
    docs = _two_docs(docx_file1, docx_file2, "compare_contains_image")
    if docs is None:
        return 0.0
    for para1, para2 in zip(docs[0].paragraphs, docs[1].paragraphs):
        for run1, run2 in zip(para1.runs, para2.runs):
            if _has_graphic(run1) != _has_graphic(run2):
                return 0.0
    return 1.0


@METRICS.register("compare_docx_lines")
def compare_docx_lines(file1: Optional[str], file2: Optional[str], **options: Any) -> float:
    """docs.py: the sets of stripped non-blank paragraph texts are equal (order and repeats
    ignored)."""
    docs = _two_docs(file1, file2, "compare_docx_lines")
    if docs is None:
        return 0.0

    def lines(doc: Any) -> set[str]:
        return {p.text.strip() for p in doc.paragraphs if p.text.strip()}

    return float(lines(docs[0]) == lines(docs[1]))


@METRICS.register("evaluate_strike_through_last_paragraph")
def evaluate_strike_through_last_paragraph(file_path1: Optional[str], file_path2: Optional[str],
                                           **options: Any) -> float:
    """docs.py: the texts match (``compare_docx_files`` defaults) and every run of the result's
    last paragraph has strike-through set."""
    if not file_path1 or not file_path2 or not compare_docx_files(file_path1, file_path2):
        return 0.0
    doc = _open_docx(file_path1, "evaluate_strike_through_last_paragraph")
    if doc is None or not doc.paragraphs:
        return 0.0
    return float(all(run.font.strike for run in doc.paragraphs[-1].runs))


@METRICS.register("check_italic_font_size_14")
def check_italic_font_size_14(path1: Optional[str], path2: Optional[str], **options: Any) -> float:
    """docs.py: the texts match (``compare_docx_files`` defaults) and every run of the result that
    is italic (set on the run itself) has an explicit font size of 14 pt."""
    if not path1 or not path2 or not compare_docx_files(path1, path2):
        return 0.0
    doc = _open_docx(path1, "check_italic_font_size_14")
    if doc is None:
        return 0.0
    for p in doc.paragraphs:
        for run in p.runs:
            if run.italic and (run.font.size is None or run.font.size.pt != 14):
                return 0.0
    return 1.0


@METRICS.register("contains_page_break")
def contains_page_break(docx_file: Optional[str], rules: Any = None, **options: Any) -> float:
    """docs.py: the body paragraphs' runs hold at least one ``<w:br w:type="page"/>`` and, when
    ``rules["page_break_count"]`` is given (OSWorld 1.0.2), exactly that many."""
    if not docx_file:
        return 0.0
    doc = _open_docx(docx_file, "contains_page_break")
    if doc is None:
        return 0.0
    type_attr = f"{{{W_NS}}}type"
    count = sum(1 for p in doc.paragraphs for run in p.runs
                for br in run.element.iter(f"{{{W_NS}}}br") if br.get(type_attr) == "page")
    want = rules.get("page_break_count") if isinstance(rules, Mapping) else None
    if want is not None and count != want:
        return 0.0
    return float(count > 0)


# --------------------------------------------------------------------------- colours


def rgb_to_lab(rgb: tuple[float, float, float]) -> tuple[float, float, float]:
    """CIE L*a*b* (D65 white, 2 degree observer) of an sRGB colour with 0-255 channels, as
    scikit-image's ``rgb2lab`` computes it (which OSWorld uses)."""
    def linear(c: float) -> float:
        c /= 255.0
        return ((c + 0.055) / 1.055) ** 2.4 if c > 0.04045 else c / 12.92

    r, g, b = (linear(float(c)) for c in rgb)
    x = (0.412453 * r + 0.357580 * g + 0.180423 * b) / 0.95047
    y = 0.212671 * r + 0.715160 * g + 0.072169 * b
    z = (0.019334 * r + 0.119193 * g + 0.950227 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    fx, fy, fz = f(x), f(y), f(z)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def ciede2000(lab1: tuple[float, float, float], lab2: tuple[float, float, float]) -> float:
    """The CIEDE2000 colour difference of two L*a*b* colours (kL = kC = kH = 1)."""
    l1, a1, b1 = lab1
    l2, a2, b2 = lab2
    c_mean = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(c_mean ** 7 / (c_mean ** 7 + 25 ** 7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = math.hypot(a1p, b1), math.hypot(a2p, b2)
    h1p = math.degrees(math.atan2(b1, a1p)) % 360 if c1p else 0.0
    h2p = math.degrees(math.atan2(b2, a2p)) % 360 if c2p else 0.0

    dlp, dcp = l2 - l1, c2p - c1p
    if c1p * c2p == 0:
        dhp = 0.0
    elif abs(h2p - h1p) <= 180:
        dhp = h2p - h1p
    elif h2p - h1p > 180:
        dhp = h2p - h1p - 360
    else:
        dhp = h2p - h1p + 360
    d_hp = 2 * math.sqrt(c1p * c2p) * math.sin(math.radians(dhp) / 2)

    lp_mean, cp_mean = (l1 + l2) / 2, (c1p + c2p) / 2
    if c1p * c2p == 0:
        hp_mean = h1p + h2p
    elif abs(h1p - h2p) <= 180:
        hp_mean = (h1p + h2p) / 2
    elif h1p + h2p < 360:
        hp_mean = (h1p + h2p + 360) / 2
    else:
        hp_mean = (h1p + h2p - 360) / 2
    t = (1 - 0.17 * math.cos(math.radians(hp_mean - 30)) + 0.24 * math.cos(math.radians(2 * hp_mean))
         + 0.32 * math.cos(math.radians(3 * hp_mean + 6)) - 0.20 * math.cos(math.radians(4 * hp_mean - 63)))
    d_theta = 30 * math.exp(-(((hp_mean - 275) / 25) ** 2))
    r_c = 2 * math.sqrt(cp_mean ** 7 / (cp_mean ** 7 + 25 ** 7))
    s_l = 1 + 0.015 * (lp_mean - 50) ** 2 / math.sqrt(20 + (lp_mean - 50) ** 2)
    s_c = 1 + 0.045 * cp_mean
    s_h = 1 + 0.015 * cp_mean * t
    r_t = -math.sin(math.radians(2 * d_theta)) * r_c
    tl, tc, th = dlp / s_l, dcp / s_c, d_hp / s_h
    return math.sqrt(tl * tl + tc * tc + th * th + r_t * tc * th)


@METRICS.register("evaluate_colored_words_in_tables")
def evaluate_colored_words_in_tables(file_path1: Optional[str], file_path2: Optional[str],
                                     **options: Any) -> float:
    """docs.py: the texts match (``compare_docx_files`` defaults) and, in every table cell of the
    result, each non-empty run starting with a vowel (aeiou, any case) is red and every other one
    blue: CIEDE2000 distance to (255, 0, 0) / (0, 0, 255) at most ``threshold`` (default 3.5).
    A run without an explicit colour counts as black (upstream crashes on it)."""
    if not file_path1 or not file_path2 or not compare_docx_files(file_path1, file_path2):
        return 0.0
    doc = _open_docx(file_path1, "evaluate_colored_words_in_tables")
    if doc is None:
        return 0.0
    threshold = float(options.get("threshold", 3.5))
    red, blue = rgb_to_lab((255, 0, 0)), rgb_to_lab((0, 0, 255))
    for table in doc.tables:
        for row in table.rows:
            for cell in row.cells:
                for p in cell.paragraphs:
                    for run in p.runs:
                        if not run.text:
                            continue
                        rgb = run.font.color.rgb  # None for no colour or "auto"
                        lab = rgb_to_lab(tuple(rgb) if rgb is not None else (0, 0, 0))
                        target = red if run.text[0].lower() in "aeiou" else blue
                        if ciede2000(lab, target) > threshold:
                            return 0.0
    return 1.0


# --------------------------------------------------------------------------- .odt highlight

ODT_NS = {
    "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
    "style": "urn:oasis:names:tc:opendocument:xmlns:style:1.0",
    "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
    "fo": "urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0",
}


def _odt_content(path: str) -> Optional[Any]:
    """The parsed ``content.xml`` root of an .odt package, or None when it cannot be read."""
    etree = require("lxml.etree", "lxml", "check_highlighted_words")
    try:
        with zipfile.ZipFile(path) as z:
            data = z.read("content.xml")
        return etree.fromstring(data, etree.XMLParser(resolve_entities=False, no_network=True))
    except (OSError, KeyError, zipfile.BadZipFile, etree.XMLSyntaxError):
        return None


def odt_paragraphs(root: Any) -> list[str]:
    """Paragraph texts of an .odt ``content.xml`` as OSWorld's odfpy reader takes them: for each
    ``text:p``, its direct text plus the direct text of its direct ``text:span`` children (text
    inside other elements, e.g. links or nested spans, is left out; ``text:s`` spaces too)."""
    span = f"{{{ODT_NS['text']}}}span"
    out = []
    for p in root.iter(f"{{{ODT_NS['text']}}}p"):
        parts = [p.text or ""]
        for child in p:
            if child.tag == span:
                parts.append(child.text or "")
                parts.extend(grandchild.tail or "" for grandchild in child)
            parts.append(child.tail or "")
        out.append("".join(parts))
    return out


@METRICS.register("check_highlighted_words")
def check_highlighted_words(file_path1: Optional[str], file_path2: Optional[str], **options: Any) -> float:
    """docs.py: the result .odt has the gold's text (``compare_docx_files`` defaults on the .odt
    paragraphs) and no ``text:span`` uses an automatic style with ``fo:background-color`` exactly
    ``#ffff00`` (LibreOffice's yellow highlight)."""
    if not file_path1 or not file_path2:
        return 0.0
    root1, root2 = _odt_content(file_path1), _odt_content(file_path2)
    if root1 is None or root2 is None:
        return 0.0
    if not score_paragraphs(odt_paragraphs(root1), odt_paragraphs(root2)):
        return 0.0
    name_attr = f"{{{ODT_NS['style']}}}name"
    background = f"{{{ODT_NS['fo']}}}background-color"
    yellow_styles = set()
    for auto in root1.iter(f"{{{ODT_NS['office']}}}automatic-styles"):
        for style in auto:
            if any(prop.get(background) == "#ffff00" for prop in style):
                yellow_styles.add(style.get(name_attr))
    style_attr = f"{{{ODT_NS['text']}}}style-name"
    for span in root1.iter(f"{{{ODT_NS['text']}}}span"):
        if span.get(style_attr) in yellow_styles:
            return 0.0
    return 1.0


# --------------------------------------------------------------------------- settings file


@METRICS.register("find_default_font")
def find_default_font(config_file_path: Optional[str], rules: Mapping[str, Any], **options: Any) -> float:
    """docs.py: LibreOffice's ``registrymodifications.xcu`` sets Writer's default Standard font
    (``item oor:path="/org.openoffice.Office.Writer/DefaultFont"`` / ``prop oor:name="Standard"``
    / ``value``; the last such value wins) to ``rules["font_name"]``. An unreadable file scores 0."""
    if not config_file_path:
        return 0.0
    oor = "{http://openoffice.org/2001/registry}"
    font = None
    try:
        root = ET.parse(config_file_path).getroot()
    except (OSError, ET.ParseError):
        return 0.0
    for item in root.iter("item"):
        if item.get(f"{oor}path") != "/org.openoffice.Office.Writer/DefaultFont":
            continue
        for prop in item.iter("prop"):
            if prop.get(f"{oor}name") == "Standard":
                for value in prop.findall("value"):
                    font = value.text
    return float(font == rules["font_name"])


# --------------------------------------------------------------------------- text comparisons


@METRICS.register("compare_docx_files_and_ignore_new_lines")
def compare_docx_files_and_ignore_new_lines(file1: Optional[str], file2: Optional[str], **options: Any) -> float:
    """docs.py: ``compare_docx_files`` on two .docx files after dropping empty paragraphs (text
    exactly ""); only option ``ignore_blanks`` (default True: whole text, whitespace collapsed;
    False: paragraph by paragraph, exact). Other extensions score 0."""
    if not file1 or not file2 or not (str(file1).endswith(".docx") and str(file2).endswith(".docx")):
        return 0.0
    docs = _two_docs(file1, file2, "compare_docx_files_and_ignore_new_lines")
    if docs is None:
        return 0.0
    paras1 = [p.text for p in docs[0].paragraphs if p.text != ""]
    paras2 = [p.text for p in docs[1].paragraphs if p.text != ""]
    return score_paragraphs(paras1, paras2, ignore_blanks=options.get("ignore_blanks", True))


@METRICS.register("compare_references")
def compare_references(file1: Optional[str], file2: Optional[str], **options: Any) -> float:
    """docs.py: compares the reference lists after the first paragraph equal to
    ``reference_indicator`` (default "References") in two .docx files, a score in [0, 1].

    Neither has the heading: 1; only one has it: 0. Otherwise the non-blank paragraphs after it
    must be equally many; ``r`` = mean ``fuzz.ratio / 100`` of the pairs, and the score is
    ``(r - base) / (1 - base)`` when ``r >= base`` (``reference_base_result``, default 0.5), else 0.
    Other options (e.g. ``content_only``) are accepted and ignored, as upstream.
    """
    if not file1 or not file2 or not (str(file1).endswith(".docx") and str(file2).endswith(".docx")):
        return 0.0
    docs = _two_docs(file1, file2, "compare_references")
    if docs is None:
        return 0.0
    indicator = options.get("reference_indicator", "References")
    base = float(options.get("reference_base_result", 0.5))
    paras = [[p.text for p in doc.paragraphs] for doc in docs]
    starts = [ps.index(indicator) if indicator in ps else -1 for ps in paras]
    if starts == [-1, -1]:
        return 1.0
    if -1 in starts:
        return 0.0
    refs1, refs2 = ([p for p in ps[i + 1:] if p.strip()] for ps, i in zip(paras, starts))
    if len(refs1) != len(refs2):
        return 0.0
    if not refs1:  # upstream divides by zero; two empty lists are the same list
        return 1.0
    similarity = sum(ratio(r1, r2) / 100.0 for r1, r2 in zip(refs1, refs2)) / len(refs1)
    if similarity < base:
        return 0.0
    return 1.0 if base >= 1.0 else (similarity - base) / (1.0 - base)


# --------------------------------------------------------------------------- images


def _image_blobs(doc: Any) -> list[bytes]:
    """The bytes of every image part related to the main document, in relationship order."""
    return [rel.target_part.blob for rel in doc.part.rels.values() if "image" in rel.reltype]


@METRICS.register("compare_docx_images")
def compare_docx_images(docx_file1: Optional[str], docx_file2: Optional[str], **options: Any) -> float:
    """docs.py: both documents relate the same number of images and, pairwise in relationship
    order, the decoded pixels (Pillow ``tobytes``) are identical, whatever the file format. An
    image Pillow cannot decode scores 0."""
    docs = _two_docs(docx_file1, docx_file2, "compare_docx_images")
    if docs is None:
        return 0.0
    image_mod = require("PIL.Image", "Pillow", "compare_docx_images")
    images1, images2 = _image_blobs(docs[0]), _image_blobs(docs[1])
    if len(images1) != len(images2):
        return 0.0
    for blob1, blob2 in zip(images1, images2):
        try:
            if image_mod.open(io.BytesIO(blob1)).tobytes() != image_mod.open(io.BytesIO(blob2)).tobytes():
                return 0.0
        except (OSError, ValueError):  # Pillow's UnidentifiedImageError is an OSError
            return 0.0
    return 1.0


# --------------------------------------------------------------------------- pdf.py

#: the relations ``check_pdf_pages`` accepts, by their ``operator`` names
_RELATIONS: dict[str, Callable[[Any, Any], bool]] = {
    name: getattr(operator, name) for name in ("lt", "le", "eq", "ne", "ge", "gt")}


@METRICS.register("check_pdf_pages")
def check_pdf_pages(pdf_file: Optional[str], rules: Mapping[str, Any], **options: Any) -> float:
    """pdf.py: ``relation(page_count, rules["ref_value"])`` with ``rules["relation"]`` one of
    lt/le/eq/ne/ge/gt (``operator`` names; another raises ConfigError). An unreadable PDF
    scores 0."""
    relation = rules.get("relation")
    if relation not in _RELATIONS:
        raise ConfigError(f"check_pdf_pages: rules.relation must be one of {sorted(_RELATIONS)}, "
                          f"got {relation!r}")
    if pdf_file is None:
        return 0.0
    pypdf = require("pypdf", "pypdf", "check_pdf_pages")
    try:
        pages = len(pypdf.PdfReader(pdf_file).pages)
    except Exception:  # pypdf raises many types on a broken file
        return 0.0
    return float(_RELATIONS[relation](pages, rules["ref_value"]))


# --------------------------------------------------------------------------- others.py (epub)


def epub_text_parts(path: str) -> Optional[list[tuple[str, list[str]]]]:
    """The parts of an EPUB that OSWorld compares, as ``(member name, lines)`` sorted by name:
    ``toc.ncx`` without lines containing "navPoint" (the generated ids), ``content.opf`` without
    lines containing "dc:identifier" (the random book id), and every ``*.html`` member with line
    breaks removed and re-serialised by lxml.html with pretty printing. Both metadata files sit at
    the package root (Calibre's layout). None when the file is not a zip or lacks either one
    (upstream crashes or, for a non-zip, compares nothing and scores 1)."""
    lxml_html = require("lxml.html", "lxml", "compare_epub")
    etree = require("lxml.etree", "lxml", "compare_epub")
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            toc = z.read("toc.ncx").decode("utf-8", errors="replace")
            opf = z.read("content.opf").decode("utf-8", errors="replace")
            parts = [("toc.ncx", [line for line in toc.splitlines() if "navPoint" not in line]),
                     ("content.opf", [line for line in opf.splitlines() if "dc:identifier" not in line])]
            for name in names:
                if not name.endswith(".html"):
                    continue
                text = re.sub(r"[\r\n]", "", z.read(name).decode("utf-8", errors="replace"))
                if not text.strip():
                    parts.append((name, []))
                    continue
                tree = lxml_html.fromstring(text.encode("utf-8"))
                parts.append((name, lxml_html.tostring(tree, pretty_print=True, encoding="unicode").splitlines()))
    except (OSError, KeyError, zipfile.BadZipFile, etree.LxmlError):
        return None
    return sorted(parts, key=lambda part: part[0])


@METRICS.register("compare_epub")
def compare_epub(result: Optional[str], expected: Optional[str], **options: Any) -> float:
    """others.py (OSWorld 1.0.2): the sum over the paired text parts (see :func:`epub_text_parts`;
    paired in name order, extra expected parts ignored, as upstream) of
    ``difflib.SequenceMatcher(a=result_lines, b=expected_lines).ratio()``, divided by the number
    of the result's parts: in [0, 1], a mean when both books have the same parts (an older OSWorld
    multiplied the ratios). A result that is not an EPUB with both metadata files scores 0."""
    if not result or not expected:
        return 0.0
    got, want = epub_text_parts(result), epub_text_parts(expected)
    if got is None or want is None or not got:
        return 0.0
    total = sum(difflib.SequenceMatcher(a=lines1, b=lines2).ratio() for (_, lines1), (_, lines2) in zip(got, want))
    return total / len(got)
