"""What may go into a generated launch script: every value from a flag, a path or the recipe is checked or
quoted here, so no newline, `;`, `$(...)` or quote in it can add a line or a command to the job.

The Slurm header is read by sbatch, not by a shell, so its values are checked against what Slurm accepts
(a newline there becomes a line of the script body, which bash runs). Words of shell commands are quoted
with `shlex.quote` where they are written; comment lines and `#SBATCH` paths refuse control characters.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from grpo_cli.errors import GrpoError

_PARTITION = re.compile(r"[A-Za-z0-9_.+-]+(,[A-Za-z0-9_.+-]+)*")
# Slurm's --time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, and the unlimited spellings.
_TIME = re.compile(r"\d+(:\d{1,2}){0,2}|\d+-\d{1,2}(:\d{1,2}){0,2}|(?i:unlimited|infinite)")
_ACCELERATOR = re.compile(r"[A-Za-z0-9_.+-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_partition(value: str) -> str:
    if not _PARTITION.fullmatch(value):
        raise GrpoError(f"{value!r} is not a Slurm partition name (letters, digits, `_.+-`, several "
                        "separated by commas)", where="--partition",
                        fix="Give the partition as `sinfo -s` lists it, e.g. `--partition gpu`.")
    return value


def check_time(value: str) -> str:
    if not _TIME.fullmatch(value):
        raise GrpoError(f"{value!r} is not a Slurm time limit", where="--time",
                        fix="Use minutes, HH:MM:SS or D-HH:MM:SS, e.g. `--time 24:00:00` or `--time 2-00:00:00` "
                            "(or `UNLIMITED` where the partition allows it).")
    return value


def check_accelerator(value: str) -> str:
    if not _ACCELERATOR.fullmatch(value):
        raise GrpoError(f"{value!r} is not a SkyPilot accelerator name", where="--accelerator",
                        fix="Give a name as `sky show-gpus` lists it, e.g. `--accelerator H100` or A100-80GB.")
    return value


def check_plain(value: str, where: str, what: str) -> str:
    """A value written into a comment or a `#SBATCH` line: no line breaks or other control characters."""
    if _CONTROL.search(value):
        raise GrpoError(f"{what} {value!r} contains a line break or another control character, which would "
                        "break the generated script", where=where,
                        fix="Rename it (or use a path without such characters).")
    return value


def check_sbatch_path(path: Path, where: str) -> str:
    """A path in a `#SBATCH --output="..."` line: sbatch reads it within double quotes and expands `%` patterns."""
    text = check_plain(str(path), where, "the path")
    bad = sorted({c for c in text if c in '"\\%'})
    if bad:
        raise GrpoError(f"the directory {text!r} contains {' '.join(bad)}, which sbatch's --output line cannot "
                        "hold", where=where, fix="Write the script into a directory without those characters.")
    return text


def job_name(stem: str) -> str:
    """`grpo-<recipe stem>` with anything outside letters, digits and `_.-` replaced (the name reaches
    `#SBATCH --job-name`, `sky launch -c` and comments)."""
    return "grpo-" + (re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-") or "recipe")


def echo_words(*parts: tuple[str, bool]) -> str:
    """One shell word from (text, expand) parts: expanded parts double-quoted (they name a variable such as
    "$TRAIN_TASKS" and nothing else), the others single-quoted, so a user's `$(...)` stays text."""
    return "".join(f'"{text}"' if expand else shlex.quote(text) for text, expand in parts if text)
