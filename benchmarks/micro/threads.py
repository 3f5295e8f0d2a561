#!/usr/bin/env python
"""grpo's automatic thread choice against fixed settings, in interleaved runs under the same load.

Runs `grpo train RECIPE` (as a user would, a fresh process each time) with each setting in turn, rotating
the order every round so that a change of load hits every setting alike, and records the wall time of the
whole command and TRL's training time. Settings: `auto` (no OMP_NUM_THREADS: grpo chooses), and
OMP_NUM_THREADS=1 and =N for each N given. Prints a table (`--record`: also to docs/performance/history/) with
the load average before and after (the machine is shared; absolute times are upper bounds).

    python benchmarks/micro/threads.py --rounds 3 --threads 1 2 -- training.max_steps=20
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root: `benchmarks.record` and grpo_cli, however the script is run

from benchmarks.record import add_record, load, record, stamp  # noqa: E402


def run_once(recipe: str, overrides: list[str], threads: int | None, out: Path) -> tuple[float, float, str]:
    """(wall s, training s, thread plan line) of one `grpo train`."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    env["COLUMNS"] = "200"
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "grpo_cli", "train", recipe, *overrides, "-o", str(out), "--force"],
                          env=env, capture_output=True, text=True, cwd=ROOT, check=False)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"grpo train failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train_s = next((r["train_runtime"] for r in logs if "train_runtime" in r), float("nan"))
    plan = next((line for line in proc.stdout.splitlines() if "torch thread" in line), "")
    return wall, train_s, plan.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="Recipe overrides, e.g. training.max_steps=20.")
    parser.add_argument("--recipe", default="recipes/demo.yaml")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="Fixed OMP_NUM_THREADS settings.")
    add_record(parser)
    args = parser.parse_args()

    settings: list[int | None] = [None, *args.threads]
    walls: dict[int | None, list[float]] = {s: [] for s in settings}
    trains: dict[int | None, list[float]] = {s: [] for s in settings}
    plans: list[str] = []
    load_before = load()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = settings[r % len(settings):] + settings[:r % len(settings)]
            for s in order:
                wall, train_s, plan = run_once(args.recipe, args.overrides, s, Path(tmp) / "run")
                walls[s].append(wall)
                trains[s].append(train_s)
                if s is None:
                    plans.append(plan)
                print(f"round {r + 1} {_name(s)}: wall {wall:.1f} s, training {train_s:.1f} s "
                      f"(load {load()})", flush=True)
    load_after = load()
    best = min(statistics.median(trains[s]) for s in settings)
    rows = [f"| {_name(s)} | {statistics.median(walls[s]):.1f} | {statistics.median(trains[s]):.1f} | "
            f"{statistics.median(trains[s]) / best - 1:+.0%} | {', '.join(f'{t:.1f}' for t in trains[s])} |"
            for s in settings]
    title = (f"### Thread choice, {args.recipe} {' '.join(args.overrides)} ({stamp()}, "
             f"{platform.machine()}, {os.cpu_count()} cores, load average {load_before} before / "
             f"{load_after} after, {args.rounds} interleaved rounds)")
    text = "\n".join([title, "", "`python benchmarks/micro/threads.py " + " ".join(sys.argv[1:]) + "`", "",
                      "| setting | wall (s, median) | training (s, median) | vs best | training, all rounds |",
                      "|---|---:|---:|---:|---|", *rows, "",
                      "auto chose: " + "; ".join(sorted(set(plans))) if plans else "", ""])
    print(text)
    if args.record:
        record(text)


def _name(s: int | None) -> str:
    return "auto (grpo chooses)" if s is None else f"OMP_NUM_THREADS={s}"


if __name__ == "__main__":
    main()
