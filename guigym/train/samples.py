"""Sample builders: trajectories (exact token ids) -> training samples with loss masks.

A :class:`Sample` is one token sequence for one forward pass. Its ``loss_mask`` marks the tokens
whose log-prob enters the loss (tokens the policy sampled); every other token is context. Token
ids are taken verbatim from the stored :class:`~guigym.train.data.types.Step` (``prompt_ids``,
``response_ids``): nothing is re-tokenised, so the learner's log-probs are of exactly the tokens
the rollout engine sampled (re-tokenising a chat transcript changes token boundaries and breaks
the PPO ratio).

Two builders (issue 5, item 5):

``stepwise`` (DART; UI-TARS-style agents): every step is its own sample, prompt -> response,
carrying its trajectory's advantage (trajectory-level GRPO) or its own (step-wise GRPO, DART
eq. 1)::

    step k:   input_ids = prompt_k (P_k)          | response_k (R_k)
              loss_mask = 0 0 0 ... 0             | 1 1 ... 1
              advantage = A_traj (or A_k)  on every response token

``multiturn`` (verl multi-turn): one sequence per trajectory. Step k+1's prompt must extend
step k's prompt + response (an append-only transcript); the extension (the env's observation,
chat markers) is context, masked out of the loss::

    input_ids = prompt_0 | resp_0 | env_1      | resp_1 | env_2      | resp_2
    loss_mask = 0 ... 0  | 1...1  | 0 ... 0    | 1...1  | 0 ... 0    | 1...1
    adv       = -        | A_0    | -          | A_1    | -          | A_2
    where env_{k+1} = prompt_{k+1}[len(prompt_k) + len(resp_k):]

If a prompt does not extend the previous one (a prompt builder that keeps only the last k
screenshots rewrites history), :func:`build_multiturn` raises: concatenating anyway would train
on a sequence the policy never saw.

Shapes: ``input_ids``, ``loss_mask``, ``rollout_logprobs``, ``advantages`` are all length L lists;
``rollout_logprobs`` and ``advantages`` are 0.0 where ``loss_mask`` is 0. ``segments`` lists the
sampled spans ``(start, end, candidates)`` (end exclusive) so the learner can rebuild the
constrained-decoding mask of each span.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from guigym.core.registry import Registry
from guigym.train.data.types import Step, Trajectory

#: per trajectory: one advantage for all its steps, or one per step (step-wise GRPO)
Advantage = Union[float, Sequence[float]]


@dataclass
class Segment:
    """A sampled span ``input_ids[start:end]`` and the candidates it was constrained to (or None)."""

    start: int
    end: int
    candidates: Optional[list[str]] = None


@dataclass
class Sample:
    """One training sequence. All per-token lists have length L = len(input_ids)."""

    input_ids: list[int]
    loss_mask: list[int]
    rollout_logprobs: list[float]
    advantages: list[float]
    segments: list[Segment]
    image_refs: list[str] = field(default_factory=list)
    traj_id: str = ""
    step_index: int = -1  # -1 = a whole trajectory (multiturn)
    policy_version: int = 0
    source: str = "on_policy"  # Trajectory.source (extra losses such as SFT select on it)
    #: the trajectory's shaped reward (the reward-shaper chain's output; a per-step list counts as
    #: its sum); the verifier score when the builder got no ``rewards``
    reward: float = 0.0

    @property
    def num_loss_tokens(self) -> int:
        return int(sum(self.loss_mask))

    def validate(self) -> None:
        n = len(self.input_ids)
        for name in ("loss_mask", "rollout_logprobs", "advantages"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"sample {self.traj_id}/{self.step_index}: {name} has "
                                 f"{len(getattr(self, name))} entries, input_ids {n}")
        for s in self.segments:
            if not (0 < s.start <= s.end <= n):
                raise ValueError(f"sample {self.traj_id}/{self.step_index}: segment [{s.start}, {s.end}) "
                                 f"outside 1..{n} (a sampled token needs a preceding context token)")


def _step_advantage(adv: Advantage, k: int, traj: Trajectory) -> float:
    if isinstance(adv, (int, float)):
        return float(adv)
    adv = list(adv)
    if len(adv) != traj.length:
        raise ValueError(f"trajectory {traj.traj_id}: {len(adv)} step advantages for {traj.length} steps")
    return float(adv[k])


def _shaped(rewards: Optional[Mapping[str, Any]], traj: Trajectory) -> float:
    """The shaped reward of ``traj`` as one float (sum of a per-step list); the verifier score
    when no shaped rewards are given."""
    if rewards is None:
        return float(traj.reward)
    if traj.traj_id not in rewards:
        raise KeyError(f"no shaped reward for trajectory {traj.traj_id!r} (task {traj.task_id})")
    r = rewards[traj.traj_id]
    return float(r) if isinstance(r, (int, float)) else float(sum(float(x) for x in r))


def _lookup(advantages: Mapping[str, Advantage], traj: Trajectory) -> Advantage:
    if traj.traj_id not in advantages:
        raise KeyError(f"no advantage for trajectory {traj.traj_id!r} (task {traj.task_id})")
    return advantages[traj.traj_id]


def build_stepwise(trajs: Sequence[Trajectory], advantages: Mapping[str, Advantage],
                   keep: Optional[Callable[[Trajectory, int, Step], bool]] = None,
                   rewards: Optional[Mapping[str, Any]] = None) -> list[Sample]:
    """One sample per step: ``prompt_ids + response_ids`` with the response masked in.

    ``advantages[traj_id]``: a float (trajectory-level GRPO) or one float per step (DART eq. 1).
    ``keep(traj, k, step)``: optional step filter (e.g. top-entropy steps); steps with an empty
    response carry no token to train and are skipped. ``rewards[traj_id]``: the shaped reward
    (float or per-step list) that becomes ``Sample.reward``.
    """
    out: list[Sample] = []
    for traj in trajs:
        adv = _lookup(advantages, traj)
        for k, step in enumerate(traj.steps):
            if not step.response_ids or (keep is not None and not keep(traj, k, step)):
                continue
            if len(step.rollout_logprobs) != len(step.response_ids):
                raise ValueError(f"trajectory {traj.traj_id} step {k}: {len(step.rollout_logprobs)} rollout "
                                 f"log-probs for {len(step.response_ids)} response tokens")
            if not step.prompt_ids:
                raise ValueError(f"trajectory {traj.traj_id} step {k}: empty prompt_ids")
            p, r = len(step.prompt_ids), len(step.response_ids)
            a = _step_advantage(adv, k, traj)
            out.append(Sample(
                input_ids=list(step.prompt_ids) + list(step.response_ids),
                loss_mask=[0] * p + [1] * r,
                rollout_logprobs=[0.0] * p + [float(x) for x in step.rollout_logprobs],
                advantages=[0.0] * p + [a] * r,
                segments=[Segment(p, p + r, None if step.candidates is None else list(step.candidates))],
                image_refs=list(step.image_refs), traj_id=traj.traj_id, step_index=k,
                policy_version=step.policy_version, source=traj.source, reward=_shaped(rewards, traj),
            ))
    return out


def build_multiturn(trajs: Sequence[Trajectory], advantages: Mapping[str, Advantage],
                    keep: Optional[Callable[[Trajectory, int, Step], bool]] = None,
                    rewards: Optional[Mapping[str, Any]] = None) -> list[Sample]:
    """One sample per trajectory; env tokens between responses are context (mask 0).

    Step k's response gets step k's advantage (or the trajectory's). ``keep`` may drop a step's
    response from the loss (its tokens stay as context). Raises ValueError when a prompt does not
    extend the previous prompt + response (the transcript was rewritten).
    """
    out: list[Sample] = []
    for traj in trajs:
        if not traj.steps:
            continue
        adv = _lookup(advantages, traj)
        ids: list[int] = []
        mask: list[int] = []
        lps: list[float] = []
        advs: list[float] = []
        segs: list[Segment] = []
        for k, step in enumerate(traj.steps):
            prompt = list(step.prompt_ids)
            if prompt[: len(ids)] != ids:
                first = next((i for i, (a, b) in enumerate(zip(prompt, ids)) if a != b), min(len(prompt), len(ids)))
                raise ValueError(
                    f"trajectory {traj.traj_id} step {k}: prompt_ids do not extend the previous prompt + response "
                    f"(first difference at token {first}); the multiturn builder needs an append-only transcript, "
                    f"use sample_builder: stepwise for prompts that rewrite history")
            env = prompt[len(ids):]
            ids += env
            mask += [0] * len(env)
            lps += [0.0] * len(env)
            advs += [0.0] * len(env)
            r = len(step.response_ids)
            if len(step.rollout_logprobs) != r:
                raise ValueError(f"trajectory {traj.traj_id} step {k}: {len(step.rollout_logprobs)} rollout "
                                 f"log-probs for {r} response tokens")
            if r and not ids:
                raise ValueError(f"trajectory {traj.traj_id} step {k}: empty prompt_ids")
            train = r > 0 and (keep is None or keep(traj, k, step))
            a = _step_advantage(adv, k, traj)
            start = len(ids)
            ids += list(step.response_ids)
            mask += [1 if train else 0] * r
            lps += [float(x) for x in step.rollout_logprobs] if train else [0.0] * r
            advs += [a if train else 0.0] * r
            if train:
                segs.append(Segment(start, start + r, None if step.candidates is None else list(step.candidates)))
        if not segs:
            continue
        out.append(Sample(input_ids=ids, loss_mask=mask, rollout_logprobs=lps, advantages=advs, segments=segs,
                          image_refs=list(traj.steps[-1].image_refs), traj_id=traj.traj_id, step_index=-1,
                          policy_version=traj.policy_version, source=traj.source,
                          reward=_shaped(rewards, traj)))
    return out


SAMPLE_BUILDERS: Registry = Registry("sample builder")
SAMPLE_BUILDERS.register("stepwise", build_stepwise)
SAMPLE_BUILDERS.register("multiturn", build_multiturn)


def max_trained_tokens(builder: str, max_new_tokens: int, max_steps: Optional[int]) -> Optional[int]:
    """The most trained (loss-mask) tokens one sample of ``builder`` can hold: the Dr. GRPO constant.

    Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective")
    removes GRPO's ``1 / |o_i|`` length normalisation and divides the summed token loss by a constant instead,
    the generation budget (TRL ``loss_type="dr_grpo"``: ``B * max_completion_length``), so that no
    response's tokens weigh more for being short. The budget of one sample is what the builder
    puts in it: ``stepwise`` holds one response, at most ``max_new_tokens``; ``multiturn`` holds the
    responses of every step, at most ``max_steps * max_new_tokens``. Dividing a multi-turn sample by
    ``max_new_tokens`` alone would scale its loss by up to ``max_steps`` and make the constant depend
    on nothing the recipe states. Returns None when the budget is unbounded (multiturn with
    ``max_steps`` None: the tasks' own step budgets are not known when the learner is built).
    """
    if builder == "stepwise":
        return int(max_new_tokens)
    if builder == "multiturn":
        return None if max_steps is None else int(max_steps) * int(max_new_tokens)
    raise ValueError(f"sample_builder: unknown {builder!r}; known: stepwise, multiturn")
