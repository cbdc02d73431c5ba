"""Loop-level data parallel through torchrun on CPU (gloo, 2 processes) on the tiny MiniWoB
recipe. Rank 0 runs Chromium, the policy service and the DataStore; rank 1 only trains; samples
are broadcast (issue 11, item 7; issue 32, item 5).

* ``ddp`` (two iterations): both ranks train on the same samples and end with bit-identical
  weights that differ from the initial ones.
* ``fsdp`` (one iteration): the ranks hold shards; weight push, checkpoint and saved model
  gather the full tensors, which equal one process's update on the same samples (1e-5).

The launch runs in its own session and is killed whole when it stalls or outlives its cap
(tests/dist_helpers.torchrun), so a rank stuck in a collective fails the test instead of
hanging it."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("sqlalchemy")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("this torch build has no torch.distributed gloo backend", allow_module_level=True)

from dist_helpers import torchrun  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# Runs inside each torchrun worker: trains, then writes what this rank saw and ended with. The
# __main__ guard matters: the EnvPool spawns workers that re-import the main module.
DRIVER = '''
import json, os, sys
import torch
from guigym.train.config import load_recipe
from guigym.train.learner import Learner
from guigym.train.loop import Trainer

def main(recipe, out):
    seen = []
    update = Learner.update

    def spy(self, samples):
        seen.append([[s.traj_id, s.step_index, list(s.input_ids), list(s.advantages)] for s in samples])
        torch.save(list(samples), os.path.join(out, f"samples{len(seen)}.rank{self.rank}.pt"))
        return update(self, samples)

    Learner.update = spy
    trainer = Trainer(load_recipe(recipe), log=lambda m: print(m, flush=True))
    trainer.run()
    rank, strategy = trainer.rank, trainer.learner.strategy
    if strategy == "ddp":  # FSDP shards: the full weights are gathered into rank 0's checkpoint
        torch.save(trainer.learner.trainable_state(), os.path.join(out, f"rank{rank}.pt"))
    if rank == 0:  # what the rollout engine samples from after the last push
        torch.save(trainer.service.policy.model.state_dict(), os.path.join(out, "engine.pt"))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world": trainer.world, "env_world": os.environ.get("WORLD_SIZE"),
                   "strategy": strategy, "updates": seen, "model_dir": trainer.model_dir}, f)

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
'''


def _recipe(tmp_path: Path, strategy: str, iterations: int) -> Path:
    cfg = yaml.safe_load((ROOT / "recipes" / "grpo_miniwob_tiny.yaml").read_text())
    cfg["run"].update(name=strategy, dir=str(tmp_path / "run"), iterations=iterations, checkpoint_every=1,
                      keep_checkpoints=2, save_model_every=iterations)
    cfg["env"].update(tasks=["click-test-2"], num_envs=1)
    # 2 groups x 4 rollouts per iteration; 2 samples per rank per optimizer step -> both ranks
    # hold a real shard of every step
    cfg["rollout"].update(num_generations=4, groups_per_iteration=2, max_batch=4)
    cfg["algorithm"].update(per_device_train_batch_size=2, num_iterations=1)
    # Adam's first step is lr * sign(g) at eps 1e-8, turning rounding noise on ~0 gradients into
    # +-lr; eps 1 keeps it ~linear in g, so the FSDP update can be compared with one process's
    cfg["optim"]["adam_epsilon"] = 1.0
    cfg["eval"]["enabled"] = False
    cfg.setdefault("distributed", {})["strategy"] = strategy
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("strategy, iterations", [("ddp", 2), ("fsdp", 1)])
def test_torchrun_two_ranks_train_the_same_samples(tmp_path, strategy, iterations):
    from guigym.train.policy.hf_policy import HFPolicy

    recipe = _recipe(tmp_path, strategy, iterations)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    # a hung run (every rank blocked in a collective) is seen as a stall and killed with its
    # output; the cap only has to end a spinning one before pytest's 600 s, so that the output is
    # reported too (~3 min at load 12)
    p = torchrun(["--standalone", "--nproc_per_node", "2", str(driver), str(recipe), str(out)],
                 cwd=tmp_path, env=env, bound_s=540)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]

    info = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [(i["rank"], i["world"], i["env_world"], i["strategy"]) for i in info] == \
        [(0, 2, "2", strategy), (1, 2, "2", strategy)]
    # rank 1 never rolled out: it trained on exactly what rank 0 collected, iteration by iteration
    assert len(info[0]["updates"]) == iterations
    assert info[1]["updates"] == info[0]["updates"]
    assert sum(len(u) for u in info[0]["updates"]) >= 4, "no iteration produced samples to train on"

    # rank 0's last checkpoint: full tensors (not shards), trained away from the initial weights
    run = tmp_path / "run"
    ckpts = sorted((run / "checkpoints").glob("ckpt-*"))
    assert [c.name for c in ckpts] == [f"ckpt-{i:06d}" for i in range(iterations)]
    final = torch.load(ckpts[-1] / "weights.pt")
    init = HFPolicy(info[0]["model_dir"]).model.state_dict()
    assert final.keys() == init.keys() and all(final[k].shape == init[k].shape for k in init)
    changed = [k for k in final if not torch.equal(final[k], init[k])]
    assert changed, "training left every tensor at its initial value"
    assert any(k.endswith("embed_tokens.weight") or ".layers." in k for k in changed), changed[:5]
    # ... which the rollout engine samples from and save_model_every wrote
    engine = torch.load(out / "engine.pt")
    assert all(torch.equal(engine[k], final[k]) for k in final)
    saved = HFPolicy(str(run / f"model-{iterations:06d}")).model.state_dict()
    assert all(torch.equal(saved[k], final[k]) for k in final)

    if strategy == "ddp":  # replicas: both ranks end with exactly the checkpoint's weights
        w0, w1 = (torch.load(out / f"rank{r}.pt") for r in (0, 1))
        assert w0.keys() == w1.keys() == final.keys()
        differ = [k for k in w0 if not torch.equal(w0[k], w1[k])]
        assert not differ, f"ranks diverged in {len(differ)} tensors, e.g. {differ[:3]}"
        assert all(torch.equal(final[k], w0[k]) for k in w0)
    if strategy == "fsdp":  # the gathered update equals one process training on the same samples
        from guigym.train.config import load_recipe
        from guigym.train.learner import Learner

        samples = torch.load(out / "samples1.rank0.pt", weights_only=False)
        cfg = load_recipe(recipe)
        # one process with the same optimizer steps: 2 ranks x 2 samples per micro-batch
        algo = cfg.algorithm.model_copy(update={"per_device_train_batch_size": 2 * 2})
        single = Learner(HFPolicy(info[0]["model_dir"]), algo, cfg.optim, cfg.model.lora,
                         total_updates=cfg.run.iterations, max_len_norm=cfg.rollout.max_new_tokens,
                         temperature=cfg.rollout.temperature, strategy="fsdp")
        assert single.strategy == "single"
        single.update(samples)
        ref = single.trainable_state()
        worst = max((final[k] - ref[k]).abs().max().item() for k in ref)
        assert worst < 1e-5, f"FSDP through the loop != one process (max |diff| {worst})"
