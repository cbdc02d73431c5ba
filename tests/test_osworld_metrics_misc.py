"""OSWorld VLC / OS / multi-app metrics (evaluators/metrics/{vlc,misc,thunderbird,media}.py) and system getters
(getters_system.py).

Inputs are real files written in tmp_path: vlcrc text as VLC writes it, WAV tones (scipy), zip
archives, an sqlite database, docx/xlsx (python-docx, openpyxl), mbox folders, an MP3 tag
(mutagen, when installed). Getters run against a fake client that records its calls.
"""
from __future__ import annotations

import datetime as dt
import importlib.util
import sqlite3
import zipfile
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pytest

from guigym.core import actions as A
from guigym.core.errors import TaskSpecError
from guigym.envs.desktop.evaluators.metrics import media
from guigym.envs.desktop.evaluators import get
from guigym.envs.desktop.evaluators import METRICS, evaluate
from guigym.envs.desktop.evaluators.base import MetricDependencyError

ITEMS = ("is_vlc_recordings_folder", "is_vlc_fullscreen", "check_global_key_play_pause", "check_qt_slider_colours",
         "check_qt_minimal_view", "check_one_instance_when_started_from_file", "check_qt_bgcone", "check_mp3_meta",
         "compare_python_pure_text", "compare_zip_files", "compare_result_files", "run_sqlite3", "fuzzy_place_math",
         "compare_conference_city_in_order", "compare_time_in_speedtest_results", "is_in_vm_clickboard",
         "compare_videos", "compare_audios", "check_thunderbird_folder", "check_python_file_by_test_suite")


def m(name: str):
    return METRICS.get(name)


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def test_all_items_registered() -> None:
    from guigym.envs.desktop.evaluators import GETTERS

    assert all(name in METRICS for name in ITEMS)
    assert all(name in GETTERS for name in ("vm_wallpaper", "content_from_vm_file", "default_video_player",
                                            "vscode_config"))


# --------------------------------------------------------------------------- vlcrc

#: the shape of VLC's vlcrc: section headers, "# Description (type)" lines, defaults commented out
VLCRC_DEFAULT = """\
###
###  vlc 3.0.16
###

[qt] # Qt interface
# Show a background cone (boolean)
#qt-bgcone=1

# Start in minimal view (boolean)
#qt-minimal-view=0

# Define the colors of the volume slider (string)
#qt-slider-colours=153;210;153;20;210;20;255;199;15;245;39;29

[core] # core program
# Record directory (string)
#input-record-path=

# Allow only one running instance when started from file manager (boolean)
#one-instance-when-started-from-file=1

# Play/Pause (string)
#global-key-play-pause=

# Play/Pause (string)
#key-play-pause=Space
"""


def _set(text: str, key: str, value: str) -> str:
    """Replace the commented default of ``key`` with a set value, as VLC writes it."""
    lines = [f"{key}={value}" if ln.startswith(f"#{key}=") else ln for ln in text.split("\n")]
    assert lines != text.split("\n"), key
    return "\n".join(lines)


@pytest.fixture
def vlcrc(tmp_path: Path):
    def write(*settings: tuple[str, str]) -> str:
        text = VLCRC_DEFAULT
        for key, value in settings:
            text = _set(text, key, value)
        p = tmp_path / f"vlcrc{len(list(tmp_path.iterdir()))}"
        p.write_text(text)
        return str(p)
    return write


def test_vlc_recordings_folder(vlcrc) -> None:
    f, rule = m("is_vlc_recordings_folder"), {"recording_file_path": "/home/user/Desktop"}
    assert f(vlcrc(("input-record-path", "/home/user/Desktop")), rule) == 1.0
    assert f(vlcrc(("input-record-path", "/home/user/Videos")), rule) == 0.0
    assert f(vlcrc(), rule) == 0.0  # only the commented default
    assert f(None, rule) == 0.0


def test_vlc_settings_read_last_line_and_defaults(vlcrc) -> None:
    bgcone, minimal = m("check_qt_bgcone"), m("check_qt_minimal_view")
    one = m("check_one_instance_when_started_from_file")
    assert bgcone(vlcrc(("qt-bgcone", "0")), {"expected_qt_bgcone": 0}) == 1.0
    assert bgcone(vlcrc(), {"expected_qt_bgcone": 0}) == 0.0
    assert minimal(vlcrc(("qt-minimal-view", "1")), {"expected_qt_minimal_view": 1}) == 1.0
    assert minimal(vlcrc(), {"expected_qt_minimal_view": 1}) == 0.0
    assert one(vlcrc(("one-instance-when-started-from-file", "0")),
               {"expected_one_instance_when_started_from_file": 0}) == 1.0
    assert one(vlcrc(), {"expected_one_instance_when_started_from_file": 0}) == 0.0
    assert bgcone("/nonexistent/vlcrc", {"expected_qt_bgcone": 0}) == 0.0


def test_global_key_play_pause(vlcrc) -> None:
    f, rule = m("check_global_key_play_pause"), {"expected_global_key_play_pause": 1}
    assert f(vlcrc(("global-key-play-pause", "Ctrl+Alt+p")), rule) == 1.0
    assert f(vlcrc(), rule) == 0.0
    # the app-local shortcut is another key; setting it is not the global one
    assert f(vlcrc(("key-play-pause", "p")), rule) == 0.0
    assert f(vlcrc(), {"expected_global_key_play_pause": 0}) == 1.0


def test_qt_slider_colours(vlcrc) -> None:
    f = m("check_qt_slider_colours")
    dark = "0;0;0;20;20;20;40;40;40;90;10;10"
    assert f(vlcrc(("qt-slider-colours", dark)), {"type": "blackish"}) == 1.0
    assert f(vlcrc(("qt-slider-colours", "0;0;0;20;20;20;40;40;40;120;10;10")), {"type": "blackish"}) == 0.0
    assert f(vlcrc(), {"type": "blackish"}) == 0.0  # VLC's green-yellow-red default
    assert f(vlcrc(("qt-slider-colours", dark)), {"type": "match", "expected_qt_slider_colours": dark}) == 1.0
    assert f(vlcrc(), {"type": "match", "expected_qt_slider_colours": dark}) == 0.0
    assert f(vlcrc(("qt-slider-colours", "black")), {"type": "blackish"}) == 0.0


def test_vlc_fullscreen_via_evaluate() -> None:
    spec = {"func": "is_vlc_fullscreen", "expected": {"type": "vm_window_size"}, "result": {"type": "vm_screen_size"}}
    screen = {"width": 1920, "height": 1080}
    assert evaluate(spec, screen, {"width": 1920, "height": 1080})[0] == 1.0
    assert evaluate(spec, screen, {"width": 1280, "height": 720})[0] == 0.0
    assert evaluate(spec, screen, None)[0] == 0.0  # no VLC window


# --------------------------------------------------------------------------- audio


def _tone(path: Path, freq: float, seconds: float = 1.5, rate: int = 44100, lead: float = 0.0) -> str:
    wavfile = pytest.importorskip("scipy.io.wavfile", reason="scipy is not installed")
    t = np.arange(int(seconds * rate)) / rate
    y = 0.5 * np.sin(2 * np.pi * freq * t) * np.minimum(1.0, 10 * t)  # short fade-in
    y = np.concatenate([np.zeros(int(lead * rate)), y])
    wavfile.write(str(path), rate, (y * 32767).astype(np.int16))
    return str(path)


def test_compare_audios_same_vs_different(tmp_path: Path) -> None:
    f = m("compare_audios")
    a = _tone(tmp_path / "a.wav", 440)
    a2 = _tone(tmp_path / "a2.wav", 440)  # the same sound in another file
    shifted = _tone(tmp_path / "shifted.wav", 440, lead=0.3)
    other = _tone(tmp_path / "b.wav", 1760)
    assert f(a, a2) == pytest.approx(1.0)
    different = f(a, other)
    assert different < 0.1
    assert f(a, shifted) > different  # DTW absorbs the leading silence better than a new pitch
    assert f(a, None) == 0.0
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    assert f(a, str(broken)) == 0.0


def test_load_audio_resamples_and_mixes_down(tmp_path: Path) -> None:
    wavfile = pytest.importorskip("scipy.io.wavfile", reason="scipy is not installed")
    t = np.arange(8000) / 8000
    stereo = np.stack([np.sin(2 * np.pi * 200 * t), np.zeros_like(t)], axis=1).astype(np.float32)
    wavfile.write(str(tmp_path / "s.wav"), 8000, stereo)
    y = media.load_audio(str(tmp_path / "s.wav"))
    assert y.shape == (22050,) and y.dtype == np.float32
    assert np.abs(y).max() == pytest.approx(0.5, abs=0.02)  # mean of a sine and silence


def test_non_wav_audio_needs_soundfile(tmp_path: Path) -> None:
    if _has("soundfile"):
        pytest.skip("soundfile is installed; the missing-library path cannot be seen")
    mp3 = tmp_path / "song.mp3"
    mp3.write_bytes(b"ID3\x03\x00\x00\x00\x00\x00\x00" + b"\xff\xfb" * 100)
    with pytest.raises(MetricDependencyError, match="soundfile"):
        m("compare_audios")(str(mp3), str(mp3))


def test_mfcc_shape_and_dtw_matches_brute_force() -> None:
    y = np.sin(2 * np.pi * 440 * np.arange(22050) / 22050).astype(np.float32)
    feats = media.mfcc(y)
    assert feats.shape == (20, 1 + 22050 // 512)
    rows = media.normalize_rows(feats)
    assert np.allclose(np.abs(rows).max(axis=1), 1.0)

    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(7, 4)), rng.normal(size=(11, 4))
    a[2] = 0.0  # a zero frame costs 1 against anything
    def unit(x: np.ndarray) -> np.ndarray:
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        return x / np.where(norms > 0, norms, 1)

    cost = 1 - unit(a) @ unit(b).T
    d = np.full((8, 12), np.inf)
    d[0, 0] = 0
    for i in range(1, 8):
        for j in range(1, 12):
            d[i, j] = cost[i - 1, j - 1] + min(d[i - 1, j], d[i, j - 1], d[i - 1, j - 1])
    assert media.dtw_cosine(a, b) == pytest.approx(d[7, 11])
    assert media.dtw_cosine(a, a) == pytest.approx(1.0)  # only the zero frame costs


# --------------------------------------------------------------------------- video


def test_phash_tells_flipped_frames_apart() -> None:
    from PIL import Image

    rng = np.random.default_rng(1)
    img = Image.fromarray((rng.random((120, 160, 3)) * 255).astype(np.uint8)).resize((640, 480))
    assert media.hamming(media.phash(img), media.phash(img.copy())) == 0
    assert media.hamming(media.phash(img), media.phash(img.transpose(Image.Transpose.FLIP_TOP_BOTTOM))) > 5


def test_compare_videos_needs_opencv_or_compares_frames(tmp_path: Path) -> None:
    f = m("compare_videos")
    if not _has("cv2"):
        with pytest.raises(MetricDependencyError, match="opencv"):
            f(str(tmp_path / "a.mp4"), str(tmp_path / "b.mp4"))
        return
    import cv2

    rng = np.random.default_rng(2)
    frames = [(rng.random((60, 80, 3)) * 255).astype(np.uint8).repeat(4, 0).repeat(4, 1) for _ in range(12)]

    def write(name: str, flip: bool) -> str:
        path = str(tmp_path / name)
        out = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), 10, (320, 240))
        for fr in frames:
            out.write(fr[::-1] if flip else fr)
        out.release()
        return path

    a, b, flipped = write("a.avi", False), write("b.avi", False), write("c.avi", True)
    assert f(a, b) == 1.0
    assert f(a, flipped) == 0.0
    assert f(a, str(tmp_path / "missing.avi")) == 0.0


# --------------------------------------------------------------------------- mp3, clipboard


def test_check_mp3_meta(tmp_path: Path) -> None:
    f = m("check_mp3_meta")
    rules = {"title": {"method": "eq", "ref": "Missing You"}, "artist": {"method": "eq", "ref": "Cheng Xiang"}}
    if not _has("mutagen"):
        with pytest.raises(MetricDependencyError, match="mutagen"):
            f(str(tmp_path / "x.mp3"), rules)
        pytest.skip("mutagen is not installed; only the missing-library path was checked")
    from mutagen.easyid3 import EasyID3

    def song(name: str, **tags: str) -> str:
        p = tmp_path / name
        p.write_bytes(b"\xff\xfb\x90\x00" + b"\x00" * 400)
        if tags:
            t = EasyID3()
            for k, v in tags.items():
                t[k] = v
            t.save(str(p))
        return str(p)

    assert f(song("ok.mp3", title="Missing You", artist="Cheng Xiang"), rules) == 1.0
    assert f(song("swapped.mp3", title="Cheng Xiang", artist="Missing You"), rules) == 0.0
    assert f(song("blank.mp3"), rules) == 0.0


def test_is_in_vm_clickboard_via_evaluate() -> None:
    spec = {"func": "is_in_vm_clickboard", "expected": {"type": "vm_command_line"}, "result": {"type": "rule"}}
    path = {"expected": "/home/user/Data3/List3/secret.docx"}
    assert evaluate(spec, path, "/home/user/Data3/List3/secret.docx\n")[0] == 1.0
    assert evaluate(spec, path, "/home/user/Data3/secret.docx")[0] == 0.0
    assert evaluate(spec, {"expected": ["None"]}, "None")[0] == 1.0
    assert evaluate(spec, {"expected": ["ICLR", "Vienna"]}, "ICLR 2035, Rio")[0] == 0.0


# --------------------------------------------------------------------------- text files


def test_compare_python_pure_text(tmp_path: Path) -> None:
    f = m("compare_python_pure_text")
    gold = tmp_path / "gold.py"
    gold.write_text("import numpy as np\nx = np.arange(3)\nprint(x)\n")
    same = tmp_path / "task.py"
    # OSWorld 1.0.2: blank lines, CRLF, trailing blanks and a leading shebang/coding line do not count
    same.write_text("#!/usr/bin/env python3\n# -*- coding: utf-8 -*-\nimport numpy as np\n\n\n"
                    "x = np.arange(3)   \r\nprint(x)")
    wrong = tmp_path / "wrong.py"
    wrong.write_text("import numpy as np\nx = np.arange(4)\nprint(x)\n")
    assert f(str(same), str(gold)) == 1.0
    assert f(str(wrong), str(gold)) == 0.0
    # ... but spaces inside a line and indentation do (an older OSWorld dropped all whitespace)
    spaced = tmp_path / "spaced.py"
    spaced.write_text("import numpy as np\nx = np.arange( 3 )\nprint(x)\n")
    assert f(str(spaced), str(gold)) == 0.0
    indented = tmp_path / "indented.py"
    indented.write_text("import numpy as np\nx = np.arange(3)\n    print(x)\n")
    assert f(str(indented), str(gold)) == 0.0
    # a tab is 4 columns: the same block indented by a tab or by 4 spaces is the same text
    (tmp_path / "tab.py").write_text("if x:\n\tprint(x)\n")
    (tmp_path / "spaces.py").write_text("if x:\n    print(x)\n")
    assert f(str(tmp_path / "tab.py"), str(tmp_path / "spaces.py")) == 1.0
    # a coding line after the first three lines is code, not metadata
    (tmp_path / "late.py").write_text("a = 1\nb = 2\nc = 3\n# coding: utf-8\n")
    (tmp_path / "late_gold.py").write_text("a = 1\nb = 2\nc = 3\n")
    assert f(str(tmp_path / "late.py"), str(tmp_path / "late_gold.py")) == 0.0
    assert f(str(tmp_path / "missing.py"), str(gold)) == 0.0


def test_compare_result_files(tmp_path: Path) -> None:
    f = m("compare_result_files")

    def w(name: str, text: str) -> str:
        (tmp_path / name).write_text(text)
        return str(tmp_path / name)

    gold = w("gold.txt", "25.5\n")
    assert f(w("a.txt", "The median price is 25.5"), gold) == 1.0
    assert f(w("b.txt", "25.50001"), gold) == 1.0
    assert f(w("c.txt", "26"), gold) == 0.0
    assert f(w("d.txt", "about twenty"), gold) == 0.0
    text_gold = w("tg.txt", "done")
    assert f(w("e.txt", " done \n"), text_gold) == 1.0
    assert f(w("f.txt", "not done"), text_gold) == 0.0


def test_speedtest_time(tmp_path: Path) -> None:
    f = m("compare_time_in_speedtest_results")
    csv = tmp_path / "Speedtest Results Export-_20240101.csv"
    csv.write_text('Date,Time,Download\n"x",2024-03-04 14:05,93.1\n'.replace('"x",', "1,"))
    now = dt.datetime(2024, 3, 4, 14, 40)
    assert f(str(csv), "60", now=now) == 1.0
    assert f(str(csv), "30", now=now) == 0.0
    assert f(str(csv), "60", now=dt.datetime(2024, 3, 4, 16, 0)) == 0.0
    late = tmp_path / "late.csv"
    late.write_text("Date,Time\n1,2024-03-04 23:50\n")
    assert f(str(late), "60", now=dt.datetime(2024, 3, 5, 0, 10)) == 1.0  # across midnight
    assert f(str(tmp_path / "nope.csv"), "60", now=now) == 0.0
    (tmp_path / "short.csv").write_text("Date,Time\n")
    assert f(str(tmp_path / "short.csv"), "60", now=now) == 0.0


# --------------------------------------------------------------------------- zip


def _zip(path: Path, members: dict[str, bytes]) -> str:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return str(path)


def test_compare_zip_files(tmp_path: Path) -> None:
    f = m("compare_zip_files")
    gold = _zip(tmp_path / "gold.zip", {"essay.docx": b"DOCX" * 1000, "notes/readme.txt": b"hi"})
    assert f(_zip(tmp_path / "ok.zip", {"notes/readme.txt": b"hi", "essay.docx": b"DOCX" * 1000}), gold) == 1.0
    assert f(_zip(tmp_path / "missing.zip", {"essay.docx": b"DOCX" * 1000}), gold) == 0.0
    assert f(_zip(tmp_path / "changed.zip", {"essay.docx": b"DOCX" * 999 + b"XXXX",
                                            "notes/readme.txt": b"hi"}), gold) == 0.0
    (tmp_path / "broken.zip").write_bytes(b"PK not really")
    assert f(str(tmp_path / "broken.zip"), gold) == 0.0
    assert f(None, gold) == 0.0


def test_compare_zip_files_pdf_members_by_text(tmp_path: Path) -> None:
    if not _has("pypdf"):
        pytest.skip("pypdf is not installed (pip install pypdf); PDF members need it")
    import test_osworld_metrics_files as TF  # its minimal PDF writer

    f = m("compare_zip_files")
    a = Path(TF.write_pdf(tmp_path / "a.pdf", ["Recruitment and retention", "of health professionals"]))
    b_path = TF.write_pdf(tmp_path / "b.pdf", ["Recruitment and retention", "of health professionals"])
    b = Path(b_path).read_bytes().replace(b"%PDF-1.4\n", b"%PDF-1.4\n%extra\n")  # other bytes, same text
    c = Path(TF.write_pdf(tmp_path / "c.pdf", ["A different essay", "entirely"]))
    gold = _zip(tmp_path / "gold.zip", {"essay.pdf": a.read_bytes()})
    assert f(_zip(tmp_path / "same_text.zip", {"essay.pdf": b}), gold) == 1.0
    assert f(_zip(tmp_path / "other.zip", {"essay.pdf": c.read_bytes()}), gold) == 0.0
    assert f(_zip(tmp_path / "junk.zip", {"essay.pdf": b"not a pdf"}), gold) == 0.0


# --------------------------------------------------------------------------- sqlite


def _thunderbird_db(path: Path, starred: list[int]) -> str:
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE messages (id INTEGER PRIMARY KEY, folderID INTEGER);
        CREATE TABLE messageAttributes (id INTEGER PRIMARY KEY, attributeID INTEGER, value, messageID INTEGER);
        INSERT INTO messages VALUES (1, 13), (2, 13), (3, 7);
    """)
    conn.executemany("INSERT INTO messageAttributes (attributeID, value, messageID) VALUES (58, 1, ?)",
                     [(i,) for i in starred])
    conn.commit()
    conn.close()
    return str(path)


SQL = ("select sum(1) > 0 from messageAttributes where attributeID = 58 and value = 1 "
       "and messageID in (select id from messages where folderID = 13);")


def test_run_sqlite3(tmp_path: Path) -> None:
    f = m("run_sqlite3")
    db_dir = tmp_path / "a dir?#x"  # characters a sqlite URI must escape
    db_dir.mkdir()
    good = _thunderbird_db(db_dir / "global-messages-db.sqlite", [1, 2])
    before = Path(good).read_bytes()
    assert f(good, {"sql": SQL}) == 1.0
    assert f(_thunderbird_db(tmp_path / "none.sqlite", [3]), {"sql": SQL}) == 0.0  # starred elsewhere
    assert Path(good).read_bytes() == before
    # read-only: a write statement from the rules fails instead of changing the agent's file
    assert f(good, {"sql": "insert into messages values (9, 9) returning 1"}) == 0.0
    assert Path(good).read_bytes() == before
    (tmp_path / "junk.sqlite").write_bytes(b"not a database at all" * 10)
    assert f(str(tmp_path / "junk.sqlite"), {"sql": SQL}) == 0.0
    assert f(str(tmp_path / "absent.sqlite"), {"sql": SQL}) == 0.0
    assert not (tmp_path / "absent.sqlite").exists()


def test_run_sqlite3_interrupts_endless_view(tmp_path: Path, monkeypatch) -> None:
    from guigym.envs.desktop.evaluators.metrics import misc as metrics_misc

    monkeypatch.setattr(metrics_misc, "_SQLITE_MAX_CHECKS", 1000)
    path = tmp_path / "evil.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE VIEW messageAttributes AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
                 "SELECT n AS attributeID, 1 AS value, n AS messageID FROM r")
    conn.execute("CREATE TABLE messages (id INTEGER, folderID INTEGER)")
    conn.commit()
    conn.close()
    assert m("run_sqlite3")(str(path), {"sql": SQL}) == 0.0


# --------------------------------------------------------------------------- docx / xlsx


def test_fuzzy_place_math(tmp_path: Path) -> None:
    docx = pytest.importorskip("docx", reason="python-docx is not installed")
    f = m("fuzzy_place_math")
    expected = ["深圳市福田区益田路5055号信息枢纽大厦西门一楼", "深圳市福田区正义街1号", "福田区振兴路108号"]

    def doc(name: str, paragraphs: list[str]) -> str:
        d = docx.Document()
        for p in paragraphs:
            d.add_paragraph(p)
        d.save(str(tmp_path / name))
        return str(tmp_path / name)

    assert f(doc("exact.docx", ["深圳市福田区正义街1号", "", "福田区振兴路108号", "深圳市福田区益田路5055号信息枢纽大厦西门一楼"]),
             {"expected": expected}) == pytest.approx(1.0)
    near = f(doc("near.docx", ["深圳市福田区正义街2号", "福田区振兴路108号", "深圳市福田区益田路5055号"]), {"expected": expected})
    assert 0.7 < near < 1.0
    assert f(doc("two.docx", ["深圳市福田区正义街1号", "福田区振兴路108号"]), {"expected": expected}) == 0.0
    assert f(doc("eng.docx", ["Futian one", "two"]), {"expected": expected}) == 0.0  # 4 words
    (tmp_path / "bad.docx").write_bytes(b"no zip")
    assert f(str(tmp_path / "bad.docx"), {"expected": expected}) == 0.0


def test_compare_conference_city_in_order(tmp_path: Path) -> None:
    openpyxl = pytest.importorskip("openpyxl", reason="openpyxl is not installed")
    f = m("compare_conference_city_in_order")
    expected = ["Scottsdale", ["Montreal", "Montréal"], ["New York", "NYC"]] + [f"City{i}" for i in range(18)]

    def book(name: str, cities: list[Any]) -> str:
        wb = openpyxl.Workbook()
        ws = wb.active
        ws.append(["Conference", "Year", "City"])
        for c in cities:
            ws.append(["ICML", 2013, c])
        wb.save(str(tmp_path / name))
        return str(tmp_path / name)

    good = ["Scottsdale, AZ", "Montréal", "New York City"] + [f"City{i}" for i in range(18)]
    assert f(book("good.xlsx", good), {"expected": expected}) == 1.0
    swapped = [good[1], good[0]] + good[2:]
    assert f(book("swapped.xlsx", swapped), {"expected": expected}) == 0.0
    assert f(book("blank.xlsx", good[:-1]), {"expected": expected}) == 0.0  # C22 left empty
    assert f(book("good2.xlsx", good), {"expected": expected[:-1]}) == 0.0  # expected shorter than C2:C22


# --------------------------------------------------------------------------- thunderbird folder


def _msg(subject: str, status: str = "0001", keys: str = "", body: str = "Hello") -> str:
    return (f"From - Mon Jan 29 10:00:00 2024\nX-Mozilla-Status: {status}\nX-Mozilla-Status2: 00000000\n"
            f"X-Mozilla-Keys: {keys}\nSubject: {subject}\nFrom: billing@example.com\n\n{body}\n")


def test_check_thunderbird_folder(tmp_path: Path) -> None:
    f = m("check_thunderbird_folder")

    def folder(name: str, *msgs: str) -> str:
        (tmp_path / name).write_text("".join(msgs))
        return str(tmp_path / name)

    gold = folder("gold", _msg("Invoice"), _msg("Receipt"))
    # another order, a re-stamped envelope line, a deleted copy and a duplicate: the same folder
    same = folder("same", _msg("Receipt").replace("Jan 29", "Feb 02"), _msg("Old", status="0009"),
                  _msg("Invoice"), _msg("Invoice"))
    assert f(same, gold) == 1.0
    missing = folder("missing", _msg("Invoice"))
    assert f(missing, gold) == 0.0  # upstream's loop scores this 1
    other_body = folder("other", _msg("Invoice"), _msg("Receipt", body="Changed"))
    assert f(other_body, gold) == 0.0
    unread = folder("unread", _msg("Invoice", status="0000"), _msg("Receipt"))
    assert f(unread, gold) == 0.0
    assert f(unread, gold, ignore_status=True) == 1.0
    tagged = folder("tagged", _msg("Invoice", keys="$label1"), _msg("Receipt"))
    assert f(tagged, gold) == 0.0 and f(tagged, gold, ignore_keys=True) == 1.0
    kept_deleted = folder("kd", _msg("Invoice"), _msg("Receipt"), _msg("Old", status="0009"))
    assert f(kept_deleted, gold, remove_deleted=False) == 0.0
    # list form as the tasks use it: (have_seen, Bills) against their gold files
    assert f([same, gold], [gold, gold]) == 1.0
    assert f([same, missing], [gold, gold]) == 0.0
    assert f([None, gold], [gold, gold]) == 0.0


def test_check_thunderbird_folder_eml_without_envelope(tmp_path: Path) -> None:
    f = m("check_thunderbird_folder")
    eml = "Subject: Your receipt\r\nFrom: x@example.com\r\n\r\nFrom now on, thanks.\r\n"
    (tmp_path / "pred.eml").write_bytes(eml.encode())
    (tmp_path / "gold.eml").write_bytes(eml.replace("\r\n", "\n").encode())
    (tmp_path / "bad.eml").write_text(eml.replace("thanks", "no thanks"))
    assert f(str(tmp_path / "pred.eml"), str(tmp_path / "gold.eml")) == 1.0
    assert f(str(tmp_path / "bad.eml"), str(tmp_path / "gold.eml")) == 0.0


def test_python_test_suite_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NotImplementedError, match="host"):
        m("check_python_file_by_test_suite")([str(tmp_path / "main.py")], str(tmp_path / "test_suite.py"))


# --------------------------------------------------------------------------- getters


class FakeClient:
    """Stands in for DesktopClient: canned files, wallpaper and xdg-mime answers; records calls."""

    def __init__(self, files: Optional[dict[str, bytes]] = None, wallpaper: Optional[bytes] = None,
                 defaults: Optional[dict[str, str]] = None, on_enter: Optional[tuple[str, bytes]] = None) -> None:
        self.files, self.wallpaper, self.defaults = dict(files or {}), wallpaper, defaults or {}
        self.on_enter = on_enter
        self.calls: list[tuple[str, Any]] = []

    def request(self, method: str, path: str, *args: Any, **kw: Any) -> tuple[int, dict, bytes]:
        self.calls.append(("request", (method, path)))
        if path == "/wallpaper" and method == "POST" and self.wallpaper is not None:
            return 200, {}, self.wallpaper
        return 404, {}, b'{"message": "Wallpaper file not found"}'

    def get_file(self, path: str) -> Optional[bytes]:
        self.calls.append(("get_file", path))
        return self.files.get(path)

    def execute(self, command: Any, shell: bool = False, timeout: float = 60) -> dict:
        self.calls.append(("execute", command))
        assert command[:2] == ["sh", "-c"] and "xdg-mime" in command[2]
        out = "".join(self.defaults.get(t, "") + "\n" for t in command[4:])
        return {"status": "success", "output": out, "error": "", "returncode": 0}

    def act(self, action: A.Action) -> None:
        self.calls.append(("act", action))
        if isinstance(action, A.Press) and self.on_enter:
            self.files[self.on_enter[0]] = self.on_enter[1]


def test_vm_wallpaper(tmp_path: Path) -> None:
    client = FakeClient(wallpaper=b"\x89PNG fake")
    path = get(client, {"type": "vm_wallpaper", "dest": "background.png"}, tmp_path)
    assert Path(path).read_bytes() == b"\x89PNG fake" and Path(path).parent == tmp_path
    assert client.calls == [("request", ("POST", "/wallpaper"))]
    assert get(FakeClient(), {"type": "vm_wallpaper", "dest": "bg.png"}, tmp_path) is None
    with pytest.raises(TaskSpecError):
        get(client, {"type": "vm_wallpaper", "dest": "../outside.png"}, tmp_path)


def test_default_video_player(tmp_path: Path) -> None:
    spec = {"type": "default_video_player"}
    vlc = {t: "vlc.desktop" for t in ("mp4", "x-matroska", "webm", "avi", "quicktime")}
    vlc.update({"ogg": "totem.desktop", "x-theora": "totem.desktop"})
    assert get(FakeClient(defaults=vlc), spec, tmp_path) == "vlc.desktop"
    totem = {t: "org.gnome.Totem.desktop" for t in ("mp4", "x-matroska", "webm")}
    totem["avi"] = "vlc.desktop"
    assert get(FakeClient(defaults=totem), spec, tmp_path) == "org.gnome.Totem.desktop"
    assert get(FakeClient(), spec, tmp_path) == "unknown"
    # end to end with the task's metric
    rules = {"include": ["vlc.desktop"]}
    assert m("check_include_exclude")(get(FakeClient(defaults=totem), spec, tmp_path), rules) == 0.0


def test_vscode_config_runs_the_command_then_reads_the_file(tmp_path: Path, monkeypatch) -> None:
    from guigym.envs.desktop.evaluators.getters import system as getters_system

    monkeypatch.setattr(getters_system.time, "sleep", lambda s: None)
    client = FakeClient(on_enter=("/home/user/OpenProject.txt", b"project"))
    spec = {"type": "vscode_config", "vscode_extension_command": "OpenProject", "path": "/home/user/OpenProject.txt",
            "dest": "OpenProject.txt"}
    path = get(client, spec, tmp_path)
    assert [c[1] for c in client.calls if c[0] == "act"] == [
        A.Hotkey(keys=("ctrl", "shift", "p")), A.Type(text="OpenProject"), A.Press(key="enter")]
    assert m("compare_config")(path, {"expected": "project"}) == 1.0
    assert get(FakeClient(), spec, tmp_path) is None  # the command wrote nothing


def test_content_from_vm_file_last_row(tmp_path: Path) -> None:
    openpyxl = pytest.importorskip("openpyxl", reason="openpyxl is not installed")
    pytest.importorskip("pandas", reason="pandas is not installed")
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.append(["Name", "Citations", "h-index", "Top paper"])
    ws.append(["Geoffrey Hinton", 900000, 190, "ImageNet classification"])
    ws.append(["Yann LeCun", 345074, 147, "Deep learning"])
    wb.save(str(tmp_path / "src.xlsx"))
    client = FakeClient(files={"/home/user/Desktop/researchers.xlsx": (tmp_path / "src.xlsx").read_bytes()})
    spec = {"type": "content_from_vm_file", "path": "/home/user/Desktop/researchers.xlsx", "file_type": "xlsx",
            "file_content": "last_row"}
    cache = tmp_path / "cache"
    row = get(client, spec, cache)
    assert row == ["Yann LeCun", "345074", "147", "Deep learning"]
    assert (cache / "researchers.xlsx").exists()
    lit = m("literal_match")
    assert lit(row, ["yann lecun", "345074", "147", "Deep Learning"], type="list", ignore_case=True) == 1.0
    assert lit(row, ["Yann LeCun", "345075", "147", "Deep learning"], type="list", ignore_case=True) == 0.0
    assert get(FakeClient(), spec, cache) is None
    with pytest.raises(TaskSpecError, match="file_type"):
        get(client, dict(spec, file_type="csv"), cache)
