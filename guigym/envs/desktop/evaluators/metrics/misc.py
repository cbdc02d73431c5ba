"""OSWorld VLC, OS and multi-app metrics (``vlc.py``, ``basic_os.py``, ``others.py``,
``general.py``, ``vscode.py``, ``table.py``, ``thunderbird.py``). Registered on import (see
``guigym.envs.desktop.evaluators.load_all``).

VLC settings are read from ``vlcrc`` (``key=value`` lines; VLC writes a default as a commented
``#key=value`` line, which upstream reads too; the last line for a key wins). A missing or
unreadable agent file scores 0 where upstream would raise. Optional libraries (python-docx,
openpyxl, pypdf, mutagen, scipy, soundfile, opencv) raise
:class:`~guigym.envs.desktop.evaluators.base.MetricDependencyError` naming the package.
"""
from __future__ import annotations

import datetime as dt
import difflib
import logging
import re
import sqlite3
import urllib.parse
import zipfile
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

from guigym.envs.desktop.evaluators.base import METRICS, require
from guigym.envs.desktop.evaluators.metrics.utils import match_value_to_rule
from guigym.envs.desktop.evaluators.textsim import ratio

log = logging.getLogger(__name__)

__all__ = ["vlcrc_value", "split_mbox"]


def _read(path: Optional[str]) -> Optional[str]:
    """The file's text (undecodable bytes replaced), None when there is no file."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


# --------------------------------------------------------------------------- vlc.py


def vlcrc_value(text: str, key: str, default: Optional[str], comments: bool = True) -> Optional[str]:
    """The value of the last ``key=value`` line of a vlcrc (``#key=value`` too when ``comments``),
    stripped; ``default`` when no line sets it."""
    pattern = re.compile(rf"^\s*{'#?' if comments else ''}\s*{re.escape(key)}=(.*)$")
    value = default
    for line in text.split("\n"):
        m = pattern.match(line)
        if m:
            value = m.group(1).strip()
    return value


def _vlc_setting(path: Optional[str], key: str, default: str, want: Any) -> float:
    text = _read(path)
    if text is None:
        return 0.0
    return float(vlcrc_value(text, key, default) == str(want))


@METRICS.register("is_vlc_recordings_folder")
def is_vlc_recordings_folder(actual_config_path: Optional[str], rule: Mapping[str, Any], **options: Any) -> float:
    """vlc.py: the first uncommented ``input-record-path=`` line of vlcrc holds exactly
    ``rule["recording_file_path"]``; no such line (VLC's default folder) scores 0."""
    text = _read(actual_config_path)
    if text is None:
        return 0.0
    for line in text.split("\n"):
        if line.startswith("#") or not line.strip() or "input-record-path" not in line:
            continue
        # upstream takes the text after the last "="; a path may hold "=", so split at the first
        return float(line.partition("=")[2].strip() == rule["recording_file_path"])
    return 0.0


@METRICS.register("is_vlc_fullscreen")
def is_vlc_fullscreen(actual_window_size: Optional[Mapping[str, Any]], screen_size: Optional[Mapping[str, Any]],
                      **options: Any) -> float:
    """vlc.py: the two ``{"width", "height"}`` dicts are equal (the tasks pass the screen size as
    result and VLC's window size as expected; the test is symmetric). A missing one scores 0."""
    if not isinstance(actual_window_size, Mapping) or not isinstance(screen_size, Mapping):
        return 0.0
    return float(actual_window_size.get("width") == screen_size.get("width")
                 and actual_window_size.get("height") == screen_size.get("height"))


@METRICS.register("check_global_key_play_pause")
def check_global_key_play_pause(actual_config_path: Optional[str], rule: Mapping[str, Any], **options: Any) -> float:
    """vlc.py: ``global-key-play-pause`` counts as "1" when the last line sets a non-empty key,
    "0" when empty or absent; equal to ``str(rule["expected_global_key_play_pause"])``."""
    text = _read(actual_config_path)
    if text is None:
        return 0.0
    value = vlcrc_value(text, "global-key-play-pause", "")
    return float(("1" if value else "0") == str(rule["expected_global_key_play_pause"]))


#: VLC's default qt-slider-colours (4 RGB triples)
DEFAULT_SLIDER_COLOURS = "153;210;153;20;210;20;255;199;15;245;39;29"


@METRICS.register("check_qt_slider_colours")
def check_qt_slider_colours(actual_config_path: Optional[str], rule: Mapping[str, Any], **options: Any) -> float:
    """vlc.py: ``rule["type"]`` ``match``: ``qt-slider-colours`` equals
    ``rule["expected_qt_slider_colours"]``; ``blackish``: every R, G, B of its ``;``-separated
    triples is below 100. Default :data:`DEFAULT_SLIDER_COLOURS`; unparseable or another type: 0."""
    text = _read(actual_config_path)
    if text is None:
        return 0.0
    value = vlcrc_value(text, "qt-slider-colours", DEFAULT_SLIDER_COLOURS) or ""
    kind = rule.get("type")
    if kind == "match":
        return float(value == rule["expected_qt_slider_colours"])
    if kind == "blackish":
        try:
            numbers = [int(x) for x in value.split(";")]
        except ValueError:
            return 0.0
        return float(all(v < 100 for v in numbers))
    log.warning("check_qt_slider_colours: unknown rule type %r", kind)
    return 0.0


@METRICS.register("check_qt_minimal_view")
def check_qt_minimal_view(actual_config_path: Optional[str], rule: Mapping[str, Any], **options: Any) -> float:
    """vlc.py: ``qt-minimal-view`` (default "0") equals ``str(rule["expected_qt_minimal_view"])``."""
    return _vlc_setting(actual_config_path, "qt-minimal-view", "0", rule["expected_qt_minimal_view"])


@METRICS.register("check_one_instance_when_started_from_file")
def check_one_instance_when_started_from_file(actual_config_path: Optional[str], rule: Mapping[str, Any],
                                              **options: Any) -> float:
    """vlc.py: ``one-instance-when-started-from-file`` (default "1") equals
    ``str(rule["expected_one_instance_when_started_from_file"])``."""
    return _vlc_setting(actual_config_path, "one-instance-when-started-from-file", "1",
                        rule["expected_one_instance_when_started_from_file"])


@METRICS.register("check_qt_bgcone")
def check_qt_bgcone(actual_config_path: Optional[str], rule: Mapping[str, Any], **options: Any) -> float:
    """vlc.py: ``qt-bgcone`` (default "1") equals ``str(rule["expected_qt_bgcone"])``."""
    return _vlc_setting(actual_config_path, "qt-bgcone", "1", rule["expected_qt_bgcone"])


@METRICS.register("compare_audios")
def compare_audios(audio_path_1: Optional[str], audio_path_2: Optional[str], **options: Any) -> float:
    """vlc.py: ``1 / (1 + DTW cost)`` of the two files' MFCCs (each coefficient row scaled to max
    |value| 1, cosine frame distance); identical audio scores 1, other audio near 0. See
    :mod:`guigym.envs.desktop.evaluators.metrics.media` for the computation (exact DTW; upstream's fastdtw cost is
    an upper bound of it). A missing, empty or undecodable file scores 0 (upstream raises)."""
    from guigym.envs.desktop.evaluators.metrics import media

    if not audio_path_1 or not audio_path_2:
        return 0.0
    feats = []
    for path in (audio_path_1, audio_path_2):
        try:
            y = media.load_audio(path)
        except (OSError, ValueError) as e:
            log.info("compare_audios: cannot decode %s: %s", path, e)
            return 0.0
        if y.size == 0:
            return 0.0
        feats.append(media.normalize_rows(media.mfcc(y)).T)
    return 1.0 / (1.0 + media.dtw_cosine(feats[0], feats[1]))


@METRICS.register("compare_videos")
def compare_videos(video_path1: Optional[str], video_path2: Optional[str], max_frames_to_check: int = 100,
                   threshold: int = 5, **options: Any) -> float:
    """vlc.py: read both videos frame by frame (OpenCV) for up to ``max_frames_to_check`` frames;
    a frame pair whose perceptual hashes differ in more than ``threshold`` bits is a mismatch,
    and more than ``threshold`` mismatches scores 0. When a video ends first the score is 1 only
    if both end together. A file OpenCV cannot open scores 0 (upstream's two unreadable files
    score 1). Needs ``opencv-python-headless``."""
    from PIL import Image

    from guigym.envs.desktop.evaluators.metrics import media

    cv2 = require("cv2", "opencv-python-headless", "compare_videos")
    if not video_path1 or not video_path2:
        return 0.0
    cap1, cap2 = cv2.VideoCapture(video_path1), cv2.VideoCapture(video_path2)
    try:
        if not cap1.isOpened() or not cap2.isOpened():
            return 0.0
        mismatches = 0
        for _ in range(int(max_frames_to_check)):
            ok1, frame1 = cap1.read()
            ok2, frame2 = cap2.read()
            if not ok1 or not ok2:
                return float(ok1 == ok2)
            h1 = media.phash(Image.fromarray(cv2.cvtColor(frame1, cv2.COLOR_BGR2RGB)))
            h2 = media.phash(Image.fromarray(cv2.cvtColor(frame2, cv2.COLOR_BGR2RGB)))
            if media.hamming(h1, h2) > threshold:
                mismatches += 1
                if mismatches > threshold:
                    return 0.0
        return 1.0
    finally:
        cap1.release()
        cap2.release()


# --------------------------------------------------------------------------- others.py, basic_os.py


@METRICS.register("check_mp3_meta")
def check_mp3_meta(result: Optional[str], meta: Mapping[str, Mapping[str, Any]], **options: Any) -> float:
    """others.py: for each ``key: {"method", "ref"}`` of ``meta`` the file's ID3 ``key`` (mutagen
    EasyID3: ``title``, ``artist``...; several values joined with ``,``; absent: "") matches the
    rule (``_match_value_to_rule``). A file without an ID3 tag scores 0 (upstream raises).
    Needs ``mutagen``."""
    easyid3 = require("mutagen.easyid3", "mutagen", "check_mp3_meta")
    mutagen = require("mutagen", "mutagen", "check_mp3_meta")
    if not result:
        return 0.0
    try:
        tags = easyid3.EasyID3(result)
    except (mutagen.MutagenError, OSError) as e:
        log.info("check_mp3_meta: no ID3 tag in %s: %s", result, e)
        return 0.0
    for key, rule in meta.items():
        value = tags.get(key, "")
        if isinstance(value, list):
            value = ",".join(value)
        try:
            if not match_value_to_rule(value, rule):
                return 0.0
        except TypeError:
            return 0.0
    return 1.0


@METRICS.register("is_in_vm_clickboard")
def is_in_vm_clickboard(config: Mapping[str, Any], terminal_output: Optional[str], **options: Any) -> float:
    """basic_os.py: ``config["expected"]`` (a string, or a list whose every string must occur) is
    in the clipboard text (the tasks' ``xsel --clipboard --output``). No text scores 0."""
    if terminal_output is None:
        return 0.0
    expected = config["expected"]
    if isinstance(expected, list):
        return float(all(str(e) in terminal_output for e in expected))
    return float(str(expected) in terminal_output)


# --------------------------------------------------------------------------- general.py


@METRICS.register("compare_python_pure_text")
def compare_python_pure_text(py_file_path: Optional[str], gold_file_path: Optional[str], **options: Any) -> float:
    """general.py: the two files are equal once every whitespace character is removed."""
    a, b = _read(py_file_path), _read(gold_file_path)
    if a is None or b is None:
        return 0.0
    return float("".join(a.split()) == "".join(b.split()))


#: sqlite VM steps between progress checks, and how many checks a query may take (~10^9 steps):
#: an agent-made database may hold a view that never ends (a recursive CTE)
_SQLITE_CHECK_EVERY, _SQLITE_MAX_CHECKS = 1000, 1_000_000


@METRICS.register("run_sqlite3")
def run_sqlite3(result: Optional[str], rules: Mapping[str, Any], **options: Any) -> float:
    """general.py: ``float(first column of the first row of rules["sql"] or 0)`` on the database
    file ``result``.

    The database comes from the agent: it is opened read-only and immutable (no journal, no
    writes, no locks), and a query that runs past ~10^9 sqlite VM steps is interrupted. The SQL
    comes from the task file. No row, a non-number, a broken database or an interrupted query
    scores 0 (upstream raises on some of these).
    """
    if not result:
        return 0.0
    uri = f"file:{urllib.parse.quote(result)}?mode=ro&immutable=1"
    checks = [0]

    def progress() -> int:
        checks[0] += 1
        return int(checks[0] > _SQLITE_MAX_CHECKS)

    try:
        conn = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as e:
        log.info("run_sqlite3: cannot open %s: %s", result, e)
        return 0.0
    try:
        conn.set_progress_handler(progress, _SQLITE_CHECK_EVERY)
        row = conn.execute(rules["sql"]).fetchone()
        return float(row[0] or 0) if row else 0.0
    except (sqlite3.Error, TypeError, ValueError) as e:
        log.info("run_sqlite3: query failed on %s: %s", result, e)
        return 0.0
    finally:
        conn.close()


#: fuzzy_place_math's word count (upstream's constant, although its one task asks for 5 addresses)
PLACE_WORDS = 3


@METRICS.register("fuzzy_place_math")
def fuzzy_place_math(result_file_path: Optional[str], rules: Mapping[str, Any], **options: Any) -> float:
    """general.py: split every paragraph of the docx on whitespace; score each word by its best
    ``rapidfuzz.fuzz.ratio / 100`` against ``rules["expected"]``; unless there are exactly
    :data:`PLACE_WORDS` (3) words the score is 0, else their mean.

    As upstream: the only task using it asks for 5 addresses, so an agent that does what it is
    told scores 0; the constant is kept so scores stay comparable with OSWorld's.
    An unreadable docx scores 0."""
    docx = require("docx", "python-docx", "fuzzy_place_math")
    if not result_file_path:
        return 0.0
    try:
        doc = docx.Document(result_file_path)
    except Exception:  # noqa: BLE001 - python-docx raises several types for a broken package
        return 0.0
    words = [w for p in doc.paragraphs for w in p.text.split()]
    if len(words) != PLACE_WORDS:
        return 0.0
    expected = list(rules["expected"])
    return sum(max((ratio(w, e) / 100.0 for e in expected), default=0.0) for w in words) / PLACE_WORDS


@METRICS.register("compare_time_in_speedtest_results")
def compare_time_in_speedtest_results(speedtest_result_path: Optional[str], time_diff: Any, *,
                                      now: Optional[dt.datetime] = None, **options: Any) -> float:
    """general.py: the last 5 characters (``HH:MM``) of the 2nd comma field of the CSV's 2nd line
    are less than ``int(time_diff)`` minutes from ``now`` (default: the local clock). Upstream
    ignores the date; the difference here goes the short way round midnight (upstream: 23:55 vs
    00:05 is 1430 minutes). Anything unparseable scores 0."""
    text = _read(speedtest_result_path)
    if text is None:
        return 0.0
    lines = text.splitlines()
    try:
        stamp = dt.datetime.strptime(lines[1].split(",")[1][-5:], "%H:%M")
        limit = int(time_diff)
    except (IndexError, ValueError, TypeError):
        return 0.0
    clock = now or dt.datetime.now()
    minutes = abs((stamp.hour * 60 + stamp.minute) - (clock.hour * 60 + clock.minute))
    return float(min(minutes, 24 * 60 - minutes) < limit)


# --------------------------------------------------------------------------- vscode.py


def _same_member(z1: zipfile.ZipFile, z2: zipfile.ZipFile, name: str) -> bool:
    """Byte-equal members, streamed (an agent's zip may be large)."""
    if z1.getinfo(name).file_size != z2.getinfo(name).file_size:
        return False
    with z1.open(name) as f1, z2.open(name) as f2:
        while True:
            b1, b2 = f1.read(1 << 20), f2.read(1 << 20)
            if b1 != b2:
                return False
            if not b1:
                return True


def _pdf_member_text(z: zipfile.ZipFile, name: str) -> str:
    import io

    pypdf = require("pypdf", "pypdf", "compare_zip_files")
    try:
        reader = pypdf.PdfReader(io.BytesIO(z.read(name)))
        return "".join(page.extract_text() or "" for page in reader.pages)
    except pypdf.errors.PyPdfError as e:
        raise ValueError(f"{name}: not a readable PDF ({e})") from None


@METRICS.register("compare_zip_files")
def compare_zip_files(actual: Optional[str], expected: str, **options: Any) -> float:
    """vscode.py: both archives hold the same set of names; ``.pdf`` members have texts whose
    ``difflib.SequenceMatcher`` ratio is >= 0.95 (pypdf; upstream PyPDF2), every other member is
    byte-equal. A missing or broken result archive or result PDF scores 0."""
    if not actual:
        return 0.0
    try:
        z1 = zipfile.ZipFile(actual)
    except (OSError, zipfile.BadZipFile):
        return 0.0
    with z1, zipfile.ZipFile(expected) as z2:
        names = set(z1.namelist())
        if names != set(z2.namelist()):
            return 0.0
        for name in sorted(names):
            try:
                if name.lower().endswith(".pdf"):
                    t1, t2 = _pdf_member_text(z1, name), _pdf_member_text(z2, name)
                    if difflib.SequenceMatcher(None, t1, t2).ratio() < 0.95:
                        return 0.0
                elif not _same_member(z1, z2, name):
                    return 0.0
            except (zipfile.BadZipFile, ValueError, OSError) as e:  # pypdf errors are ValueErrors
                log.info("compare_zip_files: cannot read %s: %s", name, e)
                return 0.0
    return 1.0


@METRICS.register("compare_result_files")
def compare_result_files(src_path: Optional[str], tgt_path: Optional[str], **options: Any) -> float:
    """vscode.py: with both texts stripped, when the gold is a number: 1 if the gold text occurs in
    the result (a sentence around the number) or the result is a number within 1e-4 of it; when
    the gold is not a number, or the result is not one: 1 only if the texts are equal."""
    src, tgt = _read(src_path), _read(tgt_path)
    if src is None or tgt is None:
        return 0.0
    src, tgt = src.strip(), tgt.strip()
    try:
        gold = float(tgt)
        if tgt in src:
            return 1.0
        return float(abs(float(src) - gold) < 1e-4)
    except ValueError:
        return float(src == tgt)


@METRICS.register("check_python_file_by_test_suite")
def check_python_file_by_test_suite(actual_files: Any, test_file: Any, **options: Any) -> float:
    """vscode.py imports the task's test file on the evaluating host, and the test imports and runs
    the agent's edited Python files there. guigym never runs agent code on the host, and a metric
    has no way into the desktop (it only gets the fetched local files), so this is not
    implemented."""
    raise NotImplementedError(
        "check_python_file_by_test_suite: upstream imports and runs the agent's Python files on the "
        "evaluating host; guigym runs no agent code on the host and a metric cannot reach the desktop")


# --------------------------------------------------------------------------- table.py


@METRICS.register("compare_conference_city_in_order")
def compare_conference_city_in_order(actual_city_list_path: Optional[str], expected_city: Mapping[str, Any],
                                     **options: Any) -> float:
    """table.py: cells C2:C22 of the active sheet, in order; cell i must contain
    ``expected[i]`` (a string) or one of its strings (a list). An empty or non-text cell, fewer
    expected entries than cells, an expected entry of another type (upstream raises TypeError
    and catches it) or an unreadable workbook scores 0."""
    openpyxl = require("openpyxl", "openpyxl", "compare_conference_city_in_order")
    if not actual_city_list_path:
        return 0.0
    expected = list(expected_city["expected"])
    try:
        sheet = openpyxl.load_workbook(actual_city_list_path).active
    except Exception:  # noqa: BLE001 - openpyxl raises several types for a broken file
        return 0.0
    cells = [c.value for row in sheet["C2:C22"] for c in row]
    if len(expected) < len(cells):
        return 0.0
    for got, want in zip(cells, expected):
        if not isinstance(got, str):
            return 0.0
        choices = [want] if isinstance(want, str) else want
        if not isinstance(choices, list) or not any(isinstance(c, str) and c in got for c in choices):
            return 0.0
    return 1.0


# --------------------------------------------------------------------------- thunderbird.py

#: an mbox envelope line: "From <sender> <ctime date>" (Thunderbird: "From - Mon Jan 29 10:00:00 2024");
#: the clock time keeps a body line like "From now on, ..." of an unescaped .eml from matching
_MBOX_FROM = re.compile(r"^From \S+ .*\b\d\d:\d\d:\d\d\b", re.MULTILINE)


def split_mbox(text: str) -> list[str]:
    """The messages of an mbox text, each without its ``From `` envelope line (sender and a
    ``HH:MM:SS`` time, see :data:`_MBOX_FROM`); text before the
    first envelope line (all of a single ``.eml``) is a message of its own when not blank. Line
    ends become ``\\n``."""
    text = text.replace("\r\n", "\n")
    starts = [m.start() for m in _MBOX_FROM.finditer(text)]
    head = text[:starts[0]] if starts else text
    messages = [head] if head.strip() else []
    for s, e in zip(starts, starts[1:] + [len(text)]):
        messages.append(text[s:e].partition("\n")[2])
    return messages


def _normalise_message(msg: str, ignore_status: bool, ignore_keys: bool) -> str:
    """Drop X-Mozilla-Status/Status2 (``ignore_status``) and X-Mozilla-Keys (``ignore_keys``)
    header lines, then strip."""
    head, sep, body = msg.partition("\n\n")
    lines = head.split("\n")
    if ignore_status:
        lines = [ln for ln in lines if not re.match(r"X-Mozilla-Status\d?:", ln)]
    if ignore_keys:
        lines = [ln for ln in lines if not ln.startswith("X-Mozilla-Keys:")]
    return ("\n".join(lines) + sep + body).strip()


def _folder_messages(path: str, options: Mapping[str, Any]) -> Optional[list[str]]:
    text = _read(path)
    if text is None:
        return None
    out = []
    for msg in split_mbox(text):
        if options.get("remove_deleted", True) and re.search(r"X-Mozilla-Status: 000[89]", msg):
            continue
        out.append(_normalise_message(msg, options.get("ignore_status", False), options.get("ignore_keys", False)))
    if options.get("remove_duplicate", True):
        out = list(set(out))
    return sorted(out)


@METRICS.register("check_thunderbird_folder")
def check_thunderbird_folder(result: Union[str, Sequence[Optional[str]], None],
                             reference: Union[str, Sequence[str]], **options: Any) -> float:
    """thunderbird.py: each result folder file (an mbox, or one ``.eml``) holds the same messages
    as its reference, in any order.

    Options as upstream: ``remove_deleted`` (default True: skip messages whose
    ``X-Mozilla-Status`` is 0008/0009, expunged but still in the file), ``remove_duplicate``
    (default True), ``ignore_status`` / ``ignore_keys`` (default False: drop the
    ``X-Mozilla-Status``/``Status2`` / ``X-Mozilla-Keys`` headers before comparing).

    Divergence, on purpose: upstream splits on ``"FROM - "`` and then skips every non-empty
    chunk (``if mail.strip(): continue``), so it compares empty lists and scores 1 for any two
    readable files. Here the messages are really compared. The ``From `` envelope line is left
    out: Thunderbird stamps it with the time the message was written to the folder. A missing
    result file scores 0.
    """
    if isinstance(reference, (list, tuple)):
        results = list(result) if isinstance(result, (list, tuple)) else [result]
        refs = list(reference)
    else:
        results, refs = [result], [reference]
    if len(results) < len(refs):
        return 0.0
    for pred, gold in zip(results, refs):
        if pred is None:
            return 0.0
        got, want = _folder_messages(pred, options), _folder_messages(gold, options)
        if got is None or want is None or got != want:
            return 0.0
    return 1.0
