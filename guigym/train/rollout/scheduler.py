"""RolloutScheduler: G rollouts per task over an EnvPool, actions from a PolicyService.

``collect(task_ids, seeds)`` makes one group per entry: G rollouts of that task with that episode
seed (the same task instance, so the group's rewards share a GRPO baseline), each sampled with its
own seed. It returns ``list[Group]`` of :class:`~guigym.train.data.types.Trajectory`, token-in/
token-out (exact prompt/response ids and rollout log-probs per step).

Modes:

* ``rollout`` (DART, Li et al. 2025, sec. 3.4 "rollout-wise sampling"): the trajectory is the
  scheduling unit. Each env asks the policy service for its next action as soon as its own
  observation is ready, and an env whose episode ended immediately starts the next pending
  rollout. No env waits for another.
* ``sync``: the lockstep baseline. The pool takes ``num_envs`` rollouts as a batch; all envs of
  the batch reset together, the policy gets all their prompts together, all envs step together,
  and the next batch starts only when every episode of the batch has ended.

``stream(pull, deliver, stop)`` is the rollout-wise loop without any barrier between jobs (DART's
Env Cluster, sec. 3.4): whenever envs are free and no rollout is pending, it pulls new jobs
(``pull``; a job is a group or a slice of one), and each job's rollouts are handed over
(``deliver``) the moment its last one ends, while the other envs keep running. ``collect`` is the same loop over a fixed job list.

Lost rollouts (an :class:`~guigym.core.errors.EnvInfraError` in the worker, a worker that died or
hung: ``PoolResult.lost``) are discarded and run again from reset (``stats.retries``); they are
never scored. After ``max_lost_retries`` losses of the same rollout ``collect`` raises
``EnvInfraError``. A policy-service request that fails (the server refused, timed out, answered
HTTP 500, ...) is the policy's infrastructure, not the rollout's outcome: it is sent again after
``policy_backoff_s`` (doubling) up to ``policy_retries`` times (``stats.policy_retries``), then the
rollout is lost like one of a dead env worker -- never a reward-0 trajectory.

Unscorable rollouts (the env ended the episode with ``info["unscorable"]``: its verifier could
not score it, e.g. WebArena's ``fuzzy_match`` without an LLM judge; the env's reward 0.0 is only
Gymnasium's placeholder) are left out of their group and counted in ``stats.unscorable``: they
are neither successes nor failures, so they must not train as reward 0. A group left with no
member is not returned.

Per-task step budgets: ``max_steps`` (int or {task_id: int}) is passed to the env as
``reset(options={"max_steps": n})`` so that the env truncates and its verifier scores the
episode. An env that does not honour that option (``info["max_steps"]`` differs after reset) is
cut by the scheduler after n steps; such a trajectory has ``info["cut_by_scheduler"] = True``
and the reward of its last step (0 unless the env ended the episode itself).

Stats (:class:`RolloutStats`), over the wall time of one ``collect``:

* ``u_env`` -- environment utilisation as DART uses it: the fraction of env-time during which an
  env is occupied by a rollout (from its reset to the end of its episode, including the time the
  rollout waits for its own next action), as opposed to idle envs that wait for other rollouts
  or have no work. Sum over envs of occupied time / (num_envs x wall).
* ``u_exec`` -- the stricter fraction of env-time spent inside reset/step calls.
* ``env_idle_pending_s`` -- env-seconds spent idle although a rollout was waiting to start (0 in
  rollout-wise mode by construction; the lockstep batch barrier in ``sync``). Idle time after the
  last rollout started (the tail) is not in it.
* ``actions_per_min`` -- env steps per minute; ``policy_utilisation`` -- the service's busy
  fraction (``stats()['busy_s']`` delta / wall).
"""
from __future__ import annotations

import json
import queue
import time
import uuid
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from guigym.core.errors import EnvInfraError
from guigym.train.data.types import Group, Step, Trajectory, new_traj_id
from guigym.train.rollout.policy_service import GenRequest, GenResult
from guigym.train.rollout.prompts import EpisodePrompts, Prompt, PromptBuilder

#: env info keys copied into Step.info (when JSON-serialisable)
STEP_INFO_KEYS = ("step", "action_error", "success", "score", "verifier", "a11y_truncated")
#: observation keys whose text is the final state (first present, non-empty one wins)
FINAL_STATE_KEYS = ("a11y", "html", "terminal")


def final_state_text(obs: Any, max_chars: int) -> str:
    """The text of the last observation (a11y tree, else HTML, else terminal), its first
    ``max_chars`` characters: what an outcome judge reads as the page the agent stopped on."""
    if not isinstance(obs, dict) or max_chars <= 0:
        return ""
    for k in FINAL_STATE_KEYS:
        v = obs.get(k)
        if isinstance(v, str) and v:
            return v[:max_chars]
    return ""


@dataclass
class RolloutStats:
    mode: str = ""
    num_envs: int = 0
    wall_s: float = 0.0
    env_occupied_s: float = 0.0
    env_exec_s: float = 0.0
    env_idle_pending_s: float = 0.0
    u_env: float = 0.0
    u_exec: float = 0.0
    actions: int = 0
    resets: int = 0
    actions_per_min: float = 0.0
    trajectories: int = 0
    lost: int = 0
    retries: int = 0
    policy_retries: int = 0  # policy requests sent again after a failure
    unscorable: int = 0
    policy_requests: int = 0
    policy_busy_s: float = 0.0
    policy_utilisation: float = 0.0
    mean_length: float = 0.0
    success_rate: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Job:
    group: int
    member: int
    task_id: str
    seed: int
    max_steps: Optional[int] = None
    attempt: int = 0
    guidance: Any = None  # Guidance of this rollout (trainer conditioners), or None


@dataclass
class StreamJob:
    """One job for :meth:`RolloutScheduler.stream`: rollouts of ``task_id`` with episode seed
    ``seed``, as members ``members`` of a group of ``n`` (default: all ``n``; a data manager that
    deals single rollouts hands out slices). ``key`` is the caller's name for the job and comes
    back with its finished (part of the) group; ``max_steps`` None = the scheduler's budget."""

    key: Any
    task_id: str
    seed: int
    n: int
    max_steps: Optional[int] = None
    members: Optional[Sequence[int]] = None

    def member_ids(self) -> list[int]:
        ids = list(range(int(self.n))) if self.members is None else [int(m) for m in self.members]
        if not ids or any(m < 0 or m >= self.n for m in ids) or len(set(ids)) != len(ids):
            raise ValueError(f"stream job {self.key!r}: members must be distinct ids in [0, n={self.n}), "
                             f"at least one; got {self.members!r}")
        return ids


@dataclass
class _Run:
    """One rollout in progress on one env."""

    job: _Job
    traj_id: str
    started: float
    started_wall: float = 0.0  # time.time() when its reset was sent (event rows use wall time)
    episode: Optional[EpisodePrompts] = None
    steps: list[Step] = field(default_factory=list)
    prompt: Optional[Prompt] = None
    result: Optional[GenResult] = None
    max_steps: Optional[int] = None
    env_honours_max_steps: bool = True
    refs: dict[int, str] = field(default_factory=dict)
    gen_failures: int = 0  # failed attempts of the policy request in flight


def _json_safe(info: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    out = {}
    for k in keys:
        if k in info:
            try:
                json.dumps(info[k], allow_nan=False)
                out[k] = info[k]
            except (TypeError, ValueError):
                out[k] = repr(info[k])[:500]
    return out


class RolloutScheduler:
    """Collect groups of trajectories from ``pool`` with actions from ``service``.

    Args:
        pool: a :class:`guigym.envs.pool.EnvPool` (owned by the caller).
        service: a :class:`~guigym.train.rollout.policy_service.PolicyService`.
        prompt_builder: a :class:`~guigym.train.rollout.prompts.PromptBuilder`.
        mode: ``"rollout"`` (rollout-wise) or ``"sync"`` (lockstep baseline).
        group_size: G, rollouts per group.
        max_steps: step budget, one int for all tasks or {task_id: int} (None = the env's own).
        max_new_tokens, temperature: sampling settings of every request.
        seed: seeds the default episode seeds and every request's sampling seed.
        max_lost_retries: how often one rollout may be lost before ``collect`` gives up.
        policy_retries, policy_backoff_s: a failed policy request is sent again up to
            ``policy_retries`` times, ``policy_backoff_s`` (doubling, at most 30 s) apart; then
            its rollout is lost (module docstring).
        run_id: copied into every trajectory.
        put_image: stores a screenshot and returns its ref (e.g. ``DataStore.put_blob``); default:
            kept in memory in :attr:`images` under ``mem:<n>`` refs.
        task_specs: {task_id: spec} of tasks the env builds from a stored spec (curriculum-
            generated ones): their resets pass ``options["task_spec"]`` (``GUIEnv.task_from_spec``).
        final_state_chars: each trajectory keeps the text of its last observation, cut to this
            many characters, in ``info["final_state"]`` (0 = not kept); outcome judges read it.
    """

    def __init__(self, pool: Any, service: Any, prompt_builder: PromptBuilder, mode: str = "rollout",
                 group_size: int = 8, max_steps: Union[int, dict[str, int], None] = None, max_new_tokens: int = 32,
                 temperature: float = 1.0, seed: int = 0, max_lost_retries: int = 3, run_id: str = "",
                 put_image: Optional[Callable[[np.ndarray], str]] = None,
                 task_specs: Optional[dict[str, dict[str, Any]]] = None, final_state_chars: int = 8000,
                 policy_retries: int = 2, policy_backoff_s: float = 1.0) -> None:
        if mode not in ("rollout", "sync"):
            raise ValueError(f"mode must be 'rollout' or 'sync', got {mode!r}")
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        if isinstance(max_steps, int) and max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.pool = pool
        self.service = service
        self.builder = prompt_builder
        self.mode = mode
        self.group_size = int(group_size)
        self.max_steps = max_steps
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.seed = int(seed)
        self.max_lost_retries = int(max_lost_retries)
        self.policy_retries = int(policy_retries)
        self.policy_backoff_s = float(policy_backoff_s)
        self.run_id = run_id
        self.put_image = put_image
        self.task_specs = dict(task_specs or {})
        self.final_state_chars = int(final_state_chars)
        self.images: dict[str, np.ndarray] = {}
        self.rng = np.random.default_rng(seed)
        self.last_stats = RolloutStats()
        self._collections = 0
        self.on_finished: Optional[Callable[[], None]] = None  # after each rollout ends (progress bars)

    # ---- public ------------------------------------------------------------------------------------
    def collect(self, task_ids: Sequence[str], seeds: Optional[Sequence[int]] = None,
                n_groups: Optional[int] = None, *, group_sizes: Optional[Sequence[int]] = None,
                max_steps: Optional[Sequence[Optional[int]]] = None,
                guidance: Optional[Callable[[str, int, int], Any]] = None) -> list[Group]:
        """One group of G trajectories per entry of ``task_ids`` (cycled to ``n_groups`` entries
        when given), with episode seed ``seeds[k]`` (default: drawn from the scheduler's RNG).
        Unscorable rollouts are not in their group, and a group with none scorable is dropped
        (module docstring).

        Per entry (trainer plug-ins, e.g. DART's dynamic rollout count and length):
        ``group_sizes[k]`` rollouts instead of G; step budget ``max_steps[k]`` (None = the
        scheduler's). ``guidance(task_id, seed, member)`` may return a
        :class:`~guigym.train.algorithms.context.Guidance` (``text``, ``level``, ``to_dict()``)
        whose text joins that rollout's prompt; the trajectory records it
        (``guidance_level``, ``info["guidance"]``)."""
        tasks = list(task_ids)
        if not tasks:
            raise ValueError("collect needs at least one task id")
        if n_groups is not None:
            tasks = [tasks[k % len(tasks)] for k in range(n_groups)]
        if seeds is None:
            seeds = [int(s) for s in self.rng.integers(0, 2**31 - 1, size=len(tasks))]
        if len(seeds) != len(tasks):
            raise ValueError(f"got {len(seeds)} seeds for {len(tasks)} groups")
        sizes = [self.group_size] * len(tasks) if group_sizes is None else [int(x) for x in group_sizes]
        budgets = [None] * len(tasks) if max_steps is None else list(max_steps)
        if len(sizes) != len(tasks) or len(budgets) != len(tasks) or min(sizes) < 1:
            raise ValueError(f"group_sizes/max_steps need one entry (sizes >= 1) per group ({len(tasks)})")
        self._collections += 1
        groups = [Group(group_id=uuid.uuid4().hex, task_id=t) for t in tasks]
        # member-major order: consecutive jobs belong to different groups, so a lockstep batch
        # mixes tasks (as a batch of a real task mix does) and every group fills up at a similar pace
        jobs = [_Job(g, m, t, int(s), budgets[g] if budgets[g] is not None else self._budget(t))
                for m in range(max(sizes)) for g, (t, s) in enumerate(zip(tasks, seeds)) if m < sizes[g]]
        if guidance is not None:
            for job in jobs:
                job.guidance = guidance(job.task_id, job.seed, job.member)
        done: dict[int, list[Trajectory]] = {g: [] for g in range(len(groups))}
        try:
            self._loop(jobs, groups, done)
        except BaseException:
            # leave the pool usable: collect (and drop) what the envs are still doing
            while self.pool.busy:
                self.pool.wait(timeout=self.pool.call_timeout_s)
            raise
        for g, group in enumerate(groups):
            group.trajectories = sorted(done[g], key=lambda t: t.info["member"])
        return [g for g in groups if g.trajectories]

    def stream(self, pull: Callable[[int], Sequence[StreamJob]], deliver: Callable[[Any, Group], None],
               stop: Callable[[], bool], idle_wait_s: float = 0.02) -> RolloutStats:
        """Rollout-wise sampling with no barrier between jobs (DART sec. 3.4, Figure 3 (c)); returns
        the stats of the whole call (also in :attr:`last_stats`). ``rollout`` mode only.

        ``pull(k)`` is called when ``k`` envs are free and no rollout is pending; it returns
        :class:`StreamJob` s, ideally ``k`` rollouts in all (none under back-pressure: asked again
        after ``idle_wait_s``). ``deliver(key, group)`` gets each job's :class:`Group` the moment
        its last rollout ended (its members' trajectories sorted by member; empty when every
        rollout was unscorable). Once ``stop()`` is true nothing more is pulled, and the call returns when every pulled job is delivered.
        On an error the pool is drained and the error propagates; jobs pulled and not delivered
        are the caller's to abandon."""
        if self.mode != "rollout":
            raise ValueError("stream needs mode='rollout' (the lockstep baseline has its own barrier)")
        self._collections += 1
        groups: list[Group] = []
        done: dict[int, list[Trajectory]] = {}
        keys: list[Any] = []

        def refill(free: int) -> list[_Job]:
            new: list[_Job] = []
            for sj in pull(free):
                members = sj.member_ids()
                g = len(groups)
                groups.append(Group(group_id=uuid.uuid4().hex, task_id=sj.task_id))
                keys.append(sj.key)
                done[g] = []
                budget = sj.max_steps if sj.max_steps is not None else self._budget(sj.task_id)
                new += [_Job(g, m, sj.task_id, int(sj.seed), budget) for m in members]
            return new

        def complete(g: int) -> None:
            group = groups[g]
            group.trajectories = sorted(done.pop(g), key=lambda t: t.info["member"])
            deliver(keys[g], group)

        try:
            self._loop([], groups, done, refill=refill, stop=stop, complete=complete, idle_wait_s=idle_wait_s)
        except BaseException:
            while self.pool.busy:
                self.pool.wait(timeout=self.pool.call_timeout_s)
            raise
        return self.last_stats

    # ---- helpers -----------------------------------------------------------------------------------
    def _budget(self, task_id: str) -> Optional[int]:
        if isinstance(self.max_steps, dict):
            return self.max_steps.get(task_id)
        return self.max_steps

    def _sampling_seed(self, job: _Job, step: int) -> int:
        return int(np.random.SeedSequence([self.seed, self._collections, job.group, job.member, job.attempt,
                                           step]).generate_state(1)[0])

    def _ref(self, run: _Run, image: np.ndarray) -> str:
        key = id(image)
        if key not in run.refs:
            if self.put_image is not None:
                run.refs[key] = self.put_image(image)
            else:
                ref = f"mem:{len(self.images)}"
                self.images[ref] = image
                run.refs[key] = ref
        return run.refs[key]

    # ---- the event loop ----------------------------------------------------------------------------
    def _loop(self, jobs: list[_Job], groups: list[Group], done: dict[int, list[Trajectory]], *,
              refill: Optional[Callable[[int], list[_Job]]] = None, stop: Optional[Callable[[], bool]] = None,
              complete: Optional[Callable[[int], None]] = None, idle_wait_s: float = 0.02) -> None:
        """Run ``jobs`` (and, with ``refill``, whatever it returns while ``stop()`` is false) to the
        end. ``complete(g)`` is called once group ``g``'s last rollout ended."""
        pool, n = self.pool, self.pool.num_envs
        sync = self.mode == "sync"
        pending: deque[_Job] = deque(jobs)
        remaining: dict[int, int] = {}  # group -> rollouts not yet ended
        for job in jobs:
            remaining[job.group] = remaining.get(job.group, 0) + 1
        next_pull = 0.0  # stream: no pull before this (monotonic) time after an empty one
        slots: list[Optional[_Run]] = [None] * n
        sent_at: dict[int, float] = {}
        idle_since: dict[int, float] = {}
        futq: "queue.SimpleQueue[tuple[int, _Run, Any]]" = queue.SimpleQueue()
        inflight = 0
        waiting_prompt: list[int] = []  # sync: envs whose observation is ready
        ready_action: list[int] = []  # sync: envs whose action is ready
        resend: list[tuple[float, int, _Run]] = []  # (monotonic due time, env, run): failed policy requests
        stats = RolloutStats(mode=self.mode, num_envs=n)
        svc0 = self.service.stats()
        t0 = time.monotonic()

        def send_reset(i: int, run: _Run) -> None:
            options: dict[str, Any] = {"task": run.job.task_id}
            if run.job.task_id in self.task_specs:
                options["task_spec"] = self.task_specs[run.job.task_id]
            if run.max_steps is not None:
                options["max_steps"] = run.max_steps
            sent_at[i] = time.monotonic()
            pool.reset_async(i, seed=run.job.seed, options=options)

        def try_refill() -> None:
            nonlocal next_pull
            if refill is None or pending or (stop is not None and stop()) or time.monotonic() < next_pull:
                return
            free = sum(1 for s in slots if s is None)
            if free == 0:
                return
            new = refill(free)
            for job in new:
                remaining[job.group] = remaining.get(job.group, 0) + 1
            pending.extend(new)
            if not new:
                next_pull = time.monotonic() + idle_wait_s  # back-pressure: ask again shortly

        def ended(g: int) -> None:
            remaining[g] -= 1
            if remaining[g] == 0:
                del remaining[g]
                if complete is not None:
                    complete(g)

        def start(i: int) -> None:
            if not pending:
                try_refill()
            if not pending:
                return
            job = pending.popleft()
            if i in idle_since:  # it sat idle while this job was pending
                stats.env_idle_pending_s += time.monotonic() - idle_since.pop(i)
            run = _Run(job=job, traj_id=new_traj_id(), started=time.monotonic(), started_wall=time.time(),
                       max_steps=job.max_steps)
            slots[i] = run
            send_reset(i, run)

        def release(i: int) -> None:
            run = slots[i]
            stats.env_occupied_s += time.monotonic() - run.started
            slots[i] = None
            idle_since[i] = time.monotonic()

        def ask(i: int, obs: dict[str, Any]) -> None:
            run = slots[i]
            run.prompt = run.episode.prompt(obs)
            if sync:
                waiting_prompt.append(i)
                return
            submit(i)

        def request(run: _Run) -> GenRequest:
            p = run.prompt
            return GenRequest(prompt_ids=p.prompt_ids, images=p.images, max_new_tokens=self.max_new_tokens,
                              temperature=self.temperature, seed=self._sampling_seed(run.job, len(run.steps)),
                              candidates=p.candidates)

        def submit(i: int) -> None:
            nonlocal inflight
            run = slots[i]
            inflight += 1
            self.service.submit(request(run)).add_done_callback(lambda f, i=i, run=run: futq.put((i, run, f)))

        def submit_all(idx: list[int]) -> None:
            nonlocal inflight
            if not hasattr(self.service, "submit_many"):
                for i in idx:
                    submit(i)
                return
            runs = [slots[i] for i in idx]
            inflight += len(idx)
            futs = self.service.submit_many([request(r) for r in runs])
            for i, run, fut in zip(idx, runs, futs):
                fut.add_done_callback(lambda f, i=i, run=run: futq.put((i, run, f)))

        def act(i: int) -> None:
            run = slots[i]
            res = run.result
            p = run.prompt
            run.episode.add_response(res.response_ids, res.text)
            info: dict[str, Any] = {"finish_reason": res.finish_reason}
            if self.builder.mode == "multiturn":
                info["response_spans"] = [list(s) for s in p.response_spans]
            if p.unguided_ids is not None:  # BEPA eq. 3 trains the same step under the plain instruction
                info["unguided_prompt_ids"] = list(p.unguided_ids)
            run.steps.append(Step(prompt_ids=list(p.prompt_ids), response_ids=list(res.response_ids),
                                  rollout_logprobs=list(res.logprobs), policy_version=int(res.policy_version),
                                  image_refs=[self._ref(run, im) for im in p.images], action_text=res.text,
                                  candidates=None if p.candidates is None else list(p.candidates),
                                  entropy=res.entropy, info=info))
            sent_at[i] = time.monotonic()
            pool.step_async(i, res.text)

        def finish(i: int, reward: float, success: bool, terminated: bool, truncated: bool, cut: bool,
                   obs: Any = None) -> None:
            run = slots[i]
            job = run.job
            traj = Trajectory(traj_id=run.traj_id, run_id=self.run_id, task_id=job.task_id, seed=job.seed,
                              group_id=groups[job.group].group_id, steps=run.steps, reward=float(reward),
                              success=bool(success), source="on_policy",
                              guidance_level=int(job.guidance.level) if job.guidance is not None else 0,
                              info={"member": job.member, "lost_attempts": job.attempt, "terminated": terminated,
                                    "truncated": truncated, "cut_by_scheduler": cut, "mode": self.mode,
                                    # where and when it ran: every env call of this episode (reset sent ..
                                    # last result seen) lies inside env_span (wall seconds) on env env_index
                                    "env_index": i, "env_span": [run.started_wall, time.time()]})
            instruction = getattr(run.episode, "instruction", "")  # a builder's episode object may lack it
            if instruction:
                # the env's own instruction (before any guidance): memory extractors key on it
                traj.info["instruction"] = str(instruction)[:4096]
            if job.guidance is not None:
                traj.info["guidance"] = job.guidance.to_dict()
            state = final_state_text(obs, self.final_state_chars)
            if state:
                traj.info["final_state"] = state
            done[job.group].append(traj)
            stats.trajectories += 1
            release(i)
            ended(job.group)
            if self.on_finished is not None:
                self.on_finished()
            if not sync:
                start(i)

        def unscorable(i: int) -> None:
            stats.unscorable += 1  # neither success nor failure: not a reward-0 member of its group
            group = slots[i].job.group
            release(i)
            ended(group)
            if self.on_finished is not None:
                self.on_finished()
            if not sync:
                start(i)

        def lost(i: int, error: str) -> None:
            run = slots[i]
            job = run.job
            stats.lost += 1
            release(i)
            job.attempt += 1
            if job.attempt > self.max_lost_retries:
                raise EnvInfraError(f"rollout of task {job.task_id!r} seed {job.seed} was lost {job.attempt} times; "
                                    f"last error: {error}")
            stats.retries += 1
            pending.appendleft(job)  # sync: joins the next batch
            if not sync:
                start(i)

        def on_env(res: Any) -> None:
            i = res.index
            if i in sent_at:
                stats.env_exec_s += time.monotonic() - sent_at.pop(i)
            run = slots[i]
            if run is None:
                return
            if res.lost:
                lost(i, str(res.error))
                return
            if res.error:
                raise RuntimeError(f"env {i} failed on a {res.kind} of task {run.job.task_id!r} "
                                   f"(not an infrastructure fault, so not retried): {res.error}")
            if res.kind == "reset":
                stats.resets += 1
                obs, info = res.value
                text = str(info.get("instruction") or obs.get("instruction") or "")
                g = run.job.guidance
                run.episode = (self.builder.episode(text) if g is None
                               else self.builder.episode(text, guidance=str(g.text)))
                if run.max_steps is not None and info.get("max_steps") != run.max_steps:
                    run.env_honours_max_steps = False
                ask(i, obs)
                return
            stats.actions += 1
            obs, reward, terminated, truncated, info = res.value
            step = run.steps[-1]
            step.reward = float(reward)
            step.action = info.get("action")
            step.action_error = info.get("action_error")
            step.info.update(_json_safe(info, STEP_INFO_KEYS))
            if (terminated or truncated) and info.get("unscorable"):
                unscorable(i)
            elif terminated or truncated:
                finish(i, reward, bool(info.get("success", False)), bool(terminated), bool(truncated), False, obs)
            elif not run.env_honours_max_steps and len(run.steps) >= run.max_steps:
                finish(i, reward, False, False, True, True, obs)
            else:
                ask(i, obs)

        def on_gen(i: int, run: _Run, fut: Any) -> None:
            nonlocal inflight
            inflight -= 1
            if slots[i] is not run:
                return
            exc = fut.exception()
            if exc is not None:  # the policy's infrastructure failed: send again, then lose the rollout
                if run.gen_failures < self.policy_retries:
                    delay = min(self.policy_backoff_s * 2 ** run.gen_failures, 30.0)
                    run.gen_failures += 1
                    stats.policy_retries += 1
                    resend.append((time.monotonic() + delay, i, run))
                else:
                    lost(i, f"policy service failed {run.gen_failures + 1} time(s): {type(exc).__name__}: {exc}")
                return
            run.gen_failures = 0
            run.result = fut.result()
            if sync:
                ready_action.append(i)
            else:
                act(i)

        if sync:
            def new_batch() -> None:
                for i in range(n):
                    start(i)
        else:
            def new_batch() -> None:
                for i in range(n):
                    if slots[i] is None:
                        start(i)

        def more() -> bool:  # stream: jobs may still come
            return refill is not None and not (stop is not None and stop())

        def resend_due() -> float:
            """Send the failed requests that are due; seconds until the next one (inf: none)."""
            now = time.monotonic()
            for entry in [e for e in resend if e[0] <= now]:
                resend.remove(entry)
                if slots[entry[1]] is entry[2]:
                    submit(entry[1])
            return min((e[0] for e in resend), default=float("inf")) - now

        new_batch()
        while any(s is not None for s in slots) or pending or more():
            if not any(s is not None for s in slots):
                new_batch()  # sync: every episode of the batch ended; stream: pull
                if refill is not None and not any(s is not None for s in slots):
                    time.sleep(idle_wait_s)  # stream under back-pressure: nothing to run yet
                continue
            # stream with free envs: come back soon enough to pull for them
            idle_t = idle_wait_s if refill is not None and None in slots else 1.0
            idle_t = max(0.0, min(idle_t, resend_due()))
            if pool.busy:
                for res in pool.wait(timeout=0.002 if inflight else idle_t):
                    on_env(res)
            elif inflight:
                try:
                    item = futq.get(timeout=idle_t)
                    on_gen(*item)
                except queue.Empty:
                    pass
            elif resend:
                time.sleep(idle_t)  # only failed requests waiting for their backoff
            while True:
                try:
                    item = futq.get_nowait()
                except queue.Empty:
                    break
                on_gen(*item)
            if sync:
                if waiting_prompt and not pool.busy and not inflight:
                    submit_all(waiting_prompt)  # the whole lockstep batch in one call
                    waiting_prompt.clear()
                if ready_action and not inflight and not waiting_prompt:
                    for i in ready_action:
                        act(i)
                    ready_action.clear()
            if refill is not None and not pending and None in slots:
                for i in range(n):
                    if slots[i] is None:
                        start(i)  # pulls when nothing is pending
            if not pool.busy and not inflight and not waiting_prompt and not ready_action and not resend and \
                    any(s is not None for s in slots):
                raise RuntimeError("scheduler stalled: envs hold rollouts but nothing is in flight (bug)")

        wall = time.monotonic() - t0
        svc1 = self.service.stats()
        stats.wall_s = wall
        stats.u_env = stats.env_occupied_s / (n * wall) if wall > 0 else 0.0
        stats.u_exec = stats.env_exec_s / (n * wall) if wall > 0 else 0.0
        stats.actions_per_min = 60.0 * stats.actions / wall if wall > 0 else 0.0
        stats.policy_requests = int(svc1.get("requests", 0) - svc0.get("requests", 0))
        stats.policy_busy_s = float(svc1.get("busy_s", 0.0) - svc0.get("busy_s", 0.0))
        workers = max(1, len(svc1.get("endpoints", [None])))  # HTTPEngine: busy_s sums over endpoints
        stats.policy_utilisation = stats.policy_busy_s / (wall * workers) if wall > 0 else 0.0
        trajs = [t for ts in done.values() for t in ts]
        stats.mean_length = float(np.mean([t.length for t in trajs])) if trajs else 0.0
        stats.success_rate = float(np.mean([t.success for t in trajs])) if trajs else 0.0
        self.last_stats = stats
