"""What a user sees on the console: every phase announced, also when the output is piped; launch flags on
every verb that reads a recipe."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from grpo_cli import progress
from tests.conftest import RECIPES, ROOT, assert_paragraph, run_cli

DEMO = RECIPES / "demo.yaml"


def test_piped_training_announces_every_phase_in_order(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "grpo_cli", "train", str(RECIPES / "demo.yaml"),
                           "training.max_steps=3", "training.logging_steps=3", "eval.max_samples=16",
                           "-o", str(tmp_path / "run")], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    phases = ["grpo train", "threads: 1 torch thread", "importing torch", "loading model bundled:tiny-arith",
              "loading data", "evaluating 16 held-out prompts x 8 samples (before training)", "before training:",
              "training: 3 steps", "step 1 took", "step     3", "evaluating 16 held-out prompts x 8 samples (after"]
    at = [next((i for i, line in enumerate(lines) if line.startswith(p)), None) for p in phases]
    assert None not in at, dict(zip(phases, at, strict=True))
    assert at == sorted(at), dict(zip(phases, at, strict=True))
    assert lines[0].startswith("grpo train")  # the very first thing on screen, before the libraries load
    # Piped output: whole lines, no DeepSpeed notice on a CPU box, table titles on one line
    assert "Setting accelerator to CPU" not in proc.stdout + proc.stderr
    assert any(line.startswith("training: first vs last logging window (mean of 1 logging step each)")
               for line in lines)
    assert next(line for line in lines if line.startswith("threads:")).endswith("`--threads N`)")


def test_piped_eval_suite_speaks_in_whole_lines_without_library_noise(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "grpo_cli", "eval", "--suite", "svamp", "--model",
                           "bundled:tiny-arith", "--limit", "4", "--max-new-tokens", "4", "--out", str(tmp_path)],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=ROOT,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    output = proc.stdout + proc.stderr
    assert "[transformers]" not in output and "Setting accelerator to CPU" not in output
    warning = next(line for line in output.splitlines() if line.startswith("warning: bundled:tiny-arith"))
    assert warning.endswith("(the bundled tiny models have 128 to 192 positions)")  # one paragraph, one line


def test_piped_doctor_fits_100_columns() -> None:
    proc = subprocess.run([sys.executable, "-m", "grpo_cli", "doctor"], capture_output=True, text=True, cwd=ROOT,
                          env={k: v for k, v in os.environ.items() if k != "COLUMNS"}, timeout=300, check=False)
    table = [line for line in proc.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert table and max(len(line) for line in table) <= 100, max(table, key=len)


def test_piped_progress_is_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    console = Console(file=out, width=80)  # not a terminal: what a log file gets
    monkeypatch.setattr(progress, "PIPED_EVERY_S", 0.0)
    with progress.reporting(console, "sampling (before training)", 800, "completions"):
        progress.advance(64)
        progress.advance(64)
    progress.advance(64)  # outside a phase: nothing
    assert out.getvalue().splitlines() == ["  sampling (before training): 64/800 completions, 0 s",
                                           "  sampling (before training): 128/800 completions, 0 s"]


def test_launch_flags_work_on_every_verb_that_reads_a_recipe() -> None:
    gsm8k = RECIPES / "gsm8k.yaml"  # profile single in the file
    plan = run_cli("validate", gsm8k, "--profile", "zero3", "--num-processes", "4", "--threads", "2", "--json")
    assert plan.exit_code == 0, plan.output
    launch = json.loads(plan.output)["plan"]["launch"]
    assert launch.startswith("4 training processes (launch.num_processes)"), launch
    memory = run_cli("memory", gsm8k, "--profile", "zero3", "--num-processes", "4")
    assert memory.exit_code == 0, memory.output
    assert "profile zero3, 4 processes" in memory.output and "/ 4" in memory.output  # sharded over 4
    doctor = run_cli("doctor", gsm8k, "--profile", "zero3", "--num-processes", "4", "--json")
    assert "launch.profile=zero3" in doctor.output  # ZeRO-3 needs what this CPU box lacks: judged on the flag
    lonely = run_cli("doctor", "--profile", "zero3")
    assert_paragraph(lonely, "Pass the recipe first")


def test_printed_commands_quote_the_paths_they_name(tmp_path: Path) -> None:
    script = ROOT / "tests" / "fixtures" / "imports" / "trl" / "train_grpo.py"
    recipe = tmp_path / "my $(touch PWNED).yaml"
    result = run_cli("import", "trl", script, "-o", recipe)
    assert result.exit_code == 0, result
    assert f"grpo validate '{recipe}'" in " ".join(result.output.split())
    job = tmp_path / "$(touch PWNED).sbatch"
    result = run_cli("launch", "slurm", DEMO, "launch.profile=ddp", "--gpus-per-node", "2", "-o", job)
    assert result.exit_code == 0, result
    assert f"sbatch '{job}'" in " ".join(result.output.split())


def test_an_interrupt_a_library_wrapped_is_still_an_interrupt() -> None:
    """SIGTERM while pydantic builds a validator arrives as a SchemaError whose text ends in the KeyboardInterrupt
    (seen once in 20 interrupted imports): it ends like any interrupt, exit 130 and no traceback."""
    import pydantic_core
    import typer

    from grpo_cli.cli.base import run_guarded

    def wrapped() -> None:
        raise pydantic_core.SchemaError('Error building "literal" validator:\n  KeyboardInterrupt: ')

    with pytest.raises(typer.Exit) as stopped:
        run_guarded(wrapped)
    assert stopped.value.exit_code == 130
    with pytest.raises(ValueError):  # any other library error still surfaces (as a bug, with its traceback)
        run_guarded(lambda: int("x"))
