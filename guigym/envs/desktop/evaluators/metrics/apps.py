"""OSWorld metrics for app state: browser tabs, bookmarks and extensions, app config files and
a11y-tree checks (Thunderbird's are in :mod:`.thunderbird`, VLC's in :mod:`.vlc`).

Semantics follow OSWorld's ``desktop_env/evaluators/metrics/`` (``chrome.py`` is_expected_url_pattern_match/
is_expected_active_tab, ``vscode.py`` is_extension_installed, ``general.py``
check_accessibility_tree). Rule values are matched with OSWorld's ``_match_value_to_rule``
(:func:`guigym.envs.desktop.evaluators.metrics.utils.match_value_to_rule`). ``check_accessibility_tree``
needs lxml and cssselect (the ``desktop`` extra); a missing one raises MetricDependencyError.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

from guigym.envs.desktop.evaluators.base import METRICS, require
from guigym.envs.desktop.evaluators.metrics.utils import compare_urls
from guigym.envs.desktop.evaluators.textsim import ratio

log = logging.getLogger(__name__)

__all__ = ["is_expected_url_pattern_match", "is_extension_installed", "is_expected_active_tab",
           "check_accessibility_tree", "A11Y_NAMESPACES"]


# --------------------------------------------------------------------------- chrome.py, vscode.py


@METRICS.register("is_expected_url_pattern_match")
def is_expected_url_pattern_match(result: Union[str, Mapping[str, Any], None], rules: Mapping[str, Any],
                                  **options: Any) -> float:
    """chrome.py: every regex of ``rules["expected"]`` is found (``re.search``) in the url;
    ``result`` is the url or a dict with ``url`` (``active_tab_info``). Empty/other -> 0."""
    if not result:
        return 0.0
    if isinstance(result, str):
        url = result
    elif isinstance(result, Mapping) and "url" in result:
        url = result["url"]
    else:
        return 0.0
    if not isinstance(url, str):
        return 0.0
    return float(all(re.search(p, url) for p in rules["expected"]))


@METRICS.register("is_extension_installed")
def is_extension_installed(actual: Any, rules: Mapping[str, Any], **options: Any) -> float:
    """vscode.py: ``rules["type"]`` ``contain`` -> ``rules["expected"] in actual``;
    ``not_contain`` -> not in. ``actual`` is a string (command output) or a list (extension
    paths). Other types raise NotImplementedError naming them."""
    kind = rules.get("type")
    if actual is None:
        return 0.0
    if kind == "contain":
        return float(rules["expected"] in actual)
    if kind == "not_contain":
        return float(rules["expected"] not in actual)
    raise NotImplementedError(f"is_extension_installed: rule type {kind!r} is not supported (contain, not_contain)")


@METRICS.register("is_expected_active_tab")
def is_expected_active_tab(active_tab_info: Union[str, Mapping[str, Any], None], rule: Mapping[str, Any],
                           **options: Any) -> float:
    """chrome.py: with ``rule["type"] == "url"``, the active tab's url (a string, or the ``url``
    of an ``active_tab_info`` dict) equals ``rule["url"]`` under OSWorld's ``compare_urls``
    (scheme default http, no ``www``, no public suffix, ``/`` path ignored). Other types -> 0."""

    if not active_tab_info:
        return 0.0
    if rule.get("type") != "url":
        log.info("is_expected_active_tab: unknown rule type %r", rule.get("type"))
        return 0.0
    actual = active_tab_info.get("url") if isinstance(active_tab_info, Mapping) else active_tab_info
    return float(compare_urls(rule["url"], actual))


# --------------------------------------------------------------------------- general.py

#: a11y XML namespaces by OS, as OSWorld's ``_accessibility_ns_map`` (our server emits "ubuntu")
A11Y_NAMESPACES: dict[str, dict[str, str]] = {
    osname: {p: f"https://accessibility.{osname}.example.org/ns/{suffix}" for p, suffix in (
        ("st", "state"), ("attr", "attributes"), ("cp", "component"), ("doc", "document"),
        ("docattr", "document/attributes"), ("txt", "text"), ("val", "value"), ("act", "action"))}
    for osname in ("ubuntu", "windows", "macos")
}
A11Y_NAMESPACES["windows"]["class"] = "https://accessibility.windows.example.org/ns/class"
A11Y_NAMESPACES["macos"]["role"] = "https://accessibility.macos.example.org/ns/role"
del A11Y_NAMESPACES["macos"]["docattr"]  # upstream's macos map has no docattr


@METRICS.register("check_accessibility_tree")
def check_accessibility_tree(result: Optional[str], rules: Sequence[Mapping[str, Any]], osname: str = "ubuntu",
                             **options: Any) -> float:
    """general.py: for each rule select elements of the a11y XML ``result`` by ``xpath`` (wins)
    or by the CSS ``selectors`` joined with ", " (namespace prefixes ``st|``, ``attr|``...).
    No element -> 0. With ``text``: the rule scores the best element, 1/0 for ``exact`` (the
    default) or ``ratio/100`` otherwise, on the element's own text. The score is the product
    over rules. A rule with neither xpath nor selectors raises ValueError, as upstream."""
    if not result:
        return 0.0
    etree = require("lxml.etree", "lxml", "check_accessibility_tree")
    ns = A11Y_NAMESPACES[osname]
    try:
        root = etree.fromstring(result.encode("utf-8") if isinstance(result, str) else result)
    except etree.XMLSyntaxError:
        return 0.0
    total = 1.0
    for r in rules:
        if "xpath" in r:
            elements = root.xpath(r["xpath"], namespaces=ns)
        elif "selectors" in r:
            require("cssselect", "cssselect", "check_accessibility_tree")
            from lxml.cssselect import CSSSelector

            elements = CSSSelector(", ".join(r["selectors"]), namespaces=ns)(root)
        else:
            raise ValueError("check_accessibility_tree: a rule needs 'xpath' or 'selectors'")
        elements = [e for e in elements if hasattr(e, "text")] if isinstance(elements, list) else []
        if not elements:
            log.info("check_accessibility_tree: nothing matches %s", r.get("xpath", r.get("selectors")))
            return 0.0
        if "text" in r:
            want = r["text"]
            if r.get("exact", True):
                score = max(float((e.text or None) == want) for e in elements)
            else:
                score = max((ratio(want, e.text) / 100.0 if e.text else 0.0) for e in elements)
        else:
            score = 1.0
        total *= score
    return float(total)


@METRICS.register("is_expected_tabs")
def is_expected_tabs(open_tabs: Optional[Sequence[Mapping[str, Any]]], rule: Mapping[str, Any], **options: Any) -> float:
    """chrome.py ``is_expected_tabs``: with ``rule["type"] == "url"``, 1 when the open tabs'
    urls and ``rule["urls"]`` have the same length and every expected url equals (OSWorld's
    ``compare_urls``) some open tab's url; any other type scores 0 (upstream logs it)."""

    if rule.get("type") != "url":
        log.warning("is_expected_tabs: unknown rule type %r", rule.get("type"))
        return 0.0
    if open_tabs is None:  # the getter found no browser
        return 0.0
    actual = [str(t.get("url", "")) for t in open_tabs]
    expected = list(rule.get("urls", []))
    if len(actual) != len(expected):
        return 0.0
    return float(all(any(compare_urls(want, got) for got in actual) for want in expected))


def _bar_children(bookmarks: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    return [b for b in bookmarks.get("bookmark_bar", {}).get("children", []) if b.get("type") == kind]


@METRICS.register("is_expected_bookmarks")
def is_expected_bookmarks(bookmarks: Any, rule: Mapping[str, Any], **options: Any) -> float:
    """chrome.py ``is_expected_bookmarks`` over the ``roots`` of Chromium's ``Bookmarks`` JSON (the
    ``bookmarks`` getter). ``rule["type"]``:

    * ``bookmark_bar_folders_names``: the set of folder names on the bookmark bar == ``names``;
    * ``bookmark_bar_websites_urls``: the set of url bookmarks on the bar == ``urls``;
    * ``liked_authors_websites_urls``: a bar folder named "Liked Authors" whose url set equals one
      choice per entry of ``urls`` (an entry is a url or a list of acceptable urls).

    No bookmarks: 0. An unknown type raises ValueError (upstream: TypeError)."""
    import itertools

    if not bookmarks:
        return 0.0
    kind = rule.get("type")
    if kind == "bookmark_bar_folders_names":
        return float({b.get("name") for b in _bar_children(bookmarks, "folder")} == set(rule["names"]))
    if kind == "bookmark_bar_websites_urls":
        return float({b.get("url") for b in _bar_children(bookmarks, "url")} == set(rule["urls"]))
    if kind == "liked_authors_websites_urls":
        folder = next((b for b in _bar_children(bookmarks, "folder") if b.get("name") == "Liked Authors"), None)
        if folder is None:
            return 0.0
        have = {b.get("url") for b in folder.get("children", []) if b.get("type") == "url"}
        choices = [[u] if isinstance(u, str) else list(u) for u in rule["urls"]]
        return float(any(set(combo) == have for combo in itertools.product(*choices)))
    raise ValueError(f"is_expected_bookmarks: rule type {kind!r} is not one of bookmark_bar_folders_names, "
                     "bookmark_bar_websites_urls, liked_authors_websites_urls")


@METRICS.register("compare_config")
def compare_config(actual: Optional[str], rules: Mapping[str, Any], **options: Any) -> float:
    """vscode.py ``compare_config``: 1 when the file's whole text equals ``rules["expected"]``
    exactly (no stripping). A missing file scores 0."""
    if not actual:
        return 0.0
    try:
        with open(actual, encoding="utf-8") as f:
            return float(f.read() == rules["expected"])
    except (OSError, UnicodeDecodeError):
        return 0.0
