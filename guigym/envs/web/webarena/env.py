"""``gym.make("WebArena-v0", config_file=..., urls={...})``: WebArena tasks in real Chromium.

``gym.make("WebArena-v0")`` with nothing else starts the embedded sites this machine can run
(sites/: real self-hosted applications on loopback) and runs the tasks written for them.

One episode = one task config (``test.raw.json`` format, tasks.py), in a FRESH browser context:

* ``reset``: placeholders were resolved at construction (``urls=`` or ``WA_*`` variables); the
  task's sites that have a login recipe are logged in through their UI and the cached
  ``storage_state`` goes into the new context (login.py: expiry check + probe + refresh);
  ``geolocation`` is set when the config has one; every ``start_url`` tab (`` |AND| ``-joined)
  is opened and the first one is active, as WebArena's ``ScriptBrowserEnv.setup`` does.
* URL policy: the agent may open http(s) on the origins of the task's ``sites`` and start
  URLs only; ``goto`` elsewhere (another host, ``file:``, ``data:``, ``javascript:``...) and
  requests a click or script makes there are refused with ``info["action_error"]``
  (url_policy.py, enforced by the controller).
* ``step``: WebArena's id-based dialect by default (``click [id]``, ``type [id] [text] [1]``,
  ``scroll [down]`` = a 500 px wheel (the dialect's ``scroll_px``; WebArena's executor scrolls one
  window height), ``new_tab``, ``tab_focus [i]``, ``close_tab``,
  ``goto``, ``go_back``, ``go_forward``, ``press``, ``hover``, ``stop [answer]``). Element ids are
  those of the last observation of the active tab (observation.py). ``click`` on an option of a
  closed native drop-down chooses it (WebArena's click has no box to hit there). The next
  observation waits for a navigation the action started to load and for finite CSS transitions
  to end (``STILL_CAP_MS``), so a pane a tab's fade reveals is in it.
* Observation: ``screenshot`` uint8 (H, W, 3) of the viewport, ``a11y`` = WebArena's tree text
  with its tab header (or BrowserGym's ``[bid]`` variant, ``a11y_style="browsergym"``),
  ``instruction`` = the intent, ``url``; ``som`` (set-of-marks copy of the screenshot) when
  ``som=True``. ``info``: ``a11y_nodes``, ``a11y_truncated``, ``a11y_truncation_reason``.
* End: the evaluator (evaluators.py, ``evaluator="webarena"`` or ``"webarena-lite"``, or any
  callable with the :class:`EpisodeEvaluator` signature) reads the browser through a
  :class:`~guigym.envs.web.webarena.funcs.PageReader` on the agent's last page. A score of
  None (e.g. ``fuzzy_match`` without a judge) is reported as ``info["unscorable"]``; browser
  failures raise :class:`EnvInfraError`.
"""
from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence, Union

import numpy as np
from gymnasium import spaces

from guigym.core import actions as A
from guigym.core.errors import ConfigError, TaskSpecError
from guigym.core.task import Task
from guigym.envs.base import GUIEnv
from guigym.envs.spaces import UnicodeText
from guigym.envs.web.browser import is_playwright_error
from guigym.envs.web.controller import WebController, WebControllerConfig
from guigym.envs.web.url_policy import UrlPolicy, origin_of
from guigym.envs.web.webarena import tasks as T
from guigym.envs.web.webarena.login import WEBARENA_ACCOUNTS, WEBARENA_LOGINS, LoginManager, LoginRecipe
from guigym.envs.web.webarena.observation import AXTreeObserver, draw_marks, wait_until_still
from guigym.envs.web.webarena.sites import EMBEDDED, available, site_urls, spec, start_sites
from guigym.envs.web.webarena.sites.standby import StandbySite

VIEWPORT = (1280, 720)  # WebArena's run.py --viewport_width/--viewport_height
EVALUATORS = ("webarena", "webarena-lite")


class EpisodeEvaluator(Protocol):
    """``(config, answer, reader) -> (score in [0, 1] or None = unscorable, details)``.

    ``config``: the task's resolved WebArena config dict; ``answer``: the text of the agent's
    ``stop [answer]`` (None when the episode ended otherwise); ``reader``: a PageReader."""

    def __call__(self, config: dict[str, Any], answer: Optional[str], reader: Any) -> tuple[Optional[float], dict[str, Any]]: ...


#: how long after an action a navigation it caused may take to show up as a request
NAV_GRACE_S = 0.05
#: longest wait for a page's CSS transitions to end before it is observed anyway
STILL_CAP_MS = 1000.0


class NavTracker:
    """Which tabs of the episode have a top-level navigation in flight (request sent, ``load``
    not yet fired, request not failed or aborted). Its handlers run on the browser thread."""

    def __init__(self) -> None:
        self._pending: dict[Any, Any] = {}  # page -> its in-flight navigation request

    def attach(self, context: Any) -> None:
        self._pending.clear()
        context.on("request", self._request)
        context.on("requestfailed", self._failed)
        context.on("page", self._page)
        for page in context.pages:
            self._page(page)

    def _page(self, page: Any) -> None:
        page.on("load", lambda p=page: self._pending.pop(p, None))
        page.on("close", lambda p=page: self._pending.pop(p, None))

    def _request(self, request: Any) -> None:
        try:
            frame = request.frame
        except Exception:  # noqa: BLE001 - service-worker requests have no frame
            return
        if request.is_navigation_request() and frame.parent_frame is None:
            self._pending[frame.page] = request

    def _failed(self, request: Any) -> None:
        for page, req in list(self._pending.items()):
            if req is request or req.redirected_to is request:
                self._pending.pop(page, None)

    def loading(self) -> bool:
        return any(not p.is_closed() for p in self._pending)


class ScriptError(Exception):
    """A page script the evaluator ran threw (the element it reads is not on the page)."""


class BrowserPageReader:
    """:class:`~guigym.envs.web.webarena.funcs.PageReader` over the controller's active tab.

    Host-side only: ``script`` comes from the task's evaluator spec, never from the agent.
    ``goto`` obeys the episode's URL policy like every navigation. A script that throws raises
    :class:`ScriptError`; timeouts and a dead browser raise :class:`EnvInfraError`.
    """

    def __init__(self, controller: WebController) -> None:
        self.controller = controller

    def _page(self) -> Any:
        return self.controller.runtime.run(self.controller._active_page(), self.controller.config.call_timeout_s,
                                           "finding the active tab")

    @property
    def url(self) -> str:
        page = self._page()
        return page.url

    def goto(self, url: str) -> None:
        refusal = self.controller.policy.refusal(url)
        if refusal is not None:
            raise TaskSpecError(f"the evaluator wants {url[:200]!r}, which is not one of the task's sites: {refusal}")
        page = self._page()
        cfg = self.controller.config
        self.controller.runtime.run(page.goto(url, wait_until="load", timeout=cfg.load_timeout_s * 1000),
                                    cfg.load_timeout_s + cfg.call_timeout_s, f"opening {url[:200]} for evaluation")

    def content(self) -> str:
        page = self._page()
        return self.controller.runtime.run(page.content(), self.controller.config.call_timeout_s, "reading the page")

    def evaluate(self, script: str) -> Any:
        page = self._page()

        async def run() -> tuple[bool, Any]:
            try:
                return True, await page.evaluate(script)
            except Exception as exc:  # noqa: BLE001 - a throwing script vs. a dead page, below
                gone = page.is_closed() or not self.controller.runtime.alive or "has been closed" in str(exc)
                if is_playwright_error(exc) and not gone:
                    return False, str(exc).splitlines()[0]
                raise

        ok, value = self.controller.runtime.run(run(), self.controller.config.call_timeout_s, "evaluating a page script")
        if not ok:
            raise ScriptError(value)
        return value


def builtin_evaluator(name: str, judge: Optional[Callable[[list[dict[str, str]]], str]] = None,
                      sites: Optional[Mapping[str, str]] = None) -> EpisodeEvaluator:
    """evaluators.py's ``evaluate`` with semantics ``name`` ("webarena" or "webarena-lite")."""
    if name not in EVALUATORS:
        raise ConfigError(f"evaluator must be one of {EVALUATORS} or a callable, got {name!r}")
    from guigym.envs.web.webarena import evaluators

    def run(config: dict[str, Any], answer: Optional[str], reader: Any) -> tuple[Optional[float], dict[str, Any]]:
        res = evaluators.evaluate(T.parse_config(config, "task"), answer or "", reader, semantics=name,  # type: ignore[arg-type]
                                  judge=judge, sites=dict(sites or {}))
        details: dict[str, Any] = {"evaluator": name, "checks": res.checks}
        if res.score is None:
            details["unscorable_reason"] = res.unscorable_reason
        return res.score, details

    return run


def load_tasks(tasks: Any = None, config_file: Union[str, Path, Sequence[Union[str, Path]], None] = None,
               task_ids: Optional[Sequence[int]] = None, urls: Optional[Mapping[str, str]] = None,
               suite: str = "webarena", max_steps: int = 30) -> list[Task]:
    """Tasks from config dicts (``tasks=[{...}]``) and/or files (``config_file=``), placeholders
    resolved with ``urls`` over the ``WA_*`` variables, optionally only ``task_ids``.

    Strings in ``tasks`` are task ids (``"webarena.12"``) that select among the other configs,
    e.g. those of ``config_file`` (what the eval runner and EnvPool pass: ``tasks=[ids]``)."""
    configs: list[tuple[T.WebArenaConfig, str]] = []
    wanted_ids = [item for item in (tasks or ()) if isinstance(item, str)]
    for i, item in enumerate(tasks or ()):
        if isinstance(item, str):
            continue
        cfg = item if isinstance(item, T.WebArenaConfig) else T.parse_config(item, "tasks", i)
        configs.append((cfg, "tasks"))
    files = [config_file] if isinstance(config_file, (str, Path)) else list(config_file or ())
    for f in files:
        configs += [(c, str(f)) for c in T.load_configs(f)]
    if task_ids is not None:
        wanted = set(task_ids)
        missing = wanted - {c.task_id for c, _ in configs}
        if missing:
            raise TaskSpecError(f"task_ids: no task config with id(s) {sorted(missing)}")
        configs = [(c, s) for c, s in configs if c.task_id in wanted]
    if not configs:
        raise ConfigError("WebArena-v0 needs tasks: pass config_file= (WebArena config JSON) or tasks=[{...}]")
    if wanted_ids:  # before resolving: sites of unselected tasks need no URL
        known = {T.task_id(c.task_id, suite) for c, _ in configs}
        missing = [t for t in wanted_ids if t not in known]
        if missing:
            raise TaskSpecError(f"tasks: no task config with id(s) {missing} (ids look like '{suite}.<task_id>')")
        configs = [(c, s) for c, s in configs if T.task_id(c.task_id, suite) in set(wanted_ids)]
    return [T.to_task(T.resolve_sites(c, urls), suite=suite, source=s, max_steps=max_steps) for c, s in configs]


class WebArenaEnv(GUIEnv):
    """WebArena-v0 (see the module docstring).

    Args:
        tasks / config_file / task_ids: the suite (:func:`load_tasks`).
        urls: site key (``shopping``, ``shopping_admin``, ``reddit``, ``gitlab``, ``wikipedia``,
            ``map``, ``homepage``) -> base URL; wins over ``WA_*`` variables.
        evaluator: ``"webarena"`` (default), ``"webarena-lite"`` or an :class:`EpisodeEvaluator`.
        judge: the LLM judge for ``fuzzy_match`` (evaluators.py ``Judge``); without one those
            episodes are unscorable.
        embedded_sites: started sites (e.g. ``sites.fossil.FossilSite``) with ``key``, ``url`` and
            ``reset()``; their URLs join ``urls`` and every ``reset`` restores their seed state
            first (the caller starts and closes them).
        embedded: names of embedded sites (``sites.EMBEDDED``: ``"fossil"``, ...) or ``"all"`` (those
            this machine can run) that the env starts on loopback, owns and closes; their suites
            are the tasks unless ``tasks``/``config_file`` say otherwise. Given no tasks, config file,
            URLs or sites at all, the env runs ``"all"``: ``gym.make("WebArena-v0")`` works offline.
        prewarm: build the next episode's browser context and tab in the background after each
            reset (a fresh, blank context: isolation is unchanged; not used for episodes whose
            storage state holds localStorage), its HTTP cache warmed with the static files
            (CSS/JS/fonts) the next task's start page loaded last time, under that task's URL
            policy; the next task is the one ``reset()`` without a task draws (presampled), so
            a reset given another task gets that cache emptied unless its policy allows every
            origin warmed. When every site the next task may show is read-only (kiwix, the map)
            or on standby (below) and it needs no login or geolocation, its start page itself is
            opened ahead and observed, so the reset only swaps contexts (and checks the page has
            not changed since, envs/web/still_watch.py).
        pages_ahead: how many coming episodes get their start page opened ahead that way (each
            in a context of its own): a page that takes longer to open than one agent turn (the
            shop's catalogue, ~0.7 s on 2 cores) has that many turns to do it. Only after a reset
            that drew its task itself (``reset()`` without task or seed), or with one task: a
            caller that names each reset's task gets the blank context only.
        standby_sites: the embedded sites the env starts (``embedded=``) that hold state (Fossil,
            the forum, the shop) run as ``pages_ahead + 1`` instances behind one URL each
            (sites/standby.py :class:`StandbySite`): one serves the episode while the others are
            restored to the seed and the next start pages opened on them; each reset moves the
            live role on. Costs more servers per site (memory); False: one instance restored at
            each reset.
        logins / accounts: per-site :class:`LoginRecipe` and ``{"username", "password"}``
            (default: WebArena's recipes and published accounts).
        login_probe_interval_s: how often a cached login is re-checked through its probe page.
        a11y_style: ``"webarena"`` or ``"browsergym"``; ``viewport_only``: WebArena's
            ``current_viewport_only``; ``som``: add the set-of-marks screenshot.
    """

    platform = "web"

    def __init__(self, tasks: Any = None, config_file: Any = None, task_ids: Optional[Sequence[int]] = None,
                 urls: Optional[Mapping[str, str]] = None, evaluator: Union[str, EpisodeEvaluator] = "webarena",
                 dialect: str = "webarena", max_steps: Optional[int] = None, viewport: tuple[int, int] = VIEWPORT,
                 a11y_style: str = "webarena", a11y_node_cap: int = 5000, a11y_time_cap_ms: float = 1000.0,
                 viewport_only: bool = False, som: bool = False, headless: bool = True,
                 executable_path: Optional[str] = None, call_timeout_s: float = 10.0, load_timeout_s: float = 30.0,
                 logins: Optional[Mapping[str, LoginRecipe]] = None,
                 accounts: Optional[Mapping[str, Mapping[str, str]]] = None, login_probe_interval_s: float = 300.0,
                 judge: Optional[Callable[[list[dict[str, str]]], str]] = None, render_mode: Optional[str] = None, info_timings: bool = False,
                 embedded_sites: Sequence[Any] = (), embedded: Union[None, str, Sequence[str]] = None,
                 prewarm: bool = True, standby_sites: bool = True, pages_ahead: int = 2) -> None:
        self.prewarm = bool(prewarm)
        if isinstance(pages_ahead, bool) or not isinstance(pages_ahead, int) or not 1 <= pages_ahead <= 8:
            raise ConfigError(f"pages_ahead must be an int from 1 to 8, got {pages_ahead!r}")
        self.pages_ahead = pages_ahead
        # embedded sites (sites/): the ones the caller started, plus those we start and own when
        # asked (``embedded=``) or when given nothing to run (the built-in default)
        self._owned_sites: list[Any] = []
        self._sites_dir: Optional[tempfile.TemporaryDirectory[str]] = None
        if embedded is None and tasks is None and config_file is None and not embedded_sites and not urls:
            embedded = "all"
        if embedded:
            names = self._embedded_names(embedded)
            self._sites_dir = tempfile.TemporaryDirectory(prefix="guigym-webarena-sites-")
            self._owned_sites = start_sites(names, Path(self._sites_dir.name),
                                            standby=pages_ahead if standby_sites and self.prewarm else 0)
            if config_file is None and not any(isinstance(t, Mapping) for t in (tasks or ())):
                config_file = [EMBEDDED[n].suite for n in names]
        self.embedded_sites = [*embedded_sites, *self._owned_sites]
        urls = {**{k: v for site in self.embedded_sites for k, v in site_urls(site).items()}, **dict(urls or {})}
        try:
            loaded = load_tasks(tasks, config_file, task_ids, urls)
        except BaseException:
            self._close_sites()
            raise
        super().__init__(loaded, dialect=dialect, max_steps=max_steps, render_mode=render_mode,
                         info_timings=info_timings)
        self.urls = {**T.site_urls_from_env(), **dict(urls or {})}
        self.evaluator: EpisodeEvaluator = (evaluator if callable(evaluator)
                                            else builtin_evaluator(evaluator, judge=judge, sites=self.urls))
        self.viewport = (int(viewport[0]), int(viewport[1]))
        self.som = bool(som)
        self.observer = AXTreeObserver(style=a11y_style, node_cap=a11y_node_cap, time_cap_ms=a11y_time_cap_ms,
                                       viewport=self.viewport, viewport_only=viewport_only, som=som)
        self.controller = WebController(WebControllerConfig(
            viewport=self.viewport, headless=headless, executable_path=executable_path,
            call_timeout_s=call_timeout_s, load_timeout_s=load_timeout_s,
            a11y_builder=self.observer.build, element_center=self.observer.center,
            # 1280x720 pages: ~15-20 ms faster capture and ~10 ms faster decode, same pixels
            fast_png=True,
        ))
        self.logins = LoginManager(
            run=self.controller.runtime.run, browser=lambda: self.controller.runtime.browser, urls=self.urls,
            # an embedded site brings the recipe for its own login page (``site.logins``)
            recipes=dict(logins) if logins is not None else {
                **WEBARENA_LOGINS, **{k: v for site in self.embedded_sites for k, v in getattr(site, "logins", {}).items()}},
            accounts={**WEBARENA_ACCOUNTS, **{k: dict(v) for k, v in (accounts or {}).items()}},
            probe_interval_s=login_probe_interval_s, timeout_s=load_timeout_s * 2,
        )
        w, h = self.viewport
        obs = {
            "screenshot": spaces.Box(0, 255, shape=(h, w, 3), dtype=np.uint8),
            "a11y": UnicodeText(max_length=2_000_000),
            "instruction": UnicodeText(max_length=8192),
            "url": UnicodeText(max_length=8192),
        }
        if self.som:
            obs["som"] = spaces.Box(0, 255, shape=(h, w, 3), dtype=np.uint8)
        self.observation_space = spaces.Dict(obs)
        self._obs_meta: dict[str, Any] = {}
        self._nav = NavTracker()
        #: start URL -> the static files (CSS/JS/fonts) its page loaded when last opened, what the
        #: next episode's prewarmed context is warmed with (_after_reset)
        self._statics: dict[str, list[str]] = {}
        #: the pending prewarmed context's page was opened on StandbySites' standby instances
        self._ahead_on_standby = False

    # ---- per-task settings ----------------------------------------------------------------------
    @staticmethod
    def config_of(task: Task) -> dict[str, Any]:
        cfg = task.extra.get("webarena_config")
        if not isinstance(cfg, dict):
            raise TaskSpecError(f"task {task.id} has no WebArena config (extra['webarena_config'])")
        return cfg

    def policy_for(self, task: Task) -> UrlPolicy:
        """The task's sites and start URLs' origins; nothing else."""
        cfg = self.config_of(task)
        starts = [u.strip() for u in cfg["start_url"].split(T.TAB_SEPARATOR)]
        origins = [origin_of(self.urls[s]) for s in cfg.get("sites", []) if s in self.urls]
        origins += [origin_of(u) for u in starts]
        return UrlPolicy.for_start_url(starts[0], [o for o in origins if o], field=f"sites of task {task.id}")

    def context_options(self, task: Task) -> dict[str, Any]:
        cfg = self.config_of(task)
        opts: dict[str, Any] = {}
        if cfg.get("require_login") or cfg.get("storage_state"):
            state = self.logins.storage_state(cfg.get("sites", []))
            if state is not None:
                opts["storage_state"] = state
        geo = cfg.get("geolocation")
        if geo:
            if not isinstance(geo, dict) or not {"latitude", "longitude"} <= set(geo):
                raise TaskSpecError(f"task {task.id}: field 'geolocation' needs latitude and longitude, got {geo!r}")
            opts["geolocation"] = {k: float(geo[k]) for k in ("latitude", "longitude", "accuracy") if k in geo}
            opts["permissions"] = ["geolocation"]
        return opts

    def _specialise(self, task: Task, spec: Mapping[str, Any]) -> Task:
        """A spec'd task's WebArena config: the root's, with ``intent`` the new instruction and
        ``instantiation_dict`` the new params (start URL, sites and login stay the root's)."""
        cfg = dict(self.config_of(task))
        cfg["intent"] = task.instruction
        if spec.get("params"):
            cfg["instantiation_dict"] = dict(spec["params"])
        return task.model_copy(update={"extra": {**task.extra, "webarena_config": cfg}})

    # ---- hooks ----------------------------------------------------------------------------------
    def _start_episode(self, task: Task, seed: int) -> None:
        cfg = self.config_of(task)
        starts = [u.strip() for u in cfg["start_url"].split(T.TAB_SEPARATOR)]
        policy = self.policy_for(task)
        # the first page opened ahead (_after_reset) is this episode's
        ahead = self._open_ahead(task) == starts[0] and self.controller.prewarmed(starts[0], policy)
        if self._ahead_on_standby and not ahead:
            # the pages opened ahead used standby instances, restored below or before their next use
            self.controller.drop_prewarmed()
            self._ahead_on_standby = False
        if self.embedded_sites:
            self.timings["site_reset_s"] = sum(
                site.reset(standby_ready=ahead) if isinstance(site, StandbySite) else site.reset()
                for site in self.embedded_sites)
            for site in self.embedded_sites:
                if getattr(site, "resets_sessions", False):  # the seed holds no login session
                    for key in site_urls(site):
                        self.logins.forget_site(key)
        self.controller.runtime.ensure_started()
        options = self.context_options(task)
        # the episode's contexts reach the live instances directly: a relay turned to the other
        # instance at the next reset does not move a page of this episode
        self.controller.open(starts[0], policy, context_options=options or None, upstreams=self._upstreams())
        for url in starts[1:]:
            self.controller.open_tab(url)
        if len(starts) > 1:
            self.controller.execute(A.TabFocus(index=0))
        context = self.controller.episode.context

        async def attach() -> None:  # Playwright's event handlers are set on its own thread
            self._nav.attach(context)

        self.controller.runtime.run(attach(), self.controller.config.call_timeout_s, "watching navigations")

    def _after_reset(self) -> None:
        # the next episode's context and tab (renderer start) are built while the agent acts. Its
        # page is opened too when its sites are read-only or on standby (_open_ahead); otherwise
        # it cannot be, as the site is restored only at that reset, and the context's HTTP cache is warmed with
        # the static files the next task's start page loaded last time (no page: those come
        # from the restored site), under the next task's policy (controller.prewarm_blank).
        if not self.prewarm:
            self.controller.discard_retired()
            return
        standby = [s for s in self.embedded_sites if isinstance(s, StandbySite)]
        depth = min([self.pages_ahead, *(s.depth for s in standby)])
        if len(self.tasks) > 1 and not self.last_reset_drew_task:
            # resets given their task (guigym eval, the trainer's scheduler) rarely ask for the
            # one drawn ahead: pages opened for it would be dropped, after delaying that reset
            depth = 0
        # the start pages of the next `depth` episodes, those queued at earlier resets first
        for n in range(self.controller.pending + 1, depth + 1):
            nxt = self.task if len(self.tasks) == 1 else self.presample_task(n)
            url = self._open_ahead(nxt)
            if url is None:  # opened at its own reset; the pages after it wait until then
                break
            # stateful sites: on the instance that serves that episode, restored once no context
            # can reach it (named now: the resets in between move the live role on); observed
            # there too: its reset uses that observation if the page has not changed since
            instances = [(s, s.index(n)) for s in standby]
            self.controller.prewarm(url, self.policy_for(nxt), upstreams=self._upstreams(ahead=n),
                                    before=lambda i=instances: [s.restore_instance(k) for s, k in i], observe=True)
        self._ahead_on_standby = bool(standby) and self.controller.pending > 0
        if not self.controller.pending:
            self.controller.prewarm_blank(self._warm_plan())

    def _open_ahead(self, task: Task) -> Optional[str]:
        """The start URL of ``task`` when its page may be opened before its reset, else None.

        Only when every origin the task may show is served by an embedded site that either
        declares ``read_only`` (no request can change what it serves, so a page opened now is
        the page its reset would open) or runs on a ring of instances (:class:`StandbySite`: the
        page is opened on a standby instance, restored first), and the episode needs no context
        options (a login's cookies, a geolocation), which the prewarmed context could not have
        had. Any other page waits for its site's restore (:meth:`_start_episode`)."""
        cfg = self.config_of(task)
        if cfg.get("require_login") or cfg.get("storage_state") or cfg.get("geolocation"):  # context_options
            return None
        openable = {origin_of(u) for site in self.embedded_sites
                    if getattr(site, "read_only", False) or isinstance(site, StandbySite)
                    for u in site_urls(site).values()}
        policy = self.policy_for(task)
        if not policy.origins or not policy.origins <= openable:
            return None
        return cfg["start_url"].split(T.TAB_SEPARATOR)[0].strip()

    def _upstreams(self, ahead: int = 0) -> dict[tuple[str, int], tuple[str, int]]:
        """Every :class:`StandbySite`'s relay -> the instance that serves the ``ahead``-th next
        episode (0: the live one)."""
        out: dict[tuple[str, int], tuple[str, int]] = {}
        for site in self.embedded_sites:
            if isinstance(site, StandbySite):
                out.update(site.upstreams(ahead=ahead))
        return out

    def _warm_plan(self) -> Callable[[list[str]], Optional[tuple[UrlPolicy, str, list[str]]]]:
        """For ``controller.prewarm_blank``: given the static files this episode's start page
        loaded (read in the background), record them and return ``(policy, start URL, static
        files)`` of the next task (the one the next ``reset()`` without a task draws; this one
        when it is the only task), or None when its start page has not been opened yet."""
        assert self.task is not None
        start = self.config_of(self.task)["start_url"].split(T.TAB_SEPARATOR)[0].strip()
        nxt = self.task if len(self.tasks) == 1 else self.presample_next_task()
        nxt_start = self.config_of(nxt)["start_url"].split(T.TAB_SEPARATOR)[0].strip()
        policy = self.policy_for(nxt)

        def plan(files: list[str]) -> Optional[tuple[UrlPolicy, str, list[str]]]:
            # runs on the browser thread; the main thread reads _statics only in the next reset,
            # after this has run (open() waits for the prewarm)
            if len(self._statics) >= 1024 and start not in self._statics:  # bounded: one entry per start URL
                self._statics.pop(next(iter(self._statics)))
            self._statics[start] = files
            got = self._statics.get(nxt_start)
            return (policy, nxt_start, got) if got else None

        return plan

    def _observe(self) -> dict[str, Any]:
        o = self.controller.observe()
        if o.meta.get("busy"):
            # the document was still loading (its AX root says busy): observe it loaded
            self._settle(grace_s=0.0)
            o = self.controller.observe()
        self._obs_meta = {"a11y_nodes": o.a11y_nodes, "a11y_truncated": o.a11y_truncated,
                          "a11y_truncation_reason": o.a11y_reason}
        self.timings["observe_s"] = o.timings["observe_s"]
        if "ahead_observe_s" in o.timings:  # taken when the page was opened ahead; this was the check
            self.timings["ahead_observe_s"] = o.timings["ahead_observe_s"]
        obs = {"screenshot": o.screenshot, "a11y": o.a11y, "instruction": self.task.instruction if self.task else "",
               "url": o.url[:8192]}
        if self.som:
            obs["som"] = draw_marks(o.screenshot, o.meta.get("boxes", {}), o.meta.get("roles", {}))
        return obs

    def _execute(self, action: A.Action) -> None:
        if (isinstance(action, A.Scroll) and self.dialect == "webarena" and action.x is None
                and action.element is None and action.dx == 0 and action.dy != 0):
            # WebArena's scroll [down|up] moves one window height (browser_env/actions.py)
            action = A.Scroll(dy=self.viewport[1] if action.dy > 0 else -self.viewport[1])
        if not (isinstance(action, A.Click) and action.element is not None and self._choose_option(action.element)):
            self.controller.execute(action)
        self._settle()

    def _choose_option(self, element: str) -> bool:
        """A click on an option of a closed drop-down chooses it (observation.py ``_CHOOSE_FN``);
        False when ``element`` is not one, to be clicked as usual."""
        ctl = self.controller
        if self.observer.role(ctl.page, element) != "option":
            return False

        async def choose() -> bool:
            ep = ctl.episode
            page = await ctl._active_page()
            cdp = ep.cdps.get(page)
            if cdp is None:
                cdp = ep.cdps[page] = await ep.context.new_cdp_session(page)
            return await self.observer.choose_option(page, cdp, element)

        return ctl.runtime.run(choose(), ctl.config.call_timeout_s, "choosing an option")

    def _settle(self, grace_s: float = NAV_GRACE_S) -> None:
        """Wait until a navigation the action started (a clicked link, a form sent with Enter) has
        loaded, so the observation shows where it led, as WebArena observes the next page. The
        navigation's request may reach us a moment after the action returns, hence the short
        grace before looking; a request seen later whose document is still loading when observed
        is caught by the tree's ``busy`` root (``_observe``). A page still loading after
        ``load_timeout_s`` is observed as is."""
        cfg = self.controller.config
        nav = self._nav

        async def wait() -> None:
            await asyncio.sleep(grace_s)
            deadline = time.monotonic() + cfg.load_timeout_s
            while nav.loading() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            page = self.controller.page
            if page is not None and not page.is_closed():
                try:  # a document that committed but has not loaded yet
                    await page.wait_for_load_state("load", timeout=max(0.1, deadline - time.monotonic()) * 1000)
                except Exception:  # noqa: BLE001 - slow or gone: observe what is there
                    if not self.controller.runtime.alive:
                        raise
                try:  # and still: what a click revealed behind a CSS transition (a tab's fade) is shown
                    await wait_until_still(page, STILL_CAP_MS)
                except Exception:  # noqa: BLE001 - a page that went away: observe what is there
                    if not self.controller.runtime.alive:
                        raise

        self.controller.runtime.run(wait(), cfg.load_timeout_s + cfg.call_timeout_s, "waiting for the page to load")

    def _verify(self, task: Task, last_action: Optional[A.Action]) -> tuple[Optional[float], dict[str, Any]]:
        answer = last_action.answer if isinstance(last_action, A.Done) else None
        if isinstance(last_action, A.Fail):
            answer = "N/A"
        reader = BrowserPageReader(self.controller)
        score, details = self.evaluator(self.config_of(task), answer, reader)
        details = dict(details)
        details.setdefault("answer", answer)
        if score is not None:
            score = float(score)
            details.setdefault("success", score >= 1.0)
        return score, details

    def _episode_info(self) -> dict[str, Any]:
        return dict(self._obs_meta)

    @staticmethod
    def _embedded_names(embedded: Union[str, Sequence[str]]) -> list[str]:
        if embedded == "all":
            names = available()
            if not names:
                lacking = "; ".join(f"{n}: {', '.join(s.missing())} ({s.hint})" for n, s in EMBEDDED.items())
                raise ConfigError("WebArena-v0 was given no tasks or URLs, so it runs its embedded sites, "
                                  f"but none can run here: {lacking}")
            return names
        names = [embedded] if isinstance(embedded, str) else list(embedded)
        for n in names:
            spec(n)  # ConfigError naming an unknown site
        return names

    def _close_sites(self) -> None:
        for site in self._owned_sites:
            site.close()
        self._owned_sites = []
        if self._sites_dir is not None:
            self._sites_dir.cleanup()
            self._sites_dir = None

    def close(self) -> None:
        try:
            self.controller.close()
            super().close()
        finally:
            self._close_sites()
