"""Help text of every registered plug-in (``guigym train --help-config`` prints it after the recipe
keys): the recipe key, the name, its options with defaults (from the factory's signature) and the
first paragraph of its docstring, which cites the paper and equation it implements."""
from __future__ import annotations

import inspect
from typing import Any

from guigym.train.algorithms.estimators import ADVANTAGE_ESTIMATORS
from guigym.train.algorithms.policy_losses import POLICY_LOSSES
from guigym.train.algorithms.registry import (CONDITIONERS, EXTRA_LOSSES, GROUP_BUILDERS, REWARD_SHAPERS,
                                              ROLLOUT_PLANNERS, STEP_FILTERS, TASK_SAMPLERS, TASK_SOURCES,
                                              TRAJECTORY_SOURCES)

#: recipe key under ``algorithm`` -> registry
KEYS: dict[str, Any] = {
    "reward_shaper": REWARD_SHAPERS, "group_builder": GROUP_BUILDERS, "task_sampler": TASK_SAMPLERS,
    "step_filter": STEP_FILTERS, "extra_losses": EXTRA_LOSSES, "rollout_planners": ROLLOUT_PLANNERS,
    "conditioners": CONDITIONERS, "task_sources": TASK_SOURCES, "trajectory_sources": TRAJECTORY_SOURCES,
    "advantage": ADVANTAGE_ESTIMATORS, "policy_loss": POLICY_LOSSES,
}


def _options(factory: Any) -> str:
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return ""
    return ", ".join(f"{p.name}={p.default!r}" if p.default is not p.empty else p.name
                     for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def describe_plugins() -> str:
    """One block per registry: ``algorithm.<key>: <name>(<options>)`` and the docstring's first
    paragraph, indented."""
    out = ["[algorithm plug-ins]  options go in {name, options} or algorithm.plugin_options.<name>"]
    for key, reg in KEYS.items():
        for name in reg.names():
            factory = reg.get(name)
            doc = inspect.getdoc(factory) or ""
            para = " ".join(doc.split("\n\n")[0].split())
            out.append(f"  algorithm.{key}: {name}({_options(factory)})")
            if para:
                out.append(f"      {para}")
    return "\n".join(out)
