"""``func:`` helpers of WebArena's program_html: parsed with ast (never eval'd), and each helper
does what WebArena's published helper does (web-arena-x/webarena@f62e0b9
evaluation_harness/helper_functions.py, "WAH" below).

The page-side parts run in real Chromium (Debian's /usr/bin/chromium via Playwright) through a
small PageReader adapter. The Magento REST calls go to a local HTTP server that answers WebArena's
endpoints (a stand-in for the Magento site, which cannot run here)."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from guigym.core.errors import EnvInfraError, TaskSpecError
from guigym.envs.web.webarena.evaluators import evaluate
from guigym.envs.web.webarena.funcs import FuncContext, parse_func
from guigym.envs.web.webarena.tasks import parse_config


class UrlOnly:
    def __init__(self, url: str):
        self.url = url


def run(text: str, page: Any = None, **ctx: Any) -> Any:
    return parse_func(text).run(FuncContext(page=page or UrlOnly("http://h/"), **ctx))


# ----------------------------------------------------------------------------- no eval, ever


@pytest.mark.parametrize("text", [
    "func:__import__('os').system('touch {marker}')",
    "func:reddit_get_post_url(__import__('os').system('touch {marker}'))",
    "func:reddit_get_post_url(open('{marker}', 'w').write('x'))",
    "func:(lambda: __import__('os').system('touch {marker}'))()",
    "func:reddit_get_post_url('a') or __import__('os').system('touch {marker}')",
    "func:reddit_get_post_url('a'); __import__('os').system('touch {marker}')",
    "func:reddit_get_post_url.__globals__['os'].system('touch {marker}')",
    "func:exec('import os; os.system(\"touch {marker}\")')",
    "func:reddit_get_post_url(url=__page__.evaluate('1'))",
])
def test_task_text_is_never_executed(text, tmp_path):
    marker = tmp_path / "pwned"
    text = text.format(marker=marker)
    with pytest.raises(TaskSpecError):
        parse_func(text, "task 1 program_html[0].url")
    # the same text through a task file: refused at load time, nothing runs
    task = {"sites": ["reddit"], "task_id": 1, "start_url": "http://h/", "intent": "x",
            "eval": {"eval_types": ["program_html"],
                     "program_html": [{"url": text, "locator": "", "required_contents": {"must_include": ["x"]}}]}}
    with pytest.raises(TaskSpecError, match=r"field 'eval.program_html.0.url'"):
        parse_config(task, "tasks.json", 0)
    assert not marker.exists()


def test_unknown_helper_and_bad_arity_are_named():
    with pytest.raises(TaskSpecError, match="unknown helper 'shopping_get_order_total'"):
        parse_func("func:shopping_get_order_total('x')", "where")
    with pytest.raises(TaskSpecError, match="shopping_get_latest_order_url"):
        parse_func("func:shopping_get_latest_order_url('extra')")
    with pytest.raises(TaskSpecError, match="where: not a valid call"):
        parse_func("func:reddit_get_post_url(", "where")


# ----------------------------------------------------------------------------- reddit_get_post_url


@pytest.mark.parametrize("url,expected", [
    # WAH L97-112: /f/<forum>/<id>/... -> scheme://host/f/<forum>/<id>/ ; others unchanged
    ("http://h:9999/f/books/59421/friendly-reminder/-/comment/1234", "http://h:9999/f/books/59421/"),
    ("http://h:9999/f/books/59421", "http://h:9999/f/books/59421/"),
    ("http://h:9999/f/books", "http://h:9999/f/books"),
    ("http://h:9999/u/alice/posts/1", "http://h:9999/u/alice/posts/1"),
    ("http://h:9999/", "http://h:9999/"),
])
def test_reddit_get_post_url(url, expected):
    assert run("func:reddit_get_post_url('__last_url__')", UrlOnly(url)) == expected


def test_last_url_with_a_quote_stays_data():
    # WAH's textual replace would put the quote inside the eval'd literal; here it is just data
    url = "http://h/f/books/1/it's-a-title"
    assert run("func:reddit_get_post_url('__last_url__')", UrlOnly(url)) == "http://h/f/books/1/"


# ----------------------------------------------------------------------------- Magento REST stand-in


class Magento(BaseHTTPRequestHandler):
    TOKEN = "admin-token-1"
    reviews: dict[str, list[dict[str, Any]]] = {}
    orders = [{"increment_id": "000000190", "created_at": "2023-05-01"},
              {"increment_id": "000000171", "created_at": "2023-01-01"}]
    seen: list[str] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/rest/default/V1/integration/admin/token" and body == {"username": "admin",
                                                                                "password": "admin1234"}:
            return self._send(200, self.TOKEN)
        self._send(401, {"message": "bad credentials"})

    def do_GET(self) -> None:
        self.seen.append(self.path)
        if self.headers.get("Authorization") != f"Bearer {self.TOKEN}":
            return self._send(401, {"message": "unauthorized"})
        path = urlparse(self.path)
        if path.path == "/rest/V1/orders":
            q = parse_qs(path.query)
            assert q["searchCriteria[sortOrders][0][direction]"] == ["DESC"]
            items = sorted(self.orders, key=lambda o: o["created_at"], reverse=True)
            return self._send(200, {"items": items[: int(q["searchCriteria[pageSize]"][0])]})
        if path.path.startswith("/rest/V1/products/") and path.path.endswith("/reviews"):
            sku = path.path.split("/")[4]
            return self._send(200, self.reviews.get(sku, []))
        self._send(404, {"message": "no route"})


@pytest.fixture(scope="module")
def shop():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Magento)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def review(nick: str, percent: int) -> dict[str, Any]:
    return {"nickname": nick, "ratings": [{"rating_name": "Rating", "percent": percent}]}


def test_shopping_latest_order_url(shop):
    # WAH L38-59: newest order by created_at, customer URL with the int of increment_id
    assert run("func:shopping_get_latest_order_url()", sites={"shopping": shop}) == \
        f"{shop}/sales/order/view/order_id/190/"


def test_shopping_latest_review_author_and_rating(shop):
    Magento.reviews = {"B07HZB38XH": [review("Old Tom", 20), review("Newest Ann", 80)]}
    sites = {"shopping": shop}
    # WAH L62-95: the last review in the API's list; rating as the percent string; "" if none
    assert run("func:shopping_get_sku_latest_review_author('B07HZB38XH')", sites=sites) == "Newest Ann"
    assert run("func:shopping_get_sku_latest_review_rating('B07HZB38XH')", sites=sites) == "80"
    assert run("func:shopping_get_sku_latest_review_author('B0000000')", sites=sites) == ""
    assert run("func:shopping_get_sku_latest_review_rating('B0000000')", sites=sites) == ""


def test_shopping_api_failure_is_infrastructure(shop):
    wrong = {"shopping_site_admin": {"username": "admin", "password": "nope"}}
    with pytest.raises(EnvInfraError, match="HTTP 401"):
        run("func:shopping_get_latest_order_url()", sites={"shopping": shop}, accounts=wrong)
    with pytest.raises(EnvInfraError, match="'shopping' site URL"):
        run("func:shopping_get_latest_order_url()", sites={})


# ----------------------------------------------------------------------------- real Chromium


class PlaywrightReader:
    """Minimal PageReader over a Playwright page (the env has its own)."""

    def __init__(self, page: Any):
        self.page = page

    @property
    def url(self) -> str:
        return self.page.url

    def goto(self, url: str) -> None:
        self.page.goto(url)

    def content(self) -> str:
        return self.page.content()

    def evaluate(self, script: str) -> Any:
        return self.page.evaluate(script)


@pytest.fixture(scope="module")
def browser_page():
    sync_api = pytest.importorskip("playwright.sync_api")
    from guigym.envs.web.browser import find_chromium

    try:
        exe = find_chromium()
    except EnvInfraError as exc:
        pytest.skip(f"no Chromium on this machine: {exc}")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, headless=True)
        page = browser.new_page()
        yield page
        browser.close()


MEMBERS = """<table>
<tr><td data-label="Account"><span class="gl-avatar-labeled-sublabel">@byteblaze</span></td>
    <td class="col-max-role"><span>Owner</span></td></tr>
<tr><td data-label="Account"><span class="gl-avatar-labeled-sublabel">@yjlou</span></td>
    <td class="col-max-role"><span>Developer</span></td></tr>
</table>"""


def test_gitlab_member_role_in_chromium(browser_page):
    browser_page.set_content(MEMBERS)
    reader = PlaywrightReader(browser_page)
    # WAH L115-143: index of "@name" among the account cells, then that row's role text
    assert run("func:gitlab_get_project_memeber_role(__page__, 'yjlou')", reader) == "Developer"
    assert run("func:gitlab_get_project_memeber_role(__page__, 'byteblaze')", reader) == "Owner"
    assert run("func:gitlab_get_project_memeber_role(__page__, 'nobody')", reader) == ""  # WAH: except -> ""
    # a name built to break out of the script's string literal is only compared, never run
    evil = "x'; document.title = 'pwned'; '"
    assert run(f"func:gitlab_get_project_memeber_role(__page__, {evil!r})", reader) == ""
    assert browser_page.title() != "pwned"


FORM = """<title>t</title><input name="discount_amount" value="20">
<select name="website_ids"><option>Main</option><option selected>Second</option></select>
<div id="panel" hidden><input name="simple_action" value="by_percent"></div>
<button id="open" onclick="document.getElementById('panel').hidden = false; window.opened = 1">open</button>
<ul><li class="i">a</li><li class="i">b</li></ul><p id="amp">Tom &amp; Jerry</p>"""


def test_program_html_locators_in_chromium(browser_page):
    browser_page.set_content(FORM)
    reader = PlaywrightReader(browser_page)

    def one(locator: str, rc: dict[str, Any], semantics: str = "webarena", prep: list[str] | None = None):
        target = {"url": "last", "locator": locator, "required_contents": rc}
        if prep:
            target["prep_actions"] = prep
        c = parse_config({"sites": ["shopping_admin"], "task_id": 1, "start_url": "http://h/", "intent": "x",
                          "eval": {"eval_types": ["program_html"], "program_html": [target]}})
        return evaluate(c, "", page=reader, semantics=semantics).score

    # WA L282-294: str(page.evaluate("() => locator")); a JS number comes back as "1"
    assert one("document.querySelector('[name=\"website_ids\"').selectedIndex", {"exact_match": "1"}) == 1.0
    assert one("document.querySelector(\"[name='discount_amount'\").value", {"exact_match": "20"}) == 1.0
    # an array is Python's str() of the list, as in WebArena
    assert one("[...document.querySelectorAll('.i')].map(e => e.textContent)", {"exact_match": "['a', 'b']"}) == 1.0
    # a locator that throws reads as "" (the element is not there)
    assert one("document.querySelector('#missing').value", {"must_include": ["x"]}) == 0.0
    # prep_actions run before the locator (a click that reveals the panel); JS false is "False"
    hidden = "document.getElementById('panel').hidden"
    assert one(hidden, {"exact_match": "false"}) == 0.0
    assert one(hidden, {"exact_match": "false"}, prep=["document.getElementById('open').click()"]) == 1.0
    # WA L303 unescapes entities in the selected HTML; Lite does not
    amp = "document.getElementById('amp').innerHTML"
    assert one(amp, {"must_include": ["Tom & Jerry"]}, "webarena") == 1.0
    assert one(amp, {"must_include": ["Tom & Jerry"]}, "webarena-lite") == 0.0


# ----------------------------------------------------------------------------- WebArena-Lite's page helpers
# LITEH = THUDM/VisualAgentBench@9055fc2 VAB-WebArena-Lite/new/helper_functions_eval.py

PRODUCT = """<div id="maincontent"><div class="columns"><div><div class="product-info-main">
<div class="product-info-price"><div class="price-box price-final_price"><span><span>$24.50</span></span></div></div>
</div></div></div></div>
<a id="tab-label-reviews-title">Reviews 12</a><div class="rating-result" title="80%"></div>
<h2 class="page-title"> Special K Bars </h2>
<table id="productDetails_detailBullets_sections1"><tbody>
<tr><th>Product Dimensions</th><td>10 x 4 inches</td></tr><tr><th>Item Weight</th><td>1.2 pounds</td></tr>
<tr><th>Manufacturer</th><td>Kellogg's</td></tr></tbody></table>"""

ORDER = """<table id="my-orders-table">
<tbody><tr><td class="col name">Special K Bars<dl><dt>Size</dt><dd>12 Count</dd><dt>Flavor</dt><dd>Berry</dd></dl></td>
<td class="col sku">B00MXUFL0E</td><td class="col price">$24.50</td><td class="col qty">Ordered2</td></tr></tbody>
<tbody><tr><td class="col name">Oat Bars</td><td class="col sku">B07ZD2PB9F</td><td class="col qty">Ordered3</td></tr></tbody>
</table>"""


def comment(user: str, when: str, text: str, level: int, children: str = "") -> str:
    return (f'<div class="comment" data-level="{level}"><div class="comment__main"><header><h1>'
            f'<a class="fg-inherit">{user}</a><span><time datetime="{when}"></time></span></h1></header>'
            f'<div class="comment__content">{text}</div><span class="vote__net-score">1</span></div>{children}</div>')


THREAD = '<div id="main">' + comment(
    "alice", "2023-01-01T10:00:00Z", "alice first", 1,
    comment("bob", "2023-01-02T10:00:00Z", "bob reply", 2,
            comment("alice", "2023-01-03T10:00:00Z", "alice to bob", 3))) + comment(
    "carol", "2023-01-05T10:00:00Z", "carol top", 1,
    comment("alice", "2023-01-04T10:00:00Z", "alice to carol", 2)) + "</div>"


def test_lite_product_page_helpers_in_chromium(browser_page):
    browser_page.set_content(PRODUCT)
    page = PlaywrightReader(browser_page)
    # LITEH L322-375: price after the currency sign, N of "Reviews N", rating title without "%"
    assert run("func:shopping_get_product_price(__page__)", page) == 24.5
    assert run("func:shopping_get_num_reviews(__page__)", page) == 12
    assert run("func:shopping_get_rating_as_percentage(__page__)", page) == 80
    # LITEH L285-319: rows whose label contains a term (|OR| alternatives), values joined by ", "
    assert run("func:shopping_get_product_attributes(__page__, 'weight |OR| dimensions')", page) == \
        "10 x 4 inches, 1.2 pounds"
    # LITEH L378-405: textContent kept as is / lower-cased
    assert run("func:get_query_text(__page__, '.page-title')", page) == " Special K Bars "
    assert run("func:get_query_text_lowercase(__page__, '.page-title')", page) == " special k bars "
    assert run("func:get_query_text(__page__, '.missing')", page) == ""
    browser_page.set_content("<p>no product here</p>")
    assert run("func:shopping_get_num_reviews(__page__)", page) == 0
    assert run("func:shopping_get_product_price(__page__)", page) == 0


def test_lite_order_helpers_in_chromium(browser_page):
    browser_page.set_content(ORDER)
    page = PlaywrightReader(browser_page)
    # LITEH L173-282: items keyed by the cells' second class; "Ordered2" -> 2; options from <dl>
    assert run("func:shopping_get_order_product_name_list(__page__)", page).startswith("Special K Bars")
    assert " |OR| Oat Bars" in run("func:shopping_get_order_product_name_list(__page__)", page)
    assert run("func:shopping_get_order_product_quantity(__page__, 'B07ZD2PB9F')", page) == 3
    assert run("func:shopping_get_order_product_quantity(__page__, 'X |OR| B00MXUFL0E')", page) == 2
    assert run("func:shopping_get_order_product_quantity(__page__, 'NOPE')", page) == 0
    assert run("func:shopping_get_order_product_option(__page__, 'B00MXUFL0E', 'Flavor')", page) == "Berry"
    assert run("func:shopping_get_order_product_option(__page__, 'B07ZD2PB9F', 'Size')", page) == ""


def test_lite_reddit_comment_helpers_in_chromium(browser_page):
    browser_page.set_content(THREAD)
    page = PlaywrightReader(browser_page)
    # LITEH L454-497: alice's latest comment anywhere in the tree (by time)
    assert run("func:reddit_get_latest_comment_content_by_username(__page__, 'alice')", page) == "alice to carol"
    assert run("func:reddit_get_latest_comment_content_by_username(__page__, 'dave')", page) == ""
    # LITEH L500-543: the search does not descend below alice's own comments, so her reply to bob
    # (under her first comment) is never seen; the answer is carol
    assert run("func:reddit_get_parent_comment_username_of_latest_comment_by_username(__page__, 'alice')",
               page) == "carol"
