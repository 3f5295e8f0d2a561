"""The recipe's `callbacks:` as TrainerCallback instances, handed to GRPOTrainer after grpo's own."""

from __future__ import annotations

from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.recipe.schema import Recipe
from grpo_cli.user_code import import_reference


def load_callbacks(recipe: Recipe) -> list[Any]:
    """Import and construct each callback; a wrong reference or a non-callback class is a GrpoError."""
    from transformers import TrainerCallback

    out = []
    for i, entry in enumerate(recipe.callbacks):
        where = f"callbacks[{i}]"
        cls = import_reference(entry.callback, recipe.base_dir, f"{where}.callback", kind="attribute")
        if not (isinstance(cls, type) and issubclass(cls, TrainerCallback)):
            raise GrpoError(f"{entry.callback} is not a transformers TrainerCallback class", where=f"{where}.callback",
                            fix="Subclass transformers.TrainerCallback and override the events you need.")
        try:
            out.append(cls(**entry.params))
        except TypeError as exc:
            raise GrpoError(f"{entry.callback} cannot be built with params {entry.params}: {exc}",
                            where=f"{where}.params") from None
    return out
