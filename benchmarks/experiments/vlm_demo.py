"""The offline vision-language demo end to end: `grpo train recipes/vlm-demo.yaml` wall time and held-out gain.

Target: held-out accuracy +0.15 absolute or more in under 3 minutes on 2 CPU cores. Each run is a fresh
process; the load average before each run is printed because a shared machine moves the wall time a lot
(the accuracies do not move: the run is seeded). Prints a table (`--record`: also to docs/performance/history/).

    python benchmarks/experiments/vlm_demo.py [--runs 1] [--record] [KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root: `benchmarks.record` and grpo_cli, however the script is run

from benchmarks.record import add_record, record, stamp  # noqa: E402


def one_run(out: Path, overrides: list[str]) -> tuple[float, float, float, float]:
    """(load average before, wall seconds, accuracy before, accuracy after)."""
    exe = shutil.which("grpo")
    cmd = [exe] if exe else [sys.executable, "-m", "grpo_cli"]
    load = os.getloadavg()[0]
    start = time.perf_counter()
    subprocess.run([*cmd, "train", "recipes/vlm-demo.yaml", f"output.dir={out}", "--force", *overrides], cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    manifest = json.loads((out / "manifest.json").read_text())
    return load, wall, manifest["eval_before"]["accuracy/mean"], manifest["eval_after"]["accuracy/mean"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("overrides", nargs="*", help="Recipe overrides, e.g. training.max_steps=2 (the smoke test).")
    add_record(parser)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            rows.append(one_run(Path(tmp) / f"run{i}", args.overrides))
    title = (f"### VLM demo (`grpo train recipes/vlm-demo.yaml`) ({stamp()}, {platform.machine()}, "
             f"{os.cpu_count()} cores)")
    lines = [title, "", "| run | load avg before | wall s | held-out accuracy before | after | gain |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {i + 1} | {load:.1f} | {wall:.0f} | {a:.3f} | {b:.3f} | {b - a:+.3f} |"
              for i, (load, wall, a, b) in enumerate(rows)]
    print("\n".join(lines))
    if args.record:
        record("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
