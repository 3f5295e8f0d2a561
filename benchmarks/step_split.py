"""Where one training step's time goes, on a real model: generation, rewards, log-probabilities, forward,
backward, optimizer and the rest, as `grpo train` logs it (`time/*` in metrics.jsonl).

    python benchmarks/step_split.py                      # trains recipes/smollm2-word-arith.yaml for 6 steps
    python benchmarks/step_split.py --run outputs/smollm2-word-arith   # the split of a run already made
    python benchmarks/step_split.py --recipe recipes/demo.yaml --steps 20 --no-append

Prints a table and appends it to docs/performance.md with the load average and thread count.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from perf_doc import add_no_append, append, load, stamp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grpo_cli.artefacts.time_split import time_split  # noqa: E402


def _train(recipe: str, steps: int, out: Path) -> None:
    cmd = [sys.executable, "-m", "grpo_cli", "train", recipe, "-o", str(out), "--force",
           f"training.max_steps={steps}", "training.logging_steps=1", "eval.before_after=false"]
    subprocess.run(cmd, check=True, cwd=ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/smollm2-word-arith.yaml")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--run", help="Read the split of this finished run instead of training.")
    add_no_append(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="grpo-split-") as tmp:
        run = Path(args.run) if args.run else Path(tmp) / "run"
        if not args.run:
            _train(args.recipe, args.steps, run)
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    split = time_split(rows)
    if not split:
        sys.exit(f"{run} logged no time/* split (trained before grpo logged it?)")
    total = sum(s for _, s, _ in split)
    lines = ["| part | s / step | share |", "|---|---:|---:|"]
    lines += [f"| {part} | {seconds:.2f} | {share:.0%} |" for part, seconds, share in split]
    lines.append(f"| **step** | **{total:.2f}** | 100% |")
    table = "\n".join(lines)
    print(table)
    if not args.no_append:
        threads = os.environ.get("OMP_NUM_THREADS", "torch default")
        what = args.run or f"{args.recipe}, {args.steps} steps"
        header = (f"### Where a step's time goes: {what} ({stamp()}, {platform.machine()}, {os.cpu_count()} "
                  f"cores, threads {threads}, load {load(all_three=True)})\n\n")
        append(header + table + "\n")


if __name__ == "__main__":
    main()
