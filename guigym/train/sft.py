"""The SFT stage of ``guigym train`` (``stage: sft``): supervised fine-tuning on demonstrations.

Real GUI RL starts from a model that already reads its prompt: MobileRL (Xu et al. 2025, sec. 3.1)
trains reasoning-free SFT, then reasoning SFT, before AdaGRPO; WebRL (Qi et al. 2024, sec. 4) starts
from an SFT actor; DART starts from UI-TARS. This stage produces such a starting point inside guigym:

    demonstrations (guigym.train.demos: an agent played on seeds disjoint from evaluation, a
    guigym eval run replayed, or an earlier SFT run's demos.jsonl) -> demos.jsonl
        -> replies: the action, or ``sft.reply_template`` with the reasoning an annotator wrote for
           the step (reasoning SFT, MobileRL sec. 2.1; guigym.train.annotator, annotations.jsonl)
        -> rendered by the run's PromptBuilder (the GRPO prompt path) -> Trajectory(source="expert")
           stored in the run's DataStore (DART's expert pool / BEPA's expert cache can read them)
        -> samples (the recipe's sample builder: response tokens masked in, prompt tokens out)
        -> one epoch per iteration of Learner.nll_update (token-mean NLL under the constraint)
        -> <run.dir>/model (or sft.output_dir): a from_pretrained directory a GRPO recipe names as
           model.path

What it shares with the RL loop (:class:`~guigym.train.loop.Trainer`, which it extends): model
building and loading, the learner and its optimizer, checkpoints and exact resume (the demo file is
append-only, the rendering deterministic, each epoch's order drawn from ``run.seed``), the metrics
sinks and progress bars, the held-out evaluation before/after with its z-test, ``--check``.
"""
from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any, Optional

from guigym.train.loop import Trainer, _broadcast, _fault


class SFTTrainer(Trainer):
    """A :class:`Trainer` whose iterations are SFT epochs over rendered demonstrations."""

    _demos: Optional[list[Any]] = None
    _solved: list[Any] = []
    samples: list[Any] = []

    # ---- demonstrations ------------------------------------------------------------------------
    _replies: Optional[dict[tuple[int, int], str]] = None

    @property
    def demo_file(self) -> Any:
        """This run's demos.jsonl, or the one ``sft.demos.path`` names (source demos_file)."""
        from guigym.train.demos import DemoFile

        d = self.cfg.sft.demos
        return DemoFile(d.path if d.source == "demos_file" else self.dir / "demos.jsonl")

    def demo_jobs(self) -> tuple[str, list[tuple[str, int]]]:
        """(agent spec, the (task, seed) pairs it plays) for ``sft.demos``."""
        from guigym.train.demos import eval_dir_jobs, split_jobs

        d = self.cfg.sft.demos
        tasks = d.tasks or list(self.cfg.env.tasks)
        if d.source == "eval_dir":
            return f"replay:{d.path}", eval_dir_jobs(d.path, tasks)
        return d.agent, split_jobs(tasks, d.seeds.start, d.seeds.count)

    def demos(self) -> list[Any]:
        """The demonstrations of this run (collected on first use; a rerun plays only what is missing)."""
        if self._demos is not None:
            return self._demos
        from guigym.agents.oracle.miniwob import instruction_variants
        from guigym.train.demos import collect, with_variants

        cfg, d = self.cfg, self.cfg.sft.demos
        if d.source == "demos_file":  # an earlier SFT run's collection (e.g. the previous pipeline stage)
            return self._read_demos_file()
        agent, jobs = self.demo_jobs()
        kwargs = dict(cfg.env.kwargs)
        kwargs.setdefault("tasks", sorted({t for t, _ in jobs}) or list(cfg.env.tasks))
        t0 = time.time()
        counts = collect(cfg.env.id, kwargs, agent, jobs, self.demo_file, num_envs=d.num_envs or cfg.env.num_envs,
                         max_steps=cfg.env.max_steps, keep_images=cfg.rollout.history_images > 0,
                         call_timeout_s=cfg.env.call_timeout_s)
        wanted = set(jobs)
        demos = [x for x in self.demo_file.read() if (x.task_id, x.seed) in wanted]
        solved = [x for x in demos if x.success]
        self.log(f"demos: {len(solved)}/{len(demos)} episodes solved by {agent} ({counts['played']} played now, "
                 f"{counts['skipped']} already in {self.demo_file.path.name}, {counts['lost']} lost and rerun) "
                 f"[{time.time() - t0:.0f}s]")
        self._solved = solved
        demos = solved
        if d.instruction_variants and d.variants_as == "samples":
            demos = with_variants(solved, instruction_variants)
            self.log(f"demos: {len(demos)} after instruction variants")
        self._demos = demos
        return demos

    def _read_demos_file(self) -> list[Any]:
        from guigym.agents.oracle.miniwob import instruction_variants
        from guigym.train.demos import with_variants

        d = self.cfg.sft.demos
        f = self.demo_file
        if not f.path.is_file():
            raise FileNotFoundError(f"sft.demos.path: {f.path} does not exist (source demos_file reads the demos.jsonl "
                                    f"of an earlier SFT run)")
        tasks = set(d.tasks or self.cfg.env.tasks)
        solved = [x for x in f.read() if x.success and x.task_id in tasks]
        self.log(f"demos: {len(solved)} solved episodes read from {f.path}")
        self._solved = solved
        self._demos = with_variants(solved, instruction_variants) \
            if d.instruction_variants and d.variants_as == "samples" else solved
        return self._demos

    # ---- replies (reasoning SFT) -----------------------------------------------------------------
    def replies(self) -> Optional[dict[tuple[int, int], str]]:
        """(demo index, step index) -> the reply trained on that step: ``sft.reply_template``
        filled with the action and, with an annotator, its reasoning (MobileRL sec. 2.1, reasoning
        SFT; guigym.train.annotator, cached in <run.dir>/annotations.jsonl). None = the bare action."""
        from string import Template

        sft = self.cfg.sft
        if sft.reply_template.strip() == "$action":
            return None
        if self._replies is not None:
            return self._replies
        ann = None
        if sft.annotator is not None:
            from guigym.train.annotator import Annotator

            ann = Annotator.from_config(sft.annotator)  # a missing token fails before demonstrations are played
        demos = self.demos()
        reasoning: dict[tuple[int, int], str] = {}
        if ann is not None and sft.annotator is not None:
            from guigym.train.annotator import AnnotationCache, AnnotationRequest
            from guigym.train.rollout.prompts import compact_a11y

            places, reqs = [], []
            for k, d in enumerate(demos):
                if not d.success:
                    continue
                for j, st in enumerate(d.steps):
                    screen = (st.screen[1], st.screen[0]) if st.screen else None
                    obs_text = compact_a11y(st.obs.get("a11y", ""), screen)
                    reqs.append(AnnotationRequest(f"{d.task_id}/{d.seed} step {j}", ann.user_message(
                        st.obs.get("instruction", d.instruction), obs_text, st.action_text, j)))
                    places.append((k, j))
            t0 = time.time()
            texts = ann.annotate(reqs, AnnotationCache(self.dir / "annotations.jsonl"))
            reasoning = dict(zip(places, texts))
            self.log(f"annotator: {len(texts)} steps annotated ({ann.calls} asked of {sft.annotator.url}, "
                     f"{len(texts) - ann.calls} from annotations.jsonl) [{time.time() - t0:.0f}s]")
        tmpl = Template(sft.reply_template)
        self._replies = {(k, j): tmpl.substitute(action=st.action_text, reasoning=reasoning.get((k, j), ""))
                         for k, d in enumerate(demos) if d.success for j, st in enumerate(d.steps)}
        return self._replies

    def tokenizer_texts(self) -> Optional[list[str]]:
        if not self.cfg.model.tiny.tokenizer_from_demos:
            return None
        from guigym.train.demos import tokenizer_texts
        from guigym.train.rollout.prompts import DEFAULT_TEMPLATE, _load_template

        from guigym.agents.oracle.miniwob import instruction_variants
        from guigym.train.demos import with_variants

        template = _load_template(self.cfg.rollout.template or DEFAULT_TEMPLATE).template
        replies = self.replies()  # (checks the annotator's token before anything is read)
        self.demos()
        demos = with_variants(self._solved, instruction_variants) if self.cfg.sft.demos.instruction_variants \
            else self._solved  # the same text whichever way the variants are trained
        return tokenizer_texts(demos, template) + (list(replies.values()) if replies else [])

    # ---- construction --------------------------------------------------------------------------
    def build(self) -> None:
        super().build()
        samples = None
        if self.rank == 0:
            from guigym.train.demos import render

            replies = self.replies()
            rendered = render(self.demos(), self.make_prompt_builder(), self.run_id, demo_file=self.demo_file,
                              put_image=self.store.put_image,
                              reply=None if replies is None else (lambda k, j, st: replies[(k, j)]))
            trajs = rendered.trajectories
            if not trajs:
                raise ValueError(f"sft.demos: no usable demonstration (dropped: {rendered.dropped or 'none collected'})")
            self.store.add_trajectories(self.run_id, trajs)  # idempotent: the ids are fixed by the run and order
            d = self.cfg.sft.demos
            if d.instruction_variants and d.variants_as == "turns":
                from guigym.agents.oracle.miniwob import instruction_variants
                from guigym.train.demos import packed_samples

                samples, more = packed_samples(self._solved, self.make_prompt_builder(), instruction_variants)
                rendered.dropped.update({f"{k} (packed)": v for k, v in more.items()})
            else:
                samples = self.sample_builder(trajs, {t.traj_id: 1.0 for t in trajs})
            dropped = ", ".join(f"{v} {k}" for k, v in rendered.dropped.items()) or "none"
            self.log(f"sft: {len(trajs)} demonstrations -> {len(samples)} samples, "
                     f"{sum(s.num_loss_tokens for s in samples)} reply tokens (dropped: {dropped})")
        self.samples = _broadcast(samples, self.rank, self.world)

    def start_rollout(self) -> None:
        if self.cfg.eval.enabled:  # envs and an engine only to evaluate
            super().start_rollout()

    @property
    def output_dir(self) -> Path:
        return Path(self.cfg.sft.output_dir) if self.cfg.sft.output_dir else self.dir / "model"

    # ---- one epoch -----------------------------------------------------------------------------
    def iteration(self, it: int) -> dict[str, float]:
        t0 = time.time()
        order = list(range(len(self.samples)))
        random.Random(f"{self.cfg.run.seed}/sft/{it}").shuffle(order)  # the same on every rank and on resume
        if self.rank == 0:
            self.progress.begin("update", None, note=f"epoch {it}, {len(order)} samples")
        metrics = self.learner.nll_update([self.samples[i] for i in order])
        metrics["time/iteration_s"] = time.time() - t0
        self.push_weights(it + 1)
        if self.rank == 0:
            self.store.record_model_version(self.run_id, it + 1, str(self.dir / "policy_latest"),
                                            {k: v for k, v in metrics.items() if isinstance(v, float)})
            self.metrics.log(it, metrics)
            _fault("after_log", it)
            self.log(f"epoch {it}: NLL {metrics.get('loss', 0):.4f} confident {metrics.get('confident_tokens', 0):.3f} "
                     f"({metrics['time/iteration_s']:.1f}s)")
            self.progress.iteration_done(f"NLL {metrics.get('loss', 0):.4f}")
        last = it + 1 == self.cfg.run.iterations
        if (it + 1) % self.cfg.run.checkpoint_every == 0 or last:
            self.checkpoint(it)
        if last and self.rank == 0:
            self.learner.save_pretrained(self.output_dir)
            self.log(f"sft: model written to {self.output_dir} (use it as model.path of a GRPO recipe)")
        return metrics
