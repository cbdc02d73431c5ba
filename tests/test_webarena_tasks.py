"""WebArena task configs: the 812 public tasks and the 165 WebArena-Lite tasks load unmodified,
resolve their site placeholders, and every eval feature they use has an implementation."""
from __future__ import annotations

import gzip
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from guigym.core.errors import ConfigError, TaskSpecError
from guigym.envs.web.webarena.evaluators import evaluate
from guigym.envs.web.webarena.funcs import HELPERS, parse_func
from guigym.envs.web.webarena.tasks import (
    load_configs,
    parse_config,
    resolve_sites,
    site_urls_from_env,
    to_task,
)

FIX = Path(__file__).parent / "fixtures" / "webarena"
WA_FILE = FIX / "test.raw.json.gz"
LITE_FILE = FIX / "test_webarena_lite.raw.json.gz"
SITES = {"shopping": "http://shop.test:7770", "shopping_admin": "http://admin.test:7780/admin",
         "reddit": "http://forum.test:9999", "gitlab": "http://git.test:8023", "map": "http://map.test:3000",
         "wikipedia": "http://wiki.test:8888", "homepage": "http://home.test:4399"}


@pytest.fixture(scope="module")
def wa():
    return load_configs(WA_FILE)


@pytest.fixture(scope="module")
def lite():
    return load_configs(LITE_FILE)


def test_fixtures_are_the_published_files():
    readme = (FIX / "README.md").read_text()
    for path in (WA_FILE, LITE_FILE):
        digest = hashlib.sha256(gzip.decompress(path.read_bytes())).hexdigest()
        assert digest in readme, f"{path.name} differs from the published file recorded in README.md"


def test_all_configs_load_unmodified(wa, lite):
    assert len(wa) == 812 and len(lite) == 165
    assert [c.task_id for c in wa] == list(range(812))
    assert [c.task_id for c in lite] == list(range(165))
    raw = json.loads(gzip.decompress(WA_FILE.read_bytes()))
    assert [c.raw for c in wa] == raw  # nothing changed on load
    assert wa[0].intent == "What is the top-1 best-selling product in 2022"
    assert wa[0].instantiation_dict == {"n": 1, "year": 2022}
    assert lite[0].model_extra["old_task_id"] == 4  # Lite's extra field is kept


def test_multi_tab_start_urls(wa):
    multi = [c for c in wa if len(c.start_urls) > 1]
    assert len(multi) == 5
    resolved = resolve_sites(multi[0], SITES)
    assert len(resolved.start_urls) == len(multi[0].start_urls) >= 2
    assert all(u.startswith("http://shop.test:7770/") for u in resolved.start_urls)


def _func_texts(configs) -> list[tuple[str, str]]:
    out = []
    for c in configs:
        for i, t in enumerate(c.eval.program_html):
            for fld in ("url", "locator"):
                text = getattr(t, fld)
                if text.startswith("func"):
                    out.append((f"task {c.task_id} program_html[{i}].{fld}", text))
    return out


def test_every_func_in_the_configs_parses_to_a_registered_helper(wa, lite):
    texts = _func_texts(wa) + _func_texts(lite)
    assert len(texts) >= 100
    names = {parse_func(text, where).name for where, text in texts}
    assert names == {"reddit_get_post_url", "shopping_get_latest_order_url", "gitlab_get_project_memeber_role",
                     "shopping_get_sku_latest_review_author", "shopping_get_sku_latest_review_rating"}
    assert names <= set(HELPERS)


class NullPage:
    """A page on which nothing is found: every locator throws, the HTML is empty."""

    url = "http://shop.test:7770/"

    def goto(self, url: str) -> None:
        self.url = url

    def content(self) -> str:
        return ""

    def evaluate(self, script: str) -> Any:
        raise RuntimeError("ReferenceError")


def _no_site_api(method, url, body, headers):
    # the REST helpers are exercised against a real HTTP server in test_webarena_funcs.py
    if url.endswith("/integration/admin/token"):
        return "tok"
    if "/rest/V1/orders" in url:
        return {"items": [{"increment_id": "000000170"}]}
    return []


def _judge(messages) -> str:
    # answers both of WebArena's prompts with a verdict its rules accept
    return "different" if "unachievable reason" in messages[1]["content"] else "incorrect"


@pytest.mark.parametrize("semantics,which", [("webarena", "wa"), ("webarena-lite", "lite")])
def test_every_config_evaluates_end_to_end(semantics, which, request):
    """Walk every task through its evaluator: every eval type, answer key, locator kind and helper
    has an implementation (nothing raises), and with a judge every task gets a score in {0, 1}."""
    configs = request.getfixturevalue(which)
    kinds = set()
    for c in configs:
        r = resolve_sites(c, SITES)
        res = evaluate(r, "some answer", page=NullPage(), semantics=semantics, judge=_judge,
                       sites=SITES, http=_no_site_api)
        assert res.score in (0.0, 1.0), (c.task_id, res)
        kinds.update(ch["kind"] for ch in res.checks)
    # the walk really went through each kind the configs use
    expected = {"url_match", "string_match.exact_match", "string_match.must_include",
                "string_match.fuzzy_match", "program_html.exact_match", "program_html.must_include"}
    assert expected <= kinds


def test_webarena_semantics_on_lite_configs_names_the_lite_feature(lite):
    lite_only = [c for c in lite if any("fuzzy_match" in t.required_contents for t in c.eval.program_html)]
    assert len(lite_only) == 4
    with pytest.raises(TaskSpecError, match="fuzzy_match"):
        evaluate(resolve_sites(lite_only[0], SITES), "", page=NullPage(), semantics="webarena")


def test_placeholders_from_env_and_explicit_urls(wa):
    c = wa[0]  # start_url "__SHOPPING_ADMIN__"
    env = {"WA_SHOPPING_ADMIN": "http://env-admin:1/", "WA_SHOPPING": "http://env-shop:2"}
    assert site_urls_from_env(env) == {"shopping_admin": "http://env-admin:1", "shopping": "http://env-shop:2"}
    assert resolve_sites(c, environ=env).start_url == "http://env-admin:1"
    assert resolve_sites(c, {"shopping_admin": "http://kw:3"}, environ=env).start_url == "http://kw:3"
    assert c.start_url == "__SHOPPING_ADMIN__"  # the loaded config is not changed
    html_task = next(x for x in wa if x.eval.program_html and "__GITLAB__" in json.dumps(x.raw["eval"]))
    resolved = resolve_sites(html_task, SITES)
    assert "__GITLAB__" not in json.dumps(resolved.raw) and "http://git.test:8023" in json.dumps(resolved.raw)
    assert not re.search(r"__[A-Z_]+__", json.dumps(resolved.raw))


def test_missing_or_unknown_site_url_is_a_config_error(wa):
    with pytest.raises(ConfigError, match=r"WA_SHOPPING_ADMIN"):
        resolve_sites(wa[0], environ={})
    with pytest.raises(ConfigError, match="unknown site key"):
        resolve_sites(wa[0], {"shop": "http://x"}, environ={})


def test_every_config_becomes_a_task(wa, lite):
    tasks = [to_task(resolve_sites(c, SITES), suite=s) for cs, s in ((wa, "webarena"), (lite, "webarena-lite"))
             for c in cs]
    assert len({t.id for t in tasks}) == 812 + 165
    assert all(t.extra["webarena_config"]["start_url"].startswith("http://") for t in tasks)


def test_to_task(wa):
    t = to_task(wa[3], suite="webarena", source=str(WA_FILE))
    assert t.id == "webarena.3" and t.platform == "web" and t.instruction == wa[3].intent
    assert t.extra["webarena_config"] == wa[3].raw and t.domain == "shopping_admin"


GOOD = {"sites": ["reddit"], "task_id": 7, "start_url": "__REDDIT__", "intent": "Open the forum",
        "eval": {"eval_types": ["url_match"], "reference_answers": None, "reference_url": "__REDDIT__/forums",
                 "program_html": []}}


def _bad(path: str, value: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(GOOD))
    node = data
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    if value is _DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return data


_DELETE = object()
_HTML = [{"url": "last", "locator": "", "required_contents": {"must_include": ["x"]}}]


@pytest.mark.parametrize("path,value,field", [
    ("eval.eval_types", ["string_mtch"], "eval.eval_types.0"),
    ("intent", _DELETE, "intent"),
    ("task_id", "seven", "task_id"),
    ("sites", ["ebay"], "sites.0"),
    ("eval.url_note", "SIMILAR", "eval.url_note"),
    ("eval.reference_url", "", "eval"),
    ("eval.eval_types", ["string_match"], "eval"),
    ("eval.reference_answers", {"regex": "a+"}, "eval.reference_answers"),
    ("eval.reference_answers", {"exact_match": ["a"]}, "eval.reference_answers"),
    ("eval.program_html", [{"url": "last", "locator": "window.x", "required_contents": {"must_include": ["x"]}}],
     "eval.program_html.0.locator"),
    ("eval.program_html", [{**_HTML[0], "required_contents": {"must_include": ["x"], "exact_match": "x"}}],
     "eval.program_html.0.required_contents"),
    ("eval.program_html", [{**_HTML[0], "locatr": ""}], "eval.program_html.0.locatr"),
])
def test_bad_config_names_the_field(path, value, field):
    with pytest.raises(TaskSpecError) as info:
        parse_config(_bad(path, value), source="tasks.json", index=3)
    assert f"tasks.json[3]: field '{field}'" in str(info.value)


def test_bad_files(tmp_path):
    p = tmp_path / "broken.json"
    p.write_text("{not json")
    with pytest.raises(TaskSpecError, match="broken.json"):
        load_configs(p)
    p.write_text(json.dumps([GOOD, GOOD]))
    with pytest.raises(TaskSpecError, match=r"\[1\]: field 'task_id': 7 repeats"):
        load_configs(p)
    p.write_text(json.dumps(GOOD))  # one generated config file (config_files/<id>.json)
    assert load_configs(p)[0].task_id == 7


@pytest.mark.parametrize("semantics,which", [("webarena", "wa"), ("webarena-lite", "lite")])
def test_reference_answers_score_one(semantics, which, request):
    """The annotated answer itself passes every exact_match / must_include string task."""
    n = 0
    for c in request.getfixturevalue(which):
        ra = c.eval.reference_answers or {}
        if c.eval.eval_types != ["string_match"] or set(ra) - {"exact_match", "must_include"}:
            continue
        if "exact_match" in ra:
            answer = ra["exact_match"]
        else:
            items = [ra["must_include"]] if isinstance(ra["must_include"], str) else ra["must_include"]
            answer = " , ".join(i.split(" |OR| ")[0] if semantics == "webarena-lite" else i for i in items)
        assert evaluate(c, answer, semantics=semantics).score == 1.0, (c.task_id, answer)
        n += 1
    assert n >= (150 if which == "wa" else 30)
