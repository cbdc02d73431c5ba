"""DART's decoupled topology (issue 16 item 2; guigym.train.decoupled) on a local Ray, with real
MiniWoB tasks (Chromium) and a fresh tiny model on CPU.

One run (``run.topology: decoupled``, 2 envs as Ray actors, 2 policy workers, k = 1,
max_policy_lag 0, drop) is "killed" right after taking its third batch (never trained), then
resumed to 4 updates. The tests read its event log and its DataStore:

(a) rollouts keep running while the trainer trains (an env reset/step overlaps a train step);
(b) nothing older than max_policy_lag reaches the loss (drop), and a stale trajectory carries
    ``stale_weight ** (lag - max_policy_lag)`` on every token (reweight, in-process trainer);
(c) at no instant do more than k workers reload weights;
(d) every stored trajectory trains at most once, and the batch taken before the kill, and
    everything else stored after the checkpoint's cursor, is consumed after the resume.
No wall-clock bounds: only orderings and counts.
"""
from __future__ import annotations

import json
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
import yaml

try:
    import ray  # noqa: F401
except ImportError:  # the ray extra: pip install 'guigym[ray]'
    pytest.skip("ray is not installed (pip install 'guigym[ray]')", allow_module_level=True)
from _ray import local_ray  # noqa: E402,F401 - the module's local Ray
pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("sqlalchemy")

from guigym.core.errors import ConfigError  # noqa: E402
from guigym.train.config import describe, from_dict  # noqa: E402
from guigym.train.decoupled import events as E  # noqa: E402
from guigym.train.decoupled import staleness  # noqa: E402
from guigym.train.decoupled.rollout_service import WorkerPool  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
G, K, UPDATES = 4, 1, 4


def _recipe(tmp: Path, model: Path, name: str, **decoupled: Any) -> dict[str, Any]:
    cfg = yaml.safe_load((ROOT / "recipes" / "grpo_miniwob_tiny.yaml").read_text())
    cfg["run"].update(name=name, dir=str(tmp / name), iterations=UPDATES, seed=3, backend="ray",
                      topology="decoupled")
    cfg["model"] = {"path": str(model)}
    cfg["env"].update(tasks=["click-test-2"], num_envs=2)
    cfg["rollout"].update(num_generations=G, groups_per_iteration=1, max_batch=1)
    cfg["algorithm"].update(per_device_train_batch_size=1, skip_zero_advantage_groups=False)
    cfg["eval"].update(enabled=True, seeds={"start": 1000000, "count": 2})  # the loop's held-out evaluation
    cfg["ray"] = {"num_cpus": 0.5}
    cfg["decoupled"] = {"num_policy_workers": 2, "max_concurrent_weight_updates": K, "groups_per_update": 1,
                        **decoupled}
    return cfg


@pytest.fixture(scope="module")
def model(tmp_path_factory: Any) -> Path:
    from guigym.train.policy.tiny import build

    return build(tmp_path_factory.mktemp("models") / "tiny", seed=0)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: Any, model: Path, local_ray: Any) -> dict[str, Any]:
    from guigym.train import checkpoint
    from guigym.train.data.store import DataStore
    from guigym.train.decoupled import run_decoupled

    tmp = tmp_path_factory.mktemp("decoupled")
    cfg = _recipe(tmp, model, "dec", max_policy_lag=0, stale_policy="drop")
    first = run_decoupled(from_dict(cfg), log=lambda m: None, stop_after_updates=2)
    run_dir = Path(first["run_dir"])
    state = json.loads((checkpoint.latest(run_dir / "checkpoints") / "state.json").read_text())
    store = DataStore.for_run_dir(str(run_dir))
    run_id = store.start_run("dec", from_dict(cfg).to_dict())
    before = store.get_trajectories(run_id, source="on_policy", with_steps=False)
    rows = store.row_ids([t.traj_id for t in before])
    cursor = state["decoupled"]["cursor"]
    second = run_decoupled(from_dict(cfg), resume=True, log=lambda m: None)
    out = {"first": first, "second": second, "store": store, "run_id": run_id, "cursor": cursor,
           "after_cursor": {t.traj_id for t in before if rows[t.traj_id] > cursor},
           "before": {t.traj_id for t in before}}
    yield out
    store.close()


def test_rollouts_continue_while_the_trainer_trains(runs):
    first, second = runs["first"], runs["second"]
    assert (first["updates"], first["crashed"]) == (2, True)
    assert (second["start_version"], second["version"], second["crashed"]) == (2, UPDATES, False)
    # held-out evaluation: before (first call, cached for the resume) and after training
    assert "before" in first and "after" not in first
    assert second["before"] == first["before"] and second["after"]["episodes"] == 2
    assert set(second["z_test"]) >= {"z", "p_one_sided"}
    overlaps = 0
    for out in (first, second):
        evs = out["events"]
        trains = [e for e in E.select(evs, "trainer", "train") if e["samples"] > 0]
        steps = E.select(evs, "env", "step")
        env_calls = E.select(evs, "env")  # resets and steps of the next groups' rollouts
        assert trains and steps
        overlaps += sum(1 for t in trains for s in env_calls if E.overlapping(t, s))
        assert out["actions"] == len(steps) > 0 and out["env_busy_s"] > 0 and out["trainer_busy_s"] > 0
        assert out["policy_busy_s"] > 0 and 0 < out["u_env"] <= 1.0
    assert overlaps > 0, "no env call ran while the trainer trained: the services block each other"


def test_nothing_older_than_the_lag_bound_reaches_the_loss(runs):
    store = runs["store"]
    rows = runs["first"]["staleness"] + runs["second"]["staleness"]
    assert rows
    for r in rows:
        assert r["lag"] == r["trained_version"] - r["behaviour_version"] >= 0
        assert r["action"] == ("train" if r["lag"] <= 0 else "drop"), r
        used = store.usage(r["traj_id"])
        if r["action"] == "drop":
            assert used == [], f"dropped trajectory {r['traj_id']} was trained on"
        else:  # skip_zero_advantage_groups off, no step filter: every kept trajectory trains
            assert {v for _, v in used} == {r["trained_version"] + 1}, r


def test_never_more_than_k_workers_reload_at_once(runs):
    second = E.select(runs["second"]["events"], "policy", "reload")
    for out in (runs["first"], runs["second"]):
        reloads = E.select(out["events"], "policy", "reload")
        assert reloads and E.max_concurrent(reloads) <= K
        # every generation carries the version its worker served
        newest = max(r["version"] for r in reloads)
        assert {e["version"] for e in E.select(out["events"], "policy", "generate")} <= set(range(newest + 1))
    # the resumed run's workers loaded the checkpoint's weights (version 2) before any rollout
    start = runs["second"]["start_version"]
    assert sorted((r["worker"], r["version"]) for r in second if r["version"] == start) == [
        ("w0", start), ("w1", start)]
    gens = E.select(runs["second"]["events"], "policy", "generate")
    assert gens and min(e["version"] for e in gens) >= start
    assert max(r["end"] for r in second if r["version"] == start) <= min(e["start"] for e in gens)
    # a graceful end waits until both workers serve the last version
    assert sorted((r["worker"], r["version"]) for r in second if r["version"] == UPDATES) == [
        ("w0", UPDATES), ("w1", UPDATES)]


def test_each_stored_trajectory_trains_at_most_once_and_a_resume_loses_none(runs):
    store, run_id = runs["store"], runs["run_id"]
    everything = store.get_trajectories(run_id, source="on_policy", with_steps=False)
    for t in everything:
        assert len({v for _, v in store.usage(t.traj_id)}) <= 1, t.traj_id
    consumed_first = {r["traj_id"] for r in runs["first"]["staleness"]}
    consumed_second = {r["traj_id"] for r in runs["second"]["staleness"]}
    assert not consumed_first & consumed_second
    # the batch taken at the kill was never trained: it is after the cursor and came back
    assert runs["after_cursor"] and len(runs["after_cursor"]) >= G
    assert runs["after_cursor"] <= consumed_second
    assert runs["before"] - runs["after_cursor"] <= consumed_first


def _groups_from(store: Any, run_id: str, version: int) -> list[Any]:
    from guigym.train.data.types import Group

    trajs = [t for t in store.get_trajectories(run_id, source="on_policy") if t.policy_version == version]
    by: dict[str, Any] = {}
    for t in trajs:
        by.setdefault(t.group_id, Group(t.group_id, t.task_id, [])).trajectories.append(t)
    return [g for g in by.values() if len(g.trajectories) >= 2][:1]


def test_stale_trajectories_carry_their_weight_in_reweight_mode_and_never_train_in_drop_mode(runs, model,
                                                                                                 tmp_path):
    """The trainer's update on real stored trajectories (behaviour version 0): at learner version
    3 with max_policy_lag 1, reweight scales every token's advantage by 0.5 ** (3 - 0 - 1)."""
    import copy

    from train_helpers import capture_updates

    from guigym.train.decoupled.trainer import DecoupledTrainer

    src = _groups_from(runs["store"], runs["run_id"], 0)
    assert src, "the run stored no version-0 group"
    for mode in ("reweight", "drop"):
        cfg = _recipe(tmp_path, model, f"rw-{mode}", max_policy_lag=1, stale_policy=mode, stale_weight=0.5)
        t = DecoupledTrainer(from_dict(cfg), log=lambda m: None)
        try:
            t.build()
            groups = []
            for g in src:  # this run's copies, with rewards that give non-zero advantages
                g = copy.deepcopy(g)
                for k, tr in enumerate(g.trajectories):
                    tr.run_id, tr.reward = t.run_id, float(k == 0)
                    tr.steps[-1].reward = tr.reward
                groups.append(g)
            t.store.add_trajectories(t.run_id, [tr for g in groups for tr in g.trajectories])
            seen = capture_updates(t)
            log = E.EventLog("trainer")
            fresh, rows0 = t.update(copy.deepcopy(groups), 1, log)  # lag 1: within the bound
            stale, rows3 = t.update(copy.deepcopy(groups), 3, log)  # lag 3: two versions over
            assert fresh is not None and {r["action"] for r in rows0} == {"train"}
            if mode == "drop":
                assert stale is None and {r["action"] for r in rows3} == {"drop"} and len(seen) == 1
                continue
            assert {r["action"] for r in rows3} == {"reweight"} and len(seen) == 2
            base = {(s.traj_id, s.step_index): s for s in seen[0]}
            assert any(any(a != 0 for a in s.advantages) for s in seen[0])
            for s in seen[1]:
                b = base[(s.traj_id, s.step_index)]
                assert s.advantages == pytest.approx([0.25 * a for a in b.advantages])
            recorded = [x for r in rows3 for x in r["samples"]]
            assert recorded and {x["weight"] for x in recorded} == {0.25}
            assert sum(x["tokens"] for x in recorded) == sum(s.num_loss_tokens for s in seen[1])
        finally:
            t.close()


# ---- no Ray needed ----------------------------------------------------------------------------
def test_env_clusters_encode_prompts_like_the_policy_without_loading_it(model):
    import numpy as np

    from guigym.train.decoupled.env_cluster import PromptCodec
    from guigym.train.policy.hf_policy import HFPolicy
    from guigym.train.rollout.prompts import PromptBuilder

    codec, policy = PromptCodec(str(model)), HFPolicy(str(model))
    assert not hasattr(codec, "model")
    obs = {"a11y": '<a11y nodes="2" truncated="false"><button id="1" name="OK" bbox="2,2,20,10"/>'
                   '<link id="2" name="Next" bbox="2,20,20,10"/></a11y>', "instruction": "Click OK.",
           "screenshot": np.zeros((56, 56, 3), np.uint8)}
    for images in (0, 1):
        pa = PromptBuilder(codec, history_images=images).episode("Click OK.").prompt(obs)
        pb = PromptBuilder(policy, history_images=images).episode("Click OK.").prompt(obs)
        assert pa.prompt_ids == pb.prompt_ids and len(pa.images) == len(pb.images) == images



class _FakeEngine:
    """Answers at once; ``update_weights`` blocks until the test opens ``gate``."""

    def __init__(self, name: str, gate: threading.Event, live: list[int], lock: threading.Lock) -> None:
        self.name, self.gate, self.live, self.lock = name, gate, live, lock
        self.version = 0

    def submit(self, req: Any) -> "Future[Any]":
        from guigym.train.rollout.policy_service import GenResult

        f: Future = Future()
        f.set_result(GenResult([1], [0.0], "x", None, self.version, endpoint=self.name))
        return f

    def update_weights(self, version: int, path: Any = None, state_dict: Any = None) -> None:
        with self.lock:
            self.live[0] += 1
            self.live[1] = max(self.live[1], self.live[0])
        self.gate.wait(30)
        self.version = version
        with self.lock:
            self.live[0] -= 1

    def close(self) -> None:
        pass


def test_worker_pool_refreshes_at_most_k_at_a_time_and_keeps_serving():
    gate, lock, live = threading.Event(), threading.Lock(), [0, 0]
    engines = [_FakeEngine(f"e{i}", gate, live, lock) for i in range(4)]
    pool = WorkerPool(engines, max_concurrent_updates=2)
    try:
        pool.update_weights(1, state_dict={"w": 1})
        while live[0] < 2:  # two workers are now inside their reload, blocked on the gate
            threading.Event().wait(0.01)
        # the other two keep answering, still with version 0
        answers = [pool.generate(object()) for _ in range(6)]
        assert {a.policy_version for a in answers} == {0} and len({a.endpoint for a in answers}) == 2
        assert live[0] == 2
        gate.set()
        assert pool.wait_synced(1, timeout_s=30)
        assert pool.versions() == [1, 1, 1, 1] and live[1] == 2
        assert E.max_concurrent(E.select(pool.events(), "policy", "reload")) <= 2
        assert {pool.generate(object()).policy_version for _ in range(4)} == {1}
    finally:
        gate.set()
        pool.close()


def test_staleness_split_and_event_helpers():
    from guigym.train.data.types import Group, Step, Trajectory

    def traj(tid: str, v: int) -> Trajectory:
        return Trajectory(traj_id=tid, run_id="", task_id="t", seed=0, group_id="g",
                          steps=[Step([1], [2], [0.0], v)], reward=0.0, success=False)

    g = Group("g", "t", [traj("a", 5), traj("b", 3)])
    g.trajectories[1].info.update(env_lane="env1/3", env_span=[10.0, 12.5])  # where b ran (env cluster's tag)
    kept, rec = staleness.split_stale([g], 6, 1, "drop")
    assert [t.traj_id for t in kept[0].trajectories] == ["a"] and [r.action for r in rec] == ["train", "drop"]
    assert (rec[1].env_lane, rec[1].env_span, rec[1].steps) == ("env1/3", [10.0, 12.5], 1)  # bench/scale.py reads these
    assert (rec[0].env_lane, rec[0].env_span) == ("", None)
    assert len(g.trajectories) == 2  # the input is untouched
    kept, rec = staleness.split_stale([g], 6, 1, "reweight")
    assert len(kept[0].trajectories) == 2 and rec[1].action == "reweight" and rec[1].lag == 3
    assert staleness.sample_weight(3, 6, 1, 0.5) == 0.25 and staleness.sample_weight(5, 6, 1, 0.5) == 1.0
    ev = [{"service": "p", "kind": "r", "worker": "a", "start": 0.0, "end": 2.0},
          {"service": "p", "kind": "r", "worker": "a", "start": 1.0, "end": 3.0},
          {"service": "p", "kind": "r", "worker": "b", "start": 3.0, "end": 4.0}]
    assert E.busy_s(ev) == 4.0 and E.max_concurrent(ev) == 2 and E.span_s(ev) == 4.0
    assert E.overlapping(ev[0], ev[1]) and not E.overlapping(ev[1], ev[2])


def test_the_decoupled_recipe_loads_and_bad_combinations_are_refused():
    from guigym.train.config import load_recipe
    from guigym.train.decoupled.run import check_config

    cfg = load_recipe(ROOT / "recipes" / "dart_decoupled_miniwob_tiny.yaml")
    assert cfg.run.topology == "decoupled" and cfg.run.backend == "ray"
    check_config(cfg)
    with pytest.raises(ConfigError, match="decoupled.max_buffered_groups"):
        check_config(load_recipe(ROOT / "recipes" / "dart_decoupled_miniwob_tiny.yaml",
                                 ["decoupled.max_buffered_groups=1", "decoupled.groups_per_update=2"]))
    with pytest.raises(ConfigError, match="decoupled.num_env_clusters"):
        check_config(load_recipe(ROOT / "recipes" / "dart_decoupled_miniwob_tiny.yaml",
                                 ["decoupled.num_env_clusters=9"]))


def test_topology_keys_validate_and_have_help_text(tmp_path):
    base = {"run": {"name": "a", "dir": str(tmp_path)}, "env": {"tasks": ["click-test"]}}
    assert from_dict(base).run.topology == "coupled"
    cfg = from_dict({**base, "run": {**base["run"], "topology": "decoupled"},
                     "decoupled": {"max_policy_lag": 2, "stale_policy": "reweight"}})
    assert (cfg.decoupled.max_policy_lag, cfg.decoupled.stale_policy) == (2, "reweight")
    with pytest.raises(ConfigError, match="decoupled: max_policy_lag set but run.topology is 'coupled'"):
        from_dict({**base, "decoupled": {"max_policy_lag": 2}})
    with pytest.raises(ConfigError, match="stale_policy"):
        from_dict({**base, "run": {**base["run"], "topology": "decoupled"}, "decoupled": {"stale_policy": "x"}})
    lines = {ln.split(" (")[0].strip(): ln for ln in describe().splitlines()}
    for key in ("run.topology", "decoupled.num_policy_workers", "decoupled.max_concurrent_weight_updates",
                "decoupled.max_policy_lag", "decoupled.stale_policy", "decoupled.groups_per_update"):
        assert key in lines and "DART" in describe() and "default" in lines[key], key
