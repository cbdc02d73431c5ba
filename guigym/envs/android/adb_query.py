"""AndroidLab's ``adb_query`` strings, run without a shell on either side of adb.

AndroidLab's task YAMLs name a command whose output judges some tasks, e.g.
``adb shell settings list system | grep volume_ring_speaker`` or
``adb shell 'getprop persist.sys.timezone'``. AndroidLab hands the whole string to a host shell;
here it is parsed (the task file is trusted data, but nothing is exec'd anyway) into

* ``argv``: the device command after ``adb shell``, split with POSIX rules (a single quoted
  command is split once more), run through :meth:`AndroidDevice.shell`, which quotes every argument;
* ``grep``: the pattern of an optional ``| grep PATTERN``, applied on the host as a fixed-string
  line filter (grep's behaviour for the plain words the released tasks use).

Any other shape (a second pipe, redirections, ``;``) raises :class:`TaskSpecError` naming the query.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Optional

from guigym.core.errors import TaskSpecError
from guigym.envs.android.device import AndroidDevice

_FORBIDDEN = (";", "&", ">", "<", "`", "$(")


@dataclass(frozen=True)
class AdbQuery:
    """One parsed ``adb_query``: the device ``argv`` and an optional host-side ``grep`` pattern."""

    argv: tuple[str, ...]
    grep: Optional[str] = None

    def run(self, device: AndroidDevice) -> str:
        """The command's output on ``device``, filtered like ``| grep`` would (lines kept with their newline)."""
        out = device.shell(list(self.argv))
        if self.grep is None:
            return out
        return "".join(line for line in out.splitlines(keepends=True) if self.grep in line)


def parse_adb_query(query: str) -> AdbQuery:
    """``"adb shell CMD [| grep PATTERN]"`` -> :class:`AdbQuery`; TaskSpecError for anything else."""
    def bad(why: str) -> TaskSpecError:
        return TaskSpecError(f"adb_query {query!r}: {why}")

    if not isinstance(query, str) or not query.strip():
        raise bad("must be a non-empty string")
    if any(tok in query for tok in _FORBIDDEN):
        raise bad(f"only 'adb shell CMD [| grep PATTERN]' is supported (found one of {' '.join(_FORBIDDEN)})")
    parts = query.split("|")
    if len(parts) > 2:
        raise bad("at most one '| grep PATTERN' is supported")
    try:
        head = shlex.split(parts[0])
        tail = shlex.split(parts[1]) if len(parts) == 2 else None
    except ValueError as exc:
        raise bad(f"cannot be split: {exc}") from None
    if head[:2] != ["adb", "shell"] or len(head) < 3:
        raise bad("must start with 'adb shell' followed by a command")
    argv = head[2:]
    if len(argv) == 1 and " " in argv[0]:  # adb shell 'getprop persist.sys.timezone'
        argv = shlex.split(argv[0])
    grep: Optional[str] = None
    if tail is not None:
        if len(tail) != 2 or tail[0] != "grep":
            raise bad("the pipe must be '| grep PATTERN' with one pattern and no options")
        grep = tail[1]
    return AdbQuery(tuple(argv), grep)
