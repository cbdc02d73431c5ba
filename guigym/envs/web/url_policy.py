"""Which URLs a web episode may show: the task's own origins, and nothing else.

The browser runs on the host, so a URL the agent can open is a host capability. A
:class:`UrlPolicy` allows

* ``http``/``https`` URLs on an allowed origin (``scheme://host[:port]``, default ports dropped):
  the origin of the task's start URL, plus the extra origins the env or the task lists;
* the start URL itself (the host opened it; e.g. a ``file://`` page in a controller test);
* ``about:blank`` (an empty tab).

Everything else is refused: ``file:``, ``data:``, ``javascript:``, ``chrome:``, ``view-source:``,
``blob:``, other hosts and ports, URLs with credentials (``http://allowed@evil/``), and URLs with
whitespace, control characters or backslashes (browsers strip or reinterpret those, so a parser
here and Chromium could read one string as two different URLs).

Enforced three times by :class:`~guigym.envs.web.controller.WebController`: ``goto`` checks the
agent's URL before navigating; every network request of the episode's browser context goes
through the context's own loopback proxy (policy_proxy.py), which refuses what the policy
refuses, which covers navigations the agent causes indirectly (a link it clicks, a page script,
a popup), frames, workers and every hop of a redirect; and a tab found on a refused URL after an
action or before an observation is blanked (``about:blank``) before anything of it is read.
(Chromium itself refuses pages' navigations and redirects to ``file:``, ``chrome:`` and top-level
``data:``.) :meth:`UrlPolicy.blocked_regex` is the same rule as a regex, for request routing
(Playwright's ``route``), which the controller no longer uses: routing turns the HTTP cache off.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Optional
from urllib.parse import urlsplit

from guigym.core.errors import ConfigError

WEB_SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}
ALWAYS_ALLOWED = ("about:blank",)
_BAD_CHARS = re.compile(r"[\x00-\x20\x7f\\]")
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):")


def origin_of(url: str) -> Optional[str]:
    """``scheme://host[:port]`` of an http(s) URL (lower case, default port dropped), else None."""
    if _BAD_CHARS.search(url):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a port that is not a number, an unbalanced IPv6 bracket, ...
        return None
    scheme = parts.scheme.lower()
    if scheme not in WEB_SCHEMES or not parts.hostname or "@" in parts.netloc:
        return None
    host = parts.hostname.lower()
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    return f"{scheme}://{host}" + ("" if port is None or port == DEFAULT_PORTS[scheme] else f":{port}")


def _strip_fragment(url: str) -> str:
    return url.split("#", 1)[0]


@dataclass(frozen=True)
class UrlPolicy:
    """Allowed origins plus exact allowed URLs (fragment ignored). Hashable: a prewarmed browser
    context is reused only for an equal policy."""

    origins: frozenset[str]
    urls: frozenset[str] = frozenset()

    @classmethod
    def for_start_url(cls, start_url: str, extra_origins: Iterable[str] = (), field: str = "allowed_origins") -> "UrlPolicy":
        """The start URL's origin (when it is http(s)) and the start URL, plus ``extra_origins``.

        Raises ConfigError naming ``field`` when an extra origin is not ``http(s)://host[:port]``.
        """
        origins = set()
        for o in extra_origins:
            norm = origin_of(o) if isinstance(o, str) else None
            if norm is None or urlsplit(o).path not in ("", "/") or urlsplit(o).query or urlsplit(o).fragment:
                raise ConfigError(f"{field}: {o!r} is not an origin of the form http(s)://host[:port]")
            origins.add(norm)
        own = origin_of(start_url)
        if own is not None:
            origins.add(own)
        return cls(frozenset(origins), frozenset({_strip_fragment(start_url)}))

    def refusal(self, url: str) -> Optional[str]:
        """None when ``url`` is allowed, else a sentence saying why not."""
        if url in ALWAYS_ALLOWED or _strip_fragment(url) in self.urls:
            return None
        if _BAD_CHARS.search(url):
            return "URLs with whitespace, control characters or backslashes are not allowed"
        m = _SCHEME.match(url)
        scheme = m.group(1).lower() if m else ""
        if scheme not in WEB_SCHEMES:
            what = f"the {scheme}: scheme" if scheme else "a URL without a scheme"
            return f"{what} is not allowed in this task (only http/https on the task's own sites)"
        origin = origin_of(url)
        if origin is None:
            return "not a valid http(s) URL (credentials in the URL are not allowed)"
        if origin not in self.origins:
            allowed = ", ".join(sorted(self.origins)) or "none"
            return f"{origin} is not one of this task's sites (allowed: {allowed})"
        return None

    def allows(self, url: str) -> bool:
        return self.refusal(url) is None

    def blocked_regex(self) -> "re.Pattern[str]":
        """A regex matching every http(s)/ws(s) request URL this policy refuses.

        Playwright sends it to its driver (JS ``RegExp`` semantics), so it sticks to syntax both
        engines read alike: anchors, a negative look-ahead and ``\\xHH`` escapes. Request URLs
        are canonical there (lower-case host, default port dropped, path at least ``/``).
        """
        def lit(s: str) -> str:
            return "".join(c if c.isascii() and c.isalnum() else
                           (f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}") for c in s)

        keep = [lit(o) + "(?:[/?#]|$)" for o in sorted(self.origins)]
        keep += [lit(u) + "(?:#|$)" for u in sorted(self.urls)]
        if not keep:
            return re.compile(r"^")
        return re.compile("^(?!(?:" + "|".join(keep) + "))")
