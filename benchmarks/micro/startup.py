"""How long `grpo --help` and `grpo validate` take (target: under 0.3 s each).

Runs each command N times in fresh processes, and prints a table of min/median
(`--record`: also to docs/performance/history/). grpo's modules are byte-compiled first, as `pip install` leaves
them: where PYTHONDONTWRITEBYTECODE is set, every run would otherwise compile them from source (about
a fifth of `grpo validate`). `benchmarks/vs_trl/grpo_vs_trl.py` compares validate with `trl grpo --help`.

    python benchmarks/micro/startup.py [--runs 7] [--record]
"""

from __future__ import annotations

import argparse
import compileall
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root: `benchmarks.record` and grpo_cli, however the script is run

from benchmarks.record import add_record, record, stamp  # noqa: E402


def _grpo() -> list[str]:
    exe = shutil.which("grpo")
    return [exe] if exe else [sys.executable, "-m", "grpo_cli"]


def time_command(cmd: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    add_record(parser)
    args = parser.parse_args()
    grpo = _grpo()
    compileall.compile_dir(str(ROOT / "grpo_cli"), quiet=1)
    commands = {
        "grpo --help": [*grpo, "--help"],
        "grpo validate recipes/gsm8k.yaml": [*grpo, "validate", "recipes/gsm8k.yaml"],
        "grpo validate recipes/demo.yaml": [*grpo, "validate", "recipes/demo.yaml"],
    }
    time_command(commands["grpo validate recipes/gsm8k.yaml"], 1)  # warm the TRL-fields cache and the page cache
    rows = []
    for name, cmd in commands.items():
        t = time_command(cmd, args.runs)
        rows.append((name, min(t), statistics.median(t)))
    lines = ["| command | min (s) | median (s) | target |", "|---|---|---|---|"]
    lines += [f"| `{n}` | {a:.3f} | {m:.3f} | < 0.3 |" for n, a, m in rows]
    table = "\n".join(lines)
    print(table)
    if args.record:
        header = (f"### Startup ({stamp()}, {platform.machine()}, {os.cpu_count()} cores, "
                  f"Python {platform.python_version()}, {args.runs} runs each)\n\n")
        record(header + table + "\n")


if __name__ == "__main__":
    main()
