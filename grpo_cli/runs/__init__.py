"""The run-directory contract: what `grpo train` writes where, and the rules for reusing a directory. The package
is the run directory's subject: its manifest (manifest.py, one typed model) and its one-writer lock (lock.py).

Every other module names run files through the constants here, so the layout is stated once:

    OUTPUT_DIR/
      recipe.yaml      the resolved recipe          manifest.json   versions, command, status, results
      metrics.jsonl    one record per log          health.jsonl    health guard events
      report.png/.md   `grpo report`                checkpoint-N/   transformers checkpoints (TRL's naming)
      model/adapter files and the tokenizer, once the run completes
      .grpo.lock       held by the live run (see lock.py)

Rules every writer follows: a checkpoint counts only when complete (its trainer_state.json, written
last, parses); a resumed run first drops the step logs written after its checkpoint; `--force`
sets the previous run aside and deletes it only after the new run's first step.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_cli.errors import GrpoError
from grpo_cli.model_files import NOT_REGULAR

if TYPE_CHECKING:
    from grpo_cli.runs.manifest import Manifest

RECIPE = "recipe.yaml"
MANIFEST = "manifest.json"
METRICS = "metrics.jsonl"
HEALTH = "health.jsonl"
REPORT_IMAGE = "report.png"
REPORT_SUMMARY = "report.md"
LOCK = ".grpo.lock"
CHECKPOINT_PREFIX = "checkpoint-"
COMPLETIONS = "completions.jsonl"
"""Sampled prompts, completions, rewards and advantages of each logging step (`grpo samples`)."""
BEST = "best"
"""The model with the best task metric (eval.every_steps); the manifest's `best` records it."""
CARD = "README.md"
"""The model card (Hub format) of a finished run or merged model."""
MERGE_INFO = "grpo_merge.json"
"""What `grpo merge` folded into what, and how closely the logits matched."""
BEST_RECORD = "grpo_best.json"
"""Inside best/: the step, metric and value it was kept for."""


TRAINER_STATE = "trainer_state.json"
WEIGHT_FILES = ("model.safetensors", "adapter_model.safetensors", "model.safetensors.index.json",
                "pytorch_model.bin", "adapter_model.bin", "pytorch_model.bin.index.json")
# Per-step logs a resumed run writes again from its checkpoint's step on.
STEP_LOGS = (METRICS, HEALTH, COMPLETIONS)
# Entries that do not make a directory "a previous run" (grpo's own bookkeeping).
LAUNCH_DIR = "launch"  # `grpo launch slurm` writes its script and the job's logs here, beside the run it starts
BOOKKEEPING = frozenset({LOCK, LAUNCH_DIR})
_CHECKPOINT = re.compile(rf"^{CHECKPOINT_PREFIX}(\d+)$")

def suite_result(suite: str) -> str:
    """`grpo eval --suite` summary file next to a model."""
    return f"eval-{suite}.json"


def suite_completions(suite: str) -> str:
    """`grpo eval --suite` completions file next to a model."""
    return f"eval-{suite}-completions.jsonl"


def read_jsonl(path: Path, garbled: list[int] | None = None, lines: list[int] | None = None) -> list[dict[str, Any]]:
    """Records of a run's JSON-lines file (metrics, health, completions); a line cut short or garbled, as a
    killed run leaves, is skipped (its number is added to `garbled`), and a missing file has none. `lines`
    receives each record's line number."""
    if not path.is_file():
        return []
    out = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            out.append(record)
            if lines is not None:
                lines.append(number)
        elif line.strip() and garbled is not None:
            garbled.append(number)
    return out


def run_file(run_dir: Path, name: str, where: str, written: str) -> Path:
    """`run_dir/name`, refused in one paragraph when a directory, a device or a named pipe stands there or the file
    is missing; `written` says when grpo train writes it (the fix for a missing file)."""
    path = run_dir / name
    if path.is_dir():
        raise GrpoError(f"{path} is a directory, not the run's {name} file", where=where,
                        fix=f"Move that directory aside; grpo train writes {name} as a file.")
    if path.exists() and not path.is_file():  # /dev/urandom or a named pipe: reading it would never end
        raise GrpoError(f"{path} {NOT_REGULAR}", where=where,
                        fix=f"Put the run's own {name} there (grpo train writes it as a file), or give the run "
                            "directory that holds it.")
    if not path.is_file():
        raise GrpoError(f"there is no {name} in {run_dir}", where=where,
                        fix=f"Give the output directory of a `grpo train` run; it writes {name} {written}.")
    return path


def pid_alive(pid: int) -> bool:
    """Whether process `pid` still runs (another user's counts as running): what a killed writer left behind
    may be removed only when it does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def damaged_jsonl(path: Path, garbled: list[int], where: str) -> GrpoError:
    """The error for a run file none of whose lines is a record: damaged, not merely empty so far."""
    return GrpoError(f"{path} is damaged: none of its lines is a JSON record ({len(garbled)} unreadable line(s), "
                     f"the first at line {garbled[0]})", where=where,
                     fix="grpo train writes one JSON object per line; the file was overwritten or corrupted after "
                         "the run. Restore it from a copy, or train again.")


def read_manifest(out: Path) -> Manifest | None:
    """The manifest of the run in `out` (None when missing or damaged); its format is `grpo_cli.runs.manifest`'s."""
    from grpo_cli.runs.manifest import Manifest  # its models: not for the readers of run files that never open it

    return Manifest.read(out / MANIFEST)


def write_manifest(out: Path, manifest: Manifest) -> None:
    """Write the manifest of the run in `out`, atomically."""
    manifest.write(out / MANIFEST)


def manifest_status(out: Path) -> str | None:
    """What the manifest of the run in `out` says of it (running, completed, failed, ...; None without one)."""
    manifest = read_manifest(out)
    return manifest.status if manifest is not None else None


def checkpoint_step(path: Path) -> int | None:
    """N for a `checkpoint-N` path, else None."""
    match = _CHECKPOINT.match(path.name)
    return int(match.group(1)) if match else None


def checkpoints(out: Path) -> list[Path]:
    """All checkpoint-N directories in `out`, lowest step first (complete or not)."""
    steps = [(checkpoint_step(c), c) for c in out.iterdir()] if out.is_dir() else []
    return [c for s, c in sorted((s, c) for s, c in steps if s is not None and c.is_dir())]


def checkpoint_problem(ckpt: Path) -> str | None:
    """Why `ckpt` cannot be resumed from (None when it is complete).

    transformers writes trainer_state.json last, after the weights, optimizer and RNG states, so a
    save cut short (SIGKILL, full disk) leaves it missing or truncated.
    """
    try:
        state = json.loads((ckpt / TRAINER_STATE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"no {TRAINER_STATE} (the save was cut short)"
    except (OSError, ValueError):
        return f"{TRAINER_STATE} is truncated or unreadable (the save was cut short)"
    if not isinstance(state, dict) or not isinstance(state.get("global_step"), int):
        return f"{TRAINER_STATE} holds no global_step"
    if not any((ckpt / name).is_file() for name in WEIGHT_FILES):
        return "no model or adapter weights"
    return None


def resumable_checkpoints(out: Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest complete checkpoint, and the newer incomplete ones with the reason for each."""
    skipped: list[tuple[Path, str]] = []
    for ckpt in reversed(checkpoints(out)):
        problem = checkpoint_problem(ckpt)
        if problem is None:
            return ckpt, skipped
        skipped.append((ckpt, problem))
    return None, skipped


def latest_checkpoint(out: Path) -> Path | None:
    """The complete checkpoint-N directory with the highest N, if any."""
    return resumable_checkpoints(out)[0]


def saved_step(ckpt: Path) -> int:
    """The global step a complete checkpoint was saved at (its trainer_state.json)."""
    return int(json.loads((ckpt / TRAINER_STATE).read_text(encoding="utf-8"))["global_step"])


def run_entries(out: Path) -> list[Path]:
    """What `out` holds besides grpo's bookkeeping (the lock file)."""
    return [p for p in out.iterdir() if p.name not in BOOKKEEPING] if out.is_dir() else []


def is_run_dir(out: Path) -> bool:
    """Whether `out` holds (part of) a grpo training run."""
    return any((out / n).exists() for n in (MANIFEST, RECIPE, METRICS)) or bool(checkpoints(out))


def truncate_step_logs(out: Path, step: int) -> int:
    """Drop records logged after `step` from the per-step logs (STEP_LOGS); return how many.

    After a hard kill these files run ahead of the last checkpoint; the resumed run logs those steps
    again, and each step must appear once.
    """
    return sum(_truncate_jsonl(out / name, step) for name in STEP_LOGS)


def _truncate_jsonl(path: Path, step: int) -> int:
    if not path.is_file():
        return 0
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    keep: list[str] = []
    for line in lines:
        try:
            record_step = json.loads(line).get("step")
        except (ValueError, AttributeError):
            continue  # a line cut short by the kill
        if not (isinstance(record_step, int) and record_step > step):
            keep.append(line)
    dropped = len(lines) - len(keep)
    if dropped:
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(f"{line}\n" for line in keep), encoding="utf-8")
        tmp.replace(path)
    return dropped


@dataclass
class OutputPlan:
    """What `grpo train` does with its output directory, decided before anything is written."""

    checkpoint: Path | None = None
    replace: bool = False
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


FAILED_START_FILES = frozenset({RECIPE, MANIFEST, METRICS, HEALTH, COMPLETIONS, REPORT_IMAGE, REPORT_SUMMARY})


def failed_before_checkpoint(out: Path) -> bool:
    """A run that failed (or was killed) before saving anything to resume: the next run replaces it as --force
    would (TensorBoard's runs/ counts when it holds event files only)."""
    def leftover(p: Path) -> bool:
        if p.name == "runs" and p.is_dir():
            return all(f.name.startswith("events.out.tfevents") for f in p.rglob("*") if f.is_file())
        return p.name in FAILED_START_FILES and p.is_file()

    entries = run_entries(out)
    return (bool(entries) and manifest_status(out) in ("failed", "killed")
            and all(leftover(p) for p in entries))


def _resume_plan(out: Path, resume: bool | str | None, non_empty: bool) -> OutputPlan:
    if isinstance(resume, str):
        ckpt = Path(resume)
        problem = checkpoint_problem(ckpt) if ckpt.is_dir() else "not a directory"
        if problem:
            raise GrpoError(f"{ckpt} is not a checkpoint that can be resumed from: {problem}", where="--resume",
                            fix="Give a complete checkpoint-N directory, or `--resume` alone for the newest "
                                "complete one in the output dir.")
        return OutputPlan(ckpt)
    newest, skipped = resumable_checkpoints(out)
    if newest is None and resume:
        why = "; ".join(f"{p.name}: {reason}" for p, reason in skipped)
        raise GrpoError(f"there is no complete checkpoint-N directory in {out} to resume from"
                        + (f" ({why})" if why else ""), where="--resume",
                        fix="Drop --resume to start a new run, or point --output-dir at the run to continue.")
    if newest is None and non_empty:
        raise GrpoError(f"output directory {out} is not empty and holds no checkpoint", where="output.dir",
                        fix="Use --force to replace it, or choose another --output-dir.")
    return OutputPlan(newest, skipped=skipped)


def plan_output_dir(out: Path, *, resume: bool | str | None, force: bool, policy: str) -> OutputPlan:
    """Apply the overwrite/resume policy without touching anything.

    `resume` is True (newest complete checkpoint in `out`), a checkpoint path, or None. The old run
    is replaced only later (see `SetAside`), once the new one is ready to train.
    """
    if out.exists() and not out.is_dir():
        raise GrpoError(f"{out} exists and is a file, not a directory", where="--output-dir",
                        fix="Choose a directory path for the run.")
    non_empty = bool(run_entries(out))
    if resume or (policy == "resume" and not force):
        return _resume_plan(out, resume, non_empty)
    if not non_empty:
        return OutputPlan()
    if not (force or policy == "force"):
        if failed_before_checkpoint(out):
            return OutputPlan(replace=True, notes=[f"replacing the {manifest_status(out)} run in {out}: "
                                                   "it ended before its first checkpoint, so there is nothing to "
                                                   "resume"])
        raise GrpoError(f"output directory {out} is not empty; refusing to overwrite a previous run",
                        where="output.dir",
                        fix="Use --resume to continue it, --force to replace it, or --output-dir for a new one.")
    if not is_run_dir(out):
        raise GrpoError(f"{out} is not empty and does not look like a grpo run (no manifest.json, recipe.yaml, "
                        "metrics.jsonl or checkpoint); refusing to delete it", where="--force",
                        fix="Choose an empty or new --output-dir.")
    return OutputPlan(replace=True)


class SetAside:
    """The previous run's files, moved next to `out` while a `--force` run starts.

    `discard` deletes them once the new run has completed a step; `restore` puts them back when it
    fails before that, so a replacement that never trained loses nothing. The lock file stays put.
    """

    def __init__(self, out: Path) -> None:
        self.out = out
        self.path = Path(tempfile.mkdtemp(prefix=f".{out.name}.previous-", dir=out.parent))
        self.done = False
        for entry in run_entries(out):
            os.replace(entry, self.path / entry.name)

    def discard(self) -> None:
        if not self.done:
            shutil.rmtree(self.path, ignore_errors=True)
            self.done = True

    def restore(self) -> None:
        if self.done:
            return
        for entry in run_entries(self.out):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        for entry in self.path.iterdir():
            os.replace(entry, self.out / entry.name)
        self.path.rmdir()
        self.done = True


def check_resume_compatible(out: Path, *, name_or_path: str, lora: bool) -> None:
    """Refuse to resume a run whose recipe cannot load its checkpoint (`model.name_or_path` or LoRA changed)."""
    import yaml

    saved_path = out / RECIPE
    if not saved_path.exists():
        return
    try:
        saved = yaml.safe_load(saved_path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError:
        return
    model = saved.get("model") or {}
    if model.get("name_or_path") != name_or_path:
        raise GrpoError(f"the run in {out} trained {model.get('name_or_path')!r}, but this recipe names "
                        f"{name_or_path!r}", where="model.name_or_path",
                        fix="Resume with the recipe saved in the run (its recipe.yaml), or start a new run.")
    if (model.get("lora") is not None) != lora:
        had = "with LoRA" if model.get("lora") is not None else "without LoRA (full fine-tune)"
        raise GrpoError(f"the run in {out} was trained {had}; its checkpoint cannot be resumed with "
                        f"model.lora={'set' if lora else 'unset'}", where="model.lora",
                        fix="Resume with the recipe saved in the run (its recipe.yaml), or start a new run.")
