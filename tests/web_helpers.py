"""A loopback HTTP site for browser tests: pages by path, every request it answers recorded."""
from __future__ import annotations

import http.server
import threading
from typing import Any, Callable, Mapping, Union

#: (status, headers, body); Content-Type defaults to text/html
Page = tuple[int, dict[str, str], str]
NOT_FOUND: Page = (404, {}, "not found")


class LoopbackSite:
    """Serves ``pages`` (path with its query -> Page, or a function of that path) on 127.0.0.1 from
    a thread until :meth:`close`. ``hits``: the paths asked, in order. ``origin``: its base URL
    (each site has its own port, so two sites are two origins)."""

    def __init__(self, pages: Union[Mapping[str, Page], Callable[[str], Page]]) -> None:
        lookup = pages if callable(pages) else (lambda path: pages.get(path, NOT_FOUND))
        hits: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - stdlib name
                hits.append(self.path)  # before answering: a test that saw the answer sees the hit
                status, headers, body = lookup(self.path)
                data = body.encode()
                self.send_response(status)
                for k, v in {"Content-Type": "text/html", **headers}.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.hits = hits
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def assert_fast_png_is_lossless(ctl: Any, shape: tuple[int, int, int]) -> None:
    """``ctl`` (a live web controller) captures with Chromium's fast PNG encoder, and its array
    equals the plain encoder's on the same page (PNG is lossless either way) with ``shape``."""
    import numpy as np

    assert ctl._shot_params.get("optimizeForSpeed") is True
    fast = ctl.observe().screenshot
    ctl._shot_params = {"format": "png"}
    try:
        plain = ctl.observe().screenshot
    finally:
        ctl._shot_params = {"format": "png", "optimizeForSpeed": True}
    assert fast.shape == plain.shape == shape
    assert fast.std() > 0 and np.array_equal(fast, plain)
