"""WebArena's accessibility-tree text: format rules on hand-made AX nodes, then on real Chromium
pages (one env, one browser for the module): a >= 500-node page, the node cap, the one-pass
property (CDP calls per observation do not grow with the page), set-of-marks.

Expected lines follow WebArena's published format (browser_env/processors.py): ``[id] role
'name' prop: value``, tab-indented per kept ancestor, the skip rules for empty generic-like
nodes, and the StaticText dedup against the three previous lines.
"""
from __future__ import annotations

import itertools
import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import guigym  # noqa: F401 - registers the envs
from guigym.envs.web.webarena.observation import (
    AXTreeObserver, bounds_from_snapshot, format_tree, tab_header,
)
from web_helpers import assert_fast_png_is_lossless
from webarena_site import BIG_ROWS, ShopSite, tasks


def ax(node_id, role, name=None, children=(), props=None, backend=True, ignored=False, value=None, internal=False):
    n = {"nodeId": str(node_id), "ignored": ignored,
         "role": {"type": "internalRole" if internal else "role", "value": role},
         "childIds": [str(c) for c in children]}
    if name is not None:
        n["name"] = {"type": "computedString", "value": name}
    if props is not None:
        n["properties"] = [{"name": k, "value": {"type": "x", "value": v}} for k, v in props.items()]
    if backend:
        n["backendDOMNodeId"] = int(node_id) + 1000
    if value is not None:
        n["value"] = {"type": "string", "value": value}
    return n


PAGE = [
    ax(1, "RootWebArea", "Shop", [2, 20, 30, 40, 50, 60, 70], props={"focused": True, "focusable": True}, internal=True),
    ax(2, "generic", "", [3, 5]),                      # empty generic: dropped, children move up
    ax(3, "link", "Blue Mug", [4], props={"focusable": True}),
    ax(4, "StaticText", "Blue Mug", internal=True),     # repeats the link's name: dropped
    ax(5, "StaticText", "In stock", internal=True),
    ax(20, "list", "", [21, 23]),                        # empty list: dropped
    ax(21, "listitem", "", [22], props={"level": 1}),    # listitem, blank name: dropped even with a property
    ax(22, "StaticText", "first", internal=True),
    ax(23, "listitem", "Named item"),                    # a named listitem stays
    ax(30, "heading", "", props={"level": 2}),          # heading is not a skipped role: kept
    ax(40, "textbox", "Email", props={"required": False, "editable": "plaintext", "invalid": "false"}),
    ax(50, "none", None, [51], ignored=True),            # ignored: no line, child kept
    ax(51, "button", "Go", props={"focusable": True, "focused": True}),
    ax(60, "img", "", []),                               # empty img: dropped
    ax(70, "paragraph", "", [71]),
    ax(71, "InlineTextBox", "no dom node", backend=False, internal=True),
]


def test_webarena_lines_skip_rules_and_static_text_dedup():
    tree = format_tree(PAGE)
    assert tree.text.split("\n") == [
        "[1] RootWebArea 'Shop' focused: True",
        "\t[3] link 'Blue Mug'",
        "\t[5] StaticText 'In stock'",
        "\t[22] StaticText 'first'",
        "\t[23] listitem 'Named item'",
        "\t[30] heading ''",
        "\t[40] textbox 'Email' required: False",
        "\t[51] button 'Go' focused: True",
    ]
    assert not tree.truncated and tree.nodes == 8
    assert tree.ids["51"] == 1051 and "4" not in tree.ids  # ids map to DOM backend ids; dropped lines have none


def test_static_text_dedup_looks_back_three_lines_only():
    nodes = [ax(1, "RootWebArea", "R", [2, 3, 4, 5, 6, 7, 8], internal=True),
             ax(2, "link", "Orders"), ax(3, "button", "Apple"), ax(4, "button", "Berry"),
             ax(5, "StaticText", "Orders", internal=True),   # 'Orders' is 3 kept lines up: dropped
             ax(6, "button", "Cherry"), ax(7, "button", "Damson"),
             ax(8, "StaticText", "Apple", internal=True)]    # 'Apple' is 4 kept lines up: kept
    lines = format_tree(nodes).text.split("\n")
    assert "\t[5] StaticText 'Orders'" not in lines
    assert lines[-1] == "\t[8] StaticText 'Apple'"


def test_tab_header():
    assert tab_header(["Shop", "Search"], 1) == "Tab 0: Shop | Tab 1 (current): Search"


def test_node_cap_and_time_cap_truncate_and_say_so():
    n = 600
    nodes = [ax(1, "RootWebArea", "R", range(2, n + 2), internal=True)] + [ax(i, "button", f"b{i}") for i in range(2, n + 2)]
    full = format_tree(nodes)
    assert full.nodes == n + 1 and not full.truncated
    capped = format_tree(nodes, node_cap=100)
    assert capped.truncated and capped.nodes == 100 and "node cap" in capped.reason
    ticks = itertools.count()
    timed = format_tree(nodes, time_cap_ms=50, clock=lambda: next(ticks) / 100)  # 10 ms pass per clock read
    assert timed.truncated and "time cap" in timed.reason and 0 < timed.nodes < n


def test_browsergym_variant():
    nodes = [ax(1, "RootWebArea", "Shop", [2, 4, 5], internal=True),
             ax(2, "link", "Blue Mug", [3]), ax(3, "StaticText", "Blue Mug", internal=True),
             ax(4, "textbox", "Email", props={"focused": True, "required": False, "editable": "plaintext"}, value="a@b"),
             ax(5, "generic", "", [6]), ax(6, "LineBreak", "\n", internal=True)]
    assert format_tree(nodes, style="browsergym").text.split("\n") == [
        "[1] RootWebArea 'Shop'",
        "\t[2] link 'Blue Mug'",
        "\t[4] textbox 'Email', value='a@b', focused",
    ]


def test_viewport_only_keeps_nodes_mostly_on_screen():
    nodes = [ax(1, "RootWebArea", "R", [2, 3, 4], internal=True),
             ax(2, "button", "on"), ax(3, "button", "half"), ax(4, "button", "below")]
    bounds = {1002: (10, 10, 50, 20), 1003: (10, 90, 50, 20), 1004: (10, 500, 50, 20)}
    text = format_tree(nodes, bounds=bounds, viewport_only=(200, 100)).text
    assert "'on'" in text and "'half'" not in text and "'below'" not in text  # 'half' is 50 % on screen


# ---- real Chromium --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def site():
    s = ShopSite()
    yield s
    s.close()


@pytest.fixture(scope="module")
def env(site):
    e = gym.make("WebArena-v0", tasks=tasks()[:1], urls={"shopping": site.url}, som=True)
    yield e.unwrapped
    e.close()


def test_real_page_text(env, site):
    obs, info = env.reset()
    lines = obs["a11y"].split("\n")
    assert lines[0] == "Tab 0 (current): One Stop Market" and lines[1] == ""
    assert re.fullmatch(r"\[\d+\] RootWebArea 'One Stop Market' focused: True.*", lines[2])
    assert any(re.fullmatch(rf"\t\[\d+\] link 'Blue Mug' url: {re.escape(site.url)}/product/1", ln) for ln in lines)
    assert "StaticText 'Blue Mug'" not in obs["a11y"]      # the link's own text, deduplicated
    assert " generic ''" not in obs["a11y"]                # the empty div/span nest
    assert info["a11y_nodes"] == len(lines) - 2 and info["a11y_truncated"] is False


def test_a_500_node_page_in_full_and_capped(env, site):
    obs, _, _, _, info = env.step(f"goto [{site.url}/big]")
    assert info["a11y_nodes"] >= 500 and not info["a11y_truncated"]
    assert all(f"button 'Buy {i}'" in obs["a11y"] for i in range(BIG_ROWS))
    cap = env.observer.node_cap
    env.observer.node_cap = 100
    try:
        obs, _, _, _, info = env.step("scroll [down]")
    finally:
        env.observer.node_cap = cap
    assert info["a11y_truncated"] is True and "node cap" in info["a11y_truncation_reason"]
    assert info["a11y_nodes"] <= 100 and "Buy 150" not in obs["a11y"]


def test_one_observation_is_a_fixed_number_of_browser_calls(env, site, monkeypatch):
    """A per-node builder (WebArena's: one CDP call per node for boxes) would make the big page
    cost hundreds of calls more than the small one."""
    from playwright._impl.cdp_session import CDPSession  # every CDP call, with or without browser.cdp_send
    from playwright.async_api import Page

    calls: list[str] = []
    send, evaluate = CDPSession.send, Page.evaluate

    async def counting_send(self, method, params=None, timeout=None):
        calls.append(method)
        return await send(self, method, params, timeout)

    async def counting_evaluate(self, *a, **kw):
        calls.append("evaluate")
        return await evaluate(self, *a, **kw)

    def count(url: str) -> list[str]:
        env.step(f"goto [{url}]")
        calls.clear()
        monkeypatch.setattr(CDPSession, "send", counting_send)
        monkeypatch.setattr(Page, "evaluate", counting_evaluate)
        try:
            o = env.controller.observe()
        finally:
            monkeypatch.setattr(CDPSession, "send", send)
            monkeypatch.setattr(Page, "evaluate", evaluate)
        return list(calls), o.a11y_nodes

    env.reset()
    small, small_nodes = count(f"{site.url}/product/1")
    big, big_nodes = count(f"{site.url}/big")
    assert big_nodes >= 500 and small_nodes < 20
    assert sorted(big) == sorted(small), (small, big)
    assert big.count("Accessibility.getFullAXTree") == 1 and len(big) <= 5, big


def test_cdp_send_returns_what_playwrights_public_send_returns(env, site):
    """browser.cdp_send skips the public API's copy of the result (its cost grows with the page);
    the result must be the same, by either of its paths."""
    import types

    from guigym.envs.web.browser import cdp_send

    env.reset()
    env.step(f"goto [{site.url}/big]")
    ctl = env.controller

    async def three_ways() -> tuple[Any, Any, Any]:
        cdp = ctl.episode.cdps[ctl.episode.active]
        assert hasattr(cdp, "_impl_obj")  # this Playwright has it: the fast path is taken
        fast = await cdp_send(cdp, "Accessibility.getFullAXTree")
        public = await cdp.send("Accessibility.getFullAXTree")
        fallback = await cdp_send(types.SimpleNamespace(send=cdp.send), "Accessibility.getFullAXTree")
        return fast, public, fallback

    fast, public, fallback = ctl.runtime.run(three_ways(), 30, "reading the tree three ways")
    assert len(fast["nodes"]) >= 500
    assert fast == public == fallback


@pytest.mark.parametrize("refusals", [2, 99])
def test_a_refused_capture_is_retried_then_falls_back(env, site, monkeypatch, refusals):
    """Chromium answers "Unable to capture screenshot" when the compositor has no frame yet (seen
    under CI load right after a navigation): a few refusals are retried, a persistent one falls
    back to Playwright's capture; either way the observation is the page, not EnvInfraError."""
    from playwright.async_api import CDPSession, Error

    env.reset()
    want = env.controller.observe().screenshot
    send, refused = CDPSession.send, []

    async def refusing_send(self, method, params=None):
        if method == "Page.captureScreenshot" and len(refused) < refusals:
            refused.append(method)
            raise Error("Protocol error (Page.captureScreenshot): Unable to capture screenshot")
        return await send(self, method, params)

    monkeypatch.setattr(CDPSession, "send", refusing_send)
    got = env.controller.observe().screenshot
    monkeypatch.setattr(CDPSession, "send", send)
    assert len(refused) == min(refusals, 4)  # the first try and three retries at most
    assert got.shape == want.shape and np.abs(got.astype(int) - want.astype(int)).mean() < 1.0


def test_other_capture_errors_stay_infrastructure_failures(env, site, monkeypatch):
    from playwright.async_api import CDPSession, Error

    from guigym.core.errors import EnvInfraError

    env.reset()
    send = CDPSession.send

    async def broken_send(self, method, params=None):
        if method == "Page.captureScreenshot":
            raise Error("Protocol error (Page.captureScreenshot): Target closed")
        return await send(self, method, params)

    monkeypatch.setattr(CDPSession, "send", broken_send)
    with pytest.raises(EnvInfraError, match="Target closed"):
        env.controller.observe()
    monkeypatch.setattr(CDPSession, "send", send)


def test_fast_png_screenshot_has_the_plain_encoders_pixels(env, site):
    """WebArena-v0 captures with Chromium's fast PNG encoder (quicker at 1280x720); it is
    lossless, so the observation is the one the plain encoder gives."""
    obs, _, _, _, _ = env.step(f"goto [{site.url}/big]")
    assert env.controller.config.fast_png
    assert_fast_png_is_lossless(env.controller, (720, 1280, 3))


def test_set_of_marks_boxes_match_the_page(env, site):
    env.reset()
    obs, *_ = env.step(f"goto [{site.url}/product/1]")
    button = re.search(r"\[(\d+)\] button 'Add to Cart'", obs["a11y"]).group(1)
    rect = env.controller.evaluate("(() => { const r = document.querySelector('button').getBoundingClientRect();"
                                   " return [r.x, r.y, r.width, r.height]; })()")
    x, y, w, h = (int(v) for v in rect)
    som, shot = obs["som"], obs["screenshot"]
    assert som.shape == shot.shape and som.dtype == np.uint8
    red = lambda px: px[0] > 200 and px[1] < 60 and px[2] < 60  # noqa: E731
    assert red(som[y + h // 2, x]) and not red(shot[y + h // 2, x])  # outline on the left edge
    assert red(som[y + h - 1, x + w // 2])  # bottom edge
    assert np.array_equal(som[y + 3:y + h - 3, x + w - 20:x + w - 3], shot[y + 3:y + h - 3, x + w - 20:x + w - 3])


def test_browsergym_style_on_a_real_page(env, site):
    env.reset()
    env.step(f"goto [{site.url}/search?q=tea]")
    bg = AXTreeObserver(style="browsergym")
    ctl = env.controller
    page = ctl.page
    text = ctl.runtime.run(bg.build(ctl.episode, page, ctl.episode.cdps[page]), 10, "bid tree")["xml"]
    assert re.search(r"\n\t+\[\d+\] textbox 'Search query'", text), text
    assert re.search(r"\n\t+\[\d+\] button 'Go'", text) and "StaticText 'Go'" not in text


def test_bounds_from_snapshot_subtracts_scroll():
    snap = {"documents": [{"nodes": {"backendNodeId": [5, 6]}, "scrollOffsetX": 0, "scrollOffsetY": 300,
                           "layout": {"nodeIndex": [0, 1], "bounds": [[0, 0, 100, 1000], [10, 320, 40, 20]]}}]}
    assert bounds_from_snapshot(snap) == {5: (0, -300, 100, 1000), 6: (10, 20, 40, 20)}
