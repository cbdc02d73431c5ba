"""bench/osworld_metric_diff.py: OSWorld's own metrics (PyPI desktop-env 1.0.2, in an isolated
venv, run in a subprocess) against guigym's on the same files (issue 36 item 1).

* the recorder plugin turns a metric call into a case: files copied content-addressed with their
  basename, missing temp paths kept missing, nested metric calls not recorded twice;
* the comparison: an error scores 0 on either side, unavailable cases are left out;
* a small differential (files made here): every case scores what its construction says on both
  sides, and the one deliberate departure among them (upstream's check_thunderbird_folder, which
  skips every non-empty message and so scores 1 for two different folders) is reported as the
  only disagreement, which shows the reference side really runs upstream's code.
* a case that never returns to the interpreter (upstream's run_sqlite3 on an endless recursive
  view: SIGALRM cannot interrupt sqlite's C loop) is killed and scored a timeout, the cases after
  it still run, and the outcomes written before a kill survive for a resumed run;
* a case that reaches a library the reference venv leaves out is unavailable even where upstream
  catches every Exception around the call (compare_audios would score the pair 1).
The differential skips, naming the install command, when the reference venv is absent.
"""
from __future__ import annotations

import importlib
import json
import sqlite3
import sys
from pathlib import Path

import docx
import pytest
from docx.enum.text import WD_BREAK
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
diff = importlib.import_module("osworld_metric_diff")
recorder = importlib.import_module("_osworld_case_recorder")


def test_recorder_stores_files_by_content_with_their_basename(tmp_path, monkeypatch):
    store = tmp_path / "store"
    store.mkdir()
    monkeypatch.setattr(recorder, "_DIR", store)
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.xlsx").write_bytes(b"same bytes")
    (src / "b.xlsx").write_bytes(b"same bytes")
    enc = recorder._encode([str(src / "a.xlsx"), {"p": str(src / "b.xlsx"), "n": 3},
                            str(src / "gone.csv"), "plain text"])
    ref_a, ref_b = enc[0]["$file"], enc[1]["p"]["$file"]
    assert ref_a.endswith("/a.xlsx") and ref_b.endswith("/b.xlsx")
    assert ref_a.split("/")[1] == ref_b.split("/")[1]          # same content, same digest folder
    assert (store / ref_a).read_bytes() == b"same bytes"
    assert enc[1]["n"] == 3 and enc[3] == "plain text"
    assert enc[2] == {"$file": "missing/gone.csv"}
    with pytest.raises(recorder._NotJSON):
        recorder._encode([object()])


def test_recorder_records_the_outermost_call_only(tmp_path, monkeypatch):
    monkeypatch.setattr(recorder, "_DIR", tmp_path)
    inner = recorder._wrap("inner", lambda x: x * 2)
    outer = recorder._wrap("outer", lambda x: inner(x) + 1)
    assert outer(3) == 7                                       # the real functions' result
    lines = [json.loads(x) for x in (tmp_path / "cases.jsonl").read_text().splitlines()]
    assert [(c["metric"], c["args"]) for c in lines] == [("outer", [3])]


def test_compare_scores_errors_zero_and_leaves_out_unavailable():
    cases = [{"id": i, "metric": "m"} for i in "abcd"]
    ours = {"a": {"score": 1.0}, "b": {"error": "KeyError: x"}, "c": {"score": 0.5}, "d": {"score": 1.0}}
    theirs = {"a": {"score": 1.0}, "b": {"score": 0.0}, "c": {"score": 0.5000001}, "d": {"unavailable": "stub"}}
    rep = diff.compare(cases, ours, theirs)
    assert rep["metrics"]["m"] == {"cases": 3, "agree": 3, "disagree": 0, "unavailable": 1}
    rep = diff.compare(cases, {**ours, "c": {"score": 0.4}}, theirs)
    assert rep["total"]["disagree"] == 1 and rep["disagreements"][0]["id"] == "c"


# ----------------------------------------------------------------------------- the differential


def _case(cases: list, metric: str, args: list, kwargs: dict | None = None, *, want: float) -> None:
    cases.append({"id": f"c{len(cases)}", "metric": metric, "args": args, "kwargs": kwargs or {}, "want": want})


def _f(rel: str) -> dict:
    return {"$file": f"files/{rel}"}


def _small_case_set(root: Path) -> list:
    """Files under ``root/files`` and cases whose scores follow from how the files were made."""
    files = root / "files"
    files.mkdir(parents=True)
    (files / "a.csv").write_text("name,qty\napple,3\npear,5\n")
    (files / "a_copy.csv").write_text("name,qty\napple,3\npear,5\n")
    (files / "b.csv").write_text("name,qty\napple,4\npear,5\n")
    doc = docx.Document()
    doc.add_paragraph("one").add_run().add_break(WD_BREAK.PAGE)
    doc.add_paragraph("two")
    doc.save(files / "break.docx")
    img = Image.new("RGBA", (50, 40), (0, 0, 0, 0))
    img.paste(Image.new("RGBA", (20, 10), (255, 0, 0, 255)), (5, 7))
    img.save(files / "padded.png")
    (files / "inbox_a").write_text("FROM - Mon\nSubject: hello\n\nbody one\n")
    (files / "inbox_b").write_text("FROM - Tue\nSubject: other\n\nbody two\n")
    cases: list = []
    _case(cases, "compare_csv", [_f("a.csv"), _f("a_copy.csv")], want=1.0)
    _case(cases, "compare_csv", [_f("b.csv"), _f("a.csv")], want=0.0)
    _case(cases, "contains_page_break", [_f("break.docx"), {"page_break_count": 1}], want=1.0)
    _case(cases, "contains_page_break", [_f("break.docx"), {"page_break_count": 2}], want=0.0)
    _case(cases, "check_image_size", [_f("padded.png"), {"width": 20, "height": 10, "ignore_transparent": True}],
          want=1.0)
    _case(cases, "check_image_size", [_f("padded.png"), {"width": 20, "height": 10}], want=0.0)
    _case(cases, "exact_match", ["Paris", {"expected": "Paris"}], want=1.0)
    _case(cases, "exact_match", ["Paris", {"expected": "paris"}], want=0.0)
    # two different folders: guigym 0; upstream 1 (docs/architecture.md lists the departure)
    _case(cases, "check_thunderbird_folder", [_f("inbox_a"), _f("inbox_b")], want=0.0)
    return cases


@pytest.fixture(scope="module")
def reference_python() -> Path:
    if not diff.venv_ready():
        pytest.skip(f"no desktop-env reference venv at {diff.venv_python().parent.parent}: "
                    f"run `{diff.INSTALL_CMD}`")
    return diff.venv_python()


def test_differential_on_a_small_case_set(tmp_path, reference_python):
    cases = _small_case_set(tmp_path)
    (tmp_path / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    ours = diff.run_ours(diff.load_cases(tmp_path), str(tmp_path))
    theirs = diff.run_theirs(diff.load_cases(tmp_path), str(tmp_path), python=reference_python)
    for case in cases:
        assert diff.outcome(ours[case["id"]]) == pytest.approx(case["want"]), (case, ours[case["id"]])
    rep = diff.compare(cases, ours, theirs)
    assert [(d["metric"], diff.outcome(d["theirs"])) for d in rep["disagreements"]] == [
        ("check_thunderbird_folder", 1.0)]
    assert rep["total"] == {"cases": len(cases), "agree": len(cases) - 1, "disagree": 1, "unavailable": 0,
                            "metrics": 5}


def test_a_case_stuck_in_c_code_is_killed_and_the_run_goes_on(tmp_path, reference_python, monkeypatch):
    files = tmp_path / "files"
    files.mkdir()
    conn = sqlite3.connect(files / "endless.sqlite")
    conn.execute("CREATE VIEW v AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n FROM r")
    conn.commit()
    conn.close()
    cases: list = []
    _case(cases, "exact_match", ["Paris", {"expected": "Paris"}], want=1.0)
    _case(cases, "run_sqlite3", [_f("endless.sqlite"), {"sql": "select count(*) from v"}], want=0.0)
    _case(cases, "exact_match", ["Rome", {"expected": "Paris"}], want=0.0)
    monkeypatch.setattr(diff, "KILL_GRACE_S", 2, raising=False)
    theirs = diff.run_theirs(cases, str(tmp_path), python=reference_python, timeout_s=1)
    assert diff.outcome(theirs["c0"]) == pytest.approx(1.0) and diff.outcome(theirs["c2"]) == pytest.approx(0.0)
    assert theirs["c1"]["error"].startswith("Timeout: killed"), theirs["c1"]


def test_a_rerun_resumes_from_the_outcomes_already_written(tmp_path):
    cases: list = []
    for expected in ("Paris", "Rome", "Paris"):
        _case(cases, "exact_match", ["Paris", {"expected": expected}], want=float(expected == "Paris"))
    results = tmp_path / "ours.jsonl"
    # c0 and c1 finished before the run was cut short (scores exact_match cannot give, so a rerun
    # of them would show), c2's line was torn by the kill
    results.write_text('{"id": "c0", "score": 0.25}\n{"id": "c1", "error": "Timeout: killed"}\n{"id": "c2", "sc')
    ours = diff.run_ours(cases, str(tmp_path), timeout_s=30, results=results)
    assert ours["c0"]["score"] == pytest.approx(0.25) and ours["c1"]["error"] == "Timeout: killed"
    assert ours["c2"]["score"] == pytest.approx(1.0)
    assert [json.loads(x)["id"] for x in results.read_text().splitlines()] == ["c0", "c1", "c2"]


def test_a_stubbed_library_leaves_the_case_out_even_under_upstreams_except_exception(tmp_path, reference_python):
    import wave

    files = tmp_path / "files"
    files.mkdir()
    for name, level in (("a.wav", 0), ("b.wav", 90)):
        with wave.open(str(files / name), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(1)
            w.setframerate(8000)
            w.writeframes(bytes([128 + level % 100]) * 800)
    cases: list = []
    _case(cases, "compare_audios", [_f("a.wav"), _f("b.wav")], want=0.0)
    theirs = diff.run_theirs(cases, str(tmp_path), python=reference_python)
    assert "librosa" in theirs["c0"].get("unavailable", ""), theirs["c0"]
    assert diff.compare(cases, {"c0": {"score": 0.0}}, theirs)["total"]["unavailable"] == 1
