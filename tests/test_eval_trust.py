"""guigym eval results you can trust (issue 34): agent failures are lost (never scored), config
errors stop the run before the first episode (exit 2, never lost), a resume checks what it
resumes, and Ctrl-C ends with one line.

Real parts: loopback HTTP model servers (refusing, hanging, HTTP 500, unparseable reply), the real
EnvPool over LatencyModel-v0 (a stand-in env, no browser: cheap) and, for Ctrl-C, MiniWoB-v0 in
Chromium in a ``guigym eval`` subprocess.
"""
from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from guigym.agents.base import AGENTS
from guigym.cli import main
from guigym.core.errors import ConfigError, TaskSpecError
from guigym.eval.runner import read_jsonl

#: a cheap env for the CLI: no sleeping, a black 64x48 screenshot (the openai agent sends it)
LATENCY = ["--env", "LatencyModel-v0", "--env-opt", "time_scale=0", "--env-opt", "screen=[64,48]",
           "--tasks", "latency-000", "--max-steps", "3", "--num-envs", "1", "--no-screenshots"]
OSWORLD_DIR = str(Path(__file__).parent / "fixtures" / "osworld_os")  # a folder of OSWorld task files
FAST_RETRY = ["--agent-retries", "1", "--agent-backoff", "0.01"]


def run_cli(*args: str) -> int:
    return main(["eval", "--quiet", *args])


class RaisingAgent:
    """An agent whose every call raises, as a broken client library would."""

    name = "test-raising"

    total = 0  # act() calls over all instances

    def __init__(self, seed: int = 0) -> None:
        pass

    def reset(self, task_info: dict[str, Any]) -> None:
        pass

    def act(self, obs: dict[str, Any]) -> str:
        RaisingAgent.total += 1
        raise RuntimeError("client library exploded")


if "test-raising" not in AGENTS:
    AGENTS.register("test-raising", RaisingAgent)


class ModelServer:
    """A loopback chat-completions server: ``mode`` is ``"500"`` (every POST answers HTTP 500),
    ``"hang"`` (every POST waits until :meth:`close`, at most 300 s) or ``"garbage"`` (HTTP 200
    with a reply that is no action). ``posts`` counts POST requests."""

    def __init__(self, mode: str) -> None:
        self.posts = 0
        self.release = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.posts += 1
                if mode == "hang":
                    server.release.wait(300)
                if mode == "500" or mode == "hang":
                    self.send_response(500)
                    body = b'{"error": "model crashed"}'
                else:
                    self.send_response(200)
                    body = json.dumps({"choices": [{"message": {"content": "I would rather not click"}}]}).encode()
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def _lost_records(out: Path) -> list[dict[str, Any]]:
    records = read_jsonl(out / "results.jsonl")
    assert records and all(r["status"] == "lost" for r in records), records
    return records


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_refused_connection_is_lost_not_scored_and_exits_nonzero(tmp_path, capsys):
    with socket.socket() as sock:  # bound, never listening: connections are refused
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        rc = run_cli(*LATENCY, "--episodes", "2", *FAST_RETRY, "--agent", f"openai:{url}",
                     "--agent-opt", "retries=0", "--agent-opt", "model=m", "--out", str(tmp_path / "o"))
    assert rc == 1
    records = _lost_records(tmp_path / "o")
    assert len(records) == 2 and all("Connection refused" in r["error"] for r in records)
    assert all(r["steps"] == 0 for r in records), "no step was taken with an agent error as its action"
    line = _one_error_line(capsys.readouterr().err)
    assert "2/2 episodes lost" in line and "2x agent:" in line and "Connection refused" in line
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["overall"]["episodes"] == 0 and summary["overall"]["lost"] == 2


def test_http_500_is_retried_then_lost(tmp_path, capsys):
    server = ModelServer("500")
    try:
        rc = run_cli(*LATENCY, "--episodes", "2", *FAST_RETRY, "--agent", f"openai:{server.url}",
                     "--agent-opt", "retries=0", "--agent-opt", "model=m", "--out", str(tmp_path / "o"))
    finally:
        server.close()
    assert rc == 1
    records = _lost_records(tmp_path / "o")
    assert len(records) == 2 and all("HTTP 500" in r["error"] for r in records)
    assert server.posts == 2 * 2, "each episode: its first call and one retry (--agent-retries 1)"
    assert "HTTP 500" in _one_error_line(capsys.readouterr().err)


def test_hanging_server_is_bounded_by_the_agent_timeout(tmp_path, capsys):
    server = ModelServer("hang")
    try:
        rc = run_cli(*LATENCY, "--episodes", "1", *FAST_RETRY, "--agent-timeout", "0.5",
                     "--agent", f"openai:{server.url}", "--agent-opt", "retries=0", "--agent-opt", "model=m",
                     "--out", str(tmp_path / "o"))
        # the run is over while the server still holds both calls: the timeout ended it, not the server
        assert not server.release.is_set() and server.posts == 2
    finally:
        server.close()
    assert rc == 1
    (record,) = _lost_records(tmp_path / "o")
    assert "did not return within 0.5 s" in record["error"]
    _one_error_line(capsys.readouterr().err)


def test_raising_agent_is_lost_and_the_run_stops_after_three_in_a_row(tmp_path, capsys):
    RaisingAgent.total = 0
    rc = run_cli(*LATENCY, "--episodes", "5", *FAST_RETRY, "--agent", "test-raising", "--out", str(tmp_path / "o"))
    assert rc == 1
    records = _lost_records(tmp_path / "o")
    assert len(records) == 3 and RaisingAgent.total == 3 * 2, "3 episodes of 2 calls, then no more started"
    assert all("RuntimeError: client library exploded" in r["error"] for r in records)
    err = capsys.readouterr().err
    assert "stopping: the agent failed in 3 episodes in a row" in err
    line = _one_error_line(err)
    assert "5/5 episodes lost or not run" in line and "3x agent:" in line and "2x not run" in line


def test_an_unparseable_model_reply_stays_the_models_scored_failure(tmp_path):
    server = ModelServer("garbage")
    try:
        rc = run_cli(*LATENCY, "--episodes", "1", "--agent", f"openai:{server.url}", "--agent-opt", "model=m",
                     "--out", str(tmp_path / "o"))
    finally:
        server.close()
    assert rc == 0
    (r,) = read_jsonl(tmp_path / "o" / "results.jsonl")
    assert (r["status"], r["score"], r["success"], r["steps"]) == ("done", 0.0, False, 3)
    episode = json.loads((tmp_path / "o" / r["trajectory_dir"] / "episode.json").read_text())
    assert all(s["action_error"] and s["action_text"] == "I would rather not click" for s in episode["steps"])


# ---- configuration errors: before the first episode, exit 2, never lost ---------------------------
@pytest.mark.parametrize("args, names", [
    (["--env-opt", "max_step=3"], ["'max_step'", "did you mean 'max_steps'"]),
    (["--env-opt", "dialect=uitar"], ["dialect", "'uitar'", "did you mean 'uitars'"]),
    (["--tasks", "click-tesst"], ["click-tesst", "did you mean 'click-test'"]),
    (["--env", "MiniWob-v0"], ["'MiniWob-v0'", "did you mean 'MiniWoB-v0'"]),
    (["--env", "OSWorld-v0", "--suite", "/no/such/suite"], ["/no/such/suite"]),
    (["--env", "OSWorld-v0", "--suite", OSWORLD_DIR, "--env-opt", "suite=embedded"],
     ["--suite", "suite="]),
    (["--env", "WebArena-v0", "--env-opt", "config_file=/no/such.json"], ["config_file", "/no/such.json"]),
    (["--suite", "flight", "--env", "AndroidWorld-v0"], ["--suite", "AndroidWorld-v0"]),
])
def test_config_errors_stop_before_any_episode(tmp_path, capsys, args, names):
    base = ["--tasks", "click-test"] if "--tasks" not in args and "--suite" not in args else []
    rc = run_cli(*base, *args, "--out", str(tmp_path / "o"))
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert all(n in err for n in names), err
    assert not (tmp_path / "o").exists(), "nothing ran, nothing was recorded"


def test_osworld_suite_folder_is_the_envs_suite_too():
    """``--suite DIR`` alone: the env gets ``suite=DIR`` (it resolves the task ids there), so its
    episodes are not lost to 'unknown task' at reset."""
    from guigym.cli import _eval_config, build_parser

    args = build_parser().parse_args(["eval", "--env", "OSWorld-v0", "--suite", OSWORLD_DIR,
                                      "--agent", "noop", "--out", "unused"])
    config = _eval_config(args)
    assert config.env_kwargs["suite"] == OSWORLD_DIR
    assert "13584542-872b-42d8-b299-866967b5c3ef" in config.task_ids


def test_a_config_error_inside_an_env_worker_stops_the_run_and_is_not_lost(tmp_path):
    """An option only the env itself can judge (LatencyModel-v0 refuses time_scale < 0 when it is
    built in the worker) stops the run with a ConfigError; results.jsonl gets no lost record."""
    from guigym.agents.simple import NoopAgent
    from guigym.eval.runner import EvalConfig, run_eval

    cfg = EvalConfig(env_id="LatencyModel-v0", task_ids=["latency-000"], out_dir=tmp_path / "o",
                     env_kwargs={"time_scale": -1.0, "screen": [64, 48]}, save_screenshots=False)
    with pytest.raises(ConfigError, match="time_scale must be >= 0"):
        run_eval(cfg, NoopAgent, progress=False)
    assert read_jsonl(tmp_path / "o" / "results.jsonl") == []


def test_gym_make_names_unknown_options_and_dialects():
    import gymnasium as gym

    import guigym  # noqa: F401

    with pytest.raises(ConfigError, match=r"unknown option 'max_step'; did you mean 'max_steps'\?"):
        gym.make("MiniWoB-v0", task="click-test", max_step=3)
    with pytest.raises(ConfigError, match=r"unknown action dialect 'uitar'; did you mean 'uitars'\?"):
        gym.make("MiniWoB-v0", task="click-test", dialect="uitar")
    with pytest.raises(ConfigError, match="did you mean 'serial'"):  # forwarded **kwargs are checked too
        gym.make("AndroidWorld-v0", serail="emulator-5554")
    with pytest.raises(TaskSpecError, match=r"click-tesst; did you mean 'click-test'\?"):
        gym.make("MiniWoB-v0", tasks=["click-tesst"])
    with pytest.raises(TaskSpecError, match="/no/such/suite"):
        gym.make("OSWorld-v0", suite="/no/such/suite")


# ---- resume identity -----------------------------------------------------------------------------
def test_resume_refuses_another_agent_names_the_keys_and_overwrite_starts_afresh(tmp_path, capsys):
    out = str(tmp_path / "o")
    assert run_cli(*LATENCY, "--episodes", "2", "--agent", "random", "--out", out) == 0
    config = json.loads((tmp_path / "o" / "config.json").read_text())
    assert (config["agent"], config["env_id"], config["task_ids"], config["episodes"], config["seed"],
            config["attempts"]) == ("random", "LatencyModel-v0", ["latency-000"], 2, 0, 1)
    assert config["env_kwargs"]["max_steps"] == 3 and config["guigym_version"]
    before = (tmp_path / "o" / "results.jsonl").read_text()
    capsys.readouterr()

    assert run_cli(*LATENCY, "--episodes", "1", "--agent", "noop", "--out", out) == 2
    err = capsys.readouterr().err
    assert "agent: recorded \"random\", now \"noop\"" in err and "episodes: recorded 2, now 1" in err
    assert "--overwrite" in err and "seed:" not in err
    assert (tmp_path / "o" / "results.jsonl").read_text() == before, "a refused resume writes nothing"

    assert run_cli(*LATENCY, "--episodes", "1", "--agent", "noop", "--overwrite", "--out", out) == 0
    (r,) = read_jsonl(tmp_path / "o" / "results.jsonl")
    assert r["key"] == "latency-000/0/0" and r["success"] is False
    assert json.loads((tmp_path / "o" / "config.json").read_text())["agent"] == "noop"


def test_resume_skips_finished_episodes_says_so_and_counts_only_requested_keys(tmp_path, capsys):
    out = tmp_path / "o"
    assert run_cli(*LATENCY, "--episodes", "2", "--agent", "noop", "--out", str(out)) == 0
    # a stray record of an episode this run does not ask for (an older guigym had no identity check)
    with open(out / "results.jsonl", "a") as f:
        f.write(json.dumps({"key": "latency-009/7/0", "task_id": "latency-009", "seed": 7, "attempt": 0,
                            "status": "done", "score": 1.0, "success": True, "steps": 1}) + "\n")
    capsys.readouterr()
    assert run_cli(*LATENCY, "--episodes", "2", "--agent", "noop", "--out", str(out)) == 0
    assert "skipping 2 of 2 episodes already finished; running 0" in capsys.readouterr().err
    overall = json.loads((out / "summary.json").read_text())["overall"]
    assert overall["episodes"] == 2 and overall["success_rate"] == 0.0, "the stray success is not counted"


# ---- Ctrl-C --------------------------------------------------------------------------------------
def test_ctrl_c_prints_one_line_and_keeps_the_finished_episodes(tmp_path):
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "guigym.cli", "eval", "--quiet", "--agent", "random", "--tasks",
           "click-test,enter-text", "--episodes", "10", "--num-envs", "2", "--max-steps", "5", "--no-screenshots",
           "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    # a session of its own: SIGINT to its process group is what Ctrl-C in a terminal sends
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        results = out / "results.jsonl"
        for _ in range(2400):  # at most 240 s for the first episode
            if results.exists() and results.read_text().count("\n") >= 1:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        else:
            pytest.fail("no episode finished in 240 s")
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    saved = len({r["key"] for r in read_jsonl(out / "results.jsonl") if r["status"] == "done"})
    assert proc.returncode == 130, err
    assert err.strip() == f"interrupted: {saved}/20 episodes saved; rerun the same command to resume", err
    assert 1 <= saved < 20


def test_a_failed_openai_call_leaves_the_agents_history_as_it_was():
    """The runner retries a failed step with the same observation: the screenshot of the failed
    call must not be in the history twice."""
    import numpy as np

    from guigym.agents.openai_agent import APIError, OpenAIAgent

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        agent = OpenAIAgent(target=f"http://127.0.0.1:{sock.getsockname()[1]}/v1", model="m", retries=0, history=2)
        agent.reset({"instruction": "click", "seed": 0})
        with pytest.raises(APIError, match="refused"):
            agent.act({"screenshot": np.zeros((48, 64, 3), np.uint8)})
    assert len(agent.screens) == 0 and agent.actions == []
