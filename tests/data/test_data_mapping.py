"""The data section: answers extracted, prompts built, long prompts filtered or cut, bad data explained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_cli.data.mapping import extract_reference_answer, prepare_data
from grpo_cli.errors import GrpoError
from grpo_cli.recipe.loader import validate_recipe


@pytest.mark.parametrize("text,expected", [
    ("She has 3 + 4 = 7 apples.\n#### 7", "7"),
    ("Total: 1,000 + 80\n#### 1,080", "1080"),
    ("The change is\n#### -10", "-10"),
    ("#### 2.5", "2.5"),
    ("no marker here", None),
])
def test_gsm8k_answer_extraction(text: str, expected: str | None) -> None:
    assert extract_reference_answer(text, "gsm8k") == expected


def test_boxed_and_regex_extraction() -> None:
    assert extract_reference_answer(r"so \boxed{\frac{1}{2}} and \boxed{x^{2}}", "boxed") == "x^{2}"
    assert extract_reference_answer("Answer: 42.", "regex", r"Answer:\s*(\d+)") == "42"
    assert extract_reference_answer("nothing", "regex", r"Answer:\s*(\d+)") is None


class _CharTokenizer:
    """A stand-in tokenizer (one token per character) so length limits can be checked by hand."""

    chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": [ord(c) for c in text]}

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids)

    def apply_chat_template(self, messages: list, add_generation_prompt: bool = True, tokenize: bool = True):
        text = "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"
        return [ord(c) for c in text] if tokenize else text


def _recipe(tmp_path: Path, rows: list[dict], data: dict) -> object:
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    recipe = validate_recipe({"model": {"name_or_path": "x/y"}, "rewards": [{"name": "accuracy"}],
                              "data": {"files": "d.jsonl", **data}})
    recipe._base_dir = tmp_path
    return recipe


ROWS = [{"question": "q" * n, "answer": f"#### {n}", "level": n} for n in (5, 10, 40, 80)]


def test_template_answer_and_kept_columns(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, ROWS, {"prompt": {"template": "Solve {question} (level {level})"},
                                       "answer": {"extract": "gsm8k"}, "keep_columns": ["level"], "shuffle": False})
    mapped = prepare_data(recipe, _CharTokenizer())
    row = mapped.train[0]
    assert row["prompt"] == "Solve qqqqq (level 5)"
    assert row["answer"] == "5"
    assert set(mapped.train.column_names) == {"prompt", "answer", "level"}  # question dropped


def test_chat_prompt_with_system_message(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, ROWS, {"prompt": {"column": "question", "chat": True, "system_prompt": "Be brief."},
                                       "shuffle": False})
    row = prepare_data(recipe, _CharTokenizer()).train[0]
    assert row["prompt"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "qqqqq"}]


def test_long_prompts_filtered_and_counted(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, ROWS, {"prompt": {"column": "question"}, "max_prompt_tokens": 20, "shuffle": False})
    mapped = prepare_data(recipe, _CharTokenizer())
    assert [len(p) for p in mapped.train["prompt"]] == [5, 10]
    assert mapped.stats["train_dropped_long"] == 2


def test_long_prompts_truncated_from_the_left(tmp_path: Path) -> None:
    rows = [{"question": "abcdefghij" * 3, "answer": "1"}]
    recipe = _recipe(tmp_path, rows, {"prompt": {"column": "question"}, "max_prompt_tokens": 8,
                                       "prompt_overflow": "truncate"})
    mapped = prepare_data(recipe, _CharTokenizer())
    assert mapped.train[0]["prompt"] == "cdefghij"  # the end of the prompt survives
    assert mapped.stats["train_truncated"] == 1


def test_shuffle_and_max_samples_are_deterministic(tmp_path: Path) -> None:
    rows = [{"question": f"q{i}", "answer": str(i)} for i in range(50)]
    recipe = _recipe(tmp_path, rows, {"prompt": {"column": "question"}, "max_samples": 10, "seed": 7})
    first = prepare_data(recipe, None).train["prompt"]
    second = prepare_data(recipe, None).train["prompt"]
    assert first == second and len(first) == 10
    assert first != [f"q{i}" for i in range(10)]  # actually shuffled


def test_holdout_split(tmp_path: Path) -> None:
    rows = [{"question": f"q{i}", "answer": str(i)} for i in range(40)]
    recipe = _recipe(tmp_path, rows, {"prompt": {"column": "question"}, "eval_holdout": 0.25})
    mapped = prepare_data(recipe, None)
    assert (len(mapped.train), len(mapped.eval)) == (30, 10)
    assert not set(mapped.train["prompt"]) & set(mapped.eval["prompt"])


def test_missing_column_is_a_clear_error(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, ROWS, {"prompt": {"column": "problem"}})
    with pytest.raises(GrpoError) as err:
        prepare_data(recipe, None)
    assert "data.prompt.column" in err.value.render() and "question" in err.value.render()


def test_everything_filtered_is_a_clear_error(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, ROWS, {"prompt": {"column": "question"}, "max_prompt_tokens": 2})
    with pytest.raises(GrpoError, match="no training rows are left"):
        prepare_data(recipe, _CharTokenizer())


def test_chat_prompts_need_a_chat_template(tmp_path: Path) -> None:
    class NoTemplate(_CharTokenizer):
        chat_template = None

    recipe = _recipe(tmp_path, ROWS, {"prompt": {"column": "question", "chat": True}})
    with pytest.raises(GrpoError, match="no chat template"):
        prepare_data(recipe, NoTemplate())


def test_malformed_jsonl_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"question": "a"}\n{not json\n', encoding="utf-8")
    recipe = validate_recipe({"model": {"name_or_path": "x/y"}, "rewards": [{"name": "accuracy"}],
                              "data": {"files": "d.jsonl", "prompt": {"column": "question"}}})
    recipe._base_dir = tmp_path
    with pytest.raises(GrpoError) as err:
        prepare_data(recipe, None)
    assert "d.jsonl" in err.value.render() and "line 2 is not valid JSON" in err.value.render()
