"""bench/dart_regime.py: DART's regime for bench/scale.py (issue 38).

The derivations are recomputed here from the paper's stated figures (5-20 min episodes, a 30-step
budget, 80 envs, 8 + 8 GPUs, 2 GPUs per worker) and the env's draws are checked against them;
nothing sleeps (time_scale 0) and nothing is timed.
"""
from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from guigym.core.errors import ConfigError
from guigym.envs.latency_model import LatencyModelEnv
from guigym.train.rollout.latency_engine import PolicyLatencyModel, UpdateLatencyModel

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("bench_dart_regime", ROOT / "bench" / "dart_regime.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


D = _load()
REGIME = D.DartRegime()
REPLY_S = 1.28  # PolicyLatencyModel's floor: one request on an unsaturated worker


@pytest.fixture(scope="module")
def episodes():
    """(env step latency, step latencies of the episode) of 400 episodes of the committed file."""
    env = LatencyModelEnv(latency=D.LATENCY_PATH, time_scale=0, n_elements=20, min_targets=3, max_targets=3,
                          max_steps=30)
    out = []
    for seed in range(400):
        env.reset(seed=seed)
        for _ in range(3):
            env.step("wait()")
        out.append(env.latencies[1:])
    env.close()
    return out


def test_stated_figures_and_their_derivation():
    assert (REGIME.num_envs, REGIME.step_budget, REGIME.group_size, REGIME.max_policy_lag) == (80, 30, 8, 1)
    assert REGIME.policy_workers == 4 and REGIME.groups_per_update == 10  # 8 GPUs / 2 per worker; 80 / 8
    assert (5 * 60 / 30, 20 * 60 / 30) == (10.0, 40.0)
    assert REGIME.step_wall_s == pytest.approx((10.0, 40.0))
    assert PolicyLatencyModel().batch_s(1) == pytest.approx(REPLY_S)
    assert REGIME.env_step_s == pytest.approx((10.0 - REPLY_S, 40.0 - REPLY_S))
    # the single-request reply holds because the service is far from saturated: 80 envs / 25 s mean step
    assert REGIME.request_rate_rps == pytest.approx(80 / 25.0) and REGIME.capacity_rps == pytest.approx(4 * 2.55)
    assert REGIME.update == UpdateLatencyModel(gpus=8)


def test_the_committed_latency_file_is_the_model():
    on_disk = json.loads(D.LATENCY_PATH.read_text())
    assert on_disk == json.loads(json.dumps(REGIME.latency_file()))  # regenerate with bench/dart_regime.py
    assert on_disk["step_draw"] == "episode"
    rec = json.loads((ROOT / "bench" / "data" / "latency_osworld.json").read_text())
    assert on_disk["reset"]["counts"] == rec["reset"]["counts"]  # reset: the OSWorld-v0 recording
    edges = on_disk["step"]["edges"]
    assert edges[0] == pytest.approx(10.0 - REPLY_S) and edges[-1] == pytest.approx(40.0 - REPLY_S)
    assert len(set(on_disk["step"]["counts"])) == 1 and np.allclose(np.diff(edges), np.diff(edges)[0])  # uniform


def test_an_episode_keeps_one_step_latency_and_episodes_span_5_to_20_minutes(episodes):
    lo, hi = 10.0 - REPLY_S, 40.0 - REPLY_S
    per_episode = np.array([lat[0] for lat in episodes])
    assert all(lat == [lat[0]] * len(lat) for lat in episodes)  # drawn once per episode
    assert len(set(per_episode.tolist())) == len(per_episode)  # ... and anew for each
    assert per_episode.min() >= lo and per_episode.max() <= hi
    minutes = 30 * (per_episode + REPLY_S) / 60  # an episode of the full budget
    assert minutes.min() < 5.5 and minutes.max() > 19.5  # spans the stated 5-20 min
    # uniform on [5, 20]: mean 12.5 (sd of the mean of 400 draws: 15 / sqrt(12 * 400) = 0.22)
    assert minutes.mean() == pytest.approx(12.5, abs=0.9)
    assert np.mean(minutes < 8.75) == pytest.approx(0.25, abs=0.08)  # first quarter of the range


def test_same_seed_replays_the_episode_latency():
    env = LatencyModelEnv(latency=D.LATENCY_PATH, time_scale=0)
    env.reset(seed=5)
    env.step("wait()")
    first = list(env.latencies)
    env.reset(seed=6)
    env.step("wait()")
    env.reset(seed=5)
    env.step("wait()")
    assert env.latencies == first


def test_agent_model_success_and_length_match_the_env():
    # success within 30 steps = P(Binomial(30, 1/20) >= 3), written out independently of the module
    p_fail = sum(math.comb(30, k) * 0.05 ** k * 0.95 ** (30 - k) for k in range(3))
    success, mean_len, at_budget = REGIME.success_and_mean_length()
    assert success == pytest.approx(1 - p_fail) == pytest.approx(0.188, abs=1e-3)
    assert 27 < mean_len < 30 and at_budget == pytest.approx(p_fail + math.comb(29, 2) * 0.05 ** 3 * 0.95 ** 27)
    # the env, played by uniform clicks (the latency engine with p_correct 0), agrees
    env = LatencyModelEnv(time_scale=0, n_elements=20, min_targets=3, max_targets=3, max_steps=30)
    rng = np.random.default_rng(0)
    wins, lengths = 0, []
    for seed in range(300):
        env.reset(seed=seed)
        assert len(env.task.evaluator["targets"]) == 3 and len(env._ids) == 20
        for n in range(1, 31):
            _, reward, term, trunc, _ = env.step(f'click(element="{rng.choice(list(env._ids))}")')
            if term or trunc:
                break
        wins += reward == 1.0
        lengths.append(n)
    env.close()
    # 3 binomial standard deviations: sqrt(0.188 * 0.812 / 300) = 0.023
    assert wins / 300 == pytest.approx(success, abs=0.07)
    assert np.mean(lengths) == pytest.approx(mean_len, abs=1.0)


def test_scale_argv_carries_the_regime():
    argv = REGIME.scale_argv(Path("lat.json"))
    pairs = dict(zip(argv[::2], argv[1::2]))
    assert pairs["--num-envs"] == "80" and pairs["--policy-workers"] == "4" and pairs["--update-gpus"] == "8"
    assert pairs["--groups"] == "10" and pairs["--group-size"] == "8" and pairs["--max-steps"] == "30"
    assert pairs["--max-policy-lag"] == "1" and pairs["--latency"] == "lat.json"
    assert (pairs["--n-elements"], pairs["--min-targets"], pairs["--max-targets"], pairs["--p-correct"]) == \
        ("20", "3", "3", "0.0")


def test_bad_step_draw_and_targets_name_the_field(tmp_path):
    path = tmp_path / "lat.json"
    path.write_text(json.dumps({**REGIME.latency_file(), "step_draw": "sometimes"}))
    with pytest.raises(ConfigError, match="step_draw"):
        LatencyModelEnv(latency=path, time_scale=0)
    with pytest.raises(ConfigError, match="min_targets"):
        LatencyModelEnv(time_scale=0, min_targets=4, max_targets=3)


def test_lockstep_iteration_by_hand():
    # 2 envs on 4 workers: env A steps 10 s for 2 steps, env B 30 s for 1 step; resets 1 s and 2 s.
    # step 1: batch of 2 over 4 workers -> 1 request per worker -> 1.28 s, then the slowest env, 30 s;
    # step 2: A alone -> 1.28 s + 10 s. Update: 3 samples x 86.1 ms; sync 1.12 s.
    it = D.lockstep_iteration([10.0, 30.0], [2, 1], [1.0, 2.0], REGIME)
    rollout = 2.0 + (1.28 + 30.0) + (1.28 + 10.0)
    update = 3 * 3100 * (5 / 3) / (7500 * 8)
    assert it["rollout_s"] == pytest.approx(rollout) and it["update_s"] == pytest.approx(update)
    total = rollout + update + 1.12
    assert it["total_s"] == pytest.approx(total) and it["actions"] == 3
    assert it["u_env_exec"] == pytest.approx((1 + 20 + 2 + 30) / (2 * total))
    assert it["u_env_occupied_max"] == pytest.approx((rollout + (2.0 + 1.28 + 30.0)) / (2 * total))
    assert it["u_policy"] == pytest.approx(2 * 1.28 / total)
