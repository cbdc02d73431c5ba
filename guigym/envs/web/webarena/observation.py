"""WebArena's accessibility-tree text, BrowserGym's ``[bid]`` variant and a set-of-marks image.

Built from Chromium's own accessibility tree in ONE CDP call per observation
(``Accessibility.getFullAXTree``), plus one ``DOMSnapshot.captureSnapshot`` when element boxes are
needed (set-of-marks, viewport-only trees), and one title read per open tab. WebArena's own
builder costs a CDP round trip per node for boxes (webarena#66, #109); the count here does not
grow with the page (tests/test_webarena_obs.py counts the calls).

WebArena format (facts from web-arena-x/webarena ``browser_env/processors.py``, reimplemented):

* one line per kept node, ``[id] role 'name'`` (the name as Python ``repr``), then
  `` prop: value`` pairs joined by spaces, for every property except
  :data:`IGNORED_PROPERTIES`; indented by one tab per kept ancestor; ``id`` is the AX node id;
* a node is dropped (its children take its place) when it is ignored, has no name field or no
  DOM node; or when its name is blank, it has no listed property and its role is in
  :data:`EMPTY_SKIP_ROLES`; or when it is a ``listitem`` with a blank name;
* a ``StaticText`` line is then dropped when its text is empty or occurs in one of the three
  lines kept before it (the text repeats its parent's name, e.g. a link's label);
* the text starts with the tab header ``Tab 0 (current): <title> | Tab 1: <title>`` and a blank
  line.

BrowserGym variant (``style="browsergym"``; facts from ServiceNow/BrowserGym
``browsergym/utils/obs.py`` ``flatten_axtree_to_str``): ``[bid] role 'name'``, then
``, value='...'`` and ``, prop=repr(value)`` (``focused``/``required``/``atomic`` bare when
true), ``generic`` nodes without properties and ``LineBreak`` dropped, a ``StaticText`` dropped
when its text is part of its parent's name. Our bid is the same AX id, so both dialects' element
actions resolve the same way.

Caps: ``node_cap`` lines and ``time_cap_ms`` of formatting; either sets ``truncated`` and
``reason`` (the env puts them into ``info["a11y_truncated"]``/``["a11y_truncation_reason"]``).
"""
from __future__ import annotations

import asyncio
import re
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from guigym.core.errors import ActionNotPossible, ConfigError
from guigym.envs.web.browser import cdp_send

Box = tuple[float, float, float, float]  # x, y, width, height in viewport (screenshot) pixels

#: properties WebArena leaves out of its lines (``browser_env/constants.py``)
IGNORED_PROPERTIES = frozenset({"focusable", "editable", "readonly", "level", "settable", "multiline", "invalid"})
#: roles WebArena drops when the node has a blank name and no listed property ("image" is the
#: name Chromium >= 118 gives the role WebArena's Chromium called "img")
EMPTY_SKIP_ROLES = frozenset({"generic", "img", "image", "list", "strong", "paragraph", "banner", "navigation", "Section",
                              "LabelText", "Legend", "listitem"})
#: BrowserGym: properties printed bare (``, focused``) when true
BARE_WHEN_TRUE = frozenset({"required", "focused", "atomic"})
BROWSERGYM_SKIP_ROLES = frozenset({"LineBreak"})
#: roles that get a mark on the set-of-marks screenshot (the controls a user operates)
SOM_ROLES = frozenset({
    "button", "link", "textbox", "searchbox", "checkbox", "radio", "switch", "combobox", "listbox", "option",
    "menuitem", "menuitemcheckbox", "menuitemradio", "tab", "slider", "spinbutton", "treeitem", "gridcell",
})
#: WebArena keeps a node in a viewport-only tree when at least this share of it is on screen
IN_VIEWPORT_RATIO = 0.6
STYLES = ("webarena", "browsergym")
_STATIC_TEXT = re.compile(r"\[\d+\] StaticText (.+)", re.S)
_TIME_CHECK_EVERY = 64


@dataclass
class TreeText:
    """One formatted tree: ``text`` (no tab header), ``nodes`` = its line count, ``ids`` maps each
    printed id to its DOM ``backendNodeId``, ``boxes`` each printed id to its viewport box (only
    when bounds were given) and ``roles`` each printed id to its role."""

    text: str
    nodes: int
    truncated: bool = False
    reason: Optional[str] = None
    ids: dict[str, int] = field(default_factory=dict)
    boxes: dict[str, Box] = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=dict)


def _value(d: Any) -> Any:
    return d.get("value") if isinstance(d, dict) else None


def _webarena_line(node: dict[str, Any], role: str, name: str, parent_name: str) -> Optional[str]:
    props = []
    for p in node.get("properties") or ():
        pname, pval = p.get("name"), p.get("value")
        if pname in IGNORED_PROPERTIES or not isinstance(pval, dict) or "value" not in pval:
            continue
        props.append(f"{pname}: {pval['value']}")
    if not name.strip():
        if (not props and role in EMPTY_SKIP_ROLES) or role == "listitem":
            return None
    line = f"[{node['nodeId']}] {role} {name!r}"
    return line + (" " + " ".join(props) if props else "")


def _browsergym_line(node: dict[str, Any], role: str, name: str, parent_name: str) -> Optional[str]:
    if role in BROWSERGYM_SKIP_ROLES:
        return None
    if role == "StaticText" and (not name.strip() or name.strip() in parent_name):
        return None
    attrs = []
    value = _value(node.get("value"))
    if value not in (None, ""):
        attrs.append(f"value={value!r}")
    for p in node.get("properties") or ():
        pname, pval = p.get("name"), p.get("value")
        if pname in IGNORED_PROPERTIES or not isinstance(pval, dict) or "value" not in pval:
            continue
        if pname in BARE_WHEN_TRUE:
            if pval["value"]:
                attrs.append(pname)
        else:
            attrs.append(f"{pname}={pval['value']!r}")
    if role == "generic" and not name.strip() and not attrs:
        return None
    head = f"{role} {name.strip()!r}" if role in ("StaticText", "ListMarker") else f"[{node['nodeId']}] {role} {name.strip()!r}"
    return ", ".join([head] + attrs)


def _in_viewport_ratio(box: Box, viewport: tuple[int, int]) -> float:
    """Share of the box's area inside the viewport. (WebArena's ``get_element_in_viewport_ratio``
    means this; its code divides by width and then multiplies by height.)"""
    x, y, w, h = box
    vw, vh = viewport
    ow = max(0.0, min(x + w, vw) - max(x, 0.0))
    oh = max(0.0, min(y + h, vh) - max(y, 0.0))
    return ow * oh / (w * h) if w > 0 and h > 0 else 0.0


def format_tree(ax_nodes: Sequence[dict[str, Any]], style: str = "webarena", node_cap: int = 5000,
                time_cap_ms: float = 1000.0, bounds: Optional[dict[int, Box]] = None,
                viewport_only: Optional[tuple[int, int]] = None,
                clock: Callable[[], float] = time.perf_counter) -> TreeText:
    """Format the nodes of ``Accessibility.getFullAXTree`` (first node = root) as ``style``.

    ``bounds``: backendNodeId -> viewport box (from :func:`bounds_from_snapshot`); fills
    ``TreeText.boxes``. ``viewport_only=(w, h)``: drop nodes (not their children) less than 60 %
    on screen, as WebArena's ``current_viewport_only`` (needs ``bounds``).
    """
    if style not in STYLES:
        raise ConfigError(f"a11y style must be one of {', '.join(STYLES)}, got {style!r}")
    if viewport_only is not None and bounds is None:
        raise ConfigError("viewport_only needs element bounds")
    line_of = _webarena_line if style == "webarena" else _browsergym_line
    by_id: dict[str, dict[str, Any]] = {}
    for n in ax_nodes:  # a few nodes come twice (WebArena keeps the first)
        by_id.setdefault(str(n.get("nodeId")), n)
    out = TreeText(text="", nodes=0)
    if not ax_nodes:
        return out
    lines: list[str] = []
    start = clock()
    stack: list[tuple[str, int, str]] = [(str(ax_nodes[0].get("nodeId")), 0, "")]
    seen: set[str] = set()
    visited = 0
    while stack:
        node_id, depth, parent_name = stack.pop()
        node = by_id.get(node_id)
        if node is None or node_id in seen:
            continue
        seen.add(node_id)
        visited += 1
        if len(lines) >= node_cap:
            out.truncated, out.reason = True, f"node cap of {node_cap} lines reached"
            break
        if visited % _TIME_CHECK_EVERY == 0 and (clock() - start) * 1000 > time_cap_ms:
            out.truncated, out.reason = True, f"time cap of {time_cap_ms:g} ms reached after {len(lines)} lines"
            break
        line = None
        role = str(_value(node.get("role")) or "")
        name_field = node.get("name")
        backend = node.get("backendDOMNodeId")
        name = _value(name_field) if isinstance(name_field, dict) else None
        if not node.get("ignored") and isinstance(name, str) and backend is not None:
            box = bounds.get(backend) if bounds is not None else None
            on_screen = (viewport_only is None or role == "RootWebArea" or
                         (box is not None and _in_viewport_ratio(box, viewport_only) >= IN_VIEWPORT_RATIO))
            if on_screen:
                line = line_of(node, role, name, parent_name)
            if line is not None:
                pid = str(node["nodeId"])
                lines.append("\t" * depth + line)
                out.ids[pid] = int(backend)
                out.roles[pid] = role
                if box is not None:
                    out.boxes[pid] = box
        child_depth = depth + 1 if line is not None else depth
        child_parent_name = name if line is not None and isinstance(name, str) else parent_name
        for child in reversed(node.get("childIds") or ()):
            stack.append((str(child), child_depth, child_parent_name))
    if style == "webarena":
        lines = _drop_repeated_static_text(lines)
    out.text = "\n".join(lines)
    out.nodes = len(lines)
    kept = {ln.lstrip("\t").split("]", 1)[0][1:] for ln in lines if ln.lstrip("\t").startswith("[")}
    out.ids = {k: v for k, v in out.ids.items() if k in kept}
    out.boxes = {k: v for k, v in out.boxes.items() if k in kept}
    out.roles = {k: v for k, v in out.roles.items() if k in kept}
    return out


def _drop_repeated_static_text(lines: list[str]) -> list[str]:
    """WebArena's ``clean_accesibility_tree``: a line mentioning StaticText stays only when its
    text is non-empty and appears in none of the three lines kept before it."""
    kept: list[str] = []
    for line in lines:
        if "statictext" in line.lower():
            m = _STATIC_TEXT.search(line)
            text = m.group(1)[1:-1] if m else ""
            if text and all(text not in prev for prev in kept[-3:]):
                kept.append(line)
        else:
            kept.append(line)
    return kept


def tab_header(titles: Sequence[str], active: int) -> str:
    """``Tab 0 (current): Title | Tab 1: Other`` (WebArena's header line)."""
    return " | ".join(f"Tab {i} (current): {t}" if i == active else f"Tab {i}: {t}" for i, t in enumerate(titles))


def bounds_from_snapshot(snapshot: dict[str, Any]) -> dict[int, Box]:
    """backendNodeId -> (x, y, w, h) in viewport pixels, from ``DOMSnapshot.captureSnapshot``
    (main document; layout bounds are document coordinates, so the scroll offset is taken off)."""
    docs = snapshot.get("documents") or []
    if not docs:
        return {}
    doc = docs[0]
    backend_ids = doc["nodes"].get("backendNodeId", [])
    sx, sy = float(doc.get("scrollOffsetX", 0)), float(doc.get("scrollOffsetY", 0))
    out: dict[int, Box] = {}
    for node_index, (x, y, w, h) in zip(doc["layout"]["nodeIndex"], doc["layout"]["bounds"]):
        out.setdefault(backend_ids[node_index], (x - sx, y - sy, w, h))
    return out


def draw_marks(screenshot: np.ndarray, boxes: dict[str, Box], roles: dict[str, str],
               mark_roles: Iterable[str] = SOM_ROLES) -> np.ndarray:
    """A copy of ``screenshot`` (uint8 (H, W, 3)) with a red outline and the id in white on red
    at the top-left corner of every box whose role is in ``mark_roles`` and which is on screen."""
    mark_roles = frozenset(mark_roles)
    h, w = screenshot.shape[:2]
    image = Image.fromarray(np.ascontiguousarray(screenshot, dtype=np.uint8)).convert("RGB")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    for mark, (x, y, bw, bh) in boxes.items():
        if roles.get(mark) not in mark_roles or bw <= 0 or bh <= 0 or x >= w or y >= h or x + bw <= 0 or y + bh <= 0:
            continue
        x0, y0 = max(0, int(x)), max(0, int(y))
        x1, y1 = min(w - 1, int(x + bw) - 1), min(h - 1, int(y + bh) - 1)
        draw.rectangle((x0, y0, x1, y1), outline=(255, 0, 0), width=1)
        left, top, right, bottom = draw.textbbox((x0, y0), mark, font=font)
        draw.rectangle((left, top, right, bottom), fill=(255, 0, 0))
        draw.text((x0, y0), mark, fill=(255, 255, 255), font=font)
    return np.asarray(image, dtype=np.uint8)


_CENTER_FN = """function () {
  const el = this.nodeType === 3 ? this.parentElement : this;
  if (el && el.scrollIntoViewIfNeeded) el.scrollIntoViewIfNeeded(true);
  let r;
  if (this.nodeType === 3) { const range = document.createRange(); range.selectNode(this); r = range.getBoundingClientRect(); }
  else r = this.getBoundingClientRect();
  return {x: r.x, y: r.y, w: r.width, h: r.height};
}"""


#: Resolves when no finite CSS transition or animation runs in the document (a Bootstrap tab's
#: fade swaps the panes only when the old one has faded out), or after ``capMs``. Infinite ones
#: (spinners) never end and are not waited for. Returns whether the page became still.
_STILL_FN = """async (capMs) => {
  const busy = () => document.getAnimations().some((a) => {
    if (a.playState !== 'running' || !a.effect) return false;
    return Number.isFinite(a.effect.getComputedTiming().endTime);
  });
  if (!busy()) return true;
  const t0 = performance.now();
  // a frame, or 50 ms where frames are throttled
  const frame = () => new Promise((r) => { requestAnimationFrame(() => r()); setTimeout(r, 50); });
  let quiet = 0;
  while (performance.now() - t0 < capMs) {
    await frame();
    // two quiet frames: a transition's end handler may start the next one (the new pane's fade-in)
    if (busy()) quiet = 0; else if (++quiet >= 2) return true;
  }
  return false;
}"""

#: WebArena has no select action: its agents ``type`` into a combobox (the select's own type-ahead,
#: Enter closes it) or ``click`` an option, which a closed drop-down does not lay out. A click on
#: such an option chooses it, as opening the drop-down and clicking the option would. Returns
#: "chosen", "disabled", or "other" (not an option of a drop-down: click it like anything else).
_CHOOSE_FN = """function () {
  const sel = this.nodeType === 1 && this.tagName === 'OPTION' ? this.closest('select') : null;
  if (!sel || sel.multiple || sel.size > 1) return 'other';
  if (this.disabled || sel.disabled || (this.parentElement && this.parentElement.disabled)) return 'disabled';
  sel.focus();
  if (!this.selected) {
    this.selected = true;
    sel.dispatchEvent(new Event('input', {bubbles: true}));
    sel.dispatchEvent(new Event('change', {bubbles: true}));
  }
  return 'chosen';
}"""


async def wait_until_still(page: Any, cap_ms: float = 1000.0) -> bool:
    """Wait (at most ``cap_ms``) until the page's finite CSS transitions and animations have
    ended, so that a tree and screenshot taken next show what the user sees once the page is
    still; True when it became still. A document that goes away meanwhile (a navigation) counts
    as still: the caller waits for its load separately. A page that does not answer within a
    second past the cap is left as it is (False)."""
    try:
        return bool(await asyncio.wait_for(page.evaluate(_STILL_FN, cap_ms), cap_ms / 1000 + 1.0))
    except asyncio.TimeoutError:
        return False
    except Exception as exc:  # noqa: BLE001 - only a replaced document is expected here
        if "context was destroyed" in str(exc) or "navigat" in str(exc) or "closed" in str(exc):
            return True
        raise


class AXTreeObserver:
    """The controller's ``a11y_builder`` and ``element_center`` for WebArena-style ids.

    ``build`` makes one observation of a page: AX tree (+ DOM snapshot when ``som`` or
    ``viewport_only``) and the tab titles, requested together. It remembers each page's
    id -> backendNodeId map, so ``center`` resolves the ids the agent last saw on that page
    (as WebArena does; an id not in the last observation is ActionNotPossible).
    """

    def __init__(self, style: str = "webarena", node_cap: int = 5000, time_cap_ms: float = 1000.0,
                 viewport: tuple[int, int] = (1280, 720), viewport_only: bool = False, som: bool = False) -> None:
        if style not in STYLES:
            raise ConfigError(f"a11y_style must be one of {', '.join(STYLES)}, got {style!r}")
        if node_cap < 1 or time_cap_ms <= 0:
            raise ConfigError(f"a11y_node_cap and a11y_time_cap_ms must be positive, got {node_cap}, {time_cap_ms}")
        self.style, self.node_cap, self.time_cap_ms = style, int(node_cap), float(time_cap_ms)
        self.viewport, self.viewport_only, self.som = tuple(viewport), bool(viewport_only), bool(som)
        self._ids: "weakref.WeakKeyDictionary[Any, dict[str, int]]" = weakref.WeakKeyDictionary()
        self._roles: "weakref.WeakKeyDictionary[Any, dict[str, str]]" = weakref.WeakKeyDictionary()

    async def build(self, episode: Any, page: Any, cdp: Any) -> dict[str, Any]:
        t0 = time.perf_counter()
        want_boxes = self.som or self.viewport_only
        calls = [cdp_send(cdp, "Accessibility.getFullAXTree")]
        if want_boxes:
            calls.append(cdp_send(cdp, "DOMSnapshot.captureSnapshot", {"computedStyles": [], "includeDOMRects": True}))
        tabs = list(episode.tabs)
        results = await asyncio.gather(*calls, *(_title(t) for t in tabs))
        ax = results[0]
        snapshot = results[1] if want_boxes else None
        titles = list(results[len(calls):])
        t_fetch = time.perf_counter()
        bounds = bounds_from_snapshot(snapshot) if snapshot is not None else None
        tree = format_tree(ax.get("nodes", []), style=self.style, node_cap=self.node_cap,
                           time_cap_ms=self.time_cap_ms, bounds=bounds,
                           viewport_only=self.viewport if self.viewport_only else None)
        self._ids[page] = tree.ids
        self._roles[page] = tree.roles
        active = tabs.index(page) if page in tabs else 0
        root = (ax.get("nodes") or [{}])[0]
        busy = any(p.get("name") == "busy" and _value(p.get("value")) not in (False, 0, "false", None)
                   for p in root.get("properties") or ())
        if titles and _value(root.get("role")) == "RootWebArea" and isinstance(_value(root.get("name")), str):
            # the title of the document the tree shows (page.title() can still see the one before)
            titles[active] = _value(root.get("name"))
        text = tab_header(titles, active) + "\n\n" + tree.text
        t1 = time.perf_counter()
        return {"xml": text, "nodes": tree.nodes, "truncated": tree.truncated, "reason": tree.reason,
                "ms": (t1 - t0) * 1000,
                "meta": {"busy": busy, "boxes": tree.boxes, "roles": tree.roles, "tab_titles": titles, "active_tab": active,
                         "fetch_ms": (t_fetch - t0) * 1000, "format_ms": (t1 - t_fetch) * 1000}}

    async def center(self, page: Any, cdp: Any, element: str) -> tuple[float, float]:
        r = await self._call_on(page, cdp, element, _CENTER_FN)
        if not r or r["w"] <= 0 or r["h"] <= 0:
            raise ActionNotPossible(f"element [{element}] is not visible")
        x, y = r["x"] + r["w"] / 2, r["y"] + r["h"] / 2
        vw, vh = self.viewport
        if not (0 <= x < vw and 0 <= y < vh):
            raise ActionNotPossible(f"element [{element}] is outside the {vw}x{vh} screen")
        return x, y

    async def _call_on(self, page: Any, cdp: Any, element: str, function: str) -> Any:
        """The value of ``function`` (JS, ``this`` = the DOM node) on the node observed as
        ``element`` in ``page``; ActionNotPossible when it is not in the observation or has left
        the DOM since."""
        backend = self._ids.get(page, {}).get(str(element))
        if backend is None:
            raise ActionNotPossible(f"there is no element [{element}] in the current observation")
        try:
            obj = await cdp.send("DOM.resolveNode", {"backendNodeId": backend})
            res = await cdp.send("Runtime.callFunctionOn", {"objectId": obj["object"]["objectId"],
                                                            "functionDeclaration": function, "returnByValue": True})
        except Exception as exc:  # noqa: BLE001 - the node left the DOM since it was observed
            if "No node with given id" in str(exc) or "Could not find node" in str(exc):
                raise ActionNotPossible(f"element [{element}] is no longer on the page") from None
            raise
        return res.get("result", {}).get("value")

    def role(self, page: Any, element: str) -> Optional[str]:
        """The role ``element`` had in the last observation of ``page`` (None: not in it)."""
        return self._roles.get(page, {}).get(str(element))

    async def choose_option(self, page: Any, cdp: Any, element: str) -> bool:
        """Choose ``element`` when it is an ``option`` of a closed drop-down ``<select>`` (see
        ``_CHOOSE_FN``); False when it is anything else (the caller clicks it)."""
        if self.role(page, element) != "option":
            return False
        outcome = await self._call_on(page, cdp, element, _CHOOSE_FN)
        if outcome == "disabled":
            raise ActionNotPossible(f"option [{element}] is disabled")
        return outcome == "chosen"


async def _title(page: Any) -> str:
    try:
        return await page.title()
    except Exception:  # noqa: BLE001 - a tab navigating or closing meanwhile: no title
        return ""
