"""BEPA (issue 14, item 3; BEPA sec. 4, eqs. 1-4): LEVEL-1 plan abstraction and plan-conditioned
self-rolls (D_self) and the LEVEL-2 cache: seeding, rule-U refresh, replacement of only the first
failed trajectory and only on total failure, replay without the plan."""
from __future__ import annotations

import json
import random
import uuid

import pytest

torch = pytest.importorskip("torch")

from guigym.train.algorithms.context import PluginContext  # noqa: E402
from guigym.train.algorithms.estimators import ADVANTAGE_ESTIMATORS  # noqa: E402
from guigym.train.algorithms.registry import GROUP_BUILDERS  # noqa: E402
from guigym.train.data.store import DataStore  # noqa: E402
from guigym.train.data.types import Group, Step, Trajectory  # noqa: E402


def traj(task: str, success: bool, run_id: str, guidance: int = 0) -> Trajectory:
    steps = [Step(prompt_ids=[1, 2], response_ids=[3], rollout_logprobs=[-0.7], policy_version=0)]
    return Trajectory(traj_id=uuid.uuid4().hex, run_id=run_id, task_id=task, seed=0, group_id="g", steps=steps,
                      reward=float(success), success=success, guidance_level=guidance)


def ctx(i, store, run):
    return PluginContext(iteration=i, rng=random.Random(i), store=store, run_id=run)


def test_cache_seeded_refreshed_and_replaces_only_the_first_failure_on_total_failure(tmp_path):
    store = DataStore.for_run_dir(str(tmp_path))
    try:
        seed_run, run = store.start_run("dself"), store.start_run("train")
        seed = traj("A", True, seed_run)
        store.add_trajectories(seed_run, [seed, traj("A", False, seed_run)])
        b = GROUP_BUILDERS.build("bepa_cache", seed_run_id=seed_run)
        a = [traj("A", False, run) for _ in range(4)]
        bw = [traj("B", True, run), traj("B", True, run), traj("B", False, run)]
        c = [traj("C", False, run) for _ in range(2)]
        store.add_trajectories(run, a + bw + c)
        out = b([Group("a", "A", a), Group("b", "B", bw), Group("c", "C", c)], ctx=ctx(0, store, run))
        ga, gb, gc = out
        # eq. 3: T^ = {tau_off} U {tau_2..tau_N}: same size, member 0 replaced, the rest untouched
        assert len(ga.trajectories) == 4 and ga.trajectories[0].source == "cache"
        assert ga.trajectories[0].info["cache_origin"] == seed.traj_id
        assert ga.trajectories[0].steps[0].rollout_logprobs == [-0.7]  # behaviour log-probs of its generation
        assert [t.traj_id for t in ga.trajectories[1:]] == [t.traj_id for t in a[1:]]
        assert [t.traj_id for t in gb.trajectories] == [t.traj_id for t in bw]  # a success: no replacement
        assert [t.traj_id for t in gc.trajectories] == [t.traj_id for t in c]   # no cache for C
        # rule U: B's cache is one of its successes (random.Random(0).randrange(2))
        assert b.cache["B"] == bw[random.Random(0).randrange(2)].traj_id
        # eq. 4 over the finalised group: rewards [1, 0, 0, 0] -> 1.5 and -0.5 (unbiased std 0.5)
        adv = ADVANTAGE_ESTIMATORS.build("grpo")([ga], {t.traj_id: t.reward for t in ga.trajectories})
        assert [adv[t.traj_id] for t in ga.trajectories] == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-3)
        # next iteration, resumed from the state: B fails totally -> its refreshed cache replaces member 0
        b2 = GROUP_BUILDERS.build("bepa_cache", seed_run_id=seed_run)
        b2.load_state_dict(json.loads(json.dumps(b.state_dict())))
        b_fail = [traj("B", False, run) for _ in range(3)]
        store.add_trajectories(run, b_fail)
        g, = b2([Group("b1", "B", b_fail)], ctx=ctx(1, store, run))
        assert g.trajectories[0].info["cache_origin"] == b.cache["B"]
        assert [t.source for t in g.trajectories] == ["cache", "on_policy", "on_policy"]
        # a D_self trajectory collected with a plan but without its plain prompts is refused when it
        # would be replayed, never trained with its plan
        store.add_trajectories(seed_run, [traj("D", True, seed_run, guidance=1)])
        d_fail = [traj("D", False, run) for _ in range(2)]
        store.add_trajectories(run, d_fail)
        with pytest.raises(ValueError, match="guidance level 1 but step 0 has no unguided_prompt_ids"):
            GROUP_BUILDERS.build("bepa_cache", seed_run_id=seed_run)([Group("d", "D", d_fail)], ctx=ctx(0, store, run))
    finally:
        store.close()


def guided(task: str, success: bool, run_id: str) -> Trajectory:
    """A LEVEL-1 self-roll: prompt [1, 9, 9, 2] carried the plan, [1, 2] is the same prompt without it."""
    steps = [Step(prompt_ids=[1, 9, 9, 2], response_ids=[3], rollout_logprobs=[-0.4], policy_version=0,
                  info={"unguided_prompt_ids": [1, 2]})]
    return Trajectory(traj_id=uuid.uuid4().hex, run_id=run_id, task_id=task, seed=0, group_id="g", steps=steps,
                      reward=float(success), success=success, guidance_level=1,
                      info={"guidance": {"text": "Plan:\n1. click the button 'OK'", "level": 1, "source": "bepa_plan"}})


def test_level1_self_rolls_seed_the_cache_leave_the_group_and_are_replayed_without_the_plan(tmp_path):
    store = DataStore.for_run_dir(str(tmp_path))
    try:
        run = store.start_run("train")
        b = GROUP_BUILDERS.build("bepa_cache")
        self_roll = guided("A", True, run)
        fails = [traj("A", False, run) for _ in range(3)]
        store.add_trajectories(run, [self_roll] + fails)
        g, = b([Group("a", "A", [self_roll] + fails)], ctx=ctx(0, store, run))
        # eq. 2: the plan-conditioned success is E_x; it is not a sample of pi(.|x), so it left the group,
        # and the unguided members all failed, so eq. 3 replaced the first of them with E_x at once
        assert b.cache["A"] == self_roll.traj_id
        assert [t.source for t in g.trajectories] == ["cache", "on_policy", "on_policy"]
        replay = g.trajectories[0]
        assert [t.traj_id for t in g.trajectories[1:]] == [t.traj_id for t in fails[1:]]
        # "under the original instruction x without the plan": the plain prompt, the same response and
        # the behaviour log-probs recorded when it was generated (under the plan; eq. 5's ratio corrects)
        assert replay.steps[0].prompt_ids == [1, 2] and replay.steps[0].response_ids == [3]
        assert replay.steps[0].rollout_logprobs == [-0.4] and replay.guidance_level == 0
        assert "unguided_prompt_ids" not in replay.steps[0].info
        assert self_roll.steps[0].prompt_ids == [1, 9, 9, 2]  # the stored original is untouched
        # an unguided success wins rule U over D_self
        win = traj("A", True, run)
        store.add_trajectories(run, [win, guided("A", True, run)])
        b([Group("a2", "A", [win, fails[0]])], ctx=ctx(1, store, run))
        assert b.cache["A"] == win.traj_id
    finally:
        store.close()


def test_plan_abstraction_names_elements_by_role_and_name_never_by_id():
    from guigym.train.algorithms.bepa_plans import abstract_plan

    page = ('<a11y><node id="7" role="textbox" name="Username"/><node id="8" role="button" name="Log in"/>'
            '<node id="9" role="checkbox" name=""/></a11y>')
    plan = abstract_plan([({"name": "fill", "element": "7", "text": "ada"}, page),
                          ({"name": "wait", "seconds": 0.2}, page),
                          ({"name": "click", "element": "9"}, page),
                          ({"name": "click", "element": "8"}, page),
                          ({"name": "done"}, page)])
    assert plan == "Plan:\n1. fill 'ada' into the textbox 'Username'\n2. click the checkbox\n3. click the button 'Log in'"
    assert abstract_plan([({"name": "done"}, page)]) == ""


def test_bepa_recipe_runs_level1_self_rolls_from_oracle_plans_end_to_end(tmp_path):
    """recipes/bepa_miniwob_tiny.yaml shortened, in real Chromium: the oracle's plans condition the
    first members of each group; every guided step keeps the plain prompt (the same prompt without
    the plan) and guided members are never trained; any cache replay trains the plain prompt."""
    pytest.importorskip("transformers")
    import sqlite3
    from pathlib import Path

    import yaml

    from transformers import AutoTokenizer

    from guigym.train.config import from_dict
    from guigym.train.loop import Trainer

    root = Path(__file__).resolve().parents[1]
    cfg = yaml.safe_load((root / "recipes" / "bepa_miniwob_tiny.yaml").read_text())
    cfg["run"].update(dir=str(tmp_path / "run"), iterations=2)
    cfg["env"].update(tasks=["click-button", "enter-text"])
    cfg["rollout"].update(num_generations=4, groups_per_iteration=2)
    cfg["algorithm"]["plugin_options"]["bepa_plan"].update(members=2, until_cached=False)
    Trainer(from_dict(cfg), log=lambda m: None).run()

    db = sqlite3.connect(tmp_path / "run" / "guigym.db")
    (run_id,) = db.execute("select distinct run_id from trajectories").fetchone()
    trained = {r[0] for r in db.execute("select distinct traj_id from sample_usage")}
    db.close()
    store = DataStore.for_run_dir(str(tmp_path / "run"))
    try:
        trajs = {t.traj_id: t for t in store.get_trajectories(run_id)}
    finally:
        store.close()
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "run" / "init_model"))
    guided = [t for t in trajs.values() if t.guidance_level > 0]
    assert guided and all(t.source == "on_policy" for t in guided)
    for t in guided:
        g = t.info["guidance"]
        assert g["source"] == "bepa_plan" and g["text"].startswith("Plan:\n1. ")
        assert "element" not in g["text"] and "[" not in g["text"]  # roles and names, never ids
        for step in t.steps:
            full, plain = step.prompt_ids, step.info["unguided_prompt_ids"]
            assert len(plain) < len(full)
            assert g["text"] in tok.decode(full) and g["text"] not in tok.decode(plain)
    assert not trained & {t.traj_id for t in guided}  # D_self is not a sample of pi(.|x)
    for t in trajs.values():
        if t.source == "cache":
            origin = trajs[t.info["cache_origin"]]
            assert [s.prompt_ids for s in t.steps] == [s.info.get("unguided_prompt_ids") or s.prompt_ids
                                                      for s in origin.steps]
            assert t.guidance_level == 0


def test_plan_file_expert_reads_offline_plans_and_names_bad_lines(tmp_path):
    from guigym.train.algorithms.bepa_plans import PlanFileExpert

    f = tmp_path / "plans.jsonl"
    f.write_text('{"task_id": "os-1", "plan": "Plan:\\n1. open the terminal"}\n\n'
                 '{"task_id": "os-1", "seed": 7, "plan": "Plan:\\n1. open the settings"}\n')
    e = PlanFileExpert(str(f))
    assert e.plan("os-1", 7) == "Plan:\n1. open the settings"      # the seed's own plan wins
    assert e.plan("os-1", 0) == "Plan:\n1. open the terminal"      # else the task's plan
    assert e.plan("os-2", 0) is None
    f.write_text('{"task_id": "os-1", "plan": "x"}\n{"task_id": "os-2"}\n')
    with pytest.raises(ValueError, match=r"plans.jsonl:2: needs string fields 'task_id' and 'plan'"):
        PlanFileExpert(str(f))
    f.write_text('{"task_id": "os-1", "plan": "x", "seed": "3"}\n')
    with pytest.raises(ValueError, match=r"plans.jsonl:1: 'seed' must be an int"):
        PlanFileExpert(str(f))
    with pytest.raises(ValueError, match="cannot read"):
        PlanFileExpert(str(tmp_path / "missing.jsonl"))


@pytest.mark.parametrize("name", ["bepa_miniwob_tiny", "bepa_osworld_uitars7b"])
def test_bepa_recipes_build_their_plugins_with_the_paper_values(name, tmp_path):
    from pathlib import Path

    from guigym.train.config import load_recipe
    from guigym.train.loop import Trainer

    root = Path(__file__).resolve().parents[1]
    over = [f"run.dir={tmp_path}"]
    if name == "bepa_osworld_uitars7b":  # the recipe names the user's plan file; give it one
        (tmp_path / "plans.jsonl").write_text('{"task_id": "t", "plan": "Plan:\\n1. x"}\n')
        over.append(f"algorithm.plugin_options.bepa_plan.expert_options.path={tmp_path / 'plans.jsonl'}")
        cfg = load_recipe(root / "recipes" / f"{name}.yaml", over)
        assert (cfg.rollout.num_generations, cfg.env.max_steps, cfg.optim.learning_rate) == (8, 15, 1e-6)
        assert (cfg.algorithm.epsilon, cfg.algorithm.epsilon_high, cfg.algorithm.beta) == (0.2, 0.3, 0.0)
    else:
        cfg = load_recipe(root / "recipes" / f"{name}.yaml", over)
        assert cfg.rollout.num_generations == 8
    t = Trainer(cfg, log=lambda m: None)
    t.build_plugins()
    assert [n for n, _ in t.conditioner.members] == ["bepa_plan"]
    assert [n for n, _ in t.group_builder.members] == ["default", "bepa_cache"]
