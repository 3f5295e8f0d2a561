"""Dynamic sampling against plain GRPO on one recipe: zero-std share of what is trained, completions generated,
training wall time and held-out accuracy (`sampling.dynamic` with `sampling.skip_zero_advantage`).

    python benchmarks/experiments/dynamic_vs_plain.py                       # the demo: 200 and 100 steps each way
    python benchmarks/experiments/dynamic_vs_plain.py --recipe recipes/smollm2-word-arith.yaml --steps 10
    python benchmarks/experiments/dynamic_vs_plain.py --steps 8 --no-plain --oversample 2 3   # refill vs oversample

Each run is `grpo train RECIPE training.max_steps=N` with the recipe's own evaluation before and after; the
dynamic runs add `sampling.dynamic={max_rounds: R}` and `sampling.skip_zero_advantage=true`; `--oversample K` adds
rows with `{strategy: oversample, oversample: K}` instead (one generation call a step). Prints a table with the
time and load (`--record`: also to docs/performance/history/).
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

DYNAMIC = ["sampling.skip_zero_advantage=true"]


def _run(recipe: str, steps: int, extra: list[str], out: Path) -> dict:
    """Train once; what the table needs from its metrics and manifest."""
    cmd = [sys.executable, "-m", "grpo_cli", "train", recipe, "-o", str(out), "--force",
           f"training.max_steps={steps}", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    logs = [r for r in records if "reward" in r]
    from grpo_cli import runs

    manifest = runs.read_manifest(out)
    held_out = {key: (before, after) for key, before, after in manifest.held_out()} if manifest else {}

    def mean(key: str) -> float | None:
        values = [r[key] for r in logs if isinstance(r.get(key), int | float)]
        return sum(values) / len(values) if values else None

    from grpo_cli import load_recipe

    r = load_recipe(ROOT / recipe, [f"training.max_steps={steps}"]).training
    generated = mean("dynamic_sampling/generated_groups")
    completions = (generated * r.num_generations if generated is not None else r.generation_batch(1)) * steps
    trained_zero = mean("dynamic_sampling/zero_std_trained")
    return {"train_s": max(float(x.get("time", 0.0)) for x in records), "wall_s": wall,
            "calls": mean("dynamic_sampling/rounds") or 1.0,
            "generated": completions, "zero_generated": mean("frac_reward_zero_std"),
            "zero_trained": trained_zero if trained_zero is not None else mean("frac_reward_zero_std"),
            "before": held_out["pass@1"][0] if "pass@1" in held_out else None,
            "after": held_out["pass@1"][1] if "pass@1" in held_out else None}


def _cell(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/demo.yaml")
    parser.add_argument("--steps", type=int, nargs="+", default=[200, 100])
    parser.add_argument("--max-rounds", type=int, default=3)
    parser.add_argument("--oversample", type=float, nargs="*", default=[],
                        help="Also run `strategy: oversample` with each factor K (one generation call a step).")
    parser.add_argument("--no-plain", action="store_true", help="Leave out the plain GRPO row.")
    parser.add_argument("--set", nargs="*", default=[], help="More overrides for every run (KEY=VALUE).")
    parser.add_argument("--repeats", type=int, default=1, help="Runs per row (same seed); times are medians.")
    add_record(parser)
    args = parser.parse_args()
    dynamic = [f"sampling.dynamic={{max_rounds: {args.max_rounds}}}", *DYNAMIC]
    rows = [("plain GRPO", [])] if not args.no_plain else []
    rows += [(f"dynamic (max_rounds {args.max_rounds}) + skip", dynamic)]
    rows += [(f"oversample x{k:g} + skip", [f"sampling.dynamic={{strategy: oversample, oversample: {k}}}", *DYNAMIC])
             for k in args.oversample]
    lines = ["| run | steps | train s | wall s (with eval) | generation calls a step | completions generated "
             "| zero-std groups generated | zero-std groups trained | held-out pass@1 before -> after |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    with tempfile.TemporaryDirectory(prefix="grpo-dyn-") as tmp:
        for steps in args.steps:
            for name, extra in rows:
                runs = [_run(args.recipe, steps, [*args.set, *extra], Path(tmp) / f"{len(lines)}-{i}")
                        for i in range(args.repeats)]
                m = {**runs[0], "train_s": statistics.median(r["train_s"] for r in runs),
                     "wall_s": statistics.median(r["wall_s"] for r in runs)}
                lines.append(f"| {name} | {steps} | {m['train_s']:.1f} | {m['wall_s']:.1f} | {m['calls']:.2f} | "
                             f"{m['generated']:,.0f} | "
                             f"{_cell(m['zero_generated'], '.1%')} | {_cell(m['zero_trained'], '.1%')} | "
                             f"{_cell(m['before'], '.3f')} -> {_cell(m['after'], '.3f')} |")
                print(lines[-1], flush=True)
    table = "\n".join(lines)
    print(table)
    if args.record:
        header = (f"### Dynamic sampling vs plain GRPO: {args.recipe}{' ' + ' '.join(args.set) if args.set else ''} "
                  f"({stamp()}, {args.repeats} run(s) a row, {platform.machine()}, {os.cpu_count()} cores, "
                  f"load {load(all_three=True)}; "
                  f"`python benchmarks/experiments/dynamic_vs_plain.py`)\n\n")
        record(header + table + "\n")


if __name__ == "__main__":
    main()
