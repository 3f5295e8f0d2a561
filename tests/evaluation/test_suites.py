"""Benchmark suites: the shipped test sets, their answer extraction on hand-checked rows, and the interval."""

from __future__ import annotations

import pytest

from grpo_cli.errors import GrpoError
from grpo_cli.evaluation import EvalSettings, wilson_interval
from grpo_cli.evaluation.suites import extract_suite_answer, get_suite
from grpo_cli.suite_table import SUITES, bundled


def test_shipped_sets_have_their_upstream_sizes_and_licences() -> None:
    sizes = {"gsm8k": 1319, "math500": 500, "svamp": 1000}
    assert bundled() == list(sizes)
    for name in bundled():
        rows = get_suite(name).rows()
        assert len(rows) == sizes[name]
        assert len({r.id for r in rows}) == len(rows)
        assert all(r.question and r.reference for r in rows)
    from grpo_cli.evaluation.suites import BENCHMARKS_DIR

    for name in bundled():
        assert "MIT License" in (BENCHMARKS_DIR / name / "LICENSE").read_text()
        assert SUITES[name].licence.startswith("MIT") and SUITES[name].offline
    assert "Source" in (BENCHMARKS_DIR / "README.md").read_text()


def test_gsm8k_hand_checked_rows() -> None:
    rows = get_suite("gsm8k").rows()
    # test.jsonl line 1: Janet's ducks, "#### 18"; line 147: "#### 2,125" (thousands separator)
    assert rows[0].question.startswith("Janet") and rows[0].reference == "18"
    assert rows[146].reference == "2125"
    suite = get_suite("gsm8k")
    assert suite.extract("so 1080 - 0 = 1,080\n#### 1,080") == "1080"  # train.jsonl line 346's answer format
    assert suite.is_correct("She makes 9 * 2 = $<<9*2=18>>18 every day.\n#### 18", "18")
    assert suite.is_correct("The answer is\n#### $2,125.", "2125")
    assert not suite.is_correct("#### 2,126", "2125")
    # No "####": lm-eval's flexible extraction takes the last number
    assert suite.extract("16 - 3 - 4 = 9 eggs, so she makes $18.") == "18"
    assert suite.extract("#### -10") == "-10"
    assert suite.extract("I do not know.") is None


def test_every_gsm8k_reference_solution_scores_correct() -> None:
    """The upstream solutions end with '#### N': each must extract to its own reference."""
    import gzip
    import json

    from grpo_cli.evaluation.suites import BENCHMARKS_DIR

    suite = get_suite("gsm8k")
    with gzip.open(BENCHMARKS_DIR / "gsm8k" / "test.jsonl.gz", "rt") as fh:
        solutions = [json.loads(line)["answer"] for line in fh]
    refs = [r.reference for r in suite.rows()]
    assert all(suite.is_correct(s, ref) for s, ref in zip(solutions, refs, strict=True))


def test_math500_hand_checked_rows() -> None:
    suite = get_suite("math500")
    rows = {r.id: r for r in suite.rows()}
    half = rows["test/counting_and_probability/188.json"]  # the triangle-probability problem, answer 1/2
    assert half.reference == "\\frac{1}{2}"
    solution_end = "the probability that such a triangle exists is $(9/2)/9=\\boxed{\\frac{1}{2}}$."
    assert extract_suite_answer(solution_end, "boxed") == "\\frac{1}{2}"
    assert suite.is_correct(solution_end, half.reference)
    assert suite.is_correct("So the answer is $\\boxed{0.5}$.", half.reference)
    assert suite.is_correct("\\boxed{\\dfrac12}", half.reference)
    assert not suite.is_correct("\\boxed{\\frac{1}{3}}", half.reference)
    assert not suite.is_correct("The answer is 1/2.", half.reference)  # the format asks for \boxed{}
    polar = rows["test/precalculus/807.json"]  # first row: (0,3) in polar coordinates
    assert polar.reference == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert suite.is_correct("... $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}.$", polar.reference)
    assert suite.is_correct("\\boxed{(3, \\frac{\\pi}{2})}", polar.reference)
    assert not suite.is_correct("\\boxed{(3, \\pi)}", polar.reference)


def test_svamp_hand_checked_rows() -> None:
    suite = get_suite("svamp")
    rows = suite.rows(3)
    # chal-1: DVD packs cost 76 dollars with a 25 dollar discount -> ( 76.0 - 25.0 ) = 51.0
    assert rows[0].id == "chal-1" and rows[0].reference == "51"
    assert rows[0].question == ("Each pack of dvds costs 76 dollars. If there is a discount of 25 dollars on each "
                                "pack How much do you have to pay to buy each pack?")
    assert suite.prompt(rows[0]).endswith(rows[0].question) and "####" in suite.prompt(rows[0])
    assert suite.is_correct("76 - 25 = 51\n#### 51", "51")
    assert suite.is_correct("You pay 51.0 dollars.", "51")
    assert not suite.is_correct("#### 101", "51")


def test_unknown_suite_names_the_ones_there_are() -> None:
    with pytest.raises(GrpoError) as err:
        get_suite("gsm9k")
    assert ", ".join(bundled()) in str(err.value)
    assert get_suite("MATH-500").name == "math500"


def test_the_suite_table_is_what_the_schema_help_card_and_docs_say() -> None:
    """One row per suite: its data ships (or the refusal says why), and every place that names suites reads it."""
    from grpo_cli.artefacts.card import SUITE_DATASETS
    from grpo_cli.evaluation.suites import BENCHMARKS_DIR
    from grpo_cli.recipe.schema.evaluation import EvalSection
    from tests.conftest import ROOT, run_cli

    help_text = " ".join(run_cli("eval", "--help").output.split())
    docs = (ROOT / "docs" / "eval-and-merge.md").read_text(encoding="utf-8")
    for name, spec in SUITES.items():
        if spec.shipped:
            assert (BENCHMARKS_DIR / name / spec.file).is_file() and get_suite(name).rows(1)
            assert name in help_text and f"| `{name}` |" in docs and name in SUITE_DATASETS
            assert EvalSection(suite=name, on_save=[name]).suite == name
            continue
        with pytest.raises(GrpoError) as err:
            get_suite(name)
        with pytest.raises(ValueError) as invalid:
            EvalSection(on_save=[name.upper()])
        assert spec.licence in str(err.value) and spec.licence in str(invalid.value)
        assert name not in SUITE_DATASETS
        assert EvalSection(suite=name, suite_files={name: "mine.jsonl"}).suite == name  # a local copy stands in


def test_wilson_interval_is_sane_at_the_edges() -> None:
    lo, hi = wilson_interval(0, 50)
    assert lo == 0.0 and 0.06 < hi < 0.08  # 0/50 is not "exactly 0"
    lo, hi = wilson_interval(50, 50)
    assert hi == 1.0 and 0.92 < lo < 0.94
    lo, hi = wilson_interval(30, 100)  # textbook value: 0.219 .. 0.396
    assert round(lo, 3) == 0.219 and round(hi, 3) == 0.396


def test_scoring_greedy_and_pass_at_k() -> None:
    suite = get_suite("svamp")
    rows = suite.rows(2)  # references 51 and 1
    greedy = suite.score(rows, ["#### 51", "#### 7"], EvalSettings(limit=2), label="m")
    s = greedy.summary()
    assert s["accuracy"] == 0.5 and s["correct"] == 1 and s["decoding"] == "greedy"
    assert s["ci95"][0] < 0.5 < s["ci95"][1]
    sampled = suite.score(rows, ["#### 51", "#### 50", "#### 2", "#### 3"], EvalSettings(k=2, temperature=1.0, limit=2))
    s = sampled.summary()
    assert s["accuracy"] == 0.25 and s["pass@2"] == 0.5


def test_every_math500_reference_solution_scores_correct() -> None:
    """Each upstream solution's last \\boxed{} must match its own answer field."""
    import gzip
    import json

    from grpo_cli.evaluation.suites import BENCHMARKS_DIR

    suite = get_suite("math500")
    with gzip.open(BENCHMARKS_DIR / "math500" / "test.jsonl.gz", "rt") as fh:
        solutions = [json.loads(line)["solution"] for line in fh]
    refs = [r.reference for r in suite.rows()]
    assert all(suite.is_correct(s, ref) for s, ref in zip(solutions, refs, strict=True))
