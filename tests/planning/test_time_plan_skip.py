"""The time plan with the zero-advantage skip: a group whose completions all score alike skips forward and
backward, so a step's training part grows with the share of completions that train, and a step's few groups
skip by chance. A run records that share, the plan carries it (or, without the skip, plans every completion),
and the check says when the share, not a rate, moved the step. Expected figures come from what the runs log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_cli import runs
from grpo_cli.step_rates import PARTS, RateRow, Seconds, StepShape, fit_fixed, remember, remembered_rates
from grpo_cli.training.zero_advantage import METRIC
from tests.conftest import RECIPES, plan_text, run_cli

DEMO = RECIPES / "demo.yaml"
SKIP = ("sampling.skip_zero_advantage=true",)
SHORT = ("training.max_steps=4", "training.logging_steps=1", "eval.before_after=false")


def _train(out: Path, *args: str) -> str:
    result = run_cli("train", DEMO, *SHORT, *SKIP, *args, "-o", out)
    assert result.exit_code == 0, result.output
    return plan_text(result.output)


def _logged_share(out: Path) -> float:
    """1 - the skipped share TRL's metrics log holds for the steps after the first."""
    logged = [r[METRIC] for r in runs.read_jsonl(out / runs.METRICS) if r.get("step", 0) > 1 and METRIC in r]
    assert logged
    return 1 - sum(logged) / len(logged)


def _plan(*args: str) -> dict:
    result = run_cli("validate", DEMO, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["time_plan"]


def test_a_run_records_the_share_that_trained_and_the_plan_carries_it(tmp_path: Path, rates_file: Path) -> None:
    out = tmp_path / "run"
    _train(out)
    measured = runs.read_manifest(out).step_rates
    share = _logged_share(out)
    assert measured.shape.trained == pytest.approx(share, abs=1e-4)
    assert 0 < share < 1  # the seeded demo skips some groups in its first steps, not all
    training, fixed = measured.seconds["training"].mean, measured.fixed["training"]

    same = _plan(*SKIP)  # the same recipe: the skip trains the share the run trained
    assert same["shape"]["trained"] == measured.shape.trained
    part = next(p for p in same["parts"] if p["part"] == "training")
    assert part["seconds"]["mean"] == pytest.approx(training, rel=1e-6)
    assert "the zero-advantage skip training" in part["how"]

    # without the skip every completion trains: the seconds that grow with them (not the fixed ones, such as the
    # optimizer step) grow by 1 / share
    every = _plan("sampling.skip_zero_advantage=false")
    assert every["shape"]["trained"] == 1.0
    part = next(p for p in every["parts"] if p["part"] == "training")
    assert 0 < fixed < training
    assert part["seconds"]["mean"] == pytest.approx(fixed + (training - fixed) / measured.shape.trained, rel=1e-4)


def test_a_share_unlike_the_plan_is_named_with_the_step_at_that_share(tmp_path: Path, rates_file: Path) -> None:
    """The plan's row says almost every group skipped; the run trains far more: the summary and the report say
    the share moved the step and what the step was against the plan at the share that trained (as the reason
    when the step took more than 2x the plan, beside the check otherwise)."""
    _train(tmp_path / "first")
    [row] = next(iter(remembered_rates(rates_file).values()))
    rates_file.unlink()
    remember(row.model_copy(update={"shape": row.shape.model_copy(update={"trained": 0.02})}), rates_file)
    out = tmp_path / "second"
    output = _train(out)
    manifest = runs.read_manifest(out)
    got = manifest.step_rates.shape.trained
    assert manifest.time_plan.shape.trained == 0.02 and got >= 0.07
    said = f"the zero-advantage skip let {got:.2f} of the completions train against 0.02 planned"
    assert said in output
    report = " ".join((out / runs.REPORT_SUMMARY).read_text(encoding="utf-8").split())
    assert said in report
    plan, planned = manifest.time_plan, manifest.time_plan.part("training")
    at_share = plan.step.mean + (planned.seconds.mean - planned.fixed) * (got / 0.02 - 1)
    ratio = manifest.step_rates.seconds["step"].mean / at_share
    assert f"at that share the step took {ratio:.2f}x the plan" in output


def _row(completions: int, training: float, trained: float | None) -> RateRow:
    shape = StepShape(model="m", params=100, lora=False, backend="transformers", processes=1, threads=1,
                      completions=completions, completion_tokens=10, trained=trained)
    seconds = {p: Seconds(mean=1.0, low=1.0, high=1.0) for p in PARTS}
    seconds["training"] = Seconds(mean=training, low=training, high=training)
    return RateRow(machine="m", date="2026", command="c", shape=shape, seconds=seconds, steps=3)


def test_two_batch_sizes_fit_training_per_completion_that_trained() -> None:
    """16 completions, half trained, 4 s; 32 completions, all trained, 12 s: 8 and 32 completions trained, a
    line of 1/3 s per completion trained and 4/3 s fixed. Taken as measured (no shares), 4 s at 16 and 12 s at 32
    would fit no fixed part."""
    assert fit_fixed(_row(16, 4.0, 0.5), _row(32, 12.0, 1.0))["training"] == pytest.approx(4 / 3)
    assert fit_fixed(_row(16, 4.0, None), _row(32, 12.0, None))["training"] == pytest.approx(0.0)
