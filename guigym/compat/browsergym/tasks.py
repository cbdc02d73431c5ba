"""guigym's MiniWoB tasks and embedded WebArena sites' tasks as BrowserGym tasks (issue 36, item 3).

Runs in the BrowserGym user's Python (``browsergym-core`` and its Playwright), next to BrowserGym's
own :class:`browsergym.core.env.BrowserEnv`, which launches the browser, runs the agent's
high-level actions and calls the task's ``setup(page)`` / ``validate(page, chat_messages)`` /
``teardown()`` (``browsergym/core/task.py``: ``AbstractBrowserTask``).

* :class:`GuigymMiniWoBTask`: the page of the installed ``miniwob`` package, served by guigym's
  loopback static server (127.0.0.1, secret path prefix: other requests get 403; never
  ``file://``) in this process; the problem is started with the same script as ``MiniWoB-v0``
  (:data:`guigym.envs.web.miniwob.START_EPISODE_JS`) and scored as there
  (:func:`~guigym.envs.web.miniwob.wob_score`: ``clip(raw, 0, 1)``).
* :class:`GuigymWebArenaTask`: a task of an embedded site's suite (``suite/<site>/tasks.json``);
  the site runs in guigym's Python (:mod:`guigym.compat.browsergym.host`, a child process
  spoken to over a pipe) and is restored to its seed at every ``setup`` (its own ``reset()``:
  milliseconds for most sites). Scored by guigym's WebArena evaluators
  (:func:`guigym.envs.web.webarena.evaluators.evaluate`) on the agent's page once the agent
  answers (``send_msg_to_user``) or reports the task infeasible (answer ``"N/A"``), as
  ``WebArena-v0`` scores at ``stop``.

Answers and reference solutions stay in this process (the task objects); no page is ever given
them. A tab outside the task's sites ends the episode with 0, as BrowserGym's WebArena tasks do.
"""
from __future__ import annotations

import atexit
import json
import secrets
import subprocess
import threading
from typing import Any, Callable, Optional, Tuple

import playwright.sync_api
from browsergym.core.task import AbstractBrowserTask

from guigym.compat.hostproc import guigym_pythonpath, host_python_default, read_json_line, stop
from guigym.core.errors import ConfigError, EnvInfraError, TaskSpecError
from guigym.envs.web.miniwob import MAX_SETTIMEOUT_MS, START_EPISODE_JS, TASK_WINDOW, miniwob_tasks, task_url, wob_score
from guigym.envs.web.url_policy import origin_of
from guigym.envs.web.webarena.login import WEBARENA_ACCOUNTS, locate

#: a site's first start builds its seed (Spirit, the shop: migrations, ~1 min on 2 cores)
HOST_START_TIMEOUT_S = 900.0
HOST_RESET_TIMEOUT_S = 120.0
#: Playwright's per-call timeout for the task's own page calls (setup, login, evaluation): an
#: infrastructure bound (a page that takes longer is an error, never the agent's score); a Spirit
#: login took over 30 s at load average ~18 on 2 cores
PAGE_TIMEOUT_MS = 90_000
#: CSS ids core.js adds around the task (reward HUD, start cover, click trail) and the query;
#: hidden so the agent's observation has the task only (the query is the goal), as MiniWoB-v0's
#: a11y tree leaves them out
MINIWOB_CHROME_CSS = "#reward-display, #sync-task-cover, #click-canvas, #query { display: none !important; }"


# ================================================================================================
# MiniWoB
# ================================================================================================
class GuigymMiniWoBTask(AbstractBrowserTask):
    """One MiniWoB++ task page (``browsergym/guigym.miniwob.<name>``).

    The problem is drawn by the page's own generator seeded with a number from BrowserGym's task
    RNG (``self.random``, seeded by ``env.reset(seed=)``), as browsergym-miniwob does. Reward after
    every step: 0 until the page ends the episode, then guigym's score of its raw reward.
    """

    #: the MiniWoB task name (``click-test``); set per registered id through ``task_kwargs``
    def __init__(self, seed: int, name: str) -> None:
        super().__init__(seed)
        found = {t.id: t for t in miniwob_tasks()}
        if name not in found:
            raise TaskSpecError(f"guigym.miniwob: no MiniWoB task named {name!r}")
        self.task = found[name]
        # MiniWoB's own window around its 160x210 task area (MiniWoB-v0's TASK_WINDOW)
        self.viewport = {"width": TASK_WINDOW[0], "height": TASK_WINDOW[1]}
        self.slow_mo = 0
        self.timeout = 5000
        self.page: Optional[playwright.sync_api.Page] = None
        self.url = ""
        self._nonce = ""

    @classmethod
    def get_task_id(cls) -> str:
        return "guigym.miniwob"

    def setup(self, page: playwright.sync_api.Page) -> tuple[str, dict]:
        self.page, self.url = page, task_url(self.task)
        page.goto(self.url, wait_until="load", timeout=PAGE_TIMEOUT_MS)
        page.add_style_tag(content=MINIWOB_CHROME_CSS)
        self._nonce = secrets.token_hex(8)
        ready = page.evaluate(START_EPISODE_JS, [int(self.random.randint(0, 2**31 - 1)), MAX_SETTIMEOUT_MS,
                                                 PAGE_TIMEOUT_MS * 0.9, self._nonce])
        if not ready["ready"]:
            raise EnvInfraError(f"MiniWoB task {self.task.id} did not become ready within {PAGE_TIMEOUT_MS} ms")
        utterance = ready["utterance"]
        if isinstance(utterance, dict):  # a few tasks return {utterance, fields}
            utterance = utterance.get("utterance", "")
        return str(utterance), {"task_id": self.task.id}

    def _read(self, page: playwright.sync_api.Page) -> Optional[list[Any]]:
        # null unless the page still shows this episode's document (the nonce is hex: no quoting)
        return page.evaluate(f"window.__guigymEpisode === '{self._nonce}' && typeof WOB_DONE_GLOBAL !== 'undefined'"
                             " ? [WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_REASON] : null")

    def validate(self, page: playwright.sync_api.Page, chat_messages: list[dict]) -> Tuple[float, bool, str, dict]:
        state = self._read(page) if page == self.page and not page.is_closed() else None
        if state is None:
            return 0.0, True, "", {"error": "the active tab no longer shows the task page", "task_page_gone": True}
        done, raw, reason = bool(state[0]), float(state[1]), state[2]
        score, success = wob_score(done, raw)
        return score, done, "", {"raw_reward": raw, "success": success, "reason": reason}

    def cheat(self, page: playwright.sync_api.Page, chat_messages: list[dict]) -> None:
        raise NotImplementedError("guigym's MiniWoB tasks have no reference solution")


# ================================================================================================
# WebArena on the embedded sites
# ================================================================================================
class SiteHost:
    """One embedded site running in guigym's Python (:mod:`guigym.compat.browsergym.host`)."""

    def __init__(self, site: str, host_python: Optional[str] = None) -> None:
        self.site = site
        argv = [host_python or host_python_default(), "-m", "guigym.compat.browsergym.host", "--site", site]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=guigym_pythonpath(),
                                     text=True, bufsize=1)
        try:
            hello = read_json_line(self.proc, HOST_START_TIMEOUT_S, "start", f"guigym site host ({site})")
        except BaseException:
            stop(self.proc)
            raise
        if not hello.get("ok"):
            stop(self.proc)
            raise EnvInfraError(f"embedded site {site!r} did not start: {hello.get('error')}")
        #: site key (``"reddit"``) -> base URL on 127.0.0.1
        self.urls: dict[str, str] = dict(hello["urls"])
        #: site key -> LoginRecipe fields (login_path, fields, submit, probe_path, probe_keyword)
        self.logins: dict[str, dict[str, Any]] = dict(hello["logins"])
        self.start_s = float(hello["start_s"])

    def reset(self) -> float:
        """Restore the site's seed state; seconds the site took."""
        if self.proc.poll() is not None or self.proc.stdin is None:
            raise EnvInfraError(f"embedded site {self.site!r}: its host process is gone")
        self.proc.stdin.write(json.dumps({"op": "reset"}) + "\n")
        self.proc.stdin.flush()
        reply = read_json_line(self.proc, HOST_RESET_TIMEOUT_S, "reset", f"guigym site host ({self.site})")
        if not reply.get("ok"):
            raise EnvInfraError(f"embedded site {self.site!r}: reset failed: {reply.get('error')}")
        return float(reply["reset_s"])

    def close(self) -> None:
        stop(self.proc)


class SitePool:
    """The site hosts of this process: one site instance per live episode.

    ``acquire`` hands out an idle host of the site (starting one when every host is in use, so two
    envs of one process never share a stateful site); ``release`` returns it; ``close`` stops all
    (at exit). BrowserGym tears the previous task down before setting up the next, so one env
    reuses one host and its site starts once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[str, list[SiteHost]] = {}
        self._all: list[SiteHost] = []

    def acquire(self, site: str) -> SiteHost:
        with self._lock:
            idle = self._idle.setdefault(site, [])
            if idle:
                return idle.pop()
        host = SiteHost(site)
        with self._lock:
            self._all.append(host)
        return host

    def release(self, host: SiteHost) -> None:
        with self._lock:
            self._idle.setdefault(host.site, []).append(host)

    def close(self) -> None:
        with self._lock:
            hosts, self._all, self._idle = self._all, [], {}
        for host in hosts:
            host.close()


POOL = SitePool()
atexit.register(POOL.close)


def prestart(*sites: str) -> None:
    """Start a host for each embedded site now (idle in :data:`POOL`), so the first episode's
    ``reset`` does not wait for the site to start (Spirit and the shop: tens of seconds on a loaded
    machine) and the start does not compete with the browsers for CPU."""
    for site in sites:
        POOL.release(POOL.acquire(site))


class PageReader:
    """:class:`guigym.envs.web.webarena.funcs.PageReader` over a BrowserGym (sync Playwright) page.

    ``goto`` opens only the task's sites; a script that throws raises Playwright's error (read as
    "element absent" by the evaluators); a closed page or a timeout raises :class:`EnvInfraError`.
    """

    def __init__(self, page: playwright.sync_api.Page, allowed: Callable[[str], bool]) -> None:
        self.page, self.allowed = page, allowed

    @property
    def url(self) -> str:
        return self.page.url

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except playwright.sync_api.TimeoutError as exc:
            raise EnvInfraError(f"{what}: timed out: {str(exc).splitlines()[0]}") from exc
        except playwright.sync_api.Error as exc:
            if self.page.is_closed() or "has been closed" in str(exc):
                raise EnvInfraError(f"{what}: the page is gone: {str(exc).splitlines()[0]}") from exc
            raise

    def goto(self, url: str) -> None:
        if not self.allowed(url):
            raise TaskSpecError(f"the evaluator wants {url[:200]!r}, which is not one of the task's sites")
        self._call(f"opening {url[:200]}", lambda: self.page.goto(url, wait_until="load", timeout=PAGE_TIMEOUT_MS))

    def content(self) -> str:
        return self._call("reading the page", self.page.content)

    def evaluate(self, script: str) -> Any:
        return self._call("evaluating a page script", lambda: self.page.evaluate(script))


def answer_of(chat_messages: list[dict]) -> Optional[str]:
    """The agent's final answer: its last message when the chat ends with one (``send_msg_to_user``),
    ``"N/A"`` when it ends with ``report_infeasible``, else None (the agent has not stopped)."""
    if not chat_messages:
        return None
    last = chat_messages[-1]
    if last.get("role") == "assistant":
        return str(last.get("message", ""))
    if last.get("role") == "infeasible":
        return "N/A"
    return None


class GuigymWebArenaTask(AbstractBrowserTask):
    """One task of an embedded site's suite (``browsergym/guigym.webarena.<task_id>``).

    ``setup``: restore the site (its ``reset()``), log into the task's sites that have a login
    recipe through their own login page (WebArena's accounts), open the start URL(s) (` |AND| `
    gives one tab each, the first one active). ``validate``: 0 and not done until the agent
    answers; then guigym's evaluator (``semantics`` ``"webarena"`` or ``"webarena-lite"``) on the
    active page. ``fuzzy_match`` tasks need a judge: without one the episode is unscorable
    (reward 0, ``info["unscorable"]``), never a silent 0.
    """

    def __init__(self, seed: int, site: str, task_id: int, semantics: str = "webarena") -> None:
        super().__init__(seed)
        from guigym.envs.web.webarena.sites import spec

        raw = [c for c in json.loads(spec(site).suite.read_text()) if c.get("task_id") == task_id]
        if not raw:
            raise TaskSpecError(f"guigym.webarena: no task {task_id} in the {site!r} suite")
        self.site, self.task_id, self.semantics, self.raw = site, int(task_id), semantics, raw[0]
        self.viewport = {"width": 1280, "height": 720}  # WebArena's and BrowserGym's
        self.slow_mo = 0
        self.timeout = 10_000
        self.host: Optional[SiteHost] = None
        self.config: Any = None
        self.reset_s: Optional[float] = None

    @classmethod
    def get_task_id(cls) -> str:
        return "guigym.webarena"

    def _allowed(self, url: str) -> bool:
        assert self.host is not None
        return url in ("about:blank", "") or origin_of(url) in {origin_of(u) for u in self.host.urls.values()}

    def _login(self, page: playwright.sync_api.Page, key: str) -> None:
        assert self.host is not None
        recipe, account = self.host.logins[key], WEBARENA_ACCOUNTS.get(key)
        if account is None:
            raise ConfigError(f"embedded site {self.site!r}: no account for site key {key!r}")
        base = self.host.urls[key]
        page.goto(base + recipe["login_path"], wait_until="load", timeout=PAGE_TIMEOUT_MS)
        for spec_, field in recipe["fields"]:
            locate(page, spec_).fill(account[field], timeout=PAGE_TIMEOUT_MS)
        with page.expect_navigation(wait_until="load", timeout=PAGE_TIMEOUT_MS):
            locate(page, recipe["submit"]).click(timeout=PAGE_TIMEOUT_MS)
        probe = base + recipe["probe_path"].format(**account)
        page.goto(probe, wait_until="load", timeout=PAGE_TIMEOUT_MS)
        ok = recipe["probe_keyword"] in page.content() if recipe["probe_keyword"] else page.url == probe
        if not ok:  # wrong account or a changed site: infrastructure, never the agent's failure
            raise EnvInfraError(f"logging into {key!r} on embedded site {self.site!r} failed its probe ({probe})")

    def setup(self, page: playwright.sync_api.Page) -> tuple[str, dict]:
        from guigym.envs.web.webarena import tasks as T

        self.host = POOL.acquire(self.site)
        self.reset_s = self.host.reset()
        self.config = T.resolve_sites(T.parse_config(self.raw, f"{self.site}[{self.task_id}]"), self.host.urls, {})
        for key in self.config.sites:
            if key in self.host.logins:
                self._login(page, key)
        for i, url in enumerate(self.config.start_urls):
            if i:
                page = page.context.new_page()
            page.goto(url, wait_until="load", timeout=PAGE_TIMEOUT_MS)
        page.context.pages[0].bring_to_front()
        return self.config.intent, {"task_id": self.task_id, "site": self.site, "site_reset_s": self.reset_s}

    def validate(self, page: playwright.sync_api.Page, chat_messages: list[dict]) -> Tuple[float, bool, str, dict]:
        off = [p.url for p in page.context.pages if not self._allowed(p.url)]
        if off:
            return 0.0, True, "", {"error": f"a tab left the task's sites: {off[0][:200]}", "off_site": True}
        answer = answer_of(chat_messages)
        if answer is None:
            return 0.0, False, "", {}
        from guigym.envs.web.webarena import evaluators

        assert self.host is not None
        res = evaluators.evaluate(self.config, answer, PageReader(page, self._allowed), semantics=self.semantics,  # type: ignore[arg-type]
                                  judge=None, sites=self.host.urls)
        info: dict[str, Any] = {"answer": answer, "checks": res.checks}
        if res.score is None:
            return 0.0, True, "", {**info, "unscorable": True, "unscorable_reason": res.unscorable_reason}
        return float(res.score), True, "", {**info, "success": res.score >= 1.0}

    def teardown(self) -> None:
        host, self.host = self.host, None
        if host is not None:
            POOL.release(host)


# ================================================================================================
# registration
# ================================================================================================
def webarena_task_ids() -> dict[int, str]:
    """Task id -> embedded site, over every embedded site's suite (read from the package data)."""
    from guigym.envs.web.webarena.sites import EMBEDDED

    out: dict[int, str] = {}
    for name, s in EMBEDDED.items():
        for cfg in json.loads(s.suite.read_text()):
            out[int(cfg["task_id"])] = name
    return out


def register() -> list[str]:
    """Register ``browsergym/guigym.miniwob.<name>`` for every MiniWoB task and
    ``browsergym/guigym.webarena.<task_id>`` for every embedded site's task, with BrowserGym's own
    ``register_task`` (so ``gym.make`` builds BrowserGym's ``BrowserEnv``). Returns the ids."""
    from browsergym.core.registration import register_task

    ids = []
    for t in miniwob_tasks():
        register_task(f"guigym.miniwob.{t.id}", GuigymMiniWoBTask, task_kwargs={"name": t.id}, nondeterministic=False)
        ids.append(f"browsergym/guigym.miniwob.{t.id}")
    for task_id, site in sorted(webarena_task_ids().items()):
        register_task(f"guigym.webarena.{task_id}", GuigymWebArenaTask, task_kwargs={"site": site, "task_id": task_id},
                      nondeterministic=True)
        ids.append(f"browsergym/guigym.webarena.{task_id}")
    return ids


__all__ = ["GuigymMiniWoBTask", "GuigymWebArenaTask", "PageReader", "SiteHost", "SitePool", "POOL", "answer_of",
           "prestart", "register", "webarena_task_ids"]
