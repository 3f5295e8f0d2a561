"""Round 2 of what a user sees, the small things: memory on the cpu profile is host RAM, a typo in an override
names the override, an option that is a recipe key gets its override, weight files are as readable as the rest."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import RECIPES, ROOT, run_cli

DEMO = RECIPES / "demo.yaml"


def test_memory_on_the_cpu_profile_is_headed_host_ram() -> None:
    result = run_cli("memory", DEMO)
    assert result.exit_code == 0, result
    assert "memory in host RAM: bundled:tiny-arith, profile cpu" in result.output
    assert "total in host RAM" in result.output and "per GPU" not in result.output
    gpu = run_cli("memory", DEMO, "launch.profile=single", "--gpu-memory-gb", "80")
    assert "memory per GPU" in gpu.output and "total per GPU" in gpu.output


def test_a_typo_in_an_override_names_the_override() -> None:
    result = run_cli("validate", DEMO, "traning.max_steps=3")
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "The command-line override `traning.max_steps=3` is not valid: traning: unknown key" in text, text
    assert "Recipe" not in text
    two = " ".join(run_cli("validate", DEMO, "training.max_steps=abc", "model.lora.rr=4").output.split())
    assert "with its command-line overrides is not valid (2 problems)" in two
    assert "model.lora.rr (override `model.lora.rr=4`): unknown key" in two


def test_an_option_that_is_a_recipe_key_gets_its_override() -> None:
    proc = subprocess.run([sys.executable, "-m", "grpo_cli", "train", str(DEMO), "--max-steps", "3"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    text = " ".join(proc.stderr.split())
    assert "--max-steps is not an option of `grpo train`" in text and "training.max_steps=3" in text, text
    proc = subprocess.run([sys.executable, "-m", "grpo_cli", "validate", str(DEMO), "--dtype=float32"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "model.dtype=float32" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "grpo_cli", "validate", str(DEMO), "--bogus"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "No such option: --bogus" in proc.stderr  # no recipe key: Click's own word
