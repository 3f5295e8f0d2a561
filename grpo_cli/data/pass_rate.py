"""`data.pass_rate`: the training rows whose base-model pass rate (from `grpo calibrate`) is in a range.

`grpo calibrate` writes one JSON line per calibrated prompt (`calibration.jsonl`); each line's `key` is
`prompt_key` of the prompt as the training mapping builds it, so the filter matches rows by what the model sees,
not by their position (shuffling, `max_samples` and edits elsewhere in the file do not shift it). Light: no
`datasets` import, so `grpo validate` reads the same file to say how many rows remain.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli.errors import GrpoError

if TYPE_CHECKING:
    from grpo_cli.recipe.schema import Recipe
    from grpo_cli.recipe.schema.data import PassRateFilter

WHERE = "data.pass_rate"


def prompt_key(prompt: Any) -> str:
    """A short, stable digest of a mapped prompt (text, or chat messages)."""
    text = json.dumps(prompt, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


@dataclass
class Calibration:
    """Each calibrated prompt's pass rate by key, and how many completions were sampled per prompt."""

    path: Path
    rates: dict[str, float]
    k: int | None

    def kept(self, spec: PassRateFilter) -> int:
        """How many calibrated prompts the filter keeps."""
        return sum(1 for rate in self.rates.values() if spec.keeps(rate))

    def zero_std_share(self, group: int, spec: PassRateFilter | None = None) -> float | None:
        """The expected share of training groups of `group` completions that all pass or all fail, from each
        prompt's pass rate p: p^G + (1-p)^G averaged (a 0/1 reward; what `frac_reward_zero_std` would log), over
        the prompts `spec` keeps when given."""
        rates = [p for p in self.rates.values() if spec is None or spec.keeps(p)]
        if not rates:
            return None
        return sum(p ** group + (1 - p) ** group for p in rates) / len(rates)


def read_calibration(path: Path, where: str = WHERE) -> Calibration:
    """Read calibration.jsonl, naming the file and line of a broken record."""
    if not path.is_file():
        raise GrpoError(f"calibration file {path} not found", where=where,
                        fix="Write it with `grpo calibrate RECIPE --out DIR` (it is DIR/calibration.jsonl), or fix "
                            "the path (relative to the recipe).")
    rates: dict[str, float] = {}
    ks: set[int] = set()
    with path.open(encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                key, rate = str(record["key"]), float(record["pass_rate"])
            except (ValueError, KeyError, TypeError) as exc:
                raise GrpoError(f"{path} line {number} is not a calibration record ({type(exc).__name__}: {exc})",
                                where=where, fix="Point to the calibration.jsonl that `grpo calibrate` wrote, or "
                                                 "write it again.") from None
            rates[key] = rate
            if isinstance(record.get("k"), int):
                ks.add(record["k"])
    return Calibration(path, rates, ks.pop() if len(ks) == 1 else None)


def calibration_path(recipe: Recipe, spec: PassRateFilter) -> Path:
    return recipe.resolve_path(spec.file)


def keep_in_range(ds: Any, spec: PassRateFilter, recipe: Recipe, stats: dict[str, Any]) -> Any:
    """The mapped training rows whose calibrated pass rate `spec` keeps (and, with `keep_uncalibrated`, the rows
    not calibrated); stats get `train_dropped_by_pass_rate` and `train_uncalibrated`."""
    calibration = read_calibration(calibration_path(recipe, spec))
    rates = [calibration.rates.get(prompt_key(p)) for p in ds["prompt"]]
    unknown = sum(1 for r in rates if r is None)
    if unknown == len(ds) and len(ds):
        raise GrpoError(f"none of the {len(ds)} training rows is in {calibration.path} ({len(calibration.rates)} "
                        "calibrated prompts): it was written for other data or another prompt format",
                        where=WHERE, fix="Run `grpo calibrate` again on this recipe, or remove `data.pass_rate`.")
    keep = [i for i, r in enumerate(rates) if (spec.keep_uncalibrated if r is None else spec.keeps(r))]
    stats["train_uncalibrated"] = unknown
    stats["train_dropped_by_pass_rate"] = len(ds) - len(keep)
    if not keep:
        raise GrpoError(f"no training row has a pass rate in {spec.range} ({len(ds) - unknown} calibrated rows in "
                        f"{calibration.path})", where=f"{WHERE}.range",
                        fix="Widen the range, or calibrate with more samples per prompt (`grpo calibrate -k`).")
    return ds.select(keep) if len(keep) < len(ds) else ds
