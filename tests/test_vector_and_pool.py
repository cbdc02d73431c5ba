"""Vectorised MiniWoB-v0: Gymnasium's sync/async vector envs and guigym's EnvPool."""
from __future__ import annotations

import os
import signal
import time

import gymnasium as gym
import pytest

from guigym.envs.pool import EnvPool


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_make_vec_runs_different_tasks_per_sub_env(mode):
    vec = gym.make_vec("MiniWoB-v0", num_envs=2, vectorization_mode=mode, tasks=["click-test", "enter-text"])
    try:
        obs, info = vec.reset(seed=[4, 5])
        assert obs["screenshot"].shape == (2, 210, 160, 3)
        assert len(obs["a11y"]) == 2 and all(a.startswith("<a11y") for a in obs["a11y"])
        assert tuple(obs["instruction"]) == tuple(info["instruction"])
        obs2, r, term, trunc, info2 = vec.step(["wait(seconds=0)", "click(x=1"])
        assert list(r) == [0.0, 0.0]
        assert info2["action_error"][1].startswith("could not parse action")
        assert info2["action_error"][0] is None
    finally:
        vec.close()


def test_pool_steps_envs_independently_and_reports_lost_workers():
    pool = EnvPool("MiniWoB-v0", num_envs=2, env_kwargs={"task": "click-test"}, call_timeout_s=60)
    try:
        pool.reset_async(0, seed=1)
        pool.reset_async(1, seed=2)
        ready = {}
        while len(ready) < 2:
            for res in pool.wait():
                assert not res.lost, res.error
                ready[res.index] = res.value
        # The slower of two lone fast steps sets the time scale: on a loaded CI machine a MiniWoB step
        # can take several hundred ms, so env 1's slow step is sized from it rather than fixed.
        t_fast = 0.0
        for _ in range(2):
            t = time.monotonic()
            assert not pool.call(0, "step", "wait(seconds=0)").lost
            t_fast = max(t_fast, time.monotonic() - t)
        slow_s = round(max(1.5, 8 * t_fast), 2)
        # env 1 takes a slow step; env 0 keeps stepping meanwhile (no lockstep)
        pool.step_async(1, f"wait(seconds={slow_s})")
        t0 = time.monotonic()
        fast_done: list[float] = []
        pool.step_async(0, "wait(seconds=0)")
        finished_1 = None
        while finished_1 is None:
            for res in pool.wait():
                assert not res.lost, res.error
                if res.index == 0:
                    fast_done.append(time.monotonic() - t0)
                    if res.kind == "step" and (res.value[2] or res.value[3]):
                        pool.reset_async(0, seed=len(fast_done))  # episode over (step budget or task timer)
                    else:
                        pool.step_async(0, "wait(seconds=0)")
                else:
                    finished_1 = time.monotonic() - t0
        # drain env 0's step still in flight so the slot is idle before the kill below
        while not [r for r in pool.wait() if r.index == 0]:
            pass
        assert len(fast_done) >= 3, (
            f"env 0 finished {len(fast_done)} calls (steps, or resets after an episode ended) at {fast_done} while env 1's {slow_s} s step ran "
            f"(a lone fast step took {t_fast:.2f} s)"
        )
        assert finished_1 >= slow_s - 0.1

        # kill env 1's worker mid-episode: its episode comes back lost, then the slot works again
        os.kill(pool.pid(1), signal.SIGKILL)
        pool.step_async(1, "click(x=5, y=5)")
        res = pool.wait(timeout=30)
        res = [r for r in res if r.index == 1] or [r for r in pool.wait(timeout=30) if r.index == 1]
        assert res[0].lost and "died" in res[0].error
        assert pool.restarts == 1
        again = pool.call(1, "reset", {"seed": 3})
        assert not again.lost and again.value[1]["task_id"] == "click-test"
    finally:
        pool.close()


def test_pool_reports_infra_error_as_lost_not_failed():
    import psutil

    pool = EnvPool("MiniWoB-v0", num_envs=1, env_kwargs={"task": "click-test"})
    try:
        assert not pool.call(0, "reset", {"seed": 0}).lost
        for child in psutil.Process(pool.pid(0)).children(recursive=True):
            if "chrom" in child.name().lower():
                child.kill()
        time.sleep(0.5)
        res = pool.call(0, "step", "click(x=5, y=5)")
        assert res.lost and "EnvInfraError" in res.error
        assert pool.restarts == 0, "the worker survives; only its browser is rebuilt"
        assert not pool.call(0, "reset", {"seed": 0}).lost
    finally:
        pool.close()


def test_pool_restarts_a_hung_worker():
    pool = EnvPool("MiniWoB-v0", num_envs=1, env_kwargs={"task": "click-test"}, call_timeout_s=20)
    try:
        assert not pool.call(0, "reset", {"seed": 0}).lost
        pool.call_timeout_s = 1.0
        res = pool.call(0, "step", "wait(seconds=5)")
        assert res.lost and "did not answer" in res.error and pool.restarts == 1
        pool.call_timeout_s = 60
        assert not pool.call(0, "reset", {"seed": 0}).lost
    finally:
        pool.close()
