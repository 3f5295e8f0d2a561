"""Steps/s of `grpo train` against a hand-written TRL script, same model, data and GRPOConfig.

The wrapper may cost at most 3 %. Both runs train the bundled tiny model on CPU; they are
interleaved (plain, grpo, plain, grpo, ...) so machine noise hits both alike, and the median of
each side is compared. Prints a table and appends it to docs/performance.md.

    python benchmarks/wrapper_overhead.py [--repeats 3] [--max-steps 200] [--no-append]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# One torch thread on both sides (the plain script's default): with two threads on a busy
# 2-core machine, timings swing by several times and swamp a 3 % difference.
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def plain_run(args: argparse.Namespace, out: Path) -> float:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "trl_plain_demo.py"), "--max-steps", str(args.max_steps),
           "--output-dir", str(out), "--learning-rate", str(args.learning_rate), "--num-generations",
           str(args.num_generations), "--prompts-per-step", str(args.prompts_per_step), "--eval-samples", "1"]
    text = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True, env=ENV).stdout
    match = re.search(r"trainer train_steps_per_second: ([\d.]+)", text)
    if not match:
        raise RuntimeError(f"unexpected output from the plain script:\n{text}")
    return float(match.group(1))


def grpo_run(args: argparse.Namespace, out: Path) -> float:
    cmd = [sys.executable, "-m", "grpo_cli", "train", "recipes/demo.yaml", "-o", str(out), "--force",
           f"training.max_steps={args.max_steps}", f"training.learning_rate={args.learning_rate}",
           f"training.num_generations={args.num_generations}",
           f"training.per_device_train_batch_size={args.prompts_per_step * args.num_generations}",
           "training.lr_scheduler_type=constant", "training.logging_steps=10", "training.save_strategy=no",
           "eval.before_after=false", "output.report_to=[none]", "training.seed=0"]
    subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True, env=ENV)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    final = next(r for r in reversed(records) if "train_runtime" in r)
    return float(final["train_steps_per_second"]) if "train_steps_per_second" in final else (
        args.max_steps / float(final["train_runtime"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--prompts-per-step", type=int, default=8)
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    plain, wrapped = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            plain.append(plain_run(args, Path(tmp) / f"plain{i}"))
            wrapped.append(grpo_run(args, Path(tmp) / f"grpo{i}"))
            print(f"repeat {i + 1}: plain TRL {plain[-1]:.3f} steps/s, grpo {wrapped[-1]:.3f} steps/s", flush=True)
    p, g = statistics.median(plain), statistics.median(wrapped)
    overhead = (p - g) / p * 100
    table = "\n".join([
        "| runner | steps/s (median) | all runs |", "|---|---|---|",
        f"| plain TRL script | {p:.3f} | {', '.join(f'{x:.3f}' for x in plain)} |",
        f"| `grpo train` | {g:.3f} | {', '.join(f'{x:.3f}' for x in wrapped)} |",
        "", f"Wrapper overhead: {overhead:+.1f} % (target: at most 3 %).",
    ])
    print(table)
    if not args.no_append:
        load = os.getloadavg()[0]
        header = (f"\n### Wrapper overhead ({dt.datetime.now():%Y-%m-%d %H:%M}, {platform.machine()}, "
                  f"{os.cpu_count()} cores, load {load:.1f}, {args.max_steps} steps x {args.repeats} repeats, "
                  f"{args.prompts_per_step} prompts x {args.num_generations} generations per step)\n\n")
        with (ROOT / "docs" / "performance.md").open("a", encoding="utf-8") as fh:
            fh.write(header + table + "\n")


if __name__ == "__main__":
    main()
