"""Moved to :mod:`guigym.core.files` (the trainer's demonstration files use the same atomic writes,
and train sits below eval); re-exported here for eval's modules and older imports."""
from guigym.core.files import (append_jsonl, read_jsonl, repair_jsonl, save_png_atomic,  # noqa: F401
                               write_json_atomic, write_text_atomic)
