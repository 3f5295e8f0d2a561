"""Ctrl-C and shutdown for TRL's async rollout worker (a spawned child process), at two instance-level hooks.

1. Ctrl-C at a terminal signals the whole foreground process group, and a scheduler's SIGTERM (Slurm's scancel,
   `kill -- -PGID`) the whole job: TRL's child (`AsyncRolloutWorker.start`) would die of it mid-way through its
   queue, and the trainer then hung after its checkpoint with the manifest still `running` (measured: over 90 s,
   every thread in a futex wait). The child is started with SIGINT and SIGTERM blocked (a blocked signal stays
   blocked across fork and exec); grpo's graceful stop in the parent decides, and the child is stopped by TRL's
   stop event as at every other run end (TRL's last resort, SIGKILL, still ends it). A signal that arrives while
   the child starts is delivered to the parent right after.
2. `AsyncRolloutWorker.stop` sets the stop event and joins for 15 s: a child that has put samples on its
   queue cannot exit until its queue feeder thread has written them into the pipe (Python's "joining processes
   that use queues"), and no one reads the pipe any more, so every run ends with "Child did not exit within
   15s; terminating." Here the parent drains both queues while it waits; TRL's own stop then finds it gone.
"""

from __future__ import annotations

import queue
import signal
import time
from typing import Any

STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}  # grpo's GracefulStop handles both in the parent
STOP_WAIT_S = 15.0  # TRL's own wait; the child normally exits within a second once its queues are drained


def quiet_rollout_worker(worker: Any) -> None:
    """Install both hooks on one `AsyncRolloutWorker` (TRL calls its `start` and `stop` methods)."""
    start, stop = worker.start, worker.stop

    def start_deaf_to_stop_signals() -> None:
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def stop_draining() -> None:
        drain_until_exit(worker)
        stop()

    worker.start, worker.stop = start_deaf_to_stop_signals, stop_draining


def drain_until_exit(worker: Any) -> None:
    """Set the child's stop event and read what it still sends until it exits (or TRL's wait has passed)."""
    proc = getattr(worker, "_process", None)
    if proc is None or getattr(proc, "_popen", None) is None:
        return
    worker._stop_event_mp.set()
    deadline = time.monotonic() + STOP_WAIT_S
    while proc.is_alive() and time.monotonic() < deadline:
        for q in (worker.rollout_buffer, worker.metrics_queue):
            try:
                while True:
                    q.get_nowait()
            except (queue.Empty, OSError, ValueError):
                pass
        proc.join(timeout=0.1)
