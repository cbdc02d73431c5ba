"""guigym.train.main: the topology dispatcher above the synchronous loop and DART's services."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from guigym.train import main as train_main
from guigym.train.config import from_dict

ROOT = Path(__file__).resolve().parents[1]


def _cfg(topology: str):
    raw = yaml.safe_load((ROOT / "recipes" / "grpo_miniwob_tiny.yaml").read_text())
    raw["run"]["topology"] = topology
    return from_dict(raw)


@pytest.mark.parametrize("topology, expected", [("decoupled", "decoupled"), ("coupled", "loop")])
def test_run_picks_the_trainer_named_by_the_topology(monkeypatch, topology, expected):
    import guigym.train.decoupled as decoupled

    calls = []

    class FakeTrainer:
        def __init__(self, cfg, resume=False, log=print):
            calls.append(("loop", cfg.run.topology, resume))

        def run(self):
            return {"by": "loop"}

    def fake_decoupled(cfg, resume=False, log=print):
        calls.append(("decoupled", cfg.run.topology, resume))
        return {"by": "decoupled"}

    monkeypatch.setattr(train_main, "Trainer", FakeTrainer)
    monkeypatch.setattr(decoupled, "run_decoupled", fake_decoupled)
    out = train_main.run(_cfg(topology), resume=True, log=lambda m: None)
    assert out == {"by": expected}
    assert calls == [(expected, topology, True)]
