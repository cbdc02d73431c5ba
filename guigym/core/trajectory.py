"""Episode records written by eval (and, with token fields filled, by the trainer)."""
from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, Field


class StepRecord(BaseModel):
    """One env step as the agent saw and did it."""

    index: int
    action_text: str = Field(description="the raw text the agent produced")
    action: Optional[str] = Field(default=None, description="parsed action in canonical form, None if unparseable")
    action_error: Optional[str] = None
    reward: Optional[float] = Field(default=0.0, description="the env's reward; None on the last step of an "
                                    "unscorable episode (the verifier could not score it)")
    screenshot: Optional[str] = Field(default=None, description="path of the screenshot seen before acting")
    prompt_token_ids: Optional[list[int]] = None
    response_token_ids: Optional[list[int]] = None
    response_logprobs: Optional[list[float]] = None
    policy_version: Optional[int] = None
    latency_s: float = 0.0
    screen_changed: Optional[bool] = Field(default=None, description="the screenshot after the step differs from the one before "
                                                                 "(AndroidLab's similarity <= 0.999; ROR)")


class EpisodeResult(BaseModel):
    """One finished (or lost) episode: a line of ``results.jsonl``."""

    key: str = Field(description="stable id of this episode within a run: task/seed/attempt")
    task_id: str
    domain: str = ""
    seed: int
    attempt: int = 0
    status: str = Field(description="'done' (scored), 'unscorable' (ran to its end but the verifier could not "
                                    "score it, e.g. fuzzy_match without an LLM judge; neither success nor failure) "
                                    "or 'lost' (infrastructure failure, not scored)")
    score: Optional[float] = Field(default=0.0, description="verifier score in [0, 1]; None when unscorable")
    success: Optional[bool] = Field(default=False, description="None when unscorable")
    steps: int = 0
    instruction: str = ""
    verifier: dict[str, Any] = Field(default_factory=dict)
    error: Optional[str] = None
    wall_s: float = 0.0
    trajectory_dir: Optional[str] = None
    reference_steps: Optional[int] = Field(default=None, description="length of the task's reference plan (RRR)")
    operations: int = Field(default=0, description="steps with an action other than done/fail (ROR)")
    changing_operations: int = Field(default=0, description="of those, steps after which the screen changed (ROR)")
    ror: Optional[float] = Field(default=None, description="AndroidLab's Reasonable Operation Ratio of the episode "
                                                           "(eval.summary.episode_ror); None without steps")
    difficulty: Optional[str] = Field(default=None, description="the task's published difficulty (AndroidWorld: "
                                                               "easy/medium/hard), from the env's reset info")
