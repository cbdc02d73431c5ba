"""Model-backed agents on a tiny locally built Qwen2.5-VL: token ids + log-probs end to end.

hf (in-process) and openai (over ``guigym serve``) agents record prompt/response token ids and
sampled-token log-probs; a teacher-forced recomputation (``logprobs_of``) matches them.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from guigym.cli import main  # noqa: E402

TOL = 1e-4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from guigym.models.tiny import build

    return build(tmp_path_factory.mktemp("models") / "tiny-qwen25vl", seed=0)


@pytest.fixture(scope="module")
def policy(tiny):
    from guigym.models.hf_policy import load_policy

    return load_policy(tiny)


def screenshot(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (210, 160, 3), dtype=np.uint8)


# ---- 1. the tiny model ----------------------------------------------------------------------------
def test_tiny_build_round_trip(tiny):
    from transformers import (AutoImageProcessor, AutoModelForImageTextToText, AutoTokenizer,
                              Qwen2_5_VLForConditionalGeneration)

    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(tiny)
    auto = AutoModelForImageTextToText.from_pretrained(tiny)
    assert type(auto).__name__ == "Qwen2_5_VLForConditionalGeneration"
    n_params = sum(p.numel() for p in model.parameters())
    assert 1e4 < n_params < 2e7
    tok = AutoTokenizer.from_pretrained(tiny)
    cfg = model.config
    assert cfg.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>")
    assert cfg.video_token_id == tok.convert_tokens_to_ids("<|video_pad|>")
    assert cfg.vision_start_token_id == tok.convert_tokens_to_ids("<|vision_start|>")
    assert cfg.vision_end_token_id == tok.convert_tokens_to_ids("<|vision_end|>")
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert cfg.text_config.vocab_size >= len(tok)
    for special in ("<|im_start|>", "<|box_start|>", "<|box_end|>"):
        assert len(tok(special, add_special_tokens=False)["input_ids"]) == 1, special
    text = tok.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Click the button."}]}],
        tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Click the button."
                         "<|im_end|>\n<|im_start|>assistant\n")
    grid = AutoImageProcessor.from_pretrained(tiny)(images=[screenshot()], return_tensors="pt")["image_grid_thw"]
    assert int(grid.prod()) // 4 <= 16, "a 160x210 screenshot yields few vision tokens"


def test_auto_processor_loads_the_tiny_model(tiny):
    # transformers builds Qwen2_5_VLProcessor only with torchvision (its video processor), and no
    # torchvision wheel works beside the CPU torch this project installs
    pytest.importorskip("torchvision", reason="AutoProcessor for Qwen2.5-VL needs torchvision, not installed here")
    from transformers import AutoProcessor

    assert type(AutoProcessor.from_pretrained(tiny)).__name__ == "Qwen2_5_VLProcessor"


def test_prompt_templates_render():
    from guigym.agents import prompts

    assert {"canonical", "uitars_computer", "uitars_mobile", "androidlab", "webrl"} <= set(prompts.names())
    for name in prompts.names():
        text = prompts.render(name, instruction="Click OK.", width=160, height=210)
        assert "Click OK." in text and "$instruction" not in text
    with pytest.raises(ValueError, match="unknown prompt template"):
        prompts.load("nope")


# ---- 2. in-process agent ----------------------------------------------------------------------------
def test_hf_agent_records_tokens_and_logprobs_match_teacher_forcing(tiny, policy):
    from guigym.agents import make_agent

    agent = make_agent(f"hf:{tiny}", seed=3, history=2, max_new_tokens=12)
    agent.reset({"instruction": "Click the button.", "seed": 5})
    obs = [{"screenshot": screenshot(k)} for k in range(3)]
    texts = [agent.act(o) for o in obs]
    tokens = agent.last_tokens
    assert set(tokens) == {"prompt_token_ids", "response_token_ids", "response_logprobs"}
    assert 1 <= len(tokens["response_token_ids"]) <= 12
    assert len(tokens["response_logprobs"]) == len(tokens["response_token_ids"])
    assert all(lp <= 0 for lp in tokens["response_logprobs"])
    assert len(agent.last_images) == 2 and tokens["prompt_token_ids"].count(policy.image_token_id) > 0
    again = agent.logprobs_of(tokens["prompt_token_ids"], tokens["response_token_ids"], agent.last_images)
    assert np.allclose(again, tokens["response_logprobs"], atol=TOL)

    # reproducible: same seeds -> same replies
    agent2 = make_agent(f"hf:{tiny}", seed=3, history=2, max_new_tokens=12)
    agent2.reset({"instruction": "Click the button.", "seed": 5})
    assert [agent2.act(o) for o in obs] == texts
    assert agent2.last_tokens == tokens


def test_batched_generation_matches_single(policy):
    msgs = [[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": t}]}]
            for t in ("Click OK.", "Type hello into the search box and press enter.")]
    enc = [policy.encode_chat(m, [screenshot(i)]) for i, m in enumerate(msgs)]
    together = policy.generate(enc, max_new_tokens=[8, 10], temperature=[1.0, 0.7], seeds=[11, 12])
    for i in range(2):
        alone = policy.generate([enc[i]], max_new_tokens=[8, 10][i], temperature=[1.0, 0.7][i], seeds=[11 + i])[0]
        assert alone.response_ids == together[i].response_ids
        assert np.allclose(alone.logprobs, together[i].logprobs, atol=TOL)


def test_eval_with_hf_agent_records_garbage_as_action_error(tiny, tmp_path):
    out = tmp_path / "run"
    assert main(["eval", "--quiet", "--env", "MiniWoB-v0", "--tasks", "click-test", "--agent", f"hf:{tiny}",
                 "--num-envs", "1", "--episodes", "1", "--max-steps", "2", "--out", str(out)]) == 0
    [record] = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert record["status"] == "done" and record["steps"] == 2
    episode = json.loads((out / record["trajectory_dir"] / "episode.json").read_text())
    for step in episode["steps"]:
        assert step["prompt_token_ids"] and step["response_token_ids"]
        assert len(step["response_logprobs"]) == len(step["response_token_ids"])
        if step["action"] is None:
            assert step["action_error"], "an unparseable reply is an action_error"


# ---- 3/4. server + openai agent ------------------------------------------------------------------------
def _http(url: str, body=None, token=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _data_uri(image: np.ndarray) -> str:
    from guigym.agents.openai_agent import png_data_uri

    return png_data_uri(image)


@pytest.fixture(scope="module")
def server(tiny):
    token = "test-token-123"
    proc = subprocess.Popen([sys.executable, "-m", "guigym.cli", "serve", "--model", str(tiny), "--port", "0",
                             "--api-key", token, "--batch-wait-ms", "20"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        m = re.search(r"http://([\d.]+):(\d+)/v1", line)
        assert m, f"server did not start: {line!r}"
        yield {"host": m.group(1), "base": f"http://{m.group(1)}:{m.group(2)}/v1", "token": token, "proc": proc}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_server_requires_token_and_binds_loopback(server):
    assert server["host"] == "127.0.0.1"
    assert _http(server["base"] + "/models")[0] == 401
    assert _http(server["base"] + "/models", token="wrong")[0] == 401
    assert _http(server["base"] + "/chat/completions", {"messages": []})[0] == 401
    code, models = _http(server["base"] + "/models", token=server["token"])
    assert code == 200 and models["data"][0]["id"] == "tiny-qwen25vl"
    code, err = _http(server["base"] + "/chat/completions", {"messages": "hi"}, token=server["token"])
    assert code == 400 and "messages" in err["error"]["message"]


def test_server_and_in_process_give_same_tokens_and_logprobs(server, policy):
    img = screenshot(7)
    body = {"model": "tiny-qwen25vl", "max_tokens": 10, "temperature": 1.0, "seed": 99, "logprobs": True,
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "Click the button."}, {"type": "image_url", "image_url": {"url": _data_uri(img)}}]}]}
    code, reply = _http(server["base"] + "/chat/completions", body, token=server["token"])
    assert code == 200, reply
    choice = reply["choices"][0]
    enc = policy.encode_chat([{"role": "user", "content": [{"type": "text", "text": "Click the button."},
                                                            {"type": "image"}]}], [img])
    local = policy.generate([enc], max_new_tokens=10, temperature=1.0, seeds=[99])[0]
    assert choice["prompt_token_ids"] == enc.prompt_ids
    assert choice["token_ids"] == local.response_ids
    assert choice["message"]["content"] == local.text
    served = [c["logprob"] for c in choice["logprobs"]["content"]]
    assert np.allclose(served, local.logprobs, atol=TOL)


def test_concurrent_requests_are_batched(tiny):
    from guigym.serve import ModelServer

    srv = ModelServer(str(tiny), "k", port=0, batch_wait_ms=300)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{srv.address[1]}/v1"
        results: dict[int, dict] = {}

        def ask(i: int) -> None:
            body = {"max_tokens": 6, "seed": i, "logprobs": True, "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": _data_uri(screenshot(i))}},
                {"type": "text", "text": "Click item " + "x" * i}]}]}
            results[i] = _http(base + "/chat/completions", body, token="k")[1]

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert max(srv.batches) > 1, srv.batches
        for i, reply in results.items():
            choice = reply["choices"][0]
            again = srv.policy.logprobs_of(choice["prompt_token_ids"], choice["token_ids"], [screenshot(i)])
            assert np.allclose(again, [c["logprob"] for c in choice["logprobs"]["content"]], atol=TOL)
    finally:
        srv.shutdown()


def test_eval_through_openai_agent_end_to_end(server, policy, tmp_path, monkeypatch):
    monkeypatch.setenv("GUIGYM_API_KEY", server["token"])
    out = tmp_path / "run"
    assert main(["eval", "--quiet", "--env", "MiniWoB-v0", "--tasks", "click-test", "--agent",
                 f"openai:{server['base']}", "--num-envs", "2", "--episodes", "2", "--max-steps", "2",
                 "--out", str(out)]) == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["status"] == "done" for r in records)
    checked = 0
    for r in records:
        episode = json.loads((out / r["trajectory_dir"] / "episode.json").read_text())
        assert len(episode["steps"]) == r["steps"] >= 1
        for step in episode["steps"]:
            assert step["prompt_token_ids"] and step["response_token_ids"] and step["response_logprobs"]
            img = np.asarray(Image.open(out / r["trajectory_dir"] / step["screenshot"]).convert("RGB"))
            again = policy.logprobs_of(step["prompt_token_ids"], step["response_token_ids"], [img])
            assert np.allclose(again, step["response_logprobs"], atol=TOL)
            checked += 1
    assert checked >= 2


def test_openai_agent_without_key_gets_401_as_agent_error(server):
    from guigym.agents.openai_agent import APIError, OpenAIAgent

    agent = OpenAIAgent(server["base"], api_key="nope", retries=0)
    agent.reset({"instruction": "x"})
    with pytest.raises(APIError, match="401"):
        agent.act({"screenshot": screenshot()})
