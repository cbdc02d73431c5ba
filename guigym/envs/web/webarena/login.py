"""Per-site login through each site's own UI, cached as Playwright ``storage_state`` per site set.

WebArena logs in once with ``browser_env/auto_login.py`` and reuses the saved cookies for every
task (``storage_state`` in the config); stale cookies then fail tasks silently (webarena#64,
#230). Here the :class:`LoginManager` keeps one storage state per *set* of sites (e.g.
``("gitlab", "shopping")``), hands it to each episode's fresh browser context, and refreshes it
when

* a cookie in it has expired (checked at every reset, free), or
* the probe fails: every ``probe_interval_s`` seconds (0 = every reset) the cached state is
  loaded into a scratch context and each site's probe page is opened; WebArena's own test
  (``is_expired``): the page contains the probe keyword, or, without a keyword, the browser stays
  on the probe URL instead of being redirected to a login page.

A login that does not pass its own probe right after logging in is an :class:`EnvInfraError`
(wrong credentials or a changed site: infrastructure, never the agent's failure).

Recipes are data (:class:`LoginRecipe`); locators use a small prefix syntax mapped to Playwright
locator calls (``label:``, ``placeholder:``, ``testid:``, ``role:<role>:<name>``, ``css:``), so no
configuration string is evaluated. :data:`WEBARENA_LOGINS` are WebArena's four recipes (facts from
``auto_login.py``); pass ``logins={...}`` to the env for other deployments.
"""
from __future__ import annotations

import asyncio
import copy
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

from guigym.core.errors import ConfigError, EnvInfraError


@dataclass(frozen=True)
class LoginRecipe:
    """How to log into one site and how to tell that a saved session still works.

    Paths are appended to the site's base URL. ``fields``: (locator, account key) pairs filled in
    order; ``submit``: the locator clicked at the end.
    """

    login_path: str
    fields: tuple[tuple[str, str], ...]
    submit: str
    probe_path: str
    probe_keyword: str = ""


#: WebArena's recipes (browser_env/auto_login.py ``renew_comb``, probes from ``URLS``/``KEYWORDS``)
WEBARENA_LOGINS: dict[str, LoginRecipe] = {
    "shopping": LoginRecipe("/customer/account/login/", (("label:Email", "username"), ("label:Password", "password")),
                            "role:button:Sign In", "/wishlist/"),
    "shopping_admin": LoginRecipe("", (("placeholder:user name", "username"), ("placeholder:password", "password")),
                                  "role:button:Sign in", "/dashboard", "Dashboard"),
    "reddit": LoginRecipe("/login", (("label:Username", "username"), ("label:Password", "password")),
                          "role:button:Log in", "/user/{username}/account", "Delete"),
    "gitlab": LoginRecipe("/users/sign_in", (("testid:username-field", "username"), ("testid:password-field", "password")),
                          "testid:sign-in-button", "/-/profile"),
}
#: WebArena's published test accounts (browser_env/env_config.py ``ACCOUNTS``)
WEBARENA_ACCOUNTS: dict[str, dict[str, str]] = {
    "shopping": {"username": "emma.lopez@gmail.com", "password": "Password.123"},
    "shopping_admin": {"username": "admin", "password": "admin1234"},
    "reddit": {"username": "MarvelsGrandpa17", "password": "test1234"},
    "gitlab": {"username": "byteblaze", "password": "hello1234"},
}


def locate(page: Any, spec: str) -> Any:
    """A Playwright locator for ``spec`` (``label:Email``, ``placeholder:x``, ``testid:x``,
    ``role:button:Sign In``, ``css:#id``); ConfigError for anything else."""
    kind, _, rest = spec.partition(":")
    if kind == "label":
        return page.get_by_label(rest, exact=True)
    if kind == "placeholder":
        return page.get_by_placeholder(rest)
    if kind == "testid":
        return page.get_by_test_id(rest)
    if kind == "css":
        return page.locator(rest)
    if kind == "role":
        role, _, name = rest.partition(":")
        return page.get_by_role(role, name=name) if name else page.get_by_role(role)
    raise ConfigError(f"login locator {spec!r}: use label:, placeholder:, testid:, role:<role>:<name> or css:")


def expired_cookies(state: Mapping[str, Any], now: Optional[float] = None) -> list[str]:
    """Names of cookies in ``state`` whose expiry time has passed (session cookies never expire here)."""
    now = time.time() if now is None else now
    return [c.get("name", "?") for c in state.get("cookies", [])
            if isinstance(c.get("expires"), (int, float)) and 0 < c["expires"] <= now]


@dataclass
class _Cached:
    state: dict[str, Any]
    checked_at: float


class LoginManager:
    """Logs into site sets and caches their storage states (see the module docstring).

    Args:
        run: ``run(coro, timeout_s, what)`` executing a coroutine on the browser's loop
            (``BrowserRuntime.run``).
        browser: a callable returning the live Playwright ``Browser``.
        urls: site key -> base URL.
        recipes / accounts: per site key; sites without a recipe need no login.
        probe_interval_s: how old a successful probe may be before the next reset probes again.
    """

    def __init__(self, run: Callable[..., Any], browser: Callable[[], Any], urls: Mapping[str, str],
                 recipes: Mapping[str, LoginRecipe], accounts: Mapping[str, Mapping[str, str]],
                 probe_interval_s: float = 300.0, timeout_s: float = 60.0,
                 clock: Callable[[], float] = time.time) -> None:
        if probe_interval_s < 0:
            raise ConfigError(f"login_probe_interval_s must be >= 0, got {probe_interval_s}")
        self._run, self._browser = run, browser
        self.urls = {k: v.rstrip("/") for k, v in urls.items()}
        self.recipes, self.accounts = dict(recipes), {k: dict(v) for k, v in accounts.items()}
        self.probe_interval_s, self.timeout_s, self.clock = float(probe_interval_s), float(timeout_s), clock
        self._cache: dict[tuple[str, ...], _Cached] = {}
        self._lock = threading.Lock()
        #: counters for tests and logs: logins performed, probes run, refreshes caused by each reason
        self.stats = {"logins": 0, "probes": 0, "expired_cookie": 0, "probe_failed": 0}

    def site_set(self, sites: Sequence[str]) -> tuple[str, ...]:
        """The sites of ``sites`` that need a login (have a recipe), sorted: the cache key."""
        return tuple(sorted({s for s in sites if s in self.recipes}))

    def _account(self, site: str) -> dict[str, str]:
        acc = self.accounts.get(site)
        if not acc or "username" not in acc or "password" not in acc:
            raise ConfigError(f"no account for site {site!r}: pass accounts={{'{site}': {{'username': ..., 'password': ...}}}}")
        return acc

    def _url(self, site: str, path: str) -> str:
        if site not in self.urls:
            raise ConfigError(f"site {site!r} needs a login but has no URL (set its WA_* variable or urls=)")
        return self.urls[site] + path.format(**self._account(site))

    def storage_state(self, sites: Sequence[str]) -> Optional[dict[str, Any]]:
        """A storage state logged into every site of ``sites`` that has a recipe (None when none
        has): the cached one while it is valid, else a fresh login. A deep copy: callers may
        not change the cache."""
        key = self.site_set(sites)
        if not key:
            return None
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and expired_cookies(cached.state, self.clock()):
                self.stats["expired_cookie"] += 1
                cached = None
            if cached is not None and self.clock() - cached.checked_at >= self.probe_interval_s:
                if self._probe(key, cached.state):
                    cached.checked_at = self.clock()
                else:
                    self.stats["probe_failed"] += 1
                    cached = None
            if cached is None:
                state = self._login(key)
                if not self._probe(key, state):
                    raise EnvInfraError(f"logging into {', '.join(key)} through the UI did not give a working "
                                        "session (the probe page still asks for a login): check the accounts")
                cached = self._cache[key] = _Cached(state, self.clock())
            return copy.deepcopy(cached.state)

    def invalidate(self, sites: Optional[Sequence[str]] = None) -> None:
        with self._lock:
            if sites is None:
                self._cache.clear()
            else:
                self._cache.pop(self.site_set(sites), None)

    def forget_site(self, site: str) -> None:
        """Drop every cached state that includes ``site`` (its sessions are gone, e.g. its
        database was restored to the seed, which holds no session)."""
        with self._lock:
            for key in [k for k in self._cache if site in k]:
                del self._cache[key]

    # -- browser work -----------------------------------------------------------------------------
    def _login(self, key: tuple[str, ...]) -> dict[str, Any]:
        self.stats["logins"] += 1

        async def go() -> dict[str, Any]:
            ctx = await self._browser().new_context()
            try:
                page = await ctx.new_page()
                for site in key:
                    recipe, acc = self.recipes[site], self._account(site)
                    await page.goto(self._url(site, recipe.login_path), wait_until="load")
                    for spec, field in recipe.fields:
                        await locate(page, spec).fill(acc[field])
                    async with page.expect_navigation(wait_until="load"):
                        await locate(page, recipe.submit).click()
                return await ctx.storage_state()
            finally:
                await ctx.close()

        return self._run(go(), self.timeout_s, f"logging into {', '.join(key)}")

    def _probe(self, key: tuple[str, ...], state: dict[str, Any]) -> bool:
        """WebArena's ``is_expired`` for every site of ``key``, in one scratch context."""
        self.stats["probes"] += 1

        async def go() -> bool:
            ctx = await self._browser().new_context(storage_state=copy.deepcopy(state))
            try:
                pages = [await ctx.new_page() for _ in key]

                async def one(page: Any, site: str) -> bool:
                    recipe = self.recipes[site]
                    url = self._url(site, recipe.probe_path)
                    await page.goto(url, wait_until="load")
                    if recipe.probe_keyword:
                        return recipe.probe_keyword in await page.content()
                    return page.url == url

                return all(await asyncio.gather(*(one(p, s) for p, s in zip(pages, key))))
            finally:
                await ctx.close()

        return bool(self._run(go(), self.timeout_s, f"probing the login of {', '.join(key)}"))
