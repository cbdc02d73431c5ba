"""``guigym`` command line.

    guigym eval --env MiniWoB-v0 --tasks click-test,enter-text --agent oracle --num-envs 2 \\
                --episodes 5 --out runs/demo
    guigym eval ... --backend ray [--ray-address auto] [--ray-resource desktop=1]   # envs as Ray actors
    guigym tasks list --env MiniWoB-v0
    guigym serve --model PATH --port 8000 --api-key TOKEN   # OpenAI-compatible server
    guigym report runs/demo          # rebuild runs/demo/report.html and results.csv
    guigym report --train runs/grpo  # learning curves of a training run: learning_curve.png + a table
    guigym tasks check --suite embedded   # OSWorld-v0 suite: no-op scores 0, reference solution 1
    guigym tasks check --env WebArena-v0 --tasks FILE [--url shopping=URL]   # same for WebArena configs
    guigym train recipes/grpo_miniwob_tiny.yaml [--set key=value] [--resume]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence


def _task_ids(env_id: str, tasks: Optional[str], suite: Optional[str],
              env_opts: Optional[dict[str, object]] = None) -> list[str]:
    if env_id == "WebArena-v0":
        from guigym.core.errors import TaskSpecError
        from guigym.envs.web.webarena.tasks import load_configs, task_id

        config_file = (env_opts or {}).get("config_file")
        if not config_file:
            raise TaskSpecError("WebArena-v0 needs its task configs: --env-opt config_file=PATH (WebArena config JSON)")
        files = [config_file] if isinstance(config_file, str) else list(config_file)  # type: ignore[arg-type]
        known = [task_id(c.task_id) for f in files for c in load_configs(f)]
        if not tasks:
            return known
        names = [t.strip() for t in tasks.split(",") if t.strip()]
        # "12" and "webarena.12" both name config task_id 12
        wanted = [n if n.startswith("webarena.") else task_id(n) for n in names]
        missing = [n for n in wanted if n not in known]
        if missing:
            raise TaskSpecError(f"--tasks: no task config with id(s) {missing} in {config_file}")
        return wanted
    if env_id == "OSWorld-v0":
        from guigym.envs.desktop.env import select_tasks as osworld_tasks

        names = [t.strip() for t in tasks.split(",") if t.strip()] if tasks else None
        # eval sends task ids to the env, which resolves them in its own (embedded) suite
        return [t.id for t in osworld_tasks(tasks=names, suite="embedded" if names else (suite or "embedded"))]
    if env_id in ("AndroidLab-v0", "AndroidWorld-v0"):
        from guigym.core.errors import TaskSpecError

        if env_id == "AndroidLab-v0":
            from guigym.envs.android.androidlab_tasks import default_task_dir, load_dir
            from guigym.envs.android.env import ANDROIDLAB_SUITE

            task_dir = (env_opts or {}).get("task_dir") or default_task_dir() or ANDROIDLAB_SUITE
            known = [t.id for t in load_dir(task_dir)]  # type: ignore[arg-type]
        else:
            from guigym.envs.android.androidworld import TASKS

            known = TASKS.names()
        names = [t.strip() for t in tasks.split(",") if t.strip()] if tasks else known
        missing = [n for n in names if n not in known]
        if missing:
            raise TaskSpecError(f"--tasks: {env_id} has no task(s) {missing}")
        return names
    if env_id != "MiniWoB-v0":
        raise SystemExit(f"error: unknown env {env_id!r}; available: MiniWoB-v0, OSWorld-v0, WebArena-v0, "
                         "AndroidLab-v0, AndroidWorld-v0")
    from guigym.envs.web.miniwob import select_tasks

    if tasks:
        names = [t.strip() for t in tasks.split(",") if t.strip()]
        return [t.id for t in select_tasks(tasks=names)]
    if suite == "oracle":
        from guigym.agents.oracle.miniwob import SOLVED_TASKS

        return list(SOLVED_TASKS)
    return [t.id for t in select_tasks(suite=suite or "all")]


def _kv_opts(pairs: Optional[list[str]], flag: str = "--agent-opt") -> dict[str, object]:
    """``--agent-opt``/``--env-opt`` values: ``["history=2", "dialect=uitars"]`` ->
    ``{"history": 2, "dialect": "uitars"}`` (JSON values, else strings)."""
    import json

    opts: dict[str, object] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"{flag} wants KEY=VALUE, got {pair!r}")
        try:
            opts[key] = json.loads(value)
        except json.JSONDecodeError:
            opts[key] = value
    return opts


def cmd_eval(args: argparse.Namespace) -> int:
    from rich.console import Console

    from guigym.agents import make_agent
    from guigym.core.errors import ConfigError, TaskSpecError
    from guigym.eval.runner import EvalConfig, run_eval
    from guigym.eval.summary import render_table, summarize

    try:
        env_opts = _kv_opts(args.env_opt, "--env-opt")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        task_ids = _task_ids(args.env, args.tasks, args.suite, env_opts)
    except TaskSpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        agent_opts = _kv_opts(args.agent_opt)
        make_agent(args.agent, seed=args.seed, **agent_opts)  # fail fast on a bad spec, before envs start
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, OSError) as exc:
        print(f"error: agent {args.agent!r}: {exc}", file=sys.stderr)
        return 2
    env_kwargs = dict(env_opts)
    if args.max_steps:
        env_kwargs["max_steps"] = args.max_steps
    try:
        ray_resources = {k: float(v) for k, v in _kv_opts(args.ray_resource, "--ray-resource").items()}  # type: ignore[arg-type]
    except (ValueError, TypeError) as exc:
        print(f"error: --ray-resource wants KEY=NUMBER: {exc}", file=sys.stderr)
        return 2
    config = EvalConfig(env_id=args.env, task_ids=task_ids, out_dir=Path(args.out), num_envs=args.num_envs,
                        episodes=args.episodes, attempts=args.attempts, seed=args.seed, env_kwargs=env_kwargs,
                        save_screenshots=not args.no_screenshots, backend=args.backend, ray_address=args.ray_address,
                        ray_num_cpus=args.ray_num_cpus, ray_resources=ray_resources)
    try:
        records = run_eval(config, lambda: make_agent(args.agent, seed=args.seed, **agent_opts), progress=not args.quiet)
    except ConfigError as exc:  # e.g. --backend ray without the ray package, resources no node has
        print(f"error: {exc}", file=sys.stderr)
        return 2
    summary = summarize(r for r in records if r["task_id"] in set(task_ids))
    if len(summary["per_domain"]) > 1:
        Console().print(render_table(summary, "per_domain"))
    Console().print(render_table(summary))
    print(f"results: {Path(args.out) / 'results.jsonl'}; report: {Path(args.out) / 'report.html'}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Rebuild ``report.html`` and ``results.csv`` of an existing eval output directory, or with
    ``--train`` draw a training run's learning curves (guigym/train/report.py)."""
    if args.train:
        from guigym.core.errors import ConfigError
        from guigym.train.report import train_report

        try:
            rep = train_report(args.out, png=args.png)
        except (FileNotFoundError, ConfigError, ImportError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(rep.text)
        print(f"learning curves: {rep.png} ({', '.join(rep.panels)})")
        return 0
    from guigym.eval.report import write_reports

    try:
        csv_path, html_path = write_reports(Path(args.out), max_episodes=args.max_episodes)
    except (FileNotFoundError, NotADirectoryError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"report: {html_path}\nresults: {csv_path}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve a local HF model over an OpenAI-compatible API (guigym/serve.py)."""
    import os

    from guigym import serve

    key = args.api_key or os.environ.get("GUIGYM_API_KEY", "")
    if not key:
        print("error: --api-key (or GUIGYM_API_KEY) is required", file=sys.stderr)
        return 2
    try:
        return serve.main(args.model, args.host, args.port, key, model_name=args.name, max_batch=args.max_batch,
                          batch_wait_ms=args.batch_wait_ms, device=args.device,
                          **{k: v for k, v in (("max_body", args.max_body), ("max_connections", args.max_connections))
                             if v is not None})
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def cmd_tasks(args: argparse.Namespace) -> int:
    for t in _task_ids(args.env, None, args.suite):
        print(t)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="guigym", description="Gymnasium envs and evaluation for GUI agents")
    sub = p.add_subparsers(dest="command", required=True)

    e = sub.add_parser("eval", help="evaluate an agent on a task list with N parallel envs (resumable)")
    e.add_argument("--env", default="MiniWoB-v0", help="registered env id (default: MiniWoB-v0)")
    g = e.add_mutually_exclusive_group()
    g.add_argument("--tasks", help="comma-separated task ids")
    g.add_argument("--suite", help="'all' (every regular MiniWoB task), 'flight', or 'oracle' (tasks the oracle solves)")
    e.add_argument("--agent", default="random", help="agent spec: random, noop, oracle, or NAME:TARGET for agents that take one")
    e.add_argument("--agent-opt", action="append", metavar="KEY=VALUE",
                   help="agent constructor option, repeatable (e.g. history=2, dialect=uitars, max_new_tokens=64)")
    e.add_argument("--env-opt", action="append", metavar="KEY=VALUE",
                   help="env constructor option, repeatable, JSON values (e.g. for WebArena-v0: "
                        "config_file=tasks.json, 'urls={\"shopping\": \"http://127.0.0.1:7770\"}')")
    e.add_argument("--num-envs", type=int, default=2, help="envs (worker processes) running in parallel")
    e.add_argument("--episodes", type=int, default=1, help="seeds per task")
    e.add_argument("--attempts", type=int, default=1, help="attempts per seed (for pass@k)")
    e.add_argument("--seed", type=int, default=0, help="first seed")
    e.add_argument("--max-steps", type=int, default=None, help="override every task's step budget")
    e.add_argument("--out", required=True, help="output directory; rerunning with the same one resumes")
    e.add_argument("--no-screenshots", action="store_true", help="do not save per-step screenshots")
    e.add_argument("--quiet", action="store_true", help="no progress bar")
    e.add_argument("--backend", choices=["process", "ray"], default="process",
                   help="process: a worker process per env (default); ray: a Ray actor per env (the ray extra)")
    e.add_argument("--ray-address", default=None,
                   help="with --backend ray: Ray cluster address (e.g. auto); default: start a local Ray")
    e.add_argument("--ray-num-cpus", type=float, default=1.0, help="with --backend ray: logical CPUs per env actor")
    e.add_argument("--ray-resource", action="append", metavar="KEY=N",
                   help="with --backend ray: a custom resource per env actor, e.g. desktop=1 (repeatable)")
    e.set_defaults(func=cmd_eval)

    r = sub.add_parser("report", help="rebuild report.html and results.csv of an eval output directory; with "
                                      "--train, learning curves of a training run")
    r.add_argument("out", help="the eval output directory (holding results.jsonl), or with --train the run.dir of "
                               "a training run (holding metrics.jsonl) or the metrics file itself")
    r.add_argument("--max-episodes", type=int, default=200, help="episodes shown in report.html (failed first)")
    r.add_argument("--train", action="store_true",
                   help="OUT is a training run: plot success, reward, loss, KL, clip fraction, entropy and staleness "
                        "(the ones its metrics.jsonl has) per iteration and print last/best values")
    r.add_argument("--png", default=None, help="with --train: where to write the figure "
                                               "(default <run.dir>/learning_curve.png)")
    r.set_defaults(func=cmd_report)

    s = sub.add_parser("serve", help="OpenAI-compatible /v1/chat/completions server for a local HF model")
    s.add_argument("--model", required=True, help="from_pretrained directory of the model")
    s.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback)")
    s.add_argument("--port", type=int, default=8000, help="port (0: any free port, printed at start)")
    s.add_argument("--api-key", default=None, help="required bearer token (default: $GUIGYM_API_KEY)")
    s.add_argument("--name", default=None, help="model name served in /v1/models (default: the directory name)")
    s.add_argument("--max-batch", type=int, default=8, help="most requests generated together")
    s.add_argument("--batch-wait-ms", type=float, default=5.0, help="how long to collect a batch")
    s.add_argument("--device", default="cpu")
    s.add_argument("--max-body", type=int, default=None,
                   help="largest request body in bytes (default 64 MiB); larger ones get 413 unread")
    s.add_argument("--max-connections", type=int, default=None,
                   help="connections served at once (default 64); more get 503 at once")
    s.set_defaults(func=cmd_serve)

    t = sub.add_parser("tasks", help="list tasks; 'tasks check [--env OSWorld-v0|WebArena-v0]' proves no-op 0 and reference 1 per task")
    t.add_argument("action", choices=["list", "check", "coverage"],
                   help="coverage: what OSWorld task files need and lack here (see 'guigym tasks coverage --help')")
    t.add_argument("--env", default="MiniWoB-v0")
    t.add_argument("--suite", default=None, help="MiniWoB: all | flight | oracle (default all); OSWorld: embedded")
    t.set_defaults(func=cmd_tasks)

    # These own their flags (see their --help); main() hands them the rest of argv.
    sub.add_parser("train", help="GRPO-family training from a YAML recipe (see 'guigym train --help')", add_help=False)
    sub.add_parser("osworld", help="'osworld cache --tasks DIR': download or --import the files OSWorld tasks "
                                   "reference (see 'guigym osworld cache --help')", add_help=False)
    sub.add_parser("doctor", help="what this machine has and lacks for each env and the trainer, with install hints "
                                  "(see 'guigym doctor --help')", add_help=False)
    return p


# Subcommands whose argument parsers live next to their code.
_DELEGATED = {
    ("train",): ("guigym.train.main", "main"),
    ("doctor",): ("guigym.doctor", "main"),
    ("tasks", "check"): ("guigym.envs.desktop.check", "main"),
    ("tasks", "coverage"): ("guigym.envs.desktop.coverage", "main"),
    ("osworld",): ("guigym.envs.desktop.cache", "main"),
}
#: ``guigym tasks check --env ID``: the checker of each env (default OSWorld-v0)
_CHECKERS = {"OSWorld-v0": "guigym.envs.desktop.check", "WebArena-v0": "guigym.envs.web.webarena.check"}


def _checker(argv: list[str]) -> tuple[str, list[str]]:
    """(module, its argv) for ``tasks check`` arguments ``argv``: ``--env`` picks the checker."""
    peek = argparse.ArgumentParser(add_help=False)
    peek.add_argument("--env", default="OSWorld-v0")
    known, rest = peek.parse_known_args(argv)
    if known.env not in _CHECKERS:
        print(f"error: tasks check: unknown env {known.env!r}; available: {', '.join(_CHECKERS)}", file=sys.stderr)
        raise SystemExit(2)
    return _CHECKERS[known.env], rest


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for prefix, (module, func) in _DELEGATED.items():
        if tuple(argv[:len(prefix)]) == prefix:
            import importlib
            rest = argv[len(prefix):]
            if prefix == ("tasks", "check"):
                module, rest = _checker(rest)
            return int(getattr(importlib.import_module(module), func)(rest))
    args = build_parser().parse_args(argv)
    if getattr(args, "num_envs", 1) < 1:
        print("error: --num-envs must be >= 1", file=sys.stderr)
        return 2
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
