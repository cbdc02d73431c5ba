"""The documentation site (mkdocs.yml, docs/): it builds with ``mkdocs build --strict`` (broken
links and anchors, docstrings mkdocstrings cannot read: all errors), its index page opens in
headless Chromium with a nav that reaches every env page, and the Python examples of the pages in
``TESTED_PAGES`` run and print what their comments say.

Example convention: every ``print(...)`` in a tested block carries its expected output as a
trailing comment (continued on comment-only lines below it, joined without spaces), optionally
followed by ``: explanation``; a block that makes an env needs Chromium and is skipped without it.
"""
from __future__ import annotations

import contextlib
import functools
import http.server
import io
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: pages whose ```python blocks are executed (the other pages' examples need a desktop, GPUs or
#: a WebArena deployment)
TESTED_PAGES = ("index.md", "dialects.md")
#: nav label -> built page of each env family
ENV_PAGES = {"MiniWoB-v0": "envs/miniwob.html", "OSWorld-v0": "envs/osworld.html",
             "WebArena-v0": "envs/webarena.html", "Android": "envs/android.html"}
_FENCE = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


# ---- examples ------------------------------------------------------------------------------------
def python_blocks(page: str) -> list[tuple[str, str]]:
    """(``page:line``, code) of every ```python block of ``docs/<page>``."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return [(f"{page}:{text.count(chr(10), 0, m.start()) + 2}", m.group(1)) for m in _FENCE.finditer(text)]


def expected_prints(code: str) -> list[str]:
    """The expected output of each ``print(...)  # output`` line, in order; comment-only lines
    right below, indented to the same column, continue it."""
    lines = code.splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("print(") or "  # " not in line:
            continue
        col = line.index("  # ") + 2
        parts = [line[col + 2:].strip()]
        for nxt in lines[i + 1:]:
            if nxt[:col].strip() or not nxt[col:].startswith("#"):
                break
            parts.append(nxt[col + 1:].strip())
        out.append("".join(parts))
    return out


def _needs_chromium(code: str) -> None:
    if "gym.make(" not in code:
        return
    from guigym.core.errors import EnvInfraError
    from guigym.envs.web.browser import find_chromium

    try:
        find_chromium()
    except EnvInfraError as exc:
        pytest.skip(f"this example runs MiniWoB in Chromium, and there is none here: {exc}")


EXAMPLES = [block for page in TESTED_PAGES for block in python_blocks(page)]


def test_the_tested_pages_have_examples():
    pages = {where.split(":")[0] for where, _ in EXAMPLES}
    assert pages == set(TESTED_PAGES)
    # the quickstart's MiniWoB episode is among them
    assert any(where.startswith("index.md") and 'gym.make("MiniWoB-v0"' in code for where, code in EXAMPLES)


@pytest.mark.parametrize("where,code", EXAMPLES, ids=[where for where, _ in EXAMPLES])
def test_example_runs_and_prints_what_its_comments_say(where, code):
    _needs_chromium(code)
    namespace: dict[str, object] = {"__name__": "__docs_example__"}
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            exec(compile(code, where, "exec"), namespace)  # noqa: S102 - our own docs' examples
    finally:
        env = namespace.get("env")
        if env is not None and hasattr(env, "close"):
            env.close()  # idempotent; frees Chromium if the example failed half-way
    printed = buf.getvalue().splitlines()
    expected = expected_prints(code)
    assert len(printed) == len(expected), (
        f"{where}: {len(printed)} lines printed, {len(expected)} print(...) lines with an expected-output "
        f"comment:\n" + "\n".join(printed))
    for got, want in zip(printed, expected):
        got = got.strip()
        assert got and (want == got or want.startswith(got + ": ")), f"{where}: printed {got!r}, the docs say {want!r}"


def test_expected_output_comments_are_read_with_their_continuation_lines():
    code = ('print(x)   # <a b="1"/>\n'
            '           #   <c/></a>\n'
            'y = 2      # not a print\n'
            'print(y)   # 2: the explanation\n')
    assert expected_prints(code) == ['<a b="1"/><c/></a>', "2: the explanation"]


# ---- the site ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason="the docs extra is not installed: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    # NO_MKDOCS_2_WARNING: mkdocs-material's end-of-life banner is not a build warning
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return out, proc


@pytest.mark.slow  # the build alone took 20 s on 2 busy cores (griffe reads the whole package)
def test_site_builds_strict_without_warnings(built_site):
    out, proc = built_site
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    assert not [line for line in log.splitlines() if re.match(r"\s*(WARNING|ERROR)\b", line)], log
    for page in ["index.html", *ENV_PAGES.values(), "dialects.html", "eval.html", "training.html",
                 "scale-out.html", "security.html", "architecture.html", "benchmarks.html"]:
        assert (out / page).is_file(), page
    # the API pages are generated from docstrings, not empty stubs
    actions = (out / "api" / "actions.html").read_text(encoding="utf-8")
    assert 'id="guigym.core.actions.Click"' in actions and 'id="guigym.core.dialect.parse_action"' in actions
    config = (out / "api" / "train-config.html").read_text(encoding="utf-8")
    assert 'id="guigym.train.config.TrainConfig"' in config and 'id="guigym.train.config.load_recipe"' in config


@pytest.fixture(scope="module")
def site_server(built_site):
    out, proc = built_site
    if proc.returncode != 0:
        pytest.fail("the site did not build (see test_site_builds_strict_without_warnings)")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(out)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield out, f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


def _h1(page) -> str:
    """The page heading without its permalink sign."""
    return page.locator("article h1").first.inner_text().replace("\u00b6", "").strip()


@pytest.mark.slow
def test_index_opens_in_chromium_and_its_nav_reaches_every_env_page(site_server):
    sync_api = pytest.importorskip("playwright.sync_api")
    from guigym.core.errors import EnvInfraError
    from guigym.envs.web.browser import find_chromium

    out, base = site_server
    with sync_api.sync_playwright() as pw:
        try:
            exe = find_chromium(pw.chromium.executable_path)
        except EnvInfraError as exc:
            pytest.skip(f"no Chromium on this machine: {exc}")
        browser = pw.chromium.launch(executable_path=exe, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            resp = page.goto(base + "index.html")
            assert resp is not None and resp.status == 200
            assert page.title() == "guigym"
            assert _h1(page) == "guigym"
            links = page.eval_on_selector_all(
                "nav.md-nav--primary a.md-nav__link", "els => els.map(e => [e.textContent.trim(), e.href])")
            by_label = {label: href for label, href in links}
            for label, built in ENV_PAGES.items():
                assert label in by_label, f"no nav link {label!r}; nav has {sorted(by_label)}"
                href = by_label[label]
                assert href.startswith(base), href
                path = unquote(urlparse(href).path).lstrip("/")
                assert path == built and (out / path).is_file(), (label, href)
                resp = page.goto(href)
                assert resp is not None and resp.status == 200, href
                assert page.title() == f"{label} - guigym"
                assert _h1(page) == label
        finally:
            browser.close()
