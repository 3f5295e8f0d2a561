"""Recipe rewards -> what `GRPOTrainer(reward_funcs=...)` takes: bound functions, process pools, model paths."""

from __future__ import annotations

from typing import Any

from grpo_cli.rewards.loaders import BoundReward, load_reward, pools_itself
from grpo_cli.rewards.parallel import ParallelReward


def build_reward_funcs(recipe: Any) -> list[Any]:
    """Everything `GRPOTrainer(reward_funcs=...)` needs, in recipe order."""
    funcs: list[Any] = []
    for i, entry in enumerate(recipe.rewards):
        if entry.parallel > 1 and entry.kind != "model" and not pools_itself(entry):
            funcs.append(ParallelReward(entry, recipe.base_dir, entry.parallel, index=i))
        else:
            func = load_reward(entry, recipe.base_dir, i)
            if isinstance(func, BoundReward):
                func.where = f"rewards[{i}]"
            funcs.append(func)
    return funcs
