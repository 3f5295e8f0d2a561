"""This machine as grpo sees it without importing torch: the GPUs nvidia-smi lists (as CUDA_VISIBLE_DEVICES
narrows them), their memory, and the name measured rates are keyed by. The memory plan and the time plan both
read it, so the two agree on which GPUs a run has.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from grpo_cli.threads import usable_cores


def _nvidia_smi(field: str) -> list[str]:
    """One `--query-gpu` field per visible GPU ([] without nvidia-smi or when it fails). CUDA_VISIBLE_DEVICES
    picks and orders them by index, and as CUDA does, stops at the first index that names no GPU (-1 hides them
    all, as does an empty value); starting with a GPU UUID it leaves the full list (no mapping is read)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, f"--query-gpu={field}", "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    values = [line.strip() for line in out.splitlines() if line.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return values
    picked: list[str] = []
    for entry in (i.strip() for i in visible.split(",")):
        try:
            index = int(entry)
        except ValueError:
            return values if not picked and entry else picked  # a UUID first: not mapped here
        if not 0 <= index < len(values):
            break
        picked.append(values[index])
    return picked


def visible_gpus() -> list[str]:
    """The visible GPUs' names."""
    return _nvidia_smi("name")


def gpu_memory_gib() -> list[float]:
    """Each visible GPU's memory in GiB ([] when nvidia-smi cannot say)."""
    try:
        return [float(v) / 1024 for v in _nvidia_smi("memory.total")]
    except ValueError:
        return []


def machine(gpus: list[str] | None = None) -> str:
    """This machine as rates are keyed: the GPUs' name and count, else the CPU model and its usable cores."""
    if gpus:
        return f"gpu: {gpus[0]} x{len(gpus)}"
    name = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu: {name} x{usable_cores()}"
