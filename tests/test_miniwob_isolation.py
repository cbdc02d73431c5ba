"""MiniWoB-v0's episode isolation (issue 38): whatever episode 1 plants, episodes 2 and 3 do not see.

Each mode gets one env (module-scoped, so the browser starts once per mode) and one run: episode 1
plants every item, in the task site (a page script) and in a second allowed site (the agent's own
``goto`` to a page whose script plants); a probe in episode 1 shows each plant took effect; then
episodes 2 and 3 probe both sites. Episode 3 matters for ``isolation="clean"``: its two contexts
take turns, so episode 3 runs in episode 1's context, cleaned (asserted below). The same tests run
with ``isolation="context"`` (a fresh context per episode).
"""
from __future__ import annotations

import json
import os
import secrets
import time
from typing import Any, Iterator

import gymnasium as gym
import pytest

from web_helpers import LoopbackSite

#: planted in the page's origin: every kind of per-origin storage, then read back by PROBE_JS
PLANT_JS = """async (m) => {
  document.cookie = 'planted=' + m + '; max-age=3600; path=/';
  localStorage.setItem('planted', m);
  sessionStorage.setItem('planted', m);
  await new Promise((ok, bad) => {
    const r = indexedDB.open('planted-db', 1);
    r.onupgradeneeded = () => r.result.createObjectStore('s');
    r.onerror = bad;
    r.onsuccess = () => {
      const tx = r.result.transaction('s', 'readwrite');
      tx.objectStore('s').put(m, 'k');
      tx.oncomplete = () => { r.result.close(); ok(); };
    };
  });
  const c = await caches.open('planted-cache');
  await c.put('/planted-entry', new Response(m));
  await fetch(location.pathname + '?cached=' + m).then(r => r.text());  // into the HTTP cache
  return true;
}"""

#: what a page of this origin can see of the plants (and of the tab it is in)
PROBE_JS = """async (m) => {
  let httpCached = false;
  try {
    await fetch(location.pathname + '?cached=' + m, {cache: 'only-if-cached', mode: 'same-origin'});
    httpCached = true;
  } catch (e) {}
  const bc = new BroadcastChannel('planted');
  let heard = 0;
  bc.onmessage = () => { heard += 1; };
  await new Promise(r => setTimeout(r, 400));  // the old timers/workers post every 20 ms
  bc.close();
  const perm = await navigator.permissions.query({name: 'geolocation'});
  return {
    cookie: document.cookie.includes('planted='),
    localStorage: localStorage.getItem('planted') !== null,
    sessionStorage: sessionStorage.getItem('planted') !== null,
    indexedDB: (await indexedDB.databases()).some(d => d.name === 'planted-db'),
    cacheStorage: (await caches.keys()).includes('planted-cache'),
    serviceWorker: (await navigator.serviceWorker.getRegistrations()).length > 0,
    httpCache: httpCached,
    timers: heard > 0 || localStorage.getItem('timer') !== null,
    windowName: window.name !== '',
    history: history.length,
    permission: perm.state === 'granted',
    focus: document.hasFocus() && document.activeElement === document.body,
    zoom: [devicePixelRatio, visualViewport.scale, innerWidth],
  };
}"""

#: started in episode 1's task page: a timer, a dedicated and a shared worker, each posting to a
#: BroadcastChannel (and the timer writing localStorage) every 20 ms for as long as it lives
TIMERS_JS = """() => {
  setInterval(() => { localStorage.setItem('timer', Date.now()); new BroadcastChannel('planted').postMessage('t'); }, 20);
  const src = "setInterval(() => new BroadcastChannel('planted').postMessage('w'), 20); onconnect = () => {};";
  const url = URL.createObjectURL(new Blob([src], {type: 'text/javascript'}));
  window.__planted = [new Worker(url), new SharedWorker(url)];
  return true;
}"""

def _site_page(path: str) -> tuple[int, dict[str, str], str]:
    """The second site: ``/plant?m=`` plants everything (its script), ``?cached=`` answers are
    cacheable for an hour (the task site's static server is cacheable by its Last-Modified)."""
    if "cached=" in path:
        return 200, {"Cache-Control": "max-age=3600", "Content-Type": "text/plain"}, "cached"
    if path.startswith("/plant"):
        m = path.split("m=", 1)[1]
        body = (f"<p>plant</p><script>window.name = 'planted';"
                f"navigator.serviceWorker.register('/sw.js').then(() => navigator.serviceWorker.ready)"
                f".then(() => ({PLANT_JS})({json.dumps(m)}))"
                f".then(() => {{ const a = document.createElement('a'); a.href = '/download'; a.download = 'x.txt';"
                f" document.body.appendChild(a); a.click(); document.title = 'planted'; }})</script>")
        return 200, {}, body
    if path == "/sw.js":
        return 200, {"Content-Type": "text/javascript"}, "self.addEventListener('fetch', () => {});"
    if path == "/download":
        return 200, {"Content-Type": "application/octet-stream",
                     "Content-Disposition": "attachment; filename=x.txt"}, "downloaded"
    return 200, {}, "<p>probe</p>"


@pytest.fixture(scope="module")
def site() -> Iterator[LoopbackSite]:
    s = LoopbackSite(_site_page)
    yield s
    s.close()


def _run(env: Any, coro: Any) -> Any:
    return env.controller.runtime.run(coro, 30, "test helper")


def _probe_both(env: Any, site: LoopbackSite, m: str) -> dict[str, Any]:
    """The probe in the task page, then (the agent's goto) in the second site."""
    c = env.controller
    seen = {"task_site": c.evaluate(PROBE_JS, m), "tabs": len(c.episode.context.pages)}
    _, _, _, _, info = env.step(f'goto(url="{site.origin}/probe")')
    assert info["action_error"] is None, info["action_error"]
    seen["other_site"] = c.evaluate(PROBE_JS, m)
    return seen


def _plant_and_probe(mode: str, site: LoopbackSite) -> dict[str, Any]:
    env = gym.make("MiniWoB-v0", task="click-test", isolation=mode, allowed_origins=[site.origin],
                   call_timeout_s=60, ready_timeout_s=120).unwrapped
    # bounds for a CI machine loaded by other jobs: they only fail a hung browser faster
    env.controller.runtime.launch_timeout_s = 300
    env.controller.config.load_timeout_s = 120
    m = secrets.token_hex(4)
    try:
        env.reset(seed=1)
        c = env.controller
        ctx1 = c.episode.context
        fresh_zoom = c.evaluate("[devicePixelRatio, visualViewport.scale, innerWidth]")
        # -- episode 1 plants: page scripts in the task site ...
        assert c.evaluate(PLANT_JS, m) is True
        assert c.evaluate(TIMERS_JS) is True
        c.evaluate("window.name = 'planted'; document.getElementById('subbtn').focus()")
        c.evaluate("window.open(location.href + '?popup', 'planted-popup'); true")
        control_task = c.evaluate(PROBE_JS, m)
        # ... the host grants what a task's setup might (permission, geolocation override) ...
        _run(env, ctx1.grant_permissions(["geolocation"], origin=site.origin))
        for o in c.episode.policy.origins:
            _run(env, ctx1.grant_permissions(["geolocation"], origin=o))
        _run(env, ctx1.set_geolocation({"latitude": 10.0, "longitude": 20.0}))
        # ... and the agent's own actions: a new tab, zoom keys, the other site's planting page
        env.step("new_tab()")
        env.step('hotkey(keys=["ctrl", "+"])')
        env.step("tab_focus(index=0)")
        downloads: list[Any] = []
        c.page.on("download", lambda d: downloads.append(d))  # the planting page downloads in this tab
        _, _, _, _, info = env.step(f'goto(url="{site.origin}/plant?m={m}")')
        assert info["action_error"] is None, info["action_error"]
        deadline = time.monotonic() + 30
        while c.evaluate("document.title") != "planted":
            assert time.monotonic() < deadline, "the planting page did not finish"
            time.sleep(0.1)
        while not downloads:
            assert time.monotonic() < deadline, "the download did not start"
            time.sleep(0.1)
        download_path = _run(env, downloads[0].path())
        control = {"task_site": control_task, "other_site": c.evaluate(PROBE_JS, m), "tabs": len(ctx1.pages),
                   "download": os.path.exists(download_path),
                   "service_workers": len(ctx1.service_workers)}
        seen = {}
        for ep in (2, 3):
            env.reset(seed=ep)
            seen[ep] = _probe_both(env, site, m)
            seen[ep]["same_context_as_1"] = env.controller.episode.context is ctx1
        # episode 1's context: closed (context) or cleaned while episode 2 ran (clean); its
        # downloads and workers go with it, in the background
        deadline = time.monotonic() + 30
        while os.path.exists(download_path) and time.monotonic() < deadline:
            time.sleep(0.1)
        seen["download_left"] = os.path.exists(download_path)
        seen["service_workers_left"] = len(ctx1.service_workers) if seen[3]["same_context_as_1"] else 0
        return {"control": control, "seen": seen, "fresh_zoom": fresh_zoom}
    finally:
        env.close()


@pytest.fixture(scope="module", params=["clean", "context"])
def run(request: pytest.FixtureRequest, site: LoopbackSite) -> dict[str, Any]:
    out = _plant_and_probe(request.param, site)
    out["mode"] = request.param
    return out


STORAGE = ["cookie", "localStorage", "sessionStorage", "indexedDB", "cacheStorage", "httpCache"]


def test_each_plant_took_effect_in_episode_1(run):
    # the probes can see what they look for: without this the other tests would prove nothing
    c = run["control"]
    assert all(c["other_site"][k] for k in STORAGE + ["serviceWorker", "windowName", "permission"]), c
    assert all(c["task_site"][k] for k in STORAGE + ["timers", "windowName"]), c
    # no check that the planted button focus held: with the next episode's page opening in the other
    # context it can move back to the body (seen once in a full-suite run), and a new document starts
    # with focus on its body anyway, so episode 2's focus check below needs no plant to mean something
    assert c["tabs"] >= 3 and c["download"] and c["service_workers"] >= 1


def test_clean_mode_runs_episode_3_in_episode_1s_context(run):
    assert run["seen"][3]["same_context_as_1"] is (run["mode"] == "clean")
    assert run["seen"][2]["same_context_as_1"] is False


@pytest.mark.parametrize("item", STORAGE)
@pytest.mark.parametrize("ep", [2, 3])
def test_per_origin_storage_does_not_reach_later_episodes(run, item, ep):
    for where in ("task_site", "other_site"):
        assert run["seen"][ep][where][item] is False, (where, run["seen"][ep][where])


@pytest.mark.parametrize("ep", [2, 3])
def test_service_workers_are_unregistered_and_stopped(run, ep):
    assert run["seen"][ep]["other_site"]["serviceWorker"] is False
    assert run["seen"]["service_workers_left"] == 0


@pytest.mark.parametrize("ep", [2, 3])
def test_permissions_and_geolocation_grants_are_gone(run, ep):
    for where in ("task_site", "other_site"):
        assert run["seen"][ep][where]["permission"] is False


def test_downloads_are_deleted(run):
    assert run["seen"]["download_left"] is False


@pytest.mark.parametrize("ep", [2, 3])
def test_extra_tabs_and_popups_are_closed(run, ep):
    assert run["seen"][ep]["tabs"] == 1


@pytest.mark.parametrize("ep", [2, 3])
def test_the_task_page_is_a_new_document_in_a_fresh_tab_state(run, ep):
    s = run["seen"][ep]["task_site"]
    assert s["history"] == 1
    assert s["windowName"] is False
    assert s["focus"] is True  # the document has focus, on no element of the old one
    assert s["zoom"] == run["fresh_zoom"]


@pytest.mark.parametrize("ep", [2, 3])
def test_no_timer_or_worker_of_the_old_documents_runs(run, ep):
    for where in ("task_site", "other_site"):
        assert run["seen"][ep][where]["timers"] is False, where
