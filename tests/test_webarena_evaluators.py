"""WebArena evaluators, case by case, in both published semantics.

Expected values come from reading the published code, cited as
  WA   = web-arena-x/webarena@f62e0b9 evaluation_harness/evaluators.py
  WAH  = web-arena-x/webarena@f62e0b9 evaluation_harness/helper_functions.py
  LITE = THUDM/VisualAgentBench@9055fc2 VAB-WebArena-Lite/new/evaluators.py
  LITEH= THUDM/VisualAgentBench@9055fc2 VAB-WebArena-Lite/new/helper_functions_eval.py
with line numbers. The page here is a scripted stand-in for the PageReader protocol (the JS runs
in real Chromium in test_webarena_funcs.py); these tests are about what the evaluators compute.
"""
from __future__ import annotations

from typing import Any

import pytest

from guigym.core.errors import ConfigError, EnvInfraError, TaskSpecError
from guigym.envs.web.webarena.evaluators import (
    clean_answer,
    compare_inequality,
    evaluate,
    exact_match,
    must_include,
)
from guigym.envs.web.webarena.tasks import parse_config

WA, LITE = "webarena", "webarena-lite"


def cfg(eval_: dict[str, Any], intent: str = "What is it?") -> Any:
    base = {"reference_answers": None, "reference_url": "", "program_html": [], "string_note": ""}
    return parse_config({"sites": ["shopping"], "task_id": 1, "start_url": "http://h/", "intent": intent,
                         "eval": {**base, **eval_}})


def answers(**ref: Any) -> Any:
    return cfg({"eval_types": ["string_match"], "reference_answers": ref})


class Page:
    """Scripted PageReader: ``scripts`` maps the exact script text to a value or an exception."""

    def __init__(self, url: str = "http://h/", content: str = "", scripts: dict[str, Any] | None = None):
        self.url, self._content, self.scripts = url, content, scripts or {}
        self.calls: list[tuple[str, str]] = []

    def goto(self, url: str) -> None:
        self.calls.append(("goto", url))
        self.url = url

    def content(self) -> str:
        self.calls.append(("content", ""))
        return self._content

    def evaluate(self, script: str) -> Any:
        self.calls.append(("evaluate", script))
        value = self.scripts.get(script, RuntimeError("ReferenceError: not scripted"))
        if isinstance(value, BaseException):
            raise value
        return value


class CountingJudge:
    def __init__(self, reply: str):
        self.reply, self.messages = reply, []

    def __call__(self, messages):
        self.messages.append(messages)
        return self.reply


def score(config, answer="", page=None, semantics=WA, judge=None):
    return evaluate(config, answer, page=page, semantics=semantics, judge=judge).score


# ----------------------------------------------------------------------------- clean_answer


def test_clean_answer_strips_in_webarena_only():
    # WA L80-87: strip, then one pair of outer quotes, then lower; LITE L149-154: no strip
    assert clean_answer('  "Hello" ', WA) == "hello"
    assert clean_answer('  "Hello" ', LITE) == '  "hello" '
    assert clean_answer("'Hi'", LITE) == "hi"
    assert clean_answer("'", WA) == ""  # startswith and endswith the same one quote -> [1:-1]
    assert clean_answer("\"'x'\"", WA) == "'x'"  # only one pair


def test_exact_match_whitespace_differs_between_semantics():
    # WA L90-95 cleans both sides with strip; Lite does not
    assert score(answers(exact_match="42"), " 42 ", semantics=WA) == 1.0
    assert score(answers(exact_match="42"), " 42 ", semantics=LITE) == 0.0
    assert score(answers(exact_match="Quest Lumaflex™ Band"), "quest lumaflex™ band") == 1.0


def test_webarena_cleans_the_answer_twice():
    # WA L134 cleans the answer, then exact_match (L90) cleans it again: two quote pairs go
    assert score(answers(exact_match="abc"), "\"'abc'\"", semantics=WA) == 1.0
    assert score(answers(exact_match="abc"), "\"'abc'\"", semantics=LITE) == 1.0  # LITE L217 + L160 too
    assert exact_match("abc", "\"'abc'\"", WA) == 0.0  # a single clean keeps the inner pair


# ----------------------------------------------------------------------------- must_include


def test_zero_vs_dollar_zero_trap_webarena_211():
    # WA L98-111 + L148: a one-item list whose item is one character is matched as a token
    one = answers(must_include=["0"])
    assert score(one, "$0.00") == 0.0  # tokens: "$", "0.00"
    assert score(one, "The total is 0.") == 1.0  # tokens: ..., "0", "."
    assert score(one, "0") == 1.0
    # ... but with two items tokenize=False and the trap is back (substring)
    two = answers(must_include=["0", "5"])
    assert score(two, "$0.00 or 5") == 1.0
    # Lite (L168-181) tokenises every single-token reference, whatever the list length
    assert score(two, "$0.00 or 5", semantics=LITE) == 0.0
    assert score(two, "0 or 5", semantics=LITE) == 1.0


def test_multi_character_single_token_reference():
    # WA tokenises only len(clean_ref) == 1 (L105); Lite any single token (L172)
    ref = answers(must_include=["12"])
    assert score(ref, "1234", semantics=WA) == 1.0
    assert score(ref, "1234", semantics=LITE) == 0.0
    assert score(ref, "it is 12", semantics=LITE) == 1.0


def test_lite_matches_slash_pieces():
    # LITE L175-178: tokens containing "/" also contribute their pieces
    ref = answers(must_include=["a"])
    assert score(ref, "a/b", semantics=LITE) == 1.0
    assert score(ref, "a/b", semantics=WA) == 0.0  # WA tokens: ["a/b"]
    assert must_include("b", "see a/b/c", LITE) == 1.0


def test_or_alternatives_only_in_lite_string_match():
    # LITE L241-245 splits " |OR| "; WA L142-149 does not (the literal text must occur)
    ref = answers(must_include=["cat |OR| dog"])
    assert score(ref, "a dog", semantics=LITE) == 1.0
    assert score(ref, "a dog", semantics=WA) == 0.0
    assert score(ref, "A cat |or| dog", semantics=WA) == 1.0


def test_multi_word_reference_is_a_substring_in_both():
    ref = answers(must_include=["Sprite Stasis Ball 65 cm"])
    for sem in (WA, LITE):
        assert score(ref, "I'd say sprite stasis ball 65 cm!", semantics=sem) == 1.0
        assert score(ref, "Sprite Stasis Ball 55 cm", semantics=sem) == 0.0


def test_lite_single_string_must_include_is_one_item():
    # Lite task 81 has must_include: "yjlou"; LITE L242 asserts a list (crash); we read [value]
    assert score(answers(must_include="yjlou"), "The user is yjlou", semantics=LITE) == 1.0
    assert score(answers(must_include="yjlou"), "nobody", semantics=LITE) == 0.0


# ----------------------------------------------------------------------------- Lite-only keys


def test_lite_must_exclude_and_one_of():
    # LITE L185-196 must_exclude (tokenised for single tokens); L252-261 one_of (substring)
    excl = answers(must_exclude=["0"])
    assert score(excl, "10 items", semantics=LITE) == 1.0
    assert score(excl, "0 items", semantics=LITE) == 0.0
    one_of = answers(one_of=["Red", "Blue"])
    assert score(one_of, "blue-ish", semantics=LITE) == 1.0
    assert score(one_of, "green", semantics=LITE) == 0.0


def test_lite_keys_are_refused_by_webarena_semantics():
    with pytest.raises(TaskSpecError, match="reference_answers.one_of"):
        evaluate(answers(one_of=["a"]), "a", semantics=WA)


def test_required_values_comparisons():
    # LITE L108-133: ops tried in order <=, >=, ==, <, >; each widened by tol=1e-8
    assert compare_inequality(700, "< 700") is True  # 700 < 700 + 1e-8
    assert compare_inequality(701, "< 700") is False
    assert compare_inequality(5.000000001, "== 5") is True
    assert compare_inequality(299, ">= 300") is False
    with pytest.raises(TaskSpecError, match="invalid inequality"):
        compare_inequality(1, "about 5")
    rv = answers(required_values=["> 1000 |OR| == 0"])
    assert score(rv, "1,200", semantics=LITE) == 1.0  # L94-104: commas dropped
    assert score(rv, "0", semantics=LITE) == 1.0
    assert score(rv, "999", semantics=LITE) == 0.0
    assert score(rv, "$1200", semantics=LITE) == 0.0  # not an int -> score = 0.0 (L228-229)
    assert score(rv, " 2000 ", semantics=LITE) == 1.0  # str_2_int strips


# ----------------------------------------------------------------------------- fuzzy / N/A


def test_fuzzy_without_judge_is_unscorable_never_0_or_1():
    res = evaluate(answers(fuzzy_match=["no airport nearby"]), "There is none")
    assert res.score is None and res.unscorable
    assert "judge" in res.unscorable_reason


def test_fuzzy_decision_rules_and_unfit_reply():
    ref = answers(fuzzy_match=["x"])
    # WAH L169-173: "partially correct"/"incorrect" -> 0, else "correct" -> 1, else assert (crash)
    assert score(ref, "y", judge=CountingJudge("Correct.")) == 1.0
    assert score(ref, "y", judge=CountingJudge("This is INCORRECT")) == 0.0
    assert score(ref, "y", judge=CountingJudge("partially correct")) == 0.0
    unfit = evaluate(ref, "y", judge=CountingJudge("I am not sure"))
    assert unfit.score is None and "fits no rule" in unfit.unscorable_reason


def test_judge_failure_is_unscorable():
    def broken(_messages):
        raise TimeoutError("judge timed out")

    res = evaluate(answers(fuzzy_match=["x"]), "y", judge=broken)
    assert res.score is None and "timed out" in res.unscorable_reason


def test_fuzzy_references_one_call_each_vs_joined():
    ref = answers(fuzzy_match=["Harry Potter", "July 8th"])
    wa, lite = CountingJudge("correct"), CountingJudge("correct")
    evaluate(ref, "It is Harry", judge=wa, semantics=WA)
    evaluate(ref, "It is Harry", judge=lite, semantics=LITE)
    # WA L165-170: one judge call per reference; LITE L277: references joined with ", "
    assert len(wa.messages) == 2 and len(lite.messages) == 1
    assert "reference answer: Harry Potter, July 8th\n" in lite.messages[0][1]["content"]
    # the student answer is the cleaned (lower-cased) one (WA L134)
    assert "student answer: it is harry\n" in wa.messages[0][1]["content"]
    # WAH L155 vs LITEH L591: the closing instruction differs
    assert wa.messages[0][1]["content"].endswith("Conclude the judgement by correct/incorrect/partially correct.")
    assert lite.messages[0][1]["content"].endswith("Only output one of these options, and nothing else.")
    assert wa.messages[0][0] == {"role": "system", "content": "You are a helpful assistant"}


def test_na_exact_answer_needs_no_judge():
    # WA L150-164: "N/A" answered exactly scores 1 without the judge
    na = cfg({"eval_types": ["string_match"], "reference_answers": {"fuzzy_match": "N/A"},
              "string_note": "the product does not exist"})

    def must_not_be_called(_m):
        raise AssertionError("judge called")

    assert score(na, " N/A ", judge=must_not_be_called) == 1.0
    assert score(na, "'n/a'", judge=must_not_be_called) == 1.0


def test_na_with_reason_goes_to_ua_judge():
    na = cfg({"eval_types": ["string_match"], "reference_answers": {"fuzzy_match": "N/A"},
              "string_note": "the product does not exist"}, intent="Buy the blue gizmo")
    same, different = CountingJudge("Same."), CountingJudge("different")
    assert score(na, "N/A: there is no such product", judge=same) == 1.0
    assert score(na, "N/A: the site is down", judge=different) == 0.0
    text = same.messages[0][1]["content"]
    # WAH L176-190: the ua_match prompt carries the intent, the note and the (cleaned) answer
    assert text.startswith("task: Buy the blue gizmo\nactual unachievable reason: the product does not exist\n"
                           "reported unachievable reason: n/a: there is no such product\n")
    # visualwebarena#40: an unexpected reply used to crash on assert; here it is unscorable
    res = evaluate(na, "n/a because", judge=CountingJudge("n/a"))
    assert res.score is None
    assert evaluate(na, "n/a because").score is None  # no judge


def test_unscorable_even_when_another_factor_is_zero():
    # WA L336-352 (EvaluatorComb) multiplies evaluator scores, but a judge failure raises before that (WAH L172 assert):
    # the episode has no score at all, so it is unscorable, not 0
    c = cfg({"eval_types": ["string_match", "url_match"], "reference_answers": {"fuzzy_match": ["x"]},
             "reference_url": "http://h/wanted"})
    assert evaluate(c, "y", page=Page(url="http://h/other")).score is None
    assert evaluate(c, "y", page=Page(url="http://h/other"), judge=CountingJudge("correct")).score == 0.0
    # each reference is judged, so an unfit second reply is unscorable although the first said 0
    replies = iter(["incorrect", "no idea"])
    two = answers(fuzzy_match=["x", "y"])
    assert evaluate(two, "z", judge=lambda m: next(replies)).score is None


# ----------------------------------------------------------------------------- url_match


def url_cfg(ref: str, note: str | None = None) -> Any:
    e = {"eval_types": ["url_match"], "reference_url": ref}
    if note:
        e["url_note"] = note
    return cfg(e)


def test_url_substring_false_positive_pr77():
    # WA L216-226: netloc+path of GOLD is a substring of PRED's -> 1 even on another page
    c = url_cfg("http://h/f/books", "GOLD in PRED")
    assert score(c, page=Page(url="http://h/f/books_and_more"), semantics=WA) == 1.0
    # Lite with no url_note is EXACT (L330-333)
    assert score(url_cfg("http://h/f/books"), page=Page(url="http://h/f/books_and_more"), semantics=LITE) == 0.0
    assert score(url_cfg("http://h/f/books"), page=Page(url="http://h/f/books/"), semantics=LITE) == 1.0


def test_url_query_keys_pooled_over_or_alternatives():
    # WA L194-236: queries of all alternatives merged per key; every key must have some value
    c = url_cfg("http://h/search?q=a |OR| http://h/search?q=b&sort=new")
    assert score(c, page=Page(url="http://h/search?q=b&sort=new&page=2")) == 1.0
    assert score(c, page=Page(url="http://h/search?q=a&sort=new")) == 1.0  # pooled: q=a from one, sort from other
    assert score(c, page=Page(url="http://h/search?q=a")) == 0.0  # sort missing
    assert score(c, page=Page(url="http://h/search?q=c&sort=new")) == 0.0


def test_url_trailing_slash_and_localhost():
    assert score(url_cfg("http://h/x/"), page=Page(url="http://h/x")) == 1.0  # WA L187-190 rstrip("/")
    # the strip runs on the whole URL, so a slash after the query goes before parse_qs sees it
    assert score(url_cfg("http://h/s?q=a"), page=Page(url="http://h/s?q=a/")) == 1.0
    c = url_cfg("http://localhost:7770/x")
    # LITE L322: localhost -> 127.0.0.1 on both sides; WA compares netlocs as they are
    assert score(c, page=Page(url="http://127.0.0.1:7770/x/"), semantics=LITE) == 1.0
    assert score(c, page=Page(url="http://127.0.0.1:7770/x/"), semantics=WA) == 0.0


def test_lite_gold_in_pred_is_a_whole_url_substring():
    # LITE L336-340: plain substring on the whole cleaned URL, query included
    c = url_cfg("http://h/search?q=a", "GOLD in PRED")
    assert score(c, page=Page(url="http://h/search?q=ab"), semantics=LITE) == 1.0
    assert score(c, page=Page(url="http://h/search?x=1&q=a"), semantics=LITE) == 0.0
    assert score(c, page=Page(url="http://h/search?x=1&q=a"), semantics=WA) == 1.0


def test_url_match_needs_a_page():
    with pytest.raises(ConfigError, match="needs a page"):
        evaluate(url_cfg("http://h/x"), "")


# ----------------------------------------------------------------------------- program_html


def html_cfg(*targets: dict[str, Any], types=("program_html",), **extra: Any) -> Any:
    return cfg({"eval_types": list(types), "program_html": list(targets), **extra})


LOC = "document.querySelector('#v').value"


def test_html_unescape_only_in_webarena():
    # WA L303 unescapes the selected text; Lite has no such line
    c = html_cfg({"url": "last", "locator": "", "required_contents": {"must_include": ["Tom & Jerry"]}})
    page = Page(content="<p>Tom &amp; Jerry</p>")
    assert score(c, page=page, semantics=WA) == 1.0
    assert score(c, page=page, semantics=LITE) == 0.0


def test_js_value_is_stringified_like_python_str():
    # WA L289: str(page.evaluate(...)); a number 0 is "0", null is "None"
    c = html_cfg({"url": "last", "locator": LOC, "required_contents": {"exact_match": "0"}})
    assert score(c, page=Page(scripts={f"() => {LOC}": 0})) == 1.0
    c2 = html_cfg({"url": "last", "locator": LOC, "required_contents": {"exact_match": "None"}})
    assert score(c2, page=Page(scripts={f"() => {LOC}": None})) == 1.0
    # exact_match on page text strips in WA only
    c3 = html_cfg({"url": "last", "locator": LOC, "required_contents": {"exact_match": "20"}})
    assert score(c3, page=Page(scripts={f"() => {LOC}": " 20 "}), semantics=WA) == 1.0
    assert score(c3, page=Page(scripts={f"() => {LOC}": " 20 "}), semantics=LITE) == 0.0


def test_script_error_reads_as_empty_but_infra_error_propagates():
    c = html_cfg({"url": "last", "locator": LOC, "required_contents": {"must_include": ["x"]}})
    assert score(c, page=Page()) == 0.0  # WA L288-294: exception -> ""
    with pytest.raises(EnvInfraError):
        evaluate(c, "", page=Page(scripts={f"() => {LOC}": EnvInfraError("browser died")}))


def test_program_html_or_and_substring():
    # WA L312-327 / LITE L427-439: " |OR| " alternatives in required_contents.must_include
    c = html_cfg({"url": "last", "locator": "", "required_contents": {"must_include": ["foo |OR| bar", "baz"]}})
    for sem in (WA, LITE):
        assert score(c, page=Page(content="bar baz"), semantics=sem) == 1.0
        assert score(c, page=Page(content="bar"), semantics=sem) == 0.0
    # WA program_html uses tokenize=False: "0" is found inside "$0.00"; Lite tokenises
    z = html_cfg({"url": "last", "locator": "", "required_contents": {"must_include": ["0"]}})
    assert score(z, page=Page(content="$0.00"), semantics=WA) == 1.0
    assert score(z, page=Page(content="$0.00"), semantics=LITE) == 0.0


def test_prep_actions_run_first_and_stop_at_first_failure():
    c = html_cfg({"url": "last", "locator": LOC, "prep_actions": ["a()", "b()", "c()"],
                  "required_contents": {"exact_match": "ok"}})
    page = Page(scripts={"() => a()": None, "() => b()": RuntimeError("TypeError"), "() => c()": None,
                         f"() => {LOC}": "ok"})
    assert score(c, page=page) == 1.0
    assert [s for k, s in page.calls if k == "evaluate"] == ["() => a()", "() => b()", f"() => {LOC}"]


def test_target_urls_last_explicit_and_func():
    c = html_cfg(
        {"url": "last", "locator": "", "required_contents": {"must_include": ["here"]}},
        {"url": "http://h/other", "locator": "", "required_contents": {"must_include": ["here"]}},
        {"url": "func:reddit_get_post_url('__last_url__')", "locator": "",
         "required_contents": {"must_include": ["here"]}},
    )
    page = Page(url="http://h/f/books/42/my-title/-/comment/7", content="here")
    assert score(c, page=page) == 1.0
    # "last" stays; the explicit URL is visited; __last_url__ is the page's URL at that moment
    assert [u for k, u in page.calls if k == "goto"] == ["http://h/other", "http://h/other"]
    page2 = Page(url="http://h/f/books/42/my-title/-/comment/7", content="here")
    one = html_cfg({"url": "func:reddit_get_post_url('__last_url__')", "locator": "",
                    "required_contents": {"must_include": ["here"]}})
    evaluate(one, "", page=page2)
    assert page2.calls[0] == ("goto", "http://h/f/books/42/")


def test_lite_lambda_none_stops_and_scores_zero():
    # LITE L402-423: a falsy lambda: value -> None -> score 0 and the loop breaks
    c = html_cfg({"url": "last", "locator": "lambda:() => window.missing", "required_contents": {"exact_match": ""}},
                 {"url": "last", "locator": LOC, "required_contents": {"exact_match": "x"}})
    page = Page(scripts={"() => window.missing": None, f"() => {LOC}": "x"})
    assert score(c, page=page, semantics=LITE) == 0.0
    assert ("evaluate", f"() => {LOC}") not in page.calls
    with pytest.raises(TaskSpecError, match="lambda"):
        evaluate(c, "", page=Page(), semantics=WA)


def test_lite_required_contents_extras():
    rv = html_cfg({"url": "last", "locator": LOC, "required_contents": {"required_values": [">= 3"]}})
    assert score(rv, page=Page(scripts={f"() => {LOC}": "4"}), semantics=LITE) == 1.0
    assert score(rv, page=Page(scripts={f"() => {LOC}": "two"}), semantics=LITE) == 0.0
    ex = html_cfg({"url": "last", "locator": "", "required_contents": {"must_exclude": ["spam"]}})
    assert score(ex, page=Page(content="ham and eggs"), semantics=LITE) == 1.0
    assert score(ex, page=Page(content="spam and eggs"), semantics=LITE) == 0.0
    fz = html_cfg({"url": "last", "locator": "", "required_contents": {"fuzzy_match": ["refund", "12.99"]}})
    judge = CountingJudge("correct")
    assert score(fz, page=Page(content="<p>Refund 12.99</p>"), semantics=LITE, judge=judge) == 1.0
    assert "reference answer: refund, 12.99\n" in judge.messages[0][1]["content"]
    assert evaluate(fz, "", page=Page(content="x"), semantics=LITE).score is None
    with pytest.raises(TaskSpecError, match="required_contents.fuzzy_match"):
        evaluate(fz, "", page=Page(content="x"), semantics=WA)


def test_eval_types_multiply():
    c = html_cfg({"url": "last", "locator": "", "required_contents": {"must_include": ["done"]}},
                 types=("url_match", "program_html"), reference_url="http://h/orders")
    assert score(c, page=Page(url="http://h/orders", content="done")) == 1.0
    assert score(c, page=Page(url="http://h/orders", content="nope")) == 0.0
    assert score(c, page=Page(url="http://h/cart", content="done")) == 0.0


def test_unknown_semantics_is_a_config_error():
    with pytest.raises(ConfigError, match="semantics"):
        evaluate(answers(exact_match="a"), "a", semantics="browsergym")


# ----------------------------------------------------------------------------- tokenisation


def test_tokenizer_needs_no_nltk_data(monkeypatch):
    """word_tokenize must work with no punkt data installed (CI cannot download it)."""
    import nltk.data

    from guigym.envs.web.webarena import tokens as tokenize

    def no_data(*args, **kwargs):
        raise LookupError("Resource punkt_tab not found")

    monkeypatch.setattr(nltk.data, "find", no_data)
    monkeypatch.setattr(nltk.data, "load", no_data)
    tokenize._tokenizers.cache_clear()
    # expected tokens are those of nltk.word_tokenize with the English punkt model
    assert tokenize.word_tokenize("$0.00") == ["$", "0.00"]
    assert tokenize.word_tokenize("The total is 0.") == ["The", "total", "is", "0", "."]
    assert tokenize.word_tokenize("It is 3. Next one") == ["It", "is", "3", ".", "Next", "one"]
    assert tokenize.word_tokenize("see a/b, then c") == ["see", "a/b", ",", "then", "c"]
    assert tokenize.word_tokenize("it's 1,200 items!") == ["it", "'s", "1,200", "items", "!"]
    assert tokenize.word_tokenize('"n/a"') == ["``", "n/a", "''"]


def test_unresolved_site_placeholder_is_refused():
    c = cfg({"eval_types": ["url_match"], "reference_url": "__REDDIT__/forums"})
    with pytest.raises(ConfigError, match="__REDDIT__"):
        evaluate(c, "", page=Page(url="http://h/__REDDIT__/forums"))


def test_openai_compatible_judge_over_http(monkeypatch):
    """OpenAIJudge against a local chat-completions endpoint (stand-in for `vllm serve` / OpenAI)."""
    import json as _json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from guigym.envs.web.webarena.evaluators import OpenAIJudge

    seen = []

    class Chat(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            body = _json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, self.headers.get("Authorization"), body))
            status, reply = (200, {"choices": [{"message": {"content": "Correct"}}]}) \
                if body["messages"][1]["content"].count("student answer: good") else (500, {"error": "boom"})
            data = _json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Chat)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("JUDGE_KEY", "sk-test")
        judge = OpenAIJudge(base_url=f"http://127.0.0.1:{server.server_address[1]}/v1", model="m",
                            api_key_env="JUDGE_KEY")
        ref = answers(fuzzy_match=["x"])
        assert evaluate(ref, "good", judge=judge).score == 1.0
        path, auth, body = seen[0]
        assert path == "/v1/chat/completions" and auth == "Bearer sk-test"
        # WAH L160-167: temperature 0, top_p 1, max_tokens 768
        assert (body["model"], body["temperature"], body["top_p"], body["max_tokens"]) == ("m", 0, 1.0, 768)
        bad = evaluate(ref, "bad", judge=judge)  # HTTP 500 from the judge: unscorable, not 0
        assert bad.score is None and "judge failed" in bad.unscorable_reason
    finally:
        server.shutdown()
        server.server_close()
