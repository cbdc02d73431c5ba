"""The built-in default of WebArena-v0: with no tasks or URLs it starts the embedded sites it can
run (sites/__init__.py), owns them, runs their suites, and closes them with the env; each env of a
vector env has its own site set."""
from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.request

import gymnasium as gym
import pytest

import guigym  # noqa: F401 - registers the envs
from guigym.core.errors import ConfigError
from guigym.envs.web.webarena import sites as S

needs_fossil = pytest.mark.skipif(shutil.which("fossil") is None,
                                  reason="the Fossil site needs the 'fossil' program (Debian package, scripts/install.sh)")


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except (urllib.error.URLError, OSError):
        return False


@needs_fossil
def test_make_with_nothing_starts_the_embedded_sites_and_runs_their_suites():
    expected = set()
    for name in S.available():
        expected |= {f"webarena.{c['task_id']}" for c in json.loads(S.EMBEDDED[name].suite.read_text())}
    env = gym.make("WebArena-v0")
    inner = env.unwrapped
    try:
        assert {t.id for t in inner.tasks} == expected
        fossil = next(s for s in inner.embedded_sites if s.key == "gitlab")
        assert fossil.url.startswith("http://127.0.0.1:") and inner.urls["gitlab"] == fossil.url
        obs, _ = env.reset(options={"task": "webarena.1001"})
        assert "Slow search on large repositories" in obs["a11y"]
        _, reward, terminated, _, _ = env.step("stop [Fixed]")
        assert terminated and reward == 1.0
        url = fossil.url
    finally:
        env.close()
    assert not _answers(f"{url}/home")  # the env stopped the server it started


@needs_fossil
def test_vector_envs_get_isolated_site_sets():
    vec = gym.make_vec("WebArena-v0", num_envs=2, vectorization_mode="sync", embedded=["fossil"])
    try:
        a, b = (e.unwrapped.embedded_sites[0] for e in vec.envs)
        assert a.url != b.url and a.workdir != b.workdir
        vec.reset(options={"task": "webarena.1001"})
        live = a.live_instance  # the env runs each stateful site as two instances (sites/standby.py)
        subprocess.run([live.binary, "ticket", "add", "title", "Only in the first site", "status", "Open",
                        "-R", str(live.live)], env=live._env(), check=True, capture_output=True)
        obs, *_ = vec.step([f"goto [{a.url}/rptview?rn=1]", f"goto [{b.url}/rptview?rn=1]"])
        assert "Only in the first site" in obs["a11y"][0]
        assert "Only in the first site" not in obs["a11y"][1]
    finally:
        vec.close()


def test_unknown_embedded_site_is_named():
    with pytest.raises(ConfigError, match=r"no embedded site named 'gitlab-ce'.*fossil"):
        gym.make("WebArena-v0", embedded=["gitlab-ce"])


def test_missing_program_is_named_not_scored(monkeypatch):
    monkeypatch.setitem(S.EMBEDDED, "fossil", S.EmbeddedSite("fossil", S.EMBEDDED["fossil"].target,
                                                             programs=("no-such-fossil-binary",), hint="apt install fossil"))
    with pytest.raises(ConfigError, match="no-such-fossil-binary.*apt install fossil"):
        gym.make("WebArena-v0", embedded=["fossil"])
    if not S.available():
        with pytest.raises(ConfigError, match="none can run here.*no-such-fossil-binary"):
            gym.make("WebArena-v0")


@needs_fossil
def test_the_next_episode_runs_in_the_blank_context_prewarmed_after_the_reset():
    from guigym.envs.web.controller import _BLANK
    from guigym.envs.web.webarena.env import WebArenaEnv

    env = WebArenaEnv(embedded=["fossil"], standby_sites=False)  # one instance: its start page waits for the restore
    try:
        ctl = env.controller
        env.reset(options={"task": "webarena.1001"})
        first = ctl.episode.context
        assert ctl._queue[0][0] == _BLANK
        prewarmed, _ = ctl._queue[0][1].result(timeout=60)
        assert prewarmed is not first
        obs, _ = env.reset(options={"task": "webarena.1001"})
        assert ctl.episode.context is prewarmed and "Slow search on large repositories" in obs["a11y"]
        # a login task whose storage state is cookies only: they are added to the blank one
        # (controller.applicable_later), so it is used too, and the page shows the login
        spare, _ = ctl._queue[0][1].result(timeout=60)
        obs, _ = env.reset(options={"task": "webarena.1015"})
        assert ctl.episode.context is spare and "byteblaze" in obs["a11y"]
    finally:
        env.close()


@needs_fossil
def test_the_next_episode_takes_its_start_pages_stylesheet_from_the_warmed_cache():
    """After a reset, the prewarmed context's HTTP cache is filled with the static files the next
    task's start page loaded (here the same task: the env's only one), so the next start page
    asks the site for none of them; the page itself comes from the restored site."""
    from guigym.envs.web.webarena.env import WebArenaEnv
    from guigym.envs.web.webarena.sites import EMBEDDED

    # one instance (no standby): the start page waits for the site's restore, its files do not
    env = WebArenaEnv(config_file=EMBEDDED["fossil"].suite, task_ids=[1001], embedded=["fossil"], standby_sites=False)
    try:
        env.reset()
        first = env.controller.evaluate(_RESOURCES)
        assert any(u.endswith(".css") and size > 0 for u, size in first), first  # fetched: a fresh context
        env.controller._queue[0][1].result(timeout=60)
        obs, _ = env.reset()
        second = env.controller.evaluate(_RESOURCES)
        assert "Slow search on large repositories" in obs["a11y"]
        assert [u for u, _ in second] == [u for u, _ in first]
        assert all(size == 0 for _, size in second), second  # every one from the cache
        nav = env.controller.evaluate("performance.getEntriesByType('navigation')[0].transferSize")
        assert nav > 0, "the page itself must come from the site"
    finally:
        env.close()


_RESOURCES = ("performance.getEntriesByType('resource').map(e => [new URL(e.name).pathname, e.transferSize])"
              ".filter(([p]) => /\\.(css|js|woff2?)$/.test(p))")
