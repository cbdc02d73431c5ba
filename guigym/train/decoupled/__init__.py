"""DART's decoupled training system (Li et al. 2025, "Efficient Multi-turn RL for GUI Agents via
Decoupled Training and Adaptive Data Curation", sec. 3): four long-lived services as Ray actors,
none of which waits for another (``run.topology: decoupled``; knobs in the ``decoupled`` section)::

     rollouts (slices of groups)                        finished groups (all N ended)
   +--------------+  next_jobs   +--------------+  take(k)  +-----------+
   | Data Manager | -----------> |  Env Cluster | ........> |  Trainer  |
   |  (DataStore: | <----------- |  (envs, roll-|           |  (learner |
   |  SQLite/PG)  |  add_group   |  out-wise)   |           |  + plugins|
   +--------------+              +--------------+           +-----------+
          ^  ready groups (FIFO)      |  generate(req)           |  update_weights(v+1)
          +---------------------------|-------------------------+|  (returns at once)
                                      v                          v
                               +---------------------------------------+
                               | Rollout Service: workers w0..wW-1,    |
                               | least-loaded routing; at most k       |
                               | reloading at once, the rest serving   |
                               +---------------------------------------+

* :mod:`~guigym.train.decoupled.data_manager` -- deals single rollouts of groups (tasks round
  robin, seeds), stores a group once all its members ended, releases groups FIFO; resume cursor.
* :mod:`~guigym.train.decoupled.env_cluster` -- envs that pull a rollout whenever one is free
  (``RolloutScheduler.stream``) and report the members they ran.
* :mod:`~guigym.train.decoupled.rollout_service` -- the worker pool (HF engines / HTTP servers),
  staggered weight refresh.
* :mod:`~guigym.train.decoupled.trainer` -- the update loop on ready groups with the staleness
  bound (:mod:`~guigym.train.decoupled.staleness`); :mod:`~guigym.train.decoupled.run` wires the
  services together (:func:`run_decoupled`).
* :mod:`~guigym.train.decoupled.events` -- the event log every service keeps (start/end of env
  calls, generations, reloads, train steps) and utilisation/overlap helpers.
"""
from guigym.train.decoupled.run import run_decoupled

__all__ = ["run_decoupled"]
