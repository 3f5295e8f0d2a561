"""Sharded training on CPU for real: FSDP2 over gloo and DeepSpeed ZeRO-3 with its CPU accelerator.

Each test launches the demo the way a user does (`grpo train --profile P --num-processes 2`) and checks
what a user would: the manifest says which distributed type ran and that each process held about half
of the parameters, the log has no DDP reducer (the silent-DDP symptom), the run resumes from its
checkpoint, and the saved model loads with `from_pretrained` and differs from the starting weights.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_cli.errors import GrpoError
from grpo_cli.paths import ASSETS_DIR
from tests.conftest import RECIPES, ROOT, assert_paragraph

SHORT = ["training.per_device_train_batch_size=16", "training.num_generations=4", "training.logging_steps=1"]


def _train(profile: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "grpo_cli", "train", str(RECIPES / "demo.yaml"), "--profile", profile,
           "--num-processes", "2", "-o", str(out), *SHORT, *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _check_sharded(out: Path, proc: subprocess.CompletedProcess[str], kind: str) -> dict:
    manifest = json.loads((out / "manifest.json").read_text())
    layout = manifest["distributed"]
    assert (layout["type"], layout["world_size"], manifest["world_size"]) == (kind, 2, 2)
    total = layout["parameters_total"]
    assert total > 100_000 and layout["sharded"] is True
    assert len(layout["parameters_per_rank"]) == 2
    for held in layout["parameters_per_rank"]:
        assert 0.4 * total <= held <= 0.6 * total, layout  # about half each, not the whole model
    log = proc.stdout + proc.stderr
    assert "find_unused_parameters" not in log and "Reducer" not in log  # DDP never wrapped the model
    return manifest


def _check_saved_model_loads_and_trained(out: Path, total: int) -> None:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out)
    start = load_file(ASSETS_DIR / "tiny-arith" / "model.safetensors")
    trained = dict(model.named_parameters())
    assert sum(p.numel() for p in model.parameters()) == total  # the whole model, gathered from the shards
    changed = [k for k, v in start.items() if k in trained and not torch.equal(trained[k].detach(), v)]
    assert changed, "the saved weights are the starting weights"
    for k, v in start.items():
        if k in trained:
            assert trained[k].shape == v.shape and torch.isfinite(trained[k]).all(), k


@pytest.mark.slow
def test_fsdp_on_cpu_shards_checkpoints_resumes_and_saves_a_full_model(tmp_path: Path) -> None:
    out = tmp_path / "fsdp"
    save = ["training.save_strategy=steps", "training.save_steps=2", "eval.before_after=false"]
    first = _train("fsdp", out, "training.max_steps=2", *save)
    _check_sharded(out, first, "FSDP")
    assert (out / "checkpoint-2" / "trainer_state.json").exists()

    resumed = _train("fsdp", out, "--resume", "training.max_steps=3", *save)
    manifest = _check_sharded(out, resumed, "FSDP")
    assert manifest["status"] == "completed" and manifest["global_step"] == 3
    assert manifest["resumed_from"].endswith("checkpoint-2")
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()
             if '"reward"' in line]
    assert steps[-1] == 3 and 1 not in steps[steps.index(3):]  # continued at step 3, did not start over
    _check_saved_model_loads_and_trained(out, manifest["distributed"]["parameters_total"])


@pytest.mark.slow
def test_zero3_on_cpu_shards_evaluates_and_saves_a_full_model(tmp_path: Path) -> None:
    out = tmp_path / "zero3"
    # Evaluation before and after training stays on: rank 0 alone generating used to deadlock under ZeRO-3.
    proc = _train("zero3", out, "training.max_steps=2", "eval.max_samples=4", "eval.num_generations=2")
    manifest = _check_sharded(out, proc, "DEEPSPEED")
    assert manifest["status"] == "completed"
    assert manifest["eval_before"]["prompts"] == 4 and manifest["eval_after"]["prompts"] == 4
    _check_saved_model_loads_and_trained(out, manifest["distributed"]["parameters_total"])


def test_a_sharding_launch_that_runs_replicated_fails_loudly(monkeypatch) -> None:
    from grpo_cli.training.sharding import check_layout

    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(GrpoError, match="asked accelerate for FSDP but it is running MULTI_CPU"):
        check_layout("MULTI_CPU", 2, 1000, 1000)
    with pytest.raises(GrpoError, match="holds all 1,000 parameters"):
        check_layout("FSDP", 2, 1000, 1000)
    check_layout("FSDP", 2, 500, 1000)  # sharded: fine
    monkeypatch.delenv("ACCELERATE_USE_FSDP")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")
    check_layout("DEEPSPEED", 2, 1000, 1000)  # ZeRO-2 keeps whole weights on purpose
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    with pytest.raises(GrpoError, match="nothing is sharded"):
        check_layout("DEEPSPEED", 2, 1000, 1000)


def test_cpu_launch_environment_per_profile() -> None:
    from grpo_cli.launching.relaunch import launch_env

    fsdp = launch_env(0, {})
    assert fsdp["ACCELERATE_USE_CPU"] == "true" and "DS_ACCELERATOR" not in fsdp
    ds = launch_env(0, {}, deepspeed=True)  # accelerate drops DeepSpeed when told to use the CPU
    assert ds["DS_ACCELERATOR"] == "cpu" and "ACCELERATE_USE_CPU" not in ds
    gpu = launch_env(2, {}, deepspeed=True)
    assert "DS_ACCELERATOR" not in gpu and "ACCELERATE_USE_CPU" not in gpu


@pytest.mark.slow
def test_evaluating_during_a_sharded_run_is_refused_at_the_start(tmp_path: Path) -> None:
    out = tmp_path / "fsdp"
    cmd = [sys.executable, "-m", "grpo_cli", "train", str(RECIPES / "demo.yaml"), "--profile", "fsdp",
           "--num-processes", "2", "-o", str(out), *SHORT, "training.max_steps=2", "eval.before_after=false",
           "eval.every_steps=1"]
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 2, proc.stderr  # bad input, refused before the model loads
    assert "eval.every_steps" in proc.stderr and "wait forever" in proc.stderr


@pytest.mark.parametrize("profile", ["fsdp", "zero3"])
def test_validate_refuses_evaluating_during_a_sharded_run(profile: str) -> None:
    from tests.conftest import run_cli

    result = run_cli("validate", RECIPES / "demo.yaml", f"launch.profile={profile}", "launch.num_processes=2",
                     "eval.every_steps=1")
    assert_paragraph(result, "eval.every_steps", "wait forever")
    ddp = run_cli("validate", RECIPES / "demo.yaml", "launch.profile=ddp", "launch.num_processes=2",
                  "eval.every_steps=1")
    assert ddp.exit_code == 0, ddp.output
