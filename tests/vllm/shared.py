"""What the vLLM tests share: their marks (they need vLLM's CPU build), the demo, the environment vLLM runs in on
CPU, and the demo trained with `sampling.dynamic` through vLLM, colocated or against a server."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RECIPES

VLLM = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vLLM is not installed here: scripts/install_vllm_cpu.sh builds .venv-vllm, then "
                              "`.venv-vllm/bin/python -m pytest -q -m vllm`"),
]

DEMO = RECIPES / "demo.yaml"
ENV = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "VLLM_TARGET_DEVICE": "cpu",
       "VLLM_CPU_KVCACHE_SPACE": "1"}

DYNAMIC = ["sampling.dynamic={max_rounds: 6}", "training.max_steps=4", "training.per_device_train_batch_size=16",
           "training.num_generations=4", "training.temperature=0.7", "training.logging_steps=1",
           "eval.before_after=false"]
COUNTED = r'''
import json, sys
from trl.generation import vllm_generation as vg
from grpo_cli import load_recipe, train

calls = []
original = vg.VLLMGeneration.generate


def generate(self, *args, **kwargs):
    calls.append(1)
    return original(self, *args, **kwargs)


vg.VLLMGeneration.generate = generate
result = train(load_recipe(sys.argv[1], sys.argv[4:]), output_dir=sys.argv[2])
json.dump({"status": result.status, "generate_calls": len(calls)}, open(sys.argv[3], "w"))
'''


def dynamic_through_vllm(tmp_path: Path, *overrides: str, oversample: bool = False) -> tuple[dict, list[dict]]:
    """The demo with `sampling.dynamic` (refill, or oversample x2) through vLLM, counting vLLM's generate calls."""
    script, out, report = tmp_path / "counted.py", tmp_path / "run", tmp_path / "report.json"
    script.write_text(COUNTED)
    dynamic = [*DYNAMIC[1:], "sampling.dynamic={strategy: oversample, oversample: 2}"] if oversample else DYNAMIC
    done = subprocess.run([sys.executable, str(script), str(DEMO), str(out), str(report), *dynamic, *overrides],
                          env=ENV, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-4000:]
    logs = [r for r in (json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines())
            if "dynamic_sampling/rounds" in r]
    res = json.loads(report.read_text())
    assert res["status"] == "completed" and len(logs) == 4
    assert sum(r["dynamic_sampling/dropped_groups"] for r in logs) > 0, "nothing dropped: the test proves nothing"
    if oversample:  # one round of 8 groups (2 x the batch's 4) a step: never a second one
        assert all(r["dynamic_sampling/rounds"] == 1 and r["dynamic_sampling/generated_groups"] == 8 for r in logs)
    else:
        assert max(r["dynamic_sampling/rounds"] for r in logs) > 1  # refilled
        assert sum(r["dynamic_sampling/zero_std_trained"] for r in logs) / len(logs) <= 0.1
    assert res["generate_calls"] == sum(r["dynamic_sampling/rounds"] for r in logs)  # one vLLM call a round
    return res, logs
