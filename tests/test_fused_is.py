"""With vLLM, the importance-sampling correction comes from the loss forward: one forward fewer, the same update.

The demo trains three steps in vLLM colocate mode twice from the same seed: with TRL's own extra forward
(`GRPO_FUSED_IS=0`) and with grpo's fused correction. vLLM samples the same completions in both, so every
parameter, loss and `sampling/*` metric must agree, while the fused run calls the policy's log-probability
forward once per step instead of twice. This pins the TRL hook: if TRL changes when or how it computes the
correction, the runs part.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RECIPES

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="needs vLLM (scripts/install_vllm_cpu.sh builds .venv-vllm)"),
]

STEPS = 3
SCRIPT = r'''
import json, sys
from trl import GRPOTrainer
from grpo_cli import load_recipe, train

recipe, out, report, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
calls = []
original = GRPOTrainer._get_per_token_logps_and_entropies


def counted(self, model, *args, **kwargs):
    calls.append(model is self.model)  # the policy's forward (not a reference model's)
    return original(self, model, *args, **kwargs)


GRPOTrainer._get_per_token_logps_and_entropies = counted
result = train(load_recipe(recipe, ["launch.vllm.mode=colocate", f"training.max_steps={steps}",
                                    "training.logging_steps=1", "eval.before_after=false"]), output_dir=out)
json.dump({"status": result.status, "policy_forwards": sum(calls)}, open(report, "w"))
'''


def _run(tmp_path: Path, fused: bool) -> tuple[dict, dict, list[dict]]:
    from safetensors.torch import load_file

    name = "fused" if fused else "trl"
    script, out, report = tmp_path / "probe.py", tmp_path / name, tmp_path / f"{name}.json"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "VLLM_TARGET_DEVICE": "cpu",
           "VLLM_CPU_KVCACHE_SPACE": "1", "GRPO_FUSED_IS": "1" if fused else "0"}
    done = subprocess.run([sys.executable, str(script), str(RECIPES / "demo.yaml"), str(out), str(report),
                           str(STEPS)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return json.loads(report.read_text()), load_file(str(out / "model.safetensors")), logs


def test_the_fused_correction_trains_exactly_as_trl_with_one_forward_fewer_per_step(tmp_path: Path) -> None:
    import torch

    trl_run, trl_params, trl_logs = _run(tmp_path, fused=False)
    fused_run, fused_params, fused_logs = _run(tmp_path, fused=True)
    assert trl_run["status"] == fused_run["status"] == "completed"
    assert trl_run["policy_forwards"] == 2 * STEPS, trl_run  # TRL: the extra no-grad forward, then the loss's
    assert fused_run["policy_forwards"] == STEPS, fused_run  # fused: the loss forward alone
    for name, value in trl_params.items():
        assert torch.allclose(value, fused_params[name], rtol=0, atol=1e-6), name
    trl_steps = [r for r in trl_logs if "sampling/importance_sampling_ratio/mean" in r]
    fused_steps = [r for r in fused_logs if "sampling/importance_sampling_ratio/mean" in r]
    assert len(trl_steps) == len(fused_steps) == STEPS
    # the step split names vLLM's weight sync apart from generation (it happens inside TRL's `_generate`)
    assert all(r["time/weight_sync"] > 0 and r["time/generation"] > 0 for r in fused_steps), fused_steps
    for ours, theirs in zip(fused_steps, trl_steps, strict=True):
        for key in [k for k in theirs if k.startswith("sampling/") or k == "loss"]:
            assert ours[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-6), key
    from safetensors.torch import load_file

    from tests.conftest import ROOT

    initial = load_file(str(ROOT / "grpo_cli" / "assets" / "tiny-arith" / "model.safetensors"))
    assert any(not torch.equal(initial[n], fused_params[n]) for n in initial), "training moved no weight"
