"""Rendering of a written cluster launch file (Slurm, SkyPilot) and how to start it."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console


def render_launch_file(console: Console, path: Path, start: str, *, job: str | None = None) -> None:
    """Where a cluster launch file was written and how to start it (or the job it was submitted as)."""
    console.print(f"wrote {path}", markup=False, soft_wrap=True)
    if job:
        console.print(f"submitted as Slurm job {job}; follow it with `squeue -j {job}`", markup=False)
    else:
        console.print(f"start it with: {start}", markup=False, soft_wrap=True)
