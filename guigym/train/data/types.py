"""Training data model: token-in/token-out steps, trajectories and groups.

Plain dataclasses holding Python lists (never tensors) so that they pickle, cross process
boundaries and serialise to JSON with :meth:`to_dict` / :meth:`from_dict`. A :class:`Step` keeps
the *exact* token ids the rollout engine saw and produced, so that training never re-tokenises a
chat transcript (re-tokenisation changes token boundaries and breaks the PPO ratio).
"""
from __future__ import annotations

import json
import math
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np

Source = Literal["on_policy", "replay", "expert", "cache", "pool"]
SOURCES: tuple[str, ...] = get_args(Source)


def new_traj_id() -> str:
    """A fresh trajectory id (uuid4 hex, 32 chars): the idempotency key of the DataStore."""
    return uuid.uuid4().hex


def _need(d: dict, key: str, where: str) -> Any:
    if key not in d:
        raise ValueError(f"{where}: missing field {key!r}")
    return d[key]


def _int_array(value: Any, name: str) -> np.ndarray:
    """``value`` checked as a flat list of ints (numpy-fast); ValueError naming ``name``."""
    if not isinstance(value, (list, tuple, np.ndarray)):
        raise ValueError(f"{name} must be a list of int, got {type(value).__name__}")
    arr = np.asarray(value)
    if len(value) and (arr.ndim != 1 or arr.dtype.kind not in "iu"):
        bad = next((v for v in value if isinstance(v, bool) or not isinstance(v, (int, np.integer))),
                   value[0])
        raise ValueError(f"{name} must be a flat list of int, found {bad!r}")
    return arr


def _int_list(value: Any, name: str) -> list[int]:
    """``value`` as a list of Python ints; ValueError naming ``name`` otherwise."""
    return _int_array(value, name).tolist()


def _float_list(value: Any, name: str) -> list[float]:
    """``value`` as a list of Python floats; ValueError naming ``name`` otherwise."""
    if not isinstance(value, (list, tuple, np.ndarray)):
        raise ValueError(f"{name} must be a list of float, got {type(value).__name__}")
    if len(value) == 0:
        return []
    arr = np.asarray(value)
    if arr.ndim != 1 or arr.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be a flat list of numbers")
    return arr.astype(np.float64).tolist()


def json_default(o: Any) -> Any:
    """``json.dumps(default=...)`` hook: numpy scalars and arrays become Python numbers/lists
    (env infos often carry them); anything else is an error."""
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def _json_dict(value: Any, name: str) -> dict:
    """Check that ``value`` is a JSON-serialisable dict (strict JSON: no NaN/inf)."""
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a dict, got {type(value).__name__}")
    try:
        json.dumps(value, allow_nan=False, default=json_default)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} is not JSON-serialisable: {e}") from None
    return value


@dataclass
class Step:
    """One prompt -> response exchange of a multi-turn episode.

    Fields: ``prompt_ids`` (P,) exact prompt token ids (incl. image placeholder tokens);
    ``response_ids`` (R,) sampled token ids; ``rollout_logprobs`` (R,) log pi_rollout(token) of
    each sampled token under the rollout engine (DART eq. 2 uses them for the truncated
    importance weight); ``policy_version`` the weights version that sampled it; ``image_refs``
    blob refs of the screenshots in the prompt; ``action_text`` raw model text; ``action`` the
    canonical action string after parsing (None if unparsable); ``action_error``; ``reward`` the
    env reward of this step; ``candidates`` the allowed completions under constrained decoding
    (None = unconstrained; the learner applies the same mask); ``entropy`` mean token entropy at
    sampling time; ``info`` JSON-serialisable env info.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    rollout_logprobs: list[float]
    policy_version: int
    image_refs: list[str] = field(default_factory=list)
    action_text: str = ""
    action: str | None = None
    action_error: str | None = None
    reward: float = 0.0
    candidates: list[str] | None = None
    entropy: float | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def validate(self, where: str = "step") -> None:
        """Raise ValueError naming the field if this step is inconsistent or not serialisable."""
        _int_array(self.prompt_ids, f"{where}.prompt_ids")
        _int_array(self.response_ids, f"{where}.response_ids")
        lps = np.asarray(_float_list(self.rollout_logprobs, f"{where}.rollout_logprobs"))
        if len(lps) != len(self.response_ids):
            raise ValueError(
                f"{where}.rollout_logprobs has {len(lps)} entries but response_ids has "
                f"{len(self.response_ids)}; there must be one log-prob per sampled token")
        bad = np.flatnonzero(np.isnan(lps) | (lps > 1e-6))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"{where}.rollout_logprobs[{i}] = {lps[i]} is not a log-probability")
        if isinstance(self.policy_version, bool) or not isinstance(self.policy_version, int):
            raise ValueError(f"{where}.policy_version must be an int, got {self.policy_version!r}")
        if not isinstance(self.image_refs, list) or not all(isinstance(r, str) for r in self.image_refs):
            raise ValueError(f"{where}.image_refs must be a list of str")
        if not isinstance(self.action_text, str):
            raise ValueError(f"{where}.action_text must be a str")
        for name in ("action", "action_error"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, str):
                raise ValueError(f"{where}.{name} must be a str or None, got {type(v).__name__}")
        if not math.isfinite(float(self.reward)):
            raise ValueError(f"{where}.reward must be finite, got {self.reward}")
        if self.candidates is not None and (
                not isinstance(self.candidates, list)
                or not all(isinstance(c, str) for c in self.candidates)):
            raise ValueError(f"{where}.candidates must be a list of str or None")
        if self.entropy is not None and not math.isfinite(float(self.entropy)):
            raise ValueError(f"{where}.entropy must be finite or None, got {self.entropy}")
        _json_dict(self.info, f"{where}.info")

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict (lists copied)."""
        return {
            "prompt_ids": list(self.prompt_ids), "response_ids": list(self.response_ids),
            "rollout_logprobs": list(self.rollout_logprobs), "policy_version": self.policy_version,
            "image_refs": list(self.image_refs), "action_text": self.action_text,
            "action": self.action, "action_error": self.action_error, "reward": self.reward,
            "candidates": None if self.candidates is None else list(self.candidates),
            "entropy": self.entropy, "info": dict(self.info),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "step") -> "Step":
        """Inverse of :meth:`to_dict`; raises ValueError naming a missing or bad field."""
        if not isinstance(d, dict):
            raise ValueError(f"{where} must be a dict, got {type(d).__name__}")
        unknown = set(d) - {f for f in cls.__dataclass_fields__}
        if unknown:
            raise ValueError(f"{where}: unknown fields {sorted(unknown)}")
        step = cls(
            prompt_ids=_int_list(_need(d, "prompt_ids", where), f"{where}.prompt_ids"),
            response_ids=_int_list(_need(d, "response_ids", where), f"{where}.response_ids"),
            rollout_logprobs=_float_list(_need(d, "rollout_logprobs", where),
                                         f"{where}.rollout_logprobs"),
            policy_version=_need(d, "policy_version", where),
            image_refs=list(d.get("image_refs", [])),
            action_text=d.get("action_text", ""),
            action=d.get("action"), action_error=d.get("action_error"),
            reward=float(d.get("reward", 0.0)),
            candidates=None if d.get("candidates") is None else list(d["candidates"]),
            entropy=None if d.get("entropy") is None else float(d["entropy"]),
            info=dict(d.get("info", {})),
        )
        step.validate(where)
        return step


@dataclass
class Trajectory:
    """One episode of one task: its steps, the verifier's score and where it came from.

    ``traj_id`` (uuid4 hex) is the DataStore's idempotency key: re-adding it is a no-op.
    ``reward`` is the verifier score (the last step's); ``source`` says whether it was sampled by
    the current policy (``on_policy``), replayed from a buffer (``replay``), a demonstration
    (``expert``), a cached success (``cache``, BEPA) or a pre-collected success from DART's
    experience pool (``pool``); ``guidance_level`` the hint level it was
    collected under (UI-Mem stratified guidance; 0 = none).
    """

    traj_id: str
    run_id: str
    task_id: str
    seed: int
    group_id: str
    steps: list[Step] = field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    source: Source = "on_policy"
    guidance_level: int = 0
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def length(self) -> int:
        """Number of steps."""
        return len(self.steps)

    def injected_copy(self, source: Source, key: str = "", **info: Any) -> "Trajectory":
        """This trajectory as an injected member of a later group (DART's pool, MobileRL's replay,
        BEPA's cache): ``source`` set, a ``traj_id`` derived from (source, original id, ``key``)
        so re-injecting it under the same key reuses one DataStore row, the original id in
        ``info[f"{source}_origin"]`` plus ``info``; steps (token ids, behaviour log-probs,
        entropies) unchanged."""
        name = f"guigym/{source}/{self.traj_id}" + (f"/{key}" if key else "")
        return Trajectory(traj_id=uuid.uuid5(uuid.NAMESPACE_OID, name).hex, run_id=self.run_id, task_id=self.task_id,
                          seed=self.seed, group_id=self.group_id, steps=list(self.steps), reward=self.reward,
                          success=self.success, source=source, guidance_level=self.guidance_level,
                          info={**self.info, f"{source}_origin": self.traj_id, **info})

    @property
    def policy_version(self) -> int:
        """Oldest policy version that sampled any step (-1 for a trajectory without steps)."""
        return min((s.policy_version for s in self.steps), default=-1)

    def validate(self) -> None:
        """Raise ValueError naming the field if this trajectory is inconsistent."""
        where = f"trajectory {self.traj_id!r}"
        for name in ("traj_id", "task_id", "group_id"):
            v = getattr(self, name)
            if not isinstance(v, str) or not v:
                raise ValueError(f"{where}: {name} must be a non-empty str, got {v!r}")
        if len(self.traj_id) > 64:
            raise ValueError(f"{where}: traj_id longer than 64 chars")
        if not isinstance(self.run_id, str):
            raise ValueError(f"{where}: run_id must be a str")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"{where}: seed must be an int, got {self.seed!r}")
        if not math.isfinite(float(self.reward)):
            raise ValueError(f"{where}: reward must be finite, got {self.reward}")
        if self.source not in SOURCES:
            raise ValueError(f"{where}: source must be one of {SOURCES}, got {self.source!r}")
        if isinstance(self.guidance_level, bool) or not isinstance(self.guidance_level, int):
            raise ValueError(f"{where}: guidance_level must be an int")
        _json_dict(self.info, f"{where}.info")
        for i, s in enumerate(self.steps):
            if not isinstance(s, Step):
                raise ValueError(f"{where}: steps[{i}] is a {type(s).__name__}, not a Step")
            s.validate(f"{where}.steps[{i}]")

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict (steps as dicts)."""
        return {
            "traj_id": self.traj_id, "run_id": self.run_id, "task_id": self.task_id,
            "seed": self.seed, "group_id": self.group_id,
            "steps": [s.to_dict() for s in self.steps], "reward": self.reward,
            "success": self.success, "source": self.source,
            "guidance_level": self.guidance_level, "info": dict(self.info),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Trajectory":
        """Inverse of :meth:`to_dict`; raises ValueError naming a missing or bad field."""
        if not isinstance(d, dict):
            raise ValueError(f"trajectory must be a dict, got {type(d).__name__}")
        where = f"trajectory {d.get('traj_id')!r}"
        unknown = set(d) - {f for f in cls.__dataclass_fields__}
        if unknown:
            raise ValueError(f"{where}: unknown fields {sorted(unknown)}")
        steps = _need(d, "steps", where)
        if not isinstance(steps, list):
            raise ValueError(f"{where}.steps must be a list")
        t = cls(
            traj_id=_need(d, "traj_id", where), run_id=d.get("run_id", ""),
            task_id=_need(d, "task_id", where), seed=_need(d, "seed", where),
            group_id=_need(d, "group_id", where),
            steps=[Step.from_dict(s, f"{where}.steps[{i}]") for i, s in enumerate(steps)],
            reward=float(d.get("reward", 0.0)), success=bool(d.get("success", False)),
            source=d.get("source", "on_policy"), guidance_level=d.get("guidance_level", 0),
            info=dict(d.get("info", {})),
        )
        t.validate()
        return t


@dataclass
class Group:
    """The G trajectories of one task that share a GRPO baseline (Shao et al. 2024)."""

    group_id: str
    task_id: str
    trajectories: list[Trajectory] = field(default_factory=list)

    @property
    def rewards(self) -> list[float]:
        """Rewards of the member trajectories, in order."""
        return [t.reward for t in self.trajectories]

    def __len__(self) -> int:
        return len(self.trajectories)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict."""
        return {"group_id": self.group_id, "task_id": self.task_id,
                "trajectories": [t.to_dict() for t in self.trajectories]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Group":
        """Inverse of :meth:`to_dict`."""
        where = f"group {d.get('group_id')!r}" if isinstance(d, dict) else "group"
        if not isinstance(d, dict):
            raise ValueError(f"{where} must be a dict")
        return cls(group_id=_need(d, "group_id", where), task_id=_need(d, "task_id", where),
                   trajectories=[Trajectory.from_dict(t) for t in _need(d, "trajectories", where)])
