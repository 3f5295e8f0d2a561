"""The recipe's `callbacks:` as TrainerCallback instances, handed to GRPOTrainer after grpo's own."""

from __future__ import annotations

from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.recipe.schema import Recipe


def load_callbacks(recipe: Recipe) -> list[Any]:
    """Import and construct each callback; a wrong reference or a non-callback class is a GrpoError."""
    from transformers import TrainerCallback

    from grpo_cli.rewards import import_file, import_module, split_reference

    out = []
    for i, entry in enumerate(recipe.callbacks):
        where = f"callbacks[{i}]"
        target, name = split_reference(entry.callback)
        module = (import_file((recipe.base_dir / target).expanduser().resolve(), where) if target.endswith(".py")
                  else import_module(target, recipe.base_dir, where))
        cls = getattr(module, name, None)
        if cls is None:
            raise GrpoError(f"{target} has no attribute {name!r}", where=f"{where}.callback")
        if not (isinstance(cls, type) and issubclass(cls, TrainerCallback)):
            raise GrpoError(f"{entry.callback} is not a transformers TrainerCallback class", where=f"{where}.callback",
                            fix="Subclass transformers.TrainerCallback and override the events you need.")
        try:
            out.append(cls(**entry.params))
        except TypeError as exc:
            raise GrpoError(f"{entry.callback} cannot be built with params {entry.params}: {exc}",
                            where=f"{where}.params") from None
    return out
