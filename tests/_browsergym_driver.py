"""BrowserGym's own env on guigym's tasks: the BrowserGym-venv side of tests/test_browsergym_compat.py
(not collected by pytest: leading underscore).

Runs under the isolated BrowserGym venv's python (browsergym-core 0.14.3, its Playwright 1.44)
with guigym's checkout on PYTHONPATH; the embedded sites run in guigym's Python
(``GUIGYM_HOST_PYTHON``). The env is BrowserGym's, unmodified: ``gym.make("browsergym/...")``
builds its ``BrowserEnv``, actions are strings of its default ``HighLevelActionSet``
(``click("a12")``, ``fill("b3", "text")``, ``send_msg_to_user("...")``, ``noop()``). The only guigym
line is the import that registers the ids.

argv: OUT.json. Writes ``{"episodes": [{"name", "rewards", "terminated", "task_info", ...}],
"versions": {...}, "probes": {...}}``. The scripted references find element ids (bids) in the
observation's accessibility tree by role and name, and read answers from the page's text, never
from the task.
"""
from __future__ import annotations

import importlib.metadata as md
import json
import re
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Callable

import gymnasium as gym
from browsergym.core.action.highlevel import HighLevelActionSet
from browsergym.utils.obs import flatten_axtree_to_str

import guigym.compat.browsergym  # noqa: F401  - the one-line change: registers browsergym/guigym.*


def bid(obs: dict[str, Any], role: str, name: str) -> str:
    """The BrowserGym id of the first node of the observation's AX tree with ``role`` and ``name``."""
    for node in obs["axtree_object"]["nodes"]:
        if (node.get("role", {}).get("value") == role and node.get("name", {}).get("value") == name
                and "browsergym_id" in node):
            return str(node["browsergym_id"])
    raise LookupError(f"no {role} named {name!r} in the observation")


def page_text_match(obs: dict[str, Any], pattern: str) -> str:
    m = re.search(pattern, flatten_axtree_to_str(obs["axtree_object"]))
    if not m:
        raise LookupError(f"{pattern!r} not in the page")
    return m.group(1)


Plan = Callable[[dict[str, Any]], str]  # observation -> next action string
#: BrowserGym's high-level actions give Playwright 500 ms (browsergym/core/action/functions.py), so
#: on a loaded machine an action that worked can still report a timeout; a reference step may
#: carry a check of its effect on the next observation and is repeated (at most RETRIES times)
#: until the check holds, so the test does not depend on the machine's speed
Checked = tuple[Plan, Callable[[dict[str, Any]], bool]]
RETRIES = 4


def run(env_id: str, plan: list[Any], seed: int = 0) -> dict[str, Any]:
    """One episode on BrowserGym's env with its default action set; every step's reward recorded."""
    env = gym.make(env_id, action_mapping=HighLevelActionSet().to_python_code, headless=True)
    try:
        t0 = time.perf_counter()
        obs, info = env.reset(seed=seed)
        out: dict[str, Any] = {"reset_s": time.perf_counter() - t0, "task_info": info.get("task_info", {}),
                               "goal": obs["goal"], "rewards": [], "terminated": False, "errors": [],
                               "urls": [obs["url"]]}
        for item in plan:
            step, check = item if isinstance(item, tuple) else (item, None)
            for _ in range(RETRIES if check else 1):
                obs, reward, terminated, truncated, info = env.step(step(obs))
                if check is None or check(obs) or terminated or truncated:
                    break
            out["rewards"].append(float(reward))
            out["urls"].append(obs["url"])
            if obs["last_action_error"]:
                out["errors"].append(obs["last_action_error"][:300])
            out["last_info"] = {k: v for k, v in info.get("task_info", {}).items() if k != "checks"}
            if terminated or truncated:
                out["terminated"] = bool(terminated)
                break
        print(f"[driver] {env_id}: rewards {out['rewards']} in {time.perf_counter() - t0:.1f} s; "
              f"errors {out['errors']}; info {out.get('last_info')}", file=sys.stderr, flush=True)
        return out
    finally:
        env.close()


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def main(out_path: str) -> int:
    from guigym.compat.browsergym.tasks import prestart

    # the embedded sites start before any browser does (as a long-lived worker would, once)
    t0 = time.perf_counter()
    prestart("spirit", "kiwix")
    site_start_s = time.perf_counter() - t0
    episodes: dict[str, Any] = {}
    noop = lambda obs: "noop(wait_ms=0)"  # noqa: E731
    give_up = lambda obs: 'send_msg_to_user("")'  # noqa: E731 - WebArena's no-op: stop at once, no answer

    # MiniWoB: click the button the page asks for
    episodes["miniwob_reference"] = run("browsergym/guigym.miniwob.click-test",
                                        [lambda o: f'click("{bid(o, "button", "Click Me!")}")'])
    episodes["miniwob_noop"] = run("browsergym/guigym.miniwob.click-test", [noop, noop])
    # an agent that leaves the task page scores 0 and ends the episode
    episodes["miniwob_leaves"] = run("browsergym/guigym.miniwob.click-test", [lambda o: 'goto("about:blank")', noop])

    # embedded kiwix (read-only): open the article, answer from its text
    episodes["kiwix_reference"] = run("browsergym/guigym.webarena.3001", [
        lambda o: f'click("{bid(o, "link", "Tonwyn")}")',
        lambda o: f'send_msg_to_user("{page_text_match(o, r"with a population of ([0-9,]+)")}")',
    ])
    episodes["kiwix_noop"] = run("browsergym/guigym.webarena.3001", [noop, give_up])

    # embedded Spirit forum (stateful, logged in): post a reply; the no-op after it must find the
    # site restored (the reply gone), or the evaluator would score it 1
    text = "I run mine on a single-board computer."
    tree = lambda o: flatten_axtree_to_str(o["axtree_object"])  # noqa: E731
    episodes["spirit_reference"] = run("browsergym/guigym.webarena.5008", [
        (lambda o: f'click("{bid(o, "link", "Recommendations for open-source firmware (part 277)")}")',
         lambda o: "/topic/278/" in o["url"]),
        (lambda o: f'fill("{bid(o, "textbox", "Write comment...")}", "{text}")',
         lambda o: text in tree(o)),
        (lambda o: f'click("{bid(o, "button", "Publish")}")',
         lambda o: f"StaticText '{text}'" in tree(o) or f"paragraph '{text}'" in tree(o)),
        lambda o: 'send_msg_to_user("done")',
    ])
    episodes["spirit_noop"] = run("browsergym/guigym.webarena.5008", [give_up])

    # security probes: the MiniWoB static server refuses a request without its token; the
    # embedded sites and that server listen on loopback
    from guigym.envs.web.miniwob import _static_server

    srv = _static_server()
    probes = {"miniwob_with_token": status(srv.base_url + "miniwob/click-test.html"),
              "miniwob_without_token": status(f"http://127.0.0.1:{srv.port}/miniwob/click-test.html"),
              "miniwob_host": srv.httpd.server_address[0]}
    versions = {n: md.version(n) for n in ("browsergym-core", "playwright", "gymnasium")}
    with open(out_path, "w") as f:
        json.dump({"episodes": episodes, "probes": probes, "versions": versions, "site_start_s": site_start_s}, f,
                  indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
