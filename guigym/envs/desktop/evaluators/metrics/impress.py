"""OSWorld Impress metrics (``desktop_env/evaluators/metrics/slides.py``) and the LibreOffice
settings metrics that read ``registrymodifications.xcu``.

Presentations are read with python-pptx (optional: a missing one raises
:class:`~guigym.envs.desktop.evaluators.base.MetricDependencyError`) or, for raw XML checks, as a zip.
LibreOffice's user settings file ``registrymodifications.xcu`` looks like::

    <oor:items xmlns:oor="http://openoffice.org/2001/registry" ...>
      <item oor:path="/org.openoffice.Office.Impress/Misc/Start">
        <prop oor:name="EnablePresenterScreen" oor:op="fuse"><value>false</value></prop></item>
      ...

Every metric returns 1.0/0.0 (``evaluate_presentation_fill_to_rgb_distance`` a similarity in
[0, 1]); a missing, unreadable or malformed file scores 0 where OSWorld would raise. Deliberate
differences from upstream are stated in each docstring.
"""
from __future__ import annotations

import logging
import math
import posixpath
import re
import zipfile
from collections.abc import Mapping
from typing import Any, Optional
from xml.etree import ElementTree as ET

from guigym.envs.desktop.evaluators.base import METRICS, require

log = logging.getLogger(__name__)

__all__ = ["check_left_panel", "check_presenter_console_disable", "check_slide_orientation_Portrait",
           "evaluate_presentation_fill_to_rgb_distance", "check_transition", "check_page_number_colors",
           "check_auto_saving_time", "read_xcu_prop", "slide_part_names"]

_NS_OOR = "http://openoffice.org/2001/registry"
_NS_A = "http://schemas.openxmlformats.org/drawingml/2006/main"
_NS_P = "http://schemas.openxmlformats.org/presentationml/2006/main"
_NS_R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_NS_PKG_REL = "http://schemas.openxmlformats.org/package/2006/relationships"
_FILL_SOLID, _FILL_BACKGROUND = 1, 5  # MSO_FILL_TYPE: solid, "no own fill" (the master's shows)


# --------------------------------------------------------------------------- registrymodifications.xcu


def read_xcu_prop(path: Optional[str], item_path: str, prop: str) -> Optional[str]:
    """Text of ``<value>`` of ``<prop oor:name=prop>`` in the last ``<item oor:path=item_path>``
    of a ``registrymodifications.xcu`` holding it; None when the file is missing, not XML, or has
    no such setting (LibreOffice writes only settings that differ from the defaults)."""
    if not path:
        return None
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        log.info("cannot read %s: %s", path, e)
        return None
    found: Optional[str] = None
    for item in root.iter("item"):
        if item.get(f"{{{_NS_OOR}}}path") != item_path:
            continue
        for p in item.findall("prop"):  # direct children: props of nested nodes have other paths
            if p.get(f"{{{_NS_OOR}}}name") == prop:
                value = p.find("value")
                found = (value.text or "") if value is not None else None
                break
    return found


@METRICS.register("check_presenter_console_disable")
def check_presenter_console_disable(config_file_path: Optional[str], *args: Any, **options: Any) -> float:
    """slides.py: 1 when ``/org.openoffice.Office.Impress/Misc/Start`` ``EnablePresenterScreen``
    is ``false`` (any case) in ``registrymodifications.xcu``; absent (the default, enabled) or
    unreadable scores 0."""
    value = read_xcu_prop(config_file_path, "/org.openoffice.Office.Impress/Misc/Start", "EnablePresenterScreen")
    return float(value is not None and value.strip().lower() == "false")


@METRICS.register("check_auto_saving_time")
def check_auto_saving_time(config_file_path: Optional[str], rules: Mapping[str, Any], **options: Any) -> float:
    """slides.py: ``/org.openoffice.Office.Common/Save/Document`` ``AutoSaveTimeIntervall`` (minutes,
    LibreOffice's spelling) equals ``rules["minutes"]``; absent, non-integer or unreadable scores
    0 (OSWorld returns None for an unreadable file and raises on a non-integer)."""
    value = read_xcu_prop(config_file_path, "/org.openoffice.Office.Common/Save/Document", "AutoSaveTimeIntervall")
    try:
        return float(value is not None and int(value.strip()) == int(rules["minutes"]))
    except ValueError:
        return 0.0


# --------------------------------------------------------------------------- accessibility tree


def _local(name: str) -> str:
    return name.rsplit("}", 1)[-1]


def _attr_local(el: ET.Element, name: str) -> Optional[str]:
    """The first attribute whose local name is ``name``, whatever its namespace (OSWorld's
    trees used ``uri:deskat:...`` namespaces, today's use ``https://accessibility...``)."""
    for key, value in el.attrib.items():
        if _local(key) == name:
            return value
    return None


_COORD = re.compile(r"^\(\s*(-?\d+)\s*,\s*(-?\d+)\s*\)$")


def _coord(text: Optional[str]) -> Optional[tuple[int, int]]:
    m = _COORD.match(text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _at_parent_origin(el: ET.Element, parent: Optional[ET.Element]) -> bool:
    """``parentcoord == (0, 0)``: the old tree's attribute when present, else the node's
    ``screencoord`` equal to its parent's (today's trees have screen coordinates only)."""
    parentcoord = _attr_local(el, "parentcoord")
    if parentcoord is not None:
        return _coord(parentcoord) == (0, 0)
    own = _coord(_attr_local(el, "screencoord"))
    return own is not None and parent is not None and own == _coord(_attr_local(parent, "screencoord"))


@METRICS.register("check_left_panel")
def check_left_panel(accessibility_tree: Optional[str], *args: Any, **options: Any) -> float:
    """slides.py: 1 when Impress's slide pane is shown: a ``split-pane`` below a ``panel`` below
    a ``root-pane`` sits at its parent's origin and is visible.

    OSWorld reads ``cp:parentcoord == "(0, 0)"`` and a non-empty ``st:visible`` in its old
    ``uri:deskat:`` namespaces; attributes are matched here by local name in any namespace, and a
    tree without ``parentcoord`` (OSWorld's current server, ours) compares the node's
    ``screencoord`` with its parent's. ``visible="false"`` counts as not visible. An unparseable
    tree scores 0.
    """
    if not accessibility_tree:
        return 0.0
    try:
        root = ET.fromstring(accessibility_tree)
    except ET.ParseError:
        return 0.0
    parents = {child: parent for parent in root.iter() for child in parent}
    for root_pane in (e for e in root.iter() if _local(e.tag) == "root-pane"):
        for panel in (e for e in root_pane.iter() if _local(e.tag) == "panel"):
            for pane in (e for e in panel.iter() if _local(e.tag) == "split-pane"):
                visible = _attr_local(pane, "visible")
                if visible and visible.lower() != "false" and _at_parent_origin(pane, parents.get(pane)):
                    return 1.0
    return 0.0


# --------------------------------------------------------------------------- presentations


def _open_pptx(path: Optional[str], metric: str) -> Any:
    """python-pptx Presentation of ``path``, None when it is missing or not a presentation."""
    if not path:
        return None
    pptx = require("pptx", "python-pptx", metric)
    try:
        return pptx.Presentation(path)
    except Exception as e:  # python-pptx raises several types for a file that is not a pptx
        log.info("%s: cannot open %s: %s", metric, path, e)
        return None


@METRICS.register("check_slide_orientation_Portrait")
def check_slide_orientation_Portrait(pptx_path: Optional[str], *args: Any, **options: Any) -> float:
    """slides.py: the slide width is smaller than the slide height."""
    prs = _open_pptx(pptx_path, "check_slide_orientation_Portrait")
    if prs is None or prs.slide_width is None or prs.slide_height is None:
        return 0.0
    return float(prs.slide_width < prs.slide_height)


def _solid_rgb(fill: Any) -> Optional[tuple[int, int, int]]:
    """The RGB of a solid fill, None for other fills and theme colours without an RGB."""
    try:
        if fill.type != _FILL_SOLID:
            return None
        rgb = fill.fore_color.rgb
    except (AttributeError, TypeError, ValueError):
        return None
    return (rgb[0], rgb[1], rgb[2]) if rgb is not None else None


@METRICS.register("evaluate_presentation_fill_to_rgb_distance")
def evaluate_presentation_fill_to_rgb_distance(pptx_file: Optional[str], rules: Mapping[str, Any],
                                               **options: Any) -> float:
    """slides.py: ``1 - mean over slides of the distance`` between each slide's background and
    ``rules["rgb"]`` ([r, g, b]); the distance is the Euclidean RGB distance over
    ``sqrt(3 * 255^2)``. A slide's background is its own solid fill, else (no own fill) its
    master's solid fill; any other background (gradient, picture, theme colour) is at distance
    1. A presentation without slides scores 0 (OSWorld divides by zero)."""
    prs = _open_pptx(pptx_file, "evaluate_presentation_fill_to_rgb_distance")
    if prs is None or len(prs.slides) == 0:
        return 0.0
    want = [int(v) for v in rules["rgb"]]
    scale = math.sqrt(3 * 255 ** 2)
    total = 0.0
    for slide in prs.slides:
        fill = slide.background.fill
        try:
            fill_type = fill.type
        except (AttributeError, TypeError, ValueError):
            fill_type = None
        if fill_type == _FILL_SOLID:
            rgb = _solid_rgb(fill)
        elif fill_type == _FILL_BACKGROUND:
            rgb = _solid_rgb(slide.slide_layout.slide_master.background.fill)
        else:
            rgb = None
        total += 1.0 if rgb is None else math.dist(rgb, want) / scale
    return 1.0 - total / len(prs.slides)


def slide_part_names(z: zipfile.ZipFile) -> list[str]:
    """Zip member names of the slides in presentation order (``ppt/presentation.xml``'s
    ``sldIdLst`` through its relationships). A package without them falls back to
    ``ppt/slides/slide<N>.xml`` by number (OSWorld's naming, the same for LibreOffice output)."""
    try:
        pres = ET.fromstring(z.read("ppt/presentation.xml"))
        rels = ET.fromstring(z.read("ppt/_rels/presentation.xml.rels"))
    except (KeyError, ET.ParseError):
        numbered = [n for n in z.namelist() if re.fullmatch(r"ppt/slides/slide\d+\.xml", n)]
        return sorted(numbered, key=lambda n: int(re.findall(r"\d+", n)[-1]))
    targets = {r.get("Id"): r.get("Target", "") for r in rels.iter(f"{{{_NS_PKG_REL}}}Relationship")}
    names = []
    for sld in pres.iter(f"{{{_NS_P}}}sldId"):
        target = targets.get(sld.get(f"{{{_NS_R}}}id"))
        if target:
            names.append(target.lstrip("/") if target.startswith("/") else posixpath.normpath(f"ppt/{target}"))
    return names


def _slide_xml(path: Optional[str], index: int) -> Optional[ET.Element]:
    """The parsed XML of slide ``index`` (0-based, presentation order); None when the file is
    not a readable package or has no such slide."""
    if not path:
        return None
    try:
        with zipfile.ZipFile(path) as z:
            names = slide_part_names(z)
            if not 0 <= index < len(names):
                return None
            return ET.fromstring(z.read(names[index]))
    except (OSError, zipfile.BadZipFile, KeyError, ET.ParseError):
        return None


@METRICS.register("check_transition")
def check_transition(pptx_file: Optional[str], rules: Mapping[str, Any], **options: Any) -> float:
    """slides.py: slide ``rules["slide_idx"]`` (0-based) has a ``<p:transition>`` whose subtree
    holds ``<p:{rules["transition_type"]}>`` (e.g. ``dissolve``); the first transition element
    counts, also inside ``mc:AlternateContent`` as LibreOffice writes it. The slide is found in
    presentation order (OSWorld opens ``slide<idx+1>.xml``, the same for LibreOffice output)."""
    root = _slide_xml(pptx_file, int(rules["slide_idx"]))
    if root is None:
        return 0.0
    transition = root.find(f".//{{{_NS_P}}}transition")
    if transition is None:
        return 0.0
    return float(transition.find(f".//{{{_NS_P}}}{rules['transition_type']}") is not None)


def _rgb_hex(text: Optional[str]) -> Optional[tuple[int, int, int]]:
    m = re.fullmatch(r"#?([0-9A-Fa-f]{2})([0-9A-Fa-f]{2})([0-9A-Fa-f]{2})", (text or "").strip())
    return (int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16)) if m else None


#: colour name -> test on (r, g, b), OSWorld's thresholds (50)
_COLOR_TESTS = {
    "red": lambda r, g, b: r > g + 50 and r > b + 50,
    "green": lambda r, g, b: g > r + 50 and g > b + 50,
    "blue": lambda r, g, b: b > g + 50 and b > r + 50,
    "black": lambda r, g, b: r < 50 and g < 50 and b < 50,
}


@METRICS.register("check_page_number_colors")
def check_page_number_colors(pptx_file: Optional[str], rules: Mapping[str, Any], **options: Any) -> float:
    """slides.py: the slide-number colour of ``ppt/slideMasters/slideMaster1.xml`` is
    ``rules["color"]`` (``red``, ``green``, ``blue``, ``black``; any other name only needs a
    colour to exist).

    As OSWorld, the colour is the ``val`` of the second-to-last ``<a:srgbClr>`` below an
    ``<a:solidFill>`` of that master (where LibreOffice's export puts the slide-number field's
    colour). OSWorld reads the hex digits one place off (``val[1:3]`` as red, ...), which only
    works by luck for pure colours; the digits are read at their places here. Fewer than two such
    colours, a missing master or an unreadable file score 0 (OSWorld raises).
    """
    if not pptx_file:
        return 0.0
    try:
        with zipfile.ZipFile(pptx_file) as z:
            root = ET.fromstring(z.read("ppt/slideMasters/slideMaster1.xml"))
    except (OSError, zipfile.BadZipFile, KeyError, ET.ParseError):
        return 0.0
    colors = [c for fill in root.iter(f"{{{_NS_A}}}solidFill") for c in fill.iter(f"{{{_NS_A}}}srgbClr")]
    if len(colors) < 2:
        return 0.0
    rgb = _rgb_hex(colors[-2].get("val"))
    if rgb is None:
        return 0.0
    test = _COLOR_TESTS.get(str(rules["color"]))
    return float(test is None or test(*rgb))
