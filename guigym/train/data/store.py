"""DataStore: runs, model versions, per-task statistics, trajectories, steps, sample usage and
resume state in SQL (SQLAlchemy 2, any URL), screenshots and arrays in a content-addressed blob
store (fsspec).

Guarantees a trainer's resume logic relies on:

* every write is one transaction (all or nothing, also under ``kill -9``);
* :meth:`DataStore.add_trajectories` is idempotent per ``traj_id`` (a unique key): re-submitting
  after a crash inserts only what is missing and never counts a trajectory twice in the task
  statistics, which are updated in the same transaction;
* :meth:`DataStore.mark_used` and :meth:`DataStore.record_model_version` are idempotent too.

SQLite (default) runs in WAL mode with a busy timeout, and write transactions start with
``BEGIN IMMEDIATE`` so that two writers queue instead of failing on a lock upgrade. On PostgreSQL
concurrent writers of the same traj_id meet in ``INSERT ... ON CONFLICT DO NOTHING`` (the second
waits for the first and then skips). Any transaction that still loses a race (deadlock,
serialisation failure, SQLite lock, unique key on other backends) is rolled back and re-run from
scratch with jittered backoff. Create one DataStore per process (engines do not survive ``fork``).
"""
from __future__ import annotations

import functools
import json
import math
import os
import random
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from guigym.train.data import schema as S
from guigym.train.data.blobs import BlobStore
from guigym.train.data.codec import pack_floats, pack_ids, unpack_floats, unpack_ids
from guigym.train.data.types import Step, Trajectory, json_default

T = TypeVar("T")
_CHUNK = 500  # ids per IN (...) clause; well under every backend's parameter limit
# Strict JSON (PostgreSQL rejects NaN); numpy scalars/arrays in infos are converted.
_json_dumps = functools.partial(json.dumps, allow_nan=False, ensure_ascii=False, default=json_default)


_tc = S.tasks.c
# Built once: one compiled statement for every statistics update (atomic increments).
_BUMP_TASK = S.tasks.update().where(
    _tc.run_id == sa.bindparam("b_run"), _tc.task_id == sa.bindparam("b_task")).values(
    attempts=_tc.attempts + sa.bindparam("b_n"), successes=_tc.successes + sa.bindparam("b_succ"),
    reward_sum=_tc.reward_sum + sa.bindparam("b_rew"), steps_sum=_tc.steps_sum + sa.bindparam("b_steps"),
    last_version=sa.case((_tc.last_version < sa.bindparam("b_ver"), sa.bindparam("b_ver")),
                         else_=_tc.last_version),
    updated_at=sa.bindparam("b_now"))


def _insert_ignore(conn: Connection, table: sa.Table, row: dict[str, Any],
                   key: Sequence[str]) -> bool:
    """Insert ``row`` unless its primary/unique key exists; True if inserted.

    PostgreSQL and SQLite use ``ON CONFLICT DO NOTHING`` (on PostgreSQL a concurrent insert of
    the same key waits for the other transaction instead of failing); other backends insert
    inside a savepoint and treat a violation as "exists" if a row with the same ``key`` exists.
    """
    name = conn.dialect.name
    if name in ("postgresql", "sqlite"):
        if name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        # RETURNING, not rowcount: drivers report -1 for inserts with implicit RETURNING
        stmt = insert(table).on_conflict_do_nothing().returning(table.c[key[0]])
        return conn.execute(stmt, row).first() is not None
    try:
        with conn.begin_nested():
            conn.execute(table.insert(), row)
        return True
    except IntegrityError:
        cond = [table.c[k] == row[k] for k in key]
        if conn.execute(sa.select(sa.literal(1)).select_from(table).where(*cond)).first() is None:
            raise  # not a duplicate: a real constraint violation
        return False


def _chunks(seq: Sequence[T], n: int = _CHUNK) -> Iterable[Sequence[T]]:
    for i in range(0, len(seq), n):
        yield seq[i:i + n]


def _check_json(value: Any, name: str) -> None:
    try:
        _json_dumps(value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} is not JSON-serialisable: {e}") from None


def _retryable(e: DBAPIError) -> bool:
    """A transaction that lost a race: worth re-running from scratch."""
    if isinstance(e, IntegrityError):
        return True  # e.g. two writers inserting the same traj_id / task row
    code = getattr(e.orig, "sqlstate", None) or getattr(e.orig, "pgcode", None)
    if code in ("40001", "40P01"):  # PostgreSQL serialization_failure, deadlock_detected
        return True
    msg = str(e.orig).lower()
    return isinstance(e, OperationalError) and ("locked" in msg or "deadlock" in msg)


def _step_row(traj_id: str, idx: int, step: Step) -> dict[str, Any]:
    """One ``steps`` row; raises ValueError naming the field that cannot be stored."""
    where = f"trajectory {traj_id!r} step {idx}"
    _check_json(step.info, f"{where} info")
    return {
        "traj_id": traj_id, "idx": idx,
        "prompt_ids": pack_ids(step.prompt_ids, f"{where} prompt_ids"),
        "response_ids": pack_ids(step.response_ids, f"{where} response_ids"),
        "rollout_logprobs": pack_floats(step.rollout_logprobs, f"{where} rollout_logprobs"),
        "policy_version": int(step.policy_version), "image_refs": list(step.image_refs),
        "action_text": step.action_text, "action": step.action, "action_error": step.action_error,
        "reward": float(step.reward),
        "candidates": None if step.candidates is None else list(step.candidates),
        "entropy": None if step.entropy is None else float(step.entropy), "info": step.info,
    }


def _step_from_row(r: Any) -> Step:
    return Step(
        prompt_ids=unpack_ids(r.prompt_ids), response_ids=unpack_ids(r.response_ids),
        rollout_logprobs=unpack_floats(r.rollout_logprobs), policy_version=r.policy_version,
        image_refs=list(r.image_refs), action_text=r.action_text, action=r.action,
        action_error=r.action_error, reward=r.reward,
        candidates=None if r.candidates is None else list(r.candidates), entropy=r.entropy,
        info=dict(r.info))


def _traj_row(run_id: str, t: Trajectory, now: float) -> dict[str, Any]:
    return {
        "traj_id": t.traj_id, "run_id": run_id, "task_id": t.task_id, "seed": int(t.seed),
        "group_id": t.group_id, "reward": float(t.reward), "success": bool(t.success),
        "source": t.source, "guidance_level": int(t.guidance_level), "length": t.length,
        "policy_version": t.policy_version, "info": t.info, "created_at": now,
    }


class DataStore:
    """SQL + blob storage of one or many training runs.

    ``url`` is any SQLAlchemy URL (``sqlite:///run/guigym.db``, ``postgresql+psycopg://...``,
    ``mysql+pymysql://...``). ``blob_root`` is a directory or fsspec URL; by default
    ``<db dir>/blobs`` for a SQLite file, otherwise blobs are unavailable until given.
    """

    def __init__(self, url: str = "sqlite:///guigym.db", blob_root: str | None = None, *,
                 busy_timeout_s: float = 60.0, storage_options: dict[str, Any] | None = None,
                 engine_kwargs: dict[str, Any] | None = None, retries: int = 8) -> None:
        self.url = sa.engine.make_url(url)
        self._retries = max(1, int(retries))
        kw: dict[str, Any] = {"json_serializer": _json_dumps, **(engine_kwargs or {})}
        sqlite_file = None
        if self.url.get_backend_name() == "sqlite":
            db = self.url.database
            if db and db != ":memory:" and not db.startswith("file:"):
                sqlite_file = os.path.abspath(db)
                os.makedirs(os.path.dirname(sqlite_file), exist_ok=True)
            else:  # one shared in-memory database
                kw.setdefault("poolclass", sa.pool.StaticPool)
                kw.setdefault("connect_args", {"check_same_thread": False})
        else:
            kw.setdefault("pool_pre_ping", True)
        self.engine: Engine = sa.create_engine(self.url, **kw)
        if self.url.get_backend_name() == "sqlite":
            _sqlite_setup(self.engine, busy_timeout_s, wal=sqlite_file is not None)
        if blob_root is None and sqlite_file is not None:
            blob_root = os.path.join(os.path.dirname(sqlite_file), "blobs")
        self._blob_root = blob_root
        self._storage_options = storage_options
        self._blobs: BlobStore | None = None
        self._create_schema()

    @classmethod
    def for_run_dir(cls, run_dir: str, **kw: Any) -> "DataStore":
        """The default layout: ``<run_dir>/guigym.db`` and ``<run_dir>/blobs``."""
        return cls(f"sqlite:///{os.path.abspath(run_dir)}/guigym.db",
                   os.path.join(run_dir, "blobs"), **kw)

    def close(self) -> None:
        """Release pooled connections."""
        self.engine.dispose()

    def __enter__(self) -> "DataStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DataStore({self.url.render_as_string(hide_password=True)!r}, blob_root={self._blob_root!r})"

    # -- plumbing -------------------------------------------------------------------------
    def _create_schema(self) -> None:
        for attempt in range(3):
            try:
                self._write(S.metadata.create_all)  # BEGIN IMMEDIATE on SQLite: one creator at a time
                break
            except DBAPIError:  # two processes creating the schema at once (PostgreSQL)
                if attempt == 2:
                    raise
                time.sleep(0.2 * (attempt + 1))

        def check(conn: Connection) -> None:
            row = conn.execute(sa.select(S.meta.c.value).where(S.meta.c.key == "schema_version")).first()
            if row is None:
                conn.execute(S.meta.insert().values(key="schema_version", value=str(S.SCHEMA_VERSION)))
            elif row.value != str(S.SCHEMA_VERSION):
                raise RuntimeError(f"database {self!r} has schema version {row.value}, this guigym "
                                   f"expects {S.SCHEMA_VERSION}")
        self._write(check)

    def _write(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(conn)`` in one write transaction, retrying it whole if it lost a race."""
        for attempt in range(self._retries):
            try:
                with self.engine.connect() as conn:
                    conn.execution_options(guigym_write=True)
                    with conn.begin():
                        return fn(conn)
            except DBAPIError as e:
                if attempt == self._retries - 1 or not _retryable(e):
                    raise
                time.sleep(0.02 * 2 ** min(attempt, 6) * random.uniform(0.5, 1.5))  # jittered backoff
        raise AssertionError("unreachable")

    def _read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(conn)`` in one read transaction (a consistent snapshot in WAL / PostgreSQL)."""
        with self.engine.connect() as conn, conn.begin():
            return fn(conn)

    @staticmethod
    def _need_run(conn: Connection, run_id: str) -> None:
        if conn.execute(sa.select(S.runs.c.run_id).where(S.runs.c.run_id == run_id)).first() is None:
            raise KeyError(f"unknown run_id {run_id!r}; create it with start_run(name, config)")

    # -- runs -----------------------------------------------------------------------------
    def start_run(self, name: str, config: dict[str, Any] | None = None) -> str:
        """Create the run ``name`` or resume it: returns its run_id either way.

        The config stored at creation is kept; a different ``config`` on resume only warns
        (compare with :meth:`get_run` if it matters).
        """
        if not isinstance(name, str) or not name or len(name) > 255:
            raise ValueError(f"run name must be a non-empty str of at most 255 chars, got {name!r}")
        config = dict(config or {})
        _check_json(config, f"config of run {name!r}")

        def fn(conn: Connection) -> tuple[str, Any]:
            row = conn.execute(sa.select(S.runs.c.run_id, S.runs.c.config)
                               .where(S.runs.c.name == name)).first()
            if row is not None:
                return row.run_id, row.config
            run_id = uuid.uuid4().hex
            conn.execute(S.runs.insert().values(run_id=run_id, name=name, config=config,
                                                created_at=time.time()))
            return run_id, config
        run_id, stored = self._write(fn)
        if json.loads(_json_dumps(stored)) != json.loads(_json_dumps(config)):
            warnings.warn(f"resuming run {name!r} with a config that differs from the stored one",
                          stacklevel=2)
        return run_id

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        """``{"run_id", "name", "config", "created_at"}`` or None."""
        def fn(conn: Connection) -> dict[str, Any] | None:
            r = conn.execute(sa.select(S.runs).where(S.runs.c.run_id == run_id)).first()
            return None if r is None else dict(r._mapping)
        return self._read(fn)

    def runs(self, name: str | None = None) -> list[dict[str, Any]]:
        """Every run (``{"run_id", "name", "config", "created_at"}``, oldest first), or only the one
        named ``name``; reading never creates a run (unlike :meth:`start_run`)."""
        def fn(conn: Connection) -> list[dict[str, Any]]:
            q = sa.select(S.runs).order_by(S.runs.c.created_at)
            if name is not None:
                q = q.where(S.runs.c.name == name)
            return [dict(r._mapping) for r in conn.execute(q)]
        return self._read(fn)

    # -- blobs ----------------------------------------------------------------------------
    @property
    def blobs(self) -> BlobStore:
        """The blob store (created on first use)."""
        if self._blobs is None:
            if self._blob_root is None:
                raise ValueError(f"{self!r} has no blob_root: pass DataStore(url, blob_root=...) "
                                 "to store blobs with a non-file database")
            self._blobs = BlobStore(self._blob_root, self._storage_options)
        return self._blobs

    def put_blob(self, data: Any) -> str:
        """Store bytes, a numpy array (exact, .npy) or a PIL image (PNG); returns the
        content-addressed ref ``sha256:<hex>.<ext>``."""
        return self.blobs.put(data)

    def put_image(self, img: Any) -> str:
        """Store a screenshot (uint8 array (H, W, 3|4) or PIL image) as PNG; returns its ref."""
        return self.blobs.put_image(img)

    def get_blob(self, ref: str) -> Any:
        """bytes for a bytes blob, ``np.ndarray`` for arrays and images (uint8 (H, W[, C]))."""
        return self.blobs.get(ref)

    # -- trajectories ---------------------------------------------------------------------
    def add_trajectories(self, run_id: str, trajs: Sequence[Trajectory], *,
                         state: dict[str, dict[str, Any]] | None = None) -> int:
        """Insert the trajectories not stored yet, their steps and the on-policy task statistics,
        and (optionally) ``state`` (key -> JSON dict, see :meth:`set_state`), all in ONE
        transaction. Returns how many trajectories were new; already-stored traj_ids (also
        repeated ones within ``trajs``) are skipped.
        """
        batch: dict[str, Trajectory] = {}
        for t in trajs:
            if not isinstance(t, Trajectory):
                raise TypeError(f"add_trajectories expects Trajectory objects, got {type(t).__name__}")
            if t.run_id not in ("", run_id):
                raise ValueError(f"trajectory {t.traj_id!r} has run_id {t.run_id!r} but is being "
                                 f"added to run {run_id!r}")
            t.validate()
            batch.setdefault(t.traj_id, t)
        for key, value in (state or {}).items():
            _check_json(value, f"state[{key!r}]")
        if not batch and not state:
            return 0

        def fn(conn: Connection) -> int:
            self._need_run(conn, run_id)
            ids = list(batch)
            existing: set[str] = set()
            for chunk in _chunks(ids):
                existing.update(conn.execute(sa.select(S.trajectories.c.traj_id)
                                             .where(S.trajectories.c.traj_id.in_(chunk))).scalars())
            now = time.time()
            new = []
            for t in (batch[i] for i in ids if i not in existing):
                # row by row so that a failure on any step aborts everything; a concurrent writer
                # may have inserted the same traj_id since the select: then it is not ours to add
                if not _insert_ignore(conn, S.trajectories, _traj_row(run_id, t, now), ("traj_id",)):
                    continue
                new.append(t)
                rows = [_step_row(t.traj_id, i, s) for i, s in enumerate(t.steps)]
                if rows:
                    conn.execute(S.steps.insert(), rows)
            self._bump_task_stats(conn, run_id, new, now)
            for key, value in (state or {}).items():
                self._set_state(conn, run_id, key, value, now)
            return len(new)
        return self._write(fn)

    def get_trajectory(self, traj_id: str) -> Trajectory | None:
        """One trajectory with its steps, or None."""
        def fn(conn: Connection) -> Trajectory | None:
            rows = conn.execute(sa.select(S.trajectories).where(S.trajectories.c.traj_id == traj_id)).all()
            out = self._load(conn, rows, True)
            return out[0] if out else None
        return self._read(fn)

    def get_trajectories(self, run_id: str, *, unused_only: bool = False, task_id: str | None = None,
                         min_version: int | None = None, limit: int | None = None,
                         source: str | None = None, after_id: int | None = None,
                         with_steps: bool = True) -> list[Trajectory]:
        """Trajectories of ``run_id`` in insertion order.

        ``unused_only``: not yet in ``sample_usage`` for this run (see :meth:`mark_used`);
        ``min_version``: oldest sampling policy version >= min_version; ``source``: one of
        ``SOURCES``; ``after_id``: only trajectories inserted after the one whose insertion
        number is ``after_id`` (see :meth:`row_ids`; a cursor for incremental readers);
        ``with_steps=False`` leaves ``steps`` empty (cheap listing).
        """
        def fn(conn: Connection) -> list[Trajectory]:
            q = sa.select(S.trajectories).where(self._filter(run_id, unused_only, task_id,
                                                             min_version, source, after_id))
            q = q.order_by(S.trajectories.c.id)
            if limit is not None:
                q = q.limit(int(limit))
            return self._load(conn, conn.execute(q).all(), with_steps)
        return self._read(fn)

    def count_trajectories(self, run_id: str, *, unused_only: bool = False,
                           task_id: str | None = None, min_version: int | None = None,
                           source: str | None = None) -> int:
        """Number of trajectories :meth:`get_trajectories` would return without a limit."""
        def fn(conn: Connection) -> int:
            q = sa.select(sa.func.count()).select_from(S.trajectories).where(
                self._filter(run_id, unused_only, task_id, min_version, source, None))
            return int(conn.execute(q).scalar_one())
        return self._read(fn)

    @staticmethod
    def _filter(run_id: str, unused_only: bool, task_id: str | None, min_version: int | None,
                source: str | None, after_id: int | None) -> Any:
        t = S.trajectories.c
        cond = [t.run_id == run_id]
        if task_id is not None:
            cond.append(t.task_id == task_id)
        if min_version is not None:
            cond.append(t.policy_version >= int(min_version))
        if source is not None:
            cond.append(t.source == source)
        if after_id is not None:
            cond.append(t.id > int(after_id))
        if unused_only:
            u = S.sample_usage.c
            cond.append(~sa.exists().where(u.traj_id == t.traj_id, u.run_id == run_id))
        return sa.and_(*cond)

    @staticmethod
    def _load(conn: Connection, rows: Sequence[Any], with_steps: bool) -> list[Trajectory]:
        steps: dict[str, list[Step]] = {r.traj_id: [] for r in rows}
        if with_steps and rows:
            ids = list(steps)
            for chunk in _chunks(ids):
                q = (sa.select(S.steps).where(S.steps.c.traj_id.in_(chunk))
                     .order_by(S.steps.c.traj_id, S.steps.c.idx))
                for r in conn.execute(q):
                    steps[r.traj_id].append(_step_from_row(r))
        return [Trajectory(traj_id=r.traj_id, run_id=r.run_id, task_id=r.task_id, seed=r.seed,
                           group_id=r.group_id, steps=steps[r.traj_id], reward=r.reward,
                           success=bool(r.success), source=r.source,
                           guidance_level=r.guidance_level, info=dict(r.info)) for r in rows]

    def row_ids(self, traj_ids: Sequence[str]) -> dict[str, int]:
        """Insertion numbers of trajectories (for ``get_trajectories(after_id=...)`` cursors)."""
        def fn(conn: Connection) -> dict[str, int]:
            out: dict[str, int] = {}
            for chunk in _chunks(list(traj_ids)):
                q = sa.select(S.trajectories.c.traj_id, S.trajectories.c.id).where(
                    S.trajectories.c.traj_id.in_(chunk))
                out.update({r.traj_id: int(r.id) for r in conn.execute(q)})
            return out
        return self._read(fn)

    # -- sample usage ---------------------------------------------------------------------
    def mark_used(self, run_id: str, traj_ids: Iterable[str | tuple[str, int]],
                  trained_version: int) -> int:
        """Record that these samples trained model ``trained_version`` (idempotent).

        Items are a traj_id (the whole trajectory) or ``(traj_id, step_idx)`` (one step, for
        step-wise training with step filters). Returns the number of new usage rows; raises
        KeyError for unknown traj_ids (and nothing is recorded).
        """
        keys: dict[tuple[str, int], None] = {}
        for item in traj_ids:
            if isinstance(item, str):
                keys[(item, -1)] = None
            elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
                keys[(item[0], int(item[1]))] = None
            else:
                raise ValueError(f"mark_used: expected a traj_id or (traj_id, step_idx), got {item!r}")
        version = int(trained_version)
        if not keys:
            return 0

        def fn(conn: Connection) -> int:
            self._need_run(conn, run_id)
            ids = sorted({k[0] for k in keys})
            known: set[str] = set()
            used: set[tuple[str, int]] = set()
            u = S.sample_usage.c
            for chunk in _chunks(ids):
                known.update(conn.execute(sa.select(S.trajectories.c.traj_id)
                                          .where(S.trajectories.c.traj_id.in_(chunk))).scalars())
                used.update((r.traj_id, r.step_idx) for r in conn.execute(
                    sa.select(u.traj_id, u.step_idx).where(u.traj_id.in_(chunk),
                                                           u.trained_version == version)))
            missing = [i for i in ids if i not in known]
            if missing:
                raise KeyError(f"mark_used: unknown traj_ids {missing[:5]}"
                               f"{' ...' if len(missing) > 5 else ''}")
            now = time.time()
            rows = [{"traj_id": k[0], "step_idx": k[1], "trained_version": version,
                     "run_id": run_id, "created_at": now} for k in keys if k not in used]
            if rows:
                conn.execute(S.sample_usage.insert(), rows)
            return len(rows)
        return self._write(fn)

    def usage(self, traj_id: str) -> list[tuple[int, int]]:
        """``(step_idx, trained_version)`` pairs recorded for a trajectory (step_idx -1 = whole)."""
        def fn(conn: Connection) -> list[tuple[int, int]]:
            u = S.sample_usage.c
            q = (sa.select(u.step_idx, u.trained_version).where(u.traj_id == traj_id)
                 .order_by(u.trained_version, u.step_idx))
            return [(int(r.step_idx), int(r.trained_version)) for r in conn.execute(q)]
        return self._read(fn)

    # -- model versions -------------------------------------------------------------------
    def record_model_version(self, run_id: str, version: int, path: str,
                             metrics: dict[str, Any] | None = None) -> None:
        """Record (or, re-recorded after a resume, replace) checkpoint ``version`` at ``path``.

        ``metrics`` is a flat JSON dict; non-finite float values (a NaN loss) are stored as None
        rather than failing the run (JSON has no NaN)."""
        metrics = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                   for k, v in (metrics or {}).items()}
        _check_json(metrics, f"metrics of model version {version}")
        version = int(version)

        def fn(conn: Connection) -> None:
            self._need_run(conn, run_id)
            mv = S.model_versions.c
            values = {"path": str(path), "metrics": metrics, "created_at": time.time()}
            res = conn.execute(S.model_versions.update()
                               .where(mv.run_id == run_id, mv.version == version).values(**values))
            if res.rowcount == 0:
                conn.execute(S.model_versions.insert().values(run_id=run_id, version=version, **values))
        self._write(fn)

    def latest_model_version(self, run_id: str) -> tuple[int, str] | None:
        """``(version, path)`` of the highest recorded version, or None."""
        def fn(conn: Connection) -> tuple[int, str] | None:
            mv = S.model_versions.c
            r = conn.execute(sa.select(mv.version, mv.path).where(mv.run_id == run_id)
                             .order_by(mv.version.desc()).limit(1)).first()
            return None if r is None else (int(r.version), r.path)
        return self._read(fn)

    def model_versions(self, run_id: str) -> list[dict[str, Any]]:
        """All recorded versions, oldest first: ``{"version", "path", "metrics", "created_at"}``."""
        def fn(conn: Connection) -> list[dict[str, Any]]:
            mv = S.model_versions.c
            q = (sa.select(mv.version, mv.path, mv.metrics, mv.created_at)
                 .where(mv.run_id == run_id).order_by(mv.version))
            return [dict(r._mapping) for r in conn.execute(q)]
        return self._read(fn)

    # -- task statistics ------------------------------------------------------------------
    @staticmethod
    def _bump_task_stats(conn: Connection, run_id: str, trajs: Sequence[Trajectory], now: float) -> None:
        """Add on-policy trajectories to their tasks' counters (inside the caller's transaction)."""
        agg: dict[str, list[float]] = {}
        for t in trajs:
            if t.source != "on_policy":
                continue  # replays, demonstrations and cache hits are not attempts of the policy
            a = agg.setdefault(t.task_id, [0, 0, 0.0, 0, -1])
            a[0] += 1
            a[1] += int(bool(t.success))
            a[2] += float(t.reward)
            a[3] += t.length
            a[4] = max(a[4], t.policy_version)
        for task_id in sorted(agg):  # one lock order for all writers: no deadlocks between them
            n, succ, rew, steps, ver = agg[task_id]
            _insert_ignore(conn, S.tasks, {"run_id": run_id, "task_id": task_id, "attempts": 0,
                                           "successes": 0, "reward_sum": 0.0, "steps_sum": 0,
                                           "last_version": -1, "updated_at": now},
                           ("run_id", "task_id"))
            conn.execute(_BUMP_TASK, {"b_run": run_id, "b_task": task_id, "b_n": n, "b_succ": succ,
                                      "b_rew": rew, "b_steps": steps, "b_ver": ver, "b_now": now})

    def update_task_stats(self, run_id: str, trajs: Sequence[Trajectory] | None = None) -> None:
        """Recompute the statistics of the tasks of ``trajs`` (all tasks if None) from the stored
        trajectories. Idempotent; :meth:`add_trajectories` already keeps them current, so this
        only repairs or back-fills."""
        tasks = None if trajs is None else sorted({t.task_id for t in trajs})

        def fn(conn: Connection) -> None:
            tc, tr = S.tasks.c, S.trajectories.c
            where = [tr.run_id == run_id, tr.source == "on_policy"]
            dele = S.tasks.delete().where(tc.run_id == run_id)
            if tasks is not None:
                where.append(tr.task_id.in_(tasks))
                dele = dele.where(tc.task_id.in_(tasks))
            conn.execute(dele)
            q = sa.select(tr.task_id, sa.func.count(), sa.func.sum(sa.case((tr.success, 1), else_=0)),
                          sa.func.sum(tr.reward), sa.func.sum(tr.length),
                          sa.func.max(tr.policy_version)).where(*where).group_by(tr.task_id)
            now = time.time()
            rows = [{"run_id": run_id, "task_id": r[0], "attempts": int(r[1]),
                     "successes": int(r[2] or 0), "reward_sum": float(r[3] or 0.0),
                     "steps_sum": int(r[4] or 0), "last_version": int(r[5]), "updated_at": now}
                    for r in conn.execute(q)]
            if rows:
                conn.execute(S.tasks.insert(), rows)
        self._write(fn)

    def task_stats(self, run_id: str, task_id: str | None = None) -> dict[str, Any] | list[dict[str, Any]]:
        """On-policy statistics: ``{"task_id", "attempts", "successes", "success_rate",
        "mean_reward", "mean_length", "last_version"}`` for one task (zeros and last_version -1
        if never attempted) or a list over all attempted tasks (sorted by task_id)."""
        def fn(conn: Connection) -> list[dict[str, Any]]:
            tc = S.tasks.c
            q = sa.select(S.tasks).where(tc.run_id == run_id).order_by(tc.task_id)
            if task_id is not None:
                q = q.where(tc.task_id == task_id)
            return [_stats(r) for r in conn.execute(q)]
        out = self._read(fn)
        if task_id is None:
            return out
        return out[0] if out else {"task_id": task_id, "attempts": 0, "successes": 0,
                                   "success_rate": 0.0, "mean_reward": 0.0, "mean_length": 0.0,
                                   "last_version": -1}

    # -- task provenance ------------------------------------------------------------------
    def add_tasks(self, run_id: str, tasks: Sequence[dict[str, Any]], iteration: int) -> int:
        """Record tasks a task source added in ``iteration`` (one transaction, idempotent per
        (run, task_id): a task keeps its first provenance). Each item: ``task_id``, ``source``,
        optional ``parent`` and JSON ``spec``. Returns how many were new."""
        rows = []
        for i, t in enumerate(tasks):
            tid, src = t.get("task_id"), t.get("source")
            if not isinstance(tid, str) or not tid or not isinstance(src, str) or not src:
                raise ValueError(f"add_tasks: tasks[{i}] needs a non-empty task_id and source, got {t!r}")
            spec = t.get("spec") or {}
            _check_json(spec, f"tasks[{i}].spec")
            rows.append({"run_id": run_id, "task_id": tid, "source": src, "parent_task_id": t.get("parent"),
                         "iteration": int(iteration), "spec": spec})
        if not rows:
            return 0

        def fn(conn: Connection) -> int:
            self._need_run(conn, run_id)
            now = time.time()
            return sum(bool(_insert_ignore(conn, S.task_provenance, {**r, "created_at": now}, ("run_id", "task_id")))
                       for r in rows)
        return self._write(fn)

    def added_tasks(self, run_id: str, max_iteration: int | None = None) -> list[dict[str, Any]]:
        """Tasks added during the run (oldest first): ``{"task_id", "source", "parent",
        "iteration", "spec"}``; ``max_iteration`` keeps those added up to that iteration."""
        def fn(conn: Connection) -> list[dict[str, Any]]:
            c = S.task_provenance.c
            q = sa.select(S.task_provenance).where(c.run_id == run_id)
            if max_iteration is not None:
                q = q.where(c.iteration <= int(max_iteration))
            q = q.order_by(c.iteration, c.created_at, c.task_id)
            return [{"task_id": r.task_id, "source": r.source, "parent": r.parent_task_id,
                     "iteration": int(r.iteration), "spec": dict(r.spec)} for r in conn.execute(q)]
        return self._read(fn)

    # -- resume state ---------------------------------------------------------------------
    @staticmethod
    def _set_state(conn: Connection, run_id: str, key: str, value: dict[str, Any], now: float) -> None:
        rs = S.run_state.c
        res = conn.execute(S.run_state.update().where(rs.run_id == run_id, rs.key == key)
                           .values(value=value, updated_at=now))
        if res.rowcount == 0:
            conn.execute(S.run_state.insert().values(run_id=run_id, key=key, value=value, updated_at=now))

    def set_state(self, run_id: str, key: str, value: dict[str, Any]) -> None:
        """Store a JSON dict under ``key`` (resume cursors, sampler state), replacing the old one."""
        if not isinstance(value, dict):
            raise ValueError(f"set_state({key!r}): value must be a dict, got {type(value).__name__}")
        _check_json(value, f"state[{key!r}]")

        def fn(conn: Connection) -> None:
            self._need_run(conn, run_id)
            self._set_state(conn, run_id, key, value, time.time())
        self._write(fn)

    def get_state(self, run_id: str, key: str) -> dict[str, Any] | None:
        """The dict stored under ``key``, or None."""
        def fn(conn: Connection) -> dict[str, Any] | None:
            rs = S.run_state.c
            r = conn.execute(sa.select(rs.value).where(rs.run_id == run_id, rs.key == key)).first()
            return None if r is None else dict(r.value)
        return self._read(fn)


def _stats(r: Any) -> dict[str, Any]:
    n = int(r.attempts)
    return {"task_id": r.task_id, "attempts": n, "successes": int(r.successes),
            "success_rate": r.successes / n if n else 0.0,
            "mean_reward": r.reward_sum / n if n else 0.0,
            "mean_length": r.steps_sum / n if n else 0.0, "last_version": int(r.last_version)}


def _sqlite_setup(engine: Engine, busy_timeout_s: float, wal: bool) -> None:
    """WAL + busy timeout + foreign keys; writers start with BEGIN IMMEDIATE (queue on the
    lock up front instead of deadlocking on a read->write upgrade)."""
    ms = int(busy_timeout_s * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _rec: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (SQLAlchemy's sqlite recipe)
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {ms}")
        if wal:
            cur.execute("PRAGMA journal_mode = WAL")
            cur.execute("PRAGMA synchronous = NORMAL")  # durable across process crashes in WAL
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get("guigym_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
