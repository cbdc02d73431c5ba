"""Warm starts: an SFT recipe's output, built once and cached by its config (``model.warm_start``).

RL recipes that need a policy which already reads its prompt (the CPU learning proof,
``recipes/grpo_miniwob_instruct.yaml``) name an SFT recipe instead of a model directory:

    model:
      warm_start: sft_miniwob_instruct.yaml     # relative to the naming recipe's folder

:func:`resolve` returns a ``from_pretrained`` directory for it, looked up by the SFT config's
*key* (sha256 of its resolved config, less the fields that cannot change the weights: run name and
dir, evaluation, logging), in this order:

1. ``$GUIGYM_CACHE/warmstart/<key>/model`` (default ``~/.cache/guigym``): built earlier here;
2. ``guigym/assets/warmstart/<key>/model``: the artefact shipped with guigym (the
   project's own build, with its ``manifest.json``: the command, the build time, held-out success);
3. otherwise the SFT recipe is run (``python -m guigym.train.main RECIPE`` in a child process)
   into ``$GUIGYM_CACHE/warmstart/<key>/`` (resumable: a build that dies continues where it
   stopped), and the result is used from then on.

A changed SFT recipe has another key, so it can never pick up a stale model.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Optional

#: config fields that do not change the trained weights (left out of the key)
_NOT_IN_KEY = {("run", "name"), ("run", "dir"), ("eval",), ("log",), ("run", "checkpoint_every"),
               ("run", "keep_checkpoints"), ("sft", "output_dir"), ("env", "num_envs"), ("env", "call_timeout_s"),
               ("sft", "demos", "num_envs")}

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "warmstart"


def cache_root() -> Path:
    return Path(os.environ.get("GUIGYM_CACHE") or Path.home() / ".cache" / "guigym") / "warmstart"


def _strip(d: Any, path: tuple[str, ...] = ()) -> Any:
    if not isinstance(d, dict):
        return d
    return {k: _strip(v, path + (k,)) for k, v in sorted(d.items()) if path + (k,) not in _NOT_IN_KEY}


def key_of(cfg: Any) -> str:
    """First 16 hex digits of sha256 over the SFT config (a TrainConfig): the values that differ
    from their defaults (so a new config field with a default leaves every key as it was), without
    run name/dir, eval, logging and parallelism; a ``model.warm_start`` it starts from counts by
    that recipe's own key, a ``demos_file`` by its content (never by where the file lies)."""
    data = _strip(cfg.model_dump(mode="json", exclude_defaults=True))
    ws = (data.get("model") or {}).get("warm_start")
    if ws:
        data["model"]["warm_start"] = "key:" + key_of(load_sft_recipe(ws))
    path = ((data.get("sft") or {}).get("demos") or {}).get("path")
    if path and cfg.sft.demos.source == "demos_file" and Path(path).is_file():
        data["sft"]["demos"]["path"] = "sha256:" + digest([Path(path)])
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load_sft_recipe(spec: str, base_dir: Optional[Path] = None) -> Any:
    """The SFT :class:`TrainConfig` a ``model.warm_start`` value names (path relative to
    ``base_dir``, then to the current directory); a ConfigError when it is not ``stage: sft``."""
    from guigym.core.errors import ConfigError
    from guigym.train.config import load_recipe

    path = _candidates(spec, base_dir)[0]
    cfg = load_recipe(path)
    if cfg.stage != "sft":
        raise ConfigError(f"model.warm_start: {path} is not an SFT recipe (stage: {cfg.stage}); name a stage: sft recipe")
    return cfg


def _candidates(spec: str, base_dir: Optional[Path]) -> list[Path]:
    """[the existing file ``spec`` names]: absolute, else under ``base_dir``, else the current
    directory; a ConfigError naming the places looked in when there is none."""
    from guigym.core.errors import ConfigError

    cands = [Path(spec)] if Path(spec).is_absolute() else \
        [p for p in ((base_dir / spec) if base_dir else None, Path(spec)) if p is not None]
    found = [p for p in cands if p.is_file()]
    if not found:
        raise ConfigError(f"model.warm_start: recipe {spec!r} not found (looked in {', '.join(map(str, cands))})")
    return found


def find(cfg: Any) -> Optional[Path]:
    """The cached or shipped model of this SFT config, or None."""
    key = key_of(cfg)
    for root in (cache_root(), ASSETS):
        model = root / key / "model"
        if (model / "config.json").is_file():
            return model
    return None


def resolve(spec: str, base_dir: Optional[Path] = None, log: Callable[[str], None] = print,
            build: bool = True) -> Path:
    """The model directory of the warm start ``spec`` (an SFT recipe path); built (and cached)
    when no cached or shipped copy exists and ``build`` is true."""
    from guigym.core.errors import ConfigError

    cfg = load_sft_recipe(spec, base_dir)
    found = find(cfg)
    if found is not None:
        return found
    key = key_of(cfg)
    if not build:
        raise ConfigError(f"model.warm_start: no cached model for {spec} (key {key}); run `guigym train {spec}` "
                          f"or let the run build it")
    import subprocess
    import sys

    out = cache_root() / key
    log(f"warm start {spec} (key {key}): not cached; building it into {out} (once)")
    # its own process (the SFT stage sits above this module: guigym.train.main dispatches to it);
    # the recipe path is the resolved one, the outputs are redirected into the cache
    cmd = [sys.executable, "-m", "guigym.train.main", str(cfg_path(spec, base_dir)),
           "--set", f"run.dir={out}", "--set", f"sft.output_dir={out / 'model.tmp'}"]
    if (out / "checkpoints").is_dir():
        cmd.append("--resume")  # a build that died continues
    done = subprocess.run(cmd)
    if done.returncode != 0:
        raise RuntimeError(f"model.warm_start: building {spec} failed (exit {done.returncode}); rerun to continue it")
    os.replace(out / "model.tmp", out / "model")
    return out / "model"


def cfg_path(spec: str, base_dir: Optional[Path] = None) -> Path:
    """The file a ``model.warm_start`` value names (see :func:`load_sft_recipe`)."""
    return _candidates(spec, base_dir)[0]


def digest(paths: list[Path]) -> str:
    """sha256 over the bytes of ``paths`` (in the given order)."""
    h = hashlib.sha256()
    for p in paths:
        h.update(p.read_bytes())
    return h.hexdigest()


def ship(spec: str, run_dir: Path, note: str = "") -> Path:
    """Copy a finished SFT run (``run_dir``, built from recipe ``spec``) into
    ``guigym/assets/warmstart/<key>/``: ``model/`` (from_pretrained), ``demos.jsonl`` (what it was
    trained on, so a rebuild needs no browser) and ``manifest.json`` (key, recipe, command, the
    run's per-epoch metrics and held-out evaluation, digests of the tokenizer, the initial and the
    final weights)."""
    import shutil

    cfg = load_sft_recipe(spec)
    key = key_of(cfg)
    run_dir = Path(run_dir)
    model = Path(cfg.sft.output_dir) if cfg.sft.output_dir else run_dir / "model"
    if not (model / "config.json").is_file():
        raise FileNotFoundError(f"{model}: no finished SFT model to ship")
    dest = ASSETS / key
    shutil.rmtree(dest, ignore_errors=True)
    (dest / "model").mkdir(parents=True)
    for f in sorted(model.iterdir()):
        if f.is_file():
            shutil.copy2(f, dest / "model" / f.name)
    d = cfg.sft.demos  # an SFT stage reading an earlier stage's file has no collection of its own
    shutil.copy2(Path(d.path) if d.source == "demos_file" else run_dir / "demos.jsonl", dest / "demos.jsonl")
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    evals = {k: json.loads((run_dir / f"eval_{k}.json").read_text())
             for k in ("before", "after") if (run_dir / f"eval_{k}.json").is_file()}
    manifest = {
        "key": key, "recipe": str(cfg_path(spec)), "command": f"guigym train {spec}",
        "config": cfg.to_dict(), "epochs": [{k: m[k] for k in ("step", "loss", "confident_tokens", "lr",
                                                                "time/iteration_s") if k in m} for m in metrics],
        "eval": evals, "note": note,
        "sha256": {"tokenizer.json": digest([dest / "model" / "tokenizer.json"]),
                   "init_weights": digest(sorted((run_dir / "init_model").glob("*.safetensors")))
                   if (run_dir / "init_model").is_dir() else f"warm start {cfg.model.warm_start}",
                   "weights": digest(sorted((dest / "model").glob("*.safetensors"))),
                   "demos.jsonl": digest([dest / "demos.jsonl"])},
    }
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return dest


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m guigym.train.warmstart {key,find,build,ship} RECIPE [RUN_DIR]``."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m guigym.train.warmstart", description=__doc__.split("\n")[0])
    ap.add_argument("action", choices=["key", "find", "build", "ship"])
    ap.add_argument("recipe", help="an SFT recipe (stage: sft)")
    ap.add_argument("run_dir", nargs="?", help="ship: the finished run directory")
    ap.add_argument("--note", default="", help="ship: a line for the manifest (machine, date)")
    args = ap.parse_args(argv)
    if args.action == "key":
        print(key_of(load_sft_recipe(args.recipe)))
    elif args.action == "find":
        print(find(load_sft_recipe(args.recipe)) or "not cached")
    elif args.action == "build":
        print(resolve(args.recipe))
    else:
        if not args.run_dir:
            ap.error("ship needs RUN_DIR")
        print(ship(args.recipe, Path(args.run_dir), args.note))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
