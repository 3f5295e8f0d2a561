"""The one place that calls a reward: keywords only, as TRL does, async rewards awaited, time limited, results checked.

TRL calls the recipe's reward objects (BoundReward, ParallelReward) itself during training; those objects,
check-rewards, evaluation and the parallel workers all run the user's function through this module, so a
rule about calling rewards (awaiting, the per-call `timeout`, the shape of the result) is written once.

The time limit: a sync reward in the main thread keeps running in that thread (math-verify's SIGALRM
timeouts and rewards that use signals keep working); a watchdog thread sends it a real-time signal when
the limit passes, whose handler raises an exception the reward cannot catch with `except Exception`. That
interrupts sleeps, socket reads, subprocess waits and pure-Python loops; C code that never releases the
GIL (a catastrophic regex) cannot be interrupted in-process: `parallel:` rewards run in processes that
are killed instead. Elsewhere (not the main thread) the reward runs in a helper thread that is abandoned
on timeout, and async rewards are cancelled with asyncio.wait_for.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from grpo_cli.errors import GrpoError, RewardTimeoutError

# Real-time signals are unused by Python libraries; SIGUSR2 where there are none (macOS).
_SIGNAL = int(getattr(signal, "SIGRTMIN", 0) + 1) if hasattr(signal, "SIGRTMIN") else int(signal.SIGUSR2)


class _Expired(BaseException):
    """Raised inside the reward when its time is up (a BaseException, so `except Exception` does not swallow it)."""


class _Watch:
    def __init__(self, seconds: float, thread_id: int) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.thread_id = thread_id
        self.done = False
        self.fired = False
        self.raised = False


_current: list[_Watch] = []  # the main thread's armed watches, innermost last
_previous_handler: Any = None
_installed = False


_IDLE_WAKE = 5.0  # seconds


class _Watchdog:
    """One thread for every timed call, instead of a timer thread started per call.

    Starting a thread per reward call cost milliseconds per training step on a busy machine (the
    caller waits until the new thread has run). Arming and disarming here only take a lock; the
    thread is woken only when a new deadline comes before the time it wakes anyway, so with one
    `timeout` for all rewards it sleeps through the calls and wakes every few seconds at most.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """A fresh lock and no thread: at start, and in a forked child (the lock may have been held at the fork)."""
        self.cond = threading.Condition(threading.Lock())
        self.watches: list[_Watch | _Notice] = []
        self.wake_at = math.inf  # the deadline the thread is sleeping toward
        self.pid = -1

    def arm(self, watch: _Watch | _Notice) -> None:
        with self.cond:
            if self.pid != os.getpid():  # first use, or a forked child (which has no copy of the thread)
                self.pid, self.watches, self.wake_at = os.getpid(), [], math.inf
                threading.Thread(target=self._run, daemon=True, name="grpo reward timeouts").start()
            self.watches.append(watch)
            if watch.deadline < self.wake_at:
                self.wake_at = watch.deadline
                self.cond.notify()

    def disarm(self, watch: _Watch | _Notice) -> None:
        """After this returns the watch never fires (a signal it already sent may still be on its way)."""
        with self.cond:
            if isinstance(watch, _Watch):
                watch.done = True
            if watch in self.watches:
                self.watches.remove(watch)

    def _run(self) -> None:
        pid = os.getpid()
        with self.cond:
            while self.pid == pid:
                now = time.monotonic()
                for watch in [w for w in self.watches if w.deadline <= now]:
                    if isinstance(watch, _Notice):
                        watch.say()  # stays armed: it speaks again in a minute
                        continue
                    self.watches.remove(watch)
                    watch.fired = True
                    signal.pthread_kill(watch.thread_id, _SIGNAL)
                # Idle, it still wakes now and then, so that arming a call with a later deadline never has to.
                self.wake_at = min((w.deadline for w in self.watches), default=now + _IDLE_WAKE)
                self.cond.wait(self.wake_at - now)


_watchdog = _Watchdog()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_watchdog.reset)


def _on_signal(signum: int, frame: Any) -> None:
    watch = _current[-1] if _current else None
    if watch is not None and watch.fired and not watch.raised:
        watch.raised = True
        raise _Expired()
    if callable(_previous_handler):
        _previous_handler(signum, frame)


def _install() -> None:
    global _installed, _previous_handler
    if not _installed:
        _previous_handler = signal.signal(_SIGNAL, _on_signal)
        _installed = True


def timeout_message(label: str, seconds: float) -> str:
    return f"reward {label!r} did not return within its timeout of {seconds:g} s"


def _expired(label: str, seconds: float) -> RewardTimeoutError:
    error = RewardTimeoutError(timeout_message(label, seconds),
                               fix="Make it faster, raise this reward's `timeout:` (seconds per call; default "
                                   "600), or give it `parallel: N` processes; `grpo check-rewards` times each call.")
    error.label, error.seconds = label, seconds
    return error


def _in_main_thread(fn: Callable[[], Any], seconds: float, label: str) -> Any:
    _install()
    watch = _Watch(seconds, threading.main_thread().ident or 0)
    _current.append(watch)
    _watchdog.arm(watch)
    try:
        return fn()
    except _Expired:
        raise _expired(label, seconds) from None
    finally:
        watch.raised = True  # from here on, a signal sent just before the disarm is ignored
        _watchdog.disarm(watch)
        _current.remove(watch)


def _in_helper_thread(fn: Callable[[], Any], seconds: float, label: str) -> Any:
    box: dict[str, Any] = {}

    def runner() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=runner, daemon=True, name=f"reward {label}")
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise _expired(label, seconds)  # the helper thread is abandoned; it dies with the process
    if "error" in box:
        raise box["error"]
    return box["value"]


STILL_RUNNING_AFTER_S = 10.0
"""A call running this long says so on stderr (which reward, how long, when it will be stopped), then every
minute: a reward stuck up to its 600 s default is not ten silent minutes."""


class _Notice:
    """A call to announce on stderr while it runs: first after STILL_RUNNING_AFTER_S, then every minute."""

    def __init__(self, label: str, seconds: float | None, what: str) -> None:
        self.label, self.seconds, self.what = label, seconds, what
        self.started = time.monotonic()
        self.deadline = self.started + STILL_RUNNING_AFTER_S

    def say(self) -> None:
        limit = f"it is stopped at {self.seconds:g} s (its `timeout`)" if self.seconds else "it has no timeout"
        print(f"{self.what} {self.label!r} is still running after {time.monotonic() - self.started:.0f} s; {limit}",
              file=sys.stderr, flush=True)
        self.deadline = time.monotonic() + 60.0


@contextlib.contextmanager
def still_running(label: str, seconds: float | None, what: str = "reward") -> Iterator[None]:
    """While the body runs, a line on stderr after STILL_RUNNING_AFTER_S seconds and every minute after.

    The watchdog thread that enforces timeouts says it, so a call costs no thread of its own.
    """
    notice = _Notice(label, seconds, what)
    _watchdog.arm(notice)
    try:
        yield
    finally:
        _watchdog.disarm(notice)


def run_with_timeout(fn: Callable[[], Any], seconds: float | None, label: str, what: str = "reward") -> Any:
    """fn(), stopped with RewardTimeoutError naming `label` when it runs longer than `seconds` (None: no limit).

    A call that runs long says so while it runs (`still_running`; `what` names the kind of code in that line).
    """
    with still_running(label, seconds, what):
        if seconds is None:
            return fn()
        if threading.current_thread() is threading.main_thread() and hasattr(signal, "pthread_kill"):
            return _in_main_thread(fn, seconds, label)
        return _in_helper_thread(fn, seconds, label)


async def await_with_timeout(awaitable: Awaitable[Any], seconds: float | None, label: str) -> Any:
    """The awaited result, or RewardTimeoutError naming `label` after `seconds` (the coroutine is cancelled)."""
    with still_running(label, seconds):
        if seconds is None:
            return await awaitable
        try:
            return await asyncio.wait_for(awaitable, seconds)
        except TimeoutError:
            raise _expired(label, seconds) from None


def run_awaitable(result: Any) -> Any:
    """Run a coroutine to completion, also when the caller already runs an event loop (notebooks)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(result)
    box: dict[str, Any] = {}

    def runner() -> None:
        try:
            box["value"] = asyncio.run(result)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=runner)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def call_reward(func: Any, **kwargs: Any) -> Any:
    """Call `func` with TRL's keyword arguments and return what it returned (awaited when async).

    Recipe rewards (BoundReward, ParallelReward) enforce their own `timeout` inside this call.
    """
    result = func(**kwargs)
    return run_awaitable(result) if inspect.isawaitable(result) else result


# ---------------------------------------------------------------------------- TRL's contract on the result


def result_problem(result: Any, n: int) -> str:
    """What is wrong with the shape of a reward's result for n completions ('' when it is a sequence of n)."""
    if result is None or isinstance(result, str | bytes | dict) or not hasattr(result, "__len__"):
        return f"returned {type(result).__name__}, not a list of floats"
    if len(result) != n:
        return f"returned {len(result)} values for {n} completions"
    return ""


def value_problem(value: Any) -> tuple[float | None, str]:
    """The value as TRL will use it, or the contract it breaks: 'type' (not a number), 'nan' or 'inf'."""
    if value is None:
        return None, ""
    if isinstance(value, str | bytes):  # float("1.0") works, torch.tensor(["1.0"]) does not
        return None, "type"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None, "type"
    if math.isnan(number):
        return None, "nan"
    if math.isinf(number):
        return None, "inf"
    return number, ""


def training_problem(result: Any, n: int) -> str:
    """What TRL would crash on in a result during training: its shape, or a value that is not a number or None."""
    problem = result_problem(result, n)
    if problem:
        return problem
    for i, value in enumerate(result):
        if value_problem(value)[1] == "type":
            return f"returned {value!r} (a {type(value).__name__}) for completion {i}, not a number or None"
    return ""


def locate(exc: GrpoError, where: str) -> GrpoError:
    """A built-in's error names its own param as `rewards (code).params.KEY`, not knowing its place in the recipe;
    the trainer's wrapper does (`rewards[1]`): put it there, so the paragraph names the key to change."""
    for problem in exc.problems:
        if where and problem.where.startswith("rewards ("):
            problem.where = where + problem.where.partition(")")[2]
    if where:
        exc.args = (exc.render(),)
    return exc


def explain_in_training(label: str, where: str, what: str, kwargs: dict[str, Any],
                        error: type[GrpoError] = GrpoError) -> GrpoError:
    """The paragraph a training run stops with: which reward, what it did, at which step, on which prompt."""
    prompts = kwargs.get("prompts") or [""]
    first = str(prompts[0])[:80]
    state = kwargs.get("trainer_state")
    global_step = getattr(state, "global_step", None)
    step = f" at step {global_step}" if global_step is not None else ""
    return error(f"reward {label!r} {what}{step}, scoring {len(kwargs.get('completions') or [])} completions "
                 f"(first prompt: {first!r})", where=where,
                 fix="Reproduce it without training: `grpo check-rewards RECIPE` calls every reward on probe "
                     "completions and names the failing row.")
