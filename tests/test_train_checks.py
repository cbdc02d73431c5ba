"""guigym train checks its configuration before anything starts (issue 34): unknown env options,
task ids and dialects are one-line config errors (exit 2) in ``--check`` and in a run, and
``--resume`` refuses a recipe that differs from the one the run.dir was started with."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from guigym.core.errors import ConfigError
from guigym.train.main import main

ROOT = Path(__file__).resolve().parents[1]


def _recipe(tmp_path: Path, **over: dict) -> Path:
    """The tiny MiniWoB recipe with its run.dir under tmp_path and a model path that does not exist
    (so a run that got past every check would stop at model.path, before building anything)."""
    cfg = yaml.safe_load((ROOT / "recipes" / "grpo_miniwob_tiny.yaml").read_text())
    cfg["run"].update(name="checks", dir=str(tmp_path / "run"))
    cfg["model"]["path"] = str(tmp_path / "no-model")
    for section, values in over.items():
        cfg[section].update(values)
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize("override, names", [
    ("env.tasks=[click-tesst]", ["env.tasks", "click-tesst", "did you mean 'click-test'"]),
    ("env.kwargs.max_step=3", ["env.kwargs", "'max_step'", "did you mean 'max_steps'"]),
    ("env.kwargs.dialect=uitar", ["env.kwargs: dialect", "did you mean 'uitars'"]),
    ("eval.tasks=[enter-txt]", ["eval.tasks", "did you mean 'enter-text'"]),
    ("env.id=MiniWob-v0", ["MiniWob-v0", "did you mean 'MiniWoB-v0'"]),
])
@pytest.mark.parametrize("check", [True, False])
def test_env_config_errors_are_one_line_and_exit_2(tmp_path, capsys, override, names, check):
    rc = main([str(_recipe(tmp_path)), "--set", override] + (["--check"] if check else []))
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and all(n in err for n in names), err
    assert not (tmp_path / "run" / "resolved_config.json").exists(), "refused before the run started"


@pytest.mark.skipif(Path("/data/OSWorld/evaluation_examples/examples").exists(), reason="the suite exists here")
def test_check_of_a_recipe_for_another_machine_notes_its_missing_paths(capsys):
    rc = main([str(ROOT / "recipes" / "grpo_osworld_uitars7b.yaml"), "--check"])
    captured = capsys.readouterr()
    assert rc == 0 and "precision and sharding plan" in captured.out
    assert "note: env.kwargs: suite: '/data/OSWorld/evaluation_examples/examples' does not exist" in captured.err


def test_resume_refuses_a_different_recipe_naming_the_keys(tmp_path, capsys):
    from guigym.train.config import load_recipe
    from guigym.train.loop import Trainer

    recipe = _recipe(tmp_path)
    # a fresh run records its resolved recipe before it builds anything (it then stops at model.path)
    with pytest.raises(ConfigError, match="model.path"):
        Trainer(load_recipe(recipe), log=lambda m: None).build()
    recorded = json.loads((tmp_path / "run" / "resolved_config.json").read_text())
    assert recorded["env"]["tasks"] == load_recipe(recipe).env.tasks and recorded["run"]["name"] == "checks"

    rc = main([str(recipe), "--resume", "--set", "optim.learning_rate=0.5", "--set", "rollout.temperature=0.7"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "optim.learning_rate: recorded" in err and "now 0.5" in err and "rollout.temperature: recorded" in err
    assert "run.iterations" not in err
    # more iterations (extending a run) is the same experiment: the check passes, the run goes on to model.path
    with pytest.raises(ConfigError, match="model.path"):
        Trainer(load_recipe(recipe, ["run.iterations=99"]), resume=True, log=lambda m: None).build()
