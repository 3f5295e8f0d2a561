"""Rewards: the built-in library, user functions, reward models, and the TRL-facing wrappers.

`build_reward_funcs(recipe)` returns what `GRPOTrainer(reward_funcs=...)` takes; `call_reward` is the one
place outside TRL that calls a reward; `inspect_reward(entry, base_dir)` checks a reference statically (no
import) for `grpo validate`. Process pools and asyncio load only when those functions are used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo_cli.lazy import lazy_exports
from grpo_cli.rewards.loaders import BoundReward, RewardInfo, inspect_reward, load_reward
from grpo_cli.rewards.registry import builtin_names, describe_builtin, get_builtin

if TYPE_CHECKING:  # the lazy names, visible to type checkers and IDEs (tests/test_architecture.py)
    from grpo_cli.rewards.build import build_reward_funcs
    from grpo_cli.rewards.calling import call_reward, run_with_timeout

__all__ = [
    "BoundReward", "RewardInfo", "build_reward_funcs", "builtin_names", "call_reward", "describe_builtin",
    "get_builtin", "inspect_reward", "load_reward", "run_with_timeout",
]

__getattr__ = lazy_exports(__name__)
