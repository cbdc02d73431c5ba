"""Where the trainer's per-iteration metrics go: one fan-out over sinks (``log`` recipe section).

The loop calls :meth:`MetricsFanout.log` once per iteration with ``{name: value}``. The fan-out
builds the row once (:func:`guigym.train.metrics_log.metrics_row`: ints -> float, non-finite ->
``null``) and hands the same row to every sink, so every sink sees identical numbers:

* ``jsonl`` (always): ``<run.dir>/metrics.jsonl``, :class:`~guigym.train.metrics_log.MetricsLog`.
* ``tensorboard`` (``log.tensorboard``): every float of the row as a scalar whose tag is its key,
  ``global_step`` = the row's ``step`` and ``walltime`` = its ``time`` (``torch.utils.tensorboard``;
  TensorBoard stores float32). A resumed run opens its writer with ``purge_step`` = the first
  iteration it redoes, so TensorBoard hides the crashed run's later events as the JSONL drops them.
* ``wandb`` (``log.wandb``): the same floats via ``run.log(..., step=step, commit=True)``; ``mode`` is
  ``$WANDB_MODE`` or ``"offline"`` (nothing leaves the machine unless asked); the W&B run id is
  kept in ``<run.dir>/wandb_run_id`` so a resumed run continues the same W&B run. W&B cannot
  rewind a step: after a crash, iterations the dead process had already logged and that the
  resumed run redoes may be refused there (W&B warns); JSONL and TensorBoard hold the redone values.

A sink is anything with ``name``, ``write(row)`` and ``close()`` (:class:`MetricsSink`).
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any, Optional, Protocol, Sequence

from guigym.core.errors import ConfigError
from guigym.train.metrics_log import MetricsLog, metrics_row


class MetricsSink(Protocol):
    """One destination of metrics rows (``{"step": int, "time": float, key: float | None | ...}``)."""

    name: str

    def write(self, row: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """The scalar metrics of a row: its float values except ``step``/``time`` (``None``, strings and
    bools are JSONL-only)."""
    return {k: v for k, v in row.items() if k not in ("step", "time") and isinstance(v, float)}


class TensorBoardSink:
    """Scalars to TensorBoard event files in ``log_dir`` (``torch.utils.tensorboard.SummaryWriter``)."""

    name = "tensorboard"

    def __init__(self, log_dir: str | Path, purge_step: Optional[int] = None) -> None:
        writer_cls = _import_summary_writer()
        self.log_dir = Path(log_dir)
        self.writer = writer_cls(str(self.log_dir), purge_step=purge_step)

    def write(self, row: dict[str, Any]) -> None:
        for k, v in scalars(row).items():
            self.writer.add_scalar(k, v, global_step=int(row["step"]), walltime=float(row["time"]))
        self.writer.flush()  # a killed run keeps every logged iteration

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """Scalars to a Weights & Biases run (offline unless ``$WANDB_MODE`` says otherwise)."""

    name = "wandb"

    def __init__(self, run_dir: str | Path, run_name: str, project: str, entity: Optional[str] = None,
                 config: Optional[dict[str, Any]] = None) -> None:
        wandb = _import_wandb()
        run_dir = Path(run_dir)
        id_file = run_dir / "wandb_run_id"
        if id_file.exists():
            run_id = id_file.read_text().strip()
        else:
            run_id = uuid.uuid4().hex[:12]
            id_file.write_text(run_id + "\n")
        self.mode = os.environ.get("WANDB_MODE") or "offline"
        self.run = wandb.init(project=project, entity=entity, name=run_name, id=run_id, resume="allow",
                              dir=str(run_dir), config=config or {}, mode=self.mode)

    def write(self, row: dict[str, Any]) -> None:
        # commit now: with an explicit step W&B otherwise holds the row until the next step arrives
        self.run.log(scalars(row), step=int(row["step"]), commit=True)

    def close(self) -> None:
        self.run.finish()


class MetricsFanout:
    """Every row to every sink; ``jsonl`` is the :class:`MetricsLog` (resume truncation)."""

    def __init__(self, jsonl: MetricsLog, extra: Sequence[MetricsSink] = ()) -> None:
        self.jsonl = jsonl
        self.sinks: list[Any] = [jsonl, *extra]

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.sinks]

    def truncate_after(self, step: int) -> int:
        """Drop JSONL lines with ``step > step`` (see :meth:`MetricsLog.truncate_after`)."""
        return self.jsonl.truncate_after(step)

    def log(self, step: int, metrics: dict[str, Any]) -> dict[str, Any]:
        """Build the row of iteration ``step`` once and write it to every sink; returns it."""
        row = metrics_row(step, metrics)
        for sink in self.sinks:  # JSONL first: it is the record the others mirror
            sink.write(row)
        return row

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


# ---- construction ---------------------------------------------------------------------------------
def _import_summary_writer() -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:  # torch's module imports the tensorboard package
        raise ConfigError("log.tensorboard: true needs the tensorboard package (pip install tensorboard, or "
                          f"pip install 'guigym[train]'): {exc}") from None
    return SummaryWriter


def _import_wandb() -> Any:
    try:
        import wandb
    except ImportError as exc:
        raise ConfigError(f"log.wandb: true needs the wandb package (pip install wandb): {exc}") from None
    return wandb


def check(log_cfg: Any) -> None:
    """Raise :class:`ConfigError` naming the ``log.*`` field whose package is missing (call it
    before anything expensive is loaded)."""
    if log_cfg.tensorboard:
        _import_summary_writer()
    if log_cfg.wandb:
        _import_wandb()


def open_sinks(cfg: Any, run_dir: str | Path, start_step: int = 0) -> MetricsFanout:
    """The fan-out of a :class:`~guigym.train.config.TrainConfig`: JSONL at ``<run_dir>/metrics.jsonl``
    plus TensorBoard / W&B when ``cfg.log`` enables them. ``start_step`` is the first iteration this
    process will log (TensorBoard purges events at or after it, left by a crashed process)."""
    run_dir = Path(run_dir)
    log_cfg = cfg.log
    check(log_cfg)
    jsonl = MetricsLog(run_dir / "metrics.jsonl")
    extra: list[Any] = []
    try:
        if log_cfg.tensorboard:
            extra.append(TensorBoardSink(log_cfg.tensorboard_dir or run_dir / "tb", purge_step=start_step))
        if log_cfg.wandb:
            extra.append(WandbSink(run_dir, cfg.run.name, log_cfg.wandb_project, log_cfg.wandb_entity,
                                   config=cfg.to_dict()))
    except BaseException:
        for sink in extra:
            sink.close()
        raise
    return MetricsFanout(jsonl, extra)
