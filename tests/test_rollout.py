"""Rollout side of the trainer: constrained decoding, policy service, prompts, scheduler.

Real parts: a tiny Qwen2.5-VL built here (random weights), real ``guigym serve`` servers on
loopback ports, a real EnvPool of MiniWoB envs in Chromium.
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

TOL = 1e-4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from guigym.train.policy.tiny import build

    return build(tmp_path_factory.mktemp("rollout-models") / "tiny", seed=0)


@pytest.fixture(scope="module")
def tiny2(tmp_path_factory):
    """Same architecture, other weights: the 'new checkpoint' of weight-refresh tests."""
    from guigym.train.policy.tiny import build

    return build(tmp_path_factory.mktemp("rollout-models2") / "tiny", seed=1)


@pytest.fixture(scope="module")
def policy(tiny):
    from guigym.train.policy.hf_policy import HFPolicy

    return HFPolicy(tiny)


def screenshot(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (210, 160, 3), dtype=np.uint8)


A11Y = ('<a11y nodes="6" truncated="false"><label id="1" name="fzzqo" bbox="2,59,51,11">'
        '<checkbox id="2" name="fzzqo" checked="false" bbox="6,55,20,13"/></label>'
        '<button id="7" name="Submit" bbox="2,120,95,31"/><button id="8" name="Hidden" bbox="0,0,0,0"/>'
        '<link id="9" name="far" bbox="400,400,10,10"/><generic id="3" name="text" bbox="5,5,50,10"/></a11y>')


def prompt_of(policy, text: str = "Click the button.", images=()):
    content = [{"type": "text", "text": text}] + [{"type": "image"} for _ in images]
    return policy.encode_chat([{"role": "user", "content": content}], list(images))


# ---- constrained decoding ------------------------------------------------------------------------
def test_candidates_from_a11y_keeps_visible_interactive_nodes():
    from guigym.train.rollout.constrain import candidates_from_a11y, grid_candidates

    # the zero-size button and the off-screen link are not visible; label/generic are not interactive
    assert candidates_from_a11y(A11Y, screen=(160, 210)) == ['click(element="2")', 'click(element="7")']
    assert 'click(element="3")' in candidates_from_a11y(A11Y, screen=(160, 210), roles="any")
    assert candidates_from_a11y(A11Y, ("click", "hover"), screen=(160, 210))[2:] == [
        'hover(element="2")', 'hover(element="7")']
    with pytest.raises(ValueError, match="fill"):
        candidates_from_a11y(A11Y, ("fill",))
    with pytest.raises(ValueError, match="well-formed"):
        candidates_from_a11y("<a11y><oops></a11y>")
    grid = grid_candidates(40, 20, cell=20)
    assert grid == ["click(x=10, y=10)", "click(x=30, y=10)"]
    from guigym.core.dialect import parse_action

    for c in candidates_from_a11y(A11Y, ("click", "hover"), screen=(160, 210)) + grid:
        parse_action(c)  # every candidate is a valid canonical action


_ids = st.integers(min_value=0, max_value=400)
_verbs = st.sampled_from(["click", "hover", "double_click"])
_free = st.text(alphabet="abcdefxyz(=)\" 0123456789_", min_size=1, max_size=12)
_cand_sets = st.lists(st.one_of(st.builds(lambda v, i: f'{v}(element="{i}")', _verbs, _ids), _free),
                      min_size=1, max_size=12, unique=True)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(cands=_cand_sets, seed=st.integers(0, 2**31 - 1), temp=st.sampled_from([1.0, 2.0, 0.0]))
def test_constrained_sampling_only_yields_candidates(policy, cands, seed, temp):
    from guigym.train.rollout.constrain import CandidateConstraint

    constraint = CandidateConstraint(policy.tokenizer, cands, policy.eos_ids[:1])
    enc = prompt_of(policy)
    out = policy.generate([enc, enc], max_new_tokens=constraint.max_len, temperature=temp,
                          seeds=[seed, seed + 1], candidates=[cands, cands])
    for s in out:
        assert s.finish_reason == "stop", "a candidate plus its end token fits in max_len"
        assert s.text in cands
        assert constraint.complete(s.response_ids) == s.text
        assert s.response_ids[-1] == policy.eos_ids[0]


def test_recorded_and_recomputed_logprobs_agree_with_and_without_constraints(policy):
    img = [screenshot(3)]
    enc = prompt_of(policy, "Select fzzqo and click Submit.", img)
    cands = ['click(element="2")', 'click(element="7")', 'click(element="12")', 'hover(element="7")']
    seen = set()
    for seed in range(4):
        [s] = policy.generate([enc], max_new_tokens=16, seeds=[seed], candidates=[cands])
        seen.add(s.text)
        again = policy.logprobs_of(enc.prompt_ids, s.response_ids, img, candidates=cands)
        assert np.allclose(again, s.logprobs, atol=TOL)
        # the mask matters: without it the same tokens are less likely (the mass is spread over the vocab)
        free = policy.logprobs_of(enc.prompt_ids, s.response_ids, img)
        assert sum(free) < sum(s.logprobs) - 1e-3
        # differentiable recomputation with the mask (what the learner calls)
        with torch.enable_grad():
            t = policy.logprobs_tensor(enc.prompt_ids, s.response_ids, img, candidates=cands)
            t.sum().backward()
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.model.parameters())
        policy.model.zero_grad(set_to_none=True)
    assert len(seen) >= 2, f"sampling explores the candidates: {seen}"
    [free] = policy.generate([enc], max_new_tokens=12, seeds=[5])
    assert np.allclose(policy.logprobs_of(enc.prompt_ids, free.response_ids, img), free.logprobs, atol=TOL)
    off = policy.tokenizer("type(", add_special_tokens=False)["input_ids"]
    with pytest.raises(ValueError, match="not allowed by the candidates"):
        policy.logprobs_of(enc.prompt_ids, off, img, candidates=cands)


# ---- HF engine -------------------------------------------------------------------------------------
def _req(policy, i: int, cands=None, images=None):
    from guigym.train.rollout.policy_service import GenRequest

    images = [screenshot(i)] if images is None else images
    enc = prompt_of(policy, "Click item " + "x" * i, images)
    return GenRequest(prompt_ids=enc.prompt_ids, images=images, max_new_tokens=10, seed=100 + i, candidates=cands)


def test_hf_engine_batches_and_matches_unbatched(policy, tiny, tiny2):
    from guigym.train.rollout.policy_service import HFEngine

    cands = ['click(element="1")', 'click(element="22")', 'hover(element="3")']
    reqs = [_req(policy, i, cands if i % 2 else None) for i in range(5)]
    with HFEngine(policy, max_batch=8, max_wait_ms=400) as eng:
        results = [f.result(120) for f in [eng.submit(r) for r in reqs]]
        assert eng.stats()["batches"] < len(reqs) and max(eng.batch_sizes) > 1, eng.batch_sizes
        assert eng.stats()["requests"] == 5 and eng.stats()["busy_s"] > 0
        for r, res in zip(reqs, results):
            [alone] = policy.generate([policy.encode_ids(r.prompt_ids, r.images)], max_new_tokens=10, seeds=[r.seed],
                                      candidates=[r.candidates])
            assert res.response_ids == alone.response_ids and res.text == alone.text
            assert np.allclose(res.logprobs, alone.logprobs, atol=TOL)
            assert res.policy_version == 0
            if r.candidates:
                assert res.text in cands
        # a bad request fails alone
        bad = _req(policy, 1)
        bad.images = []
        with pytest.raises(ValueError, match="image pad runs"):
            eng.submit(bad).result(60)

    # weight swap: results after update_weights come from the new checkpoint and carry its version
    from guigym.train.policy.hf_policy import HFPolicy

    mine = HFPolicy(tiny)
    other = HFPolicy(tiny2)
    r = _req(mine, 2)
    with HFEngine(mine, max_batch=4, max_wait_ms=1) as eng:
        before = eng.submit(r).result(60)
        eng.update_weights(7, tiny2)
        after = eng.submit(r).result(60)
    [expect] = other.generate([other.encode_ids(r.prompt_ids, r.images)], max_new_tokens=10, seeds=[r.seed])
    assert before.policy_version == 0 and after.policy_version == 7
    assert after.response_ids == expect.response_ids
    assert np.allclose(after.logprobs, expect.logprobs, atol=TOL)


# ---- HTTP engine over two guigym serve servers ----------------------------------------------------------
@pytest.fixture(scope="module")
def two_servers(tiny):
    from guigym.serve import ModelServer

    servers = [ModelServer(str(tiny), "tok-1", port=0, batch_wait_ms=5) for _ in range(2)]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for t in threads:
        t.start()
    yield servers
    for s in servers:
        s.shutdown()


def test_http_engine_least_loaded_routing_and_token_in_out(two_servers, policy):
    from guigym.train.rollout.policy_service import HTTPEngine, HTTPError

    urls = [f"http://127.0.0.1:{s.address[1]}" for s in two_servers]
    eng = HTTPEngine(urls, token="tok-1")
    try:
        # routing: fewest in flight wins
        a = eng._acquire()
        b = eng._acquire()
        assert {a.base, b.base} == {e.base for e in eng.endpoints}, "second request goes to the idle endpoint"
        c = eng._acquire()  # both have one: either, then that one has two
        eng._release(b)
        d = eng._acquire()
        assert d is b or (b.inflight == 1 and c is b), "the endpoint with fewer in flight gets the next request"
        for ep in (a, c, d):
            eng._release(ep)
        assert all(e.inflight == 0 for e in eng.endpoints)

        cands = ['click(element="1")', 'click(element="7")']
        reqs = [_req(policy, i, cands if i % 2 else None) for i in range(6)]
        served = [f.result(120) for f in eng.submit_many(reqs)]
        for r, res in zip(reqs, served):
            [local] = policy.generate([policy.encode_ids(r.prompt_ids, r.images)], max_new_tokens=10,
                                      seeds=[r.seed], candidates=[r.candidates])
            assert res.response_ids == local.response_ids
            assert np.allclose(res.logprobs, local.logprobs, atol=TOL)
            again = policy.logprobs_of(r.prompt_ids, res.response_ids, r.images, candidates=r.candidates)
            assert np.allclose(again, res.logprobs, atol=TOL)
        assert all(s.requests > 0 for s in two_servers), "both servers served (least-loaded spreads the load)"
    finally:
        eng.close()
    with pytest.raises(HTTPError, match="401"):
        HTTPEngine(urls[:1], token="wrong").submit(reqs[0]).result(60)


def test_http_engine_refreshes_one_server_at_a_time(two_servers, policy, tiny, tiny2):
    from guigym.train.policy.hf_policy import HFPolicy
    from guigym.train.rollout.policy_service import HTTPEngine

    urls = [f"http://127.0.0.1:{s.address[1]}" for s in two_servers]
    reloads: list[tuple[int, float, float]] = []
    originals = [s.reload for s in two_servers]
    submits: list[tuple[float, int]] = []  # (time a server accepted a request, server)
    orig_submit = [s.submit for s in two_servers]

    def track(k):
        def submit(*a, **kw):
            submits.append((time.monotonic(), k))
            return orig_submit[k](*a, **kw)
        return submit

    def slow_reload(k):
        def reload(path, version):
            t0 = time.monotonic()
            time.sleep(0.8)  # a long load, so the other server must carry the traffic meanwhile
            originals[k](path, version)
            reloads.append((k, t0, time.monotonic()))
        return reload

    for k, s in enumerate(two_servers):
        s.reload = slow_reload(k)
        s.submit = track(k)
    eng = HTTPEngine(urls, token="tok-1")
    reqs = [_req(policy, i) for i in range(3)]  # tokenised here: the tokenizer is not shared across threads
    stop = threading.Event()

    def load():
        i = 0
        while not stop.is_set():
            eng.submit(reqs[i % 3]).result(120)
            i += 1

    workers = [threading.Thread(target=load) for _ in range(2)]
    try:
        for w in workers:
            w.start()
        time.sleep(0.3)
        eng.update_weights(3, tiny2)
        stop.set()
        for w in workers:
            w.join(120)
        assert [k for k, _, _ in sorted(reloads, key=lambda r: r[1])] == [0, 1]
        (_, s0, e0), (_, s1, e1) = sorted(reloads, key=lambda r: r[1])
        assert e0 <= s1, "the second server reloads only after the first is back"
        assert [v for _, v in eng.refreshes] == [3, 3]
        for k, (start, end) in enumerate([(s0, e0), (s1, e1)]):
            others = [t for t, j in submits if start < t < end and j != k]
            mine = [t for t, j in submits if start < t < end and j == k]
            assert others, f"the other server kept taking requests while server {k} reloaded"
            assert not mine, f"server {k} got no requests while it reloaded"
        # after the refresh every endpoint serves the new weights
        r = _req(policy, 1)
        new = HFPolicy(tiny2)
        [expect] = new.generate([new.encode_ids(r.prompt_ids, r.images)], max_new_tokens=10, seeds=[r.seed])
        for _ in range(2):
            res = eng.submit(r).result(60)
            assert res.policy_version == 3 and res.response_ids == expect.response_ids
    finally:
        stop.set()
        for k, s in enumerate(two_servers):
            s.reload, s.submit = originals[k], orig_submit[k]
        eng.update_weights(0, tiny)  # leave the module's servers on the original weights
        eng.close()


def test_admin_endpoints_need_the_token(two_servers, tiny):
    import json
    import urllib.error
    import urllib.request

    base = f"http://127.0.0.1:{two_servers[0].address[1]}/v1"
    req = urllib.request.Request(base + "/admin/reload", data=json.dumps({"path": str(tiny), "version": 9}).encode(),
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=30)
    assert err.value.code == 401
    assert two_servers[0].version != 9
    req.add_header("Authorization", "Bearer tok-1")
    req.data = json.dumps({"path": "/nonexistent", "version": 9}).encode()
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=30)
    assert err.value.code == 400 and two_servers[0].version != 9


# ---- prompts ----------------------------------------------------------------------------------------------
def test_prompt_builder_stepwise_and_multiturn(policy):
    from guigym.train.rollout.prompts import PromptBuilder, env_mask_from_spans

    obs = [{"screenshot": screenshot(k), "a11y": A11Y, "instruction": "Select fzzqo and click Submit."}
           for k in range(3)]
    step = PromptBuilder(policy, history_images=2, mode="stepwise")
    ep = step.episode("Select fzzqo and click Submit.")
    p0 = ep.prompt(obs[0])
    assert p0.candidates == ['click(element="2")', 'click(element="7")'] and len(p0.images) == 1
    ep.add_response([1, 2], 'click(element="2")')
    ep.add_response([1, 2], 'click(element="7")')
    ep.prompt(obs[1])
    p2 = ep.prompt(obs[2])
    assert len(p2.images) == 2 and p2.images[-1] is ep.screens[-1]
    text = policy.tokenizer.decode(p2.prompt_ids)
    assert 'click(element="2")\nclick(element="7")' in text and '[7] button "Submit"' in text
    assert set(p2.env_mask) == {1}
    assert PromptBuilder(policy, constrained=False).episode("x").prompt(obs[0]).candidates is None

    multi = PromptBuilder(policy, mode="multiturn", history_images=1)
    ep = multi.episode("Select fzzqo and click Submit.")
    q0 = ep.prompt(obs[0])
    [s] = policy.generate([policy.encode_ids(q0.prompt_ids, q0.images)], max_new_tokens=16, seeds=[0],
                          candidates=[q0.candidates])
    ep.add_response(s.response_ids, s.text)
    q1 = ep.prompt(obs[1])
    n0, r = len(q0.prompt_ids), len(s.response_ids)
    assert q1.prompt_ids[:n0 + r] == q0.prompt_ids + s.response_ids, "previous ids kept verbatim"
    assert q1.env_mask[:n0] == [1] * n0 and q1.env_mask[n0:n0 + r] == [0] * r and set(q1.env_mask[n0 + r:]) == {1}
    assert q1.response_spans == [(n0, n0 + r)]
    assert env_mask_from_spans(len(q1.prompt_ids), q1.response_spans) == q1.env_mask
    seg = policy.tokenizer.decode(q1.prompt_ids[n0 + r:])
    assert seg.startswith("\n<|im_start|>user\n<|vision_start|>") and seg.endswith("<|im_start|>assistant\n")
    assert len(q1.images) == 2 and policy.image_runs(q1.prompt_ids) == policy.image_runs(q0.prompt_ids) * 2
    # the transcript is a valid model input: sampling and recomputation agree on it
    [s1] = policy.generate([policy.encode_ids(q1.prompt_ids, q1.images)], max_new_tokens=16, seeds=[1],
                           candidates=[q1.candidates])
    again = policy.logprobs_of(q1.prompt_ids, s1.response_ids, q1.images, candidates=q1.candidates)
    assert np.allclose(again, s1.logprobs, atol=TOL)
    with pytest.raises(RuntimeError, match="add_response"):
        ep.prompt(obs[2])


# ---- scheduler over a real EnvPool -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def pool():
    from guigym.envs.pool import EnvPool

    # settle_ms: every step takes at least this long (a remote env's latency, as in bench/rollout_util.py), so
    # step time, not browser-context creation at reset, dominates and lockstep's idle time has a known floor
    with EnvPool("MiniWoB-v0", 2, {"tasks": ["click-checkboxes", "click-option", "click-test"],
                                   "settle_ms": SETTLE_MS}, call_timeout_s=60) as p:
        for i in range(2):  # warm up: the first reset launches the worker's Chromium
            p.reset_async(i, seed=0, options={"task": "click-test"})
        while p.busy:
            assert not any(r.lost or r.error for r in p.wait()), "MiniWoB envs do not start"
        yield p


@pytest.fixture(scope="module")
def engine(policy):
    from guigym.train.rollout.policy_service import HFEngine

    with HFEngine(policy, max_batch=4, max_wait_ms=5) as eng:
        yield eng


def _builder(policy):
    from guigym.train.rollout.prompts import PromptBuilder

    # only checkboxes/radios are candidates: a click never ends these tasks, so every episode runs
    # exactly its step budget and the lengths are known: 8 for click-checkboxes, 1 for click-option
    return PromptBuilder(policy, constrained=True, roles=("checkbox", "radio"))


BUDGETS = {"click-checkboxes": 8, "click-option": 1}
SETTLE_MS = 500


def test_scheduler_groups_and_rollout_wise_beats_lockstep_on_uneven_lengths(pool, engine, policy):
    from guigym.train.rollout.scheduler import RolloutScheduler

    out = {}
    for mode in ("sync", "rollout"):
        sched = RolloutScheduler(pool, engine, _builder(policy), mode=mode, group_size=2, max_steps=BUDGETS,
                                 max_new_tokens=16, seed=5, run_id="r1")
        groups = sched.collect(["click-checkboxes", "click-option"], seeds=[11, 12])
        out[mode] = (groups, sched.last_stats)
        assert [g.task_id for g in groups] == ["click-checkboxes", "click-option"]
        for g in groups:
            assert len(g.trajectories) == 2 and [t.info["member"] for t in g.trajectories] == [0, 1]
            for t in g.trajectories:
                t.validate()
                assert t.group_id == g.group_id and t.run_id == "r1" and t.seed == {"click-checkboxes": 11}.get(
                    g.task_id, 12)
                assert t.length == BUDGETS[g.task_id], (mode, g.task_id, [s.action for s in t.steps])
                for k, s in enumerate(t.steps):
                    seen = t.steps[k - 1].info if k else "reset"  # where this step's observation came from
                    assert s.candidates and s.action_text in s.candidates and s.action == s.action_text, (
                        mode, g.task_id, k, s.action_text, seen)
                    assert len(s.rollout_logprobs) == len(s.response_ids)
        st = sched.last_stats
        assert st.trajectories == 4 and st.actions == 2 * 8 + 2 * 1 and st.lost == 0
    # one recorded step recomputes to its rollout log-probs under the same mask
    s = out["rollout"][0][0].trajectories[1].steps[2]
    again = policy.logprobs_of(s.prompt_ids, s.response_ids, [], candidates=s.candidates)
    assert np.allclose(again, s.rollout_logprobs, atol=TOL)
    # the samples depend on seeds only, not on the schedule
    acts = {m: [[s.action for s in t.steps] for g in out[m][0] for t in g.trajectories] for m in out}
    assert acts["sync"] == acts["rollout"]
    sync, roll = out["sync"][1], out["rollout"][1]
    print(f"\n{sync}\n{roll}\nU_env sync {sync.u_env:.2f} rollout {roll.u_env:.2f}; U_exec sync {sync.u_exec:.2f} "
          f"rollout {roll.u_exec:.2f}")
    # rollout-wise: a free env starts the next pending rollout at once, so no env idles while work waits
    assert roll.env_idle_pending_s < 0.01 * roll.wall_s, roll
    # lockstep: batch 1 holds one 8-step and one 1-step episode, so the 1-step env idles with work pending
    # through the other's last 7 steps, each at least SETTLE_MS long (batch 2 idles too, with nothing pending)
    assert sync.env_idle_pending_s >= 7 * SETTLE_MS / 1000, (sync, roll)
    # an env idling is not occupied, so that idle time caps lockstep's U_env; rollout-wise has only the tail
    # (measured: sync ~0.70, rollout-wise >= 0.95 over 10 runs)
    assert sync.u_env <= 1 - sync.env_idle_pending_s / (sync.num_envs * sync.wall_s) + 1e-9, sync
    assert sync.u_env < 0.9 and roll.u_env > sync.u_env + 0.1, (roll, sync)


def test_scheduler_retries_a_rollout_whose_worker_was_killed(pool, engine, policy):
    from guigym.train.rollout.scheduler import RolloutScheduler

    class KillOnce:
        """Delegates to the engine; on the 3rd request kills env worker 0 (mid-episode)."""

        def __init__(self) -> None:
            self.n = 0
            self.killed = None

        def submit(self, req):
            self.n += 1
            if self.n == 3:
                self.killed = pool.pid(0)
                os.kill(self.killed, 9)
            return engine.submit(req)

        def stats(self):
            return engine.stats()

    svc = KillOnce()
    restarts = pool.restarts
    sched = RolloutScheduler(pool, svc, _builder(policy), mode="rollout", group_size=2, max_steps=BUDGETS,
                             max_new_tokens=16, seed=9)
    groups = sched.collect(["click-checkboxes", "click-option"], seeds=[21, 22])
    st = sched.last_stats
    assert svc.killed is not None and pool.restarts > restarts
    assert st.lost >= 1 and st.retries == st.lost
    assert st.trajectories == 4 and sum(len(g.trajectories) for g in groups) == 4
    for g in groups:
        assert sorted(t.info["member"] for t in g.trajectories) == [0, 1]
        assert all(t.length == BUDGETS[g.task_id] for t in g.trajectories), "a lost rollout is rerun, not cut short"
    assert any(t.info["lost_attempts"] >= 1 for g in groups for t in g.trajectories)
    assert len({t.traj_id for g in groups for t in g.trajectories}) == 4


class _FlakyService:
    """Delegates to the engine, except that requests number ``fail`` (1-based, in submission
    order) fail as a dead policy server's would (an exception in the future, as HTTPEngine's)."""

    def __init__(self, engine, fail) -> None:
        self.engine, self.fail, self.n = engine, set(fail), 0

    def submit(self, req):
        from concurrent.futures import Future

        from guigym.train.rollout.policy_service import HTTPError

        self.n += 1
        if self.n in self.fail:
            fut = Future()
            fut.set_exception(HTTPError(f"http://127.0.0.1:1/v1/chat/completions: request {self.n}: HTTP 500"))
            return fut
        return self.engine.submit(req)

    def stats(self):
        return self.engine.stats()


@pytest.mark.parametrize("mode", ["rollout", "sync"])
def test_policy_failures_are_retried_then_lost_never_reward_zero(pool, engine, policy, mode):
    """A failed policy request is sent again after its backoff; when its retries run out, the
    rollout is lost and rerun from reset. Either way every trajectory has its full length and only
    steps the policy actually answered (issue 34: a policy-server failure is not a 0-reward rollout)."""
    from guigym.train.rollout.scheduler import RolloutScheduler

    # one-step rollouts (4 succeed, so at least 8 requests are made). Request 2 fails once (sent again);
    # requests 4-6 are an outage: with 2 envs and 1 retry, some rollout's request fails twice in a row
    # (3 consecutive failures from at most 2 rollouts in progress) and that rollout is lost
    svc = _FlakyService(engine, fail={2, 4, 5, 6})
    sched = RolloutScheduler(pool, svc, _builder(policy), mode=mode, group_size=2, max_steps=BUDGETS,
                             max_new_tokens=16, seed=9, policy_retries=1, policy_backoff_s=0.01)
    groups = sched.collect(["click-option", "click-option"], seeds=[31, 32])
    st = sched.last_stats
    assert st.policy_retries >= 2 and st.lost >= 1 and st.retries == st.lost, st
    assert st.trajectories == 4
    for g in groups:
        assert sorted(t.info["member"] for t in g.trajectories) == [0, 1]
        for t in g.trajectories:
            assert t.length == BUDGETS[g.task_id], "no rollout was cut short or scored at a failed request"
            assert all(s.candidates and s.action_text in s.candidates for s in t.steps)
    assert any(t.info["lost_attempts"] >= 1 for g in groups for t in g.trajectories)


def test_an_unreachable_policy_server_fails_the_collection_naming_it(pool, policy):
    """A policy server that refuses every connection (real loopback socket, real HTTPEngine): the
    rollouts are lost, then collect raises naming the policy service; no group comes back."""
    import socket

    from guigym.core.errors import EnvInfraError
    from guigym.train.rollout.policy_service import HTTPEngine
    from guigym.train.rollout.scheduler import RolloutScheduler

    with socket.socket() as sock:  # bound, never listening: connections are refused
        sock.bind(("127.0.0.1", 0))
        with HTTPEngine([f"http://127.0.0.1:{sock.getsockname()[1]}"], token="t", timeout_s=5) as svc:
            sched = RolloutScheduler(pool, svc, _builder(policy), group_size=2, max_steps=BUDGETS, seed=3,
                                     max_lost_retries=1, policy_retries=1, policy_backoff_s=0.01)
            with pytest.raises(EnvInfraError, match=r"policy service failed 2 time\(s\): HTTPError: .*refused"):
                sched.collect(["click-option"], seeds=[5])
