"""Observing an app must not break it: the a11y walk of every observation reads a Qt app's tree
(VLC) without killing it. A one-round-trip ``Properties.GetAll`` of AT-SPI's Value interface
crashed VLC (segfault in Qt's AT-SPI bridge) at the first observation of every VLC task."""
from __future__ import annotations

import shutil

import pytest

from desktop_needs import need_desktop


def embedded_env_with(program: str):
    """The embedded OSWorld-v0 env with a11y observations, or a skip when ``program`` is absent."""
    need_desktop()
    if shutil.which(program) is None:
        pytest.skip(f"{program} is not installed (scripts/install.sh installs it)")
    import gymnasium as gym

    import guigym  # noqa: F401 - registers the envs

    env = gym.make("OSWorld-v0", suite="embedded").unwrapped
    env.observe_a11y = True
    return env


def test_vlc_survives_the_a11y_walk_of_its_observations():
    env = embedded_env_with("vlc")
    try:
        obs, _ = env.reset(options={"task": "vlc-minimal-view"})
        assert 'name="vlc"' in obs["a11y"]  # its tree was walked (the application node)
        for _ in range(2):
            obs, _, _, _, info = env.step("wait(seconds=1)")
        alive = env.client.execute(["sh", "-c", "pgrep -x vlc >/dev/null && echo alive || echo gone"], timeout=10)
        assert alive["output"].strip() == "alive"
        assert 'name="vlc"' in obs["a11y"] and "app-timeout" not in str(info.get("a11y_truncated") or "")
    finally:
        env.close()


def test_the_walk_reaches_agent_zone_apps_peer_to_peer():
    """libatspi calls each app on the app's own socket (``$XDG_RUNTIME_DIR/at-spi2-*/socket``);
    the server's runtime directory is not the agent zone's, so without the links a11y.py makes
    libatspi warns "Unable to open bus connection" (in the server's log) and routes every call
    through the bus daemon, which made GIMP's walk about twice as slow."""
    env = embedded_env_with("gimp")
    try:
        obs, _ = env.reset(options={"task": "gimp-flip-horizontal"})
        for _ in range(2):
            obs, _, _, _, _ = env.step("wait(seconds=1)")
        assert 'name="gimp"' in obs["a11y"]
        log = (env.provider.run_dir / "logs" / "server.log").read_text(errors="replace")
        assert "listening on" in log  # the log is the server's (its stderr goes there too)
        assert "Unable to open bus connection" not in log, log[-2000:]
    finally:
        env.close()
