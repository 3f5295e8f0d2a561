"""2-process DDP runs that end early: Ctrl-C, or bad input in a worker, without torch elastic's tracebacks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import RECIPES, ROOT, sigint_as_a_terminal

pytestmark = pytest.mark.slow


ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _ddp(out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "grpo_cli", "train", str(RECIPES / "demo.yaml"), "--profile", "ddp",
            "--num-processes", "2", "-o", str(out), "training.per_device_train_batch_size=8",
            "training.num_generations=4", "training.logging_steps=1", "eval.before_after=false", *args]


def test_ctrl_c_of_a_ddp_run_prints_no_traceback(tmp_path: Path) -> None:
    out = tmp_path / "ddp"
    cmd = _ddp(out, "training.max_steps=200")
    env = ENV
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=sigint_as_a_terminal)
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.exists() and metrics.read_text().count('"reward"') >= 2):
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended or stalled before step 2"
        time.sleep(0.3)
    proc.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C sends to the launcher
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, output[-3000:]
    assert "Traceback" not in output and "SignalException" not in output, output[-3000:]
    assert "saved checkpoint-" in output and list(out.glob("checkpoint-*"))


def test_bad_input_in_a_ddp_worker_is_one_paragraph_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "boom.py").write_text("def boom(completions, **kwargs):\n    return [1 / 0 for _ in completions]\n")
    cmd = _ddp(tmp_path / "ddp", "training.max_steps=2", f"rewards=[{{function: {tmp_path / 'boom.py'}:boom}}]")
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output[-3000:]
    assert "reward 'boom' raised ZeroDivisionError" in output and "rewards[0]" in output
    assert "Traceback" not in output and "ChildFailedError" not in output, output[-3000:]
