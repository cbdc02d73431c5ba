"""OSWorld browser getters: the active tab's url parts (query and path), page text and info,
the open tabs, unpacked extensions, bookmarks.

Names and return values follow ``desktop_env/evaluators/getters/chrome.py``
(``get_active_tab_url_parse``, ``get_active_tab_html_parse``, ``get_active_tab_info``,
``get_find_unpacked_extension_path``). The active tab's url comes from the address bar in the
a11y tree (the ``active_url_from_accessTree`` getter, as upstream).

OSWorld drives the page with Playwright over CDP from the host. Here a small stdlib-only Python
program (:data:`_CDP_SNIPPET`) runs *inside* the desktop through ``/execute``: it lists the tabs
(``/json/list``), picks the tab whose url equals the active url (percent-decoded, trailing ``/``
dropped, as upstream), and runs one ``Runtime.evaluate`` over the tab's DevTools WebSocket; the
local sandbox may share no network namespace with the host, and a VM exposes the port only
inside. The page's JavaScript does what Playwright's ``query_selector_all`` / ``text_content`` /
``locator("xpath=...")`` / ``input_value`` would, on the live DOM, after the ``load`` event.

Where we differ, on purpose:

* ``active_tab_info`` reads the matching open tab; OSWorld loads the url again in a new tab
  (network, and a different page when the site redirects or keeps state). No matching tab, or no
  browser listening, gives None as a failed upstream load does.
* ``find_unpacked_extension_path`` reads ``Preferences`` and ``Secure Preferences`` of the
  Google Chrome profile, else Chromium's, and skips entries without a ``path``; OSWorld reads
  ``Preferences`` only and returns ``"Google"`` on any error.
* The debugging port is the context's ``chromium_port`` when it has one, else
  :data:`DEFAULT_CHROMIUM_PORT` (the port OSWorld's Chrome setups use); when that does not answer
  :data:`OSWORLD_LAUNCH_PORT` (Chrome's own port in OSWorld's tasks, behind their socat) is tried.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Optional
from urllib.parse import parse_qs, urlparse

from guigym.core.errors import EnvInfraError, TaskSpecError
from guigym.envs.desktop.evaluators.base import GETTERS, GetterContext, _need
from guigym.envs.desktop.evaluators.getters.general import (
    extension_settings, read_profile_json,
)
from guigym.envs.desktop.evaluators.getters.port_owner import CHROMIUM_NAMES, PORT_OWNER_CODE, allowed_arg

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_CHROMIUM_PORT", "OSWORLD_LAUNCH_PORT", "cdp_evaluate", "get_active_tab_url_parse", "get_active_tab_html_parse",
           "get_active_tab_info", "get_find_unpacked_extension_path"]

#: Chromium's remote-debugging port inside the desktop when the context names none
DEFAULT_CHROMIUM_PORT = 9222

#: OSWorld's Chrome tasks launch ``google-chrome --remote-debugging-port=1337`` and forward 9222
#: to it with socat; without socat only 1337 answers, so it is tried after the configured port
OSWORLD_LAUNCH_PORT = 1337

# Runs inside the desktop: python3 -c SNIPPET PORTS REQUEST_JSON NAMES ALLOWED (PORTS comma-separated,
# tried in order; NAMES the browser executables whose port is trusted, ALLOWED JSON of the task's
# own processes, port_owner.py). Our own
# fixed code; the url and the expression are data in argv. Prints one JSON object: {"pages",
# "target", "value" | "page_error"}, or {"error": "unreachable" | "impostor", "detail"} ("impostor"
# also for a socket no process owns: unverifiable). "page_error": the page's own doing (its script
# threw, its renderer did not answer in time, the tab or browser closed), never an infra loss.
_CDP_SNIPPET = PORT_OWNER_CODE + r'''
import base64, json, os, socket, struct, sys, urllib.error, urllib.request
from urllib.parse import unquote, urlparse
ports, req = [int(p) for p in sys.argv[1].split(",")], json.loads(sys.argv[2])
names, allowed = tuple(sys.argv[3].split(",")), json.loads(sys.argv[4])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
listed, errors, impostors = None, [], []
for port in ports:
    verdict, detail = port_owner_verdict(port, names, allowed=allowed)
    if verdict != "ok":  # "unknown" (no visible owner) is not trusted either
        (impostors if verdict in ("impostor", "unknown") else errors).append(detail)
        continue
    try:
        listed = json.loads(opener.open("http://127.0.0.1:%d/json/list" % port, timeout=10).read().decode("utf-8"))
        break
    except (urllib.error.URLError, OSError, ValueError) as e:
        errors.append("%d: %s" % (port, e))
if listed is None:
    sys.stdout.write(json.dumps({"error": "impostor" if impostors else "unreachable",
                                 "detail": "; ".join(impostors + errors)}))
    sys.exit(0)
pages = [t for t in listed if t.get("type") == "page"]
norm = lambda s: unquote(s or "").rstrip("/")
if req.get("url") is None:
    target = pages[0] if pages else None
else:
    target = next((p for p in pages if norm(p.get("url")) == norm(req["url"])), None)
out = {"pages": [{"id": p.get("id"), "url": p.get("url"), "title": p.get("title")} for p in pages],
       "target": None if target is None else {"id": target.get("id"), "url": target.get("url")}}
class PageError(Exception):
    """What the page or its tab did: an exception in the expression, a closed tab or browser."""
def evaluate(target):
    ws = urlparse(target.get("webSocketDebuggerUrl") or "ws://127.0.0.1:%d/devtools/page/%s" % (port, target["id"]))
    sock = socket.create_connection((ws.hostname, ws.port or 80), timeout=float(req.get("timeout", 30)))
    sock.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
                  % (ws.path, ws.netloc, base64.b64encode(os.urandom(16)).decode())).encode())
    buf = [b""]
    def fill(n):
        while len(buf[0]) < n:
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise PageError("the browser closed the DevTools connection")
            buf[0] += chunk
    def take(n):
        fill(n)
        data, buf[0] = buf[0][:n], buf[0][n:]
        return data
    while b"\r\n\r\n" not in buf[0]:
        fill(len(buf[0]) + 1)
    head, buf[0] = buf[0].split(b"\r\n\r\n", 1)
    if b" 101" not in head.split(b"\r\n", 1)[0]:
        raise PageError("DevTools refused the WebSocket: %r" % head[:200])
    payload = json.dumps({"id": 1, "method": "Runtime.evaluate", "params": {
        "expression": req["expression"], "returnByValue": True, "awaitPromise": True}}).encode()
    n = len(payload)
    size = bytes([0x80 | n]) if n < 126 else (bytes([0xFE]) + struct.pack(">H", n) if n < 65536
                                              else bytes([0xFF]) + struct.pack(">Q", n))
    mask = os.urandom(4)
    sock.sendall(bytes([0x81]) + size + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
    while True:
        message = b""
        while True:
            b0, b1 = take(2)
            n = b1 & 127
            if n == 126:
                n = struct.unpack(">H", take(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", take(8))[0]
            key = take(4) if b1 & 128 else None
            data = take(n)
            if key:
                data = bytes(b ^ key[i % 4] for i, b in enumerate(data))
            if b0 & 15 == 8:
                raise PageError("the browser closed the DevTools connection")
            if b0 & 15 in (9, 10):
                continue
            message += data
            if b0 & 128:
                break
        reply = json.loads(message.decode("utf-8"))
        if reply.get("id") == 1:
            break
    result = reply.get("result", {})
    if "exceptionDetails" in result or "error" in reply:
        raise PageError("Runtime.evaluate failed: %r" % (result.get("exceptionDetails") or reply.get("error")))
    return result.get("result", {}).get("value")
if target is not None and req.get("expression"):
    try:
        out["value"] = evaluate(target)
    except (PageError, OSError, ValueError) as e:  # (OSError: also a renderer that never answers)
        out["page_error"] = "%s: %s" % (type(e).__name__, e)
sys.stdout.write(json.dumps(out))
'''


def chromium_ports(ctx: GetterContext) -> list[int]:
    """Debugging ports to try in order: ``ctx.chromium_port`` if set, else
    :data:`DEFAULT_CHROMIUM_PORT`; then :data:`OSWORLD_LAUNCH_PORT`."""
    first = int(getattr(ctx, "chromium_port", None) or DEFAULT_CHROMIUM_PORT)
    return [first] if first == OSWORLD_LAUNCH_PORT else [first, OSWORLD_LAUNCH_PORT]


def cdp_evaluate(ctx: GetterContext, url: Optional[str], expression: Optional[str],
                 timeout: float = 30.0) -> Optional[dict[str, Any]]:
    """Run :data:`_CDP_SNIPPET` in the desktop.

    ``url``: the tab to use (None = the first page target); ``expression``: JavaScript whose
    (awaited) value is returned, or None to only list tabs. Returns ``{"pages": [{"id", "url",
    "title"}], "target": {"id", "url"} | None, "value": <JSON value>}`` (``value`` only when a
    target was found and an expression given; instead ``"page_error"`` when the expression
    failed in the page: an exception, a renderer that did not answer within ``timeout``, a tab
    or browser that closed, all the page's (so the agent's) doing, scored as a page without
    the content asked for), or None when no browser listens on the ports or
    what listens is not the browser's own binary (an agent's stand-in server: :mod:`.port_owner`)
    or a socket no process can be seen to own (the agent can park a listening socket in a unix
    socket's queue: unverifiable, so not read). Raises :class:`EnvInfraError` when the program
    cannot run or the DevTools exchange fails.
    """
    request = {"url": url, "expression": expression, "timeout": timeout}
    ports = ",".join(str(p) for p in chromium_ports(ctx))
    res = ctx.client.execute(["python3", "-c", _CDP_SNIPPET, ports, json.dumps(request), ",".join(CHROMIUM_NAMES),
                              allowed_arg(ctx.client)],
                             shell=False, timeout=timeout + 30)
    ok = isinstance(res, Mapping) and res.get("status") in (None, "success") and res.get("returncode") in (None, 0)
    if not ok:
        detail = (res.get("error") or res.get("output") or "") if isinstance(res, Mapping) else res
        raise EnvInfraError(f"reading Chromium's tabs through DevTools failed in the desktop: {str(detail)[-500:]}")
    try:
        answer = json.loads(str(res.get("output") or ""))
    except ValueError:
        raise EnvInfraError(f"the DevTools helper printed no JSON: {str(res.get('output'))[-300:]!r}") from None
    if not isinstance(answer, dict):
        raise EnvInfraError(f"the DevTools helper printed {answer!r}, not an object")
    if answer.get("error") == "unreachable":
        log.info("no browser debugging endpoint on ports %s: %s", ports, answer.get("detail"))
        return None
    if answer.get("error") == "impostor":  # not the browser: read as no browser, never trusted
        log.warning("refusing a debugging endpoint that is not the browser's: %s", answer.get("detail"))
        return None
    if answer.get("page_error"):
        log.warning("the page did not answer the getter's expression: %s", str(answer["page_error"])[:300])
    return answer


def _active_url(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[str]:
    """The active tab's url by the registered ``active_url_from_accessTree`` getter."""
    return GETTERS.get("active_url_from_accessTree")(ctx, spec)


# --------------------------------------------------------------------------- url parse


@GETTERS.register("url_dashPart")
def get_url_dashPart(ctx: GetterContext, spec: Mapping[str, Any]) -> Any:  # noqa: N802 - OSWorld's name
    """One ``/``-separated part of the active tab's url (``active_url_from_accessTree``, with the
    spec's ``goto_prefix``): ``partIndex`` (Python indexing, e.g. -1 = the last part), without its
    ``?query`` when ``needDeleteId``; returned as the string (``returnType: "string"``) or as
    ``{key: part}`` (``"json"``). No active url: None. (Upstream's docstring says dash; it splits
    on ``/``, and so do we.)"""
    index = spec.get("partIndex")
    kind = spec.get("returnType")
    if not isinstance(index, int) or kind not in ("string", "json") or (kind == "json" and "key" not in spec):
        raise TaskSpecError("url_dashPart needs an int partIndex and returnType 'string' or 'json' (json: a key)")
    url = _active_url(ctx, spec)
    if url is None:
        return None
    parts = url.split("/")
    if not -len(parts) <= index < len(parts):
        return None
    part = parts[index]
    if spec.get("needDeleteId"):
        part = part.split("?")[0]
    return part if kind == "string" else {spec["key"]: part}




@GETTERS.register("active_tab_url_parse")
def get_active_tab_url_parse(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """Query parameters ``parse_keys`` of the active tab's url: ``{key: first value or ""}``;
    ``replace`` (``{old: new}``) renames keys, ``split_list`` splits every value on ``,``.
    None when the url cannot be read."""
    keys = _need(spec, "parse_keys", list)
    url = _active_url(ctx, spec)
    if url is None:
        return None
    query = parse_qs(urlparse(url).query)
    params: dict[str, Any] = {k: query.get(k, [""])[0] for k in keys}
    for old, new in dict(spec.get("replace") or {}).items():
        if old not in params:
            raise TaskSpecError(f"getter 'active_tab_url_parse': replace names {old!r}, which is not in parse_keys")
        params[new] = params.pop(old)
    if spec.get("split_list", False):
        params = {k: v.split(",") for k, v in params.items()}
    return params


# --------------------------------------------------------------------------- html parse

# Evaluated in the tab: QUERIES is a list of [kind, argument]; returns one answer per query after
# the load event (or 10 s). Kinds mirror the Playwright calls of OSWorld's get_active_tab_html_parse.
_PAGE_JS = r'''
(function (Q) {
  function norm(s) { return (s || "").toLowerCase().replace(/\s+/g, " ").trim(); }
  function text(e) { return e ? (e.textContent || "").trim() : null; }
  function all(sel) { return Array.prototype.slice.call(document.querySelectorAll(sel)); }
  function xfirst(x) {
    return document.evaluate(x, document, null, XPathResult.FIRST_ORDERED_NODE_TYPE, null).singleNodeValue;
  }
  function byText(t) {  // Playwright's text= engine: the smallest element whose text holds t
    var want = norm(t), els = all("body *");
    for (var i = 0; i < els.length; i++) {
      var e = els[i];
      if (/^(SCRIPT|STYLE|NOSCRIPT|TEMPLATE)$/.test(e.tagName) || norm(e.textContent).indexOf(want) < 0) continue;
      var inner = false;
      for (var c = e.firstElementChild; c; c = c.nextElementSibling)
        if (norm(c.textContent).indexOf(want) >= 0) { inner = true; break; }
      if (!inner) return e;
    }
    return null;
  }
  function answer(q) {
    try {
      var k = q[0], a = q[1], e;
      if (k === "css") return all(a).map(text);
      if (k === "direct") {
        var es = all(a);
        if (!es.length) return [];
        return Array.prototype.filter.call(es[0].childNodes, function (n) { return n.nodeType === 3; })
          .map(function (n) { return n.textContent.trim(); }).filter(Boolean);
      }
      if (k === "li") return all(a + " li.catAllProducts").filter(function (e) { return e.querySelector("span"); })
          .map(function (e) { return e.querySelector("span").innerText.trim(); });
      if (k === "h3") return all(a).filter(function (e) { return e.querySelector("h3"); })
          .map(function (e) { return text(e.querySelector("h3")); });
      if (k === "label") { e = byText(a); return e ? text(e) : null; }
      if (k === "xpath") { e = xfirst(a); return e ? text(e) : null; }
      if (k === "input") { e = xfirst(a); return e ? String(e.value == null ? "" : e.value).trim() : null; }
      if (k === "url") return location.href;
    } catch (err) { return null; }
    return null;
  }
  return new Promise(function (resolve) {
    var done = false;
    function go() { if (!done) { done = true; resolve(Q.map(answer)); } }
    if (document.readyState === "complete") go();
    else { window.addEventListener("load", go); setTimeout(go, 10000); }
  });
})(%s)
'''


def _html_queries(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The page queries the spec's ``category`` needs, in the order :func:`_html_result` reads them."""
    cat = spec.get("category")
    q: list[tuple[str, str]] = []
    if cat == "class":
        q += [("css", "." + c) for c in dict(spec.get("class_multiObject") or {})]
        q += [("direct", "." + c) for c in dict(spec.get("class_multiObject_child") or {})]
        q += [("h3", "." + c) for c in dict(spec.get("class_multiObject_only_child") or {})]
        q += [("css", "." + c) for c in dict(spec.get("class_multiObject_search_exist") or {})]
        q += [("css", "." + c) for c in dict(spec.get("class_singleObject") or {})]
    elif cat == "label":
        q += [("label", s) for s in dict(spec.get("labelObject") or {})]
    elif cat == "xpath":
        q += [("xpath", x) for x in dict(spec.get("xpathObject") or {})]
    elif cat == "input":
        q += [("input", x) for x in dict(spec.get("inputObject") or {})]
    elif cat == "class&url":
        q += [("css", "." + c) for c in dict(spec.get("class_multiObject") or {})]
        q += [("li", "." + c) for c in dict(spec.get("class_multiObject_li") or {})]
        q.append(("url", ""))
    else:
        raise TaskSpecError(f"getter 'active_tab_html_parse': unknown category {cat!r} "
                            "(class, label, xpath, input, class&url)")
    return q


def _texts(value: Any) -> list[str]:
    return [t for t in value if isinstance(t, str)] if isinstance(value, list) else []


def _by_index(out: dict[str, Any], texts: list[str], order: Mapping[str, str]) -> None:
    for index, key in order.items():
        i = int(index)
        out[key] = texts[i] if len(texts) > i else ""


def _mark_presence(out: dict[str, Any], texts: list[str], wanted: list[str]) -> None:
    """class&url: ``key.lower() -> True`` for wanted keys among the texts (case-insensitive);
    ``is_other_exist`` when some text is in no wanted key."""
    for key in wanted:
        if any(key.lower() == t.lower() for t in texts):
            out[key.lower()] = True
    if any(all(t.lower() not in w.lower() for w in wanted) for t in texts):
        out["is_other_exist"] = True
    out.setdefault("is_other_exist", False)


def _html_result(spec: Mapping[str, Any], answers: list[Any]) -> dict[str, Any]:
    """Map the page's answers to OSWorld's return dict for the spec's category."""
    it = iter(answers)
    out: dict[str, Any] = {}
    cat = spec["category"]
    if cat == "class":
        for order in dict(spec.get("class_multiObject") or {}).values():
            _by_index(out, _texts(next(it)), order)
        for order in dict(spec.get("class_multiObject_child") or {}).values():
            _by_index(out, _texts(next(it)), order)
        for order in dict(spec.get("class_multiObject_only_child") or {}).values():
            _by_index(out, _texts(next(it)), order)
        for wanted in dict(spec.get("class_multiObject_search_exist") or {}).values():
            texts = _texts(next(it))
            for obj in wanted:
                if obj != "is_other_exist":
                    out[obj] = obj in texts
            if "is_other_exist" in wanted:
                out["is_other_exist"] = any(t not in wanted for t in texts)
        for key in dict(spec.get("class_singleObject") or {}).values():
            texts = _texts(next(it))
            out[key] = texts[0] if texts else ""
    elif cat in ("label", "xpath", "input"):
        objects = {"label": "labelObject", "xpath": "xpathObject", "input": "inputObject"}[cat]
        for key in dict(spec.get(objects) or {}).values():
            value = next(it)
            out[key] = value if isinstance(value, str) else ""
    else:  # class&url
        for wanted in dict(spec.get("class_multiObject") or {}).values():
            _mark_presence(out, _texts(next(it)), list(wanted))
        for wanted in dict(spec.get("class_multiObject_li") or {}).values():
            _mark_presence(out, _texts(next(it)), list(wanted))
        page_url = str(next(it) or "").lower()
        for key in spec.get("url_include_expected") or []:
            out.setdefault(key.lower(), key.lower() in page_url)
    return out


@GETTERS.register("active_tab_html_parse")
def get_active_tab_html_parse(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """Texts of elements of the active tab, keyed as the spec says (OSWorld chrome.py).

    ``category``: ``class`` (``class_multiObject`` {class: {index: key}} texts of ``.class``
    elements by index; ``class_multiObject_child`` the first element's own text nodes;
    ``class_multiObject_only_child`` the texts of each element's ``h3``;
    ``class_multiObject_search_exist`` {class: [texts]} -> {text: present?, "is_other_exist"};
    ``class_singleObject`` {class: key} the first text), ``label`` (``labelObject`` {text: key}:
    the smallest element containing that text), ``xpath`` (``xpathObject`` {xpath: key}),
    ``input`` (``inputObject`` {xpath: key}: the input's value), ``class&url``
    (``class_multiObject``/``class_multiObject_li`` {class: [keys]} and
    ``url_include_expected``). Missing elements give "". Returns None when the url cannot be
    read, {} when no open tab has that url or no browser listens.
    """
    queries = _html_queries(spec)
    url = _active_url(ctx, spec)
    if not isinstance(url, str):
        return None
    answer = cdp_evaluate(ctx, url, _PAGE_JS % json.dumps([list(q) for q in queries]))
    if answer is None or answer.get("target") is None:
        log.info("active_tab_html_parse: no tab with url %r among %s", url,
                 [p.get("url") for p in (answer or {}).get("pages", [])])
        return {}
    answers = answer.get("value")
    if not isinstance(answers, list) or len(answers) != len(queries):  # the page's doing (its scripts)
        log.warning("active_tab_html_parse: the page answered %.200r to %d queries", answers, len(queries))
        return {}
    return _html_result(spec, answers)


# --------------------------------------------------------------------------- tab info

_INFO_JS = r'''
new Promise(function (resolve) {
  var done = false;
  function go() {
    if (done) return;
    done = true;
    var d = document.doctype;
    resolve({title: document.title, url: location.href,
             content: (d ? new XMLSerializer().serializeToString(d) : "") + document.documentElement.outerHTML});
  }
  if (document.readyState === "complete") go();
  else { window.addEventListener("load", go); setTimeout(go, 10000); }
})
'''


@GETTERS.register("active_tab_info")
def get_active_tab_info(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[dict[str, str]]:
    """``{"title", "url", "content"}`` (content: the page's HTML with its doctype, as Playwright's
    ``page.content()``) of the open tab whose url is the active url; None when the url cannot be
    read, no tab has it or no browser listens."""
    url = _active_url(ctx, spec)
    if url is None:
        return None
    answer = cdp_evaluate(ctx, url, _INFO_JS)
    if answer is None or answer.get("target") is None:
        log.info("active_tab_info: no open tab with url %r", url)
        return None
    value = answer.get("value")
    if not isinstance(value, dict):  # the page's doing (it redefined what the expression uses)
        log.warning("active_tab_info: the page answered %.200r", value)
        return None
    return {"title": str(value.get("title") or ""), "url": str(value.get("url") or ""),
            "content": str(value.get("content") or "")}


# --------------------------------------------------------------------------- extensions


@GETTERS.register("find_unpacked_extension_path")
def get_find_unpacked_extension_path(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[list[str]]:
    """The ``path`` of every extension in the profile's ``extensions.settings`` (unpacked ones
    are their source folders), from ``Preferences`` and ``Secure Preferences`` of
    ``~/.config/google-chrome/Default`` (else ``~/.config/chromium/Default``); None when the
    profile has neither file."""
    entries = extension_settings(ctx)
    if entries is None:
        return None
    paths: list[str] = []
    for entry in entries:
        path = entry.get("path")
        if isinstance(path, str) and path not in paths:
            paths.append(path)
    return paths


# --------------------------------------------------------------------------- open tabs


@GETTERS.register("open_tabs_info")
def get_open_tabs_info(ctx: GetterContext, spec: Mapping[str, Any]) -> list[dict[str, str]]:
    """``[{"title", "url"}]`` of every open tab (DevTools ``/json/list`` page targets, in its
    order), as upstream's list over the browser's pages; ``[]`` when no browser listens (upstream
    first tries to launch Chrome, then gives ``[]``). **(differs)** titles are what the tab shows
    now; upstream waits for each page's network to go idle first."""
    answer = cdp_evaluate(ctx, None, None)
    if answer is None:
        return []
    return [{"title": str(p.get("title") or ""), "url": str(p.get("url") or "")} for p in answer.get("pages", [])]


# --------------------------------------------------------------------------- bookmarks


@GETTERS.register("bookmarks")
def get_bookmarks(ctx: GetterContext, spec: Mapping[str, Any]) -> Any:
    """The ``roots`` object of the profile's ``Bookmarks`` JSON (``bookmark_bar``, ``other``,
    ``synced``), from ``~/.config/google-chrome/Default/Bookmarks``, else Chromium's
    ``~/.config/chromium/Default/Bookmarks``; ``[]`` when neither exists (as upstream, which
    reads Google Chrome's path only). An unreadable file is ``{}``: nothing bookmarked."""
    doc = read_profile_json(ctx, "Bookmarks")
    if doc is None:
        return []
    roots = doc.get("roots", {}) if isinstance(doc, dict) else {}
    return roots if isinstance(roots, dict) else {}
