"""WebRL's outcome-supervised reward model (Qi et al. 2024, "WebRL: Training LLM Web Agents via
Self-Evolving Online Curriculum Reinforcement Learning", sec. 2 "ORM Training" and appendix A).

The ORM is a causal LM asked whether a trajectory completed its task; its input is the
instruction, the action history and the text of the final state (a11y tree or HTML, truncated to
a token budget, as WebRL keeps only the final page). The judgement is ``success iff
P(YES) > P(NO)`` from the next-token logits after the prompt (the first token of each label).

* :class:`OutcomeRewardModel` -- the judge over any HF ``from_pretrained`` directory (text causal
  LMs, or image-text-to-text checkpoints such as Qwen2.5-VL used on text only).
* :func:`train_orm` -- SFT on the label token from verifier-labelled trajectories (a DataStore run
  or a list of trajectories / :class:`OrmExample`).
* :func:`evaluate_orm` -- accuracy, precision and recall against held-out verifier labels.
* ``REWARD_SHAPERS["webrl_orm"]`` -- rewards the trajectories of tasks without a verifier by the
  ORM and marks ``info["reward_source"] = "orm"``.

The prompt is ours (WebRL's Figure 18 prompt is not reproduced).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence, Union

from guigym.core.errors import ConfigError
from guigym.train.algorithms.context import Plugin
from guigym.train.algorithms.registry import REWARD_SHAPERS
from guigym.train.data.types import Group, Trajectory

YES, NO = "YES", "NO"
ORM_PROMPT = (
    "You judge whether a web agent completed a task. Read the task, the actions the agent took "
    "and the page it stopped on.\n"
    "Task: {instruction}\n"
    "Actions:\n{actions}\n"
    "Final page:\n{state}\n"
    "Did the agent complete the task? Answer YES or NO."
)


# ---- model loading ----------------------------------------------------------------------------
def load_causal_lm(path: str, device: str = "cpu", dtype: str = "float32") -> tuple[Any, Any]:
    """(model, tokenizer) of the ``from_pretrained`` directory or hub id ``path``: a causal LM, or
    an image-text-to-text model (e.g. Qwen2.5-VL) used on text. ConfigError names ``path`` when
    neither loads."""
    import torch
    from transformers import (
        AutoModelForCausalLM,
        AutoModelForImageTextToText,
        AutoTokenizer,
    )

    try:
        tok = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"model path {path!r}: cannot load a tokenizer: {e}") from None
    errors = []
    for cls in (AutoModelForCausalLM, AutoModelForImageTextToText):
        try:
            model = cls.from_pretrained(path, dtype=getattr(torch, dtype))
            return model.to(device).eval(), tok
        except (OSError, ValueError) as e:
            errors.append(f"{cls.__name__}: {str(e)[:200]}")
    raise ConfigError(f"model path {path!r}: not a causal or image-text-to-text LM ({'; '.join(errors)})")


def image_token_ids(tok: Any) -> set[int]:
    """Ids of image/video placeholder tokens: text-only judges drop them from policy prompts."""
    out = set()
    for t in ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>", "<image>"):
        i = tok.convert_tokens_to_ids(t)
        if isinstance(i, int) and i >= 0 and i != tok.unk_token_id:
            out.add(i)
    return out


def policy_checkpoint(ctx: Any) -> str:
    """The run's initial policy directory: ``model.path``, else ``<run.dir>/init_model`` (the tiny
    model ``Trainer.model_path`` builds); "" without a config."""
    cfg = getattr(ctx, "config", None)
    path = str(getattr(getattr(cfg, "model", None), "path", "") or "")
    if not path and getattr(getattr(cfg, "run", None), "dir", None):
        path = str(Path(cfg.run.dir) / "init_model")
    return path


# ---- examples ---------------------------------------------------------------------------------
@dataclass
class OrmExample:
    """One judged trajectory: ``instruction``, ``actions`` (action strings, oldest first),
    ``final_state`` (a11y/HTML text of the last page) and the verifier's ``label`` (None = unknown)."""

    instruction: str
    actions: list[str] = field(default_factory=list)
    final_state: str = ""
    label: Optional[bool] = None


def example_from_trajectory(t: Trajectory, decode: Any = None) -> OrmExample:
    """The ORM input of a stored trajectory. ``t.info`` may carry ``instruction`` and
    ``final_state`` (written by whoever collected it); otherwise the last step's prompt, decoded
    with ``decode`` (token ids -> text; it holds the instruction and the last observation the
    policy saw), stands in as the final state. Label: ``t.success``."""
    info = t.info or {}
    actions = [s.action or s.action_text for s in t.steps]
    state = str(info.get("final_state") or "")
    if not state and t.steps and decode is not None:
        state = decode(t.steps[-1].prompt_ids)
    return OrmExample(instruction=str(info.get("instruction") or ""), actions=[str(a) for a in actions],
                      final_state=state, label=bool(t.success))


# ---- the judge --------------------------------------------------------------------------------
class OutcomeRewardModel:
    """YES/NO judge (WebRL sec. 2, ORM Training) over a causal LM.

    Args: ``model`` / ``tokenizer`` (see :func:`load_causal_lm`, or :meth:`from_path`),
    ``state_budget`` tokens of final-state text kept (its head), ``max_actions`` newest actions
    kept, ``device``. The label tokens are the first tokens of "YES" and "NO" (they must differ).
    """

    def __init__(self, model: Any, tokenizer: Any, state_budget: int = 1024, max_actions: int = 20,
                 device: str = "cpu") -> None:
        if state_budget < 1 or max_actions < 0:
            raise ConfigError(f"webrl_orm: state_budget must be >= 1 and max_actions >= 0, got "
                              f"{state_budget}, {max_actions}")
        self.model, self.tokenizer, self.device = model, tokenizer, device
        self.state_budget, self.max_actions = int(state_budget), int(max_actions)
        self.yes_id = tokenizer.encode(YES, add_special_tokens=False)[0]
        self.no_id = tokenizer.encode(NO, add_special_tokens=False)[0]
        if self.yes_id == self.no_id:
            raise ConfigError("webrl_orm: the tokenizer gives YES and NO the same first token")
        self.skip = image_token_ids(tokenizer)

    @classmethod
    def from_path(cls, path: str, device: str = "cpu", dtype: str = "float32", **kw: Any) -> "OutcomeRewardModel":
        model, tok = load_causal_lm(path, device, dtype)
        return cls(model, tok, device=device, **kw)

    def save(self, path: str) -> None:
        """Write the judge's weights and tokenizer as a ``from_pretrained`` directory."""
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)

    def decode(self, ids: Sequence[int]) -> str:
        """Policy prompt ids (same tokenizer) -> text without image placeholders."""
        return self.tokenizer.decode([i for i in ids if i not in self.skip], skip_special_tokens=True)

    def prompt_ids(self, ex: OrmExample) -> list[int]:
        """Token ids of the judge prompt for ``ex``; the next token is the verdict."""
        tok = self.tokenizer
        state_ids = tok.encode(ex.final_state, add_special_tokens=False)[: self.state_budget]
        state = tok.decode(state_ids)
        acts = ex.actions[-self.max_actions:] if self.max_actions else []
        actions = "\n".join(f"{i + 1}. {a}" for i, a in enumerate(acts)) or "(none)"
        text = ORM_PROMPT.format(instruction=ex.instruction, actions=actions, state=state)
        if getattr(tok, "chat_template", None):
            return list(tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                tokenize=True, return_dict=False))
        return tok.encode(text + "\nAnswer:", add_special_tokens=True)

    def _label_logits(self, batch: Sequence[Sequence[int]]) -> Any:
        """(B, 2) logits of (YES, NO) after each prompt; left-padded batch."""
        import torch

        n = max(len(x) for x in batch)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.tensor([[pad] * (n - len(x)) + list(x) for x in batch], device=self.device)
        att = torch.tensor([[0] * (n - len(x)) + [1] * len(x) for x in batch], device=self.device)
        logits = self.model(input_ids=ids, attention_mask=att, use_cache=False).logits[:, -1, :]
        return logits, logits[:, [self.yes_id, self.no_id]]

    def p_yes(self, examples: Sequence[OrmExample], batch_size: int = 8) -> list[float]:
        """P(YES) / (P(YES) + P(NO)) per example; success iff > 0.5 (i.e. P(YES) > P(NO))."""
        import torch

        out: list[float] = []
        self.model.eval()
        with torch.no_grad():
            for k in range(0, len(examples), batch_size):
                _, two = self._label_logits([self.prompt_ids(e) for e in examples[k:k + batch_size]])
                out.extend(float(p) for p in torch.softmax(two.float(), dim=-1)[:, 0])
        return out

    def judge(self, examples: Sequence[OrmExample]) -> list[bool]:
        """success iff P(YES) > P(NO)."""
        return [p > 0.5 for p in self.p_yes(examples)]


def _examples(data: Any, orm: OutcomeRewardModel, run_id: str = "") -> list[OrmExample]:
    """OrmExamples from a list of OrmExample / Trajectory, or a DataStore (with ``run_id``)."""
    if hasattr(data, "get_trajectories"):
        if not run_id:
            raise ValueError("a DataStore needs run_id")
        data = data.get_trajectories(run_id)
    out = []
    for x in data:
        ex = x if isinstance(x, OrmExample) else example_from_trajectory(x, orm.decode)
        if ex.label is None:
            raise ValueError("ORM training/evaluation needs labelled examples (label None found)")
        out.append(ex)
    return out


def minibatch_epochs(params: list[Any], batch_loss: Callable[[list[int]], Any], n: int, *, epochs: int,
                     batch_size: int, lr: float, seed: int) -> list[float]:
    """AdamW over ``epochs`` seeded shuffles of ``n`` examples in minibatches; ``batch_loss(idx)``
    returns the mean loss (a scalar tensor) of the examples ``idx``. Returns each epoch's mean
    loss (each batch's before its update). Shared by the ORM's SFT and the critic's eq. 8 fit."""
    import torch

    opt = torch.optim.AdamW(params, lr=lr)
    rng = random.Random(seed)
    losses = []
    for _ in range(epochs):
        order = list(range(n))
        rng.shuffle(order)
        total = 0.0
        for k in range(0, n, batch_size):
            idx = order[k:k + batch_size]
            loss = batch_loss(idx)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        losses.append(total / max(n, 1))
    return losses


def train_orm(orm: OutcomeRewardModel, data: Union[Iterable[Any], Any], *, run_id: str = "", epochs: int = 1,
              lr: float = 5e-6, batch_size: int = 8, seed: int = 0, balance: bool = False) -> dict[str, Any]:
    """SFT of the judge on the label token: cross-entropy over the vocabulary at the position after
    the prompt, target the first token of YES (verifier success) or NO. WebRL appendix A table 5
    uses lr 5e-6, cosine schedule, batch 128; here a constant AdamW lr. ``balance`` weights the
    classes equally. Returns ``{"losses": [per-epoch mean], "n": examples}``."""
    import torch

    exs = _examples(data, orm, run_id)
    if not exs:
        raise ValueError("train_orm: no labelled examples")
    prompts = [orm.prompt_ids(e) for e in exs]
    targets = [orm.yes_id if e.label else orm.no_id for e in exs]
    pos = sum(bool(e.label) for e in exs)
    w = {orm.yes_id: len(exs) / (2 * max(pos, 1)), orm.no_id: len(exs) / (2 * max(len(exs) - pos, 1))}
    def batch_loss(idx: list[int]) -> Any:
        logits, _ = orm._label_logits([prompts[i] for i in idx])
        tgt = torch.tensor([targets[i] for i in idx], device=orm.device)
        ce = torch.nn.functional.cross_entropy(logits.float(), tgt, reduction="none")
        if balance:
            ce = ce * torch.tensor([w[targets[i]] for i in idx], device=orm.device)
        return ce.mean()

    params = [p for p in orm.model.parameters() if p.requires_grad]
    orm.model.train()
    losses = minibatch_epochs(params, batch_loss, len(exs), epochs=epochs, batch_size=batch_size, lr=lr, seed=seed)
    orm.model.eval()
    return {"losses": losses, "n": len(exs)}


def evaluate_orm(orm: OutcomeRewardModel, data: Union[Iterable[Any], Any], *, run_id: str = "") -> dict[str, float]:
    """Judge vs held-out verifier labels: ``accuracy``, ``precision``, ``recall`` (of success;
    precision is 0 when the judge never says YES), ``n`` and the confusion counts."""
    exs = _examples(data, orm, run_id)
    pred = orm.judge(exs)
    tp = sum(p and e.label for p, e in zip(pred, exs))
    fp = sum(p and not e.label for p, e in zip(pred, exs))
    fn = sum((not p) and e.label for p, e in zip(pred, exs))
    tn = len(exs) - tp - fp - fn
    n = max(len(exs), 1)
    return {"accuracy": (tp + tn) / n, "precision": tp / (tp + fp) if tp + fp else 0.0,
            "recall": tp / (tp + fn) if tp + fn else 0.0, "n": float(len(exs)),
            "tp": float(tp), "fp": float(fp), "fn": float(fn), "tn": float(tn)}


# ---- reward shaper ----------------------------------------------------------------------------
_SHARED: dict[tuple[str, str], OutcomeRewardModel] = {}


def shared_orm(path: str, device: str = "cpu", **kw: Any) -> OutcomeRewardModel:
    """One loaded judge per (path, device) in this process."""
    key = (str(path), device)
    if key not in _SHARED:
        _SHARED[key] = OutcomeRewardModel.from_path(str(path), device=device, **kw)
    return _SHARED[key]


def has_verifier(t: Trajectory, unverified_tasks: set[str]) -> bool:
    """Whether a verifier scored ``t``: not when its task is known to have none (added by a task
    source with ``spec.has_verifier: false``, or listed in the shaper's ``tasks``), nor when its
    last step carries no verifier record."""
    if t.task_id in unverified_tasks:
        return False
    if not t.steps:
        return True
    info = t.steps[-1].info or {}
    return "verifier" not in info or info.get("verifier") is not None


@REWARD_SHAPERS.register("webrl_orm")
class ORMRewardShaper(Plugin):
    """WebRL sec. 2 (ORM Training; sec. 2.2: generated tasks are rewarded by the ORM): trajectory
    reward = 1 if the ORM's P(YES) > P(NO) else 0, for trajectories of tasks without a verifier
    (``apply_to: unverified``: tasks listed in ``tasks``, tasks a task source added with
    ``spec.has_verifier: false``, or a last step recording ``verifier: null``) or for all
    (``apply_to: all``); the trajectory's ``info`` gets ``reward_source: orm`` and ``orm_p_yes``.
    Others keep their reward (``reward_source: verifier``). ``model_path``: the trained ORM
    (:func:`train_orm`); ``policy`` judges with the run's initial policy checkpoint (``model.path``,
    or the tiny model the run built: only to exercise the pipeline on CPU). ``state_budget``
    tokens of final-state text: the trajectory's ``info["final_state"]`` (the rollout scheduler
    stores the last observation's a11y/HTML text there), else the last step's prompt."""

    def __init__(self, model_path: str = "", apply_to: str = "unverified", tasks: Sequence[str] = (),
                 state_budget: int = 1024, max_actions: int = 20, device: str = "cpu") -> None:
        if not model_path:
            raise ConfigError("webrl_orm.model_path is required (a from_pretrained ORM directory)")
        if apply_to not in ("unverified", "all"):
            raise ConfigError(f"webrl_orm.apply_to must be 'unverified' or 'all', got {apply_to!r}")
        self.model_path, self.apply_to, self.tasks = model_path, apply_to, set(tasks)
        self.kw = {"state_budget": int(state_budget), "max_actions": int(max_actions)}
        self.device = device
        self.orm: Optional[OutcomeRewardModel] = None

    def judge_model(self, ctx: Any = None) -> OutcomeRewardModel:
        if self.orm is None:
            path = self.model_path
            if path == "policy":
                path = policy_checkpoint(ctx)
                if not path:
                    raise ConfigError("webrl_orm.model_path 'policy' needs the run's config (model.path or run.dir)")
            self.orm = shared_orm(path, self.device, **self.kw)
        return self.orm

    def _unverified(self, ctx: Any) -> set[str]:
        out = set(self.tasks)
        store = getattr(ctx, "store", None)
        if store is not None and getattr(ctx, "run_id", ""):
            out |= {r["task_id"] for r in store.added_tasks(ctx.run_id)
                    if (r.get("spec") or {}).get("has_verifier") is False}
        return out

    def __call__(self, group: Group, rewards: Optional[Sequence[Any]] = None, *, ctx: Any = None) -> list[Any]:
        base = list(rewards) if rewards is not None else [float(t.reward) for t in group.trajectories]
        unverified = self._unverified(ctx) if self.apply_to == "unverified" else set()
        todo = [i for i, t in enumerate(group.trajectories)
                if self.apply_to == "all" or not has_verifier(t, unverified)]
        for t in group.trajectories:
            t.info.setdefault("reward_source", "verifier")
        if not todo:
            return base
        orm = self.judge_model(ctx)
        ps = orm.p_yes([example_from_trajectory(group.trajectories[i], orm.decode) for i in todo])
        for i, p in zip(todo, ps):
            t = group.trajectories[i]
            t.info["reward_source"], t.info["orm_p_yes"] = "orm", round(p, 6)
            base[i] = 1.0 if p > 0.5 else 0.0
        record_verdicts(ctx, {group.trajectories[i].traj_id: round(p, 6) for i, p in zip(todo, ps)})
        return base


def _verdicts_key(iteration: int) -> str:
    return f"webrl_orm/verdicts/{int(iteration)}"


def record_verdicts(ctx: Any, p_yes: dict[str, float]) -> None:
    """Keep the ORM's P(YES) per trajectory in the run's DataStore state, one dict per iteration
    (the trajectories were stored before shaping): the curriculum counts an ORM-judged success as
    a success. A rerun of the same iteration after a crash writes the same values."""
    store, run = getattr(ctx, "store", None), getattr(ctx, "run_id", "")
    if store is None or not run or not p_yes:
        return
    key = _verdicts_key(getattr(ctx, "iteration", 0) or 0)
    store.set_state(run, key, {**(store.get_state(run, key) or {}), **p_yes})


def orm_verdicts(store: Any, run_id: str, iterations: Iterable[int]) -> dict[str, float]:
    """traj_id -> the ORM's P(YES) recorded by :func:`record_verdicts` in ``iterations``."""
    out: dict[str, float] = {}
    if store is not None and run_id:
        for it in iterations:
            out.update(store.get_state(run_id, _verdicts_key(it)) or {})
    return out

