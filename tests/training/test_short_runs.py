"""Runs shorter than one logging interval: validate says so before the run; the run still logs its last step
(TRL's end-of-training log carries the step's metrics; a longer run keeps its tail too), and the summary and
report.md say why first and last agree."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from grpo_cli import runs
from grpo_cli.artefacts.summary import training_logs
from tests.conftest import RECIPES, run_cli

DEMO = RECIPES / "demo.yaml"
SMALL = ["training.per_device_train_batch_size=8", "training.num_generations=4", "eval.before_after=false"]


def test_validate_warns_when_max_steps_is_below_logging_steps() -> None:
    result = run_cli("validate", DEMO, "training.max_steps=3", "training.logging_steps=5", "--json")
    assert result.exit_code == 0, result
    warnings = json.loads(result.output)["warnings"]
    assert any(w.startswith("training.max_steps=3 is below training.logging_steps=5") and
               "training.logging_steps=1" in w for w in warnings), warnings
    quiet = json.loads(run_cli("validate", DEMO, "training.max_steps=3", "training.logging_steps=1",
                               "--json").output)["warnings"]
    assert not any("logging_steps" in w for w in quiet), quiet


@pytest.mark.slow
@pytest.mark.parametrize(("steps", "every", "logged"), [(2, 5, [2]), (3, 2, [2, 3])])
def test_the_last_step_is_logged(tmp_path: Path, steps: int, every: int, logged: list[int]) -> None:
    from grpo_cli import load_recipe, train

    out = tmp_path / "run"
    result = train(load_recipe(DEMO, [*SMALL, f"training.max_steps={steps}", f"training.logging_steps={every}"]),
                   output_dir=out)
    assert result.status == "completed"
    logs = training_logs(runs.read_jsonl(out / runs.METRICS))
    assert [r["step"] for r in logs] == logged, logs
    assert all("reward" in r for r in logs)


@pytest.mark.slow
def test_a_run_with_one_log_says_why_first_and_last_agree(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_cli("train", DEMO, *SMALL, "training.max_steps=2", "training.logging_steps=5", "-o", out)
    assert result.exit_code == 0, result
    text = " ".join(result.output.split())
    assert "note: the run logged one step (training.max_steps is not above training.logging_steps)" in text
    report = (out / runs.REPORT_SUMMARY).read_text()
    assert "One training log: first and final are the same step" in report
    longer = run_cli("train", DEMO, *SMALL, "training.max_steps=2", "training.logging_steps=1", "-o", out, "--force")
    assert longer.exit_code == 0 and "the run logged one step" not in longer.output


@pytest.mark.slow
def test_card_and_report_label_the_windows_alike(tmp_path: Path) -> None:
    from grpo_cli import load_recipe, train

    out = tmp_path / "run"
    result = train(load_recipe(DEMO, [*SMALL, "training.max_steps=10", "training.logging_steps=1"]), output_dir=out)
    assert result.status == "completed"
    card, report = (out / runs.CARD).read_text(), (out / runs.REPORT_SUMMARY).read_text()
    assert "| metric | first (steps 1–2) | final (steps 9–10) |" in card, card
    assert "| metric | first (steps 1–2) | best (" in report and "final (steps 9–10) |" in report, report


@pytest.mark.slow
def test_the_one_log_note_only_where_setting_logging_steps_helps(tmp_path: Path) -> None:
    out = tmp_path / "run"
    every = ["training.logging_steps=1", "training.save_strategy=steps", "training.save_steps=1"]
    assert run_cli("train", DEMO, *SMALL, *every, "training.max_steps=1", "-o", out).exit_code == 0
    resumed = run_cli("train", DEMO, *SMALL, *every, "training.max_steps=2", "-o", out, "--resume")
    assert resumed.exit_code == 0 and "completed at step 2" in resumed.output, resumed
    assert "logged one step" not in resumed.output  # it logs every step already: nothing to set
    (tmp_path / "flat.py").write_text("def flat(completions, **kwargs):\n    return [0.0 for _ in completions]\n")
    guarded = ["training.max_steps=6", "training.logging_steps=3", "health.zero_std.window=1",
               "health.zero_std.action=stop", f"rewards=[{{function: {tmp_path / 'flat.py'}:flat}}]"]
    where = tmp_path / "stopped $(touch PWNED)"
    stopped = run_cli("train", DEMO, *SMALL, *guarded, "-o", where)
    assert "stopped at step 3" in stopped.output and "Traceback" not in stopped.output, stopped
    assert "logged one step" not in stopped.output  # the guard's paragraph says why it ended
    assert "One training log" not in (where / runs.REPORT_SUMMARY).read_text()
    hint = re.search(r"continue it with `(grpo train .*?)`", " ".join(stopped.output.split()))
    assert hint, stopped.output
    shell = subprocess.run(["bash", "-c", 'grpo() { printf "%s\\n" "$@"; }; ' + hint[1]], cwd=tmp_path,
                           capture_output=True, text=True, check=True)
    assert shell.stdout.splitlines() == ["train", str(DEMO), "-o", str(where), "--resume"]
    assert not (tmp_path / "PWNED").exists()  # the printed hint is shell-quoted
