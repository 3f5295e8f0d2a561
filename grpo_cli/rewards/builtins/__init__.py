"""The built-in reward library, by the names recipes use (see docs/rewards.md).

Every function follows TRL's reward contract: called with `completions` and keyword
arguments (`prompts`, `completion_ids`, `trainer_state`, every dataset column, ...), it
returns one float per completion, or None where the reward does not apply to that row.
Tunable parameters are keyword-only with defaults so recipes bind them with functools.partial.
Nothing here imports torch or transformers; math-verify is imported only when first needed.

`WHERE` names each reward's module and function, so a recipe loads only the modules of the rewards
it uses (`grpo validate` of an `accuracy` recipe does not import the code sandbox's client);
`BUILTINS` (every reward, by name) imports them all on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

# reward name -> (module in this package, function)
WHERE: dict[str, tuple[str, str]] = {
    "accuracy": ("answers", "accuracy"),
    "format": ("formats", "format_reward"),
    "soft_format": ("formats", "soft_format"),
    "tag_count": ("formats", "tag_count"),
    "reasoning_steps": ("formats", "reasoning_steps"),
    "length": ("length", "length"),
    "cosine": ("length", "cosine"),
    "repetition_penalty": ("length", "repetition_penalty"),
    "soft_overlong_punishment": ("length", "soft_overlong_punishment"),
    "code_format": ("formats", "code_format"),
    "code": ("code", "code"),
}


def load_builtin(name: str) -> Callable[..., list[Any]]:
    """The built-in reward called `name`, importing only its module (KeyError when there is none)."""
    module, function = WHERE[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), function)


def __getattr__(name: str) -> Any:
    if name == "BUILTINS":
        return {reward: load_builtin(reward) for reward in WHERE}
    if name == "completion_text":
        from grpo_cli.rewards.builtins.answers import completion_text

        return completion_text
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BUILTINS", "WHERE", "completion_text", "load_builtin"]
