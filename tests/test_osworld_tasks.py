"""OSWorld task JSON loading (envs/desktop/tasks.py) and OSWorld-compatible metrics
(envs/desktop/evaluators/). Pure Python: no desktop, no VM.

The task fixtures are six real OSWorld files, copied unmodified; the expected values below were
read from those files by hand.
"""
from __future__ import annotations

import copy
import importlib.util
import json
import os
import random
from pathlib import Path

import pytest

from guigym.core import Task, TaskSpecError
from guigym.envs.desktop import evaluators as EV
from guigym.envs.desktop.evaluators.metrics import docs as DOCS, general as M, table as TABLE
from guigym.envs.desktop.evaluators.base import MetricDependencyError
from guigym.envs.desktop.evaluators.metrics.docs import score_paragraphs
from guigym.envs.desktop.tasks import (
    load_osworld_dir, load_osworld_task, osworld_vars, parse_osworld_task, substitute, to_osworld_dict,
)
from guigym.envs.desktop.evaluators.textsim import lcs_length, ratio


def _fixture_dir() -> Path:
    for cand in (os.environ.get("GUIGYM_OSWORLD_FIXTURES"),
                 Path(__file__).parent / "fixtures" / "osworld",
                 Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "osworld",
                 "/work/shared/fixtures/osworld"):
        if cand and Path(cand).is_dir():
            return Path(cand)
    pytest.skip("OSWorld task fixtures not found (set GUIGYM_OSWORLD_FIXTURES)")


@pytest.fixture(scope="module")
def fixtures() -> Path:
    return _fixture_dir()


# (domain, id) -> fields read by hand from the JSON files
EXPECTED = {
    ("chrome", "2ae9ba84-3a0d-4d4c-8338-3a1478dc5fe3"): dict(
        instruction_start="Lately I have changed my English name to Thomas.",
        setup_types=["launch", "launch"], func="exact_match", snapshot="chrome",
        source="https://superuser.com/questions/1393683/how-to-change-the-username-in-google-chrome-profiles?rq=1",
        related_apps=["chrome"], trajectory="trajectories/", postconfig=["launch", "launch", "sleep"]),
    ("chrome", "3720f614-37fd-4d04-8a6b-76f54f8c222d"): dict(
        instruction_start="I am from the country of Atlantis", setup_types=[], func="infeasible",
        snapshot="chrome", source="https://superuser.com/questions/984668/change-interface-language-of-chrome-to-english",
        related_apps=["chrome"], trajectory="trajectories/", postconfig=None),
    ("gimp", "7767eef2-56a3-4cea-8c9f-48c070c7d65b"): dict(
        instruction_start="Please help change GIMP's theme from dark to light.", setup_types=["launch"],
        func="check_config_status", snapshot="gimp", source="https://www.youtube.com/watch?v=LX-S1CX1HUI",
        related_apps=["gimp"], trajectory="trajectories/", postconfig=["execute", "sleep"]),
    ("multi_apps", "2373b66a-092d-44cb-bfd7-82e86e7a3b4d"): dict(
        instruction_start="Monitor Ubuntu system resource usage using the sar command",
        setup_types=["command"], func=["file_contains", "check_line_number"], snapshot="multiapps",
        source="author", related_apps=["os", "calc"], trajectory="trajectories/", postconfig=None),
    ("multi_apps", "69acbb55-d945-4927-a87b-8480e1a5bb7e"): dict(
        instruction_start="I'm working on word embedding tasks", setup_types=["launch", "launch"],
        func="check_include_exclude", snapshot="os", source="authors", related_apps=["os", "chrome", "vscode"],
        trajectory="trajectories/69acbb55-d945-4927-a87b-8480e1a5bb7e", postconfig=None),
    ("vlc", "9195653c-f4aa-453d-aa95-787f6ccfaae9"): dict(
        instruction_start="I like watching movies (using VLC) on my laptop", setup_types=["launch", "execute"],
        func="check_qt_max_volume", snapshot="chrome",
        source="https://superuser.com/questions/1513285/how-can-i-increase-the-maximum-volume-output-by-vlc?rq=1",
        related_apps=["vlc"], trajectory="trajectories/", postconfig=["launch", "launch"]),
}


# --------------------------------------------------------------------------- loading fixtures


def test_load_dir_finds_every_fixture(fixtures):
    tasks = load_osworld_dir(fixtures)
    assert {(t.domain, t.id) for t in tasks} == set(EXPECTED)
    assert [(t.domain, t.id) for t in tasks] == sorted(EXPECTED)  # sorted by domain, file name
    for t in tasks:
        assert isinstance(t, Task) and t.platform == "desktop" and t.suite == "osworld"
        assert Path(t.source) == fixtures / t.domain / f"{t.id}.json"


@pytest.mark.parametrize("key", sorted(EXPECTED), ids=lambda k: f"{k[0]}/{k[1][:8]}")
def test_fixture_fields(fixtures, key):
    domain, task_id = key
    want = EXPECTED[key]
    task = load_osworld_task(fixtures / domain / f"{task_id}.json", domain=domain)
    assert task.id == task_id and task.domain == domain
    assert task.instruction.startswith(want["instruction_start"])
    assert [s["type"] for s in task.setup] == want["setup_types"]
    assert task.evaluator["func"] == want["func"]
    assert task.extra["snapshot"] == want["snapshot"]
    assert task.extra["source"] == want["source"]
    assert task.extra["related_apps"] == want["related_apps"]
    assert task.extra["trajectory"] == want["trajectory"]
    assert task.extra["proxy"] is False and task.extra["fixed_ip"] is False
    assert task.extra["possibility_of_env_change"] == "low"
    post = task.evaluator.get("postconfig")
    assert ([s["type"] for s in post] if post is not None else None) == want["postconfig"]


@pytest.mark.parametrize("key", sorted(EXPECTED), ids=lambda k: f"{k[0]}/{k[1][:8]}")
def test_fixture_round_trips_unchanged(fixtures, key):
    path = fixtures / key[0] / f"{key[1]}.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    task = load_osworld_task(path)
    assert task.evaluator == raw["evaluator"]
    assert task.setup == raw["config"]
    assert to_osworld_dict(task) == raw
    assert json.loads(json.dumps(to_osworld_dict(task))) == raw  # still plain JSON


def test_fixture_values_spot_checks(fixtures):
    t = load_osworld_task(fixtures / "multi_apps" / "2373b66a-092d-44cb-bfd7-82e86e7a3b4d.json")
    ev = t.evaluator
    assert ev["result"][0] == {"type": "vm_file", "path": "/home/user/Desktop/System_Resources_Report.txt",
                               "dest": "System_Resources_Report.txt"}
    assert ev["expected"][1] == {"type": "rule", "rules": {"expected": "31"}}
    assert ev["expected"][0]["rules"]["expected"] == ["CPU", "%user", "%nice", "%system", "%iowait", "%steal", "%idle"]
    assert t.setup[0]["parameters"]["shell"] == "true"  # a string in the file, kept as is
    g = load_osworld_task(fixtures / "gimp" / "7767eef2-56a3-4cea-8c9f-48c070c7d65b.json")
    assert g.evaluator["expected"]["rules"] == {"type:": "key-value", "key": "theme", "value": '"Light"'}


def test_domain_without_folder_comes_from_related_apps(fixtures):
    one = load_osworld_task(fixtures / "vlc" / "9195653c-f4aa-453d-aa95-787f6ccfaae9.json")
    assert one.domain == "vlc"
    many = load_osworld_task(fixtures / "multi_apps" / "2373b66a-092d-44cb-bfd7-82e86e7a3b4d.json")
    assert many.domain == "multi_apps"  # related_apps ["os", "calc"]


def test_every_fixture_metric_is_registered(fixtures):
    for t in load_osworld_dir(fixtures):
        funcs = t.evaluator["func"]
        for f in funcs if isinstance(funcs, list) else [funcs]:
            assert f in EV.METRICS, f


# --------------------------------------------------------------------------- substitution


def test_substitute_fixture_commands(fixtures):
    sar = load_osworld_task(fixtures / "multi_apps" / "2373b66a-092d-44cb-bfd7-82e86e7a3b4d.json")
    out = substitute(sar.setup)
    assert out[0]["parameters"]["command"] == (
        "echo password | sudo -S apt-get update && echo password | sudo -S apt-get install sysstat")
    assert "{CLIENT_PASSWORD}" in sar.setup[0]["parameters"]["command"]  # input untouched
    vlc = load_osworld_task(fixtures / "vlc" / "9195653c-f4aa-453d-aa95-787f6ccfaae9.json")
    cmd = substitute(vlc.setup)[1]["parameters"]["command"]
    assert cmd[:2] == ["python", "-c"] and "pyautogui.click(960, 540)" in cmd[2]
    small = substitute(vlc.setup, {"SCREEN_WIDTH": 1280, "SCREEN_HEIGHT": 720})
    assert "pyautogui.click(640, 360)" in small[1]["parameters"]["command"][2]


def test_substitute_nested_and_custom_values():
    value = {"a": ["{SCREEN_WIDTH}x{SCREEN_HEIGHT}", {"b": ("{SCREEN_WIDTH_HALF}", 7, None, True)}],
             "{CLIENT_PASSWORD}": "pw={CLIENT_PASSWORD}", "n": 1.5}
    out = substitute(value)
    assert out == {"a": ["1920x1080", {"b": ("960", 7, None, True)}], "{CLIENT_PASSWORD}": "pw=password", "n": 1.5}
    assert substitute("{CLIENT_PASSWORD}", {"{CLIENT_PASSWORD}": "s3cret"}) == "s3cret"
    assert substitute("{SCREEN_WIDTH_HALF}", {"SCREEN_WIDTH": 1000, "SCREEN_WIDTH_HALF": 1}) == "1"
    assert substitute("{UNKNOWN} {SCREEN_HEIGHT_HALF}") == "{UNKNOWN} 540"
    assert osworld_vars("x", 1001, 801) == {"CLIENT_PASSWORD": "x", "SCREEN_WIDTH": "1001", "SCREEN_HEIGHT": "801",
                                             "SCREEN_WIDTH_HALF": "500", "SCREEN_HEIGHT_HALF": "400"}


# --------------------------------------------------------------------------- malformed input

def _base(fixtures) -> dict:
    return json.loads((fixtures / "multi_apps" / "2373b66a-092d-44cb-bfd7-82e86e7a3b4d.json").read_text())


def _del(key):
    return lambda d: d.pop(key)


def _set(path, value):
    def f(d):
        target = d
        for p in path[:-1]:
            target = target[p]
        target[path[-1]] = value
    return f


MALFORMED = [
    ("no-id", _del("id"), "'id'"),
    ("empty-id", _set(["id"], ""), "'id'"),
    ("no-instruction", _del("instruction"), "'instruction'"),
    ("instruction-not-str", _set(["instruction"], ["x"]), "'instruction'"),
    ("no-evaluator", _del("evaluator"), "'evaluator'"),
    ("evaluator-not-dict", _set(["evaluator"], "exact_match"), "'evaluator'"),
    ("no-func", lambda d: d["evaluator"].pop("func"), "'evaluator.func'"),
    ("func-int", _set(["evaluator", "func"], 5), "'evaluator.func'"),
    ("func-dict", _set(["evaluator", "func"], {"a": 1}), "'evaluator.func'"),
    ("func-empty-list", _set(["evaluator", "func"], []), "'evaluator.func'"),
    ("func-item-not-str", _set(["evaluator", "func"], ["file_contains", 3]), "'evaluator.func[1]'"),
    ("result-too-short", lambda d: d["evaluator"]["result"].pop(), "'evaluator.result'"),
    ("expected-too-long", lambda d: d["evaluator"]["expected"].append({"type": "rule", "rules": {}}),
     "'evaluator.expected'"),
    ("options-mismatch", _set(["evaluator", "options"], [{}]), "'evaluator.options'"),
    ("options-dict-for-list", _set(["evaluator", "options"], {"x": 1}), "'evaluator.options'"),
    ("result-dict-for-list", _set(["evaluator", "result"], {"type": "vm_file"}), "'evaluator.result'"),
    ("getter-without-type", _set(["evaluator", "result", 1], {"path": "/x"}), "'evaluator.result[1].type'"),
    ("bad-conj", _set(["evaluator", "conj"], "xor"), "'evaluator.conj'"),
    ("unknown-setup-type", _set(["config", 0, "type"], "teleport"), "'config[0].type'"),
    ("setup-no-parameters", lambda d: d["config"][0].pop("parameters"), "'config[0].parameters'"),
    ("config-not-list", _set(["config"], {"type": "sleep"}), "'config'"),
    ("postconfig-unknown", _set(["evaluator", "postconfig"], [{"type": "sleep", "parameters": {"seconds": 1}},
                                                               {"type": "nap", "parameters": {}}]),
     "'evaluator.postconfig[1].type'"),
]


@pytest.mark.parametrize("name,mutate,field", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_task_names_file_and_field(fixtures, tmp_path, name, mutate, field):
    data = _base(fixtures)
    mutate(data)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TaskSpecError) as err:
        load_osworld_task(path)
    msg = str(err.value)
    assert str(path) in msg and field in msg, msg


def test_single_func_with_list_result_is_rejected(fixtures, tmp_path):
    data = json.loads((fixtures / "chrome" / "2ae9ba84-3a0d-4d4c-8338-3a1478dc5fe3.json").read_text())
    data["evaluator"]["result"] = [data["evaluator"]["result"]]
    with pytest.raises(TaskSpecError, match=r"'evaluator\.result'"):
        parse_osworld_task(data, source="mem.json")


def test_invalid_json_and_bad_dirs(tmp_path):
    bad = tmp_path / "d" / "x.json"
    bad.parent.mkdir()
    bad.write_text('{"id": "x",\n "instruction": }')
    with pytest.raises(TaskSpecError, match=r"x\.json: invalid JSON at line 2"):
        load_osworld_task(bad)
    with pytest.raises(TaskSpecError, match="not a directory"):
        load_osworld_dir(tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TaskSpecError, match="no task files"):
        load_osworld_dir(empty)
    with pytest.raises(TaskSpecError, match="'<root>'"):
        parse_osworld_task([1, 2], source="list.json")


def test_duplicate_id_and_flat_domain_folder(fixtures, tmp_path):
    src = fixtures / "chrome" / "2ae9ba84-3a0d-4d4c-8338-3a1478dc5fe3.json"
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / src.name).write_text(src.read_text())
    with pytest.raises(TaskSpecError, match="repeats the id"):
        load_osworld_dir(tmp_path)
    flat = load_osworld_dir(tmp_path / "a")  # a folder of task files is one domain
    assert [(t.domain, t.id) for t in flat] == [("a", "2ae9ba84-3a0d-4d4c-8338-3a1478dc5fe3")]


# --------------------------------------------------------------------------- text similarity


def _lcs_dp(a, b):
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def test_lcs_matches_dynamic_programming():
    rng = random.Random(0)
    for _ in range(300):
        a = "".join(rng.choice("abcd") for _ in range(rng.randint(0, 70)))
        b = "".join(rng.choice("abcde") for _ in range(rng.randint(0, 70)))
        assert lcs_length(a, b) == _lcs_dp(a, b), (a, b)


def test_ratio_matches_rapidfuzz_numbers():
    assert ratio("this is a test", "this is a test!") == pytest.approx(96.55172, abs=1e-4)  # rapidfuzz docs
    assert ratio("kitten", "sitting") == pytest.approx(100 * 8 / 13)  # LCS "ittn"
    assert ratio("", "") == 100.0 and ratio("abc", "") == 0.0 and ratio(None, "a") == 0.0


# --------------------------------------------------------------------------- metrics


def test_exact_and_list_metrics():
    assert M.exact_match("Thomas", {"expected": "Thomas"}) == 1.0
    assert M.exact_match("thomas", {"expected": "Thomas"}) == 0.0
    assert M.match_in_list("b", {"expected": ["a", "b"]}) == 1.0
    assert M.match_in_list("c", {"expected": ["a", "b"]}) == 0.0
    assert M.is_in_list(["a", "b"], {"expected": "a"}) == 1.0
    assert M.is_in_list("xyz", {"expected": "y"}) == 1.0
    assert M.is_in_list(["a"], {"expected": "z"}) == 0.0


def test_check_include_exclude():
    rules = {"include": [], "exclude": ["Error:"]}  # the multi_apps/69acbb55 rule
    assert M.check_include_exclude("", rules) == 1.0
    # plain substring test, as in OSWorld: "ModuleNotFoundError:" contains "Error:"
    assert M.check_include_exclude("ModuleNotFoundError: No module named 'x'", rules) == 0.0
    assert M.check_include_exclude("Traceback\nError: boom", rules) == 0.0
    assert M.check_include_exclude(None, rules) == 0.0
    assert M.check_include_exclude("alpha beta", {"include": ["alpha", "beta"]}) == 1.0
    assert M.check_include_exclude("alpha", {"include": ["alpha", "beta"]}) == 0.0


def test_literal_match():
    assert M.literal_match("ABC", "abc") == 0.0
    assert M.literal_match("ABC", "abc", ignore_case=True) == 1.0
    assert M.literal_match(1, "1") == 1.0  # str() forms
    assert M.literal_match(["A", 2], ("a", "2"), type="list", ignore_case=True) == 1.0
    assert M.literal_match(["a"], ["a", "b"], type="list") == 0.0
    assert M.literal_match("ab", ["a", "b"], type="list") == 0.0
    with pytest.raises(NotImplementedError):
        M.literal_match(1, 1, type="set")


def test_fuzzy_match():
    assert M.fuzzy_match("kitten", {"expected": "sitting"}) == pytest.approx(8 / 13)
    assert M.fuzzy_match("same", {"expected": "same"}) == 1.0
    assert M.fuzzy_match("abc", {"expected": "xyz"}) == 0.0


def test_check_json_settings(tmp_path):
    f = tmp_path / "settings.json"
    f.write_text(json.dumps({"editor.fontSize": 14, "files.exclude": {"**/.git": True}}))
    rules = {"expected": {"editor.fontSize": 14}}
    assert M.check_json_settings(str(f), rules) == 1.0
    assert M.check_json_settings(str(f), {"expected": {"editor.fontSize": 12}}) == 0.0
    assert M.check_json_settings(str(f), {"expected": {"files.exclude": {"**/.git": True}, "x": 1}}) == 0.0
    assert M.check_json_settings(None, rules) == 0.0
    assert M.check_json_settings(str(tmp_path / "missing.json"), rules) == 0.0
    (tmp_path / "bad.json").write_text("{not json")
    assert M.check_json_settings(str(tmp_path / "bad.json"), rules) == 0.0


def test_check_direct_json_object():
    assert M.check_direct_json_object({"a": 1, "b": "x"}, {"expected": {"a": 1}}) == 1.0
    assert M.check_direct_json_object({"a": 2}, {"expected": {"a": 1}}) == 0.0
    assert M.check_direct_json_object(" {'a': 1} ", {"expected": {"a": 1}}) == 1.0  # quotes swapped
    assert M.check_direct_json_object("{oops", {"expected": {"a": 1}}) == 0.0
    assert M.check_direct_json_object(None, {"expected": {"a": 1}}) == 0.0
    assert M.check_direct_json_object({"a": 1}, {"expected": {"a": "__EVALUATION_FAILED__"}}) == 0.0
    assert M.check_direct_json_object({"l": [2, 1]}, {"expected": {"l": [1, 2]}}) == 0.0
    assert M.check_direct_json_object({"l": [2, 1]}, {"expected": {"l": [1, 2]}, "ignore_list_order": True}) == 0.0
    assert M.check_direct_json_object({"l": [2, 1]}, {"expected": {"l": [1, 2], "ignore_list_order": True}}) == 1.0
    inr = {"expect_in_result": True}
    assert M.check_direct_json_object({"t": "Hello World"}, {**inr, "expected": {"t": "World"}}) == 1.0
    assert M.check_direct_json_object({"t": "Hello"}, {**inr, "expected": {"t": "World"}}) == 0.0
    assert M.check_direct_json_object({"t": ["x", "y"]}, {**inr, "expected": {"t": ["q", "y"]}}) == 1.0
    assert M.check_direct_json_object({"t": "y"}, {**inr, "expected": {"t": ["q", "y"]}}) == 1.0
    assert M.check_direct_json_object({"t": "z"}, {**inr, "expected": {"t": ["q", "y"]}}) == 0.0
    assert M.check_direct_json_object({"t": 3}, {**inr, "expected": {"t": 3}}) == 0.0  # unsupported type


def test_compare_text_file(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("Hello\tWorld\n\n  again ")
    b.write_text("hello world again")
    assert M.compare_text_file(str(a), str(b)) == 0.0
    assert M.compare_text_file(str(a), str(b), ignore_blanks=True) == 0.0  # case still differs
    assert M.compare_text_file(str(a), str(b), ignore_blanks=True, ignore_case=True) == 1.0
    assert M.compare_text_file(str(b), str(b)) == 1.0
    assert M.compare_text_file(None, str(b)) == 0.0


SAR = """Linux 6.5.0 (ubuntu) \t11/22/2026 \t_x86_64_\t(2 CPU)

12:00:01 AM     CPU     %user     %nice   %system   %iowait    %steal     %idle
12:00:02 AM     all      1.00      0.00      0.50      0.00      0.00     98.50
12:00:03 AM     all      2.00      0.00      0.50      0.00      0.00     97.50
Average:        all      1.50      0.00      0.50      0.00      0.00     98.00
"""


def test_file_contains_and_check_line_number(tmp_path):
    f = tmp_path / "System_Resources_Report.txt"
    f.write_text(SAR)
    cols = {"expected": ["CPU", "%user", "%nice", "%system", "%iowait", "%steal", "%idle"]}
    assert M.file_contains(str(f), cols) == 1.0
    assert M.file_contains(str(f), {"expected": ["CPU", "%guest"]}) == 0.0
    assert M.file_contains(None, cols) == 0.0
    assert M.file_contains(str(tmp_path / "none.txt"), cols) == 0.0
    assert M.check_line_number(str(f), {"expected": "3"}) == 1.0  # three lines carry HH:MM:SS
    assert M.check_line_number(str(f), {"expected": "31"}) == 0.0
    assert M.check_line_number(None, {"expected": "3"}) == 0.0


def test_vlc_and_gimp_config_metrics(tmp_path):
    vlcrc = tmp_path / "vlcrc"
    vlcrc.write_text("[qt]\n#qt-max-volume=125\n")
    assert M.check_qt_max_volume(str(vlcrc), {"expected_qt_max_volume": 200}) == 0.0
    vlcrc.write_text("[qt]\n#qt-max-volume=125\nqt-max-volume=200\n")
    assert M.check_qt_max_volume(str(vlcrc), {"expected_qt_max_volume": 200}) == 1.0
    gimprc = tmp_path / "gimprc"
    rule = {"type:": "key-value", "key": "theme", "value": '"Light"'}  # the gimp fixture's rule
    gimprc.write_text('# GIMP gimprc\n\n(theme "Dark")\n(icon-theme "Symbolic")\n')
    assert M.check_config_status(str(gimprc), rule) == 0.0
    gimprc.write_text('# GIMP gimprc\n\n(theme "Light")\n')
    assert M.check_config_status(str(gimprc), rule) == 1.0
    gimprc.write_text('(default-view (show-menubar yes))\n')
    assert M.check_config_status(str(gimprc), {"key": ["default-view", "(show-menubar"], "value": "yes"}) == 1.0
    assert M.check_config_status(None, rule) == 0.0


def test_compare_table_missing_result_and_dependency(tmp_path):
    assert TABLE.compare_table(None, "gold.xlsx", rules=[{"type": "sheet_name"}]) == 0.0
    if importlib.util.find_spec("openpyxl") is None or importlib.util.find_spec("pandas") is None:
        with pytest.raises(MetricDependencyError, match="openpyxl|pandas") as err:
            TABLE.compare_table(str(tmp_path / "r.xlsx"), str(tmp_path / "e.xlsx"), rules=[{"type": "sheet_name"}])
        assert "pip install" in str(err.value)


def test_compare_table_with_openpyxl(tmp_path):
    openpyxl = pytest.importorskip("openpyxl")
    pytest.importorskip("pandas")

    def book(path, rows, title="Sheet1"):
        wb = openpyxl.Workbook()
        ws = wb.active
        ws.title = title
        for r in rows:
            ws.append(r)
        wb.save(path)
        return str(path)

    # equal after rounding to 4 digits (2.0 would be stored as an int: pandas' equals checks dtypes)
    r = book(tmp_path / "r.xlsx", [["a", "b"], [1, 2.50001]])
    e = book(tmp_path / "e.xlsx", [["a", "b"], [1, 2.5]])
    rules = [{"type": "sheet_name"}, {"type": "sheet_data", "sheet_idx0": 0, "sheet_idx1": "EI0"}]
    assert TABLE.compare_table(r, e, rules=rules) == 1.0
    bad = book(tmp_path / "x.xlsx", [["a", "b"], [1, 3]])
    assert TABLE.compare_table(bad, e, rules=rules) == 0.0
    other = book(tmp_path / "o.xlsx", [["a", "b"], [1, 2]], title="Other")
    assert TABLE.compare_table(other, e, rules=[{"type": "sheet_name"}]) == 0.0
    # sheet_print compares the getter's "<book>-<sheet>.csv" exports, trailing blank lines ignored
    (tmp_path / "r-Sheet1.csv").write_text("a,b\n1,X\n\n")
    (tmp_path / "e-Sheet1.csv").write_text("a,b\n1,x\n")
    printed = [{"type": "sheet_print", "sheet_idx0": "RNSheet1", "sheet_idx1": "ENSheet1"}]
    assert TABLE.compare_table(r, e, rules=printed) == 0.0
    assert TABLE.compare_table(r, e, rules=[{**printed[0], "ignore_case": True}]) == 1.0
    with pytest.raises(NotImplementedError, match="no_such_rule"):  # an unknown rule type names itself
        TABLE.compare_table(r, e, rules=[{"type": "no_such_rule", "sheet_idx0": 0, "sheet_idx1": "EI0"}])


def test_compare_docx_files_paths_and_dependency(tmp_path):
    assert DOCS.compare_docx_files(None, "gold.docx") == 0.0
    assert DOCS.compare_docx_files("a.txt", "b.txt") == 0.0
    if importlib.util.find_spec("docx") is None:
        with pytest.raises(MetricDependencyError, match="python-docx"):
            DOCS.compare_docx_files(str(tmp_path / "a.docx"), str(tmp_path / "b.docx"))


def test_compare_docx_paragraph_scoring():
    assert score_paragraphs(["Hello  world", "x"], ["Hello world x"]) == 1.0  # ignore_blanks default
    assert score_paragraphs(["Hello  world", "x"], ["Hello world x"], ignore_blanks=False) == 0.0
    assert score_paragraphs(["A"], ["a"], ignore_case=True) == 1.0
    assert score_paragraphs(["b", "a"], ["a", "b"], ignore_blanks=False, ignore_order=True) == 1.0
    assert score_paragraphs(["a", "", "b"], ["a", "b"], ignore_blanks=False, delete_empty_lines=True) == 1.0
    # per-paragraph fuzzy mean: (1 + ratio("abcd", "abce")/100) / 2 = (1 + 0.75) / 2
    assert score_paragraphs(["abc", "abcd"], ["abc", "abce"], ignore_blanks=False,
                            fuzzy_match=True) == pytest.approx(0.875)
    assert score_paragraphs(["kitten"], ["sitting"], content_only=True) == pytest.approx(8 / 13)
    assert score_paragraphs([], [], ignore_blanks=False, fuzzy_match=True) == 1.0


def test_compare_docx_files_with_python_docx(tmp_path):
    docx = pytest.importorskip("docx")

    def doc(path, paras):
        d = docx.Document()
        for p in paras:
            d.add_paragraph(p)
        d.save(path)
        return str(path)

    a = doc(tmp_path / "a.docx", ["Hello  world", "Bye"])
    b = doc(tmp_path / "b.docx", ["Hello world", "Bye"])
    assert DOCS.compare_docx_files(a, b) == 1.0
    assert DOCS.compare_docx_files(a, b, ignore_blanks=False) == 0.0


# --------------------------------------------------------------------------- evaluate


def test_evaluate_single_fixture_spec(fixtures):
    t = load_osworld_task(fixtures / "chrome" / "2ae9ba84-3a0d-4d4c-8338-3a1478dc5fe3.json")
    rules = t.evaluator["expected"]["rules"]
    assert EV.evaluate(t.evaluator, "Thomas", rules)[0] == 1.0
    score, details = EV.evaluate(t.evaluator, "Tom", rules)
    assert score == 0.0 and details["items"][0]["func"] == "exact_match"
    score, details = EV.evaluate(t.evaluator, "Thomas", rules, last_action="FAIL")
    assert score == 0.0 and "FAIL" in details["reason"]


def test_evaluate_infeasible(fixtures):
    t = load_osworld_task(fixtures / "chrome" / "3720f614-37fd-4d04-8a6b-76f54f8c222d.json")
    assert EV.evaluate(t.evaluator, None, last_action="FAIL")[0] == 1.0
    score, details = EV.evaluate(t.evaluator, None, last_action="DONE")
    assert score == 0.0 and "not FAIL" in details["reason"]
    assert EV.evaluate(t.evaluator, None)[0] == 0.0
    assert M.infeasible(last_action="FAIL") == 1.0


def test_evaluate_and_fixture_spec(fixtures, tmp_path):
    t = load_osworld_task(fixtures / "multi_apps" / "2373b66a-092d-44cb-bfd7-82e86e7a3b4d.json")
    exp = [e["rules"] for e in t.evaluator["expected"]]
    f = tmp_path / "System_Resources_Report.txt"
    f.write_text(SAR + "".join(f"12:00:{i:02d} AM     all  1 0 0 0 0 99\n" for i in range(4, 32)))
    score, details = EV.evaluate(t.evaluator, [str(f), str(f)], exp)  # 3 + 28 = 31 timed lines
    assert score == 1.0 and [i["score"] for i in details["items"]] == [1.0, 1.0]
    f.write_text(SAR)
    score, details = EV.evaluate(t.evaluator, [str(f), str(f)], exp)
    assert score == 0.0 and details["items"][-1]["func"] == "check_line_number"


def test_evaluate_conj_and_mean_and_or_max():
    spec = {"func": ["fuzzy_match", "exact_match"], "result": [{"type": "x"}, {"type": "x"}],
            "expected": [{"type": "rule"}, {"type": "rule"}]}
    exp = [{"expected": "sitting"}, {"expected": "a"}]
    score, details = EV.evaluate(spec, ["kitten", "a"], exp)
    assert score == pytest.approx((8 / 13 + 1.0) / 2)  # "and": no zero -> mean
    score, _ = EV.evaluate(spec, ["kitten", "b"], exp)
    assert score == 0.0  # "and": one zero -> 0
    ospec = {**spec, "conj": "or"}
    score, details = EV.evaluate(ospec, ["kitten", "b"], exp)
    assert score == pytest.approx(8 / 13)  # "or": no one -> max
    score, details = EV.evaluate(ospec, ["sitting", "b"], exp)
    assert score == 1.0 and len(details["items"]) == 1  # "or": first 1 stops
    assert EV.evaluate({**ospec, "func": ["exact_match", "exact_match"]}, ["x", "a"], exp)[0] == 1.0


def test_evaluate_missing_result_scores_zero_with_reason():
    spec = {"func": "check_include_exclude", "result": {"type": "vm_command_error"},
            "expected": {"type": "rule", "rules": {"exclude": ["Error:"]}}}
    score, details = EV.evaluate(spec, None, {"exclude": ["Error:"]})
    assert score == 0.0 and "missing" in details["reason"] and "check_include_exclude" in details["reason"]
    lspec = {"func": ["exact_match", "exact_match"], "result": [{"type": "x"}] * 2,
             "expected": [{"type": "rule"}] * 2}
    exp = [{"expected": "a"}, {"expected": "b"}]
    score, details = EV.evaluate(lspec, [None, "b"], exp)
    assert score == 0.0 and "missing" in details["reason"] and len(details["items"]) == 1
    score, details = EV.evaluate({**lspec, "conj": "or"}, [None, "b"], exp)
    assert score == 1.0 and "missing" in details["items"][0]["reason"]


def test_evaluate_options_and_no_expected():
    spec = {"func": "literal_match", "result": {"type": "x"}, "expected": {"type": "rule"},
            "options": {"ignore_case": True}}
    assert EV.evaluate(spec, "ABC", "abc")[0] == 1.0
    lspec = {"func": ["literal_match", "literal_match"], "result": [{"type": "x"}] * 2,
             "expected": [{"type": "rule"}] * 2, "options": [{"ignore_case": True}, None]}
    assert EV.evaluate(lspec, ["ABC", "d"], ["abc", "d"])[0] == 1.0
    assert EV.evaluate(lspec, ["ABC", "D"], ["abc", "d"])[0] == 0.0
    with pytest.raises(KeyError, match="unknown osworld metric"):
        EV.evaluate({"func": "no_such_metric", "result": {"type": "x"}}, "r")


def test_metric_names_registered():
    for name in ("exact_match", "check_include_exclude", "match_in_list", "is_in_list", "literal_match",
                 "fuzzy_match", "check_json_settings", "check_direct_json_object", "compare_text_file",
                 "compare_table", "compare_docx_files", "infeasible"):
        assert name in EV.METRICS
    assert EV.get_metric("exact_match") is M.exact_match


def test_loaded_task_is_independent_of_input(fixtures):
    raw = _base(fixtures)
    keep = copy.deepcopy(raw)
    task = parse_osworld_task(raw, source="mem", domain="multi_apps")
    assert raw == keep and task.evaluator == keep["evaluator"]
