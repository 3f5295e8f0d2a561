"""The built-in reward library, by the names recipes use (see docs/rewards.md).

Every function follows TRL's reward contract: called with `completions` and keyword
arguments (`prompts`, `completion_ids`, `trainer_state`, every dataset column, ...), it
returns one float per completion, or None where the reward does not apply to that row.
Tunable parameters are keyword-only with defaults so recipes bind them with functools.partial.
Nothing here imports torch or transformers; math-verify is imported only when first needed.

`BUILTIN_REWARDS` is the one table of built-in metadata: each reward's module and function (so a recipe
loads only the modules of the rewards it uses: `grpo validate` of an `accuracy` recipe does not import the code
sandbox's client), the data columns it needs and whether it scores tags alone.
`BUILTINS` (every reward, by name) imports them all on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BuiltinReward:
    """One built-in reward's metadata: where it lives and what it needs, read without importing it."""

    module: str
    """Its module in this package (only that module is imported when a recipe uses it)."""
    function: str
    columns: tuple[str, ...] = ()
    """Dataset columns it needs, any one of them (the preflight column check); empty when it needs none. A
    reward with columns judges against a reference (check-rewards reads its spread with that in mind)."""
    tags_only: bool = False
    """Scores the completion's tags alone (check-rewards probes the prompt's tags against it)."""
    span: tuple[float, float] | None = None
    """The lowest and highest score whatever its params (its docstring's `Returns:`); None where params move
    them. `grpo validate` reads it to refuse a `sampling.dynamic.min_std` no group can exceed."""


BUILTIN_REWARDS: dict[str, BuiltinReward] = {
    "accuracy": BuiltinReward("answers", "accuracy", columns=("answer", "solution"), span=(0.0, 1.0)),
    "format": BuiltinReward("formats", "format_reward", tags_only=True, span=(0.0, 1.0)),
    "soft_format": BuiltinReward("formats", "soft_format", tags_only=True, span=(0.0, 1.0)),
    "tag_count": BuiltinReward("formats", "tag_count", tags_only=True, span=(0.0, 1.0)),
    "reasoning_steps": BuiltinReward("formats", "reasoning_steps", span=(0.0, 1.0)),
    "length": BuiltinReward("length", "length", columns=("answer", "solution")),
    "cosine": BuiltinReward("length", "cosine", columns=("answer", "solution")),
    "repetition_penalty": BuiltinReward("length", "repetition_penalty"),
    "soft_overlong_punishment": BuiltinReward("length", "soft_overlong_punishment"),
    "code_format": BuiltinReward("formats", "code_format", tags_only=True, span=(0.0, 1.0)),
    "code": BuiltinReward("code", "code", columns=("tests",), span=(0.0, 1.0)),
}

def load_builtin(name: str) -> Callable[..., list[Any]]:
    """The built-in reward called `name`, importing only its module (KeyError when there is none)."""
    row = BUILTIN_REWARDS[name]
    return getattr(importlib.import_module(f"{__name__}.{row.module}"), row.function)


def __getattr__(name: str) -> Any:
    if name == "BUILTINS":
        return {reward: load_builtin(reward) for reward in BUILTIN_REWARDS}
    if name == "completion_text":
        from grpo_cli.rewards.builtins.answers import completion_text

        return completion_text
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BUILTINS", "BUILTIN_REWARDS", "BuiltinReward", "completion_text", "load_builtin"]
