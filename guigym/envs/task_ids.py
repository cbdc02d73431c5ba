"""Task ids a run would use, checked before any env starts (:func:`resolve_task_ids`).

Split from :mod:`guigym.envs.options` because it reads each env's suite (it imports the concrete
envs), while ``options`` sits below them (``GUIEnv`` checks its kwargs and dialect through it).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from guigym.core.errors import ConfigError
from guigym.envs.options import did_you_mean, env_class


#: env ids whose task lists :func:`resolve_task_ids` knows (others check their tasks when built)
LISTED_ENVS = ("MiniWoB-v0", "OSWorld-v0", "WebArena-v0", "AndroidLab-v0", "AndroidWorld-v0", "LatencyModel-v0")


def _names(tasks: str | Iterable[str] | None) -> list[str] | None:
    if tasks is None:
        return None
    items = tasks.split(",") if isinstance(tasks, str) else [str(t) for t in tasks]
    return [t.strip() for t in items if t.strip()] or None


def resolve_task_ids(env_id: str, tasks: str | Iterable[str] | None, env_kwargs: Mapping[str, Any] | None = None,
                     suite: str | None = None) -> list[str]:
    """The task ids of ``env_id`` a run would use: ``tasks`` (a comma-separated string or a list),
    checked against the suite the env will load with ``env_kwargs``, or every task of that suite
    (MiniWoB: of ``suite``, ``all`` or ``flight``). TaskSpecError naming the unknown ids (with the
    closest known id) before any env starts; ConfigError for an env id without a task list here."""
    from guigym.core.errors import TaskSpecError

    kwargs = dict(env_kwargs or {})
    names = _names(tasks)

    def checked(known: list[str], wanted: list[str] | None, where: str) -> list[str]:
        if wanted is None:
            return known
        missing = [n for n in wanted if n not in known]
        if missing:
            raise TaskSpecError(f"{env_id} has no task(s) {missing} in {where}{did_you_mean(missing[0], known)}")
        return wanted

    if env_id == "MiniWoB-v0":
        from guigym.envs.web.miniwob import select_tasks

        return [t.id for t in select_tasks(tasks=names, suite=suite or str(kwargs.get("suite", "all")))]
    if env_id == "OSWorld-v0":
        from guigym.envs.desktop.env import suite_tasks

        where = kwargs.get("suite") or suite or "embedded"
        known = [t.id for t in suite_tasks(where)]
        if names is None:
            return known
        # a task file path is a task too (OSWorldEnv loads it): only bare ids are checked
        checked(known, [n for n in names if not n.endswith(".json")], f"suite {str(where)!r}")
        from guigym.envs.desktop.env import select_tasks as osworld_tasks

        return [t.id for t in osworld_tasks(tasks=names, suite=where)]
    if env_id == "WebArena-v0":
        from guigym.envs.web.webarena.tasks import load_configs, task_id

        config_file = kwargs.get("config_file")
        embedded = kwargs.get("embedded")
        if not config_file and embedded:  # the env runs the suites of the sites it starts
            from guigym.envs.web.webarena.sites import EMBEDDED, available

            sites = available() if embedded == "all" else [embedded] if isinstance(embedded, str) else list(embedded)
            for site in sites:
                if site not in EMBEDDED:
                    raise ConfigError(f"embedded: no embedded site named {site!r}{did_you_mean(str(site), EMBEDDED)} "
                                      f"(known: {', '.join(EMBEDDED)})")
            config_file = [EMBEDDED[site].suite for site in sites]
        if not config_file:
            raise TaskSpecError("WebArena-v0 needs its task configs: --embedded NAME|all (the embedded sites' suites) "
                                "or --env-opt config_file=PATH (WebArena config JSON) in guigym eval; "
                                "env.kwargs.embedded or env.kwargs.config_file in a recipe")
        files = [config_file] if isinstance(config_file, (str, Path)) else list(config_file)
        known = [task_id(c.task_id) for f in files for c in load_configs(f)]
        # "12" and "webarena.12" both name config task_id 12
        wanted = None if names is None else [n if n.startswith("webarena.") else task_id(n) for n in names]
        return checked(known, wanted, ", ".join(str(f) for f in files))
    if env_id == "AndroidLab-v0":
        from guigym.envs.android.androidlab_tasks import default_task_dir, load_dir
        from guigym.envs.android.env import ANDROIDLAB_SUITE

        task_dir = kwargs.get("task_dir") or default_task_dir() or ANDROIDLAB_SUITE
        return checked([t.id for t in load_dir(task_dir)], names, str(task_dir))
    if env_id == "AndroidWorld-v0":
        from guigym.envs.android.androidworld import TASKS

        return checked(TASKS.names(), names, "AndroidWorld's task classes")
    if env_id == "LatencyModel-v0":  # a stand-in: its suite is generated from its options
        from guigym.envs.latency_model import LatencyModelEnv

        suite = {k: v for k, v in kwargs.items() if k in ("n_tasks", "n_elements", "max_targets", "task_seed",
                                                          "max_steps")}
        return checked([t.id for t in LatencyModelEnv(**suite).tasks], names, "its generated suite")
    env_class(env_id)  # an unknown id: ConfigError with did-you-mean
    raise ConfigError(f"env: {env_id} lists no tasks here; available: {', '.join(LISTED_ENVS)}")
