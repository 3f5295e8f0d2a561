"""Bad inputs a careless user gives: each one is a clear paragraph (exit 2), never a traceback or a false "valid".

Found by the reliability sweep of issue 11; docs/reliability.md lists the promise each test holds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RECIPES, run_cli


def _paragraph(result, *needles: str) -> str:
    """Assert exit 2, no traceback, and every needle in the message; return the output."""
    assert result.exit_code == 2, result
    assert "Traceback" not in result.output, result
    for needle in needles:
        assert needle in result.output, f"{needle!r} not in:\n{result.output}"
    return result.output


# ------------------------------------------------------------------ files that cannot be read as text


def test_recipe_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_bytes(b"description: caf\xe9\n")
    _paragraph(run_cli("validate", path), "r.yaml", "UTF-8", "line 1")


def test_binary_recipe(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_bytes(bytes(range(256)) * 4)
    _paragraph(run_cli("validate", path), "r.yaml", "binary")


def test_reward_file_that_is_not_utf8(demo_copy: Path) -> None:
    (demo_copy.parent / "latin1.py").write_bytes(b"def f(completions, **kwargs):\n    return ['caf\xe9']\n")
    _paragraph(run_cli("validate", demo_copy, "rewards=[{function: latin1.py:f}]"), "rewards[0].function", "latin1.py",
               "UTF-8", "line 2")


def test_binary_reward_file(demo_copy: Path) -> None:
    (demo_copy.parent / "bin.py").write_bytes(b"\x00\x9f\x92\x96" * 64)
    _paragraph(run_cli("validate", demo_copy, "rewards=[{function: bin.py:f}]"), "rewards[0].function", "bin.py",
               "binary")


def test_data_file_that_is_a_directory(demo_copy: Path) -> None:
    (demo_copy.parent / "data" / "dir.jsonl").mkdir()
    _paragraph(run_cli("validate", demo_copy, "data.files.train=data/dir.jsonl"), "data.files.train", "dir.jsonl",
               "directory")


def test_reward_file_that_is_a_directory(demo_copy: Path) -> None:
    (demo_copy.parent / "rwdir.py").mkdir()
    _paragraph(run_cli("validate", demo_copy, "rewards=[{function: rwdir.py:f}]"), "rewards[0].function", "rwdir.py",
               "directory")


def test_corrupt_parquet(demo_copy: Path) -> None:
    (demo_copy.parent / "data" / "bad.parquet").write_bytes(b"this is not parquet at all\n" * 10)
    _paragraph(run_cli("validate", demo_copy, "data.files.train=data/bad.parquet"), "data.files.train", "bad.parquet",
               "parquet")


def test_output_dir_that_is_a_file(demo_copy: Path) -> None:
    afile = demo_copy.parent / "afile"
    afile.write_text("keep me")
    _paragraph(run_cli("train", demo_copy, "-o", afile), "afile", "not a directory")
    assert afile.read_text() == "keep me"


# ------------------------------------------------------------------ overrides


def test_list_element_override_sets_that_element(demo_copy: Path) -> None:
    result = run_cli("validate", demo_copy, "rewards[0].weight=2", "--json")
    assert result.exit_code == 0, result
    assert "accuracy x2" in result.output
    replaced = run_cli("validate", demo_copy, "rewards[0]={name: format}", "--json")
    assert replaced.exit_code == 0 and '"rewards": "format x1"' in replaced.output, replaced


def test_list_element_override_out_of_range(demo_copy: Path) -> None:
    _paragraph(run_cli("validate", demo_copy, "rewards[3].weight=2"), "rewards[3].weight=2", "1 entry")


def test_override_with_broken_yaml_value_names_the_override(demo_copy: Path) -> None:
    out = _paragraph(run_cli("validate", demo_copy, "training.max_steps=[1,"), "training.max_steps=[1,")
    assert "<unicode string>" not in out and "while parsing" not in out


# ------------------------------------------------------------------ YAML messages


def test_unclosed_quote_is_reported_where_the_quote_opens(demo_copy: Path) -> None:
    text = demo_copy.read_text(encoding="utf-8").replace("description: Tiny", 'description: "Tiny')
    lines = text.splitlines()
    opened = next(i for i, line in enumerate(lines, 1) if line.startswith('description: "'))
    demo_copy.write_text(text, encoding="utf-8")
    _paragraph(run_cli("validate", demo_copy), f"demo.yaml:{opened}:", "quote")


@pytest.mark.parametrize("text,line", [("model:\n\tname_or_path: bundled:tiny-arith\n", 2),
                                       ("model:\n  name_or_path: x\n\tdtype: auto\n", 3)])
def test_a_tab_in_the_indentation_is_named_as_a_tab(tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / "tabs.yaml"
    path.write_text(text, encoding="utf-8")
    _paragraph(run_cli("validate", path), f"tabs.yaml:{line}:1", "a tab in the indentation", "spaces")


def test_alias_bomb_is_rejected_as_an_alias_bomb(tmp_path: Path) -> None:
    rows = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        rows.append(f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = _paragraph(run_cli("validate", path), "bomb.yaml", "alias")
    assert "indentation" not in out


def test_interpolation_of_a_missing_recipe_key(demo_copy: Path) -> None:
    out = _paragraph(run_cli("validate", demo_copy, "model.name_or_path=${training.nope}"), "model.name_or_path",
                     "training.nope")
    assert "environment variable" not in out


# ------------------------------------------------------------------ validate reads all of a local data file


def test_truncated_jsonl_line_is_found_by_validate(demo_copy: Path) -> None:
    lines = (demo_copy.parent / "data" / "train.jsonl").read_text(encoding="utf-8").splitlines()
    lines[36] = lines[36][:12]  # line 37 cut short
    (demo_copy.parent / "data" / "train.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    _paragraph(run_cli("validate", demo_copy), "data.files.train", "train.jsonl", "line 37")


def test_non_utf8_bytes_deep_in_a_jsonl_file(demo_copy: Path) -> None:
    rows = [f'{{"question": "{i % 20}+{i % 7}", "answer": "{i % 20 + i % 7}"}}'.encode() for i in range(20000)]
    rows[15000] = b'{"question": "caf\xe9", "answer": "1"}'
    (demo_copy.parent / "data" / "train.jsonl").write_bytes(b"\n".join(rows) + b"\n")
    _paragraph(run_cli("validate", demo_copy), "data.files.train", "train.jsonl", "line 15001", "UTF-8")


def test_ragged_csv_is_found_by_validate_and_talks_about_csv(demo_copy: Path) -> None:
    (demo_copy.parent / "data" / "r.csv").write_text("question,answer\n1+1,2\n2+2,4,extra\n3+3,6\n", encoding="utf-8")
    out = _paragraph(run_cli("validate", demo_copy, "data.files.train=data/r.csv"), "r.csv", "line 3", "3 fields")
    assert "JSON" not in out


def test_a_jsonl_line_that_is_not_an_object(demo_copy: Path) -> None:
    path = demo_copy.parent / "data" / "train.jsonl"
    path.write_text(path.read_text(encoding="utf-8") + "[1, 2]\n", encoding="utf-8")
    _paragraph(run_cli("validate", demo_copy), "train.jsonl", "line 301", "object")


def test_bad_builtin_param_value_fails_validate(demo_copy: Path) -> None:
    _paragraph(run_cli("validate", demo_copy, "rewards=[{name: accuracy, params: {answer_format: roman}}]"),
               "rewards[0].params.answer_format", "roman", "first_number")


def test_bad_builtin_param_type_fails_validate(demo_copy: Path) -> None:
    _paragraph(run_cli("validate", demo_copy, "rewards=[{name: accuracy, params: {use_math_verify: sometimes}}]"),
               "rewards[0].params.use_math_verify", "sometimes")


# ------------------------------------------------------------------ no hang on huge values


def test_print_of_a_huge_string_value_does_not_hang(demo_copy: Path) -> None:
    """A 20 MB value: the old --print took minutes (superlinear wrapping); the guard below only catches a hang."""
    huge = "description: " + "x" * 20_000_000 + " Tiny"
    demo_copy.write_text(demo_copy.read_text(encoding="utf-8").replace("description: Tiny", huge), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "grpo_cli", "validate", str(demo_copy), "--print"],
                          cwd=demo_copy.parent, capture_output=True, timeout=120, env={**os.environ, "COLUMNS": "100"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert b"x" * 20_000_000 in proc.stdout  # printed whole, not wrapped into 200,000 lines


def test_a_list_index_written_with_a_dot_gets_the_bracket_form() -> None:
    out = _paragraph(run_cli("validate", RECIPES / "demo.yaml", "rewards.0.weight=2"), "rewards.0.weight=2",
                     "`rewards[0].weight=2`")
    assert "TypeError" not in out
    assert run_cli("validate", RECIPES / "demo.yaml", "rewards[0].weight=2").exit_code == 0
