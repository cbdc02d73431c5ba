"""``guigym tasks coverage``: static audit of OSWorld task files against guigym's registries.

Fixture tasks are written here in OSWorld's layout (``test_all.json`` + ``examples/<domain>/``);
the six real OSWorld task files in /work/shared/fixtures/osworld are audited too.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from guigym.cli import main as cli_main
from guigym.core.errors import ConfigError
from guigym.envs.desktop import coverage as C
from guigym.envs.desktop.evaluators import METRICS
from guigym.envs.desktop.setup import download_cache_path

REAL = Path("/work/shared/fixtures/osworld")
URL = "http://127.0.0.1:9/files/book.xlsx"


def step(kind, **params):
    return {"type": kind, "parameters": params}


def task(tid, config=(), **evaluator):
    return {"id": tid, "instruction": f"do {tid}", "config": list(config), "evaluator": evaluator}


TASKS = {
    "os": [task("ok", [step("execute", command=["python", "-c", "pass"])], func="exact_match",
                result={"type": "vm_command_line", "command": "echo hi"}, expected={"type": "rule", "rules": {}}),
           task("needs-metric", func=["no_such_metric_zz", "compare_table"],
                result=[{"type": "vm_file", "path": "a", "dest": "a"}, {"type": "vm_file", "path": "b", "dest": "b"}],
                expected=[{"type": "rule", "rules": {}}, {"type": "rule", "rules": {}}],
                options=[{}, {"rules": [{"type": "sheet_data"}, {"type": "chart_zz"}]}])],
    "chrome": [task("needs-getter", func="exact_match", result={"type": "no_such_getter_zz"},
                    expected={"type": "rule", "rules": {}}),
               task("needs-login", [step("login", settings_file="x.json", platform="googledrive")],
                    func="infeasible"),
               task("needs-web", [step("chrome_open_tabs", urls_to_open=["https://www.example.org/a",
                                                                         "http://127.0.0.1:8000/local"])],
                    func="exact_match", result={"type": "rule", "rules": {}}, expected={"type": "rule", "rules": {}})],
    "gimp": [task("needs-app", [step("launch", command=["gimp_zz", "x.png"]), step("open", path="/home/user/s.pptx"),
                                step("execute", command="echo password | sudo -S apt-get install -y jq && jq . f",
                                     shell=True)],
                  func="infeasible"),
             task("needs-file", [step("download", files=[{"url": URL, "path": "/home/user/book.xlsx"}])],
                  func="compare_table", result={"type": "vm_file", "path": "/home/user/book.xlsx", "dest": "b.xlsx"},
                  expected={"type": "cloud_file", "path": "http://127.0.0.1:9/gold.xlsx", "dest": "gold.xlsx"},
                  options={"rules": [{"type": "sheet_data"}]})],
}


def have(prog: str) -> bool:
    return prog not in ("gimp_zz", "libreoffice")


@pytest.fixture()
def tasks_dir(tmp_path):
    root = tmp_path / "evaluation_examples"
    for domain, items in TASKS.items():
        (root / "examples" / domain).mkdir(parents=True)
        for t in items:
            (root / "examples" / domain / f"{t['id']}.json").write_text(json.dumps(t))
    (root / "test_all.json").write_text(json.dumps({d: [t["id"] for t in v] for d, v in TASKS.items()}))
    return root


def by_id(audits):
    return {a.id: a for a in audits}


def test_each_blocker_is_named(tasks_dir, tmp_path):
    audits = by_id(C.audit_dir(tasks_dir, tmp_path / "cache", has_program=have))
    assert set(audits) == {t["id"] for v in TASKS.values() for t in v}
    ok = audits["ok"]
    assert ok.code_complete and ok.runnable and ok.blocked == {}
    assert ok.setup_types == ["execute"] and ok.getter_types == ["vm_command_line", "rule"]
    assert ok.programs == ["python"] and ok.metrics == ["exact_match"]
    m = audits["needs-metric"]
    assert m.blocked == {"metric": ["no_such_metric_zz", "compare_table:chart_zz"]} and not m.code_complete
    assert m.table_rules == ["sheet_data", "chart_zz"]
    assert audits["needs-getter"].blocked == {"getter": ["no_such_getter_zz"]}
    login = audits["needs-login"]
    assert login.blocked == {"setup": ["login"], "network": ["setup login"]} and not login.code_complete
    web = audits["needs-web"]
    assert web.code_complete and not web.runnable
    assert web.blocked == {"network": ["https://www.example.org/a"]}  # the loopback page needs no web
    app = audits["needs-app"]
    assert app.programs == ["gimp_zz", "libreoffice", "apt-get", "jq"]
    assert app.blocked == {"app": ["gimp_zz", "libreoffice"], "network": ["program apt-get"]}
    assert app.code_complete and not app.runnable
    f = audits["needs-file"]
    assert f.code_complete and f.blocked == {"cache": [URL, "http://127.0.0.1:9/gold.xlsx"]}
    assert [d["cached"] for d in f.downloads] == [False, False]


def test_cached_files_make_a_task_runnable(tasks_dir, tmp_path):
    cache = tmp_path / "cache"
    dl = download_cache_path(cache / "setup", URL, "/home/user/book.xlsx")
    gold = cache / "eval" / "needs-file" / "gold.xlsx"
    for p in (dl, gold):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
    f = by_id(C.audit_dir(tasks_dir, cache, has_program=have))["needs-file"]
    assert f.runnable and [d["cache_file"] for d in f.downloads] == [str(dl), str(gold)]


def test_registries_are_read_live(tasks_dir, tmp_path):
    name = "no_such_metric_zz"
    assert name not in C.Registries.live().metrics
    METRICS.register(name, lambda *a, **k: 1.0)
    try:
        m = by_id(C.audit_dir(tasks_dir, tmp_path, has_program=have))["needs-metric"]
        assert m.blocked == {"metric": ["compare_table:chart_zz"]}
    finally:
        METRICS._items.pop(name)  # the registry has no unregister; keep other tests clean


def test_summary_counts_per_domain_and_missing_items(tasks_dir, tmp_path):
    doc = C.summarize(C.audit_dir(tasks_dir, tmp_path, has_program=have))
    assert doc["domains"]["os"] == {"tasks": 2, "code_complete": 1, "runnable": 1, "blocked": {"metric": 1}}
    assert doc["domains"]["chrome"] == {"tasks": 3, "code_complete": 1, "runnable": 0,
                                        "blocked": {"getter": 1, "setup": 1, "network": 2}}
    assert doc["totals"]["tasks"] == 7 and doc["totals"]["code_complete"] == 4 and doc["totals"]["runnable"] == 1
    assert doc["missing"]["metric"] == {"no_such_metric_zz": 1, "compare_table:chart_zz": 1}
    assert doc["missing"]["app"] == {"gimp_zz": 1, "libreoffice": 1}


def test_index_with_a_missing_file_and_other_layouts(tasks_dir, tmp_path):
    index = json.loads((tasks_dir / "test_all.json").read_text())
    index["os"].append("gone")
    (tasks_dir / "test_all.json").write_text(json.dumps(index))
    audits = by_id(C.audit_dir(tasks_dir, tmp_path, has_program=have))
    assert list(audits["gone"].blocked) == ["invalid"] and not audits["gone"].code_complete
    # the examples folder itself (no index), one domain folder, and the index file
    assert len(C.find_task_files(tasks_dir / "examples")) == 7
    assert [d for d, _ in C.find_task_files(tasks_dir / "examples" / "gimp")] == ["gimp", "gimp"]
    assert len(C.find_task_files(tasks_dir / "test_all.json")) == 8
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no OSWorld task files"):
        C.find_task_files(tmp_path / "empty")


def test_command_programs():
    assert C.command_programs(["libreoffice", "--calc"]) == ["libreoffice"]
    assert C.command_programs("FOO=1 nohup vlc --x", shell=False) == ["vlc"]
    assert C.command_programs("FOO=1 nohup vlc -q a.mp4", shell=True) == ["vlc"]
    assert C.command_programs("cd ~/x && ./setup.sh; echo $HOME | sudo -u root -S tee f", shell=True) == ["tee"]
    assert C.command_programs("mkdir -p a\ncp a b || rm b", shell=True) == ["mkdir", "cp", "rm"]
    assert C.command_programs(["python -c 'x'"], shell=True) == ["python"]
    assert C.command_programs("echo 'unterminated", shell=True) == []


def test_cli_text_and_json(tasks_dir, tmp_path, capsys):
    assert cli_main(["tasks", "coverage", "--tasks", str(tasks_dir), "--cache-dir", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["totals"]["tasks"] == 7 and {t["id"] for t in doc["tasks"]} >= {"ok", "needs-file"}
    assert doc["cache_dir"] == str(tmp_path)
    assert cli_main(["tasks", "coverage", "--tasks", str(tasks_dir), "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for word in ("chrome", "gimp", "os", "TOTAL", "no_such_getter_zz", "compare_table:chart_zz", "setup [1]: login"):
        assert word in out
    assert cli_main(["tasks", "coverage", "--tasks", str(tmp_path / "nope")]) == 2


def test_real_osworld_tasks(tmp_path):
    if not REAL.is_dir():
        pytest.skip(f"{REAL} (real OSWorld task fixtures) is not on this machine")
    audits = by_id(C.audit_dir(REAL, tmp_path, has_program=lambda p: p not in ("gimp", "vlc")))
    assert len(audits) == 6 and all(a.code_complete for a in audits.values())
    vlc = audits["9195653c-f4aa-453d-aa95-787f6ccfaae9"]
    assert vlc.metrics == ["check_qt_max_volume"] and vlc.getter_types == ["vlc_config", "rule"]
    assert vlc.blocked == {"app": ["vlc"]}
    gimp = audits["7767eef2-56a3-4cea-8c9f-48c070c7d65b"]
    assert gimp.getter_types == ["gimp_config_file", "rule"] and gimp.blocked == {"app": ["gimp"]}
    assert audits["3720f614-37fd-4d04-8a6b-76f54f8c222d"].metrics == ["infeasible"]
    chrome = audits["2ae9ba84-3a0d-4d4c-8338-3a1478dc5fe3"]
    assert chrome.getter_types == ["profile_name", "rule"] and chrome.runnable
    assert "google-chrome" in chrome.programs
