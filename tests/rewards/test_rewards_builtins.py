"""Hand-worked cases for every built-in reward, in both standard and conversational form."""

from __future__ import annotations

import functools
import inspect
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from grpo_cli.rewards.builtins import BUILTINS, completion_text
from grpo_cli.rewards.builtins.answers import (
    accuracy,
    answers_match,
    parse_completion_answer,
    reference_answer,
    to_number,
)
from grpo_cli.rewards.builtins.code import code, extract_code, parse_tests
from grpo_cli.rewards.builtins.formats import (
    code_format,
    format_reward,
    reasoning_steps,
    soft_format,
    tag_count,
)
from grpo_cli.rewards.builtins.length import cosine, length, repetition_penalty, soft_overlong_punishment


def conv(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def both(texts: list[str]) -> list[list[Any]]:
    """The same completions as plain strings and as conversational messages."""
    return [list(texts), [conv(t) for t in texts]]


GOOD = "<think>\nI add 2 and 2.\n</think>\n<answer>\n4\n</answer>"


# --------------------------------------------------------------------------- contract


def test_registry_names_and_contract() -> None:
    assert set(BUILTINS) == {
        "accuracy", "format", "soft_format", "tag_count", "reasoning_steps", "length", "cosine",
        "repetition_penalty", "soft_overlong_punishment", "code_format", "code",
    }
    for name, func in BUILTINS.items():
        params = inspect.signature(func).parameters
        assert list(params)[0] == "completions", name
        assert any(p.kind is p.VAR_KEYWORD for p in params.values()), name
        tunables = [p for p in list(params.values())[1:] if p.kind is not p.VAR_KEYWORD]
        assert all(p.kind is p.KEYWORD_ONLY and p.default is not p.empty for p in tunables), name
        assert (inspect.getdoc(func) or "").strip(), name


@pytest.mark.parametrize("name", ["format", "soft_format", "tag_count", "reasoning_steps",
                                  "repetition_penalty", "soft_overlong_punishment", "code_format"])
def test_every_builtin_accepts_trainer_kwargs(name: str) -> None:
    bound = functools.partial(BUILTINS[name])
    out = bound(prompts=["p", "p"], completions=[GOOD, conv(GOOD)], completion_ids=[[1, 2], [3]],
                trainer_state=None, answer=["4", "4"], some_column=[1, 2], log_extra=None)
    assert len(out) == 2 and all(isinstance(x, float) for x in out)


def test_completion_text_shapes() -> None:
    assert completion_text("plain") == "plain"
    assert completion_text(conv("hi")) == "hi"
    assert completion_text([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a1"},
                            {"role": "tool", "content": "t"}, {"role": "assistant", "content": "a2"}]) == "a2"
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "x"},
                                                              {"type": "text", "text": "y"}]}]) == "xy"
    assert completion_text([]) == ""
    assert completion_text(None) == ""


# --------------------------------------------------------------------------- accuracy


def test_gsm8k_reference_with_thousands_separator() -> None:
    ref = "She sells 1,000 and then 80 more.\n#### 1,080"
    assert reference_answer(ref) == "1,080"
    for completions in both(["So the total is 1080.", "<answer>1,080</answer>", "It is 1008"]):
        assert accuracy(completions, answer=[ref] * 3) == [1.0, 1.0, 0.0]


def test_negative_numbers_and_numeric_reference() -> None:
    comps = ["#### -5", "The result: -5.0", "#### 5"]
    assert accuracy(comps, answer=[-5, "-5", "-5"]) == [1.0, 1.0, 0.0]


def test_latex_fraction_vs_decimal_and_nested_boxed() -> None:
    comps = [r"Thus \boxed{\frac{1}{2}}.", r"so $\boxed{0.5}$", r"\boxed{-\frac{1}{2}}", r"\boxed{2}"]
    assert accuracy(comps, answer=["0.5", r"\frac{1}{2}", "-1/2", "1/2"]) == [1.0, 1.0, 1.0, 0.0]
    assert parse_completion_answer(r"a \boxed{\frac{\sqrt{4}}{4}} b", "boxed") == r"\frac{\sqrt{4}}{4}"


def test_text_after_answer_tag_is_ignored_by_answer_tag_format() -> None:
    text = "<think>\n7 or 8?\n</think>\n<answer>\n8\n</answer>\nActually I also like 7."
    assert accuracy([text], answer=["8"], answer_format="answer_tag") == [1.0]
    assert accuracy([text], answer=["8"], answer_format="last_number") == [0.0]
    assert accuracy([text], answer=["8"]) == [1.0]  # auto prefers the tag


def test_answer_formats() -> None:
    text = r"First 3, then \boxed{12}, so #### 15 and finally 21"
    assert parse_completion_answer(text, "boxed") == "12"
    assert parse_completion_answer(text, "gsm8k") == "15 and finally 21"
    assert parse_completion_answer(text, "first_number") == "3"
    assert parse_completion_answer(text, "last_number") == "21"
    assert parse_completion_answer(text, "auto") == "12"
    assert parse_completion_answer("no numbers here", "auto") is None
    assert parse_completion_answer(r"<think>maybe \boxed{3}</think> so 5 it is", "auto") == "5"
    assert parse_completion_answer(r"<think>it is \boxed{3}</think> done", "auto") == "3"
    assert parse_completion_answer("COVID-19 cases: 1,200", "first_number") == "19"
    with pytest.raises(ValueError, match="answer_format"):
        accuracy(["1"], answer=["1"], answer_format="nope")


def test_missing_reference_gives_none_and_solution_column_works() -> None:
    assert accuracy(["4", "4"], answer=[None, ""]) == [None, None]
    assert accuracy(["4"]) == [None]
    assert accuracy([conv(r"\boxed{4}")], solution=[r"The answer is $\boxed{4}$."]) == [1.0]
    assert accuracy(["no answer at all"], answer=["4"]) == [0.0]


def test_accuracy_without_math_verify(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "math_verify", None)  # import math_verify -> ImportError
    assert accuracy([r"\boxed{\frac{1}{2}}", r"\boxed{1/2}", r"\boxed{0.25}"], answer=["0.5"] * 3) == [1.0, 1.0, 0.0]
    # Symbolic equivalence needs math-verify; the fallback stays strict rather than guess.
    assert accuracy([r"\boxed{1+x}"], answer=["x+1"]) == [0.0]
    assert accuracy([r"\boxed{x+1}"], answer=["x+1"]) == [1.0]


def test_math_verify_used_for_symbolic_answers() -> None:
    pytest.importorskip("math_verify")
    assert answers_match("1+x", "x+1")
    assert answers_match(r"\sqrt{2}", "2^{1/2}")
    assert accuracy([r"\boxed{\frac{\sqrt{4}}{4}} hmm"], answer=["1/2"]) == [1.0]
    assert not answers_match("1+x", "x+1", use_math_verify=False)


def test_to_number() -> None:
    assert to_number("1,080") == 1080
    assert to_number(r"\frac{3}{4}") == 0.75
    assert to_number(r"-\frac{1}{2}") == -0.5
    assert to_number("$12.50") == 12.5
    assert to_number("50%") == 50
    assert to_number("1/0") is None
    assert to_number("abc") is None


def test_lone_number_in_answer_tag_accepted_but_not_one_of_several() -> None:
    assert accuracy(["<answer>72 apples</answer>", "<answer>3 + 4</answer>"], answer=["72", "4"],
                    use_math_verify=False) == [1.0, 0.0]


# --------------------------------------------------------------------------- formats


@pytest.mark.parametrize("completions", both([
    GOOD,
    GOOD + "\n",
    GOOD + "\nextra text",
    "Sure! " + GOOD,
    "<think>\nno answer\n</think>",
    "<think>x</think><answer>4</answer>",
]))
def test_format_and_soft_format(completions: list[Any]) -> None:
    assert format_reward(completions) == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert soft_format(completions) == [1.0, 1.0, 1.0, 1.0, 0.0, 1.0]


def test_format_custom_tags() -> None:
    text = "<reasoning>\nr\n</reasoning>\n<answer>\n4\n</answer>"
    assert format_reward([text], think_tag="reasoning") == [1.0]
    assert format_reward([text]) == [0.0]
    assert soft_format([conv(text)], think_tag="reasoning") == [1.0]
    assert tag_count([text], think_tag="reasoning") == [1.0]


@pytest.mark.parametrize("completions", both([
    GOOD,
    "<think>\nthinking",
    "<think>\na\n</think>\n<think>\nb\n</think>\n<answer>\n4\n</answer>",
    "nothing",
]))
def test_tag_count(completions: list[Any]) -> None:
    # 3rd: <think>\n and \n</think>\n appear twice -> only the two answer tags count.
    assert tag_count(completions) == [1.0, 0.25, 0.5, 0.0]


@pytest.mark.parametrize("completions", both([
    "Step 1: add. Step 2: carry. Step 3: done.",
    "1. read\n2. add\n3. check\n4. answer",
    "First, read. Next, add.",
    "The answer is 4.",
    "Plan:\n- a\n* b",
]))
def test_reasoning_steps(completions: list[Any]) -> None:
    assert reasoning_steps(completions) == pytest.approx([1.0, 1.0, 2 / 3, 0.0, 2 / 3])
    assert reasoning_steps(completions, min_steps=2)[2] == 1.0


@pytest.mark.parametrize("completions", both([
    "<think>\nplan\n</think>\n<answer>\n```python\nprint(1)\n```\n</answer>",
    "<think>\nplan\n</think>\n<answer>\n```js\nconsole.log(1)\n```\n</answer>",
    "```python\nprint(1)\n```",
]))
def test_code_format(completions: list[Any]) -> None:
    assert code_format(completions) == [1.0, 0.0, 0.0]
    assert code_format(completions, language="js") == [0.0, 1.0, 0.0]


# --------------------------------------------------------------------------- length-shaped


def test_cosine_at_the_ends() -> None:
    right, wrong = r"\boxed{4}", r"\boxed{5}"
    for completions in both([right, wrong, right, wrong, right]):
        ids = [[], [], [0] * 100, [0] * 100, [0] * 250]
        out = cosine(completions, answer=["4"] * 5, completion_ids=ids, max_len=100)
        # len 0: correct -> max_value_correct, wrong -> min_value_wrong;
        # len max_len: correct -> min_value_correct, wrong -> max_value_wrong; past max_len: clamped.
        assert out == pytest.approx([1.0, -1.0, 0.5, -0.5, 0.5])
    half = cosine([right, wrong], answer=["4", "4"], completion_ids=[[0] * 50] * 2, max_len=100)
    assert half == pytest.approx([0.75, -0.75])


def test_cosine_measures_characters_without_ids_and_skips_rows_without_reference() -> None:
    text = r"\boxed{4}" + " " * 91  # 100 characters
    # 0.5 + 0.5 * 0.5 * (1 + cos(pi/2)) = 0.75
    first, second = cosine([text, text], answer=["4", None], max_len=200)
    assert first == pytest.approx(0.75) and second is None


def test_length_kimi() -> None:
    right, wrong = r"\boxed{4}", r"\boxed{5}"
    for completions in both([right, right, wrong, wrong]):
        ids = [[0] * 10, [0] * 30, [0] * 10, [0] * 20]
        out = length(completions, answer=["4"] * 4, completion_ids=ids)
        # lambda = 0.5 - (len - 10) / 20: 0.5, -0.5, 0.5, 0.0; wrong answers keep min(0, lambda).
        assert out == pytest.approx([0.5, -0.5, 0.0, 0.0])
    assert length([right, wrong], answer=["4", "4"], completion_ids=[[1, 2], [3, 4]]) == [0.0, 0.0]
    assert length([right, right], answer=["4", None], completion_ids=[[1], [1, 2, 3]]) == [0.0, None]


@pytest.mark.parametrize("completions", both([
    "a b c a b c",  # 4 trigrams, 3 unique -> (1 - 3/4) * -0.5 = -0.125
    "the cat sat on the mat",  # all unique -> 0
    "",
    "too short",
    "Go go GO go",  # lower-cased: 2 trigrams, both "go go go" -> (1 - 1/2) * -0.5
]))
def test_repetition_penalty(completions: list[Any]) -> None:
    assert repetition_penalty(completions) == pytest.approx([-0.125, 0.0, 0.0, 0.0, -0.25])
    assert repetition_penalty(completions, ngram_size=1, max_penalty=-1.0)[0] == pytest.approx(-0.5)


def test_repetition_penalty_validation_and_chars() -> None:
    with pytest.raises(ValueError, match="positive"):
        repetition_penalty(["x"], max_penalty=0.5)
    assert repetition_penalty(["哈哈哈哈"], language="zh", ngram_size=2) == pytest.approx([-1 / 3])
    with pytest.raises(ValueError, match="language"):
        repetition_penalty(["x"], language="xx")


def test_soft_overlong_boundaries() -> None:
    ids = [[0] * n for n in (0, 80, 81, 90, 100, 101)]
    for completions in both(["x"] * 6):
        out = soft_overlong_punishment(completions, completion_ids=ids, max_completion_len=100,
                                       soft_punish_cache=20)
        assert out == pytest.approx([0.0, 0.0, -0.05, -0.5, -1.0, -1.0])
    # Without ids: characters.
    assert soft_overlong_punishment(["y" * 90], max_completion_len=100, soft_punish_cache=20) == [-0.5]
    assert soft_overlong_punishment(["y" * 101], max_completion_len=100, soft_punish_cache=0) == [-1.0]


# --------------------------------------------------------------------------- code (sandboxed)


SOLUTION = "<think>\nplan\n</think>\n<answer>\n```python\n{}\n```\n</answer>"


def test_parse_tests_shapes() -> None:
    assert parse_tests(None) is None and parse_tests([]) is None and parse_tests("  ") is None
    assert len(parse_tests(["assert f(1) == 2", "assert f(2) == 3"]) or []) == 2
    io = parse_tests('[{"input": "1 2\\n", "output": "3\\n"}]')
    assert io is not None and io[0].stdin == "1 2\n" and io[0].expected == "3\n"
    apps = parse_tests({"inputs": ["1\n", "2\n"], "outputs": ["1\n", "4\n"]})
    assert apps is not None and [t.expected for t in apps] == ["1\n", "4\n"]
    assert parse_tests({"weird": 1}) is None


def test_extract_code_takes_last_python_block() -> None:
    text = "```python\nx = 1\n```\ntext\n```py\nx = 2\n```\n```\nbare\n```"
    assert extract_code(text) == "x = 2\n"
    assert extract_code("no code") is None
    assert extract_code("```python\nunterminated") is None


def test_code_reward_asserts_stdio_and_none() -> None:
    good = SOLUTION.format("def add(a, b):\n    return a + b")
    half = SOLUTION.format("def add(a, b):\n    return a + b if a else 0")
    asserts = ["assert add(1, 2) == 3", "assert add(0, 5) == 5"]
    out = code([good, conv(half), "no code here", good],
               tests=[asserts, asserts, asserts, None], timeout=5)
    assert out == [1.0, 0.5, 0.0, None]
    stdio = SOLUTION.format("a, b = map(int, input().split())\nprint(a * b)")
    cases = [{"input": "2 3\n", "output": "6\n"}, {"input": "4 5", "output": "20"}, {"input": "1 1", "output": "2"}]
    assert code([conv(stdio)], tests=[cases]) == pytest.approx([2 / 3])


def test_code_reward_exit_before_tests_does_not_pass() -> None:
    cheat = SOLUTION.format("import sys\nsys.exit(0)")
    assert code([cheat], tests=[["assert False"]]) == [0.0]
    script = "assert add(2, 2) == 4\nassert add(-1, 1) == 0"
    assert code([SOLUTION.format("def add(a, b):\n    return a + b")], tests=[script]) == [1.0]


def test_code_reward_survives_hostile_programs(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    hostile = [
        "while True:\n    pass",
        "import os\nwhile True:\n    os.fork()",
        "x = bytearray(10**10)",
        "while True:\n    print('x' * 10000)",
        f"import shutil\nshutil.rmtree({str(victim)!r})",
        "import socket\nsocket.create_connection(('127.0.0.1', 22))",
    ]
    completions = [SOLUTION.format(h) for h in hostile]
    out = code(completions, tests=[["assert True"]] * len(hostile), timeout=1.0)
    assert out == [0.0] * len(hostile)
    assert (victim / "keep.txt").read_text() == "precious"


def test_rewards_are_floats_in_range_for_conversational_batch() -> None:
    comps = [conv(GOOD), conv("garbage")]
    for name in ("accuracy", "length", "cosine"):
        out = BUILTINS[name](comps, answer=["4", "4"], completion_ids=[[1] * 5, [1] * 9])
        assert len(out) == 2 and all(isinstance(x, float) and not math.isnan(x) for x in out), name
    assert BUILTINS["accuracy"](comps, answer=["4", "4"]) == [1.0, 0.0]


def test_a_declared_span_is_the_range_the_docstring_gives() -> None:
    """`span` (what validate's min_std check reads) agrees with each reward's documented `Returns:`."""
    from grpo_cli.rewards.builtins import BUILTIN_REWARDS, load_builtin

    documented = {"{0, 1}": (0.0, 1.0), "0 ... 1": (0.0, 1.0)}
    spans = {name: row.span for name, row in BUILTIN_REWARDS.items() if row.span is not None}
    assert {"accuracy", "format", "code"} <= set(spans)
    for name, span in spans.items():
        doc = inspect.getdoc(load_builtin(name)) or ""
        returns = doc.split("Returns:", 1)[1].strip().splitlines()[0]
        assert documented.get(returns.split(";")[0].split(" in steps")[0].strip()) == span, (name, returns)
