"""A real 2-process DDP run of the demo recipe on CPU, launched the way users launch it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import RECIPES, ROOT

pytestmark = pytest.mark.slow

SPY = '''
import json, os


def spy(completions, prompts, log, **kwargs):
    """Record which process scored which prompts, then score nothing in particular."""
    with open(log, "a") as fh:
        fh.write(json.dumps({"rank": int(os.environ.get("RANK", "0")), "prompts": list(prompts)}) + "\\n")
    return [float(len(c)) for c in completions]
'''


def test_two_process_ddp_run_writes_once_and_keeps_groups_together(tmp_path: Path) -> None:
    (tmp_path / "spy.py").write_text(SPY)
    log = tmp_path / "calls.jsonl"
    out = tmp_path / "ddp"
    rewards = f"rewards=[{{name: accuracy, params: {{answer_format: first_number}}}}, " \
              f"{{function: {tmp_path / 'spy.py'}:spy, weight: 0.0, params: {{log: {log}}}}}]"
    cmd = [sys.executable, "-m", "grpo_cli", "train", str(RECIPES / "demo.yaml"), "--profile", "ddp",
           "--num-processes", "2", "-o", str(out), "training.max_steps=3", "training.per_device_train_batch_size=8",
           "training.num_generations=4", "training.logging_steps=1", "eval.before_after=false", rewards,
           "eval.every_steps=2", "eval.max_samples=4", "eval.num_generations=4", "output.completions_per_log=16"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["world_size"] == 2
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()
             if '"reward"' in line]
    assert steps == [1, 2, 3]  # written by the main process only, once per log
    assert proc.stdout.count("completed at step 3") == 1  # one summary, not one per process
    assert (out / "model.safetensors").exists()
    # The task metric: evaluated on the main process, broadcast, best/ saved with every process taking part.
    task = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"task/' in line]
    assert [r["step"] for r in task] == [0, 2, 3]
    best = max((r for r in task if r["step"] > 0), key=lambda r: r["task/eval/accuracy"])
    assert manifest["best"]["value"] == best["task/eval/accuracy"] and (out / "best" / "model.safetensors").exists()

    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert {c["rank"] for c in calls} == {0, 1}
    # completions.jsonl (16 rows a step = the whole generation batch), written by the main process, holds what
    # the other process generated too (rank 1 only ever scores training batches; rank 0 also scores the eval)
    sampled = {json.loads(line)["prompt"] for line in (out / "completions.jsonl").read_text().splitlines()}
    assert {p for c in calls if c["rank"] == 1 for p in c["prompts"]} <= sampled
    assert sampled <= {p for c in calls for p in c["prompts"]}
    for call in calls:
        # Each process scores whole groups: every prompt it sees comes with all 4 of its completions.
        assert all(n % 4 == 0 for n in Counter(call["prompts"]).values()), call


def _descendants(pid: int) -> set[int]:
    """Every process below `pid` (from /proc), so the test can see who outlives the launcher."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_killing_the_launcher_takes_accelerate_and_the_workers_with_it(tmp_path: Path) -> None:
    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "grpo_cli", "train", str(RECIPES / "demo.yaml"), "--profile", "ddp",
           "--num-processes", "2", "-o", str(out), "training.max_steps=500", "training.per_device_train_batch_size=8",
           "training.num_generations=4", "training.logging_steps=1", "eval.before_after=false"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    below: set[int] = set()
    try:
        deadline = time.time() + 300
        while not ((out / "metrics.jsonl").exists() and '"reward"' in (out / "metrics.jsonl").read_text()):
            assert proc.poll() is None and time.time() < deadline, "the DDP run did not start training"
            time.sleep(0.5)
        below = _descendants(proc.pid)
        assert len(below) >= 3, below  # accelerate and two workers
        proc.kill()  # SIGKILL: the launcher cannot forward anything
        proc.wait()
        deadline = time.time() + 60
        while any(_alive(p) for p in below) and time.time() < deadline:
            time.sleep(0.5)
        survivors = [p for p in below if _alive(p)]
        assert not survivors, f"processes outlived the launcher: {survivors}"
    finally:
        for pid in below:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
