"""OSWorld Chrome profile getters (getters_chrome.py) and Chrome metrics (metrics_chrome.py).

Profiles are real files: Preferences / Secure Preferences / Local State JSON as Chrome writes
them, and SQLite ``Cookies`` / ``History`` databases created here with Chrome's table layouts.
A fake client serves them at their desktop paths and records its calls. page_info also runs
once against a real headless Chromium when one is installed.
"""
from __future__ import annotations

import json
import sqlite3
import urllib.request
from pathlib import Path
from typing import Any, Optional

import pytest

from _devtools_chromium import devtools_chromium, run_here
from guigym.envs.desktop.evaluators.getters import chrome as GC
from guigym.envs.desktop.evaluators import GETTERS, GetterContext, get
from guigym.envs.desktop.evaluators import METRICS, evaluate

HOME = "/home/user"
CHROME = f"{HOME}/.config/google-chrome"
CHROMIUM = f"{HOME}/.config/chromium"


def m(name: str):
    return METRICS.get(name)


class FakeClient:
    """Stands in for DesktopClient: files by desktop path, directory trees, canned answers of
    the in-desktop helpers; records every call."""

    def __init__(self, files: Optional[dict[str, bytes]] = None, dirs: Optional[dict[str, Any]] = None,
                 cdp: Optional[list[dict]] = None, tab: Optional[dict] = None) -> None:
        self.files, self.dirs = files or {}, dirs or {}
        self.cdp, self.tab = list(cdp or []), tab
        self.calls: list[tuple[str, Any]] = []

    def get_file(self, path: str) -> Optional[bytes]:
        self.calls.append(("get_file", path))
        return self.files.get(path)

    def list_directory(self, path: str) -> Optional[dict]:
        self.calls.append(("list_directory", path))
        return self.dirs.get(path)

    def execute(self, command: Any, shell: bool = False, timeout: float = 60) -> dict:
        self.calls.append(("execute", command))
        if command[:2] == ["sh", "-c"] and "HOME" in command[2]:
            return {"status": "success", "output": HOME, "error": "", "returncode": 0}
        if command[0] == "python3" and command[2] == GC._TAB_SNIPPET:
            out = self.tab if command[4] == "open" else {"closed": command[5]}
            return {"status": "success", "output": json.dumps(out), "error": "", "returncode": 0}
        if command[0] == "python3":  # the DevTools helper of getters_browser
            return {"status": "success", "output": json.dumps(self.cdp.pop(0)), "error": "", "returncode": 0}
        return {"status": "error", "output": "", "error": "unexpected", "returncode": None}


def _json(obj: Any) -> bytes:
    return json.dumps(obj).encode()


# --------------------------------------------------------------------------- Chrome's SQLite layouts

COOKIES_SCHEMA = """
CREATE TABLE meta(key LONGVARCHAR NOT NULL UNIQUE PRIMARY KEY, value LONGVARCHAR);
CREATE TABLE cookies(creation_utc INTEGER NOT NULL, host_key TEXT NOT NULL, top_frame_site_key TEXT NOT NULL,
  name TEXT NOT NULL, value TEXT NOT NULL, encrypted_value BLOB NOT NULL, path TEXT NOT NULL,
  expires_utc INTEGER NOT NULL, is_secure INTEGER NOT NULL, is_httponly INTEGER NOT NULL,
  last_access_utc INTEGER NOT NULL, has_expires INTEGER NOT NULL, is_persistent INTEGER NOT NULL,
  priority INTEGER NOT NULL, samesite INTEGER NOT NULL, source_scheme INTEGER NOT NULL,
  source_port INTEGER NOT NULL, last_update_utc INTEGER NOT NULL, source_type INTEGER NOT NULL,
  has_cross_site_ancestor INTEGER NOT NULL);
CREATE UNIQUE INDEX cookies_unique_index ON cookies(host_key, top_frame_site_key, has_cross_site_ancestor,
  name, path, source_scheme, source_port);
INSERT INTO meta VALUES ('version', '24'), ('last_compatible_version', '24');
"""

HISTORY_SCHEMA = """
CREATE TABLE meta(key LONGVARCHAR NOT NULL UNIQUE PRIMARY KEY, value LONGVARCHAR);
CREATE TABLE urls(id INTEGER PRIMARY KEY AUTOINCREMENT, url LONGVARCHAR, title LONGVARCHAR,
  visit_count INTEGER DEFAULT 0 NOT NULL, typed_count INTEGER DEFAULT 0 NOT NULL,
  last_visit_time INTEGER NOT NULL, hidden INTEGER DEFAULT 0 NOT NULL);
CREATE TABLE visits(id INTEGER PRIMARY KEY AUTOINCREMENT, url INTEGER NOT NULL, visit_time INTEGER NOT NULL,
  from_visit INTEGER, transition INTEGER DEFAULT 0 NOT NULL, segment_id INTEGER, visit_duration INTEGER DEFAULT 0
  NOT NULL);
CREATE INDEX urls_url_index ON urls (url);
INSERT INTO meta VALUES ('version', '67');
"""

T0 = 13_350_000_000_000_000  # microseconds since 1601, as Chrome stores times


def cookies_db(path: Path, hosts: list[str]) -> bytes:
    conn = sqlite3.connect(path)
    conn.executescript(COOKIES_SCHEMA)
    for i, host in enumerate(hosts):
        conn.execute("INSERT INTO cookies VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                     (T0 + i, host, "", f"c{i}", "", b"v10\x01\x02", "/", T0 + 10**12, 1, 0, T0, 1, 1, 1, -1,
                      2, 443, T0, 0, 0))
    conn.commit()
    conn.close()
    return path.read_bytes()


def history_db(path: Path, urls: list[tuple[str, str]]) -> bytes:
    conn = sqlite3.connect(path)
    conn.executescript(HISTORY_SCHEMA)
    for i, (url, title) in enumerate(urls):
        cur = conn.execute("INSERT INTO urls (url, title, visit_count, last_visit_time) VALUES (?,?,1,?)",
                           (url, title, T0 + i))
        conn.execute("INSERT INTO visits (url, visit_time, transition) VALUES (?,?,805306368)", (cur.lastrowid, T0 + i))
    conn.commit()
    conn.close()
    return path.read_bytes()


# --------------------------------------------------------------------------- cookies / history


def test_cookie_data_and_is_cookie_deleted(tmp_path: Path) -> None:
    rule = {"type": "domains", "domains": [".amazon.com"]}
    spec = {"type": "cookie_data", "dest": "Cookies"}
    with_amazon = cookies_db(tmp_path / "a.db", [".google.com", ".amazon.com", "www.amazon.com"])
    client = FakeClient({f"{CHROME}/Default/Cookies": with_amazon})
    rows = get(client, spec, tmp_path / "cache")
    assert [r[1] for r in rows] == [".google.com", ".amazon.com", "www.amazon.com"]
    assert len(rows[0]) == 20 and rows[0][5] == b"v10\x01\x02"  # SELECT *, Chrome's columns
    assert (tmp_path / "cache" / "Cookies").read_bytes() == with_amazon  # the copy OSWorld keeps
    assert m("is_cookie_deleted")(rows, rule) == 0.0  # the agent left Amazon's cookies

    cleared = cookies_db(tmp_path / "b.db", [".google.com", ".github.com"])
    # Chromium's profile, and the Network/ location Chrome uses on Windows, are found too
    rows = get(FakeClient({f"{CHROMIUM}/Default/Network/Cookies": cleared}), spec, tmp_path / "cache")
    assert m("is_cookie_deleted")(rows, rule) == 1.0
    assert m("is_cookie_deleted")([], rule) == 1.0
    assert m("is_cookie_deleted")(None, rule) == 0.0
    with pytest.raises(TypeError, match="names"):
        m("is_cookie_deleted")(rows, {"type": "names"})


def test_history_and_check_history_deleted(tmp_path: Path) -> None:
    rule = {"type": "keywords", "keywords": ["youtube"]}
    spec = {"type": "history", "dest": "history.sqlite"}
    db = history_db(tmp_path / "h.db", [("https://www.youtube.com/watch?v=1", "Video"),
                                        ("https://docs.python.org/3/", "Python")])
    rows = get(FakeClient({f"{CHROME}/Default/History": db}), spec, tmp_path / "cache")
    assert rows == [("https://www.youtube.com/watch?v=1", "Video", T0), ("https://docs.python.org/3/", "Python", T0 + 1)]
    assert m("check_history_deleted")(rows, rule) == 0.0

    kept_others = history_db(tmp_path / "h2.db", [("https://docs.python.org/3/", "Python")])
    rows = get(FakeClient({f"{CHROME}/Default/History": kept_others}), spec, tmp_path / "cache")
    assert m("check_history_deleted")(rows, rule) == 1.0
    assert m("check_history_deleted")(None, rule) == 0.0


def test_profile_db_rejects_bad_files(tmp_path: Path) -> None:
    spec = {"type": "history", "dest": "history.sqlite"}
    assert get(FakeClient(), spec, tmp_path) is None  # no profile at all
    assert get(FakeClient({f"{CHROME}/Default/History": b"not a database" * 100}), spec, tmp_path) is None
    no_table = cookies_db(tmp_path / "c.db", [".a.com"])  # a database without `urls`
    assert get(FakeClient({f"{CHROME}/Default/History": no_table}), spec, tmp_path) is None
    # the copy is opened read-only: a query cannot change it
    path = tmp_path / "ro.db"
    history_db(path, [("https://a.org/", "A")])
    with pytest.raises(sqlite3.OperationalError):
        GC.query_profile_db(path, "DELETE FROM urls")
    assert GC.query_profile_db(path, "SELECT title FROM urls WHERE url = ?", ("https://a.org/",)) == [("A",)]
    with pytest.raises(Exception, match="outside"):
        get(FakeClient({f"{CHROME}/Default/History": no_table}), {**spec, "dest": "../x"}, tmp_path)


# --------------------------------------------------------------------------- Preferences

PREFS = {
    "default_search_provider_data": {"template_url_data": {"short_name": "Bing", "keyword": "bing.com",
                                                           "url": "https://www.bing.com/search?q={searchTerms}"}},
    "webkit": {"webprefs": {"default_font_size": 20, "default_fixed_font_size": 16}},
    "enable_do_not_track": True,
    "safebrowsing": {"enabled": True, "enhanced": True},
    "session": {"restore_on_startup": 5},
    "profile": {"name": "Person 1", "default_content_setting_values": {"cookies": 4,
                                                                        "has_migrated_local_network_access": True}},
    "extensions": {"settings": {
        "aapbdbdomjkkjkaonfhkkikfgjllcleb": {"manifest": {"name": "Google Translate", "version": "2.0.13"},
                                             "location": 1},
        "mhjfbmdgcfjbbpaeojofohoefgiehjai": {"location": 5},  # a component without a manifest copy
    }},
}
SECURE = {"extensions": {"settings": {
    "fmkadmapgofadopljbjfkapdkoienihi": {"manifest": {"name": "React Developer Tools"}},
    "aapbdbdomjkkjkaonfhkkikfgjllcleb": {"manifest": {"name": "Google Translate"}},
}}}
# a new profile as current Chromium writes it (it already has default_content_setting_values)
FRESH = {"profile": {"name": "Person 1", "default_content_setting_values": {"has_migrated_local_network_access": True}},
         "browser": {"has_seen_welcome_page": True}, "safebrowsing": {"event_timestamps": {}}}


def _prefs_client(prefs: Any, secure: Any = None, where: str = CHROME) -> FakeClient:
    files = {f"{where}/Default/Preferences": prefs if isinstance(prefs, bytes) else _json(prefs)}
    if secure is not None:
        files[f"{where}/Default/Secure Preferences"] = _json(secure)
    return FakeClient(files)


@pytest.mark.parametrize("getter, changed, fresh", [
    ("default_search_engine", "Bing", "Google"),
    ("enable_do_not_track", "true", "false"),
    ("enable_enhanced_safety_browsing", "true", "false"),
    ("data_delete_automacally", "true", "false"),
])
def test_preference_getters_with_exact_match(tmp_path: Path, getter: str, changed: str, fresh: str) -> None:
    ev = {"func": "exact_match", "result": {"type": getter}, "expected": {"type": "rule", "rules": {"expected": changed}}}
    got = get(_prefs_client(PREFS), {"type": getter}, tmp_path)
    assert got == changed and evaluate(ev, got, {"expected": changed})[0] == 1.0
    got = get(_prefs_client(FRESH), {"type": getter}, tmp_path)
    assert got == fresh and evaluate(ev, got, {"expected": changed})[0] == 0.0
    assert get(_prefs_client(b"{broken"), {"type": getter}, tmp_path) == fresh  # unreadable profile


def test_data_delete_needs_the_cookie_setting(tmp_path: Path) -> None:
    blocked = {"profile": {"default_content_setting_values": {"cookies": 2}}}  # "block all cookies"
    assert get(_prefs_client(blocked), {"type": "data_delete_automacally"}, tmp_path) == "false"
    notify = {"profile": {"default_content_setting_values": {"notifications": 2}}}
    assert get(_prefs_client(notify), {"type": "data_delete_automacally"}, tmp_path) == "false"


def test_new_startup_page(tmp_path: Path) -> None:
    assert get(_prefs_client(PREFS), {"type": "new_startup_page"}, tmp_path) == "true"
    assert get(_prefs_client(FRESH), {"type": "new_startup_page"}, tmp_path) == "true"  # no session yet
    restore_tabs = {**FRESH, "session": {"restore_on_startup": 1}}
    assert get(_prefs_client(restore_tabs), {"type": "new_startup_page"}, tmp_path) == "false"
    urls = {**FRESH, "session": {"restore_on_startup": 4, "startup_urls": ["https://a.org/"]}}
    assert get(_prefs_client(urls), {"type": "new_startup_page"}, tmp_path) == "false"
    assert get(FakeClient(), {"type": "new_startup_page"}, tmp_path) == "false"


def test_profile_choice_chrome_first(tmp_path: Path) -> None:
    client = FakeClient({f"{CHROMIUM}/Default/Preferences": _json(PREFS)})
    assert get(client, {"type": "default_search_engine"}, tmp_path) == "Bing"
    assert [c[1] for c in client.calls if c[0] == "get_file"] == [f"{CHROME}/Default/Preferences",
                                                                  f"{CHROMIUM}/Default/Preferences"]
    both = FakeClient({f"{CHROME}/Default/Preferences": _json(FRESH), f"{CHROMIUM}/Default/Preferences": _json(PREFS)})
    assert get(both, {"type": "default_search_engine"}, tmp_path) == "Google"


def test_chrome_font_size_and_check_font_size(tmp_path: Path) -> None:
    rule = {"type": "range", "min": 16, "max": 99999}
    sizes = get(_prefs_client(PREFS), {"type": "chrome_font_size"}, tmp_path)
    assert sizes == {"default_font_size": 20, "default_fixed_font_size": 16}
    assert m("check_font_size")(sizes, rule) == 1.0
    assert m("check_font_size")(sizes, {"type": "value", "value": 20}) == 1.0
    assert m("check_font_size")(sizes, {"type": "value", "value": 16}) == 0.0
    # the agent left the size alone: no webprefs, or webprefs without default_font_size (16)
    fresh = get(_prefs_client(FRESH), {"type": "chrome_font_size"}, tmp_path)
    assert fresh["default_font_size"] == 16 and m("check_font_size")(fresh, rule) == 0.0
    only_fixed = get(_prefs_client({"webkit": {"webprefs": {"default_fixed_font_size": 15}}}),
                     {"type": "chrome_font_size"}, tmp_path)
    assert m("check_font_size")(only_fixed, rule) == 0.0
    smaller = {"webkit": {"webprefs": {"default_font_size": 12}}}
    assert m("check_font_size")(get(_prefs_client(smaller), {"type": "chrome_font_size"}, tmp_path), rule) == 0.0
    with pytest.raises(TypeError):
        m("check_font_size")(sizes, {"type": "at_least"})


def test_find_installed_extension_name_and_metric(tmp_path: Path) -> None:
    rules = {"expected": ["Google Translate", "React Developer Tools"]}
    names = get(_prefs_client(PREFS, SECURE), {"type": "find_installed_extension_name"}, tmp_path)
    assert names == ["Google Translate", "React Developer Tools"]
    assert m("is_expected_installed_extensions")(names, rules) == 1.0
    assert m("is_expected_installed_extensions")(names + ["Momentum"], rules) == 1.0  # extra ones are fine
    only_prefs = get(_prefs_client(PREFS), {"type": "find_installed_extension_name"}, tmp_path)
    assert only_prefs == ["Google Translate"]
    assert m("is_expected_installed_extensions")(only_prefs, rules) == 0.0  # one is missing
    assert get(FakeClient(), {"type": "find_installed_extension_name"}, tmp_path) is None
    assert m("is_expected_installed_extensions")(None, rules) == 0.0


# --------------------------------------------------------------------------- Local State


def test_enabled_experiments_and_check(tmp_path: Path) -> None:
    rule = {"type": "names", "names": ["chrome-refresh-2023", "chrome-webui-refresh-2023"]}
    state = {"browser": {"enabled_labs_experiments": ["chrome-refresh-2023@1", "chrome-webui-refresh-2023"]},
             "profile": {"info_cache": {"Default": {"name": "Person 1"}}}}
    client = FakeClient({f"{CHROME}/Local State": _json(state),
                         f"{CHROME}/Default/Preferences": _json({"browser": {"enabled_labs_experiments": ["x"]}})})
    flags = get(client, {"type": "enabled_experiments"}, tmp_path)
    assert flags == ["chrome-refresh-2023@1", "chrome-webui-refresh-2023"]  # the user-data dir's file
    assert m("check_enabled_experiments")(flags, rule) == 1.0
    assert m("check_enabled_experiments")(flags[:1], rule) == 0.0  # only one of the two enabled
    assert m("check_enabled_experiments")(list(reversed(flags)), rule) == 0.0  # OSWorld compares lists
    none = get(FakeClient({f"{CHROMIUM}/Local State": _json({"browser": {}})}), {"type": "enabled_experiments"}, tmp_path)
    assert none == [] and m("check_enabled_experiments")(none, rule) == 0.0
    assert get(FakeClient(), {"type": "enabled_experiments"}, tmp_path) == []
    with pytest.raises(TypeError):
        m("check_enabled_experiments")(flags, {"type": "ids"})


# --------------------------------------------------------------------------- desktop shortcuts

SHORTCUT = """#!/usr/bin/env xdg-open
[Desktop Entry]
Version=1.0
Terminal=false
Type=Application
Name=Play Puzzle Game 2048
Exec=/opt/google/chrome/google-chrome --profile-directory=Default --app-id=abcdefghijklmnop
Icon=chrome-abcdefghijklmnop-Default
StartupWMClass=crx_abcdefghijklmnop
"""


def test_shortcuts_on_desktop_and_metric(tmp_path: Path) -> None:
    rule = {"type": "name", "name": "Play Puzzle Game 2048"}
    desk = f"{HOME}/Desktop"
    tree = {"type": "directory", "name": "Desktop", "children": [
        {"type": "file", "name": "chrome-abcdefghijklmnop-Default.desktop"},
        {"type": "file", "name": "notes.txt"},
        {"type": "directory", "name": "old.desktop", "children": []}]}
    client = FakeClient({f"{desk}/chrome-abcdefghijklmnop-Default.desktop": SHORTCUT.encode(),
                         f"{desk}/notes.txt": b"Name=Play Puzzle Game 2048\n"}, dirs={desk: tree})
    shortcuts = get(client, {"type": "shortcuts_on_desktop"}, tmp_path)
    assert shortcuts == {"chrome-abcdefghijklmnop-Default.desktop": SHORTCUT}
    assert m("is_shortcut_on_desktop")(shortcuts, rule) == 1.0
    # a shortcut to another site, or a name that only starts the same
    assert m("is_shortcut_on_desktop")({"x.desktop": SHORTCUT.replace("2048", "Sudoku")}, rule) == 0.0
    assert m("is_shortcut_on_desktop")({"x.desktop": SHORTCUT.replace("2048\n", "2048 Pro\n")}, rule) == 0.0
    assert get(FakeClient(), {"type": "shortcuts_on_desktop"}, tmp_path) == {}
    assert m("is_shortcut_on_desktop")({}, rule) == 0.0
    with pytest.raises(TypeError, match="url"):
        m("is_shortcut_on_desktop")(shortcuts, {"type": "url", "url": "https://play2048.co/"})


# --------------------------------------------------------------------------- tab metrics


def test_is_expected_search_query() -> None:
    rules = {"expect": {"pattern": "www\\.google\\.com.*?/search\\?q=Nereida&"}}
    tab = {"title": "Nereida - Google Search", "url": "https://www.google.com/search?q=Nereida&oq=Nereida", "content": ""}
    assert m("is_expected_search_query")(tab, rules) == 1.0
    assert m("is_expected_search_query")({**tab, "url": "https://www.google.com/search?q=Nereid&oq=x"}, rules) == 0.0
    assert m("is_expected_search_query")({**tab, "url": "https://www.bing.com/search?q=Nereida&"}, rules) == 0.0
    assert m("is_expected_search_query")(None, rules) == 0.0


def test_is_added_to_steam_cart() -> None:
    rule = {"items": ["The Dota 2 Official Soundtrack"]}
    page = ('<!DOCTYPE html><html><body><div class="cart_item_list"><div class="cart_row">'
            '<a href="/app/1">The Dota 2 Official Soundtrack</a></div></div></body></html>')
    assert m("is_added_to_steam_cart")({"title": "Cart", "url": "u", "content": page}, rule) == 1.0
    empty = page.replace("The Dota 2 Official Soundtrack", "Your cart is empty")
    assert m("is_added_to_steam_cart")({"title": "Cart", "url": "u", "content": empty}, rule) == 0.0
    assert m("is_added_to_steam_cart")(None, rule) == 0.0


# --------------------------------------------------------------------------- compare_htmls

GOLD = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Survey 2021</title><style>td { color: red }</style></head>
<body><table class="data wide"><tr><th>Year</th><th>Value</th></tr>
<tr><td id="y">2021</td><td>5.6</td></tr></table><!-- generated --></body></html>
"""


def _html(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_compare_htmls(tmp_path: Path) -> None:
    gold = _html(tmp_path, "gold.html", GOLD)
    cmp = m("compare_htmls")
    assert cmp(_html(tmp_path, "same.html", GOLD), gold) == 1.0
    # bs4 reads class as a list of words: extra spaces between classes do not matter
    assert cmp(_html(tmp_path, "spaces.html", GOLD.replace('"data wide"', '"data  wide"')), gold) == 1.0
    assert cmp(_html(tmp_path, "value.html", GOLD.replace("5.6", "5.7")), gold) == 0.0
    assert cmp(_html(tmp_path, "attr.html", GOLD.replace('id="y"', 'id="year"')), gold) == 0.0
    assert cmp(_html(tmp_path, "tag.html", GOLD.replace("<td>5.6</td>", "<th>5.6</th>")), gold) == 0.0
    assert cmp(_html(tmp_path, "title.html", GOLD.replace("Survey 2021", "Survey")), gold) == 0.0
    # content added at the end changes the text of the body and html elements
    assert cmp(_html(tmp_path, "longer.html", GOLD.replace("</body>", "<p>extra</p></body>")), gold) == 0.0
    # as OSWorld's zip, only the shorter walk is compared: a trailing comment does not count
    assert cmp(_html(tmp_path, "comment.html", GOLD.replace("<!-- generated -->", "")), gold) == 1.0
    assert cmp(None, gold) == 0.0
    nodes = list(GC_html_nodes(GOLD))
    assert nodes[0] == "<!DOCTYPE html>"
    table = next(n for n in nodes if getattr(n, "name", None) == "table")
    assert table.attrs == (("class", ("data", "wide")),) and table.text.startswith("YearValue")
    head = next(n for n in nodes if getattr(n, "name", None) == "head")
    assert head.text == "Survey 2021"  # style content is not text, as in bs4


def test_compare_htmls_ignore_sdnum(tmp_path: Path) -> None:
    # OSWorld 1.0.2 (chrome.py): with ignore_sdnum an element whose attributes differ only in
    # LibreOffice's number-format attribute ``sdnum`` still matches
    gold = _html(tmp_path, "gold.html", GOLD.replace('<td id="y">', '<td id="y" sdnum="1033;0;0.00">'))
    other = _html(tmp_path, "other.html", GOLD.replace('<td id="y">', '<td id="y" sdnum="1031;0;0,00">'))
    bare = _html(tmp_path, "bare.html", GOLD)
    cmp = m("compare_htmls")
    assert cmp(other, gold) == 0.0
    assert cmp(other, gold, ignore_sdnum=True) == 1.0
    assert cmp(bare, gold, ignore_sdnum=True) == 1.0
    assert cmp(_html(tmp_path, "id.html", GOLD.replace('<td id="y">', '<td id="z" sdnum="1">')), gold,
               ignore_sdnum=True) == 0.0  # other attributes still count


def GC_html_nodes(text: str) -> list:
    from guigym.envs.desktop.evaluators.metrics.chrome import html_nodes

    return list(html_nodes(text.encode()))


# --------------------------------------------------------------------------- network items, page_info


@pytest.mark.parametrize("name", ["info_from_website", "pdf_from_url", "gotoRecreationPage_and_get_html_content"])
def test_network_getters_are_registered_and_refuse(tmp_path: Path, name: str) -> None:
    with pytest.raises(NotImplementedError, match="live web"):
        get(FakeClient(), {"type": name, "url": "https://example.org/", "path": "x", "dest": "y"}, tmp_path)


def test_page_info_fake(tmp_path: Path) -> None:
    url = "https://store.steampowered.com/cart/"
    value = {"title": "Shopping Cart", "url": url, "content": "<html>The Dota 2 Official Soundtrack</html>"}
    client = FakeClient(tab={"id": "T1", "url": url, "type": "page"},
                        cdp=[{"pages": [], "target": {"id": "T1", "url": url}, "value": value}])
    got = get(client, {"type": "page_info", "url": url}, tmp_path)
    assert got == value
    assert m("is_added_to_steam_cart")(got, {"items": ["The Dota 2 Official Soundtrack"]}) == 1.0
    helper = [c[1] for c in client.calls if c[0] == "execute" and c[1][2] == GC._TAB_SNIPPET]
    assert [h[4:6] for h in helper] == [["open", url], ["close", "T1"]]  # opened, then closed
    # no browser listening: None, nothing else asked
    down = FakeClient(tab={"error": "unreachable", "detail": "refused"})
    assert get(down, {"type": "page_info", "url": url}, tmp_path) is None


# --------------------------------------------------------------------------- real Chromium


class LocalClient(FakeClient):
    """Runs the in-desktop helpers for real on this machine (the desktop is this machine)."""

    def execute(self, command: Any, shell: bool = False, timeout: float = 60) -> dict:
        self.calls.append(("execute", command))
        return run_here(command, timeout)


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    base = tmp_path_factory.mktemp("chromium")
    with devtools_chromium(base) as port:
        yield port, base


def test_page_info_on_real_chromium(chromium, tmp_path: Path) -> None:
    port, base = chromium
    page = base / "cart.html"
    page.write_text("<!DOCTYPE html><html><head><title>Shopping Cart</title></head><body>"
                    "<div class='cart_row'>The Dota 2 Official Soundtrack</div></body></html>")
    ctx = GetterContext(client=LocalClient(), cache_dir=tmp_path)
    ctx.chromium_port = port  # type: ignore[attr-defined]  # the port this test's browser listens on
    info = GETTERS.get("page_info")(ctx, {"type": "page_info", "url": page.as_uri()})
    assert info["title"] == "Shopping Cart" and info["url"] == page.as_uri()
    assert info["content"].startswith("<!DOCTYPE html>")
    assert m("is_added_to_steam_cart")(info, {"items": ["The Dota 2 Official Soundtrack"]}) == 1.0
    listed = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5).read())
    assert all(t.get("url") != page.as_uri() for t in listed)  # the tab it opened is closed again
