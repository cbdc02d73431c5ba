"""BEPA LEVEL-1: expert trajectories -> plans -> plan-conditioned self-rolls (sec. 4.1, eq. 1).

BEPA abstracts each expert trajectory tau^E of task x into a plan p_x = phi(tau^E) and rolls the
*base policy* conditioned on (x, p_x); the successes form D_self (eq. 1), which LEVEL-2 (bepa.py)
uses as the initial per-task cache E_x, replayed under the original instruction x without the
plan (eq. 3). Here:

* :func:`abstract_plan` is phi, rule-based: one numbered line per typed action of the expert
  trace, naming the a11y element it touched by role and name ("click the button 'Submit'"), never
  by element id (ids change between episodes) or coordinates;
* :class:`MiniWoBOracleExpert` produces tau^E for a (task, seed) by playing guigym's MiniWoB
  oracle (agents/oracle/miniwob.py, which reads only observations) in its own MiniWoB-v0 env;
  only successful expert episodes yield a plan;
* ``CONDITIONERS["bepa_plan"]`` attaches p_x as :class:`Guidance` (level 1, source
  ``bepa_plan``) to the first ``members`` rollouts of each group during the first
  ``level1_iterations`` iterations (0 = no limit) and, with ``until_cached: true``, only until the
  task has a success (from then on bepa_cache's rule U holds an E_x for it); the prompt builder appends it to the instruction and also records
  the prompt without it (``Step.info["unguided_prompt_ids"]``), which is what LEVEL-2 trains on.

* :class:`PlanFileExpert` (``expert: plan_file``) reads plans written offline (JSONL), e.g. BEPA's
  own setting: Agent S2's OSWorld traces abstracted once by GPT-4o.

Other expert sources (desktop reference solutions, a stronger model behind an OpenAI-compatible
endpoint) plug in as any object with ``plan(task_id, seed) -> Optional[str]``.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping, Optional, Protocol, Sequence

from lxml import etree

from guigym.core.dialect import parse_action
from guigym.train.algorithms.context import Guidance, Plugin
from guigym.train.algorithms.registry import CONDITIONERS

_VERBS = {"click": "click", "double_click": "double-click", "right_click": "right-click", "hover": "hover over",
          "fill": "fill", "type": "type into", "select": "select in", "check": "check", "uncheck": "uncheck"}


def element_label(a11y: str, element: str) -> Optional[str]:
    """``"the <role> '<name>'"`` of the node whose ``id`` is ``element`` in guigym's a11y XML, else None."""
    try:
        root = etree.fromstring(a11y.encode("utf-8"), parser=etree.XMLParser(recover=True))
    except etree.XMLSyntaxError:
        return None
    if root is None:
        return None
    for node in root.iter():
        if node.get("id") == str(element):
            role = node.get("role") or node.tag
            name = (node.get("name") or node.get("text") or "").strip()
            return f"the {role} '{name}'" if name else f"the {role}"
    return None


def abstract_plan(steps: Sequence[tuple[Mapping[str, Any], str]]) -> str:
    """phi(tau^E): ``steps`` are (typed action as a dict, a11y XML the action was chosen on).

    Returns ``"Plan:\\n1. click the button 'Submit'\\n..."``; waits and ``done`` are left out, text
    typed is quoted, an element the tree does not name is described by its role only."""
    lines: list[str] = []
    for action, a11y in steps:
        name = str(action.get("name") or action.get("type") or "")
        if name in ("wait", "done", "fail", ""):
            continue
        target = element_label(a11y, action["element"]) if action.get("element") is not None else None
        verb = _VERBS.get(name, name.replace("_", " "))
        if name in ("type", "fill") and action.get("text") is not None:
            line = f"{'type' if name == 'type' else 'fill'} '{action['text']}'" + (f" into {target}" if target else "")
        elif name == "press" and action.get("key"):
            line = f"press {action['key']}"
        elif name == "hotkey" and action.get("keys"):
            line = "press " + "+".join(action["keys"])
        elif name == "select" and action.get("value") is not None:
            line = f"select '{action['value']}'" + (f" in {target}" if target else "")
        else:
            line = f"{verb} {target}" if target else verb
        lines.append(line)
    return "Plan:\n" + "\n".join(f"{i}. {ln}" for i, ln in enumerate(lines, 1)) if lines else ""


class Expert(Protocol):
    def plan(self, task_id: str, seed: int) -> Optional[str]: ...


class MiniWoBOracleExpert:
    """tau^E from guigym's MiniWoB oracle, played in a MiniWoB-v0 env of its own (started on first
    use); plans are cached per (task, seed), failures cached as None."""

    def __init__(self, max_steps: int = 10, env_kwargs: Optional[Mapping[str, Any]] = None) -> None:
        self.max_steps = int(max_steps)
        self.env_kwargs = dict(env_kwargs or {})
        self._env: Any = None
        self._plans: dict[tuple[str, int], Optional[str]] = {}

    def _make_env(self) -> Any:
        import gymnasium as gym

        import guigym  # noqa: F401 - registers the envs

        return gym.make("MiniWoB-v0", max_steps=self.max_steps, **self.env_kwargs)

    def trace(self, task_id: str, seed: int) -> tuple[list[tuple[dict[str, Any], str]], bool]:
        """The oracle's episode on (task, seed): [(typed action dict, a11y it acted on)], success."""
        from guigym.agents.oracle.miniwob import MiniWoBOracle

        if self._env is None:
            self._env = self._make_env()
        agent = MiniWoBOracle()
        obs, info = self._env.reset(seed=int(seed), options={"task": task_id})
        agent.reset(info)
        steps: list[tuple[dict[str, Any], str]] = []
        for _ in range(self.max_steps):
            a11y = str(obs.get("a11y", ""))
            obs, _, terminated, truncated, info = self._env.step(agent.act(obs))
            if info.get("action"):
                typed = parse_action(str(info["action"]))
                steps.append(({"name": typed.name, **dataclasses.asdict(typed)}, a11y))
            if terminated or truncated:
                return steps, bool(info.get("success"))
        return steps, False

    def plan(self, task_id: str, seed: int) -> Optional[str]:
        key = (task_id, int(seed))
        if key not in self._plans:
            steps, ok = self.trace(task_id, seed)
            self._plans[key] = (abstract_plan(steps) or None) if ok else None
        return self._plans[key]

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


class PlanFileExpert:
    """Plans written offline, one JSON object per line: ``{"task_id": ..., "plan": ...}`` with an
    optional ``"seed"`` (a plan without one serves every seed of its task; OSWorld tasks have one
    instance each). This is how BEPA's own setting plugs in: Agent S2's successful OSWorld traces
    abstracted by GPT-4o (phi) into plans, stored once. Unknown tasks get no plan."""

    def __init__(self, path: str) -> None:
        import json

        self.path = str(path)
        self.plans: dict[tuple[str, Optional[int]], str] = {}
        try:
            lines = Path(self.path).read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise ValueError(f"bepa_plan: expert_options.path: cannot read {self.path!r}: {e}") from e
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"bepa_plan: {self.path}:{n}: not JSON ({e.msg})") from e
            if not isinstance(rec, dict) or not isinstance(rec.get("task_id"), str) or \
                    not isinstance(rec.get("plan"), str) or not rec["plan"].strip():
                raise ValueError(f"bepa_plan: {self.path}:{n}: needs string fields 'task_id' and 'plan'")
            seed = rec.get("seed")
            if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
                raise ValueError(f"bepa_plan: {self.path}:{n}: 'seed' must be an int, got {seed!r}")
            self.plans[(rec["task_id"], seed)] = rec["plan"].strip()

    def plan(self, task_id: str, seed: int) -> Optional[str]:
        return self.plans.get((task_id, int(seed))) or self.plans.get((task_id, None))

    def close(self) -> None:
        return None


EXPERTS = {"miniwob_oracle": MiniWoBOracleExpert, "plan_file": PlanFileExpert}


@CONDITIONERS.register("bepa_plan")
class BEPAPlan(Plugin):
    """BEPA LEVEL-1 (sec. 4.1, eq. 1): the expert's plan p_x = phi(tau^E) on the first ``members``
    rollouts of each group, during the first ``level1_iterations`` iterations (0 = no limit) and,
    with ``until_cached``, until the task has a success in a finished iteration. ``expert``:
    ``miniwob_oracle`` (plays the rollout's task and seed; option ``max_steps``) or ``plan_file``
    (option ``path``: JSONL of offline plans); options in ``expert_options``. State: how often each
    task's plan was used."""

    def __init__(self, expert: str = "miniwob_oracle", expert_options: Optional[Mapping[str, Any]] = None,
                 members: int = 1, level1_iterations: int = 0, until_cached: bool = True) -> None:
        if expert not in EXPERTS:
            raise ValueError(f"bepa_plan: expert must be one of {sorted(EXPERTS)}, got {expert!r}")
        if members < 1:
            raise ValueError(f"bepa_plan: members must be >= 1, got {members}")
        self.expert: Any = EXPERTS[expert](**dict(expert_options or {}))
        self.members, self.level1_iterations, self.until_cached = int(members), int(level1_iterations), bool(until_cached)
        self.plans_used: dict[str, int] = {}

    @staticmethod
    def _solved(task_id: str, ctx: Any) -> bool:
        """The task had a success in a finished iteration, so bepa_cache's rule U holds an E_x."""
        outcome = (getattr(ctx, "history", None) or {}).get(task_id)
        return outcome is not None and outcome.successes > 0

    def __call__(self, task_id: str, seed: int, member: int, *, ctx: Any = None) -> Optional[Guidance]:
        if member >= self.members:
            return None
        it = int(getattr(ctx, "iteration", 0) or 0)
        if self.level1_iterations and it >= self.level1_iterations:
            return None
        if self.until_cached and self._solved(task_id, ctx):
            return None
        plan = self.expert.plan(task_id, seed)
        if not plan:
            return None
        self.plans_used[task_id] = self.plans_used.get(task_id, 0) + 1
        return Guidance(text=plan, level=1, source="bepa_plan")

    def state_dict(self) -> dict[str, Any]:
        return {"plans_used": dict(self.plans_used)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.plans_used = {str(k): int(v) for k, v in state.get("plans_used", {}).items()}
