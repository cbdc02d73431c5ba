"""BEPA LEVEL-2 cache (issue 14, item 3, partial; BEPA sec. 4, eqs. 2-4): seeding from D_self,
rule-U refresh, replacement of only the first failed trajectory and only on total failure."""
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
        # a D_self trajectory collected with a plan is refused, not replayed with its plan
        store.add_trajectories(seed_run, [traj("D", True, seed_run, guidance=1)])
        with pytest.raises(ValueError, match="guidance level 1"):
            GROUP_BUILDERS.build("bepa_cache", seed_run_id=seed_run)([], ctx=ctx(0, store, run))
    finally:
        store.close()
