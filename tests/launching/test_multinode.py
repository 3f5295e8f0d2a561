"""Two machines on localhost: two `grpo train` commands (machine rank 0 and 1, one process each) train one run.

This is what a cluster does with one `grpo train` per node (see `grpo launch slurm`), minus the network.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import RECIPES, ROOT, sigint_as_a_terminal

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _machine(rank: int, out: Path, port: int, *extra: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "grpo_cli", "train", str(RECIPES / "demo.yaml"), "--profile", "ddp",
           "--num-processes", "2", "--num-machines", "2", "--machine-rank", str(rank), "--main-process-ip",
           "127.0.0.1", "-o", str(out), f"launch.main_process_port={port}", "training.per_device_train_batch_size=16",
           "training.num_generations=4", "training.logging_steps=1", "eval.before_after=false", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=sigint_as_a_terminal)


def _finish(procs: list[subprocess.Popen[str]], timeout: float = 600) -> list[str]:
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return outputs


def _steps(out: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()
            if '"reward"' in line]


def test_two_machines_train_one_run(tmp_path: Path) -> None:
    out, port = tmp_path / "run", _free_port()
    procs = [_machine(0, out, port, "training.max_steps=3"), _machine(1, out, port, "training.max_steps=3")]
    main, other = _finish(procs)
    assert [p.returncode for p in procs] == [0, 0], main[-3000:] + other[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["world_size"] == 2
    assert manifest["distributed"]["type"] == "MULTI_CPU" and manifest["distributed"]["world_size"] == 2
    assert _steps(out) == [1, 2, 3]  # one record per step: both machines' processes took each step together
    assert "completed at step 3" in main and "completed at step 3" not in other  # one summary, on the main machine


def test_ctrl_c_on_the_second_machine_stops_both_with_one_checkpoint(tmp_path: Path) -> None:
    out, port = tmp_path / "run", _free_port()
    long = ("training.max_steps=500", "training.save_strategy=no")
    procs = [_machine(0, out, port, *long), _machine(1, out, port, *long)]
    try:
        deadline = time.monotonic() + 300
        while not ((out / "metrics.jsonl").exists() and _steps(out)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "no step was logged"
            time.sleep(0.5)
        os.killpg(procs[1].pid, signal.SIGINT)  # Ctrl-C in the second machine's terminal
    finally:
        outputs = _finish(procs, timeout=300)
    assert [p.returncode for p in procs] == [130, 130], outputs[0][-3000:] + outputs[1][-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    step = manifest["global_step"]
    assert 1 <= step < 500 and (out / f"checkpoint-{step}" / "trainer_state.json").exists()
    assert "--resume" in outputs[0]  # the main machine says how to continue
