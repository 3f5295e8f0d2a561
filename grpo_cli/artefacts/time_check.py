"""Every run checks its time plan: the steady step it measured, per part, against the plan it recorded.

`grpo train` times each part of every optimizer step (training/step_timing.py); `measure` turns the steps after
the first (its warm-up) into a `RateRow`, which the manifest keeps (`step_rates`) and the per-machine file
remembers for the next plan (grpo_cli/step_rates.py). `compare` puts it against the manifest's `time_plan`;
the end-of-run summary and `grpo report` print that, and a measured step more than `OFF` times the plan names
the part that was off and the rate it was planned from.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from grpo_cli.step_rates import PARTS, SPLIT_PARTS, RateRow, Seconds, StepShape, TimePlan

OFF = 2.0
"""A measured steady step this many times the plan's is reported with the part that was off."""


def measure(steps: Sequence[dict[str, float]], shape: StepShape, *, machine: str, command: str, date: str,
            run_dir: str | None, load: float | None) -> RateRow | None:
    """The steady steps' seconds per plan part (the first step, with its warm-up, left out); None with fewer
    than two steps (nothing steady to measure)."""
    steady = list(steps[1:])
    if not steady:
        return None
    per_step = []
    for step in steady:
        parts = dict.fromkeys(PARTS, 0.0)
        for name, seconds in step.items():
            if name in SPLIT_PARTS:
                parts[SPLIT_PARTS[name]] += seconds
        parts["step"] = sum(parts.values())
        per_step.append(parts)
    spans = {name: Seconds(mean=sum(p[name] for p in per_step) / len(per_step), low=min(p[name] for p in per_step),
                             high=max(p[name] for p in per_step)) for name in (*PARTS, "step")}
    return RateRow(machine=machine, date=date, command=command, shape=shape, seconds=spans, steps=len(steady),
                   load=load, run_dir=run_dir)


@dataclass(frozen=True)
class PartCheck:
    """One part (or the whole step): planned against measured seconds."""

    part: str
    planned: Seconds | None
    measured: Seconds
    source: str

    @property
    def ratio(self) -> float | None:
        """Measured over planned (None when the plan had no figure, or planned nothing)."""
        if self.planned is None or self.planned.mean <= 0:
            return None
        return self.measured.mean / self.planned.mean


@dataclass(frozen=True)
class TimeCheck:
    """The run's steady step and its parts against the plan, and what was off when it was far out."""

    parts: list[PartCheck]
    step: PartCheck

    @property
    def off(self) -> str | None:
        """When the measured step is more than OFF x the plan: the part that added most beyond its plan."""
        if self.step.ratio is None or self.step.ratio <= OFF:
            return None
        worst = max(self.parts, key=lambda p: p.measured.mean - (p.planned.mean if p.planned else 0.0))
        planned = f"{worst.planned.mean:.2f} s planned" if worst.planned else "no plan for it"
        return (f"the steady step took {self.step.ratio:.1f}x the plan ({self.step.measured.mean:.2f} s against "
                f"{self.step.planned.mean if self.step.planned else 0:.2f} s): {worst.part} was off, "
                f"{worst.measured.mean:.2f} s measured against {planned} (rate: {worst.source})")


def _usable(seconds: Seconds | None) -> Seconds | None:
    """A figure to compare: None for a missing one, or one a damaged manifest holds (NaN, inf, below 0)."""
    if seconds is None or not (math.isfinite(seconds.mean) and seconds.mean >= 0):
        return None
    return seconds


def compare(plan: TimePlan, measured: RateRow) -> TimeCheck | None:
    """The check of a run's plan against its measured steps (None when the plan had no step, or a damaged
    manifest leaves either step without a figure; `unchecked` says which)."""
    step, steady = _usable(plan.step), _usable(measured.seconds.get("step"))
    if step is None or steady is None:
        return None
    parts = []
    for part in PARTS:
        estimate = plan.part(part)
        if (seconds := _usable(measured.seconds.get(part))) is not None:
            parts.append(PartCheck(part, _usable(estimate.seconds) if estimate else None, seconds,
                                   estimate.source if estimate else "not planned"))
    return TimeCheck(parts, PartCheck("step", step, steady, ""))


def unchecked(plan: TimePlan, measured: RateRow) -> str:
    """Why `compare` found nothing to check, in words."""
    if plan.step is None:
        return f"the plan had no step: {plan.unknown or 'no reason recorded'}"
    which = "time_plan" if _usable(plan.step) is None else "step_rates"
    return (f"the manifest's `{which}` holds no usable seconds for the step (not a number, infinite or below 0: "
            f"a damaged manifest)")


def _cell(seconds: Seconds | None) -> str:
    return "unknown" if seconds is None else f"{seconds.mean:.3g}"


def check_lines(check: TimeCheck, steps: int) -> list[str]:
    """The end-of-run summary's lines: the step and each part that took time, planned against measured."""
    ratio = f" ({check.step.ratio:.2f}x)" if check.step.ratio is not None else ""
    parts = ", ".join(f"{p.part} {_cell(p.planned)}/{p.measured.mean:.3g}" for p in check.parts
                      if p.measured.mean > 0.005 or (p.planned and p.planned.mean > 0.005))
    lines = [f"time plan: steady step planned {_cell(check.step.planned)} s, measured {check.step.measured.mean:.3g} s"
             f"{ratio} over {steps} step(s); planned/measured s: {parts}"]
    if check.off:
        lines.append(f"time plan off: {check.off}")
    return lines


def time_check_markdown(plan: TimePlan | None, measured: RateRow | None) -> list[str]:
    """The report's "Time plan against measured" section (nothing without both)."""
    if plan is None or measured is None:
        return []
    check = compare(plan, measured)
    if check is None:
        return ["## Time plan against measured", "", f"Not checked: {unchecked(plan, measured)}.", ""]
    lines = ["## Time plan against measured", "",
             f"Steady optimizer step (mean over {measured.steps} step(s) after the first, on {measured.machine}).",
             "", "| part | planned s | measured s (min–max) | measured / planned | planned from |",
             "|---|---:|---:|---:|---|"]
    for p in [*check.parts, check.step]:
        ratio = f"{p.ratio:.2f}" if p.ratio is not None else ""
        lines.append(f"| {p.part} | {_cell(p.planned)} | {p.measured.mean:.3f} ({p.measured.low:.3f}–"
                     f"{p.measured.high:.3f}) | {ratio} | {p.source} |")
    return [*lines, "", *([f"**Off**: {check.off}.", ""] if check.off else [])]
