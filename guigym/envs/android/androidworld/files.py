"""File tasks: Markor notes and the Files app (AndroidWorld ``single/markor.py``, ``single/files.py``,
``common_validators/file_validators.py``).

Markor keeps notes as files in ``/storage/emulated/0/Documents/Markor``; the Files tasks work in the
emulator's shared-storage folders (``/storage/emulated/0/<Folder>``). Existence is AndroidWorld's
recursive ``find`` by name; a created note's text is compared with :func:`validators.fuzzy_match`.
Initialisers empty the folders they use (remove and recreate) and write the files by push.
"""
from __future__ import annotations

import posixpath
import random
from typing import Any, Optional

from guigym.envs.android.androidworld import data as D
from guigym.envs.android.androidworld import validators as V
from guigym.envs.android.androidworld.base import AndroidWorldTask, register
from guigym.envs.android.device import AndroidDevice

MARKOR = V.MARKOR_DATA


def _note_name(rng: random.Random) -> str:
    return D.random_file_stem(rng) + rng.choice([".md", ".txt"])


def _noise_notes(rng: random.Random, n: int, avoid: str = "") -> list[tuple[str, str]]:
    names = [t for t in D.NOTE_TITLES]
    rng.shuffle(names)
    exts = [rng.choice([".md", ".txt"]) for _ in names]
    return [(f"{t}{e}", rng.choice(D.SENTENCES)) for t, e in zip(names, exts) if f"{t}{e}" != avoid][:n]


def _move(device: AndroidDevice, src_dir: str, dst_dir: str, name: str) -> None:
    """What a file manager's move leaves: the file (same content) in ``dst_dir``, gone from ``src_dir``."""
    text = V.read_file(device, posixpath.join(src_dir, name))
    V.write_file(device, posixpath.join(dst_dir, name), text)
    V.remove(device, posixpath.join(src_dir, name))


class _Markor(AndroidWorldTask):
    app_names = ("markor",)

    def initialize_task(self, device: AndroidDevice) -> None:
        V.clear_directory(device, MARKOR)
        for name, text in self.params.get("noise_notes", []):
            V.write_file(device, posixpath.join(MARKOR, name), text)
        super().initialize_task(device)

    def tear_down(self, device: AndroidDevice) -> None:
        V.clear_directory(device, MARKOR)
        super().tear_down(device)


@register
class MarkorCreateNote(_Markor):
    complexity = 1.6
    schema = ("file_name", "text")
    template = "Create a new note in Markor named {file_name} with the following text: {text}"

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        return {"file_name": _note_name(rng), "text": rng.choice(D.SENTENCES)}

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        if not V.exists_under(device, self.params["file_name"], MARKOR):
            return 0.0
        text = V.read_file(device, posixpath.join(MARKOR, self.params["file_name"])).strip()
        return 1.0 if V.fuzzy_match(text, self.params["text"]) else 0.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        V.write_file(device, posixpath.join(MARKOR, self.params["file_name"]), self.params["text"])
        return None


@register
class MarkorCreateFolder(_Markor):
    complexity = 1.0
    schema = ("folder_name",)
    template = "Create a new folder in Markor named {folder_name}."

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        # AndroidWorld names it after the clock ("folder_YYYYmmdd_HHMMSS"); a seeded stamp here
        stamp = f"2023{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}_{rng.randint(0, 235959):06d}"
        return {"folder_name": f"folder_{stamp}", "noise_notes": _noise_notes(rng, rng.randint(2, 5))}

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        return 1.0 if V.exists_under(device, self.params["folder_name"], MARKOR) else 0.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        V.mkdir(device, posixpath.join(MARKOR, self.params["folder_name"]))
        return None


@register
class MarkorDeleteNote(_Markor):
    complexity = 1.0
    schema = ("file_name",)
    template = "Delete the note in Markor named {file_name}."

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        name = _note_name(rng)
        return {"file_name": name, "noise_notes": _noise_notes(rng, rng.randint(2, 5), avoid=name)}

    def initialize_task(self, device: AndroidDevice) -> None:
        super().initialize_task(device)
        V.write_file(device, posixpath.join(MARKOR, self.params["file_name"]), "note to delete")

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        return 0.0 if V.exists_under(device, self.params["file_name"], MARKOR) else 1.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        V.remove(device, posixpath.join(MARKOR, self.params["file_name"]))
        return None


@register
class MarkorDeleteAllNotes(_Markor):
    complexity = 1.4
    template = "Delete all my notes in Markor."

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        # AndroidWorld draws the 2-6 notes in its initialiser; kept in the params here
        return {"noise_notes": _noise_notes(rng, rng.randint(2, 6))}

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        return 0.0 if V.list_tree(device, MARKOR) else 1.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        V.clear_directory(device, MARKOR)
        return None


@register
class MarkorMoveNote(_Markor):
    complexity = 1.4
    schema = ("file_name", "source_folder", "destination_folder")
    template = "In Markor, move the note {file_name} from {source_folder} to {destination_folder}."
    SUBFOLDERS = ("BookNotes", "CodeSnippets", "DailyNotes", "FitnessPlans", "MeetingMinutes", "PersonalJournal",
                  "RecipeCollections", "StudyGuides", "TravelItineraries", "WorkProjects")

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        src = rng.choice(cls.SUBFOLDERS)
        dst = rng.choice([f for f in cls.SUBFOLDERS if f != src])
        name = _note_name(rng)
        noise = [(f"{src}/{n}", t) for n, t in _noise_notes(rng, rng.randint(1, 4), avoid=name)]
        return {"file_name": name, "source_folder": src, "destination_folder": dst, "noise_notes": noise}

    def initialize_task(self, device: AndroidDevice) -> None:
        super().initialize_task(device)
        V.write_file(device, posixpath.join(MARKOR, self.params["source_folder"], self.params["file_name"]),
                     "note to move")
        V.mkdir(device, posixpath.join(MARKOR, self.params["destination_folder"]))

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        src = posixpath.join(MARKOR, self.params["source_folder"])
        dst = posixpath.join(MARKOR, self.params["destination_folder"])
        moved = V.exists_under(device, self.params["file_name"], dst)
        left = V.exists_under(device, self.params["file_name"], src)
        return 1.0 if moved and not left else 0.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        _move(device, posixpath.join(MARKOR, self.params["source_folder"]),
              posixpath.join(MARKOR, self.params["destination_folder"]), self.params["file_name"])
        return None


class _RenameNote(_Markor):
    """An existing note (plus noise notes) to rewrite and rename: the original name must be gone, the
    new name must exist, and its content must be :meth:`expected` (AndroidWorld ``markor.py``)."""

    complexity = 1.2

    @classmethod
    def _names(cls, rng: random.Random) -> dict[str, Any]:
        original = _note_name(rng)
        new = _note_name(rng)
        while new == original:
            new = _note_name(rng)
        return {"original_name": original, "new_name": new,
                "noise_notes": _noise_notes(rng, rng.randint(1, 4), avoid=original)}

    def _original_content(self) -> str:
        raise NotImplementedError

    def content_ok(self, text: str) -> bool:
        raise NotImplementedError

    def new_content(self) -> str:
        raise NotImplementedError

    def initialize_task(self, device: AndroidDevice) -> None:
        super().initialize_task(device)
        V.write_file(device, posixpath.join(MARKOR, self.params["original_name"]), self._original_content())

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        if V.exists_under(device, self.params["original_name"], MARKOR):
            return 0.0
        if not V.exists_under(device, self.params["new_name"], MARKOR):
            return 0.0
        return 1.0 if self.content_ok(V.read_file(device, posixpath.join(MARKOR, self.params["new_name"]))) else 0.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        """What Markor leaves after editing and renaming: the new file with the new text, the old gone."""
        V.write_file(device, posixpath.join(MARKOR, self.params["new_name"]), self.new_content())
        V.remove(device, posixpath.join(MARKOR, self.params["original_name"]))
        return None


@register
class MarkorChangeNoteContent(_RenameNote):
    schema = ("original_name", "new_name", "updated_content")
    template = 'Update the content of {original_name} to "{updated_content}" in Markor and change its name to {new_name}.'

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        return {**cls._names(rng), "updated_content": D.random_string(rng, 20),
                "original_content": D.random_string(rng, 20)}

    def _original_content(self) -> str:
        return self.params["original_content"]

    def content_ok(self, text: str) -> bool:
        return V.fuzzy_match(text.strip(), self.params["updated_content"])

    def new_content(self) -> str:
        return self.params["updated_content"] + "\n"


@register
class MarkorAddNoteHeader(_RenameNote):
    schema = ("original_name", "new_name", "header", "original_content")
    template = ('Update the Markor note {original_name} by adding the following text, along with a new blank line '
                'before the existing content: "{header}", and rename it to {new_name}.')

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        return {**cls._names(rng), "header": D.random_string(rng, 20), "original_content": rng.choice(D.SENTENCES)}

    def _original_content(self) -> str:
        return self.params["original_content"] + "\n"

    def new_content(self) -> str:
        return self.params["header"] + "\n\n" + self.params["original_content"] + "\n"

    def content_ok(self, text: str) -> bool:
        return text == self.new_content()  # exact, as AndroidWorld checks it


@register
class MarkorMergeNotes(_Markor):
    """Three notes merged, in order, into a new one with a blank line between them."""

    complexity = 7.8
    schema = ("file1_name", "file2_name", "file3_name", "new_file_name", "file1_content", "file2_content",
              "file3_content")
    template = ("Merge the contents of Markor notes {file1_name}, {file2_name} and {file3_name} (in the same order) "
                "into a new Markor note named {new_file_name} and save it. Add a new line between the content of "
                "each note.")

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        names: list[str] = []
        while len(names) < 3:
            n = _note_name(rng)
            if n not in names:
                names.append(n)
        p = {f"file{i + 1}_name": n for i, n in enumerate(names)}
        p.update({f"file{i + 1}_content": D.random_string(rng, 20) for i in range(3)})
        p["new_file_name"] = D.random_string(rng, 8)
        return p

    def initialize_task(self, device: AndroidDevice) -> None:
        super().initialize_task(device)
        for i in (1, 2, 3):
            V.write_file(device, posixpath.join(MARKOR, self.params[f"file{i}_name"]),
                         self.params[f"file{i}_content"] + "\n")

    def merged(self) -> str:
        return "\n\n".join(self.params[f"file{i}_content"] for i in (1, 2, 3)) + "\n"

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        if not V.exists_under(device, self.params["new_file_name"], MARKOR):
            return 0.0
        text = V.read_file(device, posixpath.join(MARKOR, self.params["new_file_name"])).strip()
        if not V.fuzzy_match(text, self.merged().strip()):
            return 0.0
        lines = text.split("\n")  # AndroidWorld: exactly note, blank, note, blank, note
        return 1.0 if len(lines) == 5 and not lines[1] and not lines[3] else 0.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        V.write_file(device, posixpath.join(MARKOR, self.params["new_file_name"]), self.merged())
        return None


class _Files(AndroidWorldTask):
    app_names = ("files",)

    def _folders(self) -> list[str]:
        raise NotImplementedError

    def initialize_task(self, device: AndroidDevice) -> None:
        for folder in self._folders():
            V.clear_directory(device, posixpath.join(V.SD, folder))
        for rel, text in self.params.get("noise_files", []):
            V.write_file(device, posixpath.join(V.SD, rel), text)
        super().initialize_task(device)

    def tear_down(self, device: AndroidDevice) -> None:
        for folder in self._folders():
            V.clear_directory(device, posixpath.join(V.SD, folder))
        super().tear_down(device)


def _noise_files(rng: random.Random, folder: str, avoid: str) -> list[tuple[str, str]]:
    names = [n for n in D.STORAGE_DIRECTORIES[folder] if n != avoid]
    k = rng.randint(1, len(names))
    return [(f"{folder}/{n}", f"noise {rng.randint(0, 10**6)}") for n in rng.sample(names, k)]


@register
class FilesDeleteFile(_Files):
    complexity = 2.2
    schema = ("file_name", "subfolder")
    template = ("Delete the file {file_name} from the Android filesystem located in the {subfolder} folder "
                "within the sdk_gphone_x86_64 storage area.")

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        sub = rng.choice(sorted(D.STORAGE_DIRECTORIES))
        ext = posixpath.splitext(D.STORAGE_DIRECTORIES[sub][0])[1]
        name = D.random_file_stem(rng) + ext
        return {"file_name": name, "subfolder": sub, "noise_files": _noise_files(rng, sub, name)}

    def _folders(self) -> list[str]:
        return [self.params["subfolder"]]

    def initialize_task(self, device: AndroidDevice) -> None:
        super().initialize_task(device)
        V.write_file(device, posixpath.join(V.SD, self.params["subfolder"], self.params["file_name"]), "delete me")

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        where = posixpath.join(V.SD, self.params["subfolder"])
        return 0.0 if V.exists_under(device, self.params["file_name"], where) else 1.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        V.remove(device, posixpath.join(V.SD, self.params["subfolder"], self.params["file_name"]))
        return None


@register
class FilesMoveFile(_Files):
    complexity = 2.0
    schema = ("file_name", "source_folder", "destination_folder")
    template = ("Move the file {file_name} from {source_folder} within the sdk_gphone_x86_64 storage area to the "
                "{destination_folder} within the same sdk_gphone_x86_64 storage area in the Android filesystem.")

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        src = rng.choice(sorted(D.STORAGE_DIRECTORIES))
        dst = rng.choice([f for f in sorted(D.STORAGE_DIRECTORIES) if f != src])
        name = rng.choice(D.STORAGE_DIRECTORIES[dst])  # a file of the destination's kind, as AndroidWorld
        return {"file_name": name, "source_folder": src, "destination_folder": dst,
                "noise_files": _noise_files(rng, src, name)}

    def _folders(self) -> list[str]:
        return [self.params["source_folder"], self.params["destination_folder"]]

    def initialize_task(self, device: AndroidDevice) -> None:
        super().initialize_task(device)
        V.write_file(device, posixpath.join(V.SD, self.params["source_folder"], self.params["file_name"]), "move me")

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        src = posixpath.join(V.SD, self.params["source_folder"])
        dst = posixpath.join(V.SD, self.params["destination_folder"])
        ok = V.exists_under(device, self.params["file_name"], dst) and not V.exists_under(
            device, self.params["file_name"], src)
        return 1.0 if ok else 0.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        _move(device, posixpath.join(V.SD, self.params["source_folder"]),
              posixpath.join(V.SD, self.params["destination_folder"]), self.params["file_name"])
        return None
