"""Cheap looks at local data files (columns, row counts) for the preflight, without `datasets`."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from grpo_cli.errors import GrpoError


def peek_columns(path: Path) -> list[str]:
    """Column names of a local data file, read from its first record."""
    suffix = path.suffix
    try:
        if suffix == ".jsonl":
            with path.open(encoding="utf-8") as fh:
                for lineno, line in enumerate(fh, 1):
                    if line.strip():
                        try:
                            row = json.loads(line)
                        except json.JSONDecodeError as exc:
                            raise GrpoError(f"line {lineno} is not valid JSON: {exc.msg}", where=str(path),
                                            fix="Each line of a .jsonl file must be one JSON object.") from None
                        if not isinstance(row, dict):
                            raise GrpoError(f"line {lineno} is not a JSON object", where=str(path))
                        return list(row)
            return []
        if suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                data = next((v for v in data.values() if isinstance(v, list)), [data])
            return list(data[0]) if data and isinstance(data[0], dict) else []
        if suffix == ".csv":
            with path.open(encoding="utf-8", newline="") as fh:
                return next(csv.reader(fh), [])
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return list(pq.read_schema(path).names)
    except json.JSONDecodeError as exc:
        raise GrpoError(f"is not valid JSON: {exc.msg} at line {exc.lineno}", where=str(path)) from None
    except UnicodeDecodeError:
        raise GrpoError("is not UTF-8 text", where=str(path)) from None
    return []


def count_rows(path: Path) -> int | None:
    """Number of rows in a local data file (None when it cannot be counted cheaply)."""
    if path.suffix == ".jsonl":
        with path.open("rb") as fh:
            return sum(1 for line in fh if line.strip())
    if path.suffix == ".csv":
        with path.open(encoding="utf-8", newline="") as fh:
            return max(0, sum(1 for _ in csv.reader(fh)) - 1)
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict):
            data = next((v for v in data.values() if isinstance(v, list)), [])
        return len(data)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_metadata(path).num_rows
    return None
