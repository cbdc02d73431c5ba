"""OSWorld's VLC metrics (``desktop_env/evaluators/metrics/vlc.py``): vlcrc settings, the
playing state, window size, and audio/video comparison (:mod:`.media` fingerprints).

VLC settings are read from ``vlcrc`` (``key=value`` lines; VLC writes a default as a commented
``#key=value`` line, which upstream reads too; the last line for a key wins). A missing or
unreadable agent file scores 0 where upstream would raise. Optional libraries (scipy, soundfile,
opencv) raise :class:`~guigym.envs.desktop.evaluators.base.MetricDependencyError` naming the package.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any, Optional

from guigym.envs.desktop.evaluators.base import METRICS, require
from guigym.envs.desktop.evaluators.metrics.utils import read_text as _read

log = logging.getLogger(__name__)

__all__ = ["vlcrc_value"]


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


@METRICS.register("is_vlc_playing")
def is_vlc_playing(actual_status_path: Optional[str], rule: Mapping[str, Any], **options: Any) -> float:
    """vlc.py ``is_vlc_playing`` on VLC's ``status.xml`` (the ``vlc_playing_info`` getter): 1 when
    ``<state>`` is ``playing`` and the meta ``filename`` (``rule["type"] == "file_name"``) or
    ``url`` (``"url"``) info ends with ``rule["file_name"]`` / ``rule["url"]``. No file, another
    state, or unparseable XML: 0."""
    import xml.etree.ElementTree as ET

    if not actual_status_path:
        return 0.0
    try:
        with open(actual_status_path, "rb") as f:
            tree = ET.fromstring(f.read())
    except (OSError, ET.ParseError):
        return 0.0
    if (tree.findtext("state") or "").strip() != "playing":
        return 0.0
    kind = rule.get("type")
    if kind not in ("file_name", "url"):
        log.warning("is_vlc_playing: unknown rule type %r", kind)
        return 0.0
    key = "filename" if kind == "file_name" else "url"
    info = tree.findtext(f'information/category[@name="meta"]/info[@name="{key}"]')
    return float(bool(info) and info.endswith(rule[kind]))
