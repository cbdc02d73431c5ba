"""guigym's import graph has no circles and no import from a lower layer into a higher one.

The graph is read from the source with ``ast``: nothing is imported, so the test costs no
torch/playwright start-up and cannot be fooled by an import that happens to be cached.

What counts as an import (docs/architecture.md, "Layers"):

* every ``import`` / ``from ... import`` statement in a module, **at module level and inside
  functions and methods alike**. A lazy import inside a function still makes the module need the
  other one at run time; it only hides the dependency from readers. Both the layer rule and the
  circle rule see it.
* an import under ``if TYPE_CHECKING:`` never runs, so it is left out of the circle rule, but it
  still counts for the layer rule: a lower layer that names a higher layer's types depends on it.
* an import under ``if __name__ == "__main__":`` is not counted: it runs only when the file is
  the script (``python -m``), where the module is ``__main__``, not the guigym module.
* ``from pkg import name`` is an edge to ``pkg.name`` when that is a guigym module, else to
  ``pkg``. Importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``; those implicit
  parent edges are not counted (each package's own imports are its own edges), as import-linter
  and pydeps do.

Layers, lowest first (a module may import its own layer and any lower one)::

    core  <-  envs  <-  wrappers, models, compat  <-  agents, train, serve  <-  eval  <-  cli, doctor

``guigym/__init__.py`` (registers the envs) sits in the ``envs`` layer. ``serve.py`` serves a
model over HTTP, so it is a peer of agents/train (it uses ``models`` and the HTTP guard in
``envs``); ``doctor.py`` is a command of the CLI (it probes envs' optional dependencies), so it
sits with ``cli``. ``envs.desktop.server`` additionally runs on the desktop's own Python and
imports nothing from guigym outside itself.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, NamedTuple, Optional, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent / "guigym"

#: first-level package (or top module) -> layer number; lower may not import higher.
LAYERS: Dict[str, int] = {
    "core": 0,
    "envs": 1,
    "": 1,  # guigym/__init__.py: register_envs()
    "wrappers": 2,
    "models": 2,
    "compat": 2,  # runs other packages' code (OSWorld's DesktopEnv) on envs' desktops
    "agents": 3,
    "train": 3,
    "serve": 3,
    "eval": 4,
    "cli": 5,
    "doctor": 5,
}
LAYER_NAMES = ["core", "envs", "wrappers/models/compat", "agents/train/serve", "eval", "cli/doctor"]


class Edge(NamedTuple):
    src: str
    dst: str
    line: int
    type_only: bool  # under `if TYPE_CHECKING:`


def module_files(root: Path = ROOT) -> Dict[str, Path]:
    """Dotted module name -> file for every ``.py`` under the package (``__init__`` = package)."""
    out: Dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _is_main_guard(test: ast.expr) -> bool:
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and test.left.id == "__name__" and len(test.comparators) == 1
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == "__main__")


def _walk_imports(node: ast.AST, type_only: bool = False) -> Iterator[Tuple[ast.stmt, bool]]:
    """Every Import/ImportFrom below ``node`` (any depth), with whether it is type-only."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, type_only
        elif isinstance(child, ast.If) and _is_main_guard(child.test):
            for stmt in child.orelse:
                yield from _walk_imports(ast.Module(body=[stmt], type_ignores=[]), type_only)
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield from _walk_imports(ast.Module(body=[stmt], type_ignores=[]), True)
            for stmt in child.orelse:
                yield from _walk_imports(ast.Module(body=[stmt], type_ignores=[]), type_only)
        else:
            yield from _walk_imports(child, type_only)


def _resolve(name: str, modules: Dict[str, Path]) -> Optional[str]:
    """The deepest guigym module that ``name`` names (``a.b.Cls`` -> ``a.b``), None if outside."""
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in modules:
            return cand
        parts.pop()
    return None


def import_edges(modules: Optional[Dict[str, Path]] = None) -> List[Edge]:
    """All guigym -> guigym import edges (self-edges dropped)."""
    modules = module_files() if modules is None else modules
    edges: List[Edge] = []
    for mod, path in modules.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for stmt, type_only in _walk_imports(tree):
            targets: List[str] = []
            if isinstance(stmt, ast.Import):
                targets = [a.name for a in stmt.names]
            else:
                if stmt.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - (stmt.level - 1)]
                    prefix = ".".join(base + ([stmt.module] if stmt.module else []))
                else:
                    prefix = stmt.module or ""
                targets = [f"{prefix}.{a.name}" for a in stmt.names]
            for t in targets:
                if not (t == "guigym" or t.startswith("guigym.")):
                    continue
                dst = _resolve(t, modules)
                if dst is not None and dst != mod:
                    edges.append(Edge(mod, dst, stmt.lineno, type_only))
    return edges


def layer_of(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    if top not in LAYERS:
        raise AssertionError(
            f"{module}: its top-level package {top!r} has no layer; add it to LAYERS in "
            "tests/test_import_layers.py and to docs/architecture.md"
        )
    return LAYERS[top]


def layer_violations(edges: List[Edge]) -> List[str]:
    out = []
    for e in edges:
        ls, ld = layer_of(e.src), layer_of(e.dst)
        if ld > ls:
            out.append(
                f"{e.src} ({LAYER_NAMES[ls]}) imports {e.dst} ({LAYER_NAMES[ld]}) at line {e.line}"
            )
    return sorted(out)


def import_cycles(edges: List[Edge]) -> List[List[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    graph: Dict[str, Set[str]] = {}
    for e in edges:
        if not e.type_only:
            graph.setdefault(e.src, set()).add(e.dst)
            graph.setdefault(e.dst, set())
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    sccs: List[List[str]] = []
    counter = [0]

    def strong(v: str) -> None:  # iterative, so deep graphs do not hit the recursion limit
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        sccs.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return sorted(sccs)


def _describe_cycle(comp: List[str], edges: List[Edge]) -> str:
    inside = sorted(
        {f"    {e.src} -> {e.dst} (line {e.line})" for e in edges
         if not e.type_only and e.src in comp and e.dst in comp}
    )
    return f"  circle of {len(comp)}: " + ", ".join(comp) + "\n" + "\n".join(inside)


@pytest.fixture(scope="module")
def edges() -> List[Edge]:
    return import_edges()


def test_no_import_from_a_lower_layer_into_a_higher_one(edges):
    bad = layer_violations(edges)
    assert not bad, "upward imports (see docs/architecture.md, Layers):\n" + "\n".join(bad)


def test_no_import_circles_between_guigym_modules(edges):
    cycles = import_cycles(edges)
    assert not cycles, "import circles:\n" + "\n".join(_describe_cycle(c, edges) for c in cycles)


def test_agents_and_serve_import_nothing_from_train(edges):
    bad = sorted(
        f"{e.src} imports {e.dst} (line {e.line})" for e in edges
        if (e.src.startswith("guigym.agents") or e.src == "guigym.serve")
        and e.dst.startswith("guigym.train")
    )
    assert not bad, "\n".join(bad)


def test_envs_wrappers_eval_and_core_never_import_torch():
    """torch and transformers are the ``train`` extra; a user of the envs, wrappers or the eval
    runner needs neither (DESIGN "Dependency rule"). Lazy imports count here too."""
    heavy = ("torch", "transformers", "vllm", "peft")
    bad = []
    for mod, path in module_files().items():
        if mod.split(".")[1:2] not in (["core"], ["envs"], ["wrappers"], ["eval"]):
            continue
        for stmt, _ in _walk_imports(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in stmt.names] if isinstance(stmt, ast.Import) else [stmt.module or ""]
            if isinstance(stmt, ast.ImportFrom) and stmt.level:
                continue
            bad += [f"{mod} imports {n} (line {stmt.lineno})" for n in names if n.split(".")[0] in heavy]
    assert not bad, "\n".join(bad)


def test_desktop_server_imports_only_itself(edges):
    """The in-desktop server runs on the desktop's Python, where guigym's other parts are absent."""
    srv = "guigym.envs.desktop.server"
    bad = sorted(
        f"{e.src} imports {e.dst} (line {e.line})" for e in edges
        if e.src.startswith(srv) and not e.dst.startswith(srv)
        and e.dst not in ("guigym", "guigym.envs", "guigym.envs.desktop")
    )
    assert not bad, "\n".join(bad)


# -- the checker itself, on small made-up packages ------------------------------------------


def _tree(tmp_path: Path, files: Dict[str, str]) -> Dict[str, Path]:
    for rel, text in files.items():
        p = tmp_path / "guigym" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return module_files(tmp_path / "guigym")


def test_checker_sees_function_level_and_relative_imports_but_not_type_checking_circles(tmp_path):
    mods = _tree(tmp_path, {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/a.py": "def f():\n    from guigym.core import b\n",
        "core/b.py": "from . import c\n",
        "core/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from guigym.core.b import X\n",
        "core/d.py": "from .a import f\n",
        "envs/__init__.py": "",
        "envs/e.py": "import guigym.core.d\n",
        "envs/f.py": "if __name__ == '__main__':\n    import guigym.core.a\n",
    })
    edges = import_edges(mods)
    pairs = {(e.src, e.dst, e.type_only) for e in edges}
    assert ("guigym.core.a", "guigym.core.b", False) in pairs  # function-level
    assert ("guigym.core.b", "guigym.core.c", False) in pairs  # `from . import c`
    assert ("guigym.core.c", "guigym.core.b", True) in pairs  # type-only
    assert ("guigym.core.d", "guigym.core.a", False) in pairs  # `from .a import f`
    assert ("guigym.envs.e", "guigym.core.d", False) in pairs
    assert not any(e.src == "guigym.envs.f" for e in edges)  # script-only import
    assert import_cycles(edges) == []  # b -> c -> b only through TYPE_CHECKING
    assert layer_violations(edges) == []


def test_checker_reports_a_lazy_circle_and_an_upward_import(tmp_path):
    mods = _tree(tmp_path, {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/a.py": "def f():\n    import guigym.envs.b\n",
        "envs/__init__.py": "",
        "envs/b.py": "from guigym.core.a import f\n",
        "envs/pkg/__init__.py": "from .m import g\n",
        "envs/pkg/m.py": "def g():\n    from guigym.envs.pkg import h\n",
    })
    edges = import_edges(mods)
    assert import_cycles(edges) == [
        ["guigym.core.a", "guigym.envs.b"], ["guigym.envs.pkg", "guigym.envs.pkg.m"]
    ]
    assert layer_violations(edges) == [
        "guigym.core.a (core) imports guigym.envs.b (envs) at line 2"
    ]
