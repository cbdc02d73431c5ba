"""OSWorld-v0's files (issue 34, item 5): the env's default cache is the folder ``guigym osworld
cache`` fills; every file a task's setup and evaluator need is checked at reset (never first at
``done()``); the README's ``guigym osworld cache --import DIR`` fills that cache. Runs against
test_osworld_env's recording stand-in provider (no desktop needed)."""
from __future__ import annotations

import uuid

import pytest

from guigym.cli import main as cli_main
from guigym.envs.desktop import cache as K
from guigym.envs.desktop.env import OSWorldEnv
from guigym.envs.desktop.setup import MissingResourceError, download_cache_path
from guigym.envs.desktop.tasks import parse_osworld_task

from test_osworld_env import RecordingClient, RecordingProvider

TASK_ID = "0b17a146-2934-46c7-8727-73ff6b6483e8"  # OSWorld task ids are UUIDs
SETUP_URL = "http://127.0.0.1:9/files/report.txt"  # port 9: nothing answers, and network stays off
GOLD_URL = "http://127.0.0.1:9/files/gold.txt"


def osworld_task(config: bool = True):
    """Setup downloads report.txt into the desktop; the evaluator compares it with a cloud file."""
    steps = [{"type": "download", "parameters": {"files": [{"url": SETUP_URL, "path": "/home/user/report.txt"}]}}]
    return parse_osworld_task({
        "id": TASK_ID, "instruction": "keep the report", "config": steps if config else [],
        "evaluator": {"func": "compare_text_file",
                      "result": {"type": "vm_file", "path": "/home/user/report.txt", "dest": "report.txt"},
                      "expected": {"type": "cloud_file", "path": GOLD_URL, "dest": "gold.txt"}}})


class UploadingClient(RecordingClient):
    def upload_file(self, local: str, remote: str) -> None:
        self.calls.append(("upload", remote))
        with open(local, "rb") as fh:
            self.files[remote] = fh.read()


class UploadingProvider(RecordingProvider):
    def start(self) -> UploadingClient:
        self.events.append("start")
        self.client = UploadingClient()
        return self.client


def test_default_cache_is_the_folder_osworld_cache_fills(monkeypatch, tmp_path):
    monkeypatch.setenv("GUIGYM_DATA_DIR", str(tmp_path / "data"))
    env = OSWorldEnv(tasks=[osworld_task()], provider=RecordingProvider(), settle_s=0)
    try:
        assert env.cache_dir == K.default_cache_dir() == tmp_path / "data" / "osworld-cache"
        # what episodes write is private to the env, never in the shared cache
        assert not env.eval_dir(env.tasks[0]).is_relative_to(env.cache_dir)
    finally:
        env.close()


@pytest.mark.parametrize("config", [True, False], ids=["setup-and-evaluator-file", "evaluator-file-only"])
def test_a_missing_file_fails_the_reset_naming_file_url_and_cache_command(tmp_path, config):
    prov = UploadingProvider()
    env = OSWorldEnv(tasks=[osworld_task(config)], provider=prov, settle_s=0, cache_dir=tmp_path / "cache")
    try:
        with pytest.raises(MissingResourceError) as err:
            env.reset(options={"task": TASK_ID})
        msg = str(err.value)
        first_url = SETUP_URL if config else GOLD_URL
        assert first_url in msg and "guigym osworld cache" in msg and str(tmp_path / "cache") in msg
        assert err.value.missing == first_url and str(err.value.cache_path) in msg
        assert ("and 1 more" in msg) == config
        assert "start" not in prov.events  # found before the desktop was touched
    finally:
        env.close()


def test_readme_import_example_fills_the_cache_the_env_reads(tmp_path, capsys):
    """``guigym osworld cache --import DIR`` (no --tasks) on a folder in OSWorld's own cache
    layout (``cache/<task id>/<uuid5>_<name>`` and ``cache/<task id>/<cloud dest>``)."""
    src = tmp_path / "osworld-cache-copy" / TASK_ID
    src.mkdir(parents=True)
    (src / f"{uuid.uuid5(uuid.NAMESPACE_URL, SETUP_URL)}_report.txt").write_text("quarterly numbers\n")
    (src / "gold.txt").write_text("quarterly numbers\n")
    (tmp_path / "osworld-cache-copy" / "README").write_text("left alone\n")
    cache = tmp_path / "cache"
    assert cli_main(["osworld", "cache", "--import", str(src.parent), "--cache-dir", str(cache)]) == 0
    assert "imported 2" in capsys.readouterr().out
    assert download_cache_path(cache / "setup", SETUP_URL, "/home/user/report.txt").read_text() == "quarterly numbers\n"
    assert (cache / "eval" / TASK_ID / "gold.txt").is_file()
    assert not list(cache.rglob("README"))  # neither a download's cache name nor in a task's folder

    prov = UploadingProvider()
    env = OSWorldEnv(tasks=[osworld_task()], provider=prov, settle_s=0, cache_dir=cache)
    try:
        env.reset(options={"task": TASK_ID})
        assert prov.client.files["/home/user/report.txt"] == b"quarterly numbers\n"  # from the cache
        _, reward, terminated, _, info = env.step("done()")
        assert terminated and reward == 1.0, info["verifier"]  # the gold file came from the cache too
        prov.client.files["/home/user/report.txt"] = b"something else\n"
        env.reset(options={"task": TASK_ID})
        prov.client.files["/home/user/report.txt"] = b"something else\n"
        _, reward, _, _, _ = env.step("done()")
        assert reward == 0.0
    finally:
        env.close()
    assert (cache / "eval" / TASK_ID / "gold.txt").read_text() == "quarterly numbers\n"  # the cache is intact


def test_import_without_tasks_or_a_cache_layout_says_what_to_do(tmp_path, capsys):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "report.txt").write_text("x")
    assert cli_main(["osworld", "cache", "--import", str(tmp_path / "src"), "--cache-dir", str(tmp_path / "c")]) == 1
    assert "give --tasks DIR" in capsys.readouterr().out
    assert cli_main(["osworld", "cache", "--cache-dir", str(tmp_path / "c")]) == 2
    assert "--tasks DIR is needed to download" in capsys.readouterr().err
