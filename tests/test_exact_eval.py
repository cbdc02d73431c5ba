"""guigym.train.exact_eval: exact success of a constrained one-click policy, and BEPA's plan as
conditioner text, on real recorded pages (the shipped warm start's demonstrations) with the
shipped warm-start model (no browser)."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "guigym" / "assets" / "warmstart").glob("*/demos.jsonl"))
pytestmark = pytest.mark.skipif(not SHIPPED, reason="no shipped warm start in guigym/assets/warmstart")


@pytest.fixture(scope="module")
def setup():
    from guigym.models.hf_policy import HFPolicy
    from guigym.train.demos import DemoFile, observation
    from guigym.train.exact_eval import Page
    from guigym.train.rollout.prompts import PromptBuilder

    policy = HFPolicy(str(SHIPPED[0].parent / "model"))
    builder = PromptBuilder(policy, template="Elements on screen:\n$a11y\nTask: $instruction", history_images=0,
                            constrained=True, actions=("click",))
    pages = []
    for d in DemoFile(SHIPPED[0]).read()[::150][:8]:
        pages.append(Page(d.task_id, d.seed, observation(d.steps[0]), d.instruction, [d.steps[0].action_text]))
    return policy, builder, pages


def test_success_is_a_probability_split_over_the_candidates(setup) -> None:
    from dataclasses import replace

    from guigym.train.exact_eval import expected_success

    policy, builder, pages = setup
    for page in pages:
        cands = builder.episode(page.instruction).prompt(page.obs).candidates
        assert cands and len(cands) >= 2
        half = len(cands) // 2
        (a,), (b,), (every,), (none,) = (expected_success(policy, builder, [replace(page, correct=c)])
                                         for c in (cands[:half], cands[half:], cands, []))
        assert every == pytest.approx(1.0, abs=1e-4)  # the constrained distribution sums to 1
        assert a + b == pytest.approx(1.0, abs=1e-4)
        assert none == 0.0
        assert 0.0 < a < 1.0


def test_the_plan_reaches_the_prompt_and_names_the_element(setup) -> None:
    from guigym.train.exact_eval import expected_success, oracle_plan

    policy, builder, pages = setup
    page = next(p for p in pages if p.task_id == "click-button")
    plan = oracle_plan(page)
    label = page.instruction.split('"')[1]
    assert plan.startswith("Plan:\n1. click ") and f"'{label}'" in plan
    plain = builder.episode(page.instruction).prompt(page.obs).prompt_ids
    guided = builder.episode(page.instruction, guidance=plan).prompt(page.obs).prompt_ids
    assert "Plan:" in policy.tokenizer.decode(guided) and "Plan:" not in policy.tokenizer.decode(plain)
    (s0,), (s1,) = expected_success(policy, builder, [page]), expected_success(policy, builder, [page], guidance=oracle_plan)
    assert s0 != s1  # a different prompt, a different distribution (whether better is the bench's question)
