"""Recipes: load YAML (omegaconf `extends`, `${oc.env:...}`, overrides) into the validated pydantic `Recipe`.

This is the lowest grpo layer above errors/paths/runs: it imports nothing else of grpo_cli, and the schema
does no filesystem work beyond the recipe files it loads. `Recipe` is the single source of truth for
validation, `grpo schema`, the CLI help and docs/recipes.md.
"""

from __future__ import annotations

from grpo_cli.recipe.loader import dump_yaml, load_recipe, validate_recipe
from grpo_cli.recipe.schema import Recipe, RewardEntry

__all__ = ["Recipe", "RewardEntry", "dump_yaml", "load_recipe", "validate_recipe"]
