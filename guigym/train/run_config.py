"""The resolved recipe a training run was started with, kept in its run.dir.

``<run.dir>/resolved_config.json`` holds the recipe after overrides and defaults
(``TrainConfig.to_dict()``). ``--resume`` compares the current recipe with it and refuses, naming
every differing dotted key, when they differ in anything but :data:`MAY_CHANGE_ON_RESUME` (the keys
that change how long or where a run goes, not what it trains): a resumed run must continue the
same experiment. A run.dir from before this file existed is resumed as it was, with a note.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Mapping

from guigym.core.errors import ConfigError

FILE = "resolved_config.json"

#: dotted keys (or prefixes ending in ".") a resumed run may change
MAY_CHANGE_ON_RESUME = ("run.dir", "run.iterations", "run.checkpoint_every", "run.keep_checkpoints",
                        "run.torch_threads", "log.", "env.num_envs", "env.call_timeout_s", "rollout.urls",
                        "rollout.token_env", "rollout.max_lost_retries", "rollout.policy_retries",
                        "rollout.policy_backoff_s", "ray.")


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists are values)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def differing_keys(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Dotted keys whose values differ, except those a resume may change."""
    a, b = flatten(recorded), flatten(current)
    return [k for k in sorted(set(a) | set(b))
            if a.get(k, "(absent)") != b.get(k, "(absent)")
            and not any(k == p or (p.endswith(".") and k.startswith(p)) for p in MAY_CHANGE_ON_RESUME)]


def check_and_record(run_dir: Path, config: Mapping[str, Any], resuming: bool,
                     log: Callable[[str], Any] = print) -> None:
    """On a resume, refuse a recipe that differs from the recorded one (ConfigError naming each
    differing key with both values); then record ``config`` (atomically)."""
    path = Path(run_dir) / FILE
    current = json.loads(json.dumps(config, default=str))
    if resuming:
        if path.exists():
            recorded = json.loads(path.read_text(encoding="utf-8"))
            keys = differing_keys(recorded, current)
            if keys:
                a, b = flatten(recorded), flatten(current)
                shown = "; ".join(f"{k}: recorded {json.dumps(a.get(k, '(absent)'))[:100]}, "
                                  f"now {json.dumps(b.get(k, '(absent)'))[:100]}" for k in keys)
                raise ConfigError(f"--resume: run.dir {str(run_dir)!r} was started with a different recipe ({shown}); "
                                  f"resume with the recorded one ({path}) or choose a new run.dir")
        else:
            log(f"{path.name} missing (a run.dir from an older guigym): resuming without checking the recipe")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(current, indent=1), encoding="utf-8")
    os.replace(tmp, path)
