"""guigym eval: parallel episodes, atomic results, trajectories, resume without redoing work."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from guigym.cli import main
from guigym.eval.runner import append_jsonl, read_jsonl
from guigym.eval.summary import episode_ror, summarize


def run_cli(*args: str) -> int:
    return main(["eval", "--quiet", *args])


def test_eval_writes_results_trajectories_and_resumes(tmp_path):
    out = tmp_path / "run"
    assert run_cli("--tasks", "click-test,enter-text", "--agent", "random", "--num-envs", "2",
                   "--episodes", "2", "--max-steps", "3", "--out", str(out)) == 0
    records = read_jsonl(out / "results.jsonl")
    assert sorted(r["key"] for r in records) == sorted(
        f"{t}/{s}/0" for t in ("click-test", "enter-text") for s in (0, 1))
    assert all(r["status"] == "done" and 1 <= r["steps"] <= 3 for r in records)
    for r in records:
        episode = json.loads((out / r["trajectory_dir"] / "episode.json").read_text())
        assert len(episode["steps"]) == r["steps"]
        assert all(s["action_text"] for s in episode["steps"])
        pngs = sorted((out / r["trajectory_dir"]).glob("step_*.png"))
        assert len(pngs) == r["steps"] + 1, "one screenshot per observation"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["overall"]["episodes"] == 4

    # simulate a run killed mid-write: drop two finished episodes and leave a torn line
    keep = records[:2]
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in keep) + '{"key": "torn')
    assert run_cli("--tasks", "click-test,enter-text", "--agent", "random", "--num-envs", "2",
                   "--episodes", "2", "--max-steps", "3", "--out", str(out)) == 0
    after = [r for r in read_jsonl(out / "results.jsonl")]
    assert len(after) == 4, "only the two missing episodes were run again"
    assert {r["key"] for r in after} == {r["key"] for r in records}

    # a third run with everything done does nothing
    assert run_cli("--tasks", "click-test,enter-text", "--agent", "random", "--num-envs", "2",
                   "--episodes", "2", "--max-steps", "3", "--out", str(out)) == 0
    assert len(read_jsonl(out / "results.jsonl")) == 4


def test_lost_episodes_do_not_count_as_failures(tmp_path):
    path = tmp_path / "results.jsonl"
    append_jsonl(path, {"key": "a/0/0", "task_id": "a", "seed": 0, "status": "lost", "score": 0.0, "success": False})
    append_jsonl(path, {"key": "b/0/0", "task_id": "b", "seed": 0, "status": "done", "score": 1.0, "success": True})
    s = summarize(read_jsonl(path))
    assert s["overall"]["episodes"] == 1 and s["overall"]["lost"] == 1
    assert s["overall"]["success_rate"] == 1.0
    append_jsonl(path, {"key": "a/0/0", "task_id": "a", "seed": 0, "status": "done", "score": 0.0, "success": False})
    s = summarize(read_jsonl(path))
    assert s["overall"]["episodes"] == 2 and s["overall"]["lost"] == 0 and s["overall"]["success_rate"] == 0.5


def test_pass_at_k_counts_a_seed_solved_if_any_attempt_succeeds():
    recs = [{"key": f"t/0/{a}", "task_id": "t", "seed": 0, "status": "done", "success": a == 1, "score": float(a == 1)}
            for a in range(3)]
    recs.append({"key": "t/1/0", "task_id": "t", "seed": 1, "status": "done", "success": False, "score": 0.0})
    s = summarize(recs)["per_task"]["t"]
    assert s["pass_at_k"] == 0.5 and abs(s["success_rate"] - 0.25) < 1e-9


def test_cli_rejects_unknown_task_and_agent(tmp_path, capsys):
    assert run_cli("--tasks", "nope", "--out", str(tmp_path / "x")) == 2
    assert "unknown MiniWoB task(s): nope" in capsys.readouterr().err
    assert run_cli("--tasks", "click-test", "--agent", "gpt9", "--out", str(tmp_path / "y")) == 2
    assert "unknown agent 'gpt9'" in capsys.readouterr().err


def test_console_script_is_installed():
    out = subprocess.run([sys.executable, "-m", "guigym.cli", "tasks", "list"], capture_output=True, text=True, check=True)
    assert "click-test" in out.stdout.split()


def test_androidlab_metrics_hand_computed():
    def rec(key, success, steps, ref=None, subgoals=None, ror=None, ops=0, changing=0):
        return {"key": key, "task_id": key.split("/")[0], "seed": 0, "status": "done", "success": success,
                "score": float(success), "steps": steps, "reference_steps": ref, "operations": ops, "ror": ror,
                "changing_operations": changing, "verifier": {"subgoals": subgoals} if subgoals else {}}

    recs = [
        rec("a/0/0", True, 4, ref=2, subgoals=[True, True], ror=1.0),    # RRR 0.5
        rec("b/0/0", True, 5, ref=5, subgoals=[True, False, False], ror=0.5),  # RRR 1.0
        rec("c/0/0", False, 9, ref=3, subgoals=[False, False], ror=0.25),  # failed: no RRR
    ]
    s = summarize(recs)["overall"]
    assert abs(s["rrr"] - 0.75) < 1e-12
    assert abs(s["sub_goal_sr"] - (1.0 + 1 / 3 + 0.0) / 3) < 1e-12
    assert abs(s["ror"] - 1.75 / 3) < 1e-12  # AndroidLab: the mean of the episodes' ROR
    # a record from before ``ror`` was recorded: its share of screen-changing operations (2/5)
    assert abs(summarize([rec("d/0/0", True, 6, ops=5, changing=2)])["overall"]["ror"] - 0.4) < 1e-12
    assert summarize([rec("d/0/0", True, 2)])["overall"]["rrr"] is None
    # AndroidLab-v0's verifier: {key: bool} sub-goals and its own subgoal_score (1 when complete)
    lab = [rec("e/0/0", False, 3), rec("f/0/0", True, 2)]
    lab[0]["verifier"] = {"subgoals": {"1": True, "2": False, "3": False, "4": True}}
    lab[1]["verifier"] = {"subgoals": {"1": False}, "subgoal_score": 1.0}  # complete overrides sub-goals
    assert abs(summarize(lab)["overall"]["sub_goal_sr"] - (0.5 + 1.0) / 2) < 1e-12


def test_episode_ror_is_androidlabs_formula():
    # N steps, unchanged flags u: 1 - sum(u[:N-2]) / (N - 1), worked by hand:
    # [T, F, T, T]: the first two count (T, F) -> 1 - 1/3; the last two never count
    assert abs(episode_ror([True, False, True, True]) - 2 / 3) < 1e-12
    assert abs(episode_ror([True, True, True]) - 0.5) < 1e-12  # only the first counts: 1 - 1/2
    assert episode_ror([True, True]) == 1.0 and episode_ror([True]) == 1.0  # nothing counts
    assert episode_ror([None, False, True, False, False]) == 1.0 - 1 / 4  # unknown counts as changed
    assert episode_ror([]) is None


def test_eval_records_screen_changes_for_ror(tmp_path):
    out = tmp_path / "ror"
    assert run_cli("--tasks", "click-test", "--agent", "noop", "--num-envs", "1", "--episodes", "1",
                   "--max-steps", "2", "--out", str(out)) == 0
    (r,) = read_jsonl(out / "results.jsonl")
    assert r["operations"] == 2 and r["changing_operations"] == 0, "waiting never changes the screen"
    episode = json.loads((out / r["trajectory_dir"] / "episode.json").read_text())
    assert [s["screen_changed"] for s in episode["steps"]] == [False, False]


def test_agent_options_reach_the_agent_and_bad_ones_are_refused(tmp_path, capsys):
    from guigym.agents import make_agent
    from guigym.cli import _kv_opts

    assert _kv_opts(["platform=android", "seed=3"]) == {"platform": "android", "seed": 3}
    agent = make_agent("random", **_kv_opts(["platform=android"]))
    import numpy as np

    agent.reset({"seed": 0})
    verbs = {agent.act({"screenshot": np.zeros((50, 40, 3), np.uint8)}).split("(")[0] for _ in range(60)}
    assert verbs <= {"tap", "long_press", "swipe", "type", "back", "home", "enter"} and "tap" in verbs
    assert run_cli("--tasks", "click-test", "--agent", "random", "--agent-opt", "colour=red",
                   "--out", str(tmp_path / "z")) == 2
    assert "unexpected keyword argument 'colour'" in capsys.readouterr().err


def test_eval_cli_runs_webarena_tasks_from_a_config_file(tmp_path, capsys):
    """`guigym eval --env WebArena-v0 --env-opt config_file=... --env-opt urls=...` against the
    loopback test shop: the chosen config tasks run and are scored (a no-op agent scores 0 and is
    never counted as lost); missing or unknown task configs are refused with exit 2."""
    sys.path.insert(0, str(Path(__file__).parent))
    from webarena_site import TASKS_FILE, ShopSite

    assert run_cli("--env", "WebArena-v0", "--agent", "noop", "--out", str(tmp_path / "x")) == 2
    assert "--env-opt config_file=" in capsys.readouterr().err
    assert run_cli("--env", "WebArena-v0", "--env-opt", f"config_file={TASKS_FILE}", "--tasks", "99",
                   "--agent", "noop", "--out", str(tmp_path / "x")) == 2
    assert "webarena.99" in capsys.readouterr().err
    site = ShopSite()
    try:
        out = tmp_path / "run"
        assert run_cli("--env", "WebArena-v0", "--env-opt", f"config_file={TASKS_FILE}",
                       "--env-opt", json.dumps({"shopping": site.url}).join(["urls=", ""]), "--tasks", "1,webarena.2",
                       "--agent", "noop", "--num-envs", "1", "--max-steps", "2", "--no-screenshots",
                       "--out", str(out)) == 0
    finally:
        site.close()
    records = read_jsonl(out / "results.jsonl")
    assert sorted(r["task_id"] for r in records) == ["webarena.1", "webarena.2"]
    assert all((r["status"], r["success"], r["score"]) == ("done", False, 0.0) for r in records), records
