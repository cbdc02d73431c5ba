"""Shared fixtures. Envs are expensive (a Chromium each), so tests share them per module."""
from __future__ import annotations

import gymnasium as gym
import pytest

import guigym  # noqa: F401 - registers the envs


@pytest.fixture(scope="module")
def click_env():
    env = gym.make("MiniWoB-v0", tasks=["click-test", "click-button", "enter-text", "click-checkboxes"])
    yield env.unwrapped
    env.close()


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op torch thread while a module runs: on a 2-core box shared with Chromium and
    desktops, two threads are ~10x slower. Trainer test modules use it through an autouse
    fixture of their own."""
    torch = pytest.importorskip("torch")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
