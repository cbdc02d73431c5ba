"""OSWorld Chrome metrics (``desktop_env/evaluators/metrics/chrome.py``).

Inputs are what the Chrome getters return (getters/chrome.py, getters/browser.py): cookie and
history rows, ``Local State`` flags, ``webkit.webprefs``, extension names, a tab's
``{"title", "url", "content"}``, ``{file name: text}`` of desktop shortcuts, HTML file paths.
A None input (the getter found nothing) scores 0. Rule types OSWorld does not support raise
TypeError naming them, as upstream.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

from guigym.envs.desktop.evaluators.base import METRICS, require
from guigym.envs.desktop.evaluators.metrics.utils import compare_urls

log = logging.getLogger(__name__)

__all__ = ["html_nodes"]


def _rule_type(rule: Mapping[str, Any], metric: str, supported: str) -> None:
    if rule.get("type") != supported:
        raise TypeError(f"{metric}: rule type {rule.get('type')!r} is not supported ({supported})")


@METRICS.register("is_cookie_deleted")
def is_cookie_deleted(cookie_data: Optional[Sequence[Sequence[Any]]], rule: Mapping[str, Any],
                      **options: Any) -> float:
    """``rule = {"type": "domains", "domains": [".amazon.com", ...]}``: 1 when no cookie row's
    ``host_key`` (column 1 of Chrome's ``cookies`` table) equals one of the domains under
    OSWorld's ``compare_urls``; 0 when one does. No cookie database (None) scores 0."""

    _rule_type(rule, "is_cookie_deleted", "domains")
    if cookie_data is None:
        return 0.0
    hosts = [row[1] for row in cookie_data if len(row) > 1 and isinstance(row[1], str)]
    for domain in rule["domains"]:
        if any(compare_urls(domain, host) for host in hosts):
            return 0.0
    return 1.0


@METRICS.register("check_history_deleted")
def check_history_deleted(history_data: Optional[Sequence[Sequence[Any]]], rule: Mapping[str, Any],
                          **options: Any) -> float:
    """``rule = {"type": "keywords", "keywords": [...]}``: 1 when no history url (column 0 of
    the ``history`` getter's rows) contains any keyword (case-sensitive substring), else 0."""
    _rule_type(rule, "check_history_deleted", "keywords")
    if history_data is None:
        return 0.0
    urls = [str(row[0]) for row in history_data if len(row) > 0 and row[0] is not None]
    return float(not any(k in url for k in rule["keywords"] for url in urls))


@METRICS.register("check_enabled_experiments")
def check_enabled_experiments(enabled_experiments: Optional[Sequence[str]], rule: Mapping[str, Any],
                              **options: Any) -> float:
    """``rule = {"type": "names", "names": [...]}``: 1 when the enabled flags, each without its
    ``@<option>`` suffix, are exactly ``names`` in the same order."""
    _rule_type(rule, "check_enabled_experiments", "names")
    if enabled_experiments is None:
        return 0.0
    names = [str(flag).split("@")[0] for flag in enabled_experiments]
    return float(names == list(rule["names"]))


@METRICS.register("check_font_size")
def check_font_size(font_size: Optional[Mapping[str, Any]], rule: Mapping[str, Any], **options: Any) -> float:
    """``font_size`` is ``webkit.webprefs``; its ``default_font_size`` (Chrome's default 16 when
    absent: Chrome stores only changed values; OSWorld raises KeyError) is compared with
    ``rule``: ``{"type": "value", "value": v}`` (equal) or ``{"type": "range", "min", "max"}``
    (strictly between)."""
    from guigym.envs.desktop.evaluators.getters.chrome import CHROME_DEFAULT_FONT_SIZE

    if font_size is None:
        return 0.0
    size = font_size.get("default_font_size", CHROME_DEFAULT_FONT_SIZE)
    kind = rule.get("type")
    if kind == "value":
        return float(size == rule["value"])
    if kind == "range":
        return float(rule["min"] < size < rule["max"])
    raise TypeError(f"check_font_size: rule type {kind!r} is not supported (value, range)")


@METRICS.register("is_expected_search_query")
def is_expected_search_query(active_tab_info: Optional[Mapping[str, Any]], rules: Mapping[str, Any],
                             **options: Any) -> float:
    """1 when the regex ``rules["expect"]["pattern"]`` matches (``re.search``) the tab's
    ``url``; 0 otherwise or without a tab."""
    url = active_tab_info.get("url") if isinstance(active_tab_info, Mapping) else None
    if not isinstance(url, str):
        return 0.0
    return float(re.search(rules["expect"]["pattern"], url) is not None)


@METRICS.register("is_expected_installed_extensions")
def is_expected_installed_extensions(installed_extensions: Optional[Sequence[str]], expected: Mapping[str, Any],
                                     **options: Any) -> float:
    """1 when every name in ``expected["expected"]`` is among the installed extension names
    (more installed is fine)."""
    if installed_extensions is None or isinstance(installed_extensions, str):
        return 0.0
    return float(set(expected["expected"]) <= set(installed_extensions))


@METRICS.register("is_added_to_steam_cart")
def is_added_to_steam_cart(active_tab_info: Optional[Mapping[str, Any]], rule: Mapping[str, Any],
                           **options: Any) -> float:
    """1 when every string of ``rule["items"]`` occurs in the page's HTML (``content`` of
    ``page_info``), else 0."""
    content = active_tab_info.get("content") if isinstance(active_tab_info, Mapping) else None
    if not isinstance(content, str):
        return 0.0
    return float(all(item in content for item in rule["items"]))


@METRICS.register("is_shortcut_on_desktop")
def is_shortcut_on_desktop(shortcuts: Optional[Mapping[str, str]], rule: Mapping[str, Any], **options: Any) -> float:
    """``rule = {"type": "name", "name": N}``: 1 when some desktop shortcut's text has the line
    ``Name=N`` (followed by a newline, as OSWorld), else 0. Other types (``url``, ``id``) raise
    TypeError, as upstream."""
    _rule_type(rule, "is_shortcut_on_desktop", "name")
    if not shortcuts:
        return 0.0
    line = f"Name={rule['name']}\n"
    return float(any(isinstance(text, str) and line in text for text in shortcuts.values()))


# --------------------------------------------------------------------------- compare_htmls

#: attributes BeautifulSoup splits into lists of words (so ``class="a  b"`` equals ``"a b"``)
_MULTI_VALUED = frozenset({"class", "rel", "rev", "accept-charset", "headers", "accesskey", "dropzone"})
#: tags whose text BeautifulSoup does not count as the text of their ancestors
_NOT_TEXT = frozenset({"script", "style", "template"})
#: tags inside which BeautifulSoup keeps whitespace-only strings as they are
_PRESERVE_WS = frozenset({"pre", "textarea"})
_ASCII_SPACE = frozenset(" \n\t\x0c\r")


@dataclass(frozen=True)
class HtmlTag:
    """One element as OSWorld's compare_htmls sees it: name, stripped text, attributes."""

    name: str
    text: str
    attrs: tuple[tuple[str, Union[str, tuple[str, ...]]], ...]


def _is_element(node: Any) -> bool:
    return isinstance(node.tag, str)  # comments and processing instructions have callable tags


def _bs4_string(text: str, preserve: bool) -> str:
    """A text node as BeautifulSoup stores it: a string of ASCII whitespace only becomes
    ``"\\n"`` (when it has a newline) or ``" "``, except inside pre/textarea."""
    if preserve or not all(c in _ASCII_SPACE for c in text):
        return text
    return "\n" if "\n" in text else " "


def _own_text(el: Any) -> str:
    """BeautifulSoup's ``tag.text``: the element's descendant text, without comments and, below
    the element, without the content of script/style/template elements."""
    parts: list[str] = []

    def walk(node: Any, top: bool, preserve: bool) -> None:
        skip = not top and node.tag in _NOT_TEXT
        inner = preserve or node.tag in _PRESERVE_WS
        if not skip and node.text and _is_element(node):
            parts.append(_bs4_string(node.text, inner))
        if not skip:
            for child in node:
                walk(child, False, inner)
        if not top and node.tail:
            parts.append(_bs4_string(node.tail, preserve))

    walk(el, True, any(a.tag in _PRESERVE_WS for a in el.iterancestors()))
    return "".join(parts)


def _attrs(el: Any) -> tuple[tuple[str, Union[str, tuple[str, ...]]], ...]:
    out: dict[str, Union[str, tuple[str, ...]]] = {}
    for key, value in el.attrib.items():
        out[key] = tuple(value.split()) if key in _MULTI_VALUED else value
    return tuple(sorted(out.items()))


def html_nodes(data: bytes) -> Iterator[Union[HtmlTag, str]]:
    """The nodes of an HTML document in BeautifulSoup's ``recursiveChildGenerator`` order:
    the doctype, then each element (as :class:`HtmlTag`) followed by its text, its children and
    each child's tail text; comments and processing instructions as their text."""
    html = require("lxml.html", "lxml", "compare_htmls")
    etree = require("lxml.etree", "lxml", "compare_htmls")
    if not data.strip():
        return
    try:
        root = html.document_fromstring(data)
    except (etree.ParserError, ValueError):
        return
    doctype = root.getroottree().docinfo.doctype
    if doctype and re.search(rb"<!doctype", data, re.IGNORECASE):  # lxml adds one when there is none
        yield doctype

    def walk(node: Any, preserve: bool) -> Iterator[Union[HtmlTag, str]]:
        if _is_element(node):
            inner = preserve or node.tag in _PRESERVE_WS
            yield HtmlTag(str(node.tag).lower(), _own_text(node).strip(), _attrs(node))
            if node.text:
                yield _bs4_string(node.text, inner)
            for child in node:
                yield from walk(child, inner)
                if child.tail:
                    yield _bs4_string(child.tail, inner)
        else:
            yield _bs4_string(node.text or "", preserve)

    yield from walk(root, False)


@METRICS.register("compare_htmls")
def compare_htmls(html_path1: Optional[str], html_path2: Optional[str], **options: Any) -> float:
    """1 when the two HTML files' nodes (:func:`html_nodes`) agree pairwise: elements by name,
    stripped text and attributes, text nodes exactly. As OSWorld (``zip`` of both walks), only
    as many nodes as the shorter document has are compared. Files must be UTF-8.

    ``ignore_sdnum`` (OSWorld 1.0.2): elements whose attributes differ only in LibreOffice's
    number-format attribute ``sdnum`` match."""
    if not html_path1 or not html_path2:
        return 0.0
    docs = []
    for path in (html_path1, html_path2):
        with open(path, "rb") as f:
            data = f.read()
        data.decode("utf-8")  # OSWorld reads both as UTF-8 text and fails on anything else
        docs.append(data)
    ignore_sdnum = bool(options.get("ignore_sdnum"))
    for a, b in zip(html_nodes(docs[0]), html_nodes(docs[1])):
        if ignore_sdnum and isinstance(a, HtmlTag) and isinstance(b, HtmlTag):
            a, b = (HtmlTag(t.name, t.text, tuple(kv for kv in t.attrs if kv[0] != "sdnum")) for t in (a, b))
        if a != b:
            log.info("compare_htmls: %r differs from %r", a, b)
            return 0.0
    return 1.0
