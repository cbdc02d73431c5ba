"""Whether a loaded page has changed since it was observed: the check behind observations taken ahead.

A page opened ahead (:meth:`WebController.prewarm` with ``observe=True``: the next episode's start
page, opened during the agent's turn) is observed right after it loads, so the reset that starts its
episode need not build the observation again. That observation is used only if the page is provably
the page it showed. A watcher is armed in the page *before* it is observed and asked at the reset:

* no DOM mutation anywhere in the document (a ``MutationObserver`` on nodes, attributes and text),
  but for the element ids ``assets/a11y.js`` writes as it observes;
* no scroll, focus change, input, selection change, resize or history move (capturing listeners);
* the value, checked state and selection of every ``input``/``textarea``/``select`` as they were (a
  script setting ``.value`` mutates no attribute);
* no CSS or Web Animation running, and the document still complete, with no frames (a frame's
  document is not watched);
* the same document: it runs in an isolated world of that document (CDP ``Page.createIsolatedWorld``),
  which a navigation destroys, so a page that moved on answers with an error, read as "changed".
  The page's own scripts cannot see or reset it (they run in the main world).

Pixels that change with no DOM change (a canvas drawing, a playing video or GIF, a caret's blink)
are not detected: those differ between any two screenshots of such a page taken moments apart.
"""
from __future__ import annotations

from typing import Any, Optional

from guigym.envs.web.browser import cdp_send

WORLD_NAME = "guigym-still-watch"

#: Arms the watcher in the isolated world; returns whether the page is watchable now (complete,
#: frameless, nothing animating). ``globalThis.__guigymStill()`` then answers "unchanged since".
_ARM_JS = r"""(() => {
  let changed = false;
  const mark = () => { changed = true; };
  // the ids assets/a11y.js writes while observing are the observation's own, not a change
  const own = (r) => r.type === 'attributes' && r.attributeName === 'data-guigym-id';
  new MutationObserver((records) => { if (!records.every(own)) mark(); })
    .observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
  for (const type of ['scroll', 'focusin', 'focusout', 'input', 'change', 'selectionchange', 'resize', 'hashchange',
                      'popstate', 'pagehide', 'toggle'])
    addEventListener(type, mark, true);
  const controls = () => Array.from(document.querySelectorAll('input, textarea, select'),
    (e) => [e.value, e.checked, e.selectedIndex].join('\u0000')).join('\u0001');
  const animating = () => document.getAnimations().some((a) => a.playState === 'running');
  const calm = () => document.readyState === 'complete' && window.frames.length === 0 && !animating();
  const values = controls(), x = scrollX, y = scrollY, focus = document.activeElement;
  globalThis.__guigymStill = () => !changed && calm() && controls() === values && scrollX === x && scrollY === y
    && document.activeElement === focus;
  return calm();
})()"""


async def arm(cdp: Any) -> Optional[int]:
    """Arm a watcher in the main frame of ``cdp``'s page; returns its isolated world's execution
    context id, or None when the page cannot be watched now (still loading, has frames, animates)."""
    tree = await cdp_send(cdp, "Page.getFrameTree")
    world = await cdp_send(cdp, "Page.createIsolatedWorld", {"frameId": tree["frameTree"]["frame"]["id"],
                                                             "worldName": WORLD_NAME})
    ctx = world["executionContextId"]
    res = await cdp_send(cdp, "Runtime.evaluate", {"expression": _ARM_JS, "contextId": ctx, "returnByValue": True})
    return ctx if res.get("result", {}).get("value") is True else None


async def unchanged(cdp: Any, context_id: int) -> bool:
    """True when the page of the watcher armed as ``context_id`` has not changed since (see the
    module docstring); False when it has, or its document is gone."""
    try:
        res = await cdp_send(cdp, "Runtime.evaluate", {"expression": "globalThis.__guigymStill()",
                                                       "contextId": context_id, "returnByValue": True})
    except Exception as exc:  # noqa: BLE001 - a document replaced since: its world is gone
        if "context" in str(exc).lower() or "closed" in str(exc).lower() or "target" in str(exc).lower():
            return False
        raise
    return res.get("result", {}).get("value") is True and "exceptionDetails" not in res
