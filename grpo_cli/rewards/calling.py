"""The one place outside TRL that calls a reward: keywords only, as TRL does, async rewards awaited.

check-rewards, evaluation and the parallel workers all go through `call_reward`, so a rule about calling
rewards (awaiting, time limits, result checks) is written once.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any


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
    """Call `func` with TRL's keyword arguments and return what it returned (awaited when async)."""
    result = func(**kwargs)
    return run_awaitable(result) if inspect.isawaitable(result) else result
