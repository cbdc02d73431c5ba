"""Provider: how a desktop is born, restored and destroyed.

A provider owns one desktop (a local sandbox, a docker container, a qemu VM, or a remote
machine) and hands back a :class:`~guigym.envs.desktop.client.DesktopClient` that talks to the
in-desktop server. The env never talks to bwrap/docker/qemu itself::

    with make_provider("local", network=False) as provider:    # start()
        client = provider.client
        ...
        client = provider.revert()                             # next episode: initial state
    # stop(): everything the provider started is gone

Life cycle: ``start()`` -> ``revert()`` any number of times -> ``stop()``. ``revert()`` on a
desktop that died rebuilds it (``stop()`` + ``start()``), so an env can call it after an
:class:`~guigym.core.errors.EnvInfraError`. ``stop()`` is idempotent and also runs at interpreter
exit.
"""
from __future__ import annotations

import abc
from typing import TYPE_CHECKING, ClassVar, Optional

if TYPE_CHECKING:
    from guigym.envs.desktop.client import DesktopClient


class Provider(abc.ABC):
    """One desktop. Subclasses set ``name`` and implement start/revert/stop.

    Attributes every provider has:

    * ``name``: registry name ("local", "docker", "qemu", "remote").
    * ``vm``: True when the desktop is a full VM whose only tie to the host is the server
      protocol; only then may an env run an agent's arbitrary pyautogui code in it, and only when
      the user opts in (issue 3, item 4).
    * ``client_password``: what ``{CLIENT_PASSWORD}`` in task setups is replaced with.
    * ``screen_size``: (width, height) of the desktop in pixels.
    * ``timings``: seconds of the last ``start``/``revert`` and their phases (for benches).
    """

    name: ClassVar[str] = ""
    vm: ClassVar[bool] = False

    def __init__(self, client_password: str = "password",
                 screen_size: tuple[int, int] = (1920, 1080)) -> None:
        self.client_password = client_password
        self.screen_size = (int(screen_size[0]), int(screen_size[1]))
        self.timings: dict[str, float] = {}
        self._client: Optional["DesktopClient"] = None

    @abc.abstractmethod
    def start(self) -> "DesktopClient":
        """Bring the desktop up (idempotent) and return a client whose server answered."""

    @abc.abstractmethod
    def revert(self) -> "DesktopClient":
        """Put the desktop back into its initial state for a new episode; return the client.

        Rebuilds the desktop when it died. Raises EnvInfraError when that fails too.
        """

    def reset_home(self) -> "DesktopClient":
        """Restore HOME (and with it the whole initial state); same as :meth:`revert`."""
        return self.revert()

    @abc.abstractmethod
    def stop(self) -> None:
        """Destroy the desktop and everything it started; idempotent, never raises."""

    def _drop_client(self) -> None:
        """Close and forget the client (for ``stop()``; never raises)."""
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - closing must not raise
                pass

    @property
    def alive(self) -> bool:
        """True while the desktop is up (a cheap local check, no round trip)."""
        return self._client is not None

    @property
    def client(self) -> Optional["DesktopClient"]:
        """The client of the running desktop, or None before ``start()`` / after ``stop()``.

        Never starts anything (so ``getattr(provider, "client", None)`` is a safe check).
        """
        return self._client

    def close(self) -> None:
        """Alias of :meth:`stop` (Gymnasium style)."""
        self.stop()

    def __enter__(self) -> "Provider":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
