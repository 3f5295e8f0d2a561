"""Data files `grpo validate` reads whole and `check-rewards`/`train` map: a directory, corrupt parquet, a cut or
non-UTF-8 JSONL line, a ragged CSV; each named by file and line, never by its index after shuffling."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import assert_paragraph, run_cli


def test_data_file_that_is_a_directory(demo_copy: Path) -> None:
    (demo_copy.parent / "data" / "dir.jsonl").mkdir()
    assert_paragraph(run_cli("validate", demo_copy, "data.files.train=data/dir.jsonl"), "data.files.train", "dir.jsonl",
                     "directory")


def test_corrupt_parquet(demo_copy: Path) -> None:
    (demo_copy.parent / "data" / "bad.parquet").write_bytes(b"this is not parquet at all\n" * 10)
    assert_paragraph(run_cli("validate", demo_copy, "data.files.train=data/bad.parquet"), "data.files.train",
                     "bad.parquet", "parquet")


def test_truncated_jsonl_line_is_found_by_validate(demo_copy: Path) -> None:
    lines = (demo_copy.parent / "data" / "train.jsonl").read_text(encoding="utf-8").splitlines()
    lines[36] = lines[36][:12]  # line 37 cut short
    (demo_copy.parent / "data" / "train.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert_paragraph(run_cli("validate", demo_copy), "data.files.train", "train.jsonl", "line 37")


def test_non_utf8_bytes_deep_in_a_jsonl_file(demo_copy: Path) -> None:
    rows = [f'{{"question": "{i % 20}+{i % 7}", "answer": "{i % 20 + i % 7}"}}'.encode() for i in range(20000)]
    rows[15000] = b'{"question": "caf\xe9", "answer": "1"}'
    (demo_copy.parent / "data" / "train.jsonl").write_bytes(b"\n".join(rows) + b"\n")
    assert_paragraph(run_cli("validate", demo_copy), "data.files.train", "train.jsonl", "line 15001", "UTF-8")


def test_ragged_csv_is_found_by_validate_and_talks_about_csv(demo_copy: Path) -> None:
    (demo_copy.parent / "data" / "r.csv").write_text("question,answer\n1+1,2\n2+2,4,extra\n3+3,6\n", encoding="utf-8")
    out = assert_paragraph(run_cli("validate", demo_copy, "data.files.train=data/r.csv"), "r.csv", "line 3", "3 fields")
    assert "JSON" not in out


def test_a_jsonl_line_that_is_not_an_object(demo_copy: Path) -> None:
    path = demo_copy.parent / "data" / "train.jsonl"
    path.write_text(path.read_text(encoding="utf-8") + "[1, 2]\n", encoding="utf-8")
    assert_paragraph(run_cli("validate", demo_copy), "train.jsonl", "line 301", "object")


def test_check_rewards_names_file_and_line_of_a_broken_jsonl_record(demo_copy: Path) -> None:
    path = demo_copy.parent / "data" / "train.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[36] = lines[36][:12]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = assert_paragraph(run_cli("check-rewards", demo_copy, "-n", "2"), "train.jsonl", "line 37")
    assert "hub" not in out and "position" not in out


def test_row_errors_name_the_file_line_not_the_shuffled_row(demo_copy: Path) -> None:
    path = demo_copy.parent / "data" / "train.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[5] = '{"question": ["not", "text"], "answer": "1"}'
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    from grpo_cli.data.mapping import prepare_data
    from grpo_cli.errors import GrpoError
    from grpo_cli.recipe import load_recipe

    with pytest.raises(GrpoError) as info:
        prepare_data(load_recipe(demo_copy, ["data.prompt.template=null", "data.prompt.column=question"]))
    message = info.value.render()
    assert "train.jsonl" in message and "line 6" in message, message
