"""bench/learnability_probe.py's synthetic pages look like the real MiniWoB pages they stand in for
(issue 32, item 3): compared with the real click-button / unicode-test / click-widget pages the
oracle recorded in Chromium (the shipped warm start's demonstrations), on the page statistics
that set how hard the task is: lines per page, share of textbox / button lines, candidates per
page and the label-blind ceiling."""
from __future__ import annotations

import functools
import importlib.util
import random
import re
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMOS = sorted((ROOT / "guigym" / "assets" / "warmstart").glob("*/demos.jsonl"))


@functools.lru_cache(maxsize=1)
def _demos() -> list:
    from guigym.train.demos import DemoFile

    return DemoFile(DEMOS[0]).read()


def _probe():
    spec = importlib.util.spec_from_file_location("learnability_probe", ROOT / "bench" / "learnability_probe.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _stats(pages: list[tuple[str, float]]) -> dict[str, float]:
    """pages: (compact a11y text, label-blind ceiling) -> mean statistics."""
    lines = [a.splitlines() for a, _ in pages]
    roles = [re.match(r"\[\d+\] (\w+)", ln).group(1) for ls in lines for ln in ls]
    return {"lines": statistics.mean(len(ls) for ls in lines),
            "textbox": roles.count("textbox") / len(roles), "button": roles.count("button") / len(roles),
            "ids>=10": sum(len(ls) >= 10 for ls in lines) / len(lines),
            "label_blind": statistics.mean(b for _, b in pages)}


@pytest.mark.skipif(not DEMOS, reason="no shipped warm-start demonstrations (guigym/assets/warmstart/*/demos.jsonl)")
@pytest.mark.parametrize("task", ["click-button", "unicode-test", "click-widget"])
def test_probe_pages_match_real_pages(task: str) -> None:
    from guigym.agents.oracle.miniwob import instruction_variants, label_blind_best
    from guigym.train.demos import observation
    from guigym.train.rollout.prompts import compact_a11y

    real = []
    for d in _demos():
        if d.task_id == task:
            st = d.steps[0]
            real.append((compact_a11y(st.obs["a11y"], (st.screen[1], st.screen[0])),
                         label_blind_best(instruction_variants(task, observation(st)))))
    assert len(real) >= 300
    probe = _probe()
    rng = random.Random(0)
    words = probe.miniwob_words(task)
    fake = []
    for _ in range(3000):
        page = probe.TASKS[task](rng, *words)
        fake.append((page[0], page[4]))
    r, f = _stats(real), _stats(fake)
    # tolerances: a few standard errors of the real sample's means (600 pages)
    assert abs(r["lines"] - f["lines"]) < 0.25, (r, f)
    assert abs(r["textbox"] - f["textbox"]) < 0.04, (r, f)
    assert abs(r["button"] - f["button"]) < 0.04, (r, f)
    assert abs(r["ids>=10"] - f["ids>=10"]) < 0.03, (r, f)
    assert abs(r["label_blind"] - f["label_blind"]) < 0.04, (r, f)


@pytest.mark.parametrize("task", ["click-button", "unicode-test", "click-widget"])
def test_every_question_of_a_probe_page_names_its_own_correct_ids(task: str) -> None:
    """``--questions-per-page`` trains on a page's other questions: each must be one the generator
    could have drawn, with exactly the ids that answer it (read back from the page's own lines),
    the page's drawn instruction among them, and the label-blind ceiling the variants imply."""
    probe = _probe()
    rng = random.Random(1)
    words = probe.miniwob_words(task)
    for _ in range(300):
        a11y, instruction, cands, correct, blind, variants = probe.TASKS[task](rng, *words)
        lines = dict(re.findall(r"^\[(\d+)\] (.*)$", a11y, flags=re.M))
        assert len({q for q, _ in variants}) == len(variants)
        assert dict(variants)[instruction] == correct
        for question, ok in variants:
            asked = re.search(r'"(.*)"', question).group(1)
            if task == "click-widget":  # a kind; text and textarea are both textboxes in the tree
                role = {"text": "textbox", "textarea": "textbox"}.get(asked, asked)
                assert ok and all(lines[i].split()[0] == role for i in ok)
            else:
                assert ok == {i for i, text in lines.items() if text == f'button "{asked}"'}
            assert ok <= set(cands)
        # the best blind click answers the most questions when each page question is drawn by target
        if task != "click-widget":
            weights = {q: len(ok) for q, ok in variants}
            assert abs(max(weights.values()) / sum(weights.values()) - blind) < 1e-9
