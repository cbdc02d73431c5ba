"""``python tests/pipeline_probe.py RECIPE``: ``guigym train RECIPE`` with a probe that saves each
stage's weights as its trainer built them (before any update) to
``$GUIGYM_TEST_PROBE_DIR/<run.name>-<start iteration>.safetensors``, so a test can tell which
model each stage started from, across processes (test_pipeline.py)."""
from __future__ import annotations

import os
import sys


def main() -> int:
    from safetensors.torch import save_file

    from guigym.train import loop

    original = loop.Trainer.build

    def build(self) -> None:  # type: ignore[no-untyped-def]
        original(self)
        if self.rank == 0:
            state = {k: v.detach().cpu().clone().contiguous() for k, v in self.learner.model.state_dict().items()}
            save_file(state, os.path.join(os.environ["GUIGYM_TEST_PROBE_DIR"],
                                          f"{self.cfg.run.name}-{self.start_iteration}.safetensors"))

    loop.Trainer.build = build  # SFTTrainer.build calls it through super()
    from guigym.train.main import main

    return main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
