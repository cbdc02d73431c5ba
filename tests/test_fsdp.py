"""Sharded data parallel (torch FSDP2 ``fully_shard``) for full fine-tuning, on CPU with gloo:
two ranks really hold half the parameters each, their updates equal one process training on the
whole batch (1e-5), and the gathered weights / optimizer state have the single-process keys and
shapes and load back into a sharded learner."""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from guigym.train.config import AlgorithmConfig, OptimConfig  # noqa: E402
from guigym.train.data.types import Step, Trajectory  # noqa: E402
from guigym.train.samples import build_stepwise  # noqa: E402

CANDS = ['click(element="1")', 'click(element="2")', 'click(element="3")']


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from guigym.train.policy.tiny import build

    return build(tmp_path_factory.mktemp("fsdp-models") / "tiny", seed=0)


def _policy(tiny):
    from guigym.train.policy.hf_policy import HFPolicy

    return HFPolicy(tiny)


def _learner(tiny, strategy, batch):
    from guigym.train.learner import Learner

    # adam_epsilon = 1 keeps the step ~ linear in the gradient (with 1e-8, Adam's first step is
    # lr * sign(g), which turns float-rounding noise on near-zero gradients into +-lr)
    return Learner(_policy(tiny), AlgorithmConfig(per_device_train_batch_size=batch),
                   OptimConfig(learning_rate=1e-2, adam_epsilon=1.0), strategy=strategy)


def _samples(tiny):
    pol = _policy(tiny)
    enc = pol.encode_chat([{"role": "user", "content": "Click the button."}])
    trajs = []
    for i, o in enumerate(pol.generate([enc] * 8, max_new_tokens=12, seeds=list(range(8)), candidates=[CANDS] * 8)):
        st = Step(prompt_ids=enc.prompt_ids, response_ids=o.response_ids, rollout_logprobs=o.logprobs,
                  policy_version=0, candidates=CANDS, action_text=o.text)
        trajs.append(Trajectory(traj_id=f"t{i}", run_id="r", task_id="t", seed=0, group_id="g", steps=[st],
                                reward=float(o.text == CANDS[0])))
    return build_stepwise(trajs, {t.traj_id: (1.0 if t.reward else -0.5) for t in trajs})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, tiny: str, samples_path: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        samples = torch.load(samples_path, weights_only=False)
        learner = _learner(Path(tiny), "fsdp", batch=4)
        assert learner.strategy == "fsdp" and learner.ddp is None
        local = sum(p.to_local().numel() for p in learner.model.parameters())
        total = sum(p.numel() for p in learner.model.parameters())
        metrics = [learner.update(samples) for _ in range(2)]
        weights = learner.trainable_state()  # collective: full tensors on rank 0, {} elsewhere
        optim = learner.optimizer_state()
        # a fresh sharded learner restores both from rank 0's copy
        again = _learner(Path(tiny), "fsdp", batch=4)
        again.load_trainable_state(weights)
        again.load_optimizer_state(optim)
        reloaded = again.trainable_state()
        reoptim = again.optimizer_state()
        torch.save({"weights": weights, "optim": optim, "reloaded": reloaded, "reoptim": reoptim,
                    "local": local, "total": total, "metrics": metrics}, f"{out}.{rank}")
    finally:
        torch.distributed.destroy_process_group()


def test_fsdp_two_gloo_ranks_match_single_process_and_gather_full_state(tiny, tmp_path):
    import torch.multiprocessing as mp

    samples = _samples(tiny)
    torch.save(samples, tmp_path / "samples.pt")
    mp.start_processes(_worker, args=(2, _free_port(), str(tiny), str(tmp_path / "samples.pt"), str(tmp_path / "r")),
                       nprocs=2, join=True, start_method="fork")
    r0, r1 = (torch.load(tmp_path / f"r.{r}", weights_only=False) for r in (0, 1))
    # really sharded: each rank holds about half of the parameters (the vocab/width dims split in 2)
    for r in (r0, r1):
        assert 0.45 * r["total"] < r["local"] < 0.55 * r["total"], (r["local"], r["total"])
    assert r1["weights"] == {} and r0["weights"]
    single = _learner(tiny, "ddp", batch=8)  # world 1: one process, the same 8-sample optimizer steps
    assert single.strategy == "single"
    single_metrics = [single.update(samples) for _ in range(2)]
    ref = single.trainable_state()
    init = _policy(tiny).model.state_dict()
    assert set(r0["weights"]) == set(ref), set(r0["weights"]) ^ set(ref)  # the single-process file's keys
    moved = 0
    for k, v in ref.items():
        got = r0["weights"][k]
        assert got.shape == v.shape and got.dtype == v.dtype, k
        assert torch.allclose(got, v, atol=1e-5), f"FSDP != single process at {k}: {(got - v).abs().max()}"
        assert torch.equal(r0["reloaded"][k], got), f"reloaded weights differ at {k}"
        moved += int(not torch.equal(v, init[k]))
    assert moved > 10
    assert r0["metrics"][0]["loss"] == pytest.approx(single_metrics[0]["loss"], abs=1e-5)
    # AdamW moments gathered to full shapes, equal to the single process's (keyed by parameter name)
    names = [n for n, p in single.model.named_parameters() if p.requires_grad]
    single_state = single.optimizer.state_dict()["state"]
    full = r0["optim"]["state"]
    assert set(full) == {names[i] for i in single_state}  # the vision tower had no gradient: no state
    for i, name in enumerate(names):
        if i not in single_state:
            continue
        for key in ("exp_avg", "exp_avg_sq"):
            assert full[name][key].shape == single_state[i][key].shape
            assert torch.allclose(full[name][key], single_state[i][key], atol=1e-6), (name, key)
            assert torch.equal(r0["reoptim"]["state"][name][key], full[name][key])
