"""WebRL as plug-ins (Qi et al. 2024, "WebRL: Training LLM Web Agents via Self-Evolving Online
Curriculum Reinforcement Learning", sec. 2 and 2.2; the ORM is in webrl_orm.py, the
KL-constrained actor loss eq. 6 is ``POLICY_LOSSES["webrl_kl_regression"]`` and the replay
filter ``STEP_FILTERS["perplexity_band"]``).

* :class:`Critic` -- value network V(s_t, I): a causal LM backbone (the policy's checkpoint, as
  WebRL starts the critic from the SFT actor) plus a linear value head on the last token's
  hidden state, sigmoid output, trained with the cross-entropy of eq. 8 on the binary outcome.
* ``ADVANTAGE_ESTIMATORS["webrl_gae"]`` -- per-step advantages from the critic: eq. 9 (WebRL's
  next-step / final-step mix, ``form: webrl``) or GAE (Schulman et al. 2016, ``form: gae``),
  then one critic update on the iteration's steps (eq. 8).
* ``TASK_SOURCES["webrl_curriculum"]`` -- the self-evolving curriculum, sec. 2.2: at each phase
  boundary the tasks that failed in the last phase seed new ones through a generator (a parameter
  mutator for parameterised task families, or an OpenAI-compatible instruction model with an
  in-breadth evolving prompt); the critic scores each candidate's initial state and only those in
  [low, high] (paper: [0.05, 0.75]) are kept, stored with provenance (parent, generator, phase).
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from guigym.core.errors import ConfigError, EnvInfraError
from guigym.train.algorithms.context import NewTask, Plugin
from guigym.train.algorithms.estimators import (
    ADVANTAGE_ESTIMATORS,
    Reward,
    _members,
    episode_return,
)
from guigym.train.algorithms.registry import TASK_SAMPLERS, TASK_SOURCES
from guigym.train.algorithms.webrl_orm import (
    image_token_ids,
    load_causal_lm,
    minibatch_epochs,
    orm_verdicts,
    policy_checkpoint,
)


# ---- advantages: eq. 9 and GAE ----------------------------------------------------------------
def step_rewards(r: Reward, length: int) -> list[float]:
    """Per-step rewards: a float R is ``[0, ..., 0, R]`` (WebRL's binary final-step reward)."""
    if isinstance(r, (int, float)):
        return [0.0] * (length - 1) + [float(r)] if length else []
    vals = [float(x) for x in r]
    if len(vals) != length:
        raise ValueError(f"{len(vals)} per-step rewards for {length} steps")
    return vals


def gae_advantages(rewards: Sequence[float], values: Sequence[float], gamma: float, lam: float) -> list[float]:
    """GAE (Schulman et al. 2016, eq. 16) over one episode that ends after its last step
    (V(s_{T+1}) = 0): ``delta_t = r_t + gamma V_{t+1} - V_t``,
    ``A_t = sum_k (gamma lam)^k delta_{t+k}``."""
    n = len(rewards)
    v = list(values) + [0.0]
    out, acc = [0.0] * n, 0.0
    for t in range(n - 1, -1, -1):
        acc = rewards[t] + gamma * v[t + 1] - v[t] + gamma * lam * acc
        out[t] = acc
    return out


def webrl_advantages(rewards: Sequence[float], values: Sequence[float], gamma: float, lam: float) -> list[float]:
    """WebRL eq. 9: ``A_t = lam (r_t + gamma V(s_{t+1}) - V(s_t)) + (1 - lam) (r_T - V(s_t))``
    with V(s_{T+1}) = 0 (the paper writes gamma = 1; appendix table 4 lists a discount factor 0.9)."""
    n = len(rewards)
    v = list(values) + [0.0]
    r_final = rewards[-1] if n else 0.0
    return [lam * (rewards[t] + gamma * v[t + 1] - v[t]) + (1 - lam) * (r_final - v[t]) for t in range(n)]


FORMS = {"webrl": webrl_advantages, "gae": gae_advantages}


# ---- the critic -------------------------------------------------------------------------------
class Critic:
    """V(s, I) in [0, 1]: ``sigmoid(w . h_last + b)`` with ``h_last`` the backbone's final hidden
    state at the last token of the state's token ids (the policy prompt of the step; image
    placeholder tokens dropped, the newest ``max_tokens`` kept). The head starts at zero (V = 0.5).
    """

    HEAD_FILE = "value_head.pt"

    def __init__(self, model: Any, tokenizer: Any, max_tokens: int = 2048, device: str = "cpu") -> None:
        import torch

        self.model, self.tokenizer, self.device, self.max_tokens = model, tokenizer, device, int(max_tokens)
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.head = torch.nn.Linear(int(cfg.hidden_size), 1).to(device)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)
        self.skip = image_token_ids(tokenizer)
        self.vocab = int(cfg.vocab_size)

    @classmethod
    def from_path(cls, path: str, max_tokens: int = 2048, device: str = "cpu") -> "Critic":
        """Backbone from ``path``; a ``value_head.pt`` there (a saved critic) is loaded too."""
        import torch

        model, tok = load_causal_lm(str(path), device)
        c = cls(model, tok, max_tokens, device)
        head = Path(path) / cls.HEAD_FILE
        if head.is_file():
            c.head.load_state_dict(torch.load(head, map_location=device))
        return c

    def save(self, path: str) -> None:
        import torch

        Path(path).mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        torch.save(self.head.state_dict(), Path(path) / self.HEAD_FILE)

    def load(self, path: str) -> None:
        """Copy the weights of a critic saved by :meth:`save` into this one."""
        import torch

        other, _ = load_causal_lm(str(path), self.device)
        self.model.load_state_dict(other.state_dict())
        self.head.load_state_dict(torch.load(Path(path) / self.HEAD_FILE, map_location=self.device))

    def _clean(self, ids: Sequence[int]) -> list[int]:
        out = [int(i) for i in ids if int(i) not in self.skip]
        bad = [i for i in out if not 0 <= i < self.vocab]
        if bad:
            raise ValueError(f"critic: token id {bad[0]} outside its vocabulary ({self.vocab}); the critic must "
                             "share the policy's tokenizer")
        return out[-self.max_tokens:] or [self.tokenizer.pad_token_id or 0]

    def encode_text(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: Sequence[int]) -> str:
        """Ids -> text with special tokens kept and image placeholders dropped."""
        return self.tokenizer.decode([i for i in ids if i not in self.skip], skip_special_tokens=False)

    def logits(self, batch: Sequence[Sequence[int]]) -> Any:
        """(B,) value logits of a left-padded batch."""
        import torch

        rows = [self._clean(x) for x in batch]
        n = max(len(x) for x in rows)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.tensor([[pad] * (n - len(x)) + x for x in rows], device=self.device)
        att = torch.tensor([[0] * (n - len(x)) + [1] * len(x) for x in rows], device=self.device)
        out = self.model(input_ids=ids, attention_mask=att, use_cache=False, output_hidden_states=True)
        return self.head(out.hidden_states[-1][:, -1, :].float())[:, 0]

    def values(self, batch: Sequence[Sequence[int]], batch_size: int = 8) -> list[float]:
        import torch

        out: list[float] = []
        self.model.eval()
        with torch.no_grad():
            for k in range(0, len(batch), batch_size):
                out.extend(float(v) for v in torch.sigmoid(self.logits(batch[k:k + batch_size])))
        return out

    def bce(self, batch: Sequence[Sequence[int]], targets: Sequence[float], batch_size: int = 8) -> float:
        """Mean eq. 8 loss ``-[r log V + (1 - r) log (1 - V)]`` over ``batch`` (no update)."""
        import torch

        total = 0.0
        self.model.eval()
        with torch.no_grad():
            for k in range(0, len(batch), batch_size):
                z = self.logits(batch[k:k + batch_size])
                y = torch.tensor([float(t) for t in targets[k:k + batch_size]], device=z.device)
                total += float(torch.nn.functional.binary_cross_entropy_with_logits(z, y, reduction="sum"))
        return total / max(len(batch), 1)

    def fit(self, batch: Sequence[Sequence[int]], targets: Sequence[float], *, epochs: int = 1, lr: float = 1e-6,
            batch_size: int = 8, seed: int = 0) -> list[float]:
        """Minimise eq. 8 over (state ids, binary outcome r(s_T, a_T)) pairs with AdamW (backbone
        and head); returns the mean loss of each epoch (before each batch's update)."""
        import torch

        if len(batch) != len(targets):
            raise ValueError(f"critic.fit: {len(batch)} states for {len(targets)} targets")
        params = [p for p in self.model.parameters() if p.requires_grad] + list(self.head.parameters())

        def batch_loss(idx: list[int]) -> Any:
            z = self.logits([batch[i] for i in idx])
            y = torch.tensor([float(targets[i]) for i in idx], device=z.device)
            return torch.nn.functional.binary_cross_entropy_with_logits(z, y)

        self.model.train()
        losses = minibatch_epochs(params, batch_loss, len(batch), epochs=epochs, batch_size=batch_size, lr=lr, seed=seed)
        self.model.eval()
        return losses


_CRITICS: dict[str, Critic] = {}


def shared_critic(key: str, model_path: str, max_tokens: int = 2048, device: str = "cpu") -> Critic:
    """One critic per ``key`` (its directory) in this process, shared by the estimator that trains
    it and the curriculum that queries it."""
    if key not in _CRITICS:
        if not model_path:
            raise ConfigError("webrl critic: no model path (set the plug-in's model_path or model.path)")
        _CRITICS[key] = Critic.from_path(model_path, max_tokens, device)
    return _CRITICS[key]


def _run_dir(ctx: Any) -> Optional[Path]:
    run = getattr(getattr(ctx, "config", None), "run", None)
    return Path(run.dir) if run is not None and getattr(run, "dir", None) else None


def _critic_of(critic_dir: str, model_path: str, max_tokens: int, device: str, ctx: Any) -> tuple[Critic, Path]:
    d = Path(critic_dir) if critic_dir else (_run_dir(ctx) or Path("runs/webrl")) / "webrl_critic"
    path = model_path or policy_checkpoint(ctx)
    return shared_critic(str(d), path, max_tokens, device), d


# ---- advantage estimator ----------------------------------------------------------------------
@ADVANTAGE_ESTIMATORS.register("webrl_gae")
class WebRLGAEEstimator(Plugin):
    """WebRL sec. 2 "Training Reliable Advantage Estimator": per-step advantages from a critic
    V(s_t, I) -- eq. 9 (``form: webrl``, lam = 0.5 as in the paper) or GAE(gamma, lam)
    (``form: gae``) -- then the critic is trained on this iteration's steps with the cross-entropy
    of eq. 8 against the trajectory's binary outcome (shaped reward clipped to [0, 1]).

    ``model_path`` the critic's backbone (default ``model.path``, the actor's checkpoint, as the
    paper); ``critic_dir`` where versions ``v000001, ...`` are saved (default
    ``<run.dir>/webrl_critic``; the checkpoint records the version, resume reloads it);
    ``critic_lr`` (table 4: 1e-6), ``critic_epochs``, ``critic_batch_size``; ``train: false``
    freezes the critic. Advantages are not normalised."""

    def __init__(self, model_path: str = "", critic_dir: str = "", form: str = "webrl", gamma: float = 1.0,
                 lam: float = 0.5, train: bool = True, critic_epochs: int = 1, critic_lr: float = 1e-6,
                 critic_batch_size: int = 8, max_tokens: int = 2048, device: str = "cpu",
                 keep_versions: int = 2) -> None:
        if form not in FORMS:
            raise ConfigError(f"webrl_gae.form must be one of {sorted(FORMS)}, got {form!r}")
        if not 0 <= gamma <= 1 or not 0 <= lam <= 1:
            raise ConfigError(f"webrl_gae: gamma and lam must be in [0, 1], got {gamma}, {lam}")
        if critic_epochs < 0 or critic_batch_size < 1 or not critic_lr > 0 or keep_versions < 1:
            raise ConfigError("webrl_gae: critic_epochs >= 0, critic_batch_size >= 1, critic_lr > 0, keep_versions >= 1")
        self.model_path, self.critic_dir, self.form = model_path, critic_dir, form
        self.gamma, self.lam, self.train = float(gamma), float(lam), bool(train)
        self.epochs, self.lr, self.batch_size = int(critic_epochs), float(critic_lr), int(critic_batch_size)
        self.max_tokens, self.device, self.keep = int(max_tokens), device, int(keep_versions)
        self.version, self.pinned = 0, 0
        self.dir: Optional[Path] = None
        self.last_metrics: dict[str, float] = {}

    def critic(self, ctx: Any = None) -> Critic:
        c, self.dir = _critic_of(self.critic_dir, self.model_path, self.max_tokens, self.device, ctx)
        return c

    def __call__(self, groups: Sequence[Any], rewards: Mapping[str, Reward], *, ctx: Any = None) -> dict[str, list[float]]:
        mem = _members(groups, rewards)
        if not mem:
            return {}
        critic = self.critic(ctx)
        states = [s.prompt_ids for t, _, _ in mem for s in t.steps]
        values = critic.values(states, self.batch_size)
        out, k = {}, 0
        fn = FORMS[self.form]
        targets = []
        for t, _, r in mem:
            v = values[k:k + t.length]
            k += t.length
            out[t.traj_id] = fn(step_rewards(r, t.length), v, self.gamma, self.lam)
            targets += [min(max(episode_return(r), 0.0), 1.0)] * t.length
        if self.train and self.epochs and states:
            losses = critic.fit(states, targets, epochs=self.epochs, lr=self.lr, batch_size=self.batch_size,
                                seed=int(getattr(ctx, "iteration", 0) or 0))
            self.last_metrics = {"critic_loss": losses[-1], "critic_value_mean": sum(values) / len(values)}
            self._save(critic)
        return out

    def _save(self, critic: Critic) -> None:
        if self.dir is None:
            return
        self.version += 1
        critic.save(str(self.dir / f"v{self.version:06d}"))
        keep = {self.pinned} | set(range(self.version - self.keep + 1, self.version + 1))
        for old in self.dir.glob("v*"):
            if old.name[1:].isdigit() and int(old.name[1:]) not in keep:
                shutil.rmtree(old, ignore_errors=True)

    def state_dict(self) -> dict[str, Any]:
        self.pinned = self.version  # called when a checkpoint is written: never delete its critic
        return {"version": self.version, "dir": str(self.dir) if self.dir else ""}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.version = self.pinned = int(state.get("version", 0))
        if self.version and state.get("dir"):
            d = Path(state["dir"])
            key = str(d)
            if key in _CRITICS:
                _CRITICS[key].load(str(d / f"v{self.version:06d}"))
            else:
                _CRITICS[key] = Critic.from_path(str(d / f"v{self.version:06d}"), self.max_tokens, self.device)
            self.dir = d


# ---- curriculum: seeds and generators ---------------------------------------------------------
PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")


@dataclass
class TaskSeed:
    """A task the curriculum can derive new ones from: its ``instruction``, and for parameterised
    families the ``template`` (``{{name}}`` slots, WebArena's intent_template), its ``params``
    (WebArena's instantiation_dict, or ``{"seed": n}`` for MiniWoB-style seeded tasks) and the
    ``space`` of values per parameter. ``verifier_survives``: a new parameter set keeps a valid
    verifier (seeded generators do; WebArena reference answers do not)."""

    task_id: str
    instruction: str = ""
    template: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    space: dict[str, list[Any]] = field(default_factory=dict)
    verifier_survives: bool = False
    root: str = ""


def fill(template: str, params: Mapping[str, Any]) -> str:
    """``template`` with every ``{{name}}`` replaced by ``params[name]`` (KeyError if missing)."""
    return PLACEHOLDER.sub(lambda m: str(params[m.group(1)]), template)


def _space(v: Any, where: str) -> list[Any]:
    if isinstance(v, Mapping) and "range" in v:
        lo, hi = v["range"]
        return list(range(int(lo), int(hi)))
    if isinstance(v, list):
        return list(v)
    raise ConfigError(f"{where}: a parameter space is a list of values or {{range: [lo, hi]}}, got {v!r}")


def load_seeds(path: str, suite: str = "webarena") -> dict[str, TaskSeed]:
    """Task seeds from a JSON list: WebArena configs (``intent``, ``intent_template``,
    ``instantiation_dict``; each template's space is the union of its instances' values) or
    guigym entries ``{task_id, instruction, template, params, space, verifier_survives}``."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"webrl_curriculum.seeds_file {path!r}: {e}") from None
    out: dict[str, TaskSeed] = {}
    spaces: dict[str, dict[str, list[Any]]] = {}
    for i, d in enumerate(data if isinstance(data, list) else [data]):
        if "intent" in d:
            tmpl = str(d.get("intent_template") or "")
            params = dict(d.get("instantiation_dict") or {})
            s = TaskSeed(f"{suite}.{d['task_id']}", str(d["intent"]), tmpl, params)
            sp = spaces.setdefault(tmpl, {})
            for k, v in params.items():
                if v not in sp.setdefault(k, []):
                    sp[k].append(v)
            s.space = sp
        else:
            if "task_id" not in d:
                raise ConfigError(f"webrl_curriculum.seeds_file {path}[{i}]: needs task_id")
            s = TaskSeed(str(d["task_id"]), str(d.get("instruction", "")), str(d.get("template", "")),
                         dict(d.get("params") or {}),
                         {k: _space(v, f"{path}[{i}].space.{k}") for k, v in (d.get("space") or {}).items()},
                         bool(d.get("verifier_survives", False)))
        out[s.task_id] = s
    return out


class ParamMutator:
    """New task = parent with other parameter values (MiniWoB seeds, WebArena instantiation_dict
    style): for each candidate one or more parameters are redrawn from the family's space (a value
    different from the parent's when the space has one); the instruction is the template refilled."""

    name = "mutator"

    def generate(self, parent: TaskSeed, n: int, rng: random.Random) -> list[dict[str, Any]]:
        keys = [k for k, vals in sorted(parent.space.items()) if len(vals) > 1 or parent.params.get(k) not in vals]
        if not keys:
            return []
        out, seen = [], {json.dumps(parent.params, sort_keys=True, default=str)}
        for _ in range(4 * n):
            if len(out) >= n:
                break
            params = dict(parent.params)
            for k in rng.sample(keys, rng.randint(1, len(keys))):
                choices = [v for v in parent.space[k] if v != parent.params.get(k)] or parent.space[k]
                params[k] = choices[rng.randrange(len(choices))]
            key = json.dumps(params, sort_keys=True, default=str)
            if key in seen:
                continue
            seen.add(key)
            instruction = fill(parent.template, params) if parent.template else parent.instruction
            out.append({"instruction": instruction, "params": params})
        return out


#: our in-breadth evolving prompt (after Xu et al. 2023's in-breadth evolving; WebRL appendix C)
EVOLVE_PROMPT = """I want you to act as a task creator for a web agent that operates a website by clicking, typing and scrolling.
Your goal is to draw inspiration from the #Given Task# to create brand-new tasks.
Each new task must:
- belong to the same website and domain as the #Given Task#, but ask for a different or rarer goal (in-breadth: new topic, entity, filter or operation, not just a reworded copy);
- be achievable from the #Start Page# with the site's own content and have one clear, checkable outcome;
- name concrete values (product names, dates, quantities, user names) instead of placeholders;
- be about as hard as the #Given Task# or slightly easier (the agent failed the #Given Task#).
#Given Task#: {instruction}
#Start Page#: {start}
Write {n} new tasks, one per line, numbered "1." to "{n}.", with no other text."""


class OpenAIInstructionGenerator:
    """New instructions from an OpenAI-compatible ``/chat/completions`` endpoint with the
    in-breadth evolving prompt :data:`EVOLVE_PROMPT` (WebRL sec. 2.2 used GPT-4o). The API key is
    read from the environment variable ``api_key_env`` (none sent when unset)."""

    name = "openai"

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", temperature: float = 1.0,
                 timeout_s: float = 60.0, start_chars: int = 1500) -> None:
        if not base_url or not model:
            raise ConfigError("webrl_curriculum: generator openai needs base_url and model")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.api_key_env, self.temperature = model, api_key_env, float(temperature)
        self.timeout_s, self.start_chars = float(timeout_s), int(start_chars)

    def prompt(self, parent: TaskSeed, n: int, start: str = "") -> str:
        return EVOLVE_PROMPT.format(instruction=parent.instruction, start=start[: self.start_chars] or "(not given)",
                                    n=n)

    def generate(self, parent: TaskSeed, n: int, rng: random.Random, start: str = "") -> list[dict[str, Any]]:
        body = {"model": self.model, "temperature": self.temperature, "seed": rng.randrange(2**31),
                "messages": [{"role": "user", "content": self.prompt(parent, n, start)}]}
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env or "", "")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                reply = json.loads(resp.read().decode())
            text = reply["choices"][0]["message"]["content"] or ""
        except (urllib.error.URLError, OSError, KeyError, IndexError, TypeError, json.JSONDecodeError) as e:
            raise EnvInfraError(f"instruction model at {self.url}: {e}") from None
        out = []
        for line in text.splitlines():
            s = re.sub(r"^\s*(?:\d+[.)]|[-*])\s*", "", line).strip()
            if s and s != parent.instruction and s not in [o["instruction"] for o in out]:
                out.append({"instruction": s, "params": {}})
        return out[:n]


# ---- curriculum task source -------------------------------------------------------------------
@TASK_SOURCES.register("webrl_curriculum")
class WebRLCurriculum(Plugin):
    """WebRL sec. 2.2 self-evolving curriculum: every ``phase_iterations`` iterations, the tasks
    with no success in the last phase seed new ones: ``generator: mutator`` redraws the
    parameters of parameterised families (``seeds_file``: WebArena configs or guigym seed
    entries; ``families``: ``{task_id: {template, params, space, verifier_survives}}``, e.g.
    MiniWoB ``{space: {seed: {range: [0, 1000]}}, verifier_survives: true}``), ``generator:
    openai`` asks an OpenAI-compatible model (``base_url``, ``model``, ``api_key_env``) with an
    in-breadth evolving prompt. The critic (shared with ``webrl_gae``: ``critic_dir``,
    ``model_path``) scores each candidate's initial state -- the parent's first prompt with the
    new instruction -- and only scores in [``low``, ``high``] (paper: 0.05, 0.75) are kept, at most
    ``per_parent`` per parent and ``max_new`` per phase (paper: 500). Each new task's spec records
    parent, root, generator, phase, instruction, params, critic score and ``has_verifier``
    (false unless a seeded family's verifier survives: the ORM rewards it, ``webrl_orm``).

    New task ids are ``<root>.p<phase>-<hash>``; the env must be able to resolve them (the spec
    holds what it needs: root task and params/instruction)."""

    def __init__(self, generator: str = "mutator", phase_iterations: int = 1, max_new: int = 500,
                 per_parent: int = 4, low: float = 0.05, high: float = 0.75, use_critic: bool = True,
                 seeds_file: str = "", families: Optional[Mapping[str, Any]] = None, base_url: str = "",
                 model: str = "", api_key_env: str = "OPENAI_API_KEY", temperature: float = 1.0,
                 timeout_s: float = 60.0, critic_dir: str = "", model_path: str = "", max_tokens: int = 2048,
                 device: str = "cpu") -> None:
        if not 0 <= low <= high <= 1:
            raise ConfigError(f"webrl_curriculum needs 0 <= low <= high <= 1, got {low}, {high}")
        if phase_iterations < 1 or max_new < 0 or per_parent < 1:
            raise ConfigError("webrl_curriculum: phase_iterations >= 1, max_new >= 0, per_parent >= 1")
        if generator == "mutator":
            self.generator: Any = ParamMutator()
        elif generator == "openai":
            self.generator = OpenAIInstructionGenerator(base_url, model, api_key_env, temperature, timeout_s)
        else:
            raise ConfigError(f"webrl_curriculum.generator must be 'mutator' or 'openai', got {generator!r}")
        self.phase_iterations, self.max_new, self.per_parent = int(phase_iterations), int(max_new), int(per_parent)
        self.low, self.high, self.use_critic = float(low), float(high), bool(use_critic)
        self.seeds = load_seeds(seeds_file) if seeds_file else {}
        for tid, f in (families or {}).items():
            self.seeds[tid] = TaskSeed(tid, str(f.get("instruction", "")), str(f.get("template", "")),
                                       dict(f.get("params") or {}),
                                       {k: _space(v, f"webrl_curriculum.families.{tid}.space.{k}")
                                        for k, v in (f.get("space") or {}).items()},
                                       bool(f.get("verifier_survives", False)))
        self.critic_opts = (critic_dir, model_path, int(max_tokens), device)
        self.last_phase = 0
        self.last_stats: dict[str, int] = {}
        #: the last call's candidates in generation order: {"task": NewTask, "critic_score": float | None,
        #: "in_band": bool, "kept": bool} (kept = in band and within max_new); not checkpointed
        self.last_candidates: list[dict[str, Any]] = []

    # -- what the last phase did -----------------------------------------------------------
    def failed_tasks(self, ctx: Any, lo: int, hi: int) -> dict[str, Any]:
        """task_id -> one failed on-policy trajectory (or None) of tasks with no success in
        iterations [lo, hi) (a success: the verifier's, or the ORM's P(YES) > 0.5 recorded by
        ``webrl_orm`` for tasks without a verifier)."""
        store, run = getattr(ctx, "store", None), getattr(ctx, "run_id", "")
        if store is None or not run:
            return {k: None for k, o in sorted(ctx.history.items()) if o.attempts and not o.successes}
        seen: dict[str, list[Any]] = {}
        for t in store.get_trajectories(run, source="on_policy"):
            it = t.info.get("iteration")
            if isinstance(it, int) and lo <= it < hi:
                seen.setdefault(t.task_id, []).append(t)
        orm = orm_verdicts(store, run, range(lo, hi))  # tasks without a verifier: the ORM's judgement is their outcome
        return {k: v[0] for k, v in sorted(seen.items())
                if not any(t.success or orm.get(t.traj_id, 0.0) > 0.5 for t in v)}

    def seed_of(self, task_id: str, added: Mapping[str, Mapping[str, Any]], traj: Any) -> TaskSeed:
        if task_id in added:  # a generated task: its spec describes it
            s = added[task_id]
            return TaskSeed(task_id, str(s.get("instruction", "")), str(s.get("template", "")),
                            dict(s.get("params") or {}), dict(s.get("space") or {}),
                            bool(s.get("verifier_survives", False)), str(s.get("root", "")))
        if task_id in self.seeds:
            return self.seeds[task_id]
        instr = str((traj.info.get("instruction") if traj is not None else "") or "")
        return TaskSeed(task_id, instr)

    def initial_state(self, critic: Any, parent: TaskSeed, traj: Any, instruction: str) -> list[int]:
        """Token ids of the candidate's initial state: the parent's first prompt with the parent's
        instruction replaced (or a ``Task:`` line prepended when it is not found)."""
        if traj is None or not traj.steps:
            return critic.encode_text(f"Task: {instruction}\n")
        text = critic.decode(traj.steps[0].prompt_ids)
        if parent.instruction and parent.instruction in text:
            text = text.replace(parent.instruction, instruction)
        else:
            text = f"Task: {instruction}\n{text}"
        return critic.encode_text(text)

    def __call__(self, *, ctx: Any = None) -> list[NewTask]:
        it = int(getattr(ctx, "iteration", 0) or 0)
        if it == 0 or it % self.phase_iterations or self.max_new == 0:
            return []
        phase = it // self.phase_iterations
        failed = self.failed_tasks(ctx, it - self.phase_iterations, it)
        store, run = getattr(ctx, "store", None), getattr(ctx, "run_id", "")
        # tasks added before this iteration only: a resumed run redoing it finds its own earlier
        # output in the store, which must not dedupe (and so drop) the same candidates again
        added = ({r["task_id"]: (r.get("spec") or {}) for r in store.added_tasks(run, max_iteration=it - 1)}
                 if store is not None and run else {})
        known = {str(s.get("instruction", "")) for s in added.values()}
        critic = _critic_of(*self.critic_opts, ctx)[0] if self.use_critic else None
        rng = ctx.rng if getattr(ctx, "rng", None) is not None else random.Random(it)
        cands: list[tuple[TaskSeed, dict[str, Any], Any]] = []
        for tid, traj in failed.items():
            parent = self.seed_of(tid, added, traj)
            if isinstance(self.generator, OpenAIInstructionGenerator):
                if not parent.instruction:
                    continue
                start = critic.decode(traj.steps[0].prompt_ids) if critic is not None and traj is not None and traj.steps else ""
                made = self.generator.generate(parent, self.per_parent, rng, start=start)
            else:
                made = self.generator.generate(parent, self.per_parent, rng)
            for m in made:
                if m["instruction"] and m["instruction"] in known:
                    continue
                known.add(m["instruction"])
                cands.append((parent, m, traj))
        scores: list[Optional[float]] = [None] * len(cands)
        if critic is not None and cands:
            scores = list(critic.values([self.initial_state(critic, p, tr, m["instruction"]) for p, m, tr in cands]))
        out: list[NewTask] = []
        self.last_candidates = []
        for (parent, m, _), v in zip(cands, scores):
            in_band = v is None or self.low <= v <= self.high
            root = parent.root or parent.task_id
            h = hashlib.sha1(json.dumps([parent.task_id, m["instruction"], m["params"]], sort_keys=True,
                                        default=str).encode()).hexdigest()[:10]
            survives = self.generator.name == "mutator" and parent.verifier_survives
            spec = {"instruction": m["instruction"], "template": parent.template, "params": m["params"],
                    "space": parent.space, "root": root, "generator": self.generator.name, "phase": phase,
                    "parent_instruction": parent.instruction, "critic_score": v, "has_verifier": survives,
                    "verifier_survives": survives}
            task = NewTask(task_id=f"{root}.p{phase}-{h}", source="webrl_curriculum", parent=parent.task_id,
                           spec=json.loads(json.dumps(spec, default=str)))
            kept = in_band and len(out) < self.max_new
            # every scored candidate, kept or not (bench/curriculum_band.py measures both sides of the band)
            self.last_candidates.append({"task": task, "critic_score": v, "in_band": in_band, "kept": kept})
            if kept:
                out.append(task)
        self.last_phase = phase
        self.last_stats = {"failed": len(failed), "candidates": len(cands), "kept": len(out)}
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"last_phase": self.last_phase}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.last_phase = int(state.get("last_phase", 0))


# ---- sampling the phase's new tasks -----------------------------------------------------------
@TASK_SAMPLERS.register("webrl_phase")
class WebRLPhaseSampler(Plugin):
    """WebRL sec. 2.2: each phase interacts with the instructions its curriculum just generated.
    Of the ``n`` groups of an iteration, ``round(new_share * n)`` are tasks added by the newest
    phase of ``webrl_curriculum``, the rest from all tasks; before any task was generated all
    ``n`` are from all tasks. Each part is drawn uniformly without replacement while its tasks
    last, then with replacement. Draws use the iteration's ``ctx.rng``, so a resumed run samples
    the same tasks (no state)."""

    def __init__(self, new_share: float = 0.5, seed: int = 0) -> None:
        if not 0 <= new_share <= 1:
            raise ConfigError(f"webrl_phase.new_share must be in [0, 1], got {new_share!r}")
        self.new_share, self.seed = float(new_share), int(seed)

    def newest(self, ctx: Any, task_ids: Sequence[str]) -> list[str]:
        store, run = getattr(ctx, "store", None), getattr(ctx, "run_id", "")
        if store is None or not run:
            return []
        rows = [r for r in store.added_tasks(run) if r["source"] == "webrl_curriculum" and r["task_id"] in task_ids]
        if not rows:
            return []
        last = max(int((r["spec"] or {}).get("phase", 0)) for r in rows)
        return [r["task_id"] for r in rows if int((r["spec"] or {}).get("phase", 0)) == last]

    def __call__(self, task_ids: Sequence[str], n: int, stats: Any = None, *, ctx: Any = None) -> list[str]:
        ids = list(task_ids)
        if not ids:
            raise ConfigError("task sampler: the task list is empty")
        rng = ctx.rng if getattr(ctx, "rng", None) is not None else random.Random(self.seed)
        new = self.newest(ctx, ids)
        k = round(self.new_share * n) if new else 0
        return self._draw(new, k, rng) + self._draw(ids, n - k, rng)

    @staticmethod
    def _draw(ids: list[str], k: int, rng: random.Random) -> list[str]:
        out = rng.sample(ids, min(k, len(ids))) if ids else []
        return out + [ids[rng.randrange(len(ids))] for _ in range(k - len(out))]
