"""The interface every Android device backend offers to envs, tasks and validators.

``AdbDevice`` (``guigym.envs.android.controller``, over adbutils and the real adb server) is the
implementation; tests run it against a real device (``GUIGYM_ADB_SERIAL``) or against the named
stand-in device (``guigym.envs.android.standin``), which speaks the device side of the adb
protocol. Task code (AndroidWorld-style initialisers and validators, AndroidLab ``adb_query``)
is written against this Protocol only, so it never builds shell strings itself.

Coordinates are screen pixels of the device's current orientation; durations are milliseconds.
"""
from __future__ import annotations

from typing import Optional, Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class AndroidDevice(Protocol):
    """One Android device (phone, emulator or stand-in) reached over adb."""

    serial: str

    # -- observation ------------------------------------------------------------------------------
    def screenshot(self) -> np.ndarray:
        """The screen as uint8 RGB, shape (H, W, 3) (``screencap -p`` decoded)."""

    def ui_xml(self) -> str:
        """The current ``uiautomator dump`` XML text; EnvInfraError when the dump fails after retries."""

    def screen_size(self) -> tuple[int, int]:
        """(width, height) in pixels (``wm size``, the override when one is set)."""

    # -- input -------------------------------------------------------------------------------------
    def tap(self, x: int, y: int) -> None: ...

    def swipe(self, x1: int, y1: int, x2: int, y2: int, duration_ms: int = 300) -> None: ...

    def long_press(self, x: int, y: int, duration_ms: int = 1000) -> None:
        """A zero-distance swipe held for ``duration_ms``."""

    def input_text(self, text: str) -> None:
        """Type ``text`` (spaces and non-ASCII included) into the focused field."""

    def keyevent(self, key: str | int) -> None:
        """``input keyevent`` with a KEYCODE_* name or number (e.g. "KEYCODE_HOME", 4)."""

    def home(self) -> None: ...

    def back(self) -> None: ...

    def enter(self) -> None: ...

    def launch_app(self, name: str) -> None:
        """Start an app by its human name through the package map (or by package name)."""

    # -- state -------------------------------------------------------------------------------------
    def shell(self, argv: Sequence[str], timeout_s: float = 20.0) -> str:
        """Run ``argv`` on the device, each element quoted; returns stdout (text)."""

    def settings_get(self, namespace: str, key: str) -> Optional[str]:
        """``settings get <system|secure|global> key``; None for Android's "null"."""

    def settings_put(self, namespace: str, key: str, value: str) -> None: ...

    def content_query(self, uri: str, projection: Optional[Sequence[str]] = None,
                      where: Optional[str] = None) -> list[dict[str, str]]:
        """``content query --uri ...`` parsed into one dict per ``Row:`` line."""

    def push(self, local_path: str, device_path: str) -> None: ...

    def pull(self, device_path: str, local_path: str) -> None: ...

    def set_time(self, epoch_s: float) -> None:
        """Set the device clock (needs root on real devices; emulators allow it)."""
