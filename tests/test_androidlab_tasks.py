"""AndroidLab's own task YAMLs (guigym/envs/android/suite/androidlab, MIT, shipped with the package) load unmodified into guigym Tasks."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import yaml

from guigym.core.errors import TaskSpecError
from guigym.envs.android.androidlab_tasks import MAX_ROUNDS, load_dir, load_file, tasks_from_data

FIX = Path(__file__).parent.parent / "guigym" / "envs" / "android" / "suite" / "androidlab"
SHA = {
    "bluecoins.yaml": "84b18500022010637c30fa9e149a00731a983ab686f5316c8fa87bb7ba96ac6a",
    "calendar.yaml": "020c413b1edea7fe64134fac2b36d1ebcd76a2b4ebb76481984ac938c573d65e",
    "cantook.yaml": "09351aaf8bc06463b7ae37fae3c920968477a683720a9a12a5557f0daf699ed5",
    "clock.yaml": "9804301156f1912557eee968294a967b454128fbdaf317305bd4b46a17f6a013",
    "contacts.yaml": "72fc035870a33aee5ca600f25e74d68fb0217ef8846102f53f900b4b66348387",
    "map.yaml": "93da014237237cc14a0657167df3baff4e37a0e4150b331102b2fb6a6d700cac",
    "pimusic.yaml": "eeaf5536aff48e505aa4dda64521f5bc14d529469550a0383538e59eac6f39c5",
    "setting.yaml": "5d56153a8244062a6605bc7dc150c21c3570e1a768a222a2d12a14eda30262d9",
    "zoom.yaml": "d0f031f6a6cb4a9cf64900fcd20d2b86d7c7d1aa320a5586f9fbee1519b95c0c",
}


def test_fixture_files_are_unmodified() -> None:
    for name, digest in SHA.items():
        assert hashlib.sha256((FIX / name).read_bytes()).hexdigest() == digest, name


def test_all_138_tasks_load() -> None:
    tasks = load_dir(FIX, expect=138)
    assert len({t.id for t in tasks}) == 138
    counts = {}
    for t in tasks:
        counts[t.domain] = counts.get(t.domain, 0) + 1
    # per-app counts, from the AndroidLab paper's table of apps / a count of the YAML entries
    assert counts == {"bluecoins": 15, "calendar": 14, "Cantook": 12, "clock": 27, "Contacts": 15,
                      "map.me": 15, "Pi Music Player": 12, "Settings": 23, "zoom": 5}
    ops = [t for t in tasks if t.evaluator["metric_type"] == "operation"]
    assert len(ops) == 93 and all(t.platform == "android" and t.suite == "androidlab" for t in tasks)


def test_task_fields_map_from_yaml() -> None:
    tasks = {t.id: t for t in load_file(FIX / "clock.yaml")}
    t = tasks["clock_1"]
    assert t.instruction == 'Set an alarm for 3PM with the label "meeting" using Clock.'
    assert t.domain == "clock" and t.max_steps == MAX_ROUNDS == 25
    assert t.evaluator == {"metric_type": "operation", "metric_func": "evaluation.tasks.clock"}
    assert t.extra["package"] == "com.google.android.deskclock" and t.extra["category"] == "Alarm set"
    assert t.tags == ["operation", "Alarm set"]
    s = {t.id: t for t in load_file(FIX / "setting.yaml")}["setting_0"]
    assert s.evaluator["adb_query"] == "adb shell settings get global airplane_mode_on"
    assert s.evaluator["metric_type"] == "query_detect"
    m = {t.id: t for t in load_file(FIX / "map.yaml")}["map_14"]  # the file says "operations"
    assert m.evaluator["metric_type"] == "operation" and m.extra["raw"]["metric_type"] == "operations"


def _doc() -> dict:
    return {"APP": "clock", "package": "p", "tasks": [
        {"task_id": "clock_1", "task": "x", "metric_type": "operation", "metric_func": "m"}]}


@pytest.mark.parametrize("mutate,field", [
    (lambda d: d.pop("package"), "package"),
    (lambda d: d.update(tasks=[]), "tasks"),
    (lambda d: d.update(extra_key=1), "extra_key"),
    (lambda d: d["tasks"][0].update(metric_type="judge"), "metric_type"),
    (lambda d: d["tasks"][0].pop("task"), "task"),
    (lambda d: d["tasks"][0].update(task_id=""), "task_id"),
    (lambda d: d["tasks"][0].update(task_id="../etc"), "task_id"),
    (lambda d: d["tasks"][0].update(adb_query=3), "adb_query"),
    (lambda d: d["tasks"][0].update(answer="x"), "answer"),
    (lambda d: d["tasks"].append(dict(d["tasks"][0])), "task_id"),
])
def test_bad_input_names_file_task_and_field(mutate, field: str) -> None:
    d = _doc()
    mutate(d)
    with pytest.raises(TaskSpecError) as ei:
        tasks_from_data(d, "clock.yaml")
    msg = str(ei.value)
    assert "clock.yaml" in msg and field in msg


def test_bad_files(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("APP: [unclosed", encoding="utf-8")
    with pytest.raises(TaskSpecError, match="a.yaml: not valid YAML"):
        load_file(tmp_path / "a.yaml")
    with pytest.raises(TaskSpecError, match="no AndroidLab"):
        load_dir(tmp_path / "missing")
    ok = tmp_path / "ok"
    ok.mkdir()
    (ok / "one.yaml").write_text(yaml.safe_dump(_doc()), encoding="utf-8")
    (ok / "two.yaml").write_text(yaml.safe_dump(_doc()), encoding="utf-8")
    with pytest.raises(TaskSpecError, match="two.yaml.*clock_1.*duplicate of the task in .*one.yaml"):
        load_dir(ok)
    with pytest.raises(TaskSpecError, match="expected 137 AndroidLab tasks, found 138"):
        load_dir(FIX, expect=137)


@pytest.mark.skipif(not os.environ.get("GUIGYM_ANDROIDLAB_TASKS"),
                    reason="GUIGYM_ANDROIDLAB_TASKS (a checkout's evaluation/config) not set")
def test_live_checkout_loads() -> None:
    assert len(load_dir(os.environ["GUIGYM_ANDROIDLAB_TASKS"], expect=138)) == 138
