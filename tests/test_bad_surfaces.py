"""Bad inputs on the newer surfaces (suites, push, doctor, launch files): refused with one paragraph, never
called valid, nothing overwritten. Found by the reliability sweep of issue 25 (docs/reliability.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import RECIPES, run_cli

DEMO = RECIPES / "demo.yaml"


def _paragraph(result, *needles: str) -> str:
    """Assert exit 2, no traceback, and every needle in the message (whitespace-insensitive)."""
    assert result.exit_code == 2, result
    assert "Traceback" not in result.output, result
    flat = " ".join(result.output.split())
    for needle in needles:
        assert needle in flat, f"{needle!r} not in:\n{result.output}"
    return result.output


def test_an_empty_suite_name_is_refused_not_ignored() -> None:
    _paragraph(run_cli("eval", DEMO, "--suite", ""), "--suite", "no benchmark suite ''", "gsm8k")


def test_a_hub_repository_name_over_96_characters_is_refused_by_dry_run(tmp_path: Path) -> None:
    name = "x" * 200
    _paragraph(run_cli("push", tmp_path, f"user/{name}", "--dry-run"), "REPO_ID", "200 characters", "at most 96")
    _paragraph(run_cli("push", tmp_path, "user/bad--name", "--dry-run"), "REPO_ID", "not a valid Hub name")
    assert list(tmp_path.iterdir()) == []  # no card written


def test_doctor_is_not_ready_for_a_recipe_validate_rejects(tmp_path: Path) -> None:
    good = run_cli("doctor", DEMO)
    bad = run_cli("doctor", DEMO, "data.files.train=missing.jsonl")
    assert "Traceback" not in bad.output
    assert bad.exit_code == 1, bad.output
    flat = " ".join(bad.output.split())
    assert "does not pass `grpo validate`" in flat and "missing.jsonl" in flat
    assert "ready" not in bad.output.splitlines()[-1]
    assert "does not pass" not in good.output  # the same machine, a valid recipe: no such problem


def test_launch_does_not_overwrite_a_file_it_did_not_write(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(DEMO, tmp_path / "demo.yaml")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n", encoding="utf-8")
    args = ["launch", "slurm", "demo.yaml", "launch.profile=ddp", "launch.num_processes=2", "--gpus-per-node", "2"]
    _paragraph(run_cli(*args, "-o", "notes.txt"), "--out", "already exists", "--force")
    assert notes.read_text(encoding="utf-8") == "my notes\n"
    _paragraph(run_cli("launch", "skypilot", "demo.yaml", "launch.profile=ddp", "launch.num_processes=2",
                       "--gpus-per-node", "2", "-o", "notes.txt"), "--out", "already exists")
    assert notes.read_text(encoding="utf-8") == "my notes\n"
    # A launch file grpo wrote is regenerated without --force; any file is replaced with it.
    first = run_cli(*args, "-o", "job.sbatch")
    again = run_cli(*args, "--nodes", "1", "-o", "job.sbatch")
    assert first.exit_code == 0 and again.exit_code == 0, again.output
    forced = run_cli(*args, "-o", "notes.txt", "--force")
    assert forced.exit_code == 0, forced.output
    assert notes.read_text(encoding="utf-8").startswith("#!/bin/bash")


def test_a_corrupt_run_file_is_called_damaged_not_empty(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_bytes(b"\x00\x01garbage\xff\n{not json\n")
    (run / "completions.jsonl").write_bytes(b"\x89PNG\r\n\x1a\n" * 20)
    _paragraph(run_cli("report", run), "metrics.jsonl is damaged", "line 1")
    _paragraph(run_cli("samples", run), "completions.jsonl is damaged", "line 1")
    # An empty file is what a run that has not logged yet leaves: that one is "not yet", not damaged.
    (run / "metrics.jsonl").write_text("", encoding="utf-8")
    assert "no training log yet" in _paragraph(run_cli("report", run))


def test_validate_refuses_a_push_to_hub_id_the_hub_would_refuse() -> None:
    _paragraph(run_cli("validate", DEMO, f"output.push_to_hub=user/{'y' * 120}"), "output.push_to_hub", "at most 96")
    assert run_cli("validate", DEMO, "output.push_to_hub=user/tiny-demo").exit_code == 0
