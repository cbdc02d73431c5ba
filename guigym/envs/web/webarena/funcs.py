"""``func:`` expressions of WebArena's ``program_html``, run without eval.

WebArena's evaluators (``evaluation_harness/evaluators.py``, ``HTMLContentEvaluator``) pass the
text after ``func:`` to Python's ``eval`` after replacing ``__last_url__`` with the current URL and
``__page__`` with the Playwright page. Here the text is parsed with :mod:`ast` and must be exactly
one call of a helper registered in :data:`HELPERS`, with literal arguments or the name
``__page__``; anything else (attribute access, nested calls, operators, unknown names) is a
:class:`~guigym.core.errors.TaskSpecError` at parse time. Nothing from a task file is executed.

Helpers receive a :class:`FuncContext`: the :class:`PageReader` the env implements (the evaluator
never touches Playwright) plus site URLs and accounts for helpers that call a site's REST API.
Register a replacement with :func:`register` (e.g. an embedded site's own API) under the same
name.
"""
from __future__ import annotations

import ast
import inspect
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Protocol, runtime_checkable

from guigym.core.errors import EnvInfraError, TaskSpecError

LAST_URL = "__last_url__"
PAGE_NAME = "__page__"


@runtime_checkable
class PageReader(Protocol):
    """What the evaluators need from the browser; the WebArena env implements it.

    Contract: ``evaluate`` has Playwright's ``page.evaluate`` semantics (a string that is a
    function is called, anything else is evaluated as an expression) and returns the JSON value as
    Python (int/float/str/bool/None/list/dict). A script that throws raises any exception other
    than :class:`EnvInfraError`; the evaluators read that as "element not on the page", as
    WebArena does. A dead browser or a timeout raises :class:`EnvInfraError`, which the evaluators
    let through (never scored as failure).
    """

    @property
    def url(self) -> str: ...

    def goto(self, url: str) -> None:
        """Navigate the evaluation page to ``url`` and wait until it has loaded."""

    def content(self) -> str:
        """The page's HTML (``page.content()``)."""

    def evaluate(self, script: str) -> Any:
        """Run ``script`` in the page; see the class docstring."""


#: WebArena's published admin account of the shopping site (browser_env/env_config.py ACCOUNTS)
WEBARENA_ACCOUNTS: dict[str, dict[str, str]] = {
    "shopping_site_admin": {"username": "admin", "password": "admin1234"},
}

HttpFn = Callable[[str, str, Optional[dict[str, Any]], dict[str, str]], Any]


def http_json(method: str, url: str, body: Optional[dict[str, Any]], headers: dict[str, str],
              timeout: float = 30.0) -> Any:
    """One JSON request with urllib; any failure or non-2xx is an :class:`EnvInfraError`."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        raise EnvInfraError(f"{method} {url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise EnvInfraError(f"{method} {url}: {exc}") from None


@dataclass
class FuncContext:
    """Everything a helper may use. ``sites`` maps site keys (tasks.SITE_KEYS) to base URLs."""

    page: PageReader
    sites: Mapping[str, str] = field(default_factory=dict)
    accounts: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: WEBARENA_ACCOUNTS)
    http: HttpFn = http_json

    def site(self, key: str) -> str:
        try:
            return self.sites[key].rstrip("/")
        except KeyError:
            raise EnvInfraError(f"evaluation helper needs the {key!r} site URL, which is not configured") from None


Helper = Callable[..., Any]
#: helper name -> function(ctx, *args); names are WebArena's (typos included)
HELPERS: dict[str, Helper] = {}


def register(name: str) -> Callable[[Helper], Helper]:
    """Decorator: make ``fn(ctx, *args)`` callable from task files as ``func:name(...)``."""

    def deco(fn: Helper) -> Helper:
        HELPERS[name] = fn
        return fn

    return deco


class _Page:
    """Marker for the ``__page__`` argument."""

    def __repr__(self) -> str:
        return PAGE_NAME


PAGE = _Page()


@dataclass(frozen=True)
class FuncCall:
    """A parsed ``func:`` expression: helper name and literal arguments (``PAGE`` for __page__)."""

    name: str
    args: tuple[Any, ...]
    source: str

    def run(self, ctx: FuncContext) -> Any:
        """Call the helper; ``__last_url__`` inside string arguments becomes ``ctx.page.url``.

        WebArena substitutes ``__last_url__`` textually before eval, i.e. inside the string
        literal; the same happens here, minus the breakage when the URL contains a quote.
        """
        args = []
        for arg in self.args:
            if arg is PAGE:
                args.append(ctx.page)
            elif isinstance(arg, str) and LAST_URL in arg:
                args.append(arg.replace(LAST_URL, ctx.page.url))
            else:
                args.append(arg)
        return HELPERS[self.name](ctx, *args)


def _literal(node: ast.expr, where: str) -> Any:
    if isinstance(node, ast.Name) and node.id == PAGE_NAME:
        return PAGE
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool, type(None))):
        return node.value
    raise TaskSpecError(f"{where}: arguments must be literals or {PAGE_NAME}, got {ast.dump(node)[:80]}")


def parse_func(text: str, where: str = "func") -> FuncCall:
    """Parse ``"func:name(arg, ...)"`` (the prefix is optional) into a :class:`FuncCall`.

    Raises:
        TaskSpecError: naming ``where`` when the text is not one call of a registered helper with
            literal positional arguments, or the arguments do not fit the helper's signature.
    """
    source = text[len("func:"):] if text.startswith("func:") else text
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise TaskSpecError(f"{where}: not a valid call expression {source!r}: {exc.msg}") from None
    call = tree.body
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        raise TaskSpecError(f"{where}: expected helper(args...), got {source!r}")
    name = call.func.id
    if name not in HELPERS:
        raise TaskSpecError(f"{where}: unknown helper {name!r}; known: {sorted(HELPERS)}")
    if call.keywords:
        raise TaskSpecError(f"{where}: helper {name!r} takes positional arguments only")
    args = tuple(_literal(a, where) for a in call.args)
    try:
        inspect.signature(HELPERS[name]).bind(None, *args)
    except TypeError as exc:
        raise TaskSpecError(f"{where}: helper {name!r}: {exc}") from None
    return FuncCall(name=name, args=args, source=source)


# ---------------------------------------------------------------------------------------------
# WebArena's helpers, reimplemented from their documented behaviour
# (web-arena-x/webarena evaluation_harness/helper_functions.py)


@register("reddit_get_post_url")
def reddit_get_post_url(ctx: FuncContext, url: str) -> str:
    """``scheme://host/f/<forum>/<post_id>/`` for a post or comment URL; other URLs unchanged."""
    parts = urllib.parse.urlparse(url)
    segs = parts.path.split("/")
    # path "/f/forum/id/..." splits into ["", "f", forum, id, ...]
    if len(segs) < 4 or segs[1] != "f":
        return url
    return f"{parts.scheme}://{parts.netloc}/f/{segs[2]}/{segs[3]}/"


def _magento_admin_headers(ctx: FuncContext) -> dict[str, str]:
    account = ctx.accounts["shopping_site_admin"]
    token = ctx.http("POST", f"{ctx.site('shopping')}/rest/default/V1/integration/admin/token",
                     {"username": account["username"], "password": account["password"]}, {})
    if not isinstance(token, str):
        raise EnvInfraError("shopping admin token request did not return a token string")
    return {"Authorization": f"Bearer {token}"}


@register("shopping_get_latest_order_url")
def shopping_get_latest_order_url(ctx: FuncContext) -> str:
    """Customer-side URL of the most recently created order (Magento REST ``/V1/orders``)."""
    query = urllib.parse.urlencode({
        "searchCriteria[sortOrders][0][field]": "created_at",
        "searchCriteria[sortOrders][0][direction]": "DESC",
        "searchCriteria[pageSize]": "1",
    })
    reply = ctx.http("GET", f"{ctx.site('shopping')}/rest/V1/orders?{query}", None, _magento_admin_headers(ctx))
    try:
        order_id = int(reply["items"][0]["increment_id"])
    except (KeyError, IndexError, TypeError, ValueError):
        raise EnvInfraError(f"shopping orders API returned no order: {str(reply)[:200]}") from None
    return f"{ctx.site('shopping')}/sales/order/view/order_id/{order_id}/"


def _sku_reviews(ctx: FuncContext, sku: str) -> list[dict[str, Any]]:
    url = f"{ctx.site('shopping')}/rest/V1/products/{urllib.parse.quote(sku, safe='')}/reviews"
    reply = ctx.http("GET", url, None, _magento_admin_headers(ctx))
    if not isinstance(reply, list):
        raise EnvInfraError(f"shopping reviews API returned {type(reply).__name__}, not a list")
    return reply


@register("shopping_get_sku_latest_review_author")
def shopping_get_sku_latest_review_author(ctx: FuncContext, sku: str) -> str:
    """Nickname on the last review the API lists for ``sku``; ``""`` when it has none."""
    reviews = _sku_reviews(ctx, sku)
    return str(reviews[-1]["nickname"]) if reviews else ""


@register("shopping_get_sku_latest_review_rating")
def shopping_get_sku_latest_review_rating(ctx: FuncContext, sku: str) -> str:
    """The last review's first rating as a percent string (``"80"``); ``""`` when none."""
    reviews = _sku_reviews(ctx, sku)
    if not reviews:
        return ""
    return str(reviews[-1]["ratings"][0]["percent"])


_GITLAB_ROLE_JS = """(() => {
  const want = "@" + %s;
  const accounts = [...document.querySelectorAll("td[data-label='Account'] span.gl-avatar-labeled-sublabel")];
  const i = accounts.findIndex((el) => el.outerText === want);
  const roles = document.querySelectorAll("td.col-max-role span");
  if (i < 0 || i >= roles.length) return "";
  return roles[i].outerText;
})()"""


@register("gitlab_get_project_memeber_role")
def gitlab_get_project_memeber_role(ctx: FuncContext, page: PageReader, account_name: str) -> str:
    """Role shown next to ``@account_name`` on a GitLab project's members page; ``""`` if absent.

    The name is passed as a JSON string literal, so a quote in it cannot change the script.
    """
    try:
        role = page.evaluate(_GITLAB_ROLE_JS % json.dumps(account_name))
    except EnvInfraError:
        raise
    except Exception:
        return ""
    return role if isinstance(role, str) else ""


# ---------------------------------------------------------------------------------------------
# WebArena-Lite's additional page helpers, reimplemented from their documented behaviour
# (THUDM/VisualAgentBench VAB-WebArena-Lite/new/helper_functions_eval.py). No public Lite config
# uses them yet; task authors may. Every one reads the page through the PageReader and returns
# its neutral value ("" / 0 / []) when the page does not have the element, as published.


def _page_value(page: PageReader, script: str, default: Any) -> Any:
    try:
        value = page.evaluate(script)
    except EnvInfraError:
        raise
    except Exception:
        return default
    return default if value is None else value


@register("get_query_text")
def get_query_text(ctx: FuncContext, page: PageReader, selector: str) -> str:
    """``textContent`` of the first element matching ``selector`` (case kept); ``""`` if none."""
    script = ("(() => { const el = document.querySelector(%s); return el ? el.textContent : ''; })()"
              % json.dumps(selector))
    value = _page_value(page, script, "")
    return value if isinstance(value, str) else ""


@register("get_query_text_lowercase")
def get_query_text_lowercase(ctx: FuncContext, page: PageReader, selector: str) -> str:
    """:func:`get_query_text`, lower-cased."""
    return get_query_text(ctx, page, selector).lower()


# Magento (WebArena's shopping site) page structure the published helpers read
_PRICE_SELECTOR = ("#maincontent > div.columns > div > div.product-info-main > div.product-info-price > "
                   "div.price-box.price-final_price > span > span")


@register("shopping_get_product_price")
def shopping_get_product_price(ctx: FuncContext, page: PageReader) -> float:
    """The product page's final price as a number (text after the currency sign); 0 if absent."""
    script = ("(() => { const el = document.querySelector(%s); if (!el) return 0;"
              " const v = parseFloat(el.outerText.substr(1)); return v ? v : 0; })()" % json.dumps(_PRICE_SELECTOR))
    value = _page_value(page, script, 0)
    return value if isinstance(value, (int, float)) else 0


@register("shopping_get_num_reviews")
def shopping_get_num_reviews(ctx: FuncContext, page: PageReader) -> int:
    """The number in the product page's "Reviews N" tab title; 0 if absent."""
    script = ("(() => { const el = document.querySelector('#tab-label-reviews-title'); if (!el) return 0;"
              " const v = parseInt(el.outerText.split(' ')[1]); return v ? v : 0; })()")
    value = _page_value(page, script, 0)
    return int(value) if isinstance(value, (int, float)) else 0


@register("shopping_get_rating_as_percentage")
def shopping_get_rating_as_percentage(ctx: FuncContext, page: PageReader) -> float:
    """The product's rating from ``.rating-result``'s title (``"80%"`` -> 80); 0 if absent."""
    script = ("(() => { const el = document.querySelector('.rating-result'); if (!el) return 0;"
              " const v = parseFloat(el.title.replace('%', '')); return v ? v : 0; })()")
    value = _page_value(page, script, 0)
    return value if isinstance(value, (int, float)) else 0


@register("shopping_get_product_attributes")
def shopping_get_product_attributes(ctx: FuncContext, page: PageReader, attribute: str) -> str:
    """Values of the product-details rows whose label contains ``attribute`` (or any of its
    `` |OR| `` alternatives, case-insensitive), joined with ``", "``; ``""`` if none."""
    script = """(() => {
  const terms = %s.toLowerCase().split(' |or| ');
  const body = document.querySelector('#productDetails_detailBullets_sections1 > tbody');
  if (!body) return '';
  return Array.from(body.children)
    .filter((row) => row.children.length > 1 && terms.some((t) => row.children[0].outerText.toLowerCase().includes(t)))
    .map((row) => row.children[1].outerText).join(', ');
})()""" % json.dumps(attribute)
    value = _page_value(page, script, "")
    return value if isinstance(value, str) else ""


_ORDER_ITEMS_JS = """(() => {
  const table = document.querySelector('#my-orders-table');
  if (!table) return [];
  return [...table.getElementsByTagName('tbody')].map((body) => {
    const item = {};
    for (const cell of body.getElementsByTagName('td')) {
      const key = cell.className.split(' ')[1];
      if (!key) continue;
      item[key] = cell.outerText;
      const dl = key === 'name' ? cell.querySelector('dl') : null;
      if (dl) {
        const kids = [...dl.children], options = {};
        for (let i = 0; i + 1 < kids.length; i += 2) options[kids[i].outerText] = kids[i + 1].outerText;
        item.options = options;
      }
    }
    return item;
  });
})()"""


def _order_items(page: PageReader) -> list[dict[str, Any]]:
    """Rows of a Magento order page's item table: ``{name, sku, price, qty, subtotal, options?}``,
    keyed by each cell's second CSS class as the published helper does."""
    value = _page_value(page, _ORDER_ITEMS_JS, [])
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


@register("shopping_get_order_product_name_list")
def shopping_get_order_product_name_list(ctx: FuncContext, page: PageReader) -> str:
    """Names of the order's products joined with ``" |OR| "``; ``""`` if none."""
    return " |OR| ".join(str(item.get("name", "")) for item in _order_items(page))


@register("shopping_get_order_product_quantity")
def shopping_get_order_product_quantity(ctx: FuncContext, page: PageReader, sku: str) -> int:
    """Ordered quantity of the product whose SKU is ``sku`` (or one of its `` |OR| ``
    alternatives), read from the "Ordered N" cell; 0 if not found."""
    skus = sku.split(" |OR| ") if "|OR|" in sku else [sku]
    for item in _order_items(page):
        if str(item.get("sku", "")).strip() in skus:
            try:
                return int(str(item.get("qty", ""))[len("Ordered"):])
            except ValueError:
                return 0
    return 0


@register("shopping_get_order_product_option")
def shopping_get_order_product_option(ctx: FuncContext, page: PageReader, sku: str, option_name: str) -> str:
    """Value of option ``option_name`` (e.g. "Size") of the ordered product ``sku``; ``""``."""
    for item in _order_items(page):
        if str(item.get("sku", "")).strip() == sku:
            options = item.get("options")
            return str(options.get(option_name, "")) if isinstance(options, dict) else ""
    return ""


_COMMENT_TREE_JS = """(() => {
  const build = (node, level) => ({
    username: node.querySelector('.fg-inherit').outerText,
    net_score: parseInt(node.querySelector('.vote__net-score').outerText),
    content: node.querySelector('.comment__content').outerText,
    time: new Date(node.querySelector('.comment__main > header > h1 > span > time').dateTime).toISOString(),
    children: [...node.querySelectorAll('.comment')]
      .filter((c) => parseInt(c.getAttribute('data-level')) === level + 1)
      .map((c) => build(c, level + 1)),
  });
  return build(document.querySelector('#main'), 0);
})()"""


def _comment_tree(page: PageReader) -> dict[str, Any]:
    """A Postmill post page as ``{username, net_score, content, time, children}`` (``time`` an
    aware datetime); ``{}`` when the page is not a post."""
    import datetime as _dt

    tree = _page_value(page, _COMMENT_TREE_JS, {})

    def fix(node: dict[str, Any]) -> dict[str, Any]:
        node["time"] = _dt.datetime.fromisoformat(str(node["time"]).replace("Z", "+00:00"))
        node["children"] = [fix(c) for c in node.get("children", [])]
        return node

    try:
        return fix(tree) if isinstance(tree, dict) and tree else {}
    except (KeyError, TypeError, ValueError):
        return {}


def _latest_comment_by(page: PageReader, username: str, parent: bool) -> dict[str, Any]:
    """The latest comment by ``username`` (``parent=False``) or the comment it replies to.

    As published, the parent search does not look below a comment by ``username`` itself.
    """
    tree = _comment_tree(page)
    found: dict[str, Any] = {}
    latest = None

    def own(node: dict[str, Any]) -> None:
        nonlocal found, latest
        if node["username"] == username and (latest is None or node["time"] > latest):
            found, latest = node, node["time"]
        for child in node["children"]:
            own(child)

    def parent_of(node: dict[str, Any]) -> None:
        nonlocal found, latest
        for child in node["children"]:
            if child["username"] != username:
                parent_of(child)
            elif latest is None or child["time"] > latest:
                found, latest = node, child["time"]

    if tree:
        (parent_of if parent else own)(tree)
    return found


@register("reddit_get_latest_comment_content_by_username")
def reddit_get_latest_comment_content_by_username(ctx: FuncContext, page: PageReader, username: str) -> str:
    """Text of ``username``'s most recent comment on the post page; ``""`` if none."""
    return str(_latest_comment_by(page, username, parent=False).get("content", ""))


@register("reddit_get_parent_comment_username_of_latest_comment_by_username")
def reddit_get_parent_comment_username_of_latest_comment_by_username(ctx: FuncContext, page: PageReader,
                                                                     username: str) -> str:
    """Author of the comment that ``username``'s most recent reply answers; ``""`` if none."""
    return str(_latest_comment_by(page, username, parent=True).get("username", ""))
