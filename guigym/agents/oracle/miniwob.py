"""Scripted oracle for MiniWoB++ tasks: solves a fixed set of tasks from the observation alone.

The agent reads only what any other agent gets from ``MiniWoB-v0``: the utterance
(``obs["instruction"]``), the accessibility tree (``obs["a11y"]``, parsed with lxml) and, for
icons the tree does not describe, the screenshot. It never touches the page's JavaScript state,
the DOM or the env's controller, so a solved episode shows the task is solvable through the
public interface.

Each task has a solver: a small function ``(page, memory) -> action`` that looks at the current
observation and returns the next canonical action. Most solvers are stateless (they compare what
the tree shows with what the instruction asks, e.g. "the textbox does not hold the text yet ->
fill it, else click Submit"); the few that need history keep it in ``memory``, a dict the agent
clears at every ``reset``. Unknown tasks get ``done()``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
from lxml import etree

from guigym.agents.base import AGENTS
from guigym.core import actions as A
from guigym.core.dialect import format_action

#: what a solver returns while the page is still changing (animation, late rendering)
WAIT = format_action(A.Wait(seconds=0.2))
DONE = format_action(A.Done())


# ---- reading the observation ---------------------------------------------------------------------
@dataclass(frozen=True)
class Node:
    """One element of the a11y tree."""

    id: str
    role: str
    name: str
    attrs: dict[str, str]
    bbox: tuple[int, int, int, int]
    depth: int
    parent: Optional[str]
    n_children: int

    @property
    def value(self) -> str:
        return self.attrs.get("value", "")

    @property
    def checked(self) -> bool:
        return self.attrs.get("checked") == "true"

    @property
    def focused(self) -> bool:
        return self.attrs.get("focused") == "true"

    @property
    def expanded(self) -> bool:
        return self.attrs.get("expanded") == "true"

    @property
    def center(self) -> tuple[float, float]:
        x, y, w, h = self.bbox
        return x + w / 2, y + h / 2


def _parse_bbox(text: Optional[str]) -> tuple[int, int, int, int]:
    try:
        x, y, w, h = (int(v) for v in (text or "").split(","))
    except ValueError:
        return 0, 0, 0, 0
    return x, y, w, h


#: tolerate a malformed tree (the solver then sees fewer nodes and waits) instead of crashing
_XML_PARSER = etree.XMLParser(recover=True)


class Page:
    """The parsed observation: nodes in document order plus the screenshot and utterance."""

    def __init__(self, obs: dict[str, Any]) -> None:
        self.instruction: str = obs.get("instruction", "")
        self.screenshot: np.ndarray = obs["screenshot"]
        self.nodes: list[Node] = []
        root = etree.fromstring((obs.get("a11y") or "<a11y/>").encode("utf-8"), _XML_PARSER)
        for child in (root if root is not None else []):
            self._collect(child, depth=0, parent=None)

    def _collect(self, el: Any, depth: int, parent: Optional[str]) -> None:
        if not isinstance(el.tag, str):  # comments, processing instructions
            return
        attrs = dict(el.attrib)
        node = Node(id=attrs.get("id", ""), role=el.tag, name=attrs.get("name", ""), attrs=attrs,
                    bbox=_parse_bbox(attrs.get("bbox")), depth=depth, parent=parent, n_children=len(el))
        self.nodes.append(node)
        for child in el:
            self._collect(child, depth + 1, node.id)

    def find(self, role: Optional[str] = None, name: Optional[str] = None, leaf: bool = False) -> list[Node]:
        """Nodes with this role and exact name (None matches any), in document order."""
        return [n for n in self.nodes
                if (role is None or n.role == role) and (name is None or n.name == name)
                and (not leaf or n.n_children == 0)]

    def first(self, role: Optional[str] = None, name: Optional[str] = None, leaf: bool = False) -> Optional[Node]:
        found = self.find(role, name, leaf)
        return found[0] if found else None

    def after(self, anchor: Node, role: str) -> Optional[Node]:
        """The first node of ``role`` after ``anchor`` in document order (e.g. a label's input)."""
        idx = self.nodes.index(anchor)
        return next((n for n in self.nodes[idx + 1:] if n.role == role), None)

    def on_screen(self, node: Node) -> bool:
        """Whether the node's centre is inside the screenshot (a click there reaches it)."""
        return self.on_screen_point(*node.center)

    def on_screen_point(self, x: float, y: float) -> bool:
        h, w = self.screenshot.shape[:2]
        return 0 <= x < w and 0 <= y < h


# ---- actions -------------------------------------------------------------------------------------
def click(node: Node) -> str:
    return format_action(A.Click(element=node.id))


def fill(node: Node, text: str) -> str:
    return format_action(A.Fill(element=node.id, text=text))


def select(node: Node, option: str) -> str:
    return format_action(A.Select(element=node.id, option=option))


def press(key: str) -> str:
    return format_action(A.Press(key=key))


def click_or_wait(node: Optional[Node]) -> str:
    return click(node) if node is not None else WAIT


def is_descendant(page: Page, node: Node, ancestor: Node) -> bool:
    parents = {n.id: n.parent for n in page.nodes}
    cur = node.parent
    while cur is not None:
        if cur == ancestor.id:
            return True
        cur = parents.get(cur)
    return False


def inside(box: tuple[int, int, int, int], x: float, y: float) -> bool:
    bx, by, bw, bh = box
    return bx <= x < bx + bw and by <= y < by + bh


def uncovered_point(page: Page, node: Node, inset: int = 3) -> Optional[tuple[int, int]]:
    """The point of ``node`` nearest its centre that no later, non-descendant node covers.

    Absolutely positioned elements can overlap; the one later in document order is painted on
    top and would take a click aimed at the centre of the one below.
    """
    covers = [n.bbox for n in page.nodes[page.nodes.index(node) + 1:] if not is_descendant(page, n, node)]
    x, y, w, h = node.bbox
    cx, cy = node.center
    points = [(px, py) for px in range(x + inset, x + w - inset) for py in range(y + inset, y + h - inset)
              if not any(inside(b, px, py) for b in covers) and page.on_screen_point(px, py)]
    if not points:
        return None
    return min(points, key=lambda p: (p[0] - cx) ** 2 + (p[1] - cy) ** 2)


def click_uncovered(page: Page, node: Optional[Node]) -> str:
    """Click ``node`` where it is visible (its centre when nothing lies on top of it)."""
    if node is None:
        return WAIT
    point = uncovered_point(page, node)
    if point is None or point == tuple(int(v) for v in node.center):
        return click(node)
    return format_action(A.Click(x=point[0], y=point[1]))


# ---- reading the instruction ---------------------------------------------------------------------
def quoted(text: str) -> list[str]:
    """Every "double-quoted" string of the utterance, in order."""
    return re.findall(r'"([^"]*)"', text)


def first_quoted(text: str) -> str:
    found = quoted(text)
    return found[0] if found else ""


def match(pattern: str, text: str) -> Optional[re.Match[str]]:
    return re.search(pattern, text, flags=re.DOTALL)


# ---- solvers -------------------------------------------------------------------------------------
Memory = dict[str, Any]
Solver = Callable[[Page, Memory], str]
SOLVERS: dict[str, Solver] = {}


def solver(*task_ids: str) -> Callable[[Solver], Solver]:
    """Register ``fn`` as the solver of ``task_ids``."""
    def deco(fn: Solver) -> Solver:
        for task_id in task_ids:
            SOLVERS[task_id] = fn
        return fn
    return deco


def fill_then_submit(page: Page, wanted: list[tuple[Optional[Node], str]], submit: str) -> str:
    """Fill each (textbox, text) whose value differs, then click the ``submit`` button.

    Stateless: the textbox values in the tree say which step we are at.
    """
    for box, text in wanted:
        if box is None:
            return WAIT
        if box.value != text:
            return fill(box, text)
    return click_or_wait(page.first("button", submit))


@solver("click-test")
def solve_click_test(page: Page, mem: Memory) -> str:
    return click_or_wait(page.first("button"))


@solver("click-test-2", "click-test-transfer")
def solve_click_test_2(page: Page, mem: Memory) -> str:
    m = match(r"button (\S+?)\.?$", page.instruction)  # 'Click button ONE.'
    # the two buttons are placed at random and may overlap
    return click_uncovered(page, page.first("button", m.group(1) if m else "ONE"))


@solver("click-button", "unicode-test")
def solve_click_button(page: Page, mem: Memory) -> str:
    # several buttons may carry the wanted label; the page rewards any of them
    return click_or_wait(page.first("button", first_quoted(page.instruction)))


@solver("click-link")
def solve_click_link(page: Page, mem: Memory) -> str:
    # the links are text spans inside a paragraph; the paragraph's own name also contains the
    # word, so only leaves count
    return click_or_wait(page.first(name=first_quoted(page.instruction), leaf=True))


@solver("click-dialog")
def solve_click_dialog(page: Page, mem: Memory) -> str:
    close = page.first("button", "Close")
    if close is None:
        return WAIT
    if page.on_screen(close):
        return click(close)
    # the dialog can sit outside the 160 px viewport; its close button has keyboard focus
    return press("Enter") if close.focused else press("Tab")


@solver("click-dialog-2")
def solve_click_dialog_2(page: Page, mem: Memory) -> str:
    label = first_quoted(page.instruction)
    # the title bar's "x" is a button whose accessible name is "Close"
    return click_or_wait(page.first("button", "Close" if label == "x" else label))


@solver("focus-text")
def solve_focus_text(page: Page, mem: Memory) -> str:
    return click_or_wait(page.first("textbox"))


ORDINALS = {"1st": 0, "2nd": 1, "3rd": 2, "4th": 3, "5th": 4}


@solver("focus-text-2")
def solve_focus_text_2(page: Page, mem: Memory) -> str:
    m = match(r"the (\d+(?:st|nd|rd|th)) input", page.instruction)
    boxes = page.find("textbox")
    idx = ORDINALS.get(m.group(1), -1) if m else -1
    return click(boxes[idx]) if 0 <= idx < len(boxes) else WAIT


@solver("enter-text", "enter-text-dynamic")
def solve_enter_text(page: Page, mem: Memory) -> str:
    return fill_then_submit(page, [(page.first("textbox"), first_quoted(page.instruction))], "Submit")


@solver("enter-text-2")
def solve_enter_text_2(page: Page, mem: Memory) -> str:
    text = first_quoted(page.instruction)
    text = text.upper() if "upper case" in page.instruction else text.lower()
    return fill_then_submit(page, [(page.first("textbox"), text)], "Submit")


@solver("enter-password")
def solve_enter_password(page: Page, mem: Memory) -> str:
    password = first_quoted(page.instruction)
    boxes = page.find("textbox")
    if len(boxes) < 2:
        return WAIT
    return fill_then_submit(page, [(boxes[0], password), (boxes[1], password)], "Submit")


def labelled_textbox(page: Page, label: str) -> Optional[Node]:
    """The textbox that follows the label ``label`` (the forms do not link labels to inputs)."""
    anchor = page.first("label", label)
    return page.after(anchor, "textbox") if anchor is not None else None


@solver("login-user")
def solve_login_user(page: Page, mem: Memory) -> str:
    m = match(r'username "(.*?)" and the password "(.*?)"', page.instruction)
    if m is None:
        return DONE
    wanted = [(labelled_textbox(page, "Username"), m.group(1)), (labelled_textbox(page, "Password"), m.group(2))]
    return fill_then_submit(page, wanted, "Login")


def names_to_select(instruction: str) -> set[str]:
    """'Select A, B and click Submit.' -> {'A', 'B'}; 'Select nothing ...' -> set()."""
    m = match(r"^Select (.*) and click Submit\.?$", instruction.strip())
    if m is None or m.group(1) == "nothing":
        return set()
    return {s.strip() for s in m.group(1).split(",") if s.strip()}


@solver("click-checkboxes", "click-checkboxes-large", "click-checkboxes-transfer")
def solve_click_checkboxes(page: Page, mem: Memory) -> str:
    wanted = names_to_select(page.instruction)
    for box in page.find("checkbox"):
        if box.checked != (box.name in wanted):
            return click(box)
    return click_or_wait(page.first("button", "Submit"))


@solver("click-option")
def solve_click_option(page: Page, mem: Memory) -> str:
    wanted = names_to_select(page.instruction)
    radio = next((r for r in page.find("radio") if r.name in wanted), None)
    if radio is None:
        return WAIT
    if not radio.checked:
        return click(radio)
    return click_or_wait(page.first("button", "Submit"))


@solver("click-tab")
def solve_click_tab(page: Page, mem: Memory) -> str:
    m = match(r"(Tab #\d+)", page.instruction)
    tab = page.first("tab", m.group(1)) if m else None
    if tab is None:
        return WAIT
    # the page listens on the tab's inner link; click that when the tree shows it
    inner = next((n for n in page.nodes if n.parent == tab.id), None)
    return click(inner or tab)


#: a textarea is at least two text lines tall; a one-line input is ~21 px at MiniWoB's font
TEXTAREA_MIN_HEIGHT = 24


def widget_kind(node: Node) -> Optional[str]:
    """The click-widget type ('radio', 'checkbox', 'button', 'text', 'textarea') of a node.

    The tree calls both inputs and textareas ``textbox``; their height tells them apart.
    """
    if node.role in ("radio", "checkbox", "button"):
        return node.role
    if node.role == "textbox":
        return "textarea" if node.bbox[3] >= TEXTAREA_MIN_HEIGHT else "text"
    return None


@solver("click-widget")
def solve_click_widget(page: Page, mem: Memory) -> str:
    kind = first_quoted(page.instruction)
    return click_or_wait(next((n for n in page.nodes if widget_kind(n) == kind), None))


@solver("click-button-sequence")
def solve_click_button_sequence(page: Page, mem: Memory) -> str:
    # clicking ONE changes nothing visible, so the progress lives in memory
    order = re.findall(r"button (\w+)", page.instruction) or ["ONE", "TWO"]
    step = mem.get("next", 0)
    if step >= len(order):
        return WAIT
    button = page.first("button", order[step])
    if button is None:
        return WAIT
    mem["next"] = step + 1
    return click_uncovered(page, button)  # the buttons may overlap, as in click-test-2


@solver("choose-list")
def solve_choose_list(page: Page, mem: Memory) -> str:
    m = match(r"^Select (.*) from the list", page.instruction.strip())
    combo = page.first("combobox")
    if m is None or combo is None:
        return WAIT
    if combo.value != m.group(1):
        return select(combo, m.group(1))
    return click_or_wait(page.first("button", "Submit"))


@solver("click-collapsible", "click-collapsible-nodelay")
def solve_click_collapsible(page: Page, mem: Memory) -> str:
    header = next((n for n in page.find("tab") if n.name.startswith("Section")), None)
    if header is None:
        return WAIT
    if not header.expanded:
        return click(header)
    return click_or_wait(page.first("button", "Submit"))


#: the folder icon's fill colour in the treeview theme (files are white with coloured lines)
FOLDER_FILL = np.array([255, 226, 158])


def looks_like_folder(page: Page, node: Node) -> bool:
    """Whether the 16 px icon left of a tree label is a folder (the tree does not say)."""
    x, y, _, h = node.bbox
    icon = page.screenshot[max(y, 0):max(y + h, 0), max(x, 0):max(x + 16, 0)].astype(int)
    near = np.abs(icon - FOLDER_FILL).sum(axis=-1) < 40
    return int(near.sum()) >= 12


@solver("navigate-tree")
def solve_navigate_tree(page: Page, mem: Memory) -> str:
    target = first_quoted(page.instruction)
    labels = [n for n in page.find("generic") if n.n_children == 0 and n.name]
    hit = next((n for n in labels if n.name == target), None)
    if hit is not None:
        return click(hit)
    # open folders breadth-first (shallowest first); clicking a file would end the episode
    opened: set[str] = mem.setdefault("opened", set())
    closed = [n for n in labels if n.id not in opened and looks_like_folder(page, n)]
    if not closed:
        return WAIT
    folder = min(closed, key=lambda n: n.depth)
    opened.add(folder.id)
    return click(folder)


# ---- what else the page could have asked ---------------------------------------------------------
def instruction_variants(task_id: str, obs: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """Every instruction the task's generator could have drawn for this page, one entry per
    target element (so the list's uniform distribution is the generator's), each with the actions
    that solve it (any element with the asked label/kind wins; the first is the oracle's own).

    Read off MiniWoB's generators: click-button and unicode-test pick the target uniformly among
    the page's buttons and accept any button with the same text; click-widget picks uniformly
    among the widgets and accepts any widget of the asked kind. Other tasks: [] (unknown).

    Used to turn one demonstration page into several supervised queries (SFT on every question
    the page answers) and to compute a task's *label-blind ceiling*: the best success of a policy
    that sees the page but not the instruction (:func:`label_blind_best`).
    """
    page = Page(obs)
    if task_id in ("click-button", "unicode-test"):
        buttons = page.find("button")
        return [(f'Click on the "{b.name}" button.', [click(o) for o in buttons if o.name == b.name]) for b in buttons]
    if task_id == "click-widget":
        widgets = [(n, widget_kind(n)) for n in page.nodes if widget_kind(n) is not None]
        return [(f'Click on a "{kind}" widget.', [click(o) for o, k in widgets if k == kind]) for _, kind in widgets]
    return []


def label_blind_best(variants: list[tuple[str, list[str]]]) -> float:
    """The success of the best instruction-blind choice on one page: max over actions of the share
    of the page's possible instructions that action solves (0.0 when ``variants`` is empty)."""
    if not variants:
        return 0.0
    actions = {a for _, ok in variants for a in ok}
    return max(sum(a in ok for _, ok in variants) for a in actions) / len(variants)


SOLVED_TASKS: tuple[str, ...] = tuple(sorted(SOLVERS))


# ---- the agent -----------------------------------------------------------------------------------
@AGENTS.register("oracle")
class MiniWoBOracle:
    """Scripted MiniWoB++ agent: looks the task up in :data:`SOLVERS` and follows its solver.

    Returns ``done()`` on tasks it has no solver for.
    """

    name = "oracle"

    def __init__(self, seed: int = 0, platform: str = "web") -> None:
        self.seed = seed  # unused: the solvers are deterministic
        self.platform = platform
        self.task_id = ""
        self.instruction = ""
        self.memory: Memory = {}

    def reset(self, task_info: dict[str, Any]) -> None:
        self.task_id = str(task_info.get("task_id", ""))
        self.instruction = str(task_info.get("instruction", ""))
        self.memory = {}

    def act(self, obs: dict[str, Any]) -> str:
        solve = SOLVERS.get(self.task_id)
        if solve is None:
            return DONE
        page = Page(obs)
        if not page.instruction:
            page.instruction = self.instruction
        return solve(page, self.memory)
