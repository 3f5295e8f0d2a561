"""The run-directory contract: file names, checkpoints, the lock, and the overwrite/resume rules.

A run directory holds manifest.json, recipe.yaml, metrics.jsonl, checkpoint-N/ and, once a run
completes, the final model. Every command that writes into one goes through this module, so the
rules below hold for all of them:

- one writer at a time: `grpo train` holds an exclusive lock (`.grpo.lock`, holder pid/host inside);
- a checkpoint counts only when complete (its trainer_state.json, written last, parses);
- a run that died without a word (SIGKILL, power loss) is marked `killed` by the next command that
  finds its manifest still `running` with nobody holding the lock.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import shutil
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_cli.errors import GrpoError

MANIFEST = "manifest.json"
RECIPE = "recipe.yaml"
METRICS = "metrics.jsonl"
LOCK = ".grpo.lock"
CHECKPOINT_PREFIX = "checkpoint-"
TRAINER_STATE = "trainer_state.json"
WEIGHT_FILES = ("model.safetensors", "adapter_model.safetensors", "model.safetensors.index.json",
                "pytorch_model.bin", "adapter_model.bin", "pytorch_model.bin.index.json")
# Entries that do not make a directory "a previous run" (grpo's own bookkeeping).
BOOKKEEPING = frozenset({LOCK})
# Set by the `grpo train` that re-launches itself under accelerate: it holds the lock for its workers.
LOCKED_ENV = "GRPO_RUN_LOCKED"
# Per-step logs a resumed run writes again from the checkpoint's step on.
STEP_LOGS = (METRICS, "health.jsonl")


def _step_of(path: Path) -> int | None:
    suffix = path.name[len(CHECKPOINT_PREFIX):]
    return int(suffix) if path.name.startswith(CHECKPOINT_PREFIX) and suffix.isdigit() else None


def checkpoints(out: Path) -> list[Path]:
    """All checkpoint-N directories in `out`, lowest step first (complete or not)."""
    if not out.is_dir():
        return []
    found = [(s, p) for p in out.iterdir() if p.is_dir() and (s := _step_of(p)) is not None]
    return [p for _, p in sorted(found)]


def checkpoint_problem(ckpt: Path) -> str | None:
    """Why `ckpt` cannot be resumed from (None when it is complete).

    transformers writes trainer_state.json last, after the weights, optimizer and RNG states, so a
    save cut short (SIGKILL, full disk) leaves it missing or truncated.
    """
    state_file = ckpt / TRAINER_STATE
    if not state_file.is_file():
        return f"no {TRAINER_STATE} (the save was cut short)"
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return f"{TRAINER_STATE} is truncated or unreadable (the save was cut short)"
    if not isinstance(state, dict) or not isinstance(state.get("global_step"), int):
        return f"{TRAINER_STATE} holds no global_step"
    if not any((ckpt / name).is_file() for name in WEIGHT_FILES):
        return "no model or adapter weights"
    return None


def resumable_checkpoints(out: Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest complete checkpoint, and the newer ones skipped with the reason for each."""
    skipped: list[tuple[Path, str]] = []
    for ckpt in reversed(checkpoints(out)):
        problem = checkpoint_problem(ckpt)
        if problem is None:
            return ckpt, skipped
        skipped.append((ckpt, problem))
    return None, skipped


def latest_checkpoint(out: Path) -> Path | None:
    """The complete checkpoint with the highest step, if any."""
    return resumable_checkpoints(out)[0]


def checkpoint_step(ckpt: Path) -> int:
    """The global step a checkpoint was saved at (from its trainer_state.json)."""
    return int(json.loads((ckpt / TRAINER_STATE).read_text(encoding="utf-8"))["global_step"])


def run_entries(out: Path) -> list[Path]:
    """What `out` holds besides grpo's bookkeeping."""
    if not out.is_dir():
        return []
    return [p for p in out.iterdir() if p.name not in BOOKKEEPING]


def looks_like_a_run(out: Path) -> bool:
    """True when `out` holds a grpo run (so `--force` may replace it)."""
    return any((out / n).exists() for n in (MANIFEST, RECIPE, METRICS)) or bool(checkpoints(out))


def truncate_step_logs(out: Path, step: int) -> int:
    """Drop records logged after `step` from metrics.jsonl and health.jsonl; return how many.

    After a hard kill these files run ahead of the last checkpoint; the resumed run logs those steps
    again, and each step must appear once.
    """
    return sum(_truncate_jsonl(out / name, step) for name in STEP_LOGS)


def _truncate_jsonl(path: Path, step: int) -> int:
    if not path.is_file():
        return 0
    keep: list[str] = []
    dropped = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record_step = json.loads(line).get("step")
        except (json.JSONDecodeError, AttributeError):
            dropped += 1  # a line cut short by the kill
            continue
        if isinstance(record_step, int) and record_step > step:
            dropped += 1
        else:
            keep.append(line)
    if dropped:
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(f"{line}\n" for line in keep), encoding="utf-8")
        tmp.replace(path)
    return dropped


def read_manifest(out: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    """Write atomically, so an interrupted run never leaves a truncated manifest."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class RunLock:
    """An exclusive flock on OUT/.grpo.lock, held for the whole run (the kernel drops it when the holder dies).

    The file records who holds it (pid, host, command, since) for the message a second writer gets.
    Creating the lock creates `out`; `release` removes the file, and `out` when nothing else was written.
    """

    def __init__(self, out: Path) -> None:
        self.out = out
        self.path = out / LOCK
        self._fd: int | None = None
        self._created_dir = False

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, command: str = "grpo train") -> RunLock:
        if self.out.exists() and not self.out.is_dir():
            raise GrpoError(f"{self.out} exists and is a file, not a directory", where="--output-dir",
                            fix="Choose a directory path for the run.")
        self._created_dir = not self.out.exists()
        self.out.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise GrpoError(f"{self.out} is in use by another run ({describe_holder(self.path)}); two runs in one "
                            "directory would mix their checkpoints and metrics", where="--output-dir",
                            fix="Wait for that run to finish or stop it (Ctrl-C, or `kill PID`), or choose another "
                                "--output-dir. --force does not replace a run that is still running.") from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "command": command, "since": now()}
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(holder) + "\n").encode())
        self._fd = fd
        return self

    def release(self) -> None:
        """Drop the lock and its file; remove the directory again if this run created it and wrote nothing.

        The file goes before the lock is released: a process that opened it just before then fails to
        lock it (LOCK_NB) and reports the run as busy, which it still was.
        """
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        if self._created_dir and not run_entries(self.out):
            with contextlib.suppress(OSError):
                self.out.rmdir()
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def describe_holder(lock_path: Path) -> str:
    """'pid 123 on host h, grpo train since T' from a lock file (best effort)."""
    try:
        holder = json.loads(lock_path.read_text(encoding="utf-8"))
        return f"pid {holder['pid']} on host {holder['host']}, {holder['command']} since {holder['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "holder unknown"


def lock_is_free(out: Path) -> bool:
    """True when no live process holds OUT/.grpo.lock (or there is none)."""
    path = out / LOCK
    if not path.exists():
        return True
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def mark_if_killed(out: Path, *, lock_held: bool = False) -> dict[str, Any] | None:
    """If the manifest says `running` but nobody holds the lock, the run died: record it as `killed`.

    `lock_held`: the caller holds the run's lock itself (so no other process can). Returns the
    updated manifest when it was changed.
    """
    manifest = read_manifest(out)
    if manifest is None or manifest.get("status") != "running" or not (lock_held or lock_is_free(out)):
        return None
    manifest.update(status="killed",
                    message="the process ended without recording why (SIGKILL, out of memory, or power loss); "
                            f"found by a later command at {now()}")
    write_manifest(out / MANIFEST, manifest)
    return manifest


@dataclass
class OutputPlan:
    """What `grpo train` does with its output directory, decided before anything is written."""

    checkpoint: Path | None = None
    replace: bool = False
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def plan_output_dir(out: Path, *, resume: bool | str | None, force: bool, policy: str) -> OutputPlan:
    """Apply the overwrite/resume policy without touching anything.

    `resume` is True (newest complete checkpoint in `out`), a checkpoint path, or None. The old run
    is replaced only later (see `SetAside`), once the new one is ready to train.
    """
    if isinstance(resume, str):
        ckpt = Path(resume)
        problem = checkpoint_problem(ckpt) if ckpt.is_dir() else "not a directory"
        if problem:
            raise GrpoError(f"{ckpt} is not a checkpoint that can be resumed from: {problem}", where="--resume",
                            fix="Give a complete checkpoint-N directory, or `--resume` alone for the newest "
                                "complete one in the output dir.")
        return OutputPlan(ckpt)
    if out.exists() and not out.is_dir():
        raise GrpoError(f"{out} exists and is a file, not a directory", where="--output-dir",
                        fix="Choose a directory path for the run.")
    non_empty = bool(run_entries(out))
    if resume or (policy == "resume" and not force):
        ckpt, skipped = resumable_checkpoints(out)
        if ckpt is None:
            if resume:
                why = "; ".join(f"{p.name}: {reason}" for p, reason in skipped)
                raise GrpoError(f"there is no complete checkpoint-N directory in {out} to resume from"
                                + (f" ({why})" if why else ""), where="--resume",
                                fix="Drop --resume to start a new run, or point --output-dir at the run to continue.")
            if non_empty:
                raise GrpoError(f"output directory {out} is not empty and holds no checkpoint", where="output.dir",
                                fix="Use --force to replace it, or choose another --output-dir.")
        return OutputPlan(ckpt, skipped=skipped)
    if not non_empty:
        return OutputPlan()
    if not (force or policy == "force"):
        raise GrpoError(f"output directory {out} is not empty; refusing to overwrite a previous run",
                        where="output.dir",
                        fix="Use --resume to continue it, --force to replace it, or --output-dir for a new one.")
    if not looks_like_a_run(out):
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
