"""Every task count the README and the docs state is the count the code loads, and documented
action semantics match the dialects (issue 34: the docs gave 72, 77 and 78 WebArena tasks)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8")
        for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]}


@pytest.fixture(scope="module")
def counts() -> dict[str, int]:
    """The counts, from the code that loads each suite."""
    from guigym.envs.android.androidlab_tasks import load_dir
    from guigym.envs.android.androidworld import TASKS
    from guigym.envs.android.env import ANDROIDLAB_SUITE
    from guigym.envs.desktop.suite import embedded_tasks
    from guigym.envs.web.miniwob import select_tasks
    from guigym.envs.web.webarena.sites import EMBEDDED, suite_task_count

    lab = load_dir(ANDROIDLAB_SUITE)
    out = {"miniwob": len(select_tasks(suite="all")), "flight": len(select_tasks(suite="flight")),
           "osworld": len(list(embedded_tasks())), "androidlab": len(lab),
           "androidlab_apps": len({t.extra.get("package") for t in lab}),
           "androidworld": len(TASKS.names()),
           "androidworld_apps": len({a for n in TASKS.names() for a in TASKS.get(n).app_names})}
    out.update({f"webarena_{name}": suite_task_count(name) for name in EMBEDDED})
    out["webarena"] = sum(out[f"webarena_{name}"] for name in EMBEDDED)
    return out


def stated(pattern: str) -> list[tuple[str, int]]:
    """(doc, number) for every match of ``pattern`` (its one group is the number) in README + docs."""
    return [(doc, int(m.group(1))) for doc, text in DOCS.items()
            for m in re.finditer(pattern, text.replace("\n", " "))]


# (what, regex with the number as its group, key of counts); each must match somewhere
CLAIMS = [
    ("MiniWoB++ regular tasks", r"the (\d+) MiniWoB\+\+ tasks of the `miniwob` package", "miniwob"),
    ("MiniWoB++ tasks with flights", r"the (\d+) MiniWoB\+\+ tasks shipped", None),
    ("OSWorld embedded suite", r"(\d+) embedded tasks", "osworld"),
    ("OSWorld embedded suite", r"guigym's own suite of (\d+) tasks", "osworld"),
    ("WebArena embedded tasks", r"runs (\d+) WebArena-format tasks", "webarena"),
    ("WebArena embedded tasks", r"their (\d+) tasks", "webarena"),
    ("WebArena embedded tasks", r"runs the (\d+) tasks\s+written for them", "webarena"),
    ("Fossil suite", r"Fossil \(`gitlab`, (\d+) tasks\)", "webarena_fossil"),
    ("kiwix suite", r"kiwix-serve \(`wikipedia`, (\d+)\)", "webarena_kiwix"),
    ("spirit suite", r"django-spirit\s+\(`reddit`, (\d+)\)", "webarena_spirit"),
    ("oscar suite", r"django-oscar \(`shopping` and `shopping_admin`, (\d+)\)", "webarena_oscar"),
    ("map suite", r"OpenStreetMap data \(`map`, (\d+)\)", "webarena_map"),
    ("AndroidLab tasks", r"AndroidLab's (\d+) tasks", "androidlab"),
    ("AndroidLab apps", r"AndroidLab's \d+ tasks over (\d+) apps", "androidlab_apps"),
    ("AndroidWorld tasks", r"(\d+) AndroidWorld(?:-style)? tasks", "androidworld"),
    ("AndroidWorld apps", r"\d+ AndroidWorld(?:-style)? tasks over (\d+) apps", "androidworld_apps"),
]


@pytest.mark.parametrize("what,pattern,key", CLAIMS, ids=[f"{c[0]}: {c[1][:30]}" for c in CLAIMS])
def test_each_stated_count_is_the_count_the_code_loads(counts, what, pattern, key):
    found = stated(pattern)
    assert found, f"no doc states the {what} count any more ({pattern!r}): update this test with the docs"
    want = counts["miniwob"] + counts["flight"] if key is None else counts[key]
    wrong = [(doc, n) for doc, n in found if n != want]
    assert not wrong, f"{what}: the code loads {want}, the docs say {wrong}"


def test_webarena_scroll_is_documented_as_the_dialect_scrolls():
    """docs said ``scroll [down]`` moves one viewport while the env's dialect moves 500 px."""
    from guigym.core import actions as A
    from guigym.core.dialect import parse_action

    down = parse_action("scroll [down]", "webarena")
    assert isinstance(down, A.Scroll) and down.dy > 0
    row = next(line for line in DOCS["docs/envs/webarena.md"].splitlines() if line.startswith("| `scroll [down]`"))
    assert f"{down.dy:g} px" in row, row
    assert "viewport height" not in row
