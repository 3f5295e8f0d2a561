#!/usr/bin/env python
"""Time the offline tool demo and record its held-out gain: `grpo train recipes/tools-demo.yaml` in-process.

Prints a table (wall time of the whole command, training time, steps, held-out accuracy before/after, tool
calls per episode and failure rate before/after, the last logged tools/call_frequency) with the machine's load
average (`--record`: also to docs/performance/history/), since the CPU figures depend on what else runs.

    OMP_NUM_THREADS=1 python benchmarks/experiments/tools_demo.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root: `benchmarks.record` and grpo_cli, however the script is run

from benchmarks.record import add_record, load, record, stamp  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="Recipe overrides, e.g. training.max_steps=40.")
    add_record(parser)
    args = parser.parse_args()

    from grpo_cli import load_recipe, train

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        train(load_recipe(ROOT / "recipes" / "tools-demo.yaml", args.overrides), output_dir=out)
        wall = time.perf_counter() - started
        manifest = json.loads((out / "manifest.json").read_text())
        logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train_time = next((r.get("train_runtime") for r in logs if "train_runtime" in r), None)
    before, after = manifest["eval_before"], manifest["eval_after"]
    last = [r for r in logs if "tools/call_frequency" in r][-1]
    rows = [("wall time of `grpo train` (s)", f"{wall:.0f}", ""),
            ("training only (s)", f"{train_time:.0f}" if train_time else "?", ""),
            ("steps", str(manifest["global_step"]), ""),
            ("held-out accuracy", f"{before['accuracy/mean']:.3f}", f"{after['accuracy/mean']:.3f}"),
            ("tool calls per episode", f"{before['tools/calls_per_episode']:.2f}",
             f"{after['tools/calls_per_episode']:.2f}"),
            ("tool failure rate", f"{before['tools/failure_rate']:.3f}", f"{after['tools/failure_rate']:.3f}"),
            ("last logged tools/call_frequency", "", f"{last['tools/call_frequency']:.2f}")]
    title = (f"### Tool demo (`recipes/tools-demo.yaml`) ({stamp()}, {platform.machine()}, "
             f"{os.cpu_count()} cores, load {load()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '-')})")
    table = ["| figure | before | after |", "|---|---:|---:|", *[f"| {a} | {b} | {c} |" for a, b, c in rows]]
    gain = after["accuracy/mean"] - before["accuracy/mean"]
    text = "\n".join([title, "", *table, "", f"held-out gain: {gain:+.3f} (target >= +0.15 in < 180 s)", ""])
    print(text)
    if args.record:
        record(text)


if __name__ == "__main__":
    main()
