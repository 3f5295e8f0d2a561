"""What a finished calibration says and leaves: the pass-rate histogram, the share of prompts that give no signal,
the filtered rows (in the data's own columns) and the `data.pass_rate` override for the recipe."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli.calibration.settings import CALIBRATION, FILTERED, OVERRIDE, SETTINGS, CalibrationSettings
from grpo_cli.data.mapping import source_rows
from grpo_cli.data.pass_rate import Calibration
from grpo_cli.paths import write_atomic
from grpo_cli.recipe.schema.data import PassRateFilter

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe


@dataclass
class Calibrated:
    """A finished calibration: counts for the console and where its files are."""

    settings: CalibrationSettings
    prompts: int
    histogram: list[int]
    """Prompts by number of passing completions, 0..k."""
    range: str
    kept: int
    group: int
    """The recipe's `training.num_generations`."""
    zero_std_share: float | None
    """The expected share of training groups whose completions all pass or all fail."""
    out: Path
    files: list[Path] = field(default_factory=list)
    override: list[str] = field(default_factory=list)
    """The command-line overrides that apply the filter (one word each, to be shell-quoted when printed)."""

    @property
    def never(self) -> int:
        return self.histogram[0] if self.histogram else 0

    @property
    def always(self) -> int:
        return self.histogram[-1] if len(self.histogram) > 1 else 0

    @property
    def no_signal(self) -> float:
        """The share of prompts with pass rate 0 or 1: all k completions got the same verdict."""
        return (self.never + self.always) / self.prompts if self.prompts else 0.0


def finish(recipe: Recipe, unfiltered: Recipe, out: Path, settings: CalibrationSettings, interval: str,
           done: dict[str, dict[str, Any]], sources: dict[str, int]) -> Calibrated:
    """Histogram, filtered rows, override and settings file of a calibration whose every prompt is in."""
    k = settings.k
    histogram = [0] * (k + 1)
    for record in done.values():
        histogram[int(record["passes"])] += 1
    spec = PassRateFilter(file=str((out / CALIBRATION).resolve()), range=interval)
    calibration = Calibration(out / CALIBRATION, {key: float(r["pass_rate"]) for key, r in done.items()}, k)
    kept = sorted(sources[key] for key, r in done.items() if spec.keeps(float(r["pass_rate"])))
    group = recipe.training.num_generations
    result = Calibrated(settings, len(done), histogram, interval, len(kept), group,
                        calibration.zero_std_share(group), out)
    result.files = [out / CALIBRATION, _write_filtered(unfiltered, kept, out / FILTERED),
                    _write_override(spec, out / OVERRIDE, result)]
    result.override = [f"data.pass_rate.file={spec.file}"] + (
        [] if interval == "(0, 1)" else [f'data.pass_rate.range="{interval}"'])
    settings.save(out / SETTINGS, {"complete": True, "prompts": len(done), "histogram": histogram, "range": interval,
                                   "kept": len(kept), "no_signal": result.no_signal,
                                   "zero_std_share": {"num_generations": group, "expected": result.zero_std_share}})
    result.files.append(out / SETTINGS)
    return result


def _write_filtered(recipe: Recipe, positions: list[int], path: Path) -> Path:
    """The kept training rows as the data file has them (so another tool, or another recipe, can read them)."""
    rows = source_rows(recipe).select(positions)
    write_atomic(path, "".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows))
    return path


def _write_override(spec: PassRateFilter, path: Path, result: Calibrated) -> Path:
    import yaml

    counts = f"{result.kept} of {result.prompts} calibrated prompts have a pass rate in {result.range}"
    block = {"data": {"pass_rate": spec.model_dump(exclude={"keep_uncalibrated"})}}
    write_atomic(path, f"# grpo calibrate: {counts}.\n# Add this block to the recipe (under its `data:`), or pass "
                    f"data.pass_rate.file=... on the command line.\n" + yaml.safe_dump(block, sort_keys=False))
    return path
