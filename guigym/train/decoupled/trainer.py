"""Trainer of the decoupled topology (the fourth service; :mod:`.run` wires it to the others).

The trainer is the synchronous loop's :class:`~guigym.train.loop.Trainer` (learner, plug-in
chains, checkpoints, metrics) driven differently: instead of collect -> update, it takes
``groups_per_update`` finished groups from the Data Manager whenever they are ready, while the
env clusters keep rolling out with whatever weights the rollout service holds. One update at
learner version ``V`` (``V`` = updates done so far)::

    groups, cursor = data_manager.take(groups_per_update)
    groups, rec    = staleness.split_stale(groups, V, max_policy_lag, stale_policy)   # drop / keep
    trajectory sources, group builder, reward shaping, advantages, zero-advantage filter,
    step filter, sample builder                                # exactly as the coupled loop
    staleness.reweight(samples, ...)                           # reweight mode only
    learner.update(samples)                                    # TIS (DART eq. 2) inside
    rollout_service.update_weights(V + 1, weights)             # returns at once; staggered
    store.mark_used(samples, V + 1); metrics; checkpoint (with the cursor)

A checkpoint holds the Data Manager cursor of the groups consumed up to it; on resume the Data
Manager re-releases every on-policy trajectory stored after that cursor.
"""
from __future__ import annotations

import os
import time
from typing import Any, Optional

from guigym.train.decoupled import events as E
from guigym.train.decoupled import staleness
from guigym.train.loop import Trainer


class DecoupledTrainer(Trainer):
    """:class:`Trainer` plus the decoupled cursor in its checkpoints and one :meth:`update` per
    batch of ready groups."""

    cursor: int = 0

    def plugin_state(self) -> dict[str, Any]:
        return {**super().plugin_state(), "decoupled": {"cursor": int(self.cursor)}}

    def restore_plugins(self, state: dict[str, Any]) -> None:
        super().restore_plugins(state)
        self.cursor = int(state.get("decoupled", {}).get("cursor", 0))

    def store_location(self) -> tuple[str, Optional[str]]:
        """(SQLAlchemy URL, blob root) of the run's DataStore, for the other services' own handles."""
        run = self.cfg.run
        if run.db_url:
            return run.db_url, run.blob_root
        return f"sqlite:///{self.dir.resolve()}/guigym.db", run.blob_root or str(self.dir.resolve() / "blobs")

    def update(self, groups: list[Any], version: int,
               log: E.EventLog) -> tuple[Optional[dict[str, float]], list[dict]]:
        """Train on ``groups`` at learner version ``version``; returns (metrics, staleness rows).
        Metrics are None when every trajectory was too stale (drop): nothing trained, no new version."""
        from guigym.train.algorithms.context import outcomes_of
        from guigym.train.algorithms.estimators import drop_zero_advantage_groups

        d = self.cfg.decoupled
        t0 = time.time()
        ctx = self.context(version)
        groups, records = staleness.split_stale(groups, version, d.max_policy_lag, d.stale_policy)
        rows = [r.to_dict() for r in records]
        if not groups:
            return None, rows
        samples: list[Any] = []
        fresh = [t for g in groups for t in g.trajectories]  # the ones that survived the bound
        ctx.outcomes = outcomes_of(fresh)
        pool = self.trajectory_source(groups, ctx=ctx) if len(self.trajectory_source) else []
        groups = self.group_builder(groups, pool=pool, ctx=ctx)
        self.store_injected(groups, {t.traj_id for t in fresh}, version)
        rewards = self.shaped_rewards(groups, ctx)
        adv = self.advantages(groups, rewards, ctx)
        n_built = len(groups)
        if self.cfg.algorithm.skip_zero_advantage_groups:
            groups = drop_zero_advantage_groups(groups, adv)
        trajs = [t for g in groups for t in g.trajectories]
        keep_mask = self.step_filter(trajs, groups=groups, ctx=ctx) if trajs else []
        keep_of = {t.traj_id: m for t, m in zip(trajs, keep_mask)}
        samples = self.sample_builder(trajs, adv, keep=lambda tr, k, st: bool(keep_of[tr.traj_id][k]),
                                      rewards=rewards)
        weighted = (staleness.reweight(samples, version, d.max_policy_lag, d.stale_weight)
                    if d.stale_policy == "reweight" else [])
        by_traj: dict[str, list[dict]] = {}
        for w in weighted:
            by_traj.setdefault(w["traj_id"], []).append(w)
        for r in rows:
            if r["traj_id"] in by_traj:
                r["samples"] = by_traj[r["traj_id"]]  # per sample: step, its version, weight, loss tokens
        self.refresh_reference(version)  # WebRL eq. 6's previous-phase reference, at a phase boundary
        with log.span("train", "trainer", version=version, samples=len(samples)):
            metrics = self.learner.update(samples) if samples else {"samples": 0.0}
        n = max(1, len(fresh))
        metrics.update({"rollout/success_rate": sum(t.success for t in fresh) / n,
                        "rollout/trajectories": float(len(fresh)), "rollout/groups_trained": float(len(groups)),
                        "rollout/groups_zero_advantage": float(n_built - len(groups)),
                        "decoupled/dropped_stale": float(sum(r["action"] == "drop" for r in rows)),
                        "decoupled/reweighted_stale": float(sum(r["action"] == "reweight" for r in rows)),
                        "staleness_mean": sum(r["lag"] for r in rows) / max(1, len(rows)),
                        "staleness_max": float(max((r["lag"] for r in rows), default=0))})
        if samples:
            used = [(s.traj_id, s.step_index) if s.step_index >= 0 else s.traj_id for s in samples]
            self.store.mark_used(self.run_id, used, version + 1)
        for task, o in ctx.outcomes.items():
            self.history.setdefault(task, type(o)()).merge(o)
        metrics["time/update_s"] = time.time() - t0
        return metrics, rows

    def weights_message(self, version: int) -> dict[str, Any]:
        """What the rollout service loads as ``version``: the state dict (in-process full weights)
        or a checkpoint directory (LoRA, HTTP servers)."""
        import ray

        import shutil

        r = self.cfg.rollout
        if r.engine in ("hf", "latency_model") and not self.learner.lora:
            return {"state_dict": ray.put(self.learner.trainable_state())}
        path = self.dir / "policy_versions" / f"v{version:06d}"  # one per version: workers load it later
        if r.engine == "http" and (r.weight_sync == "lora" or (r.http_api == "vllm" and r.weight_sync is None)):
            tmp = path.with_name(path.name + ".tmp")
            self.learner.model.save_pretrained(tmp)  # a peft model writes only its adapters (vLLM loads those)
            shutil.rmtree(path, ignore_errors=True)
            os.replace(tmp, path)
        else:
            self.learner.save_pretrained(path)  # full weights, adapters merged
        for old in sorted(path.parent.glob("v*[0-9]"))[:-3]:  # lagging workers may still be loading these
            shutil.rmtree(old, ignore_errors=True)
        return {"path": str(path)}
