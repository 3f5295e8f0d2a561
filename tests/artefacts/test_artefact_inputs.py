"""What the verbs that read a run directory back refuse (`grpo report`, `samples`, `push`, `merge`): damaged,
missing or misplaced run files, an --out that cannot be written or belongs to the user, a Hub name the Hub would
refuse; one paragraph, exit 2, no user file replaced without --force.

The plain refusals are one table (CASES): a starting directory, a small named function that damages it, the command
line and the words the paragraph must hold; each also checks that the refusal wrote and changed nothing. Tests that
check more than a refusal (that --force then works, that a sound input passes) are their own functions below it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
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


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("round4") / "run"
    result = run_cli("train", DEMO, *ONE_STEP, "model.lora.r=4", "model.lora.alpha=8", "-o", out)
    assert result.exit_code == 0, result
    return out


# How each case damages its starting directory: `run` is the run directory, `tmp` the test's own folder.
Damage = Callable[[Path, Path], None]


def _nothing(run: Path, tmp: Path) -> None:
    """The directory as it starts."""


def _string_step(run: Path, tmp: Path) -> None:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[2] = lines[2].replace('"step": 3', '"step": "three"')
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def _records_without_prompt(run: Path, tmp: Path) -> None:
    (run / "completions.jsonl").write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "rewards": {"accuracy": 1.0}}\n')


def _junk_manifest(run: Path, tmp: Path) -> None:
    (run / "manifest.json").write_bytes(b"\x7fELF\xd0\xcf" * 50)


def _truncated_weights(run: Path, tmp: Path) -> None:
    (run / "manifest.json").write_text('{"status": "completed"}\n')
    weights = run / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])


def _card_is_a_directory(run: Path, tmp: Path) -> None:
    """Found re-sweeping: IsADirectoryError."""
    (run / "manifest.json").write_text('{"status": "completed"}\n')
    (run / "README.md").mkdir()


def _directory_for(name: str) -> Damage:
    def damage(run: Path, tmp: Path) -> None:
        (run / name).unlink()
        (run / name).mkdir()
    damage.__name__ = f"_{name}_is_a_directory"
    return damage


def _a_file_where_out_goes(run: Path, tmp: Path) -> None:
    (tmp / "afile").write_text("x")


def _a_data_directory(run: Path, tmp: Path) -> None:
    (tmp / "rows").mkdir()


def _garbage_logs(run: Path, tmp: Path) -> None:
    (run / "metrics.jsonl").write_bytes(b"\x00\x01garbage\xff\n{not json\n")
    (run / "completions.jsonl").write_bytes(b"\x89PNG\r\n\x1a\n" * 20)


def _empty_metrics(run: Path, tmp: Path) -> None:
    """An empty file is what a run that has not logged yet leaves: that one is "not yet", not damaged."""
    _garbage_logs(run, tmp)
    (run / "metrics.jsonl").write_text("", encoding="utf-8")


# Starting directories: "empty" (the test's folder itself), "bare" (an empty run/), "small" (_run_dir), "lora" (a
# copy of a really trained LoRA run). In the arguments {run}, {tmp} and {demo} stand for the run directory, the
# test's folder and the demo recipe.
CASES: list[tuple[str, str, Damage, tuple[str, ...], tuple[str, ...]]] = [
    ("report-string-step", "small", _string_step, ("report", "{run}"),
     ("metrics.jsonl is damaged", "line 3 has step 'three'", "whole number")),
    ("samples-without-prompt", "small", _records_without_prompt, ("samples", "{run}"),
     ("completions.jsonl is damaged", "none of its 2 record(s) has a prompt")),
    ("push-junk-manifest", "small", _junk_manifest, ("push", "{run}", "user/model", "--dry-run"),
     ("manifest.json is damaged", "UTF-8 JSON")),
    ("push-truncated-weights", "small", _truncated_weights, ("push", "{run}", "user/model", "--dry-run"),
     ("model.safetensors is damaged or truncated", "the file has 1,000")),
    ("push-card-is-a-directory", "small", _card_is_a_directory, ("push", "{run}", "user/model", "--dry-run"),
     ("cannot write the model card", "is a directory")),
    ("report-md-is-a-directory", "lora", _directory_for("report.md"), ("report", "{run}"),
     ("report.md is a directory",)),
    ("report-metrics-is-a-directory", "lora", _directory_for("metrics.jsonl"), ("report", "{run}"),
     ("metrics.jsonl is a directory",)),
    ("samples-completions-is-a-directory", "lora", _directory_for("completions.jsonl"), ("samples", "{run}"),
     ("completions.jsonl is a directory",)),
    ("samples-of-a-recipe-file", "empty", _nothing, ("samples", "{demo}"), ("is a file, not a run directory",)),
    ("merge-out-under-a-file", "lora", _a_file_where_out_goes, ("merge", "{run}", "--out", "{tmp}/afile/merged"),
     ("--out", "afile")),
    ("push-empty-repo-id", "lora", _nothing, ("push", "{run}", "", "--dry-run"),
     ("REPO_ID", "the repository id is empty")),
    ("validate-data-directory", "empty", _a_data_directory, ("validate", "{demo}", "data.files.train={tmp}/rows"),
     ("for a directory of files", "rows/train.jsonl")),
    ("push-repo-name-over-96", "empty", _nothing, ("push", "{run}", "user/" + "x" * 200, "--dry-run"),
     ("REPO_ID", "200 characters", "at most 96")),
    ("push-repo-name-invalid", "empty", _nothing, ("push", "{run}", "user/bad--name", "--dry-run"),
     ("REPO_ID", "not a valid Hub name")),
    ("report-corrupt-metrics", "bare", _garbage_logs, ("report", "{run}"), ("metrics.jsonl is damaged", "line 1")),
    ("samples-corrupt-completions", "bare", _garbage_logs, ("samples", "{run}"),
     ("completions.jsonl is damaged", "line 1")),
    ("report-empty-metrics-is-not-yet", "bare", _empty_metrics, ("report", "{run}"), ("no training log yet",)),
]


def _start(kind: str, tmp: Path, request: pytest.FixtureRequest) -> Path:
    """The run directory a case starts from (the trained run only for the cases that need it)."""
    if kind == "empty":
        return tmp
    if kind == "small":
        return _run_dir(tmp)
    run = tmp / "run"
    if kind == "lora":
        shutil.copytree(request.getfixturevalue("lora_run"), run)
    else:
        run.mkdir()
    return run


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` with its bytes (None for a directory): what a refusal must leave as it was."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize(("kind", "damage", "args", "needles"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_damaged_or_misplaced_input_is_refused_in_one_paragraph(
        tmp_path: Path, request: pytest.FixtureRequest, kind: str, damage: Damage, args: tuple[str, ...],
        needles: tuple[str, ...]) -> None:
    run = _start(kind, tmp_path, request)
    damage(run, tmp_path)
    before = _snapshot(tmp_path)
    argv = [a.format(run=run, tmp=tmp_path, demo=DEMO) for a in args]
    assert_paragraph(run_cli(*argv), *needles)
    assert _snapshot(tmp_path) == before  # refused before writing: no card, no report, nothing half-written


def test_samples_shows_the_records_that_have_a_prompt(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    (run / "completions.jsonl").write_text(
        '{"step": 1, "reward": 0.5}\n{"step": 1, "prompt": "1+1", "completion": "2", "reward": 1.0}\n')
    shown = run_cli("samples", run)
    assert shown.exit_code == 0 and "1+1" in shown.output, shown


def test_push_dry_run_of_a_sound_run_passes(tmp_path: Path) -> None:
    ok = run_cli("push", _run_dir(tmp_path), "user/model", "--dry-run")
    assert ok.exit_code == 0, ok


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


def test_push_dry_run_keeps_a_card_grpo_did_not_write(lora_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(lora_run, run)
    (run / "README.md").write_text("MY OWN CARD\n")
    assert_paragraph(run_cli("push", run, "me/model", "--dry-run"), "not a model card grpo wrote", "--force")
    assert (run / "README.md").read_text() == "MY OWN CARD\n"
    assert run_cli("push", run, "me/model", "--dry-run", "--force").exit_code == 0
    assert "through grpo-cli" in (run / "README.md").read_text()
    assert run_cli("push", run, "me/model", "--dry-run").exit_code == 0  # grpo's own card is rewritten freely
