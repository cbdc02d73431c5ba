"""WebRL plug-ins (Qi et al. 2024, sec. 2 and 2.2): the ORM judge (trained and evaluated on the
tiny model), the critic (eq. 8) and its advantages (eq. 9 and GAE, hand-computed), the
self-evolving curriculum (parameter mutator, OpenAI-compatible generator against a local fake
endpoint, critic band filter, provenance in a real DataStore) and the WebArena-Lite recipe."""
from __future__ import annotations

import http.server
import json
import random
import threading
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from guigym.core.errors import ConfigError
from guigym.train.algorithms import webrl as W
from guigym.train.algorithms import webrl_orm as O
from guigym.train.algorithms.context import PluginContext, TaskOutcome
from guigym.train.data.types import Group, Step, Trajectory

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: Any) -> Path:
    pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    from guigym.train.policy.tiny import build

    return build(tmp_path_factory.mktemp("models") / "tiny", seed=0)


def _step(prompt_ids: list[int] | None = None, info: dict[str, Any] | None = None, action: str = "click [1]") -> Step:
    return Step(prompt_ids=prompt_ids or [1, 2, 3], response_ids=[4], rollout_logprobs=[-0.1], policy_version=0,
                action=action, action_text=action, info=info or {})


def _traj(task: str, steps: list[Step], reward: float, info: dict[str, Any] | None = None, it: int = 0) -> Trajectory:
    return Trajectory(traj_id=uuid.uuid4().hex, run_id="", task_id=task, seed=0, group_id=f"g-{task}", steps=steps,
                      reward=reward, success=reward >= 1.0, info={"iteration": it, **(info or {})})


# ---- eq. 9 and GAE, by hand ---------------------------------------------------------------------
# 3 steps, r = [0, 0, 1], V = [0.2, 0.5, 0.8], V(s_4) = 0
# GAE gamma 0.9 lam 0.5: delta = [0.9*0.5-0.2, 0.9*0.8-0.5, 1-0.8] = [0.25, 0.22, 0.2], gamma*lam = 0.45
#   A3 = 0.2, A2 = 0.22 + 0.45*0.2 = 0.31, A1 = 0.25 + 0.45*0.31 = 0.3895
# eq. 9 gamma 1 lam 0.5: A_t = 0.5 (r_t + V_{t+1} - V_t) + 0.5 (r_T - V_t)
#   A1 = 0.5*0.3 + 0.5*0.8 = 0.55, A2 = 0.5*0.3 + 0.5*0.5 = 0.40, A3 = 0.5*0.2 + 0.5*0.2 = 0.20
def test_gae_and_eq9_match_hand_computation():
    r, v = [0.0, 0.0, 1.0], [0.2, 0.5, 0.8]
    assert W.gae_advantages(r, v, gamma=0.9, lam=0.5) == pytest.approx([0.3895, 0.31, 0.2])
    assert W.webrl_advantages(r, v, gamma=1.0, lam=0.5) == pytest.approx([0.55, 0.40, 0.20])
    # lam = 1: GAE is the Monte-Carlo advantage with gamma = 1
    assert W.gae_advantages(r, v, gamma=1.0, lam=1.0) == pytest.approx([0.8, 0.5, 0.2])
    assert W.step_rewards(1.0, 3) == [0.0, 0.0, 1.0]


class FakeCritic:
    """Stands in for the critic where only its scores matter: a state is its text; ``score``
    maps text -> value."""

    def __init__(self, score: Any) -> None:
        self.score, self.seen = score, []

    def values(self, batch: Any, batch_size: int = 8) -> list[float]:
        self.seen += list(batch)
        return [self.score(x) for x in batch]

    def encode_text(self, text: str) -> str:
        return text

    def decode(self, ids: Any) -> str:
        return " ".join(map(str, ids))


def test_webrl_gae_estimator_uses_the_critic_values(tmp_path):
    key = str(tmp_path / "critic")
    vals = {(1,): 0.2, (2,): 0.5, (3,): 0.8}
    W._CRITICS[key] = FakeCritic(lambda ids: vals[tuple(ids)])
    try:
        t = _traj("t", [_step([1]), _step([2]), _step([3])], 1.0)
        est = W.ADVANTAGE_ESTIMATORS.build("webrl_gae", critic_dir=key, model_path="unused", train=False)
        adv = est([Group("g", "t", [t])], {t.traj_id: 1.0})
        assert adv[t.traj_id] == pytest.approx([0.55, 0.40, 0.20])
        gae = W.ADVANTAGE_ESTIMATORS.build("webrl_gae", critic_dir=key, model_path="x", train=False, form="gae",
                                           gamma=0.9, lam=0.5)
        assert gae([Group("g", "t", [t])], {t.traj_id: [0.0, 0.0, 1.0]})[t.traj_id] == pytest.approx([0.3895, 0.31, 0.2])
    finally:
        W._CRITICS.pop(key)
    with pytest.raises(ConfigError, match="form"):
        W.ADVANTAGE_ESTIMATORS.build("webrl_gae", form="td")


# ---- the critic on the tiny model: eq. 8 training, save / resume ---------------------------------
def test_critic_bce_training_lowers_loss_and_resumes(tiny, tmp_path):
    critic_dir = str(tmp_path / "critic")
    est = W.ADVANTAGE_ESTIMATORS.build("webrl_gae", critic_dir=critic_dir, model_path=str(tiny), critic_lr=3e-3,
                                       critic_epochs=6, critic_batch_size=4)
    critic = est.critic()
    tok = critic.tokenizer
    good = ["Click the button.", "Click the \"Submit\" button.", "Click on the button ok."]
    bad = ["Open the settings app.", "Drag the item to the left box.", "Find the email from Alice."]
    states = [tok.encode(s) for s in good + bad]
    targets = [1.0] * 3 + [0.0] * 3
    before = critic.bce(states, targets)
    assert before == pytest.approx(0.6931, abs=1e-3)  # zero head: V = 0.5 everywhere
    # one estimator call = advantages from the current critic, then the eq. 8 update on its steps
    trajs = [_traj(f"t{i}", [_step(s)], 1.0 if i < 3 else 0.0) for i, s in enumerate(states)]
    groups = [Group(f"g{i}", t.task_id, [t]) for i, t in enumerate(trajs)]
    adv = est(groups, {t.traj_id: t.reward for t in trajs}, ctx=None)
    # 1-step episodes, V = 0.5: eq. 9 gives lam (r - 0.5) + (1 - lam) (r - 0.5) = r - 0.5
    assert [adv[t.traj_id] for t in trajs] == [pytest.approx([0.5])] * 3 + [pytest.approx([-0.5])] * 3
    after = critic.bce(states, targets)
    assert after < before - 0.1
    v = critic.values(states)
    assert min(v[:3]) > max(v[3:])
    state = est.state_dict()
    assert state["version"] == 1 and (Path(critic_dir) / "v000001" / "value_head.pt").is_file()
    # --resume in a fresh process: the checkpointed critic comes back
    W._CRITICS.pop(critic_dir)
    est2 = W.ADVANTAGE_ESTIMATORS.build("webrl_gae", critic_dir=critic_dir, model_path=str(tiny))
    est2.load_state_dict(json.loads(json.dumps(state)))
    assert est2.critic().values(states) == pytest.approx(v, abs=1e-5)
    W._CRITICS.pop(critic_dir)


# ---- the ORM -------------------------------------------------------------------------------------
def _orm_set(n: int, seed: int) -> list[O.OrmExample]:
    """Separable synthetic trajectories: the final page repeats "done" (success) or "fail" (a
    2-layer random model needs the marker repeated to find it within a few epochs)."""
    rng = random.Random(seed)
    words = "button submit ok cancel link tab menu item text box field select option the page".split()
    out = []
    for i in range(n):
        label = i % 2 == 0
        filler = " ".join(rng.choice(words) for _ in range(4))
        state = filler + (" done" if label else " fail") * 4
        out.append(O.OrmExample(instruction=rng.choice(["Click the button.", "Open the menu."]),
                                actions=[f"click [{rng.randrange(9)}]"], final_state=state, label=label))
    return out


@pytest.fixture(scope="module")
def trained_orm(tiny, tmp_path_factory):
    orm = O.OutcomeRewardModel.from_path(str(tiny), state_budget=32)
    held = _orm_set(24, seed=1)
    untrained = O.evaluate_orm(orm, held)
    stats = O.train_orm(orm, _orm_set(48, seed=0), epochs=5, lr=3e-3, batch_size=4, seed=0)
    trained = O.evaluate_orm(orm, held)
    path = tmp_path_factory.mktemp("orm") / "orm"
    orm.save(str(path))
    return SimpleNamespace(orm=orm, path=path, untrained=untrained, trained=trained, stats=stats)


def test_orm_training_beats_chance_on_held_out_labels(trained_orm):
    u, t = trained_orm.untrained, trained_orm.trained
    assert u["n"] == t["n"] == 24
    assert 0.3 <= u["accuracy"] <= 0.7  # the random judge is at chance on the balanced set
    assert t["accuracy"] >= 0.85
    assert t["precision"] >= 0.8 and t["recall"] >= 0.8
    assert t["tp"] + t["fp"] + t["fn"] + t["tn"] == 24
    assert trained_orm.stats["losses"][-1] < trained_orm.stats["losses"][0]


def test_orm_prompt_truncates_the_final_state_to_its_budget(trained_orm):
    orm = trained_orm.orm
    long = O.OrmExample("Click the button.", ["click [1]"], " ".join(["button"] * 500))
    short = O.OrmExample("Click the button.", ["click [1]"], "button")
    assert len(orm.prompt_ids(long)) - len(orm.prompt_ids(short)) <= 32
    assert orm.yes_id != orm.no_id


def test_orm_reward_shaper_rewards_unverified_trajectories(trained_orm):
    O._SHARED.clear()
    shaper = O.REWARD_SHAPERS.build("webrl_orm", model_path=str(trained_orm.path), state_budget=32)
    no_verifier = {"verifier": None}
    ok = _traj("gen", [_step(info=no_verifier)], 0.0, {"instruction": "Click the button.",
                                                        "final_state": "button ok the page" + " done" * 4})
    bad = _traj("gen", [_step(info=no_verifier)], 0.0, {"instruction": "Click the button.",
                                                         "final_state": "button ok the page" + " fail" * 4})
    verified = _traj("gen", [_step(info={"verifier": {"metric": "exact"}})], 1.0,
                     {"final_state": "button ok the page" + " fail" * 4})
    out = shaper(Group("g", "gen", [ok, bad, verified]))
    assert out == [1.0, 0.0, 1.0]
    assert ok.info["reward_source"] == bad.info["reward_source"] == "orm" and ok.info["orm_p_yes"] > 0.5
    assert verified.info["reward_source"] == "verifier" and "orm_p_yes" not in verified.info
    with pytest.raises(ConfigError, match="model_path"):
        O.REWARD_SHAPERS.build("webrl_orm")


def test_orm_trains_from_a_datastore_run(tiny, tmp_path):
    from guigym.train.data.store import DataStore

    store = DataStore(f"sqlite:///{tmp_path / 'd.db'}", blob_root=str(tmp_path / "blobs"))
    run = store.start_run("orm")
    trajs = [_traj("t", [_step()], float(e.label), {"instruction": e.instruction, "final_state": e.final_state})
             for e in _orm_set(8, seed=3)]
    for t in trajs:
        t.run_id = run
    store.add_trajectories(run, trajs)
    orm = O.OutcomeRewardModel.from_path(str(tiny), state_budget=32)
    stats = O.train_orm(orm, store, run_id=run, epochs=1, lr=1e-4)
    assert stats["n"] == 8
    assert O.evaluate_orm(orm, store, run_id=run)["n"] == 8
    store.close()


# ---- curriculum ----------------------------------------------------------------------------------
def _ctx(iteration: int, history: dict[str, TaskOutcome], store: Any = None, run: str = "") -> PluginContext:
    return PluginContext(iteration=iteration, rng=random.Random(iteration), store=store, run_id=run, history=history)


def _seeds_file(tmp_path: Path) -> str:
    tmpl = "What is the price of {{product}} in {{year}}"
    cfgs = [{"task_id": i, "intent": tmpl.replace("{{product}}", p).replace("{{year}}", y), "intent_template": tmpl,
             "instantiation_dict": {"product": p, "year": y}, "sites": ["shopping"], "start_url": "__SHOPPING__",
             "eval": {"eval_types": ["string_match"]}}
            for i, (p, y) in enumerate([("lamp", "2021"), ("bike", "2022"), ("desk", "2023"), ("chair", "2021")])]
    path = tmp_path / "seeds.json"
    path.write_text(json.dumps(cfgs))
    return str(path)


def test_curriculum_mutates_failed_tasks_and_keeps_the_critic_band(tmp_path):
    from guigym.train.data.store import DataStore

    key = str(tmp_path / "critic")
    # scores: 2023 too hard (0.02), bike too easy (0.9), everything else in the band
    W._CRITICS[key] = FakeCritic(lambda s: 0.02 if "2023" in s else 0.9 if "bike" in s else 0.4)
    try:
        src = W.TASK_SOURCES.build("webrl_curriculum", seeds_file=_seeds_file(tmp_path), per_parent=6,
                                   phase_iterations=2, critic_dir=key, model_path="unused",
                                   families={"miniwob.click-button": {"params": {"seed": 3},
                                                                      "space": {"seed": {"range": [0, 50]}},
                                                                      "verifier_survives": True}})
        hist = {"webarena.0": TaskOutcome(2, 0), "webarena.3": TaskOutcome(2, 1),
                "miniwob.click-button": TaskOutcome(2, 0)}
        assert src(ctx=_ctx(1, hist)) == []  # not a phase boundary
        new = src(ctx=_ctx(2, hist))
        assert new and {t.parent for t in new} <= {"webarena.0", "miniwob.click-button"}  # webarena.3 succeeded once
        wa = [t for t in new if t.parent == "webarena.0"]
        assert wa
        for t in wa:
            s = t.spec
            assert s["generator"] == "mutator" and s["phase"] == 1 and s["root"] == "webarena.0"
            assert s["params"] != {"product": "lamp", "year": "2021"}
            assert s["instruction"] == f"What is the price of {s['params']['product']} in {s['params']['year']}"
            assert 0.05 <= s["critic_score"] <= 0.75
            assert "2023" not in s["instruction"] and "bike" not in s["instruction"]
            assert s["has_verifier"] is False  # new WebArena params invalidate the reference answer
            assert t.task_id.startswith("webarena.0.p1-")
        mw = [t for t in new if t.parent == "miniwob.click-button"]
        assert mw and all(t.spec["params"]["seed"] != 3 and t.spec["has_verifier"] is True for t in mw)
        # rejected candidates were scored too: the filter, not the generator, removed them
        assert any("2023" in s for s in W._CRITICS[key].seen)
        # provenance through the DataStore's task-source path
        store = DataStore(f"sqlite:///{tmp_path / 'd.db'}", blob_root=str(tmp_path / "blobs"))
        run = store.start_run("cur")
        store.add_tasks(run, [{"task_id": t.task_id, "source": t.source, "parent": t.parent, "spec": t.spec}
                              for t in new], 2)
        rows = {r["task_id"]: r for r in store.added_tasks(run)}
        assert set(rows) == {t.task_id for t in new}
        r0 = rows[wa[0].task_id]
        assert r0["parent"] == "webarena.0" and r0["source"] == "webrl_curriculum" and r0["iteration"] == 2
        # a generated task that fails later is itself a parent: its spec describes the family
        src2 = W.TASK_SOURCES.build("webrl_curriculum", critic_dir=key, model_path="u", phase_iterations=2)
        seed = src2.seed_of(wa[0].task_id, {wa[0].task_id: r0["spec"]}, None)
        assert seed.template and seed.root == "webarena.0" and seed.space["year"] == ["2021", "2022", "2023"]
        store.close()
    finally:
        W._CRITICS.pop(key)
    with pytest.raises(ConfigError):
        W.TASK_SOURCES.build("webrl_curriculum", low=0.8, high=0.2)


def test_curriculum_reads_the_last_phase_from_the_store_and_scores_the_parents_start_page(tmp_path):
    """Failed = no success among the on-policy trajectories of the last phase's iterations; the
    critic sees the parent's first prompt with the new instruction in place of the parent's."""
    from guigym.train.data.store import DataStore

    key = str(tmp_path / "critic")
    parent = "What is the price of lamp in 2021"
    fake = FakeCritic(lambda s: 0.4)
    fake.decode = lambda ids: f"<|im_start|>user\nTask: {parent}\n[start page {ids[0]}]"
    W._CRITICS[key] = fake
    store = DataStore(f"sqlite:///{tmp_path / 'd.db'}", blob_root=str(tmp_path / "blobs"))
    run = store.start_run("cur")
    trajs = [_traj("webarena.0", [_step([77])], 0.0, it=2), _traj("webarena.0", [_step([77])], 0.0, it=3),
             _traj("webarena.1", [_step([78])], 0.0, it=2), _traj("webarena.1", [_step([78])], 1.0, it=3),
             _traj("webarena.3", [_step([79])], 0.0, it=3), _traj("webarena.3", [_step([79])], 1.0, it=1)]
    for t in trajs:
        t.run_id = run
    store.add_trajectories(run, trajs)
    try:
        src = W.TASK_SOURCES.build("webrl_curriculum", seeds_file=_seeds_file(tmp_path), phase_iterations=2,
                                   per_parent=2, critic_dir=key, model_path="unused")
        # iterations 2-3 are the last phase: webarena.1 succeeded there, webarena.3's success is older
        assert set(src.failed_tasks(_ctx(4, {}, store, run), 2, 4)) == {"webarena.0", "webarena.3"}
        new = src(ctx=_ctx(4, {}, store, run))
        assert {t.parent for t in new} == {"webarena.0", "webarena.3"} and all(t.spec["phase"] == 2 for t in new)
        start0 = [x for x in fake.seen if "[start page 77]" in x]
        assert start0 and all(parent not in x and "Task: What is the price of" in x for x in start0)
        assert src.last_stats["kept"] == len(new) and src.state_dict() == {"last_phase": 2}
        # the ORM shaper treats tasks a source added with has_verifier false as unverified
        store.add_tasks(run, [{"task_id": t.task_id, "source": t.source, "parent": t.parent, "spec": t.spec}
                              for t in new], 4)
        shaper = O.ORMRewardShaper(model_path="unused")
        unverified = shaper._unverified(_ctx(4, {}, store, run))
        assert unverified == {t.task_id for t in new}
    finally:
        W._CRITICS.pop(key)
        store.close()


class _FakeChat(http.server.BaseHTTPRequestHandler):
    requests: ClassVar[list[tuple[dict[str, Any], str]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _FakeChat.requests.append((body, self.headers.get("Authorization", "")))
        text = "1. Find the cheapest red bike\n2) Show the reviews of the blue lamp\n- What is the price of lamp in 2021"
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a: Any) -> None:
        pass


def test_curriculum_openai_generator_against_a_local_fake_endpoint(tmp_path, monkeypatch):
    """A fake OpenAI-compatible server on loopback (no real instruction model here)."""
    server = http.server.HTTPServer(("127.0.0.1", 0), _FakeChat)
    th = threading.Thread(target=server.serve_forever, daemon=True)
    th.start()
    monkeypatch.setenv("WEBRL_TEST_KEY", "k-123")
    try:
        src = W.TASK_SOURCES.build("webrl_curriculum", generator="openai", use_critic=False,
                                   base_url=f"http://127.0.0.1:{server.server_port}/v1", model="m",
                                   api_key_env="WEBRL_TEST_KEY", seeds_file=_seeds_file(tmp_path))
        new = src(ctx=_ctx(1, {"webarena.0": TaskOutcome(1, 0)}))
        body, auth = _FakeChat.requests[-1]
        assert auth == "Bearer k-123" and body["model"] == "m"
        prompt = body["messages"][0]["content"]
        assert "What is the price of lamp in 2021" in prompt and "#Given Task#" in prompt
        # the parent's own instruction coming back is not a new task
        assert [t.spec["instruction"] for t in new] == ["Find the cheapest red bike", "Show the reviews of the blue lamp"]
        assert all(t.spec["generator"] == "openai" and t.spec["has_verifier"] is False and t.parent == "webarena.0"
                   for t in new)
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(ConfigError, match="base_url"):
        W.TASK_SOURCES.build("webrl_curriculum", generator="openai")


# ---- recipe and help -----------------------------------------------------------------------------
def test_webarena_lite_recipe_validates_and_builds_its_plugins(tmp_path):
    from guigym.train.config import load_recipe
    from guigym.train.loop import Trainer

    cfg = load_recipe(ROOT / "recipes" / "webrl_webarena_lite.yaml", [f"run.dir={tmp_path}"])
    assert cfg.env.id == "WebArena-v0" and cfg.env.kwargs["evaluator"] == "webarena-lite"
    assert cfg.optim.learning_rate == 1e-6  # table 4
    t = Trainer(cfg, log=lambda m: None)
    t.build_plugins()
    assert [n for n, _ in t.chains["advantage"].members] == ["webrl_gae"]
    assert [n for n, _ in t.task_source.members] == ["webrl_curriculum"]
    assert [n for n, _ in t.reward_shaper.members] == ["webrl_orm"]
    cur = t.task_source.plugins[0]
    assert (cur.low, cur.high, cur.max_new) == (0.05, 0.75, 500)
    assert type(t.policy_loss).__name__ == "WebRLKLRegressionLoss"


def test_plugin_help_cites_the_paper():
    from guigym.train.algorithms.plugin_help import describe_plugins

    text = describe_plugins()
    for needle in ("webrl_gae(", "eq. 9", "webrl_curriculum(", "sec. 2.2", "webrl_orm(", "P(YES) > P(NO)"):
        assert needle in text


# ---- the real loop: critic advantages, eq. 6 loss, curriculum, kill and --resume ---------------
def test_webrl_in_the_loop_trains_the_critic_adds_tasks_and_resumes(tmp_path):
    pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from train_helpers import Tokens, capture_updates, recipe, store_iteration, trainer

    from guigym.train.policy.hf_policy import HFPolicy
    from guigym.train.policy.tiny import build

    torch.set_num_threads(1)
    model = build(tmp_path / "tiny", seed=0)
    tokens = Tokens(HFPolicy(model))
    fam = {"t2": {"params": {"seed": 0}, "space": {"seed": {"range": [0, 100]}}, "verifier_survives": True}}
    cfg = recipe(tmp_path, model, advantage="webrl_gae", policy_loss="webrl_kl_regression", beta=0.1,
                 skip_zero_advantage_groups=False, task_sources="webrl_curriculum",
                 plugin_options={"webrl_gae": {"critic_lr": 1e-3, "critic_batch_size": 4},
                                 "webrl_curriculum": {"families": fam, "per_parent": 3, "low": 0.0, "high": 1.0}})
    critic_dir = tmp_path / "run" / "webrl_critic"
    t = trainer(cfg)
    try:
        store_iteration(t, tokens, 0, [("t1", "g0", 1, 1.0), ("t1", "g0", 2, 0.0),
                                       ("t2", "g1", 2, 0.0), ("t2", "g1", 1, 0.0)])
        seen = capture_updates(t)
        t.iteration(0)
        # V = 0.5 everywhere before the first critic update: eq. 9 (lam 0.5, gamma 1) by hand
        # 1-step success: 0.5 (1 - 0.5) + 0.5 (1 - 0.5) = 0.5; 2-step failure: step 1
        # 0.5 (0 + 0.5 - 0.5) + 0.5 (0 - 0.5) = -0.25, step 2 0.5 (0 - 0.5) + 0.5 (0 - 0.5) = -0.5
        advs = sorted(round(s.advantages[next(i for i, m in enumerate(s.loss_mask) if m)], 4) for s in seen[0])
        assert advs == [-0.5, -0.5, -0.5, -0.25, -0.25, 0.5]
        assert (critic_dir / "v000001" / "value_head.pt").is_file()
        store_iteration(t, tokens, 1, [("t1", "g2", 1, 1.0), ("t1", "g2", 1, 0.0)])
        t.iteration(1)  # phase boundary: t2 failed in iteration 0 and seeds new tasks
        added = t.store.added_tasks(t.run_id)
        assert len(added) == 3 and {a["parent"] for a in added} == {"t2"}
        assert all(a["source"] == "webrl_curriculum" and a["spec"]["phase"] == 1 for a in added)
        assert set(t.tasks) == {"t1", "t2"} | {a["task_id"] for a in added}
        values = W._CRITICS[str(critic_dir)].values([tokens.step("Open the menu.").prompt_ids])
    finally:
        t.close()
    W._CRITICS.clear()  # a new process after kill -9
    t2 = trainer(cfg, resume=True)
    try:
        est = t2.chains["advantage"].plugins[0]
        assert est.version == 2
        assert W._CRITICS[str(critic_dir)].values([tokens.step("Open the menu.").prompt_ids]) == pytest.approx(values)
        assert set(t2.tasks) == set(t.tasks)
    finally:
        t2.close()
        W._CRITICS.clear()
