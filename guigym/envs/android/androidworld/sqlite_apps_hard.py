"""The harder Pro Expense and Broccoli variants (AndroidWorld ``single/expense.py``, ``single/recipe.py``):
more noise rows, a constraint to read, or a Markor file to read first.

* ExpenseDeleteMultiple2: three expenses among 50 noise rows (noise never shares a target's name).
* ExpenseAddMultipleFromMarkor: ``my_expenses.txt`` in Markor lists 100 expenses already in the
  app and two more marked "Reimbursable." in their note; exactly those two must be added. The
  added note may keep the marker or drop it (AndroidWorld compares with the note without it; the
  task text does not say which, so both pass here).
* RecipeDeleteDuplicateRecipes3: a recipe twice among 30 noise rows, of which some share its title
  and description (not duplicates) and three share another title (listed first in the app).
* RecipeDeleteMultipleRecipesWithConstraint: the (up to) three recipes whose directions use an
  ingredient go; 29 others, none using it, stay.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any, Optional

from guigym.envs.android.androidworld import data as D
from guigym.envs.android.androidworld import validators as V
from guigym.envs.android.androidworld.base import AndroidWorldTask, register
from guigym.envs.android.androidworld.sqlite_apps import (NOISE, ROWS, Expense, Recipe, _distinct, _ExpenseAdd, _ExpenseDelete, _Recipe, _RecipeDelete,
                                                         _DeleteDuplicate, _RECIPE_DEDUP, random_expense,
                                                         random_recipe)
from guigym.envs.android.device import AndroidDevice

#: ingredients a recipe's directions name (AndroidWorld's constraint task picks one of its common ones)
INGREDIENTS = ("garlic", "onion", "butter", "lemon", "ginger", "basil", "cheese", "honey", "carrots", "spinach")
REIMBURSABLE = ". Reimbursable."


@register
class ExpenseDeleteMultiple2(_ExpenseDelete):
    complexity = 3.4
    n_rows = 3
    n_noise = 50
    template = "Delete the following expenses from arduia pro expense: {expense_names}."

    @property
    def goal(self) -> str:
        return f"Delete the following expenses from arduia pro expense: {', '.join(r.name for r in self.params[ROWS])}."

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        targets = _distinct(rng, random_expense, cls.n_rows, "name")
        names = {t.name for t in targets}
        noise: list[Expense] = []
        while len(noise) < cls.n_noise:  # the app's names are too few for 50 distinct ones
            row = random_expense(rng)
            if row.name not in names:
                noise.append(row)
        return {ROWS: targets, NOISE: noise}


def expenses_csv(rows: list[Expense]) -> str:
    """Expenses as AndroidWorld's csv text: a header, then ``name,amount,category,note`` lines."""
    return "\n".join(["name,amount_dollars,category_name,note"]
                     + [f"{r.name},{r.amount / 100:.2f},{r.category_name},{r.note}" for r in rows])


@register
class ExpenseAddMultipleFromMarkor(_ExpenseAdd):
    app_names = ("pro expense", "markor")
    complexity = 6.0
    n_rows = 2
    n_noise = 100
    template = ("Go through the transactions in my_expenses.txt in Markor. Log the reimbursable transactions in the "
                "pro expense.")

    @property
    def goal(self) -> str:
        return self.template

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        targets = _distinct(rng, random_expense, cls.n_rows, "name")
        names = {t.name for t in targets}
        noise: list[Expense] = []
        while len(noise) < cls.n_noise:
            row = random_expense(rng)
            if row.name not in names:
                noise.append(row)
        order = list(range(cls.n_rows + cls.n_noise))
        rng.shuffle(order)  # the file's line order, drawn here so an instance replays
        return {ROWS: targets, NOISE: noise, "order": order}

    def file_rows(self) -> list[Expense]:
        marked = [dataclasses.replace(r, note=(r.note or "") + REIMBURSABLE) for r in self.params[ROWS]]
        rows = marked + list(self.params[NOISE])
        return [rows[i] for i in self.params["order"]]

    def initialize_task(self, device: AndroidDevice) -> None:
        super().initialize_task(device)
        V.clear_directory(device, V.MARKOR_DATA)
        V.write_file(device, f"{V.MARKOR_DATA}/my_expenses.txt", expenses_csv(self.file_rows()))

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        AndroidWorldTask.is_successful(self, device, answer)  # the initialised check only
        after = self.rows(device)
        plain = list(self.params[ROWS])
        marked = [dataclasses.replace(r, note=(r.note or "") + REIMBURSABLE) for r in plain]
        ok = any(V.rows_added_intact(self.before, after, ref, self.compare, self.free_form) for ref in (plain, marked))
        return 1.0 if ok else 0.0

    def tear_down(self, device: AndroidDevice) -> None:
        try:
            V.clear_directory(device, V.MARKOR_DATA)
        finally:
            super().tear_down(device)


@register
class RecipeDeleteDuplicateRecipes3(_Recipe, _DeleteDuplicate):
    complexity = 3.4
    n_noise = 30
    template = goal_text = _RECIPE_DEDUP

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        rows = _distinct(rng, random_recipe, 22, "title")
        target = rows.pop()
        top = rng.choice([t for t in D.RECIPE_TITLES if t not in {r.title for r in rows} | {target.title}])
        noise = rows + [dataclasses.replace(random_recipe(rng), title=top) for _ in range(3)]
        while len(noise) < cls.n_noise:  # same title and description as the target, other details
            v = dataclasses.replace(random_recipe(rng), title=target.title, description=target.description)
            if v != target and v not in noise:
                noise.append(v)
        return {ROWS: [target, target], NOISE: noise}


def recipe_using(rng: random.Random, ingredient: str) -> Recipe:
    """A random recipe whose directions name ``ingredient``."""
    r = random_recipe(rng)
    return dataclasses.replace(r, directions=f"Chop the {ingredient} finely. {r.directions}")


@register
class RecipeDeleteMultipleRecipesWithConstraint(_RecipeDelete):
    complexity = 4.0
    n_rows = 3
    n_noise = 29
    schema = ("ingredient",)
    template = "Delete the recipes from Broccoli app that use {ingredient} in the directions."

    @property
    def goal(self) -> str:
        return self.template.format(**self.params)

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        ingredient = rng.choice(INGREDIENTS)
        others = [i for i in INGREDIENTS if i != ingredient]
        targets = _distinct(rng, lambda r: recipe_using(r, ingredient), cls.n_rows, "title")
        noise = _distinct(rng, lambda r: recipe_using(r, r.choice(others)), cls.n_noise, "title", avoid=targets)
        return {ROWS: targets, NOISE: noise, "ingredient": ingredient}
