"""bench/curriculum_band.py quick mode (issue 15 item 4) on real MiniWoB++ pages in Chromium: the
WebRL curriculum's candidates are split by the critic band exactly as the hook records them and
each is played K times on its own seeded page; UI-Mem's recorded lambdas follow eqs. 2-3 of the
recorded EMA, which equals the EMA replayed from the DataStore."""
from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import curriculum_band as cb  # noqa: E402


def _need_chromium() -> None:
    if importlib.util.find_spec("miniwob") is None:
        pytest.skip("the miniwob package (MiniWoB++ pages) is not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    from guigym.core.errors import EnvInfraError
    from guigym.envs.web.browser import find_chromium

    with sync_api.sync_playwright() as pw:
        try:
            find_chromium(pw.chromium.executable_path, headless=True)
        except EnvInfraError as exc:
            pytest.skip(f"no Chromium on this machine: {exc}")


@pytest.fixture(scope="module")
def quick(one_torch_thread, tmp_path_factory):
    _need_chromium()
    out = tmp_path_factory.mktemp("band") / "band.json"
    res = cb.main(["--quick", "--keep", "--json", str(out)])
    yield res, out
    for r in res["webrl"] + res["uimem"]:
        shutil.rmtree(Path(r["run_dir"]).parent, ignore_errors=True)


def test_json_is_the_returned_result_written_atomically(quick):
    res, out = quick
    assert json.loads(out.read_text()) == json.loads(json.dumps(res, default=str))
    assert not out.with_suffix(".tmp").exists()
    assert res["tasks"] == list(cb.QUICK.tasks) and res["k"] == cb.QUICK_K and res["iterations"] == 2


def test_band_splits_candidates_by_critic_score_and_each_is_played_k_times_on_its_page(quick):
    res, _ = quick
    (run,) = res["webrl"]
    cands = run["candidates"]
    # login-user fails every phase in 2 steps, so the probed boundary always has a parent
    assert cands and {c["family"] for c in cands} <= set(cb.QUICK.tasks)
    for c in cands:
        s = c["critic_score"]
        assert isinstance(s, float) and 0.0 <= s <= 1.0
        assert c["in_band"] == (cb.LOW <= s <= cb.HIGH)
        assert c["kept"] == c["in_band"]  # max_new (500) never binds here
        assert c["n"] == cb.QUICK_K and c["unscorable"] == 0 and 0 <= c["successes"] <= c["n"]
        # every rollout ran on the candidate's own page: its seed, one instruction
        assert c["episode_seeds"] == [c["seed"]] and c["instructions"] == 1
        assert cb.SEED_SPACE[0] <= c["seed"] < cb.SEED_SPACE[1]
        if c["family"] == cb.ablate.IMPOSSIBLE:
            assert c["successes"] == 0  # three steps needed, two allowed
    # the table counts what the hook recorded
    kept = sum(c["in_band"] for c in cands)
    line = next(x for x in cb.band_table(cands) if x.startswith("pooled") and " kept " in x)
    assert int(line.split()[2]) == kept


def test_tasks_kept_during_training_lie_in_the_band(quick):
    """The trainer's own curriculum calls (iteration 1) stored only in-band candidates."""
    from guigym.train.data.store import DataStore

    (run,) = quick[0]["webrl"]
    store = DataStore.for_run_dir(run["run_dir"])
    try:
        added = store.added_tasks(run["run_id"])
    finally:
        store.close()
    phase1 = next(p for p in run["phases"] if p["iteration"] == 1)
    assert len(added) == phase1["kept"] >= 1
    for r in added:
        assert r["source"] == "webrl_curriculum"
        assert cb.LOW <= r["spec"]["critic_score"] <= cb.HIGH


def _eq23(s: float, o: dict) -> tuple[float, float, float]:
    phi = (s - o["theta_start"]) / (o["theta_end"] - o["theta_start"])
    ls = min(max(o["lambda_strong_max"] - phi * (o["lambda_strong_max"] - o["lambda_strong_min"]),
                 o["lambda_strong_min"]), o["lambda_strong_max"])
    ln = min(max(o["lambda_none_min"] + phi * (o["lambda_none_max"] - o["lambda_none_min"]),
                 o["lambda_none_min"]), o["lambda_none_max"])
    return ls, 1.0 - ls - ln, ln


def test_uimem_lambdas_follow_eqs_2_3_of_the_recorded_ema_which_the_datastore_reproduces(quick):
    (run,) = quick[0]["uimem"]
    rows, o = run["rows"], run["options"]
    g = cb.QUICK.num_generations
    assert len(rows) == 2 * len(cb.QUICK.tasks)  # each task once per iteration (epoch_shuffle)
    for x in rows:
        if x["iteration"] == 0:
            assert x["ema"] == 0.0
        assert x["ema"] == pytest.approx(x["ema_replayed"], abs=1e-12)
        ls, lw, ln = _eq23(x["ema"], o)
        assert (x["lambda_strong"], x["lambda_weak"], x["lambda_none"]) == pytest.approx((ls, lw, ln))
        assert sum(x["counts"]) == g and all(abs(c - lam * g) < 1 for c, lam in zip(x["counts"], (ls, lw, ln)))
        # a stratum without memory text runs unguided: realised levels never exceed the strata
        assert sum(x["realised"]) == x["rollouts"] == g
        assert x["realised"][0] <= x["counts"][0] and x["realised"][1] <= x["counts"][1]
    # eq. 2: lambda_strong never rises with the EMA
    for a in rows:
        for b in rows:
            if a["ema"] < b["ema"]:
                assert a["lambda_strong"] >= b["lambda_strong"]


def test_spearman_ranks_with_ties():
    assert cb.spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert cb.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert cb.spearman([1, 1, 2, 2], [0, 0, 1, 1]) == pytest.approx(1.0)
    assert cb.spearman([1, 1], [0, 1]) != cb.spearman([1, 1], [0, 1])  # constant side: NaN
    assert cb._ranks([5.0, 1.0, 5.0]) == [2.5, 1.0, 2.5]
