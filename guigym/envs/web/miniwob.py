"""MiniWoB++ in real Chromium: the task pages shipped by the ``miniwob`` package on PyPI.

Each episode opens the task page in a new document of a browser context that holds nothing of any
earlier episode (``isolation``, see :class:`MiniWoBEnv`), seeds the page's RNG with
``Math.seedrandom(seed)`` and starts the task with ``core.startEpisodeReal()``. The page's own
JavaScript decides when the episode ends and with what reward (``core.endEpisode``), which we
read from its globals after every step:

* ``WOB_DONE_GLOBAL``: the page ended the episode -> ``terminated=True``
* ``WOB_RAW_REWARD_GLOBAL``: raw reward in [-1, 1] (+1 solved, -1 wrong, partial values on a few
  tasks such as ``click-checkboxes-soft``), before MiniWoB's optional time decay.

Mapping to guigym's verifier score (documented in docs/architecture.md):
``score = clip(raw, 0, 1)`` and ``success = raw > 0`` (MiniWoB's own convention: the
``time_proportional`` flag and published success rates count positive rewards). An episode the
page did not end (the agent said ``done`` or ran out of steps) scores 0.

core.js ends every episode after ``core.EPISODE_MAX_TIME`` (10 s, 60 s for flight tasks) with
reward -1. Wall-clock limits make results depend on the agent's speed, so the limit is off by
default (``episode_time_limit_s=None``) and can be set per env.

The agent never sees the page's JS state: observations are the screenshot, the a11y tree and the
utterance (``core.getUtterance()``, the text a person reads above the task).

Pages are served over http by :class:`LoopbackStaticServer` (127.0.0.1, random port, secret path
prefix, GET/HEAD only, no directory listings), never from file://, so Chromium needs no file
access. The agent may open only that server's origin (plus ``allowed_origins``, see
:class:`~guigym.envs.web.url_policy.UrlPolicy`).

What the agent's actions cause is scored, never turned into an infrastructure error: each episode
marks its task document with a fresh nonce; when the task tab no longer shows that document (the
agent navigated away, went back past it, or closed it), the reward globals are not read from
whatever is shown instead, and the episode scores 0 with ``verifier["reason"]`` saying so.
"""
from __future__ import annotations

import functools
import http.server
import importlib.util
import secrets
import sys
import threading
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
from gymnasium import spaces

from guigym.core import actions as A
from guigym.core.errors import ConfigError, EnvInfraError, TaskSpecError
from guigym.core.task import Task
from guigym.envs.base import GUIEnv
from guigym.envs.spaces import UnicodeText
from guigym.envs.web.controller import WebController, WebControllerConfig
from guigym.envs.web.url_policy import UrlPolicy

#: Pages in the package that its own gymnasium registration leaves out (timing-based or
#: unfinished upstream); we follow the package.
UNREGISTERED = frozenset({"button-delay", "chase-circle", "hover-shape", "moving-items", "simon-says"})
#: Flight-booking tasks: real airline pages in an iframe.
FLIGHT_TASKS = ("flight.AA", "flight.Alaska", "flight.Alaska-auto")
TASK_VIEWPORT = (160, 210)  # MiniWoB's task area (width, height): the agent's screen
FLIGHT_VIEWPORT = (375, 667)
#: browser windows around those areas, as in MiniWoB's own harness: pages lay out for a wider
#: window (jQuery UI dialogs centre themselves in it) and the screenshot shows the task area
TASK_WINDOW = (500, 320)
FLIGHT_WINDOW = (600, 800)
#: elements core.js adds around the task (reward HUD, start cover, click trail); the query is
#: given as ``instruction`` instead of being repeated in the tree.
CHROME_IDS = ("reward-display", "sync-task-cover", "click-canvas", "query")
MAX_SETTIMEOUT_MS = 2**31 - 1
#: MiniWoBEnv's ``isolation`` values, the default first
ISOLATION_MODES = ("clean", "context", "page")


#: Starts a problem in the open task page (args ``[seed, limit_ms, wait_ms, nonce]``) and resolves
#: ``{ready, utterance}``: marks the document with the episode's nonce, ends a running problem,
#: keeps the page as the agent left it when the page ends one (core.js would show its START
#: cover), seeds the page's RNG, sets core.js's time limit and waits up to ``wait_ms`` for
#: ``WOB_TASK_READY``. Shared by MiniWoB-v0 and the BrowserGym tasks (guigym.compat.browsergym).
START_EPISODE_JS = """([seed, limit, wait, nonce]) => new Promise((resolve) => {
    window.__guigymEpisode = nonce;
    if (core.EP_TIMER !== null) core.endEpisode(0, false, 'reset');
    // core.endEpisode ends by showing the START cover (a human harness clicks it for the
    // next problem); the env starts each problem itself, so the page stays as the agent
    // left it and the episode's final observation shows that page, not the cover
    if (!core.__guigymKeepsPage) {
      core.startEpisode = function () { core.createDisplay(); };
      core.__guigymKeepsPage = true;
    }
    Math.seedrandom(seed);
    core.EPISODE_MAX_TIME = limit;
    core.startEpisodeReal();
    const t0 = performance.now();
    (function poll() {
      if (WOB_TASK_READY) resolve({ready: true, utterance: core.getUtterance()});
      else if (performance.now() - t0 > wait) resolve({ready: false, utterance: ''});
      else setTimeout(poll, 20);
    })();
})"""


def wob_score(done: bool, raw: Optional[float]) -> tuple[float, bool]:
    """MiniWoB's reward -> guigym's ``(score, success)``: ``clip(raw, 0, 1)`` and ``raw > 0``
    (MiniWoB's convention) when the page ended the episode; ``(0.0, False)`` when it did not."""
    if not done or raw is None:
        return 0.0, False
    return float(min(1.0, max(0.0, raw))), raw > 0


def miniwob_html_dir() -> Path:
    """The ``html`` folder of the installed ``miniwob`` package (not imported, only located)."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise EnvInfraError("the `miniwob` package is not installed: pip install miniwob")
    return Path(list(spec.submodule_search_locations)[0]) / "html"


@functools.lru_cache(maxsize=1)
def miniwob_tasks() -> tuple[Task, ...]:
    """Every MiniWoB++ task the package registers, as Tasks (regular tasks first, then flight)."""
    root = miniwob_html_dir()
    out = []
    for page in sorted((root / "miniwob").glob("*.html")):
        if page.stem in UNREGISTERED:
            continue
        out.append(Task(id=page.stem, platform="web", suite="miniwob", domain="miniwob", max_steps=15,
                        source=str(page), extra={"kind": "task"}))
    for name in FLIGHT_TASKS:
        page = root / "flight" / name.split(".", 1)[1] / "wrapper.html"
        if page.exists():
            out.append(Task(id=name, platform="web", suite="miniwob", domain="flight", max_steps=40,
                            source=str(page), extra={"kind": "flight"}))
    if not out:
        raise EnvInfraError(f"no MiniWoB task pages found under {root}")
    return tuple(out)


class _QuietOnDisconnect(http.server.ThreadingHTTPServer):
    """A browser that goes away mid-response (a closed tab, a killed browser on Ctrl-C) is not an
    error of the server's: the stdlib would print a BrokenPipeError traceback to stderr for it."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)):
            return
        super().handle_error(request, client_address)


class LoopbackStaticServer:
    """Serves a directory read-only on 127.0.0.1 under a secret path prefix (the token).

    Requests whose path does not start with ``/<token>/`` get 403, so other local users cannot
    read through it by guessing the port. GET and HEAD only; directories are not listed (404);
    paths are resolved inside ``root`` by the stdlib handler (``..`` cannot leave it). HTTP/1.1
    keep-alive, so a page's scripts and styles share one connection.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.token = secrets.token_urlsafe(16)
        prefix = f"/{self.token}"
        root_str = str(self.root)

        class Handler(http.server.SimpleHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def __init__(self, *a: Any, **kw: Any) -> None:
                super().__init__(*a, directory=root_str, **kw)

            def translate_path(self, path: str) -> str:
                return super().translate_path(path[len(prefix):])

            def do_GET(self) -> None:  # noqa: N802 - stdlib name
                if not self.path.startswith(prefix + "/"):
                    self.send_error(403, "missing or wrong token")
                    return
                super().do_GET()

            do_HEAD = do_GET  # noqa: N815

            def list_directory(self, path: Any) -> None:  # noqa: ARG002 - stdlib signature
                self.send_error(404, "directory listings are off")
                return None

            def guess_type(self, path: Any) -> str:
                # MiniWoB's pages and scripts are UTF-8 without a <meta charset>: without a
                # charset Chromium decodes them as windows-1252 and unicode-test's labels
                # ('ÖK', '取消') reach the page as mojibake
                ctype = super().guess_type(path)
                if ctype.startswith("text/") or ctype in ("application/javascript", "application/json"):
                    ctype += "; charset=utf-8"
                return ctype

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = _QuietOnDisconnect(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True, name="guigym-static")
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{self.token}/"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


_server_lock = threading.Lock()
_server: Optional[LoopbackStaticServer] = None


def _static_server() -> LoopbackStaticServer:
    global _server
    with _server_lock:
        if _server is None:
            _server = LoopbackStaticServer(miniwob_html_dir())
        return _server


def task_url(task: Task) -> str:
    """The task page's URL on the loopback server (every MiniWoB page, flight or not)."""
    if task.extra.get("kind") == "flight":
        return _static_server().base_url + "flight/" + task.id.split(".", 1)[1] + "/wrapper.html"
    return _static_server().base_url + "miniwob/" + Path(task.source).name


def select_tasks(task: Optional[str] = None, tasks: Optional[Sequence[str]] = None, suite: str = "all") -> list[Task]:
    """Resolve the env's task list: one ``task``, a list ``tasks``, or a ``suite``.

    Suites: ``all`` (the regular 160x210 tasks), ``flight`` (the three flight-booking sites).
    """
    everything = {t.id: t for t in miniwob_tasks()}
    names: list[str]
    if task is not None and tasks is not None:
        raise TaskSpecError("give either task= or tasks=, not both")
    if task is not None:
        names = [task]
    elif tasks is not None:
        names = list(tasks)
    elif suite == "all":
        names = [t.id for t in miniwob_tasks() if t.extra["kind"] == "task"]
    elif suite == "flight":
        names = [t.id for t in miniwob_tasks() if t.extra["kind"] == "flight"]
    else:
        raise TaskSpecError(f"unknown MiniWoB suite {suite!r}; use 'all' or 'flight'")
    unknown = [n for n in names if n not in everything]
    if unknown:
        from guigym.envs.options import did_you_mean

        raise TaskSpecError(f"unknown MiniWoB task(s): {', '.join(unknown)}{did_you_mean(unknown[0], everything)}")
    selected = [everything[n] for n in names]
    kinds = {t.extra["kind"] for t in selected}
    if len(kinds) > 1:
        raise TaskSpecError("flight tasks use a 375x667 screen and cannot share an env with 160x210 tasks")
    return selected


class MiniWoBEnv(GUIEnv):
    """``gym.make("MiniWoB-v0", task="click-test")``: one MiniWoB++ task page per episode.

    ``isolation``:

    * ``"clean"`` (default): two browser contexts take turns; while an episode runs in one, the
      other is emptied of everything its last episode left (other tabs and popups closed, its
      documents, timers and workers ended, cookies, local/session storage, IndexedDB, Cache
      Storage, service workers, HTTP cache entries, permissions, geolocation, downloads,
      ``window.name``, zoom; envs/web/recycle.py) and the next episode's page is loaded into it,
      as a new document whose tab history has one entry. Nothing leaks between episodes and a
      seed replays the same episode, without building a new context per episode.
    * ``"context"``: a fresh browser context per episode (built ahead in the background); the
      same guarantees, at ~340 ms of CPU per episode for the context and its renderer.
    * ``"page"``: restarts the task inside the open page as the MiniWoB harness and the Farama
      env do (a reset costs one script call instead of a page load); everything above carries
      over from the previous episode (storage, focus, hover and widget state), so the same seed
      can give a different observation.

    ``settle_ms``: wait this long after every action before observing (default 0: the next
    frame). GUI envs commonly pause here for animations and network replies (OSWorld's
    ``DesktopEnv.step`` sleeps ``pause=2`` s); ``bench/rollout_util.py`` uses it to model an
    environment whose step latency is not local CPU work.

    ``allowed_origins``: origins (``http(s)://host[:port]``) the agent may open besides the task
    server's own; a task can add more in ``task.extra["allowed_origins"]``. Everything else
    (``file:``, ``data:``, ``javascript:``, other hosts) is refused with ``info["action_error"]``.

    Observation (``Dict``): ``screenshot`` uint8 (H, W, 3) with (W, H) = ``viewport``
    (160x210, flight 375x667); ``a11y`` XML; ``instruction``; ``url``.
    Action: a string in ``dialect`` (canonical by default) or a typed action.
    """

    platform = "web"

    def __init__(self, task: Optional[str] = None, tasks: Optional[Sequence[str]] = None, suite: str = "all",
                 dialect: str = "canonical", max_steps: Optional[int] = None,
                 episode_time_limit_s: Optional[float] = None, headless: bool = True,
                 executable_path: Optional[str] = None, viewport: Optional[tuple[int, int]] = None,
                 a11y_node_cap: int = 2000, a11y_time_cap_ms: int = 200, call_timeout_s: float = 10.0,
                 ready_timeout_s: float = 20.0, prewarm: bool = True, isolation: str = "clean",
                 settle_ms: int = 0, render_mode: Optional[str] = None,
                 info_timings: bool = False, allowed_origins: Sequence[str] = ()) -> None:
        selected = select_tasks(task, tasks, suite)
        if isinstance(allowed_origins, str):
            raise ConfigError("allowed_origins must be a list of origins, not one string")
        self.allowed_origins = tuple(allowed_origins)
        UrlPolicy.for_start_url("about:blank", self.allowed_origins)  # ConfigError now, not at reset
        super().__init__(selected, dialect=dialect, max_steps=max_steps, render_mode=render_mode,
                         info_timings=info_timings)
        flight = selected[0].extra["kind"] == "flight"
        self.viewport = tuple(viewport) if viewport else (FLIGHT_VIEWPORT if flight else TASK_VIEWPORT)
        if episode_time_limit_s is not None and episode_time_limit_s <= 0:
            raise TaskSpecError(f"episode_time_limit_s must be positive, got {episode_time_limit_s}")
        self.episode_time_limit_s = episode_time_limit_s
        self.ready_timeout_s = ready_timeout_s
        if isolation not in ISOLATION_MODES:
            raise TaskSpecError(f"isolation must be one of {', '.join(map(repr, ISOLATION_MODES))}, got {isolation!r}")
        self.isolation = isolation
        self.prewarm = prewarm and isolation != "page"
        window = None if viewport else (FLIGHT_WINDOW if flight else TASK_WINDOW)
        self.controller = WebController(WebControllerConfig(
            viewport=self.viewport, window=window, headless=headless, executable_path=executable_path,
            a11y_node_cap=a11y_node_cap, a11y_time_cap_ms=a11y_time_cap_ms, a11y_skip_ids=CHROME_IDS,
            call_timeout_s=call_timeout_s, settle_ms=int(settle_ms), fresh_history=isolation != "page",
        ))
        w, h = self.viewport
        self.observation_space = spaces.Dict({
            "screenshot": spaces.Box(0, 255, shape=(h, w, 3), dtype=np.uint8),
            "a11y": UnicodeText(max_length=1_000_000),
            "instruction": UnicodeText(max_length=4096),
            "url": UnicodeText(max_length=4096),
        })
        self._instruction = ""
        self._wob: dict[str, Any] = {"present": True, "done": False, "raw": 0.0, "reason": None}
        self._obs_meta: dict[str, Any] = {}
        self._nonce = ""

    def _policy(self, task: Task, url: str) -> UrlPolicy:
        extra = list(self.allowed_origins) + list(task.extra.get("allowed_origins", ()))
        return UrlPolicy.for_start_url(url, extra, field=f"allowed_origins of task {task.id}")

    # ---- hooks ----------------------------------------------------------------------------------
    def _start_episode(self, task: Task, seed: int) -> None:
        url = task_url(task)
        if self.isolation != "page" or not self.controller.is_open(url):
            self.controller.open(url, self._policy(task, url), recycle=self.isolation == "clean")
        # marks this episode's document: the reward is read only while the task tab shows it
        self._nonce = secrets.token_hex(8)
        # isolation="page": restart the task inside the already-open page, as MiniWoB's own
        # harness does (core.startEpisodeReal regenerates the problem); faster, but state that a
        # page keeps across problems (e.g. a jQuery datepicker's month) carries over.
        limit_ms = MAX_SETTIMEOUT_MS if self.episode_time_limit_s is None else int(self.episode_time_limit_s * 1000)
        ready = self.controller.evaluate(
            START_EPISODE_JS,
            [seed, limit_ms, self.ready_timeout_s * 1000 * 0.9, self._nonce],
            what=f"starting MiniWoB task {task.id}",
        )
        if not ready["ready"]:
            raise EnvInfraError(f"MiniWoB task {task.id} did not become ready within {self.ready_timeout_s} s")
        utterance = ready["utterance"]
        if isinstance(utterance, dict):  # a few tasks return {utterance, fields}
            utterance = utterance.get("utterance", "")
        # a spec'd task whose generator wrote a new instruction (task_from_spec) shows that
        # instruction; the suite's own tasks have none and show the page's utterance
        self._instruction = str(task.instruction or utterance)[:4096]
        self._wob = {"present": True, "done": False, "raw": 0.0, "reason": None}

    def _after_reset(self) -> None:
        # Build the next episode's page in the background: the same task when the env has one
        # task, else the task the next unseeded reset will draw (a seeded or explicit reset that
        # picks another task simply discards it).
        if self.prewarm:
            nxt = self.task if len(self.tasks) == 1 else self.presample_next_task()
            url = task_url(nxt)
            self.controller.prewarm(url, self._policy(nxt, url), recycle=self.isolation == "clean")
        elif self.isolation != "clean":  # retired contexts are closed here instead of by prewarm
            self.controller.discard_retired()  # ("clean" reuses the last one at the next reset)

    def _observe(self) -> dict[str, Any]:
        # null unless the task tab still shows this episode's document (nonce is hex: no quoting)
        o = self.controller.observe(
            f"window.__guigymEpisode === '{self._nonce}' && typeof WOB_DONE_GLOBAL !== 'undefined'"
            " ? [WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_REASON] : null")
        if o.extra is None:
            # the agent left the task (navigated away, went back past it, closed its tab): its
            # outcome, scored 0 by _verify; the page's own result, if it had one, is kept
            self._wob = {**self._wob, "present": False}
        else:
            done, raw, reason = o.extra
            self._wob = {"present": True, "done": bool(done), "raw": float(raw), "reason": reason}
        self._obs_meta = {"a11y_nodes": o.a11y_nodes, "a11y_truncated": o.a11y_truncated,
                          "a11y_truncation_reason": o.a11y_reason}
        self.timings["observe_s"] = o.timings["observe_s"]
        return {"screenshot": o.screenshot, "a11y": o.a11y, "instruction": self._instruction, "url": o.url[:4096]}

    def _execute(self, action: A.Action) -> None:
        self.controller.execute(action)

    def _env_ended(self) -> bool:
        return self._wob["done"]

    def _verify(self, task: Task, last_action: Optional[A.Action]) -> tuple[float, dict[str, Any]]:
        raw, done = self._wob["raw"], self._wob["done"]
        if not self._wob["present"] and not done:
            why = ("the task page stopped answering after the agent's action and was closed"
                   if self.controller.task_page_hung else
                   "the task tab no longer shows the task (the agent navigated away from it or closed it)")
            return 0.0, {"success": False, "raw_reward": None, "page_ended_episode": False,
                         "task_page_gone": True, "reason": why}
        if not done:
            return 0.0, {"success": False, "raw_reward": None, "page_ended_episode": False,
                         "reason": "the task page did not end the episode"}
        score, success = wob_score(done, raw)
        return score, {"success": success, "raw_reward": raw, "page_ended_episode": True,
                       "reason": self._wob["reason"]}

    def _episode_info(self) -> dict[str, Any]:
        return dict(self._obs_meta)

    def close(self) -> None:
        self.controller.close()
        super().close()
