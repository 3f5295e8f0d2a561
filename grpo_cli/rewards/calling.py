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
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.lock = threading.Lock()
        self.done = False
        self.fired = False
        self.raised = False


_current: list[_Watch] = []  # the main thread's armed watches, innermost last
_previous_handler: Any = None
_installed = False


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
    watch = _Watch(seconds)
    main = threading.main_thread().ident

    def fire() -> None:
        with watch.lock:
            if not watch.done:
                watch.fired = True
                signal.pthread_kill(main, _SIGNAL)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    _current.append(watch)
    timer.start()
    try:
        return fn()
    except _Expired:
        raise _expired(label, seconds) from None
    finally:
        with watch.lock:
            watch.done = True
        timer.cancel()
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


@contextlib.contextmanager
def still_running(label: str, seconds: float | None, what: str = "reward") -> Iterator[None]:
    """While the body runs, a line on stderr after STILL_RUNNING_AFTER_S seconds and every minute after."""
    done = threading.Event()
    started = time.monotonic()

    def watch() -> None:
        wait = STILL_RUNNING_AFTER_S
        while not done.wait(wait):
            limit = f"it is stopped at {seconds:g} s (its `timeout`)" if seconds else "it has no timeout"
            print(f"{what} {label!r} is still running after {time.monotonic() - started:.0f} s; {limit}",
                  file=sys.stderr, flush=True)
            wait = 60.0

    threading.Thread(target=watch, daemon=True, name=f"watch {label}").start()
    try:
        yield
    finally:
        done.set()


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


def explain_in_training(label: str, where: str, what: str, kwargs: dict[str, Any],
                        error: type[GrpoError] = GrpoError) -> GrpoError:
    """The paragraph a training run stops with: which reward, what it did, at which step, on which prompt."""
    prompts = kwargs.get("prompts") or [""]
    first = str(prompts[0])[:80]
    state = kwargs.get("trainer_state")
    step = f" at step {state.global_step}" if getattr(state, "global_step", None) is not None else ""
    return error(f"reward {label!r} {what}{step}, scoring {len(kwargs.get('completions') or [])} completions "
                 f"(first prompt: {first!r})", where=where,
                 fix="Reproduce it without training: `grpo check-rewards RECIPE` calls every reward on probe "
                     "completions and names the failing row.")
