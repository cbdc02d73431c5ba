"""OSWorld's ``compare_pptx_files`` (``desktop_env/evaluators/metrics/slides.py``) on python-pptx.

A result presentation scores 1.0 only when every examined property matches the gold one, slide by
slide and shape by shape; the ``examine_*`` options switch checks off (or, for the task-specific
position checks, on). python-pptx is optional: a missing one raises
:class:`~guigym.envs.desktop.evaluators.base.MetricDependencyError`.
"""
from __future__ import annotations

from typing import Any, Optional
from xml.etree import ElementTree

from guigym.envs.desktop.evaluators.base import METRICS, require

__all__ = ["compare_pptx_files", "PPTX_OPTION_DEFAULTS"]

#: OSWorld's option names and defaults.
PPTX_OPTION_DEFAULTS: dict[str, Any] = {
    "examine_number_of_slides": True, "examine_shape": True, "examine_text": True, "examine_indent": True,
    "examine_font_name": True, "examine_font_size": True, "examine_font_bold": True,
    "examine_font_italic": True, "examine_color_rgb": True, "examine_font_underline": True,
    "examine_strike_through": True, "examine_alignment": True, "examine_bullets": True,
    "examine_background_color": True, "examine_note": True,
    "examine_title_bottom_position": False, "examine_table_bottom_position": False,
    "examine_right_position": False, "examine_top_position": False,
    "examine_shape_for_shift_size": False, "examine_image_size": False, "examine_modify_height": False,
    "approximately_tolerance": 0.005,
}

_NS = {"a": "http://schemas.openxmlformats.org/drawingml/2006/main"}
_FILL_SOLID, _FILL_BACKGROUND = 1, 5  # MSO_FILL_TYPE values (5: no own fill, use the master's)
_PICTURE, _FREEFORM, _TABLE = 13, 5, 19  # MSO_SHAPE_TYPE values


class _Mismatch(Exception):
    """Raised inside the comparison at the first difference; scores 0."""


def _check(ok: bool) -> None:
    if not ok:
        raise _Mismatch


def _approx(v1: Optional[int], v2: Optional[int], tol: float) -> bool:
    """Relative difference within ``tol`` (OSWorld's ``is_approximately_equal``); None (no own
    geometry) equals only None."""
    if v1 == v2:
        return True
    if v1 is None or v2 is None or v1 == 0 or v2 == 0:
        return False
    return abs(v1 - v2) / max(abs(v1), abs(v2)) <= tol


def _geometry_equal(s1: Any, s2: Any, tol: float) -> bool:
    return all(_approx(getattr(s1, k), getattr(s2, k), tol) for k in ("left", "top", "width", "height"))


def _has_text(shape: Any) -> bool:
    """python-pptx's autoshapes and placeholders have ``.text``; pictures, tables, groups do not."""
    return hasattr(shape, "text")


def _rgb(color: Any) -> tuple[bool, Any]:
    """(has an explicit RGB, the RGB): OSWorld compares colours only when both have one."""
    try:
        return True, color.rgb
    except AttributeError:
        return False, None


def _background_rgb(slide: Any) -> Any:
    fill = slide.background.fill
    if fill.type == _FILL_SOLID:
        return fill.fore_color.rgb
    if fill.type == _FILL_BACKGROUND:
        master_fill = slide.slide_layout.slide_master.background.fill
        return master_fill.fore_color.rgb if master_fill.type == _FILL_SOLID else None
    return None


def _notes(slide: Any) -> str:
    frame = slide.notes_slide.notes_text_frame if slide.has_notes_slide else None
    return frame.text.strip() if frame is not None else ""


def _text_shapes(shapes: Any) -> list[Any]:
    """Shapes with a text frame, groups walked recursively, in document order."""
    found = []
    for shape in shapes:
        if hasattr(shape, "text") and hasattr(shape, "text_frame"):
            found.append(shape)
        if hasattr(shape, "shapes"):
            found.extend(_text_shapes(shape.shapes))
    return found


def _bullets(slide: Any) -> list[tuple[str, str, str]]:
    """(level, bullet char, text) of every non-empty paragraph of the slide's XML; a missing
    level counts as "0" (OSWorld ignores bullet colours)."""
    root = ElementTree.fromstring(slide.part.blob)
    items = []
    for p in root.iter(f"{{{_NS['a']}}}p"):
        text = "".join(t.text or "" for t in p.iter(f"{{{_NS['a']}}}t"))
        if not text.strip():
            continue
        ppr = p.find("a:pPr", _NS)
        if ppr is None:
            items.append(("No Level", "No Bullet", text))
            continue
        char = ppr.find("a:buChar", _NS)
        items.append((ppr.get("lvl") or "0", char.get("char") if char is not None else "No Bullet", text))
    return items


def _flag_equal(v1: Optional[bool], v2: Optional[bool]) -> bool:
    """Bold/italic: None (inherited) and False both mean off."""
    return v1 == v2 or (not v1 and not v2)


def _underline_equal(u1: Any, u2: Any) -> bool:
    """OSWorld: two set values must be equal, and None vs True differs; None vs False passes."""
    if u1 == u2:
        return True
    if u1 is not None and u2 is not None:
        return False
    return not ((u1 is None and u2 is True) or (u1 is True and u2 is None))


def _compare_table(t1: Any, t2: Any, opt: dict[str, Any]) -> None:
    _check(len(t1.rows) == len(t2.rows) and len(t1.columns) == len(t2.columns))
    for r in range(len(t1.rows)):
        for c in range(len(t1.columns)):
            paras1, paras2 = t1.cell(r, c).text_frame.paragraphs, t2.cell(r, c).text_frame.paragraphs
            _check(len(paras1) == len(paras2))
            for p1, p2 in zip(paras1, paras2):
                _check(len(p1.runs) == len(p2.runs))
                for run1, run2 in zip(p1.runs, p2.runs):
                    (has1, rgb1), (has2, rgb2) = _rgb(run1.font.color), _rgb(run2.font.color)
                    if has1 and has2 and opt["examine_color_rgb"]:
                        _check(rgb1 == rgb2)
                    # upstream checks these in tables whatever the examine_* flags say
                    _check(_flag_equal(run1.font.bold, run2.font.bold))
                    _check(_flag_equal(run1.font.italic, run2.font.italic))
                    _check(_underline_equal(run1.font.underline, run2.font.underline))


def _alignment(paragraph: Any) -> Any:
    from pptx.enum.text import PP_ALIGN

    return PP_ALIGN.LEFT if paragraph.alignment is None else paragraph.alignment


def _compare_runs(run1: Any, run2: Any, opt: dict[str, Any]) -> None:
    f1, f2 = run1.font, run2.font
    if opt["examine_font_name"]:
        _check(f1.name == f2.name)
    if opt["examine_font_size"]:
        _check(f1.size == f2.size)
    if opt["examine_font_bold"]:
        _check(_flag_equal(f1.bold, f2.bold))
    if opt["examine_font_italic"]:
        _check(_flag_equal(f1.italic, f2.italic))
    (has1, rgb1), (has2, rgb2) = _rgb(f1.color), _rgb(f2.color)
    if has1 and has2 and opt["examine_color_rgb"]:
        _check(rgb1 == rgb2)
    if opt["examine_font_underline"]:
        _check(_underline_equal(f1.underline, f2.underline))
    if opt["examine_strike_through"]:
        _check(f1._element.attrib.get("strike", "noStrike") == f2._element.attrib.get("strike", "noStrike"))


def _compare_text_shape(s1: Any, s2: Any, opt: dict[str, Any], bullets: Any) -> None:
    if opt["examine_text"]:
        _check(s1.text.strip() == s2.text.strip())
    paras1, paras2 = s1.text_frame.paragraphs, s2.text_frame.paragraphs
    _check(len(paras1) == len(paras2))
    for p1, p2 in zip(paras1, paras2):
        if opt["examine_alignment"]:
            _check(_alignment(p1) == _alignment(p2))
        if opt["examine_text"]:
            _check(p1.text == p2.text)
        if opt["examine_indent"]:
            _check(p1.level == p2.level)
        _check(len(p1.runs) == len(p2.runs))
        for run1, run2 in zip(p1.runs, p2.runs):
            _compare_runs(run1, run2, opt)
            if opt["examine_bullets"]:
                _check(bullets())


def _compare_position_options(s1: Any, s2: Any, slide_no: int, opt: dict[str, Any]) -> None:
    """OSWorld's task-specific position checks (off by default), with their hard-coded texts,
    slide numbers and EMU limits."""
    tol = opt["approximately_tolerance"]
    same_geometry = _geometry_equal(s1, s2, tol)
    if opt["examine_title_bottom_position"]:
        if _has_text(s1) and _has_text(s2) and s1.text == s2.text:
            if s1.text == "Product Comparison":
                _check(not (s1.top <= s2.top or s1.top < 3600000))
        else:
            _check(same_geometry)
    if opt["examine_table_bottom_position"]:
        if slide_no == 3 and s1.shape_type == _TABLE and s2.shape_type == _TABLE:
            _check(not (s1.top <= s2.top or s1.top < 3600000))
        else:
            _check(same_geometry)
    if opt["examine_right_position"] and slide_no == 2 and not _has_text(s1) and not _has_text(s2):
        _check(not (s1.left <= s2.left or s1.left < 4320000))
    if opt["examine_top_position"] and slide_no == 2 and s1.shape_type == _PICTURE and s2.shape_type == _PICTURE:
        _check(not (s1.top >= s2.top or s1.top > 1980000))
    if opt["examine_shape_for_shift_size"] and not same_geometry:
        _check(_has_text(s1) and _has_text(s2) and s1.text == s2.text
               and s1.text == "Elaborate on what you want to discuss.")
    if opt["examine_shape"]:
        _check(same_geometry)
    if opt["examine_image_size"]:
        if s1.shape_type == _PICTURE and s2.shape_type == _PICTURE:
            _check(_approx(s1.width, s2.width, tol) and _approx(s1.height, s2.height, tol))
        else:
            _check(same_geometry)
    if opt["examine_modify_height"]:
        if (not _has_text(s1) and not _has_text(s2)) or (s1.shape_type == _FREEFORM and s2.shape_type == _FREEFORM):
            _check(_approx(s1.height, s2.height, tol))
        else:
            _check(same_geometry)


def _compare_slides(slide1: Any, slide2: Any, slide_no: int, opt: dict[str, Any]) -> None:
    if opt["examine_background_color"]:
        _check(_background_rgb(slide1) == _background_rgb(slide2))
    if opt["examine_note"]:
        _check(_notes(slide1) == _notes(slide2))
    _check(len(slide1.shapes) == len(slide2.shapes))
    bullets_cache: dict[str, bool] = {}

    def bullets_equal() -> bool:  # the whole slide's bullets, computed once
        if "ok" not in bullets_cache:
            try:
                bullets_cache["ok"] = _bullets(slide1) == _bullets(slide2)
            except ElementTree.ParseError:  # upstream skips the check when extraction fails
                bullets_cache["ok"] = True
        return bullets_cache["ok"]

    for s1, s2 in zip(slide1.shapes, slide2.shapes):
        _compare_position_options(s1, s2, slide_no, opt)
        if s1.shape_type == _TABLE:
            _check(s2.shape_type == _TABLE)
            _compare_table(s1.table, s2.table, opt)
        if _has_text(s1) and _has_text(s2):
            _compare_text_shape(s1, s2, opt, bullets_equal)

    text1, text2 = _text_shapes(slide1.shapes), _text_shapes(slide2.shapes)
    _check(len(text1) == len(text2))
    if opt["examine_alignment"]:
        for t1, t2 in zip(text1, text2):
            if opt["examine_text"]:
                _check(t1.text.strip() == t2.text.strip())
            _check(len(t1.text_frame.paragraphs) == len(t2.text_frame.paragraphs))
            for p1, p2 in zip(t1.text_frame.paragraphs, t2.text_frame.paragraphs):
                _check(_alignment(p1) == _alignment(p2))


@METRICS.register("compare_pptx_files")
def compare_pptx_files(file1_path: Optional[str], file2_path: Optional[str], **options: Any) -> float:
    """slides.py ``compare_pptx_files``: 1.0 when the presentations match on every examined
    property, else 0.0.

    Checked by default (each switched off by its ``examine_*`` option set to false): number of
    slides; per slide the background colour (own solid fill, else the master's), the notes text,
    the number of shapes; per shape the geometry (``examine_shape``: left/top/width/height within
    ``approximately_tolerance``, relative, default 0.005), tables (dimensions, paragraph and run
    counts, run colour, bold, italic, underline), text (``examine_text``), paragraph count,
    alignment (None = left), level (``examine_indent``), run count, and per run font name, size,
    bold, italic, RGB colour (when both have one), underline, strike-through, and the slide's
    bullets (level, character, text); finally the text shapes inside groups (count, and with
    ``examine_alignment`` their texts and alignments). Off by default, OSWorld's task-specific
    checks: ``examine_title_bottom_position``, ``examine_table_bottom_position``,
    ``examine_right_position``, ``examine_top_position``, ``examine_shape_for_shift_size``,
    ``examine_image_size``, ``examine_modify_height``. Unknown options are ignored (OSWorld's
    ``enable_debug`` and the like). A result that does not open scores 0.
    """
    if not file1_path or not file2_path:
        return 0.0
    pptx = require("pptx", "python-pptx", "compare_pptx_files")
    opt = {**PPTX_OPTION_DEFAULTS, **{k: v for k, v in options.items() if k in PPTX_OPTION_DEFAULTS}}
    try:
        prs1 = pptx.Presentation(file1_path)
    except Exception:  # python-pptx raises several types for a file that is not a presentation
        return 0.0
    prs2 = pptx.Presentation(file2_path)
    if opt["examine_number_of_slides"] and len(prs1.slides) != len(prs2.slides):
        return 0.0
    try:
        for number, (slide1, slide2) in enumerate(zip(prs1.slides, prs2.slides), start=1):
            _compare_slides(slide1, slide2, number, opt)
    except _Mismatch:
        return 0.0
    return 1.0
