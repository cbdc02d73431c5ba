"""bench/scale.py: the stated models, and the coupled arm really runs lockstep on LatencyModel-v0 envs
(envs idle while the policy generates, both idle while the trainer updates), on-policy."""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "bench" / "scale.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


S = _load()


def test_policy_and_trainer_models_are_the_stated_formulas():
    p = S.PolicyLatencyModel()
    assert p.batch_s(1) == p.floor_s == 1.28  # decode-latency floor for small batches
    assert p.batch_s(64) == pytest.approx(64 / 2.55)  # vLLM's published 2.55 req/s at saturation
    assert "2.55 requests/s" in p.source and "Qwen2-VL-7B" in p.source
    t = S.TrainerModel(gpus=8)
    assert t.update_s(100) == pytest.approx(8 * 7e9 * 2000 * 100 / (8 * 312e12 * 0.4))
    assert t.sync_s() == pytest.approx(2 * 7e9 / 12.5e9)


def test_busy_s_unions_per_worker():
    rows = [{"service": "env", "kind": "step", "worker": "env0", "start": 0.0, "end": 2.0},
            {"service": "env", "kind": "step", "worker": "env0", "start": 1.0, "end": 3.0},
            {"service": "env", "kind": "step", "worker": "env1", "start": 0.0, "end": 1.0},
            {"service": "policy", "kind": "generate", "worker": "w0", "start": 0.0, "end": 5.0}]
    assert S.busy_s(rows, "env") == 4.0 and S.busy_s(rows, "policy", "generate") == 5.0


def _args(**kw):
    base = dict(num_envs=3, group_size=2, groups=2, iterations=2, max_steps=4, n_tasks=4,
                latency=ROOT / "bench" / "data" / "latency_miniwob.json", time_scale=0.02, policy_workers=1,
                backend="process", ray_num_cpus=0.0, seed=0)
    base.update(kw)
    return argparse.Namespace(**base)


def test_coupled_arm_is_lockstep_and_on_policy():
    res = S.run_coupled(_args(), S.PolicyLatencyModel(), S.TrainerModel())
    m, ev = res.metrics, res.events
    assert m["trajectories"] == 2 * 2 * 2 and m["actions"] > 0 and m["updates"] == 2
    assert m["staleness_mean"] == 0.0 and m["staleness_max"] == 0  # coupled: always the latest weights
    assert 0 < m["u_policy"] <= 1 and 0 < m["u_env_exec"] <= 1 and 0 < m["trainer_idle"] < 1
    envs = [e for e in ev if e["service"] == "env"]
    gens = [e for e in ev if e["kind"] == "generate"]
    trains = [e for e in ev if e["kind"] == "train"]
    reloads = [e for e in ev if e["kind"] == "reload"]
    assert {e["worker"] for e in envs} == {"env0", "env1", "env2"} and len(trains) == 2 and len(reloads) == 2

    def overlap(a, b):
        return a["start"] < b["end"] and b["start"] < a["end"]

    # lockstep: no env works while a batch generates; nothing runs while the trainer updates or weights sync
    assert not any(overlap(e, g) for e in envs for g in gens)
    assert not any(overlap(x, t) for x in envs + gens for t in trains + reloads)
    # one closed batch per lockstep step: a batch holds every env that is still in an episode
    assert max(g["batch"] for g in gens) == 3


def test_decoupled_arm_reports_missing_when_not_importable(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "guigym.train.decoupled", None)  # import raises ImportError
    assert S.run_decoupled_arm(_args(), S.PolicyLatencyModel(), S.TrainerModel()) is None
    assert "decoupled arm: MISSING" in capsys.readouterr().out


def test_timeline_png_is_drawn(tmp_path):
    rows = [{"service": "env", "kind": "step", "worker": "env0", "start": 0.0, "end": 1.0},
            {"service": "policy", "kind": "generate", "worker": "w0", "start": 1.0, "end": 2.0},
            {"service": "trainer", "kind": "train", "worker": "trainer", "start": 2.0, "end": 3.0}]
    path = tmp_path / "t.png"
    lib = S.draw_timeline([S.ArmResult("coupled", {}, rows)], path)
    assert lib in ("matplotlib", "Pillow") and path.stat().st_size > 1000
    from PIL import Image

    with Image.open(path) as im:
        assert im.size[0] > 500
    path2 = tmp_path / "p.png"
    assert S._draw_pillow([("coupled", rows)], path2) == "Pillow" and path2.stat().st_size > 500
