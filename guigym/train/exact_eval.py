"""Exact expected success of a constrained one-click policy on recorded pages (no sampling noise).

A sampled evaluation of n episodes has a standard error of ~sqrt(p(1-p)/n) (0.065 at n = 60); a
small CI-sized learning test cannot see a real but modest change through it. For one-step tasks
whose every correct click is known (``guigym.agents.oracle.miniwob.instruction_variants``), the
policy's success probability on a page is exact: the probability mass its constrained
distribution (the one rollouts sample from) puts on the correct candidates,

    s(page) = sum_{c in correct(page)} prod_t pi(c_t | prompt, c_<t)      (T = 1),

and the held-out figure is its mean over pages, paired page by page before and after training.

``pages`` come from :func:`record_pages` (real env resets on held-out seeds); prompts are rendered
by the run's :class:`~guigym.train.rollout.prompts.PromptBuilder`, so they are the rollout's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence


@dataclass
class Page:
    """One held-out page: the env's observation, its instruction and the clicks that solve it."""

    task_id: str
    seed: int
    obs: dict[str, Any]
    instruction: str
    correct: list[str]


def record_pages(env_id: str, env_kwargs: dict[str, Any], tasks: Sequence[str], seeds: Sequence[int]) -> list[Page]:
    """Reset a real env on every (task, seed) and keep the first observation with its correct
    clicks (the variants listing the page's own instruction)."""
    import gymnasium as gym

    import guigym  # noqa: F401 - registers the envs
    from guigym.agents.oracle.miniwob import instruction_variants

    env = gym.make(env_id, tasks=list(tasks), **env_kwargs)
    pages = []
    try:
        for task in tasks:
            for seed in seeds:
                obs, info = env.reset(seed=int(seed), options={"task": task})
                ok = next((a for q, a in instruction_variants(task, obs) if q == info["instruction"]), [])
                pages.append(Page(task, int(seed), dict(obs), str(info["instruction"]), list(ok)))
    finally:
        env.close()
    return pages


def oracle_plan(page: Page) -> str:
    """BEPA's abstracted expert plan (``bepa_plans.abstract_plan``) of the page's first correct
    click, e.g. ``"Plan:\n1. click the button 'Okay'"``: the text BEPA's plan conditioning
    appends to the instruction (``PromptBuilder.episode(..., guidance=)``)."""
    import dataclasses

    from guigym.core.dialect import parse_action
    from guigym.train.algorithms.bepa_plans import abstract_plan

    if not page.correct:
        return ""
    typed = parse_action(page.correct[0])
    return abstract_plan([({"name": typed.name, **dataclasses.asdict(typed)}, str(page.obs.get("a11y", "")))])


def expected_success(policy: Any, builder: Any, pages: Sequence[Page],
                     guidance: Optional[Callable[[Page], str]] = None) -> list[float]:
    """Per page, the probability that ``policy`` (an HFPolicy, constrained as ``builder`` says)
    clicks a correct element: a list aligned with ``pages``. ``guidance(page)``: conditioner text
    for the episode (e.g. :func:`oracle_plan`), as BEPA / UI-Mem rollouts add it."""
    from guigym.train.demos import reply_ids

    out = []
    for page in pages:
        p = builder.episode(page.instruction, guidance=guidance(page) if guidance else "").prompt(page.obs)
        mass = 0.0
        for c in page.correct:
            if p.candidates is not None and c not in p.candidates:
                continue
            reply = reply_ids(policy.tokenizer, c)
            mass += math.exp(sum(policy.logprobs_of(p.prompt_ids, reply, candidates=p.candidates)))
        out.append(mass)
    return out


def rewarded_mass_change(trajectories: Sequence[Any], before: Any, after: Any) -> list[float]:
    """Did the update move the policy toward what the env rewarded, on the pages it trained on?

    For each GRPO group of one-step trajectories (same page, ``group_id``) whose rewards differ
    (the groups that carry a gradient), the probability mass ``after`` minus ``before`` put on
    the set of responses that succeeded in that group, from the recorded prompt ids, response
    ids and constraint candidates (the exact tokens the rollout sampled and the learner trained
    on). A list with one entry per informative group; a correct GRPO update makes most entries
    positive. This is a training-page figure (what the learner was shown), not a held-out one:
    :func:`expected_success` on held-out pages measures generalisation."""
    from collections import defaultdict

    groups: dict[str, list[Any]] = defaultdict(list)
    for t in trajectories:
        if len(t.steps) == 1:
            groups[t.group_id].append(t)
    out = []
    for items in groups.values():
        if len({t.reward for t in items}) < 2:
            continue  # zero advantage: no gradient from this group
        step = items[0].steps[0]
        won = {tuple(t.steps[0].response_ids) for t in items if t.reward == max(x.reward for x in items)}

        def mass(policy: Any) -> float:
            return sum(math.exp(sum(policy.logprobs_of(step.prompt_ids, list(r), candidates=step.candidates)))
                       for r in won)
        out.append(mass(after) - mass(before))
    return out
