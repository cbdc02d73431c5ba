"""``guigym train PIPELINE.yaml`` (guigym.train.pipeline) on the tiny MobileRL pipeline
(recipes/mobilerl_miniwob_tiny.yaml, small sizes): reasoning-free SFT on the oracle's MiniWoB
demonstrations -> reasoning SFT with the stand-in annotator -> AdaGRPO with free decoding. Each
stage starts from the previous stage's weights; a run killed (SIGKILL) inside the RL stage is
rerun with the same command and resumes that stage without redoing the finished ones."""
from __future__ import annotations

import json
import os
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
from guigym.train.annotator_stub import AnnotatorStub  # noqa: E402
from guigym.train.pipeline import load_pipeline  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOKEN_ENV = "GUIGYM_ANNOTATOR_TOKEN"


def _pipeline(tmp: Path, url: str) -> Path:
    """The repo's MobileRL pipeline, shrunk: one task, 3 demonstration seeds, one epoch/iteration each."""
    data = yaml.safe_load((ROOT / "recipes" / "mobilerl_miniwob_tiny.yaml").read_text())
    p = data["pipeline"]
    p["dir"] = str(tmp / "pipe")
    s1, s2, s3 = (st["config"] for st in p["stages"])
    p["stages"][2]["recipe"] = str(ROOT / "recipes" / "adagrpo_miniwob_tiny.yaml")
    for c in (s1, s2, s3):
        c["env"].update(tasks=["click-button"], num_envs=1)
        c["run"] = {**c.get("run", {}), "iterations": 1}
    s1["model"]["tiny"].update(hidden=32, layers=1, vocab_size=600)
    s1["sft"]["demos"].update(seeds={"start": 2_000_000, "count": 3}, instruction_variants=False)
    s2["sft"]["annotator"]["url"] = url
    s3["rollout"].update(num_generations=2, groups_per_iteration=1, max_new_tokens=48)
    s3["algorithm"] = {"per_device_train_batch_size": 8}
    path = tmp / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _start_weights(model_dir: Path) -> dict[str, torch.Tensor]:
    """A from_pretrained directory's weights as a trainer holds them after loading it."""
    from guigym.train.policy.hf_policy import HFPolicy

    return {k: v.detach().clone() for k, v in HFPolicy(str(model_dir)).model.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_three_stages_feed_each_other_and_a_killed_run_resumes_at_its_stage(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    monkeypatch.setenv(TOKEN_ENV, "pipe-token")
    probe = tmp_path / "probe"
    probe.mkdir()
    with AnnotatorStub(token="pipe-token") as stub:
        recipe = _pipeline(tmp_path, stub.url)
        stages = load_pipeline(recipe)  # validates all three before anything runs
        d1, d2, d3 = (s.dir for s in stages)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "GUIGYM_TEST_PROBE_DIR": str(probe),
               "GUIGYM_TRAIN_FAULT": "after_store:0"}  # only the RL loop stores rollouts: stage 3 dies
        cmd = [sys.executable, str(ROOT / "tests" / "pipeline_probe.py"), str(recipe)]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, start_new_session=True)
        assert p.returncode == -signal.SIGKILL, p.stdout[-2000:] + p.stderr[-3000:]
        assert (d1 / "summary.json").is_file() and (d2 / "summary.json").is_file()
        assert not (d3 / "summary.json").exists() and not (d3 / "checkpoints").exists()
        calls = len(stub.calls)
        assert calls == 3  # one annotation per demonstrated step
        done_marks = {f: f.stat().st_mtime_ns for d in (d1, d2) for f in (d / "summary.json", d / "metrics.jsonl",
                                                                           d / "model" / "config.json")}

        env.pop("GUIGYM_TRAIN_FAULT")
        p2 = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, start_new_session=True)
        assert p2.returncode == 0, p2.stdout[-2000:] + p2.stderr[-3000:]
        assert len(stub.calls) == calls  # stage 2 was not redone: the annotator was not asked again

    out = p2.stdout
    assert "'sft_reasoning_free' finished earlier" in out and "'sft_reasoning' finished earlier" in out
    assert all(f.stat().st_mtime_ns == t for f, t in done_marks.items())  # finished stages untouched
    # stage 3 resumed: the killed run's stored rollouts of iteration 0 were reused, not collected again
    m3 = [json.loads(x) for x in (d3 / "metrics.jsonl").read_text().splitlines()]
    assert len(m3) == 1 and m3[0]["rollout/reused_from_store"] == 1.0
    assert (d3 / "summary.json").is_file() and (d3 / "model-000001" / "config.json").is_file()

    # what each stage started from (probe files written as each trainer was built)
    names = sorted(f.name for f in probe.iterdir())
    prefix = "mobilerl_miniwob_tiny-"
    assert names == sorted([f"{prefix}adagrpo-0.safetensors", f"{prefix}sft_reasoning-0.safetensors",
                            f"{prefix}sft_reasoning_free-0.safetensors"])  # stages 1-2 built once, in run 1
    start2 = load_file(str(probe / f"{prefix}sft_reasoning-0.safetensors"))
    start3 = load_file(str(probe / f"{prefix}adagrpo-0.safetensors"))
    out1, init1, out2 = _start_weights(d1 / "model"), _start_weights(d1 / "init_model"), _start_weights(d2 / "model")
    assert not _same(out1, init1)  # stage 1 trained: its output differs from the fresh model
    assert _same(start2, out1) and not _same(start2, init1)  # stage 2 started from stage 1's output
    assert _same(start3, out2) and not _same(start3, out1)   # stage 3 from stage 2's
    # the reasoning SFT stage trained "Thought: <annotator text>\nAction: <action>" replies
    from guigym.train.data.store import DataStore

    store = DataStore.for_run_dir(str(d2))
    try:
        run_id = store.runs("mobilerl_miniwob_tiny-sft_reasoning")[0]["run_id"]
        trajs = store.get_trajectories(run_id, source="expert")
    finally:
        store.close()
    assert len(trajs) == 3 and all(t.steps[0].action_text.startswith("Thought: The task asks for ") and
                                   "\nAction: click(element=" in t.steps[0].action_text for t in trajs)


def test_check_rejects_a_chain_whose_rl_stage_cannot_read_reasoning_replies(tmp_path):
    recipe = _pipeline(tmp_path, "http://127.0.0.1:9/v1")
    data = yaml.safe_load(recipe.read_text())
    data["pipeline"]["stages"][2]["config"]["env"]["kwargs"] = {}
    recipe.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"stage 'adagrpo'.*dialect"):
        load_pipeline(recipe)
    data["pipeline"]["stages"][2]["config"]["env"]["kwargs"] = {"dialect": "thought"}
    data["pipeline"]["stages"][1]["config"]["run"]["dir"] = "elsewhere"
    recipe.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"stage 'sft_reasoning'.*run\.dir"):
        load_pipeline(recipe)
    data["pipeline"]["stages"][1]["config"]["run"].pop("dir")
    data["pipeline"]["stages"][1]["config"]["optim"]["learning_rat"] = 1.0
    recipe.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"sft_reasoning.*optim\.learning_rat"):  # any stage's typo, before anything runs
        load_pipeline(recipe)


@pytest.mark.parametrize("name", ["mobilerl_miniwob_tiny", "mobilerl_androidworld", "sft_dart_miniwob_tiny"])
def test_pipeline_recipes_pass_check_and_chain_their_models(name, capsys):
    from guigym.train.main import main

    recipe = ROOT / "recipes" / f"{name}.yaml"
    assert main([str(recipe), "--check", "--set", "pipeline.dir=/tmp/unused-pipeline-dir"]) == 0
    out = capsys.readouterr().out
    stages = load_pipeline(recipe, ["pipeline.dir=/tmp/unused-pipeline-dir"])
    assert f"# pipeline: {len(stages)} stages valid" in out and out.count("# precision and sharding plan") == len(stages)
    for prev, nxt in zip(stages, stages[1:]):
        assert nxt.cfg.model.path == str(prev.output) and nxt.dir.parent == prev.dir.parent
    last = stages[-1].name
    lr = load_pipeline(recipe, [f"{last}.optim.learning_rate=0.125"])[-1].cfg.optim.learning_rate
    assert lr == 0.125  # a --set addressed to a stage by name
    with pytest.raises(ConfigError, match="not a stage"):
        load_pipeline(recipe, ["nostage.optim.learning_rate=1"])


def test_runner_skips_finished_stages_refuses_changed_ones_and_checks_tokens_first(tmp_path, monkeypatch):
    """The runner's bookkeeping with a stand-in trainer (writes summary.json and the output model):
    every stage runs with resume on, a rerun runs none, a finished stage whose config changed is an
    error naming it, and a missing annotator token stops the pipeline before its first stage."""
    from guigym.train.pipeline import run_pipeline

    calls: list[tuple[str, bool]] = []

    def runner(cfg, resume):
        calls.append((cfg.run.name, resume))
        d = Path(cfg.run.dir)
        out = d / "model" if cfg.stage == "sft" else d / f"model-{cfg.run.iterations:06d}"
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        (d / "summary.json").write_text("{}")
        return {"stage": cfg.run.name}

    recipe = _pipeline(tmp_path, "http://127.0.0.1:9/v1")
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(ConfigError, match=rf"stage 'sft_reasoning': sft\.annotator\.token_env: .*{TOKEN_ENV}"):
        run_pipeline(load_pipeline(recipe), runner, log=lambda m: None)
    assert calls == []  # nothing ran
    monkeypatch.setenv(TOKEN_ENV, "t")
    run_pipeline(load_pipeline(recipe), runner, log=lambda m: None)
    assert calls == [(f"mobilerl_miniwob_tiny-{n}", True) for n in ("sft_reasoning_free", "sft_reasoning", "adagrpo")]
    run_pipeline(load_pipeline(recipe), runner, log=lambda m: None)
    assert len(calls) == 3  # all finished: nothing reran
    with pytest.raises(ConfigError, match=r"stage 'sft_reasoning'.*different config"):
        run_pipeline(load_pipeline(recipe, ["sft_reasoning.optim.learning_rate=0.5"]), log=lambda m: None,
                     runner=runner)
    assert len(calls) == 3
