"""``gym.make_vec("WebArena-v0", num_envs=2)``: two isolated envs against the loopback test shop.

Each sub-env has its own Chromium, its own browser contexts and its own login cache: a cookie one
sets is invisible to the other, each logs in for itself, and both score their reference
solutions (played from each one's own observation, as an agent would).
"""
from __future__ import annotations

import re

import gymnasium as gym
import pytest

import guigym  # noqa: F401 - registers the envs
from webarena_site import ShopSite, tasks


@pytest.fixture(scope="module")
def site():
    s = ShopSite()
    yield s
    s.close()


def node_id(a11y: str, role: str, name: str) -> str:
    m = re.search(rf"\[(\d+)\] {re.escape(role)} {re.escape(repr(name))}", a11y)
    assert m, f"no {role} {name!r} in:\n{a11y}"
    return m.group(1)


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_make_vec_runs_two_isolated_envs_that_both_score_their_references(site, mode):
    vec = gym.make_vec("WebArena-v0", num_envs=2, vectorization_mode=mode, tasks=tasks(),
                       urls={"shopping": site.url}, login_probe_interval_s=0)
    try:
        # a cookie env 0 sets is not sent by env 1 (separate browsers and contexts)
        vec.reset(options={"task": "webarena.1"})
        obs, *_ = vec.step([f"goto [{site.url}/setcookie]", f"goto [{site.url}/cookie]"])
        assert "visited cookie: absent" in obs["a11y"][1]
        obs, *_ = vec.step([f"goto [{site.url}/cookie]", f"goto [{site.url}/cookie]"])
        assert "visited cookie: present" in obs["a11y"][0], obs["a11y"][0]
        assert "visited cookie: absent" in obs["a11y"][1], obs["a11y"][1]

        # each env logs in through the UI with its own cache (a shared one would log in once)
        before = site.logins
        obs, _ = vec.reset(options={"task": "webarena.2"})
        assert site.logins == before + 2
        assert all("Welcome, Emma" in a for a in obs["a11y"])
        obs, *_ = vec.step([f"click [{node_id(a, 'link', 'My Wish List')}]" for a in obs["a11y"]])
        assert all(a.splitlines()[0].endswith("My Wish List") for a in obs["a11y"]), obs["a11y"]
        _, r, term, _, info = vec.step(["stop []", "stop []"])
        assert list(term) == [True, True] and list(r) == [1.0, 1.0], info
        obs, _ = vec.reset(options={"task": "webarena.2"})  # the cached sessions still work
        assert site.logins == before + 2 and all("Welcome, Emma" in a for a in obs["a11y"])

        # the price question, answered from each env's own page
        obs, _ = vec.reset(options={"task": "webarena.1"})
        obs, *_ = vec.step([f"click [{node_id(a, 'link', 'Blue Mug')}]" for a in obs["a11y"]])
        prices = [re.search(r"StaticText '(\$[\d.]+)'", a).group(1) for a in obs["a11y"]]
        _, r, term, _, info = vec.step([f"stop [{p}]" for p in prices])
        assert list(term) == [True, True] and list(r) == [1.0, 1.0], info
    finally:
        vec.close()
