"""The CPU recipes of issue 15 end to end on real MiniWoB pages with the tiny model:
recipes/webrl_miniwob_tiny.yaml and recipes/uimem_miniwob_tiny.yaml run 2 iterations, SIGKILL
themselves after logging iteration 1 (before its checkpoint), and ``--resume`` redoes iteration 1
from checkpoint 0 on the stored rollouts exactly as the killed run did: the same update, replay
buffer, curriculum tasks and critic (WebRL), the same memory (UI-Mem), nothing counted twice."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from guigym.train.metrics_log import read_metrics  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SAME = ("samples", "tokens", "rollout/reward_mean", "rollout/trajectories", "rollout/groups_trained")  # injected_stored: 0 on the rerun (already stored)


def _kill_then_resume(tmp_path: Path, name: str) -> tuple[dict, list[dict], list[str], Path]:
    """Run recipe ``name`` for 2 iterations, SIGKILLed after logging iteration 1; returns (config,
    the killed run's metrics, the resume command, run dir)."""
    cfg = yaml.safe_load((ROOT / "recipes" / f"{name}.yaml").read_text())
    cfg["run"].update(name=name, dir=str(tmp_path / "run"), iterations=2)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "guigym.train.loop", str(recipe)]
    env = {**os.environ, "GUIGYM_TRAIN_FAULT": "after_log:1", "PYTHONPATH": str(ROOT)}
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, start_new_session=True)
    assert p.returncode == -signal.SIGKILL, p.stderr[-3000:]
    run = Path(cfg["run"]["dir"])
    assert sorted(c.name for c in (run / "checkpoints").iterdir()) == ["ckpt-000000"]
    return cfg, read_metrics(run / "metrics.jsonl"), cmd + ["--resume"], run


def _resume(cmd: list[str], run: Path) -> list[dict]:
    env = {**os.environ, "GUIGYM_TRAIN_FAULT": "", "PYTHONPATH": str(ROOT)}
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "continuing at 1" in p.stdout and "dropped 1 line" in p.stdout
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1]
    assert rows[1]["rollout/reused_from_store"] == 1.0
    return rows


def _same_update(killed: list[dict], resumed: list[dict]) -> None:
    for k in SAME:
        assert resumed[1].get(k) == killed[1].get(k), k
    assert resumed[1]["loss"] == pytest.approx(killed[1]["loss"], abs=1e-6)


def _state(run: Path, ckpt: str) -> dict:
    return json.loads((run / "checkpoints" / ckpt / "state.json").read_text())


def _plugin(state: dict, chain: str, name: str) -> dict:
    return next(p["state"] for p in state["plugins"][chain] if p["name"] == name)


def _store(run: Path):
    from guigym.train.data.store import DataStore

    store = DataStore.for_run_dir(str(run))
    import sqlalchemy as sa

    run_id = store._read(lambda c: c.execute(sa.text("select run_id from runs")).scalar_one())
    return store, run_id


def test_webrl_recipe_kill9_resume_keeps_replay_curriculum_and_critic(tmp_path):
    cfg, killed, cmd, run = _kill_then_resume(tmp_path, "webrl_miniwob_tiny")
    # what the killed run left: checkpoint 0 (critic v1, replay buffer of iteration 0's successes),
    # iteration 1's rollouts, phase-1 tasks and critic v2 written after checkpoint 0
    ck0 = _state(run, "ckpt-000000")
    assert _plugin(ck0, "advantage", "webrl_gae")["version"] == 1
    buffer0 = _plugin(ck0, "group_builder", "webrl_replay")["buffer"]
    store, run_id = _store(run)
    try:
        added = store.added_tasks(run_id)
        it0 = [t for t in store.get_trajectories(run_id, source="on_policy", with_steps=False)
               if t.info["iteration"] == 0]
        replay1 = sorted(t.traj_id for t in store.get_trajectories(run_id, source="replay", with_steps=False)
                         if t.info.get("injected_at_iteration") == 1)
    finally:
        store.close()
    assert {e["traj_id"] for e in buffer0} == {t.traj_id for t in it0 if t.success}
    assert buffer0 and replay1, "iteration 0 had a success, replayed in iteration 1 (seeded run)"
    assert added and {r["iteration"] for r in added} == {1}
    head2 = torch.load(run / "webrl_critic" / "v000002" / "value_head.pt")

    resumed = _resume(cmd, run)
    _same_update(killed, resumed)  # same data: replay members and the perplexity filter included
    ck1 = _state(run, "ckpt-000001")
    assert _plugin(ck1, "advantage", "webrl_gae")["version"] == 2
    assert _plugin(ck1, "task_sources", "webrl_curriculum")["last_phase"] == 1
    assert [r["task_id"] for r in added] == [t for t in ck1["tasks"] if t not in cfg["env"]["tasks"]]
    # iteration 1's critic refit from the restored v1 on the same steps: the same weights
    again = torch.load(run / "webrl_critic" / "v000002" / "value_head.pt")
    assert all(torch.equal(head2[k], again[k]) for k in head2)
    assert not torch.equal(again["weight"], torch.zeros_like(again["weight"]))  # trained, not the fresh head
    store, run_id = _store(run)
    try:
        assert store.added_tasks(run_id) == added  # regenerated identically, stored once
        trajs = store.get_trajectories(run_id, with_steps=False)
        assert len({t.traj_id for t in trajs}) == len(trajs)
        assert sorted(t.traj_id for t in trajs if t.source == "replay" and t.info.get("injected_at_iteration") == 1) \
            == replay1
        gen = [t for t in trajs if t.source == "on_policy" and t.task_id in {r["task_id"] for r in added}]
        assert gen and all(t.info["reward_source"] in ("verifier", "orm") and t.info["task_provenance"]["phase"] == 1
                           for t in gen)
    finally:
        store.close()


def test_uimem_recipe_kill9_resume_keeps_the_memory(tmp_path):
    cfg, killed, cmd, run = _kill_then_resume(tmp_path, "uimem_miniwob_tiny")
    mem0 = _plugin(_state(run, "ckpt-000000"), "group_builder", "uimem_evolve")["memory"]
    assert mem0["absorbed"] == 0 and mem0["entries"]
    after_kill = json.loads((run / "uimem_memory.json").read_text())  # iteration 1 absorbed, not checkpointed
    assert after_kill["absorbed"] == 1

    resumed = _resume(cmd, run)
    _same_update(killed, resumed)
    mem1 = _plugin(_state(run, "ckpt-000001"), "group_builder", "uimem_evolve")["memory"]
    # checkpoint 0's memory restored, iteration 1 absorbed once: what the killed run had
    key = lambda m: (m["absorbed"], m["ema"], m["templates"], sorted(json.dumps(e, sort_keys=True) for e in m["entries"]))
    assert key(mem1) == key(after_kill)
    assert json.loads((run / "uimem_memory.json").read_text())["absorbed"] == 1
    store, run_id = _store(run)
    try:
        trajs = store.get_trajectories(run_id, with_steps=False)
    finally:
        store.close()
    assert len({t.traj_id for t in trajs}) == len(trajs) == 2 * 2 * cfg["rollout"]["num_generations"]
    levels = {t.guidance_level for t in trajs if t.info["iteration"] == 1}
    assert levels - {0}, "iteration 1 was guided from the memory of iteration 0"
