"""``hf``: a local Hugging Face VLM (Qwen2-VL / Qwen2.5-VL family) acting in-process.

``guigym eval --agent hf:PATH`` where PATH is a ``from_pretrained`` directory (for tests: one made
by :func:`guigym.models.tiny.build`). torch and transformers are imported when the agent is
built, never by ``import guigym.agents``.

Each step renders a prompt template (:mod:`guigym.agents.prompts`) into one user turn: the filled
template text, then the last ``history`` screenshots (oldest first). The reply is sampled (seeded,
see :mod:`guigym.models.hf_policy`); ``last_tokens`` holds the step's ``prompt_token_ids``,
``response_token_ids`` and ``response_logprobs`` for the eval runner / trainer. Replies in another
dialect (``dialect="uitars"``, ...) are translated to the env's canonical dialect; text that does
not parse is passed on unchanged, so the env records it as ``action_error``.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Optional

import numpy as np

from guigym.agents import prompts
from guigym.agents.base import AGENTS
from guigym.core.dialect import format_action, get_dialect
from guigym.core.errors import ActionParseError, ConfigError


def build_messages(template: str, instruction: str, screenshots: list[np.ndarray], history: list[str],
                   a11y: str = "") -> list[dict[str, Any]]:
    """One user turn: template text then ``{"type": "image"}`` parts (oldest screenshot first)."""
    h, w = screenshots[-1].shape[:2] if screenshots else ("", "")
    text = prompts.render(template, instruction=instruction, history="\n".join(history) or "(none)",
                          a11y=a11y, width=w, height=h)
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    content += [{"type": "image"} for _ in screenshots]
    return [{"role": "user", "content": content}]


def to_env_action(text: str, dialect: str, screen: tuple[int, int]) -> str:
    """Reply text in ``dialect`` -> canonical action string (unparseable text is returned as is)."""
    if dialect == "canonical":
        return text.strip()
    try:
        from guigym.core.dialect import DIALECTS

        get_dialect(dialect)  # registers the benchmark dialects
        cls = DIALECTS.get(dialect)
        try:
            parser = cls(screen=screen)
        except TypeError:
            parser = cls()
        return format_action(parser.parse(text))
    except (ActionParseError, ConfigError, ValueError, KeyError, TypeError):
        return text


class _ModelAgentBase:
    """Shared episode state of model-backed agents: instruction, screenshot window, action history."""

    name = "model"

    def __init__(self, seed: int = 0, history: int = 1, prompt: Optional[str] = None,
                 dialect: str = "canonical") -> None:
        if history < 1:
            raise ValueError(f"history must be >= 1 screenshot, got {history}")
        self.seed = int(seed)
        self.dialect = dialect
        self.prompt = prompt or ("canonical" if dialect == "canonical" else
                                 {"uitars": "uitars_computer"}.get(dialect, dialect))
        prompts.load(self.prompt)  # fail fast on an unknown template name
        self.history = history
        self.instruction = ""
        self.episode_seed = 0
        self.step = 0
        self.screens: deque[np.ndarray] = deque(maxlen=history)
        self.actions: list[str] = []
        self.last_tokens: Optional[dict[str, list]] = None

    def reset(self, task_info: dict[str, Any]) -> None:
        self.instruction = str(task_info.get("instruction", ""))
        self.episode_seed = int(task_info.get("seed", 0) or 0)
        self.step = 0
        self.screens.clear()
        self.actions = []
        self.last_tokens = None

    def _observe(self, obs: dict[str, Any]) -> list[dict[str, Any]]:
        self.screens.append(np.asarray(obs["screenshot"]))
        instruction = obs.get("instruction") or self.instruction
        return build_messages(self.prompt, str(instruction), list(self.screens), self.actions,
                              a11y=str(obs.get("a11y", "")))

    def _step_seed(self) -> int:
        """Seed of this step's sampler: a function of (agent seed, episode seed, step)."""
        return int(np.random.SeedSequence([self.seed, self.episode_seed, self.step]).generate_state(1)[0])

    def _finish(self, text: str, obs: dict[str, Any]) -> str:
        self.step += 1
        self.actions.append(text.strip().replace("\n", " ")[:200])
        h, w = np.asarray(obs["screenshot"]).shape[:2]
        return to_env_action(text, self.dialect, (w, h))


@AGENTS.register("hf")
class HFVLMAgent(_ModelAgentBase):
    """A local HF VLM: ``hf:PATH``. kwargs: seed, max_new_tokens=32, temperature=1.0, history=1,
    prompt (template name; default from the dialect), dialect='canonical', device='cpu'."""

    name = "hf"

    def __init__(self, target: str, seed: int = 0, max_new_tokens: int = 32, temperature: float = 1.0,
                 history: int = 1, prompt: Optional[str] = None, dialect: str = "canonical",
                 device: str = "cpu") -> None:
        super().__init__(seed=seed, history=history, prompt=prompt, dialect=dialect)
        from guigym.models.hf_policy import load_policy

        self.policy = load_policy(target, device=device)
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.last_images: list[np.ndarray] = []

    def act(self, obs: dict[str, Any]) -> str:
        messages = self._observe(obs)
        images = list(self.screens)
        encoded = self.policy.encode_chat(messages, images)
        sample = self.policy.generate([encoded], max_new_tokens=self.max_new_tokens,
                                      temperature=self.temperature, seeds=[self._step_seed()])[0]
        self.last_images = images
        self.last_tokens = {"prompt_token_ids": list(encoded.prompt_ids),
                            "response_token_ids": list(sample.response_ids),
                            "response_logprobs": list(sample.logprobs)}
        return self._finish(sample.text, obs)

    def logprobs_of(self, prompt_ids: list[int], response_ids: list[int], images: list[np.ndarray]) -> list[float]:
        """Teacher-forced log-probs of ``response_ids`` (the trainer's function)."""
        return self.policy.logprobs_of(prompt_ids, response_ids, images, temperature=self.temperature)
