"""WebArena's evaluators, both published versions, as pure functions over a page reader.

Two semantics, chosen per call with ``semantics=``:

* ``"webarena"``: web-arena-x/webarena ``evaluation_harness/evaluators.py`` (StringEvaluator,
  URLEvaluator, HTMLContentEvaluator) and ``helper_functions.py`` (LLM judge prompts).
* ``"webarena-lite"``: THUDM/VisualAgentBench ``VAB-WebArena-Lite/new/evaluators.py``
  (StringEvaluator with must_exclude/one_of/required_values, URLExactEvaluator,
  HTMLContentExactEvaluator) and ``new/helper_functions_eval.py``.

The score of a task is the product of the scores of its ``eval_types`` (EvaluatorComb in both).
The differences that change scores are listed in docs/architecture.md ("WebArena evaluators") and
tested case by case in tests/test_webarena_evaluators.py.

``fuzzy_match`` needs an LLM judge (:class:`Judge`). Without one, or when the judge's reply fits
none of WebArena's decision rules (the published code ``assert``s there and crashes), the result
is **unscorable**: ``EvalResult.score is None`` and ``unscorable_reason`` says why. It is never
reported as 0 or 1, even when another factor of the product is 0: the published code stops the
whole evaluation there (an exception), and the differential test holds us to the same outcome.

Deliberate departures from the published code, all where it would crash or run task text:
``func:`` via :mod:`funcs` (ast, no eval); a key a semantics does not know is a TaskSpecError
(WebArena silently skips unknown reference_answers keys); Lite task 81's string ``must_include``
is read as a one-item list (Lite asserts a list); Lite's ``lambda:`` prefix is removed as a prefix
(Lite uses ``str.lstrip("lambda:")``, which also eats leading ``l a m b d :`` characters of the
expression, e.g. the ``d`` of ``document``).
"""
from __future__ import annotations

import html
import json
import os
import urllib.parse
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Optional, Sequence

from guigym.core.errors import ConfigError, EnvInfraError, TaskSpecError
from guigym.envs.web.webarena.funcs import WEBARENA_ACCOUNTS, FuncContext, HttpFn, PageReader, http_json, parse_func
from guigym.envs.web.webarena.tasks import PLACEHOLDER_RE, OR_SEPARATOR, WebArenaConfig
from guigym.envs.web.webarena.tokens import word_tokenize

Semantics = Literal["webarena", "webarena-lite"]
SEMANTICS: tuple[str, ...] = ("webarena", "webarena-lite")

#: A judge takes chat messages (OpenAI format) and returns the reply text.
Judge = Callable[[list[dict[str, str]]], str]


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class EvalResult:
    """Outcome of one evaluation.

    ``score``: in [0, 1], or ``None`` when the episode is unscorable (then ``unscorable`` is True
    and ``unscorable_reason`` says why). ``checks``: one dict per comparison made (kind, what was
    compared, its score), for ``info["verifier"]``.
    """

    score: Optional[float]
    unscorable_reason: str = ""
    checks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def unscorable(self) -> bool:
        return self.score is None


class _Product:
    """A running product of factors some of which may be unknown (None).

    Any unknown factor makes the product unknown (where WebArena raises and scores nothing).
    ``assign`` overwrites, as WebArena's N/A branch does (``score = ua_match(...)``).
    """

    def __init__(self) -> None:
        self.value = 1.0
        self.unknown: list[str] = []

    def mul(self, factor: Optional[float], why: str = "") -> None:
        if factor is None:
            self.unknown.append(why)
        else:
            self.value *= float(factor)

    def assign(self, factor: Optional[float], why: str = "") -> None:
        self.value, self.unknown = (1.0, [why]) if factor is None else (float(factor), [])

    def result(self) -> Optional[float]:
        return None if self.unknown else self.value


# --------------------------------------------------------------------------- string helpers


def clean_answer(answer: str, semantics: Semantics) -> str:
    """WebArena: strip, drop one pair of outer quotes, lower. Lite: the same without strip."""
    if semantics == "webarena":
        answer = answer.strip()
    if len(answer) >= 1 and answer[0] == answer[-1] and answer[0] in "'\"":
        # published: startswith(q) and endswith(q) then [1:-1]; a lone quote becomes ""
        answer = answer[1:-1]
    return answer.lower()


def exact_match(ref: str, pred: Any, semantics: Semantics) -> float:
    """1.0 iff the cleaned strings are equal (Lite also accepts an int prediction)."""
    if semantics == "webarena-lite" and not isinstance(pred, str):
        pred = str(pred)  # Lite takes an int here (a lambda: locator's value); other types crash there
    return float(clean_answer(pred, semantics) == clean_answer(ref, semantics))


def _lite_tokens(text: str) -> list[str]:
    toks = word_tokenize(text)
    # Lite also matches the pieces of slash-joined tokens ("a/b" -> also "a", "b")
    return toks + [piece for t in toks if "/" in t for piece in t.split("/")]


def must_include(ref: str, pred: str, semantics: Semantics, tokenize: bool = False) -> float:
    """Whether the cleaned ``ref`` occurs in the cleaned ``pred``.

    WebArena: substring, except when ``tokenize`` (the reference list has one item) and the
    cleaned reference is one character: then it must be a whole token (so "0" misses "$0.00").
    Lite: whole token (slash pieces included) whenever the reference is a single token.
    """
    cref, cpred = clean_answer(ref, semantics), clean_answer(pred, semantics)
    if semantics == "webarena":
        if tokenize and len(cref) == 1 and len(word_tokenize(cref)) == 1:
            return float(cref in word_tokenize(cpred))
        return float(cref in cpred)
    if len(word_tokenize(cref)) == 1:
        return float(cref in _lite_tokens(cpred))
    return float(cref in cpred)


def must_exclude(ref: str, pred: str) -> float:
    """Lite only: 1.0 iff the cleaned ``ref`` does not occur (as a token when it is one)."""
    cref, cpred = clean_answer(ref, "webarena-lite"), clean_answer(pred, "webarena-lite")
    if len(word_tokenize(cref)) == 1:
        return float(cref not in word_tokenize(cpred))
    return float(cref not in cpred)


def str_to_int(text: str) -> Optional[int]:
    """Lite's NumericEvaluator.str_2_int: strip, drop commas, ``int()``; None if that fails."""
    try:
        return int(text.strip().replace(",", ""))
    except ValueError:
        return None


_INEQUALITIES: tuple[tuple[str, Callable[[float, float, float], bool]], ...] = (
    # order matters: "<=" must be tried before "<" (Lite's dict order); tol widens each side
    ("<=", lambda x, y, tol: x <= y + tol),
    (">=", lambda x, y, tol: x >= y - tol),
    ("==", lambda x, y, tol: abs(x - y) <= tol),
    ("<", lambda x, y, tol: x < y + tol),
    (">", lambda x, y, tol: x > y - tol),
)


def compare_inequality(value: float, inequality: str, tol: float = 1e-8) -> bool:
    """Lite's NumericEvaluator.compare_inequality: ``"< 700"``, ``">= 300"``, ``"== 5"``.

    The tolerance makes ``<``/``>`` non-strict for integers: 700 satisfies ``"< 700"``.
    """
    for op, test in _INEQUALITIES:
        if op in inequality:
            parts = inequality.split(op)
            if len(parts) != 2:
                break
            try:
                return test(value, float(parts[1].strip()), tol)
            except ValueError:
                break
    raise TaskSpecError(f"required_values: invalid inequality {inequality!r}; expected e.g. '< 700', '>= 3'")


def _required_values(pred: Any, values: Sequence[str], acc: _Product, checks: list, where: str) -> None:
    number = str_to_int(pred) if isinstance(pred, str) else pred
    if number is None:
        # Lite: "score = 0.0"; a multiply gives the same 0 and keeps an earlier unscorable factor
        # unscorable (the published code would have raised before getting here)
        acc.mul(0.0)
        checks.append({"kind": where, "pred": pred, "ref": list(values), "score": 0.0,
                       "note": "prediction is not an integer"})
        return
    for v in values:
        ok = any(compare_inequality(number, alt) for alt in v.split(OR_SEPARATOR))
        acc.mul(float(ok))
        checks.append({"kind": where, "pred": number, "ref": v, "score": float(ok)})


# --------------------------------------------------------------------------- LLM judge


def fuzzy_match_messages(pred: str, reference: str, question: str, semantics: Semantics) -> list[dict[str, str]]:
    """WebArena's llm_fuzzy_match prompt (helper_functions.py); Lite changed only the last line."""
    last = ("Conclude the judgement by correct/incorrect/partially correct." if semantics == "webarena" else
            "Conclude the judgement by 'correct', 'incorrect', or 'partially correct'. "
            "Only output one of these options, and nothing else.")
    message = (
        "Help a teacher to grade the answer of a student given a question. Keep in mind that the student "
        "may use different phrasing or wording to answer the question. The goal is to evaluate whether the "
        "answer is semantically equivalent to the reference answer.\n"
        f"question: {question}\n"
        f"reference answer: {reference}\n"
        "all the string 'N/A' that you see is a special sequence that means 'not achievable'\n"
        f"student answer: {pred}\n"
        f"{last}"
    )
    return [{"role": "system", "content": "You are a helpful assistant"}, {"role": "user", "content": message}]


def ua_match_messages(pred: str, reference: str, question: str) -> list[dict[str, str]]:
    """WebArena's llm_ua_match prompt (same text in Lite)."""
    message = (
        f"task: {question}\n"
        f"actual unachievable reason: {reference}\n"
        f"reported unachievable reason: {pred}\n"
        "The task described above is inherently unachievable due to the reason specified under 'actual "
        "unachievable reason'. An individual previously attempted this task and was unable to complete it. "
        "They provided a reason for their failure, which is listed under 'reported unachievable reason'. "
        "Your role is to review both the actual and reported reasons. Determine if the reported reason "
        "aligns with the actual reason, even if implicitly. If the stated reason is in line with the actual "
        "reason, respond with 'same'. Otherwise, respond with 'different'."
    )
    return [{"role": "system", "content": "You are a helpful assistant"}, {"role": "user", "content": message}]


def decide_fuzzy(reply: str) -> Optional[float]:
    """WebArena's rule: "partially correct" or "incorrect" -> 0, else "correct" -> 1, else None."""
    r = reply.lower()
    if "partially correct" in r or "incorrect" in r:
        return 0.0
    return 1.0 if "correct" in r else None


def decide_ua(reply: str) -> Optional[float]:
    """WebArena's rule: "different" -> 0, else "same" -> 1, else None (unscorable)."""
    r = reply.lower()
    if "different" in r:
        return 0.0
    return 1.0 if "same" in r else None


def _ask(judge: Optional[Judge], messages: list[dict[str, str]], decide: Callable[[str], Optional[float]],
         checks: list, kind: str, **info: Any) -> tuple[Optional[float], str]:
    if judge is None:
        checks.append({"kind": kind, **info, "score": None, "note": "no judge configured"})
        return None, f"{kind} needs an LLM judge and none is configured"
    try:
        reply = judge(messages)
    except Exception as exc:  # a judge outage is not the agent's failure
        checks.append({"kind": kind, **info, "score": None, "note": f"judge error: {exc}"})
        return None, f"{kind}: judge failed: {exc}"
    score = decide(str(reply))
    checks.append({"kind": kind, **info, "judge_reply": str(reply)[:500], "score": score})
    if score is None:
        return None, f"{kind}: judge reply fits no rule: {str(reply)[:120]!r}"
    return score, ""


@dataclass
class OpenAIJudge:
    """An OpenAI-compatible chat endpoint as the judge (``POST {base_url}/chat/completions``).

    Defaults follow WebArena's judge call: gpt-4-1106-preview, temperature 0, top_p 1,
    max_tokens 768. The API key is read from the environment variable named by ``api_key_env``.
    HTTP or format failures raise; :func:`evaluate` records them as unscorable.
    """

    base_url: str
    model: str = "gpt-4-1106-preview"
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = 120.0

    def __call__(self, messages: list[dict[str, str]]) -> str:
        body = {"model": self.model, "messages": messages, "temperature": 0, "top_p": 1.0, "max_tokens": 768}
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        req = urllib.request.Request(f"{self.base_url.rstrip('/')}/chat/completions",
                                     data=json.dumps(body).encode(), headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            reply = json.loads(resp.read().decode("utf-8"))
        return str(reply["choices"][0]["message"]["content"])


# --------------------------------------------------------------------------- evaluators


def _as_list(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _string_match(config: WebArenaConfig, answer: str, semantics: Semantics, judge: Optional[Judge],
                  checks: list) -> tuple[Optional[float], str]:
    ev = config.eval
    pred = clean_answer(answer, semantics)
    acc = _Product()
    for approach, value in (ev.reference_answers or {}).items():
        kind = f"string_match.{approach}"
        if semantics == "webarena" and approach not in ("exact_match", "must_include", "fuzzy_match"):
            raise TaskSpecError(f"task {config.task_id}: field 'eval.reference_answers.{approach}' is a "
                                "WebArena-Lite key; evaluate with evaluator='webarena-lite'")
        if approach == "exact_match":
            s = exact_match(value, pred, semantics)
            acc.mul(s)
            checks.append({"kind": kind, "pred": pred, "ref": value, "score": s})
        elif approach == "must_include":
            items = _as_list(value)
            for item in items:
                if semantics == "webarena":
                    s = must_include(item, pred, semantics, tokenize=len(items) == 1)
                else:
                    s = float(any(must_include(alt, pred, semantics) for alt in item.split(OR_SEPARATOR)))
                acc.mul(s)
                checks.append({"kind": kind, "pred": pred, "ref": item, "score": s})
        elif approach == "must_exclude":
            for item in value:
                s = must_exclude(item, pred)
                acc.mul(s)
                checks.append({"kind": kind, "pred": pred, "ref": item, "score": s})
        elif approach == "one_of":
            s = float(any(clean_answer(v, semantics) in pred for v in value))
            acc.mul(s)
            checks.append({"kind": kind, "pred": pred, "ref": list(value), "score": s})
        elif approach == "required_values":
            _required_values(pred, value, acc, checks, kind)
        elif approach == "fuzzy_match":
            if value == "N/A":
                s = exact_match("N/A", pred, semantics)
                acc.mul(s)
                checks.append({"kind": kind, "pred": pred, "ref": "N/A", "score": s})
                if acc.result() != 1.0:
                    # WebArena: the judge decides whether the stated reason is the real one, and its
                    # verdict replaces the score so far
                    score, why = _ask(judge, ua_match_messages(pred, ev.string_note or "", config.intent),
                                      decide_ua, checks, "string_match.ua_match", pred=pred, ref=ev.string_note)
                    acc.assign(score, why)
            else:
                refs = [", ".join(value)] if semantics == "webarena-lite" else list(value)
                for ref in refs:  # every reference is judged, as published: a bad reply anywhere counts
                    score, why = _ask(judge, fuzzy_match_messages(pred, ref, config.intent, semantics),
                                      decide_fuzzy, checks, kind, pred=pred, ref=ref)
                    acc.mul(score, why)
    return acc.result(), "; ".join(w for w in acc.unknown if w)


def _url_match(config: WebArenaConfig, page_url: str, semantics: Semantics, checks: list) -> float:
    ev = config.eval
    refs_raw = (ev.reference_url or "").split(OR_SEPARATOR)
    if semantics == "webarena":
        rule = ev.url_note or "GOLD in PRED"
        if rule != "GOLD in PRED":
            raise TaskSpecError(f"task {config.task_id}: field 'eval.url_note': {rule!r} is not known to "
                                "evaluator='webarena' (only 'GOLD in PRED')")
        pred = page_url.rstrip("/")
        refs = [u.rstrip("/") for u in refs_raw]

        def split(url: str) -> tuple[str, dict[str, list[str]]]:
            p = urllib.parse.urlparse(url)
            return p.netloc + p.path, urllib.parse.parse_qs(p.query)

        pred_base, pred_query = split(pred)
        ref_query: dict[str, set[str]] = defaultdict(set)
        ref_bases = []
        for ref in refs:
            base, query = split(ref)
            ref_bases.append(base)
            for k, vs in query.items():
                ref_query[k].update(vs)
        # substring test on netloc+path: "GOLD in PRED"; query values pooled over alternatives
        base_score = float(any(b in pred_base for b in ref_bases))
        query_score = 1.0
        for k, values in ref_query.items():
            query_score *= float(any(v in pred_query.get(k, []) for v in values))
        score = base_score * query_score
    else:
        rule = ev.url_note or "EXACT"

        def clean(url: str) -> str:
            url = url.replace("localhost", "127.0.0.1")
            return url[:-1] if url.endswith("/") else url

        pred = clean(page_url)
        refs = [clean(u) for u in refs_raw]
        score = float(pred in refs) if rule == "EXACT" else float(any(r in pred for r in refs))
    checks.append({"kind": "url_match", "rule": rule, "pred": page_url, "ref": ev.reference_url, "score": score})
    return score


def _run_js(page: PageReader, script: str) -> tuple[bool, Any]:
    """(ok, value); a script error is (False, None), infrastructure errors propagate."""
    try:
        return True, page.evaluate(script)
    except EnvInfraError:
        raise
    except Exception:
        return False, None


def _program_html(config: WebArenaConfig, page: PageReader, semantics: Semantics, judge: Optional[Judge],
                  ctx: FuncContext, checks: list) -> tuple[Optional[float], str]:
    acc = _Product()
    for i, target in enumerate(config.eval.program_html):
        where = f"task {config.task_id}: field 'eval.program_html[{i}]"
        target_url = target.url
        if target_url.startswith("func"):
            target_url = parse_func(target_url, where + ".url'").run(ctx)
            if not isinstance(target_url, str):
                raise TaskSpecError(f"{where}.url': helper returned {type(target_url).__name__}, not a URL")
        if target_url != "last":
            page.goto(target_url)

        locator = target.locator
        selected: Any
        if not locator.strip():
            selected = page.content()
        elif locator.startswith(("document.", "[...document.")):
            for prep in target.prep_actions:
                ok, _ = _run_js(page, f"() => {prep}")
                if not ok:
                    break  # published: one try around all prep actions
            ok, value = _run_js(page, f"() => {locator}")
            selected = str(value) if ok else ""
        elif locator.startswith("lambda:"):
            if semantics == "webarena":
                raise TaskSpecError(f"{where}.locator': 'lambda:' locators are WebArena-Lite's; "
                                    "use evaluator='webarena-lite'")
            ok, value = _run_js(page, locator[len("lambda:"):])
            selected = value if ok and value else None
        else:  # func: (tasks.py admits no other kind)
            selected = parse_func(locator, where + ".locator'").run(ctx)

        if semantics == "webarena":
            selected = html.unescape(str(selected))
        elif selected is None:
            checks.append({"kind": "program_html", "index": i, "url": target_url, "score": 0.0,
                           "note": "locator found nothing"})
            acc.mul(0.0)  # Lite: "score = 0.0; break" (see _required_values for why mul)
            break

        (key, spec), = target.required_contents.items()
        kind = f"program_html.{key}"
        if semantics == "webarena" and key not in ("exact_match", "must_include"):
            raise TaskSpecError(f"{where}.required_contents.{key}' is a WebArena-Lite key; "
                                "use evaluator='webarena-lite'")
        shown = str(selected)[:300]
        if key == "exact_match":
            s = exact_match(spec, selected, semantics)
            acc.mul(s)
            checks.append({"kind": kind, "index": i, "pred": shown, "ref": spec, "score": s})
        elif key == "must_include":
            for item in spec:
                s = float(any(must_include(alt, str(selected), semantics) for alt in item.split(OR_SEPARATOR)))
                acc.mul(s)
                checks.append({"kind": kind, "index": i, "pred": shown, "ref": item, "score": s})
        elif key == "must_exclude":
            for item in spec:
                if OR_SEPARATOR in item:
                    raise TaskSpecError(f"{where}.required_contents.must_exclude': ' |OR| ' is not allowed")
                s = must_exclude(item, str(selected))
                acc.mul(s)
                checks.append({"kind": kind, "index": i, "pred": shown, "ref": item, "score": s})
        elif key == "required_values":
            _required_values(selected, spec, acc, checks, kind)
        elif key == "fuzzy_match":
            score, why = _ask(judge, fuzzy_match_messages(str(selected), ", ".join(spec), config.intent, semantics),
                              decide_fuzzy, checks, kind, pred=shown, ref=", ".join(spec))
            acc.mul(score, why)
    return acc.result(), "; ".join(w for w in acc.unknown if w)


def evaluate(config: WebArenaConfig, answer: str, page: Optional[PageReader] = None,
             semantics: Semantics = "webarena", judge: Optional[Judge] = None,
             sites: Optional[Mapping[str, str]] = None, http: Optional[HttpFn] = None,
             accounts: Optional[Mapping[str, Mapping[str, str]]] = None) -> EvalResult:
    """Score one finished episode.

    Args:
        config: the task, with site placeholders already resolved (tasks.resolve_sites).
        answer: the text of the agent's final ``stop [answer]`` ("" if it gave none).
        page: the page the agent ended on; required for url_match and program_html.
        semantics: ``"webarena"`` (original, default) or ``"webarena-lite"``.
        judge: LLM judge for fuzzy_match; without one such episodes are unscorable.
        sites: site key -> base URL, for ``func:`` helpers that call a site's API.
        http: how those helpers make requests (default :func:`funcs.http_json`).
        accounts: site accounts for them (default WebArena's published ones).

    Raises:
        TaskSpecError: the config uses something the chosen semantics does not define.
        ConfigError: unknown ``semantics``, no page for a page-based eval type, or site placeholders
            left unresolved in ``eval``.
        EnvInfraError: from the page reader or a site API (never scored).
    """
    if semantics not in SEMANTICS:
        raise ConfigError(f"evaluator: unknown semantics {semantics!r}; choose one of {list(SEMANTICS)}")
    ev = config.raw.get("eval", {})
    used = {"string_match": "reference_answers", "url_match": "reference_url", "program_html": "program_html"}
    left = sorted({p for t in config.eval.eval_types for p in PLACEHOLDER_RE.findall(json.dumps(ev.get(used[t])))})
    if left:
        raise ConfigError(f"evaluate: task {config.task_id} still has site placeholders {left} in 'eval'; "
                          "resolve them first with tasks.resolve_sites")
    checks: list[dict[str, Any]] = []
    total = _Product()
    for eval_type in config.eval.eval_types:
        if eval_type != "string_match" and page is None:
            raise ConfigError(f"evaluate: task {config.task_id} has eval type {eval_type!r}, which needs a page")
        if eval_type == "string_match":
            score, why = _string_match(config, answer, semantics, judge, checks)
        elif eval_type == "url_match":
            score, why = _url_match(config, page.url, semantics, checks), ""
        else:
            ctx = FuncContext(page=page, sites=dict(sites or {}), accounts=accounts or WEBARENA_ACCOUNTS,
                              http=http or http_json)
            score, why = _program_html(config, page, semantics, judge, ctx, checks)
        total.mul(score, why)
    result = total.result()
    reason = "" if result is not None else "; ".join(w for w in total.unknown if w) or "unscorable"
    return EvalResult(score=result, unscorable_reason=reason, checks=checks)
