"""Agents: the Agent protocol, model-free baselines and scripted oracles."""
from guigym.agents.base import AGENTS, Agent, act_batch
from guigym.agents import simple  # noqa: F401 - registers random/noop
from guigym.agents.oracle import miniwob as _oracle_miniwob  # noqa: F401 - registers oracle
from guigym.agents import hf as _hf  # noqa: F401 - registers hf (imports torch only when built)
from guigym.agents import openai_agent as _openai  # noqa: F401 - registers openai
from guigym.agents import replay  # noqa: F401 - registers replay

__all__ = ["AGENTS", "Agent", "act_batch", "load_agent", "make_agent"]


def make_agent(spec: str, **kwargs):
    """Build an agent from a CLI spec: ``NAME``, ``NAME:TARGET`` or ``package.module:Factory``.

    ``random``, ``noop``, ``oracle`` take no target; agents registered to take one (a model path,
    a server URL, a trajectory directory) get it as ``target=``: ``replay:runs/x``. Any other
    ``MODULE:ATTR`` (``MODULE`` importable, ``ATTR`` a dotted name in it) loads your own agent
    without editing guigym (:func:`load_agent`).
    """
    name, sep, target = spec.partition(":")
    if sep and name not in AGENTS and _is_import_path(name, target):
        return load_agent(spec, **kwargs)
    factory = AGENTS.get(name)
    if sep:
        return factory(target=target, **kwargs)
    return factory(**kwargs)


def _is_import_path(module: str, attr: str) -> bool:
    return all(p.isidentifier() for p in module.split(".")) and all(p.isidentifier() for p in attr.split("."))


def load_agent(spec: str, **kwargs):
    """``package.module:Factory`` -> an agent. ``Factory`` is a class or callable returning an
    object with ``reset(task_info)`` and ``act(obs) -> str`` (the :class:`Agent` protocol; ``name``
    defaults to the spec), called with the keyword arguments it accepts of ``kwargs`` (``seed``,
    then every ``--agent-opt``: an option it does not take is an error naming it), or an agent
    object itself (used as is: the same object for every env, so only with one env or a
    stateless agent). ValueError naming the spec when it cannot be imported or is not an agent."""
    import importlib
    import inspect

    module_name, _, attr = spec.partition(":")
    try:
        obj = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--agent {spec}: cannot import module {module_name!r} ({exc}); is it on PYTHONPATH?") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"--agent {spec}: module {module_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    agent = obj
    if inspect.isclass(obj) or (callable(obj) and not _is_agent(obj)):
        try:
            params = dict(inspect.signature(obj).parameters)
            takes_all = any(p.kind == p.VAR_KEYWORD for p in params.values())
        except (TypeError, ValueError):  # a builtin without a signature: pass everything
            params, takes_all = {}, True
        opts = dict(kwargs)
        if "seed" in opts and not takes_all and "seed" not in params:
            opts.pop("seed")  # the eval seed is offered, not imposed
        unknown = [] if takes_all else [k for k in opts if k not in params]
        if unknown:
            raise ValueError(f"--agent {spec}: {attr} takes no option {unknown[0]!r} "
                             f"(it takes: {', '.join(params) or 'nothing'})")
        agent = obj(**opts)
    if not _is_agent(agent):
        raise ValueError(f"--agent {spec}: {type(agent).__name__} is not an agent: it needs reset(task_info) and "
                         "act(obs) -> str (guigym.agents.Agent)")
    if not isinstance(getattr(agent, "name", None), str):
        try:
            agent.name = spec
        except AttributeError:
            pass
    return agent


def _is_agent(obj) -> bool:
    import inspect

    return not inspect.isclass(obj) and callable(getattr(obj, "act", None)) and callable(getattr(obj, "reset", None))
