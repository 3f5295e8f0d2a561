"""Cheap, complete looks at local data files for the preflight, without `datasets`.

`grpo validate` reads every record of a local file up to FULL_SCAN_BYTES (a streaming parse of a few MB takes
well under a second), so a truncated line 37 or a Latin-1 byte on line 15001 is reported with its file and line
before a model loads, not as a pyarrow error at step 0. Bigger files get their first record read and their lines
counted. `locate_record` turns a row index of the loaded dataset back into a file and line for error messages.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path

from grpo_cli.errors import GrpoError
from grpo_cli.paths import decode_error

FULL_SCAN_BYTES = 64 * 1024 * 1024


@dataclass
class FileScan:
    """What the preflight learned about one local data file."""

    columns: list[str]
    rows: int
    complete: bool
    """Whether every record was parsed (False for files over FULL_SCAN_BYTES: only the first one was)."""


def _bad(path: Path, what: str, fix: str) -> GrpoError:
    return GrpoError(f"{path}: {what}", fix=fix)


def _open_checked(path: Path) -> None:
    if path.is_dir():
        raise _bad(path, "is a directory, not a data file", "Give the path of a file inside it.")
    if path.exists() and not path.is_file():  # a device or a named pipe: reading it would never end
        raise _bad(path, "is not a regular file (a device, a named pipe or a socket)",
                   "Give a data file saved on disk.")


def _scan_jsonl(path: Path, full: bool) -> FileScan:
    columns: list[str] | None = None
    rows = 0
    fix = "Each line of a .jsonl file must be one complete JSON object (a truncated copy loses the last lines)."
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            rows += 1
            if not full and columns is not None:
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _bad(path, decode_error(raw, exc, f"line {lineno}").replace("line 1, ", ""),
                           "Save the file as UTF-8.") from None
            try:
                record = json.loads(line.rstrip("\r\n"))
            except json.JSONDecodeError as exc:
                raise _bad(path, f"line {lineno} is not valid JSON: {exc.msg} (column {exc.colno})", fix) from None
            if not isinstance(record, dict):
                raise _bad(path, f"line {lineno} is a JSON {type(record).__name__}, not an object", fix)
            if columns is None:
                columns = list(record)
    return FileScan(columns or [], rows, full)


def _decoded(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _bad(path, decode_error(data, exc, "the file"), "Save the file as UTF-8.") from None


def _scan_csv(path: Path, full: bool) -> FileScan:
    if not full:
        with path.open(encoding="utf-8", errors="replace", newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader, [])
            return FileScan(header, sum(1 for _ in reader), False)
    reader = csv.reader(io.StringIO(_decoded(path), newline=""))
    try:
        header = next(reader, [])
        rows = 0
        for record in reader:
            if not record:
                continue  # a blank line; the CSV loader skips it too
            rows += 1
            if len(record) != len(header):
                raise _bad(path, f"line {reader.line_num} has {len(record)} fields, the header has {len(header)} "
                           f"({', '.join(header)})",
                           "Quote values that contain commas (\"a, b\"), or fix the row's number of fields.")
    except csv.Error as exc:
        raise _bad(path, f"line {reader.line_num} is not valid CSV: {exc}", "Check the quoting on that line.") from None
    return FileScan(header, rows, True)


def _scan_json(path: Path) -> FileScan:
    try:
        data = json.loads(_decoded(path))
    except json.JSONDecodeError as exc:
        raise _bad(path, f"is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}",
                   "A .json data file holds one list of objects (or use .jsonl: one object per line).") from None
    if isinstance(data, dict):
        data = next((v for v in data.values() if isinstance(v, list)), [data])
    if not isinstance(data, list):
        raise _bad(path, f"holds a JSON {type(data).__name__}, not a list of records",
                   "A .json data file holds one list of objects.")
    for i, record in enumerate(data):
        if not isinstance(record, dict):
            raise _bad(path, f"record {i + 1} is a JSON {type(record).__name__}, not an object",
                       "A .json data file holds one list of objects.")
    return FileScan(list(data[0]) if data else [], len(data), True)


def _scan_parquet(path: Path, full: bool) -> FileScan:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        reader = pq.ParquetFile(path)
        rows = 0
        if full:
            for batch in reader.iter_batches():
                rows += batch.num_rows
        return FileScan(list(reader.schema_arrow.names), rows if full else reader.metadata.num_rows, full)
    except (pa.ArrowException, OSError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise _bad(path, f"is not a readable parquet file: {first}",
                   "Write it again (e.g. `datasets.Dataset.to_parquet` or `pandas.DataFrame.to_parquet`).") from None


def scan_file(path: Path) -> FileScan:
    """Columns and rows of a local data file, every record checked when it is small enough; GrpoError if broken."""
    _open_checked(path)
    full = path.stat().st_size <= FULL_SCAN_BYTES
    suffix = path.suffix
    if suffix == ".jsonl":
        return _scan_jsonl(path, full)
    if suffix == ".csv":
        return _scan_csv(path, full)
    if suffix == ".json":
        return _scan_json(path)
    if suffix == ".parquet":
        return _scan_parquet(path, full)
    return FileScan([], 0, False)


def peek_columns(path: Path) -> list[str]:
    """Column names of a local data file (every record is checked; see scan_file)."""
    return scan_file(path).columns


def count_rows(path: Path) -> int | None:
    """Number of rows in a local data file (None when it cannot be counted)."""
    try:
        return scan_file(path).rows
    except GrpoError:
        return None


def locate_record(paths: list[Path], index: int) -> str:
    """'FILE line N' (or 'FILE record N') of the index-th record of these files read in order, as the loaders do."""
    for path in paths:
        if path.suffix == ".jsonl":
            with path.open("rb") as fh:
                for lineno, raw in enumerate(fh, 1):
                    if raw.strip():
                        if index == 0:
                            return f"{path} line {lineno}"
                        index -= 1
            continue
        if path.suffix == ".csv":
            with path.open(encoding="utf-8", errors="replace", newline="") as fh:
                reader = csv.reader(fh)
                next(reader, None)
                for record in reader:
                    if record:
                        if index == 0:
                            return f"{path} line {reader.line_num}"
                        index -= 1
            continue
        try:
            rows = scan_file(path).rows
        except GrpoError:
            return f"{path}"
        if index < rows:
            return f"{path} record {index + 1}"
        index -= rows
    return f"record {index + 1}"
