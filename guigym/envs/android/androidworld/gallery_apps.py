"""Pictures in Simple Gallery Pro (AndroidWorld ``single/expense.py`` ``ExpenseAddMultipleFromGallery``,
``single/recipe.py`` ``RecipeAddMultipleRecipesFromImage``, ``single/simple_gallery_pro.py``
``SaveCopyOfReceiptTaskEval``, re-written).

SaveCopyOfReceiptTaskEval: a receipt picture ``receipt_<name>.jpg`` in ``DCIM``; a file of that
name must exist under ``Download`` (AndroidWorld's check: existence by name).

The rows to add are drawn on a JPEG in the gallery folder (``/sdcard/DCIM``, AndroidWorld's
``GALLERY_DATA``), one row per paragraph wrapped at 60 characters as AndroidWorld's ``text_block``
form; the app's table starts with the noise rows, and the task is judged as the other add tasks:
exactly the pictured rows added, the old ones intact (:func:`validators.rows_added_intact`). The
expense task also leaves ten older pictures of the noise rows (``old_expenses_<i>.jpg``) beside it.
"""
from __future__ import annotations

import io
import os
import posixpath
import random
import tempfile
import textwrap
from typing import Any, Optional, Sequence

from guigym.envs.android.androidworld import validators as V
from guigym.envs.android.androidworld import data as D
from guigym.envs.android.androidworld.base import AndroidWorldTask, register
from guigym.envs.android.androidworld.sqlite_apps import NOISE, ROWS, RecipeAddSingleRecipe, _ExpenseAdd
from guigym.envs.android.device import AndroidDevice

GALLERY = f"{V.SD}/DCIM"
DOWNLOAD = f"{V.SD}/Download"
WRAP = 60  # AndroidWorld's wrap width for text drawn on a picture


def text_block(rows: Sequence[object]) -> str:
    """Each row's ``describe()`` wrapped at :data:`WRAP` characters, rows separated by a blank line."""
    return "\n\n".join("\n".join(textwrap.wrap(r.describe(), WRAP)) for r in rows)  # type: ignore[attr-defined]


def text_jpeg(text: str) -> bytes:
    """A white JPEG with ``text`` drawn in black, one line per line of ``text`` (Pillow's default font)."""
    from PIL import Image, ImageDraw

    lines = text.splitlines() or [""]
    img = Image.new("RGB", (20 + 8 * max(len(ln) for ln in lines), 20 + 16 * len(lines)), "white")
    draw = ImageDraw.Draw(img)
    for i, line in enumerate(lines):
        draw.text((10, 10 + 16 * i), line, fill="black")
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def write_picture(device: AndroidDevice, path: str, text: str) -> None:
    """``text`` drawn on a JPEG at ``path`` on the device (pushed from a host temp file)."""
    V.mkdir(device, posixpath.dirname(path))
    with tempfile.TemporaryDirectory(prefix="guigym-aw-") as tmp:
        local = os.path.join(tmp, posixpath.basename(path))
        with open(local, "wb") as f:
            f.write(text_jpeg(text))
        device.push(local, path)


class _RowsFromPicture:
    """The add task's rows pictured in the gallery instead of written in the goal: the goal is the
    template verbatim, setup draws the rows on ``picture`` (plus ``old_pictures`` pictures of the
    noise rows) and tear-down empties the gallery. Mixed in before the table's add task."""

    picture = ""
    old_pictures = 0
    template = ""
    params: dict[str, Any]

    @property
    def goal(self) -> str:
        return self.template

    def initialize_task(self, device: AndroidDevice) -> None:
        super().initialize_task(device)  # type: ignore[misc]
        V.clear_directory(device, GALLERY)
        write_picture(device, f"{GALLERY}/{self.picture}", text_block(self.params[ROWS]))
        stem, ext = posixpath.splitext(self.picture)
        for i in range(self.old_pictures):
            write_picture(device, f"{GALLERY}/old_{stem}_{i}{ext}", text_block(self.params[NOISE]))

    def tear_down(self, device: AndroidDevice) -> None:
        try:
            V.clear_directory(device, GALLERY)
        finally:
            super().tear_down(device)  # type: ignore[misc]


@register
class ExpenseAddMultipleFromGallery(_RowsFromPicture, _ExpenseAdd):
    app_names = ("pro expense", "simple gallery pro")
    complexity = 6.0
    n_rows = 3
    n_noise = 10
    picture = "expenses.jpg"
    old_pictures = 10
    template = "Add the expenses from expenses.jpg in Simple Gallery Pro to pro expense."


@register
class RecipeAddMultipleRecipesFromImage(_RowsFromPicture, RecipeAddSingleRecipe):
    app_names = ("broccoli app", "simple gallery pro")
    complexity = 6.0
    n_rows = 3
    n_noise = 10
    picture = "recipes.jpg"
    template = "Add the recipes from recipes.jpg in Simple Gallery Pro to the Broccoli recipe app."


def receipt_lines(rng: random.Random) -> list[str]:
    """A shop receipt: a date, three to five items with prices, and their total."""
    items = [(rng.choice(D.NOUNS).title(), rng.randint(100, 5000)) for _ in range(rng.randint(3, 5))]
    return ([f"Date: 2023-{rng.randint(1, 10):02d}-{rng.randint(1, 28):02d}"]
            + [f"{name}  ${cents / 100:.2f}" for name, cents in items]
            + [f"Total  ${sum(c for _, c in items) / 100:.2f}"])


@register
class SaveCopyOfReceiptTaskEval(AndroidWorldTask):
    app_names = ("simple gallery pro",)
    complexity = 1.0
    schema = ("file_name",)
    template = "In Simple Gallery Pro, copy {file_name} in DCIM and save a copy with the same name in Download"

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        return {"file_name": f"receipt_{D.random_file_stem(rng)}.jpg", "receipt": receipt_lines(rng)}

    def initialize_task(self, device: AndroidDevice) -> None:
        V.clear_directory(device, GALLERY)
        V.clear_directory(device, DOWNLOAD)
        write_picture(device, posixpath.join(GALLERY, self.params["file_name"]), "\n".join(self.params["receipt"]))
        super().initialize_task(device)

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        return 1.0 if V.exists_under(device, self.params["file_name"], DOWNLOAD) else 0.0

    def tear_down(self, device: AndroidDevice) -> None:
        V.clear_directory(device, GALLERY)
        V.clear_directory(device, DOWNLOAD)
        super().tear_down(device)

    def reference(self, device: AndroidDevice) -> Optional[str]:
        write_picture(device, posixpath.join(DOWNLOAD, self.params["file_name"]), "\n".join(self.params["receipt"]))
        return None
