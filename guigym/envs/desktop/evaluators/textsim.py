"""String similarity with rapidfuzz's numbers, without the rapidfuzz dependency.

OSWorld's metrics (``general.py`` ``fuzzy_match``, ``docs.py`` ``compare_docx_files``, ``table.py``
``sheet_fuzzy``) score with ``rapidfuzz.fuzz.ratio``: the normalised Indel similarity,
``100 * 2 * LCS(a, b) / (len(a) + len(b))``, 100 for two empty strings, no preprocessing.
The LCS length is computed with the bit-parallel algorithm of Hyyrö (2004), which keeps long
documents fast in pure Python.
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence


def lcs_length(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """Length of the longest common subsequence of ``a`` and ``b``."""
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return 0
    # bit i of masks[c] is set when b[i] == c; b is the shorter sequence
    masks: dict[Hashable, int] = {}
    for i, item in enumerate(b):
        masks[item] = masks.get(item, 0) | (1 << i)
    full = (1 << len(b)) - 1
    v = full
    for item in a:
        m = masks.get(item)
        if m is None:
            continue
        u = v & m
        v = ((v + u) | (v - u)) & full
    return len(b) - bin(v).count("1")


def ratio(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """``rapidfuzz.fuzz.ratio(a, b)``: similarity in [0, 100]; None on either side gives 0."""
    if a is None or b is None:
        return 0.0
    total = len(a) + len(b)
    if total == 0:
        return 100.0
    return 100.0 * 2 * lcs_length(a, b) / total
