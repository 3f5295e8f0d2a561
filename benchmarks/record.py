"""The one place benchmarks record figures: opt-in, one new dated file per recorded run.

Every script in benchmarks/ prints its table; only with `--record` does it also write it, titled with `stamp()`
and the load average from `load()` (on a shared CPU machine a figure means little without them), to a new file
docs/performance/history/DATE-TIME-SCRIPT.md. Nothing else is written: docs/performance.md holds the current
figure of each subject and is edited by hand when a recorded run supersedes one. Scripts are run as
`python benchmarks/GROUP/NAME.py`; each puts the repository root on sys.path first, so this module is
`benchmarks.record`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HISTORY = ROOT / "docs" / "performance" / "history"


def stamp() -> str:
    """When the figures were taken, to the minute (local time), as each section's title gives it."""
    return dt.datetime.now().strftime("%Y-%m-%d %H:%M")


def load(*, all_three: bool = False) -> str:
    """The load average now: the 1-minute figure (`4.2`), or the 1/5/15-minute figures (`4.21/3.90/3.10`)."""
    avg = os.getloadavg()
    return "/".join(f"{x:.2f}" for x in avg) if all_three else f"{avg[0]:.1f}"


def add_record(parser: argparse.ArgumentParser) -> None:
    """The flag every benchmark takes to write its table down; without it the table is only printed."""
    parser.add_argument("--record", action="store_true",
                        help="Also write the table to a new dated file in docs/performance/history/.")
    # The old opt-out, now what every run does: commands and branches written before --record keep working.
    parser.add_argument("--no-append", action="store_true", help=argparse.SUPPRESS)


def history_path(name: str, when: dt.datetime | None = None) -> Path:
    """A new file for one recorded run: DATE-HHMM-NAME.md, numbered when that minute already has one."""
    base = f"{(when or dt.datetime.now()).strftime('%Y-%m-%d-%H%M')}-{name}"
    path, n = HISTORY / f"{base}.md", 2
    while path.exists():
        path, n = HISTORY / f"{base}-{n}.md", n + 1
    return path


def record(section: str, name: str | None = None) -> Path:
    """Write `section` (title, blank line, table) to a new history file named after the running script."""
    path = history_path(name or Path(sys.argv[0]).stem.replace("_", "-"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(section.strip("\n") + "\n", encoding="utf-8")
    print(f"recorded in {path.relative_to(ROOT)}")
    return path
