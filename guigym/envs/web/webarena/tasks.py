"""WebArena task configs, loaded unmodified.

The format is WebArena's ``config_files/test.raw.json`` (a JSON list of 812 task objects, Zhou et
al. 2024, "WebArena", ICLR) and VisualAgentBench's ``test_webarena_lite.raw.json`` (165 tasks of the
same shape plus ``old_task_id``, Liu et al. 2024). A file holding one task object (WebArena's
generated ``config_files/<id>.json``) loads too; ``.gz`` files are read transparently.

Site URLs appear in the raw files as placeholders (``__SHOPPING__``, ...). WebArena's
``scripts/generate_test_data.py`` substitutes them textually; :func:`resolve_sites` does the same on
a loaded config, from an explicit mapping or from BrowserGym's environment variables
(``WA_SHOPPING``, ...). Loading never changes a field: the raw dict is kept in
:attr:`WebArenaConfig.raw`.

Everything the evaluators interpret is validated here, so a malformed file fails at load time with
a :class:`~guigym.core.errors.TaskSpecError` naming the file, the task and the field, not in the
middle of an episode.
"""
from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from guigym.core.errors import ConfigError, TaskSpecError
from guigym.core.task import Task
from guigym.envs.web.webarena.funcs import parse_func

#: placeholder -> (site key used in ``sites`` / gym kwargs, environment variable BrowserGym reads)
PLACEHOLDERS: dict[str, tuple[str, str]] = {
    "__SHOPPING__": ("shopping", "WA_SHOPPING"),
    "__SHOPPING_ADMIN__": ("shopping_admin", "WA_SHOPPING_ADMIN"),
    "__REDDIT__": ("reddit", "WA_REDDIT"),
    "__GITLAB__": ("gitlab", "WA_GITLAB"),
    "__WIKIPEDIA__": ("wikipedia", "WA_WIKIPEDIA"),
    "__MAP__": ("map", "WA_MAP"),
    "__HOMEPAGE__": ("homepage", "WA_HOMEPAGE"),
}
SITE_KEYS: tuple[str, ...] = tuple(site for site, _ in PLACEHOLDERS.values())
# upper-case only: the lower-case ``__last_url__`` / ``__page__`` belong to program_html and are
# filled at evaluation time (funcs.py)
PLACEHOLDER_RE = re.compile(r"__[A-Z][A-Z_]*?__")

#: separator of several start tabs in ``start_url`` (WebArena browser_env/envs.py)
TAB_SEPARATOR = " |AND| "
#: separator of alternatives in reference_url / required_contents (WebArena evaluators.py)
OR_SEPARATOR = " |OR| "

EVAL_TYPES = ("string_match", "url_match", "program_html")
#: reference_answers keys: WebArena's three plus WebArena-Lite's additions
#: (VisualAgentBench VAB-WebArena-Lite/new/evaluators.py, StringEvaluator.__call__)
REFERENCE_ANSWER_KEYS = ("exact_match", "must_include", "fuzzy_match",
                         "must_exclude", "one_of", "required_values")
#: program_html required_contents keys: WebArena's two plus Lite's additions
#: (same file, HTMLContentExactEvaluator.__call__)
REQUIRED_CONTENT_KEYS = ("exact_match", "must_include", "must_exclude", "required_values", "fuzzy_match")



def _check_str_list(value: Any, field: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{field} must be a list of strings, got {value!r}")
    return value


class ProgramHtmlTarget(BaseModel):
    """One ``eval.program_html`` entry: which page, which element, what it must contain.

    ``url``: ``"last"`` (the page the agent ended on), an absolute URL, or ``func:helper(...)``
    (see funcs.py). ``locator``: ``""`` (the whole page HTML), a JS expression starting with
    ``document.`` or ``[...document.``, WebArena-Lite's ``lambda:``, or ``func:helper(...)``.
    ``required_contents``: exactly one of :data:`REQUIRED_CONTENT_KEYS`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    locator: str
    required_contents: dict[str, Any]
    prep_actions: list[str] = Field(default_factory=list)

    @field_validator("url")
    @classmethod
    def _func_url_parses(cls, value: str) -> str:
        if value.startswith("func"):
            parse_func(value, "func")  # unknown helper or non-literal arguments fail at load time
        return value

    @field_validator("locator")
    @classmethod
    def _known_locator(cls, value: str) -> str:
        if value.strip() and not value.startswith(("document.", "[...document.", "func:", "lambda:")):
            raise ValueError(f"unknown locator kind {value[:60]!r}: expected '', 'document.', "
                             "'[...document.', 'lambda:' or 'func:'")
        if value.startswith("func:"):
            parse_func(value, "func")
        return value

    @field_validator("required_contents")
    @classmethod
    def _one_known_key(cls, value: dict[str, Any]) -> dict[str, Any]:
        if len(value) != 1:
            raise ValueError(f"must have exactly one key, got {sorted(value)}")
        (key, spec), = value.items()
        if key not in REQUIRED_CONTENT_KEYS:
            raise ValueError(f"unknown key {key!r}; known: {list(REQUIRED_CONTENT_KEYS)}")
        if key == "exact_match":
            if not isinstance(spec, str):
                raise ValueError(f"exact_match must be a string, got {spec!r}")
        else:
            _check_str_list(spec, key)
        return value


class WebArenaEval(BaseModel):
    """The ``eval`` object. Annotation-only fields (``reference_answer_raw_annotation``,
    ``annotation_note``, ...) are kept as extras and never read by the evaluators."""

    model_config = ConfigDict(extra="allow", frozen=True)

    eval_types: list[Literal["string_match", "url_match", "program_html"]] = Field(min_length=1)
    reference_answers: Optional[dict[str, Any]] = None
    reference_url: Optional[str] = ""
    url_note: Optional[Literal["GOLD in PRED", "EXACT"]] = None
    program_html: list[ProgramHtmlTarget] = Field(default_factory=list)
    string_note: Optional[str] = None

    @field_validator("reference_answers")
    @classmethod
    def _known_answers(cls, value: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
        if value is None:
            return value
        for key, spec in value.items():
            if key not in REFERENCE_ANSWER_KEYS:
                raise ValueError(f"unknown key {key!r}; known: {list(REFERENCE_ANSWER_KEYS)}")
            if key == "exact_match":
                if not isinstance(spec, str):
                    raise ValueError(f"exact_match must be a string, got {spec!r}")
            elif key == "fuzzy_match":
                if spec != "N/A":
                    _check_str_list(spec, "fuzzy_match (a list of strings or the string 'N/A')")
            elif key == "must_include" and isinstance(spec, str):
                # WebArena-Lite task 81 has must_include: "yjlou"; the published evaluator asserts a
                # list there and crashes, ours reads one string as a one-item list (evaluators.py)
                pass
            else:
                _check_str_list(spec, key)
        return value

    @model_validator(mode="after")
    def _types_have_specs(self) -> "WebArenaEval":
        if "string_match" in self.eval_types and not self.reference_answers:
            raise ValueError("eval_types has 'string_match' but reference_answers is empty")
        if "url_match" in self.eval_types and not self.reference_url:
            raise ValueError("eval_types has 'url_match' but reference_url is empty")
        if "program_html" in self.eval_types and not self.program_html:
            raise ValueError("eval_types has 'program_html' but program_html is empty")
        return self


class WebArenaConfig(BaseModel):
    """One WebArena task config (all fields of ``test.raw.json``; extras such as Lite's
    ``old_task_id`` are kept). ``raw`` is the dict exactly as it was in the file."""

    model_config = ConfigDict(extra="allow", frozen=True)

    sites: list[Literal["shopping", "shopping_admin", "reddit", "gitlab", "wikipedia", "map", "homepage"]]
    task_id: int = Field(ge=0)
    require_login: bool = False
    storage_state: Optional[str] = None
    start_url: str = Field(min_length=1)
    geolocation: Optional[Any] = None
    intent: str = Field(min_length=1)
    intent_template: str = ""
    intent_template_id: Optional[int] = None
    instantiation_dict: dict[str, Any] = Field(default_factory=dict)
    require_reset: bool = False
    eval: WebArenaEval
    raw: dict[str, Any] = Field(default_factory=dict, exclude=True, repr=False)

    @property
    def start_urls(self) -> list[str]:
        """The start tabs, in order (``start_url`` split on ``' |AND| '``)."""
        return [u.strip() for u in self.start_url.split(TAB_SEPARATOR)]

    def placeholders(self) -> set[str]:
        """Site placeholders (``__SHOPPING__``, ...) used anywhere in the config."""
        return set(PLACEHOLDER_RE.findall(json.dumps(self.raw)))


def _where(source: str, index: Optional[int], loc: Iterable[Any]) -> str:
    parts = [str(p) for p in loc]
    path = ".".join(parts) if parts else "<root>"
    task = f"[{index}]" if index is not None else ""
    return f"{source}{task}: field '{path}'"


def parse_config(data: Any, source: str = "<config>", index: Optional[int] = None) -> WebArenaConfig:
    """Validate one task object; :class:`TaskSpecError` naming ``source[index]`` and the field."""
    if not isinstance(data, dict):
        raise TaskSpecError(f"{source}{'' if index is None else f'[{index}]'}: a task config must be a "
                            f"JSON object, got {type(data).__name__}")
    try:
        return WebArenaConfig.model_validate({**data, "raw": data})
    except ValidationError as exc:
        err = exc.errors()[0]
        raise TaskSpecError(f"{_where(source, index, err['loc'])}: {err['msg']}") from None


def load_configs(path: Union[str, Path]) -> list[WebArenaConfig]:
    """Every task config in ``path`` (a JSON list, or one object; ``.gz`` allowed).

    Task ids must be unique within the file.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TaskSpecError(f"{path}: cannot read WebArena config JSON: {exc}") from None
    items = data if isinstance(data, list) else [data]
    configs = [parse_config(item, str(path), i if isinstance(data, list) else None)
               for i, item in enumerate(items)]
    seen: dict[int, int] = {}
    for i, cfg in enumerate(configs):
        if cfg.task_id in seen:
            raise TaskSpecError(f"{path}[{i}]: field 'task_id': {cfg.task_id} repeats task [{seen[cfg.task_id]}]")
        seen[cfg.task_id] = i
    return configs


def site_urls_from_env(environ: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """Site key -> base URL from BrowserGym's variables (``WA_SHOPPING`` ...); unset ones omitted."""
    environ = os.environ if environ is None else environ
    return {site: environ[var].rstrip("/") for site, var in PLACEHOLDERS.values() if environ.get(var)}


def resolve_sites(config: WebArenaConfig, urls: Optional[Mapping[str, str]] = None,
                  environ: Optional[Mapping[str, str]] = None) -> WebArenaConfig:
    """A copy of ``config`` with every site placeholder replaced by its base URL.

    Args:
        urls: site key (``"shopping"``, ``"shopping_admin"``, ...) -> base URL; wins over the
            environment. Unknown keys raise :class:`ConfigError`.
        environ: where to read ``WA_*`` variables (default ``os.environ``).

    The substitution is textual over every string, as WebArena's generate_test_data.py does.
    A placeholder the task uses but no URL is given for is a :class:`ConfigError` naming the
    variable to set.
    """
    explicit = dict(urls or {})
    unknown = sorted(set(explicit) - set(SITE_KEYS))
    if unknown:
        raise ConfigError(f"site urls: unknown site key(s) {unknown}; known: {list(SITE_KEYS)}")
    merged = {**site_urls_from_env(environ), **{k: v.rstrip("/") for k, v in explicit.items()}}
    missing = [(ph, var) for ph, (site, var) in PLACEHOLDERS.items()
               if ph in config.placeholders() and site not in merged]
    if missing:
        ph, var = missing[0]
        raise ConfigError(f"task {config.task_id} uses {ph} but no URL is set for it: set ${var} "
                          f"or pass urls={{'{PLACEHOLDERS[ph][0]}': ...}}")
    table = {ph: merged[site] for ph, (site, _) in PLACEHOLDERS.items() if site in merged}

    def sub(value: Any) -> Any:
        if isinstance(value, str):
            return PLACEHOLDER_RE.sub(lambda m: table.get(m.group(0), m.group(0)), value)
        if isinstance(value, list):
            return [sub(v) for v in value]
        if isinstance(value, dict):
            return {k: sub(v) for k, v in value.items()}
        return value

    return parse_config(sub(config.raw), source=f"task {config.task_id}")


def task_id(config_task_id: Any, suite: str = "webarena") -> str:
    """guigym's id of a config's ``task_id`` (``12`` -> ``"webarena.12"``): what ``Task.id``,
    ``tasks=[ids]`` and ``guigym eval --tasks`` use."""
    return f"{suite}.{config_task_id}"


def to_task(config: WebArenaConfig, suite: str = "webarena", source: str = "",
            max_steps: int = 30) -> Task:
    """The platform-neutral :class:`~guigym.core.task.Task` for ``config``.

    The raw config travels in ``extra["webarena_config"]`` so the env and the evaluators read the
    native format; ``max_steps`` defaults to WebArena's run.py ``--max_steps 30``.
    """
    return Task(
        id=task_id(config.task_id, suite),
        instruction=config.intent,
        platform="web",
        suite=suite,
        domain="+".join(config.sites),
        evaluator=dict(config.raw.get("eval", {})),
        max_steps=max_steps,
        tags=[f"template:{config.intent_template_id}"] if config.intent_template_id is not None else [],
        source=source,
        extra={"webarena_config": config.raw},
    )
