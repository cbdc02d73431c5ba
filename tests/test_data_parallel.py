"""Data parallel on CPU with gloo, two spawned ranks (tests/dist_helpers.py: no fork, stall watch,
clean-up): DDP and sharded (torch FSDP2 ``fully_shard``) updates equal one process training on the
whole batch (1e-5), also when the ranks own different numbers of micro-batches; under FSDP two
ranks really hold half the parameters each, and the gathered weights / optimizer state have the
single-process keys and shapes and load back into a sharded learner.

All scenarios run in one launch of the two ranks (a module fixture): spawning re-imports torch
and transformers per rank, which is the expensive part."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("this torch build has no torch.distributed gloo backend", allow_module_level=True)

from dist_helpers import run_ranks  # noqa: E402
from guigym.train.config import AlgorithmConfig, OptimConfig  # noqa: E402
from guigym.train.data.types import Step, Trajectory  # noqa: E402
from guigym.train.samples import build_stepwise  # noqa: E402

CANDS = ['click(element="1")', 'click(element="2")', 'click(element="3")']
#: sample counts that leave the two ranks with different micro-batch counts at 1 sample per
#: micro-batch and 4 per optimizer step: 3 -> (2, 1); 5 -> (2, 2) then (1, 0); 7 -> (2, 2), (2, 1)
UNEVEN = (3, 5, 7)
UNEVEN_BETA = 0.1


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from guigym.train.policy.tiny import build

    return build(tmp_path_factory.mktemp("dp-models") / "tiny", seed=0)


def _policy(tiny):
    from guigym.train.policy.hf_policy import HFPolicy

    return HFPolicy(tiny)


def _learner(tiny, strategy, batch, accumulate=1, beta=0.0):
    from guigym.train.learner import Learner

    # adam_epsilon = 1 keeps the step ~ linear in the gradient (with 1e-8, Adam's first step is
    # lr * sign(g), which turns float-rounding noise on near-zero gradients into +-lr)
    return Learner(_policy(tiny), AlgorithmConfig(per_device_train_batch_size=batch, beta=beta),
                   OptimConfig(learning_rate=1e-2, adam_epsilon=1.0, gradient_accumulation_steps=accumulate),
                   strategy=strategy)


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


def _detached(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _worker(rank: int, world: int, tiny: str, samples_path: str, out: str) -> None:
    """Every scenario on one rank (the process group is set up by dist_helpers.run_ranks)."""
    samples = torch.load(samples_path, weights_only=False)
    res: dict = {}
    # FSDP, 8 samples, 4 per rank: sharding, gathered state and reload
    learner = _learner(Path(tiny), "fsdp", batch=4)
    assert learner.strategy == "fsdp" and learner.ddp is None
    res["local"] = sum(p.to_local().numel() for p in learner.model.parameters())
    res["total"] = sum(p.numel() for p in learner.model.parameters())
    res["metrics"] = [learner.update(samples) for _ in range(2)]
    res["weights"] = learner.trainable_state()  # collective: full tensors on rank 0, {} elsewhere
    res["optim"] = learner.optimizer_state()
    again = _learner(Path(tiny), "fsdp", batch=4)  # a fresh sharded learner restores both from rank 0's copy
    again.load_trainable_state(res["weights"])
    again.load_optimizer_state(res["optim"])
    res["reloaded"] = again.trainable_state()
    res["reoptim"] = again.optimizer_state()
    # DDP, the same 8 samples and steps: every rank's replica
    ddp = _learner(Path(tiny), "ddp", batch=4)
    assert ddp.strategy == "ddp"
    for _ in range(2):
        ddp.update(samples)
    res["ddp"] = _detached(ddp.model)
    # uneven micro-batch counts: 1 sample per micro-batch, 2 micro-batches per rank per step; with
    # a KL term, so the no-grad reference pass (FSDP gathers there too) runs per micro-batch
    for strategy in ("fsdp", "ddp"):
        for n in UNEVEN:
            lr = _learner(Path(tiny), strategy, batch=1, accumulate=2, beta=UNEVEN_BETA)
            m = lr.update(samples[:n])
            res[f"{strategy}-{n}"] = {"weights": lr.trainable_state() if strategy == "fsdp" else _detached(lr.model),
                                      "loss": m["loss"], "optimizer_steps": m["optimizer_steps"]}
    torch.save(res, f"{out}.{rank}")


@pytest.fixture(scope="module")
def ranks(tiny, tmp_path_factory):
    """(rank 0's results, rank 1's results, the 8 samples) of one two-rank launch."""
    tmp = tmp_path_factory.mktemp("dp-run")
    samples = _samples(tiny)
    assert all(s.num_loss_tokens > 0 for s in samples) and len(samples) == 8
    torch.save(samples, tmp / "samples.pt")
    # no wall-clock bound: a stall (every rank blocked) fails it, pytest's timeout is the cap
    seconds = run_ranks(_worker, 2, (str(tiny), str(tmp / "samples.pt"), str(tmp / "r")), tmp)
    print(f"two-rank launch: {seconds:.1f} s")
    r0, r1 = (torch.load(tmp / f"r.{r}", weights_only=False) for r in (0, 1))
    return r0, r1, samples


def test_fsdp_two_gloo_ranks_match_single_process_and_gather_full_state(tiny, ranks):
    r0, r1, samples = ranks
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


def test_ddp_two_gloo_ranks_match_single_process(tiny, ranks):
    r0, r1, samples = ranks
    single = _learner(tiny, "ddp", batch=8)  # the same 8-sample optimizer steps in one process
    for _ in range(2):
        single.update(samples)
    init = _policy(tiny).model.state_dict()
    moved = 0
    for k, v in single.model.state_dict().items():
        assert torch.equal(r0["ddp"][k], r1["ddp"][k]), f"ranks differ at {k}"
        assert torch.allclose(r0["ddp"][k], v, atol=1e-5), f"DDP != single process at {k}"
        moved += int(not torch.equal(v, init[k]))
    assert moved > 10


@pytest.mark.parametrize("strategy", ["fsdp", "ddp"])
@pytest.mark.parametrize("n", UNEVEN)
def test_uneven_micro_batch_counts_match_single_process(tiny, ranks, strategy, n):
    """3, 5 or 7 samples, 4 per optimizer step, 1 per micro-batch: the ranks own different
    micro-batch counts (FSDP used to deadlock); the update equals one process's on the same
    optimizer steps (2 samples per micro-batch x 2 accumulated). With a KL term (beta > 0) the
    reference pass runs per micro-batch too."""
    r0, r1, samples = ranks
    single = _learner(tiny, "ddp", batch=2, accumulate=2, beta=UNEVEN_BETA)
    m = single.update(samples[:n])
    got = r0[f"{strategy}-{n}"]
    assert got["optimizer_steps"] == m["optimizer_steps"] == -(-n // 4)
    assert got["loss"] == pytest.approx(m["loss"], abs=1e-5)
    init = _policy(tiny).model.state_dict()
    ref = single.trainable_state()
    assert set(got["weights"]) == set(ref)
    moved = 0
    for k, v in ref.items():
        assert torch.allclose(got["weights"][k], v, atol=1e-5), \
            f"{strategy} with {n} samples != single process at {k}: {(got['weights'][k] - v).abs().max()}"
        moved += int(not torch.equal(v, init[k]))
    assert moved > 10
    if strategy == "ddp":
        other = r1[f"ddp-{n}"]["weights"]
        assert all(torch.equal(other[k], got["weights"][k]) for k in other), "DDP ranks diverged"
