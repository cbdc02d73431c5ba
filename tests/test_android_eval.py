"""`guigym eval` on the Android envs end to end, through the REAL adb server and stand-in devices:
AndroidLab's SR / Sub-Goal SR / RRR / ROR in the summary and the HTML report (against values
computed by hand in the comments), one device per env worker (``serials``), and AndroidWorld's SR
by difficulty.

The agent is ``replay`` over episode records written here, so every step of every episode is known.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import guigym  # noqa: F401 - registers the envs
from guigym.agents import make_agent
from guigym.core.errors import ConfigError
from guigym.eval.runner import EvalConfig, run_eval

from _android_adb import adb_client  # noqa: F401 - the module's adb server
from test_android_env import ALARM_OFF, clock_standin, first_switch, tap_centre
from test_androidlab_checks import dump, N

pytestmark = pytest.mark.timeout(300)


def _recordings(root: Path, episodes: dict[tuple[str, int], list[str]]) -> str:
    """Episode records the replay agent reads: (task, seed) -> action texts."""
    for (task, seed), actions in episodes.items():
        d = root / task / f"{seed}_0"
        d.mkdir(parents=True)
        (d / "episode.json").write_text(json.dumps({"task_id": task, "seed": seed, "status": "done",
                                                    "steps": [{"action_text": a} for a in actions]}))
    return f"replay:{root}"


def _run(tmp_path: Path, agent: str, **cfg) -> list[dict]:
    config = EvalConfig(out_dir=tmp_path / "out", agent=agent, call_timeout_s=60.0, **cfg)
    return run_eval(config, lambda: make_agent(agent), progress=False)


def test_androidlab_eval_reports_sr_subgoal_sr_rrr_and_ror(tmp_path, adb_client):  # noqa: F811
    dev = clock_standin().start()
    try:
        switch = tap_centre(first_switch(ALARM_OFF))
        agent = _recordings(tmp_path / "rec", {
            # seed 0: a tap on empty space (screen unchanged), the switch (changes), done -> success
            ("clock_27", 0): ["tap(x=5, y=2395)", switch, "done()"],
            # seed 1: done at once on the alarm list with 3 PM off -> failure
            ("clock_27", 1): ["done()"],
        })
        _run(tmp_path, agent, env_id="AndroidLab-v0", task_ids=["clock_27"], episodes=2, num_envs=1,
             serials=[dev.serial], env_kwargs={"dialect": "canonical", "settle_s": 0})
    finally:
        dev.stop()
    out = tmp_path / "out"
    recs = {r["seed"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert [recs[0]["success"], recs[1]["success"]] == [True, False]
    assert recs[0]["reference_steps"] == 5  # ground_truth_length.json: "clock_27": 5
    # AndroidLab's ROR of N steps: 1 - (unchanged among the first N - 2) / (N - 1)
    # seed 0: N = 3, step 0 left the screen as it was -> 1 - 1/2 = 0.5; seed 1: N = 1 -> 1
    assert recs[0]["ror"] == pytest.approx(0.5) and recs[1]["ror"] == pytest.approx(1.0)
    s = json.loads((out / "summary.json").read_text())["overall"]
    assert s["success_rate"] == pytest.approx(0.5)
    assert s["sub_goal_sr"] == pytest.approx(0.5)  # complete -> 1, the failed one's single sub-goal unmet -> 0
    assert s["rrr"] == pytest.approx(5 / 3)  # successful episodes only: 5 reference steps / 3 taken
    assert s["ror"] == pytest.approx(0.75)  # (0.5 + 1) / 2 over the scored episodes
    html = (out / "report.html").read_text()
    overall = html.split("<h2>Overall</h2>")[1].split("</table>")[0]
    for head in ("Sub-Goal SR", "RRR", "ROR"):
        assert f"<th>{head}</th>" in overall
    cells = dict(re.findall(r'data-metric="(\w+)">([^<]*)<', overall))
    assert cells == {"sub_goal_sr": "50.0%", "rrr": "166.7%", "ror": "75.0%"}


def test_two_worker_androidworld_eval_gives_each_worker_its_device_and_sr_by_difficulty(tmp_path, adb_client):  # noqa: F811
    home = dump(N("TextView", "Settings", "", clickable=True))
    devs = [clock_standin().start(), clock_standin().start()]
    for d in devs:
        d.screens["home"] = home
    tasks = ["SystemBluetoothTurnOn", "SystemBluetoothTurnOnVerify", "TurnOffWifiAndTurnOnBluetooth"]
    agent = _recordings(tmp_path / "rec", {(t, 0): ["done()"] for t in tasks})
    try:
        records = _run(tmp_path, agent, env_id="AndroidWorld-v0", task_ids=tasks, num_envs=2,
                       serials=[d.serial for d in devs], env_kwargs={"dialect": "canonical", "settle_s": 0})
        seen = [[c for c in d.commands if c[:1] == ["svc"]] for d in devs]
    finally:
        for d in devs:
            d.stop()
    # both devices served episodes, and no episode's setup went to both: the three setups
    # (bluetooth disable / bluetooth enable / wifi enable + bluetooth disable) are split between them
    assert all(seen), seen
    assert sorted(map(tuple, seen[0] + seen[1])) == sorted(
        [("svc", "bluetooth", "disable"), ("svc", "bluetooth", "enable"), ("svc", "wifi", "enable"),
         ("svc", "bluetooth", "disable")])
    by_task = {r["task_id"]: r for r in records}
    assert {t: by_task[t]["difficulty"] for t in tasks} == {
        "SystemBluetoothTurnOn": "easy", "SystemBluetoothTurnOnVerify": "easy",
        "TurnOffWifiAndTurnOnBluetooth": "medium"}  # AndroidWorld's task_metadata.json
    # done at once: only the Verify task (already on after its setup) succeeds
    assert [by_task[t]["success"] for t in tasks] == [False, True, False]
    per = json.loads((tmp_path / "out" / "summary.json").read_text())["per_difficulty"]
    assert {k: (v["episodes"], v["success_rate"]) for k, v in per.items()} == {"easy": (2, 0.5), "medium": (1, 0.0)}
    assert "<h2>Per difficulty</h2>" in (tmp_path / "out" / "report.html").read_text()


def test_serials_must_be_one_distinct_device_per_env(tmp_path):
    base = dict(env_id="AndroidWorld-v0", task_ids=["SystemWifiTurnOn"], out_dir=tmp_path / "o", agent="noop")
    with pytest.raises(ConfigError, match="serials: each env needs its own device"):
        run_eval(EvalConfig(num_envs=2, serials=["a:1", "a:1"], **base), lambda: make_agent("noop"))
    with pytest.raises(ConfigError, match=r"serials: 1 device\(s\) for num_envs=2"):
        run_eval(EvalConfig(num_envs=2, serials=["a:1"], **base), lambda: make_agent("noop"))
    with pytest.raises(ConfigError, match="cannot be combined with a single serial"):
        run_eval(EvalConfig(num_envs=1, serials=["a:1"], env_kwargs={"serial": "b:2"}, **base),
                 lambda: make_agent("noop"))
    assert not (tmp_path / "o" / "results.jsonl").exists()


def test_trainer_env_config_takes_one_serial_per_worker():
    from guigym.envs.pool import per_env_kwargs
    from guigym.train.config import EnvConfig

    cfg = EnvConfig(id="AndroidWorld-v0", tasks=["SystemWifiTurnOn"], num_envs=2, serials=["s1:5555", "s2:5555"],
                    kwargs={"settle_s": 0})
    # what the trainer's EnvPool / RayEnvPool get: worker (or actor) i has device i, the rest shared
    assert per_env_kwargs(cfg.kwargs, cfg.num_envs, cfg.serials) == [
        {"settle_s": 0, "serial": "s1:5555"}, {"settle_s": 0, "serial": "s2:5555"}]
    assert per_env_kwargs(cfg.kwargs, cfg.num_envs, []) == {"settle_s": 0}  # no serials: kwargs as they are
    with pytest.raises(ValueError, match=r"env.serials: 1 device\(s\) for env.num_envs 2"):
        EnvConfig(id="AndroidWorld-v0", tasks=["t"], num_envs=2, serials=["s1:5555"])
    with pytest.raises(ValueError, match="env.serials: each env needs its own device"):
        EnvConfig(id="AndroidWorld-v0", tasks=["t"], num_envs=2, serials=["s1:5555", "s1:5555"])


def test_eval_cli_serials_set_the_worker_count_and_refuse_a_mismatch(tmp_path, capsys):
    from guigym.cli import main

    assert main(["eval", "--env", "AndroidWorld-v0", "--tasks", "SystemWifiTurnOn", "--serials", "a:1,b:2",
                 "--num-envs", "3", "--out", str(tmp_path / "x")]) == 2
    assert "--serials: 2 device(s) but --num-envs 3" in capsys.readouterr().err
    assert main(["eval", "--env", "AndroidWorld-v0", "--tasks", "SystemWifiTurnOn", "--serials", "a:1,a:1",
                 "--out", str(tmp_path / "y")]) == 2
    assert "--serials: each env needs its own device" in capsys.readouterr().err
