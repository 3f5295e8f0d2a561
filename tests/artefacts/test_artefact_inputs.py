"""What the verbs that read a run directory back refuse (`grpo report`, `samples`, `push`, `merge`): damaged,
missing or misplaced run files, an --out that cannot be written or belongs to the user, a Hub name the Hub would
refuse; one paragraph, exit 2, no user file replaced without --force."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import ONE_STEP, RECIPES, assert_paragraph, run_cli

DEMO = RECIPES / "demo.yaml"


def _run_dir(tmp_path: Path) -> Path:
    """A finished run's top level: a real (tiny) safetensors model, its config, a manifest and metrics."""
    import torch
    from safetensors.torch import save_file

    run = tmp_path / "run"
    run.mkdir()
    save_file({"w": torch.zeros(64, 64)}, str(run / "model.safetensors"))
    (run / "config.json").write_text('{"model_type": "llama"}\n')
    # The command as the manifest records it, with an argument longer than a file name may be (a long override):
    # push asks whether each value is a local path, and a name too long to look up is none.
    (run / "manifest.json").write_text(json.dumps({"status": "completed", "command": ["grpo", "train", "x" * 300]}))
    (run / "metrics.jsonl").write_text("".join(f'{{"step": {i}, "loss": 0.1, "reward": 0.{i}}}\n'
                                               for i in range(1, 6)))
    return run


def test_report_on_a_metrics_file_with_a_string_step_names_the_line(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[2] = lines[2].replace('"step": 3', '"step": "three"')
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert_paragraph(run_cli("report", run), "metrics.jsonl is damaged", "line 3 has step 'three'", "whole number")


def test_samples_of_records_without_prompt_or_completion_are_not_empty_rows(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    path = run / "completions.jsonl"
    path.write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "rewards": {"accuracy": 1.0}}\n')
    assert_paragraph(run_cli("samples", run), "completions.jsonl is damaged", "none of its 2 record(s) has a prompt")
    path.write_text('{"step": 1, "reward": 0.5}\n{"step": 1, "prompt": "1+1", "completion": "2", "reward": 1.0}\n')
    shown = run_cli("samples", run)
    assert shown.exit_code == 0 and "1+1" in shown.output, shown


def test_push_dry_run_refuses_a_junk_manifest_and_truncated_weights_before_writing(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    ok = run_cli("push", run, "user/model", "--dry-run")
    assert ok.exit_code == 0, ok
    (run / "README.md").unlink()
    (run / "manifest.json").write_bytes(b"\x7fELF\xd0\xcf" * 50)
    assert_paragraph(run_cli("push", run, "user/model", "--dry-run"), "manifest.json is damaged", "UTF-8 JSON")
    (run / "manifest.json").write_text('{"status": "completed"}\n')
    weights = run / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    assert_paragraph(run_cli("push", run, "user/model", "--dry-run"), "model.safetensors is damaged or truncated",
                     "the file has 1,000")
    assert not (run / "README.md").exists()  # refused before the card is written
    (tmp_path / "again").mkdir()
    shutil.copy(_run_dir(tmp_path / "again") / "model.safetensors", weights)
    (run / "README.md").mkdir()  # found re-sweeping: IsADirectoryError
    assert_paragraph(run_cli("push", run, "user/model", "--dry-run"), "cannot write the model card", "is a directory")


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("round4") / "run"
    result = run_cli("train", DEMO, *ONE_STEP, "model.lora.r=4", "model.lora.alpha=8", "-o", out)
    assert result.exit_code == 0, result
    return out


def test_report_out_never_replaces_a_users_file(lora_run: Path, tmp_path: Path) -> None:
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("my recipe\n")
    assert_paragraph(run_cli("report", lora_run, "--out", recipe), "does not end in .png or .md")
    assert recipe.read_text() == "my recipe\n"
    notes = tmp_path / "notes.md"
    notes.write_text("my notes\n")
    assert_paragraph(run_cli("report", lora_run, "--out", notes), "already exists", "--force")
    assert notes.read_text() == "my notes\n" and not (tmp_path / "notes.png").exists()
    assert run_cli("report", lora_run, "--out", notes, "--force").exit_code == 0
    assert notes.read_text().startswith("# Run report") and (tmp_path / "notes.png").read_bytes()[:4] == b"\x89PNG"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_report_and_samples_name_a_directory_where_a_file_belongs(lora_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(lora_run, run)
    (run / "report.md").unlink()
    (run / "report.md").mkdir()
    assert_paragraph(run_cli("report", run), "report.md is a directory")
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").mkdir()
    assert_paragraph(run_cli("report", run), "metrics.jsonl is a directory")
    (run / "completions.jsonl").unlink()
    (run / "completions.jsonl").mkdir()
    assert_paragraph(run_cli("samples", run), "completions.jsonl is a directory")
    assert_paragraph(run_cli("samples", DEMO), "is a file, not a run directory")


def test_push_dry_run_keeps_a_card_grpo_did_not_write(lora_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(lora_run, run)
    (run / "README.md").write_text("MY OWN CARD\n")
    assert_paragraph(run_cli("push", run, "me/model", "--dry-run"), "not a model card grpo wrote", "--force")
    assert (run / "README.md").read_text() == "MY OWN CARD\n"
    assert run_cli("push", run, "me/model", "--dry-run", "--force").exit_code == 0
    assert "through grpo-cli" in (run / "README.md").read_text()
    assert run_cli("push", run, "me/model", "--dry-run").exit_code == 0  # grpo's own card is rewritten freely


def test_merge_into_a_place_that_cannot_be_written_fails_before_loading(lora_run: Path, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    assert_paragraph(run_cli("merge", lora_run, "--out", tmp_path / "afile" / "merged"), "--out", "afile")
    assert (tmp_path / "afile").read_text() == "x"


def test_an_empty_repo_id_and_a_data_directory_are_named_as_such(lora_run: Path, tmp_path: Path) -> None:
    assert_paragraph(run_cli("push", lora_run, "", "--dry-run"), "REPO_ID", "the repository id is empty")
    (tmp_path / "rows").mkdir()
    assert_paragraph(run_cli("validate", DEMO, f"data.files.train={tmp_path / 'rows'}"), "for a directory of files",
                     "rows/train.jsonl")


def test_a_hub_repository_name_over_96_characters_is_refused_by_dry_run(tmp_path: Path) -> None:
    name = "x" * 200
    assert_paragraph(run_cli("push", tmp_path, f"user/{name}", "--dry-run"), "REPO_ID", "200 characters", "at most 96")
    assert_paragraph(run_cli("push", tmp_path, "user/bad--name", "--dry-run"), "REPO_ID", "not a valid Hub name")
    assert list(tmp_path.iterdir()) == []  # no card written


def test_a_corrupt_run_file_is_called_damaged_not_empty(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_bytes(b"\x00\x01garbage\xff\n{not json\n")
    (run / "completions.jsonl").write_bytes(b"\x89PNG\r\n\x1a\n" * 20)
    assert_paragraph(run_cli("report", run), "metrics.jsonl is damaged", "line 1")
    assert_paragraph(run_cli("samples", run), "completions.jsonl is damaged", "line 1")
    # An empty file is what a run that has not logged yet leaves: that one is "not yet", not damaged.
    (run / "metrics.jsonl").write_text("", encoding="utf-8")
    assert "no training log yet" in assert_paragraph(run_cli("report", run))
