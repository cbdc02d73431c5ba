"""bench/scale.py and its modelled policy engine (guigym.train.rollout.latency_engine).

* the stated latency model; the engine's replies (correct click for the prompt, seeded, encoded as
  the learner's candidate trie encodes them) and its sleep model;
* the report's fields are functions of the event log alone (a hand-made log with known answers);
* the coupled arm (real coupled trainer, 3 envs) runs lockstep and on-policy;
* a 4-env decoupled run of the bench (local Ray): every policy batch lasted at least the modelled
  T(b) x time_scale, every reload at least sync_s x time_scale, and the arm's metrics are the ones
  recomputed from its event log.
No wall-clock upper bounds: sleeps give lower bounds only.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("torch")

from guigym.train.rollout.latency_engine import (  # noqa: E402
    LatencyModelEngine,
    PolicyLatencyModel,
    UpdateLatencyModel,
    correct_action,
    modelled_update,
)
from guigym.train.rollout.policy_service import GenRequest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "bench" / "scale.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


S = _load()

PROMPT = ('<|im_start|>user\nTask: Click Falcon, then Maple, then Kettle.\nElements on screen:\n[34] button "Kettle"\n'
          '[76] button "Lantern"\n[25] button "Falcon"\n[92] button "Maple"\nPrevious actions:\n{prev}\nReply with '
          'one action, e.g. click(element="ID").<|im_end|>\n<|im_start|>assistant\n')
CANDS = ['click(element="34")', 'click(element="76")', 'click(element="25")', 'click(element="92")']


@pytest.fixture(scope="module")
def tok():
    from guigym.train.policy.tiny import build_tokenizer

    return build_tokenizer()


def test_policy_model_is_the_stated_formula():
    p = PolicyLatencyModel()
    assert p.batch_s(1) == p.floor_s == 1.28  # decode-latency floor for small batches
    assert p.batch_s(64) == pytest.approx(64 / 2.55)  # vLLM's published 2.55 req/s at saturation
    assert p.sync_s == pytest.approx(2 * 7e9 / 12.5e9)
    assert "2.55 requests/s" in p.source and "Qwen2-VL-7B" in p.source
    assert S.PolicyLatencyModel is PolicyLatencyModel  # the bench states the engine's model


def test_update_model_is_the_stated_formula():
    u = UpdateLatencyModel(gpus=8)
    # 10 samples x 3100 tokens x (1 train pass + 2 forward passes at 1/3 each) / (7500 tok/s x 8 GPUs)
    assert u.update_s(10) == pytest.approx(10 * 3100 * (5 / 3) / 60000) == pytest.approx(0.8611, abs=1e-4)
    assert UpdateLatencyModel(tokens_per_sample=1600, gpus=8).update_s(10) == pytest.approx(0.4444, abs=1e-4)
    assert UpdateLatencyModel(gpus=16).update_s(10) == pytest.approx(u.update_s(10) / 2)
    assert UpdateLatencyModel(gpus=0).update_s(10) == 0.0 and u.update_s(0) == 0.0  # off / nothing to train
    assert "7500" in u.source and "8 H100" in u.source


def test_modelled_update_sleeps_the_rest_of_the_modelled_time():
    now = [100.0]
    slept: list[float] = []

    def clock() -> float:
        return now[0]

    def real_update(samples):
        now[0] += 0.1  # the real update took 0.1 s
        return {"loss": 1.0}

    timed = modelled_update(real_update, UpdateLatencyModel(gpus=8), time_scale=0.5, sleep=slept.append, clock=clock)
    out = timed(list(range(10)))
    want = 0.5 * UpdateLatencyModel(gpus=8).update_s(10)
    assert out == {"loss": 1.0, "time/modelled_update_s": pytest.approx(want)}
    assert slept == [pytest.approx(want - 0.1)]  # the real time counts toward the model
    slept.clear()
    now[0] = 0.0

    def slow_update(samples):
        now[0] += 5.0  # longer than the model: not shortened, nothing slept
        return {}

    modelled_update(slow_update, UpdateLatencyModel(gpus=8), sleep=slept.append, clock=clock)([0])
    assert slept == []


def test_update_model_config_is_checked():
    from guigym.core.errors import ConfigError
    from guigym.train.config import TrainConfig
    from guigym.train.rollout.latency_engine import update_model_from_config

    def cfg(lm, engine="latency_model"):
        d = S.recipe(_args(update_gpus=0), Path("model"), Path("run"), "decoupled")
        d["rollout"].update({"engine": engine, "latency_model": {**d["rollout"]["latency_model"], **lm}})
        return TrainConfig.model_validate(d)

    assert update_model_from_config(cfg({"update_gpus": 4, "update_tokens_per_sample": 100})) == \
        UpdateLatencyModel(tokens_per_sample=100.0, gpus=4)
    assert update_model_from_config(cfg({})) is None  # off unless asked
    bench = TrainConfig.model_validate(S.recipe(_args(), Path("model"), Path("run"), "coupled"))
    assert update_model_from_config(bench) == UpdateLatencyModel(gpus=8)  # the bench's default: DART's 8 GPUs
    assert update_model_from_config(cfg({"update_gpus": 4}, engine="hf")) is None  # a real engine, a real update
    with pytest.raises(ConfigError, match="update_tokens_per_s_per_gpu"):
        update_model_from_config(cfg({"update_gpus": 4, "update_tokens_per_s_per_gpu": 0}))


def test_correct_action_follows_the_clicks_so_far():
    assert correct_action(PROMPT.format(prev="(none)"), CANDS) == 'click(element="25")'  # Falcon first
    # a wrong click does not advance; Falcon done -> Maple
    prev = 'click(element="76")\nclick(element="25")\nclick(element="34")'
    assert correct_action(PROMPT.format(prev=prev), CANDS) == 'click(element="92")'
    done = 'click(element="25")\nclick(element="92")\nclick(element="34")'
    assert correct_action(PROMPT.format(prev=done), CANDS) is None
    assert correct_action("no task here", CANDS) is None


def test_engine_replies_are_seeded_trie_encoded_and_mix_correct_clicks(tok):
    from guigym.train.rollout.constrain import CandidateConstraint

    end = [tok.eos_token_id]
    ids = tok(PROMPT.format(prev="(none)"), add_special_tokens=False)["input_ids"]
    always = LatencyModelEngine(tok, end, time_scale=0.0, p_correct=1.0)
    never = LatencyModelEngine(tok, end, time_scale=0.0, p_correct=0.0)
    trie = CandidateConstraint(tok, CANDS, end)
    try:
        reqs = [GenRequest(prompt_ids=ids, candidates=CANDS, seed=s) for s in range(40)]
        got = [always.submit(r).result(timeout=30) for r in reqs]
        assert {g.text for g in got} == {'click(element="25")'}
        rand = [never.submit(r).result(timeout=30) for r in reqs]
        assert len({g.text for g in rand}) > 1  # uniform: several candidates over 40 seeds
        assert [never.submit(r).result(timeout=30).text for r in reqs] == [g.text for g in rand]  # seeded
        for g in got + rand:
            k = CANDS.index(g.text)
            assert g.response_ids == trie.sequences[k] + end  # what the learner's trie accepts
            assert trie.complete(g.response_ids) == g.text
            assert len(g.logprobs) == len(g.response_ids) and g.logprobs[-1] == 0.0
        assert sum(got[0].logprobs) == pytest.approx(0.0)  # p_correct 1: the choice has probability 1
        assert sum(rand[0].logprobs) == pytest.approx(-__import__("math").log(4))
    finally:
        always.close()
        never.close()


class _Log:
    def __init__(self):
        self.rows = []

    def add(self, kind, worker, start, end, **extra):
        self.rows.append({"kind": kind, "worker": worker, "start": start, "end": end, **extra})


def test_engine_sleeps_the_model_per_batch_and_pauses_for_sync(tok):
    log = _Log()
    model = PolicyLatencyModel(rate_rps=100.0, floor_s=0.05, sync_s=0.1)
    eng = LatencyModelEngine(tok, [tok.eos_token_id], model, time_scale=0.5, workers=2, log=log)
    try:
        ids = tok("x", add_special_tokens=False)["input_ids"]
        futs = eng.submit_many([GenRequest(prompt_ids=ids, candidates=CANDS, seed=s) for s in range(20)])
        assert all(f.result(timeout=30).policy_version == 0 for f in futs)
        eng.update_weights(3)
        assert eng.submit(GenRequest(prompt_ids=ids, candidates=CANDS, seed=0)).result(timeout=30).policy_version == 3
    finally:
        eng.close()
    gens = [r for r in log.rows if r["kind"] == "generate"]
    assert sorted(r["batch"] for r in gens) == [1, 10, 10]  # the closed batch split over 2 workers, then one
    for r in gens:
        assert r["end"] - r["start"] >= model.batch_s(r["batch"]) * 0.5 - 1e-3
        assert r["modelled_s"] == pytest.approx(model.batch_s(r["batch"]) * 0.5)
    reloads = [r for r in log.rows if r["kind"] == "reload"]
    assert {r["worker"] for r in reloads} == {"w0", "w1"} and all(r["end"] - r["start"] >= 0.05 - 1e-3 for r in reloads)
    assert not any(_overlap(g, r) for g in gens for r in reloads)  # global sync: nothing generates


def _overlap(a, b):
    return a["start"] < b["end"] and b["start"] < a["end"]


def test_metrics_are_computed_from_the_event_log():
    def row(service, kind, worker, start, end):
        return {"service": service, "kind": kind, "worker": worker, "start": start, "end": end}

    rows = [row("env", "reset", "e0", 0.0, 1.0), row("env", "reset", "e1", 0.0, 2.0),  # window starts at 2
            row("env", "step", "e0", 2.0, 3.0), row("env", "step", "e0", 4.0, 5.0),
            row("env", "step", "e1", 2.0, 4.0), row("env", "reset", "e1", 8.0, 9.0),
            row("policy", "generate", "w0", 1.0, 4.0), row("policy", "request", "w0", 0.0, 12.0),
            row("trainer", "train", "trainer", 6.0, 12.0)]  # window ends at 12
    m = S.metrics_from_events(rows, num_envs=2, num_workers=1)
    assert m["wall_s"] == 10.0 and m["actions"] == 3 and m["actions_per_min"] == pytest.approx(18.0)
    assert m["u_env_exec"] == pytest.approx((1 + 1 + 2 + 1) / 20)  # e0 steps 2, e1 step 2 + reset 1
    # occupied: e0 from its reset to its last step (5), e1 [0, 4] then [8, 9]; clipped to [2, 12]
    assert m["u_env_occupied"] == pytest.approx((3 + 2 + 1) / 20)
    assert m["u_policy"] == pytest.approx(2 / 10)  # "request" rows are not generation time
    assert m["trainer_idle"] == pytest.approx(1 - 6 / 10)


def test_dropped_rollouts_do_not_count_as_env_work():
    def row(service, kind, worker, start, end):
        return {"service": service, "kind": kind, "worker": worker, "start": start, "end": end}

    # e0 runs episode A [0, 5] then B [6, 10]; e1 runs C [0, 10]; the lag bound dropped B
    rows = [row("env", "reset", "e0", 0.0, 1.0), row("env", "step", "e0", 1.0, 3.0), row("env", "step", "e0", 3.0, 5.0),
            row("env", "reset", "e0", 6.0, 7.0), row("env", "step", "e0", 7.0, 8.0), row("env", "step", "e0", 8.0, 10.0),
            row("env", "reset", "e1", 0.0, 1.0), row("env", "step", "e1", 1.0, 10.0),
            row("policy", "generate", "w0", 1.0, 5.0), row("trainer", "train", "trainer", 9.0, 11.0)]  # window [1, 11]
    dropped_b = [("e0", 5.9, 10.05)]  # the trajectory's span: reset sent .. last result seen
    m = S.metrics_from_events(rows, num_envs=2, num_workers=1, trainer_gpus=1, dropped=dropped_b)
    # counted: A's 2 steps and C's step; B's 2 steps are not actions used in training
    assert m["actions"] == 3 and m["actions_incl_dropped"] == 5
    assert m["actions_per_min"] == pytest.approx(60 * 3 / 10)
    assert m["dropped_action_share"] == pytest.approx(2 / 5)
    # occupied: e0 [1, 5] (A only), e1 [1, 10]; with B: e0 also [6, 10]
    assert m["u_env_occupied"] == pytest.approx((4 + 9) / 20)
    assert m["u_env_occupied_incl_dropped"] == pytest.approx((4 + 4 + 9) / 20)
    assert m["u_env_exec"] == pytest.approx((2 + 2 + 9) / 20)  # A's steps, C's step (resets end by t = 1)
    assert m["u_env_exec_incl_dropped"] == pytest.approx((2 + 2 + 1 + 1 + 2 + 9) / 20)  # + B's reset and steps
    # policy time scaled by the share of requests that served kept rollouts
    assert m["u_policy"] == pytest.approx(4 / 10) and m["u_policy_useful"] == pytest.approx(4 / 10 * 3 / 5)
    assert m["u_gpu"] == pytest.approx((4 + 2) / 20) and m["u_gpu_useful"] == pytest.approx((4 * 3 / 5 + 2) / 20)
    # only rows wholly inside the span, on its lane, go
    assert S.metrics_from_events(rows, 2, 1, 1, dropped=[("e0", 7.5, 10.05)])["actions"] == 4  # B's last step
    assert S.metrics_from_events(rows, 2, 1, 1, dropped=[("e3", 5.9, 10.05)])["actions"] == 5
    assert S.metrics_from_events(rows, 2, 1, 1)["u_env_occupied"] == pytest.approx((4 + 4 + 9) / 20)


def _args(**kw):
    base = dict(num_envs=3, group_size=2, groups=2, iterations=2, max_steps=4, n_tasks=4, n_elements=6, min_targets=1,
                max_targets=3,
                latency=ROOT / "bench" / "data" / "latency_miniwob.json", time_scale=0.05, policy_workers=1,
                policy_rate_rps=2.55, policy_floor_s=1.28, policy_sync_s=1.12, p_correct=0.3, env_clusters=2,
                max_policy_lag=1, backend="process", ray_num_cpus=0.0, seed=0, update_gpus=8,
                update_tokens_per_sample=3100.0, update_tokens_per_s_per_gpu=7500.0)
    base.update(kw)
    return argparse.Namespace(**base)


def _engine_honoured(ev, args):
    model = PolicyLatencyModel(args.policy_rate_rps, args.policy_floor_s, args.policy_sync_s)
    gens = [e for e in ev if e["service"] == "policy" and e["kind"] == "generate"]
    reloads = [e for e in ev if e["service"] == "policy" and e["kind"] == "reload"]
    assert gens and reloads
    for g in gens:  # time.sleep lasts at least what it was asked
        assert g["end"] - g["start"] >= model.batch_s(g["batch"]) * args.time_scale - 1e-3
    for r in reloads:
        assert r["end"] - r["start"] >= model.sync_s * args.time_scale - 1e-3
    chk = S.engine_check(ev, model, args.time_scale)
    assert chk["batches"] == len(gens) and chk["min_ratio"] >= 1 - 1e-2
    return gens, reloads


def test_coupled_arm_is_lockstep_and_on_policy():
    args = _args()
    res = S.run_coupled(args)
    m, ev = res.metrics, res.events
    assert m["trajectories"] == 2 * 2 * 2 and m["actions"] > 0 and m["updates"] == 2
    assert m["staleness_mean"] == 0.0 and m["staleness_max"] == 0  # coupled: always the latest weights
    assert 0 < m["u_policy"] <= 1 and 0 < m["u_env_exec"] <= 1 and 0 < m["trainer_idle"] < 1 and 0 < m["u_gpu"] <= 1
    assert m == {**m, **S.metrics_from_events(ev, 3, 1, 8)}
    envs = [e for e in ev if e["service"] == "env"]
    gens, reloads = _engine_honoured(ev, args)
    trains = [e for e in ev if e["kind"] == "train"]
    assert {e["worker"] for e in envs} == {"env0/0", "env0/1", "env0/2"} and len(trains) == 2
    assert len(reloads) == 2  # one global sync per update (one worker)
    # lockstep: no env works while a batch generates; nothing runs while the trainer updates or weights sync
    assert not any(_overlap(e, g) for e in envs for g in gens)
    assert not any(_overlap(x, t) for x in envs + gens for t in trains + reloads)
    assert max(g["batch"] for g in gens) == 3  # one closed batch holds every env still in an episode
    # every update lasted at least the stated 7B update time of its samples (time-scaled)
    upd = UpdateLatencyModel(gpus=8)
    assert all(t["end"] - t["start"] >= args.time_scale * upd.update_s(t["samples"]) - 1e-6 for t in trains)
    assert [r["time/modelled_update_s"] for r in res.rows] == \
        [pytest.approx(args.time_scale * upd.update_s(t["samples"])) for t in trains]


def test_decoupled_bench_run_honours_the_engine_model_and_reports_from_its_log():
    pytest.importorskip("ray", reason="ray is not installed (pip install 'guigym[ray]')")
    import ray

    if ray.is_initialized():
        pytest.skip("a Ray session is already running in this process")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        args = _args(num_envs=4, policy_workers=2, env_clusters=2)
        res = S.run_decoupled_arm(args)
    finally:
        ray.shutdown()
    assert res is not None
    m, ev = res.metrics, res.events
    gens, _ = _engine_honoured(ev, args)
    assert {g["worker"] for g in gens} <= {"w0", "w1"} and all(g["batch"] >= 1 for g in gens)
    # the per-request rows are there but are not counted as generation time
    assert any(e["kind"] == "request" for e in ev)
    assert m["updates"] == 2 and m["trajectories"] >= 2 * 2 * 2
    # the decoupled trainer's updates run under the same stated 7B update model as the coupled ones
    modelled = [r["time/modelled_update_s"] for r in res.rows if r.get("samples")]
    trains = sorted((e for e in ev if e["kind"] == "train"), key=lambda e: e["start"])
    assert len(modelled) == 2 and modelled == [pytest.approx(args.time_scale * UpdateLatencyModel(gpus=8).update_s(
        t["samples"])) for t in trains if t["samples"]]
    derived = S.metrics_from_events(ev, 4, 2, 8, dropped=res.dropped)
    assert m == {**m, **derived}
    # rollouts the lag bound dropped are not counted as env work
    assert len(res.dropped) == m["dropped"] and m["u_env_occupied"] <= m["u_env_occupied_incl_dropped"]
    assert m["actions"] <= m["actions_incl_dropped"] and 0.0 <= m["dropped_action_share"] < 1.0
    lo, hi = S.window(ev)
    assert m["actions"] == sum(1 for e in ev if e["service"] == "env" and e["kind"] == "step" and lo < e["end"] <= hi)
    # a field moves with the log: drop one batch row inside the measured window and the policy
    # utilisation falls (a row outside it is clipped away; which rows fall inside depends on timing)
    inside = [g for g in gens if lo <= g["start"] and g["end"] <= hi and g["end"] > g["start"]]
    assert inside, "no policy batch ran inside the measured window"
    fewer = [e for e in ev if e is not inside[len(inside) // 2]]
    assert S.metrics_from_events(fewer, 4, 2, 8)["u_policy"] < m["u_policy"]


def test_decoupled_arm_reports_missing_when_not_importable(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "guigym.train.decoupled", None)  # import raises ImportError
    assert S.run_decoupled_arm(_args()) is None
    assert "decoupled arm: MISSING" in capsys.readouterr().out


def test_timeline_png_is_drawn(tmp_path):
    rows = [{"service": "env", "kind": "step", "worker": "env0/0", "start": 0.0, "end": 1.0},
            {"service": "policy", "kind": "generate", "worker": "w0", "start": 1.0, "end": 2.0},
            {"service": "policy", "kind": "request", "worker": "w0", "start": 0.5, "end": 2.0},
            {"service": "trainer", "kind": "train", "worker": "trainer", "start": 2.0, "end": 3.0}]
    path = tmp_path / "t.png"
    lib = S.draw_timeline([S.ArmResult("coupled", {}, rows)], path)
    assert lib in ("matplotlib", "Pillow") and path.stat().st_size > 1000
    from PIL import Image

    with Image.open(path) as im:
        assert im.size[0] > 500
    path2 = tmp_path / "p.png"
    assert S._draw_pillow([("coupled", rows)], path2) == "Pillow" and path2.stat().st_size > 500
