"""Prompts for rollouts, built as token ids (token-in/token-out; never a re-tokenised transcript).

:class:`PromptBuilder` makes one :class:`EpisodePrompts` per rollout; each step asks it for a
:class:`Prompt` (``prompt_ids``, the ``images`` whose pad runs are in them, the constrained-decoding
``candidates`` and an ``env_mask``) and reports the sampled reply back.

Two modes:

* ``stepwise`` -- a fresh prompt per step: one user turn with the template filled with the
  instruction, the current a11y text and the previous actions as text, then the last
  ``history_images`` screenshots (oldest first). DART and UI-TARS-style agents train this way.
* ``multiturn`` -- one growing sequence per episode: the next prompt is the previous prompt ids +
  the previous response ids (exactly as sampled) + the new observation's turn, tokenised on its
  own and appended. ``env_mask`` is 1 for tokens the environment/template produced and 0 for
  tokens the policy generated, so a multi-turn loss can mask env tokens out. With
  ``history_images >= 1`` every turn carries its own screenshot (all stay in the sequence);
  with 0 the turns are text only.

The policy object must offer what :class:`guigym.models.hf_policy.HFPolicy` offers:
``tokenizer`` (with a chat template), ``encode(text, images) -> Encoded``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from string import Template
from typing import Any, Optional, Sequence, Union

import numpy as np

from guigym.models.constrain import candidates_from_a11y, grid_candidates, visible_nodes
from guigym.models.constrain_android import candidates_from_mobilerl

#: where constrained candidates come from: guigym's web a11y XML (element ids) or MobileRL's
#: simplified XML of an Android screen (AndroidLab do(...) operations on node boxes)
CANDIDATE_SOURCES = ("a11y", "mobilerl")

#: node states shown in the compact a11y text
_STATES = ("value", "checked", "selected", "expanded", "focused", "disabled")


def compact_a11y(a11y_xml: str, screen: Optional[tuple[int, int]] = None) -> str:
    """guigym's web a11y XML -> one line per visible node, ``[id] role "name" state=value``
    (document order; no boxes), about a third of the XML's tokens."""
    if not a11y_xml.strip():
        return "(empty)"
    lines = []
    for node in visible_nodes(a11y_xml, screen, roles="any"):
        line = f"[{node['id']}] {node['role']}"
        if node.get("name"):
            line += f' "{node["name"]}"'
        line += "".join(f" {k}={node[k]}" for k in _STATES if k in node)
        lines.append(line)
    return "\n".join(lines) or "(empty)"

#: default template: element actions on the web a11y tree ($instruction, $a11y, $history)
DEFAULT_TEMPLATE = (
    "Task: $instruction\n"
    "Elements on screen:\n$a11y\n"
    "Previous actions:\n$history\n"
    'Reply with one action, e.g. click(element="ID").'
)
#: default body of later turns in multiturn mode ($a11y, $instruction)
DEFAULT_TURN_TEMPLATE = "Elements on screen:\n$a11y"


@dataclass
class Prompt:
    """One step's prompt. ``prompt_ids`` (P,); ``images`` in pad-run order; ``candidates`` the
    allowed replies (None = free text); ``env_mask`` (P,) 1 = env/template token, 0 = a token the
    policy generated in an earlier turn (multiturn only; all 1 in stepwise)."""

    prompt_ids: list[int]
    images: list[np.ndarray]
    candidates: Optional[list[str]]
    env_mask: list[int]
    #: stepwise with guidance: the same prompt without the guidance text (BEPA eq. 3 replays a
    #: plan-conditioned trajectory "under the original instruction without the plan")
    unguided_ids: Optional[list[int]] = None

    @property
    def response_spans(self) -> list[tuple[int, int]]:
        """[start, end) ranges of policy-generated tokens in ``prompt_ids`` (compact ``env_mask``)."""
        spans, start = [], None
        for i, m in enumerate(self.env_mask + [1]):
            if m == 0 and start is None:
                start = i
            elif m == 1 and start is not None:
                spans.append((start, i))
                start = None
        return spans


def env_mask_from_spans(length: int, spans: Sequence[Sequence[int]]) -> list[int]:
    """Inverse of :attr:`Prompt.response_spans`: a (length,) mask with 0 inside the spans."""
    mask = [1] * length
    for a, b in spans:
        mask[a:b] = [0] * (b - a)
    return mask


def _load_template(template: str) -> Template:
    if "$" in template:
        return Template(template)
    from guigym.agents import prompts as agent_prompts

    return agent_prompts.load(template)


class PromptBuilder:
    """Turns (instruction, observation, history) into prompt token ids.

    Args:
        policy: an :class:`HFPolicy` (tokenizer + image processor + chat template).
        template: a :class:`string.Template` text with ``$instruction``, ``$a11y``, ``$history``
            (and ``$width``/``$height``), or the name of a template in :mod:`guigym.agents.prompts`.
        history_images: k, screenshots of the last k steps in a stepwise prompt (0 = none); in
            multiturn mode >= 1 means every turn carries its screenshot.
        constrained: compute candidates from the observation (:func:`candidates_from_a11y`).
        mode: ``"stepwise"`` or ``"multiturn"``.
        actions: element verbs of the candidates (default click only).
        roles: node roles that get candidates (None = interactive roles, ``"any"`` = all visible).
        grid: cell size in pixels for extra coordinate candidates (None = no coordinate grid).
        max_a11y_chars: the a11y text is cut to this length (the env caps nodes, this caps tokens).
        max_history: previous actions listed in a stepwise prompt (the most recent ones).
        a11y_format: ``"compact"`` (:func:`compact_a11y`, visible nodes one per line; needs guigym's
            web a11y XML) or ``"xml"`` (the env's text as is: Android's MobileRL simplified XML).
        candidate_source: ``"a11y"`` (element actions on guigym's web a11y XML) or ``"mobilerl"``
            (:func:`~guigym.models.constrain_android.candidates_from_mobilerl`: AndroidLab
            operations on the boxes of MobileRL's simplified XML; ``actions``/``roles`` unused).
    """

    def __init__(self, policy: Any, template: str = DEFAULT_TEMPLATE, history_images: int = 0,
                 constrained: bool = True, mode: str = "stepwise", actions: Sequence[str] = ("click",),
                 roles: Union[str, Sequence[str], None] = None, grid: Optional[int] = None,
                 turn_template: str = DEFAULT_TURN_TEMPLATE, max_a11y_chars: int = 4000, max_history: int = 10,
                 a11y_format: str = "compact", candidate_source: str = "a11y") -> None:
        if mode not in ("stepwise", "multiturn"):
            raise ValueError(f"mode must be 'stepwise' or 'multiturn', got {mode!r}")
        if a11y_format not in ("compact", "xml"):
            raise ValueError(f"a11y_format must be 'compact' or 'xml', got {a11y_format!r}")
        if candidate_source not in CANDIDATE_SOURCES:
            raise ValueError(f"candidate_source must be one of {CANDIDATE_SOURCES}, got {candidate_source!r}")
        self.a11y_format = a11y_format
        self.candidate_source = candidate_source
        if history_images < 0:
            raise ValueError(f"history_images must be >= 0, got {history_images}")
        self.policy = policy
        self.template = _load_template(template)
        self.turn_template = _load_template(turn_template)
        self.history_images = int(history_images)
        self.constrained = bool(constrained)
        self.mode = mode
        self.actions = tuple(actions)
        self.roles = roles
        self.grid = grid
        self.max_a11y_chars = int(max_a11y_chars)
        self.max_history = int(max_history)
        candidates_from_a11y("<a11y/>", self.actions)  # fail fast on an unknown action verb
        self._frames: dict[int, tuple[str, str]] = {}

    # ---- pieces ------------------------------------------------------------------------------------
    def turn_frame(self, n_images: int) -> tuple[str, str]:
        """Chat-template text around a later user turn's body: (text from just after the previous
        reply's end token up to the body, incl. ``n_images`` image spans; text after the body up to
        the next generation prompt), read off the policy's own chat template."""
        if n_images not in self._frames:
            tok = self.policy.tokenizer
            mark_a, mark_u = "\x00ASSISTANT\x00", "\x00USER\x00"
            content = [{"type": "image"} for _ in range(n_images)] + [{"type": "text", "text": mark_u}]
            text = tok.apply_chat_template(
                [{"role": "user", "content": "u"}, {"role": "assistant", "content": mark_a},
                 {"role": "user", "content": content}], tokenize=False, add_generation_prompt=True)
            after = text.split(mark_a, 1)[1]
            eos = tok.eos_token or ""
            if eos and after.startswith(eos):
                after = after[len(eos):]
            prefix, suffix = after.split(mark_u, 1)
            self._frames[n_images] = (prefix, suffix)
        return self._frames[n_images]

    def a11y_text(self, obs: dict[str, Any]) -> str:
        text = str(obs.get("a11y", "") or "")
        if self.a11y_format == "compact":
            shot = obs.get("screenshot")
            screen = (int(np.asarray(shot).shape[1]), int(np.asarray(shot).shape[0])) if shot is not None else None
            try:
                text = compact_a11y(text, screen)
            except ValueError as exc:  # e.g. Android's simplified XML, which is one line per node, not XML
                raise ValueError(f"rollout.a11y_format 'compact' needs guigym's web a11y XML; this env's a11y is "
                                 f"not ({exc}); use a11y_format 'xml' to show it as is") from None
        return text if len(text) <= self.max_a11y_chars else text[: self.max_a11y_chars] + " ...(cut)"

    def candidates(self, obs: dict[str, Any]) -> Optional[list[str]]:
        """The allowed replies for ``obs`` (None when unconstrained or when nothing qualifies)."""
        if not self.constrained:
            return None
        if self.candidate_source == "mobilerl":
            return candidates_from_mobilerl(str(obs.get("a11y", "") or ""))
        shot = obs.get("screenshot")
        screen = (int(np.asarray(shot).shape[1]), int(np.asarray(shot).shape[0])) if shot is not None else None
        cands = candidates_from_a11y(str(obs.get("a11y", "") or "<a11y/>"), self.actions, screen=screen,
                                     roles=self.roles)
        if self.grid and screen is not None:
            cands += grid_candidates(screen[0], screen[1], self.grid)
        return cands or None

    def episode(self, instruction: str, guidance: str = "") -> "EpisodePrompts":
        """Prompt state for one rollout of a task with this instruction; ``guidance`` (a plan or
        hint from a trainer conditioner) is appended to the instruction in every prompt."""
        return EpisodePrompts(self, instruction, guidance=guidance)


def builder_from_config(policy: Any, rollout: Any, sample_builder: str) -> PromptBuilder:
    """The run's :class:`PromptBuilder` from a recipe's ``rollout`` section (a
    :class:`guigym.train.config.RolloutConfig`) and ``algorithm.sample_builder``; the coupled
    trainer, the decoupled env clusters and SFT all build it here, so they render alike."""
    extra = {"template": rollout.template} if rollout.template else {}
    return PromptBuilder(policy, history_images=rollout.history_images, constrained=rollout.constrained, **extra,
                         mode="multiturn" if sample_builder == "multiturn" else "stepwise",
                         actions=tuple(rollout.candidate_actions), roles=rollout.candidate_roles,
                         grid=rollout.grid_candidates, a11y_format=rollout.a11y_format,
                         candidate_source=rollout.candidate_source)


@dataclass
class EpisodePrompts:
    """Per-rollout prompt state; call :meth:`prompt` with each observation and
    :meth:`add_response` with each sampled reply."""

    builder: PromptBuilder
    instruction: str
    actions: list[str] = field(default_factory=list)
    screens: list[np.ndarray] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)  # multiturn transcript so far
    mask: list[int] = field(default_factory=list)
    images: list[np.ndarray] = field(default_factory=list)  # multiturn: every image in the transcript
    _last_response: bool = False
    guidance: str = ""  # conditioner text appended to the instruction (BEPA plans, UI-Mem hints)

    def prompt(self, obs: dict[str, Any]) -> Prompt:
        b = self.builder
        shot = obs.get("screenshot")
        if shot is not None:
            self.screens.append(np.asarray(shot))
        plain = str(obs.get("instruction") or self.instruction)
        instruction = f"{plain}\n{self.guidance}" if self.guidance else plain
        h, w = (self.screens[-1].shape[:2] if self.screens else ("", ""))
        values = {"instruction": instruction, "a11y": b.a11y_text(obs), "width": w, "height": h,
                  "history": "\n".join(self.actions[-b.max_history:]) if b.max_history else ""}
        values["history"] = values["history"] or "(none)"
        cands = b.candidates(obs)
        if b.mode == "stepwise" or not self.ids:
            k = b.history_images if b.mode == "stepwise" else min(1, b.history_images)
            images = self.screens[-k:] if k and self.screens else []

            def encode(vals: dict[str, Any]) -> list[int]:
                text = b.template.safe_substitute({n: str(v) for n, v in vals.items()})
                content = [{"type": "text", "text": text}] + [{"type": "image"} for _ in images]
                return list(b.policy.encode(b.policy.tokenizer.apply_chat_template(
                    [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True),
                    images).prompt_ids)

            ids = encode(values)
            unguided = encode({**values, "instruction": plain}) if self.guidance and b.mode == "stepwise" else None
            if b.mode == "multiturn":
                self.ids, self.mask, self.images = list(ids), [1] * len(ids), list(images)
            self._last_response = False
            return Prompt(list(ids), list(images), cands, [1] * len(ids), unguided_ids=unguided)
        if not self._last_response:
            raise RuntimeError("multiturn: add_response() must be called before the next prompt()")
        images = self.screens[-1:] if b.history_images and self.screens else []
        prefix, suffix = b.turn_frame(len(images))
        body = b.turn_template.safe_substitute({n: str(v) for n, v in values.items()})
        seg = b.policy.encode(prefix + body + suffix, images)  # only the new turn is tokenised
        self.ids += list(seg.prompt_ids)
        self.mask += [1] * len(seg.prompt_ids)
        self.images += list(images)
        self._last_response = False
        return Prompt(list(self.ids), list(self.images), cands, list(self.mask))

    def add_response(self, response_ids: Sequence[int], action_text: str, end_id: Optional[int] = None) -> None:
        """Record the sampled reply: its text joins the stepwise history; in multiturn its ids are
        appended as generated (mask 0), plus the end token (mask 1) if the reply was cut short."""
        self.actions.append(action_text.strip().replace("\n", " ")[:200])
        if self.builder.mode == "multiturn":
            ids = [int(t) for t in response_ids]
            self.ids += ids
            self.mask += [0] * len(ids)
            eos = end_id if end_id is not None else self.builder.policy.tokenizer.eos_token_id
            if not ids or ids[-1] != eos:
                self.ids.append(int(eos))
                self.mask.append(1)
        self._last_response = True
