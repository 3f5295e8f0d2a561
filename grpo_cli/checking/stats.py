"""The verdicts of `check-rewards`: per-reward statistics, group signal, correlations and violations.

Kept apart from the calling code so the rules (what counts as a broken contract or a
hackable reward) read in one place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Violation:
    """A broken contract, named by reward and by the data rows (and probes) where it shows."""

    reward: str
    kind: str
    """length | not_list | type | nan | inf | exception | constant | hackable | degenerate | all_none"""
    message: str
    rows: list[int | None] = field(default_factory=list)
    probes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"reward": self.reward, "kind": self.kind, "message": self.message,
                "row": self.rows[0] if self.rows else None, "rows": self.rows, "probes": self.probes}


@dataclass
class RewardResult:
    """One reward's scores (None where not applicable or not scored) and how the calls went."""

    name: str
    values: list[float | None]
    kind: str = "builtin"
    weight: float = 1.0
    seconds: list[float] = field(default_factory=list)
    errors: int = 0
    problems: dict[str, tuple[str, list[int]]] = field(default_factory=dict)
    """kind -> (first detail, sample indices)"""
    zero_std: float | None = None
    needs_reference: bool = True
    """Whether it can only vary given a correct answer (accuracy, code, user code, models) — not `format`."""

    def add_error(self, kind: str, detail: str, where: list[int], count: int) -> None:
        """Record a broken contract on samples `where`; `count` completions went unscored."""
        self.errors += count
        self.problems.setdefault(kind, (detail, []))[1].extend(where)

    def finite(self) -> list[float]:
        return [v for v in self.values if v is not None]

    def to_dict(self) -> dict[str, Any]:
        calls = len(self.seconds)
        total = sum(self.seconds)
        return {"name": self.name, "kind": self.kind, "weight": self.weight, **describe(self.finite()),
                "none": sum(v is None for v in self.values) - self.errors, "errors": self.errors, "calls": calls,
                "seconds_per_call": total / calls if calls else None,
                "completions_per_second": len(self.values) / total if total > 0 else None,
                "frac_zero_std": self.zero_std}


def describe(values: list[float]) -> dict[str, float | None]:
    """mean / std (population, as TRL logs) / min / max; None when there are no values."""
    if not values:
        return {"mean": None, "std": None, "min": None, "max": None}
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return {"mean": mean, "std": std, "min": min(values), "max": max(values)}


def frac_zero_std(values: list[float | None], groups: list[int]) -> float | None:
    """Fraction of groups (with 2+ scored completions) whose values are all equal: no GRPO signal there."""
    by_group: dict[int, list[float]] = {}
    for v, g in zip(values, groups, strict=True):
        if v is not None:
            by_group.setdefault(g, []).append(v)
    judged = [vs for vs in by_group.values() if len(vs) > 1]
    if not judged:
        return None
    return sum(max(vs) - min(vs) <= 1e-8 for vs in judged) / len(judged)


def correlations(results: list[RewardResult]) -> dict[str, dict[str, float | None]]:
    """Pearson correlation of each pair of rewards over the completions both scored."""
    out: dict[str, dict[str, float | None]] = {r.name: {} for r in results}
    for a in results:
        for b in results:
            pairs = [(x, y) for x, y in zip(a.values, b.values, strict=True) if x is not None and y is not None]
            out[a.name][b.name] = _pearson(pairs)
    return out


def _pearson(pairs: list[tuple[float, float]]) -> float | None:
    if len(pairs) < 3:
        return None
    n = len(pairs)
    mx, my = sum(p[0] for p in pairs) / n, sum(p[1] for p in pairs) / n
    sx = math.sqrt(sum((p[0] - mx) ** 2 for p in pairs))
    sy = math.sqrt(sum((p[1] - my) ** 2 for p in pairs))
    if sx < 1e-12 or sy < 1e-12:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in pairs) / (sx * sy)


_WHAT = {
    "exception": "{detail}",
    "timeout": "did not return within its timeout of {detail} (`timeout:` on the reward entry); training would "
               "stop here",
    "length": "{detail}; TRL needs exactly one value per completion",
    "not_list": "{detail}; TRL needs a list with one value per completion",
    "type": "returned a non-numeric value ({detail}); return a float, or None when the reward does not apply",
    "nan": "returned NaN; TRL reads NaN as 'not applicable', so return None if that is what you mean",
    "inf": "returned an infinite value ({detail}); it breaks the group normalisation",
}


def _rows_text(rows: list[int | None], lines: dict[int, str] | None = None) -> str:
    """' on rows 3 (train.jsonl line 9), 40 (train.jsonl line 4)': the index after shuffling (what --completions
    files use) and the file line (what an editor opens)."""
    shown = sorted({r for r in rows if r is not None})
    if not shown:
        return ""
    more = f" (+{len(shown) - 6} more)" if len(shown) > 6 else ""
    named = [f"{r} ({_short(lines[r])})" if lines and r in lines else str(r) for r in shown[:6]]
    return f" on row{'s' if len(shown) > 1 else ''} {', '.join(named)}{more}"


def _short(where: str) -> str:
    """'/long/path/train.jsonl line 4' -> 'train.jsonl line 4' (other locations as they are)."""
    path, found, line = where.rpartition(" line ")
    return f"{Path(path).name} line {line}" if found else where


def assess(report: Any, groups: list[int]) -> None:
    """Turn per-reward results into violations and notes; add per-reward zero-std fractions."""
    samples = report.samples
    for res in report.rewards:
        res.zero_std = frac_zero_std(res.values, groups)
        for kind, (detail, idx) in res.problems.items():
            rows = [samples[i].row for i in idx]
            probes = sorted({samples[i].probe for i in idx})
            report.violations.append(Violation(res.name, kind, f"{res.name}{_rows_text(rows, report.row_lines)}: "
                                               + _WHAT[kind].format(detail=detail), rows, probes))
        values = res.finite()
        if report.source == "probes":
            # Without a reference (e.g. code rows with tests only) no probe can be right: judge the rest.
            judged = [v for v, s in zip(res.values, samples, strict=True) if v is not None and s.has_reference]
            if not judged and not res.needs_reference:
                judged = values
            if values and not judged:
                report.notes.append(f"{res.name}: no sampled row has a reference answer, so the probes cannot show "
                                    "whether it varies; try --completions or --generate")
            values = judged
        if len(values) > 1 and max(values) - min(values) <= 1e-12:
            report.violations.append(Violation(
                res.name, "constant", f"{res.name} never varies: all {len(values)} scored completions got "
                f"{values[0]:g}, so it adds nothing to the advantages (GRPO compares completions of a prompt)"))
        elif not res.finite() and not res.problems:
            report.violations.append(Violation(
                res.name, "all_none", f"{res.name} returned None for every completion ({len(samples)}): TRL reads "
                "None as 'does not apply', so it would add nothing to training. Check that it reads the columns it "
                "needs; if the sampled rows are simply not its kind (multi-task data), sample more with --samples"))
        if report.source == "probes":
            _hackable(report, res)
    if report.source == "probes":
        degenerate_totals(report)
    dead = [s.row for i, s in enumerate(samples) if all(r.values[i] is None for r in report.rewards)]
    if dead and not any(v.kind in ("exception", "timeout") for v in report.violations):
        report.notes.append(f"every reward returned None{_rows_text(dead, report.row_lines)}: TRL warns and gives "
                            "those completions no advantage")


def _hackable(report: Any, res: RewardResult) -> None:
    """A non-reference probe scoring above the reference of its row: the policy can learn that instead."""
    samples = report.samples
    refs = {s.group: res.values[i] for i, s in enumerate(samples) if s.probe == "reference" and s.has_reference}
    found: dict[str, list[tuple[int | None, float, float]]] = {}
    for i, s in enumerate(samples):
        ref, value = refs.get(s.group), res.values[i]
        if s.probe != "reference" and ref is not None and value is not None and value > ref + 1e-9:
            found.setdefault(s.probe, []).append((s.row, value, ref))
    for probe, hits in found.items():
        row, value, ref = hits[0]
        rows = [h[0] for h in hits]
        why = (f"a program that ignores its input scores {value:g}, above the reference solution's {ref:g}: the "
               "tests are not run as tests (is the tests column a structure passed on as text?)"
               if probe == "trivial" else f"the '{probe}' probe scores {value:g}, above the reference answer's "
               f"{ref:g}; the policy can learn to game it")
        where = _rows_text(rows, report.row_lines)
        report.violations.append(Violation(res.name, "hackable", f"{res.name}{where}: {why}", rows, [probe]))
    _trivial_without_reference(report, res)
    _degenerate_ties(report, res, refs)


def _trivial_without_reference(report: Any, res: RewardResult) -> None:
    """Code rows with no reference program: a program that ignores its input must still score 0."""
    rows = [s.row for i, s in enumerate(report.samples)
            if s.probe == "trivial" and not s.has_reference and (res.values[i] or 0.0) > 0]
    if rows:
        report.violations.append(Violation(
            res.name, "hackable", f"{res.name}{_rows_text(rows)}: a program that ignores its input "
            "(`print(42)`) passes tests; the tests are not run as tests (is the tests column a structure passed on "
            "as text?), or they check nothing", rows, ["trivial"]))


def degenerate_totals(report: Any) -> None:
    """A verdict when the `repeated` probe's weighted total is as high as the reference's: the policy can
    learn to repeat itself at no cost. A repetition cut by the length budget is not judged (it never reaches
    its answer); `overlong` earning as much is a note per reward."""
    samples, totals = report.samples, report.totals
    refs = {s.group: totals[i] for i, s in enumerate(samples) if s.probe == "reference" and s.has_reference}
    rows = [s.row for i, s in enumerate(samples)
            if s.probe == "repeated" and not s.cut and refs.get(s.group) is not None and totals[i] is not None
            and (refs[s.group] or 0) > 0 and totals[i] >= refs[s.group] - 1e-9]
    if rows:
        report.violations.append(Violation(
            "total", "degenerate", f"the weighted total{_rows_text(rows)}: the 'repeated' probe (the right answer "
            "after degenerate repetition) scores as much as the reference answer, so repeating costs the policy "
            "nothing; add a reward that penalises it (repetition_penalty) or one that prefers the clean answer",
            rows, ["repeated"]))


def _degenerate_ties(report: Any, res: RewardResult, refs: dict[int, float | None]) -> None:
    """A note (not a violation) when an overlong answer earns the reference's full score."""
    probe = "overlong"
    rows = [s.row for i, s in enumerate(report.samples)
            if s.probe == probe and refs.get(s.group) is not None and res.values[i] is not None
            and abs((res.values[i] or 0.0) - (refs[s.group] or 0.0)) <= 1e-9 and (refs[s.group] or 0) > 0]
    if rows:
        report.notes.append(f"{res.name}{_rows_text(rows, report.row_lines)}: the '{probe}' probe scores as much "
                            "as the reference answer; if that is not what you want, add a reward that penalises it "
                            "(soft_overlong_punishment)")
