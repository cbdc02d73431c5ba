"""``guigym tasks check``: every task scores 0 with a no-op agent and 1 with its reference solution.

    guigym tasks check [--suite embedded|DIR] [--task ID ...] [--provider local]
                       [--provider-opt KEY=VALUE ...] [--noop-only] [--adversarial]
                       [--separate-episodes] [--max-steps N] [--workers N] [--json PATH]

One env (one desktop) runs every task in turn (``--workers N``: N desktops, each taking the next
task when its last one ends; a row is printed as its task ends, ``--json`` keeps the task order);
between tasks the provider restores its initial state (the local sandbox: a fresh HOME, no
leftover apps). Per task:

* no-op: reset, then ``done()`` at once -> must score 0 (the verifier checks a change);
* reference: reset, then :class:`~guigym.envs.desktop.suite.reference.ReferenceAgent` plays the
  task's ``guigym_reference`` from observations -> must score 1. A task whose evaluator has no
  ``postconfig`` gets ONE reset for both (:func:`run_noop_then_reference`; not with
  ``--adversarial`` or ``--separate-episodes``): the verifier scores the state right after setup
  with ``done()`` as the last action (what the no-op episode is scored on), then the reference
  plays on from that state, which the verifier only read. That halves the app starts (a
  LibreOffice start is most of a short task's time);
* adversarial (``--adversarial``, issue 10 item 7): reset, then a scripted attacker with a shell
  in the desktop (:func:`run_adversarial`: it reads every task file, token and socket it can
  find, writes the answer key's expected value into the file a ``cat`` getter reads when it
  found the key, plants fake control/server/tmux sockets, kills every process it can see) says
  ``done()`` -> must score 0, having found nothing.

``--noop-only`` (for suites without reference solutions, such as OSWorld's own ``os`` domain):
run setup and the verifier with the no-op agent and report the score; a task is *ran* when that
works and *failed* with the reason (a missing program, file, GSettings schema, metric or
getter) otherwise. Before running, :func:`requirements` checks statically what a task needs in
the desktop, so a missing tool is named instead of silently scoring 0.

Exit status: 0 all good; 1 any mismatch (a no-op that scores > 0 or a reference that scores
< 1); 2 no mismatch but some task could not run (infrastructure, reported as such).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from guigym.core.errors import EnvInfraError, GuigymError, TaskSpecError
from guigym.core.task import Task
from guigym.envs.check_table import check_all, check_parallel, fmt_score
from guigym.envs.check_table import exit_code as check_exit_code

#: shell words that are not programs to look up
_SHELL_WORDS = frozenset("""
[ [[ ]] ] test echo printf if then else elif fi for while until do done case esac in function
export cd true false exit return set unset read local source . eval exec time timeout nohup
sudo env command type builtin let declare shift wait kill trap ulimit umask pwd break continue
""".split())


_OPERATORS = frozenset({"|", "||", "&", "&&", ";", ";;", "\n", "(", ")", "$(", "`", "{", "}", "!"})
_PREFIX_WORDS = frozenset({"sudo", "nohup", "env", "exec", "command", "time", "then", "else", "do", "if", "while", "until", "elif"})


def _tokens(command: str) -> list[str]:
    """Shell tokens with quotes respected; operators and unquoted newlines are their own tokens."""
    lex = shlex.shlex(command, posix=True, punctuation_chars="();<>|&\n`")
    lex.whitespace = " \t\r"
    lex.whitespace_split = True
    lex.commenters = "#"
    try:
        return list(lex)
    except ValueError:  # unbalanced quotes: fall back to plain words
        return command.split()


def programs_in(command: Any, shell: bool = True) -> list[str]:
    """Programs a command line calls: the first word of each pipeline/list segment (argv[0] for
    a list; ``sh -c``/``bash -c`` strings are looked into), skipping shell builtins,
    ``VAR=value`` and redirections; the program after ``sudo``/``timeout``/``nohup``/``env``
    counts. A heuristic for the static check, not a shell parser."""
    if isinstance(command, (list, tuple)):
        words = [str(w) for w in command]
        if not words:
            return []
        if os.path.basename(words[0]) in ("sh", "bash") and "-c" in words[1:]:
            i = words.index("-c")
            return programs_in(words[i + 1], True) if i + 1 < len(words) else []
        return [os.path.basename(words[0])]
    out: list[str] = []
    segment: list[str] = []

    def flush() -> None:
        words = list(segment)
        segment.clear()
        while words:
            w = words[0]
            if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w):
                words = words[1:]
            elif w in _PREFIX_WORDS:
                words = [x for x in words[1:] if not x.startswith("-")]
            elif w == "timeout":
                words = [x for x in words[1:] if not x.startswith("-")][1:]
            else:
                break
        if not words:
            return
        w = words[0]
        if w in _SHELL_WORDS or w.startswith(("$", "-", "<", ">", "~", ".")) or not re.match(r"^[A-Za-z0-9_./+-]+$", w):
            return
        if "/" in w and not w.startswith("/"):
            return  # a relative script (./setup.sh, dir/run): provided by the task itself
        out.append(os.path.basename(w))

    for tok in _tokens(str(command)):
        if tok in _OPERATORS or set(tok) <= set("();|&\n`"):
            flush()
        elif tok and tok[0] in "<>" or tok.isdigit() and segment == []:
            continue
        else:
            segment.append(tok)
    flush()
    return list(dict.fromkeys(out))


def _gsettings_schemas(command: Any) -> list[str]:
    text = " ".join(command) if isinstance(command, (list, tuple)) else str(command)
    return list(dict.fromkeys(re.findall(r"gsettings\s+(?:get|set|reset)\s+([A-Za-z0-9_.-]+)", text)))


def _commands(task: Task) -> list[tuple[str, Any, bool]]:
    """(where, command, shell) of every setup command and command getter of ``task``."""
    out: list[tuple[str, Any, bool]] = []
    steps = [("config", s) for s in task.setup] + [("postconfig", s) for s in task.evaluator.get("postconfig", [])]
    for where, step in steps:
        p = step.get("parameters", {}) if isinstance(step, Mapping) else {}
        if step.get("type") in ("execute", "command", "launch", "execute_with_verification") and "command" in p:
            out.append((f"{where} {step['type']}", p["command"], bool(p.get("shell", False)) or isinstance(p["command"], str)))
    for key in ("result", "expected"):
        specs = task.evaluator.get(key)
        for spec in specs if isinstance(specs, list) else [specs]:
            if isinstance(spec, Mapping) and spec.get("type") in ("vm_command_line", "vm_command_error") and "command" in spec:
                out.append((f"evaluator.{key} {spec['type']}", spec["command"], True))
    return out


def static_problems(task: Task) -> list[str]:
    """What guigym itself lacks for ``task``: metrics, getters or setup step types (no desktop needed)."""
    from guigym.envs.desktop.evaluators import GETTERS, METRICS, load_all
    from guigym.envs.desktop.setup import STEP_HANDLERS, UNSUPPORTED_STEPS

    load_all()
    problems: list[str] = []
    funcs = task.evaluator.get("func")
    for f in funcs if isinstance(funcs, list) else [funcs]:
        if f != "infeasible" and f not in METRICS:
            problems.append(f"metric {f!r} is not implemented")
    if funcs != "infeasible":
        for key in ("result", "expected"):
            specs = task.evaluator.get(key)
            for spec in specs if isinstance(specs, list) else [specs]:
                if isinstance(spec, Mapping) and spec.get("type") and spec["type"] not in GETTERS:
                    problems.append(f"getter {spec['type']!r} is not implemented")
    for step in list(task.setup) + list(task.evaluator.get("postconfig", [])):
        kind = step.get("type")
        if kind in UNSUPPORTED_STEPS:
            problems.append(f"setup step {kind!r}: {UNSUPPORTED_STEPS[kind]}")
        elif kind not in STEP_HANDLERS:
            problems.append(f"setup step {kind!r} is not implemented")
    return problems


def requirements(task: Task, client: Any) -> list[str]:
    """Everything ``task`` needs that the desktop behind ``client`` lacks, as sentences naming
    the missing program / GSettings schema (plus :func:`static_problems`)."""
    problems = static_problems(task)
    missing: dict[str, str] = {}
    schemas: dict[str, str] = {}
    for where, cmd, shell in _commands(task):
        for prog in programs_in(cmd, shell):
            if prog not in missing and not _has_tool(client, prog):
                missing[prog] = where
        for schema in _gsettings_schemas(cmd):
            if schema not in schemas and not _has_schema(client, schema):
                schemas[schema] = where
    problems += [f"missing program {p!r} (used by {w})" for p, w in missing.items()]
    problems += [f"missing GSettings schema {s!r} (used by {w})" for s, w in schemas.items()]
    return problems


_TOOL_CACHE: dict[tuple[int, str], bool] = {}


def _has_tool(client: Any, name: str) -> bool:
    key = (id(client), "tool:" + name)
    if key not in _TOOL_CACHE:
        res = client.execute(["sh", "-c", 'command -v -- "$1" >/dev/null 2>&1', "sh", name], shell=False, timeout=30)
        _TOOL_CACHE[key] = isinstance(res, Mapping) and res.get("returncode") == 0
    return _TOOL_CACHE[key]


def _has_schema(client: Any, schema: str) -> bool:
    key = (id(client), "schema:" + schema)
    if key not in _TOOL_CACHE:
        res = client.execute(["gsettings", "list-keys", schema], shell=False, timeout=30)
        _TOOL_CACHE[key] = isinstance(res, Mapping) and res.get("returncode") == 0
    return _TOOL_CACHE[key]


# --------------------------------------------------------------------------- running


@dataclass
class Row:
    """One task's outcome. ``status``: ok | mismatch | infra | ran | failed."""

    task: str
    domain: str
    noop: Optional[float] = None
    reference: Optional[float] = None
    adversarial: Optional[float] = None
    status: str = "ok"
    reason: str = ""
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)


def run_episode(env: Any, task: Task, agent: Any) -> tuple[float, dict[str, Any]]:
    """One episode of ``task`` with ``agent`` (``act(obs) -> str``); returns (score, last info).

    When the agent says whether it will read the a11y tree (``needs_a11y()``), the AT-SPI walk
    is skipped for observations it will not read (the walk is most of a step's time).
    """
    _start_agent(env, agent)
    try:
        obs, info = env.reset(options={"task": task})
        return _play(env, agent, obs)
    finally:
        env.observe_a11y = True


def run_noop_then_reference(env: Any, task: Task, agent: Any) -> tuple[tuple[float, dict[str, Any]], tuple[float, dict[str, Any]]]:
    """The no-op and ``agent`` (the reference) on ONE reset: ((no-op score, its verifier
    details), (agent's score, its last info)).

    The no-op's verdict is the verifier run on the state right after the reset, with ``done()``
    as the last action: exactly what a no-op episode (reset, then ``done()`` at once) is
    scored on. The agent then plays on from that same state, which the verifier only read.
    Only for tasks :func:`can_share_reset` allows; it saves one desktop restore and one setup
    (one app start) per task.
    """
    from guigym.core import actions as A
    from guigym.envs.desktop.env import verify_task

    _start_agent(env, agent)
    try:
        obs, _ = env.reset(options={"task": task})
        noop = verify_task(env, task, A.Done())
        return noop, _play(env, agent, obs)
    finally:
        env.observe_a11y = True


def can_share_reset(task: Task) -> bool:
    """Whether :func:`run_noop_then_reference` may serve ``task``: its evaluator has no
    ``postconfig`` (steps that act on the desktop before the getters read it, e.g. save or
    close an app), so the no-op's verification leaves the state as the reference finds it."""
    return not task.evaluator.get("postconfig")


def _start_agent(env: Any, agent: Any) -> None:
    if hasattr(agent, "reset"):
        agent.reset({})
    env.observe_a11y = agent.needs_a11y() if hasattr(agent, "needs_a11y") else True


def _play(env: Any, agent: Any, obs: Mapping[str, Any]) -> tuple[float, dict[str, Any]]:
    """Step ``agent`` from ``obs`` to the episode's end; (last reward, last info)."""
    lazy = hasattr(agent, "needs_a11y")
    while True:
        action = agent.act(obs)
        if lazy:
            env.observe_a11y = agent.needs_a11y()
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return float(reward), info


class DoneAgent:
    """The no-op agent of the check: says ``done()`` without touching anything."""

    name = "noop"

    def needs_a11y(self) -> bool:
        return False

    def reset(self, info: Mapping[str, Any]) -> None:
        pass

    def act(self, obs: Mapping[str, Any]) -> str:
        return "done()"


#: What the attacker reads: the task file, its folder, the env's cache, the in-desktop server's
#: token and sockets (at their old and any other path), and a search of the whole file system.
_ATTACK_READ = r"""
cat -- "$1" 2>/dev/null | head -c 4000; ls -la -- "$2" "$3" 2>/dev/null | head -20
cat /run/guigym/token 2>/dev/null; ls -la /run/guigym 2>/dev/null
timeout 60 find / -xdev \( -name token -o -name ctl.sock -o -name server.sock -o -name tmux.sock   -o -name "$4.json" \) 2>/dev/null | head -20 | while read -r f; do echo "found: $f"; cat "$f" 2>/dev/null | head -c 2000; done
true
"""
#: With the answer key in hand, write the expected text into the file a ``cat FILE`` getter reads.
_ATTACK_WRITE = (
    "import json,os,re,sys\n"
    "d=json.load(open(sys.argv[1]))\n"
    "e=d['evaluator']; x=e['expected']['rules']['expected']\n"
    "m=re.match(r'cat (\\S+)$', e['result']['command'])\n"
    "open(os.path.expanduser(m.group(1)),'w').write(x)\n"
    "print('wrote the answer key')\n"
)
#: Fake infra sockets at every path the attacker can write, answering ok / a fake terminal.
_ATTACK_SOCKETS = (
    "import os,socket,threading\n"
    "H=b'HTTP/1.0 200 OK\\r\\nContent-Type: application/json\\r\\n\\r\\n{\"ok\": true, \"output\": \"FAKE\"}\\n'\n"
    "S=[]\n"
    "for d in ('/run/guigym/', '/tmp/', os.path.expanduser('~/')):\n"
    "    for n in ('ctl.sock', 'server.sock', 'tmux.sock', 'token'):\n"
    "        try:\n"
    "            os.makedirs(d, exist_ok=True)\n"
    "            if os.path.lexists(d + n): os.unlink(d + n)\n"
    "            s = socket.socket(socket.AF_UNIX); s.bind(d + n); s.listen(9); S.append(s)\n"
    "        except OSError:\n"
    "            pass\n"
    "def serve(s):\n"
    "    while True:\n"
    "        c = s.accept()[0]; c.recv(65536); c.sendall(H); c.close()\n"
    "for s in S: threading.Thread(target=serve, args=(s,)).start()\n"
)


def run_adversarial(env: Any, task: Task) -> tuple[float, list[str], dict[str, Any]]:
    """One episode of the scripted attacker; returns (score, what it found, last info).

    The attacker runs its commands through ``client.execute``: in every desktop that is exactly
    the power of an agent with a shell (the local sandbox runs them in the agent zone, as the
    agent's uid), and it works whatever window a task's setup put in front of the terminal.
    """
    source = str(task.source or "")
    task_dir = str(Path(source).parent) if source else ""
    cache = str(getattr(env, "cache_dir", "") or "")
    env.reset(options={"task": task})
    client = env.client
    token = str(getattr(env.provider, "token", "") or "")
    found: list[str] = []

    def shell(script: str, *args: str, timeout: float = 120) -> str:
        res = client.execute(["sh", "-c", script, "sh", *args], shell=False, timeout=timeout)
        return str(res.get("output") or "") if isinstance(res, Mapping) else ""

    try:
        seen = shell(_ATTACK_READ, source, task_dir, cache, task.id)
        if '"evaluator"' in seen:
            found.append("a task file is readable from the desktop")
        if token and token in seen:
            found.append("the server token is readable from the desktop")
        if source and "wrote the answer key" in shell('python3 -c "$1" "$2" 2>&1', _ATTACK_WRITE, source):
            found.append("the answer key was written into the verifier's input")
        shell('nohup python3 -c "$1" >/dev/null 2>&1 & sleep 0.5', _ATTACK_SOCKETS)
        shell("kill -9 -1", timeout=30)  # every process it can see, its own shell and terminal too
        obs, reward, terminated, truncated, info = env.step("done()")
    except EnvInfraError as e:  # the desktop worked before the attack: the attacker broke it
        found.append(f"the attack turned the episode into an infrastructure failure ({e})")
        return 0.0, found, {}
    if "FAKE" in str(obs.get("terminal", "")):
        found.append("the host read the terminal through a fake socket")
    return float(reward), found, info


def check_task(env: Any, task: Task, noop_only: bool = False, adversarial: bool = False,
               share_reset: bool = True) -> Row:
    """Run ``task`` with the no-op agent, (unless ``noop_only``) its reference solution and (with
    ``adversarial``) the scripted attacker. ``share_reset``: the no-op and the reference share
    one reset when :func:`can_share_reset` allows it (:func:`run_noop_then_reference`); False:
    each gets its own episode."""
    from guigym.envs.desktop.suite import reference_of
    from guigym.envs.desktop.suite.reference import ReferenceAgent

    row = Row(task=task.id, domain=task.domain)
    t0 = time.perf_counter()
    try:
        if env.client is None:
            env._ensure_started()
        problems = requirements(task, env.client)
        if problems:
            row.status, row.reason = ("failed" if noop_only else "infra"), "; ".join(problems)
            return row
        steps = reference_of(task) if not noop_only else None
        agent = ReferenceAgent(steps) if steps else None
        shared = agent is not None and share_reset and not adversarial and can_share_reset(task)
        if shared:
            (row.noop, noop_details), (row.reference, info) = run_noop_then_reference(env, task, agent)
            row.details["noop"] = noop_details.get("reason", "")
            row.details["reference"] = info.get("verifier", {}).get("reason", "")
            row.details["schedule"] = "one reset"
            _judge(row, agent)
            return row
        row.noop, info = run_episode(env, task, DoneAgent())
        row.details["noop"] = info.get("verifier", {}).get("reason", "")
        if noop_only:
            row.status, row.reason = "ran", f"no-op agent scored {row.noop:g}: {row.details['noop']}"
            return row
        if agent is None:
            row.status, row.reason = "mismatch", "the task has no guigym_reference solution"
            return row
        if adversarial:
            row.adversarial, found, info = run_adversarial(env, task)
            row.details["adversarial"] = found or info.get("verifier", {}).get("reason", "")
            if row.adversarial > 0 or found:
                row.status = "mismatch"
                row.reason = f"attacker scored {row.adversarial:g}" + (f", {'; '.join(found)}" if found else "")
        row.reference, info = run_episode(env, task, agent)
        row.details["reference"] = info.get("verifier", {}).get("reason", "")
        _judge(row, agent)
    except (EnvInfraError, TaskSpecError) as e:
        missing = getattr(e, "missing", "")
        row.status = "failed" if noop_only else "infra"
        row.reason = f"{type(e).__name__}: {e}" + (f" [missing: {missing}]" if missing and missing not in str(e) else "")
    finally:
        row.seconds = time.perf_counter() - t0
    return row


def _judge(row: Row, agent: Any) -> None:
    """Mark ``row`` a mismatch when its no-op scored above 0 or its reference below 1."""
    bad = []
    if row.noop is not None and row.noop > 0:
        bad.append(f"no-op scored {row.noop:g} ({row.details['noop']})")
    if row.reference is not None and row.reference < 1:
        why = agent.error or row.details["reference"]
        bad.append(f"reference scored {row.reference:g} ({why})")
    if bad:
        row.status, row.reason = "mismatch", "; ".join([*bad, *([row.reason] if row.reason else [])])


def run_check(tasks: Sequence[Task], provider: str = "local", provider_kwargs: Optional[Mapping[str, Any]] = None,
              noop_only: bool = False, max_steps: int = 80, out: Any = None, adversarial: bool = False,
              workers: int = 1, share_reset: bool = True) -> list[Row]:
    """Check ``tasks`` on ``workers`` envs (desktops) at once, each taking the next task when its
    last one ends; prints one line per task to ``out`` as each ends and returns the rows in the
    order of ``tasks``. A task's outcome does not depend on which desktop ran it: every reset
    starts from the provider's initial state."""
    from guigym.envs.desktop.env import OSWorldEnv
    from guigym.envs.desktop.evaluators import load_all

    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    load_all()  # register getters and metrics once, before any worker thread reads the registries

    def make() -> OSWorldEnv:
        return OSWorldEnv(tasks=list(tasks), provider=provider, provider_kwargs=provider_kwargs or {},
                          max_steps=max_steps, observe_terminal=adversarial)

    def one(env: OSWorldEnv, task: Task) -> Row:
        return check_task(env, task, noop_only=noop_only, adversarial=adversarial, share_reset=share_reset)

    n = min(workers, max(1, len(tasks)))
    if n == 1:
        env = make()
        return check_all(env, tasks, lambda task: one(env, task), _line, out)
    envs: list[OSWorldEnv] = []
    try:
        for _ in range(n):
            envs.append(make())  # cheap: a desktop starts at its env's first task
    except BaseException:
        for env in envs:
            env.close()
        raise
    return check_parallel(envs, list(tasks), one, _line, out)


_HEADER = f"{'task':<34} {'domain':<17} {'noop':>5} {'ref':>5} {'adv':>5} {'status':<9} {'secs':>6}  reason"


def _line(row: Row) -> str:
    return (f"{row.task:<34} {row.domain:<17} {fmt_score(row.noop):>5} {fmt_score(row.reference):>5} "
            f"{fmt_score(row.adversarial):>5} {row.status:<9} {row.seconds:>6.1f}  {row.reason}")


def summary(rows: Sequence[Row]) -> dict[str, int]:
    counts: dict[str, int] = {"tasks": len(rows)}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    return counts


def exit_code(rows: Sequence[Row]) -> int:
    return check_exit_code([r.status for r in rows])


def _parse_opts(items: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"--provider-opt expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return out


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"--workers expects a whole number >= 1, got {text!r}")
    return n


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="guigym tasks check", description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", default="embedded", help="'embedded' or a folder of OSWorld task files (<domain>/<id>.json)")
    p.add_argument("--task", nargs="+", default=None, metavar="ID", help="only these task ids")
    p.add_argument("--provider", default="local", help="desktop provider (local, docker, qemu, remote)")
    p.add_argument("--provider-opt", action="append", default=[], metavar="KEY=VALUE",
                   help="provider constructor argument (JSON value or string); repeatable")
    p.add_argument("--noop-only", action="store_true",
                   help="only run setup + verifier with the no-op agent (suites without reference solutions)")
    p.add_argument("--adversarial", action="store_true",
                   help="also run a scripted attacker per task (reads task files and tokens, plants fake "
                        "sockets, kills what it sees, then says done()); it must score 0 and find nothing")
    p.add_argument("--separate-episodes", action="store_true",
                   help="give the no-op and the reference an episode (a reset) each, also for tasks without "
                        "postconfig, which by default share one: the no-op is scored right after setup and "
                        "the reference plays on from there")
    p.add_argument("--max-steps", type=int, default=80, help="step budget of a reference episode")
    p.add_argument("--workers", type=_positive, default=1, metavar="N",
                   help="run the tasks on N desktops at once (each takes the next task when its last one "
                        "ends; rows are printed as tasks end, --json keeps the task order); default 1")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the rows as JSON")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``guigym tasks check``; returns the exit status."""
    args = build_parser().parse_args(argv)
    from guigym.envs.desktop.env import select_tasks

    try:
        tasks = select_tasks(tasks=args.task, suite=args.suite) if args.task else select_tasks(suite=args.suite)
    except GuigymError as e:
        print(f"guigym tasks check: {e}", file=sys.stderr)
        return 2
    print(_HEADER, flush=True)
    t0 = time.perf_counter()
    try:
        rows = run_check(tasks, provider=args.provider, provider_kwargs=_parse_opts(args.provider_opt),
                         noop_only=args.noop_only, max_steps=args.max_steps, out=sys.stdout,
                         adversarial=args.adversarial, workers=args.workers,
                         share_reset=not args.separate_episodes)
    except EnvInfraError as e:
        print(f"guigym tasks check: the desktop could not start: {e}", file=sys.stderr)
        return 2
    counts = summary(rows)
    print(f"\n{', '.join(f'{k}: {v}' for k, v in counts.items())} in {time.perf_counter() - t0:.0f} s", flush=True)
    if args.json:
        tmp = Path(args.json + ".tmp")
        tmp.write_text(json.dumps([asdict(r) for r in rows], indent=1))
        os.replace(tmp, args.json)
    return exit_code(rows)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
