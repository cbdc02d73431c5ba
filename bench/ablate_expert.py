"""Oracle expert traces for bench/ablate.py's experience-pool arm (DART sec. 4.2).

DART's pool holds "pre-collected successful trajectories" of an expert agent. Here the expert is
guigym's MiniWoB oracle (guigym/agents/oracle/miniwob.py). Its episodes become trajectories in
the policy's own token space, so the learner can train on them like any injected member:

* each step's prompt is what the trainer's prompt builder renders for that observation (same
  template, candidates and history), so the pool step is a prompt the policy really sees;
* the response is the oracle's action string -- one of the step's constrained candidates
  (``click(element="ID")``) -- tokenised as constrained sampling emits it (candidate tokens, then
  the chat end token);
* ``rollout_logprobs`` are the initial policy's teacher-forced log-probs of that response under
  the same candidate mask (the behaviour policy the truncated IS weight divides by is recorded,
  as for any injected trajectory).

An oracle action that is not a candidate (e.g. ``fill``, which the click-only action space
cannot express) makes the episode unusable; so does a success longer than the training step
budget. Both are counted, not stored.
"""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Optional, Sequence

#: seeds of the oracle's episodes: far from every training seed range used by ablate.py
ORACLE_SEED_BASE = 900_000


def record_oracle_run(run_dir: Path, model_dir: Path, tasks: Sequence[str], episodes: int, max_steps: int,
                      seed: int, roles: Any = None, oracle_max_steps: int = 8) -> tuple[str, dict[str, Any]]:
    """Play the MiniWoB oracle ``episodes`` times per task and store its usable successes as
    ``source="expert"`` trajectories of a new run in ``run_dir``'s DataStore.

    ``model_dir``: the tiny policy the training run starts from (its tokenizer renders prompts,
    its weights give the behaviour log-probs). ``max_steps``: the training step budget (longer
    successes are dropped). ``roles``: the trainer's ``rollout.candidate_roles``.
    Returns (expert run id, counts ``{task: {"episodes", "successes", "stored", "not_candidate",
    "too_long"}}``)."""
    import gymnasium as gym

    import guigym  # noqa: F401 - registers the envs
    from guigym.agents.oracle.miniwob import MiniWoBOracle
    from guigym.train.data.store import DataStore
    from guigym.train.data.types import Step, Trajectory
    from guigym.models.hf_policy import HFPolicy
    from guigym.train.rollout.prompts import PromptBuilder

    policy = HFPolicy(str(model_dir))
    builder = PromptBuilder(policy, history_images=0, constrained=True, mode="stepwise", actions=("click",),
                            roles=roles)
    env = gym.make("MiniWoB-v0", max_steps=oracle_max_steps, tasks=list(tasks))
    store = DataStore.for_run_dir(str(run_dir))
    counts: dict[str, dict[str, int]] = {}
    trajs: list[Trajectory] = []
    try:
        run_id = store.start_run("miniwob-oracle-expert", {"agent": "miniwob_oracle", "tasks": list(tasks)})
        for task in tasks:
            c = counts.setdefault(task, {"episodes": 0, "successes": 0, "stored": 0, "not_candidate": 0,
                                         "too_long": 0})
            for k in range(episodes):
                ep_seed = ORACLE_SEED_BASE + 1000 * seed + k
                steps, success, reward, representable = _episode(env, builder, policy, task, ep_seed,
                                                                 oracle_max_steps, MiniWoBOracle, Step)
                c["episodes"] += 1
                c["successes"] += int(success)
                if not success:
                    continue
                if not representable:
                    c["not_candidate"] += 1
                elif len(steps) > max_steps:
                    c["too_long"] += 1
                else:
                    c["stored"] += 1
                    trajs.append(Trajectory(traj_id=uuid.uuid4().hex, run_id=run_id, task_id=task, seed=ep_seed,
                                            group_id=f"oracle-{task}-{ep_seed}", steps=steps, reward=reward,
                                            success=True, source="expert", info={"agent": "miniwob_oracle"}))
        store.add_trajectories(run_id, trajs)
    finally:
        store.close()
        env.close()
    return run_id, counts


def _episode(env: Any, builder: Any, policy: Any, task: str, ep_seed: int, limit: int, oracle_cls: Any,
             step_cls: Any) -> tuple[list[Any], bool, float, bool]:
    """One oracle episode: (steps, success, final reward, every action was a candidate)."""
    obs, info = env.reset(seed=ep_seed, options={"task": task})
    agent = oracle_cls()
    agent.reset(info)
    episode = builder.episode(str(info.get("instruction") or obs.get("instruction") or ""))
    eos = int(policy.eos_ids[0])
    steps: list[Any] = []
    representable, reward = True, 0.0
    for _ in range(limit):
        prompt = episode.prompt(obs)
        action = agent.act(obs)
        cands: Optional[list[str]] = prompt.candidates
        if representable and cands and action in cands:
            ids = [int(i) for i in policy.tokenizer(action, add_special_tokens=False)["input_ids"]] + [eos]
            lps = policy.logprobs_of(prompt.prompt_ids, ids, candidates=cands, temperature=1.0)
            episode.add_response(ids, action)
            steps.append(step_cls(prompt_ids=list(prompt.prompt_ids), response_ids=ids, rollout_logprobs=lps,
                                  policy_version=0, action_text=action, candidates=list(cands)))
        else:
            representable = False
        obs, reward, terminated, truncated, info = env.step(action)
        if steps and representable:
            steps[-1].reward = float(reward)
            steps[-1].action = info.get("action")
        if terminated or truncated:
            return steps, bool(info.get("success")), float(reward), representable
    return steps, False, float(reward), representable
