"""Hostile task files, results files, episode records and checkpoints: each attack made through
the public loader / runner / report / checkpoint API, asserting it is refused with an error that
names the field, and that nothing was written, read or executed outside its root.

Stand-in: :class:`RecordingDesktop` replaces the desktop behind ``run_setup`` (the attack is in
the task file; the desktop only has to answer ``execute`` and receive ``upload_file``, which it
records). The real-desktop path of the same steps is covered by tests/test_desktop_setup_getters.py.
"""
from __future__ import annotations

import base64
import json
import os
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from guigym.core import Task, TaskSpecError
from guigym.envs.desktop.setup import run_setup
from guigym.envs.desktop.tasks import load_osworld_task, parse_osworld_task


class RecordingDesktop:
    """Stand-in for a DesktopClient: commands print ``pwned``; uploads are recorded, not made."""

    def __init__(self) -> None:
        self.uploads: list[tuple[str, str]] = []

    def execute(self, command: Any, shell: bool = False, timeout: float = 120.0) -> dict[str, Any]:
        return {"status": "success", "output": "pwned\n", "error": "", "returncode": 0}

    def upload_file(self, local: str, remote_path: str) -> None:
        self.uploads.append((str(local), remote_path))


def _task_json(tmp: Path, config: list[dict[str, Any]], task_id: str = "0b7e5f5e-6d5b-4cf0-9f3a-0c2e3f4a5b6c") -> Path:
    d = tmp / "tasks" / "os"
    d.mkdir(parents=True, exist_ok=True)
    path = d / "task.json"
    path.write_text(json.dumps({"id": task_id, "instruction": "do it", "config": config,
                                "evaluator": {"func": "infeasible"}}))
    return path


def _run_task_setup(path: Path, cache: Path) -> RecordingDesktop:
    """What OSWorld-v0 does at reset: load the task file, run its config from its own folder."""
    task = load_osworld_task(path)
    desk = RecordingDesktop()
    run_setup(desk, task.setup, cache_dir=cache, base_dir=Path(task.source).parent, network_ok=False,
              screen_size=(1280, 720))
    return desk


# ---- task ids -------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["../../escape", "a/b", "..", ".hidden", "a\\b", "a\x00b", "/etc", "",
                                 "x" * 300, "-rf"])
def test_task_ids_that_are_not_plain_names_are_refused(tmp_path, bad):
    path = _task_json(tmp_path, [], task_id=bad)
    with pytest.raises(TaskSpecError, match=r"'id'"):
        load_osworld_task(path)
    with pytest.raises(TaskSpecError, match=r"field 'id'"):
        Task(id=bad, platform="web", suite="x")


@pytest.mark.parametrize("good", ["0b7e5f5e-6d5b-4cf0-9f3a-0c2e3f4a5b6c", "click-test-2", "flight.AA", "123",
                                  "ContactsAddContact", "calendar_1"])
def test_benchmark_task_ids_are_accepted(good):
    assert parse_osworld_task({"id": good, "instruction": "i", "evaluator": {"func": "infeasible"}}).id == good


def test_eval_refuses_a_traversing_task_id_before_making_any_directory(tmp_path):
    from guigym.eval.runner import EvalConfig, run_eval

    out = tmp_path / "deep" / "out"
    cfg = EvalConfig(env_id="guigym-no-such-env-v0", task_ids=["click-test", "../../../escaped"], out_dir=out)
    with pytest.raises(TaskSpecError, match=r"task_ids\[1\]"):
        run_eval(cfg, lambda: None, progress=False)
    assert not (tmp_path / "escaped").exists() and not out.exists()


# ---- setup cache names ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../../outside.txt", "{abs}", "sub/../../outside.txt", "link/outside.txt",
                                  "~/outside.txt"])
def test_execute_stdout_name_cannot_leave_the_cache(tmp_path, name):
    cache, outside = tmp_path / "cache", tmp_path / "elsewhere"
    cache.mkdir()
    outside.mkdir()
    (cache / "link").symlink_to(outside)  # a symlink inside the cache pointing out of it
    name = name.replace("{abs}", str(outside / "outside.txt"))
    path = _task_json(tmp_path, [{"type": "command", "parameters": {"command": ["true"], "stdout": name}}])
    with pytest.raises(TaskSpecError, match=r"config\[0\].*parameters\.stdout.*escapes the cache directory"):
        _run_task_setup(path, cache)
    assert list(outside.iterdir()) == [] and not (tmp_path / "outside.txt").exists()
    assert not (Path.home() / "outside.txt").exists() or (Path.home() / "outside.txt").read_text() != "pwned\n"


def test_execute_stdout_inside_the_cache_still_works(tmp_path):
    cache = tmp_path / "cache"
    path = _task_json(tmp_path, [{"type": "execute", "parameters": {"command": ["true"], "stdout": "sub/out.txt"}}])
    _run_task_setup(path, cache)
    assert (cache / "sub" / "out.txt").read_text() == "pwned\n"


# ---- upload_file sources ----------------------------------------------------------------------------
@pytest.mark.parametrize("local", ["/etc/passwd", "~/.bashrc", "../../secret.txt", "evil_link", "{cache_link}"])
def test_upload_file_cannot_copy_host_files_from_outside_the_task(tmp_path, local):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "cached_link").symlink_to(secret)
    local = local.replace("{cache_link}", str(cache / "cached_link"))
    path = _task_json(tmp_path, [{"type": "upload_file", "parameters": {
        "files": [{"local_path": local, "path": "/home/user/x.txt"}]}}])
    (path.parent / "evil_link").symlink_to(secret)  # planted next to the task file
    desk = RecordingDesktop()
    with pytest.raises(TaskSpecError, match=r"config\[0\].*parameters\.files\[0\]\.local_path.*lies outside"):
        run_setup(desk, load_osworld_task(path).setup, cache_dir=cache, base_dir=path.parent, network_ok=False)
    assert desk.uploads == []


def test_upload_file_from_the_task_folder_and_the_cache_works(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "cached.bin").write_bytes(b"c")
    path = _task_json(tmp_path, [{"type": "upload_file", "parameters": {"files": [
        {"local_path": "data/in.txt", "path": "/home/user/a.txt"},
        {"local_path": str(cache / "cached.bin"), "path": "/home/user/b.bin"}]}}])
    (path.parent / "data").mkdir()
    (path.parent / "data" / "in.txt").write_text("task data")
    desk = _run_task_setup(path, cache)
    assert desk.uploads == [(str((path.parent / "data" / "in.txt").resolve()), "/home/user/a.txt"),
                            (str((cache / "cached.bin").resolve()), "/home/user/b.bin")]


# ---- results files and episode records ------------------------------------------------------------
_PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


def _eval_out(tmp_path: Path, trajectory_dir: str, screenshot: str) -> Path:
    out = tmp_path / "out"
    tdir = out / "trajectories" / "t" / "0_0"
    tdir.mkdir(parents=True)
    (tdir / "step_000.png").write_bytes(_PNG)
    (tdir / "episode.json").write_text(json.dumps({"steps": [{"index": 0, "screenshot": screenshot}]}))
    record = {"key": "t/0/0", "task_id": "t", "seed": 0, "attempt": 0, "status": "done", "success": False,
              "score": 0.0, "steps": 1, "trajectory_dir": trajectory_dir}
    (out / "results.jsonl").write_text(json.dumps(record) + "\n")
    return out


@pytest.mark.parametrize("field,trajectory_dir,screenshot", [
    ("trajectory_dir", "../outside", "step_000.png"),
    ("trajectory_dir", "{outside}", "step_000.png"),
    ("screenshot", "trajectories/t/0_0", "../../../../outside/secret.png"),
    ("screenshot", "trajectories/t/0_0", "{outside}/secret.png"),
])
def test_report_does_not_inline_files_outside_the_output_dir(tmp_path, field, trajectory_dir, screenshot):
    from guigym.eval.report import write_reports

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.png").write_bytes(_PNG)
    (outside / "episode.json").write_text(json.dumps({"steps": [{"index": 0, "screenshot": "secret.png"}]}))
    out = _eval_out(tmp_path, trajectory_dir.replace("{outside}", str(outside)),
                    screenshot.replace("{outside}", str(outside)))
    with pytest.raises(TaskSpecError, match=field):
        write_reports(out)
    assert not (out / "report.html").exists()


# ---- checkpoints ------------------------------------------------------------------------------------
torch = pytest.importorskip("torch")


class _Payload:
    """Unpickling this creates ``marker``: what a planted checkpoint could do with os.system."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _learner() -> SimpleNamespace:
    """The parts of the trainer's Learner that checkpoint.save/load use, on a real nn.Linear."""
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    ln = SimpleNamespace(model=model, optimizer=opt, scheduler=sched, optimizer_steps=0)
    ln.trainable_state = lambda: {k: v.detach().clone() for k, v in model.state_dict().items()}
    ln.load_trainable_state = lambda sd: model.load_state_dict(sd)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    sched.step()
    ln.optimizer_steps = 1
    return ln


@pytest.mark.parametrize("planted", ["optimizer.pt", "rng.pt", "weights.pt"])
def test_planted_pickle_in_a_checkpoint_is_not_executed(tmp_path, planted):
    from guigym.train import checkpoint

    path = checkpoint.save(tmp_path / "ck", 1, _learner(), {"policy_version": 1})
    marker = tmp_path / "PWNED"
    torch.save({"optimizer": _Payload(marker), "state": _Payload(marker)}, path / planted)
    try:
        checkpoint.load(path, _learner())
        err: Exception | None = None
    except Exception as exc:  # noqa: BLE001 - inspected below
        err = exc
    assert not marker.exists(), f"loading a planted {planted} ran its payload ({err!r})"
    assert isinstance(err, checkpoint.CheckpointError) and planted in str(err), repr(err)


def test_checkpoint_rng_and_optimizer_roundtrip_with_weights_only(tmp_path):
    from guigym.train import checkpoint

    src = _learner()
    random.seed(3), np.random.seed(4), torch.manual_seed(5)
    random.gauss(0, 1)  # leaves a cached gaussian in python's state
    path = checkpoint.save(tmp_path / "ck", 7, src, {"cursor": 2})
    want = (random.random(), np.random.normal(), torch.rand(2).tolist())
    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    dst = _learner()
    state = checkpoint.load(path, dst)
    assert state == {"iteration": 7, "cursor": 2}
    assert (random.random(), np.random.normal(), torch.rand(2).tolist()) == want
    a, b = src.optimizer.state_dict(), dst.optimizer.state_dict()
    assert a["param_groups"] == b["param_groups"]
    for k in a["state"]:
        for name, v in a["state"][k].items():
            assert torch.equal(v, b["state"][k][name]), name
    assert dst.scheduler.state_dict()["last_epoch"] == src.scheduler.state_dict()["last_epoch"]
    assert os.path.exists(path / "rng.pt")


# --------------------------------------------------------------------------- agent-made databases

THUNDERBIRD_SQL = ("select sum(1) > 0 from messageAttributes where attributeID = 58 and value = 1 "
                   "and messageID in (select id from messages where folderID = 13);")


@pytest.mark.parametrize("schema", [
    # a view the task's SQL reads, computing its rows with a function that is not innocuous
    "CREATE VIEW messageAttributes AS SELECT json('58') + 0 AS attributeID, 1 AS value, 1 AS messageID",
    # a generated column doing the same inside a real table
    "CREATE TABLE messageAttributes (raw TEXT, value INTEGER, messageID INTEGER, "
    "attributeID INTEGER GENERATED ALWAYS AS (json(raw) + 0) VIRTUAL)",
])
def test_an_agent_made_database_cannot_run_functions_from_its_schema(tmp_path, schema):
    """run_sqlite3 reads the agent's database with ``PRAGMA trusted_schema=OFF`` (issue 35): SQL
    in the schema (views, generated columns, triggers) may only call innocuous functions, so the
    agent's file cannot make the task's query run code it chose."""
    import sqlite3

    from guigym.envs.desktop.evaluators import load_all
    from guigym.envs.desktop.evaluators.base import METRICS

    load_all()
    path = tmp_path / "global-messages-db.sqlite"
    conn = sqlite3.connect(path)
    conn.execute(schema)
    if "TABLE messageAttributes" in schema:
        conn.execute("INSERT INTO messageAttributes (raw, value, messageID) VALUES ('58', 1, 1)")
    conn.execute("CREATE TABLE messages (id INTEGER, folderID INTEGER)")
    conn.execute("INSERT INTO messages VALUES (1, 13)")
    conn.commit()
    conn.close()
    # trusting the schema, the function runs and the query scores (what the old code did)
    trusting = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    assert trusting.execute(THUNDERBIRD_SQL).fetchone()[0] == 1
    trusting.close()
    assert METRICS.get("run_sqlite3")(str(path), {"sql": THUNDERBIRD_SQL}) == 0.0


def test_an_agent_made_database_with_plain_tables_is_still_read(tmp_path):
    import sqlite3

    from guigym.envs.desktop.evaluators import load_all
    from guigym.envs.desktop.evaluators.base import METRICS

    load_all()
    path = tmp_path / "global-messages-db.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE messageAttributes (attributeID INTEGER, value INTEGER, messageID INTEGER)")
    conn.execute("INSERT INTO messageAttributes VALUES (58, 1, 1)")
    conn.execute("CREATE VIEW msgs AS SELECT id, folderID FROM m2")  # views of plain SQL still work
    conn.execute("CREATE TABLE m2 (id INTEGER, folderID INTEGER)")
    conn.execute("CREATE VIEW messages AS SELECT * FROM msgs")
    conn.execute("INSERT INTO m2 VALUES (1, 13)")
    conn.commit()
    conn.close()
    assert METRICS.get("run_sqlite3")(str(path), {"sql": THUNDERBIRD_SQL}) == 1.0
