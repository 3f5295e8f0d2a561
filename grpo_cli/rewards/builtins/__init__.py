"""The built-in reward library, by the names recipes use (see docs/rewards.md).

Every function follows TRL's reward contract: called with `completions` and keyword
arguments (`prompts`, `completion_ids`, `trainer_state`, every dataset column, ...), it
returns one float per completion, or None where the reward does not apply to that row.
Tunable parameters are keyword-only with defaults so recipes bind them with functools.partial.
Nothing here imports torch or transformers; math-verify is imported only when first needed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grpo_cli.rewards.builtins.answers import accuracy, completion_text
from grpo_cli.rewards.builtins.code import code
from grpo_cli.rewards.builtins.formats import code_format, format_reward, reasoning_steps, soft_format, tag_count
from grpo_cli.rewards.builtins.length import cosine, length, repetition_penalty, soft_overlong_punishment

BUILTINS: dict[str, Callable[..., list[Any]]] = {
    "accuracy": accuracy,
    "format": format_reward,
    "soft_format": soft_format,
    "tag_count": tag_count,
    "reasoning_steps": reasoning_steps,
    "length": length,
    "cosine": cosine,
    "repetition_penalty": repetition_penalty,
    "soft_overlong_punishment": soft_overlong_punishment,
    "code_format": code_format,
    "code": code,
}

__all__ = ["BUILTINS", "completion_text"]
