"""Composition of plug-ins of one kind (plug-in API v2): recipe specs -> ordered chains.

A recipe names the plug-ins of one kind as a single name, a ``{name, options}`` mapping, or a
list of either; they run in order::

    reward_shaper: [default, {name: shortest_path_bonus, options: {bonus: 0.2}}]

How a chain combines its members (one rule per extension point):

* reward shapers: each gets the previous one's rewards (``rewards=``; the first gets None = the
  verifier scores) and returns the new ones (a float, or a list of per-step floats, per trajectory);
* group builders: each gets the previous one's groups and the same offered ``pool``;
* task samplers: each draws ``n`` ids from the previous one's output (the first from the task list);
* step filters: a step is trained only if every filter keeps it;
* rollout planners: each rewrites the list of :class:`RolloutPlan`;
* conditioners: all give guidance for a rollout; texts are joined in order, the level is the max;
* task sources / trajectory sources: outputs are concatenated.

Plug-ins written against the v1 signatures (no ``ctx``, no ``rewards``) still work: :func:`call`
passes only the keyword arguments a callable accepts.
"""
from __future__ import annotations

import functools
import inspect
import json
import types
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from guigym.core.errors import ConfigError

Spec = Union[str, Mapping[str, Any]]
_ACCEPTS: dict[Any, tuple[bool, frozenset[str]]] = {}


def _accepts(fn: Callable[..., Any]) -> tuple[bool, frozenset[str]]:
    # plug-in instances are cached by class (one __call__ signature); functions, methods and
    # partials by themselves
    plain = isinstance(fn, (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial))
    key = fn if plain else type(fn)
    hit = _ACCEPTS.get(key)
    if hit is None:
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            hit = (True, frozenset())
        else:
            var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
            hit = (var_kw, frozenset(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)))
        _ACCEPTS[key] = hit
    return hit


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with the keyword arguments ``fn`` does not accept left out."""
    var_kw, names = _accepts(fn)
    if not var_kw:
        kwargs = {k: v for k, v in kwargs.items() if k in names}
    return fn(*args, **kwargs)


def parse_specs(value: Union[None, Spec, Sequence[Spec]], where: str) -> list[tuple[str, dict[str, Any]]]:
    """Recipe value -> ``[(name, options)]`` in order; ConfigError naming ``where`` otherwise.

    ``options`` is None when the spec gave none (the recipe's ``plugin_options[name]`` then applies)."""
    if value is None:
        return []
    items = [value] if isinstance(value, (str, Mapping)) else list(value)
    out = []
    for i, item in enumerate(items):
        at = where if isinstance(value, (str, Mapping)) else f"{where}[{i}]"
        if isinstance(item, str):
            out.append((item, None))
        elif isinstance(item, Mapping):
            extra = set(item) - {"name", "options"}
            if "name" not in item or not isinstance(item["name"], str) or extra:
                raise ConfigError(f"{at}: a plug-in is a name or {{name: ..., options: {{...}}}}, got {dict(item)!r}")
            opts = item.get("options") or {}
            if not isinstance(opts, Mapping):
                raise ConfigError(f"{at}.options must be a mapping, got {type(opts).__name__}")
            out.append((item["name"], dict(opts)))
        else:
            raise ConfigError(f"{at}: a plug-in is a name or {{name, options}}, got {type(item).__name__}")
    return out


def build_all(registry: Any, value: Any, where: str, plugin_options: Mapping[str, Mapping[str, Any]] | None = None,
              defaults: Mapping[str, Any] | None = None) -> list[tuple[str, Any]]:
    """Instantiate every plug-in of ``value`` from ``registry``. Options: the spec's own, else
    ``plugin_options[name]``; ``defaults`` (e.g. ``seed``) fill parameters the factory takes and
    the options do not set."""
    out = []
    for name, opts in parse_specs(value, where):
        options = dict(opts if opts is not None else (plugin_options or {}).get(name, {}))
        try:
            factory = registry.get(name)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        for k, v in (defaults or {}).items():
            if k not in options:
                try:
                    if k in inspect.signature(factory).parameters:
                        options[k] = v
                except (TypeError, ValueError):
                    pass
        try:
            out.append((name, registry.build(name, **options)))
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
    return out


class Chain:
    """An ordered list of named plug-ins of one kind with a combined ``state_dict``."""

    def __init__(self, kind: str, members: Sequence[tuple[str, Any]]) -> None:
        self.kind = kind
        self.members = list(members)

    def __len__(self) -> int:
        return len(self.members)

    @property
    def plugins(self) -> list[Any]:
        return [p for _, p in self.members]

    def state_dict(self) -> list[dict[str, Any]]:
        """One ``{"name", "state"}`` per member, in order; JSON-checked (ValueError names the plug-in)."""
        out = []
        for name, p in self.members:
            state = p.state_dict() if hasattr(p, "state_dict") else {}
            try:
                json.dumps(state, allow_nan=False)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{self.kind} {name!r}: state_dict() is not JSON-serialisable: {e}") from None
            out.append({"name": name, "state": state})
        return out

    def load_state_dict(self, states: Sequence[Mapping[str, Any]]) -> None:
        names = [n for n, _ in self.members]
        if [s["name"] for s in states] != names:
            raise ConfigError(f"checkpoint has {self.kind} plug-ins {[s['name'] for s in states]} but the recipe "
                              f"configures {names}; resume with the recipe the run was started with")
        for (name, p), s in zip(self.members, states):
            if hasattr(p, "load_state_dict"):
                p.load_state_dict(s["state"])


class RewardShaperChain(Chain):
    def __call__(self, group: Any, *, ctx: Any = None) -> list[Union[float, list[float]]]:
        rewards: Optional[list[Any]] = None
        for name, shaper in self.members:
            rewards = list(call(shaper, group, rewards=rewards, ctx=ctx))
            if len(rewards) != len(group.trajectories):
                raise ValueError(f"reward shaper {name!r} returned {len(rewards)} rewards for "
                                 f"{len(group.trajectories)} trajectories of group {group.group_id!r}")
            for t, r in zip(group.trajectories, rewards):
                if isinstance(r, (list, tuple)) and len(r) != t.length:
                    raise ValueError(f"reward shaper {name!r}: trajectory {t.traj_id!r} has {t.length} steps but "
                                     f"{len(r)} per-step rewards")
        if rewards is None:  # no shaper configured: the verifier scores
            rewards = [float(t.reward) for t in group.trajectories]
        return rewards


class GroupBuilderChain(Chain):
    def __call__(self, fresh: Sequence[Any], pool: Sequence[Any] = (), *, ctx: Any = None) -> list[Any]:
        groups = list(fresh)
        for _, b in self.members:
            groups = list(call(b, groups, pool=pool, ctx=ctx))
        return groups


class TaskSamplerChain(Chain):
    def __call__(self, task_ids: Sequence[str], n: int, stats: Any = None, *, ctx: Any = None) -> list[str]:
        ids = list(task_ids)
        for _, s in self.members:
            ids = list(call(s, ids, n, stats=stats, ctx=ctx))
        return ids


class StepFilterChain(Chain):
    def __call__(self, trajectories: Sequence[Any], *, groups: Any = None, ctx: Any = None) -> list[list[bool]]:
        keep = [[True] * t.length for t in trajectories]
        for name, f in self.members:
            mask = call(f, trajectories, groups=groups, ctx=ctx)
            if len(mask) != len(trajectories) or any(len(m) != t.length for m, t in zip(mask, trajectories)):
                raise ValueError(f"step filter {name!r} returned a mask that does not match the trajectories' steps")
            keep = [[a and bool(b) for a, b in zip(k, m)] for k, m in zip(keep, mask)]
        return keep


class RolloutPlannerChain(Chain):
    def __call__(self, plans: Sequence[Any], *, ctx: Any = None) -> list[Any]:
        out = list(plans)
        for name, p in self.members:
            out = list(call(p, out, ctx=ctx))
            for plan in out:
                plan.validate()
        return out


class ConditionerChain(Chain):
    def __call__(self, task_id: str, seed: int, member: int, *, ctx: Any = None) -> Any:
        from guigym.train.algorithms.context import Guidance

        got = [g for _, c in self.members if (g := call(c, task_id, seed, member, ctx=ctx)) is not None]
        if not got:
            return None
        for g in got:
            if not isinstance(g, Guidance):
                raise TypeError(f"a conditioner returned {type(g).__name__}, expected Guidance or None")
        return Guidance(text="\n".join(g.text for g in got), level=max(g.level for g in got),
                        source="+".join(g.source for g in got if g.source))


class ConcatChain(Chain):
    """Task sources and trajectory sources: every member's output, concatenated in order."""

    def __call__(self, *args: Any, ctx: Any = None) -> list[Any]:
        out: list[Any] = []
        for _, s in self.members:
            out.extend(call(s, *args, ctx=ctx))
        return out
