"""``guigym train RECIPE``: load a recipe and run it on the topology it names.

``run.topology`` picks the trainer: the synchronous loop (:class:`guigym.train.loop.Trainer`:
``sync`` / ``async`` rollouts, torchrun, Ray env workers) or DART's four decoupled services on
Ray (:func:`guigym.train.decoupled.run_decoupled`, built on the same Trainer). This dispatcher
sits above both so that neither imports the other's entry point (tests/test_import_layers.py).
``python -m guigym.train.main RECIPE`` (and the older ``python -m guigym.train.loop RECIPE``)
run :func:`main`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from guigym.core.errors import ConfigError
from guigym.train.config import TrainConfig, describe, load_recipe
from guigym.train.loop import Trainer, check_env


def run(config: Union[TrainConfig, str, Path], overrides: Sequence[str] = (), resume: bool = False,
        log: Any = print) -> dict[str, Any]:
    """Train from a :class:`TrainConfig` or a recipe path (+ ``key=value`` overrides). Returns the
    summary (start iteration, last metrics, and before/after evaluation with the z-test when
    ``eval.enabled``)."""
    if not isinstance(config, TrainConfig):
        from guigym.train import pipeline

        if pipeline.is_pipeline(config):  # stages in order, each from the previous one's model
            return pipeline.run_pipeline(pipeline.load_pipeline(config, overrides),
                                         lambda c, resume: run(c, resume=resume, log=log), log=log)
    cfg = config if isinstance(config, TrainConfig) else load_recipe(config, overrides)
    check_env(cfg)  # unknown env options, tasks, dialects, paths: now, not in the env workers
    if cfg.stage == "sft":  # supervised fine-tuning on demonstrations (guigym.train.sft)
        from guigym.train.sft import SFTTrainer

        return SFTTrainer(cfg, resume=resume, log=log).run()
    if cfg.run.topology == "decoupled":  # DART's four services on Ray (guigym.train.decoupled)
        from guigym.train.decoupled import run_decoupled

        return run_decoupled(cfg, resume=resume, log=log)
    return Trainer(cfg, resume=resume, log=log).run()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="guigym train", description="GRPO-family RL on guigym envs from a YAML recipe")
    p.add_argument("recipe", nargs="?", help="recipe YAML (e.g. recipes/grpo_miniwob_tiny.yaml), or a pipeline of "
                                              "stage recipes (e.g. recipes/mobilerl_miniwob_tiny.yaml)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a recipe value, e.g. --set optim.learning_rate=1e-3 (repeatable; value is YAML)")
    p.add_argument("--resume", action="store_true", help="continue the run in run.dir from its newest checkpoint")
    p.add_argument("--help-config", action="store_true", help="print every recipe key with its help text and exit")
    p.add_argument("--check", action="store_true", help="validate the recipe, print it resolved with its precision and "
                                                         "sharding plan (bytes per GPU for distributed.gpus, or 1 and 8), and "
                                                         "exit; non-zero when it does not fit distributed.gpus x "
                                                         "distributed.gpu_memory_gib")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``guigym train``; returns the exit code (2 on a config error)."""
    args = build_parser().parse_args(argv)
    if args.help_config:
        from guigym.train.algorithms.plugin_help import describe_plugins

        print(describe())
        print(describe_plugins())  # every registered plug-in, its options and the paper/equation it cites
        return 0
    if not args.recipe:
        print("guigym train: a recipe path is required (or --help-config)", file=sys.stderr)
        return 2
    try:
        from guigym.train import pipeline

        if pipeline.is_pipeline(args.recipe):  # a `pipeline:` recipe (guigym.train.pipeline)
            log = lambda m: print(m, flush=True)  # noqa: E731
            return pipeline.cli(args, lambda c, resume: run(c, resume=resume, log=log))
        cfg = load_recipe(args.recipe, args.overrides)
        if args.check:  # (a run checks the env in run())
            for note in check_env(cfg, strict_paths=False):
                print(f"guigym train: note: {note} on this machine (the run needs it)", file=sys.stderr)
            import yaml

            from guigym.train.parallel import build_plan, check_plan, format_plan

            print(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
            print("# precision and sharding plan")
            plan = build_plan(cfg)
            print(format_plan(cfg, plan))
            check_plan(cfg, plan)  # ConfigError (exit 2) naming the settings when it does not fit the GPUs
            return 0
        run(cfg, resume=args.resume, log=lambda m: print(m, flush=True))
    except ConfigError as exc:
        print(f"guigym train: config error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
