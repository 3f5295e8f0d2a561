"""The finished rows of an earlier calibration in `--out`, read for `--resume` before a model loads.

Every row carries the settings it was sampled with (`CalibrationSettings.row`), so a resume with other settings
is refused even when `calibration.json` is gone or damaged, and the rows of two settings never share a file. A
killed write leaves at most a torn last line, which is dropped; anything else that is not a row is refused with its
file and line, never skipped (skipping would drop a finished row from the file rewritten after it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpo_cli.calibration.settings import CALIBRATION, PARTIAL, CalibrationSettings, settings_differ
from grpo_cli.errors import GrpoError

ROW_KEYS = ("key", "k", "passes", "pass_rate")


def earlier_rows(out: Path, settings: CalibrationSettings) -> dict[str, dict[str, Any]]:
    """Finished rows by key: the finished calibration's, then the partial file's (which extends it)."""
    done: dict[str, dict[str, Any]] = {}
    for name in (CALIBRATION, PARTIAL):
        path = out / name
        if path.is_file():
            for number, row in _rows(path):
                _check_settings(path, number, row, settings)
                done.setdefault(str(row["key"]), row)
    return done


def _rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise GrpoError(f"{path} is not a calibration file (not UTF-8 text)", where="--resume",
                        fix=_fix(path)) from None
    except OSError as exc:
        raise GrpoError(f"cannot read {path}: {exc.strerror or exc}", where="--resume", fix=_fix(path)) from None
    lines = text.splitlines()
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        ok = _is_row(row)
        if not ok:
            if number == len(lines) and not text.endswith("\n"):
                break  # the torn last line of a killed write: that batch is sampled again
            raise GrpoError(f"{path} line {number} is not a calibration row (a JSON object with a key, k, passes "
                            "from 0 to k and their pass_rate)", where="--resume", fix=_fix(path))
        rows.append((number, row))
    return rows


def _is_row(row: Any) -> bool:
    """A row `finish` can count: a string key, whole k and passes (0 <= passes <= k), a pass rate in [0, 1]."""
    if not isinstance(row, dict) or not all(name in row for name in ROW_KEYS) or not isinstance(row["key"], str):
        return False
    k, passes, rate = row["k"], row["passes"], row["pass_rate"]
    whole = all(isinstance(v, int) and not isinstance(v, bool) for v in (k, passes))
    return (whole and 0 <= passes <= k and k >= 1 and isinstance(rate, int | float) and not isinstance(rate, bool)
            and 0.0 <= rate <= 1.0)


def _check_settings(path: Path, number: int, row: dict[str, Any], settings: CalibrationSettings) -> None:
    before = row.get("settings")
    if isinstance(before, dict):
        diff = settings.differences(before)
    else:  # a row of a grpo that did not record them: its k at least
        diff = [] if row["k"] == settings.k else [f"k {row['k']!r} (now {settings.k!r})"]
    if diff:
        raise settings_differ(Path(f"{path} line {number}"), diff)


def _fix(path: Path) -> str:
    return (f"Move {path.name} away if it is not grpo's, or start over with --force (replaces the calibration) or "
            "another --out.")
