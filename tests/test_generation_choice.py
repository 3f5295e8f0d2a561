"""`grpo validate` says which generation backend makes a CPU step shorter, from the recipe's own numbers.

The estimate's constants are the SmolLM2 and demo steps measured on 2 cores (docs/performance.md); what a user
notices is the advice: keep transformers for a tiny model, vLLM when generation dominates, and the key to set.
"""

from __future__ import annotations

import re

from tests.conftest import RECIPES, run_cli


def _plain(output: str) -> str:
    """The plan's table as one line of words (cells wrap over several rows)."""
    return " ".join(re.sub(r"[│┌┐└┘─┬┴┼├┤┏┓┗┛━┳┻╋┃┡┩╇]", " ", output).split())


def _generation_line(*overrides: str) -> str:
    result = run_cli("validate", RECIPES / "smollm2-word-arith.yaml", *overrides)
    assert result.exit_code == 0, result
    text = _plain(result.output)
    found = re.search(r"generation transformers ~([\d.]+) s a step, vLLM colocate ~([\d.]+) s \+ ~([\d.]+) s weight "
                      r"reload \(estimated from steps measured on 2 cores\): (.+?) (?:threads|sampling) ", text)
    assert found, result.output
    return found.group(0)


def test_the_smollm2_recipe_as_shipped_is_about_even_and_keeps_transformers() -> None:
    line = _generation_line()
    assert "about even" in line and "5.8 s a step" in line  # the measured step it is calibrated on


def test_long_completions_make_vllm_the_advice_with_the_key_to_set() -> None:
    line = _generation_line("training.max_completion_length=256", "training.per_device_train_batch_size=64")
    assert "vLLM is faster here" in line and "launch.vllm.mode: colocate" in line


def test_the_demo_model_is_told_to_keep_transformers() -> None:
    result = run_cli("validate", RECIPES / "demo.yaml")
    assert result.exit_code == 0, result
    assert "transformers is faster here" in _plain(result.output)
