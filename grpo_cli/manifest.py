"""The run manifest: what ran, on what, with which versions, so a run can be reproduced."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from grpo_cli.runs import now, write_manifest

__all__ = ["now", "package_versions", "start_manifest", "write_manifest"]

PACKAGES = ("grpo-cli", "torch", "transformers", "trl", "peft", "accelerate", "datasets", "tokenizers",
            "vllm", "deepspeed", "bitsandbytes", "math-verify")


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def git_state(where: Path) -> dict[str, Any] | None:
    """Commit and dirtiness of the git checkout holding `where`, if any."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True,
                                timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=where, capture_output=True, text=True,
                               timeout=5, check=True).stdout.strip() != ""
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": dirty}


def hardware() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "cpu_count": os.cpu_count()}
    try:
        import torch

        info["cuda"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    return info


def start_manifest(recipe_source: str, seed: int, world_size: int) -> dict[str, Any]:
    where = Path(recipe_source).resolve().parent if recipe_source else Path.cwd()
    return {
        "status": "running",
        "started": now(),
        "finished": None,
        "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
        "recipe": recipe_source,
        "seed": seed,
        "world_size": world_size,
        "git": git_state(where),
        "versions": package_versions(),
        "hardware": hardware(),
    }
