"""WebArena-v0 end to end in real Chromium against a small loopback shop (tests/webarena_site.py).

One env (one Chromium) for the module. Reference solutions are played in WebArena's dialect and
read element ids from the observation text only, as an agent would.
"""
from __future__ import annotations

import re

import gymnasium as gym
import pytest

import guigym  # noqa: F401 - registers the envs
from guigym.core.errors import ConfigError, EnvInfraError
from webarena_site import ShopSite, tasks


@pytest.fixture(scope="module")
def site():
    s = ShopSite()
    yield s
    s.close()


GEO_TASK = dict(tasks()[0], task_id=4, geolocation={"latitude": 40.4432, "longitude": -79.9428})
FUZZY_TASK = dict(tasks()[0], task_id=5, eval={"eval_types": ["string_match"], "reference_answers": {"fuzzy_match": ["12.50"]},
                                               "reference_url": "", "program_html": []})


@pytest.fixture(scope="module")
def env(site):
    # probe interval 0: every reset of a login task checks the cached session through the UI
    e = gym.make("WebArena-v0", tasks=tasks() + [GEO_TASK, FUZZY_TASK], urls={"shopping": site.url}, login_probe_interval_s=0,
                 accounts={"shopping": {"username": "emma.lopez@gmail.com", "password": "Password.123"}})
    yield e.unwrapped
    e.close()


def node_id(a11y: str, role: str, name: str) -> str:
    """The id of the first ``[id] role 'name'`` line (what an agent reads off the tree)."""
    m = re.search(rf"\[(\d+)\] {re.escape(role)} {re.escape(repr(name))}", a11y)
    assert m, f"no {role} {name!r} in:\n{a11y}"
    return m.group(1)


def reference(env, task_id: str) -> tuple[float, dict]:
    """Play the task's reference solution; returns the final reward and info."""
    obs, _ = env.reset(options={"task": task_id})
    if task_id == "webarena.1":
        obs, *_ = env.step(f"click [{node_id(obs['a11y'], 'link', 'Blue Mug')}]")
        price = re.search(r"StaticText '(\$[\d.]+)'", obs["a11y"]).group(1)
        _, r, term, _, info = env.step(f"stop [{price}]")
    elif task_id == "webarena.2":
        obs, *_ = env.step(f"click [{node_id(obs['a11y'], 'link', 'My Wish List')}]")
        assert "My Wish List" in obs["a11y"].splitlines()[0], obs["a11y"]
        _, r, term, _, info = env.step("stop []")
    else:
        assert obs["a11y"].startswith("Tab 0 (current): One Stop Market | Tab 1: Search\n"), obs["a11y"][:200]
        obs, *_ = env.step("tab_focus [1]")
        assert obs["a11y"].startswith("Tab 0: One Stop Market | Tab 1 (current): Search\n")
        obs, *_ = env.step(f"type [{node_id(obs['a11y'], 'textbox', 'Search query')}] [kettle] [1]")
        assert "kettle" in obs["url"]
        _, r, term, _, info = env.step("stop []")
    assert term
    return r, info


@pytest.mark.parametrize("task_id", ["webarena.1", "webarena.2", "webarena.3"])
def test_reference_solution_scores_1_and_noop_scores_0(env, task_id):
    r, info = reference(env, task_id)
    assert (r, info["success"]) == (1.0, True), info
    env.reset(options={"task": task_id})
    _, r, term, _, info = env.step("stop [N/A]")
    assert term and (r, info["success"]) == (0.0, False), info


def test_every_episode_gets_a_fresh_browser_context(env, site):
    obs, _ = env.reset(options={"task": "webarena.1"})
    env.step(f"goto [{site.url}/setcookie]")
    obs, *_ = env.step(f"goto [{site.url}/cookie]")
    assert "visited cookie: present" in obs["a11y"]  # the cookie works within the episode
    env.reset(options={"task": "webarena.1"})
    obs, *_ = env.step(f"goto [{site.url}/cookie]")
    assert "visited cookie: absent" in obs["a11y"], obs["a11y"]


def test_login_state_is_cached_per_site_set_and_refreshed_when_the_probe_fails(env, site):
    env.logins.invalidate()
    before = site.logins
    obs, _ = env.reset(options={"task": "webarena.2"})
    assert "Welcome, Emma" in obs["a11y"]  # logged in through the login form, before the agent acts
    assert site.logins == before + 1
    obs, _ = env.reset(options={"task": "webarena.2"})
    assert "Welcome, Emma" in obs["a11y"] and site.logins == before + 1  # cached, probe passed
    # the site forgets every session (the cookie still looks valid): the probe lands on the login
    # form, so the env logs in again instead of starting the episode logged out
    site.revoke_sessions()
    obs, _ = env.reset(options={"task": "webarena.2"})
    assert site.logins == before + 2 and env.logins.stats["probe_failed"] >= 1
    assert "Welcome, Emma" in obs["a11y"]
    r, info = reference(env, "webarena.2")
    assert r == 1.0, info


def test_an_expired_cookie_triggers_a_new_login_without_a_probe(env, site):
    env.reset(options={"task": "webarena.2"})
    before, real_clock = site.logins, env.logins.clock
    env.logins.clock = lambda: real_clock() + 2 * 3600  # the session cookie (Max-Age 1 h) has expired
    try:
        obs, _ = env.reset(options={"task": "webarena.2"})
    finally:
        env.logins.clock = real_clock
    assert site.logins == before + 1 and env.logins.stats["expired_cookie"] >= 1
    assert "Welcome, Emma" in obs["a11y"]


def test_a_task_without_login_starts_logged_out(env):
    obs, _ = env.reset(options={"task": "webarena.1"})
    assert "Not signed in" in obs["a11y"]


def test_wrong_credentials_are_an_infrastructure_error_not_a_failed_task(env):
    env.logins.invalidate()
    good = env.logins.accounts["shopping"]
    env.logins.accounts["shopping"] = dict(good, password="wrong")
    try:
        with pytest.raises(EnvInfraError, match="did not give a working session"):
            env.reset(options={"task": "webarena.2"})
    finally:
        env.logins.accounts["shopping"] = good
    obs, _ = env.reset(options={"task": "webarena.2"})  # the env recovers at the next reset
    assert "Welcome, Emma" in obs["a11y"]


def test_navigation_off_the_task_sites_and_to_file_urls_is_blocked(env, site):
    obs, _ = env.reset(options={"task": "webarena.1"})
    hits = site.other_hits
    for target in (f"{site.other_url}/", "file:///etc/passwd", "data:text/html,<p>x</p>", "javascript:alert(1)"):
        obs, r, term, trunc, info = env.step(f"goto [{target}]")
        assert info["action_error"] and "refused" in info["action_error"], (target, info)
        assert obs["url"].startswith(site.url) and not term
    # clicking links that lead off the sites: the request is aborted and reported
    obs, *_ = env.step(f"goto [{site.url}/]")
    for name in ("Partner shop", "Local file"):
        obs, r, term, trunc, info = env.step(f"click [{node_id(obs['a11y'], 'link', name)}]")
        assert obs["url"].startswith(site.url), (name, obs["url"])
        assert "partner site" not in obs["a11y"] and "root:" not in obs["a11y"]
    assert site.other_hits == hits  # no request reached the other origin


def test_multi_tab_and_navigation_actions(env, site):
    obs, _ = env.reset(options={"task": "webarena.1"})
    obs, *_ = env.step("new_tab")
    assert obs["a11y"].startswith("Tab 0: One Stop Market | Tab 1 (current): \n"), obs["a11y"][:100]
    obs, *_ = env.step(f"goto [{site.url}/product/2]")
    assert obs["a11y"].startswith("Tab 0: One Stop Market | Tab 1 (current): Red Kettle\n")
    obs, _, _, _, info = env.step("tab_focus [0]")
    assert obs["a11y"].startswith("Tab 0 (current): One Stop Market | Tab 1: Red Kettle\n")
    _, _, _, _, info = env.step("tab_focus [5]")
    assert "no tab 5" in info["action_error"]
    obs, *_ = env.step("close_tab")
    assert obs["a11y"].startswith("Tab 0 (current): Red Kettle\n"), obs["a11y"][:100]
    obs, *_ = env.step(f"goto [{site.url}/product/3]")
    obs, *_ = env.step("go_back")
    assert obs["url"].endswith("/product/2")
    obs, *_ = env.step("go_forward")
    assert obs["url"].endswith("/product/3")
    # hover and click on an element id; press; an id the observation does not have
    obs, _, _, _, info = env.step(f"hover [{node_id(obs['a11y'], 'button', 'Add to Cart')}]")
    assert info["action_error"] is None
    obs, *_ = env.step(f"click [{node_id(obs['a11y'], 'button', 'Add to Cart')}]")
    assert obs["a11y"].startswith("Tab 0 (current): clicked\n")  # the button's onclick ran
    _, _, _, _, info = env.step("click [999999]")
    assert "no element [999999]" in info["action_error"]
    _, _, _, _, info = env.step("press [Control+a]")
    assert info["action_error"] is None


def test_scroll_moves_one_window_height_and_brings_new_ids_into_reach(env, site):
    obs, _ = env.reset(options={"task": "webarena.1"})
    assert env.controller.evaluate("window.scrollY") == 0
    env.step("scroll [down]")
    assert env.controller.evaluate("window.scrollY") == env.viewport[1]
    env.step("scroll [up]")
    assert env.controller.evaluate("window.scrollY") == 0
    # an element below the fold is scrolled into view before the click
    obs, _, _, _, info = env.step(f"click [{node_id(obs['a11y'], 'link', 'Footer teapot')}]")
    assert info["action_error"] is None and obs["url"].endswith("/product/3")


def test_geolocation_of_the_config_reaches_the_page(env):
    env.reset(options={"task": "webarena.4"})
    pos = env.controller.evaluate(
        "new Promise(r => navigator.geolocation.getCurrentPosition(p => r([p.coords.latitude, p.coords.longitude])))")
    assert pos == pytest.approx([40.4432, -79.9428])


@pytest.mark.parametrize("task_id, shows", [("webarena.2", "Welcome, Emma"), ("webarena.4", None)])
def test_login_and_geolocation_episodes_run_in_the_prewarmed_blank_context(env, task_id, shows):
    """A login's cookies and a geolocation are applied to the context built in the background
    after the previous reset, instead of building a new one inside this reset."""
    env.reset(options={"task": "webarena.1"})
    ctl = env.controller
    prewarmed, _ = ctl._queue[0][1].result(timeout=60)
    obs, _ = env.reset(options={"task": task_id})
    assert ctl.episode.context is prewarmed
    if shows:
        assert shows in obs["a11y"]
    else:
        pos = ctl.evaluate("new Promise(r => navigator.geolocation.getCurrentPosition("
                           "p => r([p.coords.latitude, p.coords.longitude])))")
        assert pos == pytest.approx([40.4432, -79.9428])


def test_a_storage_state_with_local_storage_gets_a_context_of_its_own(env, site):
    from guigym.envs.web.controller import applicable_later

    state = {"cookies": [], "origins": [{"origin": site.url, "localStorage": [{"name": "k", "value": "v"}]}]}
    assert not applicable_later({"storage_state": state}) and not applicable_later({"locale": "fr-FR"})
    assert applicable_later({"storage_state": {"cookies": [], "origins": []}, "geolocation": {}})
    env.reset(options={"task": "webarena.1"})
    ctl = env.controller
    prewarmed, _ = ctl._queue[0][1].result(timeout=60)
    ctl.open(f"{site.url}/", context_options={"storage_state": state})
    assert ctl.episode.context is not prewarmed
    assert ctl.evaluate("localStorage.getItem('k')") == "v"


def test_unscorable_evaluation_is_reported_as_such(env):
    env.reset(options={"task": "webarena.5"})  # fuzzy_match and no judge configured
    _, r, term, _, info = env.step("stop [$12.50]")
    assert term and info["unscorable"] is True and info["score"] is None and info["success"] is None
    assert info["verifier"]["unscorable_reason"]


def test_bad_configuration_is_named(monkeypatch):
    monkeypatch.delenv("WA_SHOPPING", raising=False)
    with pytest.raises(ConfigError, match="WA_SHOPPING"):
        gym.make("WebArena-v0", tasks=tasks()[:1], urls={})
    with pytest.raises(ConfigError, match="evaluator"):
        gym.make("WebArena-v0", tasks=tasks()[:1], urls={"shopping": "http://127.0.0.1:9"}, evaluator="nope")
