"""What `grpo validate` says of `sampling.dynamic`: the plan line and its cost, and every refusal (one table), on
the bundled demo recipe. The training side is tests/training/test_dynamic_sampling.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import RECIPES, ROOT, assert_paragraph, run_cli

DEMO = RECIPES / "demo.yaml"


def test_validate_names_the_setting_and_its_cost(tmp_path: Path) -> None:
    out = tmp_path / "last"
    result = run_cli("validate", DEMO, "sampling.dynamic={max_rounds: 3}", f"output.dir={out}")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "dynamic, on accuracy (drop groups with std <= 0), up to 3 generation rounds" in text
    assert "up to +200% per step" in text
    out.mkdir()
    (out / "metrics.jsonl").write_text("\n".join(json.dumps({"step": s, "frac_reward_zero_std": z})
                                                 for s, z in ((1, 0.4), (2, 0.6))) + "\n")
    text = " ".join(run_cli("validate", DEMO, "sampling.dynamic={}", f"output.dir={out}").output.split())
    assert "last run had 50% zero-std groups: about +100% generation per step" in text


@pytest.mark.parametrize(("overrides", "key", "says"), [
    (["launch.profile=ddp", "launch.num_processes=2", "training.per_device_train_batch_size=12"],
     "sampling.dynamic", "keeps whole groups on each process"),
    (["training.beta=0.04"], "sampling.dynamic", "needs beta: 0"),
    (["sampling.dynamic.metric=format"], "sampling.dynamic", "'format' is not a reward of this recipe"),
    (["training.num_iterations=2"], "sampling.dynamic", "needs on-policy batches"),
    (["sampling.dynamic={strategy: oversample, oversample: 1}"], "sampling.dynamic.oversample", "greater than 1"),
    (["sampling.dynamic={strategy: oversample, oversample: 9}"], "sampling.dynamic.oversample",
     "less than or equal to 8"),
    (["sampling.dynamic={strategy: oversample, oversample: true}"], "sampling.dynamic.oversample",
     "must be a factor above 1"),
    (["sampling.dynamic={strategy: oversample, oversample: .nan}"], "sampling.dynamic.oversample", "finite number"),
    (["sampling.dynamic={oversample: 2}"], "sampling.dynamic", "is read only with strategy: oversample"),
    (["sampling.dynamic={strategy: oversample, max_rounds: 3}"], "sampling.dynamic",
     "does not apply to strategy: oversample"),
    (["sampling.dynamic={strategy: prime}"], "sampling.dynamic.strategy", "'refill' or 'oversample'"),
])
def test_validate_refuses_what_dynamic_sampling_cannot_do(overrides: list[str], key: str, says: str) -> None:
    """The refusals of `sampling.dynamic`, one table: each one paragraph, exit 2, naming the key."""
    assert_paragraph(run_cli("validate", DEMO, "sampling.dynamic={}", *overrides), key, says)


def test_validate_asks_which_reward_when_several_could_be_meant(write_recipe) -> None:
    text = (DEMO.read_text().replace("  - name: accuracy\n    params: {answer_format: first_number}\n",
                                     "  - {function: r.py:a}\n  - {function: r.py:b}\n")
            .replace("bundled:tiny-arith-data", str(ROOT / "grpo_cli" / "assets" / "tiny-arith-data")))
    recipe = write_recipe(text + "sampling:\n  dynamic: {}\n")
    (recipe.parent / "r.py").write_text("def a(completions, **kw):\n    return [0.0] * len(completions)\n"
                                        "def b(completions, **kw):\n    return [0.0] * len(completions)\n")
    result = run_cli("validate", recipe)
    assert result.exit_code == 2, result.output
    assert "Name the outcome reward: one of a, b" in " ".join(result.output.split())


def test_max_rounds_is_bounded_and_the_bound_priced(tmp_path: Path) -> None:
    assert_paragraph(run_cli("validate", DEMO, "sampling.dynamic.max_rounds=1000000000"), "sampling.dynamic.max_rounds",
               "less than or equal to 100")
    assert_paragraph(run_cli("validate", DEMO, "sampling.dynamic.max_rounds=true"), "sampling.dynamic.max_rounds",
               "must be a number of generation rounds (1 to 100)")
    result = run_cli("validate", DEMO, "sampling.dynamic.max_rounds=100", f"output.dir={tmp_path / 'none'}")
    assert result.exit_code == 0, result.output
    assert "up to +9900% per step" in " ".join(result.output.split())


@pytest.mark.parametrize(("overrides", "most"), [
    (["sampling.dynamic.min_std=0.5"], "0.5"),  # accuracy scores 0 or 1: half at each end gives std 0.5
    (["sampling.dynamic.min_std=1.5", "sampling.dynamic.metric=reward", "rewards=[{name: accuracy, params: "
      "{answer_format: first_number}}, {name: format, weight: 2}]"], "1.5"),  # the weighted total spans [0, 3]
])
def test_a_min_std_no_group_can_exceed_is_refused(overrides: list[str], most: str) -> None:
    assert_paragraph(run_cli("validate", DEMO, *overrides), "sampling.dynamic.min_std", "drops every group",
               f"is at most {most} (half of them at each end)", f"Set min_std below {most}")


def test_a_reachable_min_std_or_an_unknown_range_validates(write_recipe) -> None:
    assert run_cli("validate", DEMO, "sampling.dynamic.min_std=0.49").exit_code == 0
    text = (DEMO.read_text().replace("  - name: accuracy\n    params: {answer_format: first_number}\n",
                                     "  - {function: r.py:a}\n")
            .replace("bundled:tiny-arith-data", str(ROOT / "grpo_cli" / "assets" / "tiny-arith-data")))
    recipe = write_recipe(text + "sampling:\n  dynamic: {min_std: 5}\n")  # user code: its range is unknown
    (recipe.parent / "r.py").write_text("def a(completions, **kw):\n    return [0.0] * len(completions)\n")
    assert run_cli("validate", recipe).exit_code == 0


def test_a_nan_zero_std_share_of_the_last_run_is_unknown_not_nan(tmp_path: Path) -> None:
    out = tmp_path / "last"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1, "frac_reward_zero_std": NaN}\n'
                                       '{"step": 2, "frac_reward_zero_std": Infinity}\n')
    result = run_cli("validate", DEMO, "sampling.dynamic={}", f"output.dir={out}")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "nan%" not in text.lower() and "up to +200% per step (unknown: the last run's" in text
    assert "logged frac_reward_zero_std only as NaN, inf or out of [0, 1]" in text


def test_the_expected_filler_of_oversampling() -> None:
    """`grpo validate`'s price of `strategy: oversample`: E[max(T - kept, 0)] / T, kept ~ Binomial(n, keep)."""
    from grpo_cli.validation.sampling_checks import expected_filler

    assert expected_filler(8, 4, 1.0) == 0 and expected_filler(8, 4, 0.0) == 1
    assert expected_filler(1, 1, 0.5) == pytest.approx(0.5)
    # 2 of 4 drawn groups kept with p = 0.5, batch of 2: short by 2 w.p. 1/16, by 1 w.p. 4/16 -> (2 + 4) / 16 / 2
    assert expected_filler(4, 2, 0.5) == pytest.approx(6 / 32)
