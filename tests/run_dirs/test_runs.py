"""Run directories are never lost, mixed or left stuck: locking, killed runs, partial checkpoints, exact resume."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import RECIPES, ROOT, run_cli

pytestmark = pytest.mark.slow

DEMO = RECIPES / "demo.yaml"
FAST = ["training.per_device_train_batch_size=8", "training.num_generations=4", "training.logging_steps=1",
        "eval.before_after=false", "output.report_to=none"]
SPY = '''
import json


def spy(completions, prompts, log, **kwargs):
    """Record what each step generated for which prompts; score nothing."""
    with open(log, "a") as fh:
        fh.write(json.dumps({"prompts": list(prompts), "completions": list(completions)}) + "\\n")
    return [0.0 for _ in completions]
'''


def _steps(out: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()
            if '"reward"' in line]


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def _start(out: Path, *overrides: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "grpo_cli", "train", str(DEMO), *FAST, "training.max_steps=500", *overrides,
           "-o", str(out)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for(condition, proc: subprocess.Popen, timeout: float = 240) -> None:  # type: ignore[no-untyped-def]
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"training exited early: {proc.stdout.read() if proc.stdout else ''}")
        if condition():
            return
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("training did not get there in time")


def _complete_checkpoints(out: Path) -> list[int]:
    """Checkpoints whose trainer_state.json (written last) is whole: a SIGKILL during a save leaves it torn."""
    whole = []
    for state in out.glob("checkpoint-*/trainer_state.json"):
        try:
            json.loads(state.read_text())
        except (OSError, ValueError):
            continue
        whole.append(int(state.parent.name.split("-")[1]))
    return sorted(whole)


def test_a_live_run_is_locked_and_a_killed_one_is_detected_and_resumed_cleanly(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _start(out, "training.save_strategy=steps", "training.save_steps=2")
    try:
        _wait_for(lambda: len(_complete_checkpoints(out)) >= 1 and (out / "metrics.jsonl").exists()
                  and len(_steps(out)) >= 3, proc)
        # A second run on the same directory, with or without --force, is refused and names the holder.
        for extra in ([], ["--force"]):
            second = run_cli("train", DEMO, *FAST, "training.max_steps=2", "-o", out, *extra)
            assert second.exit_code == 2, second.output
            assert "in use by another run" in second.output and f"pid {proc.pid}" in second.output, second.output
            assert "Traceback" not in second.output
        assert (out / "manifest.json").exists() and _manifest(out)["status"] == "running"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)

    # The run died without a word: the next command that looks at the directory says so and records it.
    assert _manifest(out)["status"] == "running"
    report = run_cli("report", out)
    assert report.exit_code == 0, report.output
    assert _manifest(out)["status"] == "killed"
    assert "killed" in (out / "report.md").read_text()

    ckpt = _complete_checkpoints(out)[-1]
    resumed = run_cli("train", DEMO, *FAST, f"training.max_steps={ckpt + 2}", "-o", out, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert f"resuming from checkpoint-{ckpt}" in resumed.output
    # Each step is logged once: records after the checkpoint were dropped before they were logged again.
    assert _steps(out) == list(range(1, ckpt + 3))
    assert _manifest(out)["status"] == "completed"


def test_resume_skips_an_incomplete_checkpoint_and_says_why(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = run_cli("train", DEMO, *FAST, "training.max_steps=4", "training.save_strategy=steps",
                    "training.save_steps=2", "-o", out)
    assert first.exit_code == 0, first.output
    # What a kill during the save of checkpoint-4 leaves behind: weights, but no trainer_state.json (written last).
    (out / "checkpoint-4" / "trainer_state.json").unlink()
    named = run_cli("train", DEMO, *FAST, "training.max_steps=5", "-o", out, "--resume", out / "checkpoint-4")
    assert named.exit_code == 2 and "trainer_state.json" in named.output and "Traceback" not in named.output

    resumed = run_cli("train", DEMO, *FAST, "training.max_steps=5", "training.save_strategy=no", "-o", out,
                      "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert "skipping checkpoint-4" in resumed.output and "trainer_state.json" in resumed.output
    assert "resuming from checkpoint-2" in resumed.output
    assert _steps(out) == [1, 2, 3, 4, 5]
    assert _manifest(out)["resumed_from"].endswith("checkpoint-2")


def test_resume_in_a_later_epoch_reproduces_the_uninterrupted_run(tmp_path: Path) -> None:
    """8 prompts, 2 per step: an epoch is 4 steps, so checkpoint-6 lies in the second epoch."""
    rows = (ROOT / "grpo_cli" / "assets" / "tiny-arith-data" / "train.jsonl").read_text().splitlines()[:8]
    (tmp_path / "small.jsonl").write_text("\n".join(rows) + "\n")
    (tmp_path / "spy.py").write_text(SPY)

    def args(log: str) -> list[str]:
        rewards = (f"rewards=[{{name: accuracy, params: {{answer_format: first_number}}}}, "
                   f"{{function: {tmp_path / 'spy.py'}:spy, weight: 0.0, params: {{log: {tmp_path / log}}}}}]")
        return ["train", DEMO, *FAST, f"data.files.train={tmp_path / 'small.jsonl'}", "training.max_steps=9",
                "training.save_strategy=steps", "training.save_steps=6", rewards]

    assert run_cli(*args("straight.log"), "-o", tmp_path / "straight").exit_code == 0
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copytree(tmp_path / "straight" / "checkpoint-6", resumed_dir / "checkpoint-6")
    shutil.copy(tmp_path / "straight" / "recipe.yaml", resumed_dir)
    result = run_cli(*args("resumed.log"), "-o", resumed_dir, "--resume")
    assert result.exit_code == 0, result.output

    straight = [json.loads(line) for line in (tmp_path / "straight.log").read_text().splitlines()]
    resumed = [json.loads(line) for line in (tmp_path / "resumed.log").read_text().splitlines()]
    assert len(straight) == 9 and len(resumed) == 3
    for step, (a, b) in enumerate(zip(straight[6:], resumed, strict=True), start=7):
        assert a["prompts"] == b["prompts"], f"step {step}: different prompts after resume"
        assert a["completions"] == b["completions"], f"step {step}: different completions after resume"
