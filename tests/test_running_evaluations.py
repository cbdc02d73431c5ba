"""docs/running_evaluations.md works as written (issue 34, "Done when"): each platform's one-line
``guigym eval`` command is read from the page and run, with a cheap agent, one episode and a
small step budget: MiniWoB-v0, OSWorld-v0 (embedded task and a folder of task files),
WebArena-v0 (embedded Fossil site) and AndroidWorld-v0 on ``guigym android standin``. Also the
page's custom-agent example, written to a module and loaded with ``--agent module:Factory``."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from guigym.cli import main as cli_main
from guigym.eval.runner import read_jsonl

from _android_adb import adb_client  # noqa: F401 - the module's adb server
from desktop_needs import need_desktop

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "running_evaluations.md").read_text(encoding="utf-8")
LIMITS = ["--quiet", "--num-envs", "1", "--episodes", "1"]


def documented(env_id: str, flag: str) -> list[str]:
    """The page's one-line command for ``env_id`` that uses ``flag``, as argv (without 'guigym')."""
    block = PAGE.split("## One line per platform", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [ln for ln in block.splitlines() if f"--env {env_id} " in ln and f" {flag} " in ln]
    assert len(lines) == 1, f"docs/running_evaluations.md: one {env_id} line with {flag}, found {lines}"
    return shlex.split(lines[0])[1:]


def with_value(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with the value after ``flag`` replaced."""
    i = argv.index(flag)
    return argv[:i + 1] + [value] + argv[i + 2:]


def run(argv: list[str], out: Path, *extra: str) -> list[dict]:
    """Run ``argv`` with its ``--out`` in ``out`` plus ``extra`` flags (later flags win); the
    final record of each episode in its results.jsonl (an episode lost to a slow machine and
    rerun by the runner has two lines)."""
    assert cli_main(with_value(argv, "--out", str(out)) + LIMITS + list(extra)) == 0
    return list({r["key"]: r for r in read_jsonl(out / "results.jsonl")}.values())


@pytest.fixture
def agent_modules(tmp_path, monkeypatch):
    """A folder on sys.path holding the page's example agent (my_agents.py) and test agents."""
    example = re.search(r"```python\n(# my_agents\.py\n.*?)```", PAGE, re.S)
    assert example, "docs/running_evaluations.md lost its my_agents.py example"
    (tmp_path / "my_agents.py").write_text(example.group(1))
    (tmp_path / "wa_agents.py").write_text(
        "class Fixed:\n"
        "    '''Answers webarena.1001 (its reference answer) at once.'''\n"
        "    name = 'fixed'\n"
        "    def reset(self, task_info):\n        pass\n"
        "    def act(self, obs):\n        return 'stop [Fixed]'\n")
    (tmp_path / "aw_agents.py").write_text(
        "import re\n"
        "class OpenNamedApp:\n"
        "    '''Opens the app the instruction names, then says the goal is complete.'''\n"
        "    name = 'open-named-app'\n"
        "    def reset(self, task_info):\n"
        "        self.app, self.opened = re.search(r'Open the (.+?) app', task_info['instruction']).group(1), False\n"
        "    def act(self, obs):\n"
        "        if self.opened:\n"
        "            return '{\"action_type\": \"status\", \"goal_status\": \"complete\"}'\n"
        "        self.opened = True\n"
        "        return '{\"action_type\": \"open_app\", \"app_name\": \"%s\"}' % self.app\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("my_agents", "wa_agents", "aw_agents"):
        sys.modules.pop(name, None)


def test_miniwob_line_and_its_final_screenshot_shows_the_page_the_agent_left(tmp_path):
    (rec,) = run(documented("MiniWoB-v0", "--tasks"), tmp_path / "miniwob")
    assert rec["status"] == "done" and rec["success"] is True
    # the final screenshot is the page as the agent left it, not core.js's black START cover
    # (#111 over the 160x210 task area) that the page shows once it ends the episode
    final = tmp_path / "miniwob" / rec["trajectory_dir"] / f"step_{rec['steps']:03d}.png"
    area = np.asarray(Image.open(final).convert("RGB"))[:210, :160].astype(int)
    dark = float((area.max(axis=2) < 40).mean())
    assert dark < 0.5, f"{dark:.0%} of the task area is near-black: the START cover"


def test_the_documented_custom_agent_runs_from_its_module(agent_modules, tmp_path):
    line = re.search(r"PYTHONPATH=\. (guigym eval .*--agent my_agents:FirstButton.*)", PAGE)
    assert line, "docs/running_evaluations.md lost the command running the example agent"
    (rec,) = run(shlex.split(line.group(1))[1:], tmp_path / "mine")
    assert rec["status"] == "done" and rec["score"] == 1.0  # it clicked the button click-test asks for


def test_osworld_lines_embedded_task_and_task_folder(tmp_path):
    need_desktop()
    (rec,) = run(documented("OSWorld-v0", "--tasks"), tmp_path / "embedded", "--agent", "noop", "--max-steps", "1")
    assert (rec["task_id"], rec["status"], rec["score"]) == ("terminal-mkdir", "done", 0.0)
    folder = tmp_path / "tasks" / "os"  # one domain folder, as in OSWorld's examples/
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "guigym" / "envs" / "desktop" / "suite" / "terminal" / "terminal-mkdir.json", folder)
    argv = with_value(documented("OSWorld-v0", "--suite"), "--suite", str(folder))
    (rec,) = run(argv, tmp_path / "folder", "--agent", "noop", "--max-steps", "1")
    assert (rec["task_id"], rec["status"], rec["score"]) == ("terminal-mkdir", "done", 0.0)


@pytest.mark.skipif(shutil.which("fossil") is None, reason="the Fossil site needs the 'fossil' program")
def test_webarena_line_embedded_fossil(agent_modules, tmp_path):
    argv = documented("WebArena-v0", "--embedded")
    (rec,) = run(argv, tmp_path / "wa", "--tasks", "1001", "--agent", "wa_agents:Fixed", "--max-steps", "2")
    assert (rec["task_id"], rec["status"], rec["score"]) == ("webarena.1001", "done", 1.0)


def test_androidworld_line_on_the_standin_command(adb_client, agent_modules, tmp_path):  # noqa: F811
    proc = subprocess.Popen([sys.executable, "-m", "guigym.cli", "android", "standin"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    serial = ""
    try:
        first = proc.stdout.readline()  # "serial 127.0.0.1:PORT" once it listens
        assert first.startswith("serial 127.0.0.1:"), first
        serial = first.split()[1]
        argv = documented("AndroidWorld-v0", "--env-opt")
        argv = with_value(argv, "--env-opt", f"serial={serial}")
        recs = run(argv, tmp_path / "aw", "--agent", "aw_agents:OpenNamedApp", "--max-steps", "3",
                   "--env-opt", "settle_s=0")
        assert [(r["task_id"], r["status"], r["score"]) for r in recs] == [("OpenAppTaskEval", "done", 1.0)]
        # the same task, an agent that does nothing: the app the task names is not in front
        recs = run(argv, tmp_path / "aw-noop", "--agent", "noop", "--max-steps", "1", "--env-opt", "settle_s=0")
        assert [(r["status"], r["score"]) for r in recs] == [("done", 0.0)]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        try:
            adb_client.disconnect(serial)
        except Exception:  # noqa: BLE001 - never connected, or already gone
            pass
