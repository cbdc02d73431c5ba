"""OSWorld's ``update_browse_history`` setup step: fake visits in the browser's History database.

Parameters (as OSWorld's ``_update_browse_history_setup``): ``history``, a list of
``{"url": str, "title": str, "visit_time_from_now_in_seconds": number}``. Each item becomes one
row of the ``urls`` table (visit_count 1, typed_count 0, hidden 0, last_visit_time = now minus
the offset, in Chrome's microseconds since 1601-01-01) and one row of ``visits`` pointing at it
(from_visit 0, transition 805306368 = LINK | CHAIN_START | CHAIN_END, segment_id 0,
visit_duration 0) - the same rows OSWorld inserts.

Where we differ from OSWorld, on purpose:

* OSWorld downloads an empty ``History`` (Google Drive) and uploads it over the profile's. With
  no network we let the browser create its own: when ``Default/History`` does not exist yet, the
  desktop's ``google-chrome`` runs once headless on the profile until the file is there, then
  quits. The schema is therefore always the one the installed browser expects (a hand-written
  schema would be razed by a browser whose version disagrees).
* The profile is ``~/.config/google-chrome``, or Chromium's ``~/.config/chromium`` when the
  desktop's ``google-chrome`` is Chromium (the same mapping as every other setup path).
* "Now" is UTC (Chrome's timestamps are UTC); OSWorld uses the VM's local wall clock.

Everything runs inside the desktop through ``/execute`` (one python3 process running our fixed
snippet; the task's urls and titles are data in argv, never code).
"""
from __future__ import annotations

import json
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from guigym.core.errors import EnvInfraError, TaskSpecError

__all__ = ["HISTORY_SNIPPET", "step_update_browse_history", "validate_history"]

#: Runs inside the desktop: python3 -c SNIPPET ROOT BROWSER ITEMS_JSON. Creates ROOT/Default/History
#: by running BROWSER headless when it is missing, inserts the items, prints one JSON line
#: ``{"path", "created", "inserted"}`` or ``{"error": ...}`` (exit 3).
HISTORY_SNIPPET = r'''
import json, os, signal, sqlite3, subprocess, sys, time
root, browser, items = os.path.expanduser(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
db = os.path.join(root, "Default", "History")
def fail(msg):
    print(json.dumps({"error": msg})); sys.exit(3)
def tables():
    try:
        con = sqlite3.connect("file:" + db + "?mode=ro", uri=True, timeout=5)
        try:
            return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            con.close()
    except sqlite3.Error:
        return set()
created = False
if not os.path.exists(db):
    os.makedirs(root, exist_ok=True)
    try:
        p = subprocess.Popen([browser, "--headless=new", "--user-data-dir=" + root, "--no-first-run",
                              "--disable-gpu", "about:blank"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        fail("cannot start %s: %s" % (browser, e))
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None and not os.path.exists(db):
        time.sleep(0.3)
    time.sleep(2)  # the file appears before the browser has committed its tables
    try:
        os.killpg(p.pid, signal.SIGTERM)  # a clean exit: no "restore pages?" bubble next launch
        p.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL); p.wait()
    except ProcessLookupError:
        pass
    created = True
    if not os.path.exists(db):
        fail("%s did not create %s within 60 s" % (browser, db))
missing = {"urls", "visits"} - tables()
if missing:
    fail("%s has no table %s (not a browser History database?)" % (db, ", ".join(sorted(missing))))
now = time.time()
con = sqlite3.connect(db, timeout=10)
try:
    with con:
        for it in items:
            ts = int((now - float(it["visit_time_from_now_in_seconds"]) + 11644473600) * 1000000)
            cur = con.execute("INSERT INTO urls (url, title, visit_count, typed_count, last_visit_time, hidden) "
                              "VALUES (?, ?, 1, 0, ?, 0)", (it["url"], it["title"], ts))
            con.execute("INSERT INTO visits (url, visit_time, from_visit, transition, segment_id, visit_duration) "
                        "VALUES (?, ?, 0, 805306368, 0, 0)", (cur.lastrowid, ts))
except sqlite3.Error as e:
    fail("cannot write %s: %s (is the browser running? it locks its History)" % (db, e))
finally:
    con.close()
print(json.dumps({"path": db, "created": created, "inserted": len(items)}))
'''


def validate_history(history: Any) -> list[dict[str, Any]]:
    """``history`` checked and normalised to ``[{"url", "title", "visit_time_from_now_in_seconds"}]``.

    Raises :class:`TaskSpecError` naming the field of the first bad item.
    """
    if not isinstance(history, Sequence) or isinstance(history, (str, bytes)):
        raise TaskSpecError("parameter 'history' must be a list of {url, title, visit_time_from_now_in_seconds}")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(history):
        if not isinstance(item, Mapping):
            raise TaskSpecError(f"parameter 'history[{i}]' must be an object, got {type(item).__name__}")
        for key in ("url", "title"):
            if not isinstance(item.get(key), str):
                raise TaskSpecError(f"parameter 'history[{i}].{key}' must be a string, got {item.get(key)!r}")
        secs = item.get("visit_time_from_now_in_seconds")
        if not isinstance(secs, numbers.Real) or isinstance(secs, bool):
            raise TaskSpecError(f"parameter 'history[{i}].visit_time_from_now_in_seconds' must be a number, "
                                f"got {secs!r}")
        out.append({"url": item["url"], "title": item["title"], "visit_time_from_now_in_seconds": float(secs)})
    return out


def step_update_browse_history(ctx: Any, history: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``_update_browse_history_setup``: add ``history``'s visits to the profile's
    ``Default/History`` (see the module doc). ``ctx`` is a :class:`~.setup.SetupContext`.

    Returns ``{"path", "created", "inserted"}`` (what the in-desktop snippet printed).

    Raises:
        TaskSpecError: a malformed ``history``.
        MissingToolError: the desktop has no python3 or no browser (``google-chrome``/``chromium``).
        EnvInfraError: the browser made no History database or it could not be written.
    """
    from guigym.envs.desktop.evaluators.base import MissingToolError, _returncode

    items = validate_history(history)
    if not ctx.has_tool("python3"):
        raise MissingToolError("update_browse_history: program 'python3' is not installed in the desktop",
                               missing="python3")
    browser = next((b for b in ("google-chrome", "chromium") if ctx.has_tool(b)), None)
    if browser is None:
        raise MissingToolError("update_browse_history: no browser in the desktop to create the History "
                               "database (google-chrome, or Debian's chromium)", missing="google-chrome")
    root = "~/.config/chromium" if ctx.chrome_is_chromium() else "~/.config/google-chrome"
    res = ctx.client.execute(["python3", "-c", HISTORY_SNIPPET, root, browser, json.dumps(items)],
                             shell=False, timeout=ctx.command_timeout)
    out = str(res.get("output") or "") if isinstance(res, Mapping) else ""
    last = out.strip().splitlines()[-1] if out.strip() else ""
    try:
        answer = json.loads(last)
    except ValueError:
        answer = None
    if _returncode(res) != 0 or not isinstance(answer, dict) or "error" in answer:
        why = answer.get("error") if isinstance(answer, dict) else (out.strip() or str(res)[:300])
        err = str(res.get("error") or "").strip()[:300] if isinstance(res, Mapping) else ""
        raise EnvInfraError(f"update_browse_history: {why}" + (f" ({err})" if err else ""))
    return answer
