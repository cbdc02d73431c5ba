"""``guigym tasks check --env WebArena-v0``: no-op 0 and reference 1 on every task of a WebArena
config file, the references coming from the sibling reference_solutions.json (played from the
observation only), and a mismatch in either direction is caught and named."""
from __future__ import annotations

import json

import pytest

from guigym.cli import main
from webarena_site import REFERENCES_FILE, TASKS_FILE, ShopSite, tasks


@pytest.fixture(scope="module")
def site():
    s = ShopSite()
    yield s
    s.close()


def check(*args: str) -> int:
    return main(["tasks", "check", "--env", "WebArena-v0", *args])


def test_every_test_site_task_scores_0_with_noop_and_1_with_its_reference(site, tmp_path, capsys):
    out = tmp_path / "rows.json"
    code = check("--tasks", str(TASKS_FILE), "--url", f"shopping={site.url}", "--json", str(out))
    rows = json.loads(out.read_text())
    assert code == 0, capsys.readouterr().out
    assert [(r["task"], r["noop"], r["reference"], r["status"]) for r in rows] == [
        (f"webarena.{i}", 0.0, 1.0, "ok") for i in (1, 2, 3)]


def test_a_wrong_reference_a_missing_one_and_a_noop_that_passes_are_mismatches(site, tmp_path):
    # task 1 answers a price it did not read; task 2 has no solution; task 3's solution looks for
    # an element the page does not have; task 9's evaluator already passes on the start page
    # (url_match of the start URL), so doing nothing scores 1
    trivial = dict(tasks()[1], task_id=9, require_login=False, storage_state=None,
                   eval={"eval_types": ["url_match"], "reference_answers": None,
                         "reference_url": "__SHOPPING__/", "program_html": []})
    (tmp_path / "tasks.json").write_text(json.dumps([*tasks(), trivial]))
    (tmp_path / "reference_solutions.json").write_text(json.dumps({
        "format": "guigym-webarena-reference/1",
        "solutions": {"1": ["stop [$48.00]"], "9": ["stop []"],
                      "3": [{"do": "click [{id}]", "find": {"role": "link", "name": "Purple Mug"}}]}}))
    out = tmp_path / "rows.json"
    code = check("--tasks", str(tmp_path / "tasks.json"), "--url", f"shopping={site.url}", "--json", str(out))
    rows = {r["task"]: r for r in json.loads(out.read_text())}
    assert code == 1
    assert rows["webarena.1"]["status"] == "mismatch" and "reference scored 0" in rows["webarena.1"]["reason"]
    assert rows["webarena.2"]["status"] == "mismatch" and "no reference solution" in rows["webarena.2"]["reason"]
    assert rows["webarena.9"]["status"] == "mismatch" and "no-op scored 1" in rows["webarena.9"]["reason"]
    assert rows["webarena.3"]["reference"] == 0.0 and "no link 'Purple Mug' in the observation" in rows["webarena.3"]["reason"]


@pytest.mark.parametrize("solutions, field", [
    ({"1": [{"do": "click [{id}]"}]}, "solutions.1[0]': field 'do' uses {id}"),  # {id} without find
    ({"1": [{"do": "stop [{match}]", "match": "("}]}, "solutions.1[0]': field 'match'"),
    ({"1": [{"do": "stop []", "run": "import os"}]}, "unknown key(s) ['run']"),
    ({"x": ["stop []"]}, "solutions key 'x'"),
])
def test_a_bad_reference_file_is_refused_naming_the_field(tmp_path, capsys, solutions, field):
    refs = tmp_path / "refs.json"
    refs.write_text(json.dumps({"format": "guigym-webarena-reference/1", "solutions": solutions}))
    assert check("--tasks", str(TASKS_FILE), "--references", str(refs), "--url", "shopping=http://127.0.0.1:9") == 2
    assert field in capsys.readouterr().err


def test_the_reference_file_sits_beside_the_task_file_and_covers_every_task():
    from guigym.envs.web.webarena.reference import load_references

    assert sorted(load_references(REFERENCES_FILE)) == sorted(t["task_id"] for t in tasks())
    # WebArena's schema is untouched: only keys the public test.raw.json uses, top level and in eval
    import gzip
    from pathlib import Path

    public = json.loads(gzip.open(Path(__file__).parent / "fixtures" / "webarena" / "test.raw.json.gz", "rt").read())
    keys, eval_keys = set().union(*public), set().union(*(c["eval"] for c in public))
    assert all(set(t) <= keys and set(t["eval"]) <= eval_keys for t in tasks())
