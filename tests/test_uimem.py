"""UI-Mem (issue 15, part 2; Xiao et al. 2026): eq. 1 UCB retrieval, eqs. 2-3 dropout curriculum,
stratified group sampling, eqs. 4-5 guidance-aware reward, the rule-based self-evolving loop and
the memory's persistence (file and checkpoint), checked against numbers worked out by hand from
the paper's formulas."""
from __future__ import annotations

import json
import random
import uuid

import pytest

from guigym.core.errors import ConfigError
from guigym.train.algorithms import uimem as U
from guigym.train.algorithms import uimem_memory as M
from guigym.train.algorithms.context import PluginContext
from guigym.train.algorithms.registry import (
    CONDITIONERS,
    GROUP_BUILDERS,
    REWARD_SHAPERS,
)
from guigym.train.data.types import Group, Step, Trajectory

TEMPLATE = "Create a new contact for {{name}}. Their number is {{number}}."


def step(action: str, **info) -> Step:
    return Step(prompt_ids=[1], response_ids=[2], rollout_logprobs=[-0.1], policy_version=0, action=action,
                action_text=action, info=dict(info))


def traj(task: str, actions: list[str], success: bool, seed: int = 0, guidance: dict | None = None,
         verifier: dict | None = None, truncated: bool = False) -> Trajectory:
    steps = [step(a) for a in actions]
    if verifier is not None:
        steps[-1].info["verifier"] = verifier
    info = {"truncated": truncated}
    level = 0
    if guidance is not None:
        info["guidance"] = guidance
        level = guidance["level"]
    return Trajectory(traj_id=uuid.uuid4().hex, run_id="r", task_id=task, seed=seed, group_id="g", steps=steps,
                      reward=float(success), success=success, guidance_level=level, info=info)


def ctx(i: int = 0) -> PluginContext:
    return PluginContext(iteration=i, rng=random.Random(i))


def contact_actions(name: str, number: str) -> list[str]:
    return ['open_app("Contacts")', "tap(500, 1800)", f'type("{name}")', "tap(500, 900)", f'type("{number}")',
            "tap(900, 100)", "done()"]


# ---- eq. 1 ------------------------------------------------------------------------------------
def test_eq1_ucb_score_matches_the_hand_computation():
    # plan A: N_succ 3, N_used 10; plan B: N_succ 1, N_used 0 (a new entry). sum N_succ = 4, sum N_used = 10
    # S(A) = 3/4 + 1 * sqrt(ln 10 / 11) = 0.75 + sqrt(0.2093259) = 0.75 + 0.4575215
    # S(B) = 1/4 + 1 * sqrt(ln 10 / 1)  = 0.25 + 1.5174271
    assert M.ucb_scores([3, 1], [10, 0], 1.0) == pytest.approx([1.2075215, 1.7674271], abs=1e-6)
    # lambda_ucb = 0.25: S(A) = 0.75 + 0.1143804, S(B) = 0.25 + 0.3793568
    assert M.ucb_scores([3, 1], [10, 0], 0.25) == pytest.approx([0.8643804, 0.6293568], abs=1e-6)
    # nothing used yet: no exploration bonus, the success share alone; no success yet: 0
    assert M.ucb_scores([2, 2], [0, 0], 1.0) == [0.5, 0.5]
    assert M.ucb_scores([0, 0], [3, 1], 0.0) == [0.0, 0.0]
    # appendix E's failure-pattern recency 1 / (1 + lambda dt): dt = 4, lambda = 0.5 -> 1/3
    assert M.recency(updated=2, now=6, decay=0.5) == pytest.approx(1 / 3)


def test_ucb_retrieval_picks_the_unexplored_plan_first_then_the_best(tmp_path):
    mem = M.ExperienceMemory()
    mem.templates["T"] = "do {{x}}"
    a = mem.merge("workflow", "do {{x}}", "", ["open_app(\"A\")", 'type("{{x}}")'], iteration=0, origin="T")
    a.n_succ, a.n_used = 3, 10
    b = mem.merge("workflow", "do {{x}}", "", ["open_app(\"B\")", 'type("{{x}}")'], iteration=1, origin="T")
    assert (b.n_succ, b.n_used) == (1, 0)  # sec. 3.4: a new entry starts at N_succ = 1, N_used = 0
    # lambda_ucb 0.5: S(A) = 0.75 + 0.5 sqrt(ln 10 / 11) = 0.9788, S(B) = 0.25 + 0.5 sqrt(ln 10) = 1.0087
    assert mem.retrieve("T", lambda_ucb=0.5).workflow is b
    mem.credit([b.entry_id], success=False)  # B tried once, failed
    # S(A) = 0.75 + 0.5 sqrt(ln 11 / 11) = 0.9834, S(B) = 0.25 + 0.5 sqrt(ln 11 / 2) = 0.7975
    assert mem.retrieve("T", lambda_ucb=0.5).workflow is a
    assert (b.n_succ, b.n_used, a.n_used) == (1, 1, 10)
    # bounded: a third plan for the key with max_per_key 2 evicts the weakest rival by
    # N_succ / (N_used + 1): A 3/11 = 0.27 < B 1/2
    c = mem.merge("workflow", "do {{x}}", "", ["open_app(\"C\")"], iteration=2, origin="T", max_per_key=2)
    assert {e.entry_id for e in mem.of("workflow")} == {b.entry_id, c.entry_id}


# ---- eqs. 2-3 and the strata ------------------------------------------------------------------
BOUNDS = dict(theta_start=0.2, theta_end=0.8, strong_max=0.5, strong_min=0.0, none_min=0.25, none_max=1.0)


@pytest.mark.parametrize("s, expected", [
    (0.0, (0.5, 0.25, 0.25)),     # phi = -1/3: strong 0.5 + 1/6 clipped to 0.5, none 0.25 - 0.25 clipped to 0.25
    (0.2, (0.5, 0.25, 0.25)),     # at theta_start: phi = 0
    (0.35, (0.375, 0.1875, 0.4375)),  # phi = 0.25: 0.5 - 0.25 * 0.5, 0.25 + 0.25 * 0.75
    (0.5, (0.25, 0.125, 0.625)),  # phi = 0.5: 0.5 - 0.5 * 0.5, 0.25 + 0.5 * 0.75
    (0.8, (0.0, 0.0, 1.0)),       # at theta_end: phi = 1
    (0.95, (0.0, 0.0, 1.0)),      # phi = 1.25: both clipped
])
def test_eqs2_3_dropout_curriculum_at_and_between_the_thresholds(s, expected):
    assert U.guidance_proportions(s, **BOUNDS) == pytest.approx(expected)


def test_strata_counts_round_by_largest_remainder():
    assert U.strata_counts(4, (0.5, 0.25, 0.25)) == [2, 1, 1]
    assert U.strata_counts(8, (0.25, 0.125, 0.625)) == [2, 1, 5]
    # G = 6 at phi = 0.5: 1.5, 0.75, 3.75 -> floors 1, 0, 3 and the two spare members go to the
    # largest remainders (0.75, 0.75): weak and none
    assert U.strata_counts(6, (0.25, 0.125, 0.625)) == [1, 1, 4]
    assert U.strata_counts(3, (0.0, 0.0, 1.0)) == [0, 0, 3]


def _seeded_memory(path: str) -> M.ExperienceMemory:
    """Memory with a workflow, a skill per subtask and a failure pattern for ContactsAddContact."""
    mem = M.shared_memory(path)
    ev = GROUP_BUILDERS.build("uimem_evolve", memory_path=path)
    ok = traj("ContactsAddContact", contact_actions("Ada Lovelace", "+15550001"), True, seed=3,
              verifier={"goal": "Create a new contact for Ada Lovelace. Their number is +15550001.",
                        "params": {"name": "Ada Lovelace", "number": "+15550001"}})
    bad = traj("ContactsAddContact", ['open_app("Contacts")', "tap(1, 1)", "tap(1, 1)", "tap(1, 1)"], False, seed=3,
               verifier={"goal": "Create a new contact for Ada Lovelace. Their number is +15550001.",
                         "params": {"name": "Ada Lovelace", "number": "+15550001"}})
    ev([Group("g", "ContactsAddContact", [ok])], ctx=ctx(0))
    ev([Group("g", "ContactsAddContact", [bad])], ctx=ctx(1))
    return mem


def test_stratified_group_gets_strong_weak_and_no_guidance_in_the_curriculum_proportions(tmp_path):
    path = str(tmp_path / "mem.json")
    mem = _seeded_memory(path)
    cond = CONDITIONERS.build("uimem_guidance", memory_path=path, group_size=8)
    mem.ema["ContactsAddContact"] = 0.5  # eqs. 2-3: (0.25, 0.125, 0.625) -> 2 strong, 1 weak, 5 none of 8
    got = [cond("ContactsAddContact", 7, m, ctx=ctx(2)) for m in range(8)]
    assert [0 if g is None else g.level for g in got] == [2, 2, 1, 0, 0, 0, 0, 0]
    strong, weak = got[0].text, got[2].text
    # instantiated for seed 7's own parameters, computed as AndroidWorld-v0 does at reset
    params = M.androidworld_instance("ContactsAddContact", 7)[2]
    assert params["name"] in strong and params["number"] in strong and "{{" not in strong
    assert "Tip:" in strong and "Avoid:" in strong  # (q, W, Sigma, F)
    # the failure pattern is about subtask 2 (typing the name) and is shown under it
    assert strong.index("2. ") < strong.index("Avoid:") < strong.index("3. ")
    assert params["name"] in weak and "Tip:" not in weak and "Avoid:" not in weak  # (q, W) only
    wf = mem.of("workflow")[0]
    assert got[0].source.startswith("uimem:strong:" + wf.entry_id) and got[2].source == f"uimem:weak:{wf.entry_id}"
    mem.ema["ContactsAddContact"] = 0.0  # below theta_start: G = 4 -> 2 strong, 1 weak, 1 none
    cond4 = CONDITIONERS.build("uimem_guidance", memory_path=path, group_size=4)
    assert [0 if (g := cond4("ContactsAddContact", 1, m, ctx=ctx(2))) is None else g.level
            for m in range(4)] == [2, 2, 1, 0]
    # a task memory knows nothing about: every member unguided (level 0), whatever its stratum
    assert all(cond4("SystemWifiTurnOff", 1, m, ctx=ctx(2)) is None for m in range(4))


def test_conditioner_rejects_proportions_that_can_exceed_one():
    with pytest.raises(ConfigError, match="lambda_strong \\+ lambda_none"):
        CONDITIONERS.build("uimem_guidance", lambda_strong_max=0.8, lambda_none_min=0.3)
    with pytest.raises(ConfigError, match="theta_start"):
        CONDITIONERS.build("uimem_guidance", theta_start=0.8, theta_end=0.2)


# ---- the self-evolving loop -------------------------------------------------------------------
def test_evolve_abstracts_templates_credits_guidance_and_updates_the_ema(tmp_path):
    path = str(tmp_path / "mem.json")
    mem = _seeded_memory(path)
    wf, = mem.of("workflow")
    assert mem.templates["ContactsAddContact"] == TEMPLATE and wf.key == TEMPLATE
    assert wf.steps == ['open_app("Contacts")', 'type("{{name}}")', 'type("{{number}}")']
    skills = {e.key: e.content for e in mem.of("skill")}
    assert skills['type("{{name}}")'] == 'tap(500, 1800); type("{{name}}")'  # values replaced by slots
    fail, = mem.of("failure")
    # the failure completed the first subtask and missed the second: the pattern is about that one
    assert fail.key == 'type("{{name}}")' and "repeated tap(1, 1)" in fail.content
    # EMA, algorithm 2 with gamma 0.9: 0.9 * 0 + 0.1 * 1 = 0.1, then 0.9 * 0.1 + 0.1 * 0 = 0.09
    assert mem.ema["ContactsAddContact"] == pytest.approx(0.09)
    # a guided success credits the entries it was shown (N_used + 1, N_succ + 1) and its workflow
    # merges into the same entry without being counted twice
    ev = GROUP_BUILDERS.build("uimem_evolve", memory_path=path, ema_gamma=0.5)
    shown = {"text": "...", "level": 1, "source": f"uimem:weak:{wf.entry_id}"}
    again = traj("ContactsAddContact", contact_actions("Bo Li", "+1222"), True, seed=9, guidance=shown,
                 verifier={"goal": "Create a new contact for Bo Li. Their number is +1222.",
                           "params": {"name": "Bo Li", "number": "+1222"}})
    assert U.guided_entries(again) == [wf.entry_id]
    ev([Group("g", "ContactsAddContact", [again])], ctx=ctx(2))
    assert (wf.n_succ, wf.n_used) == (2, 1) and len(mem.of("workflow")) == 1
    assert mem.ema["ContactsAddContact"] == pytest.approx(0.5 * 0.09 + 0.5)
    # the same iteration is absorbed once (a resumed run replays its stored groups)
    ev([Group("g", "ContactsAddContact", [again])], ctx=ctx(2))
    assert (wf.n_succ, wf.n_used) == (2, 1)


def test_rule_abstraction_without_task_parameters_and_template_matching():
    acts = ['click(element="4")', 'type(text="report.txt")', 'click(element="9")']
    b = M.infer_bindings("Save the file as report.txt in Documents", acts)
    assert b == {"value1": "report.txt"}
    assert M.abstract('type(text="report.txt")', b) == 'type(text="{{value1}}")'
    assert M.match("Save the file as {{value1}} in Documents", "save the file as notes.md in  Documents") == \
        {"value1": "notes.md"}
    assert M.match(TEMPLATE, "Delete the contact Bo.") is None


def test_memory_survives_save_load_and_checkpoint_restore(tmp_path):
    path = str(tmp_path / "mem.json")
    mem = _seeded_memory(path)
    on_disk = M.ExperienceMemory.load(path)
    assert on_disk.to_dict() == mem.to_dict() and on_disk.absorbed == 1
    assert [p.name for p in tmp_path.iterdir()] == ["mem.json"]  # atomic write: no temp file left
    ev = GROUP_BUILDERS.build("uimem_evolve", memory_path=path)
    ev([], ctx=ctx(2))
    state = json.loads(json.dumps(ev.state_dict()))
    snapshot = state["memory"]
    # after the checkpoint the run goes on (iteration 3 changes the memory), then is killed
    ev([Group("g", "X", [traj("X", ['type("zz")'], True)])], ctx=ctx(3))
    assert M.shared_memory(path).to_dict() != snapshot
    M._SHARED.clear()  # a new process
    ev2 = GROUP_BUILDERS.build("uimem_evolve", memory_path=path)
    ev2.load_state_dict(state)  # --resume: the checkpoint's memory, not the file's newer one
    assert M.shared_memory(path).to_dict() == snapshot
    assert M.ExperienceMemory.load(path).to_dict() == snapshot
    with pytest.raises(ValueError, match="unknown format"):
        M.ExperienceMemory().load_dict({"format": "other"})


# ---- eqs. 4-5 ---------------------------------------------------------------------------------
def test_eqs4_5_guidance_aware_reward_matches_the_hand_computation(tmp_path):
    shaper = REWARD_SHAPERS.build("uimem_reward", lambda_o=1.0, lambda_p=0.5, alpha=0.5,
                                  memory_path=str(tmp_path / "m.json"))
    guided = {"text": "plan", "level": 2, "source": "uimem:strong:x"}
    goals4 = {"subgoals": {"a": True, "b": False, "c": True, "d": False}}
    g = Group("g", "T", [
        traj("T", ["tap(1, 1)"], True, verifier={"subgoals": {"a": True, "b": True}}),          # unguided success
        traj("T", ["tap(1, 1)"], True, guidance=guided, verifier={"subgoals": [True, True]}),  # guided success
        traj("T", ["tap(1, 1)"], False, verifier=goals4),                                      # unguided, 2/4 done
        traj("T", ["tap(1, 1)"], False, guidance=guided, verifier={"subgoal_score": 0.2}),     # guided, 0.2
    ])
    # R = 1 r_o + 0.5 r_p + 0.5 1[none] r_o
    #   = 1 + 0.5 + 0.5 = 2.0; 1 + 0.5 = 1.5; 0 + 0.5 * 0.5 = 0.25; 0 + 0.5 * 0.2 = 0.1
    assert shaper(g, ctx=ctx()) == pytest.approx([2.0, 1.5, 0.25, 0.1])
    # in a chain it shapes the previous shaper's rewards
    assert shaper(g, rewards=[0.5, 0.0, 0.0, 0.0], ctx=ctx()) == pytest.approx([0.5 + 0.5 + 0.25, 0.5, 0.25, 0.1])
    with pytest.raises(ConfigError, match="alpha"):
        REWARD_SHAPERS.build("uimem_reward", alpha=-1)


def test_eq4_progress_against_the_reference_workflow_in_memory(tmp_path):
    path = str(tmp_path / "mem.json")
    _seeded_memory(path)  # workflow: open_app, type {{name}}, type {{number}}
    shaper = REWARD_SHAPERS.build("uimem_reward", lambda_o=1.0, lambda_p=0.5, alpha=0.5, memory_path=path)
    half = traj("ContactsAddContact", ['open_app("Contacts")', "tap(2, 2)", 'type("Cy Young")', "tap(3, 3)"], False,
                seed=5, verifier={"goal": "Create a new contact for Cy Young. Their number is +1999.",
                                  "params": {"name": "Cy Young", "number": "+1999"}})
    # 2 of the 3 subtasks completed in order: r_p = 2/3, R = 0 + 0.5 * 2/3
    assert shaper.memory_progress(half, ctx()) == pytest.approx(2 / 3)
    assert shaper(Group("g", "ContactsAddContact", [half]), ctx=ctx()) == pytest.approx([1 / 3])


def test_openai_extractor_parses_a_json_reply_and_abstracts_it():
    calls = []

    def post(url, body, headers):
        calls.append((url, body))
        return {"choices": [{"message": {"content": '```json\n{"workflow": ["Open Contacts", "Add Ada"], '
                                                    '"skills": [{"label": "Add Ada", "plan": "Tap +, type Ada"}], '
                                                    '"failure": null}\n```'}}]}

    ex = M.OpenAIExtractor("http://llm.local/v1", "m", post=post)
    out = ex.extract(traj("T", ['type("Ada")'], True), "add {{name}}", "add Ada", {"name": "Ada"}, [])
    assert calls[0][0] == "http://llm.local/v1/chat/completions" and calls[0][1]["model"] == "m"
    assert out.workflow == ["Open Contacts", "Add {{name}}"]
    assert out.skills == [("Add {{name}}", "Tap +, type {{name}}")] and out.failure is None


# ---- the recipe and the real loop ------------------------------------------------------------
def test_uimem_androidworld_recipe_validates_and_builds_its_plugins(tmp_path):
    from pathlib import Path

    from guigym.train.config import load_recipe
    from guigym.train.loop import Trainer

    root = Path(__file__).resolve().parents[1]
    cfg = load_recipe(root / "recipes" / "uimem_androidworld.yaml", [f"run.dir={tmp_path}"])
    assert cfg.env.id == "AndroidWorld-v0" and cfg.rollout.num_generations == 4  # G = 4 (sec. 4.1)
    assert cfg.optim.learning_rate == 1e-6
    t = Trainer(cfg, log=lambda m: None)
    t.build_plugins()
    assert [n for n, _ in t.conditioner.members] == ["uimem_guidance"]
    assert [n for n, _ in t.group_builder.members] == ["default", "uimem_evolve"]
    assert [n for n, _ in t.reward_shaper.members] == ["uimem_reward"]
    from guigym.envs.android.androidworld import TASKS
    assert set(cfg.env.tasks) <= set(TASKS.names())


def test_uimem_in_the_loop_shapes_rewards_and_resumes_the_memory(tmp_path):
    pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from train_helpers import Tokens, capture_updates, recipe, store_iteration, trainer

    from guigym.train.policy.hf_policy import HFPolicy
    from guigym.train.policy.tiny import build

    torch.set_num_threads(1)
    model = build(tmp_path / "tiny", seed=0)
    tokens = Tokens(HFPolicy(model))
    cfg = recipe(tmp_path, model, reward_shaper="uimem_reward", group_builder=["default", "uimem_evolve"])
    t = trainer(cfg)
    try:
        # t1: a 1-step success and a 2-step failure repeating the same action
        store_iteration(t, tokens, 0, [("t1", "g0", 1, 1.0), ("t1", "g0", 2, 0.0)])
        seen = capture_updates(t)
        t.iteration(0)
        mem_path = tmp_path / "run" / "uimem_memory.json"
        saved = json.loads(mem_path.read_text())
    finally:
        t.close()
    # the success's workflow is one subtask (the click); the failure repeated it, so it completed
    # it too: eq. 4 r_p = 1 for both. R = 1 + 0.5 + 0.5 = 2.0 (unguided success), 0 + 0.5 = 0.5
    assert sorted(round(s.reward, 4) for s in seen[0]) == [0.5, 0.5, 2.0]
    assert saved["absorbed"] == 0 and saved["ema"]["t1"] == pytest.approx(0.09)
    assert [e["steps"] for e in saved["entries"] if e["kind"] == "workflow"] == [['click(element="1")']]
    mem_path.write_text(json.dumps({**saved, "entries": []}))  # the file drifts from the checkpoint
    M._SHARED.clear()
    t2 = trainer(cfg, resume=True)
    try:
        assert M.shared_memory(str(mem_path)).to_dict() == saved  # restored from the checkpoint
    finally:
        t2.close()
