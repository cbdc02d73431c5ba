"""Apps judged on the files they save: Camera, Simple Draw Pro, Audio Recorder (AndroidWorld
``single/camera.py``, ``single/simple_draw_pro.py``, ``single/audio_recorder.py``, re-written).

* Camera: photos land in ``/sdcard/Pictures``, videos in ``/sdcard/Movies`` (AndroidWorld's
  ``PHOTOS_DATA`` / ``VIDEOS_DATA``); both folders are emptied at the start and the end, and the
  task succeeds when exactly one new name appeared in its folder (AndroidWorld compares the folder's
  listing before and after).
* Simple Draw Pro: the drawing, named as asked, exists under ``Pictures`` (AndroidWorld's
  ``CreateFile`` folder; existence only, a drawing has no text to compare).
* Audio Recorder: ``<name>.m4a`` exists under the app's recordings folder
  (``Android/data/com.dimowner.audiorecorder/files/Music/records``); an earlier file of that name
  is removed first.
"""
from __future__ import annotations

import posixpath
import random
from typing import Any, Optional

from guigym.envs.android.androidworld import data as D
from guigym.envs.android.androidworld import validators as V
from guigym.envs.android.androidworld.base import AndroidWorldTask, register
from guigym.envs.android.device import AndroidDevice

PHOTOS = f"{V.SD}/Pictures"
VIDEOS = f"{V.SD}/Movies"
RECORDINGS = f"{V.SD}/Android/data/com.dimowner.audiorecorder/files/Music/records"
#: AndroidWorld's name stems for drawings and recordings
DRAWING_WORDS = ("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit")
DRAWING_EXTENSIONS = (".png", ".svg", ".jpg")
RECORDING_WORDS = ("interview", "meeting", "lecture", "session", "note", "conference", "webinar", "workshop",
                   "seminar", "briefing", "discussion", "talk", "presentation", "training", "guidance", "memo",
                   "narration", "storytelling", "journal", "diary", "debate", "symposium", "roundtable",
                   "consultation", "review")


class _Camera(AndroidWorldTask):
    """One new file in :attr:`folder` (the only one the camera writes this kind to)."""

    app_names = ("camera",)
    complexity = 1.0
    folder = PHOTOS
    suffix = ".jpg"  # what the reference end state writes

    def initialize_task(self, device: AndroidDevice) -> None:
        V.clear_directory(device, PHOTOS)
        V.clear_directory(device, VIDEOS)
        self.before = set(V.list_files(device, self.folder))
        super().initialize_task(device)

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        return 1.0 if len(set(V.list_files(device, self.folder)) - self.before) == 1 else 0.0

    def tear_down(self, device: AndroidDevice) -> None:
        V.clear_directory(device, PHOTOS)
        V.clear_directory(device, VIDEOS)
        super().tear_down(device)

    def reference(self, device: AndroidDevice) -> Optional[str]:
        V.write_file(device, posixpath.join(self.folder, f"IMG_20231015_153400{self.suffix}"), "camera output")
        return None


@register
class CameraTakePhoto(_Camera):
    template = "Take one photo."


@register
class CameraTakeVideo(_Camera):
    template = "Take one video."
    folder = VIDEOS
    suffix = ".mp4"


@register
class SimpleDrawProCreateDrawing(AndroidWorldTask):
    app_names = ("simple draw pro",)
    complexity = 1.0
    schema = ("file_name",)
    template = ("Create a new drawing in Simple Draw Pro. Name it {file_name}. Save it in the Pictures folder "
                "within the sdk_gphone_x86_64 storage area.")

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        stem = f"{rng.choice(DRAWING_WORDS)}_{D.random_file_stem(rng)}"
        return {"file_name": stem + rng.choice(DRAWING_EXTENSIONS)}

    def initialize_task(self, device: AndroidDevice) -> None:
        V.clear_directory(device, PHOTOS)
        super().initialize_task(device)

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        return 1.0 if V.exists_under(device, self.params["file_name"], PHOTOS) else 0.0

    def tear_down(self, device: AndroidDevice) -> None:
        V.clear_directory(device, PHOTOS)
        super().tear_down(device)

    def reference(self, device: AndroidDevice) -> Optional[str]:
        V.write_file(device, posixpath.join(PHOTOS, self.params["file_name"]), "drawing")
        return None


@register
class AudioRecorderRecordAudioWithFileName(AndroidWorldTask):
    app_names = ("audio recorder",)
    complexity = 2.0
    schema = ("file_name",)
    template = 'Record an audio clip and save it with name "{file_name}" using Audio Recorder app.'

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        # AndroidWorld: a word plus a modifier, without the extension the app adds
        return {"file_name": f"{rng.choice(RECORDING_WORDS)}_{D.random_file_stem(rng)}"}

    def _path(self) -> str:
        return posixpath.join(RECORDINGS, self.params["file_name"] + ".m4a")

    def initialize_task(self, device: AndroidDevice) -> None:
        V.mkdir(device, RECORDINGS)
        V.remove(device, self._path())
        super().initialize_task(device)

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        return 1.0 if V.exists_under(device, self.params["file_name"] + ".m4a", RECORDINGS) else 0.0

    def tear_down(self, device: AndroidDevice) -> None:
        V.remove(device, self._path())
        super().tear_down(device)

    def reference(self, device: AndroidDevice) -> Optional[str]:
        V.write_file(device, self._path(), "m4a audio")
        return None
