"""Gymnasium spaces for GUI observations.

``gymnasium.spaces.Text`` only accepts characters from a fixed charset (alphanumerics by
default), but a11y trees and instructions are arbitrary Unicode. :class:`UnicodeText` accepts any
``str`` up to ``max_length`` characters and plugs into Gymnasium's shared-memory vector env
(UTF-8 bytes in a fixed uint8 buffer), so ``gym.make_vec(..., vectorization_mode="async")``
works with the default ``shared_memory=True``.
"""
from __future__ import annotations

import multiprocessing as mp
from typing import Any, Sequence

import numpy as np
from gymnasium.spaces import Text
from gymnasium.vector.utils import shared_memory as shm


class UnicodeText(Text):
    """A Text space whose members are any ``str`` of at most ``max_length`` characters.

    ``sample()`` still draws from the (alphanumeric) charset, which is enough for env checks.
    """

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, UnicodeText) and other.max_length == self.max_length and other.min_length == self.min_length

    def __hash__(self) -> int:
        return hash(("UnicodeText", self.min_length, self.max_length))

    @property
    def buffer_bytes(self) -> int:
        return 4 * self.max_length + 8  # worst case UTF-8 plus an int64 length prefix


class ActionText(UnicodeText):
    """Every GUIEnv's ``action_space``: any action string of at most ``max_length`` characters
    (the dialects' limit), whose :meth:`sample` is a random *valid* action in the env's dialect
    (a click or tap inside ``screen``, a short typed word, a key, a scroll, ...), a few dozen
    characters, so ``env.step(env.action_space.sample())`` acts instead of costing a step on a
    parse error. ``screen`` (width, height) is the last observation's screenshot size (the env
    sets it at reset; 100x100 before). Seeded like any space (``action_space.seed(s)``)."""

    WORDS = ("hello", "test", "Bob", "42", "yes", "blue")
    KEYS = ("Enter", "Tab", "ArrowDown", "Backspace")

    def __init__(self, max_length: int, dialect: str = "canonical", platform: str = "",
                 screen: tuple[int, int] | None = None, seed: Any = None) -> None:
        super().__init__(max_length=max_length, seed=seed)
        self.dialect, self.platform, self.screen = dialect, platform, screen

    def _candidates(self) -> list[Any]:
        from guigym.core import actions as A

        rng = self.np_random
        w, h = self.screen or (100, 100)
        x, y = int(rng.integers(w)), int(rng.integers(h))
        word, key = str(rng.choice(self.WORDS)), str(rng.choice(self.KEYS))
        dy = int(rng.choice([-100, 100]))
        if self.platform == "android":
            pool = [A.Tap(x=x, y=y), A.Swipe(x1=x, y1=y, x2=int(rng.integers(w)), y2=int(rng.integers(h))),
                    A.Type(text=word), A.Back(), A.Home()]
        else:
            pool = [A.Click(x=x, y=y), A.Type(text=word), A.Press(key=key), A.Scroll(dy=dy)]
        first = int(rng.integers(len(pool)))
        # the drawn one first; the others in order for dialects that cannot print it (e.g.
        # WebArena's has no click at a point), then a wait, which every dialect prints
        return pool[first:] + pool[:first] + [A.Wait(seconds=1.0)]

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is not None or probability is not None:  # Gymnasium's character-level sampling
            return super().sample(mask=mask, probability=probability)
        from guigym.core.dialect import format_action

        for action in self._candidates():
            try:
                return format_action(action, self.dialect)
            except Exception:  # noqa: BLE001 - the dialect has no form for this action: the next
                continue
        return super().sample(mask=(min(self.max_length, 32), None))

    def __repr__(self) -> str:
        return f"ActionText({self.max_length}, dialect={self.dialect!r})"


@shm.create_shared_memory.register(UnicodeText)
def _create(space: UnicodeText, n: int = 1, ctx: Any = mp) -> Any:
    return ctx.Array(np.ctypeslib.as_ctypes_type(np.uint8), n * space.buffer_bytes)


class SharedTexts(Sequence[str]):
    """Live view of the texts in a shared buffer, one per env.

    AsyncVectorEnv reads its observation buffer once at start-up and relies on the result being
    a view (true for numpy arrays); a tuple of decoded strings would stay frozen at its first
    value. This sequence decodes on every access; ``deepcopy`` (what ``copy=True`` does) turns
    it into a plain tuple.
    """

    def __init__(self, space: UnicodeText, shared_memory: Any, n: int) -> None:
        self._buf = np.frombuffer(shared_memory.get_obj(), dtype=np.uint8).reshape(n, space.buffer_bytes)

    def __len__(self) -> int:
        return self._buf.shape[0]

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(len(self))))
        row = self._buf[i]
        length = int(row[:8].view(np.int64)[0])
        return bytes(row[8 : 8 + length]).decode("utf-8")

    def __deepcopy__(self, memo: Any) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: Any) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, (tuple, list, SharedTexts)) else NotImplemented

    def __repr__(self) -> str:
        return repr(tuple(self))


@shm.read_from_shared_memory.register(UnicodeText)
def _read(space: UnicodeText, shared_memory: Any, n: int = 1) -> SharedTexts:
    return SharedTexts(space, shared_memory, n)


@shm.write_to_shared_memory.register(UnicodeText)
def _write(space: UnicodeText, index: int, value: str, shared_memory: Any) -> None:
    data = value.encode("utf-8")
    if len(data) + 8 > space.buffer_bytes:
        raise ValueError(f"text of {len(data)} bytes does not fit the shared buffer of {space}")
    row = np.frombuffer(shared_memory.get_obj(), dtype=np.uint8)[index * space.buffer_bytes : (index + 1) * space.buffer_bytes]
    row[:8] = np.frombuffer(np.int64(len(data)).tobytes(), dtype=np.uint8)
    row[8 : 8 + len(data)] = np.frombuffer(data, dtype=np.uint8)
