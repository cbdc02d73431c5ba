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
import concurrent.futures
import io
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Optional

import numpy as np
from PIL import Image

from guigym.core import actions as A
from guigym.core.errors import ActionNotPossible, EnvInfraError
from guigym.envs.web.browser import BrowserRuntime

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


class WebController:
    """Drives one Chromium tab. Envs call ``open``/``observe``/``execute``; nothing else talks to Playwright."""

    def __init__(self, config: WebControllerConfig | None = None) -> None:
        self.config = config or WebControllerConfig()
        self.runtime = BrowserRuntime(headless=self.config.headless, executable_path=self.config.executable_path)
        self._context: Any = None
        self._page: Any = None
        self._cdp: Any = None
        self._next: Optional[concurrent.futures.Future] = None
        self._next_url: Optional[str] = None
        self._retired: list[Any] = []
        # Capture the whole window and crop in numpy: CDP's `clip` parameter makes Chromium take a
        # slower capture path (~20 ms vs ~8 ms for 500x320 -> 160x210 here, bench/web_step.py);
        # plain PNG encodes slower than optimizeForSpeed but decodes faster, a net win.
        self._shot_params: dict[str, Any] = {"format": "png"}

    # -- episode lifecycle ------------------------------------------------------------------------
    async def _make_page(self, url: str) -> tuple[Any, Any, Any]:
        w, h = self.config.window or self.config.viewport
        ctx = await self.runtime.browser.new_context(viewport={"width": w, "height": h}, device_scale_factor=1)
        ctx.set_default_timeout(self.config.call_timeout_s * 1000)
        await ctx.add_init_script(_A11Y_JS)
        page = await ctx.new_page()
        await page.goto(url, wait_until="load", timeout=self.config.load_timeout_s * 1000)
        cdp = await ctx.new_cdp_session(page)
        return ctx, page, cdp

    async def _discard(self, ctx: Any) -> None:
        try:
            await ctx.close()
        except Exception:  # noqa: BLE001 - the context may die with a crashed browser
            pass

    def open(self, url: str) -> None:
        """Start a new episode on ``url`` in a fresh browser context.

        Takes the context :meth:`prewarm` built in the background when its URL matches, which
        hides context creation (~150 ms on 2 cores) from reset latency; the previous episode's
        context is closed later, in :meth:`prewarm`, so that neither competes with this reset.
        """
        self.runtime.ensure_started()
        if self._context is not None:
            self._retired.append(self._context)
        self._context = self._page = self._cdp = None
        made = None
        if self._next is not None:
            fut, next_url, self._next = self._next, self._next_url, None
            try:
                made = fut.result(timeout=self.config.load_timeout_s)
            except Exception:  # noqa: BLE001 - a failed prewarm is simply rebuilt below
                made = None
            # a context built for another URL, or by a browser that has since crashed and been
            # relaunched by ensure_started() above, is of no use
            stale = made is not None and (made[0].browser is not self.runtime.browser or made[1].is_closed())
            if made is not None and (next_url != url or stale):
                if not stale:
                    self._retired.append(made[0])
                made = None
        if made is None:
            made = self.runtime.run(self._make_page(url), self.config.load_timeout_s, f"opening {url}")
        self._context, self._page, self._cdp = made

    def is_open(self, url: str) -> bool:
        """True when a live page is showing ``url`` (ignoring the fragment)."""
        if self._page is None or not self.runtime.alive or self._page.is_closed():
            return False
        return self._page.url.split("#")[0] == url.split("#")[0]

    def prewarm(self, url: str) -> None:
        """Close retired contexts and build the next episode's context for ``url`` in the background.

        Call it once the episode has its first observation, so the work overlaps the agent's
        turn instead of the reset.
        """
        if not self.runtime.alive:
            return
        for ctx in self._retired:
            self.runtime.submit(self._discard(ctx))
        self._retired.clear()
        if self._next is None:
            self._next_url = url
            self._next = self.runtime.submit(self._make_page(url))

    def close(self) -> None:
        self._next = None
        self._retired.clear()
        self.runtime.close()
        self._context = self._page = self._cdp = None

    @property
    def page(self) -> Any:
        if self._page is None:
            raise EnvInfraError("no page is open: call reset() first")
        return self._page

    # -- reading the page -------------------------------------------------------------------------
    def evaluate(self, expression: str, arg: Any = None, what: str = "page script") -> Any:
        return self.runtime.run(self.page.evaluate(expression, arg), self.config.call_timeout_s, what)

    async def _observe(self, extra_expr: Optional[str]) -> WebObservation:
        page, cdp = self.page, self._cdp
        t0 = time.perf_counter()
        opts = {"nodeCap": self.config.a11y_node_cap, "timeCapMs": self.config.a11y_time_cap_ms,
                "skipIds": list(self.config.a11y_skip_ids)}
        js = "([o, x]) => ({snap: window.__guigym.snapshot(o), extra: x ? (0, eval)(x) : null, url: location.href})"
        shot, snap = await asyncio.gather(
            cdp.send("Page.captureScreenshot", self._shot_params),
            page.evaluate(js, [opts, extra_expr]),
        )
        t1 = time.perf_counter()
        img = Image.open(io.BytesIO(base64.b64decode(shot["data"])))
        w, h = self.config.viewport
        if img.size != (w, h):  # the window is larger than the agent's screen: keep its top-left part
            img = img.crop((0, 0, w, h))
        arr = np.asarray(img.convert("RGB"), dtype=np.uint8)
        s = snap["snap"]
        return WebObservation(
            screenshot=arr, a11y=s["xml"], url=snap["url"], a11y_nodes=s["nodes"],
            a11y_truncated=s["truncated"], a11y_reason=s["reason"], extra=snap["extra"],
            timings={"observe_s": t1 - t0, "a11y_js_ms": s["ms"]},
        )

    def observe(self, extra_expr: Optional[str] = None) -> WebObservation:
        """Screenshot + a11y tree (+ ``extra_expr`` evaluated in the page) in one round trip."""
        return self.runtime.run(self._observe(extra_expr), self.config.call_timeout_s, "observing the page")

    # -- acting -----------------------------------------------------------------------------------
    async def _center(self, element: str) -> tuple[float, float]:
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

    async def _execute(self, a: A.Action) -> None:
        page = self.page
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
            try:
                await page.goto(a.url, timeout=self.config.load_timeout_s * 1000)
            except Exception as exc:  # noqa: BLE001 - a bad URL is the agent's problem, not ours
                if not self.runtime.alive:
                    raise
                raise ActionNotPossible(f"cannot open {a.url!r}: {str(exc).splitlines()[0]}") from None
        elif isinstance(a, A.GoBack):
            await page.go_back()
        elif isinstance(a, A.GoForward):
            await page.go_forward()
        elif isinstance(a, (A.Done, A.Fail)):
            return
        else:
            raise ActionNotPossible(f"{a.name} is not available in a web browser")
        if self.config.settle_ms:
            await asyncio.sleep(self.config.settle_ms / 1000)

    def execute(self, action: A.Action) -> None:
        """Perform ``action``; raises ActionNotPossible (agent's fault) or EnvInfraError (ours)."""
        timeout = self.config.call_timeout_s + self.config.settle_ms / 1000 + \
            (action.seconds if isinstance(action, A.Wait) else 0)
        self.runtime.run(self._execute(action), timeout, f"executing {action.name}")
