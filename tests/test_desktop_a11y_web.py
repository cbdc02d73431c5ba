"""The per-node cache of Chromium windows (issue 17; guigym.envs.desktop.server.chrome NodeProps):
a node's name, role, text, actions and children are reused until an AT-SPI event names the node,
so a Chromium or VS Code step reads ~2 calls per node instead of ~15.

The rule checked here: a walk that uses the cache yields the same XML as a walk without it, after
each kind of DOM change (text, a name computed from contents, node added/removed, state,
attributes, checkbox, input value, scroll, focus, display, role, aria-label). On a real Chromium
in the local desktop: the check script runs inside the sandbox, against the page written here
whose key presses make the changes. Skips with the reason when the desktop or Chromium is absent.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from desktop_needs import need_desktop

from guigym.envs.desktop.server import chrome

SERVER_DIR = Path(__file__).resolve().parents[1] / "guigym" / "envs" / "desktop" / "server"


class _App:
    bus_name = ":1.9"


class _Acc:
    """Stand-in for a libatspi accessible: only the fields chrome.key_of and the listener read."""

    def __init__(self, path: str, parent: _Acc | None = None) -> None:
        self.app, self.path, self.accessible_parent = _App(), path, parent


class _Event:
    def __init__(self, source: _Acc) -> None:
        self.source = source


def test_node_readings_are_kept_until_an_event_names_the_node_or_its_child():
    c = chrome.ChromeCache()
    c.listening = True  # as after listen() registered the AT-SPI listener
    doc = _Acc("/doc")
    para, link = _Acc("/p", doc), _Acc("/a", doc)
    for acc, name in ((doc, "page"), (para, ""), (link, "Link A")):
        c.put_node(chrome.key_of(acc), chrome.NodeProps(name, "link", "", {"act:jump_desc": ""}))
    c.sweep()
    assert c.node(chrome.key_of(link)).name == "Link A"
    c._on_event(_Event(link))  # e.g. object:property-change:accessible-name
    c.sweep()
    # the source and its parent (whose children may have changed) are read again, not the rest
    assert c.node(chrome.key_of(link)) is None and c.node(chrome.key_of(doc)) is None
    assert c.node(chrome.key_of(para)) is not None
    c.nodes[chrome.key_of(para)].stored -= chrome.MAX_AGE_S + 1
    assert c.node(chrome.key_of(para)) is None  # old: read afresh even without an event


def test_old_readings_are_read_again_a_few_per_walk():
    c = chrome.ChromeCache()
    c.listening = True
    keys = [chrome.key_of(_Acc(f"/n{i}")) for i in range(chrome.REFRESH_PER_WALK + 5)]
    for k in keys:
        c.put_node(k, chrome.NodeProps("", "paragraph", "", {}))
        c.nodes[k].stored -= chrome.MAX_AGE_S + 1
    c.sweep()  # a walk begins
    dropped = [k for k in keys if c.node(k) is None]
    assert len(dropped) == chrome.REFRESH_PER_WALK  # the rest are served once more, not all re-read now
    c.sweep()  # the next walk
    assert all(c.node(k) is None for k in keys if k not in dropped)


def test_nothing_is_kept_without_the_event_listener():
    c = chrome.ChromeCache()
    k = chrome.key_of(_Acc("/a"))
    c.put_node(k, chrome.NodeProps("Link A", "link", "", {}))
    assert not c.nodes and c.node(k) is None


#: runs inside the sandbox with a JSON job ``{"page": html|null, "launch": shell command, "title":
#: window title, "steps": [xdotool args, ...]}``: launches the app, and per step walks with the
#: cache warm, runs the step, then compares cached walks with fresh ones (NODE_CACHE off).
#: Prints one JSON line: step index -> result.
CHECK_SCRIPT = r'''
import json, os, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
from server import a11y
job = json.loads(open(sys.argv[2]).read())
if job["page"]:
    open(os.path.expanduser("~/web-cache-check.html"), "w").write(job["page"])
subprocess.Popen(job["launch"], shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                 start_new_session=True)
wid = subprocess.run(["timeout", "120", "xdotool", "search", "--sync", "--onlyvisible", "--name",
                      job["title"]], capture_output=True, text=True).stdout.split()
if not wid:
    print(json.dumps({"error": "no window " + job["title"]})); sys.exit()
time.sleep(job.get("settle", 2.0))

stats = {}

def walk(cache):
    a11y.NODE_CACHE = cache
    root, st = a11y.tree(time_budget=60)
    stats.update(st)
    return a11y.to_xml(root)

out, prev = {}, walk(False)
for i, step in enumerate(job["steps"]):
    subprocess.run(["xdotool", "windowactivate", "--sync", wid[-1]], capture_output=True)
    walk(True)  # warm: the window's nodes are read and kept
    hits = a11y._chrome.node_hits
    subprocess.run(["xdotool"] + step, capture_output=True)
    time.sleep(1.0)  # Chromium's a11y tree follows the DOM asynchronously
    cached = walk(True)
    reused, prefetched = a11y._chrome.node_hits - hits, stats["prefetched"]
    for _ in range(3):  # a cached walk between two equal fresh ones (the window may animate)
        f1 = walk(False)
        if cached != f1:
            cached = walk(True)
        f2 = walk(False)
        if f1 == f2:
            break
    out[i] = {"equal": cached == f1, "quiet": f1 == f2, "reused": reused, "prefetched": prefetched, "changed": f1 != prev, "xml": f1,
              "cached": cached if cached != f1 else ""}
    prev = f1
print(json.dumps(out))
'''


def _run_check(job: dict, program: str) -> dict:
    """Start a local desktop, run CHECK_SCRIPT with ``job`` in it, return its results by step."""
    need_desktop()
    if shutil.which(program) is None:
        pytest.skip(f"needs {program} (scripts/install.sh installs it)")
    from guigym.envs.desktop.providers.local import LocalProvider
    from guigym.envs.desktop.providers.sandbox import bwrap_problem

    problem = bwrap_problem()
    if problem:
        pytest.skip(problem)
    provider = LocalProvider(screen_size=(1280, 800))
    client = provider.start()
    base = "/tmp/guigym-web-cache-check"
    try:
        client.upload_file(b"", f"{base}/server/__init__.py")
        for p in SERVER_DIR.glob("*.py"):
            client.upload_file(p.read_bytes(), f"{base}/server/{p.name}")
        client.upload_file(CHECK_SCRIPT.encode(), f"{base}/check.py")
        client.upload_file(json.dumps(job).encode(), f"{base}/job.json")
        r = client.execute(["/usr/bin/python3", f"{base}/check.py", base, f"{base}/job.json"], timeout=900)
        lines = [line for line in r["output"].splitlines() if line.startswith("{")]
        assert lines, r
        out = json.loads(lines[-1])
        assert "error" not in out, out
        return out
    finally:
        provider.stop()


#: key -> (kind of change, text the fresh XML must then hold, text it must no longer hold)
CHANGES = {
    "1": ("text", "Paragraph changed", "Paragraph text here."),
    "2": ("name computed from contents", 'name="Link renamed"', 'name="Link A"'),
    "3": ("node added", 'name="Link C"', None),
    "4": ("node removed", None, 'name="Link renamed"'),
    "5": ("state (aria-expanded)", 'st:expanded="true"', None),
    "6": ("name and attributes (aria-label, data-*, class)", 'name="Labelled heading"', None),
    "7": ("checkbox state", 'st:checked="true"', None),
    "8": ("input value", "typed value", None),
    "9": ("scroll", None, None),
    "0": ("focus", None, None),
    "q": ("display: none", None, None),
    "w": ("shown again, resized, role", None, None),
    "e": ("aria-label, aria-level", 'name="Renamed button"', None),
    "r": ("scroll back, hidden attribute", None, 'name="Renamed button"'),
}
PAGE = """<!DOCTYPE html><html><head><title>Web cache check</title></head><body>
<h1 id="h">Heading one</h1><p id="p">Paragraph text here.</p>
<ul id="list"><li><a id="a" href="#a">Link A</a></li><li><a href="#b">Link B</a></li></ul>
<button id="btn" aria-expanded="false">Toggle</button>
<input id="inp" value="abc"> <input type="checkbox" id="cb"><label for="cb">Check me</label>
<div id="box" style="height:40px">Box</div>
""" + "".join(f"<p>Filler paragraph {i} to make the page scroll.</p>" for i in range(80)) + """
<script>
const $ = (id) => document.getElementById(id);
const acts = {
  "1": () => { $("p").textContent = "Paragraph changed"; },
  "2": () => { $("a").textContent = "Link renamed"; },
  "3": () => { const li = document.createElement("li"); li.innerHTML = '<a href="#c">Link C</a>'; $("list").appendChild(li); },
  "4": () => { $("list").removeChild($("list").firstElementChild); },
  "5": () => { $("btn").setAttribute("aria-expanded", "true"); },
  "6": () => { $("h").setAttribute("aria-label", "Labelled heading"); $("btn").setAttribute("data-x", "1"); $("btn").className = "changed"; },
  "7": () => { $("cb").checked = true; },
  "8": () => { $("inp").value = "typed value"; },
  "9": () => { window.scrollBy(0, 400); },
  "0": () => { $("inp").focus(); },
  "q": () => { document.activeElement.blur(); $("box").style.display = "none"; },
  "w": () => { $("box").style.display = "block"; $("box").style.height = "120px"; $("box").setAttribute("role", "button"); },
  "e": () => { $("btn").setAttribute("aria-label", "Renamed button"); $("h").setAttribute("aria-level", "3"); },
  "r": () => { window.scrollTo(0, 0); $("btn").hidden = true; },
};
document.addEventListener("keydown", (ev) => {
  const f = acts[ev.key]; if (f) { ev.preventDefault(); ev.stopPropagation(); f(); }
}, true);
</script></body></html>"""


@pytest.fixture(scope="module")
def web_check() -> dict:
    job = {"page": PAGE, "launch": "exec google-chrome --new-window ~/web-cache-check.html",
           "title": "Web cache check", "steps": [["key", k] for k in CHANGES]}
    out = _run_check(job, "chromium")
    return {k: out[str(i)] for i, k in enumerate(CHANGES)}


@pytest.mark.parametrize("key", list(CHANGES), ids=[v[0] for v in CHANGES.values()])
def test_a_cached_walk_equals_a_fresh_walk_after_each_kind_of_change(web_check, key):
    kind, present, absent = CHANGES[key]
    res = web_check[key]
    # the change happened and shows in the fresh tree, and the cached walk did reuse nodes
    assert res["changed"], f"{kind}: the page's tree did not change"
    if present:
        assert present in res["xml"], f"{kind}: {present!r} not in the fresh tree"
    if absent:
        assert absent not in res["xml"], f"{kind}: {absent!r} still in the fresh tree"
    assert res["reused"] > 50, f"{kind}: the cached walk reused {res['reused']} nodes"
    assert res["prefetched"] > 50, f"{kind}: the cached walk prefetched {res['prefetched']} nodes"
    if not res["quiet"]:
        pytest.skip(f"{kind}: two fresh walks in a row differed three times (the browser kept changing)")
    assert res["equal"], (kind, _first_difference(res["xml"], res["cached"]))


def _first_difference(fresh: str, cached: str) -> str:
    a, b = fresh.replace("><", ">\n<").splitlines(), cached.replace("><", ">\n<").splitlines()
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"line {i}: fresh {x[:300]!r} cached {y[:300]!r}"
    return f"lengths {len(a)} vs {len(b)}"


#: VS Code (code-server in a Chromium --app window): xdotool steps an agent would take, and the
#: kind of change each makes to the window
VSCODE_STEPS = [
    (["type", "--delay", "30", "typed by the test"], "text typed in the editor"),
    (["key", "Return"], "new line"),
    (["key", "ctrl+shift+e"], "focus moves to the explorer"),
    (["key", "F1"], "command palette opens (nodes added)"),
    (["type", "--delay", "30", "toggle"], "palette list filtered"),
    (["key", "Escape"], "palette closes (nodes removed)"),
    (["key", "ctrl+b"], "side bar hidden (layout)"),
    (["key", "ctrl+z"], "undo in the editor"),
]


@pytest.fixture(scope="module")
def vscode_check() -> dict:
    from guigym.envs.desktop.vscode import (
        DEFAULT_PREFIX,
        code_server_bin,
        find_code_server,
    )

    prefix = find_code_server()
    if prefix is None:
        pytest.skip(f"needs code-server (GUIGYM_VSCODE=1 bash scripts/install.sh; looked in {DEFAULT_PREFIX})")
    job = {"page": None, "launch": "printf 'line one\\nline two\\n' > ~/notes.txt && exec code ~/notes.txt",
           "title": "Visual Studio Code", "settle": 8.0, "steps": [s for s, _ in VSCODE_STEPS]}
    return _run_check(job, str(code_server_bin(prefix)))


@pytest.mark.parametrize("i", range(len(VSCODE_STEPS)), ids=[k for _, k in VSCODE_STEPS])
def test_vscode_cached_walk_equals_a_fresh_walk_after_each_step(vscode_check, i):
    kind = VSCODE_STEPS[i][1]
    res = vscode_check[str(i)]
    assert res["changed"], f"{kind}: the window's tree did not change"
    if i == 0:
        assert "typed by the test" in res["xml"], "the typed text is not in the fresh tree"
    assert res["reused"] > 50, f"{kind}: the cached walk reused {res['reused']} nodes"
    assert res["prefetched"] > 50, f"{kind}: the cached walk prefetched {res['prefetched']} nodes"
    if not res["quiet"]:
        pytest.skip(f"{kind}: two fresh walks in a row differed three times (the window kept changing)")
    assert res["equal"], (kind, _first_difference(res["xml"], res["cached"]))
