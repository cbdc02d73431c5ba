"""Ray backend (issue 16 item 1): RayEnvPool / RayVectorEnv on a local Ray give what the process
backend and Gymnasium's SyncVectorEnv give for the same seeds; a killed actor is a lost episode,
then a fresh actor; ``guigym eval --backend ray`` writes the same results as ``--backend process``."""
from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from PIL import Image

try:
    import ray
except ImportError:  # the ray extra: pip install 'guigym[ray]'
    pytest.skip("ray is not installed (pip install 'guigym[ray]')", allow_module_level=True)
from _ray import local_ray  # noqa: E402,F401 - the module's local Ray

import guigym  # noqa: F401 - registers the envs
from guigym.agents.oracle.miniwob import MiniWoBOracle
from guigym.cli import main
from guigym.core.errors import EnvInfraError
from guigym.envs import RayVectorEnv
from guigym.envs.ray_backend import RayEnvPool
from guigym.eval.runner import read_jsonl


def _episodes(out) -> dict[str, dict]:
    """Per episode key: its result line, its per-step records and its screenshots as arrays."""
    eps = {}
    for r in read_jsonl(out / "results.jsonl"):
        tdir = out / r["trajectory_dir"]
        episode = json.loads((tdir / "episode.json").read_text())
        shots = [np.asarray(Image.open(p)) for p in sorted(tdir.glob("step_*.png"))]
        eps[r["key"]] = {"result": r, "steps": episode["steps"], "shots": shots}
    return eps


def test_eval_ray_backend_gives_the_process_backends_results(tmp_path, local_ray):
    common = ["eval", "--quiet", "--tasks", "click-checkboxes,enter-text", "--agent", "oracle",
              "--num-envs", "2", "--episodes", "2", "--seed", "7"]
    assert main([*common, "--out", str(tmp_path / "proc")]) == 0
    assert main([*common, "--backend", "ray", "--out", str(tmp_path / "ray")]) == 0
    proc, viaray = _episodes(tmp_path / "proc"), _episodes(tmp_path / "ray")
    assert sorted(proc) == sorted(viaray) == sorted(f"{t}/{s}/0" for t in ("click-checkboxes", "enter-text") for s in (7, 8))
    for key, p in proc.items():
        r = viaray[key]
        for field in ("status", "score", "success", "steps", "instruction", "domain", "operations"):
            assert p["result"][field] == r["result"][field], (key, field)
        assert p["result"]["status"] == "done" and p["result"]["success"] is True, key
        assert [s["action_text"] for s in p["steps"]] == [s["action_text"] for s in r["steps"]], key
        assert [s["reward"] for s in p["steps"]] == [s["reward"] for s in r["steps"]], key
        assert len(p["shots"]) == len(r["shots"]) == p["result"]["steps"] + 1, key
        for a, b in zip(p["shots"], r["shots"]):
            assert np.array_equal(a, b), f"{key}: screenshots differ"
    sp = json.loads((tmp_path / "proc" / "summary.json").read_text())
    sr = json.loads((tmp_path / "ray" / "summary.json").read_text())
    assert set(sp) == set(sr) and set(sp["per_task"]) == set(sr["per_task"]) == {"click-checkboxes", "enter-text"}
    timing = {k for k in sp["overall"] if "wall" in k or k.endswith("_s")}
    assert {k: v for k, v in sp["overall"].items() if k not in timing} == \
        {k: v for k, v in sr["overall"].items() if k not in timing}
    assert sr["overall"]["episodes"] == 4 and sr["overall"]["lost"] == 0
    assert json.loads((tmp_path / "ray" / "config.json").read_text())["backend"] == "ray"
    assert (tmp_path / "ray" / "report.html").exists() and (tmp_path / "ray" / "results.csv").exists()


def test_killed_actor_is_a_lost_episode_then_a_fresh_actor(local_ray):
    pool = RayEnvPool("MiniWoB-v0", num_envs=2, env_kwargs={"task": "click-test"}, call_timeout_s=120)
    try:
        pool.reset_async(0, seed=11)
        pool.reset_async(1, seed=12)
        first = {}
        while len(first) < 2:
            first.update({r.index: r for r in pool.wait()})
        assert not first[0].lost and not first[1].lost and first[0].error is None
        assert not pool.call(0, "step", "wait(seconds=0)").lost
        old = pool.actor(0)
        ray.kill(old)  # mid-episode
        pool.step_async(0, "click(x=5, y=5)")
        pool.step_async(1, "wait(seconds=0)")
        got = {}
        while len(got) < 2:
            got.update({r.index: r for r in pool.wait()})
        assert got[0].lost and "died" in got[0].error and got[0].value is None
        assert not got[1].lost and got[1].error is None, "the other env's episode goes on"
        assert pool.restarts == 1 and pool.actor(0) is not old
        again = pool.call(0, "reset", {"seed": 11})
        assert not again.lost and again.value[1]["task_id"] == "click-test"
        assert np.array_equal(again.value[0]["screenshot"], first[0].value[0]["screenshot"])
        assert not pool.call(0, "step", "wait(seconds=0)").lost
    finally:
        pool.close()


def _oracle_actions(obs, info, agents) -> list[str]:
    acts = []
    for i, agent in enumerate(agents):
        if agent is None:
            acts.append("wait(seconds=0)")
            continue
        agent.reset({"task_id": info["task_id"][i], "instruction": obs["instruction"][i]})
        acts.append(agent.act({k: obs[k][i] for k in obs}))
    return acts


def _play(vec, steps: int, actions: list[list[str]] | None = None):
    """Reset with seeds [5, 6], then ``steps`` steps: env 0 plays the oracle (click-test ends in one
    step), env 1 waits until its 2-step budget truncates. Returns the trace and the actions used."""
    obs, info = vec.reset(seed=[5, 6])
    trace = [(obs, None, None, None, info)]
    used = []
    for k in range(steps):
        acts = actions[k] if actions else _oracle_actions(obs, info, [MiniWoBOracle(), None])
        obs, rew, term, trunc, info = vec.step(acts)
        trace.append((obs, rew, term, trunc, info))
        used.append(acts)
    return trace, used


def test_ray_vector_env_matches_sync_vector_env_with_autoreset(local_ray):
    kwargs = {"task": "click-test", "max_steps": 2}
    sync = gym.make_vec("MiniWoB-v0", num_envs=2, vectorization_mode="sync", **kwargs)
    try:
        want, actions = _play(sync, 4)
        spaces = (sync.single_observation_space, sync.observation_space, sync.action_space)
    finally:
        sync.close()
    vec = RayVectorEnv("MiniWoB-v0", num_envs=2, env_kwargs=kwargs)
    try:
        assert vec.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
        assert (vec.single_observation_space, vec.observation_space, vec.action_space) == spaces
        got, _ = _play(vec, 4, actions)
        assert vec.get_attr("np_random_seed") == (5, 6)
        # a dead actor: EnvInfraError naming the sub-env, then reset() works on the fresh actor
        ray.kill(vec._pool.actor(1))
        with pytest.raises(EnvInfraError, match=r"sub-env\(s\) \[1\] lost"):
            vec.step(["wait(seconds=0)"] * 2)
        obs, _ = vec.reset(seed=[5, 6])
        assert np.array_equal(obs["screenshot"], want[0][0]["screenshot"])
    finally:
        vec.close()
    # the trace exercises NEXT_STEP: env 0 succeeds at step 1, is reset by step 2 (reward 0, flags
    # off) and succeeds again at step 3; env 1 truncates at step 2 and is reset by step 3
    assert list(want[1][1]) == [1.0, 0.0] and list(want[1][2]) == [True, False]
    assert list(want[2][1]) == [0.0, 0.0] and list(want[2][2]) == [False, False] and list(want[2][3]) == [False, True]
    assert list(want[3][1]) == [1.0, 0.0] and list(want[3][2]) == [True, False] and not want[3][3].any()
    for k, (w, g) in enumerate(zip(want, got)):
        assert np.array_equal(w[0]["screenshot"], g[0]["screenshot"]), f"step {k}: screenshots differ"
        for key in ("a11y", "instruction"):
            assert tuple(w[0][key]) == tuple(g[0][key]), (k, key)
        # each env serves its pages on its own port under a random token: compare the page only
        assert [u.split("/miniwob/")[1] for u in w[0]["url"]] == [u.split("/miniwob/")[1] for u in g[0]["url"]]
        if k:
            assert np.array_equal(w[1], g[1]) and np.array_equal(w[2], g[2]) and np.array_equal(w[3], g[3]), k
            assert w[1].dtype == g[1].dtype and w[2].dtype == g[2].dtype
        for key in ("task_id", "seed", "_task_id"):
            if key in w[4] or key in g[4]:
                assert list(w[4][key]) == list(g[4][key]), (k, key)

