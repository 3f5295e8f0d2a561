"""Trainer callbacks: the rich console, metrics.jsonl, and graceful SIGINT/SIGTERM; the base of those that
need the trainer itself (`TrainerBound`)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

if TYPE_CHECKING:
    from rich.console import Console


class TrainerBound(TrainerCallback):
    """A callback that reads the trainer's logs, or logs and saves through it (completions.jsonl, the task
    metric, `eval.on_save`): the GRPOTrainer takes its callbacks when it is built, so `trainer` is set afterwards
    (training.trainer)."""

    trainer: Any = None


# Keys shown on the compact per-log console line, in order: (log key, label, format).
_LINE = [
    ("reward", "reward", "{:.3f}"),
    ("reward_std", "std", "{:.3f}"),
    ("frac_reward_zero_std", "zero_std", "{:.2f}"),
    ("dynamic_sampling/rounds", "rounds", "{:.3g}"),
    ("completions/mean_length", "len", "{:.1f}"),
    ("tools/call_frequency", "tool_calls", "{:.2f}"),
    ("tools/failure_frequency", "tool_fail", "{:.2f}"),
    ("tools/results_cut", "tool_results_cut", "{:.0f}"),
    ("kl", "kl", "{:.4f}"),
    ("loss", "loss", "{:.4f}"),
]


def format_log_line(step: int, logs: dict[str, Any], show_kl: bool) -> str:
    """One compact line per logging step: total reward, each reward's mean, std, zero-std share, length, KL."""
    parts = [f"step {step:>5}"]
    for key, label, fmt in _LINE:
        if key == "kl" and not show_kl:
            continue
        if key in logs and isinstance(logs[key], (int, float)):
            parts.append(f"{label} {fmt.format(logs[key])}")
        if key == "reward":
            for k, v in logs.items():
                if k.startswith("rewards/") and k.endswith("/mean") and isinstance(v, (int, float)):
                    parts.append(f"{k.split('/')[1]} {v:.3f}")
    return "  ".join(parts)


class ToolResultCuts(TrainerCallback):
    """Adds `tools/results_cut` to a step's log: tool results cut to max_result_chars since the last log.

    It must come before the callbacks that write and print logs (they see the key it adds)."""

    def __init__(self, stats: dict[str, Any]) -> None:
        self.stats = stats
        self.seen = 0

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
        total = sum(s.cut for s in self.stats.values())
        if logs is not None and total > self.seen:
            logs["tools/results_cut"] = total - self.seen
            self.seen = total


class MetricsJsonl(TrainerCallback):
    """Append every log record (with step and wall time) to OUTPUT_DIR/metrics.jsonl."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.start = time.time()
        self.records: list[dict[str, Any]] = []

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
        if not logs or not state.is_world_process_zero:
            return
        record = {"step": state.global_step, "epoch": state.epoch, "time": round(time.time() - self.start, 3), **logs}
        self.records.append(record)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, default=float) + "\n")


class RichConsole(TrainerCallback):
    """A progress bar plus one compact line per logging step."""

    def __init__(self, console: Console | None, show_kl: bool) -> None:
        self.console = console
        self.show_kl = show_kl
        self.progress: Any = None
        self.task: Any = None
        self._last_refresh = 0.0
        self._first_step = 1
        self._began = 0.0
        self._drawn = False

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if not state.is_world_process_zero or self.console is None:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        # No refresh thread: it would contend for the GIL with the training loop on small machines.
        self.progress = Progress(TextColumn("[bold]training"), BarColumn(), MofNCompleteColumn(),
                                 TimeRemainingColumn(), console=self.console, transient=True, auto_refresh=False,
                                 disable=not self.console.is_terminal)  # piped: the log lines say it all
        self.progress.start()
        self.task = self.progress.add_task("train", total=state.max_steps, completed=state.global_step)
        self._first_step = state.global_step + 1
        self._began = time.monotonic()
        start = f" from step {state.global_step}" if state.global_step else ""
        self.console.print(f"training: {state.max_steps} steps{start}", markup=False, soft_wrap=True)
        # A transient bar is drawn only on a terminal (or in a notebook); redirected to a file or a pipe,
        # a redraw would build the bar's table and print nothing.
        self._drawn = bool(self.console.is_terminal or self.console.is_jupyter)

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.progress is None:
            return
        if state.global_step == self._first_step:  # how long the run will take, before the first log line
            took = time.monotonic() - self._began
            left = state.max_steps - state.global_step
            self.progress.console.print(f"step {state.global_step} took {took:.1f} s; {left} to go "
                                        f"(~{_duration(took * left)} at this pace)", markup=False, soft_wrap=True)
        if not self._drawn:
            return
        now = time.monotonic()
        if now - self._last_refresh > 0.5:  # at most two updates and redraws a second: a step may take 0.1 s
            self._last_refresh = now
            self.progress.update(self.task, completed=state.global_step)
            self.progress.refresh()

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
        if self.progress is None or not logs or "reward" not in logs:
            return
        self.progress.update(self.task, completed=state.global_step)  # the bar redrawn under the line is current
        self.progress.console.print(format_log_line(state.global_step, logs, self.show_kl), markup=False,
                                    soft_wrap=True)

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def _duration(seconds: float) -> str:
    """`45 s`, `3 min`, `1.5 h`: a rough duration for a forecast."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _any_process(flag: bool) -> bool:
    """Whether `flag` is set on any process of the run (every process must call it at the same point).

    A signal reaches only the machine it was sent on (Ctrl-C on one node of a multi-node run); without
    agreeing, that node would stop and save alone while the others wait for it in the next collective.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return flag
    import torch

    t = torch.tensor([1 if flag else 0], dtype=torch.int32)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


class GracefulStop(TrainerCallback):
    """First SIGINT/SIGTERM: save a checkpoint at the end of the current step and stop.

    A second SIGINT interrupts immediately (KeyboardInterrupt), as users expect from Ctrl-C.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.getsignal(sig)
            signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = signum

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
        if _any_process(self.received is not None):
            if self.received is None:  # another machine was told to stop: stop together, with one checkpoint
                self.received = signal.SIGTERM
            control.should_save = True
            control.should_training_stop = True
        return control

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.received).name if self.received is not None else ""


class OnFirstStep(TrainerCallback):
    """Call `action` once, when the first optimizer step of this run has completed (e.g. drop a replaced run)."""

    def __init__(self, action: Any) -> None:
        self.action = action
        self.done = False

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if not self.done:
            self.done = True
            self.action()
