"""Bound and name an environment's own calls: its constructor, `reset` and `get_reward`.

TRL calls them itself (the constructor at trainer init and whenever a batch needs another instance,
`reset` once per rollout, `get_reward` once per finished rollout), lets whatever they raise end the run
with its own traceback, and waits forever for one that hangs. Unlike a tool call, whose failure the
model sees and learns from, none of these has anywhere to report to: a failure or a timeout stops the
run with one paragraph naming the environment, the method and the row it was reset with.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from typing import Any

from grpo_cli.errors import GrpoError, RewardTimeoutError
from grpo_cli.rewards import run_with_timeout

_ROW = "_grpo_row"  # set on an instance by reset: which row it is playing, for later messages
_FIX = ("Reproduce it without training: `grpo check-tools RECIPE` constructs each environment, resets it with "
        "the first row, calls every method and get_reward, and names what fails.")


class EnvironmentCallError(GrpoError):
    """An environment's constructor, reset or get_reward raised, exited or ran past environment.timeout."""


def row_hint(kwargs: dict[str, Any]) -> str:
    """' on the row whose prompt is ...' from reset's keyword arguments (the row's columns)."""
    prompt = kwargs.get("prompt")
    if isinstance(prompt, list) and prompt:
        last = prompt[-1]
        prompt = last.get("content") if isinstance(last, dict) else last
    if prompt is None:
        return ""
    return f" on the row whose prompt is {str(prompt)[:80]!r}"


def describe(exc: BaseException) -> str:
    """'raised ValueError: boom' or 'called sys.exit(3)'."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r})"
    return f"raised {type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"


def _failure(label: str, exc: BaseException, timeout: float | None, row: str, where: str,
             fix: str = _FIX) -> GrpoError:
    if isinstance(exc, EnvironmentCallError):
        return exc
    if isinstance(exc, RewardTimeoutError) and timeout is not None:  # not a TimeoutError the user's code raised
        return EnvironmentCallError(f"environment {label} did not return within environment.timeout "
                                    f"({timeout:g} s){row}", where="environment.timeout",
                                    fix="Make it faster or raise `environment.timeout` (seconds; null: no limit). "
                                        + _FIX)
    return EnvironmentCallError(f"environment {label} {describe(exc)}{row}", where=where, fix=fix)


def _check_result(label: str, method: str, value: Any, row: str, where: str) -> Any:
    """TRL appends what `reset` returns to the prompt (a string, content parts, or None) and sums what
    `get_reward` returns as a float: anything else dies inside TRL with its own traceback, so stop here."""
    if method == "reset" and not isinstance(value, str | list | type(None)):
        raise EnvironmentCallError(f"environment {label} returned {type(value).__name__} {str(value)[:80]!r}{row}; "
                                   "TRL appends what reset returns to the prompt, so it must be a string (or None)",
                                   where=where, fix="Return the observation text from reset (e.g. "
                                   "`return json.dumps(state)` for a dict). " + _FIX)
    numeric = value is None or (hasattr(value, "__float__") and not isinstance(value, str | bytes))
    if method == "get_reward" and not numeric:
        raise EnvironmentCallError(f"environment {label} returned {type(value).__name__} {str(value)[:80]!r}{row}; "
                                   "TRL adds it up as the rollout's reward, so it must be a number",
                                   where=where, fix="Return a float from get_reward (e.g. 1.0 for a solved task). "
                                   + _FIX)
    return value


def _remember(instance: Any, row: str) -> None:
    with contextlib.suppress(AttributeError, TypeError):  # __slots__ or a frozen class: messages name no row
        object.__setattr__(instance, _ROW, row)


def lifecycle_guard(func: Any, cls_name: str, method: str, timeout: float | None, where: str) -> Any:
    """`func` (a method of the user's class) bounded by `timeout`, failing with an EnvironmentCallError."""
    label = f"{cls_name}.{method}"

    def row_of(self: Any, kwargs: dict[str, Any]) -> str:
        if method == "reset":
            row = row_hint(kwargs)
            _remember(self, row)
            return row
        return str(getattr(self, _ROW, ""))

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def guarded_async(self: Any, *args: Any, **kwargs: Any) -> Any:
            row = row_of(self, kwargs)
            try:
                call = func(self, *args, **kwargs)
                if not timeout:
                    return _check_result(label, method, await call, row, where)
                task = asyncio.ensure_future(call)
                done, _ = await asyncio.wait({task}, timeout=timeout)
                if not done:
                    task.cancel()
                    raise RewardTimeoutError(f"{label} timed out")  # ours, not one the user's code raised
                return _check_result(label, method, task.result(), row, where)
            except (Exception, SystemExit) as exc:
                raise _failure(label, exc, timeout, row, where) from None

        return guarded_async

    @functools.wraps(func)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        row = row_of(self, kwargs)
        try:
            value = run_with_timeout(lambda: func(self, *args, **kwargs), timeout, label, "environment method")
            return _check_result(label, method, value, row, where)
        except (Exception, SystemExit) as exc:
            raise _failure(label, exc, timeout, row, where) from None

    return guarded


def lifecycle_overrides(cls: type, timeout: float | None, where: str) -> dict[str, Any]:
    """Guarded versions of the reset and get_reward that `cls` has (for a subclass of it)."""
    out: dict[str, Any] = {}
    for method in ("reset", "get_reward"):
        func = getattr(cls, method, None)
        if callable(func):
            out[method] = lifecycle_guard(func, cls.__name__, method, timeout, where)
    return out


def guarded_factory(cls: type, params: dict[str, Any], timeout: float | None, where: str) -> Any:
    """The zero-argument factory TRL calls for each new instance: `cls(**params)`, bounded and named."""
    label = f"{cls.__name__} (its constructor)"

    def factory() -> Any:
        try:
            return run_with_timeout(lambda: cls(**params), timeout, label, "environment")
        except (Exception, SystemExit) as exc:
            fix = ("Check environment.params against the class's __init__. " if isinstance(exc, TypeError)
                   else "") + _FIX
            raise _failure(label, exc, timeout, "", where, fix) from None

    factory.__name__ = f"new_{cls.__name__}"
    return factory
