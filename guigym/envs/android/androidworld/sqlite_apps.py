"""Tasks over app SQLite databases: Pro Expense and Broccoli recipes (AndroidWorld
``single/expense.py``, ``single/recipe.py``, ``common_validators/sqlite_validators.py``).

Database locations and row layouts are AndroidWorld's (``sqlite_schema_utils.Expense`` /
``Recipe``): Pro Expense keeps ``expense`` in ``/data/data/com.arduia.expense/databases/accounting.db``
(amounts in cents, categories numbered 1-11), Broccoli keeps ``recipes`` in
``/data/data/com.flauschcode.broccoli/databases/broccoli``. The database must exist (the app creates
it on first launch); initialisers launch the app once when it is missing, then clear the table and
insert the noise / target rows through :func:`validators.modify_db`.

Scoring is AndroidWorld's integrity check: an add task passes when exactly the requested rows were
added (exact on numbers, fuzzy on free text) and every other row is unchanged; a delete task passes
when exactly the requested rows are gone.
"""
from __future__ import annotations

import dataclasses
import random
import time
from typing import Any, ClassVar, Optional, Sequence

from guigym.core.errors import EnvInfraError
from guigym.envs.android.androidworld import data as D
from guigym.envs.android.androidworld import validators as V
from guigym.envs.android.androidworld.base import AndroidWorldTask, register
from guigym.envs.android.device import AndroidDevice

ROWS = "row_objects"
NOISE = "noise_row_objects"
#: 2023-10-01 00:00 UTC: AndroidWorld's expense dates lie in October 2023 (its device clock is fixed then)
OCT_2023_S = 1696118400


@dataclasses.dataclass(frozen=True)
class Expense:
    """A Pro Expense ``expense`` row (``amount`` in cents)."""

    name: str
    amount: int
    category: int = 0
    note: Optional[str] = ""
    created_date: int = 0
    modified_date: int = 0
    expense_id: int = -1

    @property
    def category_name(self) -> str:
        return D.EXPENSE_CATEGORIES[self.category]

    def describe(self) -> str:
        return (f"name: {self.name}, amount: ${self.amount / 100:.2f}, category: {self.category_name}"
                + (f", note: {self.note}" if self.note else ""))


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A Broccoli ``recipes`` row."""

    title: str
    description: str = ""
    servings: str = ""
    preparationTime: str = ""  # noqa: N815 - the app's column name
    source: str = ""
    ingredients: str = ""
    directions: str = ""
    favorite: int = 0
    imageName: str = ""  # noqa: N815
    recipeId: int = -1  # noqa: N815

    def describe(self) -> str:
        parts = [f"title: {self.title}"] + [f"{k}: {getattr(self, k)}" for k in
                                            ("description", "servings", "preparationTime", "source", "ingredients",
                                             "directions") if getattr(self, k)]
        return ", ".join(parts)


#: CREATE TABLE statements matching the apps' columns (for stand-in devices and fixtures; a real
#: device's database is the app's own)
EXPENSE_SCHEMA = ('CREATE TABLE expense (expense_id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, amount INTEGER, '
                  'category INTEGER, note TEXT, created_date INTEGER, modified_date INTEGER)')
RECIPE_SCHEMA = ('CREATE TABLE recipes (recipeId INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT, description TEXT, '
                 'servings TEXT, preparationTime TEXT, source TEXT, ingredients TEXT, directions TEXT, '
                 'favorite INTEGER, imageName TEXT)')


def random_expense(rng: random.Random) -> Expense:
    cat = rng.choice(sorted(D.EXPENSE_CATEGORIES))
    ts_ms = (OCT_2023_S + rng.randint(0, 14 * 86400)) * 1000
    return Expense(name=rng.choice(D.EXPENSE_NAMES[D.EXPENSE_CATEGORIES[cat]]), amount=rng.randint(1000, 50000),
                   category=cat, note=rng.choice(D.EXPENSE_NOTES), created_date=ts_ms, modified_date=ts_ms)


def random_recipe(rng: random.Random) -> Recipe:
    return Recipe(title=rng.choice(D.RECIPE_TITLES), description=rng.choice(D.RECIPE_DESCRIPTIONS),
                  servings=rng.choice(D.RECIPE_SERVINGS), preparationTime=rng.choice(D.RECIPE_TIMES),
                  source=rng.choice(D.RECIPE_SOURCES), ingredients=rng.choice(D.RECIPE_INGREDIENTS),
                  directions=rng.choice(D.RECIPE_DIRECTIONS), favorite=0)


def _distinct(rng: random.Random, make: Any, n: int, key: str, avoid: Sequence[Any] = ()) -> list[Any]:
    """``n`` rows with distinct ``key`` values, none equal to one in ``avoid``."""
    out: list[Any] = []
    seen = {getattr(r, key) for r in avoid}
    for _ in range(10_000):
        if len(out) == n:
            break
        row = make(rng)
        if getattr(row, key) not in seen:
            seen.add(getattr(row, key))
            out.append(row)
    return out


class _SQLiteTask(AndroidWorldTask):
    db_path: ClassVar[str] = ""
    table: ClassVar[str] = ""
    key: ClassVar[str] = ""
    package: ClassVar[str] = ""
    launch_name: ClassVar[str] = ""
    row_type: ClassVar[type] = object
    n_rows: ClassVar[int] = 1
    n_noise: ClassVar[int] = 0
    #: seconds to let a first launch create the database (AndroidWorld waits 7)
    launch_wait_s: float = 7.0

    def rows(self, device: AndroidDevice) -> list[Any]:
        """The table's rows in key (insertion) order."""
        rows = V.read_rows(device, self.db_path, self.table, self.row_type)
        return sorted(rows, key=lambda r: getattr(r, self.key))

    def _ensure_db(self, device: AndroidDevice) -> None:
        """Launch the app once when its database does not exist yet (it creates it)."""
        try:
            self.rows(device)
            return
        except FileNotFoundError:
            pass
        device.launch_app(self.launch_name)
        time.sleep(self.launch_wait_s)
        try:
            self.rows(device)
        except FileNotFoundError:
            raise EnvInfraError(f"{self.task_name()}: {self.db_path} does not exist even after launching "
                                f"{self.launch_name!r}; is the app installed?") from None

    def _reset_table(self, device: AndroidDevice, rows: Sequence[Any]) -> None:
        stmts: list[tuple[str, Sequence[Any]]] = [(f'DELETE FROM "{self.table}"', ())]
        stmts += [V.insert_sql(self.table, r, self.key) for r in rows]
        V.modify_db(device, self.db_path, self.package, stmts)

    def tear_down(self, device: AndroidDevice) -> None:
        try:
            self._reset_table(device, [])
        finally:
            super().tear_down(device)


class _AddRows(_SQLiteTask):
    compare: ClassVar[tuple[str, ...]] = ()
    free_form: ClassVar[tuple[str, ...]] = ()

    def initialize_task(self, device: AndroidDevice) -> None:
        self._ensure_db(device)
        self._reset_table(device, self.params[NOISE])
        self.before = self.rows(device)
        super().initialize_task(device)

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        ok = V.rows_added_intact(self.before, self.rows(device), self.params[ROWS], self.compare, self.free_form)
        return 1.0 if ok else 0.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        """The requested rows, as the app's form would insert them."""
        V.modify_db(device, self.db_path, self.package, [V.insert_sql(self.table, r, self.key) for r in self.params[ROWS]])
        return None


class _DeleteRows(_SQLiteTask):
    def initialize_task(self, device: AndroidDevice) -> None:
        self._ensure_db(device)
        self._reset_table(device, list(self.params.get(NOISE, [])) + list(self.params[ROWS]))
        self.before = self.rows(device)
        n = len(self.params[ROWS])
        # the task's rows were inserted after the noise, so they have the largest keys
        self.to_delete = [getattr(r, self.key) for r in self.before[len(self.before) - n:]]
        if len(self.before) != n + len(self.params.get(NOISE, [])):
            raise EnvInfraError(f"{self.task_name()}: {len(self.before)} rows after set-up, expected "
                                f"{n + len(self.params.get(NOISE, []))}")
        super().initialize_task(device)

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        return 1.0 if V.rows_removed_intact(self.before, self.rows(device), self.to_delete, self.key) else 0.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        """The requested rows deleted (by key), every other row left as it was."""
        V.modify_db(device, self.db_path, self.package,
                    [(f'DELETE FROM "{self.table}" WHERE "{self.key}" = ?', (k,)) for k in self.to_delete])
        return None


# --------------------------------------------------------------------------- Pro Expense


class _Expense(_SQLiteTask):
    app_names = ("pro expense",)
    db_path = "/data/data/com.arduia.expense/databases/accounting.db"
    table, key, package, launch_name = "expense", "expense_id", "com.arduia.expense", "pro expense"
    row_type = Expense


class _ExpenseAdd(_Expense, _AddRows):
    template = "Add the following expenses into the pro expense:\n{expenses}"
    compare = ("name", "amount", "category", "note")
    free_form = ("name", "note")
    n_noise = 10

    @property
    def goal(self) -> str:
        rows = self.params[ROWS]
        if self.params.get("text_representation_type") == "csv":
            body = "name,amount,category,note\n" + "\n".join(
                f"{r.name},{r.amount / 100:.2f},{r.category_name},{r.note}" for r in rows)
        else:
            body = "\n".join(r.describe() for r in rows)
        return f"Add the following expenses into the pro expense:\n{body}"

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        targets = _distinct(rng, random_expense, cls.n_rows, "name")
        return {ROWS: targets, NOISE: _distinct(rng, random_expense, cls.n_noise, "name", avoid=targets),
                "text_representation_type": rng.choice(["csv", "text_block"])}


@register
class ExpenseAddSingle(_ExpenseAdd):
    complexity = 1.2
    n_rows = 1


@register
class ExpenseAddMultiple(_ExpenseAdd):
    complexity = 6.0
    n_rows = 3


class _ExpenseDelete(_Expense, _DeleteRows):
    template = "Delete the following expenses from pro expense: {expense_names}."

    @property
    def goal(self) -> str:
        return f"Delete the following expenses from pro expense: {', '.join(r.name for r in self.params[ROWS])}."

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        rows = _distinct(rng, random_expense, cls.n_rows + cls.n_noise, "name")
        p: dict[str, Any] = {ROWS: rows[: cls.n_rows]}
        if cls.n_noise:
            p[NOISE] = rows[cls.n_rows:]
        return p


@register
class ExpenseDeleteSingle(_ExpenseDelete):
    complexity = 1.0
    n_rows = 1


@register
class ExpenseDeleteMultiple(_ExpenseDelete):
    complexity = 2.0
    n_rows = 3


# --------------------------------------------------------------------------- Broccoli


class _Recipe(_SQLiteTask):
    app_names = ("broccoli app",)
    db_path = "/data/data/com.flauschcode.broccoli/databases/broccoli"
    table, key, package, launch_name = "recipes", "recipeId", "com.flauschcode.broccoli", "broccoli app"
    row_type = Recipe


@register
class RecipeAddSingleRecipe(_Recipe, _AddRows):
    complexity = 2.4
    n_rows = 1
    n_noise = 10
    template = "Add the following recipes into the Broccoli app:\n{recipes}"
    compare = ("title", "description", "servings", "preparationTime", "source", "ingredients", "directions",
               "favorite")
    free_form = ("title", "description", "servings", "preparationTime", "source", "ingredients", "directions")

    @property
    def goal(self) -> str:
        return "Add the following recipes into the Broccoli app:\n" + "\n".join(r.describe() for r in self.params[ROWS])

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        targets = _distinct(rng, random_recipe, cls.n_rows, "title")
        return {ROWS: targets, NOISE: _distinct(rng, random_recipe, cls.n_noise, "title", avoid=targets)}


class _RecipeDelete(_Recipe, _DeleteRows):
    template = "Delete the following recipes from Broccoli app: {recipe_titles}."

    @property
    def goal(self) -> str:
        return f"Delete the following recipes from Broccoli app: {', '.join(r.title for r in self.params[ROWS])}."

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        rows = _distinct(rng, random_recipe, cls.n_rows + cls.n_noise, "title")
        p: dict[str, Any] = {ROWS: rows[cls.n_noise:]}
        if cls.n_noise:
            p[NOISE] = rows[: cls.n_noise]
        return p


@register
class RecipeDeleteSingleRecipe(_RecipeDelete):
    complexity = 1.0
    n_rows = 1


@register
class RecipeDeleteSingleWithRecipeWithNoise(_RecipeDelete):
    complexity = 2.0
    n_rows = 1
    n_noise = 29


@register
class RecipeDeleteMultipleRecipes(_RecipeDelete):
    complexity = 2.0
    n_rows = 3


@register
class RecipeDeleteMultipleRecipesWithNoise(_RecipeDelete):
    complexity = 3.0
    n_rows = 3
    n_noise = 29


@register
class RecipeAddMultipleRecipes(RecipeAddSingleRecipe):
    complexity = 4.0
    n_rows = 3


def recipes_text(rows: Sequence[Recipe], kind: str) -> str:
    """Recipes as AndroidWorld writes them into a note: ``csv`` (a header row, then one line per
    recipe) or a block of ``title: ..., description: ...`` lines."""
    fields = ("title", "description", "servings", "preparationTime", "ingredients", "directions")
    if kind == "csv":
        return "\n".join([",".join(fields)] + [",".join(f'"{getattr(r, f)}"' for f in fields) for r in rows])
    return "\n".join(r.describe() for r in rows)


@register
class RecipeAddMultipleRecipesFromMarkor(RecipeAddSingleRecipe):
    """The recipes to add are in ``recipes.txt`` in Markor (the folder holds nothing else)."""

    complexity = 4.0
    n_rows = 3
    template = "Add the recipes from recipes.txt in Markor to the Broccoli recipe app."

    @property
    def goal(self) -> str:
        return self.template

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        return {**super()._random_params(rng), "text_representation_type": rng.choice(["csv", "text_block"])}

    def _file_rows(self) -> list[Recipe]:
        return list(self.params[ROWS])

    def initialize_task(self, device: AndroidDevice) -> None:
        super().initialize_task(device)
        V.clear_directory(device, V.MARKOR_DATA)
        V.write_file(device, f"{V.MARKOR_DATA}/recipes.txt",
                     recipes_text(self._file_rows(), self.params["text_representation_type"]))

    def tear_down(self, device: AndroidDevice) -> None:
        try:
            V.clear_directory(device, V.MARKOR_DATA)
        finally:
            super().tear_down(device)


@register
class RecipeAddMultipleRecipesFromMarkor2(RecipeAddMultipleRecipesFromMarkor):
    """``recipes.txt`` holds 3 recipes with the asked preparation time among 40 without it (shuffled)."""

    complexity = 3.0  # AndroidWorld's class sets 4, then 3: the later one holds
    n_noise = 40
    schema = ("prep_time",)
    template = "Add the recipes from recipes.txt in Markor that take {prep_time} to prepare into the Broccoli recipe app."

    @property
    def goal(self) -> str:
        return self.template.format(**self.params)

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        prep = rng.choice(D.RECIPE_TIMES)
        targets = _distinct(rng, lambda r: dataclasses.replace(random_recipe(r), preparationTime=prep), cls.n_rows,
                            "title")
        noise = _distinct(rng, random_recipe, cls.n_noise * 3, "title", avoid=targets)
        noise = [n for n in noise if n.preparationTime != prep][: cls.n_noise]
        order = list(range(len(targets) + len(noise)))
        rng.shuffle(order)  # the file's order, drawn here so an instance replays
        return {ROWS: targets, NOISE: noise, "prep_time": prep, "order": order,
                "text_representation_type": rng.choice(["csv", "text_block"])}

    def _file_rows(self) -> list[Recipe]:
        rows = list(self.params[ROWS]) + list(self.params[NOISE])
        return [rows[i] for i in self.params["order"]]


class _DeleteDuplicate(_SQLiteTask):
    """A row present twice among noise rows: exactly one of the two copies must go (either one),
    every other row must stay (AndroidWorld ``DeleteDuplicateRows``)."""

    goal_text: ClassVar[str] = ""

    @property
    def goal(self) -> str:
        return self.goal_text

    def initialize_task(self, device: AndroidDevice) -> None:
        self._ensure_db(device)
        self._reset_table(device, list(self.params[NOISE]) + list(self.params[ROWS]))
        self.before = self.rows(device)
        self.copies = [getattr(r, self.key) for r in self.before[-2:]]  # inserted last: the largest keys
        if len(self.before) != len(self.params[NOISE]) + 2:
            raise EnvInfraError(f"{self.task_name()}: {len(self.before)} rows after set-up, expected "
                                f"{len(self.params[NOISE]) + 2}")
        super().initialize_task(device)

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        after = self.rows(device)
        ok = any(V.rows_removed_intact(self.before, after, [k], self.key) for k in self.copies)
        return 1.0 if ok else 0.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        V.modify_db(device, self.db_path, self.package,
                    [(f'DELETE FROM "{self.table}" WHERE "{self.key}" = ?', (self.copies[-1],))])
        return None


def _duplicate_params(rng: random.Random, make: Any, key: str, n_noise: int, variations: int = 0,
                      vary: Optional[Any] = None) -> dict[str, Any]:
    """``n_noise - variations`` distinct rows, a target (twice), and ``variations`` rows that share the
    target's ``key`` but differ in another field (``vary(rng, target)``)."""
    rows = _distinct(rng, make, n_noise - variations + 1, key)
    target = rows.pop()
    extra: list[Any] = []
    while len(extra) < variations:
        v = vary(rng, target)
        if v != target and v not in extra:
            extra.append(v)
    return {ROWS: [target, target], NOISE: rows + extra}


_RECIPE_DEDUP = ("Delete all but one of any recipes in the Broccoli app that are exact duplicates, ensuring at least "
                 "one instance of each unique recipe remains")


@register
class RecipeDeleteDuplicateRecipes(_Recipe, _DeleteDuplicate):
    complexity = 1.0
    template = goal_text = _RECIPE_DEDUP

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        return _duplicate_params(rng, random_recipe, "title", 5)


@register
class RecipeDeleteDuplicateRecipes2(_Recipe, _DeleteDuplicate):
    """Noise includes recipes with the duplicate's title but other details (not duplicates)."""

    complexity = 3.0
    template = goal_text = _RECIPE_DEDUP

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        return _duplicate_params(rng, random_recipe, "title", 10, variations=4,
                                 vary=lambda r, t: dataclasses.replace(random_recipe(r), title=t.title))


_EXPENSE_DEDUP = ("Delete all but one of any expenses in pro expense that are exact duplicates, ensuring at least one "
                  "instance of each unique expense remains.")


@register
class ExpenseDeleteDuplicates(_Expense, _DeleteDuplicate):
    complexity = 1.0  # AndroidWorld's class leaves the default
    template = goal_text = _EXPENSE_DEDUP

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        return _duplicate_params(rng, random_expense, "name", 5)


@register
class ExpenseDeleteDuplicates2(_Expense, _DeleteDuplicate):
    """40 noise rows, three of them the duplicate with another amount and date (not duplicates)."""

    complexity = 1.8
    template = goal_text = _EXPENSE_DEDUP

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        def vary(r: random.Random, t: Expense) -> Expense:
            ts = (OCT_2023_S + r.randint(0, 14 * 86400)) * 1000
            return dataclasses.replace(t, amount=t.amount + r.randint(50, 999), created_date=ts, modified_date=ts)

        # keyed on the amount: the app's names are too few for 38 distinct ones, and rows differing in
        # amount are distinct rows all the same
        return _duplicate_params(rng, random_expense, "amount", 40, variations=3, vary=vary)
