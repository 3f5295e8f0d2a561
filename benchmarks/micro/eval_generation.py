"""Batched vs per-prompt sampling for `grpo eval` on the bundled tiny model (target: batched >= 10x faster).

Both paths run the same `grpo_cli.evaluation.backends.generate` (left padding, k samples per prompt); the only
difference is how many prompts go into one `generate` call. Prints a table of samples/s (`--record`:
also to docs/performance/history/).

    python benchmarks/micro/eval_generation.py [--prompts 100] [-k 8] [--batch-size 64] [--repeats 3] [--record]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root: `benchmarks.record` and grpo_cli, however the script is run

from benchmarks.record import add_record, load, record, stamp  # noqa: E402
from grpo_cli.paths import ASSETS_DIR  # noqa: E402


def _prompts(path: Path, n: int) -> list[str]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [f"{r['question']}=" for r in rows[:n]]  # the demo recipe's template


def _time(fn: Callable[[], None], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(ASSETS_DIR / "tiny-arith"))
    parser.add_argument("--data", default=str(ASSETS_DIR / "tiny-arith-data" / "test.jsonl"))
    parser.add_argument("--prompts", type=int, default=100)
    parser.add_argument("-k", type=int, default=8, help="Samples per prompt.")
    parser.add_argument("--batch-size", type=int, default=64, help="Prompts per generate call when batched.")
    parser.add_argument("--max-new-tokens", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    add_record(parser)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_cli.evaluation.backends import generate

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    prompts = _prompts(Path(args.data), args.prompts)
    samples = len(prompts) * args.k

    def run(batch_size: int) -> None:
        generate(model, tokenizer, prompts, k=args.k, temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens,
                 batch_size=batch_size, seed=1234)

    run(args.batch_size)  # warm-up
    rows = []
    for name, bs in (("per-prompt (1 prompt per generate call)", 1),
                     (f"batched ({args.batch_size} prompts per call, left padding)", args.batch_size)):
        t = _time(lambda bs=bs: run(bs), args.repeats)
        rows.append((name, statistics.median(t), samples / statistics.median(t)))
    speedup = rows[0][1] / rows[1][1]
    lines = ["| generation | median time (s) | samples/s |", "|---|---|---|"]
    lines += [f"| {n} | {t:.3f} | {s:.0f} |" for n, t, s in rows]
    table = "\n".join(lines)
    verdict = f"speedup: {speedup:.1f}x (target >= 10x)"
    print(table)
    print(verdict)
    if args.record:
        header = (f"### `grpo eval` sampling, batched vs per-prompt ({stamp()}, {platform.machine()}, "
                  f"{os.cpu_count()} cores, {torch.get_num_threads()} torch threads, torch {torch.__version__})\n\n"
                  f"Bundled tiny-arith model, {len(prompts)} test prompts x k={args.k} samples = {samples} "
                  f"completions of at most {args.max_new_tokens} tokens, float32 on CPU, median of {args.repeats} "
                  f"runs, load average {load()} at the end "
                  "(`python benchmarks/micro/eval_generation.py`).\n\n")
        record(header + table + f"\n\n{verdict}\n")


if __name__ == "__main__":
    main()
