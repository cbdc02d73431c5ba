#!/usr/bin/env python
"""Accessibility-tree observation time: guigym's WebArena builder vs a per-node CDP baseline.

Usage::

    python bench/web_obs.py                  # 200-row page (~800 AX nodes), 7 rounds
    python bench/web_obs.py --rows 500 --rounds 5 --json /tmp/web_obs.json

What runs (one headless Debian Chromium, ``/usr/bin/chromium``, one page served from loopback):

1. ``guigym``: :class:`guigym.envs.web.webarena.observation.AXTreeObserver` as WebArena-v0 uses
   it: one ``Accessibility.getFullAXTree`` (+ one ``DOMSnapshot.captureSnapshot`` for the boxes
   with ``--boxes``), then formatting in Python.
2. ``per-node``: WebArena's way of getting element boxes, re-created here (a stand-in, see
   below): the same ``getFullAXTree``, then for every node with a DOM node ``DOM.resolveNode`` +
   ``Runtime.callFunctionOn(getBoundingClientRect)``, two CDP round trips per node (WebArena
   ``browser_env/processors.py``, ``get_bounding_client_rect``, used for
   ``current_viewport_only``; webarena#66, #109), then the same formatting.

Both produce the same tree text; the ratio is per-node time / guigym time, medians over the
rounds, run alternately in one sitting.

Not yet measured here (issue 12 item 6): WebArena's own builder from the ``libwebarena`` package
in a separate venv, and the embedded sites' pages. The per-node row re-creates its CDP traffic
instead; treat the ratio as an estimate of that, not as a measurement of libwebarena.
"""
from __future__ import annotations

import argparse
import asyncio
import http.server
import json
import os
import statistics
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from guigym.envs.web.browser import CHROMIUM_ARGS, find_chromium  # noqa: E402
from guigym.envs.web.webarena.observation import AXTreeObserver, format_tree  # noqa: E402

_RECT = "function () { const r = this.nodeType === 3 ? (() => { const g = document.createRange(); " \
        "g.selectNode(this); return g.getBoundingClientRect(); })() : this.getBoundingClientRect(); " \
        "return [r.x, r.y, r.width, r.height]; }"


def serve(rows: int) -> tuple[http.server.ThreadingHTTPServer, str]:
    body = "".join(f"<tr><td>Item {i}</td><td><a href='/p/{i}'>View {i}</a></td><td><button>Buy {i}</button></td>"
                   f"<td><input aria-label='Qty {i}' value='1'></td></tr>" for i in range(rows))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>Catalogue</title></head><body>"
            f"<h1>Catalogue</h1><table>{body}</table></body></html>").encode()

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *a: Any) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}/"


class _Ep:
    def __init__(self, page: Any) -> None:
        self.tabs = [page]


async def per_node(cdp: Any) -> tuple[str, int]:
    ax = await cdp.send("Accessibility.getFullAXTree")
    calls = 1
    for n in ax["nodes"]:
        if n.get("backendDOMNodeId") is None:
            continue
        try:
            obj = await cdp.send("DOM.resolveNode", {"backendNodeId": n["backendDOMNodeId"]})
            await cdp.send("Runtime.callFunctionOn", {"objectId": obj["object"]["objectId"],
                                                      "functionDeclaration": _RECT, "returnByValue": True})
        except Exception:  # noqa: BLE001 - a node without a JS object (WebArena skips it too)
            pass
        calls += 2
    return format_tree(ax["nodes"]).text, calls


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    srv, url = serve(args.rows)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=find_chromium(pw.chromium.executable_path),
                                           args=list(CHROMIUM_ARGS))
        ctx = await browser.new_context(viewport={"width": 1280, "height": 720})
        page = await ctx.new_page()
        await page.goto(url)
        cdp = await ctx.new_cdp_session(page)
        ours = AXTreeObserver(som=args.boxes)
        ep = _Ep(page)
        t_ours, t_base, nodes, calls = [], [], 0, 0
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            r = await ours.build(ep, page, cdp)
            t_ours.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            text, calls = await per_node(cdp)
            t_base.append(time.perf_counter() - t0)
            nodes = r["nodes"]
            assert r["xml"].split("\n\n", 1)[1] == text, "the two builders disagree"
        await browser.close()
    srv.shutdown()
    m_ours, m_base = statistics.median(t_ours) * 1000, statistics.median(t_base) * 1000
    return {"rows": args.rows, "tree_lines": nodes, "per_node_cdp_calls": calls, "rounds": args.rounds,
            "guigym_ms": round(m_ours, 1), "per_node_ms": round(m_base, 1), "ratio": round(m_base / m_ours, 1),
            "boxes": args.boxes, "load": os.getloadavg()[0]}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--boxes", action="store_true", help="guigym also fetches element boxes (DOMSnapshot)")
    ap.add_argument("--json", help="write the result here too")
    res = asyncio.run(main(ap.parse_args()))
    print(f"{'builder':<10} {'median ms':>10}")
    print(f"{'guigym':<10} {res['guigym_ms']:>10}")
    print(f"{'per-node':<10} {res['per_node_ms']:>10}   ({res['per_node_cdp_calls']} CDP calls)")
    print(f"ratio per-node/guigym: {res['ratio']}x on {res['tree_lines']} tree lines; load {res['load']:.1f}")
    if ap.parse_args().json:
        with open(ap.parse_args().json, "w") as fh:
            json.dump(res, fh, indent=1)
