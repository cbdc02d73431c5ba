"""``run_decoupled``: start DART's four services, train, report utilisation and staleness.

The Data Manager, the Rollout Service and the Env Clusters are Ray actors (``decoupled.
actor_num_cpus`` logical CPUs each; the envs inside a cluster keep ``ray.num_cpus``); the trainer
runs in the calling process. The trainer loop only blocks on "are ``groups_per_update`` groups
ready?"; weight pushes return at once (the rollout service refreshes its workers k at a time) and
the env clusters never wait for the trainer unless the data manager's buffer is full.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Optional

from guigym.core.errors import ConfigError, EnvInfraError
from guigym.train.decoupled import events as E
from guigym.train.decoupled.trainer import DecoupledTrainer


def groups_per_update(cfg: Any) -> int:
    return cfg.decoupled.groups_per_update or cfg.rollout.groups_per_iteration


def check_config(cfg: Any) -> None:
    """ConfigErrors for recipes the decoupled topology cannot run (each names its field)."""
    d = cfg.decoupled
    if cfg.run.topology != "decoupled":
        raise ConfigError("run.topology: run_decoupled needs 'decoupled'")
    gpu = groups_per_update(cfg)
    if d.max_buffered_groups is not None and d.max_buffered_groups < gpu:
        raise ConfigError(f"decoupled.max_buffered_groups: {d.max_buffered_groups} is less than the "
                          f"{gpu} groups the trainer takes per update; it would wait forever")
    if d.num_env_clusters > cfg.env.num_envs:
        raise ConfigError(f"decoupled.num_env_clusters: {d.num_env_clusters} clusters for env.num_envs "
                          f"{cfg.env.num_envs}; each cluster needs at least one env")
    algo = cfg.to_dict()["algorithm"]
    for key in ("task_sampler", "rollout_planners", "conditioners", "task_sources"):
        if algo[key] not in ("default", [], None, ["default"]):
            raise ConfigError(f"algorithm.{key}: not supported with run.topology: decoupled yet (the data manager "
                              f"deals env.tasks round robin); remove it or use run.topology: coupled")


def _actor(cls: type, num_cpus: float, max_concurrency: int) -> Any:
    import ray

    return ray.remote(cls).options(num_cpus=num_cpus, max_concurrency=max_concurrency, max_restarts=0)


class Services:
    """The three actor services of one run and their lifecycle."""

    def __init__(self, cfg: Any, trainer: DecoupledTrainer, version: int) -> None:
        import ray

        from guigym.train.decoupled.data_manager import DataManager
        from guigym.train.decoupled.env_cluster import EnvCluster
        from guigym.train.decoupled.rollout_service import RolloutService

        d = cfg.decoupled
        url, blobs = trainer.store_location()
        cpus, cfg_dict = d.actor_num_cpus, cfg.to_dict()
        self.actors: list[Any] = []
        self.clusters: list[Any] = []
        self.runs: list[Any] = []
        self.dm = _actor(DataManager, cpus, 16).remote(
            url, blobs, trainer.run_id, list(cfg.env.tasks), cfg.rollout.num_generations, cfg.run.seed,
            cfg.env.train_seeds.start, cfg.env.train_seeds.count, d.max_buffered_groups or 2 * groups_per_update(cfg),
            trainer.cursor)
        # the workers start from model_dir's weights, which are version 0 ...
        self.rs = _actor(RolloutService, cpus, 256).remote(cfg_dict, str(trainer.model_dir), 0)
        self.actors += [self.dm, self.rs]
        if version > 0:  # ... so a resumed run loads the checkpoint's weights before any rollout
            ray.get(self.rs.update_weights.remote(version, **trainer.weights_message(version)))
            if not ray.get(self.rs.wait_synced.remote(version)):
                raise EnvInfraError(f"the rollout service did not load the resumed weights (version {version})")
        n, k = cfg.env.num_envs, d.num_env_clusters
        for i in range(k):
            m = n // k + (i < n % k)  # envs of cluster i
            c = _actor(EnvCluster, cpus, 4).remote(i, cfg_dict, str(trainer.model_dir), m, self.dm, self.rs,
                                                   trainer.run_id, url, blobs)
            self.clusters.append(c)
        self.actors += self.clusters

    def start(self) -> None:
        self.runs = [c.run.remote() for c in self.clusters]

    def check(self) -> None:
        """Raise the error of an env cluster that ended (they only end on an error or a stop)."""
        import ray

        finished, _ = ray.wait(self.runs, num_returns=len(self.runs), timeout=0)
        if finished:
            ray.get(finished)
            raise EnvInfraError("an env cluster stopped without an error")

    def stop(self, version: int) -> None:
        """Stop taking jobs, finish the jobs each cluster holds (their groups are stored, not lost) and
        let every policy worker finish loading ``version``."""
        import ray

        for c in self.clusters:
            ray.get(c.stop.remote())
        ray.get(self.runs)
        ray.get(self.rs.wait_synced.remote(version))

    def events(self) -> list[E.Event]:
        import ray

        return [e for a in self.actors for e in ray.get(a.events.remote())]

    def close_envs(self) -> None:
        import ray

        for c in self.clusters:
            ray.get(c.close.remote(), timeout=60)

    def shutdown(self, graceful: bool) -> None:
        """Close (graceful) and kill every actor; a crash skips the close, as a real one would."""
        import ray

        for a in self.actors:
            if graceful:
                try:
                    ray.get(a.close.remote(), timeout=60)
                except Exception:  # noqa: BLE001 - best effort on shutdown
                    pass
            ray.kill(a, no_restart=True)


def _evaluate(trainer: DecoupledTrainer, label: str, version: int) -> dict[str, Any]:
    """The coupled loop's held-out evaluation (``eval`` section) with the weights of ``version``:
    its own env pool and in-process engine, closed afterwards (cached in eval_<label>.json)."""
    if (trainer.dir / f"eval_{label}.json").exists():
        return trainer.evaluate(label)
    trainer.start_rollout()
    try:
        if version > 0:
            trainer.push_weights(version)
        return trainer.evaluate(label)
    finally:
        for obj in (trainer.service, trainer.pool):
            try:
                obj.close()
            except Exception:  # noqa: BLE001 - best effort
                pass
        trainer.service = trainer.pool = None


def utilisation(events: list[E.Event], wall: float, num_envs: int, num_workers: int) -> dict[str, float]:
    """Busy seconds and fractions per service from the event log (busy / (lanes x wall))."""
    env, pol, tr = E.busy_s(events, "env"), E.busy_s(events, "policy", "generate"), E.busy_s(events, "trainer", "train")
    frac = (lambda b, lanes: b / (lanes * wall) if wall > 0 else 0.0)
    return {"env_busy_s": env, "policy_busy_s": pol, "trainer_busy_s": tr, "u_env": frac(env, num_envs),
            "u_policy": frac(pol, num_workers), "u_trainer": frac(tr, 1)}


def run_decoupled(cfg: Any, resume: bool = False, log: Callable[[str], None] = print,
                  stop_after_updates: Optional[int] = None, take_timeout_s: float = 1.0) -> dict[str, Any]:
    """Train ``cfg`` (a :class:`TrainConfig` with ``run.topology: decoupled``) with DART's four
    services; ``run.iterations`` updates in total (a resumed run continues from its checkpoint).

    ``stop_after_updates``: after that many updates of this call, take the next batch and then
    end as a crash would (the batch is never trained, the services are killed mid-rollout;
    checkpoints and stored trajectories stay) -- for resume tests.

    Returns ``{"run_dir", "start_version", "updates", "version", "actions" (env steps),
    "trajectories" (stored on-policy, whole run), "wall_s" (from the first rollout to the stop),
    "env_busy_s", "policy_busy_s", "trainer_busy_s", "u_env", "u_policy", "u_trainer",
    "num_envs", "num_policy_workers", "staleness": [one row per consumed trajectory:
    staleness.StaleRecord], "events": [event rows, by start], "metrics": [per update],
    "data_manager": counts, "crashed"}`` plus ``before``/``after``/``z_test`` with ``eval.enabled``.
    The events and staleness rows are also written to ``<run.dir>/decoupled_events.json``.
    """
    from guigym.envs.ray_backend import import_ray

    check_config(cfg)
    ray = import_ray()
    owns_ray = not ray.is_initialized()
    if owns_ray:
        ray.init(address=cfg.ray.address, include_dashboard=False, log_to_driver=False)
    trainer = DecoupledTrainer(cfg, resume=resume, log=log)
    services: Optional[Services] = None
    crashed = False
    try:
        trainer.build()
        if trainer.world > 1:
            raise ConfigError("run.topology: decoupled runs the trainer in one process (torchrun not wired in yet)")
        version = trainer.start_iteration
        summary: dict[str, Any] = {}
        if cfg.eval.enabled:
            summary["before"] = _evaluate(trainer, "before", 0)
        services = Services(cfg, trainer, version)
        services.start()
        t0 = time.time()  # utilisation is measured from here (start-up excluded)
        tlog = E.EventLog("trainer")
        stale_rows: list[dict] = []
        metrics_rows: list[dict] = []
        done_here, gpu = 0, groups_per_update(cfg)
        while version < cfg.run.iterations:
            services.check()
            groups, cursor = ray.get(services.dm.take.remote(gpu, take_timeout_s))
            if not groups:
                continue
            if stop_after_updates is not None and done_here >= stop_after_updates:
                crashed = True  # "killed" holding a batch it took but never trained on
                break
            metrics, rows = trainer.update(groups, version, tlog)
            trainer.cursor = max(trainer.cursor, cursor)
            stale_rows += rows
            if metrics is None:  # all too stale: dropped, nothing trained, the version stays
                log(f"version {version}: {len(rows)} trajectories older than max_policy_lag dropped")
                continue
            version += 1
            with tlog.span("push", "trainer", version=version):
                ray.get(services.rs.update_weights.remote(version, **trainer.weights_message(version)))
            metrics_rows.append({"step": version - 1, **metrics})
            trainer.store.record_model_version(trainer.run_id, version, "",
                                               {k: v for k, v in metrics.items() if isinstance(v, float)})
            trainer.metrics.log(version - 1, metrics)
            if version % cfg.run.checkpoint_every == 0 or version == cfg.run.iterations:
                trainer.checkpoint(version - 1)
            log(f"update {version - 1}: {len(groups)} groups, SR {metrics['rollout/success_rate']:.3f}, "
                f"staleness max {metrics['staleness_max']:.0f}, dropped {metrics['decoupled/dropped_stale']:.0f}")
            done_here += 1
        if not crashed:
            services.stop(version)
        wall = time.time() - t0
        events = sorted(tlog.rows() + services.events(), key=lambda e: e["start"])
        dm_status = ray.get(services.dm.status.remote())
        if cfg.eval.enabled and not crashed:
            from guigym.train.stats import two_proportion_z

            services.close_envs()  # their CPUs go to the evaluation
            summary["after"] = after = _evaluate(trainer, "after", version)
            before = summary["before"]
            z = summary["z_test"] = two_proportion_z(before["successes"], before["episodes"], after["successes"],
                                                     after["episodes"])
            log(f"success rate before {before['success_rate']:.3f} -> after {after['success_rate']:.3f}; "
                f"z = {z['z']:.2f}, p (one-sided) = {z['p_one_sided']:.2e}")
        workers = len(cfg.rollout.urls) if cfg.rollout.engine == "http" else cfg.decoupled.num_policy_workers
        out = {"run_dir": str(trainer.dir), "start_version": trainer.start_iteration,
               "updates": version - trainer.start_iteration, "version": version,
               "actions": len(E.select(events, "env", "step")),
               "trajectories": trainer.store.count_trajectories(trainer.run_id, source="on_policy"),
               "wall_s": wall, **utilisation(events, wall, cfg.env.num_envs, workers),
               "num_envs": cfg.env.num_envs, "num_policy_workers": workers, "staleness": stale_rows,
               "events": events, "metrics": metrics_rows, "data_manager": dm_status, "crashed": crashed, **summary}
        tmp = trainer.dir / "decoupled_events.json.tmp"
        tmp.write_text(json.dumps({"events": events, "staleness": stale_rows}, default=float))
        os.replace(tmp, trainer.dir / "decoupled_events.json")
        return out
    finally:
        if services is not None:
            services.shutdown(graceful=not crashed)
        trainer.close()
        if owns_ray:
            ray.shutdown()
