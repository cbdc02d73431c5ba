#!/usr/bin/env python
"""Accessibility-tree observation time: guigym's WebArena builder vs a per-node CDP baseline.

Usage::

    python bench/web_obs.py                  # 200-row page (~800 AX nodes), 7 rounds
    python bench/web_obs.py --rows 500 --rounds 5 --json /tmp/web_obs.json
    python bench/web_obs.py --site map --path "/search?query=a" --libwebarena   # an embedded site's page,
                                             # and WebArena's own builder (libwebarena) on it

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

3. ``libwebarena`` (``--libwebarena``): WebArena's own builder, ``TextObervationProcessor(
   "accessibility_tree")`` from the ``libwebarena`` 0.0.5 package on PyPI (a packaging of
   web-arena-x/webarena's ``browser_env``), run in the scratch venv tests/test_webarena_differential.py
   builds (cached under ~/.cache/guigym), in its own sync-Playwright process driving the same
   Chromium binary on the same URL, ``current_viewport_only=False`` (WebArena's default). Its text is
   compared with ours line by line (difflib matching blocks) after dropping the ``[id]`` prefixes
   (both number nodes by AX node id, but the two browsers' ids differ) and reported as the share of
   its lines that ours has too. The residue is today's Chromium's ``InlineTextBox`` nodes: libwebarena
   prints them, and they push lines out of WebArena's 3-line StaticText dedup window, so it keeps
   StaticText lines that WebArena under its own pinned Chromium (and WebArena-v0) drops.

``--site NAME --path P`` measures an embedded site's page (sites/__init__.py) instead of the
generated catalogue, e.g. the map's ``/search?query=a`` (200 results, ~800 tree lines).
"""
from __future__ import annotations

import argparse
import asyncio
import difflib
import http.server
import json
import os
import re
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


LIBWEBARENA_RUNNER = """
import json, statistics, sys, time, warnings
warnings.simplefilter("ignore")
from playwright.sync_api import sync_playwright
from webarena.browser_env.processors import TextObervationProcessor
url, exe, rounds, args = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
with sync_playwright() as pw:
    browser = pw.chromium.launch(executable_path=exe, args=args)
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    page = ctx.new_page()
    page.goto(url)
    client = ctx.new_cdp_session(page)
    proc = TextObervationProcessor("accessibility_tree", False, {"width": 1280, "height": 720})
    times, text = [], ""
    for _ in range(rounds):
        t0 = time.perf_counter()
        text = proc.process(page, client)
        times.append(time.perf_counter() - t0)
    browser.close()
json.dump({"ms": 1000 * statistics.median(times), "text": text}, sys.stdout)
"""


def libwebarena(url: str, exe: str, rounds: int) -> dict[str, Any]:
    """WebArena's builder on ``url`` in the libwebarena venv (see the module docstring)."""
    import subprocess

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    from test_webarena_differential import venv_python  # noqa: E402 - builds/caches the venv

    res = subprocess.run([str(venv_python()), "-c", LIBWEBARENA_RUNNER, url, exe, str(rounds),
                          json.dumps(list(CHROMIUM_ARGS))], capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        raise RuntimeError(f"libwebarena runner failed: {res.stderr[-1500:]}")
    return json.loads(res.stdout)


def _lines(text: str) -> list[str]:
    """Tree lines without the ``[id]`` prefix, tab header dropped, and without ``InlineTextBox``
    lines: today's Chromium returns those from ``getFullAXTree`` (WebArena's pinned Chromium did
    not), libwebarena prints them under negative ids, and WebArena-v0 skips them."""
    body = text.split("\n\n", 1)[1] if text.startswith("Tab ") else text
    return [re.sub(r"\[-?\d+\] ", "", ln).rstrip() for ln in body.splitlines()
            if ln.strip() and "] InlineTextBox " not in ln]


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    sites: list[Any] = []
    tmp = None
    if args.site:
        import tempfile
        from pathlib import Path

        from guigym.envs.web.webarena.sites import start_sites

        tmp = tempfile.TemporaryDirectory(prefix="bench-web-obs-")
        sites = start_sites([args.site], Path(tmp.name))
        srv, url = None, sites[0].url + args.path
    else:
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
        exe = find_chromium(pw.chromium.executable_path)
        ours_text = r["xml"]
        await browser.close()
    m_ours, m_base = statistics.median(t_ours) * 1000, statistics.median(t_base) * 1000
    out = {"page": url if args.site else f"generated, {args.rows} rows", "tree_lines": nodes,
           "per_node_cdp_calls": calls, "rounds": args.rounds, "guigym_ms": round(m_ours, 1),
           "per_node_ms": round(m_base, 1), "ratio": round(m_base / m_ours, 1), "boxes": args.boxes,
           "load": os.getloadavg()[0]}
    if args.libwebarena:
        lw = libwebarena(url, exe, args.rounds)
        a, b = _lines(ours_text), _lines(lw["text"])
        same = sum(m.size for m in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks())
        out.update({"libwebarena_ms": round(lw["ms"], 1), "libwebarena_ratio": round(lw["ms"] / m_ours, 1),
                    "libwebarena_lines": len(b), "equal_lines": same, "equal_share": round(same / max(len(a), len(b)), 3)})
    if srv is not None:
        srv.shutdown()
    for site in sites:
        site.close()
    if tmp is not None:
        tmp.cleanup()
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--boxes", action="store_true", help="guigym also fetches element boxes (DOMSnapshot)")
    ap.add_argument("--site", default=None, help="measure this embedded site's page (sites/__init__.py)")
    ap.add_argument("--path", default="/", help="the page's path on --site")
    ap.add_argument("--libwebarena", action="store_true", help="also time WebArena's own builder (libwebarena venv)")
    ap.add_argument("--json", help="write the result here too")
    res = asyncio.run(main(ap.parse_args()))
    print(f"{'builder':<10} {'median ms':>10}")
    print(f"{'guigym':<10} {res['guigym_ms']:>10}")
    print(f"{'per-node':<10} {res['per_node_ms']:>10}   ({res['per_node_cdp_calls']} CDP calls)")
    if "libwebarena_ms" in res:
        print(f"{'libwebarena':<10} {res['libwebarena_ms']:>10}   (WebArena's TextObervationProcessor; "
              f"{res['equal_share']:.1%} of its {res['libwebarena_lines']} lines equal ours)")
    print(f"ratio per-node/guigym: {res['ratio']}x on {res['tree_lines']} tree lines of {res['page']}; "
          f"load {res['load']:.1f}")
    if "libwebarena_ms" in res:
        print(f"ratio libwebarena/guigym: {res['libwebarena_ratio']}x")
    if ap.parse_args().json:
        with open(ap.parse_args().json, "w") as fh:
            json.dump(res, fh, indent=1)
