"""GUIEnv: the reset/step/verify loop every platform shares (DESIGN.md, "GUIEnv").

Subclasses supply the device side through five hooks::

    _start_episode(task, seed) -> None    set the device up for ``task``
    _observe() -> dict                    observation matching ``observation_space``
    _execute(action) -> None              perform a typed action; raise ActionNotPossible
    _env_ended() -> bool                  the task itself ended the episode (e.g. MiniWoB page)
    _verify(task, last_action) -> (score, details)   score in [0, 1] and what was compared;
                                          score None = unscorable (info["unscorable"])

The base class owns everything else: task sampling, action parsing, the step budget, rewards
(0 on every step but the last, which carries the verifier's score), ``info`` keys, and the rule
that infrastructure faults raise :class:`EnvInfraError` while agent mistakes only cost a step.
"""
from __future__ import annotations

import time
from typing import Any, Mapping, Optional, Sequence

import gymnasium as gym

from guigym.core import actions as A
from guigym.core.dialect import MAX_ACTION_CHARS, format_action, parse_action
from guigym.core.errors import ActionNotPossible, ActionParseError, EnvInfraError, TaskSpecError
from guigym.core.paths import check_task_id
from guigym.core.task import Task
from guigym.envs.spaces import ActionText



class GUIEnv(gym.Env):
    """Base class of guigym's Gymnasium envs. See the module docstring for the hooks.

    Args:
        tasks: the suite this env samples from when ``reset`` gets no task.
        dialect: name of the action dialect ``step`` parses strings with.
        max_steps: overrides every task's own ``max_steps`` when given.
        info_timings: put wall-clock ``timings`` into ``info``. Off by default because
            Gymnasium's env checker requires ``info`` to be identical for the same seed and
            actions; the latest timings are always in ``env.unwrapped.timings``.
    """

    metadata = {"render_modes": ["rgb_array"]}
    platform: str = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> "GUIEnv":
        # before __init__ binds them: an unknown option is a ConfigError naming it and the closest
        # known one (gym.make would otherwise raise Python's bare "unexpected keyword argument")
        from guigym.envs.options import check_kwargs

        check_kwargs(cls, kwargs, cls.__name__)
        return super().__new__(cls)

    def __init__(self, tasks: Sequence[Task], dialect: str = "canonical", max_steps: Optional[int] = None,
                 render_mode: Optional[str] = None, info_timings: bool = False) -> None:
        from guigym.envs.options import check_dialect

        check_dialect(dialect)  # a ConfigError now, not a KeyError at the first step
        if not tasks:
            raise TaskSpecError("an env needs at least one task")
        self.tasks = list(tasks)
        self._tasks_by_id = {t.id: t for t in self.tasks}
        self.dialect = dialect
        self.max_steps_override = max_steps
        self._episode_max_steps: Optional[int] = None  # reset(options={"max_steps": n}), this episode only
        self.render_mode = render_mode
        self.info_timings = info_timings
        self.timings: dict[str, float] = {}
        self.action_space = ActionText(MAX_ACTION_CHARS, dialect=dialect, platform=self.platform)
        self.task: Optional[Task] = None
        self.episode_seed: Optional[int] = None
        self._steps = 0
        self._over = True
        self._broken = False
        self._last_obs: Optional[dict[str, Any]] = None
        #: tasks drawn ahead of time for the next unseeded, task-less resets, in order (lets a
        #: platform prepare those tasks' devices or pages in the background; presample_task)
        self._presampled: list[tuple[Task, int]] = []  # (task, episode seed) per reset, in order
        #: whether the last reset drew its task itself (no seed, task or spec given): only then
        #: are the draws ahead (presample_task) likely to be the next resets' tasks
        self.last_reset_drew_task = False

    # ---- hooks ----------------------------------------------------------------------------------
    def _start_episode(self, task: Task, seed: int) -> None:
        raise NotImplementedError

    def _observe(self) -> dict[str, Any]:
        raise NotImplementedError

    def _execute(self, action: A.Action) -> None:
        raise NotImplementedError

    def _env_ended(self) -> bool:
        return False

    def _verify(self, task: Task, last_action: Optional[A.Action]) -> tuple[Optional[float], dict[str, Any]]:
        raise NotImplementedError

    def _after_reset(self) -> None:
        """Called once ``reset`` has its observation: background work for the next episode."""

    def _reference_steps(self, task: Task) -> Optional[int]:
        """Length of the task's reference solution (RRR's numerator): its reference plan's length
        by default; envs whose benchmark publishes lengths elsewhere override this."""
        return len(task.reference) if task.reference else None

    def _episode_info(self) -> dict[str, Any]:
        """Extra per-step info a platform wants to report (e.g. a11y truncation)."""
        return {}

    # ---- Gymnasium API --------------------------------------------------------------------------
    def resolve_task(self, task: Task | str | None) -> Task:
        if isinstance(task, Task):
            return task
        if isinstance(task, str):
            if task not in self._tasks_by_id:
                raise TaskSpecError(f"unknown task {task!r}; this env has {len(self.tasks)} tasks")
            return self._tasks_by_id[task]
        return self.tasks[int(self.np_random.integers(len(self.tasks)))]

    def task_from_spec(self, task_id: Optional[str], spec: Mapping[str, Any]) -> Task:
        """A task built from a stored spec (``reset(options={"task": id, "task_spec": spec})``):
        the tasks a training curriculum generates (``guigym.train.algorithms.webrl``), which this
        env's suite does not list. ``spec`` (JSON) fields read:

        * ``root`` (required): id of the task of this env the new one derives from;
        * ``params``: the new parameters; ``{"seed": n}`` fixes the episode seed to n (seeded
          task families such as MiniWoB: the seed defines the instance);
        * ``has_verifier`` (else ``verifier_survives``, default false): whether the root's
          verifier still scores the new task. When false the episode is not verified: its last
          step has reward 0.0 and ``info["verifier"] = None`` (a reward model scores it);
        * ``instruction``: replaces the root's instruction when the verifier does not survive
          (a verifier that survives defines the task itself, e.g. a seeded page's utterance).

        The Task keeps the spec in ``extra["spec"]``; platforms adapt further in
        :meth:`_specialise`. TaskSpecError names the bad field."""
        if not isinstance(spec, Mapping) or not spec.get("root"):
            raise TaskSpecError(f"options['task_spec'] needs a 'root' task id, got {spec!r}")
        root = self.resolve_task(str(spec["root"]))
        tid = check_task_id(str(task_id or f"{root.id}.spec"), "options['task']")
        params = spec.get("params") or {}
        if not isinstance(params, Mapping):
            raise TaskSpecError(f"options['task_spec'].params must be a mapping, got {params!r}")
        verified = bool(spec.get("has_verifier", spec.get("verifier_survives", False)))
        extra: dict[str, Any] = {**root.extra, "spec": dict(spec), "has_verifier": verified}
        if "seed" in params:
            seed = params["seed"]
            if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
                raise TaskSpecError(f"options['task_spec'].params.seed must be an int >= 0, got {seed!r}")
            extra["fixed_seed"] = seed
        instruction = root.instruction if verified else str(spec.get("instruction") or root.instruction)
        task = root.model_copy(update={"id": tid, "instruction": instruction, "extra": extra})
        return self._specialise(task, spec)

    def _specialise(self, task: Task, spec: Mapping[str, Any]) -> Task:
        """Platform hook of :meth:`task_from_spec` (e.g. rewrite a native config)."""
        return task

    def presample_next_task(self) -> Task:
        """Draw the task the next ``reset()`` without seed or task will use (same RNG stream)."""
        return self.presample_task(1)

    def presample_task(self, n: int) -> Task:
        """The task of the ``n``-th next ``reset()`` (1: the next one) if none of them is given a
        seed or task: drawn ahead, in order, from the same RNG stream, each with the episode seed
        its reset would draw after it, so the resets' tasks and seeds do not depend on how far
        ahead anyone looked (a reset that is given a seed or task forgets the draws)."""
        if n < 1:
            raise ValueError(f"n counts resets from 1, got {n}")
        while len(self._presampled) < n:
            task = self.resolve_task(None)
            self._presampled.append((task, int(self.np_random.integers(2**31 - 1))))
        return self._presampled[n - 1][0]

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode. ``options={"task": Task | task_id}`` picks the task, else one is sampled;
        ``options={"task": new_id, "task_spec": {...}}`` builds it (:meth:`task_from_spec`).

        The episode seed is ``seed`` when given (so ``reset(seed=s)`` replays the same episode),
        otherwise a draw from the env's own RNG.
        """
        super().reset(seed=seed)
        options = options or {}
        episode_max = options.get("max_steps")
        if episode_max is not None and (isinstance(episode_max, bool) or not isinstance(episode_max, int)
                                        or episode_max < 1):
            raise TaskSpecError(f"options['max_steps'] must be a positive int, got {episode_max!r}")
        self._episode_max_steps = episode_max
        t0 = time.perf_counter()
        self.timings = {}
        drawn_seed: Optional[int] = None
        self.last_reset_drew_task = options.get("task") is None and seed is None and options.get("task_spec") is None
        if self.last_reset_drew_task and self._presampled:
            task, drawn_seed = self._presampled.pop(0)
        else:
            self._presampled = []  # the draws ahead were for resets without seed or task
            if options.get("task_spec") is not None:
                task = self.task_from_spec(options.get("task"), options["task_spec"])
            else:
                task = self.resolve_task(options.get("task"))
        if seed is not None:
            episode_seed = int(seed)
        else:
            episode_seed = drawn_seed if drawn_seed is not None else int(self.np_random.integers(2**31 - 1))
        if task.extra.get("fixed_seed") is not None:  # a spec'd seeded instance: its seed is the task
            episode_seed = int(task.extra["fixed_seed"])
        self.task, self.episode_seed = task, episode_seed
        self._steps, self._over = 0, True  # stays over if setup raises
        self._start_episode(task, episode_seed)
        obs = self._observe()
        self._broken, self._over = False, False
        self._last_obs = obs
        shot = obs.get("screenshot")
        if isinstance(self.action_space, ActionText) and getattr(shot, "ndim", 0) == 3:
            self.action_space.screen = (int(shot.shape[1]), int(shot.shape[0]))  # sample() points on screen
        info = {
            "task_id": task.id, "domain": task.domain,
            "reference_steps": self._reference_steps(task), "instruction": obs.get("instruction", task.instruction), "seed": episode_seed,
            "max_steps": self.max_steps, **self._episode_info(),
        }
        self.timings["reset_s"] = time.perf_counter() - t0
        if self.info_timings:
            info["timings"] = dict(self.timings)
        self._after_reset()
        return obs, info

    @property
    def max_steps(self) -> int:
        if self._episode_max_steps is not None:
            return self._episode_max_steps
        if self.max_steps_override is not None:
            return self.max_steps_override
        return self.task.max_steps if self.task is not None else 1

    def step(self, action: str | A.Action | ActionParseError) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Spend one step on ``action``: a string in ``self.dialect``, a typed Action, or an
        :class:`ActionParseError` from a wrapper that parsed the agent's text in another dialect
        (reported in ``info["action_error"]`` exactly like an unparseable string)."""
        if self.task is None or self._over:
            raise RuntimeError("the episode is over (or never started): call reset() first")
        if self._broken:
            raise EnvInfraError("the device failed earlier in this episode; call reset() to rebuild it")
        t0 = time.perf_counter()
        self.timings = {}
        self._steps += 1
        info: dict[str, Any] = {"task_id": self.task.id, "step": self._steps, "action": None, "action_error": None}
        typed: Optional[A.Action] = None
        try:
            if isinstance(action, ActionParseError):
                # a wrapper parsed the agent's text itself (guigym.wrappers.ActionDialect) and hands
                # its parse error over, so the failure is reported like any unparseable string
                raise action
            typed = parse_action(action, self.dialect)
            info["action"] = format_action(typed)
        except ActionParseError as exc:
            info["action_error"] = f"could not parse action: {exc}"
        try:
            if typed is not None and not typed.ends_episode:
                try:
                    self._execute(typed)
                except ActionNotPossible as exc:
                    info["action_error"] = f"{typed.name} not possible: {exc}"
            t1 = time.perf_counter()
            obs = self._observe()
        except EnvInfraError:
            self._broken = True
            raise
        self._last_obs = obs
        terminated = (typed is not None and typed.ends_episode) or self._env_ended()
        truncated = not terminated and self._steps >= self.max_steps
        reward = 0.0
        if terminated or truncated:
            self._over = True
            unverified = self.task.extra.get("has_verifier") is False  # a spec'd task its root's verifier cannot score
            try:
                score, details = (0.0, {}) if unverified else self._verify(self.task, typed)
            except EnvInfraError:
                self._broken = True
                raise
            if unverified:
                info.update(success=False, score=0.0, verifier=None)
            elif score is None:
                # the verifier could not score this episode (e.g. a fuzzy_match task with no LLM
                # judge configured): neither a success nor a failure; the reward is 0.0 only
                # because Gymnasium needs a number, and info says unscorable
                info.update(success=None, score=None, unscorable=True, verifier=details)
            else:
                if not 0.0 <= score <= 1.0:
                    raise ValueError(f"verifier of task {self.task.id} returned {score}, outside [0, 1]")
                reward = float(score)
                info.update(success=bool(details.get("success", score >= 1.0)), score=reward, verifier=details)
        info.update(self._episode_info())
        self.timings.update(step_s=time.perf_counter() - t0, action_s=t1 - t0)
        if self.info_timings:
            info["timings"] = dict(self.timings)
        return obs, reward, terminated, truncated, info

    def render(self) -> Any:
        if self._last_obs is None:
            return None
        return self._last_obs.get("screenshot")
