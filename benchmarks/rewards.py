"""Reward throughput: rewards/s for every built-in, and serial vs `parallel: N` for slow rewards.

Every built-in scores the same kind of batch TRL hands it (conversational completions plus the
dataset columns); the slow ones (`accuracy` through math-verify on symbolic answers, `code` in the
sandbox) are then timed serially and through ParallelReward with N worker processes. The machine
load is printed and saved with the figures, because a shared machine slows the pool first.

    python benchmarks/rewards.py [--workers 2] [--rows 64] [--no-append]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
THINK = "<think>\nStep 1: expand.\nStep 2: simplify.\nStep 3: check.\n</think>\n"


def _conv(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def numeric_batch(n: int, start: int = 0) -> dict[str, Any]:
    """GSM8K-style numeric answers, every other one right."""
    ids = range(start, start + n)
    completions = [_conv(f"{THINK}<answer>\n{i * 7 + (i % 2)}\n</answer>") for i in ids]
    return {"completions": completions, "answer": [str(i * 7) for i in ids]}


def symbolic_batch(n: int, start: int = 0) -> dict[str, Any]:
    """Symbolic answers that need math-verify: (x+i)^2 against its expansion, new expressions per `start`."""
    ids = range(start, start + n)
    completions = [_conv(f"{THINK}<answer>\n(x+{i})^2\n</answer>") for i in ids]
    return {"completions": completions, "answer": [f"x^2+{2 * i}x+{i * i}" for i in ids]}


def code_batch(n: int, start: int = 0) -> dict[str, Any]:
    """A correct solution against two assert tests, run in the sandbox."""
    solution = "```python\ndef add(a, b):\n    return a + b\n```"
    ids = range(start, start + n)
    completions = [_conv(f"{THINK}<answer>\n{solution}\n</answer>") for _ in ids]
    tests = [["assert add(2, 3) == 5", f"assert add({i}, 1) == {i + 1}"] for i in ids]
    return {"completions": completions, "tests": tests}


BATCHES: dict[str, Callable[..., dict[str, Any]]] = {"code": code_batch}


def call_kwargs(batch: dict[str, Any]) -> dict[str, Any]:
    n = len(batch["completions"])
    ids = [[0] * (len(c[0]["content"]) // 4) for c in batch["completions"]]
    return {"prompts": [[{"role": "user", "content": f"q{i}"}] for i in range(n)], "completion_ids": ids,
            "trainer_state": None, **batch}


def timed(func: Callable[..., Any], calls: list[dict[str, Any]]) -> float:
    """Fastest of the calls (the one the rest of the machine disturbed least, as timeit does)."""
    times = []
    for kwargs in calls:
        start = time.perf_counter()
        func(**kwargs)
        times.append(time.perf_counter() - start)
    return min(times)


def builtin_throughput(rows: int) -> list[tuple[str, int, float]]:
    from grpo_cli.rewards.builtins import BUILTINS

    out = []
    for name, func in BUILTINS.items():
        n = max(4, rows // 8) if name == "code" else rows
        make = BATCHES.get(name, numeric_batch)
        func(**call_kwargs(make(n, -n)))  # warm imports
        seconds = timed(func, [call_kwargs(make(n, k * n)) for k in range(1 if name == "code" else 3)])
        out.append((name, n, n / seconds))
    return out


def parallel_speedup(name: str, make: Callable[..., dict[str, Any]], n: int, workers: int) -> tuple[float, float]:
    """Serial and pooled seconds for one call of n rows, fresh rows every call (no cache helps either side)."""
    from grpo_cli.recipe.schema import RewardEntry
    from grpo_cli.rewards import load_reward
    from grpo_cli.rewards.parallel import ParallelReward

    entry = RewardEntry(name=name, parallel=workers)
    calls = [call_kwargs(make(n, k * n)) for k in range(3)]
    warm = call_kwargs(make(n, -n))
    serial_func = load_reward(entry, ROOT)
    serial_func(**warm)  # the same warm-up as the pool gets
    serial = timed(serial_func, calls)
    pool = ParallelReward(entry, ROOT, workers)
    try:
        pool(**warm)  # start the workers and let each import what the reward needs (sympy, ...)
        pooled = timed(pool, calls)
    finally:
        pool.close()
    return serial, pooled


def _spin(_: int) -> float:
    start = time.perf_counter()
    sum(i * i for i in range(2_000_000))
    return time.perf_counter() - start


def machine_parallelism(workers: int) -> float:
    """How much faster `workers` plain CPU-bound processes finish than one doing their work: what the
    machine offers right now (other users' load included), the ceiling for any pool's speed-up."""
    import multiprocessing

    start = time.perf_counter()
    for i in range(workers * 2):
        _spin(i)
    serial = time.perf_counter() - start
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.map(_spin, range(workers))
        start = time.perf_counter()
        pool.map(_spin, range(workers * 2), chunksize=2)
        parallel = time.perf_counter() - start
    return serial / parallel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rows", type=int, default=64, help="Completions per call.")
    parser.add_argument("--no-append", action="store_true", help="Do not append to docs/performance.md.")
    args = parser.parse_args()

    load_before = os.getloadavg()
    throughput = builtin_throughput(args.rows)
    ceiling_before = machine_parallelism(args.workers)
    slow = {"accuracy (math-verify)": ("accuracy", symbolic_batch, args.rows),
            "code (sandbox)": ("code", code_batch, max(8, args.rows // 4))}
    speedups = []
    for label, (name, make, n) in slow.items():
        serial, pooled = parallel_speedup(name, make, n, args.workers)
        speedups.append((label, n, serial, pooled))
    ceiling = (ceiling_before, machine_parallelism(args.workers))
    load_after = os.getloadavg()

    lines = ["| built-in | completions per call | rewards/s |", "|---|---|---|"]
    lines += [f"| `{n}` | {k} | {r:,.0f} |" for n, k, r in throughput]
    lines += ["", f"| slow reward | completions per call | serial (s) | parallel: {args.workers} (s) | speed-up |",
              "|---|---|---|---|---|"]
    lines += [f"| {n} | {k} | {s:.2f} | {p:.2f} | {s / p:.2f}x |" for n, k, s, p in speedups]
    lines += [f"| (ceiling: {args.workers} plain CPU-bound processes, before / after) | | | | "
              f"{ceiling[0]:.2f}x / {ceiling[1]:.2f}x |"]
    load = (f"load average (1/5/15 min) {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f} before, "
            f"{load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f} after, on {os.cpu_count()} cores")
    table = "\n".join(lines)
    print(table)
    print(f"\n{load}")
    if not args.no_append:
        stamp = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
        header = (f"\n### Rewards ({stamp}, {platform.machine()}, {os.cpu_count()} cores, "
                  f"Python {platform.python_version()}, `python benchmarks/rewards.py --workers {args.workers} "
                  f"--rows {args.rows}`)\n\n")
        note = (f"\n\n{load[0].upper()}{load[1:]}. Serial and pooled times are the fastest of 3 calls each "
                "after a warm-up call (the pool's start-up is not counted: in training it starts once). The ceiling "
                "row is what the machine offered at the time: two plain processes spinning in pure Python, against "
                "one doing both shares; a busy machine lowers it, and no pool can beat it.\n")
        path = ROOT / "docs" / "performance.md"
        if not path.exists():
            path.write_text("# Performance\n", encoding="utf-8")
        with path.open("a", encoding="utf-8") as fh:
            fh.write(header + table + note)
        print(f"appended to {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
