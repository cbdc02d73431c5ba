"""The shape of AndroidWorld's information-retrieval tasks over an app table (its
``information_retrieval/information_retrieval.py`` and per-app ``*_utils.setup_task_state``,
re-written): the instance's target rows plus ``n_noise`` random rows, each redrawn while it could
change the answer (AndroidWorld's exclusion conditions, one predicate per task here), are put into
the table in a shuffled order; the agent's final answer is compared with the expected one.

Subclasses set the app (an :class:`~.sqlite_apps._SQLiteTask` mixin) and implement ``_values``
(the drawn parameters), ``_targets``, ``_noise_row`` and ``_excluded``; ``_expected`` defaults to
the targets' ``title``. ``answer_kind`` is ``"list"`` (comma-separated text items,
:func:`answers.list_matches`) or ``"number"`` (:func:`answers.number_matches`).
"""
from __future__ import annotations

import random
from typing import Any, ClassVar, Optional

from guigym.envs.android.androidworld import answers as A
from guigym.envs.android.androidworld.sqlite_apps import ROWS, _SQLiteTask
from guigym.envs.android.device import AndroidDevice


class _RowQuery(_SQLiteTask):
    complexity = 1.0
    n_noise: ClassVar[int] = 20
    answer_kind: ClassVar[str] = "list"
    #: numbers: the allowed absolute difference (AndroidWorld's ``tolerance`` where it sets one)
    tolerance: ClassVar[float] = 1e-6

    @classmethod
    def _values(cls, rng: random.Random) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def _targets(cls, p: dict[str, Any]) -> list[Any]:
        raise NotImplementedError

    @classmethod
    def _noise_row(cls, rng: random.Random) -> Any:
        raise NotImplementedError

    @classmethod
    def _excluded(cls, row: Any, p: dict[str, Any]) -> bool:
        """Whether a noise row would change the answer (it is redrawn then)."""
        raise NotImplementedError

    @classmethod
    def _expected(cls, p: dict[str, Any], targets: list[Any]) -> list[str]:
        return [t.title for t in targets]

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        p = cls._values(rng)
        targets = cls._targets(p)
        titles = {getattr(t, "title", None) for t in targets}
        noise: list[Any] = []
        while len(noise) < cls.n_noise:
            row = cls._noise_row(rng)
            if not cls._excluded(row, p) and getattr(row, "title", object()) not in titles:
                noise.append(row)
        rows = targets + noise
        rng.shuffle(rows)
        p.update({ROWS: rows, "expected": cls._expected(p, targets)})
        if "date" in p:
            p["date_phrase"] = A.reword_date(rng, p["date"])
        return p

    @property
    def goal(self) -> str:
        return self.template.format(**{**self.params, "date": self.params.get("date_phrase", "")})

    def initialize_task(self, device: AndroidDevice) -> None:
        self._ensure_db(device)
        self._reset_table(device, self.params[ROWS])
        super().initialize_task(device)

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        want = self.params["expected"]
        if self.answer_kind == "number":
            ok = A.number_matches(answer, float(want[0]), self.tolerance)
        else:
            ok = A.list_matches(answer, want)
        return 1.0 if ok else 0.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        return ", ".join(str(x) for x in self.params["expected"])  # an answer task: the end state is the answer
