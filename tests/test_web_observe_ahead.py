"""Pages opened ahead (controller.prewarm): observed when they load, that observation used by the
episode's first observe() only if the page has not changed since (still_watch.py); several pages
queued for the coming episodes, taken in order; a page queued second waits for the drain of the
contexts retired before the first. Real Chromium and a loopback site; no test measures time.

How a test knows which observation it got: one taken ahead carries ``ahead_observe_s`` in its
timings. Changes are made by the test in the page opened ahead (standing for the page's own
scripts) after that page was observed, so nothing depends on how fast the machine is.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Iterator

import numpy as np
import pytest
from web_helpers import LoopbackSite

from guigym.envs.web.controller import WebController, WebControllerConfig
from guigym.envs.web.policy_proxy import PolicyProxy

PAGES = {
    "/static": "<!doctype html><title>Still</title><h1>Orders</h1><p id=t>Three open orders</p>"
               "<input id=q value=first><input id=c type=checkbox><a href='/other'>Other page</a>"
               "<div style='height:3000px'>tall</div>",
    "/other": "<!doctype html><title>Other</title><h1>Another page</h1>",
}


@pytest.fixture(scope="module")
def site() -> Iterator[LoopbackSite]:
    s = LoopbackSite(lambda path: (200, {"Cache-Control": "no-store"},
                                   PAGES.get(path.split("?")[0], "<!doctype html><p>missing</p>")))
    yield s
    s.close()


def _webarena_builder() -> dict[str, Any]:
    from guigym.envs.web.webarena.observation import AXTreeObserver

    obs = AXTreeObserver(viewport=(400, 300))
    return {"a11y_builder": obs.build, "element_center": obs.center}


@pytest.fixture(params=["a11y.js", "webarena-axtree"])
def ctl(request) -> Iterator[WebController]:
    extra = _webarena_builder() if request.param == "webarena-axtree" else {}
    c = WebController(WebControllerConfig(viewport=(400, 300), **extra))
    c.runtime.ensure_started()  # prewarm works in a running browser only
    yield c
    c.close()


def _ahead(ctl: WebController):
    """The first queued episode once built (its page loaded and observed)."""
    return ctl._queue[0][1].result(timeout=60)


def _in_page(ctl: WebController, page: Any, script: str) -> Any:
    """Run ``script`` in the main world of a page opened ahead, as the page's own code would."""
    return ctl.runtime.run(page.evaluate(script), 10, "page script")


def test_an_unchanged_page_gives_the_observation_taken_ahead_and_it_equals_a_fresh_one(ctl, site):
    url = site.origin + "/static"
    ctl.prewarm(url, observe=True)
    made = _ahead(ctl)
    assert made.ahead is not None
    ctl.open(url)
    first = ctl.observe()
    assert "ahead_observe_s" in first.timings
    fresh = ctl.observe()  # taken now, of the same page
    assert "ahead_observe_s" not in fresh.timings
    assert first.a11y == fresh.a11y and first.url == fresh.url == url
    assert "Three open orders" in first.a11y
    assert np.array_equal(first.screenshot, fresh.screenshot)


CHANGES = {
    "text": "document.getElementById('t').textContent = 'Four open orders'",
    "new element": "document.body.appendChild(document.createElement('button')).textContent = 'Pay now'",
    "attribute": "document.getElementById('t').setAttribute('aria-hidden', 'true')",
    "input value set by script": "document.getElementById('q').value = 'second'",
    "checkbox set by script": "document.getElementById('c').checked = true",
    "scroll": "window.scrollTo(0, 600)",
    "focus": "document.getElementById('q').focus()",
    "animation without a DOM change": "document.getElementById('t').animate([{opacity: 1}, {opacity: 0.2}], 60000)",
    "same-document navigation": "history.pushState({}, '', '/static?page=2')",
    "a page script faking stillness": ("globalThis.__guigymStill = () => true;"
                                       "document.getElementById('t').textContent = 'Four open orders'"),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_page_changed_after_it_was_observed_ahead_is_observed_anew(ctl, site, change):
    url = site.origin + "/static"
    ctl.prewarm(url, observe=True)
    made = _ahead(ctl)
    assert made.ahead is not None and "Three open orders" in made.ahead.obs.a11y
    _in_page(ctl, made.task_page, CHANGES[change])
    ctl.open(url)
    obs = ctl.observe()
    assert "ahead_observe_s" not in obs.timings, f"{change}: the observation taken before it was used"
    if "Four open orders" in CHANGES[change]:
        assert "Four open orders" in obs.a11y
    if change == "same-document navigation":
        assert obs.url.endswith("/static?page=2")


def test_a_page_that_navigated_away_after_it_was_observed_ahead_is_observed_anew(ctl, site):
    url = site.origin + "/static"
    ctl.prewarm(url, observe=True)
    made = _ahead(ctl)
    ctl.runtime.run(made.task_page.goto(site.origin + "/other"), 20, "navigating")
    ctl.open(url)
    obs = ctl.observe()
    assert "ahead_observe_s" not in obs.timings and "Another page" in obs.a11y


def test_an_action_before_the_first_observation_discards_the_one_taken_ahead(ctl, site):
    from guigym.core import actions as A

    url = site.origin + "/static"
    ctl.prewarm(url, observe=True)
    _ahead(ctl)
    ctl.open(url)
    ctl.execute(A.Scroll(dy=400))
    obs = ctl.observe()
    assert "ahead_observe_s" not in obs.timings


def test_pages_queued_ahead_are_taken_in_order_and_a_mismatch_drops_the_rest(site):
    ctl = WebController(WebControllerConfig(viewport=(400, 300)))
    ctl.runtime.ensure_started()
    try:
        one, two = site.origin + "/static", site.origin + "/other"
        ctl.prewarm(one, observe=True)
        ctl.prewarm(two, observe=True)
        assert ctl.pending == 2
        first, second = (fut.result(timeout=60) for _, fut in ctl._queue)
        assert ctl.prewarmed(one, first.policy) and not ctl.prewarmed(two, second.policy)  # only the head counts
        ctl.open(one)
        assert ctl.episode is first and ctl.pending == 1
        ctl.open(two)
        assert ctl.episode is second and ctl.pending == 0
        assert "Another page" in ctl.observe().a11y
        # queued for one then two, but the next episode opens two: both are of no use
        ctl.prewarm(one)
        ctl.prewarm(two)
        queued = [fut.result(timeout=60) for _, fut in ctl._queue]
        ctl.open(two)
        assert ctl.episode not in queued and ctl.pending == 0
        ctl.discard_retired()  # what an env's next prewarm does with the retired head
        deadline = time.monotonic() + 60
        while not all(q.task_page.is_closed() for q in queued) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(q.task_page.is_closed() for q in queued)  # closed, not left running
    finally:
        ctl.close()


def test_a_page_queued_second_waits_for_the_drain_of_contexts_retired_before_the_first(site, monkeypatch):
    """The second page's ``before`` (e.g. restoring the instance it opens on) may touch what an
    ended episode's context could still reach; it runs only once that context's proxy is drained,
    though the drain belongs to the first page's work."""
    events: list[tuple[str, float]] = []
    real_drain = PolicyProxy.drain

    async def slow_drain(self: PolicyProxy, timeout_s: float = 5.0) -> None:
        await asyncio.sleep(0.5)  # a request under way that takes a while to be answered
        await real_drain(self, timeout_s)
        events.append(("drained", time.monotonic()))

    monkeypatch.setattr(PolicyProxy, "drain", slow_drain)
    ctl = WebController(WebControllerConfig(viewport=(400, 300)))
    try:
        url = site.origin + "/static"
        ctl.open(url)
        ctl.open(url)  # the first episode's context is retired
        ctl.prewarm(url, before=lambda: events.append(("before 1", time.monotonic())))
        ctl.prewarm(url, before=lambda: events.append(("before 2", time.monotonic())))
        for _, fut in list(ctl._queue):
            fut.result(timeout=60)
        names = [name for name, _ in events]
        assert sorted(names) == ["before 1", "before 2", "drained"]
        assert names[0] == "drained", names  # neither ran before the drain ended
    finally:
        ctl.close()
