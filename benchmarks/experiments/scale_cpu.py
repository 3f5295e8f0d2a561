"""The demo on 2 CPU processes under ddp, fsdp and zero3, side by side in one run.

For each profile it runs `grpo train recipes/demo.yaml --profile P --num-processes 2` (evaluation off),
then reads the run's manifest and metrics: steady steps/s (from the per-step log times, first step
excluded), the ratio to ddp, the distributed type in effect, the parameters each process held, and the
peak resident memory of each process. Prints a table (`--record`: also to docs/performance/history/).

    python benchmarks/experiments/scale_cpu.py [--steps 20] [--profiles ddp fsdp zero3] [--record]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root: `benchmarks.record` and grpo_cli, however the script is run

from benchmarks.record import add_record, load, record, stamp  # noqa: E402

PROFILES = ("ddp", "fsdp", "zero3")


def run_profile(profile: str, steps: int, out: Path) -> dict:
    cmd = [sys.executable, "-m", "grpo_cli", "train", str(ROOT / "recipes" / "demo.yaml"), "--profile", profile,
           "--num-processes", "2", "-o", str(out), f"training.max_steps={steps}", "training.logging_steps=1",
           "eval.before_after=false"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{profile} failed:\n{proc.stderr[-3000:]}")
    manifest = json.loads((out / "manifest.json").read_text())
    times = [r["time"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
             if "reward" in r and "time" in r]
    steady = (len(times) - 2) / (times[-1] - times[0]) if len(times) > 2 else float("nan")
    layout = manifest["distributed"]
    return {"profile": profile, "type": layout["type"], "steps_per_s": steady, "wall_s": wall,
            "held": layout["parameters_per_rank"], "total": layout["parameters_total"],
            "rss": layout.get("peak_rss_mib_per_rank", [])}


def table(rows: list[dict], steps: int) -> str:
    base = next(r["steps_per_s"] for r in rows if r["profile"] == "ddp")
    lines = [f"Demo, {steps} steps, 2 CPU processes, `OMP_NUM_THREADS=1`, evaluation off "
             f"({stamp()}, {os.cpu_count()} cores; load average before: {load()}):", "",
             "| profile | in effect | steps/s (steady) | vs ddp | wall s | params held per process | "
             "peak RSS per process (MiB) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        held = " / ".join(f"{h:,}" for h in r["held"]) + f" of {r['total']:,}"
        lines.append(f"| {r['profile']} | {r['type']} | {r['steps_per_s']:.2f} | {r['steps_per_s'] / base:.2f}x | "
                     f"{r['wall_s']:.0f} | {held} | {' / '.join(str(m) for m in r['rss'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--profiles", nargs="+", choices=PROFILES, default=list(PROFILES),
                        help="Which profiles (ddp, the ratios' base, is always run).")
    add_record(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run_profile(p, args.steps, Path(tmp) / p) for p in PROFILES if p == "ddp" or p in args.profiles]
    text = table(rows, args.steps)
    print(text)
    if args.record:
        record(f"### ddp vs fsdp vs zero3 on 2 CPU processes ({stamp()}, load {load()}; "
               f"`python benchmarks/experiments/scale_cpu.py --steps {args.steps}`)\n\n{text}")


if __name__ == "__main__":
    main()
