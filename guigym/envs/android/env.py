"""AndroidLab-v0 and AndroidWorld-v0: Gymnasium envs over one adb device each.

Observation (``Dict``):

============== ========================= =====================================================
key            space                     content
============== ========================= =====================================================
screenshot     Box(H, W, 3) uint8        ``screencap -p`` decoded (the device's pixels)
a11y           UnicodeText               MobileRL simplified XML (appendix C) of the dump;
                                         ``xml_format="mobilerl-v4"``: 0-999 bounds + header
xml            UnicodeText               the raw ``uiautomator dump`` text (``observe_xml``)
instruction    UnicodeText               the goal (AndroidWorld: the instance's, from its seed)
============== ========================= =====================================================

Actions: any dialect (``androidlab``, ``androidworld``, ``uitars-mobile``, ``canonical``) parsed into
typed actions and executed by :class:`~guigym.envs.android.actuate.Actuator`; ``coords`` says
whether points are pixels (``"absolute"``) or MobileRL's 0-999 units (``"relative999"``).
``finish(message=...)`` / ``Done(answer)`` ends the episode with that answer.

Reward: 0 on every step but the last, which carries the verifier's score:

* AndroidLab-v0: :func:`~guigym.envs.android.androidlab_checks.judge_task` over every screen of the
  episode (UI trees in step order), the ``finish`` message and the outputs of the task's
  ``adb_query`` (run after the episode, :mod:`.adb_query`). Answer tasks need ``judge`` (``"exact"``,
  ``"fuzzy"`` or an :class:`AnswerJudge`); without one they are unscorable (``info["unscorable"]``),
  never a silent 0. ``info["verifier"]`` has AndroidLab's sub-goals and ``subgoal_score``.
* AndroidWorld-v0: the task instance's ``is_successful(device, answer)`` in [0, 1].

Device: ``device=`` an :class:`~guigym.envs.android.device.AndroidDevice` object, or a provider
(:mod:`.providers`: ``provider="adb"`` with ``serial``, ``"emulator"`` with ``avd``, ``"docker"``)
acquired at construction and reset before every episode. An adb failure anywhere raises
:class:`EnvInfraError` (never scored). ``gym.make_vec(id, num_envs=N, serials=[...])`` gives each
sub-env its own device (:func:`make_androidlab_vec`).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal, Mapping, Optional, Sequence, Union

import numpy as np
from gymnasium import spaces

from guigym.core import actions as A
from guigym.core.dialect import get_dialect
from guigym.core.errors import ActionNotPossible, ConfigError, EnvInfraError, TaskSpecError
from guigym.core.task import Task
from guigym.envs.android.actuate import Actuator, Coords
from guigym.envs.android.adb_query import parse_adb_query
from guigym.envs.android.device import AndroidDevice
from guigym.envs.android.observation import simplify
from guigym.envs.base import GUIEnv
from guigym.envs.spaces import UnicodeText

XML_MAX_CHARS = 400_000
A11Y_MAX_CHARS = 100_000
XmlFormat = Literal["mobilerl", "mobilerl-v4"]
#: AndroidLab's task YAMLs (THUDM/Android-Lab, MIT; see the README there), shipped as package data
ANDROIDLAB_SUITE = Path(__file__).parent / "suite" / "androidlab"


class AndroidEnv(GUIEnv):
    """Shared device plumbing of the Android envs; subclasses start and verify their tasks.

    Args:
        tasks: the suite.
        device: a ready AndroidDevice (then no provider is used).
        provider: provider name (``adb``, ``emulator``, ``docker``) or a built provider object.
        serial: the ``adb`` provider's serial or ``host:port``.
        provider_kwargs: further provider arguments (``snapshot``, ``avd``, ``image``, ``adb``...).
        dialect: action dialect ``step`` parses strings with.
        coords: ``"absolute"`` pixels or ``"relative999"`` (MobileRL's 0-999 units).
        xml_format: ``"mobilerl"`` (pixel bounds) or ``"mobilerl-v4"`` (0-999 bounds) for ``a11y``.
        observe_xml: include the raw dump as ``xml``.
        enter_after_type: press Enter after typing (AndroidLab's and AndroidWorld's executors do).
        settle_s: pause after each action before observing, so the UI can settle.
    """

    platform = "android"

    def __init__(self, tasks: Sequence[Task], *, device: Optional[AndroidDevice] = None,
                 provider: Any = "adb", serial: Optional[str] = None,
                 provider_kwargs: Optional[Mapping[str, Any]] = None, dialect: str = "androidlab",
                 coords: Coords = "absolute", xml_format: XmlFormat = "mobilerl", observe_xml: bool = True,
                 enter_after_type: bool = False, settle_s: float = 0.5, max_steps: Optional[int] = None,
                 render_mode: Optional[str] = None, info_timings: bool = False) -> None:
        super().__init__(tasks, dialect=dialect, max_steps=max_steps, render_mode=render_mode,
                         info_timings=info_timings)
        get_dialect(dialect)  # unknown dialect -> ConfigError now
        if xml_format not in ("mobilerl", "mobilerl-v4"):
            raise ConfigError(f"xml_format: expected 'mobilerl' or 'mobilerl-v4', got {xml_format!r}")
        self.xml_format, self.observe_xml = xml_format, bool(observe_xml)
        self.settle_s = float(settle_s)
        self.provider: Any = None
        if device is None:
            self.provider = self._make_provider(provider, serial, dict(provider_kwargs or {}))
            self.provider.acquire()
            device = self.provider.device
            if device is None:
                raise EnvInfraError(f"provider {provider!r} acquired no device")
        self.device: AndroidDevice = device
        self.actuator = Actuator(device, coords, enter_after_type=enter_after_type)
        w, h = self.screen_size = self.actuator.screen
        obs: dict[str, spaces.Space] = {
            "screenshot": spaces.Box(0, 255, shape=(h, w, 3), dtype=np.uint8),
            "a11y": UnicodeText(max_length=A11Y_MAX_CHARS),
            "instruction": UnicodeText(max_length=8192),
        }
        if self.observe_xml:
            obs["xml"] = UnicodeText(max_length=XML_MAX_CHARS)
        self.observation_space = spaces.Dict(obs)
        self._fresh = True  # just acquired: nothing to reset before the first episode
        self.screens: list[str] = []  # the episode's UI dumps in step order (what the judge reads)
        self.instruction = ""

    @staticmethod
    def _make_provider(provider: Any, serial: Optional[str], kwargs: dict[str, Any]) -> Any:
        if not isinstance(provider, str):
            return provider  # a built provider object (acquire/reset/release/device)
        from guigym.envs.android.providers import make_android_provider

        if provider == "adb":
            if not serial:
                raise ConfigError("serial: the adb provider needs a device serial or host:port "
                                  "(e.g. serial='emulator-5554'), or pass device=")
            kwargs["serial"] = serial
        elif serial:
            raise ConfigError(f"serial: only the adb provider takes a serial (provider={provider!r})")
        return make_android_provider(provider, **kwargs)

    # ---- device ---------------------------------------------------------------------------------
    def _reset_device(self) -> None:
        """Provider reset (snapshot load / readiness) unless just acquired, then the home screen."""
        if self.provider is not None and not self._fresh:
            self.provider.reset()
            if self.provider.device is not None and self.provider.device is not self.device:
                self.device = self.actuator.device = self.provider.device
        self._fresh = False
        self.device.home()

    def _observe(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        shot = np.asarray(self.device.screenshot(), dtype=np.uint8)
        w, h = self.screen_size
        if shot.shape != (h, w, 3):
            raise EnvInfraError(f"the device's screenshot is {shot.shape}, but this env was made for a "
                                f"{w}x{h} screen (was it rotated?)")
        xml = self.device.ui_xml()
        self.screens.append(xml)
        try:
            a11y = simplify(xml, self.screen_size, relative=self.xml_format == "mobilerl-v4")
        except Exception as exc:  # noqa: BLE001 - a dump that does not parse is a device fault
            raise EnvInfraError(f"the device's uiautomator dump could not be read: {exc}") from exc
        out: dict[str, Any] = {"screenshot": shot, "a11y": a11y[:A11Y_MAX_CHARS], "instruction": self.instruction}
        if self.observe_xml:
            out["xml"] = xml[:XML_MAX_CHARS]
        self.timings["observe_s"] = time.perf_counter() - t0
        return out

    def _execute(self, action: A.Action) -> None:
        if action.platforms and "android" not in action.platforms:
            raise ActionNotPossible(f"{action.name} is not a phone action")
        self.actuator.execute(action)
        if self.settle_s and not isinstance(action, A.Wait):
            time.sleep(self.settle_s)

    @staticmethod
    def _answer(last_action: Optional[A.Action]) -> Optional[str]:
        return last_action.answer if isinstance(last_action, A.Done) else None

    def close(self) -> None:
        if self.provider is not None:
            self.provider.release()
        super().close()


class AndroidLabEnv(AndroidEnv):
    """``AndroidLab-v0``: AndroidLab's 138 tasks (9 apps), loaded unmodified from its YAML files.

    Args:
        task: one task id (e.g. ``"clock_1"``) or Task; ``tasks``: several.
        task_dir: a directory of AndroidLab YAMLs (default: ``$GUIGYM_ANDROIDLAB_TASKS``, else the
            copy shipped with guigym).
        judge: answer judge for query tasks: ``"exact"``, ``"fuzzy"``, an AnswerJudge, or None
            (answer tasks are then unscorable).
        launch_app: start the task's app (its YAML ``package``) at reset, as AndroidLab's runner does.
        **kwargs: :class:`AndroidEnv` arguments.
    """

    def __init__(self, task: Union[str, Task, None] = None, tasks: Optional[Sequence[Union[str, Task]]] = None,
                 task_dir: Union[str, Path, None] = None, judge: Any = None, launch_app: bool = True,
                 **kwargs: Any) -> None:
        from guigym.envs.android.androidlab_checks import CHECKS, JUDGES
        from guigym.envs.android.androidlab_tasks import default_task_dir, load_dir, load_ground_truth_lengths

        suite = load_dir(task_dir or default_task_dir() or ANDROIDLAB_SUITE)
        selected = _select(suite, task, tasks)
        missing = [t.id for t in selected if t.id not in CHECKS]
        if missing:
            raise TaskSpecError(f"no AndroidLab check registered for {', '.join(missing[:5])}")
        if isinstance(judge, str):
            if judge not in JUDGES:
                raise ConfigError(f"judge: expected one of {', '.join(JUDGES)} or an AnswerJudge, got {judge!r}")
            judge = JUDGES[judge]()
        self.judge = judge
        self.launch_app = bool(launch_app)
        self.ground_truth_lengths = load_ground_truth_lengths()
        super().__init__(selected, **kwargs)

    def _reference_steps(self, task: Task) -> Optional[int]:
        """AndroidLab's human step count for the task (ground_truth_length.json), RRR's numerator."""
        return self.ground_truth_lengths.get(task.id)

    def _start_episode(self, task: Task, seed: int) -> None:
        t0 = time.perf_counter()
        self.screens = []
        self.instruction = task.instruction
        self._reset_device()
        if self.launch_app:
            self.device.launch_app(str(task.extra["package"]))
            if self.settle_s:
                time.sleep(self.settle_s)
        self.timings["setup_s"] = time.perf_counter() - t0

    def _verify(self, task: Task, last_action: Optional[A.Action]) -> tuple[Optional[float], dict[str, Any]]:
        from guigym.envs.android.androidlab_checks import CHECKS, judge_task

        check = CHECKS[task.id]
        adb: dict[str, str] = {}
        if check.adb:
            adb[check.adb] = parse_adb_query(check.adb).run(self.device)
        j = judge_task(task.id, task.instruction, self.screens, answer_text=self._answer(last_action), adb=adb,
                       judge=self.judge)
        details = {"subgoals": j.subgoals, "subgoal_score": j.subgoal_score, "reason": j.reason, "screen": j.step,
                   "answer": self._answer(last_action), "check": check.kind}
        if j.success is None:
            return None, details
        details["success"] = j.success
        return (1.0 if j.success else 0.0), details


def androidworld_tasks(names: Optional[Sequence[str]] = None) -> list[Task]:
    """One :class:`Task` per registered AndroidWorld task class (``id`` = its AndroidWorld name)."""
    from guigym.envs.android.androidworld import TASKS

    chosen = list(names) if names else TASKS.names()
    out = []
    for name in chosen:
        try:
            cls = TASKS.get(name)
        except KeyError:
            raise TaskSpecError(f"unknown AndroidWorld task {name!r}; known: {', '.join(TASKS.names())}") from None
        out.append(Task(id=name, instruction=cls.template, platform="android", suite="androidworld",
                        domain=(cls.app_names or ("",))[0], max_steps=cls.max_steps(),
                        tags=list(cls.app_names), source=f"{cls.__module__}.{cls.__qualname__}"))
    return out


class AndroidWorldEnv(AndroidEnv):
    """``AndroidWorld-v0``: AndroidWorld-style parameterised tasks (:mod:`.androidworld`).

    Each reset draws the task's parameters from the episode seed (``generate_random_params(seed)``,
    so ``reset(seed=s)`` replays the same instance), initialises the app state through the device and
    shows the instance's goal as ``instruction``; the step budget is ``int(10 * complexity)``.

    Args:
        task / tasks: AndroidWorld task names (default: every implemented task).
        **kwargs: :class:`AndroidEnv` arguments (default dialect ``androidworld``).
    """

    def __init__(self, task: Optional[str] = None, tasks: Optional[Sequence[str]] = None, **kwargs: Any) -> None:
        kwargs.setdefault("dialect", "androidworld")
        names = [task] if task else list(tasks or [])
        self.instance: Any = None
        super().__init__(androidworld_tasks(names or None), **kwargs)

    def _start_episode(self, task: Task, seed: int) -> None:
        from guigym.envs.android.androidworld import TASKS

        t0 = time.perf_counter()
        self.screens = []
        if self.instance is not None and self.instance.initialized:
            self.instance.tear_down(self.device)
        cls = TASKS.get(task.id)
        self.instance = cls(cls.generate_random_params(seed))
        self.instruction = self.instance.goal
        self._reset_device()
        self.instance.initialize_task(self.device)
        self.device.home()
        self.timings["setup_s"] = time.perf_counter() - t0

    def _episode_info(self) -> dict[str, Any]:
        """AndroidWorld's published difficulty of the task (easy / medium / hard), for SR by difficulty."""
        from guigym.envs.android.androidworld.metadata import published

        row = published(self.task.id) if self.task is not None else None
        return {"difficulty": row[0]} if row else {}

    def _verify(self, task: Task, last_action: Optional[A.Action]) -> tuple[Optional[float], dict[str, Any]]:
        answer = self._answer(last_action)
        score = float(self.instance.is_successful(self.device, answer=answer))
        return score, {"success": score >= 1.0, "answer": answer, "params": dict(self.instance.params),
                       "goal": self.instance.goal}


def _select(suite: Sequence[Task], task: Union[str, Task, None], tasks: Optional[Sequence[Union[str, Task]]]) -> list[Task]:
    by_id = {t.id: t for t in suite}
    wanted = [task] if task is not None else list(tasks or [])
    if not wanted:
        return list(suite)
    out = []
    for t in wanted:
        if isinstance(t, Task):
            out.append(t)
        elif t in by_id:
            out.append(by_id[t])
        else:
            raise TaskSpecError(f"unknown AndroidLab task {t!r} ({len(by_id)} tasks loaded)")
    return out


def _make_vec(cls: type[AndroidEnv], num_envs: int, serials: Optional[Sequence[str]], vector_mode: str,
              kwargs: dict[str, Any]) -> Any:
    import gymnasium as gym

    if serials is None or len(serials) != num_envs:
        raise ConfigError(f"serials: {cls.__name__} needs one adb serial per env ({num_envs}), got {serials!r}")
    if len(set(serials)) != len(serials):
        raise ConfigError(f"serials: each env needs its own device, got duplicates in {list(serials)!r}")
    kwargs.pop("max_episode_steps", None)  # gymnasium adds it; GUIEnv has its own step budget

    def fn(serial: str) -> Any:
        return lambda: cls(serial=serial, **kwargs)

    fns = [fn(s) for s in serials]
    if vector_mode == "sync":
        return gym.vector.SyncVectorEnv(fns)
    if vector_mode == "async":
        return gym.vector.AsyncVectorEnv(fns)
    raise ConfigError(f"vector_mode: expected 'async' or 'sync', got {vector_mode!r}")


def make_androidlab_vec(num_envs: int = 1, serials: Optional[Sequence[str]] = None, vector_mode: str = "async",
                        **kwargs: Any) -> Any:
    """``gym.make_vec("AndroidLab-v0", num_envs=N, serials=[...])``: sub-env ``i`` drives ``serials[i]``.

    Gymnasium's own sync/async modes give every sub-env the same kwargs, which cannot say "one
    device per env", so the ids register this as their ``vector_entry_point``. ``vector_mode``:
    ``"async"`` (a process per device, Gymnasium's AsyncVectorEnv) or ``"sync"``.
    """
    return _make_vec(AndroidLabEnv, num_envs, serials, vector_mode, kwargs)


def make_androidworld_vec(num_envs: int = 1, serials: Optional[Sequence[str]] = None, vector_mode: str = "async",
                          **kwargs: Any) -> Any:
    """``gym.make_vec("AndroidWorld-v0", num_envs=N, serials=[...])`` (see :func:`make_androidlab_vec`)."""
    return _make_vec(AndroidWorldEnv, num_envs, serials, vector_mode, kwargs)
