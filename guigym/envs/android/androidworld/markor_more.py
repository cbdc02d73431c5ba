"""Markor editing and the Markor + SMS composite (AndroidWorld ``single/markor.py`` MarkorEditNote,
``composite/markor_sms.py``).

* MarkorEditNote: a note (among noise notes) gets a line on top, a line at the bottom, or its text
  replaced by three lines; the file's text (trimmed) must fuzzy-match what that edit gives.
* MarkorCreateNoteAndSms: MarkorCreateNote and SimpleSmsSend of the note's text to a number, half a
  point each.
"""
from __future__ import annotations

import posixpath
import random
from typing import Any, Optional

from guigym.envs.android.androidworld import data as D
from guigym.envs.android.androidworld import validators as V
from guigym.envs.android.androidworld.base import AndroidWorldTask, register
from guigym.envs.android.androidworld.files import MARKOR, MarkorCreateNote, _Markor, _noise_notes
from guigym.envs.android.androidworld.messaging import SimpleSmsSend
from guigym.envs.android.device import AndroidDevice

_EDITS = {"header": "Edit {file_name} in Markor. Add to the top of the note {header}",
          "footer": "Edit {file_name} in Markor. Add to the bottom of the note {footer}",
          "replace": "Edit {file_name} in Markor. Replace the text with {replace_text}"}


@register
class MarkorEditNote(_Markor):
    complexity = 1.2
    schema = ("file_name", "edit_type", "original_content")
    template = _EDITS["header"]

    @property
    def goal(self) -> str:
        return _EDITS[self.params["edit_type"]].format(**self.params)

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        name = f"note_{D.random_string(rng, 5)}{rng.choice(['.md', '.txt'])}"
        kind = rng.choice(sorted(_EDITS))
        p: dict[str, Any] = {"file_name": name, "edit_type": kind, "original_content": rng.choice(D.SENTENCES),
                             "noise_notes": _noise_notes(rng, rng.randint(1, 4), avoid=name)}
        if kind == "replace":
            p["replace_text"] = "\n".join(rng.sample(D.SENTENCES, 3))
        else:
            p[kind] = rng.choice([s for s in D.SENTENCES if s != p["original_content"]])
        return p

    def expected(self) -> str:
        p = self.params
        return {"header": f"{p.get('header')}\n{p['original_content']}",
                "footer": f"{p['original_content']}\n{p.get('footer')}",
                "replace": p.get("replace_text", "")}[p["edit_type"]]

    def initialize_task(self, device: AndroidDevice) -> None:
        super().initialize_task(device)
        V.write_file(device, posixpath.join(MARKOR, self.params["file_name"]), self.params["original_content"])

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        if not V.exists_under(device, self.params["file_name"], MARKOR):
            return 0.0
        text = V.read_file(device, posixpath.join(MARKOR, self.params["file_name"])).strip()
        return 1.0 if V.fuzzy_match(text, self.expected()) else 0.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        V.write_file(device, posixpath.join(MARKOR, self.params["file_name"]), self.expected() + "\n")
        return None


@register
class MarkorCreateNoteAndSms(AndroidWorldTask):
    app_names = ("markor", "simple sms messenger")
    complexity = 1.8
    schema = ("file_name", "text", "number")
    template = ("Create a new note in Markor named {file_name} with the following text: {text}. Share the entire "
                "content of the note with the phone number {number} via SMS using Simple SMS Messenger")

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        note = MarkorCreateNote._random_params(rng)
        return {**note, "number": SimpleSmsSend._random_params(rng)["number"]}

    def _parts(self) -> tuple[MarkorCreateNote, SimpleSmsSend]:
        p = self.params
        return (MarkorCreateNote({"file_name": p["file_name"], "text": p["text"]}),
                SimpleSmsSend({"number": p["number"], "message": p["text"]}))

    def initialize_task(self, device: AndroidDevice) -> None:
        self.parts = self._parts()
        for part in self.parts:
            part.initialize_task(device)
        super().initialize_task(device)

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        return sum(part.is_successful(device) for part in self.parts) / 2.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        for part in self.parts:  # the note, then the SMS sent from the app (left in front)
            part.reference(device)
        return None

    def tear_down(self, device: AndroidDevice) -> None:
        try:
            for part in self.parts:
                part.tear_down(device)
        finally:
            super().tear_down(device)
