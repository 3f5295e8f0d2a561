"""benchmarks/vs_trl/time_to_accuracy.py on the demo, tiny: the plain TRL script and `grpo train` each train,
checkpoint, and every checkpoint is scored, so the shared benchmark of the step-speed and learning-signal work
cannot rot.

No figure is asserted (speed targets live in the benchmark's own table); what is asserted is what a reader of the
table relies on: a row per runner, a curve point per checkpoint clocked inside train(), and the same base model
accuracy at step 0 for every runner, and a time to target that counts from the process's launch.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_each_runner_gets_a_row_with_a_clocked_accuracy_per_checkpoint() -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/vs_trl/time_to_accuracy.py", "--recipe", "recipes/demo.yaml", "--steps", "6",
         "--grpo-steps", "9", "--save-steps", "3", "--runners", "trl", "grpo", "--eval-samples", "16", "--target",
         "trl"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| (")]
    table = rows[len(rows) // 2:]  # each row is printed when ready, then again in the final table
    assert [r.split(" | ")[0] for r in table] == ["| (a) plain TRL script", "| (c) grpo train (shared prompt prefill)"]
    bases = set()
    for line, steps in zip(table, (6, 9), strict=True):  # --grpo-steps: grpo trains on past the script's last step
        cells = line.split(" | ")
        points = re.findall(r"(\d+): ([\d.]+)(?: @ ([\d.]+) s)?", cells[6])
        assert [int(p[0]) for p in points] == list(range(0, steps + 1, 3)), cells[6]
        bases.add(points[0][1])
        clocks = [float(p[2]) for p in points[1:]]
        assert 0 < clocks[0] < clocks[1], clocks  # step 6 came after step 3, inside train()
        assert float(cells[1]) > 0 and cells[5].replace(",", "") == str(steps * 64)  # steps/s; completions
    assert len(bases) == 1  # one base-model evaluation is the step-0 point of every curve
    # --target trl: the plain script's own last accuracy, so it is the baseline (1.00x) and reaches it
    cells = table[0].split(" | ")
    assert "(1.00x TRL)" in cells[7], cells[7]
    points = [(int(s), float(a), float(c)) for s, a, c in re.findall(r"(\d+): ([\d.]+) @ ([\d.]+) s", cells[6])]
    first = next(clock for _, acc, clock in points if acc >= points[-1][1])
    # the time to it counts from the process's launch: the model load before train() is in it
    assert float(cells[7].split()[0]) > first, (cells[7], points)


@pytest.mark.parametrize(("extra", "said"), [
    (["--grpo-steps", "9", "--set", "training.lr_scheduler_type=linear"], "needs training.lr_scheduler_type: constant"),
    (["--grpo-steps", "3"], "--grpo-steps 3 is under --steps 6")])
def test_grpo_steps_is_refused_where_the_first_steps_would_be_another_run(extra: list[str], said: str) -> None:
    """Room past the script's last step only means the same first steps under a constant learning rate."""
    done = subprocess.run([sys.executable, "benchmarks/vs_trl/time_to_accuracy.py", "--recipe", "recipes/demo.yaml",
                           "--steps", "6", "--runners", "grpo", *extra], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not done.stdout  # refused before the base model is scored
