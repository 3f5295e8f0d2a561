"""Launch profiles: every fact about a `launch.profile` value, in one table that every module asks.

A profile decides how many processes `grpo train` runs (and whether it re-launches itself under accelerate),
what is sharded across them (which the memory plan divides by), whether DeepSpeed must be installed, whether
the run is held on the CPU (which also puts vLLM on its CPU build and rules out its GPU-only sleep mode), and
which accelerate config file ships for it. A new profile is one row here, its name in `Profile`, and its file
in `assets/accelerate_configs/` (tests/launching/test_launching.py checks that every row has all three).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Profile = Literal["cpu", "single", "ddp", "zero2", "zero3", "fsdp"]
"""The names `launch.profile` accepts (the schema's type; the table below has one row per name)."""


@dataclass(frozen=True)
class LaunchProfile:
    """One row of the table: what a profile means to the launcher, the checks and the memory plan."""

    name: str
    multi_process: bool = False
    """Runs several processes through `accelerate launch` (a one-process profile never re-launches)."""
    shards_weights: bool = False
    """The weights (and LoRA adapters) are split across processes: ZeRO-3, FSDP."""
    shards_state: bool = False
    """Gradients and optimizer state are split across processes: ZeRO-2, ZeRO-3, FSDP."""
    deepspeed: bool = False
    """Runs DeepSpeed ZeRO (the `deepspeed` extra must be installed)."""
    cpu_only: bool = False
    """Held on the CPU even when a GPU is visible: float32 by default, host RAM in the memory plan, vLLM's CPU
    build, no vLLM sleep mode and no bitsandbytes quantisation."""
    accelerate_config: str | None = None
    """The accelerate config shipped in assets/accelerate_configs/ (None: nothing to launch)."""


PROFILES: dict[str, LaunchProfile] = {p.name: p for p in (
    LaunchProfile("cpu", cpu_only=True),
    LaunchProfile("single", accelerate_config="single.yaml"),
    LaunchProfile("ddp", multi_process=True, accelerate_config="ddp.yaml"),
    LaunchProfile("zero2", multi_process=True, shards_state=True, deepspeed=True, accelerate_config="zero2.yaml"),
    LaunchProfile("zero3", multi_process=True, shards_weights=True, shards_state=True, deepspeed=True,
                  accelerate_config="zero3.yaml"),
    LaunchProfile("fsdp", multi_process=True, shards_weights=True, shards_state=True, accelerate_config="fsdp.yaml"),
)}


def launch_profile(name: str) -> LaunchProfile:
    """The row for `name` (KeyError for a name the schema would have refused)."""
    return PROFILES[name]


def multi_process_names() -> list[str]:
    """The profiles that run several processes, in table order (for messages that list them)."""
    return [p.name for p in PROFILES.values() if p.multi_process]
