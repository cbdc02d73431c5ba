"""Exact held-out success of one or more policies on the instruction tasks, beside chance and the
label-blind ceiling (issue 32: the warm start's and the learning proof's per-task figures).

    python3 bench/exact_success.py MODEL_DIR [MODEL_DIR ...] [--recipe recipes/grpo_miniwob_instruct.yaml]
                                   [--start 1000000 --count 50] [--plan]

Pages: real MiniWoB pages in Chromium on the held-out seeds (the recipe's env and tasks).
For each model: the probability mass its constrained policy puts on a correct click, averaged
over the pages (guigym.train.exact_eval; no sampling noise), per task and pooled; chance (a
uniform candidate) and the label-blind ceiling (the best instruction-blind click) on the same pages.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--recipe", default=str(Path(__file__).resolve().parents[1] / "recipes" / "grpo_miniwob_instruct.yaml"))
    ap.add_argument("--start", type=int, default=1_000_000)
    ap.add_argument("--count", type=int, default=50)
    ap.add_argument("--plan", action="store_true",
                    help="also score each model with BEPA's oracle plan appended to the instruction (the text "
                         "BEPA's plan conditioning adds) and print the paired change with a 95%% interval")
    args = ap.parse_args()

    from _machine import machine  # bench/ is on sys.path when run as a script

    from guigym.agents.oracle.miniwob import instruction_variants, label_blind_best
    from guigym.models.hf_policy import HFPolicy
    from guigym.train.config import load_recipe
    from guigym.train.exact_eval import expected_success, oracle_plan, record_pages
    from guigym.train.rollout.prompts import PromptBuilder

    print(machine())
    cfg = load_recipe(args.recipe)
    t0 = time.time()
    pages = record_pages(cfg.env.id, dict(cfg.env.kwargs), cfg.env.tasks, range(args.start, args.start + args.count))
    print(f"{len(pages)} pages recorded [{time.time() - t0:.0f} s]")
    tasks = list(cfg.env.tasks)
    rows: dict[str, dict[str, float]] = {t: {} for t in tasks}
    for t in tasks:
        mine = [p for p in pages if p.task_id == t]
        rows[t]["label-blind"] = sum(label_blind_best(instruction_variants(t, p.obs)) for p in mine) / len(mine)
    r = cfg.rollout
    for m in args.models:
        policy = HFPolicy(m)
        builder = PromptBuilder(policy, template=r.template, history_images=r.history_images, constrained=r.constrained,
                                actions=tuple(r.candidate_actions), roles=r.candidate_roles, grid=r.grid_candidates)
        t1 = time.time()
        s = expected_success(policy, builder, pages)
        if "chance" not in rows[tasks[0]]:
            for t in tasks:
                idx = [i for i, p in enumerate(pages) if p.task_id == t]
                rows[t]["chance"] = sum(len(set(pages[i].correct) & set(builder.episode(pages[i].instruction)
                                                                          .prompt(pages[i].obs).candidates or []))
                                        / max(1, len(builder.candidates(pages[i].obs) or [])) for i in idx) / len(idx)
        for t in tasks:
            v = [x for x, p in zip(s, pages) if p.task_id == t]
            rows[t][m] = sum(v) / len(v)
        if args.plan:  # the same pages with the plan in the prompt, paired page by page
            sp = expected_success(policy, builder, pages, guidance=oracle_plan)
            for t in tasks + ["pooled"]:
                d = [b - a for a, b, p in zip(s, sp, pages) if t in ("pooled", p.task_id)]
                mean = sum(d) / len(d)
                sd = (sum((x - mean) ** 2 for x in d) / max(1, len(d) - 1)) ** 0.5
                half = 1.96 * sd / len(d) ** 0.5
                print(f"{m} + plan  {t:13s} {sum(x for x, p in zip(sp, pages) if t in ('pooled', p.task_id)) / len(d):.3f}"
                      f"  change {mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]")
        print(f"{m}: pooled {sum(s) / len(s):.3f} [{time.time() - t1:.0f} s]")
    cols = ["chance", "label-blind"] + args.models
    print("task          " + "  ".join(f"{Path(c).parent.name + '/' + Path(c).name if '/' in c else c:>24s}" for c in cols))
    for t in tasks:
        print(f"{t:13s} " + "  ".join(f"{rows[t][c]:24.3f}" for c in cols))
    print("pooled        " + "  ".join(f"{sum(rows[t][c] for t in tasks) / len(tasks):24.3f}" for c in cols))


if __name__ == "__main__":
    main()
