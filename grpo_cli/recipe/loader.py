"""Load a recipe: YAML through omegaconf, `extends` chains, env interpolation, CLI overrides.

The resolved recipe (after inheritance, interpolation and overrides) is what gets
validated, printed with `--print`, and saved with every run.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel, ValidationError

from grpo_cli.errors import GrpoError, Problem, RecipeError
from grpo_cli.recipe.hints import unknown_key_hint
from grpo_cli.recipe.schema import Recipe

_OVERRIDE = re.compile(r"^(?P<key>[A-Za-z_][A-Za-z0-9_]*(?:(?:\.[A-Za-z0-9_]+)|(?:\[\d+\]))*)=(?P<value>.*)$",
                       re.DOTALL)


def _read_yaml(path: Path) -> DictConfig:
    if not path.exists():
        raise GrpoError("recipe file not found", where=str(path),
                        fix="Check the path; the bundled recipes are in recipes/ (e.g. recipes/demo.yaml).")
    if path.is_dir():
        raise GrpoError("is a directory, not a recipe file", where=str(path), fix="Give a .yaml file.")
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        raise GrpoError("the recipe file is empty", where=str(path),
                        fix="Start from one of the bundled recipes, e.g. recipes/demo.yaml.")
    try:
        cfg = OmegaConf.create(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise GrpoError(f"YAML syntax error: {problem}", where=where,
                        fix="Fix the indentation or quoting at that line "
                            "(strings with ':' or '#' need quotes).") from None
    except OmegaConfBaseException as exc:
        raise GrpoError(f"cannot be read as a recipe: {exc}", where=str(path)) from None
    if not isinstance(cfg, DictConfig):
        raise GrpoError("the top level must be a mapping of sections (model, data, rewards, ...)",
                        where=str(path), fix="See docs/recipes.md for the layout.")
    return cfg


def _load_chain(path: Path, stack: tuple[Path, ...]) -> DictConfig:
    """Load `path` and everything it `extends`, base first; reject cycles."""
    path = path.resolve()
    if path in stack:
        chain = " -> ".join(str(p.name) for p in (*stack, path))
        raise GrpoError(f"circular `extends`: {chain}", where=str(stack[-1]),
                        fix="Remove the `extends` that points back to a recipe already in the chain.")
    cfg = _read_yaml(path)
    parents = cfg.pop("extends", None)
    if parents is None:
        return cfg
    if isinstance(parents, str):
        parents = [parents]
    elif not (OmegaConf.is_list(parents) and all(isinstance(p, str) for p in parents)):
        raise GrpoError("`extends` must be a path or a list of paths", where=f"{path}: extends")
    merged = OmegaConf.create({})
    for parent in parents:
        parent_path = (path.parent / parent).expanduser()
        if not parent_path.exists():
            raise GrpoError(f"`extends: {parent}` points to a missing file ({parent_path})", where=str(path),
                            fix="Paths in `extends` are relative to the recipe that names them.")
        merged = OmegaConf.merge(merged, _load_chain(parent_path, (*stack, path)))
    return OmegaConf.merge(merged, cfg)


def parse_overrides(overrides: list[str]) -> DictConfig:
    """Turn `section.key=value` strings into a config; reject anything else with a clear error."""
    for item in overrides:
        if not _OVERRIDE.match(item):
            raise GrpoError(
                f"override {item!r} is not of the form section.key=value", where="command line",
                fix="Write e.g. `training.learning_rate=1e-5` or `model.lora.r=8` (no spaces around '=').",
            )
    try:
        return OmegaConf.from_dotlist(list(overrides))
    except (OmegaConfBaseException, yaml.YAMLError) as exc:
        raise GrpoError(f"cannot parse overrides: {exc}", where="command line") from None


def resolve_recipe(path: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """The recipe as a plain dict: extends merged, overrides applied, ${...} resolved."""
    path = Path(path)
    cfg = _load_chain(path, ())
    if overrides:
        cfg = OmegaConf.merge(cfg, parse_overrides(overrides))
    try:
        data = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "") or ""
        raise GrpoError(f"cannot resolve an interpolation: {getattr(exc, 'msg', exc)}",
                        where=f"{path}: {key}" if key else str(path),
                        fix="Set the environment variable or give a default: ${oc.env:NAME,default}.") from None
    assert isinstance(data, dict)
    return {str(k): v for k, v in data.items()}


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    """Load, resolve and validate a recipe file. Raises GrpoError/RecipeError on bad input."""
    data = resolve_recipe(path, overrides)
    recipe = validate_recipe(data, source=str(path))
    recipe._base_dir = Path(path).resolve().parent
    recipe._source = str(path)
    return recipe


def validate_recipe(data: dict[str, Any], *, source: str = "") -> Recipe:
    """Validate a resolved recipe dict, turning pydantic's errors into located, fixable problems."""
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(problems_from_validation(exc), source=source) from None


def _fmt_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class that owns the key at `loc` (to list its valid fields)."""
    current: Any = Recipe
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(part)
        if field is None:
            return None
        current = _unwrap_model(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _unwrap_model(arg)
        if found is not None:
            return found
    return None


def problems_from_validation(exc: ValidationError) -> list[Problem]:
    """One Problem per pydantic error, with the recipe key path, the value given and a fix."""
    problems: list[Problem] = []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if p not in ("function-after", "function-before"))
        kind = err["type"]
        ctx = err.get("ctx") or {}
        if kind == "trl_fields":
            for key, what, fix in ctx.get("problems", []):
                problems.append(Problem(_fmt_loc((*loc, key)), what, fix))
            continue
        where = _fmt_loc(loc)
        if kind == "extra_forbidden":
            owner = _model_at(loc[:-1])
            names = list(owner.model_fields) if owner else []
            problems.append(Problem(where, "unknown key", unknown_key_hint(str(loc[-1]), names, _fmt_loc(loc[:-1]))))
            continue
        if kind == "missing":
            problems.append(Problem(where, "is required but missing", "See docs/recipes.md for this section."))
            continue
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        value = err.get("input")
        shown = "" if isinstance(value, dict) or kind.startswith("value_error") else f" (got {value!r})"
        problems.append(Problem(where or "recipe", f"{msg}{shown}"))
    return problems


def dump_yaml(data: dict[str, Any]) -> str:
    """The resolved recipe as YAML, as printed by --print and saved with each run."""
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
