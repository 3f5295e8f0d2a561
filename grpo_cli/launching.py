"""Re-launch `grpo train` under `accelerate launch` for multi-process profiles."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from grpo_cli.schema.launch import MULTI_PROCESS_PROFILES


def under_launcher() -> bool:
    """True inside a process started by accelerate/torchrun (it must not re-launch again)."""
    return "LOCAL_RANK" in os.environ or "ACCELERATE_LAUNCHED" in os.environ


def maybe_relaunch(recipe: Any, recipe_path: Path, overrides: list[str], launch_overrides: list[str]) -> int | None:
    """Run this command again under accelerate when the profile needs several processes; return its exit code."""
    if recipe.launch.profile not in MULTI_PROCESS_PROFILES or under_launcher():
        return None
    raise NotImplementedError("multi-process launching arrives with the scale-out work")
