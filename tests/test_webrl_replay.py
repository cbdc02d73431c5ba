"""WebRL's replay buffer (sec. 2.2): successes of earlier phases join their task's group as
``replay`` members, capped by ``max_ratio``, never from the current phase, used ``max_replays``
times; the buffer survives a checkpoint; the recipe composes it with the perplexity filter."""
from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy")

from guigym.core.errors import ConfigError  # noqa: E402
from guigym.train.algorithms.context import PluginContext  # noqa: E402
from guigym.train.algorithms.registry import GROUP_BUILDERS, STEP_FILTERS  # noqa: E402
from guigym.train.data.store import DataStore  # noqa: E402
from guigym.train.data.types import Group, Step, Trajectory  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def traj(task: str, success: bool) -> Trajectory:
    steps = [Step(prompt_ids=[1, 2], response_ids=[3, 4], rollout_logprobs=[-0.1, -0.2], policy_version=0)]
    return Trajectory(traj_id=uuid.uuid4().hex, run_id="", task_id=task, seed=0, group_id="g", steps=steps,
                      reward=float(success), success=success)


@pytest.fixture
def store(tmp_path):
    s = DataStore.for_run_dir(str(tmp_path))
    yield s
    s.close()


def put(store, run, trajs):
    for t in trajs:
        t.run_id = run
    store.add_trajectories(run, trajs)
    return trajs


def ctx(iteration, store, run, policy=None):
    return PluginContext(iteration=iteration, rng=random.Random(iteration), store=store, run_id=run, history={},
                         policy=policy)


def sources(groups):
    return [[t.source for t in g.trajectories] for g in groups]


def test_successes_replay_only_in_later_phases_once_and_into_their_own_task(store):
    run = store.start_run("replay")
    b = GROUP_BUILDERS.build("webrl_replay", phase_iterations=2)
    win_a = traj("A", True)
    it0 = [Group("a0", "A", put(store, run, [win_a, traj("A", False)])),
           Group("b0", "B", put(store, run, [traj("B", False), traj("B", False)]))]
    assert sources(b(it0, ctx=ctx(0, store, run))) == [["on_policy"] * 2, ["on_policy"] * 2]
    # iteration 1 is still phase 0: the phase-0 success is not replayed yet
    it1 = [Group("a1", "A", put(store, run, [traj("A", False), traj("A", False)]))]
    assert sources(b(it1, ctx=ctx(1, store, run))) == [["on_policy"] * 2]
    # phase 1: it joins A's group (a copy with its own id, its behaviour log-probs); B has no success
    it2 = [Group("a2", "A", put(store, run, [traj("A", False), traj("A", False)])),
           Group("b2", "B", put(store, run, [traj("B", False), traj("B", False)]))]
    out = b(it2, ctx=ctx(2, store, run))
    assert sources(out) == [["on_policy", "on_policy", "replay"], ["on_policy"] * 2]
    replayed = out[0].trajectories[-1]
    assert replayed.traj_id != win_a.traj_id and replayed.steps[0].rollout_logprobs == [-0.1, -0.2]
    # used once (max_replays 1): not replayed again
    it4 = [Group("a4", "A", put(store, run, [traj("A", False), traj("A", False)]))]
    assert sources(b(it4, ctx=ctx(4, store, run))) == [["on_policy"] * 2]


def test_max_ratio_caps_the_replayed_share_and_state_round_trips(store):
    run = store.start_run("cap")
    b = GROUP_BUILDERS.build("webrl_replay", max_ratio=0.5, max_replays=3)
    put(store, run, [])
    it0 = [Group("a0", "A", put(store, run, [traj("A", True) for _ in range(4)]))]
    b(it0, ctx=ctx(0, store, run))
    assert len(b.buffer) == 4
    c = GROUP_BUILDERS.build("webrl_replay", max_ratio=0.5, max_replays=3)
    c.load_state_dict(json.loads(json.dumps(b.state_dict())))
    it1 = [Group("a1", "A", put(store, run, [traj("A", False), traj("A", False)]))]
    out = c(it1, ctx=ctx(1, store, run))
    # M = 2 on-policy trajectories, max_ratio 0.5 -> 1 replayed of the 4 buffered
    assert sources(out) == [["on_policy", "on_policy", "replay"]]
    assert sorted(e["replays"] for e in c.buffer) == [0, 0, 0, 1]


def test_replay_is_capped_at_twice_the_fresh_data_by_default(store):
    # WebRL appendix A: "the replay data limited to twice the size of current interaction data"
    run = store.start_run("twice")
    b = GROUP_BUILDERS.build("webrl_replay")
    b([Group("a0", "A", put(store, run, [traj("A", True) for _ in range(5)]))], ctx=ctx(0, store, run))
    out = b([Group("a1", "A", put(store, run, [traj("A", False), traj("A", False)]))], ctx=ctx(1, store, run))
    # M = 2 fresh trajectories -> 4 of the 5 buffered successes replayed (was 2 with max_ratio 1)
    assert sources(out) == [["on_policy"] * 2 + ["replay"] * 4]


def test_bad_options_name_the_field():
    with pytest.raises(ConfigError, match="phase_iterations"):
        GROUP_BUILDERS.build("webrl_replay", phase_iterations=0)
    with pytest.raises(ConfigError, match="max_ratio"):
        GROUP_BUILDERS.build("webrl_replay", max_ratio=-1)


def test_the_recipe_composes_replay_with_the_perplexity_filter():
    from guigym.train.loop import load_recipe

    cfg = load_recipe(ROOT / "recipes" / "webrl_webarena_lite.yaml")
    builders = cfg.algorithm.group_builder
    names = [b if isinstance(b, str) else b["name"] for b in (builders if isinstance(builders, list) else [builders])]
    assert "webrl_replay" in names
    f = STEP_FILTERS.build("perplexity_band", **cfg.algorithm.plugin_options["perplexity_band"])
    assert f.sources == frozenset({"replay"})
    opts = cfg.algorithm.plugin_options
    assert opts["webrl_replay"]["max_ratio"] == 2.0  # appendix A: twice the current interaction data
    # one phase length for the curriculum, the replay and eq. 6's previous-phase reference
    assert opts["webrl_kl_regression"]["phase_iterations"] == opts["webrl_replay"]["phase_iterations"] \
        == opts["webrl_curriculum"]["phase_iterations"]
