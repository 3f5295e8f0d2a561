"""Score slow rewards (math-verify, code execution) in a process pool.

Each worker loads the reward itself from the recipe entry (functions from files are
not picklable by reference), then scores a contiguous chunk of the rows.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from grpo_cli.schema.rewards import RewardEntry

_WORKER_REWARD: Any = None


def _init_worker(entry_data: dict[str, Any], base_dir: str) -> None:
    global _WORKER_REWARD
    from grpo_cli.rewards.loaders import load_reward

    _WORKER_REWARD = load_reward(RewardEntry.model_validate(entry_data), Path(base_dir))


def _score_chunk(kwargs: dict[str, Any]) -> list[float | None]:
    import asyncio
    import inspect

    result = _WORKER_REWARD(**kwargs)
    if inspect.isawaitable(result):
        result = asyncio.run(result)
    return list(result)


class ParallelReward:
    """A reward that splits each call's rows across `workers` processes."""

    def __init__(self, entry: RewardEntry, base_dir: Path, workers: int) -> None:
        self.entry = entry
        self.base_dir = base_dir
        self.workers = workers
        self.__name__ = entry.label
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            ctx = multiprocessing.get_context("spawn")  # never fork a process holding torch threads
            self._pool = ProcessPoolExecutor(
                self.workers, mp_context=ctx, initializer=_init_worker,
                initargs=(self.entry.model_dump(), str(self.base_dir)),
            )
        return self._pool

    def __call__(self, **kwargs: Any) -> list[float | None]:
        n = len(kwargs["completions"])
        shared = {k: v for k, v in kwargs.items()
                  if not (isinstance(v, list) and len(v) == n) and not callable(v) and k != "trainer_state"}
        per_row = {k: v for k, v in kwargs.items() if isinstance(v, list) and len(v) == n}
        size = max(1, -(-n // self.workers))
        chunks = [{**shared, **{k: v[i:i + size] for k, v in per_row.items()}} for i in range(0, n, size)]
        out: list[float | None] = []
        for part in self._executor().map(_score_chunk, chunks):
            out.extend(part)
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_pool"] = None
        return state
