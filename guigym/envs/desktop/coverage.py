"""Static audit of OSWorld task files: what each needs and whether this machine has it.

``guigym tasks coverage --tasks DIR [--cache-dir D] [--json]`` reads every OSWorld task JSON
under ``DIR`` without running anything and lists, per task, its setup step types, getter types,
metric names, ``compare_table`` rule types, the programs its steps run, the files it downloads
and the live web pages it needs. Each task is then

* **code-complete** when guigym implements every setup type (:data:`STEP_HANDLERS`), getter
  (:data:`GETTERS`), metric (:data:`METRICS`) and compare_table rule it names, and
* **runnable here** when it is code-complete and also needs no program this machine lacks
  (``app``), no live web (``network``) and no download missing from the cache (``cache``).

The registries are read live (:func:`guigym.envs.desktop.evaluators.load_all` first), so a
newly registered metric counts without touching this file.

``DIR`` may be OSWorld's ``evaluation_examples`` (a ``test_all.json`` index + ``examples/``),
an ``examples`` folder (``<domain>/<id>.json``), one domain folder, or an index JSON file
(``{domain: [id, ...]}``) next to an ``examples`` folder.

JSON output (``--json``)::

    {"tasks_dir": str, "cache_dir": str,
     "totals": {"tasks", "code_complete", "runnable", "blocked": {category: n_tasks}},
     "domains": {domain: {same keys as totals}},
     "missing": {category: {item: n_tasks}},
     "tasks": [{"id", "domain", "path", "setup_types", "getter_types", "metrics",
                "table_rules", "programs", "downloads": [{"url", "cache_file", "cached"}],
                "live_urls", "code_complete", "runnable", "blocked": {category: [item, ...]}}]}
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import urllib.parse
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from guigym.core.errors import ConfigError
from guigym.envs.desktop.tasks import find_task_files  # noqa: F401  (re-exported, in __all__)

__all__ = ["CATEGORIES", "TaskAudit", "Registries", "find_task_files", "audit_task", "audit_dir",
           "summarize", "main"]

#: blocker categories, code ones first
CODE_CATEGORIES = ("metric", "getter", "setup")
RUNTIME_CATEGORIES = ("app", "network", "cache")
CATEGORIES = CODE_CATEGORIES + RUNTIME_CATEGORIES + ("invalid",)

#: getters that fetch a live web page themselves (OSWorld opens it with Playwright or requests);
#: guigym's active_tab_info reads the tab already open instead (evaluators/getters/browser.py), so it is not here
NETWORK_GETTERS = frozenset({
    "info_from_website", "page_info", "pdf_from_url", "gotoRecreationPage_and_get_html_content",
    "googledrive_file",
})
#: metrics registered only to refuse, with a reason (counted as missing code): OSWorld's
#: check_python_file_by_test_suite imports the agent's code, which may not run on the host, and a
#: metric has no way into the desktop (evaluators/metrics/misc.py)
REFUSED_METRICS = frozenset({"check_python_file_by_test_suite"})
#: setup types that talk to a web service
NETWORK_STEPS = frozenset({"googledrive", "login", "proxy"})
#: programs whose use means package downloads (``apt-get install``, ``pip install``)
NETWORK_PROGRAMS = frozenset({"apt", "apt-get", "pip", "pip3", "wget", "curl", "git"})
#: words that are shell syntax or builtins, not programs to look up
_SHELL_WORDS = frozenset({
    "cd", "echo", "export", "set", "unset", "source", ".", "exit", "true", "false", "[", "[[",
    "test", "if", "then", "else", "elif", "fi", "for", "do", "done", "while", "until", "case",
    "esac", "eval", "exec", "read", "printf", "local", "return", "shift", "{", "}", "(", ")",
    "!", "in", "function", "trap", "wait", "ulimit", "umask", "alias", "type", "command",
})
#: programs that run another program named by their arguments
_PREFIX_PROGRAMS = frozenset({"sudo", "nohup", "env", "timeout", "nice", "setsid"})
#: the application OSWorld's Ubuntu VM opens a file with (``open`` steps), by extension
OPEN_WITH = {
    ".xlsx": "libreoffice", ".xls": "libreoffice", ".ods": "libreoffice", ".csv": "libreoffice",
    ".docx": "libreoffice", ".doc": "libreoffice", ".odt": "libreoffice", ".rtf": "libreoffice",
    ".pptx": "libreoffice", ".ppt": "libreoffice", ".odp": "libreoffice",
    ".pdf": "evince", ".mp4": "vlc", ".mp3": "vlc", ".wav": "vlc", ".avi": "vlc", ".mkv": "vlc",
    ".txt": "gedit", ".json": "gedit", ".py": "gedit", ".md": "gedit",
    ".png": "eog", ".jpg": "eog", ".jpeg": "eog", "": "nautilus",
}
#: a program the desktop provides under another name (guigym's sandbox runs Chromium as
#: ``google-chrome``)
ALIASES = {"google-chrome": ("google-chrome-stable", "chromium", "chromium-browser"),
           "python": ("python3",), "pip": ("pip3",)}
_SANDBOX_BIN = Path(__file__).resolve().parent / "sandbox_bin"
#: sandbox_bin entries that are stand-ins needing a real program behind them
_WRAPPERS_NEEDING = {"google-chrome": "chromium", "chromium": "chromium"}


# --------------------------------------------------------------------------- registries


@dataclass
class Registries:
    """Names guigym implements. :meth:`live` reads the current registries."""

    metrics: frozenset[str]
    getters: frozenset[str]
    setup: frozenset[str]
    table_rules: frozenset[str]

    @classmethod
    def live(cls) -> "Registries":
        """Load every getter and metric module (:func:`~guigym.envs.desktop.evaluators.load_all`),
        then read METRICS, GETTERS, STEP_HANDLERS and compare_table's rule types."""
        from guigym.envs.desktop.evaluators import GETTERS, METRICS, load_all
        from guigym.envs.desktop.evaluators.metrics.table import _SUPPORTED_TABLE_RULES as rules
        from guigym.envs.desktop.setup import STEP_HANDLERS

        load_all()
        return cls(metrics=(frozenset(METRICS.names()) - REFUSED_METRICS) | {"infeasible"},
                   getters=frozenset(GETTERS.names()),
                   setup=frozenset(STEP_HANDLERS), table_rules=frozenset(rules))


def host_has_program(name: str) -> bool:
    """Whether the local desktop can run ``name``: an absolute path that exists, or a name in
    PATH or guigym's sandbox_bin (a stand-in counts only with the program it wraps)."""
    if name.startswith("/"):
        if os.path.exists(name):
            return True
        # ``/usr/bin/thunderbird`` in a task: the same program elsewhere in PATH serves too
        return os.path.dirname(name) in ("/bin", "/usr/bin", "/usr/local/bin") and \
            host_has_program(os.path.basename(name))
    for candidate in (name, *ALIASES.get(name, ())):
        if shutil.which(candidate) or ((_SANDBOX_BIN / candidate).is_file() and candidate not in _WRAPPERS_NEEDING):
            return True
    return False


# --------------------------------------------------------------------------- one task


@dataclass
class TaskAudit:
    """What one task needs; ``blocked`` maps a category of :data:`CATEGORIES` to missing items."""

    id: str
    domain: str
    path: str
    setup_types: list[str] = field(default_factory=list)
    getter_types: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    table_rules: list[str] = field(default_factory=list)
    programs: list[str] = field(default_factory=list)
    downloads: list[dict[str, Any]] = field(default_factory=list)
    live_urls: list[str] = field(default_factory=list)
    blocked: dict[str, list[str]] = field(default_factory=dict)

    @property
    def code_complete(self) -> bool:
        return not any(self.blocked.get(c) for c in CODE_CATEGORIES + ("invalid",))

    @property
    def runnable(self) -> bool:
        return not any(self.blocked.values())

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "code_complete": self.code_complete, "runnable": self.runnable}


def _add(items: list[str], value: str) -> None:
    if value and value not in items:
        items.append(value)


def _is_live(url: str) -> bool:
    """An http(s) url on a host other than this machine."""
    p = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
    return p.scheme in ("http", "https") and (p.hostname or "") not in ("", "localhost", "127.0.0.1", "::1")


def command_programs(command: Any, shell: Any = False) -> list[str]:
    """Programs a setup command runs, as far as can be told statically.

    A list without ``shell`` runs its first element; a shell string is split on ``;``, ``&&``,
    ``||``, ``|`` and newlines and each part's first word counts, past ``VAR=value``
    assignments, builtins and ``sudo -S``-style prefixes. Words holding ``$`` or starting with
    ``./`` are skipped (not knowable statically).

    >>> command_programs("echo password | sudo -S apt-get update && xsel -bc", shell=True)
    ['apt-get', 'xsel']
    >>> command_programs(["libreoffice", "--calc"])
    ['libreoffice']
    """
    if isinstance(shell, str):
        shell = shell.strip().lower() in ("1", "true", "yes", "on")
    if isinstance(command, list):
        if not command:
            return []
        if not shell:
            words = [str(command[0])] + [str(c) for c in command[1:]]
            return _first_programs([words])
        command = " ".join(str(c) for c in command)
    if not isinstance(command, str):
        return []
    if not shell:
        return _first_programs([command.split()])
    try:
        lex = shlex.shlex(command.replace("\n", " ; "), posix=True, punctuation_chars=";&|()<>")
        lex.whitespace_split = True
        tokens = list(lex)
    except ValueError:
        return []
    parts: list[list[str]] = [[]]
    for tok in tokens:
        if tok and set(tok) <= set(";&|()"):
            parts.append([])
        else:
            parts[-1].append(tok)
    return _first_programs(parts)


def _first_programs(parts: Iterable[Sequence[str]]) -> list[str]:
    out: list[str] = []
    for words in parts:
        i = 0
        while i < len(words):
            w = words[i]
            if "=" in w and w.split("=", 1)[0].isidentifier():
                i += 1
                continue
            if w in _PREFIX_PROGRAMS:
                i += 1
                while i < len(words) and words[i].startswith("-"):
                    i += 2 if words[i] in ("-u", "-g") else 1  # sudo -u USER takes a value
                continue
            break
        if i >= len(words):
            continue
        w = words[i]
        if w in _SHELL_WORDS or "$" in w or w.startswith(("./", "~", "<", ">")) or not w.strip():
            continue
        _add(out, w)
    return out


def _getter_specs(evaluator: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    specs: list[Mapping[str, Any]] = []
    for key in ("result", "expected"):
        value = evaluator.get(key)
        for s in value if isinstance(value, list) else [value]:
            if isinstance(s, Mapping) and isinstance(s.get("type"), str):
                specs.append(s)
    return specs


def audit_task(data: Any, domain: str, path: Path, reg: Registries, cache_dir: Path,
               has_program: Callable[[str], bool] = host_has_program) -> TaskAudit:
    """Audit one parsed task object (see :class:`TaskAudit`)."""
    from guigym.envs.desktop.cache import cloud_file_targets, download_targets

    if not isinstance(data, Mapping) or not isinstance(data.get("evaluator"), Mapping):
        a = TaskAudit(id=path.stem, domain=domain, path=str(path))
        a.blocked["invalid"] = ["not an OSWorld task object with an 'evaluator'"]
        return a
    a = TaskAudit(id=str(data.get("id", path.stem)), domain=domain, path=str(path))
    ev = data["evaluator"]
    steps = [s for s in list(data.get("config") or []) + list(ev.get("postconfig") or []) if isinstance(s, Mapping)]
    blocked: dict[str, list[str]] = {c: [] for c in CATEGORIES}
    for s in steps:
        kind = str(s.get("type"))
        p = s.get("parameters") if isinstance(s.get("parameters"), Mapping) else {}
        _add(a.setup_types, kind)
        if kind not in reg.setup:
            _add(blocked["setup"], kind)
        if kind in NETWORK_STEPS:
            _add(blocked["network"], f"setup {kind}")
        if kind in ("launch", "execute", "command", "execute_with_verification"):
            for prog in command_programs(p.get("command"), p.get("shell", False)):
                _add(a.programs, prog)
                if kind == "launch":  # a launched program's url arguments are opened live
                    for arg in p.get("command") if isinstance(p.get("command"), list) else []:
                        if isinstance(arg, str) and arg.startswith(("http://", "https://")) and _is_live(arg):
                            _add(a.live_urls, arg)
        elif kind == "open" and isinstance(p.get("path"), str):
            app = OPEN_WITH.get(os.path.splitext(p["path"])[1].lower())
            _add(a.programs, app or "xdg-open")
        elif kind == "chrome_open_tabs":
            for url in p.get("urls_to_open") or []:
                if isinstance(url, str) and _is_live(url):
                    _add(a.live_urls, url)
    for prog in a.programs:
        base = os.path.basename(prog)
        if base in NETWORK_PROGRAMS:
            _add(blocked["network"], f"program {base}")
        if not has_program(prog):
            _add(blocked["app"], prog)
    for url in a.live_urls:
        _add(blocked["network"], url)
    func = ev.get("func")
    for name in func if isinstance(func, list) else [func]:
        if isinstance(name, str):
            _add(a.metrics, name)
            if name not in reg.metrics:
                _add(blocked["metric"], name)
    opts = ev.get("options")
    names = func if isinstance(func, list) else [func]
    opts_l = opts if isinstance(opts, list) else [opts] * len(names)
    for name, o in zip(names, opts_l):
        if name == "compare_table" and isinstance(o, Mapping):
            for rule in o.get("rules") or []:
                if isinstance(rule, Mapping) and isinstance(rule.get("type"), str):
                    _add(a.table_rules, rule["type"])
                    if rule["type"] not in reg.table_rules:
                        _add(blocked["metric"], f"compare_table:{rule['type']}")
    for g in _getter_specs(ev):
        kind = g["type"]
        _add(a.getter_types, kind)
        if kind not in reg.getters:
            _add(blocked["getter"], kind)
        if kind in NETWORK_GETTERS:
            _add(blocked["network"], f"getter {kind}")
    for url, cache_file in download_targets(data, cache_dir) + cloud_file_targets(data, cache_dir):
        cached = cache_file.is_file()
        a.downloads.append({"url": url, "cache_file": str(cache_file), "cached": cached})
        if not cached:
            _add(blocked["cache"], url)
    base_dir = path.parent
    for s in steps:
        if s.get("type") == "upload_file":
            for f in (s.get("parameters") or {}).get("files") or []:
                lp = f.get("local_path") if isinstance(f, Mapping) else None
                if isinstance(lp, str) and not (base_dir / lp).is_file():
                    _add(blocked["cache"], lp)
    a.blocked = {c: v for c, v in blocked.items() if v}
    return a


def audit_dir(root: Path, cache_dir: Path, reg: Optional[Registries] = None,
              has_program: Callable[[str], bool] = host_has_program) -> list[TaskAudit]:
    """Audit every task under ``root``; an unreadable file becomes an ``invalid`` entry."""
    reg = reg or Registries.live()
    out: list[TaskAudit] = []
    for domain, f in find_task_files(Path(root)):
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            a = TaskAudit(id=f.stem, domain=domain, path=str(f))
            a.blocked["invalid"] = [f"unreadable task file: {getattr(e, 'strerror', None) or e}"]
            out.append(a)
            continue
        out.append(audit_task(data, domain, f, reg, Path(cache_dir), has_program))
    return out


# --------------------------------------------------------------------------- summary / output


def _counts(audits: Sequence[TaskAudit]) -> dict[str, Any]:
    blocked = Counter(c for a in audits for c in a.blocked)
    return {"tasks": len(audits), "code_complete": sum(a.code_complete for a in audits),
            "runnable": sum(a.runnable for a in audits),
            "blocked": {c: blocked[c] for c in CATEGORIES if blocked[c]}}


def summarize(audits: Sequence[TaskAudit], tasks_dir: str = "", cache_dir: str = "") -> dict[str, Any]:
    """The ``--json`` document (see the module doc)."""
    domains: dict[str, list[TaskAudit]] = {}
    for a in audits:
        domains.setdefault(a.domain, []).append(a)
    missing: dict[str, Counter[str]] = {c: Counter() for c in CATEGORIES}
    for a in audits:
        for c, items in a.blocked.items():
            missing[c].update(items)
    return {"tasks_dir": tasks_dir, "cache_dir": cache_dir, "totals": _counts(audits),
            "domains": {d: _counts(v) for d, v in sorted(domains.items())},
            "missing": {c: dict(m.most_common()) for c, m in missing.items() if m},
            "tasks": [a.to_json() for a in audits]}


def _print_report(doc: Mapping[str, Any], top: int, out: Any) -> None:
    cols = ["domain", "tasks", "code-complete", "runnable", *CATEGORIES]
    rows = []
    for name, c in list(doc["domains"].items()) + [("TOTAL", doc["totals"])]:
        rows.append([name, c["tasks"], c["code_complete"], c["runnable"],
                     *(c["blocked"].get(k, 0) for k in CATEGORIES)])
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        Console = None  # type: ignore[assignment]
    if Console is not None:
        console = Console(file=out, width=140)
        table = Table(title=f"OSWorld task coverage ({doc['tasks_dir']}); 'blocked' columns count tasks")
        for c in cols:
            table.add_column(c, justify="left" if c == "domain" else "right")
        for r in rows:
            table.add_row(*map(str, r), end_section=r[0] == list(doc["domains"])[-1] if doc["domains"] else False)
        console.print(table)
    else:
        print("  ".join(f"{c:>13}" for c in cols), file=out)
        for r in rows:
            print("  ".join(f"{str(v):>13}" for v in r), file=out)
    print(f"\nmissing items (tasks blocked), cache dir {doc['cache_dir']}:", file=out)
    for cat, items in doc["missing"].items():
        shown = list(items.items())
        names = ", ".join(f"{k} ({v})" for k, v in shown[:top])
        more = f", ... {len(shown) - top} more (see --json)" if len(shown) > top else ""
        print(f"  {cat} [{len(shown)}]: {names}{more}", file=out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``guigym tasks coverage``: exit 0 after printing (2 on a bad argument)."""
    from guigym.envs.desktop.cache import default_cache_dir

    p = argparse.ArgumentParser(prog="guigym tasks coverage", description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", required=True, help="OSWorld evaluation_examples dir, examples dir, "
                                                  "domain dir or index JSON (test_all.json)")
    p.add_argument("--cache-dir", default=None,
                   help=f"the cache 'guigym osworld cache' fills (default {default_cache_dir()})")
    p.add_argument("--json", action="store_true", help="print the full audit as JSON")
    p.add_argument("--top", type=int, default=25, help="missing items listed per category")
    args = p.parse_args(argv)
    cache_dir = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    try:
        audits = audit_dir(Path(args.tasks), cache_dir)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    doc = summarize(audits, str(args.tasks), str(cache_dir))
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        print()
    else:
        _print_report(doc, args.top, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
