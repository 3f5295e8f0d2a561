"""`data.columns`: rename, dig into a dict column, or add a constant, before the prompt and rewards read rows."""

from __future__ import annotations

from typing import Any

from grpo_cli.errors import GrpoError
from grpo_cli.recipe.schema.data import ColumnValue, DataSection


def dig(value: Any, path: list[str]) -> Any:
    """The field at `path` inside nested dicts (and lists, by index); None when a step is missing."""
    for step in path:
        if isinstance(value, dict):
            value = value.get(step)
        elif isinstance(value, list) and step.lstrip("-").isdigit() and -len(value) <= int(step) < len(value):
            value = value[int(step)]
        else:
            return None
    return value


def derived_roots(data: DataSection) -> dict[str, str]:
    """new column -> the source column it reads (constants read none)."""
    return {name: spec.split(".", 1)[0] for name, spec in data.columns.items() if isinstance(spec, str)}


def derive_columns(ds: Any, data: DataSection, where: str) -> Any:
    """The dataset with `data.columns` added (each derived from the columns as loaded)."""
    if not data.columns:
        return ds
    missing = {name: root for name, root in derived_roots(data).items() if root not in ds.column_names}
    if missing:
        name, root = next(iter(missing.items()))
        raise GrpoError(f"column {root!r} (for data.columns.{name}) is not in the {where} data",
                        where=f"data.columns.{name}", fix=f"Available columns: {', '.join(ds.column_names)}.")
    specs = dict(data.columns)

    def derive(row: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for name, spec in specs.items():
            if isinstance(spec, ColumnValue):
                out[name] = spec.value
            else:
                root, *path = spec.split(".")
                out[name] = dig(row[root], path)
        return out

    return ds.map(derive, desc="deriving columns")
