"""``guigym train PIPELINE.yaml``: several training stages run in order, each starting from the
model the previous one wrote.

MobileRL (Xu et al. 2025, sec. 2.1, fig. 2) trains in three stages -- reasoning-free SFT on
expert demonstrations, reasoning SFT on the same demonstrations with annotated reasoning, then
AdaGRPO (sec. 2.2) -- each initialised from the previous one's weights; WebRL and DART also start
RL from a supervised model. A pipeline recipe writes such a chain down once::

    pipeline:
      name: mobilerl_miniwob_tiny
      dir: runs/mobilerl_miniwob_tiny         # stage k runs in <dir>/<stage name>
      stages:
        - name: sft_reasoning_free
          config: {stage: sft, ...}           # an inline recipe (any `guigym train` recipe), and/or
        - name: sft_reasoning
          recipe: other.yaml                  # a recipe file (relative to this file), `config`
          config: {...}                       #   deep-merged over it,
          set: ["run.iterations=2"]           #   then `key=value` overrides
        - name: adagrpo
          recipe: adagrpo_miniwob_tiny.yaml

What the runner fills in for stage k (the recipe must leave them unset):

* ``run.dir`` = ``<pipeline.dir>/<stage name>``; ``run.name`` = ``<pipeline.name>-<stage name>``
  (a stage's own ``run.dir``/``run.name`` are refused: the runner must know where each one is);
* ``model.path`` = stage k-1's output model for k >= 1 (stage 0 keeps its own ``model``);
* the output model of a stage: an SFT stage's ``sft.output_dir`` (default ``<run.dir>/model``); an
  RL stage's ``<run.dir>/model-<iterations>`` (the runner sets ``run.save_model_every`` to
  ``run.iterations`` when it is 0).

Any string value ``${pipeline_dir}`` in a stage is replaced by ``pipeline.dir`` (e.g. a later
stage reading an earlier stage's demonstrations, ``${pipeline_dir}/sft_reasoning_free/demos.jsonl``,
or a DART experience pool reading its expert trajectories).

Resume, per stage: a stage is *finished* when its ``summary.json`` and its output model exist; a
rerun of the pipeline skips it (after checking that its resolved config is the one it ran with,
``<stage dir>/stage.json``; a changed config is an error naming the stage, never silently stale
weights). Any other stage runs with ``resume=True``: one that was interrupted continues from its
newest checkpoint (and an SFT stage's demos.jsonl / annotations.jsonl, an RL stage's stored
rollouts), one never started starts. So a pipeline killed anywhere is rerun with the same command.

Before any stage runs, every unfinished stage's servers' bearer tokens must be in the environment
(:func:`preflight`). ``--check`` validates every stage's config (and the chain: e.g. an RL stage after reasoning SFT
must parse ``Thought: ...`` replies) before anything runs, and prints each stage's resolved recipe
and precision plan. ``--set`` overrides address a stage by name (``adagrpo.optim.learning_rate=1e-5``)
or the pipeline section (``pipeline.dir=/tmp/x``).
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from guigym.core.errors import ConfigError
from guigym.train.config import RunConfig, TrainConfig, apply_overrides, from_dict, parse_override

#: keys of a stage entry
STAGE_KEYS = ("name", "recipe", "config", "set")
#: keys of the pipeline section
PIPELINE_KEYS = ("name", "dir", "stages")


@dataclass
class Stage:
    """One resolved stage: its name, validated config, and the model directory it writes."""

    name: str
    cfg: TrainConfig
    output: Path

    @property
    def dir(self) -> Path:
        return Path(self.cfg.run.dir)

    def finished(self) -> bool:
        """True when the stage ran to its end: summary.json and the output model are written."""
        return (self.dir / "summary.json").is_file() and (self.output / "config.json").is_file()

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.cfg.to_dict(), sort_keys=True).encode()).hexdigest()


def is_pipeline(path: Union[str, Path]) -> bool:
    """True when the YAML file at ``path`` is a pipeline recipe (a top-level ``pipeline`` key)."""
    import yaml

    p = Path(path)
    if not p.is_file():
        return False
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError:
        return False
    return isinstance(data, dict) and "pipeline" in data


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` deep-merged into a copy of ``base`` (mappings merge, everything else replaces)."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def _substitute(obj: Any, values: dict[str, str]) -> Any:
    if isinstance(obj, str):
        for k, v in values.items():
            obj = obj.replace("${" + k + "}", v)
        return obj
    if isinstance(obj, dict):
        return {k: _substitute(v, values) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_substitute(v, values) for v in obj]
    return obj


def output_model(cfg: TrainConfig) -> Path:
    """The from_pretrained directory a stage leaves for the next one (see the module docstring)."""
    if cfg.stage == "sft":
        return Path(cfg.sft.output_dir) if cfg.sft.output_dir else Path(cfg.run.dir) / "model"
    return Path(cfg.run.dir) / f"model-{cfg.run.iterations:06d}"


def load_pipeline(path: Union[str, Path], overrides: Sequence[str] = ()) -> list[Stage]:
    """Read a pipeline recipe and resolve every stage (module docstring); every stage's config is
    validated here, so an error in the last stage is found before the first one runs."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the pipeline recipe: {exc}") from None
    extra = sorted(set(data) - {"pipeline"})
    if extra:
        raise ConfigError(f"{path}: a pipeline recipe has only the `pipeline` section; unknown: {', '.join(extra)} "
                          f"(put stage settings under pipeline.stages[].config)")
    pipe = data["pipeline"]
    if not isinstance(pipe, dict):
        raise ConfigError(f"{path}: pipeline: must be a mapping with {', '.join(PIPELINE_KEYS)}")
    by_stage: dict[str, list[str]] = {}
    for item in overrides:
        keys, _ = parse_override(item)
        if keys[0] == "pipeline":
            apply_overrides(data, [item])
        else:
            by_stage.setdefault(keys[0], []).append(item.split(".", 1)[1] if "." in item.split("=", 1)[0] else item)
    for k in pipe:
        if k not in PIPELINE_KEYS:
            raise ConfigError(f"{path}: pipeline.{k}: unknown key; allowed: {', '.join(PIPELINE_KEYS)}")
    for k in ("name", "dir"):
        if not isinstance(pipe.get(k), str) or not pipe[k]:
            raise ConfigError(f"{path}: pipeline.{k}: required (a non-empty string)")
    stages_in = pipe.get("stages")
    if not isinstance(stages_in, list) or not stages_in:
        raise ConfigError(f"{path}: pipeline.stages: a non-empty list of stages is required")
    names = [s.get("name") if isinstance(s, dict) else None for s in stages_in]
    unknown = sorted(set(by_stage) - set(n for n in names if n))
    if unknown:
        raise ConfigError(f"--set: {', '.join(unknown)} is not a stage of {path} (stages: {', '.join(map(str, names))}; "
                          f"or pipeline.<key>)")
    root = Path(pipe["dir"])
    stages: list[Stage] = []
    for i, entry in enumerate(stages_in):
        where = f"{path}: pipeline.stages[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: must be a mapping with {', '.join(STAGE_KEYS)}")
        bad = sorted(set(entry) - set(STAGE_KEYS))
        if bad:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(bad)}; allowed: {', '.join(STAGE_KEYS)}")
        name = entry.get("name")
        if not isinstance(name, str) or not name or "/" in name or name in {s.name for s in stages}:
            raise ConfigError(f"{where}.name: a unique name without '/' is required, got {name!r}")
        where = f"{path}: stage {name!r}"
        cfg: dict[str, Any] = {}
        if entry.get("recipe"):
            rp = Path(entry["recipe"])
            rp = rp if rp.is_absolute() or rp.is_file() else path.parent / rp
            if not rp.is_file():
                raise ConfigError(f"{where}.recipe: {entry['recipe']!r} not found (paths are relative to {path.parent})")
            cfg = yaml.safe_load(rp.read_text()) or {}
        cfg = _merge(cfg, entry.get("config") or {})
        if not cfg:
            raise ConfigError(f"{where}: give a `recipe` file or an inline `config`")
        sets = list(entry.get("set") or []) + by_stage.get(name, [])
        own_run = dict((entry.get("config") or {}).get("run") or {})
        own_run.update({parse_override(x)[0][1]: 1 for x in sets if parse_override(x)[0][:1] == ["run"]
                        and len(parse_override(x)[0]) > 1})
        for key in ("dir", "name"):  # a recipe file's own run.dir/name are replaced; a stage's own are refused
            if key in own_run:
                raise ConfigError(f"{where}: run.{key} is set by the pipeline (<pipeline.dir>/<stage name>); drop it")
        cfg = apply_overrides(cfg, sets)
        cfg = _substitute(cfg, {"pipeline_dir": str(root)})
        run = cfg.setdefault("run", {})
        run["dir"] = str(root / name)
        run["name"] = f"{pipe['name']}-{name}"
        if stages:
            if (cfg.get("model") or {}).get("path"):
                raise ConfigError(f"{where}: model.path is the previous stage's output ({stages[-1].output}); drop it")
            cfg.setdefault("model", {})["path"] = str(stages[-1].output)
        if cfg.get("stage", "rl") == "rl" and not run.get("save_model_every"):
            run["save_model_every"] = run.get("iterations", RunConfig.model_fields["iterations"].default)
        tc = from_dict(cfg, source=where)
        if tc.stage == "rl" and tc.run.iterations % tc.run.save_model_every:
            raise ConfigError(f"{where}: run.save_model_every ({tc.run.save_model_every}) must divide run.iterations "
                              f"({tc.run.iterations}) so the stage's last model is written for the next stage")
        stages.append(Stage(name, tc, output_model(tc)))
    check_chain(stages, str(path))
    return stages


def check_chain(stages: Sequence[Stage], source: str) -> None:
    """Errors a stage's own validation cannot see: an RL stage after reasoning SFT must read the
    replies that stage trained (``Thought: ...\\nAction: ...``: free decoding, dialect ``thought``)."""
    reasoning = None
    for s in stages:
        c = s.cfg
        if c.stage == "sft" and c.sft.reply_template.strip() != "$action":
            reasoning = s.name
        elif c.stage == "rl" and reasoning is not None:
            dialect = c.env.kwargs.get("dialect", "canonical")
            if c.rollout.constrained:
                raise ConfigError(f"{source}: stage {s.name!r}: rollout.constrained must be false after the reasoning "
                                  f"SFT stage {reasoning!r} (its replies are 'Thought: ... Action: ...', not a candidate)")
            if dialect not in ("thought", "uitars"):
                raise ConfigError(f"{source}: stage {s.name!r}: env.kwargs.dialect is {dialect!r}, which cannot parse the "
                                  f"'Thought: ...\\nAction: ...' replies stage {reasoning!r} trained; set dialect: thought")


# ---- running ------------------------------------------------------------------------------------
def _stage_record(stage: Stage) -> Path:
    return stage.dir / "stage.json"


def _check_same_config(stage: Stage) -> None:
    rec = _stage_record(stage)
    if rec.is_file():
        old = json.loads(rec.read_text()).get("digest")
        if old != stage.digest():
            raise ConfigError(f"stage {stage.name!r}: {stage.dir} was run with a different config (stage.json); "
                              f"remove that directory to rerun the stage, or give the pipeline another dir")


def preflight(stages: Sequence[Stage]) -> None:
    """Before any stage runs: every unfinished stage's config matches its stage.json and the
    bearer tokens its servers need (annotator, HTTP rollout engine) are in the environment, so a
    missing token stops the pipeline now, not after hours of earlier stages."""
    for s in stages:
        _check_same_config(s)
        if s.finished():
            continue
        c = s.cfg
        need = []
        if c.stage == "sft" and c.sft.annotator is not None and c.sft.annotator.token_env:
            need.append(("sft.annotator.token_env", c.sft.annotator.token_env))
        if c.rollout.engine == "http" and (c.stage == "rl" or c.eval.enabled):
            need.append(("rollout.token_env", c.rollout.token_env))
        for key, var in need:
            if not os.environ.get(var):
                raise ConfigError(f"stage {s.name!r}: {key}: environment variable {var} is not set")


def run_pipeline(stages: Sequence[Stage], runner: Callable[[TrainConfig, bool], dict[str, Any]],
                 log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the stages in order (module docstring); returns {stage name: summary}. ``runner(cfg,
    resume)`` trains one stage (``guigym train`` passes :func:`guigym.train.main.run`, which sits
    above this module)."""
    preflight(stages)
    out: dict[str, Any] = {}
    for k, stage in enumerate(stages):
        _check_same_config(stage)
        if stage.finished():
            log(f"pipeline: stage {k + 1}/{len(stages)} {stage.name!r} finished earlier ({stage.output}); skipped")
            out[stage.name] = json.loads((stage.dir / "summary.json").read_text())
            continue
        if k and not stages[k - 1].finished():
            raise RuntimeError(f"pipeline: stage {stages[k - 1].name!r} ended without its output model "
                               f"{stages[k - 1].output}")
        stage.dir.mkdir(parents=True, exist_ok=True)
        rec = _stage_record(stage)
        if not rec.is_file():
            tmp = rec.with_suffix(".tmp")
            tmp.write_text(json.dumps({"name": stage.name, "digest": stage.digest(), "config": stage.cfg.to_dict()},
                                      indent=1))
            os.replace(tmp, rec)
        log(f"pipeline: stage {k + 1}/{len(stages)} {stage.name!r} ({stage.cfg.stage}) in {stage.dir}"
            + (f", from {stage.cfg.model.path}" if k else ""))
        out[stage.name] = runner(stage.cfg, True)  # resume=True: continues an interrupted stage, starts a new one
        if not stage.output.is_dir():
            raise RuntimeError(f"pipeline: stage {stage.name!r} finished without writing {stage.output}")
    log(f"pipeline: all {len(stages)} stages finished; final model {stages[-1].output}")
    return out


def check_text(stages: Sequence[Stage]) -> str:
    """``--check`` output: each stage's resolved recipe and precision plan."""
    import yaml

    from guigym.train.parallel import format_plan

    lines = []
    first = stages[0].cfg.model
    for k, s in enumerate(stages):
        lines.append(f"# ---- stage {k + 1}/{len(stages)}: {s.name} ({s.cfg.stage}) -> {s.output}")
        lines.append(yaml.safe_dump(s.cfg.to_dict(), sort_keys=False))
        plan_cfg = s.cfg
        if k and not (Path(s.cfg.model.path or "") / "config.json").is_file():
            # the previous stage's model is not written yet: same architecture as the first stage's
            plan_cfg = s.cfg.model_copy(update={"model": s.cfg.model.model_copy(update={"path": first.path,
                                                                                        "tiny": first.tiny})})
        lines.append("# precision and sharding plan")
        lines.append(format_plan(plan_cfg))
    return "\n".join(lines)


def cli(args: Any, runner: Callable[[TrainConfig, bool], dict[str, Any]]) -> int:
    """``guigym train PIPELINE.yaml [--check] [--set ...]`` (called by guigym.train.main.main)."""
    stages = load_pipeline(args.recipe, args.overrides)
    if args.check:
        print(check_text(stages))
        print(f"# pipeline: {len(stages)} stages valid: " + " -> ".join(f"{s.name} ({s.cfg.stage})" for s in stages))
        return 0
    run_pipeline(stages, runner, log=lambda m: print(m, flush=True))
    return 0
