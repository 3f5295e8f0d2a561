"""Command-line overrides: a list element set by index, a typo named as the override it is, an option that is a
recipe key pointed at its override, broken YAML values and out-of-range indexes refused in one paragraph."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import RECIPES, ROOT, assert_paragraph, run_cli

DEMO = RECIPES / "demo.yaml"


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


def test_list_element_override_sets_that_element(demo_copy: Path) -> None:
    result = run_cli("validate", demo_copy, "rewards[0].weight=2", "--json")
    assert result.exit_code == 0, result
    assert "accuracy x2" in result.output
    replaced = run_cli("validate", demo_copy, "rewards[0]={name: format}", "--json")
    assert replaced.exit_code == 0 and '"rewards": "format x1"' in replaced.output, replaced


def test_list_element_override_out_of_range(demo_copy: Path) -> None:
    assert_paragraph(run_cli("validate", demo_copy, "rewards[3].weight=2"), "rewards[3].weight=2", "1 entry")


def test_override_with_broken_yaml_value_names_the_override(demo_copy: Path) -> None:
    out = assert_paragraph(run_cli("validate", demo_copy, "training.max_steps=[1,"), "training.max_steps=[1,")
    assert "<unicode string>" not in out and "while parsing" not in out


def test_a_list_index_written_with_a_dot_gets_the_bracket_form() -> None:
    out = assert_paragraph(run_cli("validate", RECIPES / "demo.yaml", "rewards.0.weight=2"), "rewards.0.weight=2",
                           "`rewards[0].weight=2`")
    assert "TypeError" not in out
    assert run_cli("validate", RECIPES / "demo.yaml", "rewards[0].weight=2").exit_code == 0
