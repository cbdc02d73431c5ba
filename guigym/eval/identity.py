"""What an eval output directory holds, so that a rerun resumes only the same evaluation.

``OUT/config.json`` records the run's identity: the agent spec and its options, the env id and
its options, the task list, the first seed, episodes, attempts and the guigym version. A rerun
with the same ``--out`` resumes only when its identity is the same; otherwise
:func:`check_resume` raises :class:`ResumeMismatch` naming every differing key (or, with
``overwrite``, :func:`wipe_run` removes the old results first). Options that do not change what
an episode is (``num_envs``, ``backend``, screenshots) are recorded but not compared.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Mapping

from guigym.core.errors import ConfigError

#: config.json keys that must match for a rerun to resume
IDENTITY_KEYS = ("agent", "agent_opts", "env_id", "env_kwargs", "task_ids", "seed", "episodes", "attempts",
                 "guigym_version")
#: files and folders of a run that ``--overwrite`` removes (nothing else in OUT is touched)
RUN_FILES = ("results.jsonl", "summary.json", "results.csv", "report.html", "config.json")


class ResumeMismatch(ConfigError):
    """OUT holds results of a different evaluation; ``keys`` are the differing config.json keys."""

    def __init__(self, message: str, keys: list[str]) -> None:
        super().__init__(message)
        self.keys = keys


def _canonical(key: str, value: Any) -> Any:
    value = json.loads(json.dumps(value, default=str))  # what config.json stores
    return sorted(value) if key == "task_ids" and isinstance(value, list) else value


def differing_keys(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Identity keys whose values differ (a key an older config.json lacks differs)."""
    return [k for k in IDENTITY_KEYS if k not in stored or _canonical(k, stored[k]) != _canonical(k, current.get(k))]


def check_resume(out: Path, identity: Mapping[str, Any], overwrite: bool = False) -> None:
    """Refuse to resume into ``out`` when its results belong to another evaluation.

    Nothing to check when ``out`` has no results yet. With ``overwrite`` the old run's files are
    removed instead (:func:`wipe_run`). Raises :class:`ResumeMismatch` naming each differing key
    with its recorded and requested value."""
    results = out / "results.jsonl"
    if not results.exists() or results.stat().st_size == 0:
        return
    if overwrite:
        wipe_run(out)
        return
    try:
        stored = json.loads((out / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        stored = {}
    keys = differing_keys(stored, identity)
    if not keys:
        return
    shown = "; ".join(f"{k}: recorded {json.dumps(stored.get(k, '(not recorded)'), default=str)[:120]}, "
                      f"now {json.dumps(identity.get(k), default=str)[:120]}" for k in keys)
    raise ResumeMismatch(f"--out {str(out)!r} holds results of a different evaluation ({shown}); rerun with "
                         f"--overwrite to start afresh there, or choose another --out", keys)


def wipe_run(out: Path) -> None:
    """Remove a run's results, reports, config and trajectories from ``out`` (only those)."""
    for name in RUN_FILES:
        (out / name).unlink(missing_ok=True)
    shutil.rmtree(out / "trajectories", ignore_errors=True)
