"""An SFT run's demonstrations as DART's experience pool (``dart_experience_pool.sft_run_dir``,
DART sec. 4.2): the pool is the SFT run's stored ``source="expert"`` trajectories, their prompts
are exactly what the RL run started from the SFT model builds for the same page, and an all-failed
group gets one of them; recipes/sft_dart_miniwob_tiny.yaml wires the pool to its SFT stage."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from sft_helpers import hand_demos  # noqa: E402

from guigym.core.errors import ConfigError  # noqa: E402
from guigym.train.algorithms.context import PluginContext  # noqa: E402
from guigym.train.config import from_dict  # noqa: E402
from guigym.train.data.types import Group, Step, Trajectory  # noqa: E402
from guigym.train.demos import observation  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = "Elements on screen:\n$a11y\nTask: $instruction"


@pytest.fixture(autouse=True)
def _threads(one_torch_thread):
    yield


def _sft_cfg(run: Path, demos: Path) -> dict:
    return {"stage": "sft", "run": {"name": "sft-pool", "dir": str(run), "iterations": 1, "torch_threads": 1},
            "model": {"tiny": {"hidden": 32, "layers": 1, "vocab_size": 400, "tokenizer_from_demos": True}},
            "env": {"id": "MiniWoB-v0", "tasks": ["click-button"], "num_envs": 1, "max_steps": 1},
            "rollout": {"constrained": True, "max_new_tokens": 8, "template": TEMPLATE},
            "algorithm": {"per_device_train_batch_size": 8},
            "sft": {"demos": {"source": "demos_file", "path": str(demos)}}}


def test_dart_pool_reads_an_sft_runs_demonstrations(tmp_path):
    from guigym.train.algorithms.dart import ExperiencePool, InjectFromPool
    from guigym.train.loop import Trainer
    from guigym.train.sft import SFTTrainer

    demos = hand_demos(tmp_path / "src" / "demos.jsonl", 3)
    sft_dir = tmp_path / "sft"
    SFTTrainer(from_dict(_sft_cfg(sft_dir, demos.path)), log=lambda m: None).run()

    rl = {"run": {"name": "dart", "dir": str(tmp_path / "rl"), "iterations": 1},
          "model": {"path": str(sft_dir / "model")},
          "env": {"id": "MiniWoB-v0", "tasks": ["click-button"], "num_envs": 1, "max_steps": 1},
          "rollout": {"constrained": True, "max_new_tokens": 8, "template": TEMPLATE},
          "algorithm": {"trajectory_sources": {"name": "dart_experience_pool",
                                               "options": {"sft_run_dir": str(sft_dir)}},
                        "group_builder": ["default", "dart_pool_injection"]}}
    t = Trainer(from_dict(rl), log=lambda m: None)
    try:
        t.build()
        ctx = t.context(0)
        pool = t.trajectory_source([], ctx=ctx)
        assert len(pool) == 3 and {p.source for p in pool} == {"pool"}
        # the pool members are the SFT run's expert trajectories (ids recorded as their origin) ...
        from guigym.train.data.store import DataStore

        src = DataStore.for_run_dir(str(sft_dir))
        try:
            expert = {x.traj_id: x for x in src.get_trajectories(src.runs("sft-pool")[0]["run_id"], source="expert")}
        finally:
            src.close()
        assert sorted(p.info["pool_origin"] for p in pool) == sorted(expert)
        # ... and their prompts are what this RL run's prompt builder makes of the same page
        builder = t.make_prompt_builder()
        by_seed = {d.seed: d for d in demos.read()}
        for p in pool:
            d = by_seed[p.seed]
            prompt = builder.episode(d.instruction).prompt(observation(d.steps[0]))
            assert p.steps[0].prompt_ids == prompt.prompt_ids and p.steps[0].candidates == prompt.candidates
            assert p.steps[0].action == d.steps[0].action_text
        # DART sec. 4.2: an all-failed group of the task gets one pool member, a group with a success none
        fail = [Trajectory(traj_id=f"f{i}", run_id=t.run_id, task_id="click-button", seed=5, group_id="g",
                           steps=[Step(prompt_ids=[1], response_ids=[2], rollout_logprobs=[-1.0], policy_version=0)], reward=0.0,
                           success=False) for i in range(2)]
        win = Trajectory(traj_id="w", run_id=t.run_id, task_id="click-button", seed=6, group_id="h",
                         steps=[Step(prompt_ids=[1], response_ids=[2], rollout_logprobs=[-1.0], policy_version=0)], reward=1.0,
                         success=True)
        out = InjectFromPool()([Group("g", "click-button", fail), Group("h", "click-button", [win, fail[0]])],
                               pool=pool, ctx=PluginContext(iteration=0, rng=random.Random(0)))
        assert [sum(m.source == "pool" for m in g.trajectories) for g in out] == [1, 0]
    finally:
        t.close()
    with pytest.raises(ValueError, match="no run named 'other'"):
        ExperiencePool(sft_run_dir=str(sft_dir), sft_run_name="other").load(None)
    with pytest.raises(ConfigError, match="sft_run_dir"):
        ExperiencePool(sft_run_dir=str(sft_dir), run_id="x")


def test_the_sft_dart_recipe_points_its_pool_at_its_sft_stage(tmp_path):
    from guigym.train.pipeline import load_pipeline

    stages = load_pipeline(ROOT / "recipes" / "sft_dart_miniwob_tiny.yaml", [f"pipeline.dir={tmp_path / 'p'}"])
    sft, dart = stages
    opts = dart.cfg.algorithm.trajectory_sources
    assert opts.name == "dart_experience_pool" and opts.options["sft_run_dir"] == str(sft.dir)
    assert dart.cfg.model.path == str(sft.output) and sft.cfg.rollout.template == dart.cfg.rollout.template
