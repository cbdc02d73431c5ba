"""OSWorld's own run loop on guigym's local desktop: the desktop-env venv side of
tests/test_osworld_desktopenv_compat.py (not collected by pytest: leading underscore).

Runs under desktop-env's isolated venv python with guigym's checkout on PYTHONPATH. The loop is
OSWorld's, unmodified: ``env.reset(task_config=...)``, ``env.step(action)``, ``env.evaluate()``
on ``desktop_env.desktop_env.DesktopEnv``; the only guigym line is the import of ``DesktopEnv``.

argv: PLAN.json OUT.json. The plan::

    {"probe_dir": DIR,                        # a host dir with an answer file the desktop must not see
     "episodes": [{"name", "task": PATH, "action_space": "pyautogui" | "computer_13",
                   "actions": [...], "last_action": "FAIL" | null}, ...]}

OUT gets ``{"episodes": [{"name", "osworld": score, "guigym": score}, ...], "auth": {...},
"hidden": {...}, "timings": {...}}``.
"""
from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from guigym.compat.osworld import DesktopEnv  # the one-line change


def _status(url: str, token: str | None) -> int:
    """HTTP status of GET ``url`` through urllib (no requests hook), with or without the token."""
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def main(plan_path: str, out_path: str) -> int:
    plan = json.loads(Path(plan_path).read_text())
    out: dict[str, Any] = {"episodes": [], "timings": {}}
    t0 = time.monotonic()
    # one desktop for every episode (CI cost): DesktopEnv reads ``action_space`` at each step
    env = DesktopEnv(action_space="pyautogui", require_a11y_tree=False, cache_dir=plan["cache_dir"],
                     terminal=False, hide=[plan["probe_dir"]])
    out["timings"]["init_s"] = time.monotonic() - t0
    try:
        base = f"http://{env.vm_ip}:{env.server_port}"
        # the token is required; the bridge listens on loopback only
        from guigym.compat.osworld import provider as P

        token = P._tokens[f"{env.vm_ip}:{env.server_port}"]
        out["auth"] = {"vm_ip": env.vm_ip, "no_token": _status(base + "/platform", None),
                       "wrong_token": _status(base + "/platform", "x" * 64),
                       "token": _status(base + "/platform", token)}
        for ep in plan["episodes"]:
            task = json.loads(Path(ep["task"]).read_text())
            env.action_space = ep["action_space"]
            t1 = time.monotonic()
            obs = env.reset(task_config=task)
            assert obs["screenshot"], f"{ep['name']}: no screenshot after reset"
            if "hidden" not in out:  # the agent zone's view of the host dirs that hold answers
                out["hidden"] = env.controller.run_bash_script(
                    f"ls -A {plan['probe_dir']!r} {plan['cache_dir']!r}; cat {plan['probe_dir']!r}/answer.txt",
                    timeout=30)
            for action in ep["actions"]:
                env.step(action, pause=0.5)
            guigym = env.provider.guigym_score(task, ep.get("last_action"))  # same state, guigym's verifier
            osworld = env.evaluate()
            out["episodes"].append({"name": ep["name"], "osworld": float(osworld), "guigym": guigym,
                                    "seconds": round(time.monotonic() - t1, 2)})
    finally:
        env.close()
    out["timings"]["total_s"] = time.monotonic() - t0
    Path(out_path).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
