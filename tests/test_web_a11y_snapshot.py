"""The web a11y snapshot's caps, on a real page in Chromium.

The time cap bounds the walk over a huge page. It must not be spent on layout work the page left
pending: on a CPU-starved renderer that work alone can exceed the cap, and the walk then stopped at
its first node and returned an empty tree (no element to act on, no constrained-decoding candidate).
"""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from guigym.envs.web.controller import WebController, WebControllerConfig

# a checkbox first, then a mutation that leaves a large layout pending when the snapshot starts
PAGE = """<!doctype html><html><body>
<input type="checkbox" id="first"><label for="first">first</label>
<div id="bulk"></div>
<script>
window.grow = function (n) {
  const bulk = document.getElementById('bulk');
  const html = [];
  for (let i = 0; i < n; i++) html.push('<div style="display:inline-block;width:' + (i % 7 + 3) + 'px">' + i + '</div>');
  bulk.innerHTML = html.join('');
};
</script></body></html>"""


@pytest.fixture(scope="module")
def ctl(tmp_path_factory):
    page = tmp_path_factory.mktemp("a11y") / "page.html"
    page.write_text(PAGE)
    c = WebController(WebControllerConfig(viewport=(400, 300), a11y_time_cap_ms=20))
    c.open(page.as_uri())
    yield c
    c.close()


def _roles(xml: str) -> list[str]:
    return [el.tag for el in ET.fromstring(xml).iter()][1:]


def test_time_cap_is_not_spent_on_pending_layout(ctl):
    n, node_cap = 5000, 10 ** 7  # the node cap far above the page: only the time cap can stop a walk
    # how long the whole walk takes on this machine, over a laid-out page of the same size (the
    # outcome below must not depend on machine speed: a fixed 20 ms cap with the default 2,000-node
    # cap let a fast machine reach the node cap first)
    full = ctl.evaluate("([n, nodeCap]) => { grow(n); document.body.getBoundingClientRect(); "
                        "const s = window.__guigym.snapshot({nodeCap, timeCapMs: 1e9}); "
                        "return {ms: s.ms, truncated: s.truncated, nodes: s.nodes}; }", [n, node_cap])
    assert not full["truncated"] and full["nodes"] >= n and full["ms"] > 0, full
    cap = full["ms"] / 10  # a tenth of the measured walk: this cap must stop the same walk
    # grow() and the snapshot run in one task: nothing lays the new nodes out in between
    snap = ctl.evaluate("([n, nodeCap, timeCapMs]) => { grow(n); "
                        "const s = window.__guigym.snapshot({nodeCap, timeCapMs}); "
                        "return {xml: s.xml, truncated: s.truncated, reason: s.reason}; }", [n, node_cap, cap])
    # the cap stops the walk, and says so
    assert snap["truncated"] and "time cap" in snap["reason"], (snap["reason"], full["ms"])
    # ... but only after the nodes before the bulk: the checkbox is there
    assert _roles(snap["xml"])[:1] == ["checkbox"], snap["xml"][:300]


def test_node_cap_keeps_the_first_nodes_in_document_order(ctl):
    ctl.evaluate("(n) => grow(n)", 50)
    s = ctl.evaluate("() => window.__guigym.snapshot({nodeCap: 3, timeCapMs: 10000})")
    assert s["truncated"] and s["reason"] == "node cap 3 reached" and s["nodes"] == 3
    roles = _roles(s["xml"])
    assert len(roles) == 3 and roles[0] == "checkbox"
