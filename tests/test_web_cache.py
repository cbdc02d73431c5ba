"""Chromium's HTTP cache under the URL policy (controller.py, policy_proxy.py).

The policy is enforced by a per-context loopback proxy instead of Playwright's request routing,
which turns the cache off in every context that has a route (playwright#7220). These tests count
the requests that reach the server, so they break if the cache were turned off again; none
measures time.
"""
from __future__ import annotations

import asyncio
from typing import Iterator

import pytest
from web_helpers import LoopbackSite, Page

from guigym.envs.web.controller import WebController, WebControllerConfig
from guigym.envs.web.policy_proxy import PolicyProxy, is_navigation
from guigym.envs.web.url_policy import UrlPolicy

CSS = "body { background: rgb(1, 2, 3); }"
PAGE = '<!doctype html><link rel="stylesheet" href="/static/site.css"><p>{}</p>'


def _pages(path: str) -> Page:
    """Two pages (any path) sharing one stylesheet that may be cached for an hour."""
    if path == "/static/site.css":
        return 200, {"Content-Type": "text/css", "Cache-Control": "max-age=3600"}, CSS
    return 200, {"Cache-Control": "no-store"}, PAGE.format(path)


@pytest.fixture(scope="module")
def site() -> Iterator[LoopbackSite]:
    s = LoopbackSite(_pages)
    yield s
    s.close()


@pytest.fixture()
def ctl() -> Iterator[WebController]:
    c = WebController(WebControllerConfig(viewport=(400, 300)))
    yield c
    c.close()


def _css_requests(site: LoopbackSite) -> int:
    return site.hits.count("/static/site.css")


def _background(ctl: WebController) -> str:
    return ctl.evaluate("getComputedStyle(document.body).backgroundColor")


def test_a_second_page_of_the_episode_takes_the_stylesheet_from_the_cache(site, ctl):
    before = _css_requests(site)
    ctl.open(site.origin + "/one")
    assert _css_requests(site) == before + 1
    ctl.runtime.run(ctl.page.goto(site.origin + "/two", wait_until="load"), 20, "opening page two")
    assert "/two" in ctl.page.url and _background(ctl) == "rgb(1, 2, 3)"
    assert _css_requests(site) == before + 1, "page two asked the server for the stylesheet again"
    sizes = ctl.evaluate("performance.getEntriesByType('resource').map(e => e.transferSize)")
    assert sizes == [0], sizes  # served by the cache, nothing transferred


def test_each_episode_starts_with_an_empty_cache(site, ctl):
    ctl.open(site.origin + "/one")
    before = _css_requests(site)
    ctl.open(site.origin + "/two")  # a new episode: a fresh context
    assert _css_requests(site) == before + 1


def test_the_prewarmed_context_serves_the_start_page_its_static_files_from_the_cache(site, ctl):
    ctl.open(site.origin + "/one")
    assert ctl.static_files() == [site.origin + "/static/site.css"]  # the page's stylesheet, not the page
    policy = UrlPolicy.for_start_url(site.origin + "/two")
    ctl.prewarm_blank((policy, site.origin + "/two", ctl.static_files()))
    ctl._queue[0][1].result(timeout=60)
    warmed = _css_requests(site)
    pages = [h for h in site.hits if not h.startswith("/static/")]
    ctl.open(site.origin + "/two", policy)
    assert _css_requests(site) == warmed and _background(ctl) == "rgb(1, 2, 3)"
    # no page of the site was loaded ahead: the warm-up fetched the static file only
    assert [h for h in site.hits if not h.startswith("/static/")] == pages + ["/two"]
    # and the episode's tab has no history of the warm-up
    assert ctl.evaluate("history.length") == 2  # its blank start + the start page


def test_the_warm_up_fetches_only_what_the_next_policy_allows(site, ctl):
    other = LoopbackSite(_pages)
    try:
        policy = UrlPolicy.for_start_url(site.origin + "/one")  # the other site is not allowed
        ctl.runtime.ensure_started()
        ctl.prewarm_blank((policy, site.origin + "/one", [site.origin + "/static/site.css",
                                                          other.origin + "/static/site.css"]))
        ctl._queue[0][1].result(timeout=60)
        assert other.hits == []
    finally:
        other.close()


@pytest.mark.parametrize("headers, navigation", [
    ({b"sec-fetch-mode": b"navigate"}, True),
    ({b"sec-fetch-mode": b"no-cors"}, False),
    ({b"upgrade-insecure-requests": b"1"}, True),  # a host that gets no Sec-Fetch-* headers
    ({}, False),
])
def test_navigations_are_told_from_subresources_by_their_headers(headers, navigation):
    assert is_navigation(headers) is navigation


def test_the_proxy_forwards_what_the_policy_allows_and_refuses_the_rest_uncacheably(site):
    refused: list[tuple[str, bool]] = []
    taken: list[tuple[frozenset[str], bool]] = []

    async def go() -> list[bytes]:
        proxy = await PolicyProxy(UrlPolicy.for_start_url(site.origin + "/one"),
                                  on_refused=lambda url, nav: refused.append((url, nav))).start()

        async def ask(raw: str) -> bytes:
            r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
            w.write(raw.encode())
            await w.drain()
            data = await asyncio.wait_for(r.read(), 10)
            w.close()
            return data

        try:
            out = [
                await ask(f"GET {site.origin}/static/site.css HTTP/1.1\r\nHost: x\r\n\r\n"),
                await ask("GET http://127.0.0.1:1/page HTTP/1.1\r\nHost: x\r\nSec-Fetch-Mode: navigate\r\n\r\n"),
                await ask("GET http://127.0.0.1:1/lib.js HTTP/1.1\r\nHost: x\r\nSec-Fetch-Mode: no-cors\r\n\r\n"),
                await ask("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"),
            ]
            taken.append(proxy.take_requested())
            taken.append(proxy.take_requested())
            return out
        finally:
            await proxy.close()

    css, page, script, tunnel = asyncio.run(go())
    assert css.split(b"\r\n")[0].endswith(b"200 OK") and css.endswith(CSS.encode())
    assert page.startswith(b"HTTP/1.1 204 ") and b"Cache-Control: no-store" in page  # the tab stays where it is
    assert script.startswith(b"HTTP/1.1 403 ") and b"Cache-Control: no-store" in script
    assert tunnel.startswith(b"HTTP/1.1 403 ")
    assert refused == [("http://127.0.0.1:1/page", True), ("http://127.0.0.1:1/lib.js", False),
                       ("https://example.com:443", False)]
    # what was let through is recorded (recycle.py decides from it), once
    assert taken == [(frozenset({site.origin + "/static/site.css"}), False), (frozenset(), False)]


def test_the_proxy_records_a_bounded_number_of_urls_and_says_when_it_stopped(site, monkeypatch):
    monkeypatch.setattr("guigym.envs.web.policy_proxy.MAX_RECORDED", 2)

    async def go() -> tuple[frozenset[str], bool]:
        proxy = await PolicyProxy(UrlPolicy.for_start_url(site.origin + "/one")).start()
        try:
            for path in ("/a", "/b", "/a", "/c"):
                r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
                w.write(f"GET {site.origin}{path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                await w.drain()
                await asyncio.wait_for(r.read(), 10)
                w.close()
            return proxy.take_requested()
        finally:
            await proxy.close()

    urls, overflow = asyncio.run(go())
    assert urls == {site.origin + "/a", site.origin + "/b"} and overflow is True


# -- a reused context (MiniWoB's isolation="clean", envs/web/recycle.py): its cache is kept while
# -- it holds only what the host's own page loads fetched, and emptied once an episode asked more

def test_a_recycled_context_keeps_what_the_hosts_loads_cached(site, ctl):
    ctl.open(site.origin + "/one")
    first = ctl.episode.context
    before = _css_requests(site)
    ctl.open(site.origin + "/two", recycle=True)
    assert ctl.episode.context is first and "/two" in ctl.page.url
    assert _css_requests(site) == before and _background(ctl) == "rgb(1, 2, 3)"


def test_a_recycled_context_whose_episode_asked_for_another_url_starts_with_an_empty_cache(site, ctl):
    ctl.open(site.origin + "/one")
    first = ctl.episode.context
    ctl.evaluate("fetch('/elsewhere').then(r => r.text())")
    before = _css_requests(site)
    ctl.open(site.origin + "/two", recycle=True)
    assert ctl.episode.context is first
    assert _css_requests(site) == before + 1
