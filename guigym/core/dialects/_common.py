"""Helpers shared by the benchmark dialects: safe call parsing, text extraction, numbers, keys.

Nothing here executes agent text: calls are read with :mod:`ast` and every argument must be a
literal (:func:`ast.literal_eval`); JSON goes through :mod:`json` (or ``literal_eval`` for the
single-quoted dicts some agents write).
"""
from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Sequence, Union

from guigym.core import actions as A
from guigym.core.dialect_base import MAX_ACTION_CHARS, build_action
from guigym.core.errors import ActionParseError, ConfigError

Number = Union[int, float]
Screen = tuple[int, int]

#: longest model response we look at (thoughts included); the action inside it is capped at
#: :data:`guigym.core.dialect.MAX_ACTION_CHARS`
MAX_RESPONSE_CHARS = 200_000

#: pixels one direction-only scroll ("scroll down") moves when the benchmark gives no amount
DEFAULT_SCROLL_PX = 500

#: pixels per mouse-wheel click, for dialects that count scrolls in wheel clicks (pyautogui)
WHEEL_CLICK_PX = 100


# ---- dialect base ---------------------------------------------------------------------------------
class DialectBase:
    """Common constructor and error helpers.

    ``screen`` is the (width, height) in pixels of the screenshot the agent saw; dialects whose
    coordinates or scroll amounts are relative to the screen need it.
    """

    name: ClassVar[str] = ""

    def __init__(self, screen: Optional[Sequence[int]] = None) -> None:
        self.screen: Optional[Screen] = check_screen(screen, self.name)

    def error(self, message: str, text: str = "") -> ActionParseError:
        return ActionParseError(f"{self.name}: {message}", text)

    def cannot(self, action: A.Action, detail: str = "") -> ActionParseError:
        """The error for a typed action this dialect cannot print."""
        what = action.name.replace("_", " ")
        return ActionParseError(f"{self.name} has no {what} action" + (f" ({detail})" if detail else ""))

    def build(self, cls: type[A.Action], raw: str, /, **kwargs: Any) -> A.Action:
        """``cls(**kwargs)`` checked like the canonical dialect does; ``raw`` is the agent text."""
        try:
            return build_action(cls, kwargs, raw)
        except ActionParseError as exc:
            raise self.error(str(exc), raw) from None

    def need_screen(self, why: str) -> Screen:
        if self.screen is None:
            raise ConfigError(f"{self.name}: {why} needs the screenshot size; construct the dialect "
                              f"with screen=(width, height)")
        return self.screen

    def check_text(self, text: Any) -> str:
        if not isinstance(text, str):
            raise self.error(f"action must be a string, got {type(text).__name__}", str(text)[:200])
        if len(text) > MAX_RESPONSE_CHARS:
            raise self.error(f"response is {len(text)} characters long; the limit is {MAX_RESPONSE_CHARS}",
                             text[:200])
        if not text.strip():
            raise self.error("empty action", text)
        return text


def check_screen(screen: Optional[Sequence[int]], who: str) -> Optional[Screen]:
    if screen is None:
        return None
    try:
        w, h = screen
    except (TypeError, ValueError):
        raise ConfigError(f"{who}: screen must be (width, height), got {screen!r}") from None
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (w, h)):
        raise ConfigError(f"{who}: screen must be two positive integers (width, height), got {screen!r}")
    return (w, h)


# ---- numbers --------------------------------------------------------------------------------------
def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def tidy(value: Number) -> Number:
    """A computed coordinate: ints stay ints, floats are rounded to 3 decimals (int if whole)."""
    if isinstance(value, int):
        return value
    r = round(value, 3)
    return int(r) if float(r).is_integer() else r


def mid(a: Number, b: Number) -> Number:
    """Centre of [a, b], exact (an int when the sum of two ints is even)."""
    if isinstance(a, int) and isinstance(b, int) and (a + b) % 2 == 0:
        return (a + b) // 2
    return (a + b) / 2


def as_point(value: Any, what: str, dialect: DialectBase, text: str) -> tuple[Number, Number]:
    """``[x, y]`` or a box ``[x1, y1, x2, y2]`` (its centre) -> (x, y)."""
    if isinstance(value, (list, tuple)) and len(value) in (2, 4) and all(is_number(v) for v in value):
        if len(value) == 2:
            return value[0], value[1]
        return mid(value[0], value[2]), mid(value[1], value[3])
    raise dialect.error(f"{what} must be a point [x, y] or a box [x1, y1, x2, y2] of numbers, got {value!r}",
                        text)


def same_number(a: Number, b: Number) -> bool:
    return a == b and type(a) is type(b)


# ---- text extraction ------------------------------------------------------------------------------
_FENCE = re.compile(r"```(?:[ \t]*([\w+.-]+)[ \t]*\n)?(.*?)```", re.S)


@dataclass(frozen=True)
class Fenced:
    lang: str
    body: str


def fenced_blocks(text: str) -> list[Fenced]:
    """Markdown code blocks (```lang\\n...``` or ```inline```), bodies stripped."""
    out = []
    for m in _FENCE.finditer(text):
        lang, body = (m.group(1) or ""), m.group(2).strip()
        if not body and lang:  # "```DONE\n```": the word was the body, not a language tag
            lang, body = "", lang
        out.append(Fenced(lang.lower(), body))
    return out


def after_last(text: str, marker: str) -> Optional[str]:
    i = text.rfind(marker)
    return None if i < 0 else text[i + len(marker):]


def between(text: str, start: str, end: str) -> Optional[str]:
    """Content of the last ``start ... end`` pair (e.g. ``<answer>...</answer>``)."""
    i = text.rfind(start)
    if i < 0:
        return None
    j = text.find(end, i + len(start))
    return text[i + len(start):] if j < 0 else text[i + len(start):j]


# ---- safe call parsing ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    """One parsed call ``owner.name(*args, **kwargs)`` with literal arguments."""

    name: str
    owner: Optional[str] = None
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def qualname(self) -> str:
        return f"{self.owner}.{self.name}" if self.owner else self.name


_STATEMENT_NAMES = {
    ast.Import: "import statement", ast.ImportFrom: "import statement", ast.Assign: "variable assignment",
    ast.AugAssign: "variable assignment", ast.AnnAssign: "variable assignment", ast.For: "for loop",
    ast.While: "while loop", ast.If: "if statement", ast.With: "with statement", ast.Try: "try statement",
    ast.FunctionDef: "function definition", ast.AsyncFunctionDef: "function definition",
    ast.ClassDef: "class definition", ast.Return: "return statement", ast.Delete: "del statement",
    ast.Global: "global statement", ast.Nonlocal: "nonlocal statement", ast.Raise: "raise statement",
    ast.Assert: "assert statement", ast.Pass: "pass statement",
}


def _describe_expr(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return f"the variable {node.id!r}"
    if isinstance(node, ast.Call):
        return "a function call"
    if isinstance(node, ast.Attribute):
        return "an attribute access"
    if isinstance(node, ast.Starred):
        return "*args"
    return f"a {type(node).__name__} expression"


def _literal(node: ast.AST, where: str, dialect: DialectBase, text: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        raise dialect.error(f"{where} must be a literal (number, string, list), got {_describe_expr(node)}",
                            text) from None


def _call_from_node(node: ast.Call, dialect: DialectBase, text: str) -> Call:
    func = node.func
    if isinstance(func, ast.Name):
        owner, name = None, func.id
    elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        owner, name = func.value.id, func.attr
    else:
        raise dialect.error(f"unsupported callee ({_describe_expr(func)}); expected a plain function call", text)
    label = f"{owner}.{name}" if owner else name
    args = tuple(_literal(a, f"argument {i + 1} of {label}()", dialect, text) for i, a in enumerate(node.args))
    kwargs: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise dialect.error(f"**kwargs are not allowed in {label}()", text)
        if kw.arg in kwargs:
            raise dialect.error(f"argument {kw.arg!r} given twice in {label}()", text)
        kwargs[kw.arg] = _literal(kw.value, f"argument {kw.arg}= of {label}()", dialect, text)
    return Call(name, owner, args, kwargs)


def parse_calls(code: str, dialect: DialectBase, text: str) -> list[Call]:
    """Parse Python-like source made only of call statements with literal arguments.

    Comments and blank lines are ignored. Anything else (imports, assignments, loops, calls as
    arguments, names) raises an ActionParseError naming the construct.
    """
    code = code.strip()
    if not code:
        raise dialect.error("empty action", text)
    if len(code) > MAX_ACTION_CHARS:
        raise dialect.error(f"action is {len(code)} characters long; the limit is {MAX_ACTION_CHARS}", text[:200])
    try:
        tree = ast.parse(code, mode="exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise dialect.error(f"not a valid call ({type(exc).__name__}): {code[:120]!r}", text) from None
    calls = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            calls.append(_call_from_node(stmt.value, dialect, text))
            continue
        what = _STATEMENT_NAMES.get(type(stmt))
        if what is None:
            what = _describe_expr(stmt.value) if isinstance(stmt, ast.Expr) else type(stmt).__name__
        raise dialect.error(f"unsupported construct: {what} (only calls with literal arguments are allowed)", text)
    if not calls:
        raise dialect.error("no action call found", text)
    return calls


def single_call(code: str, dialect: DialectBase, text: str) -> Call:
    calls = parse_calls(code, dialect, text)
    if len(calls) > 1:
        raise dialect.error(f"one action per step, got {len(calls)} calls", text)
    return calls[0]


def bind(call: Call, params: Sequence[str], required: Sequence[str], dialect: DialectBase, text: str,
         aliases: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """Map positional and keyword arguments of ``call`` onto ``params`` (like a Python signature)."""
    if len(call.args) > len(params):
        raise dialect.error(f"{call.qualname}() takes at most {len(params)} positional argument(s), "
                            f"got {len(call.args)}", text)
    out = dict(zip(params, call.args))
    for key, value in call.kwargs.items():
        key = (aliases or {}).get(key, key)
        if key not in params:
            raise dialect.error(f"{call.qualname}() got an unsupported argument {key!r}; "
                                f"supported: {', '.join(params) or 'none'}", text)
        if key in out:
            raise dialect.error(f"{call.qualname}() got argument {key!r} twice", text)
        out[key] = value
    missing = [p for p in required if p not in out]
    if missing:
        raise dialect.error(f"{call.qualname}() is missing argument(s) {', '.join(missing)}", text)
    return out


# ---- JSON -----------------------------------------------------------------------------------------
def load_json_object(src: str, dialect: DialectBase, text: str) -> Any:
    """Parse a JSON value; falls back to a Python literal for single-quoted dicts."""
    src = src.strip()
    if len(src) > MAX_ACTION_CHARS:
        raise dialect.error(f"action is {len(src)} characters long; the limit is {MAX_ACTION_CHARS}", text[:200])
    try:
        return json.loads(src)
    except (ValueError, RecursionError):
        pass
    try:
        return ast.literal_eval(src)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        raise dialect.error(f"not valid JSON: {src[:120]!r}", text) from None


def first_json_object(src: str, dialect: DialectBase, text: str) -> Any:
    """The first ``{...}`` object embedded in free text (e.g. after ``Action:``)."""
    start = src.find("{")
    if start < 0:
        raise dialect.error("no JSON object found", text)
    if len(src) - start > MAX_ACTION_CHARS:
        raise dialect.error(f"action is too long; the limit is {MAX_ACTION_CHARS} characters", text[:200])
    try:
        value, _ = json.JSONDecoder().raw_decode(src[start:])
        return value
    except (ValueError, RecursionError):
        pass
    end = src.find("}", start)  # single-quoted, flat dicts as AndroidWorld agents sometimes write
    return load_json_object(src[start:end + 1] if end >= 0 else src[start:], dialect, text)


# ---- strings and keys -----------------------------------------------------------------------------
def py_str(value: str) -> str:
    """A double-quoted Python string literal (JSON syntax, which Python reads back unchanged).

    Backticks are written ``\\u0060`` so a printed action never contains a ``` fence.
    """
    return json.dumps(value, ensure_ascii=False).replace("`", "\\u0060")


def json_dumps(value: Any) -> str:
    """Compact-ish JSON for an action dict, backticks escaped as in :func:`py_str`."""
    return json.dumps(value, ensure_ascii=False).replace("`", "\\u0060")


def call_or_extract(dialect: DialectBase, text: str, extract: Any) -> Call:
    """The single call that is the whole text, else the one in ``extract(text)`` (a fenced block...)."""
    try:
        return single_call(text, dialect, text)
    except ActionParseError as whole:
        src = extract(text)
        if src is None or src.strip() == text.strip():
            raise whole from None
        return single_call(src, dialect, text)


def py_single_quoted(value: str) -> str:
    """A single-quoted Python string literal, as UI-TARS writes ``content='...'``."""
    out = []
    for ch in value:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "'":
            out.append("\\'")
        elif ch == "\n":
            out.append("\\n")
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        else:
            out.append(repr(ch)[1:-1])
    return "'" + "".join(out) + "'"


def split_combo(combo: str) -> Optional[tuple[str, ...]]:
    """``"Control+Shift+t"`` -> keys; ``None`` when ``combo`` is a single key (``"Enter"``, ``"+"``)."""
    if combo.endswith("++"):
        head = combo[:-2]
        keys = (head.split("+") if head else []) + ["+"]
    else:
        keys = combo.split("+")
    if len(keys) < 2:
        return None
    keys = [k.strip() if k != "+" else k for k in keys]
    return tuple(keys) if all(keys) else None


def join_combo(keys: Sequence[str], dialect: DialectBase) -> str:
    """Keys -> ``"Control+Shift+t"``; refuses keys that would not split back the same way."""
    for i, k in enumerate(keys):
        plus_ok = k == "+" and i == len(keys) - 1
        if not k or k != k.strip() or ("+" in k and not plus_ok):
            raise dialect.error(f"cannot write key {k!r} inside a '+'-joined key combination")
    return "+".join(keys)


def parse_combo(combo: str) -> A.Action:
    """A key combination string -> Hotkey, or Press for a single key."""
    keys = split_combo(combo)
    return A.Hotkey(keys=keys) if keys else A.Press(key=combo)


def wheel_clicks(px: Number, step: Number) -> int:
    """Pixels -> whole wheel clicks (at least one when ``px`` is not zero)."""
    if px == 0:
        return 0
    n = round(px / step)
    return n if n != 0 else (1 if px > 0 else -1)
