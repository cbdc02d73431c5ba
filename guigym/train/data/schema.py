"""SQL tables of the DataStore (SQLAlchemy Core), portable over SQLite, PostgreSQL and MySQL.

Token ids and log-probs live in binary columns as packed little-endian arrays (see
:mod:`guigym.train.data.codec`): ~4x smaller and much faster to (de)serialise than JSON for
prompts of thousands of tokens. Everything else is plain columns or JSON.
"""
from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

SCHEMA_VERSION = 1

metadata = sa.MetaData()

# Column types with MySQL variants: its plain BLOB/TEXT stop at 64 KiB and FLOAT is single precision.
_Blob = sa.LargeBinary().with_variant(mysql.LONGBLOB(), "mysql")
_Text = sa.Text().with_variant(mysql.LONGTEXT(), "mysql")
_Id = sa.String(64)  # uuid4 hex ids and user task ids
_AutoPK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # SQLite autoincrements INTEGER PKs only

meta = sa.Table(
    "guigym_meta", metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(255), nullable=False),
)

runs = sa.Table(
    "runs", metadata,
    sa.Column("run_id", _Id, primary_key=True),
    sa.Column("name", sa.String(255), nullable=False, unique=True),
    sa.Column("config", sa.JSON, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
)

model_versions = sa.Table(
    "model_versions", metadata,
    sa.Column("run_id", _Id, sa.ForeignKey("runs.run_id"), primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("path", _Text, nullable=False),
    sa.Column("metrics", sa.JSON, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
)

# Per-task statistics of ON-POLICY attempts (replay/expert/cache trajectories are not attempts).
tasks = sa.Table(
    "tasks", metadata,
    sa.Column("run_id", _Id, sa.ForeignKey("runs.run_id"), primary_key=True),
    sa.Column("task_id", sa.String(255), primary_key=True),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("successes", sa.Integer, nullable=False),
    sa.Column("reward_sum", sa.Double, nullable=False),
    sa.Column("steps_sum", sa.Integer, nullable=False),
    sa.Column("last_version", sa.Integer, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
)

trajectories = sa.Table(
    "trajectories", metadata,
    # Insertion order: a stable ordering and a cheap cursor for consumers.
    sa.Column("id", _AutoPK, primary_key=True, autoincrement=True),
    sa.Column("traj_id", _Id, nullable=False, unique=True),  # idempotency key
    sa.Column("run_id", _Id, sa.ForeignKey("runs.run_id"), nullable=False),
    sa.Column("task_id", sa.String(255), nullable=False),
    sa.Column("seed", sa.BigInteger, nullable=False),
    sa.Column("group_id", sa.String(255), nullable=False),
    sa.Column("reward", sa.Double, nullable=False),
    sa.Column("success", sa.Boolean, nullable=False),
    sa.Column("source", sa.String(16), nullable=False),
    sa.Column("guidance_level", sa.Integer, nullable=False),
    sa.Column("length", sa.Integer, nullable=False),
    sa.Column("policy_version", sa.Integer, nullable=False),
    sa.Column("info", sa.JSON, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Index("ix_traj_run_task", "run_id", "task_id"),
    sa.Index("ix_traj_run_version", "run_id", "policy_version"),
)

steps = sa.Table(
    "steps", metadata,
    sa.Column("traj_id", _Id, sa.ForeignKey("trajectories.traj_id", ondelete="CASCADE"),
              primary_key=True),
    sa.Column("idx", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("prompt_ids", _Blob, nullable=False),
    sa.Column("response_ids", _Blob, nullable=False),
    sa.Column("rollout_logprobs", _Blob, nullable=False),
    sa.Column("policy_version", sa.Integer, nullable=False),
    sa.Column("image_refs", sa.JSON, nullable=False),
    sa.Column("action_text", _Text, nullable=False),
    sa.Column("action", _Text, nullable=True),
    sa.Column("action_error", _Text, nullable=True),
    sa.Column("reward", sa.Double, nullable=False),
    sa.Column("candidates", sa.JSON, nullable=True),
    sa.Column("entropy", sa.Double, nullable=True),
    sa.Column("info", sa.JSON, nullable=False),
)

# Which sample trained which model version. step_idx = -1: the whole trajectory.
sample_usage = sa.Table(
    "sample_usage", metadata,
    sa.Column("traj_id", _Id, sa.ForeignKey("trajectories.traj_id", ondelete="CASCADE"),
              primary_key=True),
    sa.Column("step_idx", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("trained_version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("run_id", _Id, sa.ForeignKey("runs.run_id"), nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Index("ix_usage_run", "run_id", "trained_version"),
)

run_state = sa.Table(
    "run_state", metadata,
    sa.Column("run_id", _Id, sa.ForeignKey("runs.run_id"), primary_key=True),
    sa.Column("key", sa.String(255), primary_key=True),
    sa.Column("value", sa.JSON, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
)

# Tasks a task source added during a run (WebRL's self-evolving curriculum), with provenance.
# Additive table: ``create_all`` adds it to databases made before it existed (schema version 1).
task_provenance = sa.Table(
    "task_provenance", metadata,
    sa.Column("run_id", _Id, sa.ForeignKey("runs.run_id"), primary_key=True),
    sa.Column("task_id", sa.String(255), primary_key=True),
    sa.Column("source", sa.String(255), nullable=False),  # the task source plug-in's name
    sa.Column("parent_task_id", sa.String(255), nullable=True),
    sa.Column("iteration", sa.Integer, nullable=False),
    sa.Column("spec", sa.JSON, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Index("ix_task_prov_run_iter", "run_id", "iteration"),
)
