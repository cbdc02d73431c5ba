"""What a click reveals is in WebArena's tree, and native ``<select>`` drop-downs work in its dialect.

A local page (loopback http.server) with Bootstrap 4-like tabs (the old pane fades out, the new
one is swapped in on ``transitionend``) and native selects. WebArena's dialect has no select
action: ``type [combobox] [label] [1]`` uses the drop-down's own type-ahead, and ``click [option]``
chooses an option the closed drop-down does not lay out (observation.py ``_CHOOSE_FN``).
"""
from __future__ import annotations

import http.server
import threading
from typing import Any

import gymnasium as gym
import pytest

import guigym  # noqa: F401 - registers the envs
from guigym.envs.web.webarena.observation import wait_until_still
from guigym.envs.web.webarena.reference import find_id

PAGE = b"""<!doctype html><html><head><meta charset="utf-8"><title>Tabs</title>
<style>
.pane{display:none;opacity:0;transition:opacity .4s linear}
.pane.active{display:block}
.pane.show{opacity:1}
.spin{width:10px;height:10px;background:#000;animation:turn 1s linear infinite}
@keyframes turn{to{transform:rotate(360deg)}}
</style></head><body>
<div class="spin"></div>
<ul role="tablist"><li><a href="#one" role="tab">One</a></li><li><a href="#two" role="tab">Two</a></li></ul>
<div id="one" class="pane active show" role="tabpanel"><p>First pane text</p></div>
<div id="two" class="pane" role="tabpanel"><p>Second pane text</p><textarea aria-label="Message"></textarea></div>
<form><label for="st">Status</label>
<select id="st"><option>Pending</option><option>Processing</option><option>Complete</option>
<option disabled>Archived</option><option>Canceled</option></select></form>
<p id="echo">nothing chosen</p>
<script>
document.getElementById('st').addEventListener('change', function (e) {
  document.getElementById('echo').textContent = 'chose ' + e.target.value;
});
document.querySelectorAll('[role=tab]').forEach(function (a) {
  a.addEventListener('click', function (e) {
    e.preventDefault();
    var next = document.querySelector(a.getAttribute('href')), cur = document.querySelector('.pane.active');
    if (cur === next) return;
    cur.addEventListener('transitionend', function done() {
      cur.removeEventListener('transitionend', done);
      cur.classList.remove('active');
      next.classList.add('active');
      next.offsetHeight;  // reflow, so that the new pane fades in
      next.classList.add('show');
    });
    cur.classList.remove('show');
  });
});
</script></body></html>"""


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)


def _config() -> dict[str, Any]:
    return {"sites": ["shopping"], "task_id": 1, "require_login": False, "storage_state": None,
            "start_url": "__SHOPPING__/", "geolocation": None, "intent_template": "Choose a status",
            "instantiation_dict": {}, "intent": "Choose a status", "require_reset": False, "intent_template_id": 1,
            "eval": {"eval_types": ["string_match"], "reference_answers": {"exact_match": "done"},
                     "reference_url": "", "program_html": [], "string_note": ""}}


@pytest.fixture(scope="module")
def env():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    e = gym.make("WebArena-v0", tasks=[_config()], urls={"shopping": f"http://127.0.0.1:{server.server_port}"})
    try:
        yield e.unwrapped
    finally:
        e.close()
        server.shutdown()


def _id(a11y: str, role: str, name: str) -> str:
    found = find_id(a11y, role, name)
    assert found is not None, f"no {role} {name!r} in\n{a11y}"
    return found


def _selected(a11y: str) -> list[str]:
    return [ln.split("'")[1] for ln in a11y.splitlines() if " option '" in ln and "selected: True" in ln]


def test_the_pane_a_tab_click_reveals_is_in_the_next_tree(env):
    obs, _ = env.reset()
    assert "First pane text" in obs["a11y"] and "Second pane text" not in obs["a11y"]
    obs, _, _, _, info = env.step(f"click [{_id(obs['a11y'], 'tab', 'Two')}]")
    assert info["action_error"] is None
    # observed once the old pane has faded out and the new one is in (not mid-transition)
    assert "Second pane text" in obs["a11y"] and "First pane text" not in obs["a11y"]
    assert find_id(obs["a11y"], "textbox", "Message") is not None


def test_typing_into_a_native_select_chooses_by_its_label(env):
    obs, _ = env.reset()
    assert _selected(obs["a11y"]) == ["Pending"]
    obs, _, _, _, info = env.step(f"type [{_id(obs['a11y'], 'combobox', 'Status')}] [Complete] [1]")
    assert info["action_error"] is None
    assert _selected(obs["a11y"]) == ["Complete"]
    assert "StaticText 'chose Complete'" in obs["a11y"]  # the page saw a user's change event


def test_clicking_an_option_of_a_closed_select_chooses_it(env):
    obs, _ = env.reset()
    obs, _, _, _, info = env.step(f"click [{_id(obs['a11y'], 'option', 'Canceled')}]")
    assert info["action_error"] is None
    assert _selected(obs["a11y"]) == ["Canceled"]
    assert "StaticText 'chose Canceled'" in obs["a11y"]
    assert env.controller.evaluate("document.getElementById('st').value") == "Canceled"
    # then the keyboard still reaches the select, as after a user's choice
    obs, _, _, _, info = env.step(f"type [{_id(obs['a11y'], 'combobox', 'Status')}] [Processing] [1]")
    assert _selected(obs["a11y"]) == ["Processing"]


def test_a_disabled_option_is_refused_and_changes_nothing(env):
    obs, _ = env.reset()
    obs, _, _, _, info = env.step(f"click [{_id(obs['a11y'], 'option', 'Archived')}]")
    assert "disabled" in (info["action_error"] or "")
    assert _selected(obs["a11y"]) == ["Pending"] and "StaticText 'nothing chosen'" in obs["a11y"]


def test_waiting_for_stillness_ignores_endless_animations_and_gives_up_at_the_cap(env):
    env.reset()
    ctl = env.controller
    # only the spinner runs (infinite): the page counts as still
    assert ctl.runtime.run(wait_until_still(ctl.page, 5000.0), 30, "waiting") is True
    ctl.evaluate("document.querySelector('.pane.active').style.transitionDuration = '60s'")
    ctl.evaluate("document.querySelector('.pane.active').classList.remove('show')")
    # a minute-long fade is not waited for past the cap
    assert ctl.runtime.run(wait_until_still(ctl.page, 200.0), 30, "waiting") is False
