"""System tasks judged on settings and the foreground app (AndroidWorld ``task_evals/single/system.py``
and ``composite/system.py``): Wi-Fi, Bluetooth, brightness, open an app, and two composites.

Checks, as AndroidWorld: ``settings get global wifi_on`` in {1, 2} is on (2 = on while airplane mode
is on), 0 is off; ``global bluetooth_on`` 1/0; ``system screen_brightness`` 255 is max, 1 is min; the
open-app check compares the resumed activity's package. Initialisers: ``svc wifi|bluetooth
enable|disable`` and ``settings put system screen_brightness``. Composites give half credit per part.
"""
from __future__ import annotations

import random
from typing import Any, ClassVar, Optional

from guigym.envs.android.androidworld import validators as V
from guigym.envs.android.androidworld.base import AndroidWorldTask, register
from guigym.envs.android.device import AndroidDevice

#: app name -> package, as AndroidWorld's OpenAppTaskEval (emulator with Google apps)
OPEN_APP_PACKAGES: dict[str, str] = {
    "camera": "com.android.camera2",
    "clock": "com.google.android.deskclock",
    "contacts": "com.google.android.contacts",
    "settings": "com.android.settings",
    "dialer": "com.google.android.dialer",
}


class _Toggle(AndroidWorldTask):
    """A setting that must end in ``target`` (``params[param]``), starting from ``initial``."""

    app_names = ("settings",)
    complexity = 1.0
    param: ClassVar[str] = ""
    target: ClassVar[str] = ""
    initial: ClassVar[str] = ""

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        return {cls.param: cls.target}

    @classmethod
    def start_is_goal(cls) -> bool:
        return cls.initial == cls.target

    def _set(self, device: AndroidDevice, value: str) -> None:
        raise NotImplementedError

    def _score(self, device: AndroidDevice) -> float:
        raise NotImplementedError

    def initialize_task(self, device: AndroidDevice) -> None:
        self._set(device, self.initial)
        super().initialize_task(device)

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        return self._score(device)

    def reference(self, device: AndroidDevice) -> Optional[str]:
        self._set(device, self.params[self.param])  # what the settings toggle / slider stores
        return None


class _Wifi(_Toggle):
    template = "Turn wifi {on_or_off}."
    schema = ("on_or_off",)
    param = "on_or_off"

    def _set(self, device: AndroidDevice, value: str) -> None:
        V.toggle_service(device, "wifi", value == "on")

    def _score(self, device: AndroidDevice) -> float:
        state = (device.settings_get("global", "wifi_on") or "").strip()
        on = state in ("1", "2")
        return 1.0 if (on if self.params["on_or_off"] == "on" else state == "0") else 0.0


@register
class SystemWifiTurnOn(_Wifi):
    target, initial = "on", "off"


@register
class SystemWifiTurnOff(_Wifi):
    target, initial = "off", "on"


@register
class SystemWifiTurnOnVerify(_Wifi):
    target, initial = "on", "on"


@register
class SystemWifiTurnOffVerify(_Wifi):
    target, initial = "off", "off"


class _Bluetooth(_Toggle):
    template = "Turn bluetooth {on_or_off}."
    schema = ("on_or_off",)
    param = "on_or_off"

    def _set(self, device: AndroidDevice, value: str) -> None:
        V.toggle_service(device, "bluetooth", value == "on")

    def _score(self, device: AndroidDevice) -> float:
        state = (device.settings_get("global", "bluetooth_on") or "").strip()
        return 1.0 if state == ("1" if self.params["on_or_off"] == "on" else "0") else 0.0


@register
class SystemBluetoothTurnOn(_Bluetooth):
    target, initial = "on", "off"


@register
class SystemBluetoothTurnOff(_Bluetooth):
    target, initial = "off", "on"


@register
class SystemBluetoothTurnOnVerify(_Bluetooth):
    target, initial = "on", "on"


@register
class SystemBluetoothTurnOffVerify(_Bluetooth):
    target, initial = "off", "off"


BRIGHTNESS = {"max": "255", "min": "1"}


class _Brightness(_Toggle):
    template = "Turn brightness to the {max_or_min} value."
    schema = ("max_or_min",)
    param = "max_or_min"

    def _set(self, device: AndroidDevice, value: str) -> None:
        device.settings_put("system", "screen_brightness", BRIGHTNESS[value])

    def _score(self, device: AndroidDevice) -> float:
        level = V.setting_int(device, "system", "screen_brightness")
        return 1.0 if level == int(BRIGHTNESS[self.params["max_or_min"]]) else 0.0


@register
class SystemBrightnessMax(_Brightness):
    target, initial = "max", "min"


@register
class SystemBrightnessMin(_Brightness):
    target, initial = "min", "max"


@register
class SystemBrightnessMaxVerify(_Brightness):
    target, initial = "max", "max"


@register
class SystemBrightnessMinVerify(_Brightness):
    target, initial = "min", "min"


@register
class OpenAppTaskEval(AndroidWorldTask):
    """Open one of five apps; judged on the resumed activity's package."""

    app_names = tuple(OPEN_APP_PACKAGES)
    complexity = 1.0
    schema = ("app_name",)
    template = ("Open the {app_name} app. Clear any pop-ups that may appear by granting all permissions "
                "that are required.")

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        return {"app_name": rng.choice(sorted(OPEN_APP_PACKAGES))}

    def initialize_task(self, device: AndroidDevice) -> None:
        device.home()
        super().initialize_task(device)

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        return 1.0 if V.foreground_package(device) == OPEN_APP_PACKAGES[self.params["app_name"]] else 0.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        device.launch_app(OPEN_APP_PACKAGES[self.params["app_name"]])
        return None


@register
class TurnOnWifiAndOpenApp(AndroidWorldTask):
    """Wi-Fi on (from off) and an app open: half a point each."""

    app_names = ("settings",)
    complexity = 2.0
    schema = ("app_name",)
    template = "Turn on Wifi, then open the {app_name} app"

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        return OpenAppTaskEval._random_params(rng)

    def initialize_task(self, device: AndroidDevice) -> None:
        self.wifi = SystemWifiTurnOn({"on_or_off": "on"})
        self.app = OpenAppTaskEval({"app_name": self.params["app_name"]})
        self.wifi.initialize_task(device)
        self.app.initialize_task(device)
        super().initialize_task(device)

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        return (self.wifi.is_successful(device) + self.app.is_successful(device)) / 2.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        self.wifi.reference(device)
        return self.app.reference(device)


@register
class TurnOffWifiAndTurnOnBluetooth(AndroidWorldTask):
    """Wi-Fi off (from on) and Bluetooth on (from off): half a point each."""

    app_names = ("settings",)
    complexity = 2.0
    template = "Turn off WiFi, then enable bluetooth"

    def initialize_task(self, device: AndroidDevice) -> None:
        self.wifi = SystemWifiTurnOff({"on_or_off": "off"})
        self.bt = SystemBluetoothTurnOn({"on_or_off": "on"})
        self.wifi.initialize_task(device)
        self.bt.initialize_task(device)
        super().initialize_task(device)

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        return (self.wifi.is_successful(device) + self.bt.is_successful(device)) / 2.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        self.wifi.reference(device)
        return self.bt.reference(device)
