"""What stable-baselines3 expects from an env, made from any guigym env with a screenshot.

SB3's policies take array observations and ``Discrete``/``Box`` actions; guigym envs observe a
Dict (screenshot, a11y, instruction, url) and act with typed actions. Three wrappers bridge that:

* :class:`ImageObservation`: the screenshot (optionally a crop of it), resized, as uint8
  ``(C, H, W)`` (channel-first, what SB3's ``CnnPolicy`` wants) or ``(H, W, C)``.
* :class:`ClickGrid`: ``Discrete(rows * cols)``; action ``k`` clicks the centre of cell ``k``
  (row-major) of the screen or of a region of it.
* :class:`ElementClick`: ``Discrete(max_elements)``; action ``i`` clicks the ``i``-th interactive
  element of the current observation (the set-of-marks elements, in document order), with
  :meth:`ElementClick.action_masks` for sb3-contrib's ``MaskablePPO`` (elements beyond the
  current count are masked).

The reward is the env's own (passed through unchanged). Typical stack::

    env = gym.make("MiniWoB-v0", task="click-test", max_steps=1)
    env = ImageObservation(ClickGrid(env, rows=8, cols=8, region=(0, 50, 160, 160)), size=(64, 64))
    model = stable_baselines3.PPO("CnnPolicy", env)

The action wrappers sit inside :class:`ImageObservation` (they read the Dict observation).
"""
from __future__ import annotations

from typing import Any, Optional, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from guigym.core import actions as A
from guigym.core.errors import ConfigError
from guigym.wrappers._util import screen_size
from guigym.wrappers.resize import resize_image
from guigym.wrappers.som import som_marks

Region = tuple[int, int, int, int]
"""(x, y, width, height) in screen pixels."""


def _check_region(region: Optional[Region], screen: tuple[int, int], who: str) -> Region:
    w, h = screen
    if region is None:
        return (0, 0, w, h)
    if len(region) != 4:
        raise ConfigError(f"{who}: region must be (x, y, width, height), got {region!r}")
    x, y, rw, rh = (int(v) for v in region)
    if rw <= 0 or rh <= 0 or x < 0 or y < 0 or x + rw > w or y + rh > h:
        raise ConfigError(f"{who}: region {region!r} is not inside the {w}x{h} screen")
    return (x, y, rw, rh)


class ImageObservation(gym.ObservationWrapper):
    """The screenshot as an SB3 image observation.

    Args:
        size: (width, height) after resizing.
        region: (x, y, width, height) crop taken before resizing (default: the whole screen).
        channel_first: (C, H, W) when True (SB3's CnnPolicy), else (H, W, C).
        grayscale: one channel (ITU-R 601 luma) instead of RGB.
    """

    def __init__(self, env: gym.Env, size: tuple[int, int] = (64, 64), region: Optional[Region] = None,
                 channel_first: bool = True, grayscale: bool = False) -> None:
        super().__init__(env)
        self.region = _check_region(region, screen_size(env, "ImageObservation"), "ImageObservation")
        self.size = (int(size[0]), int(size[1]))
        if min(self.size) <= 0:
            raise ConfigError(f"ImageObservation: size must be positive (width, height), got {size!r}")
        self.channel_first, self.grayscale = bool(channel_first), bool(grayscale)
        c = 1 if grayscale else 3
        w, h = self.size
        shape = (c, h, w) if channel_first else (h, w, c)
        self.observation_space = spaces.Box(0, 255, shape=shape, dtype=np.uint8)

    def observation(self, observation: dict[str, Any]) -> np.ndarray:
        x, y, w, h = self.region
        img = np.asarray(observation["screenshot"])[y:y + h, x:x + w]
        img = resize_image(img, self.size)
        if self.grayscale:
            luma = img[..., 0] * 0.299 + img[..., 1] * 0.587 + img[..., 2] * 0.114
            img = np.clip(np.rint(luma), 0, 255).astype(np.uint8)[..., None]
        return np.ascontiguousarray(img.transpose(2, 0, 1) if self.channel_first else img)


class ClickGrid(gym.ActionWrapper):
    """``Discrete(rows * cols)``: action ``k`` clicks the centre of grid cell ``k`` (row-major).

    Args:
        rows, cols: the grid.
        region: (x, y, width, height) the grid covers (default: the whole screen).
    """

    def __init__(self, env: gym.Env, rows: int = 8, cols: int = 8, region: Optional[Region] = None) -> None:
        super().__init__(env)
        if rows <= 0 or cols <= 0:
            raise ConfigError(f"ClickGrid: rows and cols must be positive, got {rows}x{cols}")
        self.rows, self.cols = int(rows), int(cols)
        self.region = _check_region(region, screen_size(env, "ClickGrid"), "ClickGrid")
        self.action_space = spaces.Discrete(self.rows * self.cols)

    def cell_centre(self, k: int) -> tuple[int, int]:
        """(x, y) screen pixel at the centre of cell ``k`` (row ``k // cols``, column ``k % cols``)."""
        if not 0 <= int(k) < self.rows * self.cols:
            raise ValueError(f"ClickGrid: action {k} is outside 0..{self.rows * self.cols - 1}")
        x, y, w, h = self.region
        r, c = divmod(int(k), self.cols)
        return int(x + (c + 0.5) * w / self.cols), int(y + (r + 0.5) * h / self.rows)

    def action(self, action: Any) -> A.Action:
        cx, cy = self.cell_centre(int(action))
        return A.Click(x=cx, y=cy)


class ElementClick(gym.Wrapper):
    """``Discrete(max_elements)``: action ``i`` clicks the ``i``-th interactive element of the
    current observation (set-of-marks elements, document order). Actions at or beyond the current
    element count are masked by :meth:`action_masks`; if one is taken anyway (a policy without
    masking) it becomes a no-op ``wait`` and ``info["invalid_action"]`` is True."""

    def __init__(self, env: gym.Env, max_elements: int = 32) -> None:
        super().__init__(env)
        if max_elements <= 0:
            raise ConfigError(f"ElementClick: max_elements must be positive, got {max_elements}")
        self.max_elements = int(max_elements)
        self._screen = screen_size(env, "ElementClick")
        self.action_space = spaces.Discrete(self.max_elements)
        self._ids: list[str] = []

    def _remember(self, obs: dict[str, Any]) -> None:
        self._ids = list(som_marks(str(obs.get("a11y", "")), self._screen))[: self.max_elements]

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._remember(obs)
        return obs, info

    def action_masks(self) -> np.ndarray:
        """bool (max_elements,): True for the elements the current observation has."""
        mask = np.zeros(self.max_elements, dtype=bool)
        mask[: len(self._ids)] = True
        return mask

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        i = int(action)
        invalid = not 0 <= i < len(self._ids)
        typed = A.Wait(seconds=0) if invalid else A.Click(element=self._ids[i])
        obs, reward, term, trunc, info = self.env.step(typed)
        self._remember(obs)
        info = dict(info, invalid_action=invalid)
        return obs, reward, term, trunc, info
