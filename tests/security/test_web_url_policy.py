"""UrlPolicy: which URLs a web episode may open, on URLs an agent could write to get around it.

No browser here: these pin the parsing the browser-level tests (test_web_attacks.py) rely on,
and that the regex the browser context aborts requests with agrees with the policy's own check.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guigym.core.errors import ConfigError
from guigym.envs.web.url_policy import UrlPolicy

START = "http://127.0.0.1:4242/tok/miniwob/click-test.html"
POLICY = UrlPolicy.for_start_url(START, ["https://shop.example:8443"])


@pytest.mark.parametrize("url", [
    START, START + "#x", "http://127.0.0.1:4242/", "http://127.0.0.1:4242/other/page?q=1",
    "HTTP://127.0.0.1:4242/x", "https://shop.example:8443/cart", "https://SHOP.example:8443",
    "about:blank",
])
def test_the_tasks_own_sites_are_allowed(url):
    assert POLICY.refusal(url) is None


@pytest.mark.parametrize("url,why", [
    ("file:///etc/passwd", "file: scheme"),
    ("FiLe:///etc/passwd", "file: scheme"),
    ("data:text/html,hi", "data: scheme"),
    ("javascript:alert(1)", "javascript: scheme"),
    ("view-source:" + START, "view-source: scheme"),
    ("chrome://settings", "chrome: scheme"),
    ("blob:http://127.0.0.1:4242/uuid", "blob: scheme"),
    ("ws://127.0.0.1:4242/", "ws: scheme"),
    ("//127.0.0.1:4242/x", "without a scheme"),
    ("http://127.0.0.1:4243/", "not one of this task's sites"),  # another port
    ("http://127.0.0.1/", "not one of this task's sites"),
    ("https://127.0.0.1:4242/", "not one of this task's sites"),  # another scheme: another origin
    ("http://localhost:4242/", "not one of this task's sites"),
    ("http://127.0.0.1:4242@evil.example/", "credentials"),
    ("http://evil.example\\@127.0.0.1:4242/", "backslashes"),
    (" file:///etc/passwd", "whitespace"),
    ("fi\tle:///etc/passwd", "whitespace"),
    ("http://127.0.0.1:4242\n.evil.example/", "whitespace"),
    ("http://127.0.0.1:99999/", "not a valid"),
])
def test_everything_else_is_refused_and_says_why(url, why):
    reason = POLICY.refusal(url)
    assert reason is not None and why in reason, (url, reason)


def test_the_start_url_is_allowed_even_when_it_is_not_http():
    p = UrlPolicy.for_start_url("file:///tmp/page.html")
    assert p.allows("file:///tmp/page.html") and not p.allows("file:///etc/passwd")


@pytest.mark.parametrize("bad", ["127.0.0.1:4242", "ftp://host", "http://host/path", "http://u@host", "http://host?q"])
def test_extra_origins_must_be_origins(bad):
    with pytest.raises(ConfigError, match="allowed_origins"):
        UrlPolicy.for_start_url(START, [bad])


@settings(max_examples=300, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https"]),
    host=st.sampled_from(["127.0.0.1", "shop.example", "evil.example", "127.0.0.10", "shop.example.evil"]),
    port=st.sampled_from([None, 80, 443, 4242, 42420, 8443, 844]),
    path=st.sampled_from(["/", "/tok/x", "/?a=b", "/#f", "/http://127.0.0.1:4242/"]),
)
def test_the_browsers_request_filter_refuses_exactly_what_the_policy_refuses(scheme, host, port, path):
    # URLs as Chromium hands them to request routing: canonical (default port dropped, path /...)
    default = {"http": 80, "https": 443}[scheme]
    url = f"{scheme}://{host}" + ("" if port in (None, default) else f":{port}") + path
    assert bool(POLICY.blocked_regex().search(url)) == (POLICY.refusal(url) is not None), url
