"""The training view of ``guigym report``: learning curves and a summary table from ``metrics.jsonl``.

    guigym report --train runs/grpo           # -> runs/grpo/learning_curve.png + a table on stdout

Input: a run directory (its ``metrics.jsonl``) or the JSONL file itself, one object per line as
:mod:`guigym.train.metrics_log` writes them (``{"step": int, "time": float, key: float | null}``).
Reading is strict: a line that is not a JSON object with an integer ``step`` is an error naming
the file and line number; only a torn *last* line (no trailing newline: the writer was killed
mid-write) is skipped. If a step occurs more than once, its last line counts.

Output: one panel per group of :data:`PANELS` that has at least one of its keys in the file (one
line per key present, ``null`` values as gaps), x = iteration; and per plotted key its points,
first, last, min, max, and the best value with its step for keys whose direction is known
(success and reward: higher is better). matplotlib is imported only here (the ``train`` extra).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from guigym.core.errors import ConfigError


@dataclass(frozen=True)
class Panel:
    title: str
    keys: tuple[str, ...]  # drawn in this order when present
    better: Optional[str] = None  # "max" | "min" | None (no "best" for diagnostics such as KL)


#: the panels of the learning-curve figure, in order; keys are the trainer's metric names
#: (guigym.train.loop.Trainer.iteration, guigym.train.learner.Learner.update, policy losses)
PANELS: tuple[Panel, ...] = (
    Panel("success rate", ("rollout/success_rate",), "max"),
    Panel("reward", ("rollout/reward_mean",), "max"),
    Panel("loss", ("loss", "pg_loss")),
    Panel("KL", ("kl", "approx_kl", "approx_kl_k1")),
    Panel("clip fraction", ("clip_frac", "clip_frac_low", "clip_frac_high")),
    Panel("entropy", ("rollout/entropy_mean", "entropy")),
    Panel("staleness", ("staleness_mean", "staleness_max")),
)


@dataclass
class KeySummary:
    key: str
    panel: str
    points: int  # rows with a finite value
    first: float
    last: float
    min: float
    max: float
    best: Optional[float] = None  # by the panel's direction; None when it has none
    best_step: Optional[int] = None


@dataclass
class TrainReport:
    source: Path  # the metrics.jsonl read
    png: Path
    rows: int  # iterations read (after de-duplicating steps)
    panels: list[str]  # titles of the drawn panels, in order
    keys: dict[str, list[str]]  # panel title -> keys drawn in it
    axes_titles: list[str]  # titles of the figure's axes, read back from the figure
    summary: list[KeySummary] = field(default_factory=list)
    text: str = ""  # the summary table
    skipped_torn_line: bool = False


def metrics_path(path: str | Path) -> Path:
    """``<path>/metrics.jsonl`` for a run directory (or a missing path not named ``*.jsonl``), else ``path``."""
    path = Path(path)
    is_run_dir = path.is_dir() or (not path.exists() and path.suffix != ".jsonl")
    return path / "metrics.jsonl" if is_run_dir else path


def read_metrics_strict(path: str | Path) -> tuple[list[dict[str, Any]], bool]:
    """(rows sorted by step, one per step; whether a torn last line was skipped).

    Raises ``FileNotFoundError`` when the file is missing and :class:`ConfigError` naming the file
    (and line) when it is empty or a line is malformed."""
    path = metrics_path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such metrics file (a training run directory holds metrics.jsonl)")
    raw = path.read_text()
    lines = raw.split("\n")
    by_step: dict[int, dict[str, Any]] = {}
    torn = False
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if n == len(lines) and not raw.endswith("\n"):  # last line cut by a kill mid-write
                torn = True
                continue
            raise ConfigError(f"{path}:{n}: not valid JSON ({exc.msg} at column {exc.colno}): {line[:80]!r}") from None
        if not isinstance(row, dict):
            raise ConfigError(f"{path}:{n}: expected a JSON object, got {type(row).__name__}")
        step = row.get("step")
        if isinstance(step, bool) or not isinstance(step, int):
            raise ConfigError(f"{path}:{n}: 'step' must be an integer iteration, got {step!r}")
        by_step[step] = row
    if not by_step:
        raise ConfigError(f"{path}: no metrics rows (empty file{', only a torn line' if torn else ''})")
    return [by_step[s] for s in sorted(by_step)], torn


def _series(rows: Sequence[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of ``key`` over rows that have it; null / non-numbers -> NaN (a gap)."""
    steps, values = [], []
    for r in rows:
        if key not in r:
            continue
        v = r[key]
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))
        steps.append(int(r["step"]))
        values.append(float(v) if ok else math.nan)
    return steps, values


def summarize(rows: Sequence[dict[str, Any]], panels: Sequence[Panel] = PANELS) -> list[KeySummary]:
    """One :class:`KeySummary` per key of ``panels`` with at least one finite value."""
    out = []
    for panel in panels:
        for key in panel.keys:
            steps, values = _series(rows, key)
            pts = [(s, v) for s, v in zip(steps, values) if not math.isnan(v)]
            if not pts:
                continue
            vals = [v for _, v in pts]
            ks = KeySummary(key, panel.title, len(pts), vals[0], vals[-1], min(vals), max(vals))
            if panel.better in ("max", "min"):
                pick = max if panel.better == "max" else min
                best = pick(vals)
                ks.best, ks.best_step = best, next(s for s, v in pts if v == best)  # the first step reaching it
            out.append(ks)
    return out


def format_summary(summary: Sequence[KeySummary], rows: int, source: Path) -> str:
    """A fixed-width text table of ``summary``."""
    head = f"{'metric':<24}{'points':>7}{'first':>11}{'last':>11}{'min':>11}{'max':>11}  best (step)"
    lines = [f"{source}: {rows} iteration(s)", head, "-" * len(head)]
    for s in summary:
        best = f"{s.best:.4g} ({s.best_step})" if s.best is not None else "-"
        lines.append(f"{s.key:<24}{s.points:>7}{s.first:>11.4g}{s.last:>11.4g}{s.min:>11.4g}{s.max:>11.4g}  {best}")
    return "\n".join(lines)


def _matplotlib() -> tuple[Any, Any]:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(f"guigym report --train needs matplotlib (pip install matplotlib, or "
                          f"pip install 'guigym[train]'): {exc}") from None
    return Figure, FigureCanvasAgg


def train_report(run: str | Path, png: Optional[str | Path] = None, panels: Sequence[Panel] = PANELS,
                 ncols: int = 3, dpi: int = 100) -> TrainReport:
    """Write the learning-curve PNG (default ``<dir of metrics.jsonl>/learning_curve.png``, atomically)
    and return what was drawn plus the summary table. Each panel is 4.2 x 3.0 inches at ``dpi``."""
    source = metrics_path(run)
    rows, torn = read_metrics_strict(source)
    summary = summarize(rows, panels)
    present = {s.key for s in summary}
    drawn = [p for p in panels if any(k in present for k in p.keys)]
    if not drawn:
        wanted = sorted({k for p in panels for k in p.keys})
        found = sorted({k for r in rows for k in r} - {"step", "time"})
        raise ConfigError(f"{source}: none of the plotted metrics has a finite value (looked for {wanted}; "
                          f"the file has {found})")
    Figure, FigureCanvasAgg = _matplotlib()
    from matplotlib.ticker import MaxNLocator
    cols = max(1, min(ncols, len(drawn)))
    nrows = math.ceil(len(drawn) / cols)
    fig = Figure(figsize=(4.2 * cols, 3.0 * nrows), dpi=dpi)
    FigureCanvasAgg(fig)
    grid = fig.subplots(nrows, cols, squeeze=False)
    axes = [ax for row in grid for ax in row]
    keys: dict[str, list[str]] = {}
    for ax, panel in zip(axes, drawn):
        keys[panel.title] = [k for k in panel.keys if k in present]
        for key in keys[panel.title]:
            steps, values = _series(rows, key)
            ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3, label=key)
        ax.set_title(panel.title)
        ax.set_xlabel("iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if len(keys[panel.title]) > 1:
            ax.legend(fontsize="small")
    for ax in axes[len(drawn):]:  # the last row's unused cells
        fig.delaxes(ax)
    fig.suptitle(f"{source.parent.name}: {len(rows)} iteration(s)")
    fig.tight_layout()
    out = Path(png) if png is not None else source.parent / "learning_curve.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    fig.savefig(tmp, format="png")
    os.replace(tmp, out)
    return TrainReport(source=source, png=out, rows=len(rows), panels=[p.title for p in drawn], keys=keys,
                       axes_titles=[ax.get_title() for ax in fig.axes], summary=summary,
                       text=format_summary(summary, len(rows), source), skipped_torn_line=torn)
