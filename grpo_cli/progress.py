"""Progress of a long phase (held-out sampling, tool episodes) on the console, in a terminal and when piped.

A phase opens `reporting(console, label, total)`; the loops deep inside (batched generation, tool
episodes) call `advance(n, detail)` and know nothing about consoles. In a terminal that is a transient rich
bar that refreshes itself (its clock moves while a batch of 32 long answers is generated); when the output
is piped (a log file, CI) it is a plain line at most every `PIPED_EVERY_S` seconds, written on any
`advance`, `advance(0)` included, so a generation loop that calls it per token is never silent. With no
phase open, `advance` does nothing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

PIPED_EVERY_S = 10.0
_current: ContextVar[_Reporter | None] = ContextVar("grpo_progress", default=None)


class _Reporter:
    def __init__(self, console: Console, label: str, total: int, unit: str) -> None:
        self.console, self.label, self.total, self.unit = console, label, total, unit
        self.done = 0
        self.detail = ""
        self.started = self._last = time.monotonic()
        self.bar: Any = None
        if console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn(f"{label}"), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
                                TextColumn("{task.fields[detail]}"), TimeElapsedColumn(), console=console,
                                transient=True, auto_refresh=True, refresh_per_second=2)
            self.task = self.bar.add_task(label, total=total, detail="")
            self.bar.start()

    def advance(self, n: int, detail: str | None = None) -> None:
        self.done = min(self.total, self.done + n)
        if detail is not None:
            self.detail = detail
        now = time.monotonic()
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done, detail=self.detail)
        elif now - self._last >= PIPED_EVERY_S and self.done < self.total:
            self._last = now
            more = f", {self.detail}" if self.detail else ""
            self.console.print(f"  {self.label}: {self.done}/{self.total} {self.unit}{more}, "
                               f"{now - self.started:.0f} s", markup=False, soft_wrap=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@contextlib.contextmanager
def reporting(console: Console | None, label: str, total: int, unit: str = "") -> Iterator[None]:
    """Show the progress of `total` units of work done by code that calls `advance` inside this block."""
    if console is None or total <= 0:
        yield
        return
    reporter = _Reporter(console, label, total, unit)
    token = _current.set(reporter)
    try:
        yield
    finally:
        _current.reset(token)
        reporter.close()


def advance(n: int = 1, detail: str | None = None) -> None:
    """`n` more units of the current phase are done, `detail` says where within the unit the work is
    (e.g. "batch 1/1, token 120/512"); no-op outside `reporting`."""
    reporter = _current.get()
    if reporter is not None:
        reporter.advance(n, detail)


def active() -> bool:
    """Whether a phase is open, so a loop skips the bookkeeping for progress nobody sees."""
    return _current.get() is not None


def silence_cpu_accelerator_notice() -> None:
    """Drop DeepSpeed's "Setting accelerator to CPU" warning, which every CPU command printed once the
    `deepspeed` extra was installed: on a machine without a GPU it is the expected outcome, not news.
    A filter on its logger (created here first, kept by DeepSpeed) leaves every other DeepSpeed message."""
    import logging

    logger = logging.getLogger("DeepSpeed")
    if not any(getattr(f, "grpo_cpu_notice", False) for f in logger.filters):
        def keep(record: logging.LogRecord) -> bool:
            return "Setting accelerator to CPU" not in record.getMessage()

        keep.grpo_cpu_notice = True  # type: ignore[attr-defined]
        logger.addFilter(keep)


def quiet_libraries() -> None:
    """Hide datasets/transformers progress bars and warnings: grpo prints its own progress, and its own
    words for what matters (transformers' "sequence length is longer than the specified maximum" and
    "friendly reminder" lines repeat a warning grpo gives with a fix)."""
    import datasets
    import transformers

    silence_cpu_accelerator_notice()
    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
