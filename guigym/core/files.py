"""Files written so a crash loses nothing: JSON lines appended with one ``write(2)`` + fsync and
read back skipping a torn last line; JSON/text/PNG written to a temp file and renamed over the
target. Used by the eval output (:mod:`guigym.eval.runner`, :mod:`guigym.eval.report`) and the
trainer's demonstration files (:mod:`guigym.train.demos`).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one line with a single write(2) on an O_APPEND fd, then fsync.

    A crash can at worst leave a torn final line, which :func:`read_jsonl` ignores.
    """
    data = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def repair_jsonl(path: Path) -> int:
    """Cut a torn final line (a crash mid-append) so the next append starts on a fresh line.

    Returns the number of bytes removed.
    """
    if not path.exists():
        return 0
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return 0
    keep = data.rfind(b"\n") + 1
    with open(path, "r+b") as f:
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return len(data) - keep


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # torn line from a crash mid-write
    return out


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temp file next to ``path``, then rename it over ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json_atomic(path: Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False))


def save_png_atomic(path: Path, image: np.ndarray) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    Image.fromarray(image).save(tmp, format="PNG", compress_level=1)
    os.replace(tmp, path)
