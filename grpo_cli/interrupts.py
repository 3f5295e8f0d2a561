"""Ctrl-C between units of work, never inside one.

Python raises KeyboardInterrupt wherever the interpreter happens to be. Inside a finaliser (a datasets
`Dataset.__del__`, a tokenizer's cleanup) the exception is printed as "Exception ignored" and dropped: the user's
Ctrl-C is lost and the work runs to its end. Long loops that keep every finished unit (calibration batches) instead
take the first Ctrl-C as a request, checked between units, and a second Ctrl-C as "stop now".

The standard library only.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass
class StopRequest:
    """Set by the first Ctrl-C; the loop calls `check()` between units."""

    requested: bool = False

    def check(self) -> None:
        """Raise KeyboardInterrupt at this safe point if Ctrl-C was pressed since the loop began."""
        if self.requested:
            raise KeyboardInterrupt


@contextmanager
def handling(sig: signal.Signals, handler: Callable[[int, Any], None]) -> Iterator[None]:
    """`handler` for `sig` within the block, the earlier handler restored after it. Main thread only (elsewhere
    Python delivers no signal, and the block runs with the handler it had)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(sig, handler)
    try:
        yield
    finally:  # None: a handler set outside Python; the default for the signal then
        default = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
        signal.signal(sig, default if previous is None else previous)


@contextmanager
def stop_between_units() -> Iterator[StopRequest]:
    """Within the block the first SIGINT only marks the request; a second one interrupts at once."""
    request = StopRequest()

    def handle(signum: int, frame: Any) -> None:
        if request.requested:
            raise KeyboardInterrupt
        request.requested = True

    with handling(signal.SIGINT, handle):
        yield request
