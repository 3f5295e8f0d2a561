"""This machine's own ceilings (a matrix product in fp32 and bf16, a memory copy) and a run's generation and
training held against them: how far a step is from what the cores can compute and stream.

    python benchmarks/micro/machine_limits.py --run outputs/smollm2-word-arith     # a finished `grpo train` run
    python benchmarks/micro/machine_limits.py --threads 1 2                         # the ceilings only

Generation is decode-bound: each new token multiplies every weight once (2 x parameters FLOP per completion
token) and streams every weight from memory once per decode step for the whole batch, so its rate is held
against both the matmul ceiling and the copy bandwidth. Training is held against the matmul ceiling: forward
2 x parameters FLOP per token, backward 4 x (full fine-tune) or 2 x (LoRA: no weight gradients, only the
activation gradients) — the usual 6PT / 4PT counts, prompt and completion tokens alike. The run's own
`time/generation`, `time/forward` and `time/backward` (grpo's step timing) are the measured side; its threads are
the run's, so compare with the ceiling at that thread count. Prints a table (`--record`: also to
docs/performance/history/).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root: `benchmarks.record` and grpo_cli, however the script is run

from benchmarks.record import add_record, load, record, stamp  # noqa: E402


def ceilings(threads: int, n: int = 1024, mib: int = 256) -> dict[str, float]:
    """GFLOP/s of an n^3 product in fp32 and bf16, and GB/s of copying `mib` MiB, best of a few tries."""
    import torch

    torch.set_num_threads(threads)

    def best(fn: object, repeats: int = 5) -> float:
        fn()  # type: ignore[operator]
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()  # type: ignore[operator]
            times.append(time.perf_counter() - start)
        return min(times)

    out: dict[str, float] = {}
    for dtype in (torch.float32, torch.bfloat16):
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        out[str(dtype).removeprefix("torch.")] = 2 * n**3 / best(lambda a=a, b=b: a @ b) / 1e9
    src = torch.empty(mib * 2**20 // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    out["copy_gbs"] = 2 * src.numel() * 4 / best(lambda: dst.copy_(src)) / 1e9  # read + write
    return out


def run_rates(run: Path) -> dict[str, float]:
    """Achieved GFLOP/s of generation and training, and weight GB/s of generation, from a run's own figures."""
    from grpo_cli import load_recipe
    from grpo_cli.planning.memory import memory_plan

    recipe = load_recipe(run / "recipe.yaml")
    plan, why = memory_plan(recipe, gpu_memory_gb=None, world_size=1)
    if plan is None:
        raise SystemExit(f"no parameter count for {run}: {why}")
    params = plan.params
    logs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    logs = [r for r in logs if "time/generation" in r]

    def mean(key: str) -> float:
        return sum(float(r[key]) for r in logs) / len(logs)

    t = recipe.training
    completions = t.generation_batch(1)
    completion_tokens = mean("completions/mean_length") * completions
    tokens = float(logs[-1]["num_tokens"]) / int(logs[-1]["step"])  # TRL's count is cumulative: prompt + completion
    backward = 2 if recipe.model.lora is not None else 4
    gen = mean("time/generation")
    return {"params_m": params / 1e6, "gen_s": gen, "gen_gflops": 2 * params * completion_tokens / gen / 1e9,
            "gen_gbs": 4 * params * t.max_completion_length / mean("time/generation") / 1e9,
            "train_s": mean("time/forward") + mean("time/backward"),
            "train_gflops": (2 + backward) * params * tokens / (mean("time/forward") + mean("time/backward")) / 1e9}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="A `grpo train` output dir (metrics.jsonl, recipe.yaml).")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    add_record(parser)
    args = parser.parse_args()
    lines = ["| torch threads | fp32 matmul GFLOP/s | bf16 matmul GFLOP/s | copy GB/s |", "|---:|---:|---:|---:|"]
    limits = {}
    for threads in args.threads:
        limits[threads] = ceilings(threads)
        c = limits[threads]
        lines.append(f"| {threads} | {c['float32']:.0f} | {c['bfloat16']:.0f} | {c['copy_gbs']:.1f} |")
    if args.run:
        r = run_rates(args.run)
        top = limits[max(limits)]
        lines += ["", f"Run {args.run} ({r['params_m']:.1f}M parameters, fp32), per step, against the "
                  f"{max(limits)}-thread ceilings:", "",
                  "| part | seconds | achieved | fraction of ceiling |", "|---|---:|---:|---:|",
                  f"| generation (compute) | {r['gen_s']:.2f} | {r['gen_gflops']:.1f} GFLOP/s | "
                  f"{r['gen_gflops'] / top['float32']:.1%} of fp32 matmul |",
                  f"| generation (weights streamed) | {r['gen_s']:.2f} | {r['gen_gbs']:.2f} GB/s | "
                  f"{r['gen_gbs'] / top['copy_gbs']:.1%} of copy |",
                  f"| training forward + backward | {r['train_s']:.2f} | {r['train_gflops']:.1f} GFLOP/s | "
                  f"{r['train_gflops'] / top['float32']:.1%} of fp32 matmul |"]
    table = "\n".join(lines)
    print(table)
    if args.record:
        record(f"### Machine ceilings{' and ' + str(args.run) if args.run else ''} ({stamp()}, {platform.machine()}, "
               f"{os.cpu_count()} cores, load {load(all_three=True)}; `python benchmarks/micro/machine_limits.py"
               f"{' --run ' + str(args.run) if args.run else ''}`)\n\n{table}\n")


if __name__ == "__main__":
    main()
