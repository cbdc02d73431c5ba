"""Shared pieces of the trainer tests that drive ``guigym.train.loop.Trainer`` without envs.

Trajectories are stored in the run's DataStore tagged ``info["iteration"] = i`` *before*
``Trainer.iteration(i)`` runs, so the loop takes its real "stored by a crashed run" path
(``groups_for``) instead of collecting from an EnvPool; everything after that (group builder,
shaping, advantages, filters, samples, learner update, mark_used, metrics, checkpoint) is the
real loop on a tiny locally built Qwen2.5-VL. Token ids and rollout log-probs are the tiny
policy's own, so the truncated IS weight is 1.
"""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Optional

import pytest

from guigym.train.config import from_dict
from guigym.train.data.types import Step, Trajectory

PROMPTS = ["Click the button.", "Click the link now.", "Press OK please.", "Open the menu."]
RESPONSE = 'click(element="1")'


def recipe(tmp: Path, model: Path, **algorithm: Any) -> dict[str, Any]:
    """A recipe dict for a Trainer driven without envs (no eval, no rollout service)."""
    return {"run": {"name": f"r-{uuid.uuid4().hex[:8]}", "dir": str(tmp / "run"), "seed": 0, "iterations": 4,
                    "torch_threads": 1},
            "model": {"path": str(model)},
            "env": {"tasks": ["t1", "t2"], "max_steps": 3},
            "rollout": {"num_generations": 2, "groups_per_iteration": 1, "max_new_tokens": 16},
            "algorithm": {"per_device_train_batch_size": 16, **algorithm},
            "optim": {"learning_rate": 1e-3}}


def trainer(cfg: dict[str, Any], resume: bool = False) -> Any:
    from guigym.train.loop import Trainer

    t = Trainer(from_dict(cfg), resume=resume, log=lambda m: None)
    t.build()
    return t


class Tokens:
    """Prompt/response token ids and their log-probs under the tiny policy (cached)."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self._cache: dict[tuple[str, str], tuple[list[int], list[int], list[float]]] = {}

    def step(self, prompt: str, response: str = RESPONSE, version: int = 0, entropy: Optional[float] = 0.5,
             reward: float = 0.0) -> Step:
        key = (prompt, response)
        if key not in self._cache:
            enc = self.policy.encode_chat([{"role": "user", "content": prompt}])
            resp = self.policy.tokenizer.encode(response, add_special_tokens=False) + [self.policy.eos_ids[0]]
            lps = self.policy.logprobs_of(enc.prompt_ids, resp)
            self._cache[key] = (list(enc.prompt_ids), resp, lps)
        p, r, lps = self._cache[key]
        return Step(prompt_ids=p, response_ids=r, rollout_logprobs=list(lps), policy_version=version,
                    entropy=entropy, reward=reward, action_text=response)

    def traj(self, task: str, group: str, n_steps: int, reward: float, iteration: int, source: str = "on_policy",
             run_id: str = "", entropies: Optional[list[Optional[float]]] = None) -> Trajectory:
        ents = entropies or [0.5] * n_steps
        steps = [self.step(PROMPTS[k % len(PROMPTS)], version=iteration, entropy=ents[k]) for k in range(n_steps)]
        steps[-1].reward = reward
        return Trajectory(traj_id=uuid.uuid4().hex, run_id=run_id, task_id=task, seed=0, group_id=group, steps=steps,
                          reward=reward, success=reward >= 1.0, source=source, info={"iteration": iteration})


def store_iteration(t: Any, tokens: Tokens, iteration: int, spec: list[tuple[str, str, int, float]]) -> list[Trajectory]:
    """Store on-policy trajectories ``(task, group, n_steps, reward)`` as iteration ``iteration``'s."""
    trajs = [tokens.traj(task, group, n, r, iteration, run_id=t.run_id) for task, group, n, r in spec]
    t.store.add_trajectories(t.run_id, trajs)
    return trajs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: Any) -> Path:
    """A tiny Qwen2.5-VL built from a config with random weights (seed 0), saved and reloaded
    through ``from_pretrained`` (the fixture for modules that import it from here)."""
    from guigym.train.policy.tiny import build

    return build(tmp_path_factory.mktemp("models") / "tiny", seed=0)


@pytest.fixture(scope="module")
def tokens(tiny: Path) -> Tokens:
    from guigym.train.policy.hf_policy import HFPolicy

    return Tokens(HFPolicy(tiny))


def capture_updates(t: Any) -> list[list[Any]]:
    """Record the samples of every ``t.learner.update`` call (the real update still runs)."""
    seen: list[list[Any]] = []
    real = t.learner.update

    def update(samples: Any) -> Any:
        seen.append(list(samples))
        return real(samples)

    t.learner.update = update
    return seen


class FixedPrompts:
    """A PromptBuilder stand-in for scheduler tests without a tokenizer: every prompt is the same
    two ids (``Prompt(prompt_ids=[1, 2])``), responses are ignored."""

    mode = "stepwise"

    def episode(self, instruction: str, guidance: str = "") -> "FixedPrompts":
        return self

    def prompt(self, obs: dict[str, Any]) -> Any:
        from guigym.train.rollout.prompts import Prompt

        return Prompt(prompt_ids=[1, 2], images=[], candidates=None, env_mask=[1, 1])

    def add_response(self, ids: list[int], text: str) -> None:
        pass
