"""Which GPUs grpo counts without torch: nvidia-smi's list as CUDA_VISIBLE_DEVICES narrows it, as CUDA reads
that variable. The memory plan and the time plan both read it. nvidia-smi here is a script on PATH printing what
the real one prints for two GPUs (no GPU on this machine)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from grpo_cli.hardware import gpu_memory_gib, machine, visible_gpus

SMI = """#!/bin/sh
case "$1" in
  --query-gpu=name) printf 'NVIDIA H100 80GB HBM3\\nNVIDIA A100-SXM4-40GB\\n' ;;
  --query-gpu=memory.total) printf '81559\\n40960\\n' ;;
  *) exit 1 ;;
esac
"""
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"


@pytest.fixture
def two_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(SMI, encoding="utf-8")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.parametrize(("visible", "expected"), [
    (None, [H100, A100]), ("1,0", [A100, H100]), ("1", [A100]), ("", []), ("-1", []), ("0,-1,1", [H100]),
    ("5", []), ("0,5,1", [H100]), ("GPU-8f2c1d3e", [H100, A100]),
])
def test_cuda_visible_devices_narrows_the_gpus_as_cuda_does(two_gpus: None, monkeypatch: pytest.MonkeyPatch,
                                                            visible: str | None, expected: list[str]) -> None:
    """CUDA stops at the first index that names no GPU (-1 hides them all); UUIDs are not mapped, so the full
    list stays. Memory follows the same GPUs."""
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert visible_gpus() == expected
    memory = {H100: 81559 / 1024, A100: 40960 / 1024}
    assert gpu_memory_gib() == pytest.approx([memory[name] for name in expected])
    assert machine(expected) == (f"gpu: {expected[0]} x{len(expected)}" if expected else machine())


def test_without_nvidia_smi_there_is_no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert visible_gpus() == [] and gpu_memory_gib() == []
    assert machine([]).startswith("cpu: ")
