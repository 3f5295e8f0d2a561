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
SHARE_NOTED = 0.05
"""A trained share this far from the plan's is named next to the check."""


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
    trained: tuple[float, float] | None = None
    """The share of completions that trained, planned and measured, when the zero-advantage skip made them
    differ: the training part grows with it, and a step's few groups skip by chance."""
    growing: float | None = None
    """The planned training seconds that grow with the completions that train (the rest, such as the optimizer
    step, runs whatever skips)."""

    @property
    def share(self) -> str:
        """What the skip's share did to the training part, in words (empty when it was as planned)."""
        if self.trained is None:
            return ""
        planned, measured = self.trained
        return (f"the zero-advantage skip let {measured:.2f} of the completions train against {planned:.2f} "
                "planned (groups skip by chance, so training grows with that share, not with a rate)")

    @property
    def at_share(self) -> float | None:
        """Measured over planned with the plan's training part at the share that trained (None without it)."""
        if self.trained is None or not self.growing or self.step.planned is None:
            return None
        planned, measured = self.trained
        step = self.step.planned.mean + self.growing * (measured / planned - 1)
        return self.step.measured.mean / step if step > 0 else None

    @property
    def share_checked(self) -> str:
        """The share in words, with the step against the plan at the share that trained."""
        at = self.at_share
        return self.share + (f"; at that share the step took {at:.2f}x the plan" if at else "")

    @property
    def share_apart(self) -> bool:
        """The share is worth its own line: it differed, and the "off" reason (naming training) does not say so."""
        worst = self.worst
        return bool(self.share) and (worst is None or worst.part != "training")

    @property
    def worst(self) -> PartCheck | None:
        """When the measured step is more than OFF x the plan: the part that added most beyond its plan."""
        if self.step.ratio is None or self.step.ratio <= OFF:
            return None
        return max(self.parts, key=lambda p: p.measured.mean - (p.planned.mean if p.planned else 0.0))

    @property
    def off(self) -> str | None:
        """The worst part, in words, with the rate it was planned from (None when the step was not OFF x out)."""
        worst = self.worst
        if worst is None:
            return None
        planned = f"{worst.planned.mean:.2f} s planned" if worst.planned else "no plan for it"
        why = f"; {self.share_checked}" if worst.part == "training" and self.share else ""
        return (f"the steady step took {self.step.ratio:.1f}x the plan ({self.step.measured.mean:.2f} s against "
                f"{self.step.planned.mean if self.step.planned else 0:.2f} s): {worst.part} was off, "
                f"{worst.measured.mean:.2f} s measured against {planned} (rate: {worst.source}){why}")


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
    training = plan.part("training")
    growing = None
    if training is not None and (seconds := _usable(training.seconds)) is not None:
        growing = max(0.0, seconds.mean - (training.fixed or 0.0))
    return TimeCheck(parts, PartCheck("step", step, steady, ""), _shares(plan, measured), growing)


def _shares(plan: TimePlan, measured: RateRow) -> tuple[float, float] | None:
    """The trained share planned and measured, when they differ by SHARE_NOTED or more."""
    planned, got = plan.shape.trained if plan.shape else None, measured.shape.trained
    if planned is None or got is None or planned <= 0 or abs(got - planned) < SHARE_NOTED:
        return None
    return planned, got


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
    if check.share_apart:
        lines.append(f"time plan: {check.share_checked}")
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
    lines += ["", *([f"**Off**: {check.off}.", ""] if check.off else [])]
    if check.share_apart:
        lines += [f"Training: {check.share_checked}.", ""]
    return lines
