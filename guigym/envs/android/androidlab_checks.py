"""AndroidLab judging in guigym's own code: per-task checks over UI trees, answer judges, metrics.

What each check looks at was learned by reading AndroidLab's evaluators (THUDM/Android-Lab
``evaluation/tasks/<app>/*.py`` and ``evaluation/task.py``, commit 373fc1d, MIT); none of their code
is used. Behaviour kept from AndroidLab:

* a task's checker looks at each step's UI tree; a step whose page is not the one the task is about
  ("judge_page" false) is skipped and the **last applicable step decides** (Evaluation_Task.
  _evaluate_single_task). A single final screen is the one-step case. Some checks remember what an
  earlier step showed (e.g. "the PLAYLISTS tab was opened"): they get the history up to the step;
* results keep AndroidLab's sub-goal keys ("1", "2", ...) so Sub-Goal SR (their partial accuracy)
  is comparable; ``complete`` is the task's success;
* answer tasks compare ``finish(message=...)`` with AndroidLab's expected answer (kept in their
  evaluator code, copied here as data) through a pluggable judge; some use an ``adb_query`` output as
  the expected answer or as the state to check.

Where AndroidLab's check contradicts its own task text, the task text wins and the table entry
says so in its ``note`` (e.g. contacts_2 checks a ``@qq.com`` address for a ``@gmail.com`` task).
Known deliberate fixes are listed in :data:`DEVIATIONS`.

Unscorable is never a silent 0: an answer task with no judge configured, a judge that fails, or an
adb-judged task without its adb output gives ``success=None`` with the reason.
"""
from __future__ import annotations

import json
import re
import unicodedata
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Callable, Iterable, Mapping, Optional, Protocol, Sequence, Union

import numpy as np

from guigym.core.errors import ConfigError, EnvInfraError
from guigym.envs.android.observation import UINode, UITree, parse_ui_xml, simplified_nodes

# ---- text helpers --------------------------------------------------------------------------------
_SPACES = dict.fromkeys(map(ord, "\u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f"), " ")
_SPACES[0x2011] = "-"  # non-breaking hyphen (Settings writes "Wi\u2011Fi")
_SPACES[0x2010] = "-"


def norm(s: str) -> str:
    """Unicode spaces -> ' ', non-breaking hyphens -> '-', runs of spaces collapsed, stripped."""
    return " ".join(s.translate(_SPACES).split())


_TIME_RE = re.compile(r"(\d{1,2}):(\d{2})\s*([AaPp][Mm])")


def parse_clock_time(s: str) -> Optional[int]:
    """First ``h:mm AM/PM`` in ``s`` as minutes after midnight (12 AM = 0, 12 PM = 720)."""
    m = _TIME_RE.search(norm(s))
    if not m:
        return None
    h, mi, ap = int(m.group(1)) % 12, int(m.group(2)), m.group(3).upper()
    return (h + (12 if ap == "PM" else 0)) * 60 + mi


def hm(h: int, m: int = 0) -> int:
    return h * 60 + m


# ---- the screen view the checks use --------------------------------------------------------------
@dataclass
class _Item:
    node: UINode
    parent: Optional[int]
    label: str  # normalised merged text


class Screen:
    """A UI tree as the checks see it: the MobileRL-simplified nodes (what the agent was shown) with
    parent links, in document order. Label matching uses :func:`norm` on both sides."""

    def __init__(self, tree: Union[UITree, str, bytes], screen: Optional[tuple[int, int]] = None) -> None:
        if not isinstance(tree, UITree):
            tree = parse_ui_xml(tree)
        self.items: list[_Item] = []
        self._children: dict[Optional[int], list[int]] = {}

        def walk(nodes: list[UINode], parent: Optional[int]) -> None:
            for n in nodes:
                idx = len(self.items)
                self.items.append(_Item(n, parent, norm(n.label)))
                self._children.setdefault(parent, []).append(idx)
                walk(n.children, idx)

        walk(simplified_nodes(tree, screen), None)

    # basic queries
    def labels(self) -> list[str]:
        return [it.label for it in self.items]

    def find(self, needle: str) -> list[int]:
        n = norm(needle)
        return [i for i, it in enumerate(self.items) if n in it.label]

    def has(self, *needles: str) -> bool:
        return all(self.find(n) for n in needles)

    def has_label(self, exact: str) -> bool:
        e = norm(exact)
        return any(it.label == e for it in self.items)

    def text_labels(self, cls: str = "TextView") -> list[str]:
        """Labels of nodes of this short class (AndroidLab reads TextViews for lists of names)."""
        return [it.label for it in self.items if it.node.short_class == cls and it.label]

    def subtree(self, idx: Optional[int]) -> list[int]:
        out: list[int] = []
        stack = list(reversed(self._children.get(idx, [])))
        while stack:
            i = stack.pop()
            out.append(i)
            stack.extend(reversed(self._children.get(i, [])))
        return out

    def row_text(self, idx: int) -> str:
        """The node's label and its descendants' labels, space-joined (a list row's full text)."""
        return " ".join(self.items[j].label for j in [idx] + self.subtree(idx) if self.items[j].label)

    def scope(self, idx: int) -> list[int]:
        """The node's parent and everything under it (AndroidLab's "subtree of the parent")."""
        parent = self.items[idx].parent
        if parent is None:  # a top-level node: its "parent" is the whole forest
            return self.subtree(None)
        return [parent] + self.subtree(parent)

    def near(self, anchor: str, needle: str, exact: bool = False) -> bool:
        """Some node whose label contains ``anchor`` has, in its scope, a node whose label contains
        (or, ``exact``, equals) ``needle``."""
        n = norm(needle)
        for a in self.find(anchor):
            for j in self.scope(a):
                lab = self.items[j].label
                if (lab == n) if exact else (n in lab):
                    return True
        return False

    def toggle(self, anchor: str) -> Optional[bool]:
        """Checked state of the switch / checkbox belonging to the row labelled ``anchor``: the node
        itself when checkable, else the first checkable node in its scope. None: no such node."""
        for a in self.find(anchor):
            if self.items[a].node.flag("checkable"):
                return self.items[a].node.flag("checked")
            for j in self.scope(a):
                if self.items[j].node.flag("checkable"):
                    return self.items[j].node.flag("checked")
        return None

    def selected(self, needle: str) -> bool:
        """A selected node whose own label or a descendant's contains ``needle`` (a selected tab)."""
        n = norm(needle)
        for i, it in enumerate(self.items):
            if it.node.flag("selected") and any(n in self.items[j].label for j in [i] + self.subtree(i)):
                return True
        return False

    def after(self, anchor: str, needle: str) -> bool:
        """The node right after the first ``anchor`` node, in document order, contains ``needle``."""
        hits = self.find(anchor)
        return bool(hits) and hits[0] + 1 < len(self.items) and norm(needle) in self.items[hits[0] + 1].label


# ---- evidence, results, judges -------------------------------------------------------------------
Subgoals = dict[str, bool]


class AnswerJudge(Protocol):
    """Decides whether an answer matches the expected one. Raise :class:`EnvInfraError` when it
    cannot decide (service down, unreadable reply): the task is then unscorable, not failed."""

    name: str

    def __call__(self, question: str, answer: str, expected: str) -> bool: ...


def _tokens(s: str) -> list[str]:
    s = unicodedata.normalize("NFKC", norm(s)).casefold()
    return re.findall(r"[\w.%@:+-]+", s)


class ExactJudge:
    """Equal after case folding, Unicode/space normalisation and dropping punctuation around words."""

    name = "exact"

    def __call__(self, question: str, answer: str, expected: str) -> bool:
        strip = lambda ts: [t.strip(".,:;!?") for t in ts]  # noqa: E731
        return strip(_tokens(answer)) == strip(_tokens(expected))


class FuzzyJudge:
    """Every token of the expected answer appears in the answer (order free), or the two strings are
    at least ``threshold`` similar (difflib ratio of the normalised forms). Numbers are compared
    with thousands separators removed ("11,400.00" == "11400.00")."""

    name = "fuzzy"

    def __init__(self, threshold: float = 0.85) -> None:
        if not 0 < threshold <= 1:
            raise ConfigError(f"FuzzyJudge: threshold must be in (0, 1], got {threshold!r}")
        self.threshold = threshold

    @staticmethod
    def _canon(s: str) -> list[str]:
        s = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", s)  # thousands separators
        return [t for t in (t.strip(".,:;!?'\"") for t in _tokens(s)) if t]

    def __call__(self, question: str, answer: str, expected: str) -> bool:
        a, e = self._canon(answer), self._canon(expected)
        if e and all(t in a for t in e):
            return True
        return SequenceMatcher(None, " ".join(a), " ".join(e)).ratio() >= self.threshold


class OpenAIJudge:
    """An LLM judge over any OpenAI-compatible ``/chat/completions`` endpoint (our own prompt).

    ``api_key`` is sent as a bearer token when given. Network errors, HTTP errors and replies with
    neither verdict raise :class:`EnvInfraError` (unscorable), never a failure.
    """

    name = "llm"
    PROMPT = ("You grade answers to questions about a phone's content. Reply with exactly one word: "
              "CORRECT if the model answer states the same fact as the reference answer (wording, "
              "units and extra detail may differ), otherwise INCORRECT.\n\nQuestion: {q}\n"
              "Reference answer: {e}\nModel answer: {a}")

    def __init__(self, base_url: str, model: str, api_key: Optional[str] = None, timeout: float = 60.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"OpenAIJudge: base_url must be http(s), got {base_url!r}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.api_key, self.timeout = model, api_key, timeout

    def __call__(self, question: str, answer: str, expected: str) -> bool:
        body = json.dumps({"model": self.model, "temperature": 0, "max_tokens": 8, "messages": [
            {"role": "user", "content": self.PROMPT.format(q=question, e=expected, a=answer)}]}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 (http(s) checked)
                reply = json.loads(resp.read().decode("utf-8"))["choices"][0]["message"]["content"]
        except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            raise EnvInfraError(f"answer judge at {self.url} failed: {exc}") from exc
        word = (reply or "").strip().upper()
        if word.startswith("INCORRECT"):
            return False
        if word.startswith("CORRECT"):
            return True
        raise EnvInfraError(f"answer judge gave no verdict: {reply!r}")


JUDGES: dict[str, Callable[[], AnswerJudge]] = {"exact": ExactJudge, "fuzzy": FuzzyJudge}


@dataclass(frozen=True)
class Judgement:
    """Outcome of one task. ``success`` None = unscorable (``reason`` says why); ``subgoals`` keep
    AndroidLab's keys; ``step`` is the index of the deciding screen (None for answer-only tasks)."""

    task_id: str
    success: Optional[bool]
    subgoals: Optional[Subgoals]
    reason: str = ""
    step: Optional[int] = None

    @property
    def subgoal_score(self) -> Optional[float]:
        """AndroidLab's partial accuracy: 1 when complete, else the share of true sub-goals."""
        if self.success is None:
            return None
        if self.success:
            return 1.0
        if not self.subgoals:
            return 0.0
        return sum(bool(v) for v in self.subgoals.values()) / len(self.subgoals)


@dataclass
class Ctx:
    """What one check call sees: the current step's screen and the ones before it."""

    screen: Screen
    history: Sequence[Screen]  # all screens up to and including this one

    def ever(self, pred: Callable[[Screen], bool]) -> bool:
        return any(pred(s) for s in self.history)


ScreenCheck = Callable[[Ctx], Optional[Subgoals]]  # None: not the task's page


@dataclass(frozen=True)
class TaskCheck:
    """One task's check. ``kind``: ``screen`` (UI trees), ``answer`` (finish message vs ``expected``),
    ``adb_state`` (an adb output decides), ``adb_answer`` (the answer vs an adb output),
    ``screen_answer`` (the answer vs a value read off the screen)."""

    kind: str
    fn: Optional[ScreenCheck] = None
    expected: Optional[str] = None
    adb: Optional[str] = None
    adb_fn: Optional[Callable[[str], object]] = None
    note: str = ""


CHECKS: dict[str, TaskCheck] = {}


def screen(task_id: str, note: str = "") -> Callable[[ScreenCheck], ScreenCheck]:
    def deco(fn: ScreenCheck) -> ScreenCheck:
        CHECKS[task_id] = TaskCheck("screen", fn=fn, note=note)
        return fn
    return deco


def answer(task_id: str, expected: str, note: str = "") -> None:
    CHECKS[task_id] = TaskCheck("answer", expected=expected, note=note)


# ---- judging -------------------------------------------------------------------------------------
def _complete(sub: Subgoals, complete: Optional[bool] = None) -> bool:
    return all(sub.values()) if complete is None else complete


def judge_task(task_id: str, question: str, screens: Sequence[Union[Screen, UITree, str, bytes]] = (),
          answer_text: Optional[str] = None, adb: Optional[Mapping[str, str]] = None,
          judge: Optional[AnswerJudge] = None) -> Judgement:
    """Judge one AndroidLab task.

    Args:
        task_id: e.g. ``"clock_1"``; unknown ids raise :class:`ConfigError`.
        question: the task instruction (given to the answer judge).
        screens: the episode's UI trees in step order (dumps, parsed trees or :class:`Screen`); the
            final screen alone is fine for tasks that do not look back.
        answer_text: the agent's ``finish(message=...)``; None when it did not finish with one.
        adb: outputs of the task's ``adb_query`` after the episode, keyed by the query string.
        judge: answer judge for answer tasks; None makes them unscorable.
    """
    if task_id not in CHECKS:
        raise ConfigError(f"no AndroidLab check registered for task {task_id!r}")
    tc = CHECKS[task_id]
    views = [s if isinstance(s, Screen) else Screen(s) for s in screens]
    if tc.kind == "screen":
        last: Optional[tuple[int, Subgoals]] = None
        for i in range(len(views)):
            res = tc.fn(Ctx(views[i], views[: i + 1]))  # type: ignore[misc]
            if res is not None:
                last = (i, res)
        if last is None:
            # AndroidLab's default result when no step shows the page: not complete, no sub-goals
            return Judgement(task_id, False, {}, "no screen showed the task's page")
        sub = dict(last[1])
        done = sub.pop("complete", None)
        return Judgement(task_id, _complete(sub, done), sub, step=last[0])
    if tc.kind == "adb_state":
        out = (adb or {}).get(tc.adb or "")
        if out is None:
            return Judgement(task_id, None, None, f"adb output of {tc.adb!r} missing")
        ok = bool(tc.adb_fn(out))  # type: ignore[misc]
        return Judgement(task_id, ok, {"1": ok})
    # answer kinds
    if tc.kind == "adb_answer":
        out = (adb or {}).get(tc.adb or "")
        if out is None:
            return Judgement(task_id, None, None, f"adb output of {tc.adb!r} missing")
        expected = str(tc.adb_fn(out)) if tc.adb_fn else out.strip()  # type: ignore[misc]
    elif tc.kind == "screen_answer":
        found = None
        for v in reversed(views):
            found = tc.fn(Ctx(v, views))  # type: ignore[misc]
            if found:
                break
        if not found:
            return Judgement(task_id, None, None, "the expected value was not on any recorded screen")
        expected = str(found)
    else:
        expected = tc.expected or ""
    if answer_text is None or not answer_text.strip():
        return Judgement(task_id, False, {"1": False}, "no finish(message=...) answer")
    if judge is None:
        return Judgement(task_id, None, None, "no answer judge configured")
    try:
        ok = bool(judge(question, answer_text, expected))
    except EnvInfraError as exc:
        return Judgement(task_id, None, None, f"answer judge failed: {exc}")
    return Judgement(task_id, ok, {"1": ok}, f"judge={getattr(judge, 'name', type(judge).__name__)}")


# ---- metrics (pure) ------------------------------------------------------------------------------
def success_rate(results: Iterable[Judgement]) -> Optional[float]:
    """SR over scorable results (unscorable ones are left out, not counted as 0); None if none."""
    scored = [r for r in results if r.success is not None]
    return sum(bool(r.success) for r in scored) / len(scored) if scored else None


def subgoal_success_rate(results: Iterable[Judgement]) -> Optional[float]:
    """Sub-Goal SR: mean of :attr:`Judgement.subgoal_score` over scorable results."""
    scores = [r.subgoal_score for r in results if r.success is not None]
    return sum(scores) / len(scores) if scores else None  # type: ignore[arg-type]


def reversed_redundancy_ratio(reference_len: Optional[int], trace_len: int, complete: bool) -> Optional[float]:
    """RRR of one task: reference (human) length / the agent's trace length, completed tasks only
    (AndroidLab Evaluation_Task.add_metrics); None when not complete or no reference."""
    if not complete or trace_len <= 0 or reference_len is None:
        return None
    return reference_len / trace_len


def screen_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """AndroidLab's screenshot similarity: among pixel channels where either image is not 255, the
    share that are equal. Shapes must match; a 0/0 case (both all-white) counts as 0."""
    if a.shape != b.shape:
        return 0.0
    either = np.logical_or(a != 255, b != 255)
    denom = float(either.sum())
    if denom == 0:
        return 0.0
    return float(np.logical_and(a == b, either).sum()) / denom


def reasonable_operation_ratio(screenshots: Sequence[np.ndarray], threshold: float = 0.999) -> float:
    """ROR of one task: 1 - (consecutive near-identical screens) / (steps - 1).

    As AndroidLab computes it: the last screenshot is dropped, pairs with similarity above
    ``threshold`` count as no-ops, and with two or fewer screenshots the count is 0; ``steps`` is
    the number of screenshots, and one step gives 1.
    """
    n = len(screenshots)
    if n <= 1:
        return 1.0
    same = 0
    if n > 2:
        shots = screenshots[:-1]
        same = sum(screen_similarity(shots[i], shots[i + 1]) > threshold for i in range(len(shots) - 1))
    return 1.0 - same / (n - 1)


# ==================================================================================================
# The per-task table. Each entry says what AndroidLab's evaluator checks, in our terms.
# ==================================================================================================
DEVIATIONS = {
    "clock_8": "12:xx PM counts as before 2 PM (AndroidLab's hour > 2 test treats noon as after 2 PM)",
    "pimusic_8": "the whole visible song list must be sorted (AndroidLab's extractor stops after one song)",
    "pimusic_12": "the whole visible song list must be sorted (AndroidLab's extractor stops after one song)",
    "setting_9": "the ring volume value must be 0 (AndroidLab tests that the output contains a '0')",
    "setting_10": "the alarm volume value must be 7 (AndroidLab tests that the output contains a '7')",
    "contacts_2": "work email 123456@gmail.com as the task says (AndroidLab checks 123456@qq.com)",
    "contacts_5": "label 'work' holding AAA and ABC as the task says (AndroidLab checks Chen, Lee, Xu)",
    "contacts_7": "the contact page is AAA's as the task says (AndroidLab's page test looks for ABC)",
    "setting_6": "answer compared with the Apps storage shown on screen (AndroidLab never marks it complete)",
    "cantook_8": "page = the book's menu (AndroidLab's page test, every TextView containing Info/Read, "
                 "contradicts its own Hamlet test and can never pass)",
    "cantook_9": "page = the book's menu (same page test as cantook_8)",
    "setting_19": "Firefox's radio button must be checked (AndroidLab fails on any unchecked sibling)",
}
#: AndroidLab checks kept as they are although they differ from the task text: calendar_7 and
#: calendar_8 look for "30 minutes before", calendar_14 for "Yearly" (task: all-day), calendar_10
#: for "this_day", calendar_12 for the "this day" event (task: "Today").
KEPT_AS_ANDROIDLAB = ("calendar_7", "calendar_8", "calendar_10", "calendar_12", "calendar_14")

# ---- query tasks with a fixed expected answer (AndroidLab evaluator constants) -----------------
for _tid, _exp in {
    "bluecoins_1": "11,400.00 CNY", "bluecoins_2": "Buying cake", "bluecoins_3": "69.51 CNY",
    "bluecoins_4": "Three transactions", "bluecoins_5": "60.12 CNY",
    "cantook_1": "No", "cantook_2": "The Scarlet Letter", "cantook_3": "William Shakespeare",
    "cantook_4": "Two", "cantook_5": "37.8%",
    "clock_10": "7:30AM", "clock_11": "No", "clock_12": "Yes", "clock_13": "Two alarms", "clock_14": "No",
    "clock_16": "6 hours behind",
    "contacts_12": "22331144 or (223) 311-44", "contacts_13": "22334455@gmail.com",
    "contacts_14": "October 24, 1996", "contacts_15": "Tsinghua university",
    "map_1": "73 km, 12 hr 58 min", "map_2": "7.0 km, 8 min", "map_3": "4 hr 7 min",
    "map_4": "subway 824 and subway EB", "map_5": "public transportation", "map_6": "public transportation",
    "map_7": "Teléferic Barcelona", "map_8": "Teléferic Barcelona, about 3min",
    "map_9": "The Clement Hotel - All Inclusive", "map_10": "9min",
    "pimusic_1": "12 songs", "pimusic_2": "4 songs", "pimusic_3": "Pulse Live",
    "pimusic_4": "1 hour, 21 minutes and 3 seconds",
    "pimusic_5": "The second song is 'Dark Side Of The Moon' and the fourth song is 'Future sounds'",
    "pimusic_6": "11 minutes and 50 seconds",
    "setting_16": "English (United States)",
}.items():
    answer(_tid, _exp)


def _setting_value(out: str) -> Optional[int]:
    """``volume_ring_speaker=5`` (``settings list system | grep``) -> 5."""
    m = re.search(r"=\s*(-?\d+)", out)
    return int(m.group(1)) if m else None


def _adb(task_id: str, kind: str, query: str, fn: Optional[Callable[[str], object]] = None) -> None:
    CHECKS[task_id] = TaskCheck(kind, adb=query, adb_fn=fn)


_adb("setting_0", "adb_state", "adb shell settings get global airplane_mode_on", lambda o: o.strip() != "0")
_adb("setting_3", "adb_state", "adb shell settings get global bluetooth_on", lambda o: o.strip() != "1")
_adb("setting_9", "adb_state", "adb shell settings list system | grep volume_ring_speaker",
     lambda o: _setting_value(o) == 0)
_adb("setting_10", "adb_state", "adb shell settings list system | grep volume_alarm_speaker",
     lambda o: _setting_value(o) == 7)
_adb("setting_20", "adb_state", "adb shell pm list packages | grep 'com.booking'", lambda o: "booking" not in o)
_adb("setting_14", "adb_answer", "adb shell 'getprop persist.sys.timezone'")
_adb("setting_17", "adb_answer", "adb shell getprop ro.build.version.release")
_adb("setting_22", "adb_answer", "adb shell settings get global airplane_mode_on",
     lambda o: "open" if o.strip() == "1" else "not open")


def _apps_storage(c: Ctx) -> Optional[str]:
    for i in c.screen.find("Apps"):
        for j in c.screen.scope(i):
            m = re.search(r"\d[\d.,]*\s*(MB|GB|kB)", c.screen.items[j].label)
            if m:
                return m.group(0)
    return None


CHECKS["setting_6"] = TaskCheck("screen_answer", fn=_apps_storage)  # type: ignore[arg-type]

# ---- Settings (screen) ---------------------------------------------------------------------------


def _toggle_task(tid: str, page: str, row: str, want: bool) -> None:
    def fn(c: Ctx) -> Optional[Subgoals]:
        if not c.screen.has(page):
            return None
        return {"1": c.screen.toggle(row) is want}
    CHECKS[tid] = TaskCheck("screen", fn=fn)


def _text_task(tid: str, page: Sequence[str], *needles: str, first_true: bool = False) -> None:
    """Page shows all of ``page``; sub-goal k is "needle k is shown". ``first_true`` prepends
    AndroidLab's always-true sub-goal "1" (calendar tasks)."""
    def fn(c: Ctx) -> Optional[Subgoals]:
        if not all(c.screen.has(p) for p in page):
            return None
        vals = [c.screen.has(n) for n in needles]
        if first_true:
            vals = [True] + vals
        return {str(k + 1): v for k, v in enumerate(vals)}
    CHECKS[tid] = TaskCheck("screen", fn=fn)


_toggle_task("setting_1", "Turn on Wi-Fi automatically", "Turn on Wi-Fi automatically", False)
_text_task("setting_2", ["Private DNS provider hostname"], "dns.google")
_text_task("setting_4", ["Pair new device"], "my AVD")
_toggle_task("setting_5", "Battery percentage", "Battery percentage", True)
_text_task("setting_11", ["Text-to-speech output"], "Chinese")
_text_task("setting_12", ["Set time automatically"], "May 1, 2024")
_toggle_task("setting_13", "Ring vibration", "Ring vibration", False)


@screen("setting_7")
def _setting_7(c: Ctx) -> Optional[Subgoals]:
    if not c.screen.has("Dark theme"):
        return None
    state = c.screen.toggle("Use Dark theme")
    if state is None:
        state = c.screen.toggle("Dark theme")
    return {"1": bool(state)}


@screen("setting_8")
def _setting_8(c: Ctx) -> Optional[Subgoals]:
    hits = c.screen.find("Brightness level")
    if not hits:
        return None
    pct = [c.screen.items[j].label for i in hits for j in [i] + c.screen.scope(i)
           if re.search(r"\d+\s*%", c.screen.items[j].label)]
    return {"1": bool(pct) and re.search(r"(\d+)\s*%", pct[0]).group(1) == "0"}  # type: ignore[union-attr]


@screen("setting_15")
def _setting_15(c: Ctx) -> Optional[Subgoals]:
    if not c.screen.has("Add a language"):
        return None
    there = c.screen.has("Español (Estados Unidos)")
    second = False
    for i in c.screen.find("Español (Estados Unidos)"):
        # the language list writes each entry's rank as its own TextView next to the name
        neighbours = [j for j in (i - 1, i + 1) if 0 <= j < len(c.screen.items)]
        second = second or any(c.screen.items[j].label == "2" for j in neighbours)
    return {"1": there, "2": there and second}


@screen("setting_18")
def _setting_18(c: Ctx) -> Optional[Subgoals]:
    labels = c.screen.labels()
    if any(l == "Allowed" for l in labels):
        inside, listed = False, False
        for l in labels:
            if l == "Allowed":
                inside = True
            elif l.startswith("Not allowed"):
                inside = False
            elif inside and "Contacts" in l:
                listed = True
        return {"1": not listed}
    if c.screen.has("Allow notification access") or c.screen.has("All Contacts notifications"):
        state = c.screen.toggle("All Contacts notifications")
        if state is None:
            state = c.screen.toggle("Allow notification access")
        return {"1": state is False}
    return None


@screen("setting_19")
def _setting_19(c: Ctx) -> Optional[Subgoals]:
    if not c.screen.has("Default browser app", "Firefox"):
        return None
    return {"1": c.screen.toggle("Firefox") is True}


@screen("setting_21")
def _setting_21(c: Ctx) -> Optional[Subgoals]:
    return {"1": True} if c.screen.has("Settings", "Search settings") else None


# ---- Clock ---------------------------------------------------------------------------------------
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun", "Not scheduled", "Today", "Tomorrow", "Every day")


@dataclass
class Alarm:
    """One alarm row of the Clock app's alarm list (collapsed or expanded)."""

    time: Optional[int] = None  # minutes after midnight
    on: Optional[bool] = None
    label: str = ""
    days: list[str] = field(default_factory=list)
    ringtone: str = ""
    vibrate: Optional[bool] = None


def alarms(s: Screen) -> list[Alarm]:
    """Alarms in document order. A collapsed row ends at its on/off Switch; an expanded one (it shows
    a "Collapse" control) ends at its "Delete" button. Within a row: the ``h:mm AM/PM`` text is the
    time, the node described "Label" holds the label, TextViews naming days give the schedule, the
    node described "Ringtone" holds the ringtone and the "Vibrate" checkbox the vibrate state."""
    out: list[Alarm] = []
    cur, expanded = Alarm(), False
    for it in s.items:
        n, lab = it.node, it.label
        if "Collapse" in lab:
            expanded = True
        is_switch = n.short_class == "Switch" and n.flag("checkable")
        if is_switch:
            cur.on = n.flag("checked")
        if (not expanded and is_switch) or (expanded and lab.startswith("Delete")):
            out.append(cur)
            cur, expanded = Alarm(), False
            continue
        t = parse_clock_time(lab)
        if t is not None and n.short_class == "TextView" and "Wake-up" not in lab:
            cur.time = t
        if norm(n.content_desc) == "Label" or (lab.endswith(" Label") and n.text):
            cur.label = norm(n.text)
        if norm(n.content_desc) == "Ringtone":
            cur.ringtone = norm(n.text)
        if "Vibrate" in lab and n.flag("checkable"):
            cur.vibrate = n.flag("checked")
        if n.short_class == "TextView":
            cur.days.extend(d for d in _DAYS if d in lab)
    return out


def _on_alarm_list(s: Screen) -> bool:
    return bool(alarms(s)) or s.has("Add alarm")


def _alarm_task(tid: str, time: int, **want: object) -> None:
    """Sub-goal "1": an alarm at ``time`` exists; then one per wanted field in the given order, and
    the last is "it is on" (AndroidLab's order)."""
    def fn(c: Ctx) -> Optional[Subgoals]:
        keys = list(want) + ["on"]
        best: Subgoals = {str(k + 1): False for k in range(len(keys) + 1)}
        for a in alarms(c.screen):
            if a.time != time:
                continue
            vals = [True] + [getattr(a, k) == v for k, v in want.items()] + [a.on is True]
            cand = {str(k + 1): v for k, v in enumerate(vals)}
            if sum(cand.values()) > sum(best.values()):
                best = cand
        return best
    CHECKS[tid] = TaskCheck("screen", fn=fn)


_alarm_task("clock_1", hm(15), label="meeting")
_alarm_task("clock_2", hm(6, 45), vibrate=False, ringtone="Argon")
_alarm_task("clock_3", hm(7), days=["Mon", "Tue", "Wed", "Thu", "Fri"])
_alarm_task("clock_4", hm(9), days=["Every day"])
_alarm_task("clock_5", hm(10, 30), days=["Tomorrow"])
_alarm_task("clock_6", hm(22, 30), days=["Sat", "Sun"], label="Watch Football Games")


@screen("clock_7")
def _clock_7(c: Ctx) -> Optional[Subgoals]:
    if not _on_alarm_list(c.screen):
        return None
    return {"1": all(a.on is False for a in alarms(c.screen))}


@screen("clock_8", note=DEVIATIONS["clock_8"])
def _clock_8(c: Ctx) -> Optional[Subgoals]:
    if not _on_alarm_list(c.screen):
        return None
    return {"1": not any(a.time is not None and a.time > hm(14) for a in alarms(c.screen))}


def _alarm_state_task(tid: str, time: int, on: bool) -> None:
    def fn(c: Ctx) -> Optional[Subgoals]:
        if not _on_alarm_list(c.screen):
            return None
        return {"1": any(a.time == time and a.on is on for a in alarms(c.screen))}
    CHECKS[tid] = TaskCheck("screen", fn=fn)


_alarm_state_task("clock_9", hm(16), False)
_alarm_state_task("clock_26", hm(7, 30), False)
_alarm_state_task("clock_27", hm(15), True)


@screen("clock_15")
def _clock_15(c: Ctx) -> Optional[Subgoals]:
    return {"1": c.screen.has("London"), "2": c.screen.has("Barcelona")}


@screen("clock_17")
def _clock_17(c: Ctx) -> Optional[Subgoals]:
    return {"1": c.screen.selected("Clock") and not c.screen.has("Barcelona")}


@screen("clock_18")
def _clock_18(c: Ctx) -> Optional[Subgoals]:
    out = {"1": False, "2": False, "3": False}
    for lab in c.screen.labels():
        h = re.search(r"(\d+)\s*hours?\b", lab)
        m = re.search(r"(\d+)\s*minutes?\b", lab)
        s = re.search(r"(\d+)\s*seconds?\b", lab)
        if h and m and s:
            out = {"1": h.group(1) == "1", "2": m.group(1) == "15", "3": s.group(1) == "0"}
            if all(out.values()):
                break
    return out


@screen("clock_19")
def _clock_19(c: Ctx) -> Optional[Subgoals]:
    bed = wake = False
    for lab in c.screen.labels():
        mb = re.search(r"Bedtime\s+(\d{1,2}:\d{2}\s*[AP]M)", lab)
        mw = re.search(r"Wake-up\s+(\d{1,2}:\d{2}\s*[AP]M)", lab)
        bed = bed or bool(mb and parse_clock_time(mb.group(1)) == hm(22))
        wake = wake or bool(mw and parse_clock_time(mw.group(1)) == hm(7))
    return {"1": bed, "2": wake}


@screen("clock_20")
def _clock_20(c: Ctx) -> Optional[Subgoals]:
    for lab in c.screen.labels():
        m = re.search(r"sleep sound\s+(.+)$", lab)
        if m and m.group(1).strip() == "Deep space":
            return {"1": True}
    return {"1": False}


@screen("clock_21")
def _clock_21(c: Ctx) -> Optional[Subgoals]:
    if not c.screen.has("Wake-up"):
        return None
    return {"1": c.screen.toggle("Wake-up") is True}


@screen("clock_22")
def _clock_22(c: Ctx) -> Optional[Subgoals]:
    return {"1": c.screen.has("Analog")}


@screen("clock_23")
def _clock_23(c: Ctx) -> Optional[Subgoals]:
    return {"1": c.screen.near("Home time zone", "Tokyo")}


@screen("clock_24")
def _clock_24(c: Ctx) -> Optional[Subgoals]:
    return {"1": c.screen.near("Silence after", "5 minutes", exact=True)}


@screen("clock_25")
def _clock_25(c: Ctx) -> Optional[Subgoals]:
    return {"1": c.screen.has("Alarm", "Clock", "Timer", "Stopwatch")}


# ---- Calendar (AndroidLab: text present on the event page; sub-goal "1" always true) ------------
_text_task("calendar_1", ["work"], "Today", "5:00 PM", first_true=True)
_text_task("calendar_2", ["homework"], "May 21", "10 minutes before", first_true=True)
_text_task("calendar_3", ["meeting"], "May 13", "conference room B202", first_true=True)
_text_task("calendar_4", ["new month"], "Jun 01", "Monthly", first_true=True)
_text_task("calendar_5", ["work"], "Today", "7:00 PM", first_true=True)
_text_task("calendar_10", ["this_day"])
_text_task("calendar_13", ["exam"])


def _calendar_edit(tid: str, title: str, started: Sequence[str], goal: str) -> None:
    """Sub-goals: "1" always, "2" the event shown is the original one (its earlier fields are all
    there), "3" the edit is visible."""
    def fn(c: Ctx) -> Optional[Subgoals]:
        if not c.screen.has(title):
            return None
        ok_start = all(c.screen.has(s) for s in started)
        return {"1": True, "2": ok_start, "3": c.screen.has(goal)}
    CHECKS[tid] = TaskCheck("screen", fn=fn)


_calendar_edit("calendar_6", "homework", ["homework", "May 21", "10 minutes before"], "classroom 101")
_calendar_edit("calendar_7", "meeting", ["May 13", "conference room B202"], "30 minutes before")
_calendar_edit("calendar_8", "work", ["Today", "5:00 PM"], "30 minutes before")
_calendar_edit("calendar_9", "work", ["Today", "5:00 PM", "30 minutes before"], "Daily")
_calendar_edit("calendar_11", "this day", [], "Weekly")
_calendar_edit("calendar_12", "this day", ["Weekly"], "Hello")
_calendar_edit("calendar_14", "exam", [], "Yearly")

# ---- Zoom ----------------------------------------------------------------------------------------
_text_task("zoom_1", ["Join with a personal link name"], "123 456 7890")
_text_task("zoom_2", ["Join with a personal link name"], "098 765 4321", "Alice")


@screen("zoom_3")
def _zoom_3(c: Ctx) -> Optional[Subgoals]:
    if not c.screen.has("Join with a personal link name"):
        return None
    return {"1": c.screen.has("123 456 7890"), "2": c.screen.toggle("Don't Connect To Audio") is True,
            "3": c.screen.toggle("Turn Off My Video") is True}


@screen("zoom_4")
def _zoom_4(c: Ctx) -> Optional[Subgoals]:
    if not c.screen.has("Auto-connect to audio"):
        return None
    return {"1": c.screen.near("Auto-connect to audio", "WiFi or cellular data")}


@screen("zoom_5")
def _zoom_5(c: Ctx) -> Optional[Subgoals]:
    if not c.screen.has("Reaction skin tone", "Medium-light"):
        return None
    ok = any(c.screen.items[i].node.flag("selected") or c.screen.items[i].node.flag("checked")
             for i in c.screen.find("Medium-light")) or c.screen.near("Medium-light", "Selected")
    return {"1": ok}


# ---- Contacts ------------------------------------------------------------------------------------
def _contact_task(tid: str, name: str, *needles: Union[str, tuple[str, ...]]) -> None:
    """Page: a contact page ("Contact" shown) for ``name``; sub-goal k: needle k shown (a tuple: one
    clickable row, with the text under it, shows all its parts)."""
    def shown(s: Screen, n: Union[str, tuple[str, ...]]) -> bool:
        if isinstance(n, str):
            return s.has(n)
        return any(all(norm(p) in s.row_text(i) for p in n)
                   for i, it in enumerate(s.items) if it.node.flag("clickable"))

    def fn(c: Ctx) -> Optional[Subgoals]:
        if not c.screen.has("Contact", name):
            return None
        return {str(k + 1): shown(c.screen, n) for k, n in enumerate(needles)}
    CHECKS[tid] = TaskCheck("screen", fn=fn)


_contact_task("contacts_1", "John", "John", "1 (234) 567-8")
_contact_task("contacts_2", "John Smith", ("Mobile", "1 (234) 567-8"), ("Work", "123456@gmail.com"))
CHECKS["contacts_2"] = TaskCheck("screen", fn=CHECKS["contacts_2"].fn, note=DEVIATIONS["contacts_2"])
_contact_task("contacts_3", "Xu", ("Work", "1 (234) 567-8"), ("Mobile", "(876) 543-21"))
_contact_task("contacts_4", "Chen", "Tsinghua University")
_contact_task("contacts_6", "ABC", "00112233")
_contact_task("contacts_7", "AAA", ("Birthday", "October 24, 1996"))
CHECKS["contacts_7"] = TaskCheck("screen", fn=CHECKS["contacts_7"].fn, note=DEVIATIONS["contacts_7"])
_contact_task("contacts_8", "ABC", "abc.github.com")


@screen("contacts_5", note=DEVIATIONS["contacts_5"])
def _contacts_5(c: Ctx) -> Optional[Subgoals]:
    # the label's page: its title "work" and a count line "<n> contacts"
    if not (c.screen.has_label("work") and c.screen.find("contacts")):
        return None
    names = set(c.screen.labels())
    return {"1": True, "2": "AAA" in names, "3": "ABC" in names}


@screen("contacts_9")
def _contacts_9(c: Ctx) -> Optional[Subgoals]:
    if not c.screen.has("Texting with ABC"):
        return None
    return {"1": True, "2": c.screen.has("Nice to meet you")}


@screen("contacts_10")
def _contacts_10(c: Ctx) -> Optional[Subgoals]:
    return {"1": True} if c.screen.has("End call", "ABC") else None


@screen("contacts_11")
def _contacts_11(c: Ctx) -> Optional[Subgoals]:
    if not c.screen.has_label("ABC"):  # the contact list (a row per name)
        return None
    return {"1": not c.screen.has_label("AAA")}


# ---- Maps.me -------------------------------------------------------------------------------------
@screen("map_11")
def _map_11(c: Ctx) -> Optional[Subgoals]:
    if not c.screen.has("My places", "Home", "Work"):
        return None
    return {"1": c.screen.near("Work", "18th Street, 3180 • 50.6 km", exact=True)}


for _tid, _dest in {"map_12": "Stanford", "map_13": "University South", "map_14": "OpenAI",
                    "map_15": "University of California, Berkeley"}.items():
    def _nav(c: Ctx, _d: str = _dest) -> Optional[Subgoals]:
        return {"1": True} if c.screen.has(_d, "My location", "Start") else None
    CHECKS[_tid] = TaskCheck("screen", fn=_nav)

# ---- Cantook -------------------------------------------------------------------------------------


def _book_names(s: Screen) -> set[str]:
    return set(s.text_labels())


def _library_page(s: Screen) -> bool:
    """Not the file picker (.epub names) and not the help page."""
    return not any(".epub" in l or "Help" in l for l in s.text_labels())


@screen("cantook_6")
def _cantook_6(c: Ctx) -> Optional[Subgoals]:
    if not _library_page(c.screen):
        return None
    return {"1": "Alice's Adventures in Wonderland" in _book_names(c.screen)}


@screen("cantook_7")
def _cantook_7(c: Ctx) -> Optional[Subgoals]:
    if not c.screen.selected("My Books"):
        return None
    return {"1": "Don Quixote" not in _book_names(c.screen)}


def _book_menu(tid: str, book: str, marks: Sequence[str]) -> None:
    """A book's menu: "1" the book is shown, "2" the read-state entries show the wanted state."""
    def fn(c: Ctx) -> Optional[Subgoals]:
        if not (c.screen.has("Mark as read") or c.screen.has("Mark as unread")):
            return None
        return {"1": c.screen.has_label(book), "2": all(c.screen.has(m) for m in marks)}
    CHECKS[tid] = TaskCheck("screen", fn=fn)


_book_menu("cantook_8", "Hamlet", ["Mark as unread", "100.0%"])
_book_menu("cantook_9", "Oliver Twist", ["Mark as read"])


@screen("cantook_10")
def _cantook_10(c: Ctx) -> Optional[Subgoals]:
    if not _library_page(c.screen):
        return None
    return {"1": c.screen.has("Mer. Thou desir'st me to stop in my tale against the haire")}


@screen("cantook_11")
def _cantook_11(c: Ctx) -> Optional[Subgoals]:
    if "Tragedies" not in _book_names(c.screen):
        return None
    names = _book_names(c.screen)
    return {"1": c.ever(lambda s: s.selected("Categories")), "2": True,
            "3": "Hamlet" in names and "Romeo and Juliet" in names}


@screen("cantook_12")
def _cantook_12(c: Ctx) -> Optional[Subgoals]:
    if not c.screen.selected("Collections"):
        return None
    return {"1": True, "2": "Favorite" in _book_names(c.screen)}


# ---- Pi Music ------------------------------------------------------------------------------------
_DURATION = re.compile(r"^(\d+:)?[0-5]?\d:[0-5]\d$")


def _durations(s: Screen) -> list[int]:
    out = []
    for lab in s.text_labels():
        if _DURATION.match(lab):
            parts = [int(p) for p in lab.split(":")]
            out.append(sum(p * 60 ** k for k, p in enumerate(reversed(parts))))
    return out


def _now_playing(s: Screen) -> bool:
    return s.has("Now Playing list", "Equalizer")


@screen("pimusic_7")
def _pimusic_7(c: Ctx) -> Optional[Subgoals]:
    if not _now_playing(c.screen):
        return None
    favo = c.ever(lambda s: s.text_labels().count("Favorite") == 1)
    return {"1": c.ever(lambda s: s.selected("PLAYLISTS")), "2": favo,
            "3": favo and "PINK BLOOD" in _book_names(c.screen)}


@screen("pimusic_8", note=DEVIATIONS["pimusic_8"])
def _pimusic_8(c: Ctx) -> Optional[Subgoals]:
    if c.screen.text_labels().count("Pink Floyd") != 1:
        return None
    sort_step = c.ever(lambda s: "Sort By" in _book_names(s))
    d = _durations(c.screen)
    return {"1": c.ever(lambda s: s.selected("ARTISTS")), "2": True, "3": sort_step,
            "4": sort_step and bool(d) and all(d[i] >= d[i + 1] for i in range(len(d) - 1))}


@screen("pimusic_9")
def _pimusic_9(c: Ctx) -> Optional[Subgoals]:
    if not c.screen.selected("PLAYLISTS"):
        return None
    return {"1": True, "2": "Creepy" in _book_names(c.screen)}


@screen("pimusic_10")
def _pimusic_10(c: Ctx) -> Optional[Subgoals]:
    return {"1": "1:27" in _book_names(c.screen)} if _now_playing(c.screen) else None


@screen("pimusic_11")
def _pimusic_11(c: Ctx) -> Optional[Subgoals]:
    return {"1": "Lightship" in _book_names(c.screen)} if _now_playing(c.screen) else None


@screen("pimusic_12", note=DEVIATIONS["pimusic_12"])
def _pimusic_12(c: Ctx) -> Optional[Subgoals]:
    if not c.screen.selected("TRACKS"):
        return None
    d = _durations(c.screen)
    return {"1": c.ever(lambda s: "Sort By" in _book_names(s)),
            "2": bool(d) and all(d[i] <= d[i + 1] for i in range(len(d) - 1))}


# ---- Bluecoins: the transaction editor -----------------------------------------------------------
_MONTHS = re.compile(r"January|February|March|April|May|June|July|August|September|October|November|December")
_PLACEHOLDER_NOTES = ("Notes", "Payee or item purchased", "Name of income")


@dataclass
class Bill:
    type: str = ""  # last word of the editor's title, e.g. "Expense" / "Income"
    date: str = ""
    amount: str = ""  # the amount field next to the currency "CNY"
    note: str = ""  # the last text field; "" when it still shows its placeholder
    sign: str = ""  # the "+" / "-" toggle


def bill(s: Screen) -> Bill:
    b = Bill()
    plain = [it for it in s.items if it.node.short_class == "TextView" and it.label
             and not any(it.node.flag(f) for f in ("clickable", "long-clickable", "checkable", "scrollable"))]
    if plain:
        b.type = plain[0].label.split()[-1]
    for it in s.items:
        if _MONTHS.search(it.label) and it.node.short_class == "TextView":
            b.date = it.label
            break
    edits = [i for i, it in enumerate(s.items) if it.node.short_class == "EditText"]
    cny = s.find("CNY")
    amount_at = None
    if cny:
        # the amount field sits next to the currency: the first text field after it in document order
        after = [i for i in edits if i > cny[0] and s.items[i].node.flag("long-clickable")]
        if after:
            amount_at = after[0]
            b.amount = s.items[amount_at].label
    if edits and edits[-1] != amount_at and s.items[edits[-1]].label not in _PLACEHOLDER_NOTES:
        b.note = s.items[edits[-1]].label
    for it in s.items:
        if it.node.short_class == "TextView" and it.node.flag("clickable") and it.label in ("+", "-"):
            b.sign = it.label
            break
    return b


def _amount_is(value: str, *wanted: str) -> bool:
    return value.replace(",", "") in wanted


def _bill_page(s: Screen) -> Optional[Bill]:
    b = bill(s)
    return b if (b.amount or b.note) else None


def _bill_task(tid: str, origin: Optional[Callable[[Bill], bool]],
               goals: Sequence[Callable[[Bill], bool]]) -> None:
    """Editor page with sub-goals ``goals``; ``origin``: the edit tasks first need a step showing the
    original transaction (AndroidLab remembers it), later editor steps are judged."""
    def fn(c: Ctx) -> Optional[Subgoals]:
        b = _bill_page(c.screen)
        if b is None:
            return None
        if origin is not None:
            if not any((ob := _bill_page(h)) is not None and origin(ob) for h in c.history[:-1]):
                return None
        return {str(k + 1): bool(g(b)) for k, g in enumerate(goals)}
    CHECKS[tid] = TaskCheck("screen", fn=fn)


_bill_task("bluecoins_6", None, [lambda b: b.type == "Expense", lambda b: _amount_is(b.amount, "512", "512.00")])
_bill_task("bluecoins_7", None, [lambda b: b.type == "Income", lambda b: _amount_is(b.amount, "8000", "8000.00"),
                                 lambda b: b.note.lower() == "salary"])
_bill_task("bluecoins_8", None, [lambda b: b.type == "Expense", lambda b: b.date == "May 11, 2024",
                                 lambda b: _amount_is(b.amount, "768", "768.00")])
_bill_task("bluecoins_9", None, [lambda b: b.type == "Income", lambda b: b.date == "March 8, 2024",
                                 lambda b: b.amount == "3.14", lambda b: b.note.lower() == "weixin red packet"])
_bill_task("bluecoins_10", None, [lambda b: b.type == "Expense", lambda b: b.date == "May 14, 2024",
                                  lambda b: _amount_is(b.amount, "256", "256.00"), lambda b: b.note.lower() == "eating"])
_bill_task("bluecoins_11", lambda b: b.date == "May 15, 2024" and _amount_is(b.amount, "400.00"),
           [lambda b: b.date == "May 15, 2024", lambda b: _amount_is(b.amount, "500", "500.00")])
_bill_task("bluecoins_12", lambda b: b.date == "May 12, 2024" and _amount_is(b.amount, "18000.00"),
           [lambda b: b.date == "May 10, 2024", lambda b: _amount_is(b.amount, "18250", "18250.00")])
_bill_task("bluecoins_13", lambda b: b.date == "May 13, 2024" and b.type == "Expense",
           [lambda b: b.type == "Income", lambda b: b.sign == "+", lambda b: b.date == "May 13, 2024",
            lambda b: b.note.lower() == "gift"])
_bill_task("bluecoins_14", lambda b: b.date == "May 2, 2024" and b.type == "Income",
           [lambda b: b.type == "Expense", lambda b: b.sign == "-", lambda b: b.date == "May 2, 2024",
            lambda b: _amount_is(b.amount, "520", "520.00"), lambda b: b.note.lower() == "wrong operation"])
_bill_task("bluecoins_15", lambda b: b.date == "May 12, 2024" and b.amount == "794.20",
           [lambda b: b.date == "May 13, 2024", lambda b: b.amount == "936.02",
            lambda b: b.note.lower() == "grocery shopping"])
