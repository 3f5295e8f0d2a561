"""The registry of built-in rewards, by the names recipes use."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

# Dataset columns a built-in needs (any one of them), for the preflight column check.
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "accuracy": ("answer", "solution"),
    "length": ("answer", "solution"),
    "cosine": ("answer", "solution"),
    "code": ("tests",),
}


def builtin_names() -> list[str]:
    """Names usable as `rewards[].name` without `function` or `model` (nothing is imported)."""
    from grpo_cli.rewards.builtins import WHERE

    return sorted(WHERE)


def get_builtin(name: str) -> Callable[..., Any]:
    """The built-in reward function called `name` (KeyError when there is none); imports only its module."""
    from grpo_cli.rewards.builtins import load_builtin

    return load_builtin(name)


def describe_builtin(name: str) -> str:
    """The first line of a built-in's docstring."""
    doc = inspect.getdoc(get_builtin(name)) or ""
    return doc.splitlines()[0] if doc else ""
