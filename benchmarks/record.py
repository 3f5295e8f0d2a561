"""The one place benchmarks record figures: a section appended to docs/performance.md, stamped with time and load.

Every script in benchmarks/ prints its table and, unless `--no-append`, appends it through `append`, its title
stamped with `stamp()` and the load average from `load()`: on a shared CPU machine a figure means little without
them. Run as `python benchmarks/NAME.py`, a script imports this module from its own directory.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PERFORMANCE = ROOT / "docs" / "performance.md"


def stamp() -> str:
    """When the figures were taken, to the minute (local time), as each section's title gives it."""
    return dt.datetime.now().strftime("%Y-%m-%d %H:%M")


def load(*, all_three: bool = False) -> str:
    """The load average now: the 1-minute figure (`4.2`), or the 1/5/15-minute figures (`4.21/3.90/3.10`)."""
    avg = os.getloadavg()
    return "/".join(f"{x:.2f}" for x in avg) if all_three else f"{avg[0]:.1f}"


def add_no_append(parser: argparse.ArgumentParser) -> None:
    """The flag every benchmark takes to print its table without recording it."""
    parser.add_argument("--no-append", action="store_true", help="Do not append to docs/performance.md.")


def append(section: str) -> Path:
    """Append `section` (title, blank line, table) after a blank line; creates the file when it is missing."""
    if not PERFORMANCE.exists():
        PERFORMANCE.write_text("# Performance\n", encoding="utf-8")
    with PERFORMANCE.open("a", encoding="utf-8") as fh:
        fh.write("\n" + section.lstrip("\n"))
    return PERFORMANCE
