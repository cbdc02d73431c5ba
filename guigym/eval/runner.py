"""Evaluate an agent on a task list with N envs in parallel, resumably.

Output directory layout::

    OUT/results.jsonl                       one EpisodeResult per line, appended atomically
    OUT/summary.json                        overall, per-domain and per-task success rates (rewritten atomically)
    OUT/results.csv, OUT/report.html        one row per episode; a self-contained HTML report (eval/report.py)
    OUT/trajectories/<task>/<seed>_<attempt>/step_000.png ... episode.json

Each env slot runs its own episode loop (reset -> act -> step ... -> verifier) and is refilled
with the next pending episode as soon as it finishes, so a slow episode never holds the others.
On restart, episodes whose key (``task/seed/attempt``) already has a finished line (``done`` or
``unscorable``) in ``results.jsonl`` are skipped; ``lost`` episodes (infrastructure failures of
the env or of the agent) are run again. A restart resumes only the same evaluation: ``config.json``
records its identity and a different one is refused (eval/identity.py). An agent call that raises
or times out is retried, then its episode is lost, never scored (eval/agent_call.py).

An episode the env reports as ``info["unscorable"]`` (its verifier could not score it, e.g.
WebArena's ``fuzzy_match`` with no LLM judge) is recorded with ``status="unscorable"``,
``score=None``, ``success=None`` and its last step's reward None: neither a success nor a
failure (summary.py counts it separately).
"""
from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

import numpy as np

from guigym.agents.base import Agent
from guigym.core.errors import ConfigError
from guigym.core.paths import check_task_id
from guigym.core.trajectory import EpisodeResult, StepRecord
from guigym.envs.pool import EnvPool, per_env_kwargs
from guigym.eval.files import (  # noqa: F401  (re-exported: imported from here by users and tests)
    append_jsonl, read_jsonl, repair_jsonl, save_png_atomic, write_json_atomic, write_text_atomic,
)

if TYPE_CHECKING:
    from guigym.envs.ray_backend import RayEnvPool

#: statuses of an episode that ran to its end (not run again on resume)
FINISHED = ("done", "unscorable")


@dataclass(frozen=True)
class EpisodeSpec:
    task_id: str
    seed: int
    attempt: int = 0

    @property
    def key(self) -> str:
        return f"{self.task_id}/{self.seed}/{self.attempt}"


def make_specs(task_ids: Iterable[str], episodes: int, seed: int = 0, attempts: int = 1) -> list[EpisodeSpec]:
    """``episodes`` seeds per task (``seed``, ``seed+1``, ...), each tried ``attempts`` times (pass@k)."""
    return [EpisodeSpec(t, seed + k, a) for t in task_ids for k in range(episodes) for a in range(attempts)]


# ---- the run ------------------------------------------------------------------------------------
@dataclass
class _Running:
    spec: EpisodeSpec
    agent: Agent
    traj_dir: Path
    started: float
    steps: list[StepRecord] = field(default_factory=list)
    instruction: str = ""
    domain: str = ""
    reference_steps: Optional[int] = None
    difficulty: Optional[str] = None
    last_obs: Optional[dict[str, Any]] = None
    pending_text: str = ""
    pending_tokens: dict[str, Any] = field(default_factory=dict)  # agent.last_tokens of the pending step
    reset_info: dict[str, Any] = field(default_factory=dict)  # the episode's reset info (for a fresh agent)
    t_act: float = 0.0


@dataclass
class EvalConfig:
    env_id: str
    task_ids: list[str]
    out_dir: Path
    num_envs: int = 1
    episodes: int = 1
    attempts: int = 1
    seed: int = 0
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    #: one device per env (AndroidLab-v0 / AndroidWorld-v0: env i gets ``serial=serials[i]``); not part
    #: of the identity, so a resume may run on other devices
    serials: list[str] = field(default_factory=list)
    save_screenshots: bool = True
    max_lost_retries: int = 2
    call_timeout_s: float = 120.0
    report_max_episodes: int = 200
    #: "process" (EnvPool: a worker process per env) or "ray" (RayEnvPool: a Ray actor per env)
    backend: str = "process"
    ray_address: Optional[str] = None  # ray.init address when Ray is not initialised (None: local Ray)
    ray_num_cpus: float = 1.0  # logical CPUs per env actor
    ray_resources: dict[str, float] = field(default_factory=dict)  # custom resources per env actor, e.g. {"desktop": 1}
    #: the agent spec and options (recorded in config.json: a rerun resumes only the same agent)
    agent: str = ""
    agent_opts: dict[str, Any] = field(default_factory=dict)
    #: an agent call that raises or takes longer than agent_timeout_s is retried agent_retries
    #: times (waits agent_backoff_s, doubling), then its episode is lost (eval/agent_call.py)
    agent_retries: int = 2
    agent_timeout_s: Optional[float] = 600.0
    agent_backoff_s: float = 1.0
    #: after this many episodes in a row lost to the agent, start no more (rerun resumes them)
    agent_abort_after: int = 3
    #: start afresh in out_dir (remove its results) instead of refusing a different evaluation
    overwrite: bool = False

    def identity(self) -> dict[str, Any]:
        """What config.json records and a rerun must match to resume (eval/identity.py)."""
        from guigym import __version__

        return {"agent": self.agent, "agent_opts": self.agent_opts, "env_id": self.env_id,
                "env_kwargs": self.env_kwargs, "task_ids": self.task_ids, "seed": self.seed,
                "episodes": self.episodes, "attempts": self.attempts, "guigym_version": __version__}

    def keys(self) -> set[str]:
        """Episode keys this run asks for."""
        return {s.key for s in make_specs(self.task_ids, self.episodes, self.seed, self.attempts)}


def run_eval(config: EvalConfig, agent_factory: Callable[[], Agent], progress: bool = True,
             notify: Callable[[str], None] = lambda message: None) -> list[dict[str, Any]]:
    """Run every pending episode of ``config``; return the result records of the episodes it asks
    for (old and new). ``notify`` gets one-line messages (how many episodes a resume skips, why
    the run stopped early).

    Raises :class:`~guigym.core.errors.TaskSpecError` naming ``task_ids[i]`` when a task id is
    not a safe directory name (it becomes ``OUT/trajectories/<task_id>/``), before anything runs;
    :class:`~guigym.eval.identity.ResumeMismatch` when ``out_dir`` holds another evaluation's
    results (unless ``overwrite``); ConfigError when an env reports a configuration error (an
    option or task it does not take): such an episode is never recorded as lost.
    """
    from guigym.eval.agent_call import AgentFailure, act_with_retries
    from guigym.eval.identity import check_resume

    for i, task_id in enumerate(config.task_ids):
        check_task_id(task_id, f"task_ids[{i}]")
    if config.backend not in ("process", "ray"):
        raise ConfigError(f"backend: must be 'process' or 'ray', got {config.backend!r}")
    if config.serials and len(config.serials) != config.num_envs:
        raise ConfigError(f"serials: {len(config.serials)} device(s) for num_envs={config.num_envs}; "
                          "give one serial per env")
    per_env_kwargs(config.env_kwargs, config.num_envs, config.serials, "serials")  # duplicates etc. before any run
    out = Path(config.out_dir)
    check_resume(out, config.identity(), overwrite=config.overwrite)
    (out / "trajectories").mkdir(parents=True, exist_ok=True)
    results_path = out / "results.jsonl"
    repair_jsonl(results_path)
    finished = {r["key"] for r in read_jsonl(results_path) if r.get("status") in FINISHED}
    all_specs = make_specs(config.task_ids, config.episodes, config.seed, config.attempts)
    specs = [s for s in all_specs if s.key not in finished]
    if len(specs) < len(all_specs):
        notify(f"resuming {out}: skipping {len(all_specs) - len(specs)} of {len(all_specs)} episodes already "
               f"finished; running {len(specs)}")
    pending: deque[EpisodeSpec] = deque(specs)
    lost_count: dict[str, int] = {}
    agent_lost_in_a_row = 0
    write_json_atomic(out / "config.json", {
        **config.identity(), "num_envs": config.num_envs, "backend": config.backend,
    })
    if not pending:
        return _finalize(out, config)

    num_envs = min(config.num_envs, len(pending))
    pool_kwargs = per_env_kwargs({**config.env_kwargs, "tasks": config.task_ids, "info_timings": True}, num_envs,
                                 config.serials, "serials")
    pool: EnvPool | RayEnvPool
    if config.backend == "ray":
        from guigym.envs.ray_backend import RayEnvPool

        pool = RayEnvPool(config.env_id, num_envs, pool_kwargs, call_timeout_s=config.call_timeout_s,
                          num_cpus=config.ray_num_cpus, resources=config.ray_resources, address=config.ray_address)
    else:
        pool = EnvPool(config.env_id, num_envs, pool_kwargs, call_timeout_s=config.call_timeout_s)
    agents = [agent_factory() for _ in range(num_envs)]
    running: dict[int, _Running] = {}
    domains: dict[str, str] = {}  # task -> domain from reset info, also for episodes lost before reset
    bar = _Progress(len(specs), enabled=progress)

    def start_next(i: int) -> None:
        if not pending:
            return
        spec = pending.popleft()
        tdir = out / "trajectories" / spec.task_id / f"{spec.seed}_{spec.attempt}"
        tdir.mkdir(parents=True, exist_ok=True)
        for stale in tdir.glob("step_*.png"):  # left by an earlier lost run of this episode
            stale.unlink()
        running[i] = _Running(spec=spec, agent=agents[i], traj_dir=tdir, started=time.time())
        pool.reset_async(i, seed=spec.seed, options={"task": spec.task_id})

    def fresh_agent(i: int) -> Agent:
        """A new agent for slot ``i`` (the old one's call timed out and may still run), reset
        for the episode in progress."""
        agents[i] = running[i].agent = agent_factory()
        agents[i].reset(running[i].reset_info)
        return agents[i]

    def act(i: int, obs: dict[str, Any]) -> None:
        nonlocal agent_lost_in_a_row
        run = running[i]
        run.last_obs = obs
        if config.save_screenshots and "screenshot" in obs:
            save_png_atomic(run.traj_dir / f"step_{len(run.steps):03d}.png", obs["screenshot"])
        t0 = time.perf_counter()
        try:
            text, run.agent = act_with_retries(run.agent, obs, retries=config.agent_retries,
                                               timeout_s=config.agent_timeout_s, backoff_s=config.agent_backoff_s,
                                               replace=lambda: fresh_agent(i))
        except AgentFailure as exc:  # the agent's infrastructure, not its answer: lost, never scored
            finish(i, "lost", error=f"agent: {exc}", requeue=False)
            agent_lost_in_a_row += 1
            if agent_lost_in_a_row >= config.agent_abort_after and pending:
                notify(f"stopping: the agent failed in {agent_lost_in_a_row} episodes in a row ({exc}); "
                       f"{len(pending)} episode(s) not started")
                pending.clear()
            start_next(i)
            return
        agent_lost_in_a_row = 0
        tokens = getattr(run.agent, "last_tokens", None) or {}  # token-in/token-out agents (hf, openai)
        run.pending_text, run.t_act = text, time.perf_counter() - t0
        run.pending_tokens = {k: tokens.get(k) for k in _TOKEN_FIELDS}
        pool.step_async(i, text)

    def finish(i: int, status: str, score: Optional[float] = 0.0, success: Optional[bool] = False,
               verifier: Optional[dict[str, Any]] = None, error: Optional[str] = None, requeue: bool = True) -> None:
        run = running.pop(i)
        result = EpisodeResult(
            key=run.spec.key, task_id=run.spec.task_id, seed=run.spec.seed, attempt=run.spec.attempt,
            domain=run.domain or domains.get(run.spec.task_id, ""),
            status=status, score=score, success=success, steps=len(run.steps), instruction=run.instruction,
            verifier=_jsonable(verifier or {}), error=error, wall_s=time.time() - run.started,
            trajectory_dir=str(run.traj_dir.relative_to(out)), reference_steps=run.reference_steps,
            difficulty=run.difficulty, **_operation_counts(run.steps),
        )
        write_json_atomic(run.traj_dir / "episode.json", {
            **result.model_dump(), "steps": [s.model_dump() for s in run.steps]})
        append_jsonl(results_path, result.model_dump())
        if status == "lost":
            n = lost_count.get(run.spec.key, 0) + 1
            lost_count[run.spec.key] = n
            if requeue and n <= config.max_lost_retries:
                pending.append(run.spec)
            else:
                bar.advance(status, success)
        else:
            bar.advance(status, success)

    try:
        for i in range(num_envs):
            start_next(i)
        while running:
            for res in pool.wait():
                i = res.index
                run = running[i]
                if res.config_error:  # the run's (or this task's) configuration, not the infrastructure:
                    # every rerun would fail alike, so stop and record nothing (exit 2 in the CLI)
                    raise ConfigError(f"{config.env_id}, task {run.spec.task_id!r} ({res.kind}): "
                                      f"{str(res.error).splitlines()[0]}")
                if res.lost or res.error:
                    finish(i, "lost", error=res.error)
                    start_next(i)
                    continue
                if res.kind == "reset":
                    obs, info = res.value
                    run.instruction = info.get("instruction", "")
                    run.domain = domains[run.spec.task_id] = str(info.get("domain", ""))
                    run.reference_steps = info.get("reference_steps")
                    run.difficulty = info.get("difficulty")
                    run.reset_info = info
                    run.agent.reset(info)
                    act(i, obs)
                    continue
                obs, reward, terminated, truncated, info = res.value
                unscorable = bool(info.get("unscorable"))  # the env's reward 0.0 is only a placeholder then
                before = (run.last_obs or {}).get("screenshot")
                changed = None if before is None or "screenshot" not in obs else _screen_changed(before, obs["screenshot"])
                run.steps.append(StepRecord(
                    index=len(run.steps), action_text=run.pending_text, action=info.get("action"),
                    action_error=info.get("action_error"), reward=None if unscorable else float(reward),
                    screenshot=f"step_{len(run.steps):03d}.png" if config.save_screenshots else None,
                    latency_s=run.t_act + info.get("timings", {}).get("step_s", 0.0),
                    screen_changed=changed, **run.pending_tokens,
                ))
                if terminated or truncated:
                    if config.save_screenshots:
                        save_png_atomic(run.traj_dir / f"step_{len(run.steps):03d}.png", obs["screenshot"])
                    if unscorable:
                        finish(i, "unscorable", score=None, success=None, verifier=info.get("verifier"))
                    else:
                        finish(i, "done", score=float(reward), success=bool(info.get("success")),
                               verifier=info.get("verifier"))
                    start_next(i)
                else:
                    act(i, obs)
    finally:
        bar.close()
        pool.close()
    return _finalize(out, config)


#: AndroidLab's threshold: consecutive screenshots more similar than this are the same screen
SAME_SCREEN_SIMILARITY = 0.999


def _screen_changed(before: np.ndarray, after: np.ndarray) -> bool:
    """Whether a step changed the screen, as AndroidLab's ROR judges it (screenshot similarity at
    most 0.999, :func:`~guigym.envs.android.androidlab_checks.screen_similarity`)."""
    from guigym.envs.android.androidlab_checks import screen_similarity

    return screen_similarity(np.asarray(before), np.asarray(after)) <= SAME_SCREEN_SIMILARITY


def _operation_counts(steps: list[StepRecord]) -> dict[str, Any]:
    """Operations (steps that are not done/fail), those after which the screen changed, and the
    episode's AndroidLab ROR over all its steps (:func:`~guigym.eval.summary.episode_ror`)."""
    from guigym.eval.summary import episode_ror

    ops = [s for s in steps if not (s.action or "").startswith(("done(", "fail("))]
    unchanged = [None if s.screen_changed is None else not s.screen_changed for s in steps]
    return {"operations": len(ops), "changing_operations": sum(bool(s.screen_changed) for s in ops),
            "ror": episode_ror(unchanged)}


def _finalize(out: Path, config: EvalConfig) -> list[dict[str, Any]]:
    """Rewrite ``summary.json``, ``results.csv`` and ``report.html`` from ``results.jsonl``; return its records."""
    from guigym.eval.report import write_reports
    from guigym.eval.summary import summarize

    keys = config.keys()  # only the episodes this run asks for
    records = [r for r in read_jsonl(out / "results.jsonl") if r.get("key") in keys]
    write_json_atomic(out / "summary.json", summarize(records))
    write_reports(out, records, max_episodes=config.report_max_episodes)
    return records


_TOKEN_FIELDS = ("prompt_token_ids", "response_token_ids", "response_logprobs")


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=str))


class _Progress:
    """rich progress bar with a running success count over scored episodes (silent when disabled)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.successes = 0
        self.done = 0
        self.scored = 0
        self.unscorable = 0
        self._p = None
        if enabled and total:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._p = Progress(TextColumn("[bold]eval"), BarColumn(), MofNCompleteColumn(),
                               TextColumn("{task.fields[sr]}"), TimeElapsedColumn())
            self._p.start()
            self._task = self._p.add_task("eval", total=total, sr="")

    def advance(self, status: str, success: Optional[bool]) -> None:
        self.done += 1
        self.scored += status == "done"
        self.unscorable += status == "unscorable"
        self.successes += status == "done" and bool(success)
        if self._p is not None:
            extra = f", unscorable {self.unscorable}" if self.unscorable else ""
            self._p.update(self._task, advance=1, sr=f"success {self.successes}/{self.scored}{extra}")

    def close(self) -> None:
        if self._p is not None:
            self._p.stop()
