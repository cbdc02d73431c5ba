"""``guigym`` command line.

    guigym eval --env MiniWoB-v0 --tasks click-test,enter-text --agent oracle --num-envs 2 \\
                --episodes 5 --out runs/demo
    guigym eval ... --backend ray [--ray-address auto] [--ray-resource desktop=1]   # envs as Ray actors
    guigym tasks list --env MiniWoB-v0     # --env WebArena-v0 [--embedded NAME|all [--available]]
    guigym eval --env WebArena-v0 --embedded fossil --agent package.module:Factory --out runs/wa
    guigym eval --env OSWorld-v0 --suite DIR --out runs/os    # every OSWorld task file in DIR
    guigym android standin           # the stand-in Android device; prints its serial
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
from typing import TYPE_CHECKING, Optional, Sequence

if TYPE_CHECKING:
    from guigym.eval.runner import EvalConfig


def _task_ids(env_id: str, tasks: Optional[str], suite: Optional[str],
              env_opts: Optional[dict[str, object]] = None) -> list[str]:
    """Task ids of ``--tasks`` (checked against the suite the env will load) or of ``--suite``;
    TaskSpecError/ConfigError before any env starts (guigym/envs/options.py)."""
    from guigym.envs.task_ids import resolve_task_ids

    if env_id == "MiniWoB-v0" and suite == "oracle" and not tasks:
        from guigym.agents.oracle.miniwob import SOLVED_TASKS

        return list(SOLVED_TASKS)
    return resolve_task_ids(env_id, tasks, env_opts, suite=suite)


def _suite_env_opts(env_id: str, suite: Optional[str], env_opts: dict[str, object]) -> None:
    """``--suite`` of OSWorld-v0 is also the env's ``suite`` option (the env resolves the ids
    there); a different ``--env-opt suite=`` or ``--suite`` for an env without suites is a
    ConfigError naming both."""
    from guigym.core.errors import ConfigError

    if suite is None:
        return
    if env_id == "OSWorld-v0":
        if env_opts.get("suite", suite) != suite:
            raise ConfigError(f"--suite {suite!r} and --env-opt suite={env_opts['suite']!r} differ; give one")
        if suite != "embedded":
            env_opts["suite"] = suite
    elif env_id != "MiniWoB-v0":
        raise ConfigError(f"--suite: {env_id} has no suites here (MiniWoB-v0: all, flight, oracle; OSWorld-v0: "
                          "embedded or a folder of task files); use --tasks or the env's own option")


def _embedded_sites(given: Sequence[str], available_only: bool) -> list[str]:
    """``--embedded`` values -> the WebArena sites to run. A site that cannot run here is reported
    on stderr as skipped, with its reason; unless ``--available`` asked for only what can run,
    any skipped site is a ConfigError (exit 2), and so is having nothing left to run."""
    from guigym.core.errors import ConfigError
    from guigym.envs.web.webarena.sites import select, suite_task_count

    names, skipped = select(given)
    for name, why in skipped.items():
        print(f"skipped: embedded site {name} ({suite_task_count(name)} tasks): cannot run here, {why}",
              file=sys.stderr)
    if skipped and not available_only:
        raise ConfigError(f"--embedded: {len(skipped)} of the {len(names) + len(skipped)} sites asked for cannot "
                          f"run here ({', '.join(skipped)}, see above); install what they need, or pass "
                          f"--available to run only the {len(names)} that can")
    if not names:
        raise ConfigError("--embedded: none of the sites asked for can run here (see above)")
    return names


def _embedded_env_opts(env_id: str, embedded: Optional[list[str]], available_only: bool,
                       env_opts: dict[str, object]) -> None:
    """``--embedded NAME|all`` of WebArena-v0 is the env's ``embedded`` option (the sites it starts,
    whose suites are the tasks); a different ``--env-opt embedded=`` or another env is a ConfigError."""
    from guigym.core.errors import ConfigError

    if not embedded:
        if available_only:
            raise ConfigError("--available goes with --embedded (WebArena-v0's embedded sites)")
        return
    if env_id != "WebArena-v0":
        raise ConfigError(f"--embedded: only WebArena-v0 has embedded sites, not {env_id}")
    names = _embedded_sites(embedded, available_only)
    if "embedded" in env_opts and env_opts["embedded"] != names:
        raise ConfigError(f"--embedded {','.join(names)} and --env-opt embedded={env_opts['embedded']!r} differ; "
                          "give one")
    env_opts["embedded"] = names


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
    """``guigym eval``: exit 0 when at most ``--max-lost-share`` of the episodes are unfinished
    (lost or not run), 1 when more are (one line naming the causes), 2 on a configuration error
    (one line naming the field; nothing runs), 130 on Ctrl-C (the saved episodes resume)."""
    config = None
    try:
        config = _eval_config(args)
        return _run_eval(args, config)
    except KeyboardInterrupt:
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the message short
        if config is None:
            print("interrupted before any episode ran", file=sys.stderr)
        else:
            from guigym.eval.runner import FINISHED, read_jsonl

            keys = config.keys()
            done = {r["key"] for r in read_jsonl(Path(config.out_dir) / "results.jsonl")
                    if r.get("key") in keys and r.get("status") in FINISHED}
            print(f"interrupted: {len(done)}/{len(keys)} episodes saved; rerun the same command to resume",
                  file=sys.stderr)
        return 130
    except _UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


class _UsageError(Exception):
    """A configuration error of ``guigym eval``: one line, exit code 2."""


def _eval_config(args: argparse.Namespace) -> "EvalConfig":
    """Everything ``guigym eval`` can check before an env or agent starts: env options (unknown
    ones with the closest name), the dialect, paths, task ids, the agent spec and its options."""
    from guigym.agents import make_agent
    from guigym.envs.options import check_env_options
    from guigym.eval.runner import EvalConfig

    try:
        env_opts = _kv_opts(args.env_opt, "--env-opt")
        _suite_env_opts(args.env, args.suite, env_opts)
        _embedded_env_opts(args.env, args.embedded, args.available, env_opts)
        env_kwargs = dict(env_opts)
        if args.max_steps:
            env_kwargs["max_steps"] = args.max_steps
        check_env_options(args.env, env_kwargs, "--env-opt")
        task_ids = _task_ids(args.env, args.tasks, args.suite, env_kwargs)
    except ValueError as exc:  # ConfigError, TaskSpecError and malformed KEY=VALUE
        raise _UsageError(str(exc)) from None
    serials = [x.strip() for x in args.serials.split(",")] if args.serials else []
    if serials and args.num_envs is not None and args.num_envs != len(serials):
        raise _UsageError(f"--serials: {len(serials)} device(s) but --num-envs {args.num_envs}; give one serial per env")
    num_envs = len(serials) if serials else (args.num_envs if args.num_envs is not None else 2)
    try:
        from guigym.envs.pool import per_env_kwargs

        per_env_kwargs(env_kwargs, num_envs, serials, "--serials")
    except ValueError as exc:
        raise _UsageError(str(exc)) from None
    for flag, value, low in (("--agent-retries", args.agent_retries, 0), ("--episodes", args.episodes, 1),
                             ("--attempts", args.attempts, 1)):
        if value < low:
            raise _UsageError(f"{flag} must be >= {low}, got {value}")
    if args.agent_timeout is not None and args.agent_timeout <= 0:
        raise _UsageError(f"--agent-timeout must be > 0 seconds, got {args.agent_timeout}")
    if not 0.0 <= args.max_lost_share <= 1.0:
        raise _UsageError(f"--max-lost-share must be in [0, 1], got {args.max_lost_share}")
    try:
        agent_opts = _kv_opts(args.agent_opt)
        make_agent(args.agent, seed=args.seed, **agent_opts)  # fail fast on a bad spec, before envs start
    except KeyError as exc:
        raise _UsageError(exc.args[0]) from None
    except (ValueError, TypeError, OSError) as exc:
        raise _UsageError(f"agent {args.agent!r}: {exc}") from None
    try:
        ray_resources = {k: float(v) for k, v in _kv_opts(args.ray_resource, "--ray-resource").items()}  # type: ignore[arg-type]
    except (ValueError, TypeError) as exc:
        raise _UsageError(f"--ray-resource wants KEY=NUMBER: {exc}") from None
    return EvalConfig(env_id=args.env, task_ids=task_ids, out_dir=Path(args.out), num_envs=num_envs, serials=serials,
                      episodes=args.episodes, attempts=args.attempts, seed=args.seed, env_kwargs=env_kwargs,
                      save_screenshots=not args.no_screenshots, backend=args.backend, ray_address=args.ray_address,
                      ray_num_cpus=args.ray_num_cpus, ray_resources=ray_resources, agent=args.agent,
                      agent_opts=agent_opts, agent_retries=args.agent_retries, agent_timeout_s=args.agent_timeout,
                      agent_backoff_s=args.agent_backoff, overwrite=args.overwrite)


def _run_eval(args: argparse.Namespace, config: "EvalConfig") -> int:
    from rich.console import Console

    from guigym.agents import make_agent
    from guigym.core.errors import ConfigError
    from guigym.eval.runner import run_eval
    from guigym.eval.summary import render_table, summarize, unfinished

    try:
        records = run_eval(config, lambda: make_agent(args.agent, seed=args.seed, **config.agent_opts),
                           progress=not args.quiet, notify=lambda m: print(m, file=sys.stderr))
    except ConfigError as exc:  # resume mismatch, an env's own config error, ray without ray, ...
        raise _UsageError(str(exc)) from None
    summary = summarize(records)
    if len(summary["per_domain"]) > 1:
        Console().print(render_table(summary, "per_domain"))
    if "per_difficulty" in summary:  # AndroidWorld: SR by easy / medium / hard, as its paper reports
        Console().print(render_table(summary, "per_difficulty"))
    Console().print(render_table(summary))
    print(f"results: {Path(args.out) / 'results.jsonl'}; report: {Path(args.out) / 'report.html'}")
    keys = config.keys()
    lost, causes = unfinished(records, keys)
    if lost > args.max_lost_share * len(keys):
        why = "; ".join(f"{n}x {cause}" for cause, n in causes.items())
        print(f"error: {lost}/{len(keys)} episodes lost or not run (more than --max-lost-share "
              f"{args.max_lost_share:g}): {why}; rerun the same command to retry them", file=sys.stderr)
        return 1
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
    """``guigym tasks list``: one task id a line. WebArena-v0 lists the suites of its embedded
    sites (``--embedded``, default ``all``; exit 2 when one cannot run here, unless ``--available``)."""
    try:
        opts: dict[str, object] = {}
        embedded = args.embedded or (["all"] if args.env == "WebArena-v0" else None)
        _embedded_env_opts(args.env, embedded, args.available, opts)
        ids = _task_ids(args.env, None, args.suite, opts)
    except ValueError as exc:  # ConfigError / TaskSpecError: an unknown env id or suite
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for t in ids:
        print(t)
    return 0


def _add_embedded_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--embedded", action="append", metavar="NAME|all",
                   help="WebArena-v0: run these embedded sites on loopback and their task suites (fossil, kiwix, "
                        "spirit, oscar, map, comma-separated or repeated; all = every one)")
    p.add_argument("--available", action="store_true",
                   help="with --embedded: run only the sites this machine can run (the others are reported as "
                        "skipped); without it a site that cannot run is an error (exit 2)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="guigym", description="Gymnasium envs and evaluation for GUI agents")
    sub = p.add_subparsers(dest="command", required=True)

    e = sub.add_parser("eval", help="evaluate an agent on a task list with N parallel envs (resumable)")
    e.add_argument("--env", default="MiniWoB-v0", help="registered env id (default: MiniWoB-v0)")
    g = e.add_mutually_exclusive_group()
    g.add_argument("--tasks", help="comma-separated task ids")
    g.add_argument("--suite", help="MiniWoB-v0: 'all' (every regular task), 'flight', or 'oracle' (tasks the oracle "
                                   "solves); OSWorld-v0: 'embedded' or a folder of OSWorld task files")
    _add_embedded_flags(e)
    e.add_argument("--agent", default="random", help="agent spec: random, noop, oracle, NAME:TARGET for agents that take "
                                                     "one (openai:URL, hf:PATH, replay:DIR), or package.module:Factory "
                                                     "for your own")
    e.add_argument("--agent-opt", action="append", metavar="KEY=VALUE",
                   help="agent constructor option, repeatable (e.g. history=2, dialect=uitars, max_new_tokens=64)")
    e.add_argument("--env-opt", action="append", metavar="KEY=VALUE",
                   help="env constructor option, repeatable, JSON values (e.g. for WebArena-v0: "
                        "config_file=tasks.json, 'urls={\"shopping\": \"http://127.0.0.1:7770\"}')")
    e.add_argument("--num-envs", type=int, default=None,
                   help="envs (worker processes) running in parallel (default 2, or one per --serials device)")
    e.add_argument("--serials", default=None, metavar="S1,S2,...",
                   help="Android envs: one adb serial (or host:port) per env, comma-separated; env i (and every "
                        "restart of it) drives device i. Sets --num-envs to their number")
    e.add_argument("--episodes", type=int, default=1, help="seeds per task")
    e.add_argument("--attempts", type=int, default=1, help="attempts per seed (for pass@k)")
    e.add_argument("--seed", type=int, default=0, help="first seed")
    e.add_argument("--max-steps", type=int, default=None, help="override every task's step budget")
    e.add_argument("--out", required=True, help="output directory; rerunning with the same one resumes")
    e.add_argument("--overwrite", action="store_true",
                   help="start afresh in --out, removing its earlier results (a rerun otherwise resumes, and "
                        "refuses when --out holds a different evaluation)")
    e.add_argument("--agent-retries", type=int, default=2,
                   help="retries of an agent call that raises or times out (then its episode is lost; default 2)")
    e.add_argument("--agent-timeout", type=float, default=600.0,
                   help="seconds one agent call may take before it counts as failed (default 600)")
    e.add_argument("--agent-backoff", type=float, default=1.0,
                   help="seconds before the first agent retry, doubling each time (default 1)")
    e.add_argument("--max-lost-share", type=float, default=0.05,
                   help="exit 1 when more than this share of episodes is lost or not run (default 0.05)")
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
    t.add_argument("--suite", default=None, help="MiniWoB: all | flight | oracle (default all); OSWorld: embedded "
                                                 "or a folder of task files")
    _add_embedded_flags(t)
    t.set_defaults(func=cmd_tasks)

    # These own their flags (see their --help); main() hands them the rest of argv.
    sub.add_parser("train", help="GRPO-family training from a YAML recipe (see 'guigym train --help')", add_help=False)
    sub.add_parser("osworld", help="'osworld cache --tasks DIR': download or --import the files OSWorld tasks "
                                   "reference (see 'guigym osworld cache --help')", add_help=False)
    sub.add_parser("android", help="'android standin': start the stand-in Android device with a screen set the "
                                   "task suites run on (see 'guigym android --help')", add_help=False)
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
    ("android",): ("guigym.envs.android.standin_set", "main"),
}
#: ``guigym tasks check --env ID``: the checker of each env (default OSWorld-v0)
_CHECKERS = {"OSWorld-v0": "guigym.envs.desktop.check", "WebArena-v0": "guigym.envs.web.webarena.check",
             "AndroidWorld-v0": "guigym.envs.android.check"}


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
    if getattr(args, "num_envs", None) is not None and args.num_envs < 1:
        print("error: --num-envs must be >= 1", file=sys.stderr)
        return 2
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
