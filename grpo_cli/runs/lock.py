"""One writer per run directory: an exclusive lock held for the whole run, and what a dead holder leaves.

`grpo train` holds a flock on OUT/.grpo.lock while it runs (under accelerate, the launching
`grpo train` holds it for its workers). The kernel drops a flock when its holder dies, however it
dies, so "the manifest says running but nobody holds the lock" means the run was killed without a
word (SIGKILL, out of memory, power loss): the next command that looks records it as `killed`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from pathlib import Path

from grpo_cli.errors import GrpoError
from grpo_cli.runs.manifest import Manifest, now
from grpo_cli.runs import LOCK, read_manifest, run_entries, write_manifest

# Set by the `grpo train` that re-launches itself under accelerate: it holds the lock for its workers.
LOCKED_ENV = "GRPO_RUN_LOCKED"


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
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise GrpoError(f"cannot write the run directory {self.out}: {exc.strerror or exc}", where="--output-dir",
                            fix="Choose a directory you can write (a read-only or full filesystem cannot hold a "
                                "run), e.g. --output-dir outputs/NAME.") from None
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


def mark_if_killed(out: Path, *, lock_held: bool = False) -> Manifest | None:
    """If the manifest says `running` but nobody holds the lock, the run died: record it as `killed`.

    `lock_held`: the caller holds the run's lock itself (so no other process can). Returns the
    updated manifest when it was changed.
    """
    manifest = read_manifest(out)
    if manifest is None or manifest.status != "running" or not (lock_held or lock_is_free(out)):
        return None
    manifest.status = "killed"
    manifest.message = ("the process ended without recording why (SIGKILL, out of memory, or power loss); "
                        f"found by a later command at {now()}")
    write_manifest(out, manifest)
    return manifest

