"""Stage-3 probe for the warm start (issue 32, item 3): supervised training on *relabelled* real
demonstration pages, measured on fresh real pages.

    python3 bench/relabel_sft.py [--init MODEL_DIR] [--mix click-button:1,unicode-test:1,click-widget:1]
                                 [--qpp 4] [--lr 5e-4] [--steps 1500] [--no-relabel]

Each training step draws ``--bs`` questions from the shipped stage-1 demonstrations
(``guigym/assets/warmstart/72ac24a6febdb2c2/demos.jsonl``: the MiniWoB oracle's pages on seeds
2000000..2000599). Each page is redrawn as the task's own generator would draw it with the same
layout, so every label/position pairing is new:

* click-button / unicode-test: every button's label is drawn again from the task's label list (read
  from the installed miniwob package), capitalised half the time;
* click-widget: every widget's text is drawn again (1-5 of MiniWoB's characters).

Up to ``--qpp`` of the page's questions (``instruction_variants``: every target the generator could
have drawn) go into the same batch, so the only way to lower the loss on a page is to read the
question. Prompts are rendered by the learning-proof recipe's PromptBuilder (byte-identical to RL's).
The loss is the negative log of the probability the *constrained* policy puts on the correct ids: a
softmax over the candidates' distinguishing token, summed over every correct candidate.

Printed every ``--eval-every`` steps: exact expected success (no sampling) on fresh real pages in
Chromium on seeds 3000000.. (``--val-count`` per task; disjoint from the demonstration, RL and
proof evaluation seeds), per task. The label-blind ceilings of those pages are printed first.
The model is written to ``--save`` at every evaluation.
"""
from __future__ import annotations

import argparse
import pickle
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WARM = ROOT / "guigym" / "assets" / "warmstart"
CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789"  # click-widget's text alphabet (the probe's)


def relabel(task: str, obs: dict[str, Any], labels: list[str], rng: random.Random) -> dict[str, Any]:
    """``obs`` with its a11y XML redrawn as the task's generator would (same layout, new texts)."""
    from lxml import etree

    root = etree.fromstring(obs["a11y"])
    if task in ("click-button", "unicode-test"):
        for node in root.iter("button"):
            label = rng.choice(labels)
            node.set("name", label[:1].upper() + label[1:] if rng.random() < 0.5 else label)
    else:
        for node in root.iter():
            if node.tag == "label":  # a checkbox / radio and its label carry the same text
                text = "".join(rng.sample(CHARS, rng.randint(1, 5)))
                node.set("name", text)
                for child in node:
                    if child.get("name") is not None:
                        child.set("name", text)
            elif node.tag == "button":
                node.set("name", "".join(rng.sample(CHARS, rng.randint(1, 5))))
            elif node.tag == "textbox":
                node.set("value", "".join(rng.sample(CHARS, rng.randint(1, 5))))
    out = dict(obs)
    out["a11y"] = etree.tostring(root, encoding="unicode")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--init", default=str(WARM / "26e337cd617dd297" / "model"), help="from_pretrained dir to start from")
    ap.add_argument("--demos", default=str(WARM / "72ac24a6febdb2c2" / "demos.jsonl"))
    ap.add_argument("--recipe", default=str(ROOT / "recipes" / "grpo_miniwob_instruct.yaml"))
    ap.add_argument("--mix", default="click-button:1,unicode-test:1,click-widget:1", help="task:weight,...")
    ap.add_argument("--qpp", type=int, default=4, help="questions per page in a batch")
    ap.add_argument("--no-relabel", action="store_true", help="the control: the demonstration pages as recorded")
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--bs", type=int, default=32, help="questions per step")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--val-start", type=int, default=3_000_000)
    ap.add_argument("--val-count", type=int, default=80)
    ap.add_argument("--val-cache", default=None, help="pickle of the recorded validation pages (made when absent)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", default=None)
    args = ap.parse_args()

    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _machine import machine
    from learnability_probe import miniwob_words

    from guigym.agents.oracle.miniwob import instruction_variants, label_blind_best
    from guigym.models.hf_policy import HFPolicy
    from guigym.train.config import load_recipe
    from guigym.train.demos import DemoFile, observation, reply_ids
    from guigym.train.exact_eval import record_pages
    from guigym.train.rollout.prompts import PromptBuilder

    print(machine())
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = load_recipe(args.recipe)
    r = cfg.rollout
    policy = HFPolicy(args.init)
    tok = policy.tokenizer
    builder = PromptBuilder(policy, template=r.template, history_images=r.history_images, constrained=r.constrained,
                            actions=tuple(r.candidate_actions), roles=r.candidate_roles, grid=r.grid_candidates)
    mix = {k: float(v) for k, v in (x.split(":") for x in args.mix.split(","))}
    demos = DemoFile(args.demos).read()
    pages_of = {t: [observation(d.steps[0]) for d in demos if d.task_id == t] for t in mix}
    labels = {t: miniwob_words(t)[0] for t in mix}

    def example(task: str, obs: dict[str, Any], question: str, ok: list[str]) -> tuple[str, list[int], list[int], list[int]]:
        """(task, prompt + forced reply prefix ids, each candidate's distinguishing token, correct indices)"""
        p = builder.episode(question).prompt(obs)
        cands = list(p.candidates)
        ids = [reply_ids(tok, c) for c in cands]
        n = 0  # the candidates share 'click(element="'; the id token is the first that differs
        while len(ids) > 1 and all(len(x) > n for x in ids) and len({x[n] for x in ids}) == 1:
            n += 1
        choices = [x[n] for x in ids]
        assert len(set(choices)) == len(choices), f"candidates not told apart by one token: {cands}"
        return task, list(p.prompt_ids) + ids[0][:n], choices, [i for i, c in enumerate(cands) if c in ok]

    cache = Path(args.val_cache) if args.val_cache else None
    if cache and cache.exists():
        val = pickle.loads(cache.read_bytes())
    else:
        val = record_pages(cfg.env.id, dict(cfg.env.kwargs), list(mix), range(args.val_start, args.val_start + args.val_count))
        if cache:
            cache.write_bytes(pickle.dumps(val))
    for t in mix:
        mine = [p for p in val if p.task_id == t]
        print(f"{t}: {len(mine)} validation pages, label-blind ceiling "
              f"{sum(label_blind_best(instruction_variants(t, p.obs)) for p in mine) / len(mine):.3f}")
    V = [example(p.task_id, p.obs, p.instruction, p.correct) for p in val if p.task_id in mix]
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(args.init)
    pad = tok.pad_token_id

    def last_logits(seqs: list[list[int]]) -> "torch.Tensor":
        """(B, V) logits at each sequence's last position (left padding)."""
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), pad)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, width - len(s):] = torch.tensor(s)
            mask[i, width - len(s):] = 1
        return model.lm_head(model.model(input_ids=ids, attention_mask=mask).last_hidden_state[:, -1])

    @torch.no_grad()
    def evaluate() -> dict[str, float]:
        model.eval()
        per: dict[str, list[float]] = {}
        for i in range(0, len(V), 40):
            chunk = V[i:i + 40]
            logits = last_logits([x[1] for x in chunk])
            for j, (t, _, choices, good) in enumerate(chunk):
                per.setdefault(t, []).append(float(torch.softmax(logits[j, choices], -1)[good].sum()) if good else 0.0)
        model.train()
        return {t: sum(v) / len(v) for t, v in per.items()}

    def show(step: int, loss: float, t0: float) -> None:
        e = evaluate()
        print(f"step {step:5d} [{time.time() - t0:5.0f} s] loss {loss:.3f}  " + "  ".join(f"{t} {v:.3f}" for t, v in e.items()),
              flush=True)

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0, betas=(0.9, 0.95))
    rng = random.Random(args.seed)
    tasks, weights = list(mix), [mix[t] for t in mix]
    t0, ema = time.time(), float("nan")
    show(0, ema, t0)
    for step in range(1, args.steps + 1):
        batch: list = []
        while len(batch) < args.bs:
            t = rng.choices(tasks, weights)[0]
            obs = rng.choice(pages_of[t])
            obs = obs if args.no_relabel else relabel(t, obs, labels[t], rng)
            questions = list(dict(instruction_variants(t, obs)).items())  # one entry per distinct question
            rng.shuffle(questions)
            batch += [example(t, obs, q, ok) for q, ok in questions[:args.qpp]]
        logits = last_logits([x[1] for x in batch])
        loss = -torch.stack([torch.logsumexp(torch.log_softmax(logits[i, x[2]], -1)[x[3]], 0)
                             for i, x in enumerate(batch)]).mean()
        for g in opt.param_groups:
            g["lr"] = args.lr * min(1.0, step / 20)  # 20 warm-up steps
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = float(loss.detach()) if ema != ema else 0.95 * ema + 0.05 * float(loss.detach())
        if step % args.eval_every == 0:
            show(step, ema, t0)
            if args.save:
                model.save_pretrained(args.save)
                tok.save_pretrained(args.save)


if __name__ == "__main__":
    main()
