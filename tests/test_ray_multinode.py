"""Multi-node without a cluster (issue 16 item 4): a Ray cluster of real raylets on this machine
(``ray.cluster_utils.Cluster``: a head that hosts nothing and env nodes with an ``env_slot``
resource), a training run with envs as actors spread over the nodes, and one node removed
mid-iteration: the envs it hosted are lost, restarted on the node that remains, their rollouts
rerun; the iteration completes, and the DataStore holds each rollout exactly once."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

try:
    import ray
    from ray.cluster_utils import Cluster
except ImportError:  # the ray extra: pip install 'guigym[ray]'
    pytest.skip("ray is not installed (pip install 'guigym[ray]')", allow_module_level=True)
pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("sqlalchemy")

from guigym.train.config import from_dict  # noqa: E402
from guigym.train.metrics_log import read_metrics  # noqa: E402

pytestmark = pytest.mark.slow  # three raylets + a tiny training iteration: ~1 min on 2 cores

ROOT = Path(__file__).resolve().parents[1]
GROUPS, G = 2, 4
LOOPBACK = "127.0.0.1"


@pytest.fixture(scope="module")
def cluster():
    if ray.is_initialized():
        pytest.skip("a Ray session is already running in this process")
    # every raylet on loopback; the head hosts no env
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    nodes = [c.add_node(num_cpus=1, resources={"env_slot": 1}) for _ in range(2)]
    ray.init(address=c.address, log_to_driver=False)
    try:
        yield c, nodes
    finally:
        ray.shutdown()
        c.shutdown()


def _trainer(tmp: Path, address: str) -> Any:
    from guigym.train.loop import Trainer
    from guigym.train.policy.tiny import build

    cfg = yaml.safe_load((ROOT / "recipes" / "grpo_miniwob_tiny.yaml").read_text())
    cfg["run"].update(name="multinode", dir=str(tmp / "run"), iterations=2, seed=3, backend="ray")
    cfg["model"] = {"path": str(build(tmp / "tiny", seed=0))}
    cfg["env"].update(tasks=["click-test-2"], num_envs=2)
    cfg["rollout"].update(num_generations=G, groups_per_iteration=GROUPS)
    cfg["eval"]["enabled"] = False
    # one env per node: each node has one env_slot, each env actor needs one
    cfg["ray"] = {"address": address, "num_cpus": 1, "resources": {"env_slot": 1}}
    t = Trainer(from_dict(cfg), log=lambda m: None)
    t.build()
    t.start_rollout()
    return t


def test_losing_a_node_mid_iteration_reruns_its_envs_rollouts_elsewhere_and_loses_nothing(cluster, tmp_path):
    c, nodes = cluster
    t = _trainer(tmp_path, c.address)
    try:
        pool = t.pool
        hosts = [ray.get(pool.actor(i).node_id.remote()) for i in range(pool.num_envs)]
        assert len(set(hosts)) == 2, f"the two env actors should sit on different nodes, got {hosts}"
        t.iteration(0)
        assert t.rollout_stats["lost"] == 0
        spare = c.add_node(num_cpus=1, resources={"env_slot": 1})  # where the lost env can go
        victim = next(n for n in nodes if n.node_id == hosts[0])
        real_step = pool.step_async
        removed: list[str] = []

        def step_async(i: int, action: Any) -> None:
            if not removed:  # mid-episode: env 0 has been reset, its first step not yet answered
                removed.append(victim.node_id)
                c.remove_node(victim, allow_graceful=False)
            real_step(i, action)

        pool.step_async = step_async
        try:
            t.iteration(1)
        finally:
            pool.step_async = real_step
        stats = t.rollout_stats
        assert removed and stats["lost"] >= 1 and stats["retries"] == stats["lost"]
        assert stats["trajectories"] == GROUPS * G
        assert pool.restarts >= 1
        now = {ray.get(pool.actor(i).node_id.remote()) for i in range(pool.num_envs)}
        assert victim.node_id not in now and spare.node_id in now
        row = read_metrics(t.dir / "metrics.jsonl")[-1]
        assert row["step"] == 1 and row["rollout/lost"] == stats["lost"]
        # each rollout stored once: G members per group, no duplicate, the lost attempts left nothing
        trajs = [x for x in t.store.get_trajectories(t.run_id) if x.info.get("iteration") == 1]
        assert len(trajs) == GROUPS * G == len({x.traj_id for x in trajs})
        assert sorted(x.info["member"] for x in trajs) == sorted(list(range(G)) * GROUPS)
        assert sum(x.info["lost_attempts"] for x in trajs) == stats["lost"]
    finally:
        t.close()
