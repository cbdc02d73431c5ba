"""Checkpoints that resume exactly: trained weights, optimizer, LR scheduler, RNGs, loop cursors.

Layout (``<run.dir>/checkpoints/``)::

    ckpt-000012/
      weights.pt      trained tensors (the whole model, or only the LoRA adapters)
      optimizer.pt    AdamW state (moments, step counts) + LR scheduler state
      rng.pt          python ``random``, numpy legacy + torch CPU (+ CUDA) generator states
                      (as tensors, ints and floats only)
      state.json      iteration, policy version, loop cursors (task sampler state, counters)
      reference.pt    only once the reference policy was refreshed from the actor (WebRL's
                      previous-phase reference): {"version", "state"}; a hard link to the
                      previous checkpoint's file while the version is unchanged

Every ``.pt`` file is read with ``torch.load(weights_only=True)``: tensors, numbers, strings
and containers only, never arbitrary pickled objects, so a checkpoint directory someone else
wrote cannot run code on load (a pickle with a ``__reduce__`` payload raises
:class:`CheckpointError`). That is why the RNG states are stored as tensors rather than as the
tuples and numpy arrays ``random``/``numpy`` hand out.

A checkpoint is written into ``ckpt-000012.tmp-<pid>`` and renamed into place (``os.replace`` of
a directory is atomic on POSIX), so a crash mid-write leaves no half checkpoint that
:func:`latest` could pick: only directories named ``ckpt-<digits>`` with a ``state.json`` count.
After a save, all but the newest ``keep`` checkpoints are deleted (TRL ``save_total_limit``).
"""
from __future__ import annotations

import json
import os
import pickle
import random
import re
import shutil
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

_NAME = re.compile(r"^ckpt-(\d{6,})$")


class CheckpointError(RuntimeError):
    """A checkpoint file is not what guigym writes (refused to unpickle, or malformed)."""


def rng_state() -> dict[str, Any]:
    """Every RNG the loop draws from, as tensors / ints / floats (loadable with ``weights_only``).

    ``python``: ``{"version", "state": int64 tensor (625 words), "gauss_next"}``;
    ``numpy``: the legacy MT19937 ``{"key": int64 tensor (624), "pos", "has_gauss", "cached_gaussian"}``;
    ``torch`` (+ ``cuda``): the generators' uint8 state tensors.
    """
    version, words, gauss_next = random.getstate()
    kind, key, pos, has_gauss, cached = np.random.get_state()
    if kind != "MT19937":
        raise CheckpointError(f"numpy's legacy RNG is {kind!r}, expected MT19937")
    state: dict[str, Any] = {
        "python": {"version": int(version), "state": torch.tensor(words, dtype=torch.int64),
                   "gauss_next": gauss_next},
        "numpy": {"key": torch.from_numpy(key.astype(np.int64)), "pos": int(pos), "has_gauss": int(has_gauss),
                  "cached_gaussian": float(cached)},
        "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned (bit-identical streams afterwards)."""
    py = state["python"]
    random.setstate((py["version"], tuple(int(w) for w in py["state"].tolist()), py["gauss_next"]))
    nps = state["numpy"]
    np.random.set_state(("MT19937", nps["key"].numpy().astype(np.uint32), nps["pos"], nps["has_gauss"],
                         nps["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _load_pt(path: Path) -> Any:
    """``torch.load`` with ``weights_only=True``; anything else is refused, never executed."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(f"{path}: refused to load: not a guigym checkpoint file (only tensors, numbers "
                              f"and containers are accepted; written by an older guigym or planted?): "
                              f"{str(exc).splitlines()[0]}") from None


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    for f in path.iterdir():
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    _fsync_dir(path)


def list_checkpoints(root: str | Path) -> list[Path]:
    """Complete checkpoints under ``root``, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir()
             if (m := _NAME.match(p.name)) and p.is_dir() and (p / "state.json").is_file()]
    return [p for _, p in sorted(found)]


def latest(root: str | Path) -> Optional[Path]:
    """The newest complete checkpoint, or None."""
    ckpts = list_checkpoints(root)
    return ckpts[-1] if ckpts else None


def save(root: str | Path, iteration: int, learner: Any, state: dict[str, Any], keep: int = 2) -> Path:
    """Write checkpoint ``iteration`` (learner weights + optimizer + scheduler + RNGs + ``state``)
    atomically; prune to the newest ``keep``. ``state`` must be JSON-serialisable. Returns its path."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"ckpt-{iteration:06d}"
    tmp = root / f"{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    torch.save(learner.trainable_state(), tmp / "weights.pt")
    torch.save({"optimizer": learner.optimizer.state_dict(), "scheduler": learner.scheduler.state_dict(),
                "optimizer_steps": learner.optimizer_steps}, tmp / "optimizer.pt")
    torch.save(rng_state(), tmp / "rng.pt")
    ref_version = _save_reference(root, learner, tmp)
    if ref_version is not None:
        state = {**state, "reference_version": ref_version}
    (tmp / "state.json").write_text(json.dumps({"iteration": iteration, **state}, indent=1, sort_keys=True))
    _fsync_tree(tmp)
    if final.exists():  # a rerun of the same iteration (resume after a crash right after saving)
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    for old in list_checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in root.glob("ckpt-*.tmp-*"):  # leftovers of crashed writers
        shutil.rmtree(stale, ignore_errors=True)
    return final


def _save_reference(root: Path, learner: Any, tmp: Path) -> Optional[int]:
    """Write ``tmp/reference.pt`` when the learner's reference was refreshed; returns its version.
    A reference unchanged since the newest checkpoint is hard-linked, not written again (a full
    model's copy per checkpoint would double the disk use)."""
    version = getattr(learner, "reference_version", None)
    if version is None:
        return None
    prev = latest(root)
    if prev is not None and (prev / "reference.pt").is_file():
        try:
            if json.loads((prev / "state.json").read_text()).get("reference_version") == version:
                os.link(prev / "reference.pt", tmp / "reference.pt")
                return int(version)
        except OSError:  # no hard links on this file system: write a copy
            pass
    torch.save(learner.reference_state(), tmp / "reference.pt")
    return int(version)


def load(path: str | Path, learner: Any, restore_rng: bool = True) -> dict[str, Any]:
    """Restore ``learner`` (weights, optimizer, scheduler) and the RNGs from ``path``; return the
    saved ``state`` dict (with ``iteration``). Raises :class:`CheckpointError` for a file that
    needs more than ``torch.load(weights_only=True)`` (nothing in it is executed)."""
    path = Path(path)
    if not (path / "state.json").is_file():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no state.json)")
    learner.load_trainable_state(_load_pt(path / "weights.pt"))
    opt = _load_pt(path / "optimizer.pt")
    # FSDP learners scatter a full (gathered) AdamW state back to their shards
    getattr(learner, "load_optimizer_state", learner.optimizer.load_state_dict)(opt["optimizer"])
    learner.scheduler.load_state_dict(opt["scheduler"])
    # the optimizer state carries the LR the old run set for its next iteration; a resume that
    # changes run.iterations (allowed) must continue on the *new* schedule from the same step
    sched = learner.scheduler
    for group, base, fn in zip(learner.optimizer.param_groups, sched.base_lrs, sched.lr_lambdas):
        group["lr"] = base * fn(sched.last_epoch)
    sched._last_lr = [g["lr"] for g in learner.optimizer.param_groups]
    learner.optimizer_steps = int(opt.get("optimizer_steps", 0))
    if (path / "reference.pt").is_file():  # a reference refreshed from the actor (else: the initial weights)
        learner.load_reference_state(_load_pt(path / "reference.pt"))
    if restore_rng:
        set_rng_state(_load_pt(path / "rng.pt"))
    return json.loads((path / "state.json").read_text())
