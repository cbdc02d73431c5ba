"""UI-Mem's hierarchical experience memory (Xiao et al. 2026, "UI-Mem: Self-Evolving Experience
Memory for Online RL in Mobile GUI Agents", sec. 3.2, 3.4 and appendices E-G).

Three kinds of :class:`MemoryEntry`, all parameterised templates with ``{{slot}}`` placeholders:

* ``workflow`` (W, task level): ``key`` = the task template (``"Create a new contact for {{name}}.
  Their number is {{number}}."``), ``steps`` = the ordered subtask labels;
* ``skill`` (Sigma, subtask level): ``key`` = a subtask label (``'type("{{name}}")'``), ``content``
  = the abstracted action sequence that achieved it;
* ``failure`` (F): ``key`` = the subtask label it is about, ``content`` = the diagnosis.

Plans and skills are ranked by UCB, eq. 1 (:func:`ucb_scores`), failure patterns by recency,
``1 / (1 + lambda dt)`` (appendix E, :func:`recency`). Entries are de-duplicated by a bag-of-words
cosine (:func:`similarity`) or, as the paper, sentence embeddings (``ExperienceMemory.sim``,
uimem_embed.py: ``retriever: minilm``) and created with N_succ = 1,
N_used = 0 (sec. 3.4). :class:`ExperienceMemory` also holds the per-task EMA of success (appendix G,
algorithm 2, phase 1) that drives the dropout curriculum. It is JSON: ``to_dict`` / ``from_dict``
for checkpoints, :meth:`ExperienceMemory.save` writes a file atomically (temp file + rename).

Abstraction without an LLM (:class:`RuleExtractor`): the trajectory's action strings are split
into subtasks at "commit" actions (open an app, type, select, press, answer...), consecutive
repeats collapsed; every concrete value bound to a slot (the task's parameters when known, e.g.
AndroidWorld's, else literals of the instruction that also occur in the actions) becomes
``{{slot}}``. :class:`OpenAIExtractor` is the pluggable LLM route (OpenAI-compatible endpoint, the
paper's figures 11-13 prompts paraphrased).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Protocol, Sequence

from guigym.core.errors import ConfigError

KINDS = ("workflow", "skill", "failure")
SLOT = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
#: actions that end a subtask (the rest -- taps, scrolls, waits -- lead up to one)
COMMIT = frozenset({"open_app", "launch", "type", "fill", "input_text", "select", "press", "key", "hotkey",
                    "navigate", "goto", "answer", "send", "submit", "keyboard_enter", "enter"})
FINISH = frozenset({"done", "finish", "answer", "status", "terminate"})


# ---- templates --------------------------------------------------------------------------------
def slots(template: str) -> list[str]:
    """Slot names of ``template`` in order of first appearance."""
    return list(dict.fromkeys(SLOT.findall(template)))


def abstract(text: str, bindings: Mapping[str, Any]) -> str:
    """``text`` with every occurrence of a bound value replaced by ``{{name}}`` in one pass
    (longest values first, case-insensitive; values shorter than 2 characters are left alone as
    too ambiguous)."""
    by_value = {}
    for k, v in bindings.items():
        if len(str(v).strip()) >= 2:
            by_value.setdefault(str(v).lower(), k)
    if not by_value:
        return text
    pattern = "|".join(re.escape(v) for v in sorted(by_value, key=len, reverse=True))
    return re.sub(pattern, lambda m: "{{" + by_value[m.group(0).lower()] + "}}", text, flags=re.IGNORECASE)


def instantiate(template: str, bindings: Mapping[str, Any]) -> str:
    """Fill the bound slots of ``template``; unbound ones stay ``{{name}}``."""
    return SLOT.sub(lambda m: str(bindings[m.group(1)]) if m.group(1) in bindings else m.group(0), template)


def match(template: str, instruction: str) -> Optional[dict[str, str]]:
    """Variable binding: the slot values under which ``template`` reads as ``instruction``
    (whitespace-insensitive, case-insensitive), or None when it does not match. A slot used twice
    must bind the same value."""
    def lit(seg: str) -> str:
        return r"\s+".join(re.escape(w) for w in re.split(r"\s+", seg))

    parts, pos, names = [], 0, []
    for m in SLOT.finditer(template):
        parts.append(lit(template[pos:m.start()]))
        name = m.group(1)
        parts.append(f"(?P={name})" if name in names else f"(?P<{name}>.+?)")
        names.append(name)
        pos = m.end()
    parts.append(lit(template[pos:]))
    got = re.fullmatch("".join(parts), instruction.strip(), flags=re.IGNORECASE | re.DOTALL)
    return None if got is None else {k: v.strip() for k, v in got.groupdict().items()}


def _words(text: str) -> Counter:
    return Counter(w for w in re.findall(r"[a-z0-9_]+", SLOT.sub(r" slot_\1 ", text).lower()))


def similarity(a: str, b: str) -> float:
    """Cosine of the two texts' bag-of-words counts (slots count as the word ``slot_<name>``), in [0, 1]."""
    x, y = _words(a), _words(b)
    dot = sum(v * y[w] for w, v in x.items())
    nx, ny = math.sqrt(sum(v * v for v in x.values())), math.sqrt(sum(v * v for v in y.values()))
    return dot / (nx * ny) if nx and ny else float(a.strip() == b.strip())


# ---- eq. 1 and recency ------------------------------------------------------------------------
def ucb_scores(n_succ: Sequence[float], n_used: Sequence[float], lambda_ucb: float) -> list[float]:
    """UI-Mem eq. 1 over the candidate plans P of one task template (or skills of one subtask):
    ``S(p) = N_succ(p) / sum_P N_succ + lambda_ucb * sqrt(ln(sum_P N_used) / (N_used(p) + 1))``.
    0/0 in the first term is 0; ln of a total below 1 is taken as 0 (no plan used yet: no bonus)."""
    total_s, total_u = float(sum(n_succ)), float(sum(n_used))
    log_u = math.log(total_u) if total_u >= 1 else 0.0
    return [(s / total_s if total_s else 0.0) + lambda_ucb * math.sqrt(log_u / (u + 1.0))
            for s, u in zip(n_succ, n_used)]


def recency(updated: int, now: int, decay: float) -> float:
    """Appendix E's failure-pattern rank ``R(t) = 1 / (1 + lambda * dt)``, dt = iterations since
    the pattern was last updated."""
    return 1.0 / (1.0 + decay * max(0, now - updated))


# ---- entries and the memory -------------------------------------------------------------------
@dataclass
class MemoryEntry:
    """One template. ``n_succ`` / ``n_used``: eq. 1's counts; ``updated``: iteration of the last
    merge (recency of failure patterns); ``origin``: the task id it was first abstracted from."""

    entry_id: str
    kind: str
    key: str
    content: str
    steps: list[str] = field(default_factory=list)
    n_succ: int = 1
    n_used: int = 0
    created: int = 0
    updated: int = 0
    origin: str = ""

    @staticmethod
    def make_id(kind: str, key: str, content: str) -> str:
        return hashlib.sha1(f"{kind}\x00{key}\x00{content}".encode("utf-8")).hexdigest()[:10]


@dataclass
class Retrieved:
    """What memory offers one rollout of a task: the workflow W_q (instantiated steps), per step
    the best skill (Sigma_q) and failure patterns (F_q), the bindings used, and the entry ids."""

    template: str = ""
    bindings: dict[str, str] = field(default_factory=dict)
    workflow: Optional[MemoryEntry] = None
    skills: dict[int, MemoryEntry] = field(default_factory=dict)
    failures: list[MemoryEntry] = field(default_factory=list)

    def ids(self, level: int) -> list[str]:
        """Entry ids a rollout at guidance ``level`` (2 strong, 1 weak) was shown."""
        out = [self.workflow.entry_id] if self.workflow else []
        if level >= 2:
            out += [e.entry_id for e in self.skills.values()] + [e.entry_id for e in self.failures]
        return out

    def text(self, level: int) -> str:
        """Guidance text: weak (level 1) = the workflow (q, W_q); strong (level 2) = workflow with
        a tip (skill) and warnings (failure patterns) per subtask (q, W_q, Sigma_q, F_q). "" when
        memory has nothing for this level."""
        b = self.bindings
        lines: list[str] = []
        placed: set[str] = set()
        if self.workflow is not None:
            for i, label in enumerate(self.workflow.steps):
                lines.append(f"{i + 1}. {instantiate(label, b)}")
                if level >= 2 and i in self.skills and self.skills[i].content != label:
                    lines.append(f"   Tip: {instantiate(self.skills[i].content, b)}")
                if level >= 2:  # a failure pattern goes with the subtask it is about (fig. 3)
                    for e in self.failures:
                        if e.key == label and e.entry_id not in placed:
                            lines.append(f"   Avoid: {instantiate(e.content, b)}")
                            placed.add(e.entry_id)
        if level >= 2:
            lines += [f"Avoid: {instantiate(e.content, b)}" for e in self.failures if e.entry_id not in placed]
        if not lines or (level < 2 and self.workflow is None):
            return ""
        return ("Plan from experience:\n" if self.workflow is not None else "Experience:\n") + "\n".join(lines)


class ExperienceMemory:
    """W, Sigma, F as :class:`MemoryEntry` s plus per-task state: ``templates`` (task id -> task
    template), ``ema`` (task id -> EMA of success, appendix G), ``version`` (bumped by every
    update), ``absorbed`` (last iteration whose trajectories were absorbed; a re-run is skipped)."""

    def __init__(self, path: str = "") -> None:
        self.path = str(path)
        self.entries: dict[str, MemoryEntry] = {}
        self.templates: dict[str, str] = {}
        self.ema: dict[str, float] = {}
        self.version = 0
        self.absorbed = -1
        #: similarity backend for template matching and de-duplication (uimem_embed: ``bow`` when
        #: None, or ``minilm`` sentence embeddings); not part of the saved state
        self.sim: Any = None

    def _sim(self, a: str, b: str) -> float:
        return similarity(a, b) if self.sim is None else float(self.sim(a, b))

    def _scores(self, query: str, texts: Sequence[str]) -> list[float]:
        if self.sim is None:
            return [similarity(t, query) for t in texts]
        return list(self.sim.scores(query, texts))

    # -- persistence
    def to_dict(self) -> dict[str, Any]:
        return {"format": "guigym.uimem/1", "version": self.version, "absorbed": self.absorbed,
                "templates": dict(self.templates), "ema": dict(self.ema),
                "entries": [asdict(e) for e in self.entries.values()]}

    def load_dict(self, d: Mapping[str, Any]) -> "ExperienceMemory":
        if d.get("format") != "guigym.uimem/1":
            raise ValueError(f"uimem memory {self.path or '(in memory)'}: unknown format {d.get('format')!r}")
        self.version, self.absorbed = int(d["version"]), int(d["absorbed"])
        self.templates = {str(k): str(v) for k, v in d["templates"].items()}
        self.ema = {str(k): float(v) for k, v in d["ema"].items()}
        self.entries = {}
        for e in d["entries"]:
            if e.get("kind") not in KINDS:
                raise ValueError(f"uimem memory: entry {e.get('entry_id')!r} has unknown kind {e.get('kind')!r}")
            entry = MemoryEntry(**e)
            self.entries[entry.entry_id] = entry
        return self

    def save(self, path: str = "") -> None:
        """Write :meth:`to_dict` to ``path`` (default ``self.path``) atomically."""
        target = Path(path or self.path)
        if not str(target):
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=str(target.parent))
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self.to_dict(), f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    @classmethod
    def load(cls, path: str) -> "ExperienceMemory":
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"uimem memory: cannot read {path!r}: {e}") from e
        return cls(path).load_dict(data)

    # -- queries
    def of(self, kind: str, key: Optional[str] = None) -> list[MemoryEntry]:
        return [e for e in self.entries.values() if e.kind == kind and (key is None or e.key == key)]

    def best(self, candidates: Sequence[MemoryEntry], lambda_ucb: float) -> Optional[MemoryEntry]:
        """The eq. 1 argmax (ties: the older entry, then the id)."""
        if not candidates:
            return None
        scores = ucb_scores([e.n_succ for e in candidates], [e.n_used for e in candidates], lambda_ucb)
        return max(zip(scores, candidates), key=lambda p: (p[0], -p[1].created, p[1].entry_id))[1]

    def resolve_template(self, task_id: str, instruction: str = "",
                         min_similarity: float = 0.5) -> tuple[str, dict[str, str]]:
        """Task matching (appendix F, phase 1): the task's own template when known (bindings from
        the instruction when it matches), else a stored template the instruction matches
        (cross-task transfer), else the most similar stored template (>= ``min_similarity``,
        no bindings), else ("", {})."""
        own = self.templates.get(task_id)
        known = sorted(set(self.templates.values()) | {e.key for e in self.of("workflow")})
        if own:
            return own, (match(own, instruction) or {}) if instruction else {}
        if instruction:
            for t in known:
                b = match(t, instruction)
                if b is not None:
                    return t, b
            scored = sorted(zip(self._scores(instruction, known), known), reverse=True)
            if scored and scored[0][0] >= min_similarity:
                return scored[0][1], {}
        return "", {}

    def retrieve(self, task_id: str, instruction: str = "", bindings: Optional[Mapping[str, Any]] = None,
                 lambda_ucb: float = 1.0, max_failures: int = 3, failure_decay: float = 0.1,
                 now: int = 0) -> Retrieved:
        """Appendix F's algorithm 1: template matching, best workflow by eq. 1, per subtask the
        best skill by eq. 1 and the most recent failure patterns by :func:`recency` (at most
        ``max_failures`` overall). Pure: counts change only in :meth:`credit`."""
        template, found = self.resolve_template(task_id, instruction)
        out = Retrieved(template=template, bindings={**found, **{k: str(v) for k, v in (bindings or {}).items()}})
        if not template:
            return out
        out.workflow = self.best(self.of("workflow", template), lambda_ucb)
        labels = out.workflow.steps if out.workflow else []
        for i, label in enumerate(labels):
            skill = self.best(self.of("skill", label), lambda_ucb)
            if skill is not None:
                out.skills[i] = skill
        fails = [e for e in self.of("failure") if e.key in set(labels) or e.origin == task_id]
        fails.sort(key=lambda e: (-recency(e.updated, now, failure_decay), e.entry_id))
        out.failures = fails[:max_failures]
        return out

    # -- updates
    def credit(self, entry_ids: Iterable[str], success: bool) -> None:
        """After a group: every entry that guided a rollout counts a use, and a success if it
        succeeded (eq. 1's N_used, N_succ)."""
        for eid in dict.fromkeys(entry_ids):
            e = self.entries.get(eid)
            if e is not None:
                e.n_used += 1
                e.n_succ += int(bool(success))

    def merge(self, kind: str, key: str, content: str, steps: Sequence[str] = (), *, iteration: int,
              origin: str = "", dedup: float = 0.9, credited: Iterable[str] = (), max_per_key: int = 0) -> MemoryEntry:
        """Sec. 3.4 memory update: an entry of the same kind and key with the same steps
        (workflows) or a content at least ``dedup`` similar (skills, failures) is merged into -- N_succ + 1 for plans and
        skills unless ``credited`` already counted this trajectory, timestamp for failure
        patterns; else a new entry with N_succ = 1, N_used = 0. With ``max_per_key`` > 0 a key
        keeps at most that many entries: the one with the lowest N_succ / (N_used + 1), then the
        least recently updated, makes room for the new one."""
        if kind not in KINDS:
            raise ValueError(f"uimem: unknown memory kind {kind!r}")
        body = "\n".join(steps) if kind == "workflow" else content
        if kind == "workflow":  # algorithm 2, phase 3: exact workflow matching
            same = [e for e in self.of(kind, key) if e.steps == list(steps)]
        else:  # phase 2: semantic de-duplication
            cands = self.of(kind, key)
            sims = dict(zip((e.entry_id for e in cands), self._scores(body, [e.content for e in cands])))
            same = sorted((e for e in cands if sims[e.entry_id] >= dedup), key=lambda e: -sims[e.entry_id])
        if same:
            e = same[0]
            if kind != "failure" and e.entry_id not in set(credited):
                e.n_succ += 1
            e.updated = iteration
            return e
        e = MemoryEntry(MemoryEntry.make_id(kind, key, body), kind, key, content, list(steps), 1, 0,
                        iteration, iteration, origin)
        self.entries[e.entry_id] = e
        rivals = [r for r in self.of(kind, key) if r.entry_id != e.entry_id]
        if max_per_key and len(rivals) >= max_per_key:  # bounded memory: drop the weakest, oldest rival
            worst = min(rivals, key=lambda r: (r.n_succ / (r.n_used + 1.0), r.updated, r.entry_id))
            del self.entries[worst.entry_id]
        return e

    def update_ema(self, task_id: str, score: float, gamma: float, init: float = 0.0) -> float:
        """Appendix G, algorithm 2 line 2: ``SR <- gamma SR + (1 - gamma) score``."""
        s = gamma * self.ema.get(task_id, init) + (1.0 - gamma) * float(score)
        self.ema[task_id] = s
        return s


#: memories shared by the UI-Mem plug-ins of a run, by resolved path ("" = in memory only)
_SHARED: dict[str, ExperienceMemory] = {}


def shared_memory(path: str, init_from: str = "") -> ExperienceMemory:
    """The one :class:`ExperienceMemory` of ``path``: the file's content when it exists, else
    ``init_from``'s (a previous run's memory), else empty."""
    key = str(Path(path).resolve()) if path else ""
    if key not in _SHARED:
        if key and Path(key).exists():
            mem = ExperienceMemory.load(key)
        elif init_from:
            mem = ExperienceMemory.load(init_from)
            mem.path = key
        else:
            mem = ExperienceMemory(key)
        _SHARED[key] = mem
    return _SHARED[key]


def restore_memory(path: str, state: Mapping[str, Any]) -> ExperienceMemory:
    """Checkpoint restore: ``path``'s shared memory becomes ``state`` (newer file content, from
    iterations after the checkpoint, is discarded) and is written back."""
    key = str(Path(path).resolve()) if path else ""
    mem = ExperienceMemory(key).load_dict(state)
    _SHARED[key] = mem
    mem.save()
    return mem


# ---- instructions and parameters --------------------------------------------------------------
def androidworld_instance(task_id: str, seed: int) -> Optional[tuple[str, str, dict[str, Any]]]:
    """(task template with ``{{slots}}``, instruction, params) of an AndroidWorld task instance,
    computed as AndroidWorld-v0 does at reset (``generate_random_params(seed)``); None for
    another task id."""
    from guigym.envs.android.androidworld import TASKS

    if task_id not in TASKS.names():
        return None
    cls = TASKS.get(task_id)
    params = cls.generate_random_params(int(seed))
    template = re.sub(r"\{(\w+)\}", r"{{\1}}", cls.template)
    return template, cls(params).goal, {k: v for k, v in params.items() if isinstance(v, (str, int, float))}


def trajectory_instance(t: Any, resolve: Optional[Callable[[str, int], Any]] = None
                        ) -> tuple[str, str, dict[str, Any]]:
    """(task template or "", instruction or "", bindings) of a finished trajectory: from
    ``info["instruction"]`` / the last step's verifier details (``goal``, ``params``, as
    AndroidWorld-v0 reports them), then ``resolve(task_id, seed)``."""
    instruction = str(t.info.get("instruction") or "")
    params: dict[str, Any] = {}
    if t.steps:
        ver = t.steps[-1].info.get("verifier")
        if isinstance(ver, dict):
            instruction = instruction or str(ver.get("goal") or "")
            if isinstance(ver.get("params"), dict):
                params = {k: v for k, v in ver["params"].items() if isinstance(v, (str, int, float))}
    template = ""
    got = resolve(t.task_id, t.seed) if resolve is not None else None
    if got is not None:
        template, inst, p = got
        instruction, params = instruction or inst, params or p
    return template, instruction, params


# ---- extraction -------------------------------------------------------------------------------
_CALL = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*\((.*)\)\s*$", re.DOTALL)
_STR = re.compile(r"""["']([^"']+)["']""")


def action_strings(t: Any) -> list[str]:
    """One action string per step: the env's parsed action (``Step.action``), else the model's text."""
    return [str(s.action if s.action else s.action_text).strip() for s in t.steps]


def action_name(action: str) -> str:
    m = _CALL.match(action)
    return (m.group(1) if m else action.split(" ")[0] if action else "").lower()


def infer_bindings(instruction: str, actions: Sequence[str]) -> dict[str, str]:
    """Bindings without known task parameters: quoted strings and numbers in the actions that
    also occur in the instruction (case-insensitive) become ``value1``, ``value2``, ..."""
    found: list[str] = []
    low = instruction.lower()
    for a in actions:
        for v in _STR.findall(a) + re.findall(r"(?<![\w.])\d[\d.:/-]*", a):
            v = v.strip()
            if len(v) >= 2 and v.lower() in low and v.lower() not in (x.lower() for x in found):
                found.append(v)
    return {f"value{i}": v for i, v in enumerate(found, 1)}


def segments(actions: Sequence[str]) -> list[list[str]]:
    """Subtasks: runs of actions each ending at a commit action (or the end), consecutive
    repeats collapsed to ``"<action> (xN)"``; finishing actions (done/answer...) are their own."""
    collapsed: list[str] = []
    for a in actions:
        if not a:
            continue
        m = re.fullmatch(r"(.*) \(x(\d+)\)", collapsed[-1]) if collapsed else None
        prev = m.group(1) if m else (collapsed[-1] if collapsed else None)
        if prev == a:
            collapsed[-1] = f"{a} (x{int(m.group(2)) + 1 if m else 2})"
        else:
            collapsed.append(a)
    out: list[list[str]] = [[]]
    for a in collapsed:
        out[-1].append(a)
        if action_name(re.sub(r" \(x\d+\)$", "", a)) in COMMIT:
            out.append([])
    return [s for s in out if s]


def label_of(segment: Sequence[str]) -> str:
    """A subtask's label: its last (commit) action without the repeat count."""
    return re.sub(r" \(x\d+\)$", "", segment[-1])


def completed_steps(reference: Sequence[str], labels: Sequence[str]) -> int:
    """How many of the reference workflow's subtasks the trajectory completed, in order (greedy
    subsequence match of labels, eq. 4's |S_completed|)."""
    k = 0
    for lab in labels:
        if k < len(reference) and similarity(reference[k], lab) >= 0.999:
            k += 1
    return k


@dataclass
class Extraction:
    """What one trajectory adds: task template, workflow (its subtask labels; successes only),
    skills (label, content) for the subtasks it completed, and at most one failure pattern
    (label, diagnosis) for the first subtask it failed."""

    template: str
    workflow: list[str] = field(default_factory=list)
    skills: list[tuple[str, str]] = field(default_factory=list)
    failure: Optional[tuple[str, str]] = None


class Extractor(Protocol):
    def extract(self, t: Any, template: str, instruction: str, bindings: Mapping[str, Any],
                reference: Sequence[str]) -> Extraction: ...


class RuleExtractor:
    """Rule-based experience extraction and abstraction (no model): see the module docstring.
    Successes give a workflow and one skill per subtask; failures give skills for the subtasks
    completed before the first one missed (in ``reference``, the task's current workflow, when
    known) and a diagnosis of that one from the recorded actions: action errors, repeated actions,
    a premature finish or an exhausted step budget."""

    def extract(self, t: Any, template: str, instruction: str, bindings: Mapping[str, Any],
                reference: Sequence[str] = ()) -> Extraction:
        acts = action_strings(t)
        b = dict(bindings) or infer_bindings(instruction, acts)
        template = template or (abstract(instruction, b) if instruction else "") or f"task {t.task_id}"
        segs = [[abstract(a, b) for a in s] for s in segments(acts)]
        labels = [label_of(s) for s in segs]
        skills = [(label_of(s), "; ".join(s)) for s in segs if action_name(label_of(s)) not in FINISH]
        if t.success:
            return Extraction(template, [lab for lab in labels if action_name(lab) not in FINISH], skills)
        done = completed_steps(reference, labels) if reference else 0
        if reference and done < len(reference):
            missed = reference[done]
        else:
            missed = next((lab for lab in reversed(labels) if action_name(lab) not in FINISH), "the task")
        return Extraction(template, [], skills[:done] if reference else [], (missed, self.diagnose(t, missed, b)))

    @staticmethod
    def diagnose(t: Any, missed: str, bindings: Mapping[str, Any]) -> str:
        errors = [(s.action or s.action_text, s.action_error) for s in t.steps if s.action_error]
        acts = action_strings(t)
        repeats = [re.sub(r" \(x\d+\)$", "", a) for s in segments(acts) for a in s
                   if re.search(r" \(x(\d+)\)$", a) and int(re.search(r" \(x(\d+)\)$", a).group(1)) >= 3]
        if errors:
            cause = f"the action {errors[0][0]} failed ({str(errors[0][1])[:120]})"
        elif repeats:
            cause = f"repeated {repeats[0]} without progress"
        elif acts and action_name(acts[-1]) in FINISH:
            cause = f"finished with {acts[-1]} before this was done"
        elif t.info.get("truncated"):
            cause = "ran out of steps before this was done"
        else:
            cause = "the episode ended before this was done"
        return abstract(f"When doing {missed}: {cause}. Check the screen and complete it before moving on.", bindings)


class OpenAIExtractor:
    """Experience extraction by a model behind an OpenAI-compatible ``/chat/completions``
    endpoint (the paper uses Seed1.8 and DeepSeek-V3 with the prompts of figures 11-13; these
    prompts paraphrase them; ``prompt_file`` replaces them with a JSON {"system", "user"} file
    whose user text has ``{instruction}``, ``{template}``, ``{bindings}``, ``{actions}``,
    ``{success}``, ``{reference}`` fields). The reply must be JSON ``{"workflow": [...],
    "skills": [{"label", "plan"}], "failure": {"subtask", "diagnosis"} | null}``; values are
    then abstracted with the bindings as the rule extractor does. Any other reply raises."""

    SYSTEM = ("You analyse a mobile GUI agent's trajectory and extract reusable experience. Reply with JSON "
              "only.")
    USER = ("Task: {instruction}\nTask template: {template}\nVariable bindings: {bindings}\n"
            "Succeeded: {success}\nReference workflow: {reference}\nActions:\n{actions}\n\n"
            "Return {{\"workflow\": [subtask labels in order, only if it succeeded], \"skills\": [{{\"label\": ..., "
            "\"plan\": step-by-step summary}} for each completed subtask], \"failure\": {{\"subtask\": the first failed "
            "subtask, \"diagnosis\": root cause and how to avoid it}} or null}}. Keep the task's concrete values.")

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 60.0,
                 prompt_file: str = "", post: Optional[Callable[[str, dict[str, Any], dict[str, str]], Any]] = None) -> None:
        if not base_url or not model:
            raise ConfigError("uimem extractor 'openai' needs extractor_options.base_url and .model")
        self.base_url, self.model, self.api_key_env, self.timeout_s = base_url.rstrip("/"), model, api_key_env, timeout_s
        self.system, self.user = self.SYSTEM, self.USER
        if prompt_file:
            p = json.loads(Path(prompt_file).read_text(encoding="utf-8"))
            self.system, self.user = str(p["system"]), str(p["user"])
        self._post = post or self._http_post

    def _http_post(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
        import requests

        r = requests.post(url, json=body, headers=headers, timeout=self.timeout_s)
        r.raise_for_status()
        return r.json()

    def extract(self, t: Any, template: str, instruction: str, bindings: Mapping[str, Any],
                reference: Sequence[str] = ()) -> Extraction:
        user = self.user.format(instruction=instruction, template=template, bindings=json.dumps(dict(bindings)),
                                success=bool(t.success), reference=json.dumps(list(reference)),
                                actions="\n".join(action_strings(t)))
        headers = {"Authorization": f"Bearer {os.environ.get(self.api_key_env, '')}"}
        reply = self._post(f"{self.base_url}/chat/completions",
                           {"model": self.model, "temperature": 0.0,
                            "messages": [{"role": "system", "content": self.system}, {"role": "user", "content": user}]},
                           headers)
        text = reply["choices"][0]["message"]["content"].strip()
        text = re.sub(r"^```(?:json)?|```$", "", text).strip()
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"uimem openai extractor: reply is not JSON: {text[:200]!r}") from e
        b = dict(bindings)
        tmpl = template or abstract(instruction, b)
        fail = d.get("failure")
        return Extraction(tmpl, [abstract(str(s), b) for s in d.get("workflow") or []] if t.success else [],
                          [(abstract(str(s["label"]), b), abstract(str(s["plan"]), b)) for s in d.get("skills") or []],
                          (abstract(str(fail["subtask"]), b), abstract(str(fail["diagnosis"]), b)) if fail else None)


EXTRACTORS: dict[str, Callable[..., Any]] = {"rule": RuleExtractor, "openai": OpenAIExtractor}
