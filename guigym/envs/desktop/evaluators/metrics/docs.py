"""OSWorld document metrics beyond paragraph text: Writer tables and line spacing, PDF text.

Semantics follow OSWorld's ``desktop_env/evaluators/metrics/docs.py`` (compare_docx_tables,
compare_line_spacing) and ``chrome.py`` (compare_pdfs). python-docx and pypdf are optional
libraries: a missing one raises :class:`~guigym.envs.desktop.evaluators.base.MetricDependencyError`.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Optional, Union

from guigym.envs.desktop.evaluators.base import METRICS, MetricDependencyError, require
from guigym.envs.desktop.evaluators.textsim import ratio

__all__ = ["compare_docx_tables", "compare_line_spacing", "compare_pdfs", "pdf_text"]


def _open_docx(path: str, metric: str) -> Any:
    """A python-docx Document, or None when the file does not open (OSWorld scores that 0)."""
    docx = require("docx", "python-docx", metric)
    try:
        return docx.Document(path)
    except Exception:  # python-docx raises several types for a broken package
        return None


@METRICS.register("compare_docx_tables")
def compare_docx_tables(docx_file1: Optional[str], docx_file2: Optional[str], **options: Any) -> float:
    """docs.py: both documents have the same number of tables, each with the same rows x columns
    and the same stripped cell texts. A missing or unreadable file scores 0."""
    if not docx_file1 or not docx_file2:
        return 0.0
    doc1, doc2 = _open_docx(docx_file1, "compare_docx_tables"), _open_docx(docx_file2, "compare_docx_tables")
    if doc1 is None or doc2 is None:
        return 0.0
    tables1, tables2 = doc1.tables, doc2.tables
    if len(tables1) != len(tables2):
        return 0.0
    for t1, t2 in zip(tables1, tables2):
        if len(t1.rows) != len(t2.rows) or len(t1.columns) != len(t2.columns):
            return 0.0
        for i in range(len(t1.rows)):
            for j in range(len(t1.columns)):
                if t1.cell(i, j).text.strip() != t2.cell(i, j).text.strip():
                    return 0.0
    return 1.0


@METRICS.register("compare_line_spacing")
def compare_line_spacing(docx_file1: Optional[str], docx_file2: Optional[str], **options: Any) -> float:
    """docs.py: the texts match (``compare_docx_files`` with its defaults scores non-zero), the
    paragraph counts are equal and every paragraph's ``paragraph_format.line_spacing`` (python-docx:
    a float multiple, a Length, or None when inherited) is equal."""
    if not docx_file1 or not docx_file2:
        return 0.0
    if not compare_docx_files(docx_file1, docx_file2):
        return 0.0
    doc1, doc2 = _open_docx(docx_file1, "compare_line_spacing"), _open_docx(docx_file2, "compare_line_spacing")
    if doc1 is None or doc2 is None or len(doc1.paragraphs) != len(doc2.paragraphs):
        return 0.0
    for p1, p2 in zip(doc1.paragraphs, doc2.paragraphs):
        if p1.paragraph_format.line_spacing != p2.paragraph_format.line_spacing:
            return 0.0
    return 1.0


def pdf_text(path: str) -> str:
    """The text of every page, concatenated and stripped (pypdf's extraction; upstream uses
    PyMuPDF, whose whitespace may differ, but both sides of a comparison use the same one)."""
    pypdf = require("pypdf", "pypdf", "compare_pdfs")
    reader = pypdf.PdfReader(path)
    return "".join(page.extract_text() or "" for page in reader.pages).strip()


@METRICS.register("compare_pdfs")
def compare_pdfs(pdf1_path: Union[str, Sequence[str], None], pdf2_path: Union[str, Sequence[str], None],
                 **options: Any) -> float:
    """chrome.py ``compare_pdfs``: ``rapidfuzz.fuzz.ratio`` / 100 of the two PDFs' texts, in
    [0, 1]. Lists of paths are compared pairwise and the mean taken over ``len(pdf2_path)``; a
    pair that cannot be read adds 0 (as upstream)."""
    if isinstance(pdf2_path, (list, tuple)):
        firsts = list(pdf1_path) if isinstance(pdf1_path, (list, tuple)) else [pdf1_path]
        seconds = list(pdf2_path)
    else:
        firsts, seconds = [pdf1_path], [pdf2_path]
    if not seconds:
        return 0.0
    require("pypdf", "pypdf", "compare_pdfs")
    score = 0.0
    for a, b in zip(firsts, seconds):
        if not a or not b:
            continue
        try:
            score += ratio(pdf_text(a), pdf_text(b)) / 100.0
        except Exception:  # pypdf raises many types on a broken file; upstream logs and adds 0
            continue
    return score / len(seconds)


# --------------------------------------------------------------------------- compare_docx_files


def _docx_paragraphs(path: str) -> Optional[list[str]]:
    docx = require("docx", "python-docx", "compare_docx_files")
    try:
        return [p.text for p in docx.Document(path).paragraphs]
    except Exception:
        return None


@METRICS.register("compare_docx_files")
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
