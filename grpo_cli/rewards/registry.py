"""The registry of built-in rewards, by the names recipes use."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from grpo_cli.rewards.builtins import BUILTIN_REWARDS, load_builtin


def builtin_names() -> list[str]:
    """Names usable as `rewards[].name` without `function` or `model` (nothing is imported)."""
    return sorted(BUILTIN_REWARDS)


def required_columns(name: str | None) -> tuple[str, ...]:
    """Dataset columns the built-in `name` needs (any one of them); empty for none or an unknown name."""
    row = BUILTIN_REWARDS.get(name or "")
    return row.columns if row else ()


def get_builtin(name: str) -> Callable[..., Any]:
    """The built-in reward function called `name` (KeyError when there is none); imports only its module."""
    return load_builtin(name)


def describe_builtin(name: str) -> str:
    """The first line of a built-in's docstring."""
    doc = inspect.getdoc(get_builtin(name)) or ""
    return doc.splitlines()[0] if doc else ""
