"""Statistics shared by the trainer's before/after evaluation (:mod:`guigym.train.loop`) and
DART's decoupled run (:mod:`guigym.train.decoupled.run`). Pure Python; imports nothing from guigym.
"""
from __future__ import annotations

import math


def two_proportion_z(s1: int, n1: int, s2: int, n2: int) -> dict[str, float]:
    """Pooled two-proportion z-test of H0: p1 == p2 against p2 > p1 (one-sided) and p2 != p1.

    ``z = (p2 - p1) / sqrt(p (1 - p) (1/n1 + 1/n2))`` with ``p = (s1 + s2) / (n1 + n2)``;
    ``p_one_sided = P(Z >= z)``, ``p_two_sided = P(|Z| >= |z|)`` under N(0, 1).
    """
    if n1 <= 0 or n2 <= 0:
        raise ValueError("both samples need at least one episode")
    p1, p2 = s1 / n1, s2 / n2
    p = (s1 + s2) / (n1 + n2)
    se = math.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))
    if se == 0:
        z = 0.0 if p1 == p2 else math.copysign(math.inf, p2 - p1)
    else:
        z = (p2 - p1) / se
    return {"p1": p1, "p2": p2, "z": z, "p_one_sided": 0.5 * math.erfc(z / math.sqrt(2)),
            "p_two_sided": math.erfc(abs(z) / math.sqrt(2))}
