"""`grpo validate` says which generation backend makes a CPU step shorter, from the recipe's own numbers.

The estimate's constants are the SmolLM2 and demo steps measured on 2 cores (docs/performance.md); what a user
notices is the advice: keep transformers for a tiny model, vLLM when generation dominates, and the key to set.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

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


def test_auto_generates_with_transformers_where_vllm_is_not_installed(tmp_path: Path) -> None:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: tests/test_generation_choice.py's -m vllm test covers auto with it")
    assert "auto chose transformers: vLLM is not installed" in _plain(
        run_cli("validate", RECIPES / "demo.yaml", "launch.vllm.mode=auto").output)
    out = tmp_path / "run"
    result = run_cli("train", RECIPES / "demo.yaml", "-o", out, "launch.vllm.mode=auto", "training.max_steps=2",
                     "training.logging_steps=1", "eval.before_after=false")
    assert result.exit_code == 0, result.output
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in logs if "time/generation" in r]
    assert len(steps) == 2 and all(r["time/weight_sync"] == 0 for r in steps)  # no vLLM took weights
    assert not any(k.startswith("sampling/") for r in logs for k in r)  # nor corrected for a sampler


@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (scripts/install_vllm_cpu.sh)")
def test_auto_with_vllm_installed_picks_by_the_estimate_and_trains_with_the_pick(tmp_path: Path) -> None:
    # A 0.5B model (its shape from the shipped table; nothing is downloaded): generation dominates, vLLM is chosen.
    bigger = run_cli("validate", RECIPES / "smollm2-word-arith.yaml", "launch.vllm.mode=auto",
                     "model.name_or_path=Qwen/Qwen2.5-0.5B-Instruct", "model.lora=null")
    assert "auto chose vLLM colocate" in _plain(bigger.output), bigger.output
    assert "vLLM colocate on CPU" in _plain(bigger.output)  # and every colocate check ran on it
    # The demo's 115k-parameter model: the weight sync outweighs its generation, transformers is chosen and used.
    out = tmp_path / "run"
    result = run_cli("train", RECIPES / "demo.yaml", "-o", out, "launch.vllm.mode=auto", "training.max_steps=2",
                     "training.logging_steps=1", "eval.before_after=false")
    assert result.exit_code == 0, result.output
    assert "auto chose transformers" in _plain(run_cli("validate", RECIPES / "demo.yaml",
                                                       "launch.vllm.mode=auto").output)
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(r["time/weight_sync"] == 0 for r in logs if "time/generation" in r)
