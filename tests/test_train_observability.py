"""Training observability (issue 18 item 5): the metrics fan-out (JSONL, TensorBoard, W&B), progress
bars, and ``guigym report --train`` learning curves.

The TensorBoard and report tests read back what a real training run wrote: the loop
(``Trainer.iteration``) on a tiny locally built Qwen2.5-VL over stored trajectories (the
tests/train_helpers.py path: everything after rollout collection is the real loop)."""
from __future__ import annotations

import io
import json
import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from train_helpers import recipe, store_iteration, tiny, tokens, trainer  # noqa: E402,F401 - fixtures

from guigym.core.errors import ConfigError  # noqa: E402
from guigym.train.config import LogConfig, from_dict  # noqa: E402
from guigym.train.metrics_log import read_metrics  # noqa: E402

ITERATIONS = 3


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread):
    """One intra-op torch thread for this module (tests/conftest.py says why)."""


@pytest.fixture(scope="module")
def trained(tiny, tokens, tmp_path_factory):
    """A 3-iteration run with ``log.tensorboard: true``: (run dir, learner progress callbacks,
    the metrics each iteration returned)."""
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install tensorboard)")
    tmp = tmp_path_factory.mktemp("obs")
    cfg = recipe(tmp, tiny, skip_zero_advantage_groups=False)
    cfg["log"] = {"tensorboard": True}
    t = trainer(cfg)
    calls: list[list[tuple[int, int]]] = []
    returned = []
    try:
        for it in range(ITERATIONS):
            # rewards differ inside each group, so every iteration trains (non-zero advantages)
            store_iteration(t, tokens, it, [("t1", f"g{it}a", 1, 1.0), ("t1", f"g{it}a", 2, 0.0),
                                            ("t2", f"g{it}b", 1, 0.0), ("t2", f"g{it}b", 1, 1.0)])
            calls.append([])
            t.learner.on_optimizer_step = lambda done, total, c=calls[-1]: c.append((done, total))
            returned.append(t.iteration(it))
    finally:
        t.close()
    return Path(cfg["run"]["dir"]), calls, returned


def _events(log_dir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})  # 0 = keep every event
    acc.Reload()
    return acc


def _f32(x: float) -> float:
    """TensorBoard stores scalars as float32."""
    import numpy as np

    return float(np.float32(x))


# ---- TensorBoard ------------------------------------------------------------------------------
def test_tensorboard_scalars_equal_the_jsonl_step_by_step(trained):
    run, _, returned = trained
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(ITERATIONS))
    acc = _events(run / "tb")
    float_keys = {k for r in rows for k, v in r.items() if k not in ("step", "time") and isinstance(v, float)}
    assert set(acc.Tags()["scalars"]) == float_keys
    assert {"loss", "approx_kl", "clip_frac", "rollout/success_rate", "rollout/reward_mean"} <= float_keys
    for key in float_keys:
        events = acc.Scalars(key)
        want = [(r["step"], _f32(r[key]), r["time"]) for r in rows if isinstance(r.get(key), float)]
        assert [(e.step, e.value, e.wall_time) for e in events] == want, key
    # the rows are what the loop returned, and the new entropy / staleness metrics are right:
    # every stored step was sampled by version == its iteration (no staleness), entropy 0.5 each
    for r, m in zip(rows, returned):
        assert r["loss"] == m["loss"] and r["rollout/success_rate"] == m["rollout/success_rate"] == 0.5
        assert r["staleness_mean"] == r["staleness_max"] == 0.0
        assert r["rollout/entropy_mean"] == pytest.approx(0.5)


def test_learner_reports_each_optimizer_step_for_the_update_bar(trained):
    _, calls, returned = trained
    for seen, m in zip(calls, returned):
        n = int(m["optimizer_steps"])
        assert n >= 1 and seen == [(k, n) for k in range(1, n + 1)]


def test_resumed_run_purges_tensorboard_events_after_the_checkpoint(tmp_path):
    """Iterations 0-3 logged, the process dies, the checkpoint was iteration 1: the resumed fan-out
    (start_step 2) drops JSONL lines > 1 and TensorBoard hides the dead process's events >= 2."""
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (pip install tensorboard)")
    from guigym.train.metrics_sinks import open_sinks

    cfg = from_dict({**recipe(tmp_path, tmp_path / "no-model"), "log": {"tensorboard": True}})
    run = Path(cfg.run.dir)
    first = open_sinks(cfg, run, start_step=0)
    assert first.names == ["jsonl", "tensorboard"]
    for step in range(4):
        first.log(step, {"loss": 10.0 + step})
    first.close()
    again = open_sinks(cfg, run, start_step=2)
    assert again.truncate_after(1) == 2
    for step in (2, 3):
        again.log(step, {"loss": 20.0 + step, "kl": float("nan")})  # NaN -> null, not a scalar
    again.close()
    rows = read_metrics(run / "metrics.jsonl")
    assert [(r["step"], r["loss"]) for r in rows] == [(0, 10.0), (1, 11.0), (2, 22.0), (3, 23.0)]
    assert rows[2]["kl"] is None
    acc = _events(run / "tb")
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(0, 10.0), (1, 11.0), (2, 22.0), (3, 23.0)]
    assert "kl" not in acc.Tags()["scalars"]


# ---- missing packages, W&B ----------------------------------------------------------------------
def test_missing_packages_are_config_errors_naming_the_field(monkeypatch, tmp_path):
    from guigym.train import metrics_sinks
    from guigym.train.loop import Trainer

    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    with pytest.raises(ConfigError, match=r"log\.wandb: true needs the wandb package"):
        metrics_sinks.check(LogConfig(wandb=True))
    # the trainer says so before it loads anything (model.path does not even exist)
    cfg = from_dict({**recipe(tmp_path, tmp_path / "no-model"), "log": {"wandb": True}})
    with pytest.raises(ConfigError, match=r"log\.wandb") as err:
        Trainer(cfg, log=lambda m: None).build()
    assert "model.path" not in str(err.value)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(ConfigError, match=r"log\.tensorboard: true needs the tensorboard package"):
        metrics_sinks.check(LogConfig(tensorboard=True))
    metrics_sinks.check(LogConfig())  # nothing enabled: nothing imported


def test_old_run_tensorboard_key_still_enables_it(tmp_path):
    cfg = recipe(tmp_path, tmp_path)
    cfg["run"]["tensorboard"] = True
    assert from_dict(cfg).log.tensorboard is True
    with pytest.raises(ConfigError, match=r"log\.tensorbord: unknown key \(did you mean 'tensorboard'\?\)"):
        from_dict({**recipe(tmp_path, tmp_path), "log": {"tensorbord": True}})


def test_wandb_offline_run_gets_the_same_scalars(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb is not installed (pip install 'guigym[wandb]')")
    from guigym.train.metrics_sinks import open_sinks

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = from_dict({**recipe(tmp_path, tmp_path / "no-model"), "log": {"wandb": True}})
    run = Path(cfg.run.dir)
    run.mkdir(parents=True)
    fan = open_sinks(cfg, run)
    sink = fan.sinks[-1]
    assert fan.names == ["jsonl", "wandb"] and sink.mode == "offline"
    run_id = (run / "wandb_run_id").read_text().strip()
    assert sink.run.id == run_id
    for step in range(3):
        fan.log(step, {"loss": 1.0 / (step + 1), "rollout/success_rate": 0.25 * step, "note": "x"})
    summary = dict(sink.run.summary)
    fan.close()
    assert summary["loss"] == pytest.approx(1.0 / 3) and summary["rollout/success_rate"] == 0.5
    assert "note" not in summary
    assert list((run / "wandb").glob(f"offline-run-*-{run_id}"))  # nothing was sent anywhere


# ---- progress bars ------------------------------------------------------------------------------
class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_auto_off_without_a_terminal_or_in_ci(monkeypatch):
    from guigym.train.progress import progress_enabled

    monkeypatch.delenv("CI", raising=False)
    assert progress_enabled(None, _Tty()) is True
    assert progress_enabled(None, io.StringIO()) is False  # piped / redirected
    monkeypatch.setenv("CI", "true")
    assert progress_enabled(None, _Tty()) is False
    monkeypatch.setenv("CI", "false")
    assert progress_enabled(None, _Tty()) is True
    assert progress_enabled(True, io.StringIO()) is True and progress_enabled(False, _Tty()) is False


def test_progress_bars_count_rollouts_updates_and_iterations():
    pytest.importorskip("rich")
    from guigym.train.progress import TrainProgress

    off = TrainProgress(5, enabled=False)
    off.begin("rollout", 3)
    off.advance("rollout")
    off.close()  # a disabled display does nothing and needs nothing
    p = TrainProgress(5, start=2, enabled=True)
    try:
        p.begin("rollout", 8, note="iteration 2")
        for _ in range(3):
            p.advance("rollout")
        p.begin("update", None)
        p.set("update", 2, 4)
        p.iteration_done("SR 0.5")
        tasks = {t.description: t for t in p._p.tasks}
        assert (tasks["iterations"].completed, tasks["iterations"].total) == (3, 5)
        assert (tasks["rollout"].completed, tasks["rollout"].total) == (3, 8)
        assert (tasks["update"].completed, tasks["update"].total) == (2, 4)
        p.begin("rollout", 2)
        assert p._p.tasks[1].completed == 0 and p._p.tasks[1].total == 2  # reset per collection
    finally:
        p.close()


# ---- guigym report --train ----------------------------------------------------------------------
def _png_size(path: Path) -> tuple[int, int]:
    from PIL import Image

    with Image.open(path) as im:
        return im.size


def test_report_of_a_training_run(trained):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install matplotlib)")
    from guigym.train.report import train_report

    run, _, _ = trained
    rows = read_metrics(run / "metrics.jsonl")
    rep = train_report(run)
    want = ["success rate", "reward", "loss", "KL", "clip fraction", "entropy", "staleness"]
    assert rep.panels == want and rep.axes_titles == want and rep.rows == ITERATIONS
    assert rep.keys["KL"] == ["approx_kl", "approx_kl_k1"]  # beta = 0: no reference-model kl
    assert rep.png == run / "learning_curve.png" and _png_size(rep.png) == (1260, 900)  # 3 x 3 grid, 100 dpi
    by_key = {s.key: s for s in rep.summary}
    assert by_key["loss"].last == rows[-1]["loss"] and by_key["loss"].first == rows[0]["loss"]
    assert by_key["rollout/success_rate"].best == 0.5 and by_key["rollout/success_rate"].best_step == 0


def _write(path: Path, rows: list, tail: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows) + tail)
    return path


def test_report_summary_and_panels_from_known_values(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install matplotlib)")
    from guigym.train.report import train_report

    rows = [{"step": 0, "time": 1.0, "rollout/success_rate": 0.25, "rollout/reward_mean": 0.3, "kl": 0.01},
            {"step": 1, "time": 2.0, "rollout/success_rate": 0.75, "rollout/reward_mean": 0.8, "kl": None},
            {"step": 2, "time": 3.0, "rollout/success_rate": 0.5, "rollout/reward_mean": 0.9, "kl": 0.04,
             "note": "text is not plotted"}]
    path = _write(tmp_path / "run" / "metrics.jsonl", rows, tail='{"step": 3, "time": 4.0, "rollout/succ')
    rep = train_report(tmp_path / "run", png=tmp_path / "out" / "curve.png")
    assert rep.skipped_torn_line and rep.rows == 3 and rep.source == path
    assert rep.panels == rep.axes_titles == ["success rate", "reward", "KL"]
    assert _png_size(tmp_path / "out" / "curve.png") == (1260, 300)  # one row of 3 panels
    s = {x.key: x for x in rep.summary}
    assert set(s) == {"rollout/success_rate", "rollout/reward_mean", "kl"}
    sr = s["rollout/success_rate"]
    assert (sr.points, sr.first, sr.last, sr.min, sr.max, sr.best, sr.best_step) == (3, 0.25, 0.5, 0.25, 0.75, 0.75, 1)
    assert (s["rollout/reward_mean"].last, s["rollout/reward_mean"].best, s["rollout/reward_mean"].best_step) == \
        (0.9, 0.9, 2)
    assert (s["kl"].points, s["kl"].last, s["kl"].best) == (2, 0.04, None)  # null is a gap; KL has no "best"
    line = next(x for x in rep.text.splitlines() if x.startswith("rollout/success_rate"))
    assert line.split() == ["rollout/success_rate", "3", "0.25", "0.5", "0.25", "0.75", "0.75", "(1)"]
    one = train_report(_write(tmp_path / "one.jsonl", [{"step": 0, "staleness_mean": 1.0}]))
    assert one.axes_titles == ["staleness"] and _png_size(one.png) == (420, 300)


@pytest.mark.parametrize("content, where, what", [
    ('{"step": 0, "loss": 1.0}\n{"step": 1, "loss": \n{"step": 2, "loss": 1.0}\n', ":2:", "not valid JSON"),
    ('{"step": 0, "loss": 1.0}\n[1, 2]\n', ":2:", "expected a JSON object"),
    ('{"loss": 1.0}\n', ":1:", "'step' must be an integer"),
    ('{"step": "3", "loss": 1.0}\n', ":1:", "'step' must be an integer"),
    ("", "", "no metrics rows"),
    ('{"step": 0, "time": 1.0, "custom": 2.0}\n', "", "none of the plotted metrics"),
])
def test_malformed_metrics_name_the_file_and_line(tmp_path, content, where, what):
    from guigym.train.report import train_report

    path = tmp_path / "metrics.jsonl"
    path.write_text(content)
    with pytest.raises(ConfigError) as err:
        train_report(path)
    assert f"{path}{where}" in str(err.value) and what in str(err.value)
    assert not (tmp_path / "learning_curve.png").exists()


def test_cli_report_train(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install matplotlib)")
    from guigym.cli import main

    run = tmp_path / "run"
    assert main(["report", "--train", str(run)]) == 2
    assert f"{run / 'metrics.jsonl'}: no such metrics file" in capsys.readouterr().err
    _write(run / "metrics.jsonl", [{"step": i, "time": float(i), "loss": 1.0 - 0.1 * i, "clip_frac": 0.1}
                                   for i in range(4)])
    assert main(["report", str(run), "--train"]) == 0
    out = capsys.readouterr().out
    assert "4 iteration(s)" in out and f"learning curves: {run / 'learning_curve.png'} (loss, clip fraction)" in out
    loss = next(x for x in out.splitlines() if x.startswith("loss ")).split()
    assert loss[1:4] == ["4", "1", "0.7"] and loss[-1] == "-"
    assert math.isclose(float(loss[3]), 0.7)
    _write(run / "metrics.jsonl", ['{"step": 0}', "not json"])
    assert main(["report", "--train", str(run)]) == 2
    assert f"{run / 'metrics.jsonl'}:2: not valid JSON" in capsys.readouterr().err
