"""LatencyModel-v0: a named stand-in env whose reset/step take as long as a real env's, and nothing else.

Scale-out questions (how many env actions per minute do 64 envs give the trainer, how busy are the
policy workers, how stale are the samples) depend on *when* envs answer, not on what they draw.
This env replays the timing of a real one -- reset and step latencies sampled from a histogram
recorded by ``bench/record_latency.py`` -- while its work is a ``time.sleep``, so the real
scheduler, EnvPool/Ray actors, DataStore and trainer can drive 64 of them on 2 cores. It is a
stand-in and is named as one: it measures schedules, never agents.

The task (so that rewards depend on actions, as GRPO needs): the observation lists ``n_elements``
buttons with random names and ids in guigym's web a11y XML; the instruction names 1-3 of them
("Click Basil, then Tomato."). Each ``click(element=...)`` that names the next target (by id or,
case-insensitively, by name) advances; the episode ends when all are clicked (terminated, reward
1), on ``done``/``fail`` (terminated, reward 1 only if all were clicked) or at the step budget
(truncated, reward 0). Any other action spends a step. Under a uniformly random click the episode
length is geometric-like with a long tail, as real GUI episodes are.

Timing: ``reset`` and every ``step`` sleep ``time_scale`` x a latency drawn from the histogram.
The draws come from an RNG seeded by ``(latency_seed, episode seed)`` at every reset, so the same
seed replays the same latencies (reset first, then one per step); envs of a pool with the same
``latency_seed`` running the same episode seed sleep alike, different seeds independently.
With ``"step_draw": "episode"`` in the latency file (default ``"step"``) the step latency is drawn
once per episode, right after the reset's, and every step of that episode sleeps it: the episode's
duration then varies as widely as the histogram (a slow desktop task stays slow), instead of the
sum of i.i.d. step draws concentrating around its mean (bench/dart_regime.py uses this).

Latency files (``latency=``): the JSON ``bench/record_latency.py`` writes (keys ``reset`` and
``step``, each with ``edges`` (B+1,) seconds and ``counts`` (B,); optional ``step_draw``), a dict
of that shape, or None for :data:`DEFAULT_LATENCY`. Within a bin the draw is log-uniform (the recorded bins are
log-spaced).

Observation (``Dict``): ``a11y`` XML text, ``instruction`` text, and with ``screen=(W, H)`` a black
``screenshot`` (H, W, 3) uint8 for pipelines that expect one (default: none, text only).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np
from gymnasium import spaces

from guigym.core import actions as A
from guigym.core.errors import ActionNotPossible, ConfigError
from guigym.core.task import Task
from guigym.envs.base import GUIEnv
from guigym.envs.spaces import UnicodeText

#: Fallback histograms (seconds) when ``latency`` is None: the MiniWoB-v0 sample in
#: bench/data/latency_miniwob.json (2026-11-26 10:38 UTC: 20 resets, 60 steps of real Chromium on
#: this project's 2-core machine while other jobs loaded it, load 5.57), edges rounded
#: to 4 digits. A small sample: pass a file recorded on a quiet machine for anything you report.
DEFAULT_LATENCY: dict[str, dict[str, list[float]]] = {
    "reset": {"edges": [0.05295, 0.06936, 0.09086, 0.119, 0.1559, 0.2042, 0.2675, 0.3504, 0.459, 0.6012,
                        0.7875, 1.032, 1.351],
              "counts": [1, 0, 0, 0, 0, 0, 1, 0, 0, 5, 10, 3]},
    "step": {"edges": [0.04013, 0.04723, 0.05558, 0.06541, 0.07699, 0.09061, 0.1066, 0.1255, 0.1477, 0.1738,
                       0.2046, 0.2408, 0.2834],
             "counts": [2, 3, 5, 7, 5, 9, 12, 3, 7, 4, 0, 3]},
}


#: button names the tasks draw from
WORDS = ("Tomato", "Basil", "Cedar", "Falcon", "Harbor", "Indigo", "Juniper", "Kettle", "Lantern", "Maple",
         "Nickel", "Orchid", "Pepper", "Quartz", "Raven", "Saffron", "Thistle", "Umber", "Violet", "Walnut")


@dataclass(frozen=True)
class LatencyHistogram:
    """A latency distribution given as a histogram: ``edges`` (B+1,) increasing seconds, ``counts``
    (B,) non-negative with a positive sum. :meth:`sample` picks a bin with probability
    count/total, then a value log-uniformly inside it (uniformly when the lower edge is 0)."""

    edges: tuple[float, ...]
    counts: tuple[float, ...]

    def __post_init__(self) -> None:
        e, c = np.asarray(self.edges, dtype=float), np.asarray(self.counts, dtype=float)
        if e.ndim != 1 or c.ndim != 1 or len(e) != len(c) + 1 or len(c) < 1:
            raise ConfigError(f"latency histogram: need B >= 1 counts and B+1 edges, got {len(c)} and {len(e)}")
        if not np.all(np.isfinite(e)) or e[0] < 0 or np.any(np.diff(e) <= 0):
            raise ConfigError(f"latency histogram: edges must be finite, >= 0 and increasing, got {list(e)}")
        if np.any(c < 0) or c.sum() <= 0:
            raise ConfigError(f"latency histogram: counts must be >= 0 with a positive sum, got {list(c)}")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "latency") -> "LatencyHistogram":
        try:
            return cls(tuple(float(x) for x in d["edges"]), tuple(float(x) for x in d["counts"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: need 'edges' and 'counts' lists of numbers ({exc})") from None

    @property
    def probs(self) -> np.ndarray:
        c = np.asarray(self.counts, dtype=float)
        return c / c.sum()

    def sample(self, rng: np.random.Generator, size: Optional[int] = None) -> Union[float, np.ndarray]:
        """One draw (``size=None``) or ``size`` draws, in seconds."""
        n = 1 if size is None else int(size)
        e = np.asarray(self.edges, dtype=float)
        b = rng.choice(len(self.counts), size=n, p=self.probs)
        u = rng.random(n)
        lo, hi = e[b], e[b + 1]
        out = lo + u * (hi - lo)
        pos = lo > 0
        out[pos] = lo[pos] * (hi[pos] / lo[pos]) ** u[pos]  # log-uniform inside bins that start above 0
        return float(out[0]) if size is None else out

    def cdf(self, x: float) -> float:
        """P(latency <= x) under the same within-bin law as :meth:`sample`."""
        e, p = np.asarray(self.edges, dtype=float), self.probs
        if x <= e[0]:
            return 0.0
        if x >= e[-1]:
            return 1.0
        b = int(np.searchsorted(e, x, side="right") - 1)
        lo, hi = e[b], e[b + 1]
        frac = np.log(x / lo) / np.log(hi / lo) if lo > 0 else (x - lo) / (hi - lo)
        return float(p[:b].sum() + p[b] * frac)

    def mean(self) -> float:
        """Expected latency (s) under the within-bin law."""
        e, p = np.asarray(self.edges, dtype=float), self.probs
        lo, hi = e[:-1], e[1:]
        means = (lo + hi) / 2
        pos = lo > 0
        means[pos] = (hi[pos] - lo[pos]) / np.log(hi[pos] / lo[pos])  # mean of a log-uniform law
        return float((p * means).sum())


#: when a step latency is drawn: once per step (recorded envs) or once per episode
STEP_DRAWS = ("step", "episode")


def _latency_data(latency: Union[str, Path, Mapping[str, Any], None]) -> tuple[Mapping[str, Any], str]:
    """(the latency mapping, where it came from) for a path, a dict or None."""
    if latency is None:
        return DEFAULT_LATENCY, "DEFAULT_LATENCY"
    if isinstance(latency, (str, Path)):
        path = Path(latency)
        try:
            return json.loads(path.read_text()), str(path)
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"latency: cannot read {path}: {exc}") from None
    if isinstance(latency, Mapping):
        return latency, "latency"
    raise ConfigError(f"latency must be a path, a dict or None, got {type(latency).__name__}")


def load_step_draw(latency: Union[str, Path, Mapping[str, Any], None]) -> str:
    """The ``step_draw`` of a latency file/dict: ``"step"`` (default) or ``"episode"``."""
    data, where = _latency_data(latency)
    draw = data.get("step_draw", "step")
    if draw not in STEP_DRAWS:
        raise ConfigError(f"{where}: field 'step_draw' must be one of {STEP_DRAWS}, got {draw!r}")
    return str(draw)


def load_latency(latency: Union[str, Path, Mapping[str, Any], None]) -> dict[str, LatencyHistogram]:
    """``{"reset": LatencyHistogram, "step": LatencyHistogram}`` from a recorded JSON file, a dict
    of that shape, or None (:data:`DEFAULT_LATENCY`)."""
    data, where = _latency_data(latency)
    out = {}
    for kind in ("reset", "step"):
        if kind not in data or not isinstance(data[kind], Mapping):
            raise ConfigError(f"{where}: missing the '{kind}' histogram")
        out[kind] = LatencyHistogram.from_dict(data[kind], f"{where}: field '{kind}'")
    return out


def make_tasks(n_tasks: int, n_elements: int, max_targets: int, max_steps: int, seed: int = 0,
               min_targets: int = 1) -> list[Task]:
    """``n_tasks`` tasks ``latency-000`` ...: each names ``min_targets``..``max_targets`` distinct
    buttons to click in order (drawn with ``seed``) among ``n_elements`` on screen."""
    if not 1 <= min_targets <= max_targets <= n_elements <= len(WORDS):
        raise ConfigError(f"need 1 <= min_targets ({min_targets}) <= max_targets ({max_targets}) <= n_elements "
                          f"({n_elements}) <= {len(WORDS)}")
    if n_tasks < 1:
        raise ConfigError(f"n_tasks must be >= 1, got {n_tasks}")
    rng = np.random.default_rng(seed)
    tasks = []
    for k in range(n_tasks):
        names = [str(w) for w in rng.choice(WORDS, size=n_elements, replace=False)]
        targets = names[: int(rng.integers(min_targets, max_targets + 1))]
        instruction = "Click " + ", then ".join(targets) + "."
        tasks.append(Task(id=f"latency-{k:03d}", instruction=instruction, platform="web", suite="latency_model",
                          domain="latency_model", max_steps=max_steps, evaluator={"targets": targets},
                          extra={"names": names}, source="guigym.envs.latency_model"))
    return tasks


class LatencyModelEnv(GUIEnv):
    """Stand-in env with recorded reset/step latencies (module docstring).

    Args:
        latency: recorded histograms (path to ``bench/record_latency.py`` JSON, a dict, or None
            for :data:`DEFAULT_LATENCY`).
        time_scale: multiplies every sampled latency (0 = no sleeping, for tests).
        latency_seed: mixed with the episode seed into the latency RNG.
        n_tasks, n_elements, min_targets, max_targets, task_seed: the generated suite (:func:`make_tasks`).
        task / tasks: restrict the suite to these ids (as MiniWoB-v0's ``task``/``tasks``; the
            trainer passes ``env.tasks`` this way).
        max_steps: step budget of every task (default 15, OSWorld's).
        screen: (W, H) to add a black screenshot to observations; None = text only.
    """

    platform = "web"

    def __init__(self, latency: Union[str, Path, Mapping[str, Any], None] = None, time_scale: float = 1.0,
                 latency_seed: int = 0, n_tasks: int = 16, n_elements: int = 6, max_targets: int = 3,
                 task_seed: int = 0, min_targets: int = 1, max_steps: Optional[int] = 15, screen: Optional[tuple[int, int]] = None,
                 task: Optional[str] = None, tasks: Optional[Sequence[str]] = None, dialect: str = "canonical",
                 render_mode: Optional[str] = None, info_timings: bool = False) -> None:
        if not time_scale >= 0:
            raise ConfigError(f"time_scale must be >= 0, got {time_scale}")
        self.latency = load_latency(latency)
        self.step_draw = load_step_draw(latency)
        self.time_scale = float(time_scale)
        self.latency_seed = int(latency_seed)
        suite = make_tasks(n_tasks, n_elements, max_targets, max_steps or 15, task_seed, min_targets)
        wanted = [task] if task is not None else (list(tasks) if tasks is not None else None)
        if wanted is not None:
            by_id = {t.id: t for t in suite}
            unknown = [t for t in wanted if t not in by_id]
            if unknown or not wanted:
                raise ConfigError(f"tasks: unknown LatencyModel-v0 task id(s) {unknown or wanted}; the suite has "
                                  f"latency-000 .. latency-{n_tasks - 1:03d} (n_tasks={n_tasks})")
            suite = [by_id[t] for t in wanted]
        super().__init__(suite, dialect=dialect, max_steps=max_steps, render_mode=render_mode,
                         info_timings=info_timings)
        self.screen = tuple(int(v) for v in screen) if screen is not None else None
        obs = {"a11y": UnicodeText(max_length=100_000), "instruction": UnicodeText(max_length=10_000)}
        if self.screen is not None:
            obs["screenshot"] = spaces.Box(0, 255, (self.screen[1], self.screen[0], 3), np.uint8)
        self.observation_space = spaces.Dict(obs)
        self._lat_rng = np.random.default_rng(self.latency_seed)
        self._ids: dict[str, str] = {}  # element id -> name
        self._progress = 0
        self._episode_step: Optional[float] = None  # step_draw "episode": this episode's step latency
        #: the latencies slept so far this episode (s, before time_scale): reset first, then steps
        self.latencies: list[float] = []

    # ---- timing ---------------------------------------------------------------------------------
    def _sleep(self, kind: str) -> None:
        if kind == "step" and self._episode_step is not None:
            lat = self._episode_step
        else:
            lat = float(self.latency[kind].sample(self._lat_rng))
        self.latencies.append(lat)
        if self.time_scale > 0:
            time.sleep(lat * self.time_scale)

    # ---- GUIEnv hooks ---------------------------------------------------------------------------
    def _start_episode(self, task: Task, seed: int) -> None:
        self._lat_rng = np.random.default_rng([self.latency_seed, int(seed)])
        self.latencies = []
        layout = np.random.default_rng([int(seed), 1])
        names = list(task.extra["names"])
        ids = [str(i) for i in layout.choice(np.arange(1, 100), size=len(names), replace=False)]
        order = layout.permutation(len(names))
        self._ids = {ids[k]: names[int(order[k])] for k in range(len(names))}
        self._progress = 0
        self._episode_step = None
        self._sleep("reset")
        if self.step_draw == "episode":  # drawn after the reset's latency: the same seed replays both
            self._episode_step = float(self.latency["step"].sample(self._lat_rng))

    def _observe(self) -> dict[str, Any]:
        nodes = "".join(f'<button id="{i}" name="{name}" bbox="10,{10 + 30 * k},120,24"/>'
                        for k, (i, name) in enumerate(self._ids.items()))
        obs: dict[str, Any] = {"a11y": f'<a11y nodes="{len(self._ids)}" truncated="false">{nodes}</a11y>',
                               "instruction": self.task.instruction if self.task is not None else ""}
        if self.screen is not None:
            obs["screenshot"] = np.zeros((self.screen[1], self.screen[0], 3), np.uint8)
        return obs

    def _execute(self, action: A.Action) -> None:
        self._sleep("step")
        if not isinstance(action, A.Click) or action.element is None:
            return  # a step spent on something that does not advance the task
        ref = str(action.element)
        name = self._ids.get(ref) or next((n for n in self._ids.values() if n.lower() == ref.lower()), None)
        if name is None:
            raise ActionNotPossible(f"no element {ref!r} on screen")
        targets = self.task.evaluator["targets"]
        if self._progress < len(targets) and name == targets[self._progress]:
            self._progress += 1

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        n = len(self.latencies)
        out = super().step(action)
        if len(self.latencies) == n:  # done/fail/unparseable actions skip _execute: still one step's time
            self._sleep("step")
        return out

    def _env_ended(self) -> bool:
        return self._progress >= len(self.task.evaluator["targets"])

    def _verify(self, task: Task, last_action: Optional[A.Action]) -> tuple[Optional[float], dict[str, Any]]:
        targets = task.evaluator["targets"]
        ok = self._progress >= len(targets)
        return (1.0 if ok else 0.0), {"success": ok, "clicked_in_order": self._progress, "targets": list(targets)}

    def _episode_info(self) -> dict[str, Any]:
        return {"modelled_latency_s": round(self.latencies[-1], 6) if self.latencies else None}
