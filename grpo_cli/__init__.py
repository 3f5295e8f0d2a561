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

from typing import TYPE_CHECKING

from grpo_cli.lazy import lazy_exports
from grpo_cli.version import __version__

if TYPE_CHECKING:  # the lazy names, visible to type checkers and IDEs (tests/test_architecture.py)
    from grpo_cli.errors import GrpoError, RecipeError
    from grpo_cli.recipe.loader import load_recipe
    from grpo_cli.recipe.schema import Recipe
    from grpo_cli.train_command import train
    from grpo_cli.validation.checks import preflight

__all__ = ["GrpoError", "Recipe", "RecipeError", "load_recipe", "preflight", "train", "__version__"]

__getattr__ = lazy_exports(__name__)
