"""Attack (issue 35, item 3): a page of the agent's makes the browser getters fail, to turn a failed
task into a lost episode. The page redefines what the getters' expressions use (``Promise``), or
never answers. The owner check passes (a real Chromium); what the page answers is the page's
doing, so the getter scores as for a page without the content (before: ``EnvInfraError``).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from guigym.envs.desktop.evaluators import GETTERS, GetterContext
from guigym.envs.desktop.evaluators.getters import browser
from guigym.envs.desktop.evaluators.getters.browser import cdp_evaluate

pytestmark = [pytest.mark.timeout(300)]

PAGE = ("<title>Hostile</title><p>agent page</p>"
        "<script>window.Promise = function () { throw new Error('no promises here'); };</script>")


class LocalClient:
    """The desktop is this machine: ``execute`` runs the command here."""

    def execute(self, command: Any, shell: bool = False, timeout: float = 60) -> dict:
        p = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        return {"status": "success", "output": p.stdout, "error": p.stderr, "returncode": p.returncode}


@pytest.fixture(scope="module")
def hostile_page(tmp_path_factory) -> Iterator[tuple[GetterContext, str]]:
    """(context whose browser port is a real Chromium showing the agent's page, the page's url)."""
    exe = shutil.which("chromium") or shutil.which("google-chrome")
    if exe is None:
        pytest.skip("no Chromium on this machine")
    tmp = tmp_path_factory.mktemp("page")
    page = tmp / "p.html"
    page.write_text(PAGE)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             f"--remote-debugging-port={port}", f"--user-data-dir={tmp / 'profile'}",
                             page.as_uri()], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        ctx = GetterContext(client=LocalClient(), cache_dir=tmp / "cache")
        ctx.chromium_port = port  # type: ignore[attr-defined]
        deadline = time.monotonic() + 60
        got = None
        while time.monotonic() < deadline:
            got = cdp_evaluate(ctx, page.as_uri(), "document.title")
            if got is not None and got.get("value") == "Hostile":
                break
            time.sleep(0.3)
        assert got is not None and got.get("value") == "Hostile", got
        yield ctx, page.as_uri()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_a_page_that_breaks_the_getters_expression_scores_as_no_content(hostile_page, monkeypatch) -> None:
    ctx, url = hostile_page
    monkeypatch.setattr(browser, "_active_url", lambda ctx, spec: url)
    answer = cdp_evaluate(ctx, url, "new Promise(function (r) { r(1); })")
    assert answer is not None and "no promises here" in answer["page_error"] and "value" not in answer
    assert GETTERS.get("active_tab_info")(ctx, {}) is None  # its expression needs Promise


def test_a_page_that_never_answers_scores_as_no_content(hostile_page) -> None:
    ctx, url = hostile_page
    # an async function's own promise, awaiting a thenable that never settles: never answers
    answer = cdp_evaluate(ctx, url, "(async function () { await {then: function () {}}; })()", timeout=3)
    assert answer is not None and "timed out" in answer["page_error"], answer
