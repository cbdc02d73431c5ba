"""LatencyModel-v0: latencies follow the recorded histogram, replay with the seed, and the reward
depends on the action."""
from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import guigym  # noqa: F401 - registers the envs
from guigym.core.errors import ConfigError
from guigym.envs import latency_model as lm
from guigym.envs.latency_model import DEFAULT_LATENCY, LatencyHistogram, load_latency

ROOT = Path(__file__).resolve().parents[1]
#: chi-square critical values at p = 0.001 by degrees of freedom (tables; no scipy needed)
CHI2_999 = {4: 18.467, 10: 29.588, 11: 31.264}


def chi2(hist: LatencyHistogram, xs: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic of ``xs`` binned by ``hist``'s edges against its probabilities, over the
    bins with positive probability; and the degrees of freedom."""
    counts, _ = np.histogram(xs, bins=np.asarray(hist.edges))
    p = hist.probs
    keep = p > 0
    expected = p[keep] * len(xs)
    observed = counts[keep]
    outside = len(xs) - counts.sum() + counts[~keep].sum()  # draws in zero-probability bins or off the edges
    return float(((observed - expected) ** 2 / expected).sum()) + (np.inf if outside else 0.0), int(keep.sum() - 1)


def test_registered_and_gym_make_works():
    env = gym.make("LatencyModel-v0", time_scale=0)
    obs, info = env.reset(seed=1)
    assert env.observation_space.contains(obs)
    assert info["task_id"].startswith("latency-") and obs["instruction"].startswith("Click ")
    assert "<button" in obs["a11y"]
    env.close()


def test_sampling_follows_the_histogram():
    h = LatencyHistogram((0.1, 0.2, 0.4, 0.8, 1.6, 3.2), (5, 20, 40, 25, 10))
    xs = h.sample(np.random.default_rng(0), 20_000)
    stat, df = chi2(h, xs)
    assert df == 4 and stat < CHI2_999[df]
    # within bins the law is log-uniform: the empirical CDF matches cdf() at interior points too
    for x in (0.15, 0.3, 0.55, 1.0, 2.5):
        assert abs(np.mean(xs <= x) - h.cdf(x)) < 0.015
    assert abs(xs.mean() - h.mean()) < 0.02
    # the same check rejects draws from another histogram (the test has power)
    other = LatencyHistogram(h.edges, (10, 20, 30, 25, 15)).sample(np.random.default_rng(0), 20_000)
    assert chi2(h, other)[0] > CHI2_999[4]


def test_default_histogram_is_the_recorded_miniwob_sample_and_env_draws_follow_it():
    rec = json.loads((ROOT / "bench" / "data" / "latency_miniwob.json").read_text())
    for kind in ("reset", "step"):
        assert DEFAULT_LATENCY[kind]["counts"] == rec[kind]["counts"]
        assert np.allclose(DEFAULT_LATENCY[kind]["edges"], rec[kind]["edges"], rtol=1e-3)
    # the env's own step draws (many short episodes) follow the step histogram
    env = lm.LatencyModelEnv(time_scale=0, max_targets=1, n_elements=2)
    draws = []
    for seed in range(600):
        env.reset(seed=seed)
        for _ in range(3):
            _, _, term, trunc, _ = env.step("wait()")
        draws += env.latencies[1:]
    h = load_latency(None)["step"]
    stat, df = chi2(h, np.asarray(draws))
    assert stat < CHI2_999[df], (stat, df)


def test_same_seed_same_latencies_other_seed_other_latencies():
    def run(seed: int, latency_seed: int = 0) -> list[float]:
        env = gym.make("LatencyModel-v0", time_scale=0, latency_seed=latency_seed).unwrapped
        env.reset(seed=seed)
        for _ in range(4):
            env.step('click(element="nope")')
        return list(env.latencies)

    a = run(7)
    assert len(a) == 5  # the reset's, then one per step
    assert a == run(7)
    assert a != run(8)
    assert a != run(7, latency_seed=1)


def test_the_env_sleeps_the_drawn_latency_scaled(monkeypatch):
    slept = []
    monkeypatch.setattr(lm.time, "sleep", slept.append)
    env = lm.LatencyModelEnv(time_scale=0.5)
    env.reset(seed=2)
    env.step("wait()")
    env.step('done(answer="")')  # done never reaches _execute: it still takes a step's time
    assert slept == pytest.approx([0.5 * x for x in env.latencies]) and len(slept) == 3


def _ids(env: lm.LatencyModelEnv) -> dict[str, str]:
    return {name: i for i, name in env._ids.items()}


def test_reward_depends_on_the_action():
    env = lm.LatencyModelEnv(time_scale=0, max_steps=6)
    env.reset(seed=11)
    targets, ids = env.task.evaluator["targets"], _ids(env)
    assert env.task.instruction == "Click " + ", then ".join(targets) + "."
    for k, name in enumerate(targets):
        # the first target by id, the others by name (the action "names the target")
        ref = ids[name] if k == 0 else name.lower()
        _, r, term, trunc, info = env.step(f'click(element="{ref}")')
    assert (r, term, trunc, info["success"]) == (1.0, True, False, True)

    env.reset(seed=11)
    wrong = next(i for name, i in ids.items() if name != targets[0])
    for _ in range(6):
        _, r, term, trunc, info = env.step(f'click(element="{wrong}")')
    assert (r, term, trunc, info["success"]) == (0.0, False, True, False)

    env.reset(seed=11)
    _, r, term, _, info = env.step('done(answer="")')  # declaring done early does not pay
    assert (r, term, info["success"]) == (0.0, True, False)

    env.reset(seed=11)
    _, r, _, _, info = env.step('click(element="no-such")')
    assert r == 0.0 and "no element" in info["action_error"]


def test_random_clicks_give_uneven_episode_lengths():
    env = lm.LatencyModelEnv(time_scale=0)
    rng = np.random.default_rng(0)
    lengths = []
    for seed in range(60):
        env.reset(seed=seed)
        for n in range(1, 100):
            _, _, term, trunc, _ = env.step(f'click(element="{rng.choice(list(env._ids))}")')
            if term or trunc:
                break
        lengths.append(n)
    assert min(lengths) <= 2 and max(lengths) == 15 and len(set(lengths)) >= 5


def test_bad_latency_config_names_the_field(tmp_path):
    with pytest.raises(ConfigError, match="'step'"):
        load_latency({"reset": DEFAULT_LATENCY["reset"]})
    with pytest.raises(ConfigError, match="increasing"):
        LatencyHistogram((0.2, 0.1), (1,))
    with pytest.raises(ConfigError, match="positive sum"):
        LatencyHistogram((0.1, 0.2), (0,))
    with pytest.raises(ConfigError, match="cannot read"):
        load_latency(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="time_scale"):
        lm.LatencyModelEnv(time_scale=-1)
    with pytest.raises(ConfigError, match="latency-099"):
        lm.LatencyModelEnv(tasks=["latency-000", "latency-099"])
    only = lm.LatencyModelEnv(tasks=["latency-003"], time_scale=0)
    assert only.reset(seed=1)[1]["task_id"] == "latency-003"
    path = tmp_path / "lat.json"
    path.write_text(json.dumps({"reset": {"edges": [1, 2], "counts": [1]}, "step": {"edges": [3, 4], "counts": [2]}}))
    env = lm.LatencyModelEnv(latency=path, time_scale=0)
    env.reset(seed=0)
    env.step("wait()")
    assert 1 <= env.latencies[0] <= 2 and 3 <= env.latencies[1] <= 4
