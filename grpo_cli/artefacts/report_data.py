"""What a run left behind, read back for `grpo report` and report.png: metrics, evals, health events, manifest.

Every metric may be missing or null in any record (TRL logs None when all values were NaN; older TRL or
other settings omit KL or entropy): readers get NaN gaps, never errors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli import runs
from grpo_cli.errors import GrpoError
from grpo_cli.runs.lock import mark_if_killed
from grpo_cli.runs.manifest import Manifest


@dataclass
class RunData:
    """What a run left behind."""

    output_dir: Path
    train: list[dict[str, Any]]
    evals: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    manifest: Manifest = field(default_factory=Manifest)
    """Empty (every field None) when the run has no readable manifest.json."""
    tasks: list[dict[str, Any]] = field(default_factory=list)
    """Task-metric evaluations (`task/...` keys, eval.every_steps)."""


def num(value: Any) -> float | None:
    """A finite float, or None for missing/null/NaN/inf/non-numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def number_text(value: Any, *, decimals: int = 4, missing: str = "-", small: bool = False) -> str:
    """A metric in a table (report, model card, the CLI's tables), by one rule: integers as they are, floats with
    `decimals` places (3 significant digits below 0.01 when `small`: learning rates), `missing` for None, NaN,
    infinities, booleans and anything else that is not a number."""
    v = num(value)
    if v is None:
        return missing
    if isinstance(value, int):
        return str(value)
    return f"{v:.3g}" if small and v != 0 and abs(v) < 0.01 else f"{v:.{decimals}f}"


def load_run(output_dir: str | Path) -> RunData:
    """Read a run directory; a clear error when there is nothing to report."""
    out = Path(output_dir)
    if not out.is_dir():
        raise GrpoError(f"{out} is not a directory", where="OUTPUT_DIR",
                        fix="Give the output directory of a `grpo train` run (output.dir or --output-dir).")
    metrics = runs.run_file(out, runs.METRICS, "OUTPUT_DIR", "from the first logging step (training.logging_steps)")
    garbled: list[int] = []
    lines: list[int] = []
    records = runs.read_jsonl(metrics, garbled, lines)
    _check_steps(metrics, records, lines)
    train = [r for r in records if not any(k.startswith("eval_") for k in r) and ("loss" in r or "reward" in r)]
    evals = [r for r in records if any(k.startswith("eval_") for k in r)]
    if not records and garbled:
        raise runs.damaged_jsonl(metrics, garbled, "OUTPUT_DIR")
    if not train:
        raise GrpoError(f"{metrics} holds no training log yet", where="OUTPUT_DIR",
                        fix="Wait for the first logging step (training.logging_steps), or check that the run "
                            "got past model loading (manifest.json).")

    # A run that died without a word is `killed`, not running; one without a (readable) manifest still has curves.
    manifest = mark_if_killed(out) or runs.read_manifest(out) or Manifest()
    tasks = [r for r in records if any(k.startswith("task/") for k in r)]
    return RunData(out, train, evals, runs.read_jsonl(out / runs.HEALTH), manifest, tasks)


def _check_steps(metrics: Path, records: list[dict[str, Any]], lines: list[int]) -> None:
    """grpo logs `step` as a whole number; any other value (a string, a list) is a damaged or hand-edited file,
    and plotting it would fail on the first such record."""
    for record, line in zip(records, lines, strict=True):
        step = record.get("step", 0)
        if isinstance(step, bool) or not (isinstance(step, int) or (isinstance(step, float) and step.is_integer())):
            raise GrpoError(f"{metrics} is damaged: line {line} has step {step!r}, not a whole number",
                            where="OUTPUT_DIR", fix="grpo train writes whole step numbers; fix or delete that line "
                            "(the others are read as they are), or restore the file from a copy.")


def reward_keys(records: list[dict[str, Any]], prefix: str = "") -> list[str]:
    """`rewards/<name>/mean` keys in the order they first appear."""
    keys: list[str] = []
    for r in records:
        for k in r:
            if k.startswith(f"{prefix}rewards/") and k.endswith("/mean") and k not in keys:
                keys.append(k)
    return keys


def series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """Steps and values of one metric over the records that log it; NaN (a gap in the plot) where it was
    logged without a usable value (null, NaN, inf)."""
    kept = [(i, r) for i, r in enumerate(records) if key in r]
    steps = [int(r.get("step", i)) for i, r in kept]
    values = [v if (v := num(r.get(key))) is not None else math.nan for _, r in kept]
    return steps, values


def task_keys(run: RunData) -> list[str]:
    return sorted({k for r in run.tasks for k in r if k.startswith("task/")})
