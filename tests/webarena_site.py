"""A tiny shop for the WebArena env tests: loopback http.server, a UI login, a >=500-node page.

Pages (all HTML, UTF-8):

* ``/``: home with links to products, the wish list, the big page, the cookie pages, an
  off-site link (another loopback server) and a ``file://`` link.
* ``/product/<n>``: name and price.
* ``/customer/account/login/``: WebArena's shopping login form (labels Email / Password, a
  "Sign In" button); POST with the right account sets ``session`` (1 h) and redirects home.
* ``/wishlist/``: "My Wish List" for a live session, else a redirect to the login form (what
  WebArena's shopping probe checks).
* ``/search?q=``: a search form and the query echoed in ``#query``.
* ``/setcookie`` sets ``visited=yes``; ``/cookie`` says whether the request carried it.
* ``/big``: a table of ``BIG_ROWS`` rows (>= 500 accessibility nodes).

:meth:`ShopSite.revoke_sessions` forgets every session server-side (a login that expired on
the server while its cookie still looks valid).
"""
from __future__ import annotations

import html
import http.server
import json
import secrets
import threading
import urllib.parse
from pathlib import Path
from typing import Any, Optional

ACCOUNT = {"username": "emma.lopez@gmail.com", "password": "Password.123"}
PRODUCTS = {1: ("Blue Mug", "$12.50"), 2: ("Red Kettle", "$48.00"), 3: ("Green Teapot", "$23.75")}
BIG_ROWS = 200


def _page(title: str, body: str) -> bytes:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
            f"<body>{body}</body></html>").encode()


class ShopSite:
    """The shop on 127.0.0.1 (random port); ``other`` is a second server, the off-site origin."""

    def __init__(self) -> None:
        self.sessions: set[str] = set()
        self.logins = 0  # successful POSTs to the login form
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _cookies(self) -> dict[str, str]:
                out = {}
                for part in (self.headers.get("Cookie") or "").split(";"):
                    k, _, v = part.strip().partition("=")
                    if k:
                        out[k] = v
                return out

            def _send(self, code: int, body: bytes = b"", headers: Optional[dict[str, str]] = None) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                url = urllib.parse.urlsplit(self.path)
                path, query = url.path, urllib.parse.parse_qs(url.query)
                logged_in = self._cookies().get("session") in site.sessions
                if path == "/":
                    items = "".join(f"<li><a href='/product/{i}'>{html.escape(n)}</a></li>" for i, (n, _) in PRODUCTS.items())
                    body = (f"<nav><a href='/'>Home</a> <a href='/wishlist/'>My Wish List</a> "
                            f"<a href='/search'>Search</a></nav><h1>One Stop Market</h1><ul>{items}</ul>"
                            f"<div><div><span></span></div></div>"
                            f"<p><a href='{site.other_url}/'>Partner shop</a> <a href='file:///etc/passwd'>Local file</a> "
                            f"<a href='/big'>Big page</a> <a href='/cookie'>Cookie page</a></p>"
                            f"<p>{'Welcome, Emma' if logged_in else 'Not signed in'}</p>"
                            f"<div style='height:3000px'></div><footer><a href='/product/3'>Footer teapot</a></footer>")
                    self._send(200, _page("One Stop Market", body))
                elif path.startswith("/product/") and path[9:].isdigit() and int(path[9:]) in PRODUCTS:
                    name, price = PRODUCTS[int(path[9:])]
                    self._send(200, _page(name, f"<h1>{html.escape(name)}</h1><p>Price: <span class='price'>{price}</span></p>"
                                                "<button onclick=\"document.title='clicked'\">Add to Cart</button>"))
                elif path == "/customer/account/login/":
                    self._send(200, _page("Customer Login", (
                        "<form method='post' action='/customer/account/login/'>"
                        "<label for='email'>Email</label><input id='email' name='login[username]' type='email'>"
                        "<label for='pass'>Password</label><input id='pass' name='login[password]' type='password'>"
                        "<button type='submit'>Sign In</button></form>")))
                elif path == "/wishlist/":
                    if logged_in:
                        self._send(200, _page("My Wish List", "<h1>My Wish List</h1><p>You have no items in your wish list.</p>"))
                    else:
                        self._send(302, headers={"Location": "/customer/account/login/"})
                elif path == "/search":
                    q = query.get("q", [""])[0]
                    self._send(200, _page("Search", (
                        "<form action='/search'><input name='q' aria-label='Search query'>"
                        "<button type='submit'>Go</button></form>"
                        f"<p>Results for <span id='query'>{html.escape(q)}</span></p>")))
                elif path == "/setcookie":
                    self._send(200, _page("Cookie set", "<p>cookie set</p>"), {"Set-Cookie": "visited=yes; Path=/"})
                elif path == "/cookie":
                    seen = self._cookies().get("visited") == "yes"
                    self._send(200, _page("Cookie", f"<p>visited cookie: {'present' if seen else 'absent'}</p>"))
                elif path == "/big":
                    rows = "".join(f"<tr><td>Item {i}</td><td><a href='/product/{1 + i % 3}'>View {i}</a></td>"
                                   f"<td><button>Buy {i}</button></td></tr>" for i in range(BIG_ROWS))
                    self._send(200, _page("Big catalogue", f"<h1>Catalogue</h1><table>{rows}</table>"))
                else:
                    self._send(404, _page("Not found", "<p>404</p>"))

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                form = urllib.parse.parse_qs(self.rfile.read(n).decode())
                if self.path == "/customer/account/login/" and \
                        form.get("login[username]") == [ACCOUNT["username"]] and form.get("login[password]") == [ACCOUNT["password"]]:
                    token = secrets.token_hex(8)
                    site.sessions.add(token)
                    site.logins += 1
                    self._send(302, headers={"Location": "/", "Set-Cookie": f"session={token}; Path=/; Max-Age=3600"})
                else:
                    self._send(302, headers={"Location": "/customer/account/login/"})

        class Other(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            hits = 0

            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                Other.hits += 1
                body = _page("Partner", "<p>partner site</p>")
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.other_cls = Other
        self._other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Other)
        self.other_url = f"http://127.0.0.1:{self._other.server_address[1]}"
        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = self._other.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        for srv in (self._httpd, self._other):
            threading.Thread(target=srv.serve_forever, daemon=True).start()

    @property
    def other_hits(self) -> int:
        return self.other_cls.hits

    def revoke_sessions(self) -> None:
        self.sessions.clear()

    def close(self) -> None:
        for srv in (self._httpd, self._other):
            srv.shutdown()
            srv.server_close()


#: the three task configs (WebArena's JSON, ``__SHOPPING__`` unresolved) and, beside them, their
#: reference solutions (guigym's own file, guigym/envs/web/webarena/reference.py)
TASKS_FILE = Path(__file__).resolve().parent / "fixtures" / "webarena_site" / "tasks.json"
REFERENCES_FILE = TASKS_FILE.with_name("reference_solutions.json")


def tasks() -> list[dict[str, Any]]:
    """Three WebArena-format configs over the shop (``__SHOPPING__`` placeholders, unresolved):
    1 price question (string must_include), 2 open the wish list (login, url_match), 3 search in
    the second of two start tabs (program_html with a JS locator)."""
    return json.loads(TASKS_FILE.read_text(encoding="utf-8"))
