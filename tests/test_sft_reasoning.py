"""Reasoning SFT (MobileRL sec. 2.1): demonstrated steps annotated by an OpenAI-compatible server
(the scripted loopback stand-in, guigym.train.annotator_stub), the reasoning rendered into the trained
reply ``Thought: ...\\nAction: ...``, annotations cached so a rerun asks nothing again, a dead or
failing annotator a clear error; the ``thought`` dialect parses such replies back to the action."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from guigym.core import actions as A  # noqa: E402
from guigym.core.dialect import parse_action  # noqa: E402
from guigym.core.errors import ActionParseError, ConfigError  # noqa: E402
from guigym.train.annotator_stub import AnnotatorStub, stub_reasoning  # noqa: E402
from guigym.train.config import from_dict  # noqa: E402
from sft_helpers import hand_demos  # noqa: E402

TOKEN_ENV = "GUIGYM_TEST_ANNOTATOR_TOKEN"


@pytest.fixture(autouse=True)
def _threads(one_torch_thread):
    yield


def _cfg(run: Path, demos: Path, url: str, **annotator) -> dict:
    return {
        "stage": "sft",
        "run": {"name": "reasoning", "dir": str(run), "iterations": 1, "torch_threads": 1},
        "model": {"tiny": {"hidden": 32, "layers": 1, "vocab_size": 400, "tokenizer_from_demos": True}},
        "env": {"id": "MiniWoB-v0", "tasks": ["click-button"], "num_envs": 1, "max_steps": 1},
        "rollout": {"constrained": False, "max_new_tokens": 48,
                    "template": "Elements on screen:\n$a11y\nTask: $instruction"},
        "algorithm": {"per_device_train_batch_size": 8},
        "sft": {"demos": {"source": "demos_file", "path": str(demos)},
                "reply_template": "Thought: $reasoning\nAction: $action",
                "annotator": {"url": url, "model": "stub", "token_env": TOKEN_ENV, "retries": 1, **annotator}},
    }


def _build(cfg: dict):
    from guigym.train.sft import SFTTrainer

    t = SFTTrainer(from_dict(cfg), log=lambda m: None)
    t.build()
    return t


def test_reasoning_reaches_the_reply_tokens_and_the_cache_prevents_repeat_calls(tmp_path, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, "s3cret")
    demos = hand_demos(tmp_path / "src" / "demos.jsonl")
    with AnnotatorStub(token="s3cret") as stub:
        run = tmp_path / "run"
        t = _build(_cfg(run, demos.path, stub.url))
        try:
            assert len(stub.calls) == 3  # one request per demonstrated step
            answered = {user: text for user, text in stub.calls}
            tok = t.learner.policy.tokenizer
            trajs = t.store.get_trajectories(t.run_id, source="expert")
            assert len(trajs) == 3
            for tr, d in zip(sorted(trajs, key=lambda x: x.seed), sorted(demos.read(), key=lambda x: x.seed)):
                step, act = tr.steps[0], d.steps[0].action_text
                # the request carried this step's instruction, page and action ...
                user = next(u for u in answered if d.instruction in u and act in u)
                assert "[1] button" in user  # the compact a11y text the policy's prompt shows
                # ... and the server's reasoning is what the policy is trained to write, then the action
                expected = f"Thought: {answered[user]}\nAction: {act}"
                assert tok.decode(step.response_ids[:-1]) == expected
                assert step.response_ids[-1] == tok.eos_token_id and step.candidates is None
                assert parse_action(expected, "thought") == parse_action(act)
            # the trained samples hold those reply tokens as their loss tokens
            assert sum(s.num_loss_tokens for s in t.samples) == sum(len(tr.steps[0].response_ids) for tr in trajs)
        finally:
            t.close()
        cached = [json.loads(x) for x in (run / "annotations.jsonl").read_text().splitlines()]
        assert sorted(c["reasoning"] for c in cached) == sorted(answered.values())

        # a rerun (same run dir, resumed) asks nothing; the prompts and replies are the same
        t2_cfg = _cfg(run, demos.path, stub.url)
        from guigym.train.sft import SFTTrainer

        t2 = SFTTrainer(from_dict(t2_cfg), resume=True, log=lambda m: None)
        try:
            t2.build()
            assert len(stub.calls) == 3
        finally:
            t2.close()
        # one more demonstration in the same file (a resume must keep its recipe): only its step is asked
        demos.append(hand_demos(tmp_path / "four" / "demos.jsonl", 4).read()[-1])
        t3 = SFTTrainer(from_dict(_cfg(run, demos.path, stub.url)), resume=True, log=lambda m: None)
        try:
            t3.build()
            assert len(stub.calls) == 4 and '"No"' in stub.calls[-1][0]  # the 4th page asks for "No"
            assert stub.calls[-1][1] == stub_reasoning(stub.calls[-1][0])
        finally:
            t3.close()


def test_a_torn_cache_line_is_ignored_and_asked_again(tmp_path, monkeypatch):
    from guigym.train.annotator import AnnotationCache, AnnotationRequest, Annotator, AnnotatorError

    with AnnotatorStub(token="") as stub:
        ann = Annotator(stub.url, "stub", token=None)
        stub.token = ""  # the stub then expects "Bearer " with nothing: no header at all is refused
        cache = AnnotationCache(tmp_path / "annotations.jsonl")
        reqs = [AnnotationRequest(f"t/{i} step 0", f'Task: Click "w{i}"\nAction taken: click(element="{i}")')
                for i in range(3)]
        with pytest.raises(AnnotatorError, match="HTTP 401"):
            ann.annotate(reqs, cache)  # no token sent: the stub refuses before reading the body
        assert stub.refused >= 1 and not stub.calls
        ann.token = "tok"
        stub.token = "tok"
        first = ann.annotate(reqs, cache)
        assert first == [stub_reasoning(r.user) for r in reqs] and len(stub.calls) == 3
        with cache.path.open("a") as fh:  # a crash mid-append leaves half a line
            fh.write('{"key": "abc", "reason')
        again = Annotator(stub.url, "stub", token="tok").annotate(reqs + [AnnotationRequest("t/9 step 0", "Task: x")],
                                                                  cache)
        assert again[:3] == first and len(stub.calls) == 4  # only the new request went out
        assert len(cache.read()) == 4


@pytest.mark.parametrize("mode, needle", [("dead", "URLError"), ("error", "HTTP 500"), ("empty", "empty reasoning"),
                                          ("token", "HTTP 401")])
def test_a_failing_annotator_stops_the_stage_with_a_clear_error(tmp_path, monkeypatch, mode, needle):
    from guigym.train.annotator import AnnotatorError

    monkeypatch.setenv(TOKEN_ENV, "s3cret")
    demos = hand_demos(tmp_path / "src" / "demos.jsonl", 1)
    with AnnotatorStub(token="other" if mode == "token" else "s3cret",
                       mode={"error": "error", "empty": "empty"}.get(mode, "ok")) as stub:
        url = stub.url
        if mode == "dead":
            stub.server.shutdown()
            stub.server.server_close()  # nothing listens on the port any more
        with pytest.raises(AnnotatorError, match=needle) as err:
            _build(_cfg(tmp_path / "run", demos.path, url))
    assert url in str(err.value)
    assert "click-button/2000000 step 0" in str(err.value)
    cache = tmp_path / "run" / "annotations.jsonl"
    assert not cache.exists() or cache.read_text() == ""  # nothing was recorded as an answer


def test_config_needs_an_annotator_for_reasoning_and_no_constraint(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path / "run", tmp_path / "d.jsonl", "http://127.0.0.1:9/v1")
    bad = json.loads(json.dumps(cfg))
    bad["sft"].pop("annotator")
    with pytest.raises(ConfigError, match=r"sft\.annotator"):
        from_dict(bad)
    bad = json.loads(json.dumps(cfg))
    bad["rollout"]["constrained"] = True
    with pytest.raises(ConfigError, match=r"sft\.reply_template.*constrained"):
        from_dict(bad)
    bad = json.loads(json.dumps(cfg))
    bad["sft"]["annotator"]["tokn_env"] = "X"  # a typo inside the optional section gets the usual hint
    with pytest.raises(ConfigError, match=r"sft\.annotator\.tokn_env: unknown key \(did you mean 'token_env'\?\)"):
        from_dict(bad)
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(ConfigError, match=TOKEN_ENV):
        _build(cfg)


def test_thought_dialect_takes_the_last_action_line_or_a_bare_action():
    assert parse_action('Thought: the "OK" button.\nAction: click(element="3")', "thought") == A.Click(element="3")
    # an "Action:" inside the reasoning is superseded by the final one
    assert parse_action('Thought: not\nAction: click(element="1")\nAction: type(text="a")', "thought") \
        == A.Type(text="a")
    assert parse_action('done(answer="x")', "thought") == A.Done(answer="x")  # a reasoning-free reply
    with pytest.raises(ActionParseError, match="^thought"):
        parse_action("Thought: I will click OK", "thought")
