"""grpo train sets PyTorch's CUDA allocator to expandable segments before CUDA starts, unless the user chose.

The H100 runs of scripts/gpu_check.sh measured why (docs/performance.md, "GPU"): with fixed segments the reserved
peak ran up to 31 % over the allocated one, which no plan of tensor sizes can predict. The training tests run a
real `grpo train` whose recipe names a callback that writes what the training process sees.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_cli.recipe import load_recipe
from grpo_cli.training.cuda_segments import EXPANDABLE, USER_SETTINGS, expand_cuda_segments

ROOT = Path(__file__).resolve().parents[2]
CALLBACK = """
import os
from transformers import TrainerCallback

class SeeAllocator(TrainerCallback):
    def __init__(self, out):
        self.out = out

    def on_train_begin(self, args, state, control, **kwargs):
        with open(self.out, "w") as fh:
            fh.write(os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "(unset)"))
"""


def _seen_by_training(tmp_path: Path, **env: str) -> str:
    (tmp_path / "see.py").write_text(CALLBACK)
    seen = tmp_path / "seen.txt"
    clean = {k: v for k, v in os.environ.items() if k not in USER_SETTINGS}
    done = subprocess.run(
        [sys.executable, "-m", "grpo_cli", "train", str(ROOT / "recipes" / "demo.yaml"), "training.max_steps=1",
         "eval.before_after=false", f"output.dir={tmp_path / 'out'}",
         f"callbacks=[{{callback: '{tmp_path / 'see.py'}:SeeAllocator', params: {{out: '{seen}'}}}}]", "--force"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env={**clean, **env})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return seen.read_text()


@pytest.mark.slow
def test_training_runs_with_expandable_segments(tmp_path: Path) -> None:
    assert _seen_by_training(tmp_path) == EXPANDABLE


@pytest.mark.slow
def test_the_users_own_allocator_settings_win(tmp_path: Path) -> None:
    assert _seen_by_training(tmp_path, PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:128") == "max_split_size_mb:128"


def test_colocated_vllm_keeps_the_default_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    # vLLM's sleep mode allocates from a memory pool, which expandable segments break.
    for name in USER_SETTINGS:  # set, then removed: monkeypatch restores what was there before the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    colocate = load_recipe(ROOT / "recipes" / "demo.yaml", ["launch.vllm.mode=colocate"])
    assert expand_cuda_segments(colocate) is False and "PYTORCH_CUDA_ALLOC_CONF" not in os.environ
    assert expand_cuda_segments(load_recipe(ROOT / "recipes" / "demo.yaml")) is True
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == EXPANDABLE
