"""The time plan with `sampling.share_prompt_forward`: a trained completion then runs only its share of the prompt
through forward and backward, so training's per-completion seconds grow with prompt tokens x that share +
completion tokens. A run records the share, and a plan from a row that did not share scales by the tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_cli import runs
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
