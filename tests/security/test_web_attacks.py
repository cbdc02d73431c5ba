"""Web envs, attacked as an agent would: every attack is an action string sent to ``env.step``
(or, where MiniWoB's pages offer nothing to click, the same typed action sent to the web
controller on a page built for the test). Each asserts that the attack gains nothing and that the
episode stays the agent's own outcome: scored, never turned into ``EnvInfraError``.
"""
from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any, Iterator, Optional

import gymnasium as gym
import pytest
from lxml import etree
from web_helpers import LoopbackSite

import guigym  # noqa: F401 - registers the envs
from guigym.core import actions as A
from guigym.core.errors import ActionNotPossible, ConfigError
from guigym.envs.web.controller import WebController, WebControllerConfig
from guigym.envs.web.url_policy import UrlPolicy

PASSWD_MARK = "root:x:0:0"  # first line of /etc/passwd on every Linux this runs on


@pytest.fixture(scope="module")
def env() -> Iterator[Any]:
    e = gym.make("MiniWoB-v0", task="click-test").unwrapped
    yield e
    e.close()


def _button(a11y: str) -> str:
    return next(etree.fromstring(a11y.encode()).iter("button")).get("id")


def _finish_scored(env: Any) -> dict[str, Any]:
    """Say done; the episode must end with a real score (no EnvInfraError), here 0."""
    obs, r, term, trunc, info = env.step("done()")
    assert term and not trunc and r == 0.0 and info["success"] is False, info
    assert PASSWD_MARK not in obs["a11y"]
    return info


def test_passwd_is_readable_on_this_host():
    # the attacks below are meaningful only when the file they aim at exists and says this
    assert PASSWD_MARK in Path("/etc/passwd").read_text()


def test_goto_file_url_is_refused_and_the_episode_is_still_scored(env):
    obs0, _ = env.reset(seed=0)
    obs, r, term, trunc, info = env.step('goto(url="file:///etc/passwd")')
    assert "refused" in info["action_error"] and "file:" in info["action_error"], info["action_error"]
    assert (r, term, trunc) == (0.0, False, False)
    assert PASSWD_MARK not in obs["a11y"] and obs["url"] == obs0["url"], "the task page is still shown"
    # the episode goes on: the task can still be solved, and that is scored 1
    _, r, term, _, info = env.step(f'click(element="{_button(obs["a11y"])}")')
    assert term and r == 1.0 and info["success"]


@pytest.mark.parametrize("url", [
    "file:///etc/passwd",
    "FILE:///etc/passwd",
    " file:///etc/passwd",
    "data:text/html,<script>location='file:///etc/passwd'</script>",
    "javascript:location='file:///etc/passwd'",
    "view-source:file:///etc/passwd",
    "chrome://version",
    "filesystem:file:///etc/passwd",
    "http://127.0.0.1:1/",  # another port on this host: another origin
])
def test_goto_to_other_schemes_and_origins_is_refused(env, url):
    obs0, _ = env.reset(seed=1)
    obs, r, term, trunc, info = env.step(f"goto(url={url!r})")
    assert info["action_error"] and "refused" in info["action_error"], info["action_error"]
    assert (r, term, trunc) == (0.0, False, False)
    assert obs["url"] == obs0["url"] and PASSWD_MARK not in obs["a11y"]
    _finish_scored(env)


def test_path_traversal_on_the_task_server_reads_nothing_outside_its_pages(env):
    obs0, _ = env.reset(seed=2)
    base = obs0["url"].rsplit("/", 1)[0] + "/"
    for path in ("../../../../../../etc/passwd", "..%2f..%2f..%2f..%2f..%2f..%2fetc/passwd", "../"):
        obs, r, term, trunc, info = env.step(f'goto(url="{base}{path}")')
        assert PASSWD_MARK not in obs["a11y"], path
        assert not term
    _finish_scored(env)


@pytest.mark.parametrize("leave", [
    ['goto(url="about:blank")'],
    # through history: the task tab's history starts with the task page only (issue 38), so back
    # from a blank page reloads a copy of it (a new document) and forward leaves it again
    ['goto(url="about:blank")', "go_back()", "go_forward()"],
    ["close_tab()"],  # the task tab, the only one: an empty tab takes its place
    ["new_tab()", "tab_focus(index=0)", "close_tab()"],
])
def test_leaving_or_closing_the_task_page_is_a_scored_failure(env, leave):
    env.reset(seed=3)
    for action in leave:
        obs, r, term, trunc, info = env.step(action)
        assert info["action_error"] is None, (action, info["action_error"])
        assert (r, term, trunc) == (0.0, False, False)
    assert obs["url"] == "about:blank" and obs["screenshot"].shape == (210, 160, 3)
    info = _finish_scored(env)
    assert info["verifier"]["task_page_gone"] is True and "navigated away" in info["verifier"]["reason"]


def test_solving_a_fresh_copy_of_the_task_page_does_not_count(env):
    # Reward hacking by re-rolling: leave the seeded problem for a freshly loaded copy of the
    # page (a new, unseeded problem) and solve that one instead.
    obs0, _ = env.reset(seed=4)
    env.step('goto(url="about:blank")')
    obs, _, term, _, info = env.step(f'goto(url="{obs0["url"]}")')
    assert not term and info["action_error"] is None and obs["url"] == obs0["url"]
    obs, r, term, trunc, info = env.step(f'click(element="{_button(obs["a11y"])}")')
    if not term:  # the copy's own "episode" ended, but it is not this episode's page
        info = _finish_scored(env)
    assert r == 0.0 and info["success"] is False and info["verifier"]["task_page_gone"] is True


def test_step_budget_running_out_away_from_the_task_is_scored():
    e = gym.make("MiniWoB-v0", task="click-test", max_steps=2).unwrapped
    try:
        e.reset(seed=0)
        e.step("close_tab()")
        _, r, term, trunc, info = e.step("wait(seconds=0)")
        assert (r, term, trunc) == (0.0, False, True) and info["verifier"]["task_page_gone"] is True
    finally:
        e.close()


# -- navigations the agent causes indirectly: a page built for the test, since MiniWoB's pages
# -- link nowhere. Two loopback sites: the task's and another one (another port = another origin).


@pytest.fixture(scope="module")
def sites() -> Iterator[tuple[LoopbackSite, LoopbackSite, str]]:
    secret = "SECRET-" + secrets.token_hex(8)
    other = LoopbackSite({
        "/secret": (200, {}, f"<p>{secret}</p>"),
        # a script another site lets browsers cache for an hour
        "/lib.js": (200, {"Content-Type": "application/javascript", "Cache-Control": "max-age=3600"},
                    f"window.leaked = '{secret}';"),
    })
    task_page = f"""<!doctype html><html><body>
      <a href="{other.origin}/secret">other site</a>
      <a href="file:///etc/passwd">passwd</a>
      <button onclick="location.href='{other.origin}/secret'">script</button>
      <a href="/to-other">redirect to other</a>
      <a href="/to-file">redirect to file</a>
      <a href="{other.origin}/secret" target="_blank">popup</a>
    </body></html>"""
    task = LoopbackSite({
        "/task": (200, {}, task_page),
        "/to-other": (302, {"Location": f"{other.origin}/secret"}, ""),
        "/to-file": (302, {"Location": "file:///etc/passwd"}, ""),
        "/loop": (200, {}, '<button onclick="while (true) {}">loop</button>'),
        # a page of the task's site that loads a script from elsewhere (a CDN with a local fallback)
        "/cdn": (200, {}, f'<script src="{other.origin}/secret.js"></script><p id="ok">page shown</p>'),
        "/site.css": (200, {"Content-Type": "text/css"}, "p { margin: 1px; }"),
        "/uses-lib": (200, {}, f'<script src="{other.origin}/lib.js"></script><p>uses lib</p>'),
        # a redirect the browser may cache for an hour, to the other site
        "/cached-hop": (301, {"Location": f"{other.origin}/secret", "Cache-Control": "max-age=3600"}, ""),
        "/sw.js": (200, {"Content-Type": "application/javascript"},
                   f"self.addEventListener('install', e => e.waitUntil(fetch('{other.origin}/from-sw')"
                   ".catch(() => 0)));"),
        "/sw": (200, {}, "<script>navigator.serviceWorker.register('/sw.js')</script><p>worker</p>"),
    })
    yield task, other, secret
    task.close()
    other.close()


@pytest.fixture()
def ctl(sites) -> Iterator[WebController]:
    c = WebController(WebControllerConfig(viewport=(400, 300)))
    c.open(sites[0].origin + "/task")
    yield c
    c.close()


def _act(c: WebController, action: A.Action) -> Optional[str]:
    """What GUIEnv.step does with an action: run it; ActionNotPossible is the agent's error."""
    try:
        c.execute(action)
    except ActionNotPossible as exc:
        return str(exc)
    return None


def _element(a11y: str, role: str, name: str) -> str:
    for node in etree.fromstring(a11y.encode()).iter(role):
        if node.get("name") == name:
            return node.get("id")
    raise AssertionError(f"no {role} {name!r} in {a11y}")


@pytest.mark.parametrize("role,name,request_may_leave", [
    ("link", "other site", False), ("link", "passwd", False), ("button", "script", False),
    ("link", "popup", False), ("link", "redirect to file", False),
    # Playwright routes a redirect's first URL only: the hop to the other site is sent, and what
    # comes back is blanked before anything is observed
    ("link", "redirect to other", True),
])
def test_clicks_that_lead_off_the_task_site_are_blocked(sites, ctl, role, name, request_may_leave):
    task, other, secret = sites
    start = ctl.observe()
    hits = len(other.hits)
    _act(ctl, A.Click(element=_element(start.a11y, role, name)))
    _act(ctl, A.Wait(seconds=0.5))  # let any navigation the click started finish
    obs = ctl.observe()
    assert secret not in obs.a11y and PASSWD_MARK not in obs.a11y, obs.a11y
    # the task site, an empty tab, or Chromium's own error page for a refused redirect
    assert obs.url.startswith(task.origin) or obs.url in ("about:blank", "chrome-error://chromewebdata/"), obs.url
    if not request_may_leave:
        assert len(other.hits) == hits, "no request reached the other site"


def test_a_sites_own_off_site_subresource_is_refused_without_blaming_the_agent(sites, ctl):
    """The request is blocked as any other, but it is the page's, not the agent's action: going to
    the page succeeds (no action_error, which would tell the agent its goto failed)."""
    task, other, _ = sites
    hits = len(other.hits)
    assert _act(ctl, A.Goto(url=task.origin + "/cdn")) is None
    assert "page shown" in ctl.observe().a11y
    assert len(other.hits) == hits, "the off-site script was requested"


def test_goto_an_allowed_url_that_redirects_off_site_is_refused(sites, ctl):
    task, other, secret = sites
    err = _act(ctl, A.Goto(url=task.origin + "/to-other"))
    assert err is not None and "blocked" in err, err
    obs = ctl.observe()
    # the redirect's target was never shown: the task page, or an empty tab where it was blanked
    assert secret not in obs.a11y and obs.url in (task.origin + "/task", "about:blank"), obs.url


def test_a_page_the_agent_sets_looping_forever_is_closed_and_the_episode_goes_on(sites):
    # The agent's click starts an endless script: the tab stops answering, the browser does not.
    # That is the agent's outcome (its tab is closed, the episode goes on and is scored), not an
    # infrastructure fault the episode could be rerun for.
    task, _, _ = sites
    c = WebController(WebControllerConfig(viewport=(400, 300)))
    try:
        c.open(task.origin + "/loop")
        err = _act(c, A.Click(element=_element(c.observe().a11y, "button", "loop")))
        assert err is not None and "stopped answering" in err, err
        obs = c.observe()  # no EnvInfraError: what is left is observed
        assert obs.url == "about:blank" and c.task_page.is_closed() and c.task_page_hung
        assert _act(c, A.Goto(url=task.origin + "/task")) is None  # and the agent can go on
        assert "other site" in c.observe().a11y
    finally:
        c.close()


def test_an_allowed_other_site_can_be_visited_and_the_episode_is_still_scored(sites):
    # allowed_origins widens the policy; leaving the task page for such a site is still the
    # agent's own outcome: observed, then scored 0 (the task page no longer shows the task)
    _, other, secret = sites
    with pytest.raises(ConfigError, match="allowed_origins"):
        gym.make("MiniWoB-v0", task="click-test", allowed_origins=["file:///etc"])
    e = gym.make("MiniWoB-v0", task="click-test", allowed_origins=[other.origin]).unwrapped
    try:
        e.reset(seed=0)
        obs, r, term, trunc, info = e.step(f'goto(url="{other.origin}/secret")')
        assert info["action_error"] is None and secret in obs["a11y"] and not term
        info = _finish_scored(e)
        assert info["verifier"]["task_page_gone"] is True
    finally:
        e.close()


# -- the HTTP cache: the policy is enforced by a proxy in front of Chromium's network stack, and
# -- the cache sits before it, so nothing the policy refuses may ever be in an episode's cache.

def test_a_cache_warmed_for_another_task_serves_nothing_this_policy_refuses(sites):
    """A prewarmed context was warmed under a wider policy (the next task was expected to allow
    the other site too); the episode that takes it allows only the task site. Its page's script
    from the other site must not come from the cache (all loopback ports are one site to
    Chromium, so the cache entry would match)."""
    task, other, secret = sites
    c = WebController(WebControllerConfig(viewport=(400, 300)))
    try:
        c.runtime.ensure_started()
        wide = UrlPolicy.for_start_url(task.origin + "/uses-lib", [other.origin])
        c.prewarm_blank((wide, task.origin + "/uses-lib", [task.origin + "/site.css", other.origin + "/lib.js"]))
        c._queue[0][1].result(timeout=60)
        hits = other.hits.count("/lib.js")
        assert hits >= 1, "the warm-up did not fetch the script: this test would prove nothing"
        c.open(task.origin + "/uses-lib")  # default policy: the task site only
        assert "uses lib" in c.observe().a11y
        assert c.evaluate("window.leaked === undefined"), "the refused script ran (served from the cache)"
        assert other.hits.count("/lib.js") == hits
        # control: an episode whose policy allows the other site does get it from the warmed cache
        c.prewarm_blank((wide, task.origin + "/uses-lib", [task.origin + "/site.css", other.origin + "/lib.js"]))
        c._queue[0][1].result(timeout=60)
        hits = other.hits.count("/lib.js")
        c.open(task.origin + "/uses-lib", wide)
        assert c.evaluate("window.leaked") == secret and other.hits.count("/lib.js") == hits
    finally:
        c.close()


def test_a_cached_redirect_to_another_site_is_refused_every_time(sites, ctl):
    """The 301 is cached by the first visit; the second visit takes it from the cache without
    asking the task site, and its hop to the other site must still be refused."""
    task, other, secret = sites
    hits = len(other.hits)
    for _ in range(2):
        err = _act(ctl, A.Goto(url=task.origin + "/cached-hop"))
        assert err is not None and "blocked" in err, err
        obs = ctl.observe()
        assert secret not in obs.a11y and not obs.url.startswith(other.origin), obs.url
    assert task.hits.count("/cached-hop") == 1, "the redirect was not cached: this test would prove nothing"
    assert len(other.hits) == hits, "a request reached the other site"


def test_a_service_worker_of_the_task_site_cannot_reach_another_site(sites, ctl):
    task, other, _ = sites
    assert _act(ctl, A.Goto(url=task.origin + "/sw")) is None
    state = ctl.runtime.run(ctl.page.evaluate(
        "navigator.serviceWorker.ready.then(r => r.active ? r.active.state : 'none')"), 20, "waiting for the worker")
    assert state in ("activating", "activated")
    assert "/sw.js" in task.hits
    assert "/from-sw" not in other.hits, "the service worker's request reached the other site"
