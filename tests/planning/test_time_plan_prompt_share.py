"""The time plan with `sampling.share_prompt_forward`: a trained completion then runs only its share of the prompt
through forward and backward, so training's per-completion seconds grow with prompt tokens x that share +
completion tokens. A run records the share, and a plan from a row that did not share scales by the tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_cli import runs
from grpo_cli.step_rates import PARTS, RateRow, Seconds, StepShape, fit_fixed
from tests.conftest import RECIPES, run_cli

DEMO = RECIPES / "demo.yaml"
SHORT = ("training.max_steps=4", "training.logging_steps=1", "eval.before_after=false")
SHARED = "sampling.share_prompt_forward=true"


def _training_part(*args: str) -> dict:
    result = run_cli("validate", DEMO, *args, "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)["time_plan"]
    return next(p for p in plan["parts"] if p["part"] == "training")


def test_the_plan_scales_training_by_the_prompt_tokens_a_completion_runs(tmp_path: Path, rates_file: Path) -> None:
    out = tmp_path / "run"
    result = run_cli("train", DEMO, *SHORT, "-o", out)
    assert result.exit_code == 0, result.output
    row = runs.read_manifest(out).step_rates
    assert row.shape.prompt_share == 1.0 and row.shape.prompt_tokens
    training, fixed = row.seconds["training"].mean, row.fixed["training"]
    prompt, completion = row.shape.prompt_tokens, row.shape.completion_tokens

    shared = _training_part(SHARED)  # 8 completions share each prompt's pass
    per_completion = (prompt / 8 + completion) / (prompt + completion)
    assert shared["seconds"]["mean"] == pytest.approx(fixed + (training - fixed) * per_completion, rel=1e-4)
    assert "each prompt's forward shared by 8 completions (the row's: one per completion)" in shared["how"]
    assert _training_part()["seconds"]["mean"] == pytest.approx(training, rel=1e-6)  # the row's own recipe

    out = tmp_path / "shared"
    result = run_cli("train", DEMO, *SHORT, SHARED, "-o", out)
    assert result.exit_code == 0, result.output
    assert runs.read_manifest(out).step_rates.shape.prompt_share == pytest.approx(1 / 8)


def _row(completions: int, training: float, prompt_share: float) -> RateRow:
    shape = StepShape(model="m", params=100, lora=False, backend="transformers", processes=1, threads=1,
                      completions=completions, completion_tokens=10, prompt_tokens=30.0, prompt_share=prompt_share)
    seconds = {p: Seconds(mean=1.0, low=1.0, high=1.0) for p in PARTS}
    seconds["training"] = Seconds(mean=training, low=training, high=training)
    return RateRow(machine="m", date="2026", command="c", shape=shape, seconds=seconds, steps=3)


def test_two_runs_that_shared_the_prompt_differently_still_fit_one_line() -> None:
    """16 completions sharing their 30-token prompt by 8 run 16 x (30/8 + 10) = 220 tokens in 3.2 s; 32 that do
    not share run 32 x 40 = 1280 tokens in 13.8 s: 0.01 s a token and 1 s fixed. Counted as completions (16 and
    32), the two would fit a line with no fixed part at all."""
    assert fit_fixed(_row(16, 3.2, 1 / 8), _row(32, 13.8, 1.0))["training"] == pytest.approx(1.0)
    assert fit_fixed(_row(16, 3.2, 1.0), _row(32, 13.8, 1.0))["training"] == pytest.approx(0.0)
