"""stable-baselines3 on guigym envs (issue 18 item 1): the wrappers' mapping on real MiniWoB pages
in Chromium, and the plumbing of SB3's PPO and sb3-contrib's MaskablePPO for 1,000 steps.

Whether PPO *learns* is a benchmark (examples/sb3_ppo_miniwob.py, docs/benchmarks.md), not a test.
"""
from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest

import guigym  # noqa: F401 - registers the envs
from guigym.core.errors import ConfigError
from guigym.wrappers.resize import resize_image
from guigym.wrappers.sb3 import ClickGrid, ElementClick, ImageObservation
from guigym.wrappers.som import som_marks

sb3 = pytest.importorskip("stable_baselines3", reason="stable-baselines3 is not installed (pip install guigym[sb3])")

AREA = (0, 50, 160, 160)  # MiniWoB's task area under the 50-px instruction bar


@pytest.fixture(scope="module")
def base():
    env = gym.make("MiniWoB-v0", task="click-test", max_steps=1)
    yield env
    env.close()


def button_box(env, obs) -> tuple[int, int, int, int]:
    marks = som_marks(obs["a11y"], (160, 210))
    assert len(marks) == 1, marks
    return next(iter(marks.values()))


def test_click_grid_cells_hit_and_miss_the_button(base):
    grid = ClickGrid(base, rows=8, cols=8, region=AREA)
    assert grid.action_space == gym.spaces.Discrete(64)
    for seed in (1, 2, 3):
        obs, _ = grid.reset(seed=seed)
        x, y, w, h = button_box(grid, obs)
        inside = [k for k in range(64) if x < grid.cell_centre(k)[0] < x + w - 1 and y < grid.cell_centre(k)[1] < y + h - 1]
        outside = [k for k in range(64) if not (x - 2 <= grid.cell_centre(k)[0] <= x + w + 2
                                                and y - 2 <= grid.cell_centre(k)[1] <= y + h + 2)]
        assert inside and outside
        _, r, term, trunc, _ = grid.step(inside[0])
        assert r == 1.0 and term
        grid.reset(seed=seed)
        _, r, term, trunc, _ = grid.step(outside[-1])
        assert r <= 0.0 and (term or trunc)
    with pytest.raises(ValueError, match="outside"):
        grid.cell_centre(64)


def test_image_observation_crops_resizes_and_goes_channel_first(base):
    env = ImageObservation(base, size=(40, 40), region=AREA)
    assert env.observation_space.shape == (3, 40, 40) and env.observation_space.dtype == np.uint8
    img, _ = env.reset(seed=5)
    raw = base.unwrapped.controller.observe().screenshot  # the same page, observed again
    want = resize_image(raw[50:210, 0:160], (40, 40)).transpose(2, 0, 1)
    assert img.shape == (3, 40, 40) and np.abs(img.astype(int) - want.astype(int)).mean() < 2.0
    gray = ImageObservation(base, size=(32, 48), channel_first=False, grayscale=True)
    assert gray.observation_space.shape == (48, 32, 1)
    with pytest.raises(ConfigError, match="region"):
        ImageObservation(base, region=(100, 100, 100, 200))


def test_element_click_masks_and_clicks_the_nth_element():
    env = ElementClick(gym.make("MiniWoB-v0", task="click-test-2", max_steps=1), max_elements=8)
    try:
        for seed in (3, 4):
            obs, _ = env.reset(seed=seed)
            mask = env.action_masks()
            assert mask.tolist() == [True, True] + [False] * 6  # the ONE and TWO buttons
            ids = list(som_marks(obs["a11y"], (160, 210)))
            one_id = re.search(r'<button id="(\d+)" name="ONE"', obs["a11y"]).group(1)
            one = ids.index(one_id)
            _, r, term, _, info = env.step(one)
            assert r == 1.0 and term and info["invalid_action"] is False
        env.reset(seed=9)
        _, r, _, _, info = env.step(7)  # masked: no element 7
        assert info["invalid_action"] is True and r <= 0.0
    finally:
        env.close()


def test_ppo_and_maskable_ppo_run_two_rollouts_on_real_pages(tmp_path, monkeypatch):
    # SB3's learn() makes a logger folder in $SB3_LOGDIR, else a new /tmp/SB3-<date> per call
    monkeypatch.setenv("SB3_LOGDIR", str(tmp_path))
    from stable_baselines3.common.monitor import Monitor  # records the episode returns SB3 reports
    from stable_baselines3.common.vec_env import DummyVecEnv

    def make():
        base = gym.make("MiniWoB-v0", task="click-test", max_steps=1, isolation="page")
        return Monitor(ImageObservation(ClickGrid(base, 4, 4, region=AREA), size=(36, 36), region=AREA))

    venv = DummyVecEnv([make])
    try:
        # two collect/update cycles (the second rollout starts after an update): each step is a
        # real page, so more cycles only cost CI time
        model = sb3.PPO("CnnPolicy", venv, n_steps=125, batch_size=25, n_epochs=1, seed=0, device="cpu",
                        policy_kwargs={"normalize_images": True, "features_extractor_kwargs": {"features_dim": 32}})
        model.learn(total_timesteps=250)
        assert model.num_timesteps == 250 and model._n_updates == 2
        rewards = [ep["r"] for ep in model.ep_info_buffer]
        assert len(rewards) == 100  # one-step episodes: SB3's buffer keeps the last 100
        assert set(rewards) <= {0.0, 1.0} and 0 < sum(rewards) < len(rewards)  # some hits, some misses
    finally:
        venv.close()

    contrib = pytest.importorskip("sb3_contrib", reason="sb3-contrib is not installed (pip install guigym[sb3])")

    def make_masked():
        inner = ElementClick(gym.make("MiniWoB-v0", task="click-test-2", max_steps=1, isolation="page"), max_elements=4)
        return Monitor(ImageObservation(inner, size=(36, 36), region=AREA), info_keywords=("invalid_action",))

    venv = DummyVecEnv([make_masked])
    try:
        model = contrib.MaskablePPO("CnnPolicy", venv, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu",
                                    policy_kwargs={"features_extractor_kwargs": {"features_dim": 32}})
        model.learn(total_timesteps=128)
        assert model.num_timesteps == 128
        # every action it took was an element that existed (2 of its 4 actions are masked; an
        # unmasked policy picks one of those about half the time): masking reached the policy
        eps = list(model.ep_info_buffer)
        assert len(eps) == 100 and not any(ep["invalid_action"] for ep in eps)
        assert venv.env_method("action_masks")[0].tolist() == [True, True, False, False]
    finally:
        venv.close()
