"""What `sampling:` decides for the run, read by the checks (validation/sampling_checks.py) and by the hooks that
act on it (training/dynamic_sampling.py, training/zero_advantage.py): which reward's spread dynamic sampling
judges, and the loss types whose normaliser the zero-advantage skip rescales exactly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe

SKIP_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo")
"""Loss types whose normaliser grpo rescales exactly when zero-advantage rows leave the batch (vespo's weights
depend on the batch, so it is not here)."""


def chosen_metric(recipe: Recipe) -> str | None:
    """The reward label whose spread decides for dynamic sampling (`reward`: the weighted total), or None when
    the recipe leaves it open (several rewards, none named `accuracy`, eval.metric no reward)."""
    dyn = recipe.sampling.dynamic
    labels = [e.label for e in recipe.rewards]
    if dyn is not None and dyn.metric:
        return dyn.metric
    if "accuracy" in labels:
        return "accuracy"
    if recipe.eval.metric in labels:
        return recipe.eval.metric
    return labels[0] if len(labels) == 1 else None


def shares_prompt(recipe: Recipe) -> bool:
    """Whether `sampling.share_prompt_forward` acts in this launch: on one process only (proven there; several
    processes run TRL's forward, the same update)."""
    return recipe.sampling.share_prompt_forward and not (recipe.launch.spec.multi_process
                                                         or recipe.launch.world_size > 1)
