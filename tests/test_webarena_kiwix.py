"""The embedded wiki (kiwix-serve from Debian's kiwix-tools over a ZIM built with libzim) behind
WebArena-v0's ``wikipedia`` key: its WebArena-format tasks pass ``guigym tasks check``, the
server listens on loopback only, and kiwix's own full-text search works over the built ZIM."""
from __future__ import annotations

import json
import re
import shutil
import socket
import urllib.request

import pytest

from guigym.cli import main
from guigym.envs.web.webarena import sites as S

pytestmark = pytest.mark.skipif(bool(S.EMBEDDED["kiwix"].missing()),
                                reason=f"the wiki site needs {', '.join(S.EMBEDDED['kiwix'].missing())} "
                                       "(scripts/install.sh)")
SUITE = S.EMBEDDED["kiwix"].suite


def test_the_wiki_suite_passes_tasks_check(tmp_path):
    out = tmp_path / "rows.json"
    code = main(["tasks", "check", "--env", "WebArena-v0", "--embedded", "kiwix", "--json", str(out)])
    rows = json.loads(out.read_text())
    assert code == 0, rows
    assert [(r["noop"], r["reference"], r["status"]) for r in rows] == [(0.0, 1.0, "ok")] * len(json.loads(SUITE.read_text()))
    kinds = {k for c in json.loads(SUITE.read_text()) for k in c["eval"]["eval_types"]}
    assert kinds == {"string_match", "url_match"}


def _other_address() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
        return s.getsockname()[0]


def test_the_wiki_serves_on_loopback_only_and_its_search_finds_articles_by_content(tmp_path):
    from guigym.envs.web.webarena.sites.kiwix import BOOK, KiwixSite

    site = KiwixSite(tmp_path / "wiki")
    site.start()
    try:
        landing = urllib.request.urlopen(f"{site.url}/{BOOK}/Landing", timeout=5).read().decode()
        town = re.search(rf'href="([A-Z][a-z]+)"', landing).group(1)
        page = urllib.request.urlopen(f"{site.url}/{BOOK}/{town}", timeout=5).read().decode()
        industry = re.search(r"known for ([a-z ]+)\.", page).group(1)
        hits = urllib.request.urlopen(f"{site.url}/search?content={BOOK}&pattern={industry.replace(' ', '+')}",
                                      timeout=5).read().decode()
        assert f'href="/{BOOK}/{town}"' in hits  # the full-text index holds the article's body
        addr = _other_address()
        if addr.startswith("127."):
            pytest.skip("no non-loopback address on this machine to try")
        with pytest.raises(OSError):
            socket.create_connection((addr, site.port), timeout=2).close()
    finally:
        site.close()
    assert site._proc is None
