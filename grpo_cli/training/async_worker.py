"""Ctrl-C and shutdown for TRL's async rollout worker (a spawned child process), at two instance-level hooks.

1. Ctrl-C at a terminal signals the whole foreground process group, so TRL's child (`AsyncRolloutWorker.start`)
   would get SIGINT too, die with KeyboardInterrupt and mark itself failed: the trainer's next health check then
   raises before grpo's graceful stop can save a checkpoint. The child is started with SIGINT blocked (a blocked
   signal stays blocked across fork and exec); grpo's handler in the parent decides, and the child is stopped
   by TRL's stop event as in every other run end. A Ctrl-C while the child starts is delivered right after.
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

STOP_WAIT_S = 15.0  # TRL's own wait; the child normally exits within a second once its queues are drained


def quiet_rollout_worker(worker: Any) -> None:
    """Install both hooks on one `AsyncRolloutWorker` (TRL calls its `start` and `stop` methods)."""
    start, stop = worker.start, worker.stop

    def start_without_sigint() -> None:
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def stop_draining() -> None:
        drain_until_exit(worker)
        stop()

    worker.start, worker.stop = start_without_sigint, stop_draining


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
