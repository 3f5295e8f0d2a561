"""Wrap a tool so that a slow call becomes a counted failure instead of a stalled run.

TRL catches a tool's exception and hands `{"error": ...}` to the model (counting it in
`tools/failure_frequency`), but it waits forever for a call that never returns. The wrapper
raises `ToolTimeout` after the recipe's `timeout`, binds the recipe's `params`, and keeps what
TRL and transformers read from a tool (name, docstring, signature, type hints) so the JSON
schema the model sees is the function's own, minus the bound params.

On the main thread (where TRL calls sync tools during training) the tool runs right there, so a
tool that times itself out with SIGALRM (`signal.alarm`, as TRL's own agent example does) works;
the timeout is then a watchdog thread that interrupts the main thread. Elsewhere (no signals
there anyway) the tool runs in a daemon thread that is given up on after the timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from grpo_cli.runs.manifest import ToolUse
from grpo_cli.tools.lifecycle import lifecycle_overrides


class ToolTimeout(TimeoutError):
    """A tool call ran past its timeout (the model sees this message as the tool's error)."""


class ToolExit(RuntimeError):
    """A tool called sys.exit(): a failed call the model sees, not the end of the run (or of check-tools)."""


def _exited(name: str, exc: SystemExit) -> ToolExit:
    return ToolExit(f"{name} called sys.exit({exc.code!r})")


@dataclass
class ToolStats:
    """Calls, failures, timeouts and time of one tool, summed over the run (thread-safe enough: GIL-atomic adds)."""

    calls: int = 0
    failures: int = 0
    timeouts: int = 0
    seconds: float = 0.0
    cut: int = 0
    """Results longer than the tool's max_result_chars, cut before they reached the model."""
    last_error: str = ""
    outputs: set[str] = field(default_factory=set, repr=False)

    def summary(self) -> ToolUse:
        """The manifest's record of this tool (`manifest.tools`, the report's Tools table)."""
        return ToolUse(calls=self.calls, failures=self.failures, timeouts=self.timeouts, results_cut=self.cut,
                       mean_seconds=round(self.seconds / self.calls, 6) if self.calls else None,
                       last_error=self.last_error or None)

    def record(self, started: float, error: BaseException | None, output: Any = None) -> None:
        self.calls += 1
        self.seconds += time.perf_counter() - started
        if error is not None:
            self.failures += 1
            self.timeouts += isinstance(error, ToolTimeout)
            self.last_error = f"{type(error).__name__}: {error}"[:200]
        elif len(self.outputs) < 3:  # enough to tell "always the same" from "varies"
            self.outputs.add(repr(output)[:200])


def stats_markdown(tools: dict[str, ToolUse] | None) -> list[str]:
    """The report's `## Tools` table from a manifest's `tools` entry ([] when the run had no tools)."""
    if not tools:
        return []
    lines = ["## Tools", "", "| tool | calls | failures | timeouts | mean ms | last error |",
             "|---|---:|---:|---:|---:|---|"]
    for name, t in tools.items():
        ms = f"{1000 * t.mean_seconds:.3g}" if t.mean_seconds is not None else "–"
        lines.append(f"| {name} | {t.calls} | {t.failures} | {t.timeouts} | {ms} | "
                     f"{(t.last_error or '–').replace('|', '/')} |")
    return [*lines, ""]


# The signal the watchdog interrupts the main thread with: not SIGALRM, which the tool itself may use.
_WATCHDOG_SIGNAL = getattr(signal, "SIGVTALRM", None) if hasattr(signal, "pthread_kill") else None


def _run_on_main_thread(func: Any, args: tuple, kwargs: dict, timeout: float, name: str) -> Any:
    """Call `func` here, on the main thread; a watchdog raises ToolTimeout in it after `timeout` seconds."""
    lock, state = threading.Lock(), {"done": False, "fired": False}
    main = threading.main_thread().ident or 0

    def interrupt() -> None:
        with lock:
            if not state["done"]:
                state["fired"] = True
                signal.pthread_kill(main, _WATCHDOG_SIGNAL)  # type: ignore[arg-type]  # a real signal: it interrupts a blocking call too

    def on_watchdog(signum: int, frame: Any) -> None:
        if state["fired"] and not state["done"]:
            raise ToolTimeout(f"{name} did not return within {timeout:g} s")

    previous = signal.signal(_WATCHDOG_SIGNAL, on_watchdog)  # type: ignore[arg-type]
    timer = threading.Timer(timeout, interrupt)
    timer.daemon = True
    timer.start()
    try:
        return func(*args, **kwargs)
    finally:
        with lock:
            state["done"] = True
        timer.cancel()
        signal.signal(_WATCHDOG_SIGNAL, previous)  # type: ignore[arg-type]


def _run_with_timeout(func: Any, args: tuple, kwargs: dict, timeout: float, name: str) -> Any:
    """Call `func` with a deadline: on the main thread itself (signals work there), else in a daemon thread
    that is given up on after `timeout` seconds (left to finish on its own)."""
    if _WATCHDOG_SIGNAL is not None and threading.current_thread() is threading.main_thread():
        return _run_on_main_thread(func, args, kwargs, timeout, name)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = func(*args, **kwargs)
        except BaseException as exc:  # handed back to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"tool-{name}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise ToolTimeout(f"{name} did not return within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def cap_result(result: Any, limit: int | None, name: str, stats: ToolStats) -> Any:
    """The result as TRL will put it in the context (its text), cut to `limit` characters with a note saying so.

    Lists (multimodal content blocks) pass unchanged: TRL hands them to the processor as they are.
    """
    if limit is None or isinstance(result, list):
        return result
    text = result if isinstance(result, str) else str(result)
    if len(text) <= limit:
        return result
    stats.cut += 1
    return text[:limit] + f"\n[... {name}'s result was cut at {limit:,} of {len(text):,} characters (max_result_chars)]"


def _visible_signature(func: Any, hidden: set[str]) -> inspect.Signature:
    sig = inspect.signature(func)
    return sig.replace(parameters=[p for n, p in sig.parameters.items() if n not in hidden])


@contextlib.contextmanager
def _recorded(stats: ToolStats, started: float, name: str) -> Iterator[None]:
    """A failed call counted in `stats` (sync and async tools alike); `sys.exit` in a tool becomes a ToolExit."""
    try:
        yield
    except SystemExit as exc:
        stats.record(started, exited := _exited(name, exc))
        raise exited from None
    except Exception as exc:
        stats.record(started, exc)
        raise


def guard(func: Any, *, name: str, params: dict[str, Any] | None = None, timeout: float | None = None,
          stats: ToolStats | None = None, max_chars: int | None = None) -> Any:
    """A plain function (sync or async like `func`) that TRL can call as the tool `name`.

    Works for methods too (`self` stays the first parameter), so an environment class can be
    rebuilt with guarded methods and still look like a class of functions to TRL.
    """
    bound = dict(params or {})
    stats = stats if stats is not None else ToolStats()

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def tool(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            with _recorded(stats, started, name):
                call = func(*args, **{**kwargs, **bound})
                try:
                    out = await (asyncio.wait_for(call, timeout) if timeout else call)
                except TimeoutError as exc:
                    raise exc if isinstance(exc, ToolTimeout) else ToolTimeout(
                        f"{name} did not return within {timeout:g} s") from None
            stats.record(started, None, out)
            return cap_result(out, max_chars, name, stats)
    else:

        @functools.wraps(func)
        def tool(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            with _recorded(stats, started, name):
                if timeout:
                    out = _run_with_timeout(func, args, {**kwargs, **bound}, timeout, name)
                else:
                    out = func(*args, **{**kwargs, **bound})
            stats.record(started, None, out)
            return cap_result(out, max_chars, name, stats)

    tool.__name__ = name
    tool.__signature__ = _visible_signature(func, set(bound))  # type: ignore[attr-defined]
    tool.__annotations__ = {k: v for k, v in getattr(func, "__annotations__", {}).items() if k not in bound}
    tool.tool_stats = stats  # type: ignore[attr-defined]
    return tool


def guarded_class(cls: type, *, timeout: float | None, stats: dict[str, ToolStats],
                  where: str = "environment.factory", max_chars: int | None = None) -> type:
    """A subclass of `cls` (same name) whose public methods are guarded tools, and whose `reset` and
    `get_reward` stop the run with a named error when they fail or time out (tools/lifecycle.py).

    TRL lists an environment's tools as the public functions of its class, so the guarded
    methods must be functions defined on the class: a subclass overriding each one is that.
    """
    overrides: dict[str, Any] = lifecycle_overrides(cls, timeout, where)
    for member, func in inspect.getmembers(cls, predicate=inspect.isfunction):
        if member.startswith("_") or member in ("reset", "get_reward"):
            continue
        stats.setdefault(member, ToolStats())
        overrides[member] = guard(func, name=member, timeout=timeout, stats=stats[member], max_chars=max_chars)
    overrides["__qualname__"] = cls.__qualname__
    overrides["__module__"] = cls.__module__
    overrides["__doc__"] = cls.__doc__
    return type(cls.__name__, (cls,), overrides)
