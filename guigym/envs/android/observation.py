"""Android observations: uiautomator XML -> node tree, MobileRL simplified XML, ui_elements, set-of-marks.

Input is the text of ``uiautomator dump`` (``<hierarchy rotation=..><node index text resource-id
class package content-desc checkable checked clickable enabled focusable focused scrollable
long-clickable password selected bounds="[x1,y1][x2,y2]">``). Old dumps (API <= 17) have no
``resource-id``; any missing attribute reads as ``""`` / ``false``. Coordinates are screen pixels.

The simplified XML follows MobileRL (Xu et al. 2025, "MobileRL", appendix C) as pinned down by
guigym issue 13 item 3:

(a) off-screen removal: a node stays only if its bounds are valid (x1>=0, y1>=0, x1<x2, y1<y2), lie
    within the screen and within the bounds of its nearest kept ancestor (nodes removed here do not
    serve as containers; their children are tested against the nearest kept ancestor instead);
(b) functional filter: a node stays if any of checkable, checked, clickable, focusable, scrollable,
    long-clickable, password, selected is true or text / content-desc is non-empty; children of a
    removed node move up to its parent;
(c) attributes: index, resource-id and package dropped; class shortened to its last dotted part;
    only true booleans kept, as actions (``click``, ``scroll``, ``long-click``, ``check``;
    ``focusable`` only when there is no other action) followed by statuses (``checked`` /
    ``unchecked`` for checkable nodes, ``password``, ``selected``); text and content-desc merged.

One line per kept node, ``Class;actions statuses;text;[x1,y1][x2,y2]``, indented by depth in the
kept tree. Choices the paper leaves open, made here (and tested): the indent is two spaces per
level; actions and statuses are separated by single spaces; the merged text is ``text`` then
``content-desc`` joined by one space, written once when they are equal; line breaks inside the text
become spaces (a line per node must stay one line); ``checked`` is shown for any node whose checked
flag is true. The "v4" variant writes bounds in relative 0-999 units (``round(v * 1000 / size)``,
capped at 999, the same rounding as guigym's AndroidLab dialect) after a header line naming the
scale and the screen size.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence, Union

import numpy as np
from lxml import etree

from guigym.core.errors import ConfigError, EnvInfraError

Bounds = tuple[int, int, int, int]
"""(x1, y1, x2, y2) in screen pixels, x2/y2 exclusive as uiautomator writes them."""

#: the boolean attributes of a uiautomator node, in dump order
BOOL_ATTRS = ("checkable", "checked", "clickable", "enabled", "focusable", "focused", "scrollable",
              "long-clickable", "password", "selected")
#: attributes that make a node "functional" (MobileRL C.2)
FUNCTIONAL_ATTRS = ("checkable", "checked", "clickable", "focusable", "scrollable", "long-clickable",
                    "password", "selected")
#: boolean attribute -> action word, in rendering order (MobileRL C.3 / issue 13)
ACTION_WORDS = (("clickable", "click"), ("scrollable", "scroll"), ("long-clickable", "long-click"),
                ("checkable", "check"))
RELATIVE_SCALE = 1000  # relative coordinates are 0..999
INDENT = "  "

_BOUNDS_RE = re.compile(r"^\s*\[(-?\d+),(-?\d+)\]\[(-?\d+),(-?\d+)\]\s*$")


@dataclass
class UINode:
    """One ``<node>`` of a dump. ``bounds`` is None when the attribute is missing or malformed."""

    cls: str = ""
    text: str = ""
    content_desc: str = ""
    resource_id: str = ""
    package: str = ""
    bounds: Optional[Bounds] = None
    flags: dict[str, bool] = field(default_factory=dict)
    children: list["UINode"] = field(default_factory=list)

    def flag(self, name: str) -> bool:
        """Value of a boolean attribute (``"long-clickable"`` spelling); missing -> False."""
        return self.flags.get(name, False)

    @property
    def short_class(self) -> str:
        return self.cls.rsplit(".", 1)[-1]

    @property
    def label(self) -> str:
        """text and content-desc merged (the MobileRL text field)."""
        return merge_text(self.text, self.content_desc)

    def iter(self) -> Iterator["UINode"]:
        """This node and its descendants in document order (pre-order)."""
        yield self
        for child in self.children:
            yield from child.iter()


@dataclass
class UITree:
    """A parsed dump: its top-level nodes (children of ``<hierarchy>``) and the rotation."""

    roots: list[UINode]
    rotation: int = 0

    def iter(self) -> Iterator[UINode]:
        for root in self.roots:
            yield from root.iter()

    def screen_size(self) -> tuple[int, int]:
        """(width, height) guessed as the largest x2 / y2 of the top-level nodes.

        uiautomator does not record the display size; the top-level window spans it in practice.
        Pass the real size to :func:`simplify` when known (``wm size``).
        """
        boxes = [r.bounds for r in self.roots if r.bounds is not None]
        if not boxes:
            raise ConfigError("UI tree: no top-level node has bounds; pass screen=(width, height)")
        return max(b[2] for b in boxes), max(b[3] for b in boxes)


def parse_bounds(value: str) -> Optional[Bounds]:
    """``"[x1,y1][x2,y2]"`` -> (x1, y1, x2, y2), or None when malformed."""
    m = _BOUNDS_RE.match(value or "")
    if not m:
        return None
    x1, y1, x2, y2 = (int(g) for g in m.groups())
    return x1, y1, x2, y2


def format_bounds(b: Bounds) -> str:
    return f"[{b[0]},{b[1]}][{b[2]},{b[3]}]"


def merge_text(text: str, desc: str) -> str:
    """MobileRL's merged text: ``text`` then ``content-desc``, one copy when equal, one line."""
    parts = [p for p in (text, desc) if p]
    if len(parts) == 2 and parts[0] == parts[1]:
        parts = parts[:1]
    return " ".join(" ".join(parts).splitlines())


def _node_from(el: etree._Element) -> UINode:
    a = el.attrib
    return UINode(
        cls=a.get("class", ""), text=a.get("text", ""), content_desc=a.get("content-desc", ""),
        resource_id=a.get("resource-id", ""), package=a.get("package", ""),
        bounds=parse_bounds(a.get("bounds", "")),
        flags={k: a.get(k, "false").strip().lower() == "true" for k in BOOL_ATTRS},
        children=[_node_from(c) for c in el if isinstance(c.tag, str) and c.tag == "node"],
    )


def parse_ui_xml(xml: Union[str, bytes]) -> UITree:
    """Parse a ``uiautomator dump``.

    lxml's recovering parser tolerates the small defects real dumps have (truncated tails, stray
    bytes); an input with no ``<hierarchy>`` or ``<node>`` at all is a failed dump and raises
    :class:`EnvInfraError` (the device's fault, not the agent's).
    """
    data = xml.encode("utf-8") if isinstance(xml, str) else bytes(xml)
    if not data.strip():
        raise EnvInfraError("uiautomator dump is empty")
    parser = etree.XMLParser(recover=True, huge_tree=True, resolve_entities=False, no_network=True)
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        raise EnvInfraError(f"uiautomator dump is not XML: {exc}") from exc
    if root is None:
        raise EnvInfraError("uiautomator dump is not XML")
    if root.tag == "hierarchy":
        nodes = [c for c in root if isinstance(c.tag, str) and c.tag == "node"]
        rot = root.get("rotation", "0")
        rotation = int(rot) if rot.strip().lstrip("-").isdigit() else 0
    elif root.tag == "node":
        nodes, rotation = [root], 0
    else:
        raise EnvInfraError(f"uiautomator dump: root element is <{root.tag}>, expected <hierarchy>")
    return UITree(roots=[_node_from(n) for n in nodes], rotation=rotation)


# ---- simplification ------------------------------------------------------------------------------
def _valid(b: Optional[Bounds]) -> bool:
    return b is not None and b[0] >= 0 and b[1] >= 0 and b[0] < b[2] and b[1] < b[3]


def _inside(inner: Bounds, outer: Bounds) -> bool:
    return outer[0] <= inner[0] and outer[1] <= inner[1] and inner[2] <= outer[2] and inner[3] <= outer[3]


def is_functional(node: UINode) -> bool:
    """MobileRL C.2: any functional boolean true, or non-empty text / content-desc."""
    return any(node.flag(k) for k in FUNCTIONAL_ATTRS) or bool(node.text) or bool(node.content_desc)


def _drop_offscreen(nodes: Sequence[UINode], anchor: Bounds) -> list[UINode]:
    """Step (a): copies of the kept nodes; removed nodes' kept descendants take their place."""
    out: list[UINode] = []
    for n in nodes:
        if _valid(n.bounds) and _inside(n.bounds, anchor):  # type: ignore[arg-type]
            kept = UINode(n.cls, n.text, n.content_desc, n.resource_id, n.package, n.bounds, dict(n.flags))
            kept.children = _drop_offscreen(n.children, n.bounds)  # type: ignore[arg-type]
            out.append(kept)
        else:
            out.extend(_drop_offscreen(n.children, anchor))
    return out


def _drop_redundant(nodes: Sequence[UINode]) -> list[UINode]:
    """Step (b): keep functional nodes; the children of a removed node move up to its parent."""
    out: list[UINode] = []
    for n in nodes:
        children = _drop_redundant(n.children)
        if is_functional(n):
            n.children = children
            out.append(n)
        else:
            out.extend(children)
    return out


def render_node(node: UINode, bounds_text: Optional[str] = None) -> str:
    """Step (c) for one node: ``Class;actions statuses;text;[x1,y1][x2,y2]``."""
    actions = [word for attr, word in ACTION_WORDS if node.flag(attr)]
    if not actions and node.flag("focusable"):
        actions.append("focusable")
    statuses = []
    if node.flag("checked"):
        statuses.append("checked")
    elif node.flag("checkable"):
        statuses.append("unchecked")
    if node.flag("password"):
        statuses.append("password")
    if node.flag("selected"):
        statuses.append("selected")
    if bounds_text is None:
        bounds_text = format_bounds(node.bounds) if node.bounds else ""
    return f"{node.short_class};{' '.join(actions + statuses)};{node.label};{bounds_text}"


def to_relative(b: Bounds, screen: tuple[int, int]) -> Bounds:
    """Pixel bounds -> 0..999 relative units: ``min(999, round(v * 1000 / size))`` per axis."""
    w, h = screen
    def r(v: int, size: int) -> int:
        return max(0, min(RELATIVE_SCALE - 1, round(v * RELATIVE_SCALE / size)))
    return r(b[0], w), r(b[1], h), r(b[2], w), r(b[3], h)


def simplified_nodes(tree: UITree, screen: Optional[tuple[int, int]] = None,
                     keep_offscreen: bool = False) -> list[UINode]:
    """Steps (a) and (b): the kept forest (copies; ``tree`` is not changed).

    ``keep_offscreen`` is MobileRL's ``remain_nodes=True`` (skip step a).
    """
    if keep_offscreen:
        import copy
        forest = copy.deepcopy(tree.roots)
    else:
        w, h = screen if screen is not None else tree.screen_size()
        forest = _drop_offscreen(tree.roots, (0, 0, w, h))
    return _drop_redundant(forest)


def simplify(tree: Union[UITree, str, bytes], screen: Optional[tuple[int, int]] = None, *,
             relative: bool = False, keep_offscreen: bool = False, indent: str = INDENT) -> str:
    """MobileRL simplified XML of a dump (see module docstring); ``relative=True`` is the v4 variant.

    Args:
        tree: a parsed tree or the dump text.
        screen: (width, height) in pixels; default: :meth:`UITree.screen_size`.
        relative: write bounds in 0..999 units, after a header line naming the scale.
        keep_offscreen: skip the off-screen removal (MobileRL ``remain_nodes=True``).
    Returns: one line per kept node, ``\\n``-joined, no trailing newline.
    """
    if not isinstance(tree, UITree):
        tree = parse_ui_xml(tree)
    size = screen if screen is not None else tree.screen_size()
    if size[0] <= 0 or size[1] <= 0:
        raise ConfigError(f"simplify: screen must be positive (width, height), got {size!r}")
    lines: list[str] = []
    if relative:
        lines.append(f"# bounds: relative 0-{RELATIVE_SCALE - 1} (x/width, y/height) "
                     f"of a {size[0]}x{size[1]} screen")

    def walk(nodes: list[UINode], depth: int) -> None:
        for n in nodes:
            bt = None
            if relative and n.bounds is not None:
                bt = format_bounds(to_relative(n.bounds, size))
            lines.append(indent * depth + render_node(n, bt))
            walk(n.children, depth + 1)

    walk(simplified_nodes(tree, size, keep_offscreen), 0)
    return "\n".join(lines)


# ---- AndroidWorld-style ui_elements --------------------------------------------------------------
@dataclass(frozen=True)
class UIElement:
    """An indexable element, shaped like AndroidWorld's ``representation_utils.UIElement``.

    ``bbox`` is (x1, y1, x2, y2) pixels. ``is_editable`` comes from the class name (``EditText`` or
    a subclass name ending in it), as uiautomator dumps carry no editable flag.
    """

    index: int
    text: str
    content_description: str
    class_name: str
    bbox: Bounds
    resource_id: str
    is_clickable: bool
    is_checkable: bool
    is_checked: bool
    is_editable: bool
    is_scrollable: bool
    is_long_clickable: bool
    is_focusable: bool
    is_selected: bool
    is_enabled: bool

    @property
    def center(self) -> tuple[float, float]:
        """Tap point: the centre of ``bbox``, pixels."""
        return (self.bbox[0] + self.bbox[2]) / 2, (self.bbox[1] + self.bbox[3]) / 2


def ui_elements(tree: Union[UITree, str, bytes]) -> list[UIElement]:
    """Every node with valid bounds, in document order, numbered from 0."""
    if not isinstance(tree, UITree):
        tree = parse_ui_xml(tree)
    out: list[UIElement] = []
    for n in tree.iter():
        if not _valid(n.bounds):
            continue
        out.append(UIElement(
            index=len(out), text=n.text, content_description=n.content_desc, class_name=n.cls,
            bbox=n.bounds, resource_id=n.resource_id,  # type: ignore[arg-type]
            is_clickable=n.flag("clickable"), is_checkable=n.flag("checkable"), is_checked=n.flag("checked"),
            is_editable=n.short_class.endswith("EditText"), is_scrollable=n.flag("scrollable"),
            is_long_clickable=n.flag("long-clickable"), is_focusable=n.flag("focusable"),
            is_selected=n.flag("selected"), is_enabled=n.flag("enabled"),
        ))
    return out


# ---- set-of-marks --------------------------------------------------------------------------------
_MARK_COLOURS = ((230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180), (0, 128, 128))


def set_of_marks(image: np.ndarray, elements: Sequence[UIElement]) -> np.ndarray:
    """A copy of ``image`` with each element's box outlined and its index written at the top-left.

    Args:
        image: (H, W, 3) uint8 RGB screenshot in the same pixel space as the dump.
        elements: from :func:`ui_elements` (boxes are clipped to the image).
    Returns: a new (H, W, 3) uint8 array; ``image`` is not modified.
    """
    from PIL import Image, ImageDraw

    if not isinstance(image, np.ndarray) or image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        desc = f"{image.shape} {image.dtype}" if isinstance(image, np.ndarray) else type(image).__name__
        raise ConfigError(f"set_of_marks: image must be an (H, W, 3) uint8 array, got {desc}")
    h, w = image.shape[:2]
    pil = Image.fromarray(image.copy(), "RGB")
    draw = ImageDraw.Draw(pil)
    for el in elements:
        x1, y1 = max(0, el.bbox[0]), max(0, el.bbox[1])
        x2, y2 = min(w - 1, el.bbox[2] - 1), min(h - 1, el.bbox[3] - 1)
        if x1 > x2 or y1 > y2:
            continue  # entirely off the image
        colour = _MARK_COLOURS[el.index % len(_MARK_COLOURS)]
        draw.rectangle((x1, y1, x2, y2), outline=colour, width=2)
        label = str(el.index)
        tb = draw.textbbox((x1, y1), label)
        draw.rectangle((x1, y1, x1 + (tb[2] - tb[0]) + 3, y1 + (tb[3] - tb[1]) + 3), fill=colour)
        draw.text((x1 + 1, y1), label, fill=(255, 255, 255))
    return np.asarray(pil, dtype=np.uint8).copy()
