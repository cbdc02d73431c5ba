"""Hand-built MiniWoB-style demonstrations for SFT tests that need no browser (the env's a11y
XML format, one-step click-button pages)."""
from __future__ import annotations

from pathlib import Path

from guigym.train.demos import Demo, DemoFile, DemoStep


def page(labels: list[str]) -> str:
    nodes = "".join(f'<button id="{i + 1}" name="{n}" bbox="2,{52 + 21 * i},47,21"/>' for i, n in enumerate(labels))
    return f'<a11y nodes="{len(labels)}" truncated="false">{nodes}</a11y>'


def hand_demos(path: Path, n: int = 3) -> DemoFile:
    """``n`` one-step click-button demonstrations on hand-built pages (the env's a11y format)."""
    f = DemoFile(path)
    words = ["Okay", "Yes", "cancel", "No", "submit", "next"]
    for s in range(n):
        labels = words[s % 6:] + words[:s % 6]
        target = labels[(s * 2) % len(labels)]
        ins = f'Click on the "{target}" button.'
        f.append(Demo("click-button", 2_000_000 + s, ins,
                      [DemoStep({"instruction": ins, "a11y": page(labels)},
                                f'click(element="{labels.index(target) + 1}")', screen=(210, 160))],
                      True, 1.0, "oracle"))
    return f
