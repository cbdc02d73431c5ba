"""The AndroidWorld-style task contract (after ``android_world/task_evals/task_eval.py``, re-written).

A task class has a ``template`` (the goal with ``{param}`` fields), ``app_names``, a ``complexity``
(the step budget is ``int(10 * complexity)``, AndroidWorld's rule) and a ``schema`` naming its
parameters. An instance is built from params::

    cls = TASKS.get("ContactsAddContact")
    task = cls(cls.generate_random_params(seed=7))
    task.initialize_task(device)          # sets app state through the device
    ...agent acts...
    score = task.is_successful(device, answer=final_answer)   # float in [0, 1]
    task.tear_down(device)

Differences from AndroidWorld, on purpose: ``generate_random_params`` takes a ``seed`` (an int or a
``random.Random``) so a task instance is reproducible; anything an initialiser would draw at random
is drawn here and kept in the params; ``is_successful`` receives the agent's final answer (None when
it gave none) instead of reading an env's interaction cache; everything goes through the
AndroidDevice Protocol.
"""
from __future__ import annotations

import random
from typing import Any, ClassVar, Optional

from guigym.core.errors import TaskSpecError
from guigym.core.registry import Registry
from guigym.envs.android.device import AndroidDevice
from guigym.envs.android.androidworld.data import rng_of


class AndroidWorldTask:
    """Base class; subclasses set the class attributes and override the hooks they need."""

    #: AndroidWorld's task name (the registry key; defaults to the class name)
    name: ClassVar[str] = ""
    template: ClassVar[str] = ""
    app_names: ClassVar[tuple[str, ...]] = ()
    complexity: ClassVar[float] = 1.0
    #: parameter names the goal needs (checked at construction)
    schema: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params: dict[str, Any]) -> None:
        missing = [k for k in self.schema if k not in params]
        if missing:
            raise TaskSpecError(f"{self.task_name()}: params missing {', '.join(missing)}")
        self.params: dict[str, Any] = dict(params)
        self.initialized = False

    @classmethod
    def task_name(cls) -> str:
        return cls.name or cls.__name__

    @classmethod
    def start_is_goal(cls) -> bool:
        """Whether the initial state already meets the goal (AndroidWorld's ``*Verify`` tasks: the
        agent only has to check), so a no-op scores 1."""
        return False

    @classmethod
    def max_steps(cls) -> int:
        """AndroidWorld's step budget: ``int(10 * complexity)``."""
        return int(10 * cls.complexity)

    @property
    def goal(self) -> str:
        """The instruction shown to the agent."""
        return self.template.format(**self.params)

    @classmethod
    def generate_random_params(cls, seed: "int | random.Random | None" = None) -> dict[str, Any]:
        """Parameters for one instance, reproducible for an int ``seed``."""
        return cls._random_params(rng_of(seed))

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        return {}

    def initialize_task(self, device: AndroidDevice) -> None:
        """Put the device into the task's initial state."""
        self.initialized = True

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        """Score in [0, 1]; needs :meth:`initialize_task` first."""
        if not self.initialized:
            raise TaskSpecError(f"{self.task_name()}: is_successful called before initialize_task")
        return 0.0

    def tear_down(self, device: AndroidDevice) -> None:
        """Undo what the task left behind (best effort)."""
        self.initialized = False

    #: why a task has no reference end state (``guigym tasks check`` lists it with this reason)
    no_reference: ClassVar[str] = "no reference end state written for this task yet"

    def reference(self, device: AndroidDevice) -> Optional[str]:
        """Write the end state an agent doing the task would leave (what the app stores: settings,
        database rows, files, provider rows) through the device, after :meth:`initialize_task`;
        return the answer to give (None when the task asks for none). The causation check
        (:mod:`guigym.envs.android.check`) scores it: it must score 1, the untouched start 0.
        NotImplementedError (with :attr:`no_reference`) where a task has none."""
        raise NotImplementedError(self.no_reference)


TASKS: Registry[type[AndroidWorldTask]] = Registry("AndroidWorld task")


def register(cls: type[AndroidWorldTask]) -> type[AndroidWorldTask]:
    """Class decorator: add to :data:`TASKS` under its AndroidWorld name."""
    TASKS.register(cls.task_name(), cls)
    return cls
