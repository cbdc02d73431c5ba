"""The SFT stage (``stage: sft``, guigym.train.sft) on real MiniWoB pages in Chromium with a tiny
model (CPU): demonstrations played by the oracle and by a replayed ``guigym eval`` run, prompts
byte-identical to the GRPO rollout's, NLL on reply tokens only, exact resume after kill -9, and
the output loading as a GRPO recipe's ``model.path``."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch  # noqa: E402

from guigym.core.errors import ConfigError  # noqa: E402
from guigym.train.config import from_dict  # noqa: E402
from guigym.train.demos import DemoFile, collect, eval_dir_jobs, render, split_jobs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TASKS = ["click-button", "click-widget"]
DEMO_SEEDS = (2_000_000, 4)  # start, count per task


@pytest.fixture(autouse=True)
def _threads(one_torch_thread):
    yield


def _recipe(run_dir: Path, **over) -> dict:
    cfg = yaml.safe_load((ROOT / "recipes" / "sft_miniwob_instruct.yaml").read_text())
    cfg["run"].update(name="sft-test", dir=str(run_dir), iterations=2)
    cfg["model"]["tiny"].update(hidden=32, layers=1, vocab_size=600)
    cfg["env"].update(tasks=TASKS, num_envs=1)
    cfg["sft"]["demos"].update(seeds={"start": DEMO_SEEDS[0], "count": DEMO_SEEDS[1]})
    cfg["optim"]["lr_scheduler_type"] = "constant"
    cfg["algorithm"]["per_device_train_batch_size"] = 8
    cfg["eval"]["enabled"] = False
    for section, values in over.items():
        cfg[section].update(values)
    return cfg


@pytest.fixture(scope="module")
def demo_jsonl(tmp_path_factory) -> Path:
    """The oracle's demonstrations on 4 seeds of each task, collected once for the module."""
    f = DemoFile(tmp_path_factory.mktemp("demos") / "demos.jsonl")
    counts = collect("MiniWoB-v0", {"tasks": TASKS}, "oracle", split_jobs(TASKS, *DEMO_SEEDS), f, num_envs=1,
                     max_steps=1)
    assert counts["played"] == 8 and counts["lost"] == 0
    return f.path


def _seeded_run_dir(tmp_path: Path, demo_jsonl: Path, name: str = "run") -> Path:
    run = tmp_path / name
    run.mkdir()
    shutil.copy(demo_jsonl, run / "demos.jsonl")  # collection then finds every pair done
    return run


def _trainer(run: Path, **over):
    from guigym.train.sft import SFTTrainer

    t = SFTTrainer(from_dict(_recipe(run, **over)), log=lambda m: None)
    t.build()
    return t


def test_collection_resumes_only_the_missing_pairs_and_survives_a_torn_line(tmp_path, demo_jsonl):
    f = DemoFile(tmp_path / "demos.jsonl")
    shutil.copy(demo_jsonl, f.path)
    with f.path.open("a") as fh:
        fh.write('{"task_id": "click-button", "seed": 9')  # a crash mid-write
    assert len(f.read()) == 8
    jobs = split_jobs(TASKS, *DEMO_SEEDS) + [("click-button", DEMO_SEEDS[0] + 100)]
    counts = collect("MiniWoB-v0", {"tasks": TASKS}, "oracle", jobs, f, num_envs=1, max_steps=1)
    assert counts["skipped"] == 8 and counts["played"] == 1
    demos = f.read()
    assert [d.seed for d in demos][-1] == DEMO_SEEDS[0] + 100 and len(demos) == 9
    # what was kept is what the env showed: instruction and a11y of the page, the oracle's click
    d = demos[-1]
    assert d.success and d.steps[0].obs["instruction"].startswith("Click on the")
    assert d.steps[0].action_text.startswith('click(element="') and "<a11y" in d.steps[0].obs["a11y"]


def test_sft_prompts_are_the_grpo_rollout_prompts_byte_for_byte(tmp_path, demo_jsonl):
    """The same task and seed, once rendered from the oracle's demonstration and once sampled by
    the GRPO rollout machinery (EnvPool + HFEngine + RolloutScheduler) with the same model: the
    prompt ids and the candidate sets are identical, and the demonstrated reply is one of the
    replies the constrained rollout can produce."""
    from guigym.train.loop import Trainer

    t = _trainer(_seeded_run_dir(tmp_path, demo_jsonl))
    try:
        Trainer.start_rollout(t)
        demos = {(d.task_id, d.seed): d for d in t.demos() if not d.source.endswith("+variant")}
        rendered = {(tr.task_id, tr.seed, tr.info["instruction"]): tr
                    for tr in render(list(demos.values()), t.make_prompt_builder(), t.run_id).trajectories}
        for task in TASKS:
            seed = DEMO_SEEDS[0] + 1
            group = t.make_scheduler(0, group_size=2).collect([task], seeds=[seed])[0]
            demo = rendered[(task, seed, demos[(task, seed)].instruction)]
            for traj in group.trajectories:
                step = traj.steps[0]
                tok = t.learner.policy.tokenizer
                assert step.prompt_ids == demo.steps[0].prompt_ids, (tok.decode(step.prompt_ids),
                                                                     tok.decode(demo.steps[0].prompt_ids))
                assert step.candidates == demo.steps[0].candidates
                assert step.response_ids[-1] == demo.steps[0].response_ids[-1]  # the end token
            sampled = t.learner.policy.constraint(demo.steps[0].candidates)
            reply = demo.steps[0].response_ids
            assert all(reply[k] in sampled.allowed(reply[:k]) for k in range(len(reply)))
    finally:
        t.close()


def test_nll_counts_reply_tokens_only(tmp_path, demo_jsonl):
    """nll_update's loss equals an independent computation over the reply tokens only (the
    model's log-softmax at each reply position, restricted to the candidate trie's allowed ids);
    the same computation over prompt and reply tokens gives a different number, so the test tells
    the two apart."""
    t = _trainer(_seeded_run_dir(tmp_path, demo_jsonl), algorithm={"per_device_train_batch_size": 64})
    try:
        samples = t.samples
        model = t.learner.model
        cons_of = t.learner.policy.constraint
        reply_nll, all_nll, n_reply, n_all = 0.0, 0.0, 0, 0
        with torch.no_grad():
            for s in samples:
                ids = torch.tensor([s.input_ids])
                logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0].float()
                logp_full = torch.log_softmax(logits, -1)
                for j in range(1, len(s.input_ids)):
                    tok = s.input_ids[j]
                    seg = next((g for g in s.segments if g.start <= j < g.end), None)  # a reply span
                    if seg is not None:
                        allowed = cons_of(seg.candidates).allowed(s.input_ids[seg.start:j])
                        lp = torch.log_softmax(logits[j - 1, allowed], -1)[allowed.index(tok)]
                        reply_nll -= float(lp)
                        n_reply += 1
                        all_nll -= float(lp)
                    else:
                        all_nll -= float(logp_full[j - 1, tok])
                    n_all += 1
        assert n_reply == sum(s.num_loss_tokens for s in samples)
        m = t.learner.nll_update(samples)
        assert m["optimizer_steps"] == 1.0
        assert m["loss"] == pytest.approx(reply_nll / n_reply, rel=1e-4)
        assert abs(all_nll / n_all - reply_nll / n_reply) > 0.1
    finally:
        t.close()


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def test_kill9_mid_run_then_resume_gives_the_uninterrupted_weights(tmp_path, demo_jsonl):
    """A run killed (SIGKILL) right after logging epoch 1, before its checkpoint, and resumed ends
    with the weights and loss curve of the run that was never interrupted."""
    from guigym.train.sft import SFTTrainer

    straight = _seeded_run_dir(tmp_path, demo_jsonl, "straight")
    broken = _seeded_run_dir(tmp_path, demo_jsonl, "broken")
    SFTTrainer(from_dict(_recipe(straight, run={"iterations": 3})), log=lambda m: None).run()
    (broken / "recipe.yaml").write_text(yaml.safe_dump(_recipe(broken, run={"iterations": 3})))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GUIGYM_TRAIN_FAULT": "after_log:1"}
    p = subprocess.run([sys.executable, "-m", "guigym.train.loop", str(broken / "recipe.yaml")], env=env,
                       capture_output=True, text=True, timeout=600, start_new_session=True)
    assert p.returncode == -signal.SIGKILL, p.stderr[-3000:]
    assert not (broken / "model").exists()
    logs: list[str] = []
    SFTTrainer(from_dict(_recipe(broken, run={"iterations": 3})), resume=True, log=logs.append).run()
    assert any("continuing at 1" in m for m in logs), logs
    a, b = _weights(straight / "model"), _weights(broken / "model")
    assert a.keys() == b.keys()
    init = _weights(straight / "init_model")
    assert any(not torch.equal(a[k], init[k]) for k in a)  # training moved the weights
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6)
    la = [json.loads(x)["loss"] for x in (straight / "metrics.jsonl").read_text().splitlines()]
    lb = [json.loads(x)["loss"] for x in (broken / "metrics.jsonl").read_text().splitlines()]
    assert la == pytest.approx(lb, abs=1e-6) and len(la) == 3


def test_sft_output_is_a_grpo_model_path(tmp_path, demo_jsonl):
    """The stage's output directory loads as model.path of the GRPO recipe: the trainer takes its
    weights and its demonstration-trained tokenizer (every demonstrated label one token)."""
    from guigym.train.loop import Trainer
    from guigym.train.sft import SFTTrainer

    run = _seeded_run_dir(tmp_path, demo_jsonl)
    t = SFTTrainer(from_dict(_recipe(run, run={"iterations": 1})), log=lambda m: None)
    t.run()
    trained = {k: v.detach().clone() for k, v in t.learner.model.state_dict().items()}
    out = run / "model"
    rl = yaml.safe_load((ROOT / "recipes" / "grpo_miniwob_instruct.yaml").read_text())
    rl["run"].update(dir=str(tmp_path / "rl"), name="rl")
    rl["model"] = {"path": str(out)}
    rl["env"]["tasks"] = TASKS
    trainer = Trainer(from_dict(rl), log=lambda m: None)
    try:
        trainer.build()
        got = trainer.learner.model.state_dict()
        assert got.keys() == trained.keys()
        for k, v in trained.items():
            torch.testing.assert_close(got[k], v, rtol=0, atol=0)
        tok = trainer.learner.policy.tokenizer
        for d in t.demos():
            if d.task_id == "click-button":
                label = d.instruction.split('"')[1]
                assert len(tok(label, add_special_tokens=False)["input_ids"]) == 1, label
    finally:
        trainer.close()


def test_demonstrations_from_a_guigym_eval_run(tmp_path):
    """sft.demos.source eval_dir: the pairs an eval run solved are replayed (replay:DIR) and
    their observations regenerated; only solved pairs are demonstrated."""
    from guigym.agents import make_agent
    from guigym.eval.runner import EvalConfig, run_eval

    out = tmp_path / "eval"
    run_eval(EvalConfig(env_id="MiniWoB-v0", task_ids=["click-button"], out_dir=out, num_envs=1, episodes=2,
                        seed=3_000_000, env_kwargs={"max_steps": 1}), lambda: make_agent("oracle"), progress=False)
    jobs = eval_dir_jobs(out)
    assert len(jobs) == 2 and all(t == "click-button" for t, _ in jobs)
    run = tmp_path / "run"
    cfg = _recipe(run, env={"tasks": ["click-button"]})
    cfg["sft"]["demos"] = {"source": "eval_dir", "path": str(out)}
    from guigym.train.sft import SFTTrainer

    t = SFTTrainer(from_dict(cfg), log=lambda m: None)
    demos = t.demos()
    assert sorted((d.task_id, d.seed) for d in demos) == jobs
    assert all(d.success and d.source == f"replay:{out}" for d in demos)
    recorded = {(r["task_id"], r["seed"]): r["instruction"]
                for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert {(d.task_id, d.seed): d.instruction for d in demos} == recorded


@pytest.mark.parametrize("change, field", [
    ({"sft": {"demos": {"seeds": {"start": 1_000_010, "count": 5}}}, "eval": {"enabled": True}}, "sft.demos.seeds"),
    ({"stage": "rl"}, "sft"),
    ({"sft": {"demos": {"source": "eval_dir"}}}, "sft.demos.path"),
])
def test_config_errors_name_the_field(tmp_path, change, field):
    cfg = _recipe(tmp_path / "run")
    for k, v in change.items():
        if isinstance(v, dict) and isinstance(cfg.get(k), dict):
            for kk, vv in v.items():
                cfg[k][kk] = {**cfg[k].get(kk, {}), **vv} if isinstance(vv, dict) else vv
        else:
            cfg[k] = v
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        from_dict(cfg)


def test_resume_with_more_iterations_follows_the_new_lr_schedule(tmp_path, demo_jsonl):
    """A finished 1-epoch cosine run resumed with run.iterations=3 ends with the weights of a
    3-epoch run from scratch: the resumed epochs use the 3-epoch schedule, not the learning rate
    the old run's optimizer state carried."""
    from guigym.train.sft import SFTTrainer

    cosine = {"lr_scheduler_type": "cosine"}
    straight = _seeded_run_dir(tmp_path, demo_jsonl, "straight")
    grown = _seeded_run_dir(tmp_path, demo_jsonl, "grown")
    SFTTrainer(from_dict(_recipe(straight, run={"iterations": 3}, optim=cosine)), log=lambda m: None).run()
    SFTTrainer(from_dict(_recipe(grown, run={"iterations": 1}, optim=cosine)), log=lambda m: None).run()
    SFTTrainer(from_dict(_recipe(grown, run={"iterations": 3}, optim=cosine)), resume=True, log=lambda m: None).run()
    lr = lambda run: [json.loads(x)["lr"] for x in (run / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    assert lr(grown) == pytest.approx(lr(straight), rel=1e-9) and len(set(lr(straight))) == 3
    a, b = _weights(straight / "model"), _weights(grown / "model")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6)
