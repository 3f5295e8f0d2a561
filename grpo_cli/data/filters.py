"""`data.filter`: keep the rows that meet every condition, and count what each condition dropped."""

from __future__ import annotations

from typing import Any

from grpo_cli.data.answers import extract_reference_answer
from grpo_cli.data.images import image_sizes
from grpo_cli.errors import GrpoError
from grpo_cli.recipe.schema.data import DataSection, RowFilter


def _keeps(test: RowFilter, value: Any) -> bool:
    if test.not_empty:
        return value is not None and value != "" and value != [] and value != {}
    if test.equals is not None:
        return value == test.equals
    if test.one_of is not None:
        return value in test.one_of
    if test.max_length is not None:
        return value is not None and len(value) <= test.max_length
    try:
        number = float(value)
    except (TypeError, ValueError):
        return False
    return (test.min is None or number >= test.min) and (test.max is None or number <= test.max)


def _mask(ds: Any, test: RowFilter, data: DataSection, where: str) -> list[bool]:
    if test.answer_parses:
        answer = data.answer
        assert answer is not None
        return [extract_reference_answer(v, answer.extract, answer.pattern) is not None for v in ds[answer.column]]
    if test.max_image_pixels is not None:
        return [all(w * h <= test.max_image_pixels for w, h in sizes) for sizes in image_sizes(ds)]
    if test.column not in ds.column_names:
        raise GrpoError(f"column {test.column!r} is not in the {where} data", where="data.filter",
                        fix=f"Available columns: {', '.join(ds.column_names)}.")
    return [_keeps(test, v) for v in ds[test.column]]


def filter_rows(ds: Any, data: DataSection, stats: dict[str, Any], prefix: str, *, images: bool = False) -> Any:
    """The rows the filters keep (the image filter alone with `images`, the others without); stats get the
    count dropped (`<prefix>_dropped_by_filter`) and, per condition, `<prefix>_filter_detail`."""
    tests = [t for t in data.filter if bool(t.max_image_pixels) == images]
    if not tests or len(ds) == 0:
        return ds
    keep = [True] * len(ds)
    detail = stats.setdefault(f"{prefix}_filter_detail", {})
    for test in tests:
        mask = _mask(ds, test, data, prefix)
        detail[test.describe()] = sum(1 for k, m in zip(keep, mask, strict=True) if k and not m)
        keep = [k and m for k, m in zip(keep, mask, strict=True)]
    stats[f"{prefix}_dropped_by_filter"] = stats.get(f"{prefix}_dropped_by_filter", 0) + keep.count(False)
    return ds.select([i for i, k in enumerate(keep) if k])
