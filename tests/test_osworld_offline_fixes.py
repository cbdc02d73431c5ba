"""Fixes found by running OSWorld's offline test_all tasks with a no-op agent (issue 17):
the ``update_browse_history`` setup step (setup_history.py) and ``execute`` stdout captures
landing where the ``cache_file`` getter of the same task reads them (env.run_steps).

The History tests run the in-desktop snippet for real on this machine with a private HOME
(the desktop is this machine); one lets the real Chromium create its own History database.
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any, Optional

import pytest

from guigym.core.errors import TaskSpecError
from guigym.envs.desktop import evaluators as G
from guigym.envs.desktop.env import OSWorldEnv, verify_task
from guigym.envs.desktop.evaluators import evaluate
from guigym.envs.desktop.setup import STEP_HANDLERS, UNSUPPORTED_STEPS, MissingToolError, SetupContext, run_setup
from guigym.envs.desktop.setup.history import step_update_browse_history, validate_history
from guigym.envs.desktop.tasks import parse_osworld_task

SANDBOX_BIN = Path(__file__).resolve().parents[1] / "guigym" / "envs" / "desktop" / "sandbox_bin"
EPOCH_1601 = 11644473600  # seconds between 1601-01-01 and 1970-01-01

HISTORY = [
    {"url": "https://www.youtube.com/watch?v=dQw4w9WgXcQ", "title": "Rick Astley", "visit_time_from_now_in_seconds": 3600},
    {"url": "https://www.nytimes.com/", "title": "The New York Times", "visit_time_from_now_in_seconds": 300},
    {"url": "https://www.youtube.com/watch?v=9bZkp7q19f0", "title": "PSY - GANGNAM STYLE(강남스타일) M/V",
     "visit_time_from_now_in_seconds": 1631},
]

# the urls/visits layout of Chromium 156's History (as it creates it)
HISTORY_SCHEMA = """
CREATE TABLE meta(key LONGVARCHAR NOT NULL UNIQUE PRIMARY KEY, value LONGVARCHAR);
CREATE TABLE urls(id INTEGER PRIMARY KEY AUTOINCREMENT,url LONGVARCHAR,title LONGVARCHAR,
  visit_count INTEGER DEFAULT 0 NOT NULL,typed_count INTEGER DEFAULT 0 NOT NULL,last_visit_time INTEGER NOT NULL,
  hidden INTEGER DEFAULT 0 NOT NULL);
CREATE TABLE visits(id INTEGER PRIMARY KEY AUTOINCREMENT,url INTEGER NOT NULL,visit_time INTEGER NOT NULL,
  from_visit INTEGER,external_referrer_url TEXT,transition INTEGER DEFAULT 0 NOT NULL,segment_id INTEGER,
  visit_duration INTEGER DEFAULT 0 NOT NULL,incremented_omnibox_typed_score BOOLEAN DEFAULT FALSE NOT NULL,
  opener_visit INTEGER,is_known_to_sync BOOLEAN DEFAULT FALSE NOT NULL,visited_link_id INTEGER DEFAULT 0 NOT NULL);
INSERT INTO meta VALUES ('version', '70');
"""


class LocalClient:
    """The desktop is this machine with HOME=``home``; PATH starts with guigym's sandbox shims
    (``google-chrome`` -> Chromium with the desktop's flags)."""

    def __init__(self, home: Path, path: Optional[str] = None) -> None:
        self.home = home
        self.env = {**os.environ, "HOME": str(home),
                    "PATH": path if path is not None else f"{SANDBOX_BIN}:{os.environ.get('PATH', '')}"}
        self.calls: list[Any] = []

    def execute(self, command: Any, shell: bool = False, timeout: float = 60) -> dict:
        self.calls.append(command)
        p = subprocess.run(command, shell=shell, check=False, capture_output=True, text=True, timeout=timeout,
                           env=self.env)
        return {"status": "success", "output": p.stdout, "error": p.stderr, "returncode": p.returncode}

    def get_file(self, path: str) -> Optional[bytes]:
        try:
            return Path(path).read_bytes()
        except OSError:
            return None


def _rows(db: Path) -> tuple[list[tuple], list[tuple]]:
    con = sqlite3.connect(db)
    try:
        urls = con.execute("SELECT id, url, title, visit_count, typed_count, last_visit_time, hidden FROM urls "
                           "ORDER BY id").fetchall()
        visits = con.execute("SELECT url, visit_time, from_visit, transition, segment_id, visit_duration FROM visits "
                             "ORDER BY id").fetchall()
    finally:
        con.close()
    return urls, visits


def _history_step(items: Any = HISTORY) -> dict:
    return {"type": "update_browse_history", "parameters": {"history": items}}


def test_update_browse_history_is_a_supported_step() -> None:
    assert "update_browse_history" in STEP_HANDLERS
    assert "update_browse_history" not in UNSUPPORTED_STEPS


@pytest.mark.parametrize("bad, field", [
    ("https://x", "history"),
    ([{"title": "t", "visit_time_from_now_in_seconds": 1}], "history[0].url"),
    ([{"url": "u", "title": 3, "visit_time_from_now_in_seconds": 1}], "history[0].title"),
    ([{"url": "u", "title": "t", "visit_time_from_now_in_seconds": "1h"}], "history[0].visit_time_from_now_in_seconds"),
])
def test_validate_history_names_the_bad_field(bad: Any, field: str) -> None:
    with pytest.raises(TaskSpecError, match=field.replace("[", r"\[").replace("]", r"\]")):
        validate_history(bad)


def test_history_rows_into_an_existing_chromium_profile(tmp_path: Path) -> None:
    home = tmp_path / "home"
    db = home / ".config" / "chromium" / "Default" / "History"
    db.parent.mkdir(parents=True)
    con = sqlite3.connect(db)
    con.executescript(HISTORY_SCHEMA)
    con.close()
    client = LocalClient(home)
    before = time.time()
    records = run_setup(client, [_history_step()], cache_dir=tmp_path / "cache")
    after = time.time()
    assert records[0]["result"] == {"path": str(db), "created": False, "inserted": 3}
    urls, visits = _rows(db)
    assert [(u[1], u[2], u[3], u[4], u[6]) for u in urls] == [(h["url"], h["title"], 1, 0, 0) for h in HISTORY]
    for (uid, _, _, _, _, ts, _), h in zip(urls, HISTORY):
        # Chrome time: microseconds since 1601, "now" minus the item's offset
        when = ts / 1e6 - EPOCH_1601 + h["visit_time_from_now_in_seconds"]
        assert before - 1 <= when <= after + 1
    assert urls[0][5] < urls[2][5] < urls[1][5]  # 3600 s ago < 1631 s ago < 300 s ago
    assert visits == [(u[0], u[5], 0, 805306368, 0, 0) for u in urls]

    # the task's verifier on that profile: youtube still there -> 0; after deleting it -> 1
    ev = {"func": "check_history_deleted", "result": {"type": "history", "dest": "history.sqlite"},
          "expected": {"type": "rule", "rules": {"type": "keywords", "keywords": ["youtube"]}}}
    got = G.get(client, ev["result"], tmp_path / "eval")
    assert evaluate(ev, got, G.get(client, ev["expected"], tmp_path / "eval"))[0] == 0.0
    con = sqlite3.connect(db)
    con.execute("DELETE FROM urls WHERE url LIKE '%youtube%'")
    con.commit()
    con.close()
    got = G.get(client, ev["result"], tmp_path / "eval")
    assert [r[0] for r in got] == ["https://www.nytimes.com/"]
    assert evaluate(ev, got, G.get(client, ev["expected"], tmp_path / "eval"))[0] == 1.0


def test_history_refuses_a_file_that_is_not_a_history_db(tmp_path: Path) -> None:
    home = tmp_path / "home"
    db = home / ".config" / "chromium" / "Default" / "History"
    db.parent.mkdir(parents=True)
    sqlite3.connect(db).executescript("CREATE TABLE other(x);")
    from guigym.core.errors import EnvInfraError

    with pytest.raises(EnvInfraError, match="no table urls, visits"):
        run_setup(LocalClient(home), [_history_step()], cache_dir=tmp_path / "cache")


def test_history_without_a_browser_names_it(tmp_path: Path) -> None:
    class NoBrowser:
        def execute(self, command: Any, shell: bool = False, timeout: float = 60) -> dict:
            # python3 is there; no google-chrome, no chromium, no Chrome profile
            found = command[:2] == ["sh", "-c"] and command[-1] == "python3"
            return {"status": "success", "output": "", "error": "", "returncode": 0 if found else 1}

    ctx = SetupContext(client=NoBrowser(), cache_dir=tmp_path)
    with pytest.raises(MissingToolError) as e:
        step_update_browse_history(ctx, HISTORY)
    assert e.value.missing == "google-chrome"


def test_real_chromium_creates_its_history_then_rows_go_in(tmp_path: Path) -> None:
    if not (shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome-stable")):
        pytest.skip("no Chromium on this machine to create a History database")
    home = tmp_path / "home"
    home.mkdir()
    client = LocalClient(home)
    records = run_setup(client, [_history_step()], cache_dir=tmp_path / "cache")
    db = home / ".config" / "chromium" / "Default" / "History"
    assert records[0]["result"] == {"path": str(db), "created": True, "inserted": 3}
    urls, visits = _rows(db)
    assert [u[1] for u in urls][-3:] == [h["url"] for h in HISTORY]
    assert len(visits) >= 3 and all(v[3] == 805306368 for v in visits[-3:])
    # the headless run quit cleanly and left no browser behind holding the profile lock
    assert not (home / ".config" / "chromium" / "SingletonLock").exists()


# --------------------------------------------------------------------------- stdout captures


class GsettingsClient:
    """Answers ``gsettings get org.gnome.desktop.interface gtk-theme`` with ``theme``."""

    def __init__(self, theme: str) -> None:
        self.theme = theme

    def execute(self, command: Any, shell: bool = False, timeout: float = 60) -> dict:
        if list(command)[:2] == ["gsettings", "get"]:
            return {"status": "success", "output": f"'{self.theme}'\n", "error": "", "returncode": 0}
        return {"status": "success", "output": "", "error": "", "returncode": 0}


class OneClientProvider:
    name = "fake"
    screen_size = (64, 48)

    def __init__(self, client: Any) -> None:
        self.client = client

    def start(self) -> Any:
        return self.client

    def reset_home(self) -> Any:
        return self.client

    def stop(self) -> None:
        pass


# OSWorld multi_apps f8369178's evaluator: a postconfig captures stdout, cache_file reads it
THEME_TASK = parse_osworld_task({
    "id": "f8369178-theme", "instruction": "switch to the Orchis theme", "config": [],
    "evaluator": {"postconfig": [{"type": "execute", "parameters": {
        "command": ["gsettings", "get", "org.gnome.desktop.interface", "gtk-theme"], "stdout": "gsettings.out"}}],
        "func": "check_list", "result": {"type": "cache_file", "path": "gsettings.out"},
        "expected": {"type": "rule", "rules": {"expect": ["Orchis"]}}}})


@pytest.mark.parametrize("theme, score", [("Orchis-Dark", 1.0), ("Adwaita", 0.0)])
def test_postconfig_stdout_is_read_by_cache_file(tmp_path: Path, theme: str, score: float) -> None:
    env = OSWorldEnv(tasks=[THEME_TASK], provider=OneClientProvider(GsettingsClient(theme)), cache_dir=tmp_path,
                     observe_terminal=False)
    env._ensure_started()
    got, details = verify_task(env, THEME_TASK, None)
    assert got == score, details
    # episode outputs go to the env's private work dir, never the shared cache (issue 34)
    assert (env.work_dir / "eval" / THEME_TASK.id / "gsettings.out").read_text() == f"'{theme}'\n"
    assert not (tmp_path / "eval" / THEME_TASK.id / "gsettings.out").exists()


def test_capture_dir_keeps_names_inside(tmp_path: Path) -> None:
    steps = [{"type": "execute", "parameters": {"command": "echo hi", "shell": True, "stdout": "../../escape.out"}}]
    with pytest.raises(TaskSpecError, match="parameters.stdout"):
        run_setup(LocalClient(tmp_path), steps, cache_dir=tmp_path / "cache", capture_dir=tmp_path / "eval" / "t")
    assert not (tmp_path / "escape.out").exists()
    run_setup(LocalClient(tmp_path), [{"type": "execute", "parameters": {"command": "echo hi", "shell": True,
                                                                         "stdout": "out.txt"}}],
              cache_dir=tmp_path / "cache", capture_dir=tmp_path / "eval" / "t")
    assert (tmp_path / "eval" / "t" / "out.txt").read_text() == "hi\n"
    assert not (tmp_path / "cache" / "out.txt").exists()


# --------------------------------------------------------------------------- pkill chrome on Chromium


class KillRecorder:
    """Records launched/executed commands; ``chrome`` says whether a real Google Chrome is there
    (the answer to setup's ``test -e /opt/google/chrome || test -d ~/.config/google-chrome``)."""

    def __init__(self, chrome: bool) -> None:
        self.chrome = chrome
        self.ran: list[Any] = []

    def execute(self, command: Any, shell: bool = False, timeout: float = 60) -> dict:
        if list(command)[:2] == ["sh", "-c"] and "/opt/google/chrome" in command[2]:
            return {"status": "success", "output": "", "error": "", "returncode": 0 if self.chrome else 1}
        if list(command)[:2] == ["sh", "-c"] and "command -v" in command[2]:
            return {"status": "success", "output": "", "error": "", "returncode": 0}
        self.ran.append(command)
        return {"status": "success", "output": "", "error": "", "returncode": 0}

    def launch(self, command: Any, shell: bool = False) -> None:
        self.ran.append(command)


# OSWorld chrome 44ee5668's postconfig (launch) and the execute form other tasks use
KILL_STEPS = [{"type": "launch", "parameters": {"command": ["pkill", "chrome"]}},
              {"type": "execute", "parameters": {"command": "pkill chrome", "shell": True}},
              {"type": "execute", "parameters": {"command": ["/bin/bash", "-c", "killall chrome; echo done"]}},
              {"type": "launch", "parameters": {"command": ["pkill", "vlc"]}}]


def test_pkill_chrome_targets_chromium_when_chrome_is_chromium(tmp_path: Path) -> None:
    client = KillRecorder(chrome=False)
    run_setup(client, KILL_STEPS, cache_dir=tmp_path)
    assert client.ran == [["pkill", "chromium"], "pkill chromium", ["/bin/bash", "-c", "killall chromium; echo done"],
                          ["pkill", "vlc"]]


def test_pkill_chrome_is_kept_with_a_real_chrome(tmp_path: Path) -> None:
    client = KillRecorder(chrome=True)
    run_setup(client, KILL_STEPS, cache_dir=tmp_path)
    assert client.ran == [s["parameters"]["command"] for s in KILL_STEPS]


@pytest.mark.parametrize("command", ["pkill google-chrome", "echo chrome", "pkill chrome-sandbox", ["killall", "firefox"]])
def test_map_chrome_kill_leaves_other_commands(command: Any) -> None:
    from guigym.envs.desktop.setup import map_chrome_kill

    assert map_chrome_kill(command) == command


# --------------------------------------------------------------------------- initial GSettings


def _gsettings_get(home: Path, schema: str, key: str) -> str:
    import tempfile

    with tempfile.TemporaryDirectory() as runtime:
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "XDG_RUNTIME_DIR": runtime}
        p = subprocess.run(["dbus-run-session", "--", "gsettings", "get", schema, key], env=env,
                           capture_output=True, text=True, timeout=30, check=False)
    return p.stdout.strip()


def test_home_template_starts_with_the_screen_lock_off(tmp_path: Path) -> None:
    """OSWorld os/a4d98375 checks only lock-enabled; GNOME's default true would solve it."""
    from guigym.envs.desktop.providers.home import INITIAL_GSETTINGS, build_default_home

    if not (shutil.which("dbus-run-session") and shutil.which("gsettings")):
        pytest.skip("no dbus-run-session/gsettings on this machine")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    if _gsettings_get(fresh, "org.gnome.desktop.screensaver", "lock-enabled") != "true":
        pytest.skip("the org.gnome.desktop.screensaver schema (GNOME default true) is not installed here")
    home = build_default_home(tmp_path / "template")
    assert (home / ".config" / "dconf" / "user").is_file()
    assert ("org.gnome.desktop.screensaver", "lock-enabled", "false") in INITIAL_GSETTINGS
    assert _gsettings_get(home, "org.gnome.desktop.screensaver", "lock-enabled") == "false"
    # only what INITIAL_GSETTINGS names differs from GNOME's defaults
    assert _gsettings_get(home, "org.gnome.desktop.session", "idle-delay") == \
        _gsettings_get(fresh, "org.gnome.desktop.session", "idle-delay")


def test_write_gsettings_without_tools_keeps_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from guigym.envs.desktop.providers import home as H

    monkeypatch.setattr(H.shutil, "which", lambda name: None)
    assert H.write_gsettings(tmp_path) is False
    assert not (tmp_path / ".config" / "dconf" / "user").exists()


def test_the_home_template_makes_totem_the_default_video_player_for_every_type_the_getter_asks(tmp_path):
    """OSWorld's VM (Ubuntu GNOME) opens videos with Totem; a desktop where VLC is the only player
    would have multi_apps/937087b6 ("set the default video player as VLC") solved by a no-op."""
    import configparser

    from guigym.envs.desktop.evaluators.getters.system import VIDEO_SUBTYPES
    from guigym.envs.desktop.providers.home import build_default_home

    home = build_default_home(tmp_path / "home")
    cp = configparser.ConfigParser(interpolation=None)
    cp.optionxform = str  # MIME types are case-sensitive keys
    cp.read(home / ".config" / "mimeapps.list")
    defaults = dict(cp["Default Applications"])
    assert {f"video/{t}" for t in VIDEO_SUBTYPES} <= set(defaults)
    assert set(defaults.values()) == {"org.gnome.Totem.desktop"}


# --------------------------------------------------------------------------- activate_window after a launch


class WindowRecorder(KillRecorder):
    """A desktop whose window named ``title`` appears ``opens_after`` fake seconds after a launch;
    ``activate_window`` answers 404 (as the server does) until then. Time is fake: ``sleep``
    advances ``now``."""

    def __init__(self, chrome: bool, title: str, opens_after: float) -> None:
        super().__init__(chrome)
        self.title, self.opens_after = title, opens_after
        self.now = 0.0
        self.launched: Optional[float] = None
        self.asked: list[tuple[str, float]] = []

    def launch(self, command: Any, shell: bool = False) -> None:
        super().launch(command, shell)
        self.launched = self.now

    def sleep(self, s: float) -> None:
        self.now += s

    def activate_window(self, name: str, strict: bool = False, by_class: bool = False) -> str:
        from guigym.envs.desktop.client import DesktopRequestError

        self.asked.append((name, self.now))
        shown = self.launched is not None and self.now >= self.launched + self.opens_after
        if shown and name.lower() in self.title.lower():
            return "Window activated successfully"
        raise DesktopRequestError("/setup/activate_window", 404, "Window not found")


VSCODE_STEPS = [{"type": "launch", "parameters": {"command": ["code"]}},
                {"type": "activate_window", "parameters": {"window_name": "Visual Studio Code"}}]


def test_activate_window_waits_for_a_window_its_launch_is_still_opening(tmp_path: Path) -> None:
    """OSWorld's vs_code config (launch `code`, then activate): VS Code's window takes ~10 s here,
    so activation is retried until the window exists instead of being skipped at once."""
    client = WindowRecorder(chrome=False, title="Welcome - Visual Studio Code", opens_after=10.0)
    run_setup(client, VSCODE_STEPS, cache_dir=tmp_path, sleep=client.sleep, clock=lambda: client.now)
    assert client.asked[-1] == ("Visual Studio Code", pytest.approx(10.0))  # the first ask after it opened
    assert len(client.asked) > 1


def test_activate_window_gives_up_after_the_wait_and_goes_on(tmp_path: Path) -> None:
    client = WindowRecorder(chrome=False, title="something else", opens_after=0.0)
    steps = VSCODE_STEPS + [{"type": "execute", "parameters": {"command": ["echo", "after"]}}]
    run_setup(client, steps, cache_dir=tmp_path, sleep=client.sleep, clock=lambda: client.now, window_wait_s=5.0)
    assert 5.0 <= client.asked[-1][1] < 5.5  # asked until the wait ran out, then logged and skipped
    assert client.ran[-1] == ["echo", "after"]


def test_activate_window_without_a_launch_is_asked_once(tmp_path: Path) -> None:
    """No launch in this setup: OSWorld's behaviour, a missing window is skipped at once."""
    client = WindowRecorder(chrome=False, title="x", opens_after=0.0)
    run_setup(client, VSCODE_STEPS[1:], cache_dir=tmp_path, sleep=client.sleep, clock=lambda: client.now)
    assert client.asked == [("Visual Studio Code", 0.0)]


@pytest.mark.parametrize("chrome, asked", [(False, "Chromium"), (True, "Google Chrome")])
def test_activate_google_chrome_looks_for_chromium_when_chrome_is_chromium(tmp_path: Path, chrome: bool,
                                                                            asked: str) -> None:
    """OSWorld's chrome configs activate "Google Chrome"; Debian's Chromium titles its windows
    "... - Chromium", which that name never matches (it would wait the whole bound, then skip)."""
    title = "New Tab - Google Chrome" if chrome else "New Tab - Chromium"
    client = WindowRecorder(chrome=chrome, title=title, opens_after=2.0)
    steps = [{"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337"]}},
             {"type": "activate_window", "parameters": {"window_name": "Google Chrome"}}]
    run_setup(client, steps, cache_dir=tmp_path, sleep=client.sleep, clock=lambda: client.now)
    assert client.asked[-1] == (asked, pytest.approx(2.0))


# --------------------------------------------------------------------------- Chromium as Google Chrome, on screen


def test_google_chrome_window_is_raised_and_shows_no_unsupported_flag_bar(tmp_path: Path) -> None:
    """OSWorld's chrome configs launch ``google-chrome`` and activate "Google Chrome". In the local
    desktop that is Chromium: its window is found under Chromium's title (and waited for), and the
    --no-sandbox warning bar Chromium shows by default is not on screen (--test-type)."""
    from desktop_needs import need_desktop

    need_desktop()
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("no Chromium on this machine (Debian package chromium)")
    task = parse_osworld_task({"id": "chrome-window", "instruction": "look", "related_apps": ["chrome"],
                               "config": [{"type": "launch", "parameters": {
                                   "command": ["google-chrome", "--remote-debugging-port=1337"]}},
                                   {"type": "activate_window", "parameters": {"window_name": "Google Chrome"}}],
                               "evaluator": {"func": "infeasible"}}, source="tests/test_osworld_offline_fixes.py")
    env = OSWorldEnv(tasks=[task], provider="local", max_steps=30)
    env.observe_a11y = True
    try:
        obs, _ = env.reset(options={"task": "chrome-window"})
        for _ in range(20):  # Chromium's own UI enters the tree shortly after its window
            if 'name="Reload"' in obs["a11y"]:
                break
            obs, *_ = env.step("wait(seconds=1)")
        assert 'name="Reload"' in obs["a11y"], obs["a11y"][-2000:]
        assert " - Chromium" in obs["a11y"]
        assert "unsupported command-line flag" not in obs["a11y"]
    finally:
        env.close()


# --------------------------------------------------------------------------- org.gnome.shell (os/ec4e3f68)

_FAV = "export DBUS_SESSION_BUS_ADDRESS='unix:path=/run/user/1000/bus'\ngsettings set org.gnome.shell favorite-apps "
# OSWorld os/ec4e3f68 ("remove the first favorite app"), its config and evaluator as published
FAVORITES_TASK = {
    "id": "ec4e3f68-9ea4-4c18-a5c9-69f89d1178b3", "instruction": "Can you remove the first favorite app from 'favorites'?",
    "config": [{"type": "execute", "parameters": {"command": _FAV + "\"['thunderbird.desktop']\"", "shell": True}},
               {"type": "sleep", "parameters": {"seconds": 0.5}},
               {"type": "execute", "parameters": {
                   "command": _FAV + "\"['thunderbird.desktop', 'vim.desktop', 'google-chrome.desktop']\"", "shell": True}},
               {"type": "sleep", "parameters": {"seconds": 0.5}}],
    "evaluator": {"func": "check_gnome_favorite_apps", "result": {
        "type": "vm_command_line", "shell": True,
        "command": "export DBUS_SESSION_BUS_ADDRESS='unix:path=/run/user/1000/bus'\ngsettings get org.gnome.shell favorite-apps"},
        "expected": {"type": "rule", "rules": {"expected": ["google-chrome.desktop", "thunderbird.desktop"]}}}}


def test_gnome_shell_favorites_task_runs_and_scores_what_the_agent_set() -> None:
    """The org.gnome.shell schema is installed (gnome-shell-common): the task's setup writes the
    favorites to the desktop's dconf, a no-op scores 0, and the favorites the evaluator expects,
    set from a shell in the desktop as an agent would, score 1."""
    from desktop_needs import need_desktop

    need_desktop()
    if subprocess.run(["gsettings", "list-keys", "org.gnome.shell"], capture_output=True).returncode != 0:
        pytest.skip("the GSettings schema org.gnome.shell is not installed (Debian package gnome-shell-common)")
    task = parse_osworld_task(FAVORITES_TASK, source="OSWorld os/ec4e3f68")
    env = OSWorldEnv(tasks=[task], provider="local", max_steps=10)
    try:
        env.reset(options={"task": task.id})
        assert verify_task(env, task, None)[0] == 0.0
        env.reset(options={"task": task.id})
        res = env.client.execute(_FAV + "\"['thunderbird.desktop', 'google-chrome.desktop']\"", shell=True, timeout=30)
        assert res["returncode"] == 0, res
        assert verify_task(env, task, None)[0] == 1.0
    finally:
        env.close()
