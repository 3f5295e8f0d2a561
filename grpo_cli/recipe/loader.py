"""Load a recipe: YAML (through omegaconf for `extends` chains, env interpolation, CLI overrides), then validate.

The resolved recipe (after inheritance, interpolation and overrides) is what gets
validated, printed with `--print`, and saved with every run.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from grpo_cli.errors import Problem, RecipeError
from grpo_cli.recipe.hints import unknown_key_hint
from grpo_cli.recipe.marked import refuse_marked, refuse_marked_file
from grpo_cli.recipe.schema import Recipe


def resolve_recipe(path: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """The recipe as a plain dict: extends merged, overrides applied, ${...} resolved.

    A recipe that uses none of these is read without importing OmegaConf (`plain_yaml`), with the same
    result; anything else, and every error, goes through OmegaConf (`resolve`). A recipe `grpo import` marked
    not valid is refused first (`marked`).
    """
    refuse_marked_file(Path(path))
    if not overrides:
        from grpo_cli.recipe.plain_yaml import plain_recipe

        data = plain_recipe(Path(path))
        if data is not None:
            return data
    from grpo_cli.recipe.resolve import resolve_with_omegaconf

    return resolve_with_omegaconf(path, overrides)


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    """Load, resolve and validate a recipe file. Raises GrpoError/RecipeError on bad input."""
    data = resolve_recipe(path, overrides)
    try:
        recipe = validate_recipe(data, source=str(path))
    except RecipeError as exc:
        raise _blame_overrides(exc, overrides or []) from None
    recipe._base_dir = Path(path).resolve().parent
    recipe._source = str(path)
    return recipe


def validate_recipe(data: dict[str, Any], *, source: str = "") -> Recipe:
    """Validate a resolved recipe dict, turning pydantic's errors into located, fixable problems."""
    refuse_marked(data, source)  # a mark that came through `extends`
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(problems_from_validation(exc), source=source) from None


def _override_for(where: str, overrides: list[str]) -> str | None:
    """The command-line override that put the key at `where` into the recipe (the last one wins, as it does)."""
    for item in reversed(overrides):
        key = item.split("=", 1)[0].strip().lstrip("+~")
        if key == where or key.startswith((f"{where}.", f"{where}[")) or where.startswith((f"{key}.", f"{key}[")):
            return item
    return None


def _blame_overrides(exc: RecipeError, overrides: list[str]) -> RecipeError:
    """Name the override a problem came from: a typo in `traning.max_steps=3` is not the recipe file's fault."""
    blamed = [_override_for(p.where, overrides) for p in exc.problems]
    if not any(blamed):
        return exc
    named = sorted({o for o in blamed if o})
    if len(named) == 1 and all(blamed):
        return RecipeError(exc.problems, source=exc.source, head=f"The command-line override `{named[0]}` is not valid")
    problems = [Problem(f"{p.where} (override `{o}`)" if o else p.where, p.what, p.fix)
                for p, o in zip(exc.problems, blamed, strict=True)]
    return RecipeError(problems, source=exc.source, head=f"Recipe {exc.source} with its command-line overrides is not "
                       "valid")


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
    """The resolved recipe as YAML, as printed by --print and saved with each run.

    libyaml's emitter when PyYAML has it: same text, and a 20 MB value takes 0.1 s instead of 10.
    """
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(data, Dumper=dumper, sort_keys=False, allow_unicode=True, width=100)
