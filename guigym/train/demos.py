"""Demonstrations for supervised fine-tuning: played by an agent, rendered by the trainer's own prompt path.

Where they come from (the ``sft.demos`` section of a recipe):

* ``agent``: any registered agent spec (``oracle``, ``replay:DIR``, ``hf:PATH``, ``openai:URL``)
  played in the recipe's env on seeds disjoint from every evaluation seed. Only successful
  episodes become training samples (failed ones stay in the file, marked, so a rerun skips them).
* ``eval_dir``: a ``guigym eval`` output directory. It stores each step's action text and
  screenshot, not the a11y tree, so the (task, seed) pairs it solved are played again with
  ``replay:DIR`` and the env regenerates the observations; a pair whose replay no longer succeeds
  is dropped (counted).

Episodes are stored as JSON lines (:class:`DemoFile`, ``<run.dir>/demos.jsonl``), one line per
finished episode, appended atomically as each ends: a collection that dies keeps everything it
wrote and a rerun collects only the missing (task, seed) pairs. Lost episodes (an
``EnvInfraError`` in the env) are retried and never become demonstrations.

Rendering (:func:`render`): every step's observation goes through the run's own
:class:`~guigym.train.rollout.prompts.PromptBuilder` (the one GRPO rollouts use: template, chat
template, a11y compaction, constrained candidates), so the prompt SFT trains on is byte-identical
to the prompt RL samples from on the same page. The reply is the action text tokenised the way the
candidate trie tokenises it, plus the end token (what the rollout engine returns for that
choice). A step whose action is not among its constrained candidates cannot be produced by the
policy; its episode is dropped and counted.

Instruction variants (:func:`with_variants`): a one-step page answers more than the one question
its generator drew; ``guigym.agents.oracle.miniwob.instruction_variants`` lists every instruction
the task could have asked of the page with its solving action, and each becomes a demonstration
of its own (the page is unchanged, only the instruction differs).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np

from guigym.train.data.types import Step, Trajectory

#: observation keys kept per step (the screenshot is kept as its shape, or as a PNG when asked)
OBS_TEXT_KEYS = ("instruction", "a11y", "url")


@dataclass
class DemoStep:
    """One observation and the action the demonstrator took on it. ``screen`` = (H, W) of the
    screenshot (the a11y compaction uses it to drop off-screen nodes); ``image`` the PNG file name
    of the screenshot when images were kept (relative to the demo file's image folder)."""

    obs: dict[str, str]
    action_text: str
    screen: Optional[tuple[int, int]] = None
    image: Optional[str] = None


@dataclass
class Demo:
    """One demonstrated episode. ``source``: the agent spec that played it (plus ``+variant`` for a
    page re-asked with another instruction)."""

    task_id: str
    seed: int
    instruction: str
    steps: list[DemoStep]
    success: bool
    score: float
    source: str

    @property
    def key(self) -> str:
        return f"{self.task_id}/{self.seed}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Demo":
        steps = [DemoStep(obs=dict(s["obs"]), action_text=str(s["action_text"]),
                          screen=tuple(s["screen"]) if s.get("screen") else None, image=s.get("image"))
                 for s in d["steps"]]
        return cls(task_id=str(d["task_id"]), seed=int(d["seed"]), instruction=str(d["instruction"]), steps=steps,
                   success=bool(d["success"]), score=float(d["score"]), source=str(d["source"]))


class DemoFile:
    """``demos.jsonl`` (+ ``demo_images/``): append-only, one finished episode per line."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.image_dir = self.path.with_name(self.path.stem + "_images")

    def read(self) -> list[Demo]:
        """Every complete line (a torn last line from a crash is ignored)."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(Demo.from_dict(json.loads(line)))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                continue
        return out

    def append(self, demo: Demo) -> None:
        from guigym.core.files import append_jsonl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        append_jsonl(self.path, json.loads(demo.to_json()))

    def save_image(self, name: str, image: np.ndarray) -> str:
        from guigym.core.files import save_png_atomic

        self.image_dir.mkdir(parents=True, exist_ok=True)
        save_png_atomic(self.image_dir / name, np.asarray(image))
        return name

    def load_image(self, name: str) -> np.ndarray:
        from PIL import Image

        return np.asarray(Image.open(self.image_dir / name).convert("RGB"))


def reply_ids(tokenizer: Any, action_text: str) -> list[int]:
    """The token ids a constrained rollout produces for the reply ``action_text``: its candidate
    tokenisation (no special tokens, as the candidate trie tokenises) plus the end token."""
    return [int(t) for t in tokenizer(action_text, add_special_tokens=False)["input_ids"]] + \
        [int(tokenizer.eos_token_id)]


def _step_of(obs: dict[str, Any], action_text: str, keep_image: Optional[Callable[[np.ndarray], str]]) -> DemoStep:
    shot = obs.get("screenshot")
    screen = tuple(int(v) for v in np.asarray(shot).shape[:2]) if shot is not None else None
    image = keep_image(np.asarray(shot)) if (keep_image is not None and shot is not None) else None
    return DemoStep(obs={k: str(obs[k]) for k in OBS_TEXT_KEYS if obs.get(k) is not None}, action_text=action_text,
                    screen=screen, image=image)


def collect(env_id: str, env_kwargs: dict[str, Any], agent_spec: str, jobs: Sequence[tuple[str, int]],
            demo_file: DemoFile, *, num_envs: int = 1, max_steps: Optional[int] = None, keep_images: bool = False, max_lost_retries: int = 3, call_timeout_s: float = 120.0,
            progress: Optional[Callable[[int, int], None]] = None) -> dict[str, int]:
    """Play ``agent_spec`` on every (task, seed) of ``jobs`` not yet in ``demo_file`` and append
    each finished episode (a failed one too, with ``success: false``, so a rerun does not play it
    again; :func:`render` drops it). Returns counts: ``played``,
    ``kept``, ``failed``, ``lost`` (infrastructure failures, retried up to ``max_lost_retries``
    times each), ``skipped`` (already in the file)."""
    from collections import deque

    from guigym.agents import make_agent
    from guigym.core.errors import EnvInfraError
    from guigym.envs.pool import EnvPool

    from guigym.core.files import repair_jsonl

    repair_jsonl(demo_file.path)  # a line torn by a crash is cut, so the next append starts a fresh line
    done = {d.key for d in demo_file.read()}
    todo = deque((t, int(s)) for t, s in jobs if f"{t}/{int(s)}" not in done)
    counts = {"played": 0, "kept": 0, "failed": 0, "lost": 0, "skipped": len(jobs) - len(todo)}
    total = len(todo)
    if not todo:
        return counts
    n = max(1, min(num_envs, len(todo)))
    agents = [make_agent(agent_spec) for _ in range(n)]
    pool = EnvPool(env_id, n, env_kwargs=dict(env_kwargs), call_timeout_s=call_timeout_s)
    running: dict[int, dict[str, Any]] = {}
    lost: dict[tuple[str, int], int] = {}

    def start(i: int) -> None:
        if not todo:
            return
        task, seed = todo.popleft()
        running[i] = {"task": task, "seed": seed, "steps": [], "instruction": ""}
        opts: dict[str, Any] = {"task": task}
        if max_steps:
            opts["max_steps"] = int(max_steps)
        pool.reset_async(i, seed=seed, options=opts)

    def act(i: int, obs: dict[str, Any]) -> None:
        run = running[i]
        text = agents[i].act(obs)
        keep = None
        if keep_images:
            k = len(run["steps"])
            keep = lambda im, r=run, k=k: demo_file.save_image(f"{r['task']}_{r['seed']}_{k:03d}.png", im)  # noqa: E731
        run["steps"].append(_step_of(obs, text, keep))
        pool.step_async(i, text)

    try:
        for i in range(n):
            start(i)
        while running:
            for res in pool.wait():
                i = res.index
                run = running[i]
                if res.lost or res.error:
                    key = (run["task"], run["seed"])
                    lost[key] = lost.get(key, 0) + 1
                    counts["lost"] += 1
                    running.pop(i)
                    if lost[key] > max_lost_retries:
                        raise EnvInfraError(f"demonstration {key[0]}/{key[1]} lost {lost[key]} times: {res.error}")
                    todo.append(key)
                    start(i)
                    continue
                if res.kind == "reset":
                    obs, info = res.value
                    run["instruction"] = str(info.get("instruction", ""))
                    agents[i].reset(info)
                    act(i, obs)
                    continue
                obs, reward, terminated, truncated, info = res.value
                if not (terminated or truncated):
                    act(i, obs)
                    continue
                running.pop(i)
                success = bool(info.get("success"))
                counts["played"] += 1
                counts["kept" if success else "failed"] += 1
                # failures are written too, with success false: a rerun skips them, render() drops them
                demo_file.append(Demo(task_id=run["task"], seed=run["seed"], instruction=run["instruction"],
                                          steps=run["steps"], success=success, score=float(reward),
                                          source=agent_spec))
                if progress is not None:
                    progress(counts["played"], total)
                start(i)
    finally:
        pool.close()
    return counts


def eval_dir_jobs(path: str | os.PathLike[str], tasks: Optional[Sequence[str]] = None) -> list[tuple[str, int]]:
    """The (task, seed) pairs a ``guigym eval`` output directory solved (``results.jsonl`` records
    with ``success: true``), optionally only those of ``tasks``; replay them with ``replay:<path>``."""
    from guigym.core.files import read_jsonl

    results = Path(path) / "results.jsonl"
    if not results.exists():
        raise FileNotFoundError(f"sft.demos.path: {results} not found (is {path} a guigym eval output directory?)")
    wanted = set(tasks) if tasks else None
    pairs = {(str(r["task_id"]), int(r["seed"])) for r in read_jsonl(results)
             if r.get("success") is True and (wanted is None or r.get("task_id") in wanted)}
    return sorted(pairs)


def with_variants(demos: Iterable[Demo],
                  variants: Callable[[str, dict[str, Any]], list[tuple[str, list[str]]]]) -> list[Demo]:
    """Each one-step demo, plus one demo per other instruction its page could have been asked
    (``variants(task_id, obs)`` -> [(instruction, solving actions)]; the first solving action is
    demonstrated). Multi-step demos are returned as they are (their later pages depend on the
    instruction)."""
    out: list[Demo] = []
    for d in demos:
        out.append(d)
        if len(d.steps) != 1:
            continue
        step = d.steps[0]
        seen = {d.instruction}
        for instruction, ok in variants(d.task_id, observation(step)):
            if instruction in seen or not ok:
                continue
            seen.add(instruction)
            obs = {**step.obs, "instruction": instruction}
            out.append(Demo(task_id=d.task_id, seed=d.seed, instruction=instruction,
                            steps=[DemoStep(obs=obs, action_text=ok[0], screen=step.screen, image=step.image)],
                            success=True, score=1.0, source=d.source + "+variant"))
    return out


def observation(step: DemoStep, demo_file: Optional[DemoFile] = None) -> dict[str, Any]:
    """The observation dict the env gave (text keys + the screenshot: the stored PNG, else a
    black image of the stored shape, which is all a text-only prompt reads of it)."""
    obs: dict[str, Any] = dict(step.obs)
    if step.image and demo_file is not None:
        obs["screenshot"] = demo_file.load_image(step.image)
    elif step.screen:
        obs["screenshot"] = np.zeros((*step.screen, 3), dtype=np.uint8)
    return obs


@dataclass
class Rendered:
    trajectories: list[Trajectory] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> episodes


def render(demos: Sequence[Demo], builder: Any, run_id: str, *, demo_file: Optional[DemoFile] = None,
           put_image: Optional[Callable[[np.ndarray], str]] = None, source: str = "expert",
           reply: Optional[Callable[[int, int, DemoStep], str]] = None) -> Rendered:
    """Demos -> token-id :class:`Trajectory` objects (``source`` "expert"), through ``builder``
    (the run's :class:`PromptBuilder`). Each step: ``prompt_ids`` exactly as the rollout would
    build them, ``response_ids`` = the reply's tokens + the end token, ``rollout_logprobs`` zeros
    (nothing sampled them). The reply is the action text, or ``reply(demo index, step index,
    step)`` (reasoning SFT: "Thought: ...\nAction: <action>"); it is also what later steps' prompts
    list as history, as the rollout lists the sampled reply. Failed demos, steps whose action is not
    a candidate, and steps whose reply is not the bare action under constrained decoding are
    dropped (``Rendered.dropped`` counts them by reason)."""
    tok = builder.policy.tokenizer
    out = Rendered()

    def drop(reason: str) -> None:
        out.dropped[reason] = out.dropped.get(reason, 0) + 1

    for k, d in enumerate(demos):
        if not d.success:
            drop("not successful")
            continue
        ep = builder.episode(d.instruction)
        steps: list[Step] = []
        ok = True
        for j, st in enumerate(d.steps):
            obs = observation(st, demo_file)
            p = ep.prompt(obs)
            text = st.action_text if reply is None else reply(k, j, st)
            if p.candidates is not None and (st.action_text not in p.candidates or text != st.action_text):
                ok = False
                break
            response = reply_ids(tok, text)
            ep.add_response(response, text)
            refs = [put_image(im) for im in p.images] if (put_image is not None and p.images) else []
            info: dict[str, Any] = {"demo": d.source}
            if builder.mode == "multiturn":
                info["response_spans"] = [list(s) for s in p.response_spans]
            steps.append(Step(prompt_ids=list(p.prompt_ids), response_ids=response,
                              rollout_logprobs=[0.0] * len(response), policy_version=0, image_refs=refs,
                              action_text=text, action=st.action_text, candidates=p.candidates,
                              reward=0.0, info=info))
        if not ok:
            drop("action not among the constrained candidates")
            continue
        steps[-1].reward = d.score
        out.trajectories.append(Trajectory(
            traj_id=f"demo-{run_id[:8]}-{k:07d}", run_id=run_id, task_id=d.task_id, seed=d.seed,
            group_id=f"demo-{d.task_id}-{d.seed}", steps=steps, reward=d.score, success=True, source=source,
            info={"demo_source": d.source, "instruction": d.instruction}))
    return out


def tokenizer_texts(demos: Iterable[Demo], template: str) -> list[str]:
    """Text to train a tiny model's tokenizer on (``tiny.build_tokenizer(texts=...)``): each demo
    step's prompt body (the template filled with the instruction and the compact a11y text) and
    its action, so the pages' words and ids become single tokens."""
    from string import Template

    from guigym.train.rollout.prompts import compact_a11y

    tmpl = Template(template)
    texts = []
    for d in demos:
        for st in d.steps:
            a11y = compact_a11y(st.obs.get("a11y", ""), (st.screen[1], st.screen[0]) if st.screen else None)
            texts.append(tmpl.safe_substitute(instruction=st.obs.get("instruction", d.instruction), a11y=a11y,
                                              history="(none)"))
            texts.append(st.action_text)
    return texts


def split_jobs(tasks: Sequence[str], start: int, count: int) -> list[tuple[str, int]]:
    """Task-major (task, seed) pairs for seeds ``start .. start + count - 1`` of every task."""
    return [(t, s) for t in tasks for s in range(start, start + count)]



def packed_samples(demos: Sequence[Demo], builder: Any,
                   variants: Callable[[str, dict[str, Any]], list[tuple[str, list[str]]]],
                   turn_template: str = "Task: $instruction") -> tuple[list[Any], dict[str, int]]:
    """One training sequence per one-step demonstration page: the page's own prompt and reply
    (byte-identical to the GRPO prompt, as in :func:`render`), then one more chat turn per other
    instruction the page could have been asked (``turn_template`` filled with it, the page not
    repeated) and its solving reply. Every reply is trained (its own segment, constrained to the
    page's candidates); the page is encoded once for all its questions, so a page with k possible
    questions costs one forward instead of k. Layout of one sample::

        [prompt(page, q1)] [a1 eos] [turn(q2)] [a2 eos] ... [turn(qk)] [ak eos]
         mask 0             mask 1   mask 0     mask 1        mask 0    mask 1

    Returns (samples, dropped counts by reason); multi-step demos are left out (dropped
    "multi-step")."""
    from string import Template

    from guigym.train.samples import Sample, Segment

    tok = builder.policy.tokenizer
    prefix, suffix = builder.turn_frame(0)
    turn = Template(turn_template)
    out: list[Any] = []
    dropped: dict[str, int] = {}
    for d in demos:
        reason = None if d.success else "not successful"
        if reason is None and len(d.steps) != 1:
            reason = "multi-step"
        if reason:
            dropped[reason] = dropped.get(reason, 0) + 1
            continue
        st = d.steps[0]
        obs = observation(st)
        p = builder.episode(d.instruction).prompt(obs)
        if p.candidates is not None and st.action_text not in p.candidates:
            dropped["action not among the constrained candidates"] = \
                dropped.get("action not among the constrained candidates", 0) + 1
            continue
        ids = list(p.prompt_ids)
        segments = []
        asked = {d.instruction}
        qa = [(d.instruction, st.action_text)] + [(q, ok[0]) for q, ok in variants(d.task_id, obs) if ok]
        for k, (question, action) in enumerate(qa):
            if k > 0:
                if question in asked or (p.candidates is not None and action not in p.candidates):
                    continue
                asked.add(question)
                ids += list(builder.policy.encode(prefix + turn.safe_substitute(instruction=question) + suffix)
                            .prompt_ids)
            reply = reply_ids(tok, action)
            segments.append(Segment(len(ids), len(ids) + len(reply), p.candidates))
            ids += reply
        mask = [0] * len(ids)
        for s in segments:
            mask[s.start:s.end] = [1] * (s.end - s.start)
        out.append(Sample(input_ids=ids, loss_mask=mask, rollout_logprobs=[0.0] * len(ids),
                          advantages=[0.0] * len(ids), segments=segments, traj_id=f"packed-{d.key}",
                          step_index=0, source="expert", reward=1.0))
    return out, dropped
