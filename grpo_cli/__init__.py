"""grpo: declarative, preflight-checked GRPO fine-tuning on top of TRL.

The public Python API mirrors the CLI so a notebook can do what `grpo` does::

    from grpo_cli import load_recipe, preflight, train
    recipe = load_recipe("recipes/demo.yaml", overrides=["training.max_steps=20"])
    print(preflight(recipe).plan)
    result = train(recipe)

Heavy libraries (torch, transformers, trl, datasets, peft) are imported only by the
functions that need them, so importing this package stays instant.
"""

from __future__ import annotations

from grpo_cli.lazy import lazy_exports

__version__ = "0.1.0"

_LAZY = {
    "GrpoError": "grpo_cli.errors",
    "RecipeError": "grpo_cli.errors",
    "Recipe": "grpo_cli.recipe.schema",
    "load_recipe": "grpo_cli.recipe.loader",
    "preflight": "grpo_cli.validation.checks",
    "train": "grpo_cli.training.run",
}

__all__ = [*_LAZY, "__version__"]

__getattr__ = lazy_exports(__name__, _LAZY)
