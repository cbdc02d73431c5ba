"""bench/ablate.py quick mode (issue 14 item 5): one new arm (DART's experience pool, oracle expert
traces) trains end to end on real MiniWoB++ tasks, and every reported quantity is computed from
the run's DataStore -- changing the store changes the number."""
from __future__ import annotations

import importlib.util
import sqlite3
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import ablate  # noqa: E402


@pytest.fixture(scope="module")
def pool_run(one_torch_thread):
    if importlib.util.find_spec("miniwob") is None:
        pytest.skip("the miniwob package (MiniWoB++ pages) is not installed")
    out = ablate.run_one("pool", seed=0, iterations=2, keep=True, budget=ablate.QUICK)
    yield out
    import shutil

    shutil.rmtree(Path(out["run_dir"]).parent, ignore_errors=True)


def test_quick_budget_is_two_tasks_and_the_arm_differs_from_grpo_only_by_its_plugins(tmp_path):
    base = ablate.config("grpo", 0, 2, tmp_path, ablate.QUICK)
    pool = ablate.config("pool", 0, 2, tmp_path, ablate.QUICK)
    assert base["env"]["tasks"] == ablate.QUICK_TASKS and len(ablate.QUICK_TASKS) == 2
    assert ablate.EXPERT_TASK in ablate.QUICK_TASKS
    for section in ("env", "rollout", "model", "optim"):
        assert base[section] == pool[section]
    a, b = base["algorithm"], pool["algorithm"]
    changed = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
    assert changed == {"trajectory_sources", "group_builder", "plugin_options"}
    # SPA is measured in its own setting, against a plain-GRPO baseline of that setting
    spa, spa_base = ablate.config("spa", 0, 2, tmp_path), ablate.config("grpo", 0, 2, tmp_path, setting="redundant")
    assert spa["rollout"]["candidate_roles"] == spa_base["rollout"]["candidate_roles"] == "any"
    assert spa["env"] == spa_base["env"] and spa["env"]["max_steps"] == 3


def test_pool_arm_quantities_come_from_the_datastore(pool_run):
    run_dir, run_id = Path(pool_run["run_dir"]), pool_run["run_id"]
    db = sqlite3.connect(run_dir / "guigym.db")
    try:
        rows = db.execute("select traj_id, task_id, group_id, success, source, info from trajectories "
                          "where run_id = ?", (run_id,)).fetchall()
        used = {t for (t,) in db.execute("select distinct traj_id from sample_usage where run_id = ?", (run_id,))}
        expert = {t for (t,) in db.execute("select traj_id from trajectories where run_id != ? and source = 'expert' "
                                           "and success = 1", (run_id,))}
    finally:
        db.close()
    import json

    on_policy = [r for r in rows if r[4] == "on_policy"]
    # 2 iterations x 2 groups (epoch_shuffle: each quick task once per iteration) x 8 rollouts
    assert len(on_policy) == 32 and pool_run["groups"] == 4
    assert pool_run["rollouts_by_task"] == {t: 16 for t in ablate.QUICK_TASKS}
    groups: dict = {}
    for r in on_policy:
        groups.setdefault((json.loads(r[5])["iteration"], r[2]), []).append(r)
    share = sum(any(m[0] in used for m in g) for g in groups.values()) / len(groups)
    assert pool_run["nonzero_variance_share"] == pytest.approx(share)
    et = [r for r in on_policy if r[1] == ablate.EXPERT_TASK]
    assert pool_run["expert_task_success"] == pytest.approx(sum(r[3] for r in et) / len(et))
    # the pool: the oracle's stored successes; a member joins only a group whose rollouts all failed
    assert pool_run["expert_stored"] == len(expert) > 0
    pooled = [r for r in rows if r[4] == "pool"]
    assert pool_run["injected_pool"] == len(pooled)
    for r in pooled:
        info = json.loads(r[5])
        assert info["pool_origin"] in expert
        same = [g for (it, _), g in groups.items() if it == info["injected_at_iteration"] and g[0][1] == r[1]]
        assert same and any(not any(m[3] for m in g) for g in same)
    # not a placeholder: with the usage rows gone, no group counts as trained
    db = sqlite3.connect(run_dir / "guigym.db")
    try:
        db.execute("delete from sample_usage where run_id = ?", (run_id,))
        db.commit()
    finally:
        db.close()
    again = ablate.measure(run_dir, run_id, ablate.QUICK_TASKS, 2)
    assert again["nonzero_variance_share"] == 0.0 and again["groups"] == 4
    assert again["expert_task_success"] == pool_run["expert_task_success"]


def test_report_prints_a_verdict_and_the_reason_when_no_effect_shows():
    rows = [{"mechanism": m, "setting": "base", "seed": s, "groups": 4, "successes_by_task": {},
             "nonzero_variance_share": v, "expert_task_success": 0.0, "injected_pool": 0, "expert_stored": 1}
            for m, vals in (("grpo", (0.5, 0.25)), ("pool", (0.5, 0.5))) for s, v in enumerate(vals)]
    lines = ablate.report(rows, ["pool"])
    share = next(line for line in lines if line.startswith("pool") and "share" in line)
    assert "0.375" in share and "0.500" in share and "no separation at this budget" in share
    assert any("Why no clear effect" in line and "every rollout failed" in line for line in lines)
    assert ablate.verdict("down", (3.0, 0.1), (1.0, 0.1)) == "effect shows"
    assert ablate.verdict("up", (3.0, 0.1), (1.0, 0.1)) == "moved down, against the expectation"
    # every seed identical on both sides (FCF: 8 rollouts -> 0 on the impossible task in each run)
    assert ablate.verdict("down", (8.0, 0.0), (0.0, 0.0)) == "effect shows in every seed"
    assert ablate.verdict("up", (8.0, 0.0), (0.0, 0.0)) == "moved down in every seed, against the expectation"


def test_resume_runs_only_the_missing_pairs_seeds_outermost(tmp_path, monkeypatch):
    """A killed ablation keeps its rows (written after every run) and --resume runs only the
    (configuration, seed) pairs not in the file, first seeds first for every configuration."""
    import json

    def row(mech: str, seed: int) -> dict:
        return {"mechanism": mech, "setting": "base", "seed": seed, "iterations": 2, "groups": 4,
                "successes_by_task": {}, "nonzero_variance_share": 0.5, "expert_task_success": 0.0,
                "injected_replay": 0}

    ran: list = []

    def fake_run_one(mech, seed, iterations, keep, budget, setting):
        ran.append((mech, seed))
        return row(mech, seed)

    monkeypatch.setattr(ablate, "run_one", fake_run_one)
    out = tmp_path / "rows.json"
    # a 5-iteration row from another budget is not reused for a 2-iteration run
    out.write_text(json.dumps([row("grpo", 0), {**row("adapr", 0), "iterations": 5}]))
    rows = ablate.main(["--quick", "--mechanisms", "adapr", "--seeds", "2", "--json", str(out), "--resume"])
    assert ran == [("adapr", 0), ("grpo", 1), ("adapr", 1)]
    assert sorted((r["mechanism"], r["seed"]) for r in rows) == [("adapr", 0), ("adapr", 1), ("grpo", 0), ("grpo", 1)]
    assert json.loads(out.read_text()) == rows and not out.with_suffix(".tmp").exists()
    ran.clear()
    ablate.main(["--quick", "--mechanisms", "adapr", "--seeds", "2", "--json", str(out), "--resume"])
    assert ran == []  # everything is in the file
