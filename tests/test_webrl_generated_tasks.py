"""Curriculum-generated tasks in real envs (issue 15): an env builds a task from its stored spec
(``reset(options={"task": id, "task_spec": spec})``, ``GUIEnv.task_from_spec``) on MiniWoB-v0
and WebArena-v0; the trainer samples the new phase's tasks, rolls them out in real Chromium,
stores them with provenance and ``reward_source`` (verifier when the root's verifier survives,
else the ORM); the scheduler keeps the final observation's text for the ORM."""
from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import yaml

import guigym  # noqa: F401 - registers the envs
from guigym.core.errors import TaskSpecError
from guigym.train.rollout.scheduler import final_state_text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _id_of(a11y: str, role: str) -> str:
    m = re.search(rf'<{role} id="(\d+)"', a11y)
    assert m, f"no {role} in {a11y[:300]}"
    return m.group(1)


# ---- env hook -----------------------------------------------------------------------------------
def test_miniwob_builds_seeded_and_instruction_tasks_from_their_specs():
    env = gym.make("MiniWoB-v0", tasks=["enter-text"])
    try:
        obs, _ = env.reset(seed=7, options={"task": "enter-text"})
        seven = obs["instruction"]
        # a seeded spec: params.seed is the instance, whatever seed the caller passes
        spec = {"root": "enter-text", "params": {"seed": 7}, "has_verifier": True}
        obs, info = env.reset(seed=123, options={"task": "enter-text.p1-a", "task_spec": spec})
        assert (info["task_id"], info["seed"], obs["instruction"]) == ("enter-text.p1-a", 7, seven)
        word = re.search(r'"(.+)"', seven).group(1)
        env.step(f'click(element="{_id_of(obs["a11y"], "textbox")}")')
        obs, *_ = env.step(f'type(text="{word}")')
        _, r, term, _, info = env.step(f'click(element="{_id_of(obs["a11y"], "button")}")')
        assert term and r == 1.0 and info["success"] and info["verifier"]["page_ended_episode"]  # the page scored it

        # an instruction spec whose verifier does not survive: the new instruction is shown, and the
        # page's own verdict is not used even when the page would say 1
        obs, _ = env.reset(seed=3, options={"task": "enter-text"})
        word = re.search(r'"(.+)"', obs["instruction"]).group(1)
        spec = {"root": "enter-text", "params": {"text": "Zed"}, "has_verifier": False,
                "instruction": 'Enter "Zed" into the text field and press Submit.'}
        obs, info = env.reset(seed=3, options={"task": "enter-text.p1-b", "task_spec": spec})
        assert obs["instruction"] == info["instruction"] == spec["instruction"]
        env.step(f'click(element="{_id_of(obs["a11y"], "textbox")}")')
        obs, *_ = env.step(f'type(text="{word}")')
        _, r, term, _, info = env.step(f'click(element="{_id_of(obs["a11y"], "button")}")')
        assert term and r == 0.0 and info["success"] is False and info["verifier"] is None

        # the suite's own task is unchanged afterwards; bad specs name the field
        obs, info = env.reset(seed=7, options={"task": "enter-text"})
        assert obs["instruction"] == seven and info["task_id"] == "enter-text"
        with pytest.raises(TaskSpecError, match="root"):
            env.reset(options={"task": "x.p1-c", "task_spec": {"params": {}}})
        with pytest.raises(TaskSpecError, match="unknown task"):
            env.reset(options={"task": "x.p1-c", "task_spec": {"root": "click-test"}})
        with pytest.raises(TaskSpecError, match="params.seed"):
            env.reset(options={"task": "x.p1-c", "task_spec": {"root": "enter-text", "params": {"seed": -1}}})
        with pytest.raises(TaskSpecError, match="safe directory name"):
            env.reset(options={"task": "../x", "task_spec": {"root": "enter-text"}})
    finally:
        env.close()


def test_webarena_template_mutation_runs_on_the_real_shop_and_is_left_to_the_orm(tmp_path):
    """A WebArena config family (intent_template + instantiation_dict) seeds the mutator; the env
    builds the mutated task from the spec: new intent in the observation and the native config, the
    root's reference answer no longer scores it (it belongs to the old parameters)."""
    from webarena_site import ShopSite, tasks

    from guigym.train.algorithms.webrl import ParamMutator, load_seeds

    base = tasks()[0]
    other = dict(base, task_id=7, instantiation_dict={"product": "Green Teapot"},
                 intent="What is the price of Green Teapot?")
    path = tmp_path / "configs.json"
    path.write_text(json.dumps([base, other]))
    seeds = load_seeds(str(path))
    made = ParamMutator().generate(seeds["webarena.1"], 1, random.Random(0))
    assert made == [{"instruction": "What is the price of Green Teapot?", "params": {"product": "Green Teapot"}}]
    spec = {"root": "webarena.1", "template": base["intent_template"], "has_verifier": False, **made[0]}
    site = ShopSite()
    env = gym.make("WebArena-v0", config_file=str(path), urls={"shopping": site.url}, prewarm=False)
    try:
        obs, info = env.reset(seed=0, options={"task": "webarena.1.p1-x", "task_spec": spec})
        assert obs["instruction"] == info["instruction"] == "What is the price of Green Teapot?"
        cfg = env.unwrapped.config_of(env.unwrapped.task)
        assert cfg["intent"] == obs["instruction"] and cfg["instantiation_dict"] == {"product": "Green Teapot"}
        assert obs["a11y"]  # the shop's start page
        _, r, term, _, info = env.step("stop [12.50]")  # the ROOT's reference answer
        assert term and r == 0.0 and info["verifier"] is None and info["success"] is False
        obs, info = env.reset(seed=0, options={"task": "webarena.1"})  # the root still verifies
        _, r, term, _, info = env.step("stop [12.50]")
        assert term and r == 1.0 and info["verifier"] is not None
    finally:
        env.close()
        site.close()


def test_final_state_text_prefers_a11y_and_truncates():
    assert final_state_text({"a11y": "<a11y>x</a11y>", "html": "<html>"}, 5) == "<a11y"
    assert final_state_text({"a11y": "", "html": "<html>page</html>"}, 100) == "<html>page</html>"
    assert final_state_text({"screenshot": None}, 100) == ""
    assert final_state_text({"a11y": "abc"}, 0) == ""


# ---- through the trainer -------------------------------------------------------------------------
def _cfg(tmp_path: Path) -> dict:
    cfg = yaml.safe_load((ROOT / "recipes" / "webrl_miniwob_tiny.yaml").read_text())
    cfg["run"].update(name="gen", dir=str(tmp_path / "run"), iterations=2)
    cfg["env"]["tasks"] = ["enter-text", "login-user"]  # 1 step: both always fail, both seed
    cfg["rollout"]["groups_per_iteration"] = 2
    opts = cfg["algorithm"]["plugin_options"]
    opts["webrl_curriculum"].update(per_parent=1, low=0.0, high=1.0)  # one child per family, all kept
    opts["webrl_phase"]["new_share"] = 1.0
    return cfg


def test_generated_tasks_are_sampled_rolled_out_stored_with_provenance_and_rewarded(tmp_path):
    pytest.importorskip("torch")
    from guigym.train.algorithms.webrl_orm import example_from_trajectory
    from guigym.train.config import from_dict
    from guigym.train.loop import Trainer

    t = Trainer(from_dict(_cfg(tmp_path)), log=lambda m: None)
    shaped = {}
    try:
        t.build()
        t.start_rollout()
        real = t.shaped_rewards

        def capture(groups, ctx=None):
            out = real(groups, ctx)
            shaped.update({tr.traj_id: (tr, out[tr.traj_id]) for g in groups for tr in g.trajectories})
            return out

        t.shaped_rewards = capture
        t.iteration(0)
        t.iteration(1)
        added = {r["task_id"]: r for r in t.store.added_tasks(t.run_id)}
        trajs = t.store.get_trajectories(t.run_id, source="on_policy")
        verdicts = t.store.get_state(t.run_id, "webrl_orm/verdicts/1")
    finally:
        t.close()
    # phase 1: one child of each failed root, with its provenance
    assert sorted(r["parent"] for r in added.values()) == ["enter-text", "login-user"]
    assert all(r["iteration"] == 1 and r["source"] == "webrl_curriculum" and r["spec"]["phase"] == 1
               for r in added.values())
    seeded = next(r for r in added.values() if r["parent"] == "enter-text")
    templ = next(r for r in added.values() if r["parent"] == "login-user")
    assert set(seeded["spec"]["params"]) == {"seed"} and seeded["spec"]["has_verifier"] is True
    assert templ["spec"]["has_verifier"] is False and "{{" not in templ["spec"]["instruction"]
    # iteration 1 rolled out exactly the new tasks (new_share 1), in the real env
    it1 = [x for x in trajs if x.info["iteration"] == 1]
    assert sorted({x.task_id for x in it1}) == sorted(added) and len(it1) == 4
    for x in it1:
        r = added[x.task_id]
        assert x.info["task_provenance"] == {"parent": r["parent"], "root": r["parent"], "generator": "mutator",
                                             "phase": 1}
        assert x.info["final_state"].startswith("<a11y") and len(x.info["final_state"]) <= 8000
        if x.task_id == seeded["task_id"]:  # the page's verifier scored it; the page's own utterance
            assert x.info["reward_source"] == "verifier" and x.steps[-1].info["verifier"] is not None
            assert x.info["instruction"].startswith("Enter \"")
        else:  # ORM-judged: the template's instruction was shown, no verifier ran
            assert x.info["reward_source"] == "orm" and x.steps[-1].info["verifier"] is None
            assert x.info["instruction"] == templ["spec"]["instruction"]
    # the ORM rewarded the unverified ones from their final page (not the last prompt)
    orm_judged = [shaped[x.traj_id] for x in it1 if x.task_id == templ["task_id"]]
    assert len(orm_judged) == 2
    for tr, reward in orm_judged:
        assert tr.info["reward_source"] == "orm" and 0.0 <= tr.info["orm_p_yes"] <= 1.0
        assert reward == (1.0 if tr.info["orm_p_yes"] > 0.5 else 0.0)
        ex = example_from_trajectory(tr, decode=lambda ids: "PROMPT")
        assert ex.final_state == tr.info["final_state"] and "Username" in ex.final_state
    verified = [shaped[x.traj_id] for x in it1 if x.task_id == seeded["task_id"]]
    assert all(tr.info["reward_source"] == "verifier" and "orm_p_yes" not in tr.info for tr, _ in verified)
    # the verdicts persist (the trajectories were stored before shaping) for the next phase's curriculum
    assert verdicts == {tr.traj_id: tr.info["orm_p_yes"] for tr, _ in orm_judged}


def test_curriculum_counts_an_orm_success_as_a_success(tmp_path):
    import uuid

    from guigym.train.algorithms.context import PluginContext
    from guigym.train.algorithms.registry import TASK_SOURCES
    from guigym.train.algorithms.webrl_orm import record_verdicts
    from guigym.train.data.store import DataStore
    from guigym.train.data.types import Step, Trajectory

    store = DataStore.for_run_dir(str(tmp_path))
    try:
        run = store.start_run("c")

        def traj(task: str) -> Trajectory:
            st = Step(prompt_ids=[1, 2], response_ids=[3], rollout_logprobs=[-0.5], policy_version=0)
            return Trajectory(traj_id=uuid.uuid4().hex, run_id=run, task_id=task, seed=0, group_id="g", steps=[st],
                              reward=0.0, success=False, info={"iteration": 0})

        yes, no = traj("judged-yes"), traj("judged-no")
        store.add_trajectories(run, [yes, no])
        record_verdicts(PluginContext(iteration=0, rng=random.Random(0), store=store, run_id=run),
                        {yes.traj_id: 0.9, no.traj_id: 0.2})
        cur = TASK_SOURCES.build("webrl_curriculum", use_critic=False)
        ctx = PluginContext(iteration=1, rng=random.Random(1), store=store, run_id=run)
        assert list(cur.failed_tasks(ctx, 0, 1)) == ["judged-no"]
        assert list(cur.failed_tasks(ctx, 1, 2)) == []  # verdicts and trajectories of other iterations
    finally:
        store.close()
