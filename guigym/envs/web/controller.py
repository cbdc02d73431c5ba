"""Playwright controller: one browser context per episode, observations, typed actions.

Observation of one step (all taken after the action settles, in one round trip each, overlapped):

* ``screenshot``: ``np.ndarray`` of shape (H, W, 3), dtype uint8, H x W = the viewport
* ``a11y``: the XML from ``assets/a11y.js`` (roles as tags, ``id``, ``name``, states, ``bbox``)
* ``url``: the page URL
* ``extra``: the value of an optional page expression (suite glue, e.g. MiniWoB's reward globals)
"""
from __future__ import annotations

import asyncio
import base64
import collections
import concurrent.futures
import dataclasses
import io
import re
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Awaitable, Callable, Optional, Sequence, Union
from urllib.parse import urlsplit

import numpy as np
from PIL import Image

from guigym.core import actions as A
from guigym.core.errors import ActionNotPossible, ConfigError, EnvInfraError, TaskSpecError
from guigym.envs.web import recycle, still_watch
from guigym.envs.web.browser import BrowserRuntime, PageUnresponsive, is_playwright_error
from guigym.envs.web.policy_proxy import PolicyProxy
from guigym.envs.web.url_policy import UrlPolicy, origin_of

_A11Y_JS = resources.files("guigym.envs.web").joinpath("assets/a11y.js").read_text(encoding="utf-8")

#: pyautogui/lowercase key names -> Playwright key names
KEY_NAMES = {
    "enter": "Enter", "return": "Enter", "tab": "Tab", "esc": "Escape", "escape": "Escape",
    "backspace": "Backspace", "delete": "Delete", "del": "Delete", "space": " ", "up": "ArrowUp",
    "down": "ArrowDown", "left": "ArrowLeft", "right": "ArrowRight", "home": "Home", "end": "End",
    "pageup": "PageUp", "pagedown": "PageDown", "ctrl": "Control", "control": "Control",
    "shift": "Shift", "alt": "Alt", "cmd": "Meta", "meta": "Meta", "win": "Meta", "super": "Meta",
    **{f"f{i}": f"F{i}" for i in range(1, 13)},
}


def key_name(key: str) -> str:
    return KEY_NAMES.get(key.lower(), key) if len(key) > 1 else key


@dataclass
class WebObservation:
    screenshot: np.ndarray
    a11y: str
    url: str
    a11y_nodes: int = 0
    a11y_truncated: bool = False
    a11y_reason: Optional[str] = None
    extra: Any = None
    timings: dict[str, float] = field(default_factory=dict)
    #: what a custom ``a11y_builder`` returned besides the tree (e.g. element boxes)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class WebControllerConfig:
    viewport: tuple[int, int] = (160, 210)  # (width, height): the screen the agent sees, in CSS pixels
    #: browser window (width, height); larger than ``viewport`` when pages need room to lay out
    #: (MiniWoB's harness uses 500x320 and shows the top-left 160x210); None = same as viewport
    window: Optional[tuple[int, int]] = None
    headless: bool = True
    executable_path: Optional[str] = None
    a11y_node_cap: int = 2000
    a11y_time_cap_ms: int = 200
    a11y_skip_ids: tuple[str, ...] = ()
    call_timeout_s: float = 10.0  # every single browser call
    load_timeout_s: float = 20.0  # opening a page
    settle_ms: int = 0  # pause after an action before observing (0: next frame only)
    #: replaces assets/a11y.js as the tree builder: ``async (episode, page, cdp) -> dict`` with
    #: keys xml (the tree text), nodes, truncated, reason, ms and optional meta (WebArena's
    #: accessibility tree, envs/web/webarena/observation.py)
    a11y_builder: Optional[Callable[[Any, Any, Any], Awaitable[dict[str, Any]]]] = None
    #: resolves an element id to its viewport centre for element actions when ids come from
    #: ``a11y_builder``: ``async (page, cdp, element_id) -> (x, y)``, raising ActionNotPossible
    element_center: Optional[Callable[[Any, Any, str], Awaitable[tuple[float, float]]]] = None
    #: PNG screenshots with Chromium's fast (lossless, lower zlib effort) encoder: the same pixels,
    #: a larger file that decodes faster at every size measured (MiniWoB's 500x320 window:
    #: 1.8 vs 2.8 ms of CPU per decode on Chromium 156, Chromium's own capture about equal;
    #: 1280x720: both the capture and the decode are faster; docs/benchmarks.md, issue 38)
    fast_png: bool = True
    #: the task page's tab starts with a history of one entry, the task page (Chromium's blank
    #: start entry of a new tab and anything before are dropped, so ``go_back`` has nowhere to go)
    fresh_history: bool = False


#: the queue key of a blank prewarmed context (no URL, no policy yet)
_BLANK: Any = ("<blank>", None)
#: how often, and after what first wait, a capture refused with "Unable to capture screenshot"
#: is retried before Playwright's own capture is used
_SHOT_RETRIES = 3
_SHOT_RETRY_WAIT_S = 0.05


def applicable_later(context_options: dict[str, Any]) -> bool:
    """True when ``context_options`` can be applied to an already built context as well as given
    to ``new_context``: a storage state made of cookies only (``add_cookies``; saved localStorage
    would need the origin's page first), geolocation (``set_geolocation``) and permissions
    (``grant_permissions``). Other options (viewport, locale, ...) exist only at creation."""
    if not set(context_options) <= {"storage_state", "geolocation", "permissions"}:
        return False
    state = context_options.get("storage_state") or {}
    if not isinstance(state, dict):  # a path: Playwright reads it at creation
        return False
    return not any(o.get("localStorage") for o in state.get("origins", []))


@dataclass
class _Ahead:
    """An observation of a task page taken when it was opened ahead, and the execution context of
    the watcher (still_watch.py) armed in that page just before."""
    obs: WebObservation
    page: Any
    watcher: int


class _Episode:
    """One episode's browser context: its tabs, which one the agent sees, and its URL policy,
    enforced by the context's own :class:`PolicyProxy` (given the policy here).

    Mutated only on the browser thread (Playwright's event handlers, the proxy and the
    controller's coroutines run there).
    """

    def __init__(self, context: Any, policy: UrlPolicy, proxy: PolicyProxy) -> None:
        self.context = context
        self.policy = policy
        self.proxy = proxy
        proxy.policy = policy
        proxy.on_refused = self.refused
        self.task_page: Any = None
        self.tabs: list[Any] = []  # open pages, in the order they were opened
        self.active: Any = None  # the page the agent sees and acts on
        self.cdps: dict[Any, Any] = {}
        self.blocked: list[str] = []  # "url: reason" of requests refused since the last drain
        self.downloads: list[Any] = []  # Playwright Download objects of this episode's tabs
        self.hung: list[str] = []  # URLs of tabs closed because they stopped answering
        self.task_page_closed_hung = False
        #: the task page's observation taken when it was opened ahead (:meth:`WebController.prewarm`
        #: with ``observe``), used by the episode's first observation if the page has not changed
        self.ahead: Optional[_Ahead] = None
        context.on("page", self.adopt)

    def adopt(self, page: Any) -> None:
        """A new tab (ours or a popup a page opened) becomes the active one, as in a browser."""
        if page in self.tabs or page.is_closed():
            return
        self.tabs.append(page)
        self.active = page
        page.on("close", self._closed)
        page.on("download", self._download)

    def _download(self, download: Any) -> None:
        self.downloads.append(download)

    def release(self) -> None:
        """Stop following the context's tabs (its context is reused for another episode)."""
        self.context.remove_listener("page", self.adopt)
        for page in self.context.pages:
            for event, handler in (("close", self._closed), ("download", self._download)):
                try:
                    page.remove_listener(event, handler)
                except (KeyError, ValueError):  # a tab this episode never adopted
                    pass

    def _closed(self, page: Any) -> None:
        if page in self.tabs:
            i = self.tabs.index(page)
            self.tabs.remove(page)
            if self.active is page:  # the tab to its left (or the new first one) takes focus
                self.active = self.tabs[max(0, i - 1)] if self.tabs else None
        self.cdps.pop(page, None)

    def prune(self) -> None:
        for page in [p for p in self.tabs if p.is_closed()]:
            self._closed(page)

    def refused(self, url: str, navigation: bool) -> None:
        """The proxy refused a request of this context (the proxy already answered it: a refused
        navigation gets 204, on which Chromium keeps the page that started it, like the Stop
        button, instead of an error page replacing the task)."""
        # only navigations are the agent's doing; a page's own script/font/image from elsewhere
        # (e.g. a CDN with a local fallback) is refused without blaming the agent's action
        if navigation and len(self.blocked) < 100:  # a page firing requests in a loop must not grow this forever
            self.blocked.append(f"{url[:200]}: {self.policy.refusal(url) or 'not allowed'}")

    def drain_blocked(self) -> list[str]:
        out, self.blocked = self.blocked, []
        return out


#: URLs a tab may show that no request produced and no policy needs to allow: Chromium's own
#: error page for a failed navigation, and the documents ``about:`` gives every frame
_HARMLESS = re.compile(r"^(about:blank|about:srcdoc|chrome-error://chromewebdata/)(?:[?#]|$)")


#: the paths of the static files a context may be warmed with: stylesheets, scripts, fonts
_STATIC_PATH = re.compile(r"\.(css|js|mjs|woff2?|ttf|otf)$", re.IGNORECASE)
#: ... of those, the ones Chromium shows as text when opened in a tab
_TEXT_PATH = re.compile(r"\.(css|js|mjs)$", re.IGNORECASE)
#: stylesheets, scripts and fonts a page loaded, by the extension of their path
_STATIC_JS = r"""() => [...new Set(performance.getEntriesByType('resource')
    .filter(e => ['link', 'script', 'css', 'other'].includes(e.initiatorType))
    .map(e => e.name)
    .filter(u => /\.(css|js|mjs|woff2?|ttf|otf)$/i.test(new URL(u).pathname)))]"""


#: (host, port) asked -> (host, port) connected to, for a context's policy proxy (PolicyProxy.upstreams)
Upstreams = dict[tuple[str, int], tuple[str, int]]
#: what :meth:`WebController.prewarm_blank` warms a context with: ``(policy, top_url, urls)``, or
#: a function from the current task page's static files to such a tuple (or None)
WarmPlan = Union[tuple[UrlPolicy, str, Sequence[str]], Callable[[list[str]], Optional[tuple[UrlPolicy, str, Sequence[str]]]]]


def _context_of(made: Any) -> Any:
    """The browser context of a queued prewarm's result: an _Episode, or (context, tab) when blank."""
    return made[0] if isinstance(made, tuple) else made.context


class _Retry(Exception):
    """Observe again: what was looked at changed under the observation."""


def _transient(exc: BaseException) -> bool:
    """A page call that failed because the page navigated or closed under it (an action's
    effect, e.g. a click on a link): observing again is enough."""
    msg = str(exc)
    return any(s in msg for s in ("Execution context was destroyed", "Target page, context or browser has been closed",
                                  "Target closed", "navigat", "Cannot find context with specified id",
                                  "Unable to capture screenshot", "Not attached to an active page",
                                  "Session closed"))


class WebController:
    """Drives one Chromium context per episode. Envs call ``open``/``observe``/``execute``; nothing
    else talks to Playwright.

    Tabs: the episode starts with one tab (the *task page*). ``new_tab``, ``tab_focus``,
    ``close_tab`` and popups a page opens change which tab is *active*; observations and actions
    use the active tab, while ``observe``'s ``extra_expr`` (suite glue such as MiniWoB's reward
    globals) is always evaluated on the task page, or is None once that page is closed. When the
    agent closes the last tab, an empty one (about:blank) takes its place, as the window stays.

    URLs: every episode has a :class:`UrlPolicy` (default: the start URL's origin). ``goto`` with
    a refused URL raises :class:`ActionNotPossible`; every request of the browser context goes
    through the context's own loopback :class:`PolicyProxy`, which refuses what the policy
    refuses, so the rule holds for clicks, scripts, popups, workers and every redirect hop too,
    while Chromium's HTTP cache stays on (request routing would turn it off, policy_proxy.py).

    Cache: each context's cache is its own (fresh per episode). :meth:`prewarm_blank` may fill
    the next context's cache with static files of the next task's sites under that task's
    policy; an episode whose policy does not allow every origin warmed gets the cache cleared
    before its first request (:meth:`_finish_blank`), so nothing its policy refuses is ever
    served from it.
    """

    def __init__(self, config: WebControllerConfig | None = None) -> None:
        self.config = config or WebControllerConfig()
        self.runtime = BrowserRuntime(headless=self.config.headless, executable_path=self.config.executable_path)
        self._ep: Optional[_Episode] = None
        #: contexts built ahead for the next episodes, in episode order: (key, future of the
        #: _Episode, or of (context, tab) for a blank one) with key (url, policy) or _BLANK
        self._queue: collections.deque[tuple[Any, concurrent.futures.Future]] = collections.deque()
        self._retired: list[Any] = []
        #: each context's policy proxy (closed with the context, :meth:`_discard`)
        self._proxies: dict[Any, PolicyProxy] = {}
        #: the last episode of each retired context, for :meth:`prewarm` / :meth:`open` with
        #: ``recycle`` (recycle.py)
        self._last_ep: dict[Any, _Episode] = {}
        #: per context, the URLs its host page loads fetched since its HTTP cache was last empty;
        #: None when something else may have filled it (recycle.py: when the cache must go)
        self._host_urls: dict[Any, Optional[set[str]]] = {}
        #: origins a prewarmed blank context's cache was warmed with (:meth:`prewarm_blank`)
        self._warmed: dict[Any, frozenset[str]] = {}
        #: drains the policy proxies of every context retired so far (an asyncio task of the
        #: browser thread's loop); each page prewarmed with ``before`` waits for it (_open_after)
        self._draining: Optional[asyncio.Future] = None
        # Capture the whole window and crop in numpy: CDP's `clip` parameter makes Chromium take a
        # slower capture path (~20 ms vs ~8 ms for 500x320 -> 160x210 here, bench/web_step.py).
        self._shot_params: dict[str, Any] = {"format": "png"}
        if self.config.fast_png:
            self._shot_params["optimizeForSpeed"] = True

    # -- episode lifecycle ------------------------------------------------------------------------
    async def _new_context(self, policy: Optional[UrlPolicy], **options: Any) -> Any:
        """A fresh context whose every request goes through a new :class:`PolicyProxy` of its own
        (``policy`` None: it refuses everything until an episode's policy is set)."""
        proxy = await PolicyProxy(policy).start()
        w, h = self.config.window or self.config.viewport
        try:
            ctx = await self.runtime.browser.new_context(viewport={"width": w, "height": h}, device_scale_factor=1,
                                                         proxy={"server": proxy.server}, **options)
        except BaseException:
            await proxy.close()
            raise
        self._proxies[ctx] = proxy
        self._host_urls[ctx] = set()
        ctx.set_default_timeout(self.config.call_timeout_s * 1000)
        await ctx.add_init_script(_A11Y_JS)
        return ctx

    async def _make_page(self, url: str, policy: UrlPolicy, context_options: Optional[dict[str, Any]] = None,
                         upstreams: Optional[Upstreams] = None) -> _Episode:
        ctx = await self._new_context(policy, **(context_options or {}))
        return await self._open_in(ctx, await ctx.new_page(), url, policy, upstreams)

    async def _open_in(self, ctx: Any, page: Any, url: str, policy: UrlPolicy,
                       upstreams: Optional[Upstreams] = None, cdp: Any = None) -> _Episode:
        """The episode of ``ctx``: ``policy`` and ``upstreams`` given to its proxy, ``page`` (a
        blank tab; ``cdp`` its CDP session if it has one) its task page, opened on ``url``."""
        proxy = self._proxies[ctx]
        proxy.upstreams = dict(upstreams or {})
        earlier, overflow = proxy.take_requested()  # e.g. a cache warm-up's (_warm)
        ep = _Episode(ctx, policy, proxy)  # the policy is in force from here
        ep.adopt(page)
        ep.task_page = page
        await page.goto(url, wait_until="load", timeout=self.config.load_timeout_s * 1000)
        loaded, overflow2 = proxy.take_requested()
        host = self._host_urls.get(ctx)
        self._host_urls[ctx] = None if (host is None or earlier or overflow or overflow2) else host | loaded
        ep.cdps[page] = cdp or await ctx.new_cdp_session(page)
        if self.config.fresh_history:
            await ep.cdps[page].send("Page.resetNavigationHistory")
        return ep

    async def _recycle(self, old: _Episode, url: str, policy: UrlPolicy,
                       upstreams: Optional[Upstreams] = None) -> _Episode:
        """A new episode on ``url`` in ``old``'s context, with nothing of ``old`` left in it
        (recycle.py); its task tab is reused when still open. The proxy refuses everything until
        the new load, so no old document reaches a server meanwhile."""
        ctx = old.context
        proxy = self._proxies[ctx]
        proxy.policy = None
        old.release()
        keep = old.task_page if old.task_page is not None and not old.task_page.is_closed() else None
        if keep is None:
            keep = next((p for p in ctx.pages if not p.is_closed()), None) or await ctx.new_page()
        cdp = old.cdps.get(keep) or await ctx.new_cdp_session(keep)
        await recycle.end_documents(ctx, keep, self.config.load_timeout_s)
        asked, overflow = proxy.take_requested()
        host = self._host_urls.get(ctx)
        clear_cache = overflow or host is None or not asked <= host
        origins = set(old.policy.origins) | {o for o in map(origin_of, asked) if o}
        await recycle.wipe(ctx, cdp, origins, old.downloads, clear_cache)
        if clear_cache:
            self._host_urls[ctx] = set()
        ep = await self._open_in(ctx, keep, url, policy, upstreams, cdp=cdp)
        await keep.bring_to_front()
        return ep

    async def _recycle_or_make(self, old: Optional[_Episode], url: str, policy: UrlPolicy,
                               upstreams: Optional[Upstreams] = None) -> _Episode:
        """:meth:`_recycle` ``old``'s context, or a fresh context when there is none or it cannot
        be cleaned (a tab that does not answer, a context that died): then it is closed."""
        if old is not None:
            try:
                return await asyncio.wait_for(self._recycle(old, url, policy, upstreams),
                                              self.config.load_timeout_s + 2 * self.config.call_timeout_s)
            except Exception:  # noqa: BLE001 - a fresh context below is the fallback
                if not self.runtime.alive:
                    raise
                await self._discard(old.context)
        return await self._make_page(url, policy, upstreams=upstreams)

    def _take_recyclable(self, retired: list[Any]) -> Optional[_Episode]:
        """The last episode of the most recently retired context of this browser (removed from
        ``retired``), or None."""
        for ctx in reversed(retired):
            old = self._last_ep.pop(ctx, None)
            if old is not None and ctx.browser is self.runtime.browser:
                retired.remove(ctx)
                return old
        return None

    async def _discard(self, ctx: Any) -> None:
        try:
            await ctx.close()
        except Exception:  # noqa: BLE001 - the context may die with a crashed browser
            pass
        self._warmed.pop(ctx, None)
        proxy = self._proxies.pop(ctx, None)
        if proxy is not None:
            await proxy.close()
        self._last_ep.pop(ctx, None)
        self._host_urls.pop(ctx, None)

    def open(self, url: str, policy: Optional[UrlPolicy] = None, context_options: Optional[dict[str, Any]] = None,
             upstreams: Optional[Upstreams] = None, recycle: bool = False) -> None:
        """Start a new episode on ``url`` in a fresh browser context.

        ``policy``: the URLs this episode may show (default: ``url``'s origin, see
        :class:`UrlPolicy`). The host's ``url`` is opened whatever the policy says.

        Takes the context :meth:`prewarm` built in the background when its URL and policy match,
        which hides context creation (~150 ms on 2 cores) from reset latency; the previous
        episode's context is closed later, in :meth:`prewarm`, so that neither competes with
        this reset.

        ``context_options``: extra Playwright ``new_context`` options (``storage_state``,
        ``geolocation``, ``permissions``); a context prewarmed for a URL is not used then, a blank
        prewarmed one is when they can be applied to it (:func:`applicable_later`).

        ``upstreams``: where the episode's policy proxy connects instead of the asked host and
        port (:attr:`PolicyProxy.upstreams`); a context prewarmed for ``url`` keeps the ones
        :meth:`prewarm` gave it.

        ``recycle``: when no context was built ahead, reuse the last retired one, cleaned
        (recycle.py), instead of creating one (ignored with ``context_options``).
        """
        policy = policy or UrlPolicy.for_start_url(url)
        self.runtime.ensure_started()
        if self._ep is not None:
            self._retired.append(self._ep.context)
            self._last_ep[self._ep.context] = self._ep
        self._ep = None
        made: Optional[_Episode] = None
        if self._queue:
            next_key, fut = self._queue.popleft()
            try:
                made = fut.result(timeout=self.config.load_timeout_s)
            except Exception:  # noqa: BLE001 - a failed prewarm is simply rebuilt below
                made = None
            if next_key == _BLANK and made is not None:
                made = self._finish_blank(made, url, policy, context_options, upstreams)
            else:
                # a context built for another URL, or by a browser that has since crashed and been
                # relaunched by ensure_started() above, is of no use
                stale = made is not None and (made.context.browser is not self.runtime.browser
                                              or made.task_page.is_closed())
                if made is not None and (next_key != (url, policy) or stale or context_options):
                    if not stale:
                        self._retired.append(made.context)
                    made = None
            if made is None:  # the episodes they were built for do not follow
                self._retire_queue()
        if made is None and recycle and not context_options:
            old = self._take_recyclable(self._retired)
            self.discard_retired()  # the others
            if old is not None:
                made = self.runtime.run(self._recycle_or_make(old, url, policy, upstreams),
                                        2 * self.config.load_timeout_s + 2 * self.config.call_timeout_s,
                                        f"opening {url}")
        if made is None:
            made = self.runtime.run(self._make_page(url, policy, context_options, upstreams),
                                    self.config.load_timeout_s, f"opening {url}")
        self._ep = made

    def is_open(self, url: str) -> bool:
        """True when the task page is live, is the only tab, and shows ``url`` (ignoring the fragment)."""
        ep = self._ep
        if ep is None or not self.runtime.alive or ep.task_page.is_closed():
            return False
        ep.prune()
        return ep.tabs == [ep.task_page] and ep.task_page.url.split("#")[0] == url.split("#")[0]

    async def _make_blank(self, warm: Optional[WarmPlan] = None) -> tuple[Any, Any]:
        """A fresh context with one blank tab (its renderer started, ~250 ms on 2 cores) and the
        a11y script installed; no URL policy yet (its proxy refuses everything), and nothing
        loaded in the tab. ``warm``: see :meth:`prewarm_blank`."""
        if callable(warm):
            warm = warm(await self._static_files())
        ctx = await self._new_context(None)
        page = await ctx.new_page()
        if warm is not None and warm[2]:
            try:
                await self._warm(ctx, page, warm[0], warm[1], tuple(warm[2]))
            except Exception:  # noqa: BLE001 - a failed warm-up costs speed only; the cache may hold part of it
                if not self.runtime.alive:
                    raise
                if page.is_closed() or page.url != "about:blank":  # left on a warm-up document: a new tab
                    await page.close()
                    page = await ctx.new_page()
        return ctx, page

    async def _warm(self, ctx: Any, page: Any, policy: UrlPolicy, top: str, urls: tuple[str, ...]) -> None:
        """Fill ``ctx``'s HTTP cache with ``urls`` (static files) under ``policy``, from ``page``
        (the blank tab), which is then emptied again with a history of one entry, as if new.

        Chromium keys its cache by the top-level page's site as well as by URL, so the files are
        fetched from a document of ``top``'s origin, the way the start page will ask for them:
        that document is the first of them on that origin that is a stylesheet or a script (a
        font would be a download), shown as text, so no site script runs and no site page is
        loaded ahead. Cookies a response set are dropped."""
        proxy = self._proxies[ctx]
        allowed = tuple(u for u in urls if policy.allows(u) and _STATIC_PATH.search(urlsplit(u).path))
        home = origin_of(top)
        first = next((u for u in allowed if home is not None and origin_of(u) == home
                      and _TEXT_PATH.search(urlsplit(u).path)), None)
        if first is None:
            return
        proxy.policy = policy
        self._warmed[ctx] = frozenset(filter(None, map(origin_of, allowed)))
        try:
            await page.goto(first, wait_until="domcontentloaded", timeout=self.config.load_timeout_s * 1000)
            await page.evaluate("""(us) => Promise.all(us.map(u => fetch(u, {mode: u.startsWith(location.origin + '/')
                                     ? 'same-origin' : 'no-cors'}).then(r => r.arrayBuffer()).catch(() => null)))""",
                                list(allowed))
        finally:
            proxy.policy = None
            await page.goto("about:blank", timeout=self.config.load_timeout_s * 1000)
            cdp = await ctx.new_cdp_session(page)
            try:  # the warm-up's entries leave the tab's history (go_back from the start page: blank)
                await cdp.send("Page.resetNavigationHistory")
            finally:
                await cdp.detach()
            await ctx.clear_cookies()

    def _finish_blank(self, made: tuple[Any, Any], url: str, policy: UrlPolicy,
                      context_options: Optional[dict[str, Any]], upstreams: Optional[Upstreams] = None) -> Optional[_Episode]:
        """The episode on a blank prewarmed context: its policy given to its proxy, its context options
        applied (:func:`applicable_later`), then ``url`` opened. None when it cannot serve (options
        only ``new_context`` takes, a relaunched browser, a closed tab)."""
        ctx, page = made
        opts = dict(context_options or {})
        if ctx.browser is not self.runtime.browser or page.is_closed() or not applicable_later(opts):
            if ctx.browser is self.runtime.browser:
                self._retired.append(ctx)
            return None

        async def go() -> _Episode:
            warmed = self._warmed.pop(ctx, frozenset())
            if not warmed <= policy.origins:
                # warmed for another task than this one: nothing this policy refuses may be
                # served from the cache, so it is emptied before the first request
                cdp = await ctx.new_cdp_session(page)
                await cdp.send("Network.clearBrowserCache")
                await cdp.detach()
            if opts.get("storage_state"):  # a login's cookies (applicable_later: no localStorage)
                await ctx.add_cookies(opts["storage_state"].get("cookies", []))
            if opts.get("permissions"):
                await ctx.grant_permissions(list(opts["permissions"]))
            if opts.get("geolocation"):
                await ctx.set_geolocation(opts["geolocation"])
            return await self._open_in(ctx, page, url, policy, upstreams)

        return self.runtime.run(go(), self.config.load_timeout_s, f"opening {url}")

    def prewarm_blank(self, warm: Optional[WarmPlan] = None) -> None:
        """Close retired contexts and build a blank context + tab for the next episode in the
        background, for envs whose next URL or site state is not known yet (WebArena-v0: the site
        is restored at the next reset, so its page cannot be loaded ahead). :meth:`open` uses it
        unless that episode needs context options only ``new_context`` takes (see
        :func:`applicable_later`: a login's cookies and a geolocation are applied to it).

        ``warm``: ``(policy, top_url, urls)``, the next episode's expected policy, start URL and
        static files (stylesheets, scripts, fonts; never pages) to put into the new context's
        HTTP cache, those ``policy`` allows only (:meth:`_warm`); or a function given the static
        files the current task page loaded (:meth:`static_files`, read in the background too)
        that returns such a tuple or None. The episode that takes the context gets an emptied
        cache unless its policy allows every origin warmed."""
        if not self.runtime.alive:
            return
        for ctx in self._retired:
            self.runtime.submit(self._discard(ctx))
        self._retired.clear()
        self._last_ep.clear()
        if not self._queue:
            self._queue.append((_BLANK, self.runtime.submit(self._make_blank(warm))))

    @property
    def pending(self) -> int:
        """How many contexts are built (or being built) ahead for the next episodes."""
        return len(self._queue)

    def prewarm(self, url: str, policy: Optional[UrlPolicy] = None, upstreams: Optional[Upstreams] = None,
                before: Optional[Callable[[], Any]] = None, observe: bool = False, recycle: bool = False) -> None:
        """Close retired contexts and build a coming episode's context for ``url`` in the background.

        Call it once the episode has its first observation, so the work overlaps the agent's
        turn instead of the reset. Each call queues one context, for the episode after those
        already queued (:attr:`pending`): :meth:`open` takes them in order.

        ``upstreams``: the new context's :attr:`PolicyProxy.upstreams`. ``before``: called in a
        worker thread once the proxies of every context retired so far are drained
        (:meth:`PolicyProxy.drain`: their requests under way answered, no new one passed; the
        contexts then close in the background) and before ``url`` is opened, e.g. restoring the
        site instance the page is opened on. ``observe``: observe the page once it has loaded,
        too; the episode's first :meth:`observe` returns that observation if the page has not
        changed since (still_watch.py), else observes it anew. ``recycle`` (without ``before``):
        reuse the most recently retired context, cleaned (recycle.py), instead of a new one.
        """
        if not self.runtime.alive:
            return
        retired, self._retired = list(self._retired), []
        old = self._take_recyclable(retired) if recycle and before is None else None
        policy = policy or UrlPolicy.for_start_url(url)
        self._queue.append(((url, policy), self.runtime.submit(
            self._prepare_page(retired, url, policy, upstreams, before, observe, old))))

    async def _prepare_page(self, retired: list[Any], url: str, policy: UrlPolicy, upstreams: Optional[Upstreams],
                            before: Optional[Callable[[], Any]], observe: bool = False,
                            old: Optional[_Episode] = None) -> _Episode:
        if old is not None:
            await asyncio.gather(*(self._discard(ctx) for ctx in retired))
            ep = await self._recycle_or_make(old, url, policy, upstreams)
        else:
            ep = await self._open_ahead(retired, url, policy, upstreams, before)
        if observe:
            ep.ahead = await self._observe_ahead(ep)
        return ep

    async def _open_ahead(self, retired: list[Any], url: str, policy: UrlPolicy, upstreams: Optional[Upstreams],
                          before: Optional[Callable[[], Any]]) -> _Episode:
        if before is None:
            await asyncio.gather(*(self._discard(ctx) for ctx in retired))
            return await self._make_page(url, policy, upstreams=upstreams)
        ctx, page = await self._open_after(retired, before)
        try:
            return await self._open_in(ctx, page, url, policy, upstreams)
        except BaseException:
            await self._discard(ctx)
            raise

    async def _open_after(self, retired: list[Any], before: Callable[[], Any]) -> tuple[Any, Any]:
        """A blank context and tab, once the proxies of ``retired`` and of every context retired
        before them are drained and ``before`` has run."""
        if retired:
            earlier = self._draining

            async def drain() -> None:
                # every request of a context goes through its proxy: once the proxies are drained,
                # nothing of the retired contexts reaches a site, and they close in the background
                if earlier is not None:  # a failure of an earlier drain was its pages' to report
                    await asyncio.gather(earlier, return_exceptions=True)
                await asyncio.gather(*(self._proxies[ctx].drain() for ctx in retired if ctx in self._proxies))
                for ctx in retired:
                    self.runtime.submit(self._discard(ctx))

            self._draining = asyncio.ensure_future(drain())
        draining = self._draining

        async def close_then_before() -> None:
            if draining is not None:
                await asyncio.shield(draining)  # shared by the pages queued after this one
            await asyncio.to_thread(before)

        # the new context and its blank tab (which ask no site anything) are built meanwhile
        tab = asyncio.ensure_future(self._make_blank())
        try:
            await close_then_before()
        except BaseException:
            ctx, _ = await tab
            await self._discard(ctx)
            raise
        return await tab

    def prewarmed(self, url: str, policy: UrlPolicy) -> bool:
        """True when the first context queued (:meth:`prewarm`) is for ``url`` under ``policy``,
        built and usable, so :meth:`open` without context options will take it (waits for it)."""
        if not self._queue or self._queue[0][0] != (url, policy):
            return False
        try:
            made = self._queue[0][1].result(timeout=self.config.load_timeout_s)
        except Exception:  # noqa: BLE001 - a failed prewarm is rebuilt by open()
            return False
        return made.context.browser is self.runtime.browser and not made.task_page.is_closed()

    def drop_prewarmed(self) -> None:
        """Close every queued prewarmed context now (waiting for each), e.g. before the site
        state their pages were opened on is restored."""
        queue, self._queue = list(self._queue), collections.deque()
        for _, fut in queue:
            if not self.runtime.alive:
                return
            try:
                made = fut.result(timeout=self.config.load_timeout_s)
            except Exception:  # noqa: BLE001 - nothing was built
                continue
            self.runtime.run(self._discard(_context_of(made)), self.config.call_timeout_s, "closing a prewarmed context")

    def _retire_queue(self) -> None:
        """Close every queued context once it is built, without waiting for it here (only pages
        of sites no reset restores get here: envs drop pages on a site's standby instance first,
        :meth:`drop_prewarmed`)."""
        for _, fut in self._queue:
            fut.add_done_callback(self._retire_built)
        self._queue.clear()

    def _retire_built(self, fut: concurrent.futures.Future) -> None:
        """Close a prewarmed context once built (a future's callback, on the loop thread)."""
        if fut.cancelled() or fut.exception() is not None:
            return
        self.runtime.submit(self._discard(_context_of(fut.result())))

    def discard_retired(self) -> None:
        """Close the contexts of earlier episodes in the background (for envs that do not prewarm)."""
        if self.runtime.alive:
            for ctx in self._retired:
                self.runtime.submit(self._discard(ctx))
        self._retired.clear()

    def open_tab(self, url: str) -> None:
        """Open ``url`` (host-chosen, e.g. a task's second start URL) in a new tab of this episode;
        the new tab becomes active. A URL the episode's policy refuses raises TaskSpecError: the
        host opens only URLs of the task's own sites."""
        refusal = self.episode.policy.refusal(url)
        if refusal is not None:
            raise TaskSpecError(f"start URL {url[:200]!r} is refused by the episode's URL policy: {refusal}")

        async def _open() -> None:
            page = await self.episode.context.new_page()  # adopted (and made active) by the "page" event
            await page.goto(url, wait_until="load", timeout=self.config.load_timeout_s * 1000)

        self.runtime.run(_open(), self.config.load_timeout_s + self.config.call_timeout_s, f"opening {url}")

    def close(self) -> None:
        self._queue.clear()
        self._retired.clear()
        self._last_ep.clear()
        try:  # on the browser thread, where the proxies run and the map is changed
            self.runtime.run(self._close_proxies(), 5.0, "closing the policy proxies")
        except Exception:  # noqa: BLE001 - closing must not raise; the loop's end drops them too
            pass
        self.runtime.close()
        self._ep = None

    async def _close_proxies(self) -> None:
        for proxy in list(self._proxies.values()):
            await proxy.close()
        self._proxies.clear()
        self._warmed.clear()
        self._host_urls.clear()

    def static_files(self) -> list[str]:
        """URLs of the stylesheets, scripts and fonts the task page has loaded so far (Resource
        Timing; by file extension, so no page or data request is listed), those the episode's
        policy allows, in load order; [] when there is no such page or it does not answer in
        ``call_timeout_s``. For :meth:`prewarm_blank`."""
        return self.runtime.run(self._static_files(), self.config.call_timeout_s + 1, "reading the page's static files")

    async def _static_files(self) -> list[str]:
        ep = self._ep
        page = ep.task_page if ep is not None else None
        if page is None or page.is_closed():
            return []
        try:
            urls = await asyncio.wait_for(page.evaluate(_STATIC_JS), self.config.call_timeout_s)
        except Exception:  # noqa: BLE001 - a page gone or busy: nothing to warm with
            if not self.runtime.alive:
                raise
            return []
        return [u for u in urls if isinstance(u, str) and ep.policy.allows(u)]

    @property
    def episode(self) -> _Episode:
        if self._ep is None:
            raise EnvInfraError("no page is open: call reset() first")
        return self._ep

    @property
    def page(self) -> Any:
        """The active tab (None when the agent closed every tab and none was observed since)."""
        return self.episode.active

    @property
    def task_page(self) -> Any:
        """The tab the episode started in (closed once the agent closed it)."""
        return self.episode.task_page

    @property
    def policy(self) -> UrlPolicy:
        return self.episode.policy

    async def _active_page(self, ep: Optional[_Episode] = None) -> Any:
        """The active tab of ``ep`` (default: the current episode); an empty one when the agent
        has closed them all."""
        ep = ep or self.episode
        ep.prune()
        if ep.active is None:
            page = await ep.context.new_page()
            ep.adopt(page)
        return ep.active

    # -- reading the page -------------------------------------------------------------------------
    def evaluate(self, expression: str, arg: Any = None, what: str = "page script") -> Any:
        """Evaluate ``expression`` in the active tab (host code only; never agent text)."""
        return self.runtime.run(self.page.evaluate(expression, arg), self.config.call_timeout_s, what)

    def _shows_allowed(self, url: str, ep: Optional[_Episode] = None) -> bool:
        return bool(_HARMLESS.match(url)) or (ep or self.episode).policy.allows(url)

    async def _guard(self, page: Any, ep: Optional[_Episode] = None) -> None:
        """Second line behind goto's check and the request routing: a tab showing a URL the policy
        refuses is emptied before anything of it is observed. Routing cannot see the target of a
        redirect (Playwright routes a redirected request's first URL only), so an allowed site
        that redirects elsewhere gets its request sent; what comes back is never observed."""
        ep = ep or self.episode
        url = page.url
        if page.is_closed() or self._shows_allowed(url, ep):
            return
        ep.blocked.append(f"{url[:200]}: {ep.policy.refusal(url)}")
        try:
            await page.goto("about:blank", timeout=self.config.load_timeout_s * 1000)
        except Exception:  # noqa: BLE001 - closed or navigating meanwhile; observe checks again
            if not self.runtime.alive:
                raise

    async def _capture(self, page: Any, cdp: Any) -> dict[str, str]:
        """CDP screenshot ({"data": base64 PNG}).

        Two transient Chromium refusals are handled here rather than surfacing as infrastructure
        failures: "Not attached to an active page" (Chromium's error page after a refused
        redirect) goes to Playwright's own capture; "Unable to capture screenshot" (the
        compositor has no frame yet, seen on 2 loaded cores right after a navigation in a
        context built in the background) is retried after a short wait, then falls back to
        Playwright's capture, which first makes the page produce a frame."""
        for attempt in range(_SHOT_RETRIES + 1):
            try:
                return await cdp.send("Page.captureScreenshot", self._shot_params)
            except Exception as exc:  # noqa: BLE001 - handle only the two errors named above
                msg = str(exc) if is_playwright_error(exc) else ""
                if "Unable to capture screenshot" in msg and attempt < _SHOT_RETRIES:
                    await asyncio.sleep(_SHOT_RETRY_WAIT_S * (attempt + 1))
                    continue
                if "Not attached to an active page" not in msg and "Unable to capture screenshot" not in msg:
                    raise
                break
        png = await page.screenshot(type="png", timeout=self.config.call_timeout_s * 1000)
        return {"data": base64.b64encode(png).decode()}

    async def _extra(self, page: Any, expr: Optional[str]) -> Any:
        if expr is None or page is None or page.is_closed():
            return None
        return await page.evaluate("(x) => (0, eval)(x)", expr)

    async def _observe_once(self, extra_expr: Optional[str], ep: Optional[_Episode] = None) -> WebObservation:
        ep = ep or self.episode
        page = await self._active_page(ep)
        await self._guard(page, ep)
        cdp = ep.cdps.get(page)
        if cdp is None:
            cdp = ep.cdps[page] = await ep.context.new_cdp_session(page)
        t0 = time.perf_counter()
        if self.config.a11y_builder is not None:
            if extra_expr is not None:
                raise ConfigError("extra_expr is not evaluated when a11y_builder replaces a11y.js")
            return await self._observe_built(ep, page, cdp, t0)
        opts = {"nodeCap": self.config.a11y_node_cap, "timeCapMs": self.config.a11y_time_cap_ms,
                "skipIds": list(self.config.a11y_skip_ids)}
        own_extra = page is ep.task_page
        js = ("([o, x]) => ({snap: window.__guigym ? window.__guigym.snapshot(o) : null, "
              "extra: x ? (0, eval)(x) : null, url: location.href})")
        shot, snap, extra = await asyncio.gather(
            self._capture(page, cdp),
            page.evaluate(js, [opts, extra_expr if own_extra else None]),
            self._extra(ep.task_page, None if own_extra else extra_expr),
        )
        if not (self._shows_allowed(page.url, ep) and self._shows_allowed(snap["url"], ep)):
            # a navigation the policy refuses committed while we looked: blank it, look again
            raise _Retry(f"the tab moved to {snap['url'][:200]} while it was observed")
        if snap["snap"] is None:  # a document the init script did not reach (e.g. an error page)
            await page.evaluate(_A11Y_JS)
            snap["snap"] = await page.evaluate("(o) => window.__guigym.snapshot(o)", opts)
        t1 = time.perf_counter()
        arr = self._decode(shot)
        s = snap["snap"]
        return WebObservation(
            screenshot=arr, a11y=s["xml"], url=snap["url"], a11y_nodes=s["nodes"],
            a11y_truncated=s["truncated"], a11y_reason=s["reason"],
            extra=snap["extra"] if own_extra else extra,
            timings={"observe_s": t1 - t0, "a11y_js_ms": s["ms"]},
        )

    def _decode(self, shot: dict[str, str]) -> np.ndarray:
        img = Image.open(io.BytesIO(base64.b64decode(shot["data"])))
        w, h = self.config.viewport
        if img.size != (w, h):  # the window is larger than the agent's screen: keep its top-left part
            img = img.crop((0, 0, w, h))
        return np.asarray(img.convert("RGB"), dtype=np.uint8)

    async def _observe_built(self, ep: _Episode, page: Any, cdp: Any, t0: float) -> WebObservation:
        """Screenshot + the tree of ``config.a11y_builder``, requested together (no extra_expr)."""
        assert self.config.a11y_builder is not None
        shot, s, url = await asyncio.gather(self._capture(page, cdp), self.config.a11y_builder(ep, page, cdp),
                                            page.evaluate("location.href"))
        if not (self._shows_allowed(page.url, ep) and self._shows_allowed(url, ep)):
            raise _Retry(f"the tab moved to {url[:200]} while it was observed")
        t1 = time.perf_counter()
        return WebObservation(
            screenshot=self._decode(shot), a11y=s["xml"], url=url, a11y_nodes=s["nodes"],
            a11y_truncated=s["truncated"], a11y_reason=s["reason"], meta=s.get("meta", {}),
            timings={"observe_s": t1 - t0, "a11y_build_ms": s["ms"]},
        )

    async def _observe_ahead(self, ep: _Episode) -> Optional[_Ahead]:
        """Observe ``ep``'s task page (just opened ahead) with a watcher armed in it first; None
        when it cannot be watched (still_watch.arm) or observed now: the reset observes it then."""
        page = ep.task_page
        try:
            watcher = await still_watch.arm(ep.cdps[page])
            if watcher is None:
                return None
            obs = await self._observe_once(None, ep)
        except Exception:  # noqa: BLE001 - a page that cannot be observed now is observed at the reset
            if not self.runtime.alive:
                raise
            return None
        if obs.meta.get("busy") or ep.active is not page:
            return None
        return _Ahead(obs, page, watcher)

    async def _take_ahead(self, extra_expr: Optional[str]) -> Optional[WebObservation]:
        """The episode's observation taken ahead (once), if the agent's tab is the page it was
        taken of and that page has not changed since; None otherwise."""
        ep = self.episode
        ahead, ep.ahead = ep.ahead, None
        if ahead is None or extra_expr is not None:
            return None
        ep.prune()
        page = ahead.page
        if ep.active is not page or ep.tabs != [page] or page.url != ahead.obs.url:
            return None
        t0 = time.perf_counter()
        if not await still_watch.unchanged(ep.cdps[page], ahead.watcher):
            return None
        timings = {**ahead.obs.timings, "observe_s": time.perf_counter() - t0,
                   "ahead_observe_s": ahead.obs.timings.get("observe_s", 0.0)}
        return dataclasses.replace(ahead.obs, timings=timings)

    async def _observe(self, extra_expr: Optional[str]) -> WebObservation:
        ahead = await self._take_ahead(extra_expr)
        if ahead is not None:
            return ahead
        # An action may leave a navigation or a tab closing in flight; a page call that lands in
        # the middle of it fails, and observing again shows where the action led.
        for attempt in range(3):
            try:
                return await self._observe_once(extra_expr)
            except Exception as exc:  # noqa: BLE001 - classified below
                retry = isinstance(exc, _Retry) or (is_playwright_error(exc) and _transient(exc))
                if attempt == 2 or not self.runtime.alive or not retry:
                    raise EnvInfraError(f"observing the page failed: {exc}") if isinstance(exc, _Retry) else exc
                page = self.episode.active
                # a cross-process navigation can leave our CDP session detached: make a new one
                self.episode.cdps.pop(page, None)
                if page is not None and not page.is_closed():
                    try:
                        await page.wait_for_load_state("domcontentloaded", timeout=self.config.load_timeout_s * 1000)
                    except Exception:  # noqa: BLE001 - the next attempt reports what is wrong
                        pass
        raise AssertionError("unreachable")

    def observe(self, extra_expr: Optional[str] = None) -> WebObservation:
        """Screenshot + a11y tree of the active tab (+ ``extra_expr`` evaluated in the task page,
        None when that page is closed) in one round trip.

        A tab that does not answer within ``call_timeout_s`` while the browser does is closed
        (see :meth:`_close_hung`) and the observation is taken again, of what is left."""
        try:
            return self.runtime.run(self._observe(extra_expr), self.config.call_timeout_s, "observing the page")
        except PageUnresponsive:
            self._close_hung()  # closed or not (it answered again: just slow), look again
            return self.runtime.run(self._observe(extra_expr), self.config.call_timeout_s, "observing the page")

    async def _close_unanswering(self) -> int:
        ep = self.episode
        ep.prune()

        async def answers(page: Any) -> bool:
            try:
                await asyncio.wait_for(page.evaluate("1"), timeout=self.config.call_timeout_s)
                return True
            except Exception:  # noqa: BLE001 - timeout or a page that went away: not answering
                return False

        tabs, closed = list(ep.tabs), 0
        for page, ok in zip(tabs, await asyncio.gather(*(answers(p) for p in tabs))):
            if not ok:
                ep.hung.append(page.url[:200])
                ep.task_page_closed_hung |= page is ep.task_page
                await page.close(run_before_unload=False)
                closed += 1
        ep.prune()
        return closed

    def _close_hung(self) -> int:
        """Close every tab whose page still does not answer after a further ``call_timeout_s``
        (an endless page script, e.g. one an agent's input set off); returns how many.

        Decision: what a page does after the agent's action is the agent's outcome, so the
        episode goes on and is scored (MiniWoB: 0 once the task page is gone); a browser that
        does not answer either stays an EnvInfraError (runtime.run), and so does a page that
        answers again within the grace period (a slow machine, not a hung page). The cost: a
        renderer starved of CPU for twice ``call_timeout_s`` (20 s) while the browser process
        answers is taken for a hung page."""
        return self.runtime.run(self._close_unanswering(), 2 * self.config.call_timeout_s + 5,
                                "closing tabs that stopped answering")

    @property
    def task_page_hung(self) -> bool:
        """The task page was closed because it stopped answering."""
        ep = self.episode
        return ep.task_page_closed_hung

    # -- acting -----------------------------------------------------------------------------------
    async def _center(self, element: str) -> tuple[float, float]:
        if self.config.element_center is not None:
            ep, page = self.episode, self.page
            cdp = ep.cdps.get(page)
            if cdp is None:
                cdp = ep.cdps[page] = await ep.context.new_cdp_session(page)
            return await self.config.element_center(page, cdp, element)
        res = await self.page.evaluate("(id) => window.__guigym.center(id)", element)
        if "error" in res:
            raise ActionNotPossible(res["error"])
        return res["x"], res["y"]

    async def _point(self, x: Any, y: Any, element: Optional[str]) -> tuple[float, float]:
        if element is not None:
            return await self._center(element)
        w, h = self.config.viewport
        if not (0 <= x < w and 0 <= y < h):
            raise ActionNotPossible(f"point ({x}, {y}) is outside the {w}x{h} screen")
        return float(x), float(y)

    async def _navigate(self, nav: Any, what: str) -> None:
        """Await a navigation the agent asked for; its failure (bad host, blocked, timeout) is the
        agent's outcome, reported as ActionNotPossible, unless the browser itself is gone."""
        try:
            await nav
        except Exception as exc:  # noqa: BLE001 - classified below
            if not self.runtime.alive or not is_playwright_error(exc):
                raise
            blocked = self.episode.drain_blocked()
            why = f"blocked ({blocked[-1]})" if blocked else str(exc).splitlines()[0]
            raise ActionNotPossible(f"cannot {what}: {why}") from None

    async def _execute(self, a: A.Action) -> None:
        page = await self._active_page()
        mouse, kb = page.mouse, page.keyboard
        if isinstance(a, A.Click):
            x, y = await self._point(a.x, a.y, a.element)
            await mouse.click(x, y, button=a.button)
        elif isinstance(a, A.DoubleClick):
            x, y = await self._point(a.x, a.y, a.element)
            await mouse.dblclick(x, y)
        elif isinstance(a, A.RightClick):
            x, y = await self._point(a.x, a.y, a.element)
            await mouse.click(x, y, button="right")
        elif isinstance(a, A.Hover):
            x, y = await self._point(a.x, a.y, a.element)
            await mouse.move(x, y)
        elif isinstance(a, A.Drag):
            x1, y1 = await self._point(a.x1, a.y1, None)
            x2, y2 = await self._point(a.x2, a.y2, None)
            await mouse.move(x1, y1)
            await mouse.down()
            await mouse.move(x2, y2, steps=5)
            await mouse.up()
        elif isinstance(a, A.Scroll):
            if a.x is not None or a.element is not None:
                x, y = await self._point(a.x, a.y, a.element)
                await mouse.move(x, y)
            await mouse.wheel(a.dx, a.dy)
        elif isinstance(a, A.Type):
            await kb.type(a.text)
        elif isinstance(a, A.Press):
            await kb.press(key_name(a.key))
        elif isinstance(a, A.Hotkey):
            keys = [key_name(k) for k in a.keys]
            for k in keys:
                await kb.down(k)
            for k in reversed(keys):
                await kb.up(k)
        elif isinstance(a, A.KeyDown):
            await kb.down(key_name(a.key))
        elif isinstance(a, A.KeyUp):
            await kb.up(key_name(a.key))
        elif isinstance(a, A.Fill):
            x, y = await self._center(a.element)
            await mouse.click(x, y)
            await kb.press("Control+A")
            await kb.press("Delete")
            await kb.type(a.text)
        elif isinstance(a, A.Select):
            err = await page.evaluate("([id, o]) => window.__guigym.selectOption(id, o)", [a.element, a.option])
            if err:
                raise ActionNotPossible(err)
        elif isinstance(a, A.Wait):
            await asyncio.sleep(a.seconds)
        elif isinstance(a, A.Goto):
            refusal = self.episode.policy.refusal(a.url)
            if refusal is not None:
                raise ActionNotPossible(f"{a.url[:200]!r} refused: {refusal}")
            await self._navigate(page.goto(a.url, timeout=self.config.load_timeout_s * 1000), f"open {a.url[:200]!r}")
        elif isinstance(a, A.GoBack):
            await self._navigate(page.go_back(timeout=self.config.load_timeout_s * 1000), "go back")
        elif isinstance(a, A.GoForward):
            await self._navigate(page.go_forward(timeout=self.config.load_timeout_s * 1000), "go forward")
        elif isinstance(a, A.NewTab):
            await self.episode.context.new_page()  # adopted (and made active) by the "page" event
            self.episode.prune()
        elif isinstance(a, A.TabFocus):
            ep = self.episode
            ep.prune()
            if not 0 <= a.index < len(ep.tabs):
                raise ActionNotPossible(f"there is no tab {a.index}; open tabs are 0..{len(ep.tabs) - 1}")
            ep.active = ep.tabs[a.index]
            await ep.active.bring_to_front()
        elif isinstance(a, A.CloseTab):
            await page.close()
            self.episode.prune()
        elif isinstance(a, (A.Done, A.Fail)):
            return
        else:
            raise ActionNotPossible(f"{a.name} is not available in a web browser")
        if self.config.settle_ms:
            await asyncio.sleep(self.config.settle_ms / 1000)

    async def _execute_reporting(self, a: A.Action) -> None:
        ep = self.episode
        ep.ahead = None  # observed before the action: of no use after it
        ep.drain_blocked()
        await self._execute(a)
        ep.prune()
        for page in list(ep.tabs):
            await self._guard(page)
        # requests the action caused and the policy refused (a link to another site, a redirect
        # to file:); reported when they happened before the action returned (a navigation a
        # click starts may be refused a moment later: it is still refused, just not reported)
        blocked = self.episode.drain_blocked()
        if blocked:
            raise ActionNotPossible(f"it led to a URL this task does not allow, which was blocked: {blocked[-1]}")

    def execute(self, action: A.Action) -> None:
        """Perform ``action``; raises ActionNotPossible (agent's fault) or EnvInfraError (ours)."""
        timeout = self.config.call_timeout_s + self.config.settle_ms / 1000 + \
            (action.seconds if isinstance(action, A.Wait) else 0)
        if isinstance(action, (A.Goto, A.GoBack, A.GoForward)):
            timeout += self.config.load_timeout_s
        try:
            self.runtime.run(self._execute_reporting(action), timeout, f"executing {action.name}")
        except PageUnresponsive as exc:
            if not self._close_hung():
                raise EnvInfraError(f"{exc}; the page answered again afterwards (a slow machine, not a hung page)") from None
            raise ActionNotPossible(f"the page stopped answering ({exc}); its tab was closed") from None
