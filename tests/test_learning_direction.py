"""CI-sized direction of learning from the warm start (issue 32): GRPO, run by the trainer as a
user runs it (`recipes/grpo_miniwob_instruct.yaml`, real MiniWoB pages in Chromium, the shipped
SFT warm start), on click-button, whose correct click depends on the instruction's label.

What it asserts: after two iterations, on the pages the learner trained on, the policy puts more
probability on the clicks the env rewarded than the warm start did, in most of the groups that
carried a gradient (`guigym.train.exact_eval.rewarded_mass_change`, exact from the recorded token
ids: no sampling noise). A sign error, advantages assigned to the wrong samples, a learner that
trains other tokens than the rollout sampled, or a weight push that never reaches the saved model
all break it.

What it does not show: a held-out gain. Measured on 2026-11-28 (docs/benchmarks.md, "Direction
of learning"): the same short runs raise the rewarded mass on their training pages in every seed
(+0.11..+0.30) while exact held-out success on 40 unseen pages moved -0.09..+0.02: this warm
start does not yet read labels well enough for page-level updates to generalise.
"""
from __future__ import annotations

import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def short_grpo(tmp_path_factory):
    from guigym.train.config import load_recipe
    from guigym.train.main import run
    from guigym.core.errors import ConfigError
    from guigym.train.warmstart import resolve

    run_dir = tmp_path_factory.mktemp("direction") / "run"
    overrides = [f"run.dir={run_dir}", "run.seed=1", "run.iterations=2", "run.save_model_every=2",
                 "run.checkpoint_every=100", "env.tasks=[click-button]", "optim.learning_rate=2e-3",
                 "eval.enabled=false"]
    cfg = load_recipe(ROOT / "recipes" / "grpo_miniwob_instruct.yaml", overrides)
    try:
        start = resolve(cfg.model.warm_start, build=False)
    except ConfigError as e:  # never built in CI: the shipped copy is the one the recipe names
        pytest.skip(f"{e}")
    run(cfg, log=lambda *a, **k: None)
    return run_dir, start


def test_grpo_moves_the_warm_start_toward_rewarded_clicks(short_grpo) -> None:
    from guigym.models.hf_policy import HFPolicy
    from guigym.train.data.store import DataStore
    from guigym.train.exact_eval import rewarded_mass_change

    run_dir, start = short_grpo
    store = DataStore(f"sqlite:///{run_dir}/guigym.db")
    try:
        (run,) = store.runs()
        trajs = store.get_trajectories(run["run_id"])
    finally:
        store.close()
    assert trajs and all(t.task_id == "click-button" for t in trajs)
    deltas = rewarded_mass_change(trajs, HFPolicy(str(start)), HFPolicy(str(run_dir / "model-000002")))
    assert len(deltas) >= 4, f"only {len(deltas)} groups carried a gradient"
    ups = sum(d > 0 for d in deltas)
    assert ups > len(deltas) / 2, deltas
    assert statistics.mean(deltas) > 0.02, deltas
