"""A used browser context made ready for a new episode with nothing of the old episode left in it:
MiniWoB-v0's ``isolation="clean"`` (issue 38).

A fresh context per episode costs a context, a tab and a renderer process (~340 ms of CPU on the
headless shell, docs/benchmarks.md); reusing the context and its task tab costs one document load
on a live renderer. What a context and a tab keep across documents, and what removes it here:

==========================================  ======================================================
kept across documents                       removed by
==========================================  ======================================================
other tabs and popups                       closed (``page.close``, no ``beforeunload``)
the old document, its timers, dedicated     the tab navigated to ``about:blank`` first, so no
and shared workers                          script of the old episode runs while the rest is wiped
``window.name`` (the tab's, not the doc's)  set to ``''`` in that blank document
cookies                                     ``BrowserContext.clear_cookies``
localStorage, sessionStorage, IndexedDB,    ``Storage.clearDataForOrigin(origin, "all")`` for every
Cache Storage, service workers              origin the episode's policy allowed or its requests
                                            reached; then ``ServiceWorker.stopAllWorkers``
HTTP cache                                  ``Network.clearBrowserCache``, unless every request
                                            of the episode was a URL the host's own page loads
                                            of this context fetched (see below)
permissions, geolocation override           ``clear_permissions`` (``Browser.resetPermissions``),
                                            ``set_geolocation(None)``
downloads                                   cancelled and their files deleted
page scale (pinch zoom)                     ``Emulation.resetPageScaleFactor``
history                                     ``Page.resetNavigationHistory`` after the new load
                                            (``WebControllerConfig.fresh_history``)
focus                                       the new document has it (``bring_to_front``)
==========================================  ======================================================

The HTTP cache is kept only while it can hold nothing an episode chose: it starts empty, the host's
own page loads fill it (the policy proxy records their URLs), and an episode that asked for any
other URL (or more than the proxy records) gets it cleared before the next load. Every request of
the context goes through its proxy (policy_proxy.py), so a URL an episode fetched and the cache
kept is always seen. Re-fetching one of the host's own URLs stores the same response again (the
MiniWoB server is a read-only static server).
"""
from __future__ import annotations

import asyncio
from typing import Any, Iterable

#: a tab's document is ended by navigating it here (a browser-initiated load: no script of the old
#: document can cancel it, and ``beforeunload`` prompts are not shown)
BLANK = "about:blank"


async def end_documents(ctx: Any, keep: Any, timeout_s: float) -> None:
    """Close every tab of ``ctx`` but ``keep`` and load ``about:blank`` in ``keep``: every document
    of the old episode, with its timers and workers, is gone afterwards. Then empty
    ``window.name``, which belongs to the tab and survives navigations."""
    await asyncio.gather(*(p.close(run_before_unload=False) for p in list(ctx.pages) if p is not keep))
    await keep.goto(BLANK, timeout=timeout_s * 1000)
    await keep.evaluate("window.name = ''")


async def _quiet(coro: Any) -> None:
    """Await a best-effort step whose failure leaves nothing behind (e.g. a download that has
    already failed cannot be cancelled)."""
    try:
        await coro
    except Exception:  # noqa: BLE001 - see the docstring
        pass


async def wipe(ctx: Any, cdp: Any, origins: Iterable[str], downloads: Iterable[Any], clear_cache: bool) -> None:
    """Remove the per-origin and per-context state of the old episode (the table above); call it
    after :func:`end_documents`, so that no old script can write anything back.

    ``cdp``: a CDP session of the kept tab (its storage partition is the context's);
    ``origins``: ``scheme://host[:port]`` strings; ``downloads``: Playwright ``Download`` objects."""
    for d in downloads:
        await _quiet(d.cancel())
        await _quiet(d.delete())
    steps = [ctx.clear_cookies(), ctx.clear_permissions(), ctx.set_geolocation(None),
             cdp.send("Emulation.resetPageScaleFactor")]
    steps += [cdp.send("Storage.clearDataForOrigin", {"origin": o, "storageTypes": "all"}) for o in sorted(origins)]
    if clear_cache:
        steps.append(cdp.send("Network.clearBrowserCache"))
    await asyncio.gather(*steps)
    # unregistered workers stop once idle; stop any still running now
    await _quiet(cdp.send("ServiceWorker.enable"))
    await _quiet(cdp.send("ServiceWorker.stopAllWorkers"))
    await _quiet(cdp.send("ServiceWorker.disable"))
