"""Warm starts (guigym.train.warmstart): keyed by the SFT config, looked up in the cache then in
the shipped assets, built once in a child process when missing; the shipped MiniWoB warm start
is what recipes/sft_miniwob_instruct.yaml names, and its deterministic parts rebuild bit for bit
from the shipped demonstrations."""
from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")
pytest.importorskip("transformers")

from guigym.train import warmstart  # noqa: E402
from guigym.train.config import from_dict  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "sft_miniwob_instruct.yaml"


def _cfg(**over):
    data = yaml.safe_load(RECIPE.read_text())
    for path, value in over.items():
        *head, last = path.split(".")
        d = data
        for k in head:
            d = d.setdefault(k, {})
        d[last] = value
    return from_dict(data)


def test_key_ignores_where_a_run_lives_but_not_what_it_trains():
    base = warmstart.key_of(_cfg())
    assert warmstart.key_of(_cfg(**{"run.dir": "/elsewhere", "run.name": "x", "eval.enabled": False,
                                    "env.num_envs": 1, "sft.output_dir": "/tmp/m"})) == base
    for path, value in (("optim.learning_rate", 1e-4), ("model.tiny.hidden", 64), ("run.iterations", 2),
                        ("sft.demos.seeds", {"start": 2_000_000, "count": 10}), ("rollout.template", "$a11y $instruction")):
        assert warmstart.key_of(_cfg(**{path: value})) != base, path


def test_shipped_warm_start_is_what_the_recipe_names(tmp_path, monkeypatch):
    """With an empty cache, resolving the GRPO recipe's warm start finds the shipped copy and
    builds nothing; its manifest names the recipe's key and its held-out evaluation."""
    monkeypatch.setenv("GUIGYM_CACHE", str(tmp_path))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("a shipped warm start must not be rebuilt"))
    cfg = warmstart.load_sft_recipe(str(RECIPE))
    path = warmstart.resolve(str(RECIPE), log=lambda m: None)
    assert path == warmstart.ASSETS / warmstart.key_of(cfg) / "model"
    manifest = json.loads((path.parent / "manifest.json").read_text())
    assert manifest["key"] == warmstart.key_of(cfg)
    assert manifest["eval"]["after"]["episodes"] == 150
    assert hashlib.sha256(b"".join(p.read_bytes() for p in sorted(path.glob("*.safetensors")))).hexdigest() \
        == manifest["sha256"]["weights"]


def test_shipped_warm_start_tokenizer_and_init_rebuild_bit_for_bit(tmp_path):
    """The build's deterministic chain from the shipped demonstrations: the tokenizer trained on
    their text has the shipped vocabulary, and the initial weights drawn with it are the shipped
    build's (sha256 in the manifest). Training from there is exercised by tests/test_sft.py
    (exact resume) on the same code."""
    from transformers import AutoTokenizer

    from guigym.agents.oracle.miniwob import instruction_variants
    from guigym.models import tiny
    from guigym.train.demos import DemoFile, tokenizer_texts, with_variants

    cfg = warmstart.load_sft_recipe(str(RECIPE))
    shipped = warmstart.ASSETS / warmstart.key_of(cfg)
    manifest = json.loads((shipped / "manifest.json").read_text())
    demos = [d for d in DemoFile(shipped / "demos.jsonl").read() if d.success]
    assert len(demos) == cfg.sft.demos.seeds.count * len(cfg.env.tasks)
    texts = tokenizer_texts(with_variants(demos, instruction_variants), cfg.rollout.template)
    t = cfg.model.tiny
    out = tiny.build(tmp_path / "init", seed=t.seed, hidden=t.hidden, layers=t.layers, vocab_size=t.vocab_size,
                     tokenizer_texts=texts)
    assert AutoTokenizer.from_pretrained(out).get_vocab() == AutoTokenizer.from_pretrained(shipped / "model").get_vocab()
    got = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(out.glob("*.safetensors")))).hexdigest()
    assert got == manifest["sha256"]["init_weights"]


def test_missing_warm_start_is_built_once_then_taken_from_the_cache(tmp_path, monkeypatch):
    """A warm start that is neither cached nor shipped is built by running its SFT recipe in a
    child process into $GUIGYM_CACHE/warmstart/<key>; the next resolve takes it from there."""
    monkeypatch.setenv("GUIGYM_CACHE", str(tmp_path / "cache"))
    data = yaml.safe_load(RECIPE.read_text())
    data["run"].update(iterations=1, dir=str(tmp_path / "unused"))
    data["model"]["tiny"].update(hidden=32, layers=1, vocab_size=400)
    data["env"].update(tasks=["click-button"], num_envs=1)
    data["sft"]["demos"]["seeds"] = {"start": 2_100_000, "count": 2}
    data["eval"]["enabled"] = False
    recipe = tmp_path / "sft.yaml"
    recipe.write_text(yaml.safe_dump(data))
    key = warmstart.key_of(from_dict(data))
    path = warmstart.resolve(str(recipe), log=lambda m: None)
    assert path == tmp_path / "cache" / "warmstart" / key / "model"
    assert (path / "config.json").is_file() and (path.parent / "demos.jsonl").is_file()
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("a cached warm start must not be rebuilt"))
    assert warmstart.resolve(str(recipe), log=lambda m: None) == path


def test_warm_start_and_path_together_is_a_config_error():
    from guigym.core.errors import ConfigError

    data = yaml.safe_load((ROOT / "recipes" / "grpo_miniwob_instruct.yaml").read_text())
    data["model"]["path"] = "/some/model"
    with pytest.raises(ConfigError, match="model.warm_start"):
        from_dict(data)
