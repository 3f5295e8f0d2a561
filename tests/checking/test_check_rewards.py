"""`grpo check-rewards`: probes, completions files, generation, and every contract check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grpo_cli.checking.rewards import CheckReport, check_rewards
from grpo_cli.recipe.loader import load_recipe
from tests.conftest import RECIPES, assert_paragraph, run_cli

DEMO = RECIPES / "demo.yaml"

TINY = ["model.name_or_path=bundled:tiny-arith", "data.files.train=bundled:tiny-arith-data/train.jsonl",
        "data.files.test=bundled:tiny-arith-data/test.jsonl"]

BAD_REWARDS = '''
import math


def wrong_length(completions, **kwargs):
    return [1.0] * (len(completions) - 1)


def not_a_list(completions, **kwargs):
    return 1.0


def words(completions, **kwargs):
    return ["long" if len(c) > 20 else 0.0 for c in completions]


def nan_when_empty(completions, **kwargs):
    return [math.nan if not c else float(len(c) > 3) for c in completions]


def fails_on_six(completions, answer, **kwargs):
    return [1.0 / (not a.endswith(" 6")) for a in answer]  # answers look like "#### 6"


def always_half(completions, **kwargs):
    return [0.5 for _ in completions]


def brevity(completions, **kwargs):
    return [1.0 / (1 + len(c)) for c in completions]


async def logs_and_reads_state(completions, trainer_state, log_metric, **kwargs):
    log_metric("chars", sum(len(c) for c in completions) / len(completions))
    return [float(trainer_state.global_step == 0 and "12" in c) for c in completions]
'''


def _json(output: str) -> dict[str, Any]:
    return json.JSONDecoder().raw_decode(output[output.index("{"):])[0]


@pytest.fixture
def bad_dir(minimal_dir: Path) -> Path:
    (minimal_dir / "bad.py").write_text(BAD_REWARDS, encoding="utf-8")
    return minimal_dir


def _write_recipe(directory: Path, function: str) -> Path:
    """Accuracy plus one reward from bad.py (and repetition_penalty), on the 12-row `What is i+i?` data (row i
    has answer 2i)."""
    recipe = directory / "recipe.yaml"
    recipe.write_text(f"""
model: {{name_or_path: Qwen/Qwen2.5-0.5B-Instruct}}
data: {{files: data.jsonl, prompt: {{column: question}}, shuffle: false}}
rewards:
  - name: accuracy
  - function: bad.py:{function}
    weight: 0.5
  - name: repetition_penalty
training: {{num_generations: 4, per_device_train_batch_size: 8}}
""", encoding="utf-8")
    return recipe


def _check(directory: Path, function: str, **kwargs: Any) -> CheckReport:
    return check_rewards(load_recipe(_write_recipe(directory, function)), samples=4, **kwargs)


def _only(report: CheckReport, kind: str) -> Any:
    found = [v for v in report.violations if v.kind == kind]
    assert len(found) == 1, report.violations
    return found[0]


# --------------------------------------------------------------------------- the bundled recipes


def test_gsm8k_local_passes_and_shows_scores_stats_and_verdict() -> None:
    result = run_cli("check-rewards", RECIPES / "gsm8k-local.yaml", "--samples", "3")
    assert result.exit_code == 0, result
    for text in ("reference", "tags_only", "accuracy", "format", "ms/call", "frac_reward_zero_std",
                 "correlation", "all 3 rewards pass"):
        assert text in result.output, text


def test_gsm8k_local_json_has_probes_in_the_chat_tag_format() -> None:
    result = run_cli("check-rewards", RECIPES / "gsm8k-local.yaml", "--samples", "2", "--json")
    assert result.exit_code == 0, result
    report = _json(result.output)
    assert report["ok"] and report["groups"] == 2 and report["completions"] == 14
    by_probe = {s["probe"]: s for s in report["samples"] if s["group"] == 0}
    ref = by_probe["reference"]
    assert ref["completion"].startswith("<think>\n") and ref["completion"].endswith("\n</answer>")
    assert ref["scores"] == {"accuracy": 1.0, "format": 1.0, "repetition_penalty": 0.0}
    assert ref["total"] == 1.25  # weights 1 and 0.25; no repeated 3-grams in the reference
    assert by_probe["repeated"]["total"] < ref["total"]
    assert by_probe["wrong"]["scores"]["accuracy"] == 0.0
    assert by_probe["tags_only"]["total"] == 0.0
    assert {r["name"]: r["weight"] for r in report["rewards"]} == {"accuracy": 1.0, "format": 0.25,
                                                                   "repetition_penalty": 1.0}
    assert report["total"]["frac_reward_zero_std"] == 0.0


def test_multitask_routes_none_to_the_other_task() -> None:
    result = run_cli("check-rewards", RECIPES / "multitask.yaml", "--samples", "4", "--json")
    assert result.exit_code == 0, result
    report = _json(result.output)
    refs = [s["scores"] for s in report["samples"] if s["probe"] == "reference"]
    math_rows = [s for s in refs if s["code"] is None]
    code_rows = [s for s in refs if s["accuracy"] is None]
    assert math_rows and code_rows and len(math_rows) + len(code_rows) == len(refs) == 4  # rows spread over tasks
    # Math references are right; code rows ship a reference program, which passes all its tests.
    assert all(s["accuracy"] == 1.0 for s in math_rows) and all(s["code"] == 1.0 for s in code_rows)
    wrong = [s["scores"] for s in report["samples"] if s["probe"] == "wrong" and s["scores"]["accuracy"] is None]
    assert wrong and all(s["code"] == 0.0 for s in wrong)  # `raise NotImplementedError` fails them


def test_demo_probes_use_the_bare_answer() -> None:
    result = run_cli("check-rewards", RECIPES / "demo.yaml", *TINY, "--samples", "2", "--json")
    assert result.exit_code == 0, result
    report = _json(result.output)
    ref = next(s for s in report["samples"] if s["probe"] == "reference")
    assert ref["completion"].isdigit() and ref["scores"]["accuracy"] == 1.0
    assert ref["completion_tokens"] <= 4  # cut to max_completion_length like a generation


def test_generate_samples_num_generations_per_prompt_from_the_model() -> None:
    result = run_cli("check-rewards", RECIPES / "demo.yaml", *TINY, "--samples", "2", "--generate", "--json")
    assert result.exit_code in (0, 1), result
    report = _json(result.output)
    assert report["source"] == "generate" and report["groups"] == 2 and report["completions"] == 16
    assert all(s["probe"].startswith("sample ") and s["scores"]["accuracy"] in (0.0, 1.0)
               for s in report["samples"])


# --------------------------------------------------------------------------- contract checks


def test_wrong_number_of_values(bad_dir: Path) -> None:
    v = _only(_check(bad_dir, "wrong_length"), "length")
    assert v.reward == "wrong_length" and "values for" in v.message and v.rows


def test_not_a_list(bad_dir: Path) -> None:
    v = _only(_check(bad_dir, "not_a_list"), "not_list")
    assert v.reward == "not_a_list" and "returned float" in v.message


def test_non_numeric_value_names_the_row(bad_dir: Path) -> None:
    report = _check(bad_dir, "words")
    v = _only(report, "type")
    assert v.reward == "words" and "'long'" in v.message and v.rows[0] is not None
    assert all(report.samples[i].text and len(report.samples[i].text) > 20
               for i, val in enumerate(report.rewards[1].values) if val is None)


def test_nan_is_flagged_on_the_empty_probe(bad_dir: Path) -> None:
    v = _only(_check(bad_dir, "nan_when_empty"), "nan")
    assert v.reward == "nan_when_empty" and v.probes == ["empty"] and "return None" in v.message


def test_exception_names_the_row_that_raises(bad_dir: Path) -> None:
    report = _check(bad_dir, "fails_on_six")
    v = _only(report, "exception")
    assert set(v.rows) == {3} and "ZeroDivisionError" in v.message  # the row whose answer is 6
    assert report.rewards[1].errors > 0


def test_a_reward_that_never_varies(bad_dir: Path) -> None:
    v = _only(_check(bad_dir, "always_half"), "constant")
    assert v.reward == "always_half" and "never varies" in v.message and "0.5" in v.message


@pytest.mark.parametrize(("params", "flagged"), [
    ("{}", True),
    ("{max_completion_len: 256, soft_punish_cache: 64}", False),
])
def test_overlong_punishment_must_match_the_length_budget(minimal_dir: Path, params: str, flagged: bool) -> None:
    recipe = minimal_dir / "recipe.yaml"
    recipe.write_text(f"""
model: {{name_or_path: Qwen/Qwen2.5-0.5B-Instruct}}
data: {{files: data.jsonl, prompt: {{column: question}}}}
rewards:
  - name: accuracy
  - name: soft_overlong_punishment
    params: {params}
  - name: repetition_penalty
training: {{max_completion_length: 256}}
""", encoding="utf-8")
    report = check_rewards(load_recipe(recipe), samples=2)
    # The default budget (1024 tokens) is never reached with 256-token completions: no signal at all.
    assert [(v.reward, v.kind) for v in report.violations] == ([("soft_overlong_punishment", "constant")]
                                                               if flagged else [])
    if not flagged:
        overlong = [report.rewards[1].values[i] for i, s in enumerate(report.samples) if s.probe == "overlong"]
        assert overlong == [-1.0, -1.0]


def test_a_probe_beating_the_reference_is_hackable(bad_dir: Path) -> None:
    report = _check(bad_dir, "brevity")
    hacks = [v for v in report.violations if v.kind == "hackable"]
    assert {v.reward for v in hacks} == {"brevity"}
    assert "empty" in {p for v in hacks for p in v.probes}
    assert all(v.rows for v in hacks)


def test_async_reward_gets_trl_kwargs_and_its_metrics_are_shown(bad_dir: Path) -> None:
    report = _check(bad_dir, "logs_and_reads_state")
    assert report.ok, report.violations
    assert "chars" in report.metrics
    ref = next(i for i, s in enumerate(report.samples) if s.probe == "reference" and s.row == 6)  # answer 12
    assert report.rewards[1].values[ref] == 1.0


def test_cli_exit_1_and_json_name_reward_and_row(bad_dir: Path) -> None:
    recipe = _write_recipe(bad_dir, "fails_on_six")
    result = run_cli("check-rewards", recipe, "--samples", "4")
    assert result.exit_code == 1, result
    assert "fails_on_six on row 3" in result.output and "ZeroDivisionError" in result.output
    result = run_cli("check-rewards", recipe, "--samples", "4", "--json")
    assert result.exit_code == 1
    violation = _json(result.output)["violations"][0]
    assert (violation["reward"], violation["kind"], violation["row"]) == ("fails_on_six", "exception", 3)


# --------------------------------------------------------------------------- --completions FILE


def test_completions_file_rows_and_self_contained_prompts(bad_dir: Path) -> None:
    path = bad_dir / "c.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in [
        {"row": 2, "completion": "The answer is 4."},
        {"row": 2, "completion": "The answer is 5."},
        {"prompt": "What is 10+10?", "answer": "20", "completion": "20"},
        {"prompt": "What is 10+10?", "answer": "20", "completion": "It is 19"},
    ]) + "\n\n", encoding="utf-8")
    report = _check(bad_dir, "always_half", completions=path)
    assert report.source == "file" and report.groups == 2
    assert report.rewards[0].values == [1.0, 0.0, 1.0, 0.0]
    assert [s.probe for s in report.samples] == ["line 1", "line 2", "line 3", "line 4"]


@pytest.mark.parametrize(("line", "says"), [
    ('{"row": 0, "completion": "x"}\n{"row": 0, "completion": ', "c.jsonl:2: not valid JSON"),
    ('{"row": 99, "completion": "x"}', "c.jsonl:1: 'row' must be an integer from 0 to 11"),
    ('{"row": 0, "text": "x"}', "c.jsonl:1: missing key 'completion'"),
    ('["x"]', "c.jsonl:1: expected a JSON object"),
    ('{"completion": "x"}', "c.jsonl:1: give 'row'"),
    ("", "has no lines"),
])
def test_bad_completions_file_is_exit_2_with_file_and_line(bad_dir: Path, line: str, says: str) -> None:
    (bad_dir / "c.jsonl").write_text(line, encoding="utf-8")
    recipe = _write_recipe(bad_dir, "always_half")
    result = run_cli("check-rewards", recipe, "--completions", bad_dir / "c.jsonl")
    assert result.exit_code == 2, result
    assert says in result.output.replace("\n", " ") and "Traceback" not in result.output


def test_completions_and_generate_together_is_bad_input() -> None:
    result = run_cli("check-rewards", RECIPES / "gsm8k-local.yaml", "--completions", "x.jsonl", "--generate")
    assert_paragraph(result, "--completions and --generate")


def test_a_degenerate_answer_earning_full_marks_is_a_verdict() -> None:
    """`7 7 7 ...` is still the right number for `accuracy`: repeating costs the policy nothing, so it fails;
    with the demo's 4-token budget the repetition is cut before it repeats, and is not judged."""
    result = run_cli("check-rewards", RECIPES / "demo.yaml", "training.max_completion_length=256")
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "degenerate" in text and "the 'repeated' probe" in text and "as much as the reference answer" in text
    assert "repetition_penalty" in text
    assert run_cli("check-rewards", RECIPES / "demo.yaml").exit_code == 0


@pytest.mark.parametrize("content, needles", [(b"\xff\xfe\x00\x01", ["not UTF-8"]), (None, ["is a directory"])])
def test_completions_and_examples_files_that_are_not_text(tmp_path: Path, content, needles) -> None:
    path = tmp_path / "given.jsonl"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content.replace(b"\x00", b""))
    assert_paragraph(run_cli("check-rewards", DEMO, "--completions", path), "completions file", *needles)
    assert_paragraph(run_cli("check-tools", RECIPES / "tools-demo.yaml", "--no-model", "--examples", path),
                     "--examples", *needles)


def test_check_rewards_shows_one_row_per_probe_and_a_verdict_per_reward(tmp_path: Path) -> None:
    (tmp_path / "flat.py").write_text("def flat(completions, **kwargs):\n    return [0.5 for _ in completions]\n",
                                      encoding="utf-8")
    recipe = tmp_path / "two.yaml"
    recipe.write_text(f"extends: {DEMO}\nrewards:\n  - {{name: accuracy, params: {{answer_format: first_number}}}}\n"
                      "  - {function: flat.py:flat}\n", encoding="utf-8")
    result = run_cli("check-rewards", recipe, "--samples", "8")
    assert result.exit_code == 1, result  # the flat reward is a violation
    lines = result.output.splitlines()
    assert "score per probe over 8 data rows" in result.output
    assert sum(1 for ln in lines if ln.startswith("│ reference ")) == 1  # not one per data row
    accuracy = next(ln for ln in lines if ln.startswith("│ accuracy "))
    flat = next(ln for ln in lines if ln.startswith("│ flat ") or ln.startswith("│ flat.py"))
    assert "✓ pass (reference 1, wrong 0)" in accuracy, accuracy
    assert "✗ constant" in flat, flat
