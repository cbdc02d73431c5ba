"""Constrained decoding to the action grammar of the current observation.

A step's *candidates* are the complete replies the policy may give (canonical action strings such
as ``click(element="12")``). :class:`CandidateConstraint` tokenises every candidate with the
policy's tokenizer (no special tokens, so the ids are exactly what the model would emit after the
assistant header) and stores the token sequences in a trie. At response position t, with the
prefix ``response_ids[:t]`` generated so far, the allowed next tokens are the children of the
prefix's trie node, plus the end token where a candidate ends there.

The same :meth:`CandidateConstraint.allowed` drives both sampling
(:meth:`guigym.models.hf_policy.HFPolicy.generate`) and the learner's log-prob recomputation
(:meth:`HFPolicy.logprobs_tensor` with ``candidates=``): both take ``log_softmax`` over the logits
with every other token set to -inf, so recorded and recomputed log-probs agree.

Only the tokenizer's own tokenisation of a candidate is allowed (one path per candidate, as in
trie-constrained decoding generally); other byte-identical tokenisations are masked out.

Candidates from an observation: :func:`candidates_from_a11y` (element actions on the ids of the
visible interactive nodes of guigym's web a11y XML) and :func:`grid_candidates` (coordinate
actions on the centres of an in-screen grid).
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any, Iterable, Optional, Sequence, Union

from guigym.core import actions as A
from guigym.core.dialect import format_action

#: ARIA roles that take clicks/focus on their own (WAI-ARIA 1.2 widget roles + link/heading-free
#: defaults); ``roles="any"`` in :func:`candidates_from_a11y` accepts every visible node instead
INTERACTIVE_ROLES = frozenset({
    "button", "link", "checkbox", "radio", "textbox", "searchbox", "combobox", "listbox", "option",
    "menuitem", "menuitemcheckbox", "menuitemradio", "tab", "switch", "slider", "spinbutton",
    "treeitem", "gridcell", "columnheader", "rowheader", "scrollbar",
})

#: element actions that need no argument besides the element (so their candidates are finite)
ELEMENT_ACTIONS = {"click": A.Click, "double_click": A.DoubleClick, "right_click": A.RightClick, "hover": A.Hover}


class _Node:
    __slots__ = ("children", "end")

    def __init__(self) -> None:
        self.children: dict[int, _Node] = {}
        self.end = False


class CandidateConstraint:
    """A token trie over ``candidates``; :meth:`allowed` gives the next tokens for a prefix.

    Args:
        tokenizer: the policy's tokenizer (``tokenizer(text, add_special_tokens=False)``).
        candidates: non-empty list of distinct reply strings.
        end_ids: the token(s) that may follow a complete candidate (default: the tokenizer's
            ``eos_token_id``, ``<|im_end|>`` for Qwen chat models).
    """

    def __init__(self, tokenizer: Any, candidates: Sequence[str], end_ids: Optional[Sequence[int]] = None) -> None:
        if isinstance(candidates, str) or not candidates:
            raise ValueError("candidates must be a non-empty list of strings")
        if end_ids is None:
            if tokenizer.eos_token_id is None:
                raise ValueError("the tokenizer has no eos_token_id; pass end_ids")
            end_ids = [int(tokenizer.eos_token_id)]
        self.candidates = list(dict.fromkeys(str(c) for c in candidates))
        self.end_ids = [int(i) for i in end_ids]
        self.root = _Node()
        self.sequences: list[list[int]] = []
        for cand in self.candidates:
            if not cand:
                raise ValueError("candidates must not contain an empty string")
            ids = [int(i) for i in tokenizer(cand, add_special_tokens=False)["input_ids"]]
            self.sequences.append(ids)
            node = self.root
            for tok in ids:
                node = node.children.setdefault(tok, _Node())
            node.end = True

    def _walk(self, prefix: Sequence[int]) -> Optional[_Node]:
        node: Optional[_Node] = self.root
        for tok in prefix:
            node = node.children.get(int(tok)) if node is not None else None
            if node is None:
                return None
        return node

    def allowed(self, prefix: Sequence[int]) -> list[int]:
        """Token ids allowed after ``prefix`` (response ids so far); [] if the prefix left the trie
        or already ended (a complete candidate followed by its end token)."""
        node = self._walk(prefix)
        if node is None:
            return []
        out = list(node.children)
        if node.end:
            out += [i for i in self.end_ids if i not in node.children]
        return out

    def complete(self, response_ids: Sequence[int]) -> Optional[str]:
        """The candidate that ``response_ids`` spells (with or without the end token), else None."""
        ids = list(response_ids)
        if ids and ids[-1] in self.end_ids:
            ids = ids[:-1]
        for cand, seq in zip(self.candidates, self.sequences):
            if seq == ids:
                return cand
        return None

    @property
    def max_len(self) -> int:
        """Longest candidate in tokens, plus one for the end token."""
        return max(len(s) for s in self.sequences) + 1


def as_constraint(tokenizer: Any, candidates: Union[None, Sequence[str], CandidateConstraint],
                  end_ids: Optional[Sequence[int]] = None) -> Optional[CandidateConstraint]:
    """None / list of strings / ready constraint -> constraint (None = unconstrained)."""
    if candidates is None or isinstance(candidates, CandidateConstraint):
        return candidates
    return CandidateConstraint(tokenizer, candidates, end_ids)


def _bbox(value: Optional[str]) -> Optional[tuple[float, float, float, float]]:
    if not value:
        return None
    try:
        x, y, w, h = (float(v) for v in value.split(","))
    except ValueError:
        return None
    return x, y, w, h


def visible_nodes(a11y_xml: str, screen: Optional[tuple[int, int]] = None,
                  roles: Union[str, Iterable[str], None] = None) -> list[dict[str, str]]:
    """Attributes (+ ``role``) of the a11y nodes that are visible, enabled and of a wanted role.

    Visible: a ``bbox="x,y,w,h"`` with w, h > 0 that overlaps the screen (``screen=(width,
    height)`` in screenshot pixels; when None only the size is checked). ``roles``: None =
    :data:`INTERACTIVE_ROLES`, ``"any"`` = every role, or an explicit set.
    """
    try:
        root = ET.fromstring(a11y_xml)
    except ET.ParseError as exc:
        raise ValueError(f"a11y is not well-formed XML: {exc}") from None
    wanted = INTERACTIVE_ROLES if roles is None else (None if roles == "any" else frozenset(roles))
    out = []
    for el in root.iter():
        if el is root or "id" not in el.attrib:
            continue
        if wanted is not None and el.tag not in wanted:
            continue
        if el.attrib.get("disabled") == "true":
            continue
        box = _bbox(el.attrib.get("bbox"))
        if box is None or box[2] <= 0 or box[3] <= 0:
            continue
        if screen is not None:
            x, y, w, h = box
            if x + w <= 0 or y + h <= 0 or x >= screen[0] or y >= screen[1]:
                continue
        out.append({"role": el.tag, **el.attrib})
    return out


def candidates_from_a11y(a11y_xml: str, actions: Sequence[str] = ("click",), screen: Optional[tuple[int, int]] = None,
                         roles: Union[str, Iterable[str], None] = None) -> list[str]:
    """Canonical element-action strings for every visible interactive node, e.g.
    ``['click(element="1")', 'click(element="4")']`` (order: action, then document order).

    ``actions``: element verbs from :data:`ELEMENT_ACTIONS`; ``screen``/``roles`` as in
    :func:`visible_nodes`. An empty list means no node qualified.
    """
    unknown = [a for a in actions if a not in ELEMENT_ACTIONS]
    if unknown:
        raise ValueError(f"actions {unknown} have no finite candidate set; use some of {sorted(ELEMENT_ACTIONS)}")
    nodes = visible_nodes(a11y_xml, screen, roles)
    return [format_action(ELEMENT_ACTIONS[a](element=n["id"])) for a in actions for n in nodes]


def grid_candidates(width: int, height: int, cell: int = 20, action: str = "click") -> list[str]:
    """Coordinate actions at the centre of every ``cell`` x ``cell`` pixel cell of a
    ``width`` x ``height`` screenshot (all inside the screen), row by row."""
    if action not in ELEMENT_ACTIONS:
        raise ValueError(f"action must be one of {sorted(ELEMENT_ACTIONS)}, got {action!r}")
    if width <= 0 or height <= 0 or cell <= 0:
        raise ValueError(f"width, height and cell must be positive, got {width}, {height}, {cell}")
    cls = ELEMENT_ACTIONS[action]
    return [format_action(cls(x=x, y=y)) for y in range(cell // 2, height, cell) for x in range(cell // 2, width, cell)]
