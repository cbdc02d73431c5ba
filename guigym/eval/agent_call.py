"""One agent call of the eval runner, bounded in time and retried with backoff.

An agent call that raises, exceeds its time budget or cannot reach its model server is a fault of
the agent's infrastructure, not the agent's answer: the runner records the episode ``lost`` (never
a scored failure) once :func:`act_with_retries` gives up. A reply that *is* the model's answer but
does not parse is returned as text like any other; the env then spends the step and reports
``action_error`` (the model's failure, scored).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

from guigym.agents.base import Agent


class AgentFailure(RuntimeError):
    """The agent could not produce an action after its retries; the message says why."""


class AgentTimeout(AgentFailure):
    """One agent call did not return within its time budget (the call is abandoned)."""


def call_agent(agent: Agent, obs: dict[str, Any], timeout_s: Optional[float]) -> str:
    """``agent.act(obs)``, raising :class:`AgentTimeout` after ``timeout_s`` seconds (None: no
    bound). The call runs in a daemon thread so that a hung call cannot hold the run; the agent
    instance must not be used again after a timeout (its call may still be running)."""
    if timeout_s is None:
        return agent.act(obs)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["text"] = agent.act(obs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["exc"] = exc

    thread = threading.Thread(target=run, daemon=True, name="guigym-agent-call")
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise AgentTimeout(f"agent call did not return within {timeout_s:g} s")
    if "exc" in box:
        raise box["exc"]
    return box["text"]


def act_with_retries(agent: Agent, obs: dict[str, Any], *, retries: int, timeout_s: Optional[float],
                     backoff_s: float, replace: Callable[[], Agent],
                     sleep: Callable[[float], None] = time.sleep) -> tuple[str, Agent]:
    """``(action text, agent)``: up to ``retries + 1`` calls, waiting ``backoff_s``, ``2 backoff_s``,
    ... (capped at 30 s) between them. After a timeout the abandoned agent is swapped for
    ``replace()`` (a fresh one, reset with the same task info by the caller's ``replace``); the
    agent that answered is returned. Raises :class:`AgentFailure` naming the last error."""
    delay = backoff_s
    last = ""
    for attempt in range(retries + 1):
        try:
            return call_agent(agent, obs, timeout_s), agent
        except AgentTimeout as exc:
            last = str(exc)
            agent = replace()
        except Exception as exc:  # noqa: BLE001 - any raise is the agent's infrastructure failing
            last = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        if attempt < retries:
            sleep(delay)
            delay = min(2 * delay, 30.0)
    raise AgentFailure(f"failed {retries + 1} time(s); last: {last}")
