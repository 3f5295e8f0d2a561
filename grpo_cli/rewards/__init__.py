"""Rewards: the built-in library, user functions, reward models, and the TRL-facing wrappers.

`build_reward_funcs(recipe)` returns what `GRPOTrainer(reward_funcs=...)` takes;
`inspect_reward(entry, base_dir)` checks a reference statically (no import) for `grpo validate`.
"""

from __future__ import annotations

from grpo_cli.rewards.build import build_reward_funcs
from grpo_cli.rewards.calling import call_reward
from grpo_cli.rewards.loaders import BoundReward, RewardInfo, inspect_reward, load_reward
from grpo_cli.rewards.registry import builtin_names, describe_builtin, get_builtin

__all__ = [
    "BoundReward",
    "RewardInfo",
    "build_reward_funcs",
    "call_reward",
    "builtin_names",
    "describe_builtin",
    "get_builtin",
    "inspect_reward",
    "load_reward",
]
