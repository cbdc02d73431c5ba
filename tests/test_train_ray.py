"""Same recipe, two topologies (issue 16 item 3): ``run.backend: process`` (EnvPool worker
processes) and ``run.backend: ray`` (a Ray actor per env, local Ray) give the same trajectories and
the same first update for the same seeds, on real MiniWoB tasks with a fresh tiny model (CPU).
Then a Ray env actor is killed mid-episode: its rollout is lost, rerun and never scored, and the
iteration completes.

Sampling is seeded per request (RolloutScheduler._sampling_seed), so the trajectories do not
depend on which env ran a rollout or when; ``rollout.max_batch: 1`` keeps the policy's forward
free of batch composition, which depends on timing in either backend.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

try:
    import ray
except ImportError:  # the ray extra: pip install 'guigym[ray]'
    pytest.skip("ray is not installed (pip install 'guigym[ray]')", allow_module_level=True)
from _ray import local_ray  # noqa: E402,F401 - the module's local Ray
pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("sqlalchemy")

import torch  # noqa: E402

from guigym.core.errors import ConfigError  # noqa: E402
from guigym.train.config import describe, from_dict  # noqa: E402
from guigym.train.metrics_log import read_metrics  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GROUPS, G = 2, 4


def _recipe(tmp: Path, model: Path, backend: str) -> dict[str, Any]:
    cfg = yaml.safe_load((ROOT / "recipes" / "grpo_miniwob_tiny.yaml").read_text())
    cfg["run"].update(name=f"ray-{backend}", dir=str(tmp / backend), iterations=2, seed=3, backend=backend)
    cfg["model"] = {"path": str(model)}
    cfg["env"].update(tasks=["click-test-2"], num_envs=2)
    cfg["rollout"].update(num_generations=G, groups_per_iteration=GROUPS, max_batch=1)
    cfg["eval"]["enabled"] = False
    if backend == "ray":
        cfg["ray"] = {"num_cpus": 1}
    return cfg


def _trainer(cfg: dict[str, Any]) -> Any:
    from guigym.train.loop import Trainer

    t = Trainer(from_dict(cfg), log=lambda m: None)
    t.build()
    t.start_rollout()
    return t


def _trajs(t: Any, iteration: int) -> list[Any]:
    got = [x for x in t.store.get_trajectories(t.run_id) if x.info.get("iteration") == iteration]
    return sorted(got, key=lambda x: (x.task_id, x.seed, x.info["member"]))


def _iteration0(t: Any) -> dict[str, Any]:
    init = {k: v.clone() for k, v in t.learner.trainable_state().items()}
    metrics = t.iteration(0)
    return {"init": init, "weights": {k: v.clone() for k, v in t.learner.trainable_state().items()},
            "metrics": metrics, "trajs": _trajs(t, 0), "stats": dict(t.rollout_stats),
            "row": read_metrics(t.dir / "metrics.jsonl")[0]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: Any, local_ray: Any):
    """Iteration 0 with each backend; the Ray trainer stays open for the kill test."""
    from guigym.envs.pool import EnvPool
    from guigym.envs.ray_backend import RayEnvPool
    from guigym.train.policy.tiny import build

    tmp = tmp_path_factory.mktemp("train_ray")
    model = build(tmp / "tiny", seed=0)
    proc = _trainer(_recipe(tmp, model, "process"))
    try:
        assert type(proc.pool) is EnvPool
        out = {"process": _iteration0(proc)}
    finally:
        proc.close()
    viaray = _trainer(_recipe(tmp, model, "ray"))
    try:
        assert isinstance(viaray.pool, RayEnvPool) and viaray.pool.num_envs == 2
        out["ray"] = _iteration0(viaray)
        out["trainer"] = viaray
        yield out
    finally:
        viaray.close()


def test_process_and_ray_backends_give_the_same_trajectories_and_first_update(runs):
    p, r = runs["process"], runs["ray"]
    assert len(p["trajs"]) == len(r["trajs"]) == GROUPS * G
    assert p["stats"]["lost"] == r["stats"]["lost"] == 0
    for a, b in zip(p["trajs"], r["trajs"]):
        key = (a.task_id, a.seed, a.info["member"])
        assert key == (b.task_id, b.seed, b.info["member"])
        assert (a.reward, a.success, a.length) == (b.reward, b.success, b.length), key
        assert a.info["instruction"] == b.info["instruction"], key
        for sa, sb in zip(a.steps, b.steps):
            assert sa.prompt_ids == sb.prompt_ids and sa.response_ids == sb.response_ids, key
            assert (sa.action_text, sa.reward, sa.candidates) == (sb.action_text, sb.reward, sb.candidates), key
            assert sa.rollout_logprobs == pytest.approx(sb.rollout_logprobs, abs=1e-6), key
    assert {t.seed for t in p["trajs"]} and len({t.reward for t in p["trajs"]}) == 2, "need a group to learn from"
    # the first update: the same loss, grad norm and weights
    pm, rm = p["row"], r["row"]
    assert pm["samples"] == rm["samples"] > 0
    for k in ("loss", "pg_loss", "grad_norm"):
        assert pm[k] == pytest.approx(rm[k], rel=1e-6, abs=1e-9), k
    assert set(p["weights"]) == set(r["weights"])
    moved = 0
    for name, w in p["weights"].items():
        torch.testing.assert_close(w, r["weights"][name], rtol=0, atol=1e-7, msg=name)
        moved += not torch.equal(w, p["init"][name])
    assert moved > 0, "the update changed no weight: the comparison would be vacuous"


def test_killed_env_actor_loses_its_rollout_which_is_rerun_and_never_scored(runs):
    t = runs["trainer"]
    pool = t.pool
    real_step = pool.step_async
    killed: list[Any] = []

    def step_async(i: int, action: Any) -> None:
        if not killed:  # mid-episode: after its reset, before its first step
            killed.append((i, pool.actor(i)))
            ray.kill(pool.actor(i))
        real_step(i, action)

    pool.step_async = step_async
    try:
        t.iteration(1)
    finally:
        pool.step_async = real_step
    assert len(killed) == 1
    i, old = killed[0]
    assert pool.restarts == 1 and pool.actor(i) is not old
    stats = t.rollout_stats
    assert (stats["lost"], stats["retries"], stats["trajectories"]) == (1, 1, GROUPS * G)
    row = read_metrics(t.dir / "metrics.jsonl")[-1]
    assert row["step"] == 1 and row["rollout/lost"] == 1.0 and row["rollout/retries"] == 1.0
    # exactly G per group stored, one of them the rerun; the lost attempt has no trajectory
    trajs = _trajs(t, 1)
    assert len(trajs) == GROUPS * G and len({x.traj_id for x in trajs}) == GROUPS * G
    assert sorted(x.info["member"] for x in trajs) == sorted(list(range(G)) * GROUPS)
    assert sorted(x.info["lost_attempts"] for x in trajs) == [0] * (GROUPS * G - 1) + [1]
    assert all(x.length == 1 and x.steps[0].response_ids for x in trajs)


def test_backend_keys_validate_and_have_help_text(tmp_path):
    base = {"run": {"name": "a", "dir": str(tmp_path)}, "env": {"tasks": ["click-test"]}}
    assert from_dict(base).run.backend == "process"
    cfg = from_dict({**base, "run": {**base["run"], "backend": "ray"},
                     "ray": {"address": "auto", "num_cpus": 0.5, "resources": {"desktop": 1}}})
    assert (cfg.ray.address, cfg.ray.num_cpus, cfg.ray.resources) == ("auto", 0.5, {"desktop": 1.0})
    with pytest.raises(ConfigError, match="run.backend"):
        from_dict({**base, "run": {**base["run"], "backend": "k8s"}})
    with pytest.raises(ConfigError, match="ray: address set but run.backend is 'process'"):
        from_dict({**base, "ray": {"address": "auto"}})
    with pytest.raises(ConfigError, match=r"ray.adress: unknown key \(did you mean 'address'\?\)"):
        from_dict({**base, "run": {**base["run"], "backend": "ray"}, "ray": {"adress": "auto"}})
    assert from_dict(from_dict(base).to_dict()).ray == from_dict(base).ray  # a dumped recipe loads again
    lines = {ln.split(" (")[0].strip(): ln for ln in describe().splitlines()}
    for key in ("run.backend", "ray.address", "ray.num_cpus", "ray.resources"):
        assert key in lines and "default" in lines[key].split("): ", 1)[1], key
