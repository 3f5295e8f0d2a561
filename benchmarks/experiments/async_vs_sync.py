"""Synchronous vs async GRPO against one vLLM server on CPU: steps/s, and how long a step waits for generation.

Starts one `grpo vllm-serve` for the recipe, then trains it in pairs, `launch.vllm.mode=server` (TRL's
GRPOTrainer: generate, then learn) and `launch.vllm.mode=async` (TRL's AsyncGRPOTrainer: the server samples the
next batches while the trainer learns), the same number of steps each, alternating so that a change in the
machine's load hits both. A step's time is the gap between consecutive training logs (logging_steps=1; the first
step, which includes start-up, is left out). "waits for generation" is `time/generation` for the synchronous
trainer (grpo's step timer) and `perf/rollout_wait_s` for the async one (TRL's: time blocked on the rollout queue).

    .venv-vllm/bin/python benchmarks/experiments/async_vs_sync.py [--recipe recipes/demo.yaml] [--steps 30] [--pairs 2]
        [--set KEY=VALUE ...] [--port PORT] [--record]

`--port`: train against a server already up on this machine at that port (`grpo vllm-serve` of the same recipe)
instead of starting one; it is left running.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root: `benchmarks.record` and grpo_cli, however the script is run

from benchmarks.record import add_record, load, record, stamp  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train(recipe: str, mode: str, overrides: list[str], out: Path) -> dict[str, float]:
    """Train `recipe` in `mode`; median step seconds, steps/s, generation wait per step, last reward, wall seconds."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "grpo_cli", "train", recipe, *overrides, f"launch.vllm.mode={mode}",
                    "-o", str(out), "--force"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in logs if "loss" in r]
    gaps = [b["time"] - a["time"] for a, b in zip(steps, steps[1:], strict=False)]
    wait_key = "perf/rollout_wait_s" if mode == "async" else "time/generation"
    waits = [r[wait_key] for r in steps[1:] if wait_key in r]
    median = statistics.median(gaps) if gaps else float("nan")
    return {"step": median, "rate": 1 / median if gaps else float("nan"),
            "wait": statistics.mean(waits) if waits else float("nan"),
            "reward": statistics.mean(r.get("reward", float("nan")) for r in steps[-10:]), "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/demo.yaml")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="A recipe override for both trainers (and the server), e.g. model.name_or_path=DIR.")
    parser.add_argument("--port", type=int, help="A server already running here for the recipe: use it.")
    add_record(parser)
    args = parser.parse_args()
    from grpo_cli.launching.vllm_server import stop_server, wait_for_server

    port = args.port or _free_port()
    overrides = [f"launch.vllm.port={port}", f"training.max_steps={args.steps}", "training.logging_steps=1",
                 "eval.before_after=false", "launch.vllm.server_timeout=900", *args.set]
    server = None if args.port else subprocess.Popen(
        [sys.executable, "-m", "grpo_cli", "vllm-serve", args.recipe, *overrides, "launch.vllm.mode=server"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    results: dict[str, list[dict[str, float]]] = {"server": [], "async": []}
    try:
        wait_for_server(f"http://127.0.0.1:{port}", 900 if server else 30,
                        alive=None if server is None else lambda: server.poll() is None)
        with tempfile.TemporaryDirectory() as tmp:
            for pair in range(args.pairs):
                for mode in ("server", "async"):
                    got = _train(args.recipe, mode, overrides, Path(tmp) / f"{mode}-{pair}")
                    results[mode].append(got)
                    print(mode, pair, {k: round(v, 3) for k, v in got.items()}, flush=True)
    finally:
        if server is not None:
            stop_server(server)
    rows = ["| trainer (launch.vllm.mode) | median step (s), each run | steps/s (median) | waits for generation "
            "per step (s) | reward, last 10 steps | wall incl. start (s) |", "|---|---:|---:|---:|---:|---:|"]
    for mode, label in (("server", "GRPOTrainer (server)"), ("async", "AsyncGRPOTrainer (async)")):
        runs = results[mode]
        each = ", ".join(f"{r['step']:.2f}" for r in runs)
        rows.append(f"| {label} | {each} | "
                    f"{statistics.median(r['rate'] for r in runs):.2f} | "
                    f"{statistics.mean(r['wait'] for r in runs):.2f} | "
                    f"{statistics.mean(r['reward'] for r in runs):.3f} | "
                    f"{statistics.mean(r['wall'] for r in runs):.0f} |")
    speedup = statistics.median(r["rate"] for r in results["async"]) / statistics.median(
        r["rate"] for r in results["server"])
    head = (f"### Async vs synchronous GRPO on a CPU vLLM server ({stamp()}, {platform.machine()}, "
            f"{os.cpu_count()} cores, load {load(all_three=True)}, {args.recipe} {' '.join(args.set)}, {args.steps} "
            f"steps x {args.pairs} "
            f"pairs, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
            "`.venv-vllm/bin/python benchmarks/experiments/async_vs_sync.py`)")
    text = "\n".join([head, "", *rows, "", f"async / synchronous steps/s: {speedup:.2f}x", ""])
    print(text)
    if args.record:
        record(text)


if __name__ == "__main__":
    main()
