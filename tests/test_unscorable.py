"""Unscorable episodes (a verifier score of None, e.g. WebArena's fuzzy_match without an LLM judge)
are never turned into 0 or 1: not by the eval runner, its summary and reports, nor by the trainer's
rollout scheduler, which leaves them out of their GRPO group and counts them.
"""
from __future__ import annotations

import concurrent.futures
import json
from typing import Any, Optional

import numpy as np
import pytest

from guigym.core import actions as A
from guigym.core.task import Task
from guigym.envs.base import GUIEnv
from guigym.envs.pool import PoolResult
from train_helpers import FixedPrompts
from guigym.eval.report import build_report_html, write_results_csv
from guigym.eval.runner import EvalConfig, read_jsonl, run_eval
from guigym.eval.summary import render_table, summarize


def rec(key: str, status: str, success: Optional[bool], score: Optional[float], steps: int = 2) -> dict[str, Any]:
    task, seed, attempt = key.split("/")
    return {"key": key, "task_id": task, "seed": int(seed), "attempt": int(attempt), "status": status,
            "success": success, "score": score, "steps": steps, "domain": "shopping"}


def test_summary_counts_unscorable_apart_from_successes_failures_and_losses(tmp_path):
    records = [
        rec("a/0/0", "done", True, 1.0),
        rec("b/0/0", "done", False, 0.0),
        rec("c/0/0", "unscorable", None, None, steps=7),
        rec("d/0/0", "lost", False, 0.0),
        rec("d/0/0", "unscorable", None, None),  # the retry of a lost episode ended unscorable
    ]
    s = summarize(records)["overall"]
    assert (s["episodes"], s["lost"], s["unscorable"]) == (2, 0, 2)
    assert s["success_rate"] == 0.5 and s["mean_score"] == 0.5 and s["mean_steps"] == 2.0
    assert summarize(records)["per_task"]["c"]["success_rate"] is None  # nothing scored: no rate, not 0 %
    # the CLI table and the HTML report show the count; the CSV leaves score and success empty
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(render_table(summarize(records)))
    text = console.export_text()
    overall = [ln for ln in text.splitlines() if "OVERALL" in ln][0]
    assert "unscorable" in text and overall.replace("│", " ").split()[1:5] == ["2", "0", "2", "50.0%"], text
    page = build_report_html(tmp_path, records)
    assert 'class="badge unscorable"' in page and "<th>unscorable</th>" in page
    rows = write_results_csv(tmp_path, records).read_text().splitlines()
    row_c = next(r for r in rows if r.startswith("c/0/0,"))
    assert ",unscorable,,," in row_c, row_c


# ---- the eval runner on the real WebArena env (Chromium + the loopback test shop) ------------------
class StopAgent:
    """Answers at once with ``stop [12.50]`` (WebArena's dialect)."""

    name = "stop"

    def reset(self, info: dict[str, Any]) -> None:
        pass

    def act(self, obs: dict[str, Any]) -> str:
        return "stop [12.50]"


def test_eval_runner_records_an_unscorable_episode_as_such_and_does_not_rerun_it(tmp_path):
    from webarena_site import ShopSite, tasks

    fuzzy = dict(tasks()[0], task_id=5, eval={"eval_types": ["string_match"], "reference_answers": {"fuzzy_match": ["12.50"]},
                                                 "reference_url": "", "program_html": []})
    config_file = tmp_path / "tasks.json"
    config_file.write_text(json.dumps([tasks()[0], fuzzy]))
    site = ShopSite()
    try:
        cfg = EvalConfig(env_id="WebArena-v0", task_ids=["webarena.1", "webarena.5"], out_dir=tmp_path / "run",
                         env_kwargs={"config_file": str(config_file), "urls": {"shopping": site.url}},
                         save_screenshots=False, call_timeout_s=180)
        records = run_eval(cfg, StopAgent, progress=False)
        by_task = {r["task_id"]: r for r in records}
        assert by_task["webarena.1"]["status"] == "done" and by_task["webarena.1"]["success"] is True
        fz = by_task["webarena.5"]
        assert (fz["status"], fz["score"], fz["success"]) == ("unscorable", None, None), fz
        assert fz["verifier"]["unscorable_reason"]
        episode = json.loads((cfg.out_dir / fz["trajectory_dir"] / "episode.json").read_text())
        assert episode["steps"][-1]["reward"] is None  # not the env's placeholder 0.0
        summary = json.loads((cfg.out_dir / "summary.json").read_text())["overall"]
        assert (summary["episodes"], summary["unscorable"], summary["success_rate"]) == (1, 1, 1.0)
        # resuming runs nothing again: the unscorable episode finished
        assert len(read_jsonl(cfg.out_dir / "results.jsonl")) == 2
        run_eval(cfg, StopAgent, progress=False)
        assert len(read_jsonl(cfg.out_dir / "results.jsonl")) == 2
    finally:
        site.close()


# ---- the trainer's rollout scheduler ----------------------------------------------------------------
class AnswerEnv(GUIEnv):
    """A GUIEnv whose verifier scores the ``done(answer=...)`` text: "yes" 1, "no" 0, "judge"
    unscorable (None), as a fuzzy_match task without a judge is."""

    def __init__(self) -> None:
        super().__init__([Task(id="t", instruction="answer", platform="web", suite="test", max_steps=3)])

    def _start_episode(self, task: Task, seed: int) -> None:
        pass

    def _observe(self) -> dict[str, Any]:
        return {"screenshot": np.zeros((4, 4, 3), np.uint8), "instruction": "answer"}

    def _execute(self, action: A.Action) -> None:
        pass

    def _verify(self, task: Task, last_action: Optional[A.Action]) -> tuple[Optional[float], dict[str, Any]]:
        answer = getattr(last_action, "answer", None)
        return {"yes": 1.0, "no": 0.0}.get(answer), {"answer": answer}


class InlinePool:
    """One AnswerEnv run in this process with EnvPool's asynchronous interface."""

    num_envs, call_timeout_s = 1, 5.0

    def __init__(self) -> None:
        self.env = AnswerEnv()
        self.results: list[PoolResult] = []

    @property
    def busy(self) -> bool:
        return bool(self.results)

    def reset_async(self, i: int, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None) -> None:
        self.results.append(PoolResult(i, "reset", self.env.reset(seed=seed, options=options)))

    def step_async(self, i: int, action: str) -> None:
        self.results.append(PoolResult(i, "step", self.env.step(action)))

    def wait(self, timeout: Optional[float] = None) -> list[PoolResult]:
        out, self.results = self.results, []
        return out


class ScriptedService:
    """Replies with the next answer of ``answers`` (cycled), one request after another."""

    def __init__(self, answers: list[str]) -> None:
        self.answers, self.n = answers, 0

    def submit(self, req: Any) -> concurrent.futures.Future:
        from guigym.train.rollout.policy_service import GenResult

        fut: concurrent.futures.Future = concurrent.futures.Future()
        text = f"done(answer={self.answers[self.n % len(self.answers)]!r})"
        self.n += 1
        fut.set_result(GenResult(response_ids=[7], logprobs=[-0.5], text=text, entropy=None, policy_version=0))
        return fut

    def stats(self) -> dict[str, Any]:
        return {"requests": self.n, "busy_s": 0.0}


@pytest.mark.parametrize("mode", ["rollout", "sync"])
def test_scheduler_leaves_unscorable_rollouts_out_of_their_group_and_counts_them(mode):
    from guigym.train.rollout.scheduler import RolloutScheduler

    # members 0, 1, 2 answer yes, judge, no: the group holds the scored two (1.0 and 0.0), not a third 0.0
    sched = RolloutScheduler(InlinePool(), ScriptedService(["yes", "judge", "no"]), FixedPrompts(), mode=mode,
                             group_size=3, seed=1)
    (group,) = sched.collect(["t"], seeds=[4])
    assert [t.info["member"] for t in group.trajectories] == [0, 2]
    assert [t.reward for t in group.trajectories] == [1.0, 0.0]
    st = sched.last_stats
    assert (st.trajectories, st.unscorable, st.success_rate) == (2, 1, 0.5)
    # every member unscorable: no group at all (nothing to learn from)
    sched = RolloutScheduler(InlinePool(), ScriptedService(["judge"]), FixedPrompts(), mode=mode, group_size=2, seed=1)
    assert sched.collect(["t"], seeds=[4]) == []
    assert (sched.last_stats.trajectories, sched.last_stats.unscorable) == (0, 2)
