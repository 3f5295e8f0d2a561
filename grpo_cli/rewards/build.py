"""Recipe rewards -> what `GRPOTrainer(reward_funcs=...)` takes: bound functions, process pools, model paths."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grpo_cli.rewards.loaders import BoundReward, load_reward, pools_itself
from grpo_cli.rewards.parallel import ParallelReward
from grpo_cli.threads import pool_workers

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe


def build_reward_funcs(recipe: Recipe, *, training: bool = True) -> list[Any]:
    """Everything `GRPOTrainer(reward_funcs=...)` needs, in recipe order.

    `training`: a reward that raises, times out or returns what TRL cannot use stops the run with a
    paragraph naming its recipe entry; check-rewards passes False to see the raw results and classify them.
    """
    funcs: list[Any] = []
    for i, entry in enumerate(recipe.rewards):
        workers = pool_workers(entry.parallel)
        if workers > 1 and entry.kind != "model" and not pools_itself(entry):
            func: Any = ParallelReward(entry, recipe.base_dir, workers, index=i)
        else:
            func = load_reward(entry, recipe.base_dir, i)
        if isinstance(func, BoundReward | ParallelReward):
            func.entry_where = f"rewards[{i}]"  # names the entry in a built-in's own errors (check-rewards too)
            if training:
                func.where = func.entry_where
        funcs.append(func)
    return funcs
