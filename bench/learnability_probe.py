"""How much data does the tiny policy need to learn the learning-proof tasks? (issue 11, item 5)

    python3 bench/learnability_probe.py [--steps 1500] [--hidden 64 --layers 2] [--mode sl|grpo]
                                        [--questions-per-page K]

The learning proof (``recipes/grpo_miniwob_instruct.yaml``) asks a freshly built tiny Qwen2.5-VL
to pick, from the a11y lines of a page, the element the instruction names. This probe measures
how fast that model can learn the mapping at all, without Chromium, on fresh synthetic pages
drawn like MiniWoB's click-button, unicode-test and click-widget generators (6 slots of lorem text / textbox
/ button with one of the task's labels, capitalised half the time, words read from the miniwob
package; 5 widgets of random kinds), rendered with the
recipe's template, the real chat template and the real tokenizer, and scored as the recipe scores
them (one click on a candidate element id):

* ``--mode sl``: the upper bound. Supervised cross-entropy on the correct ids (-log of the
  probability mass on the correct candidates), one fresh page per example: every example carries
  the full label, where a GRPO group of G=8 carries about one bit.
* ``--mode sl --questions-per-page K``: the same, with up to K of the page's distinct questions
  packed into one sequence as successive chat turns (the page and the first question in the first
  user turn, each later question in a user turn of its own after the previous answer), the
  cross-entropy taken at every answer's id token. One forward pass then carries K labels on one
  page instead of one; held-out evaluation stays single-question, as the recipe prompts.
* ``--mode grpo``: GRPO as the trainer runs it for one-step episodes (G samples per page from the
  constrained distribution, group-normalised advantages, on-policy policy gradient).

Printed: expected held-out success (probability mass on correct ids, averaged over 300 fixed
held-out pages per task; exact, not sampled) against chance, every ``--eval-every`` steps, and
the wall time. The pages are synthetic (a tuning simulator for this probe only); the proof itself
runs on real pages in Chromium.
"""
from __future__ import annotations

import argparse
import random
import re
import time

import torch
import torch.nn.functional as F

#: (compact a11y lines, instruction, candidate ids, correct ids, the page's label-blind ceiling: the
#: best success of one instruction-blind click under the generator's own instruction distribution,
#: as ``guigym.agents.oracle.miniwob.label_blind_best`` computes it for real pages, and every
#: distinct instruction the generator could have drawn for this page with its correct ids)
Page = tuple[str, str, list[str], set[str], float, list[tuple[str, set[str]]]]
WIDGETS = ["button", "checkbox", "radio", "text", "textarea"]
TEMPLATE = "Elements on screen:\n{a11y}\nTask: {instruction}"
REPLY_PREFIX = 'click(element="'


def miniwob_words(task: str = "click-button") -> tuple[list[str], list[str]]:
    """(the task's button labels, MiniWoB's lorem words), read from the installed miniwob
    package's own scripts so the probe's pages use the task's vocabulary."""
    from guigym.envs.web.miniwob import miniwob_html_dir

    html = miniwob_html_dir()
    page = (html / "miniwob" / f"{task if task != 'click-widget' else 'click-button'}.html").read_text(encoding="utf-8")
    labels = re.findall(r"'([^']+)'", re.search(r"var buttons = \[(.*?)\];", page).group(1))
    utils = (html / "common" / "ui_utils.js").read_text(encoding="utf-8")
    lorem = re.findall(r'"([^"]+)"', re.search(r"lorem_words = \[(.*?)\];", utils, re.S).group(1))
    return labels, lorem


def _button_task_page(rng: random.Random, labels: list[str], lorem: list[str]) -> Page:
    """One page as MiniWoB's click-button / unicode-test ``genProblem`` draws it, in the compact
    a11y lines the recipe's prompt shows: 6 slots, each lorem text (u < 0.33: a ``generic`` node of
    3 lorem words), a textbox (u < 0.66; half of them after a ``generic`` "w1 w2 w3:" label
    node), or a button with a random label, capitalised half the time; the last slot is forced to
    a button when none was made. Node ids run over every node (so 6-12 lines, ids >= 10 occur).
    The target is a uniformly drawn button's text; every button with that text is correct."""
    lines, cands, buttons = [], [], []

    def node(text: str) -> str:
        lines.append(f"[{len(lines) + 1}] {text}")
        return str(len(lines))

    for slot in range(6):
        u = rng.random()
        forced = slot == 5 and not buttons
        if u < 0.33 and not forced:
            node('generic "' + " ".join(rng.choice(lorem) for _ in range(3)) + '"')
        elif u < 0.66 and not forced:
            if rng.random() < 0.5:
                node('generic "' + " ".join(rng.choice(lorem) for _ in range(3)) + ':"')
            cands.append(node("textbox value="))
        else:
            label = rng.choice(labels)
            label = label[:1].upper() + label[1:] if rng.random() < 0.5 else label
            nid = node(f'button "{label}"')
            cands.append(nid)
            buttons.append((nid, label))
    target = rng.choice(buttons)[1]
    labels_here = [lab for _, lab in buttons]
    blind = max(labels_here.count(x) for x in labels_here) / len(labels_here)
    variants = [(f'Click on the "{lab}" button.', {i for i, x in buttons if x == lab}) for lab in dict.fromkeys(labels_here)]
    return ("\n".join(lines), f'Click on the "{target}" button.', cands, {i for i, lab in buttons if lab == target},
            blind, variants)


def click_widget_page(rng: random.Random, labels: list[str], lorem: list[str]) -> Page:
    del labels, lorem
    lines, present, nid = [], [], 1
    for _ in range(5):
        kind = rng.choice(WIDGETS)
        word = "".join(rng.sample("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789", rng.randint(1, 5)))
        if kind == "button":
            lines.append(f'[{nid}] button "{word}"')
        elif kind in ("checkbox", "radio"):
            lines.append(f'[{nid}] label "{word}"')
            nid += 1
            lines.append(f'[{nid}] {kind} "{word}" checked=false')
        else:  # text and textarea are both role textbox in the a11y tree
            lines.append(f"[{nid}] textbox value={word}")
        present.append((str(nid), kind))
        nid += 1
    target = rng.choice(present)[1]
    # the page rewards only the asked data-type: a "text" input does not answer "textarea", though
    # the prompt shows both as a textbox, so the best reachable success is below 1
    kinds = [k for _, k in present]
    variants = [(f'Click on a "{kind}" widget.', {i for i, k in present if k == kind}) for kind in dict.fromkeys(kinds)]
    return ("\n".join(lines), f'Click on a "{target}" widget.', [i for i, _ in present],
            {i for i, k in present if k == target}, max(kinds.count(k) for k in kinds) / len(kinds), variants)


TASKS = {"click-button": _button_task_page, "unicode-test": _button_task_page, "click-widget": click_widget_page}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["sl", "grpo"], default="sl")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=32, help="pages per step (grpo: groups per step)")
    ap.add_argument("--questions-per-page", type=int, default=1,
                    help="sl: pack up to K of a page's distinct questions into one sequence as chat turns")
    ap.add_argument("--group", type=int, default=8, help="grpo: G samples per page")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tasks", default="click-button,unicode-test,click-widget")
    ap.add_argument("--tokenizer", default=None, help="a model directory whose tokenizer to use (e.g. the shipped "
                                                      "warm start's word-level BPE); default: tiny's built-in one")
    args = ap.parse_args()
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        ap.error(f"--tasks: unknown {unknown}; known: {sorted(TASKS)}")
    if args.questions_per_page < 1 or (args.questions_per_page > 1 and args.mode != "sl"):
        ap.error("--questions-per-page: a positive count, above 1 only with --mode sl")

    from transformers import Qwen2_5_VLForConditionalGeneration
    from guigym.models import tiny

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    if args.tokenizer:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(args.tokenizer)
    else:
        tok = tiny.build_tokenizer()
    model = Qwen2_5_VLForConditionalGeneration(tiny.tiny_config(hidden=args.hidden, layers=args.layers, tokenizer=tok))
    words = {t: miniwob_words(t) for t in tasks}

    def encode(task: str, rng: random.Random) -> tuple[str, list[int], list[int], list[bool]]:
        page = TASKS[task](rng, *words[task])
        a11y, instruction, cands, correct, blind, _ = page
        ids = tok.apply_chat_template([{"role": "user", "content": TEMPLATE.format(a11y=a11y, instruction=instruction)}],
                                      add_generation_prompt=True, tokenize=True)
        ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids) + tok(REPLY_PREFIX)["input_ids"]
        cand_tokens = [tok(c)["input_ids"] for c in cands]
        assert all(len(t) == 1 for t in cand_tokens), "ids must be one token each"
        return task, ids, [t[0] for t in cand_tokens], [c in correct for c in cands], blind

    def encode_packed(task: str, rng: random.Random) -> tuple[list[int], list[tuple[int, list[int], list[bool]]]]:
        """One fresh page with up to ``--questions-per-page`` of its distinct questions as chat turns.

        Returns (token ids of the whole conversation, [(position of an answer's id token, candidate
        id tokens, correct mask)] per question). Each answer clicks one correct id at random."""
        a11y, _, cands, _, _, variants = TASKS[task](rng, *words[task])
        rng.shuffle(variants)
        cand_tokens = [tok(c)["input_ids"][0] for c in cands]
        messages: list[dict[str, str]] = []
        ids: list[int] = []
        answers = []
        for k, (question, ok) in enumerate(variants[:args.questions_per_page]):
            messages.append({"role": "user", "content": TEMPLATE.format(a11y=a11y, instruction=question) if k == 0
                             else f"Task: {question}"})
            asked = tok(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) + REPLY_PREFIX)
            asked = list(asked["input_ids"])
            assert asked[:len(ids)] == ids, "the chat template must extend the conversation token-wise"
            answer = rng.choice(sorted(ok))
            messages.append({"role": "assistant", "content": f'{REPLY_PREFIX}{answer}")'})
            ids = list(tok(tok.apply_chat_template(messages, tokenize=False))["input_ids"])
            assert ids[len(asked)] == tok(answer)["input_ids"][0], "the answer's id must be one token"
            answers.append((len(asked), cand_tokens, [c in ok for c in cands]))
        return ids, answers

    def packed_loss(batch: list) -> torch.Tensor:
        """Mean over every answer in the batch of -log(probability mass on its correct ids), the
        mass taken over the page's candidate id tokens at the position before the answer."""
        width = max(len(ids) for ids, _ in batch)
        x = torch.full((len(batch), width), tok.pad_token_id)
        mask = torch.zeros_like(x)
        for i, (ids, _) in enumerate(batch):  # right padding: the answers' positions stay as built
            x[i, :len(ids)] = torch.tensor(ids)
            mask[i, :len(ids)] = 1
        hidden = model.model(input_ids=x, attention_mask=mask).last_hidden_state
        terms = []
        for i, (_, answers) in enumerate(batch):
            for pos, cand_tokens, ok in answers:
                lp = F.log_softmax(model.lm_head(hidden[i, pos - 1])[cand_tokens], -1)
                terms.append(-torch.logsumexp(lp[torch.tensor(ok)], 0))
        return torch.stack(terms).mean()

    def candidate_logprobs(batch: list) -> list[torch.Tensor]:
        """(K_i,) log-probs over each page's candidate id tokens at the reply position."""
        width = max(len(b[1]) for b in batch)
        ids = torch.full((len(batch), width), tok.pad_token_id)
        mask = torch.zeros_like(ids)
        for i, b in enumerate(batch):
            ids[i, width - len(b[1]):] = torch.tensor(b[1])
            mask[i, width - len(b[1]):] = 1
        last = model.lm_head(model.model(input_ids=ids, attention_mask=mask).last_hidden_state[:, -1])
        return [F.log_softmax(last[i, b[2]], -1) for i, b in enumerate(batch)]

    held_rng = random.Random(10_000 + args.seed)
    held_out = [encode(t, held_rng) for t in tasks for _ in range(300)]
    chance = {t: sum(sum(b[3]) / len(b[3]) for b in held_out if b[0] == t) / 300 for t in tasks}
    blind = {t: sum(b[4] for b in held_out if b[0] == t) / 300 for t in tasks}
    t0 = time.time()

    def evaluate(step: int) -> None:
        model.eval()
        mass: dict[str, float] = {t: 0.0 for t in tasks}
        with torch.no_grad():
            for i in range(0, len(held_out), 50):
                chunk = held_out[i:i + 50]
                for b, lp in zip(chunk, candidate_logprobs(chunk)):
                    mass[b[0]] += float(lp.exp()[torch.tensor(b[3])].sum()) / 300
        per = "  ".join(f"{t} {mass[t]:.3f} (chance {chance[t]:.3f}, label-blind {blind[t]:.3f})" for t in tasks)
        print(f"step {step:5d}  examples {step * args.batch * (args.group if args.mode == 'grpo' else 1):7d}  "
              f"{per}  [{time.time() - t0:.0f} s]", flush=True)
        model.train()

    rng = random.Random(args.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    evaluate(0)
    for step in range(1, args.steps + 1):
        if args.questions_per_page > 1:
            loss = packed_loss([encode_packed(rng.choice(tasks), rng) for _ in range(args.batch)])
        elif args.mode == "sl":
            batch = [encode(rng.choice(tasks), rng) for _ in range(args.batch)]
            lps = candidate_logprobs(batch)
            loss = -torch.stack([torch.logsumexp(lp[torch.tensor(b[3])], 0) for b, lp in zip(batch, lps)]).mean()
        else:
            batch = [encode(rng.choice(tasks), rng) for _ in range(args.batch)]
            terms = []
            for b, lp in zip(batch, candidate_logprobs(batch)):
                picks = torch.multinomial(lp.exp().detach(), args.group, replacement=True)
                r = torch.tensor([float(b[3][j]) for j in picks])
                if r.std() > 0:  # zero-variance groups carry no GRPO signal
                    terms.append(-(((r - r.mean()) / (r.std() + 1e-4)) * lp[picks]).mean())
            if not terms:
                continue
            loss = torch.stack(terms).sum() / len(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % args.eval_every == 0:
            evaluate(step)


if __name__ == "__main__":
    main()
