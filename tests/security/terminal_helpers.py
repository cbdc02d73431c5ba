"""Typing into the local desktop's terminal as the agent, for the attack tests."""
from __future__ import annotations

import secrets
import time

from guigym.core import actions as A


def type_command(env, command: str) -> str:
    """Type ``command`` + a marker echo into the terminal, press Enter; returns the marker."""
    marker = f"END-{secrets.token_hex(4)}"
    env.step(A.Type(text=f"{command}; echo {marker[:4]}''{marker[4:]}"))
    env.step(A.Press(key="enter"))
    return marker


def wait_marker(env, marker: str, timeout: float = 90.0) -> str:
    """Step (waiting) until ``marker`` shows in the terminal; returns the terminal text."""
    deadline = time.monotonic() + timeout
    obs, *_ = env.step(A.Wait(seconds=0.2))
    while marker not in obs["terminal"]:
        assert time.monotonic() < deadline, f"no {marker} in {timeout} s: {obs['terminal'][-600:]}"
        obs, *_ = env.step(A.Wait(seconds=0.3))
    return obs["terminal"]
